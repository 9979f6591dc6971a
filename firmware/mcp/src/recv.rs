//! RECV: packets from the receive-DMA engine. Checks the engine's CRC
//! status and the header, hands acks and nacks to the sending half, checks
//! sequence numbers (duplicates acked and dropped, gaps nacked once),
//! matches Data to a receive buffer of the exact size class and priority,
//! validates puts and gets against the target port's page table, and
//! passes accepted payloads to RDMA.

use crate::hw::Hw;
use crate::pool::NIL;
use crate::state::*;
use crate::trace::RecvState;
use crate::{Mcp, Work};
use nic_abi::event::INLINE_MAX;
use nic_abi::map;
use nic_abi::packet::{flags, Header, NackCode, PacketType, HEADER_LEN};
use nic_abi::regs;
use nic_abi::rings::{self, RxDone, RX_CRC_BAD, RX_TRUNCATED};
use nic_abi::stats::Stat;
use nic_abi::{class_max_len, Priority};

/// Packets examined per pass.
const RECV_BUDGET: u32 = 16;

impl Mcp {
    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn recv_step(&mut self, hw: &mut impl Hw, w: &mut Work) {
        for _ in 0..RECV_BUDGET {
            let prod = hw.reg32(regs::RXDONE_PROD);
            // Never wait for the send side here (a full control queue, busy
            // transmit buffers): a receiver that stops taking packets while
            // it waits to send can deadlock the fabric with its peers.
            if prod == self.rxdone_cons || self.rdma_jobs.is_full() {
                break;
            }
            let slot = rings::slot(
                map::RXDONE_RING,
                map::RXDONE_RING_LEN,
                rings::RXDONE_SIZE,
                self.rxdone_cons,
            );
            let mut rec = [0u8; rings::RXDONE_SIZE as usize];
            hw.read(slot, &mut rec);
            self.rxdone_cons = self.rxdone_cons.wrapping_add(1);
            hw.set_reg32(regs::RXDONE_CONS, self.rxdone_cons);
            w.rx_packets += 1;
            if let Ok(d) = RxDone::decode(&rec) {
                self.set_recv(hw, RecvState::Check, d.buf);
                self.handle_packet(hw, d);
            }
        }
        self.set_recv(hw, RecvState::Idle, 0);
    }

    fn drop_packet(&mut self, hw: &mut impl Hw, buf: u8, why: Stat) {
        self.bump(why, 1);
        self.bump(Stat::Drops, 1);
        self.post_rx_buffer(hw, buf);
    }

    fn handle_packet(&mut self, hw: &mut impl Hw, d: RxDone) {
        if d.buf >= map::RX_BUF_COUNT {
            // Not one of ours: nothing to give back.
            self.bump(Stat::BadHeaders, 1);
            self.bump(Stat::Drops, 1);
            return;
        }
        let buf = d.buf as u8;
        if d.status & (RX_CRC_BAD | RX_TRUNCATED) != 0 {
            self.drop_packet(hw, buf, Stat::CrcErrors);
            return;
        }
        let mut hb = [0u8; HEADER_LEN];
        hw.read(map::rx_buf(d.buf), &mut hb);
        let h = match Header::parse_prefix(&hb, d.len as usize) {
            Ok(h) => h,
            Err(_) => {
                self.drop_packet(hw, buf, Stat::BadHeaders);
                return;
            }
        };
        if h.dst_node != self.cfg.node || h.src_node >= self.cfg.nodes {
            self.drop_packet(hw, buf, Stat::BadHeaders);
            return;
        }
        self.bump(Stat::PacketsReceived, 1);
        // Our sending stream this packet speaks about: us:dst_port -> src.
        let key = stream_key(h.src_node, h.dst_port, h.src_port, h.priority);
        if h.has(flags::ACK_VALID) {
            if let Some(&s) = self.tx_index.get(&key) {
                self.set_recv(hw, RecvState::Ack, h.ack);
                self.on_ack(s, h.ack);
            }
        }
        match h.ptype {
            PacketType::Ack => self.post_rx_buffer(hw, buf),
            PacketType::Nack => {
                if let (Some(&s), Some(code)) =
                    (self.tx_index.get(&key), NackCode::from_u8(h.nack_code))
                {
                    self.set_recv(hw, RecvState::Ack, h.seq);
                    self.on_nack(s, code, h.seq);
                }
                self.post_rx_buffer(hw, buf);
            }
            _ => {
                self.set_recv(hw, RecvState::Accept, h.seq);
                self.accept(hw, buf, &h, key);
            }
        }
    }

    fn find_or_make_rx(&mut self, key: u32, h: &Header) -> Option<u16> {
        if let Some(&r) = self.rx_index.get(&key) {
            return Some(r);
        }
        let mut rx = RxStream::EMPTY;
        rx.key = key;
        rx.remote_node = h.src_node;
        rx.local_port = h.dst_port;
        rx.remote_port = h.src_port;
        rx.prio = h.priority;
        let r = self.rxs.alloc(rx)?;
        if self.rx_index.insert(key, r).is_err() {
            self.rxs.free(r);
            return None;
        }
        Some(r)
    }

    /// Owe an ack on `r`, due after the ack delay (or now when `urgent`).
    fn owe_ack(&mut self, r: u16, urgent: bool) {
        let now = self.now;
        let delay = self.cfg.ack_delay;
        let half_window = (self.cfg.window / 2).max(1);
        let rx = &mut self.rxs[r];
        if !rx.ack_pending {
            rx.ack_pending = true;
            rx.ack_due = now.saturating_add(delay);
        }
        if urgent || rx.unacked >= half_window {
            rx.ack_due = now;
        }
        if !rx.on_ack_list {
            rx.on_ack_list = true;
            let _ = self.ack_list.push(r);
        }
    }

    fn nack(&mut self, hw: &mut impl Hw, buf: u8, r: u16, code: NackCode, seq: u32) {
        self.queue_control(r, Some((code as u8, seq)));
        if code == NackCode::NoBuffer {
            self.bump(Stat::NoBuffer, 1);
        }
        self.bump(Stat::Drops, 1);
        self.post_rx_buffer(hw, buf);
    }

    /// Drop a receiving stream's partial message (its sender gave it up).
    pub(crate) fn abort_assembly(&mut self, r: u16) {
        if let Assembly::Message { slot } = self.rxs[r].assembly {
            // The buffer was never reported: back to the front of its port's list.
            if self.slots.is_live(slot) {
                let p = self.slots[slot].port as usize;
                self.unclaim_slot(slot, p);
            }
        }
        self.rxs[r].assembly = Assembly::Idle;
        self.rxs[r].offset = 0;
    }

    /// Take the first posted buffer of `port` with this class and priority.
    fn claim_slot(&mut self, port: usize, class: u8, prio: Priority) -> Option<u16> {
        let mut prev = NIL;
        let mut s = self.ports[port].slots_head;
        while s != NIL {
            let sl = self.slots[s];
            if sl.size_class == class && sl.prio == prio {
                if prev == NIL {
                    self.ports[port].slots_head = sl.next;
                } else {
                    self.slots[prev].next = sl.next;
                }
                if self.ports[port].slots_tail == s {
                    self.ports[port].slots_tail = prev;
                }
                self.slots[s].next = NIL;
                return Some(s);
            }
            prev = s;
            s = sl.next;
        }
        None
    }

    fn accept(&mut self, hw: &mut impl Hw, buf: u8, h: &Header, key: u32) {
        let Some(r) = self.find_or_make_rx(key, h) else {
            self.drop_packet(hw, buf, Stat::BadHeaders);
            return;
        };
        let first = h.has(flags::FIRST);
        let last = h.has(flags::LAST);
        if first && h.has(flags::SYNC) {
            let rx = self.rxs[r];
            let news = match rx.sync_seen {
                None => true,
                Some((boot, _)) if boot != h.sync_boot => true,
                // A later resync of the same boot may not roll back over
                // what was taken (a redundant SYNC raced an earlier one).
                Some((_, gen)) => gen != h.sync_gen && seq_le(rx.expected, h.seq),
            };
            if news {
                // The sender (re)starts the stream here.
                self.abort_assembly(r);
                let rx = &mut self.rxs[r];
                rx.expected = h.seq;
                rx.nacked = None;
                rx.sync_seen = Some((h.sync_boot, h.sync_gen));
            }
        }
        if self.rxs[r].sync_seen.is_none() {
            // Every stream starts with SYNC: without one this NIC lost the
            // stream's state (a reset). Ask the sender to start again.
            self.nack(hw, buf, r, NackCode::Unsynced, h.seq);
            return;
        }
        let expected = self.rxs[r].expected;
        if seq_lt(h.seq, expected) {
            self.drop_packet(hw, buf, Stat::Duplicates);
            self.owe_ack(r, true);
            return;
        }
        if h.seq != expected {
            self.bump(Stat::OutOfOrder, 1);
            let rx = self.rxs[r];
            let recently = rx.nacked == Some(expected)
                && self.now.saturating_sub(rx.nack_time) < self.cfg.rto / 2;
            if recently {
                self.bump(Stat::Drops, 1);
                self.post_rx_buffer(hw, buf);
            } else {
                self.rxs[r].nacked = Some(expected);
                self.rxs[r].nack_time = self.now;
                self.nack(hw, buf, r, NackCode::OutOfOrder, expected);
            }
            return;
        }
        let port = h.dst_port as usize;
        if !self.ports[port].open {
            self.nack(hw, buf, r, NackCode::PortClosed, h.seq);
            return;
        }
        let plen = h.payload_len as u32;
        let mut job: Option<RdmaJob> = None;
        match h.ptype {
            PacketType::Data => {
                if first {
                    self.abort_assembly(r);
                    let Some(s) = self.claim_slot(port, h.size_class, h.priority) else {
                        self.nack(hw, buf, r, NackCode::NoBuffer, h.seq);
                        return;
                    };
                    let sl = self.slots[s];
                    if h.msg_len as u64 > class_max_len(h.size_class).min(sl.len as u64) {
                        // A sender that broke the size-class rule: refuse.
                        self.unclaim_slot(s, port);
                        self.drop_packet(hw, buf, Stat::BadHeaders);
                        self.advance(r);
                        return;
                    }
                    let sl = &mut self.slots[s];
                    sl.filled = true;
                    sl.msg_len = h.msg_len;
                    sl.src_node = h.src_node;
                    sl.src_port = h.src_port;
                    sl.inline_len = 0;
                    if h.msg_len as usize <= INLINE_MAX {
                        let n = plen.min(INLINE_MAX as u32) as usize;
                        let mut tmp = [0u8; INLINE_MAX];
                        hw.read(map::rx_buf(buf as u32) + HEADER_LEN as u32, &mut tmp[..n]);
                        let sl = &mut self.slots[s];
                        sl.inline = tmp;
                        sl.inline_len = n as u8;
                    }
                    self.rxs[r].assembly = Assembly::Message { slot: s };
                    self.rxs[r].offset = 0;
                    self.rxs[r].msg_len = h.msg_len;
                }
                let Assembly::Message { slot } = self.rxs[r].assembly else {
                    self.drop_packet(hw, buf, Stat::BadHeaders);
                    self.advance(r);
                    return;
                };
                if h.offset != self.rxs[r].offset || h.msg_len != self.rxs[r].msg_len {
                    self.abort_assembly(r);
                    self.drop_packet(hw, buf, Stat::BadHeaders);
                    self.advance(r);
                    return;
                }
                let vaddr = self.slots[slot].vaddr.wrapping_add(h.offset as u64);
                job = Some(RdmaJob {
                    rx_buf: buf,
                    port: port as u8,
                    vaddr,
                    len: plen,
                    then: if last { Some(EvRef::Slot(slot)) } else { None },
                });
            }
            PacketType::Put => {
                if first {
                    if !self.registered(hw, port as u8, h.remote, h.msg_len as u64) {
                        self.nack(hw, buf, r, NackCode::RemoteAccess, h.seq);
                        return;
                    }
                    self.rxs[r].assembly = Assembly::Put { base: h.remote };
                    self.rxs[r].offset = 0;
                    self.rxs[r].msg_len = h.msg_len;
                }
                let Assembly::Put { base } = self.rxs[r].assembly else {
                    self.drop_packet(hw, buf, Stat::BadHeaders);
                    self.advance(r);
                    return;
                };
                job = Some(RdmaJob {
                    rx_buf: buf,
                    port: port as u8,
                    vaddr: base.wrapping_add(h.offset as u64),
                    len: plen,
                    then: None,
                });
            }
            PacketType::GetReq => {
                if !self.registered(hw, port as u8, h.remote, h.msg_len as u64) {
                    self.nack(hw, buf, r, NackCode::RemoteAccess, h.seq);
                    return;
                }
                let internal_live =
                    self.tokens.live_indices().filter(|&t| self.tokens[t].is_internal()).count();
                let reply = if internal_live < INTERNAL_TOKENS && self.tokens.available() > 0 {
                    self.find_or_make_tx(h.src_node, h.dst_port, h.src_port, h.priority)
                } else {
                    None
                };
                let Some(s) = reply else {
                    self.nack(hw, buf, r, NackCode::Busy, h.seq);
                    return;
                };
                let mut t = SendToken::EMPTY;
                t.kind = TokKind::GetResp;
                t.port = h.dst_port;
                t.prio = h.priority;
                t.target_node = h.src_node;
                t.target_port = h.src_port;
                t.local = h.remote;
                t.len = h.msg_len;
                t.cookie = h.cookie;
                t.npkts = self.packets_for(TokKind::GetResp, h.msg_len);
                if let Some(i) = self.tokens.alloc(t) {
                    if self.txs[s].suspended {
                        self.tokens.free(i);
                    } else {
                        self.append_token(s, i);
                    }
                }
                self.post_rx_buffer(hw, buf);
            }
            PacketType::GetResp => {
                if first {
                    let t = h.cookie as u16;
                    let ok = self.tokens.is_live(t) && {
                        let tok = self.tokens[t];
                        tok.kind == TokKind::Get
                            && tok.state == TokState::AwaitGet
                            && tok.port as usize == port
                            && tok.target_node == h.src_node
                            && tok.len == h.msg_len
                    };
                    if !ok {
                        self.drop_packet(hw, buf, Stat::BadHeaders);
                        self.advance(r);
                        return;
                    }
                    self.rxs[r].assembly = Assembly::GetResp { token: t };
                    self.rxs[r].offset = 0;
                    self.rxs[r].msg_len = h.msg_len;
                }
                let Assembly::GetResp { token } = self.rxs[r].assembly else {
                    self.drop_packet(hw, buf, Stat::BadHeaders);
                    self.advance(r);
                    return;
                };
                if last {
                    self.tokens[token].state =
                        TokState::Completing(nic_abi::event::SendStatus::Ok as u8);
                }
                job = Some(RdmaJob {
                    rx_buf: buf,
                    port: port as u8,
                    vaddr: self.tokens[token].local.wrapping_add(h.offset as u64),
                    len: plen,
                    then: if last { Some(EvRef::Token(token)) } else { None },
                });
            }
            PacketType::Ack | PacketType::Nack => {}
        }
        if let Some(j) = job {
            self.rxs[r].offset = self.rxs[r].offset.wrapping_add(plen);
            if last {
                self.rxs[r].assembly = Assembly::Idle;
            }
            let _ = self.rdma_jobs.push_back(j);
        }
        self.advance(r);
    }

    /// The in-order packet was taken (placed or consciously discarded).
    fn advance(&mut self, r: u16) {
        let rx = &mut self.rxs[r];
        rx.expected = rx.expected.wrapping_add(1);
        rx.unacked += 1;
        rx.nacked = None;
        self.owe_ack(r, false);
    }

    /// Give a claimed receive slot back to the front of its port's list.
    fn unclaim_slot(&mut self, s: u16, port: usize) {
        self.slots[s].filled = false;
        self.slots[s].next = self.ports[port].slots_head;
        self.ports[port].slots_head = s;
        if self.ports[port].slots_tail == NIL {
            self.ports[port].slots_tail = s;
        }
    }
}
