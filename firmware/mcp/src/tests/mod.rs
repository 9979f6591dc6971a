//! Unit tests of the state machines on the host, without the emulator: a
//! tiny bench (`Bench`) stands in for the hardware. Its engines act
//! instantly between polls, its wire connects every NIC to every other
//! directly (one route byte), and it can drop, corrupt or duplicate
//! packets on a fixed pattern. A minimal host side writes page tables and
//! descriptors and reads events, as the driver would.

use crate::hw::SliceHw;
use crate::Mcp;
use crate::SdmaState;
use nic_abi::desc::{DescKind, Descriptor, DESC_SIZE};
use nic_abi::event::{ErrorCause, Event, EventKind, SendStatus, EVENT_SIZE};
use nic_abi::packet::{field, route_byte, Header, HEADER_LEN};
use nic_abi::page_table::{self, pte};
use nic_abi::port::*;
use nic_abi::regs::{self, reg};
use nic_abi::rings::{self, DmaDir, HostDmaCmd, RxDone, TxDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::{map, Priority, PAGE_SIZE};
use std::collections::VecDeque;
use std::vec::Vec;

mod aliases;
mod delivery;
mod engines;
mod fuzz;
mod headers;
mod machines;
mod protection;
mod recovery;
mod restarts;
#[cfg(feature = "selective")]
mod selective;
mod shape;

const SRAM: usize = map::SRAM_MIN as usize;
const HOST: usize = 8 << 20;
/// Each port's page table (in host memory past `HOST`): an entry for every
/// page of `HOST`.
const TABLE_BYTES: usize = HOST / PAGE_SIZE as usize * 8;
const EVQ_ENTRIES: u32 = 256;
/// Virtual addresses are bus addresses plus this.
const VBASE: u64 = 0x7000_0000_0000;

pub(crate) struct Node {
    sram: Vec<u8>,
    host: Vec<u8>,
    mcp: Box<Mcp>,
    /// Packets waiting for a free receive buffer.
    inbox: VecDeque<Vec<u8>>,
    next_event: [u32; 8],
    brk: u64,
    /// Pages of hostile mappings made so far (`map_at`).
    hostile: u64,
}

impl Node {
    fn hw(&mut self) -> SliceHw<'_> {
        SliceHw::new(&mut self.sram)
    }
    fn r32(&self, off: u32) -> u32 {
        u32::from_le_bytes(self.sram[off as usize..off as usize + 4].try_into().unwrap())
    }
    fn r64(&self, off: u32) -> u64 {
        u64::from_le_bytes(self.sram[off as usize..off as usize + 8].try_into().unwrap())
    }
    /// As the driver (a port's STATE and GENERATION: with the privileged
    /// side's `PORT_NEWS` after them).
    /// Give this NIC `size` bytes of SRAM (before init: `Bench::with`).
    pub(crate) fn set_sram_size(&mut self, size: usize) {
        self.sram.resize(size, 0);
        self.w32(reg(regs::SRAM_SIZE), size as u32);
    }

    fn w32(&mut self, off: u32, v: u32) {
        self.sram[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
        self.port_news(off, 4);
    }
    fn w64(&mut self, off: u32, v: u64) {
        self.sram[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        self.port_news(off, 8);
    }
    /// A write as a host process makes it: no `PORT_NEWS`.
    fn w32_unannounced(&mut self, off: u32, v: u32) {
        self.sram[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
        nic_abi::regs::host_wrote(&mut self.sram[..]);
    }
    fn port_news(&mut self, off: u32, len: u32) {
        if nic_abi::port::touches_state(off, len) {
            nic_abi::port::move_news(&mut self.sram[..]);
        }
        nic_abi::regs::host_wrote(&mut self.sram[..]);
    }
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Faults {
    /// Drop every n-th packet on the wire (0: never).
    pub(crate) drop_every: u32,
    /// Drop the n-th packet on the wire only (0: none).
    pub(crate) drop_at: u32,
    pub(crate) corrupt_every: u32,
    pub(crate) dup_every: u32,
}

/// Packets held on the wire a pseudo-random number of rounds (so they
/// also overtake each other): `state` is the generator's, `max` the most
/// rounds a packet waits.
#[derive(Clone, Copy)]
struct Jitter {
    state: u64,
    max: u64,
}

impl Jitter {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

pub(crate) struct Bench {
    pub(crate) nodes: Vec<Node>,
    rtc: u64,
    pub(crate) faults: Faults,
    wire_count: u32,
    /// Every packet put on the wire: (src, dst, header).
    pub(crate) log: Vec<Header>,
    jitter: Option<Jitter>,
    /// Packets held by `jitter`: (due round, destination, bytes).
    held: Vec<(u64, usize, Vec<u8>)>,
}

impl Bench {
    pub(crate) fn new(n: usize) -> Bench {
        Bench::with(n, |_| {})
    }

    pub(crate) fn with(n: usize, cfg: impl Fn(&mut Node)) -> Bench {
        let mut nodes = Vec::new();
        for i in 0..n {
            let mut node = Node {
                sram: vec![0u8; SRAM],
                host: vec![0u8; HOST + 8 * TABLE_BYTES],
                mcp: Box::new(Mcp::new()),
                inbox: VecDeque::new(),
                next_event: [1; 8],
                brk: 0x10000,
                hostile: 0,
            };
            node.w32(reg(regs::MAGIC), regs::MAGIC_VALUE);
            node.w32(reg(regs::ABI_VERSION), regs::ABI_VERSION_VALUE);
            node.w32(reg(regs::NODE_ID), i as u32);
            node.w32(reg(regs::NUM_NODES), n as u32);
            node.w32(reg(regs::MTU), 4096);
            node.w64(reg(regs::SEND_TIMEOUT_TICKS), 50_000);
            node.w64(reg(regs::RETRANSMIT_TICKS), 400);
            node.w64(reg(regs::ACK_DELAY_TICKS), 20);
            node.w64(reg(regs::NOBUF_RETRY_TICKS), 1000);
            node.w32(reg(regs::SEND_TOKENS), 16);
            node.w32(reg(regs::RECV_TOKENS), 32);
            node.w32(reg(regs::WINDOW), 16);
            // Every port's slice is the whole host memory (a test of the
            // slices sets its own).
            for p in 0..8 {
                node.w64(reg(regs::port_slice_base(p)), 0);
                node.w64(reg(regs::port_slice_len(p)), HOST as u64);
                node.w64(reg(regs::port_pt_bus(p)), (HOST + p * TABLE_BYTES) as u64);
                node.w64(reg(regs::port_pt_vbase(p)), VBASE);
            }
            for d in 0..n {
                let e = map::route_entry(d);
                node.sram[e as usize] = 1;
                node.sram[e as usize + 1] = route_byte(d as u8);
            }
            cfg(&mut node);
            let mut mcp = Box::new(Mcp::new());
            mcp.init(&mut node.hw()).expect("init");
            node.mcp = mcp;
            nodes.push(node);
        }
        Bench {
            nodes,
            rtc: 0,
            faults: Faults::default(),
            wire_count: 0,
            log: Vec::new(),
            jitter: None,
            held: Vec::new(),
        }
    }

    /// One round: every NIC polls, then every engine does all it can.
    pub(crate) fn round(&mut self) -> bool {
        self.rtc += 1;
        let mut busy = false;
        let rtc = self.rtc;
        let mut k = 0;
        while k < self.held.len() {
            if self.held[k].0 <= rtc {
                let (_, dst, pkt) = self.held.remove(k);
                self.nodes[dst].inbox.push_back(pkt);
            } else {
                k += 1;
            }
        }
        busy |= !self.held.is_empty();
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            node.w64(reg(regs::RTC), rtc);
            let mut hw = SliceHw::new(&mut node.sram);
            let w = node.mcp.poll(&mut hw);
            assert_eq!(hw.faults.get(), 0, "firmware touched SRAM out of range or off alignment");
            busy |= !w.is_idle();
            busy |= self.engines(i);
        }
        busy
    }

    pub(crate) fn run(&mut self, rounds: u32) {
        for _ in 0..rounds {
            self.round();
        }
    }

    pub(crate) fn run_until(&mut self, max: u32, mut done: impl FnMut(&mut Bench) -> bool) -> bool {
        for _ in 0..max {
            self.round();
            if done(self) {
                return true;
            }
        }
        false
    }
    // ---- the host side, as the driver does it

    pub(crate) fn open(&mut self, n: usize, p: usize) {
        let evq = self.alloc(n, p, (EVQ_ENTRIES * EVENT_SIZE) as u64);
        self.open_with_evq(n, p, evq - VBASE);
        let e = self.events(n, p);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].kind, EventKind::PortOpened);
    }

    /// Open port p of node n with its event queue at bus address `evq`, as
    /// the driver does (no check of the outcome).
    pub(crate) fn open_with_evq(&mut self, n: usize, p: usize, evq: u64) {
        let node = &mut self.nodes[n];
        node.w64(evq_bus(p), evq);
        node.w32(evq_len(p), EVQ_ENTRIES);
        node.w32(port_reg(p, EVQ_CONSUMED), 0);
        node.w32(port_reg(p, SEND_PROD), 0);
        node.w32(port_reg(p, SEND_CONS), 0);
        let g = node.r32(port_reg(p, GENERATION));
        node.w32(port_reg(p, GENERATION), g + 1);
        node.w32(port_reg(p, STATE), STATE_OPEN);
        node.next_event[p] = 1;
        self.run(3);
    }

    pub(crate) fn close(&mut self, n: usize, p: usize) {
        self.nodes[n].w32(port_reg(p, STATE), STATE_CLOSED);
        self.run(3);
        assert_eq!(self.nodes[n].r32(port_reg(p, FW_STATE)), STATE_CLOSED);
    }

    /// Allocate and register `len` bytes for port p; returns the vaddr.
    pub(crate) fn alloc(&mut self, n: usize, p: usize, len: u64) -> u64 {
        let node = &mut self.nodes[n];
        let bus = node.brk;
        node.brk += len.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
        assert!(node.brk as usize <= HOST);
        let v = VBASE + bus;
        self.register(n, p, v, len);
        v
    }

    /// Write entry `e` for virtual page `vpn` into port p's page table
    /// (in host memory, as the privileged side does), and tell the NIC.
    pub(crate) fn set_pte(&mut self, n: usize, p: usize, vpn: u64, e: u64) {
        let node = &mut self.nodes[n];
        let first = node.r64(reg(regs::port_pt_vbase(p))) / PAGE_SIZE;
        let entries = node.r64(reg(regs::port_slice_len(p))) / PAGE_SIZE;
        let i = vpn.checked_sub(first).filter(|&i| i < entries).expect("a page of the table");
        let at = (node.r64(reg(regs::port_pt_bus(p))) + i * 8) as usize;
        let old = u64::from_le_bytes(node.host[at..at + 8].try_into().unwrap());
        node.host[at..at + 8].copy_from_slice(&e.to_le_bytes());
        // Only added: PT_ADDED; cleared or changed: PT_GEN.
        let word = if old == 0 { PT_ADDED } else { PT_GEN };
        let g = node.r32(port_reg(p, word));
        node.w32(port_reg(p, word), g.wrapping_add(1));
    }

    pub(crate) fn register(&mut self, n: usize, p: usize, v: u64, len: u64) {
        for (pv, _) in page_table::page_pieces(v, len.max(1)) {
            let vpn = pv / PAGE_SIZE;
            self.set_pte(n, p, vpn, pte(vpn - VBASE / PAGE_SIZE));
        }
    }

    pub(crate) fn deregister(&mut self, n: usize, p: usize, v: u64, len: u64) {
        for (pv, _) in page_table::page_pieces(v, len.max(1)) {
            self.set_pte(n, p, pv / PAGE_SIZE, 0);
        }
    }

    pub(crate) fn write_host(&mut self, n: usize, v: u64, data: &[u8]) {
        let b = (v - VBASE) as usize;
        self.nodes[n].host[b..b + data.len()].copy_from_slice(data);
    }

    pub(crate) fn read_host(&self, n: usize, v: u64, len: usize) -> Vec<u8> {
        let b = (v - VBASE) as usize;
        self.nodes[n].host[b..b + len].to_vec()
    }

    pub(crate) fn post(&mut self, n: usize, p: usize, d: Descriptor) {
        let mut b = [0u8; DESC_SIZE as usize];
        d.encode(&mut b);
        self.post_raw(n, p, &b);
    }

    /// Post `d` on node n port p and wait, at most `rounds` rounds, for
    /// the port's next event (its completion): that event.
    pub(crate) fn complete(&mut self, n: usize, p: usize, d: Descriptor, rounds: u32) -> Event {
        self.post(n, p, d);
        let mut evs = Vec::new();
        assert!(self.run_until(rounds, |b| {
            evs.extend(b.events(n, p));
            !evs.is_empty()
        }));
        evs[0]
    }

    pub(crate) fn post_raw(&mut self, n: usize, p: usize, b: &[u8; 64]) {
        let node = &mut self.nodes[n];
        let prod = node.r32(port_reg(p, SEND_PROD));
        let o = send_slot(p, prod) as usize;
        node.sram[o..o + 64].copy_from_slice(b);
        node.w32(port_reg(p, SEND_PROD), prod.wrapping_add(1));
    }

    pub(crate) fn events(&mut self, n: usize, p: usize) -> Vec<Event> {
        let mut out = Vec::new();
        let node = &mut self.nodes[n];
        let bus = u64::from_le_bytes(
            node.sram[evq_bus(p) as usize..evq_bus(p) as usize + 8].try_into().unwrap(),
        ) as usize;
        loop {
            let want = node.next_event[p];
            let at = bus + ((want - 1) % EVQ_ENTRIES) as usize * EVENT_SIZE as usize;
            let e = &node.host[at..at + EVENT_SIZE as usize];
            if Event::slot_seq(e) != want {
                break;
            }
            out.push(Event::decode(e).unwrap());
            node.next_event[p] = want + 1;
        }
        let consumed = node.next_event[p] - 1;
        node.w32(port_reg(p, EVQ_CONSUMED), consumed);
        out
    }

    /// Run until port p of node n has events, at most `rounds` rounds:
    /// those events, or None when none came.
    pub(crate) fn await_events(&mut self, n: usize, p: usize, rounds: u32) -> Option<Vec<Event>> {
        let mut got = Vec::new();
        self.run_until(rounds, |b| {
            got.extend(b.events(n, p));
            !got.is_empty()
        })
        .then_some(got)
    }

    pub(crate) fn stat(&self, n: usize, s: Stat) -> u64 {
        self.nodes[n].r64(nic_abi::stats::stat_offset(s))
    }
}

fn send(local: u64, len: u32, node: u16, port: u8, prio: Priority, tag: u64) -> Descriptor {
    Descriptor {
        kind: DescKind::Send,
        priority: prio,
        size_class: nic_abi::size_class_for(len as u64),
        target_port: port,
        target_node: node,
        local,
        len,
        remote: 0,
        tag,
    }
}

fn provide(local: u64, class: u8, prio: Priority, tag: u64) -> Descriptor {
    Descriptor {
        kind: DescKind::Provide,
        priority: prio,
        size_class: class,
        target_port: 0,
        target_node: 0,
        local,
        len: 1 << class,
        remote: 0,
        tag,
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7919) % 251) as u8).collect()
}

/// Send `sizes` from node 0 port 1 to node 1 port 2 and check every
/// message arrives intact, once, in order, and every send completes Ok.
fn transfer(b: &mut Bench, sizes: &[u32], prio: Priority) {
    b.open(0, 1);
    b.open(1, 2);
    let mut received: Vec<Event> = Vec::new();
    let mut sent: Vec<Event> = Vec::new();
    let bufs: Vec<u64> = sizes
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let v = b.alloc(0, 1, len.max(1) as u64);
            b.write_host(0, v, &pattern(k as u64, len as usize));
            v
        })
        .collect();
    let mut next = 0;
    let mut provided = 0;
    let mut outstanding = 0;
    let ok = b.run_until(2_000_000, |b| {
        // Keep receive buffers and sends going, within the token counts:
        // a message goes once the receiver's NIC took its buffer (it reads
        // the new pages' translations first).
        let taken = b.nodes[1].r32(port_reg(2, SEND_CONS)) as usize;
        while next < provided.min(taken) && outstanding < 8 {
            let len = sizes[next];
            b.post(0, 1, send(bufs[next], len, 1, 2, prio, next as u64));
            next += 1;
            outstanding += 1;
        }
        while provided < sizes.len() && provided < next + 8 {
            let class = nic_abi::size_class_for(sizes[provided] as u64);
            let rv = b.alloc(1, 2, 1u64 << class);
            b.post(1, 2, provide(rv, class, prio, provided as u64));
            provided += 1;
        }
        for e in b.events(0, 1) {
            sent.push(e);
            outstanding -= 1;
        }
        received.extend(b.events(1, 2));
        received.len() == sizes.len() && sent.len() == sizes.len()
    });
    assert!(
        ok,
        "transfer stalled: {} of {} received, {} sent",
        received.len(),
        sizes.len(),
        sent.len()
    );
    for (k, e) in received.iter().enumerate() {
        assert_eq!(e.kind, EventKind::Received);
        assert_eq!(e.tag, k as u64, "messages arrive in order");
        assert_eq!(e.len, sizes[k]);
        assert_eq!((e.node, e.port, e.priority), (0, 1, prio));
        let got = b.read_host(1, e.addr, sizes[k] as usize);
        assert!(got == pattern(k as u64, sizes[k] as usize), "message {k} intact");
        if sizes[k] <= 16 {
            assert_eq!(e.inline_len as u32, sizes[k]);
            assert_eq!(&e.inline[..sizes[k] as usize], &got[..]);
        }
    }
    for (k, e) in sent.iter().enumerate() {
        assert_eq!((e.kind, e.status, e.tag), (EventKind::Sent, SendStatus::Ok as u8, k as u64));
    }
}

/// One more message from node 0 port 1 to node 1 port 2 arrives.
fn transfer_again(b: &mut Bench) {
    let v = b.alloc(0, 1, 100);
    let rv = b.alloc(1, 2, 128);
    b.post(1, 2, provide(rv, 7, Priority::Low, 42));
    b.post(0, 1, send(v, 100, 1, 2, Priority::Low, 2));
    let got = b.await_events(1, 2, 20_000).expect("delivered");
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 42));
}

/// SRAM offsets of port `p`'s event-queue registration (privileged words).
pub(crate) fn evq_bus(p: usize) -> u32 {
    nic_abi::regs::reg(nic_abi::regs::port_evq_bus(p))
}

pub(crate) fn evq_len(p: usize) -> u32 {
    nic_abi::regs::reg(nic_abi::regs::port_evq_len(p))
}
