//! Test doubles for the driver: `MemBackend` (SRAM and host memory as
//! vectors) and `FakeNic`, a few hundred lines standing for the firmware:
//! it follows the port handshake, takes descriptors from the send rings,
//! translates through the page tables exactly as the MCP must, loops
//! messages, puts and gets back to its own node, and writes events into
//! host memory honouring EVQ_CONSUMED.
#![allow(dead_code)]

use std::cell::RefCell;
use std::rc::Rc;

use host_driver::nic_abi::desc::{DescKind, Descriptor, DESC_SIZE};
use host_driver::nic_abi::event::{
    ErrorCause, Event, EventKind, SendStatus, EVENT_SIZE, INLINE_MAX,
};
use host_driver::nic_abi::map::{self, SEND_RING_LEN};
use host_driver::nic_abi::page_table::{self, page_pieces, Pte, PTE_SIZE};
use host_driver::nic_abi::port::{self as pcb, port_reg, send_slot};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::{NUM_PORTS, PAGE_SIZE};
use host_driver::{HostOp, NicBackend};

pub const HOST_MEM: usize = 8 << 20;
/// First bus address the allocator hands out (bus 0 stays unused).
pub const HOST_BASE: u64 = 0x10_0000;

pub struct Mem {
    pub sram: Vec<u8>,
    pub host: Vec<u8>,
    next: u64,
    free_list: Vec<(u64, u64)>,
    pub freed: Vec<(u64, u64)>,
    pub charges: Vec<HostOp>,
    pub doorbells: u64,
    pub now: u64,
    /// idle_wait: false = a sim (returns false); true = real time
    /// (advances `now` by `idle_step_ns`, runs the hook, returns true).
    pub blocking: bool,
    pub idle_step_ns: u64,
    pub idle_waits: u64,
    hook: Option<Rc<dyn Fn()>>,
}

#[derive(Clone)]
pub struct MemBackend(pub Rc<RefCell<Mem>>);

impl MemBackend {
    pub fn new() -> MemBackend {
        MemBackend(Rc::new(RefCell::new(Mem {
            sram: vec![0; map::SRAM_MIN as usize],
            host: vec![0; HOST_MEM],
            next: HOST_BASE,
            free_list: Vec::new(),
            freed: Vec::new(),
            charges: Vec::new(),
            doorbells: 0,
            now: 0,
            blocking: false,
            idle_step_ns: 1000,
            idle_waits: 0,
            hook: None,
        })))
    }

    pub fn set_idle_hook(&self, f: impl Fn() + 'static) {
        self.0.borrow_mut().hook = Some(Rc::new(f));
    }

    pub fn charged(&self, op: HostOp) -> usize {
        self.0.borrow().charges.iter().filter(|c| **c == op).count()
    }

    pub fn u32_at(&self, off: u32) -> u32 {
        self.sram_load_u32(off)
    }

    pub fn u64_at(&self, off: u32) -> u64 {
        self.sram_load_u64(off)
    }

    pub fn set_u32(&self, off: u32, v: u32) {
        self.sram_store_u32(off, v)
    }

    /// Page-table entry `i` of `port`, as stored in SRAM.
    pub fn pte(&self, port: u8, i: u32) -> Pte {
        let mut b = [0u8; PTE_SIZE as usize];
        self.sram_read(map::page_table(port as usize) + i * PTE_SIZE, &mut b);
        Pte::decode(&b)
    }

    /// Translate through `port`'s page table in SRAM (as the firmware does).
    pub fn lookup(&self, port: u8, vpn: u64) -> Option<u64> {
        page_table::lookup(|i| self.pte(port, i), vpn)
    }

    /// Count of entries in each state in `port`'s table: (valid, deleted).
    pub fn pte_counts(&self, port: u8) -> (u32, u32) {
        let mut v = 0;
        let mut d = 0;
        for i in 0..map::PAGE_TABLE_ENTRIES {
            match self.pte(port, i).state {
                page_table::PteState::Valid => v += 1,
                page_table::PteState::Deleted => d += 1,
                page_table::PteState::Empty => {}
            }
        }
        (v, d)
    }
}

fn range(len: usize, off: u64, n: usize) -> std::ops::Range<usize> {
    let s = off as usize;
    assert!(s + n <= len, "access out of range: {off:#x}+{n}");
    s..s + n
}

impl NicBackend for MemBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        let m = self.0.borrow();
        buf.copy_from_slice(&m.sram[range(m.sram.len(), off as u64, buf.len())]);
    }
    fn sram_write(&self, off: u32, data: &[u8]) {
        let mut m = self.0.borrow_mut();
        let r = range(m.sram.len(), off as u64, data.len());
        m.sram[r].copy_from_slice(data);
    }
    fn sram_load_u32(&self, off: u32) -> u32 {
        let mut b = [0u8; 4];
        self.sram_read(off, &mut b);
        u32::from_le_bytes(b)
    }
    fn sram_store_u32(&self, off: u32, v: u32) {
        self.sram_write(off, &v.to_le_bytes())
    }
    fn sram_load_u64(&self, off: u32) -> u64 {
        let mut b = [0u8; 8];
        self.sram_read(off, &mut b);
        u64::from_le_bytes(b)
    }
    fn sram_store_u64(&self, off: u32, v: u64) {
        self.sram_write(off, &v.to_le_bytes())
    }
    fn host_read(&self, bus: u64, buf: &mut [u8]) {
        let m = self.0.borrow();
        buf.copy_from_slice(&m.host[range(m.host.len(), bus, buf.len())]);
    }
    fn host_write(&self, bus: u64, data: &[u8]) {
        let mut m = self.0.borrow_mut();
        let r = range(m.host.len(), bus, data.len());
        m.host[r].copy_from_slice(data);
    }
    fn host_load_u32(&self, bus: u64) -> u32 {
        let mut b = [0u8; 4];
        self.host_read(bus, &mut b);
        u32::from_le_bytes(b)
    }
    fn alloc_dma(&self, len: u64) -> Option<u64> {
        let mut m = self.0.borrow_mut();
        let pages = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        // Reuse a freed block first (so stale contents get reused too).
        if let Some(i) = m.free_list.iter().position(|&(_, l)| l >= pages) {
            let (bus, _) = m.free_list.remove(i);
            return Some(bus);
        }
        if m.next + pages > HOST_MEM as u64 {
            return None;
        }
        let bus = m.next;
        m.next += pages;
        // Fresh memory is not zero: the driver must not rely on it.
        let r = bus as usize..(bus + pages) as usize;
        m.host[r].fill(0xA5);
        Some(bus)
    }
    fn free_dma(&self, bus: u64, len: u64) {
        let mut m = self.0.borrow_mut();
        m.freed.push((bus, len));
        m.free_list.push((bus, len.div_ceil(PAGE_SIZE) * PAGE_SIZE));
    }
    fn now_ns(&self) -> u64 {
        self.0.borrow().now
    }
    fn charge(&self, op: HostOp) {
        self.0.borrow_mut().charges.push(op);
    }
    fn doorbell(&self) {
        self.0.borrow_mut().doorbells += 1;
    }
    fn idle_wait(&self) -> bool {
        let hook = {
            let mut m = self.0.borrow_mut();
            if !m.blocking {
                return false;
            }
            m.idle_waits += 1;
            m.now += m.idle_step_ns;
            m.hook.clone()
        };
        if let Some(h) = hook {
            h();
        }
        true
    }
}

/// NIC configuration written into the register block.
#[derive(Clone, Copy)]
pub struct Config {
    pub node: u32,
    pub nodes: u32,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub mtu: u32,
    pub rtc_hz: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config { node: 2, nodes: 4, send_tokens: 6, recv_tokens: 5, mtu: 4096, rtc_hz: 500_000_000 }
    }
}

/// A backend whose register block says a running NIC with `cfg`.
pub fn backend(cfg: Config) -> MemBackend {
    let be = MemBackend::new();
    be.set_u32(reg(regs::MAGIC), regs::MAGIC_VALUE);
    be.set_u32(reg(regs::ABI_VERSION), regs::ABI_VERSION_VALUE);
    be.set_u32(reg(regs::NODE_ID), cfg.node);
    be.set_u32(reg(regs::NUM_NODES), cfg.nodes);
    be.sram_store_u64(reg(regs::RTC_HZ), cfg.rtc_hz);
    be.set_u32(reg(regs::SRAM_SIZE), map::SRAM_MIN);
    be.set_u32(reg(regs::MTU), cfg.mtu);
    be.set_u32(reg(regs::SEND_TOKENS), cfg.send_tokens);
    be.set_u32(reg(regs::RECV_TOKENS), cfg.recv_tokens);
    be.set_u32(reg(regs::FW_STATUS), regs::FW_RUNNING);
    be
}

#[derive(Default, Clone)]
struct FakePort {
    open: bool,
    generation: u32,
    cons: u32,
    produced: u32,
    evq_bus: u64,
    evq_len: u32,
    /// Receive buffers: (descriptor, bus pieces).
    provided: Vec<Descriptor>,
    /// Events not yet written (queue full or held).
    pending: Vec<Event>,
}

/// The fake firmware.
pub struct FakeNic {
    pub be: MemBackend,
    pub node: u16,
    ports: Vec<FakePort>,
    /// Don't take descriptors from the rings.
    pub stall: bool,
    /// Keep Sent/PutDone/GetDone events back until `release`.
    pub hold_completions: bool,
    held: Vec<(u8, Event)>,
    /// Don't acknowledge a close (FW_STATE stays open).
    pub ignore_close: bool,
    /// Every descriptor taken: (port, raw bytes).
    pub taken: Vec<(u8, [u8; 64])>,
    /// Largest produced - EVQ_CONSUMED seen when writing an event.
    pub max_backlog: u32,
    /// Times an event had to wait because the queue was full.
    pub queue_full_stalls: u64,
}

impl FakeNic {
    pub fn new(be: &MemBackend) -> FakeNic {
        let node = be.u32_at(reg(regs::NODE_ID)) as u16;
        FakeNic {
            be: be.clone(),
            node,
            ports: vec![FakePort::default(); NUM_PORTS],
            stall: false,
            hold_completions: false,
            held: Vec::new(),
            ignore_close: false,
            taken: Vec::new(),
            max_backlog: 0,
            queue_full_stalls: 0,
        }
    }

    /// A fake NIC shared with the backend's idle hook (so `wait` runs it).
    pub fn shared(be: &MemBackend) -> Rc<RefCell<FakeNic>> {
        let nic = Rc::new(RefCell::new(FakeNic::new(be)));
        let n = nic.clone();
        be.set_idle_hook(move || n.borrow_mut().step());
        nic
    }

    /// Give held completions back to the event path.
    pub fn release(&mut self) {
        for (p, e) in std::mem::take(&mut self.held) {
            self.ports[p as usize].pending.push(e);
        }
        self.flush_events();
    }

    /// Queue a raw event (tests of odd records).
    pub fn push_event(&mut self, port: u8, e: Event) {
        self.ports[port as usize].pending.push(e);
        self.flush_events();
    }

    /// Write raw bytes as the next event of `port` (seq set by the fake).
    pub fn push_raw_event(&mut self, port: u8, mut rec: [u8; 64]) {
        let fp = &mut self.ports[port as usize];
        let seq = fp.produced + 1;
        rec[60..64].copy_from_slice(&seq.to_le_bytes());
        let at = fp.evq_bus + (fp.produced & (fp.evq_len - 1)) as u64 * EVENT_SIZE as u64;
        fp.produced += 1;
        self.be.host_write(at, &rec);
        self.be.set_u32(port_reg(port as usize, pcb::EVQ_PRODUCED), fp.produced);
    }

    /// One pass: handshakes, descriptors, events.
    pub fn step(&mut self) {
        for p in 0..NUM_PORTS as u8 {
            self.handshake(p);
        }
        if !self.stall {
            for p in 0..NUM_PORTS as u8 {
                self.take_descriptors(p);
            }
        }
        self.flush_events();
    }

    /// Step until nothing changes (bounded).
    pub fn run(&mut self) {
        for _ in 0..4 {
            self.step();
        }
    }

    fn handshake(&mut self, p: u8) {
        let be = &self.be;
        let pi = p as usize;
        let state = be.u32_at(port_reg(pi, pcb::STATE));
        let gen = be.u32_at(port_reg(pi, pcb::GENERATION));
        let fp = &mut self.ports[pi];
        if state == pcb::STATE_OPEN && (!fp.open || fp.generation != gen) {
            *fp = FakePort {
                open: true,
                generation: gen,
                evq_bus: be.u64_at(port_reg(pi, pcb::EVQ_BUS)),
                evq_len: be.u32_at(port_reg(pi, pcb::EVQ_LEN)),
                ..FakePort::default()
            };
            // Reset the firmware words before naming the generation.
            be.set_u32(port_reg(pi, pcb::SEND_CONS), 0);
            be.set_u32(port_reg(pi, pcb::EVQ_PRODUCED), 0);
            be.set_u32(port_reg(pi, pcb::FW_STATE), pcb::STATE_OPEN);
            be.set_u32(port_reg(pi, pcb::FW_GENERATION), gen);
            let mut e = Event::empty(EventKind::PortOpened);
            e.port = p;
            fp.pending.push(e);
        } else if state != pcb::STATE_OPEN && fp.open && !self.ignore_close {
            fp.open = false;
            fp.pending.clear();
            fp.provided.clear();
            self.held.retain(|(hp, _)| *hp != p);
            be.set_u32(port_reg(pi, pcb::FW_STATE), pcb::STATE_CLOSED);
        }
    }

    fn take_descriptors(&mut self, p: u8) {
        let pi = p as usize;
        if !self.ports[pi].open {
            return;
        }
        let prod = self.be.u32_at(port_reg(pi, pcb::SEND_PROD));
        while self.ports[pi].cons != prod {
            let cons = self.ports[pi].cons;
            assert!(prod.wrapping_sub(cons) <= SEND_RING_LEN, "driver overran the send ring");
            let mut b = [0u8; DESC_SIZE as usize];
            self.be.sram_read(send_slot(pi, cons), &mut b);
            self.ports[pi].cons = cons.wrapping_add(1);
            self.be.set_u32(port_reg(pi, pcb::SEND_CONS), cons.wrapping_add(1));
            self.taken.push((p, b));
            self.execute(p, &b);
        }
    }

    /// Bus pieces of `port`'s virtual range, or None if any byte is not
    /// registered.
    pub fn translate(&self, port: u8, vaddr: u64, len: u64) -> Option<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for (va, n) in page_pieces(vaddr, len) {
            let bus_page = self.be.lookup(port, va / PAGE_SIZE)?;
            out.push((bus_page * PAGE_SIZE + va % PAGE_SIZE, n));
        }
        Some(out)
    }

    fn copy(&self, from: &[(u64, u64)], to: &[(u64, u64)]) -> Vec<u8> {
        let mut data = Vec::new();
        for &(bus, n) in from {
            let mut b = vec![0u8; n as usize];
            self.be.host_read(bus, &mut b);
            data.extend_from_slice(&b);
        }
        let mut at = 0usize;
        for &(bus, n) in to {
            if at >= data.len() {
                break;
            }
            let k = (n as usize).min(data.len() - at);
            self.be.host_write(bus, &data[at..at + k]);
            at += k;
        }
        data
    }

    fn error(&mut self, p: u8, b: &[u8], cause: ErrorCause) {
        let mut e = Event::empty(EventKind::Error);
        e.status = cause as u8;
        e.tag = Descriptor::raw_tag(b);
        e.desc_kind = Descriptor::raw_kind(b);
        self.ports[p as usize].pending.push(e);
    }

    fn complete(&mut self, p: u8, kind: EventKind, d: &Descriptor, status: SendStatus) {
        let mut e = Event::empty(kind);
        e.status = status as u8;
        e.tag = d.tag;
        e.addr = d.local;
        e.len = d.len;
        e.node = d.target_node;
        e.port = d.target_port;
        e.priority = d.priority;
        if self.hold_completions {
            self.held.push((p, e));
        } else {
            self.ports[p as usize].pending.push(e);
        }
    }

    fn execute(&mut self, p: u8, b: &[u8]) {
        let d = match Descriptor::decode(b) {
            Ok(d) => d,
            Err(cause) => return self.error(p, b, cause),
        };
        let needs_local =
            matches!(d.kind, DescKind::Send | DescKind::Provide | DescKind::Put | DescKind::Get);
        let local = if needs_local {
            match self.translate(p, d.local, d.len as u64) {
                Some(l) if d.len > 0 => l,
                Some(_) => return self.error(p, b, ErrorCause::BadLength),
                None => return self.error(p, b, ErrorCause::NotRegistered),
            }
        } else {
            Vec::new()
        };
        let loopback = d.target_node == self.node;
        let tp = d.target_port;
        match d.kind {
            DescKind::Provide => self.ports[p as usize].provided.push(d),
            DescKind::Send => {
                if !loopback {
                    return self.complete(p, EventKind::Sent, &d, SendStatus::Ok);
                }
                if tp as usize >= NUM_PORTS || !self.ports[tp as usize].open {
                    return self.complete(p, EventKind::Sent, &d, SendStatus::TargetPortClosed);
                }
                let slot = self.ports[tp as usize]
                    .provided
                    .iter()
                    .position(|r| r.size_class == d.size_class && r.priority == d.priority);
                let Some(i) = slot else {
                    return self.complete(p, EventKind::Sent, &d, SendStatus::TimedOut);
                };
                let r = self.ports[tp as usize].provided.remove(i);
                let to = self.translate(tp, r.local, r.len as u64).unwrap_or_default();
                let data = self.copy(&local, &to);
                let mut e = Event::empty(EventKind::Received);
                e.node = self.node;
                e.port = p;
                e.priority = d.priority;
                e.size_class = d.size_class;
                e.len = d.len;
                e.addr = r.local;
                e.tag = r.tag;
                let n = data.len().min(INLINE_MAX);
                e.inline_len = n as u8;
                e.inline[..n].copy_from_slice(&data[..n]);
                self.ports[tp as usize].pending.push(e);
                self.complete(p, EventKind::Sent, &d, SendStatus::Ok);
            }
            DescKind::Put | DescKind::Get => {
                let kind =
                    if d.kind == DescKind::Put { EventKind::PutDone } else { EventKind::GetDone };
                if !loopback {
                    return self.complete(p, kind, &d, SendStatus::Ok);
                }
                if tp as usize >= NUM_PORTS || !self.ports[tp as usize].open {
                    return self.complete(p, kind, &d, SendStatus::TargetPortClosed);
                }
                let Some(remote) = self.translate(tp, d.remote, d.len as u64) else {
                    return self.complete(p, kind, &d, SendStatus::RemoteAccess);
                };
                if d.kind == DescKind::Put {
                    self.copy(&local, &remote);
                } else {
                    self.copy(&remote, &local);
                }
                self.complete(p, kind, &d, SendStatus::Ok);
            }
            DescKind::Resume => {}
            DescKind::Alarm => {
                let mut e = Event::empty(EventKind::Alarm);
                e.tag = d.tag;
                e.rtc = d.remote;
                self.ports[p as usize].pending.push(e);
            }
        }
    }

    /// Write pending events while each port's queue has room.
    pub fn flush_events(&mut self) {
        for pi in 0..NUM_PORTS {
            if !self.ports[pi].open {
                continue;
            }
            let consumed = self.be.u32_at(port_reg(pi, pcb::EVQ_CONSUMED));
            let fp = &mut self.ports[pi];
            let mut written = 0;
            for e in fp.pending.iter() {
                let backlog = fp.produced.wrapping_sub(consumed);
                if backlog >= fp.evq_len {
                    self.queue_full_stalls += 1;
                    break;
                }
                self.max_backlog = self.max_backlog.max(backlog + 1);
                let mut e = *e;
                e.seq = fp.produced.wrapping_add(1);
                let mut rec = [0u8; EVENT_SIZE as usize];
                e.encode(&mut rec);
                let at = fp.evq_bus + (fp.produced & (fp.evq_len - 1)) as u64 * EVENT_SIZE as u64;
                // Body first, seq last.
                self.be.host_write(at, &rec[..60]);
                self.be.host_write(at + 60, &rec[60..]);
                fp.produced = fp.produced.wrapping_add(1);
                written += 1;
            }
            fp.pending.drain(..written);
            self.be.set_u32(port_reg(pi, pcb::EVQ_PRODUCED), fp.produced);
        }
    }
}
