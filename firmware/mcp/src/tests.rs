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
use nic_abi::page_table::{self, Pte, PteState};
use nic_abi::port::*;
use nic_abi::regs::{self, reg};
use nic_abi::rings::{self, DmaDir, HostDmaCmd, RxDone, TxDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::{map, Priority, PAGE_SIZE};
use std::collections::VecDeque;
use std::vec::Vec;

const SRAM: usize = map::SRAM_MIN as usize;
const HOST: usize = 8 << 20;
const EVQ_ENTRIES: u32 = 256;
/// Virtual addresses are bus addresses plus this.
const VBASE: u64 = 0x7000_0000_0000;

struct Node {
    sram: Vec<u8>,
    host: Vec<u8>,
    mcp: Box<Mcp>,
    /// Packets waiting for a free receive buffer.
    inbox: VecDeque<Vec<u8>>,
    next_event: [u32; 8],
    brk: u64,
}

impl Node {
    fn hw(&mut self) -> SliceHw<'_> {
        SliceHw::new(&mut self.sram)
    }
    fn r32(&self, off: u32) -> u32 {
        u32::from_le_bytes(self.sram[off as usize..off as usize + 4].try_into().unwrap())
    }
    fn w32(&mut self, off: u32, v: u32) {
        self.sram[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn w64(&mut self, off: u32, v: u64) {
        self.sram[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
    }
}

#[derive(Default, Clone, Copy)]
struct Faults {
    /// Drop every n-th packet on the wire (0: never).
    drop_every: u32,
    corrupt_every: u32,
    dup_every: u32,
}

struct Bench {
    nodes: Vec<Node>,
    rtc: u64,
    faults: Faults,
    wire_count: u32,
    /// Every packet put on the wire: (src, dst, header).
    log: Vec<Header>,
}

impl Bench {
    fn new(n: usize) -> Bench {
        Bench::with(n, |_| {})
    }

    fn with(n: usize, cfg: impl Fn(&mut Node)) -> Bench {
        let mut nodes = Vec::new();
        for i in 0..n {
            let mut node = Node {
                sram: vec![0u8; SRAM],
                host: vec![0u8; HOST],
                mcp: Box::new(Mcp::new()),
                inbox: VecDeque::new(),
                next_event: [1; 8],
                brk: 0x10000,
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
        Bench { nodes, rtc: 0, faults: Faults::default(), wire_count: 0, log: Vec::new() }
    }

    /// One round: every NIC polls, then every engine does all it can.
    fn round(&mut self) -> bool {
        self.rtc += 1;
        let mut busy = false;
        for i in 0..self.nodes.len() {
            let rtc = self.rtc;
            let node = &mut self.nodes[i];
            node.w64(reg(regs::RTC), rtc);
            let mut hw = SliceHw::new(&mut node.sram);
            let w = node.mcp.poll(&mut hw);
            assert_eq!(hw.faults, 0, "firmware touched memory outside SRAM");
            busy |= !w.is_idle();
            busy |= self.engines(i);
        }
        busy
    }

    fn run(&mut self, rounds: u32) {
        for _ in 0..rounds {
            self.round();
        }
    }

    fn run_until(&mut self, max: u32, mut done: impl FnMut(&mut Bench) -> bool) -> bool {
        for _ in 0..max {
            self.round();
            if done(self) {
                return true;
            }
        }
        false
    }

    fn engines(&mut self, i: usize) -> bool {
        let mut busy = false;
        // Host-DMA.
        let node = &mut self.nodes[i];
        let prod = node.r32(reg(regs::HDMA_PROD));
        let mut done = node.r32(reg(regs::HDMA_DONE));
        while done != prod {
            let off = rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, done)
                as usize;
            let c = HostDmaCmd::decode(&node.sram[off..off + 32]).unwrap();
            let (s, h, n) = (c.sram as usize, c.host as usize, c.len as usize);
            match c.dir {
                DmaDir::HostToSram => node.sram[s..s + n].copy_from_slice(&node.host[h..h + n]),
                DmaDir::SramToHost => node.host[h..h + n].copy_from_slice(&node.sram[s..s + n]),
            }
            done = done.wrapping_add(1);
            busy = true;
        }
        node.w32(reg(regs::HDMA_DONE), done);
        // Send-DMA.
        let prod = node.r32(reg(regs::TXDMA_PROD));
        let mut done = node.r32(reg(regs::TXDMA_DONE));
        let mut out = Vec::new();
        while done != prod {
            let off = rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, done)
                as usize;
            let c = TxDmaCmd::decode(&node.sram[off..off + 16]).unwrap();
            let mut bytes = node.sram[c.sram as usize..(c.sram + c.len) as usize].to_vec();
            let rl = c.route_len as usize;
            bytes[rl + field::CRC..rl + field::CRC + 4].fill(0);
            let crc = crc32fast::hash(&bytes[rl..]);
            bytes[rl + field::CRC..rl + field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
            out.push(bytes);
            done = done.wrapping_add(1);
            busy = true;
        }
        node.w32(reg(regs::TXDMA_DONE), done);
        for bytes in out {
            let dst = (bytes[0] & 0x7f) as usize;
            let pkt = bytes[1..].to_vec();
            self.log.push(Header::parse(&pkt).unwrap());
            self.wire_count += 1;
            let k = self.wire_count;
            let f = self.faults;
            if f.drop_every != 0 && k.is_multiple_of(f.drop_every) {
                continue;
            }
            let mut pkt = pkt;
            if f.corrupt_every != 0 && k.is_multiple_of(f.corrupt_every) {
                let at = pkt.len() / 2;
                pkt[at] ^= 0x10;
            }
            if f.dup_every != 0 && k.is_multiple_of(f.dup_every) {
                self.nodes[dst].inbox.push_back(pkt.clone());
            }
            self.nodes[dst].inbox.push_back(pkt);
        }
        // Receive-DMA.
        let node = &mut self.nodes[i];
        while let Some(pkt) = node.inbox.front() {
            let fprod = node.r32(reg(regs::RXFREE_PROD));
            let fcons = node.r32(reg(regs::RXFREE_CONS));
            if fprod == fcons {
                break;
            }
            let pkt = pkt.clone();
            node.inbox.pop_front();
            let foff =
                rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, fcons)
                    as usize;
            let b = node.r32(foff as u32);
            node.w32(reg(regs::RXFREE_CONS), fcons.wrapping_add(1));
            let at = map::rx_buf(b) as usize;
            node.sram[at..at + pkt.len()].copy_from_slice(&pkt);
            let mut check = pkt.clone();
            let status = if check.len() < HEADER_LEN {
                rings::RX_CRC_BAD
            } else {
                let want =
                    u32::from_le_bytes(check[field::CRC..field::CRC + 4].try_into().unwrap());
                check[field::CRC..field::CRC + 4].fill(0);
                if crc32fast::hash(&check) == want {
                    0
                } else {
                    rings::RX_CRC_BAD
                }
            };
            let dprod = node.r32(reg(regs::RXDONE_PROD));
            let doff =
                rings::slot(map::RXDONE_RING, map::RXDONE_RING_LEN, rings::RXDONE_SIZE, dprod)
                    as usize;
            RxDone { buf: b, len: pkt.len() as u32, status }
                .encode(&mut node.sram[doff..doff + 16]);
            node.w32(reg(regs::RXDONE_PROD), dprod.wrapping_add(1));
            busy = true;
        }
        busy
    }

    // ---- the host side, as the driver does it

    fn open(&mut self, n: usize, p: usize) {
        let evq = self.alloc(n, p, (EVQ_ENTRIES * EVENT_SIZE) as u64);
        let node = &mut self.nodes[n];
        node.w64(port_reg(p, EVQ_BUS), evq - VBASE);
        node.w32(port_reg(p, EVQ_LEN), EVQ_ENTRIES);
        node.w32(port_reg(p, EVQ_CONSUMED), 0);
        node.w32(port_reg(p, SEND_PROD), 0);
        node.w32(port_reg(p, SEND_CONS), 0);
        let g = node.r32(port_reg(p, GENERATION));
        node.w32(port_reg(p, GENERATION), g + 1);
        node.w32(port_reg(p, STATE), STATE_OPEN);
        node.next_event[p] = 1;
        self.run(3);
        let e = self.events(n, p);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].kind, EventKind::PortOpened);
    }

    fn close(&mut self, n: usize, p: usize) {
        self.nodes[n].w32(port_reg(p, STATE), STATE_CLOSED);
        self.run(3);
        assert_eq!(self.nodes[n].r32(port_reg(p, FW_STATE)), STATE_CLOSED);
    }

    /// Allocate and register `len` bytes for port p; returns the vaddr.
    fn alloc(&mut self, n: usize, p: usize, len: u64) -> u64 {
        let node = &mut self.nodes[n];
        let bus = node.brk;
        node.brk += len.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
        assert!(node.brk as usize <= HOST);
        let v = VBASE + bus;
        self.register(n, p, v, len);
        v
    }

    fn pt_read(&self, n: usize, p: usize) -> impl Fn(u32) -> Pte + '_ {
        move |i| {
            let o = (map::page_table(p) + i * page_table::PTE_SIZE) as usize;
            Pte::decode(&self.nodes[n].sram[o..o + 16])
        }
    }

    fn register(&mut self, n: usize, p: usize, v: u64, len: u64) {
        for (pv, _) in page_table::page_pieces(v, len.max(1)) {
            let vpn = pv / PAGE_SIZE;
            let i = page_table::insert_slot(self.pt_read(n, p), vpn).unwrap();
            let e = Pte { state: PteState::Valid, vpn, bus_page: vpn - VBASE / PAGE_SIZE };
            let o = (map::page_table(p) + i * page_table::PTE_SIZE) as usize;
            e.encode(&mut self.nodes[n].sram[o..o + 16]);
        }
    }

    fn deregister(&mut self, n: usize, p: usize, v: u64, len: u64) {
        for (pv, _) in page_table::page_pieces(v, len.max(1)) {
            let vpn = pv / PAGE_SIZE;
            if let Some(i) = page_table::find_slot(self.pt_read(n, p), vpn) {
                let e = Pte { state: PteState::Deleted, vpn, bus_page: 0 };
                let o = (map::page_table(p) + i * page_table::PTE_SIZE) as usize;
                e.encode(&mut self.nodes[n].sram[o..o + 16]);
            }
        }
    }

    fn write_host(&mut self, n: usize, v: u64, data: &[u8]) {
        let b = (v - VBASE) as usize;
        self.nodes[n].host[b..b + data.len()].copy_from_slice(data);
    }

    fn read_host(&self, n: usize, v: u64, len: usize) -> Vec<u8> {
        let b = (v - VBASE) as usize;
        self.nodes[n].host[b..b + len].to_vec()
    }

    fn post(&mut self, n: usize, p: usize, d: Descriptor) {
        let mut b = [0u8; DESC_SIZE as usize];
        d.encode(&mut b);
        self.post_raw(n, p, &b);
    }

    fn post_raw(&mut self, n: usize, p: usize, b: &[u8; 64]) {
        let node = &mut self.nodes[n];
        let prod = node.r32(port_reg(p, SEND_PROD));
        let o = send_slot(p, prod) as usize;
        node.sram[o..o + 64].copy_from_slice(b);
        node.w32(port_reg(p, SEND_PROD), prod + 1);
    }

    fn events(&mut self, n: usize, p: usize) -> Vec<Event> {
        let mut out = Vec::new();
        let node = &mut self.nodes[n];
        let bus = u64::from_le_bytes(
            node.sram[port_reg(p, EVQ_BUS) as usize..port_reg(p, EVQ_BUS) as usize + 8]
                .try_into()
                .unwrap(),
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

    fn stat(&self, n: usize, s: Stat) -> u64 {
        self.nodes[n].mcp.stat(s)
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
    let mut outstanding = 0;
    let ok = b.run_until(2_000_000, |b| {
        // Keep receive buffers and sends going, within the token counts.
        while next < sizes.len() && outstanding < 8 {
            let len = sizes[next];
            let class = nic_abi::size_class_for(len as u64);
            let rv = b.alloc(1, 2, 1u64 << class);
            b.post(1, 2, provide(rv, class, prio, next as u64));
            b.post(0, 1, send(bufs[next], len, 1, 2, prio, next as u64));
            next += 1;
            outstanding += 1;
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

#[test]
fn init_refuses_bad_magic_and_config() {
    let mut sram = vec![0u8; SRAM];
    let mut mcp = Box::new(Mcp::new());
    assert_eq!(mcp.init(&mut SliceHw::new(&mut sram)), Err(crate::InitError::BadMagic));
    let st = u32::from_le_bytes(sram[reg(regs::FW_STATUS) as usize..][..4].try_into().unwrap());
    assert_eq!(st, regs::FW_HALTED);
    let mut b = Bench::new(1);
    b.nodes[0].w32(reg(regs::NODE_ID), 5);
    let mut mcp = Box::new(Mcp::new());
    assert_eq!(mcp.init(&mut b.nodes[0].hw()), Err(crate::InitError::BadConfig("NODE_ID")));
}

#[test]
fn messages_of_every_size_arrive_intact_in_order() {
    let mut b = Bench::new(2);
    transfer(
        &mut b,
        &[0, 1, 4, 16, 17, 100, 4096, 4097, 8192, 65536, 100_000, 1 << 20],
        Priority::Low,
    );
    assert_eq!(b.stat(0, Stat::Retransmits), 0);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 12);
}

#[test]
fn multi_packet_message_is_fragmented_at_the_mtu() {
    let mut b = Bench::new(2);
    transfer(&mut b, &[3 * 4096 + 10], Priority::High);
    let data: Vec<&Header> =
        b.log.iter().filter(|h| h.ptype == nic_abi::packet::PacketType::Data).collect();
    assert_eq!(data.len(), 4);
    assert_eq!(data.iter().map(|h| h.offset).collect::<Vec<_>>(), [0, 4096, 8192, 12288]);
    assert_eq!(data.iter().map(|h| h.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(
        data[0].has(nic_abi::packet::flags::FIRST) && data[3].has(nic_abi::packet::flags::LAST)
    );
}

#[test]
fn lost_packets_are_resent_go_back_n() {
    let mut b = Bench::new(2);
    b.faults.drop_every = 7;
    let sizes: Vec<u32> = (0..40).map(|k| 1000 + k * 997).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(0, Stat::Retransmits) > 0);
}

#[test]
fn corrupted_packets_are_caught_by_crc_and_resent() {
    let mut b = Bench::new(2);
    b.faults.corrupt_every = 5;
    let sizes: Vec<u32> = (0..30).map(|k| 500 + k * 1500).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(1, Stat::CrcErrors) + b.stat(0, Stat::CrcErrors) > 0);
}

#[test]
fn duplicate_packet_is_acked_and_dropped() {
    let mut b = Bench::new(2);
    b.faults.dup_every = 3;
    let sizes: Vec<u32> = (0..30).map(|k| 100 + k * 800).collect();
    transfer(&mut b, &sizes, Priority::High);
    assert!(b.stat(1, Stat::Duplicates) > 0);
}

#[test]
fn send_without_receive_buffer_times_out_then_resume_lets_traffic_flow() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 64);
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 1));
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 2));
    let mut evs = Vec::new();
    let start = b.rtc;
    assert!(b.run_until(200_000, |b| {
        evs.extend(b.events(0, 1));
        evs.len() == 2
    }));
    let elapsed = b.rtc - start;
    assert_eq!((evs[0].tag, evs[0].status), (1, SendStatus::TimedOut as u8));
    assert_eq!((evs[1].tag, evs[1].status), (2, SendStatus::Dropped as u8));
    assert!(elapsed >= 50_000, "timed out after the send timeout, not before ({elapsed})");
    assert!(elapsed < 60_000, "and not much later ({elapsed})");
    // Suspended: a new send is dropped at once.
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 3));
    b.run(20);
    let e = b.events(0, 1);
    assert_eq!((e[0].tag, e[0].status), (3, SendStatus::Dropped as u8));
    // Resume, give a buffer: traffic flows again.
    b.post(0, 1, Descriptor { kind: DescKind::Resume, ..send(0, 0, 1, 2, Priority::Low, 0) });
    let rv = b.alloc(1, 2, 64);
    b.post(1, 2, provide(rv, 6, Priority::Low, 9));
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 4));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 9));
    b.run(100);
    let e = b.events(0, 1);
    assert_eq!((e[0].tag, e[0].status), (4, SendStatus::Ok as u8));
}

#[test]
fn send_to_closed_port_reports_target_port_closed() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    let v = b.alloc(0, 1, 10);
    b.post(0, 1, send(v, 10, 1, 5, Priority::Low, 7));
    let mut evs = Vec::new();
    assert!(b.run_until(10_000, |b| {
        evs.extend(b.events(0, 1));
        !evs.is_empty()
    }));
    assert_eq!(
        (evs[0].kind, evs[0].status, evs[0].tag),
        (EventKind::Sent, SendStatus::TargetPortClosed as u8, 7)
    );
    // Once open, the same stream works.
    b.open(1, 5);
    let rv = b.alloc(1, 5, 16);
    b.post(1, 5, provide(rv, 4, Priority::Low, 1));
    b.post(0, 1, send(v, 10, 1, 5, Priority::Low, 8));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 5));
        !got.is_empty()
    }));
    assert_eq!(got[0].kind, EventKind::Received);
}

#[test]
fn each_bad_descriptor_gets_its_error_event_and_the_nic_carries_on() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 4096);
    let good = send(v, 100, 1, 2, Priority::Low, 0);
    let gone = b.alloc(0, 1, 4096);
    b.deregister(0, 1, gone, 4096);
    let mut cases: Vec<([u8; 64], ErrorCause)> = Vec::new();
    let enc = |d: Descriptor| {
        let mut x = [0u8; 64];
        d.encode(&mut x);
        x
    };
    let mut raw = enc(good);
    raw[0] = 99;
    cases.push((raw, ErrorCause::BadKind));
    let mut raw = enc(good);
    raw[1] = 7;
    cases.push((raw, ErrorCause::BadPriority));
    let mut raw = enc(good);
    raw[6] = 1;
    cases.push((raw, ErrorCause::BadDescriptor));
    cases.push((enc(Descriptor { target_port: 8, ..good }), ErrorCause::BadPort));
    cases.push((enc(Descriptor { target_node: 2, ..good }), ErrorCause::BadNode));
    cases.push((enc(Descriptor { size_class: 40, ..good }), ErrorCause::BadSizeClass));
    cases.push((enc(Descriptor { size_class: 3, ..good }), ErrorCause::BadLength));
    cases.push((enc(Descriptor { local: v + 1_000_000, ..good }), ErrorCause::NotRegistered));
    cases.push((enc(Descriptor { local: gone, ..good }), ErrorCause::NotRegistered));
    cases.push((enc(Descriptor { local: v + 4000, ..good }), ErrorCause::NotRegistered));
    cases.push((
        enc(Descriptor { len: 8, ..provide(v, 4, Priority::Low, 0) }),
        ErrorCause::BadLength,
    ));
    cases.push((enc(provide(v, 13, Priority::Low, 0)), ErrorCause::NotRegistered));
    for (k, (raw, _)) in cases.iter_mut().enumerate() {
        raw[32..40].copy_from_slice(&(100 + k as u64).to_le_bytes());
        b.post_raw(0, 1, raw);
        b.run(5);
    }
    let evs = b.events(0, 1);
    assert_eq!(evs.len(), cases.len());
    for (k, (e, (_, cause))) in evs.iter().zip(cases.iter()).enumerate() {
        assert_eq!(e.kind, EventKind::Error, "case {k}");
        assert_eq!(e.status, *cause as u8, "case {k}");
        assert_eq!(e.tag, 100 + k as u64, "case {k}");
    }
    assert_eq!(b.stat(0, Stat::Errors), cases.len() as u64);
    // And a good send still goes through.
    let rv = b.alloc(1, 2, 128);
    b.post(1, 2, provide(rv, 7, Priority::Low, 5));
    b.post(0, 1, good);
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].kind, got[0].len), (EventKind::Received, 100));
}

#[test]
fn message_lands_in_buffer_of_its_exact_class_and_priority() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let big = b.alloc(1, 2, 1 << 10);
    let hi = b.alloc(1, 2, 1 << 6);
    let lo = b.alloc(1, 2, 1 << 6);
    b.post(1, 2, provide(big, 10, Priority::Low, 1));
    b.post(1, 2, provide(hi, 6, Priority::High, 2));
    b.post(1, 2, provide(lo, 6, Priority::Low, 3));
    let v = b.alloc(0, 1, 64);
    b.post(0, 1, send(v, 40, 1, 2, Priority::Low, 0));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].tag, got[0].addr), (3, lo));
}

#[test]
fn put_writes_remote_memory_and_get_reads_it() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 10_000u32;
    let src = b.alloc(0, 1, len as u64);
    let dst = b.alloc(1, 2, len as u64);
    b.write_host(0, src, &pattern(3, len as usize));
    b.post(
        0,
        1,
        Descriptor { kind: DescKind::Put, remote: dst, ..send(src, len, 1, 2, Priority::Low, 11) },
    );
    let mut evs = Vec::new();
    assert!(b.run_until(10_000, |b| {
        evs.extend(b.events(0, 1));
        !evs.is_empty()
    }));
    assert_eq!((evs[0].kind, evs[0].status, evs[0].tag), (EventKind::PutDone, 0, 11));
    assert_eq!(b.read_host(1, dst, len as usize), pattern(3, len as usize));
    assert!(b.events(1, 2).is_empty(), "a put completes at the sender only");
    // Get it back into a fresh buffer.
    let back = b.alloc(0, 1, len as u64);
    b.post(
        0,
        1,
        Descriptor {
            kind: DescKind::Get,
            remote: dst,
            ..send(back, len, 1, 2, Priority::High, 12)
        },
    );
    let mut evs = Vec::new();
    assert!(b.run_until(10_000, |b| {
        evs.extend(b.events(0, 1));
        !evs.is_empty()
    }));
    assert_eq!((evs[0].kind, evs[0].status, evs[0].tag), (EventKind::GetDone, 0, 12));
    assert_eq!(b.read_host(0, back, len as usize), pattern(3, len as usize));
    // Unregistered remote range: refused with RemoteAccess.
    b.post(
        0,
        1,
        Descriptor {
            kind: DescKind::Put,
            remote: dst + (1 << 20),
            ..send(src, 8, 1, 2, Priority::Low, 13)
        },
    );
    let mut evs = Vec::new();
    assert!(b.run_until(10_000, |b| {
        evs.extend(b.events(0, 1));
        !evs.is_empty()
    }));
    assert_eq!((evs[0].status, evs[0].tag), (SendStatus::RemoteAccess as u8, 13));
}

#[test]
fn rotation_serves_streams_one_packet_per_turn() {
    // Node 0 sends a long message to node 1 and a long one to node 2: the
    // connection queue alternates their packets.
    let mut b = Bench::new(3);
    b.open(0, 1);
    b.open(1, 1);
    b.open(2, 1);
    let len = 8 * 4096;
    let v = b.alloc(0, 1, len as u64);
    for d in 1..3 {
        let rv = b.alloc(d, 1, len as u64);
        b.post(d, 1, provide(rv, 15, Priority::Low, 0));
    }
    b.post(0, 1, send(v, len, 1, 1, Priority::Low, 1));
    b.post(0, 1, send(v, len, 2, 1, Priority::Low, 2));
    b.run(200);
    let order: Vec<u16> = b
        .log
        .iter()
        .filter(|h| h.ptype == nic_abi::packet::PacketType::Data && h.src_node == 0)
        .map(|h| h.dst_node)
        .collect();
    assert_eq!(order.len(), 16);
    let alternations = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(alternations >= 13, "one packet per turn: {order:?}");
}

#[test]
fn acks_ride_on_reverse_traffic() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    let v0 = b.alloc(0, 1, 64);
    let v1 = b.alloc(1, 1, 64);
    for k in 0..20 {
        let r0 = b.alloc(0, 1, 64);
        let r1 = b.alloc(1, 1, 64);
        b.post(0, 1, provide(r0, 6, Priority::Low, k));
        b.post(1, 1, provide(r1, 6, Priority::Low, k));
    }
    for k in 0..20 {
        b.post(0, 1, send(v0, 64, 1, 1, Priority::Low, k));
        b.post(1, 1, send(v1, 64, 0, 1, Priority::Low, k));
    }
    b.run(3000);
    let piggy = b
        .log
        .iter()
        .filter(|h| {
            h.ptype == nic_abi::packet::PacketType::Data && h.has(nic_abi::packet::flags::ACK_VALID)
        })
        .count();
    assert!(piggy > 0);
    assert_eq!(b.stat(0, Stat::MessagesSent) + b.stat(1, Stat::MessagesSent), 40);
}

#[test]
fn closing_a_port_drops_its_state_and_the_nic_carries_on() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 1 << 16);
    b.post(0, 1, send(v, 1 << 16, 1, 2, Priority::Low, 1)); // no buffer: retrying
    b.run(50);
    b.close(0, 1);
    b.open(0, 1);
    transfer_again(&mut b);
}

fn transfer_again(b: &mut Bench) {
    let v = b.alloc(0, 1, 100);
    let rv = b.alloc(1, 2, 128);
    b.post(1, 2, provide(rv, 7, Priority::Low, 42));
    b.post(0, 1, send(v, 100, 1, 2, Priority::Low, 2));
    let mut got = Vec::new();
    assert!(b.run_until(20_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 42));
}

#[test]
fn garbage_from_the_wire_is_counted_and_dropped() {
    let mut b = Bench::new(2);
    b.open(1, 2);
    let mut junk = vec![0u8; HEADER_LEN + 10];
    for (i, x) in junk.iter_mut().enumerate() {
        *x = (i * 37) as u8;
    }
    let crc = crc32fast::hash(&junk);
    junk[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    for _ in 0..100 {
        b.nodes[1].inbox.push_back(junk.clone());
        b.nodes[1].inbox.push_back(vec![1, 2, 3]);
    }
    b.run(100);
    assert_eq!(b.stat(1, Stat::Drops), 200);
    // Buffers all came back: normal traffic still flows.
    b.open(0, 1);
    transfer_again(&mut b);
}

#[test]
fn state_machines_record_transitions_when_traced() {
    let mut b = Bench::new(2);
    b.nodes[0].w32(reg(regs::TRACE_ENABLE), 1);
    transfer(&mut b, &[5000], Priority::Low);
    let n = b.nodes[0].r32(reg(regs::TRACE_PROD));
    assert!(n > 5);
    let recs: Vec<_> = (0..n.min(map::TRACE_LEN))
        .map(|i| {
            let o = (map::TRACE + i * 16) as usize;
            nic_abi::trace::TraceRecord::decode(&b.nodes[0].sram[o..o + 16]).unwrap()
        })
        .collect();
    assert!(recs
        .iter()
        .any(|r| r.machine == nic_abi::trace::Machine::Sdma && r.to == SdmaState::FILL_WAIT));
    assert!(recs.iter().any(|r| r.machine == nic_abi::trace::Machine::Send));
    assert_eq!(b.nodes[1].r32(reg(regs::TRACE_PROD)), 0, "off unless enabled");
}

#[test]
fn mcp_fits_the_firmware_budget() {
    // The bare-metal image (text + data + bss) must stay under 128 KiB;
    // the MCP's state is most of its bss.
    let size = core::mem::size_of::<Mcp>();
    assert!(size < 80 * 1024, "Mcp is {size} bytes");
}

#[test]
fn acks_holding_buffers_do_not_wedge_the_scheduler() {
    // Many peers sending to node 0 while node 0 sends to all of them: acks
    // and data compete for transmit buffers; every poll must end.
    let mut b = Bench::new(6);
    for n in 0..6 {
        b.open(n, 1);
    }
    let mut want = 0;
    for n in 0..6 {
        for d in 0..6 {
            if n == d {
                continue;
            }
            for k in 0..4 {
                let rv = b.alloc(d, 1, 8192);
                b.post(d, 1, provide(rv, 13, Priority::Low, k));
                let v = b.alloc(n, 1, 8192);
                b.post(n, 1, send(v, 5000, d as u16, 1, Priority::Low, k));
                want += 1;
            }
        }
    }
    let mut got = 0;
    assert!(b.run_until(100_000, |b| {
        for d in 0..6 {
            got += b.events(d, 1).iter().filter(|e| e.kind == EventKind::Received).count();
        }
        got == want
    }));
}

impl Bench {
    /// Reset node n's NIC CPU: a fresh MCP (as after a reflash); its ports
    /// close.
    fn reboot(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        for p in 0..8 {
            node.w32(port_reg(p, STATE), STATE_CLOSED);
        }
        node.inbox.clear();
        let boots = node.r32(reg(regs::BOOT_COUNT));
        node.w32(reg(regs::BOOT_COUNT), boots + 1);
        let mut mcp = Box::new(Mcp::new());
        mcp.init(&mut SliceHw::new(&mut node.sram)).unwrap();
        node.mcp = mcp;
    }

    fn exchange(&mut self, from: usize, to: usize, tag: u64) -> Vec<Event> {
        let v = self.alloc(from, 1, 100);
        let rv = self.alloc(to, 2, 128);
        self.post(to, 2, provide(rv, 7, Priority::Low, tag));
        self.post(from, 1, send(v, 100, to as u16, 2, Priority::Low, tag));
        let mut got = Vec::new();
        assert!(
            self.run_until(3_000, |b| {
                got.extend(b.events(to, 2));
                !got.is_empty()
            }),
            "message {tag} from {from} to {to} not delivered"
        );
        got
    }
}

#[test]
fn peers_recover_quickly_when_a_nic_is_reset() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    for k in 0..5 {
        b.exchange(0, 1, k);
    }
    // The receiver forgets every stream: the sender resynchronises.
    b.reboot(1);
    b.open(1, 2);
    let got = b.exchange(0, 1, 10);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 10));
    // The sender forgets: its new streams start with SYNC and are taken.
    b.reboot(0);
    b.open(0, 1);
    for k in 20..23 {
        let got = b.exchange(0, 1, k);
        assert_eq!(got[0].tag, k);
    }
}

#[test]
fn a_duplicated_sync_packet_does_not_deliver_twice() {
    let mut b = Bench::new(2);
    b.faults.dup_every = 1; // every packet arrives twice
    transfer(&mut b, &[10, 20, 5000, 30], Priority::Low);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 4);
}

impl Bench {
    fn set_flow(&mut self, n: usize, i: u32, key: u32, idt: u32) {
        let e = nic_abi::flows::FlowEntry { valid: true, key, idt, ..Default::default() };
        let o = map::flow_entry(i) as usize;
        e.encode(&mut self.nodes[n].sram[o..o + 32]);
        let g = self.nodes[n].r32(reg(regs::FLOW_GEN));
        self.nodes[n].w32(reg(regs::FLOW_GEN), g + 1);
    }

    fn flow(&self, n: usize, i: u32) -> nic_abi::flows::FlowEntry {
        let o = map::flow_entry(i) as usize;
        nic_abi::flows::FlowEntry::decode(&self.nodes[n].sram[o..o + 32])
    }
}

#[test]
fn flows_are_paced_by_their_idt_in_proportion() {
    // Node 0 streams to node 1 (IDT 20 ticks) and node 2 (IDT 30 ticks).
    let mut b = Bench::new(3);
    b.nodes[0].w32(reg(regs::DISPATCH_TRACE_ENABLE), 1);
    for n in 0..3 {
        b.open(n, 1);
    }
    let ka = nic_abi::flows::flow_key(1, 1, 1, Priority::Low);
    let kb = nic_abi::flows::flow_key(1, 2, 1, Priority::Low);
    b.set_flow(0, 0, ka, 20);
    b.set_flow(0, 1, kb, 30);
    let len = 16 * 4096;
    let v = b.alloc(0, 1, len as u64);
    for d in 1..3 {
        for k in 0..4 {
            let rv = b.alloc(d, 1, len as u64);
            b.post(d, 1, provide(rv, 16, Priority::Low, k));
        }
    }
    for k in 0..4 {
        b.post(0, 1, send(v, len, 1, 1, Priority::Low, k));
        b.post(0, 1, send(v, len, 2, 1, Priority::Low, k));
    }
    b.run(1200);
    let (fa, fb) = (b.flow(0, 0), b.flow(0, 1));
    // Over 1200 ticks: about 60 and 40 packets, never faster than the IDT.
    assert!((58..=61).contains(&fa.packets), "flow A sent {}", fa.packets);
    assert!((38..=41).contains(&fb.packets), "flow B sent {}", fb.packets);
    assert_eq!(fa.bytes, fa.packets * 4096);
    // The dispatch trace shows the spacing.
    let n = b.nodes[0].r32(reg(regs::DISPATCH_TRACE_PROD));
    let recs: Vec<_> = (0..n)
        .map(|i| {
            let o = (map::DISPATCH_TRACE + i * 16) as usize;
            nic_abi::flows::DispatchRecord::decode(&b.nodes[0].sram[o..o + 16]).unwrap()
        })
        .collect();
    let a_times: Vec<u64> = recs.iter().filter(|r| r.key == ka).map(|r| r.rtc).collect();
    assert!(a_times.windows(2).all(|w| w[1] - w[0] >= 20), "{a_times:?}");
    let b_times: Vec<u64> = recs.iter().filter(|r| r.key == kb).map(|r| r.rtc).collect();
    assert!(b_times.windows(2).all(|w| w[1] - w[0] >= 30), "{b_times:?}");
    // Without flows the same traffic is not paced (rotation, as fast as it goes).
    let mut c = Bench::new(3);
    for n in 0..3 {
        c.open(n, 1);
    }
    let v = c.alloc(0, 1, len as u64);
    for d in 1..3 {
        let rv = c.alloc(d, 1, len as u64);
        c.post(d, 1, provide(rv, 16, Priority::Low, 0));
        c.post(0, 1, send(v, len, d as u16, 1, Priority::Low, 0));
    }
    c.run(200);
    assert_eq!(c.stat(0, Stat::MessagesSent), 2);
}

#[test]
fn a_port_closing_in_the_middle_of_a_message_fails_that_send() {
    // A 20-packet message; the receiver's port closes after a few packets
    // arrived: the send completes TargetPortClosed (no endless resends),
    // and once the port is open again the stream carries on.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 20 * 4096;
    let v = b.alloc(0, 1, len as u64);
    let rv = b.alloc(1, 2, 1 << 17);
    b.post(1, 2, provide(rv, 17, Priority::Low, 1));
    b.post(0, 1, send(v, len, 1, 2, Priority::Low, 7));
    // Wait until the receiver took a few packets of the message.
    assert!(b.run_until(1000, |b| { b.nodes[1].mcp.recv.max_expected() >= 4 }));
    b.close(1, 2);
    let mut evs = Vec::new();
    assert!(
        b.run_until(20_000, |b| {
            evs.extend(b.events(0, 1));
            !evs.is_empty()
        }),
        "the send never completed"
    );
    assert_eq!((evs[0].tag, evs[0].status), (7, SendStatus::TargetPortClosed as u8));
    // The buffer the message was filling went with the port: none leaked.
    assert_eq!(b.nodes[1].mcp.shared.slots.available(), crate::records::MAX_SLOTS);
    b.open(1, 2);
    let got = b.exchange(0, 1, 9);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 9));
}
