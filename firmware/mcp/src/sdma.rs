//! SDMA: host descriptors -> send tokens -> streams and connections; the
//! rotation that picks the next packet (GM: a circular queue of
//! connections, each a circular queue of streams; one packet per turn,
//! then rotate); host-DMA of that packet's payload into a transmit buffer;
//! and the sending half of reliability (acks, nacks, go-back-N rewinds,
//! retransmission and send timeouts).

use crate::hw::Hw;
use crate::pool::NIL;
use crate::state::*;
use crate::trace::SdmaState;
use crate::{Mcp, Work, CONTROL_RESERVE};
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::{ErrorCause, SendStatus};
use nic_abi::map;
use nic_abi::packet::{flags, Header, NackCode, PacketType, HEADER_LEN};
use nic_abi::page_table::{self, page_pieces, Pte};
use nic_abi::port::{port_reg, send_slot, SEND_CONS, SEND_PROD};
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::{class_max_len, Priority, MAX_SIZE_CLASS, NUM_PORTS, PAGE_SIZE};

/// Descriptors taken per pass, all ports together.
const INTAKE_BUDGET: u32 = 8;

impl Mcp {
    // ----------------------------------------------------------------
    // Translation

    /// Bus address of `vaddr` in `port`'s page table.
    pub(crate) fn translate(&self, hw: &impl Hw, port: u8, vaddr: u64) -> Option<u64> {
        let base = map::page_table(port as usize);
        let read = |i: u32| {
            let mut b = [0u8; page_table::PTE_SIZE as usize];
            hw.read(base + i * page_table::PTE_SIZE, &mut b);
            Pte::decode(&b)
        };
        let page = page_table::lookup(read, vaddr / PAGE_SIZE)?;
        Some(page.checked_mul(PAGE_SIZE)? + vaddr % PAGE_SIZE)
    }

    /// Is every byte of `[vaddr, vaddr+len)` registered by `port`?
    pub(crate) fn registered(&self, hw: &impl Hw, port: u8, vaddr: u64, len: u64) -> bool {
        if vaddr.checked_add(len).is_none() {
            return false;
        }
        page_pieces(vaddr, len).all(|(v, _)| self.translate(hw, port, v).is_some())
    }

    // ----------------------------------------------------------------
    // Intake

    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn sdma_intake(&mut self, hw: &mut impl Hw, w: &mut Work) {
        let mut budget = INTAKE_BUDGET;
        for k in 0..NUM_PORTS {
            let p = (self.port_rr as usize + k) % NUM_PORTS;
            while budget > 0 && self.ports[p].open && self.intake_one(hw, p, w) {
                budget -= 1;
            }
        }
        self.port_rr = ((self.port_rr as usize + 1) % NUM_PORTS) as u8;
        if self.sdma_state == SdmaState::Intake {
            self.set_sdma(hw, SdmaState::Idle, 0);
        }
    }

    /// Take one descriptor from port `p`'s ring. False: nothing to take, or
    /// not now (no token or stream free: the descriptor stays in the ring).
    fn intake_one(&mut self, hw: &mut impl Hw, p: usize, w: &mut Work) -> bool {
        let prod = hw.load_u32(port_reg(p, SEND_PROD));
        let cons = self.ports[p].cons;
        if prod == cons {
            return false;
        }
        let mut b = [0u8; nic_abi::desc::DESC_SIZE as usize];
        hw.read(send_slot(p, cons), &mut b);
        let parsed = Descriptor::decode(&b);
        let kind_byte = Descriptor::raw_kind(&b);
        let is_provide = kind_byte == DescKind::Provide as u8;
        let takes_send = match &parsed {
            Ok(d) => d.kind.uses_send_token(),
            // A broken descriptor of a known kind takes that kind's token; a
            // kind byte that names no kind takes a send token.
            Err(_) => DescKind::from_u8(kind_byte).is_none_or(|k| k.uses_send_token()),
        };
        // Resources first: a descriptor is only taken when whatever it (or
        // its error event) needs is there.
        if is_provide {
            if self.slots.available() == 0 || self.ports[p].recv_tokens >= self.cfg.recv_tokens {
                return false;
            }
        } else if self.tokens.available() <= INTERNAL_TOKENS
            || (takes_send && self.ports[p].send_tokens >= self.cfg.send_tokens)
        {
            return false;
        }
        self.set_sdma(hw, SdmaState::Intake, p as u32);
        w.descriptors += 1;
        self.ports[p].cons = cons.wrapping_add(1);
        hw.store_u32(port_reg(p, SEND_CONS), self.ports[p].cons);

        let result = parsed.and_then(|d| self.validate(hw, p as u8, &d).map(|_| d));
        match result {
            Ok(d) => self.accept_descriptor(p, &d),
            Err(cause) => {
                self.bump(nic_abi::stats::Stat::Errors, 1);
                let tag = Descriptor::raw_tag(&b);
                if is_provide {
                    let mut s = RecvSlot::EMPTY;
                    s.port = p as u8;
                    s.tag = tag;
                    s.error = cause as u8;
                    if let Some(i) = self.slots.alloc(s) {
                        self.ports[p].recv_tokens += 1;
                        self.owe_event(p, EvRef::Slot(i));
                    }
                } else {
                    let mut t = SendToken::EMPTY;
                    t.kind = TokKind::Error;
                    t.state = TokState::Completing(cause as u8);
                    t.port = p as u8;
                    t.tag = tag;
                    t.desc_kind = kind_byte;
                    if let Some(i) = self.tokens.alloc(t) {
                        if takes_send {
                            self.ports[p].send_tokens += 1;
                        }
                        self.owe_event(p, EvRef::Token(i));
                    }
                }
            }
        }
        true
    }

    fn validate(&self, hw: &impl Hw, p: u8, d: &Descriptor) -> Result<(), ErrorCause> {
        let target = || {
            if d.target_port as usize >= NUM_PORTS {
                Err(ErrorCause::BadPort)
            } else if d.target_node >= self.cfg.nodes {
                Err(ErrorCause::BadNode)
            } else {
                Ok(())
            }
        };
        match d.kind {
            DescKind::Send => {
                target()?;
                self.stream_room(p, d)?;
                if d.size_class > MAX_SIZE_CLASS {
                    return Err(ErrorCause::BadSizeClass);
                }
                if d.len as u64 > class_max_len(d.size_class) {
                    return Err(ErrorCause::BadLength);
                }
                if !self.registered(hw, p, d.local, d.len as u64) {
                    return Err(ErrorCause::NotRegistered);
                }
            }
            DescKind::Put | DescKind::Get => {
                target()?;
                self.stream_room(p, d)?;
                if d.len as u64 > class_max_len(MAX_SIZE_CLASS) {
                    return Err(ErrorCause::BadLength);
                }
                if !self.registered(hw, p, d.local, d.len as u64) {
                    return Err(ErrorCause::NotRegistered);
                }
            }
            DescKind::Provide => {
                if d.size_class > MAX_SIZE_CLASS {
                    return Err(ErrorCause::BadSizeClass);
                }
                let need = class_max_len(d.size_class);
                if (d.len as u64) < need {
                    return Err(ErrorCause::BadLength);
                }
                if !self.registered(hw, p, d.local, need) {
                    return Err(ErrorCause::NotRegistered);
                }
            }
            DescKind::Resume => target()?,
            DescKind::Alarm => {}
        }
        Ok(())
    }

    /// Is there a stream for this send, or room for one?
    fn stream_room(&self, p: u8, d: &Descriptor) -> Result<(), ErrorCause> {
        let key = stream_key(d.target_node, p, d.target_port, d.priority);
        let exists = self.tx_index.contains_key(&key);
        let conn_ok = self.conn_index.contains_key(&d.target_node)
            || (self.conns.available() > 0 && self.conn_index.len() < self.conn_index.capacity());
        let room = self.txs.available() > 0 && self.tx_index.len() < self.tx_index.capacity();
        if exists || (room && conn_ok) {
            Ok(())
        } else {
            Err(ErrorCause::TooManyStreams)
        }
    }

    fn accept_descriptor(&mut self, p: usize, d: &Descriptor) {
        match d.kind {
            DescKind::Send | DescKind::Put | DescKind::Get => {
                let kind = match d.kind {
                    DescKind::Send => TokKind::Send,
                    DescKind::Put => TokKind::Put,
                    _ => TokKind::Get,
                };
                let mut t = SendToken::EMPTY;
                t.kind = kind;
                t.port = p as u8;
                t.prio = d.priority;
                t.target_node = d.target_node;
                t.target_port = d.target_port;
                t.size_class = d.size_class;
                t.local = d.local;
                t.len = d.len;
                t.remote = d.remote;
                t.tag = d.tag;
                t.desc_kind = d.kind as u8;
                t.npkts = self.packets_for(kind, d.len);
                let Some(s) =
                    self.find_or_make_tx(d.target_node, p as u8, d.target_port, d.priority)
                else {
                    return; // checked before the descriptor was taken
                };
                let Some(i) = self.tokens.alloc(t) else { return };
                self.ports[p].send_tokens += 1;
                if kind == TokKind::Get {
                    self.tokens[i].cookie = i as u32;
                }
                if self.txs[s].suspended {
                    self.complete_token(i, SendStatus::Dropped);
                } else {
                    self.append_token(s, i);
                }
            }
            DescKind::Provide => {
                let mut s = RecvSlot::EMPTY;
                s.port = p as u8;
                s.prio = d.priority;
                s.size_class = d.size_class;
                s.vaddr = d.local;
                s.len = d.len;
                s.tag = d.tag;
                if let Some(i) = self.slots.alloc(s) {
                    self.ports[p].recv_tokens += 1;
                    let ps = &mut self.ports[p];
                    if ps.slots_tail == NIL {
                        ps.slots_head = i;
                    } else {
                        let t = ps.slots_tail;
                        self.slots[t].next = i;
                    }
                    self.ports[p].slots_tail = i;
                }
            }
            DescKind::Resume => {
                let key = stream_key(d.target_node, p as u8, d.target_port, d.priority);
                if let Some(&s) = self.tx_index.get(&key) {
                    self.txs[s].suspended = false;
                    self.txs[s].nobuf_since = 0;
                }
            }
            DescKind::Alarm => {
                self.ports[p].alarm_at = Some(self.now.saturating_add(d.remote));
                self.ports[p].alarm_tag = d.tag;
            }
        }
    }

    pub(crate) fn packets_for(&self, kind: TokKind, len: u32) -> u32 {
        if kind == TokKind::Get || len == 0 {
            1
        } else {
            len.div_ceil(self.cfg.mtu)
        }
    }

    // ----------------------------------------------------------------
    // Streams and connections

    pub(crate) fn find_or_make_tx(
        &mut self,
        node: u16,
        lport: u8,
        rport: u8,
        prio: Priority,
    ) -> Option<u16> {
        let key = stream_key(node, lport, rport, prio);
        if let Some(&s) = self.tx_index.get(&key) {
            return Some(s);
        }
        let c = match self.conn_index.get(&node) {
            Some(&c) => c,
            None => {
                let mut c = Conn::EMPTY;
                c.node = node;
                let i = self.conns.alloc(c)?;
                if self.conn_index.insert(node, i).is_err() {
                    self.conns.free(i);
                    return None;
                }
                i
            }
        };
        let mut st = TxStream::EMPTY;
        st.key = key;
        st.remote_node = node;
        st.local_port = lport;
        st.remote_port = rport;
        st.prio = prio;
        st.conn = c;
        st.order = self.streams_made;
        let s = self.txs.alloc(st)?;
        if self.tx_index.insert(key, s).is_err() {
            self.txs.free(s);
            return None;
        }
        self.streams_made = self.streams_made.wrapping_add(1);
        // Its flow, if the table has any (rate control unused: no search).
        self.flow_pending |= self.flow_entries > 0;
        Some(s)
    }

    pub(crate) fn append_token(&mut self, s: u16, t: u16) {
        self.tokens[t].stream = s;
        self.tokens[t].next = NIL;
        let st = &mut self.txs[s];
        if st.tail == NIL {
            st.head = t;
            st.base = st.next_seq;
        } else {
            let tail = st.tail;
            self.tokens[tail].next = t;
        }
        let st = &mut self.txs[s];
        st.tail = t;
        if st.cursor == NIL {
            // The first sendable token of the flow: NDT = max(NDT, RTC).
            st.cursor = t;
            st.pace.wake(self.now);
        }
        self.ring_insert(s);
    }

    /// Put stream `s` on its connection's ring, and the connection on the
    /// connection queue.
    pub(crate) fn ring_insert(&mut self, s: u16) {
        if self.txs[s].in_ring {
            return;
        }
        let c = self.txs[s].conn;
        let head = self.conns[c].ring;
        if head == NIL {
            self.txs[s].ring_next = s;
            self.txs[s].ring_prev = s;
            self.conns[c].ring = s;
        } else {
            let tail = self.txs[head].ring_prev;
            self.txs[s].ring_next = head;
            self.txs[s].ring_prev = tail;
            self.txs[tail].ring_next = s;
            self.txs[head].ring_prev = s;
        }
        self.txs[s].in_ring = true;
        self.conns[c].ring_len += 1;
        if !self.conns[c].in_queue {
            if self.conn_cur == NIL {
                self.conns[c].next = c;
                self.conns[c].prev = c;
                self.conn_cur = c;
            } else {
                let head = self.conn_cur;
                let tail = self.conns[head].prev;
                self.conns[c].next = head;
                self.conns[c].prev = tail;
                self.conns[tail].next = c;
                self.conns[head].prev = c;
            }
            self.conns[c].in_queue = true;
            self.conn_queue_len += 1;
        }
    }

    fn ring_remove(&mut self, s: u16) {
        if !self.txs[s].in_ring {
            return;
        }
        let c = self.txs[s].conn;
        let (n, p) = (self.txs[s].ring_next, self.txs[s].ring_prev);
        if n == s {
            self.conns[c].ring = NIL;
        } else {
            self.txs[p].ring_next = n;
            self.txs[n].ring_prev = p;
            if self.conns[c].ring == s {
                self.conns[c].ring = n;
            }
        }
        self.txs[s].in_ring = false;
        self.conns[c].ring_len -= 1;
        if self.conns[c].ring == NIL && self.conns[c].in_queue {
            let (n, p) = (self.conns[c].next, self.conns[c].prev);
            if n == c {
                self.conn_cur = NIL;
            } else {
                self.conns[p].next = n;
                self.conns[n].prev = p;
                if self.conn_cur == c {
                    self.conn_cur = n;
                }
            }
            self.conns[c].in_queue = false;
            self.conn_queue_len -= 1;
        }
    }

    fn sendable(&self, s: u16) -> bool {
        let st = &self.txs[s];
        st.cursor != NIL
            && !st.suspended
            && st.outstanding() < self.cfg.window
            && st.hold_until <= self.now
    }

    /// GM rotation: the first sendable stream, starting at the current
    /// connection's current stream; afterwards both queues move on one, so
    /// each connection, and each stream within it, gets one packet a turn.
    fn pick_stream(&mut self, w: &mut Work) -> Option<u16> {
        if self.regulated > 0 {
            return self.pick_by_ndt(w);
        }
        let mut c = self.conn_cur;
        let mut conns_left = self.conn_queue_len;
        while conns_left > 0 && c != NIL {
            conns_left -= 1;
            let next_c = self.conns[c].next;
            let mut s = self.conns[c].ring;
            let mut left = self.conns[c].ring_len;
            while left > 0 && s != NIL {
                left -= 1;
                let next_s = self.txs[s].ring_next;
                if self.txs[s].cursor == NIL || self.txs[s].suspended {
                    // Nothing to send: off the ring until a token or a rewind.
                    self.ring_remove(s);
                } else if self.sendable(s) {
                    if self.txs[s].in_ring && self.conns[c].ring != NIL {
                        self.conns[c].ring = self.txs[s].ring_next;
                    }
                    if self.conns[c].in_queue {
                        self.conn_cur = self.conns[c].next;
                    }
                    return Some(s);
                }
                s = next_s;
            }
            c = if self.conns[c].in_queue { self.conns[c].next } else { next_c };
        }
        None
    }

    /// Rate control: the sendable stream with the smallest NDT, if it is
    /// due; otherwise remember when it will be.
    fn pick_by_ndt(&mut self, w: &mut Work) -> Option<u16> {
        let mut dead: heapless::Vec<u16, MAX_STREAMS> = heapless::Vec::new();
        let mut cands: heapless::Vec<(u16, u64, u32), MAX_STREAMS> = heapless::Vec::new();
        let mut c = self.conn_cur;
        for _ in 0..self.conn_queue_len {
            if c == NIL {
                break;
            }
            let mut s = self.conns[c].ring;
            for _ in 0..self.conns[c].ring_len {
                let st = &self.txs[s];
                if st.cursor == NIL || st.suspended {
                    let _ = dead.push(s);
                } else if self.sendable(s) {
                    let _ = cands.push((s, st.pace.ndt, st.order));
                }
                w.flow_ops += 1;
                s = self.txs[s].ring_next;
            }
            c = self.conns[c].next;
        }
        for s in dead {
            self.ring_remove(s);
        }
        match crate::rate::choose(self.now, cands.into_iter()) {
            crate::rate::Choice::Dispatch(s) => Some(s),
            crate::rate::Choice::WaitUntil(t) => {
                self.rate_wait = Some(t);
                None
            }
            crate::rate::Choice::Idle => None,
        }
    }

    /// Read the IDT of every stream's flow from the flow table (at start,
    /// for new streams, and when the host bumps FLOW_GEN).
    pub(crate) fn reload_flows(&mut self, hw: &impl Hw, w: &mut Work) {
        self.flow_pending = false;
        w.flow_ops += map::FLOW_ENTRIES;
        let mut keys: [u32; map::FLOW_ENTRIES as usize] = [0; map::FLOW_ENTRIES as usize];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = hw.load_u32(map::flow_entry(i as u32) + nic_abi::flows::KEY);
        }
        self.flow_entries =
            keys.iter().filter(|&&k| k & nic_abi::flows::FLOW_VALID != 0).count() as u16;
        let mut regulated = 0;
        let live: heapless::Vec<u16, MAX_STREAMS> = self.txs.live_indices().collect();
        for s in live {
            let want = self.txs[s].key | nic_abi::flows::FLOW_VALID;
            let flow = keys.iter().position(|&k| k == want);
            let idt = match flow {
                Some(i) => {
                    w.flow_ops += 1;
                    hw.load_u32(map::flow_entry(i as u32) + nic_abi::flows::IDT) as u64
                }
                None => 0,
            };
            let now = self.now;
            let st = &mut self.txs[s];
            st.flow = flow.map_or(NIL, |i| i as u16);
            if idt != st.pace.idt {
                // A new rate starts now: an NDT left behind while the flow
                // ran at its old rate (or unregulated) gives no credit.
                st.pace.idt = idt;
                st.pace.wake(now);
            }
            if st.pace.idt > 0 {
                regulated += 1;
            }
        }
        self.regulated = regulated;
    }

    /// Account one dispatched packet of stream `s` (NDT, flow counters,
    /// dispatch trace).
    fn dispatched(&mut self, hw: &mut impl Hw, s: u16, bytes: u32, w: &mut Work) {
        let st = &mut self.txs[s];
        st.pace.dispatched();
        if st.flow != NIL {
            // NDT, and the packet and byte counters (read, add, write).
            w.flow_ops += 5;
            let e = map::flow_entry(st.flow as u32);
            hw.store_u64(e + nic_abi::flows::NDT, st.pace.ndt);
            let p = hw.load_u64(e + nic_abi::flows::PACKETS);
            hw.store_u64(e + nic_abi::flows::PACKETS, p.wrapping_add(1));
            let b = hw.load_u64(e + nic_abi::flows::BYTES);
            hw.store_u64(e + nic_abi::flows::BYTES, b.wrapping_add(bytes as u64));
        }
        if self.dispatch_trace {
            let rec = nic_abi::flows::DispatchRecord { rtc: self.now, key: self.txs[s].key, bytes };
            let mut b = [0u8; nic_abi::flows::DISPATCH_RECORD_SIZE as usize];
            rec.encode(&mut b);
            let off = map::DISPATCH_TRACE
                + (self.dispatch_prod % map::DISPATCH_TRACE_LEN)
                    * nic_abi::flows::DISPATCH_RECORD_SIZE;
            hw.write(off, &b);
            self.dispatch_prod = self.dispatch_prod.wrapping_add(1);
            hw.set_reg32(nic_abi::regs::DISPATCH_TRACE_PROD, self.dispatch_prod);
        }
    }

    // ----------------------------------------------------------------
    // Filling transmit buffers

    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn sdma_fill(&mut self, hw: &mut impl Hw, w: &mut Work) {
        if self.flow_pending {
            self.reload_flows(hw, w);
        }
        self.rate_wait = None;
        loop {
            if self.data_bufs_busy >= map::TX_BUF_COUNT - CONTROL_RESERVE {
                break;
            }
            if self.hdma_space() < 2 {
                break;
            }
            // Acks and nacks may hold buffers too: look before choosing.
            let Some(b) = self.free_txbuf() else { break };
            self.set_sdma(hw, SdmaState::Schedule, 0);
            let Some(s) = self.pick_stream(w) else { break };
            self.fill_packet(hw, s, b, w);
            if self.txs.is_live(s) {
                let bytes = self.txbufs[b as usize].len.saturating_sub(HEADER_LEN as u32);
                self.dispatched(hw, s, bytes, w);
            }
        }
        self.set_sdma(hw, SdmaState::Idle, 0);
    }

    fn free_txbuf(&self) -> Option<u8> {
        self.txbufs.iter().position(|b| b.state == TxBufState::Free).map(|i| i as u8)
    }

    /// Write the route to `node` in front of transmit buffer `b`'s header.
    /// Returns the route's length.
    pub(crate) fn write_route(&self, hw: &mut impl Hw, b: u8, node: u16) -> u8 {
        let mut e = [0u8; map::ROUTE_ENTRY as usize];
        hw.read(map::route_entry(node as usize), &mut e);
        let len = (e[0] as usize).min(map::ROUTE_MAX);
        let at = map::tx_buf(b as u32) + map::ROUTE_ROOM - len as u32;
        hw.write(at, &e[1..1 + len]);
        len as u8
    }

    fn fill_packet(&mut self, hw: &mut impl Hw, s: u16, b: u8, w: &mut Work) {
        let st = self.txs[s];
        let t = st.cursor;
        let tok = self.tokens[t];
        let pkt = tok.next_pkt;
        if pkt == 0 {
            self.tokens[t].first_seq = st.next_seq;
            if st.sync_next {
                self.tokens[t].sync = true;
                self.txs[s].sync_next = false;
            }
        }
        let tok = self.tokens[t];
        let seq = st.next_seq;
        let mtu = self.cfg.mtu;
        let (off, plen) = if tok.kind == TokKind::Get {
            (0, 0)
        } else {
            let off = pkt * mtu;
            (off, tok.len.saturating_sub(off).min(mtu))
        };
        self.set_sdma(hw, SdmaState::Fill, seq);
        let route_len = self.write_route(hw, b, tok.target_node);
        let ptype = match tok.kind {
            TokKind::Send => PacketType::Data,
            TokKind::Put => PacketType::Put,
            TokKind::Get => PacketType::GetReq,
            _ => PacketType::GetResp,
        };
        let mut fl = 0;
        if pkt == 0 {
            fl |= flags::FIRST;
            if tok.sync {
                fl |= flags::SYNC;
            }
        }
        if pkt + 1 >= tok.npkts {
            fl |= flags::LAST;
        }
        let h = Header {
            ptype,
            flags: fl,
            priority: tok.prio,
            nack_code: 0,
            src_node: self.cfg.node,
            dst_node: tok.target_node,
            src_port: tok.port,
            dst_port: tok.target_port,
            size_class: tok.size_class,
            seq,
            ack: 0,
            msg_len: tok.len,
            offset: off,
            payload_len: plen as u16,
            remote: if matches!(tok.kind, TokKind::Put | TokKind::Get) { tok.remote } else { 0 },
            cookie: tok.cookie,
            sync_boot: if tok.sync { self.boot } else { 0 },
            sync_gen: if tok.sync { st.sync_gen } else { 0 },
            crc: 0,
        };
        let mut hb = [0u8; HEADER_LEN];
        h.encode(&mut hb);
        let hdr_at = map::tx_buf(b as u32) + map::ROUTE_ROOM;
        hw.write(hdr_at, &hb);

        // Payload: one host-DMA command per page piece.
        let mut pieces: heapless::Vec<(u64, u32, u32), 4> = heapless::Vec::new();
        let mut ok = true;
        let mut at = 0u32;
        for (v, n) in page_pieces(tok.local.wrapping_add(off as u64), plen as u64) {
            match self.translate(hw, tok.port, v) {
                Some(bus) if pieces.push((bus, n as u32, at)).is_ok() => {}
                _ => ok = false,
            }
            at += n as u32;
        }
        if !ok {
            // The memory was deregistered under a queued send.
            self.bump(Stat::Errors, 1);
            self.abandon_stream(s, Some(SendStatus::Dropped));
            return;
        }
        self.txbufs[b as usize] = TxBuf {
            state: TxBufState::Filling,
            stream: s,
            epoch: st.epoch,
            route_len,
            len: (HEADER_LEN as u32) + plen,
            control: false,
            seq,
        };
        self.data_bufs_busy += 1;
        let n = pieces.len();
        if n == 0 {
            self.txbufs[b as usize].state = TxBufState::Filled;
            let _ = self.tx_ready.push_back(b);
        }
        for (k, (bus, len, at)) in pieces.into_iter().enumerate() {
            let action = if k + 1 == n { HdmaAction::TxFilled(b) } else { HdmaAction::Nothing };
            let cmd = HostDmaCmd {
                dir: DmaDir::HostToSram,
                len,
                sram: hdr_at + HEADER_LEN as u32 + at,
                host: bus,
                cookie: b as u64,
            };
            self.hdma_post(hw, cmd, action);
            w.dma_cmds += 1;
        }

        // Advance the stream.
        let st = &mut self.txs[s];
        if st.outstanding() == 0 {
            st.last_progress = self.now;
            st.acked_at = self.now;
        }
        st.next_seq = seq.wrapping_add(1);
        let retransmit = seq_lt(seq, st.high);
        if !retransmit {
            st.high = st.next_seq;
        }
        self.tokens[t].next_pkt += 1;
        if self.tokens[t].next_pkt >= self.tokens[t].npkts {
            self.txs[s].cursor = self.tokens[t].next;
        }
        if retransmit {
            self.bump(Stat::Retransmits, 1);
        }
        if !self.txs[s].active {
            self.txs[s].active = true;
            let _ = self.active_tx.push(s);
        }
    }

    // ----------------------------------------------------------------
    // Reliability, sending half

    /// Move stream `s`'s send cursor to sequence number `seq` (within the
    /// tokens on its list), renumbering the tokens from `base`.
    pub(crate) fn seek(&mut self, s: u16, seq: u32) {
        let mut first = self.txs[s].base;
        let mut t = self.txs[s].head;
        let mut cursor = NIL;
        let mut found_seq = first;
        while t != NIL {
            let n = self.tokens[t].npkts;
            self.tokens[t].first_seq = first;
            if cursor == NIL {
                let end = first.wrapping_add(n);
                if seq_lt(seq, end) {
                    cursor = t;
                    let k = seq.wrapping_sub(first).min(n);
                    self.tokens[t].next_pkt = k;
                    found_seq = first.wrapping_add(k);
                } else {
                    self.tokens[t].next_pkt = n;
                    found_seq = end;
                }
            } else {
                self.tokens[t].next_pkt = 0;
            }
            first = first.wrapping_add(n);
            t = self.tokens[t].next;
        }
        let st = &mut self.txs[s];
        st.cursor = cursor;
        st.next_seq = found_seq;
        st.epoch = st.epoch.wrapping_add(1);
        if cursor != NIL {
            self.ring_insert(s);
        }
    }

    /// A cumulative ack for stream `s`: everything before `ack` arrived.
    pub(crate) fn on_ack(&mut self, s: u16, ack: u32) {
        let st = self.txs[s];
        if !(seq_lt(st.una, ack) && seq_le(ack, st.high)) {
            return;
        }
        {
            let st = &mut self.txs[s];
            st.una = ack;
            st.last_progress = self.now;
            st.acked_at = self.now;
            st.nobuf_since = 0;
            st.backoff = 0;
        }
        if seq_lt(self.txs[s].next_seq, ack) {
            self.seek(s, ack);
        }
        // Complete the tokens wholly acked.
        loop {
            let t = self.txs[s].head;
            if t == NIL {
                break;
            }
            let end = self.txs[s].base.wrapping_add(self.tokens[t].npkts);
            if !seq_le(end, self.txs[s].una) {
                break;
            }
            self.pop_head(s);
            self.txs[s].base = end;
            match self.tokens[t].kind {
                TokKind::Get => self.tokens[t].state = TokState::AwaitGet,
                TokKind::GetResp => self.tokens.free(t),
                _ => {
                    self.bump(Stat::MessagesSent, 1);
                    self.complete_token(t, SendStatus::Ok)
                }
            }
        }
    }

    fn pop_head(&mut self, s: u16) {
        let t = self.txs[s].head;
        if t == NIL {
            return;
        }
        let next = self.tokens[t].next;
        let st = &mut self.txs[s];
        st.head = next;
        if next == NIL {
            st.tail = NIL;
        }
        if st.cursor == t {
            st.cursor = next;
        }
        self.tokens[t].next = NIL;
    }

    /// A nack for stream `s`: `seq` was refused for `code`.
    pub(crate) fn on_nack(&mut self, s: u16, code: NackCode, seq: u32) {
        if code == NackCode::Unsynced {
            // The receiver has no state for the stream (its NIC was reset):
            // start again from the first unfinished message, with SYNC.
            let st = self.txs[s];
            if seq_le(st.una, seq) && seq_lt(seq, st.high) {
                self.resync(s);
            }
            return;
        }
        // The receiver holds everything before `seq`.
        self.on_ack(s, seq);
        let st = self.txs[s];
        if !(seq_le(st.una, seq) && seq_lt(seq, st.high)) {
            return;
        }
        match code {
            NackCode::OutOfOrder => {
                // Several packets beyond a gap draw the same nack: rewind once.
                if st.rewound_to == seq
                    && self.now.saturating_sub(st.rewound_at) < self.cfg.rto / 2
                    && seq_lt(seq, st.next_seq)
                {
                    return;
                }
                self.rewind(s, seq);
            }
            NackCode::NoBuffer | NackCode::Busy => {
                self.rewind(s, seq);
                let st = &mut self.txs[s];
                st.hold_until = self.now.saturating_add(self.cfg.nobuf_retry);
                if code == NackCode::NoBuffer {
                    if st.nobuf_since == 0 {
                        st.nobuf_since = self.now.max(1);
                    } else if self.now.saturating_sub(st.nobuf_since) >= self.cfg.send_timeout {
                        self.send_timed_out(s, seq);
                    }
                }
            }
            NackCode::PortClosed | NackCode::RemoteAccess => {
                let status = if code == NackCode::PortClosed {
                    SendStatus::TargetPortClosed
                } else {
                    SendStatus::RemoteAccess
                };
                // The refused packet belongs to the head message (everything
                // before it is acked): that message fails, even when the port
                // closed in its middle; the receiver expects `seq` next, so the
                // following messages start there.
                let t = self.txs[s].head;
                let base = self.txs[s].base;
                if t != NIL && seq_lt(seq, base.wrapping_add(self.tokens[t].npkts)) {
                    self.pop_head(s);
                    if self.tokens[t].kind == TokKind::GetResp {
                        self.tokens.free(t);
                    } else {
                        self.complete_token(t, status);
                    }
                    self.txs[s].base = seq;
                }
                self.rewind(s, seq);
            }
            NackCode::Unsynced => {}
        }
    }

    /// Resend from the first unfinished message, with a new SYNC.
    fn resync(&mut self, s: u16) {
        let st = &mut self.txs[s];
        st.sync_gen = st.sync_gen.wrapping_add(1);
        let head = st.head;
        if head == NIL {
            st.sync_next = true;
            return;
        }
        self.tokens[head].sync = true;
        let base = self.txs[s].base;
        self.rewind(s, base);
    }

    fn rewind(&mut self, s: u16, seq: u32) {
        self.seek(s, seq);
        let st = &mut self.txs[s];
        st.rewound_to = seq;
        st.rewound_at = self.now;
        st.last_progress = self.now;
    }

    /// The target refused `seq` (a message start) for want of a buffer for
    /// the whole send timeout: that send times out, the rest queued on the
    /// stream are dropped, and the stream stays suspended until Resume.
    fn send_timed_out(&mut self, s: u16, seq: u32) {
        self.bump(Stat::Timeouts, 1);
        let mut first = true;
        while self.txs[s].head != NIL {
            let t = self.txs[s].head;
            self.pop_head(s);
            let status = if first { SendStatus::TimedOut } else { SendStatus::Dropped };
            first = false;
            if self.tokens[t].kind == TokKind::GetResp {
                self.tokens.free(t);
            } else {
                self.complete_token(t, status);
            }
        }
        // The receiver expects `seq` still: start again there.
        let st = &mut self.txs[s];
        st.base = seq;
        st.una = seq;
        st.next_seq = seq;
        st.high = seq;
        st.cursor = NIL;
        st.suspended = true;
        st.nobuf_since = 0;
        st.epoch = st.epoch.wrapping_add(1);
        self.ring_remove(s);
    }

    /// Give up every token of stream `s` (with `status` events, or silently
    /// when the port closed). The receiver's state is unknown, so the next
    /// message carries SYNC with a fresh sequence number.
    pub(crate) fn abandon_stream(&mut self, s: u16, status: Option<SendStatus>) {
        while self.txs[s].head != NIL {
            let t = self.txs[s].head;
            self.pop_head(s);
            match status {
                Some(st) if !self.tokens[t].is_internal() => self.complete_token(t, st),
                _ => self.tokens.free(t),
            }
        }
        let st = &mut self.txs[s];
        st.base = st.high;
        st.una = st.high;
        st.next_seq = st.high;
        st.cursor = NIL;
        st.sync_next = true;
        st.sync_gen = st.sync_gen.wrapping_add(1);
        st.nobuf_since = 0;
        st.epoch = st.epoch.wrapping_add(1);
        self.ring_remove(s);
    }

    /// Token `t` is done with `status`: its event is owed to its port.
    pub(crate) fn complete_token(&mut self, t: u16, status: SendStatus) {
        if self.tokens[t].is_internal() {
            self.tokens.free(t);
            return;
        }
        self.tokens[t].state = TokState::Completing(status as u8);
        self.tokens[t].next = NIL;
        let p = self.tokens[t].port as usize;
        self.owe_event(p, EvRef::Token(t));
    }

    pub(crate) fn owe_event(&mut self, p: usize, ev: EvRef) {
        if p >= NUM_PORTS || self.port_events[p].push_back(ev).is_err() {
            // Cannot happen while tokens bound the events; count it.
            self.bump(Stat::Errors, 1);
            match ev {
                EvRef::Token(t) => self.tokens.free(t),
                EvRef::Slot(s) => self.slots.free(s),
                _ => {}
            }
        }
    }

    // ----------------------------------------------------------------
    // Timers

    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn timers(&mut self, hw: &mut impl Hw, w: &mut Work) {
        let now = self.now;
        // Retransmission and send timeouts.
        let mut i = 0;
        while i < self.active_tx.len() {
            let s = self.active_tx[i];
            let st = self.txs[s];
            if !self.txs.is_live(s) || (st.outstanding() == 0 && st.hold_until <= now) {
                if self.txs.is_live(s) {
                    self.txs[s].active = false;
                }
                self.active_tx.swap_remove(i);
                continue;
            }
            if st.outstanding() != 0 && now >= st.last_progress.saturating_add(st.rto(self.cfg.rto))
            {
                w.timers += 1;
                self.set_sdma(hw, SdmaState::Timer, st.una);
                if now.saturating_sub(st.acked_at) >= self.cfg.send_timeout {
                    self.bump(Stat::Timeouts, 1);
                    self.abandon_stream(s, Some(SendStatus::Unreachable));
                } else {
                    self.rewind(s, st.una);
                    let st = &mut self.txs[s];
                    st.backoff = (st.backoff + 1).min(MAX_BACKOFF);
                }
            }
            i += 1;
        }
        // Acks owed.
        let mut i = 0;
        while i < self.ack_list.len() {
            let r = self.ack_list[i];
            if !self.rxs.is_live(r) || !self.rxs[r].ack_pending {
                if self.rxs.is_live(r) {
                    self.rxs[r].on_ack_list = false;
                }
                self.ack_list.swap_remove(i);
                continue;
            }
            if now >= self.rxs[r].ack_due
                && self.control.push_back(Control { rx_stream: r, nack: None }).is_ok()
            {
                self.rxs[r].ack_pending = false;
                self.rxs[r].on_ack_list = false;
                self.ack_list.swap_remove(i);
                w.timers += 1;
                continue;
            }
            i += 1;
        }
        // Alarms.
        for p in 0..NUM_PORTS {
            if let Some(t) = self.ports[p].alarm_at {
                if now >= t && self.ports[p].open {
                    self.ports[p].alarm_at = None;
                    self.owe_event(p, EvRef::Alarm);
                    w.timers += 1;
                }
            }
        }
        if self.sdma_state == SdmaState::Timer {
            self.set_sdma(hw, SdmaState::Idle, 0);
        }
    }
}
