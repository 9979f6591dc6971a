//! Test support for the live backend: a cluster directory in a temporary
//! place with each node's register block written as a reset device would,
//! and `FakeFirmware`, a thread standing for the device process + MCP of
//! every node at once. It maps the same `sram` and `host` files as the
//! host side (through `MappedFile`, as the device process would), follows
//! the port handshake, takes descriptors from the send rings, translates
//! through the page tables in SRAM, delivers sends to any node's port of
//! the cluster in order (a send finding no receive buffer waits, as the
//! NIC's retries would make it), and writes events into host memory
//! honouring EVQ_CONSUMED, body first and `seq` last (Release).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use host_driver::cluster::{ClusterBackend, ClusterDir, ClusterManifest};
use host_driver::nic_abi::desc::{DescKind, Descriptor, DESC_SIZE};
use host_driver::nic_abi::event::{
    ErrorCause, Event, EventKind, SendStatus, EVENT_SEQ_OFFSET, EVENT_SIZE, INLINE_MAX,
};
use host_driver::nic_abi::map::{self, SEND_RING_LEN};
use host_driver::nic_abi::page_table::{self, page_pieces, Pte, PTE_SIZE};
use host_driver::nic_abi::port::{self as pcb, port_reg, send_slot};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::{NUM_PORTS, PAGE_SIZE};
use host_driver::MappedFile;

pub const SRAM: u64 = map::SRAM_MIN as u64;
pub const HOST: u64 = 16 << 20; // 2 MiB per port

/// A cluster directory removed on drop.
pub struct TempCluster {
    pub dir: ClusterDir,
}

impl TempCluster {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn path_str(&self) -> String {
        self.dir.path().to_string_lossy().into_owned()
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

/// A fresh directory name under the temp dir for test `tag`.
pub fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join("host-driver-tests").join(format!("{tag}-{}-{n}", std::process::id()))
}

pub struct Regs {
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub mtu: u32,
    pub fw_status: u32,
}

impl Default for Regs {
    fn default() -> Regs {
        Regs { send_tokens: 8, recv_tokens: 8, mtu: 4096, fw_status: regs::FW_RUNNING }
    }
}

/// A cluster of `nodes` with every register block written.
pub fn cluster(tag: &str, nodes: u32, r: Regs) -> TempCluster {
    let path = temp_path(tag);
    let m = ClusterManifest::new(tag, ClusterBackend::Live, nodes, "test", SRAM, HOST);
    let dir = ClusterDir::create(&path, &m).expect("create cluster");
    for node in 0..nodes {
        let s = MappedFile::open(&dir.sram_path(node)).unwrap();
        let w = |off: u32, v: u32| assert!(s.store_u32(reg(off) as u64, v));
        w(regs::MAGIC, regs::MAGIC_VALUE);
        w(regs::ABI_VERSION, regs::ABI_VERSION_VALUE);
        w(regs::NODE_ID, node);
        w(regs::NUM_NODES, nodes);
        assert!(s.store_u64(reg(regs::RTC_HZ) as u64, 1_000_000_000));
        w(regs::SRAM_SIZE, SRAM as u32);
        w(regs::MTU, r.mtu);
        w(regs::SEND_TOKENS, r.send_tokens);
        w(regs::RECV_TOKENS, r.recv_tokens);
        w(regs::FW_STATUS, r.fw_status);
        w(regs::LINK_STATE, 1);
    }
    TempCluster { dir }
}

#[derive(Default, Clone)]
struct FakePort {
    open: bool,
    generation: u32,
    cons: u32,
    produced: u32,
    evq_bus: u64,
    evq_len: u32,
    provided: Vec<Descriptor>,
    /// Sends taken but not yet delivered (in order).
    sends: VecDeque<Descriptor>,
    pending: VecDeque<Event>,
}

struct Node {
    sram: MappedFile,
    host: MappedFile,
    ports: Vec<FakePort>,
}

/// Knobs a test may turn while the fake runs.
#[derive(Default)]
pub struct Knobs {
    /// Flip one byte of the payload of every delivered message whose
    /// (message counter) equals this + 1 (0 = never).
    pub corrupt_msg: AtomicU64,
    /// Messages delivered so far.
    pub delivered: AtomicU64,
    /// Doorbells seen (sum over nodes of HOST_DOORBELL at the last look).
    pub doorbells: AtomicU64,
}

pub struct FakeFirmware {
    stop: Arc<AtomicBool>,
    pub knobs: Arc<Knobs>,
    thread: Option<JoinHandle<()>>,
}

impl FakeFirmware {
    pub fn start(dir: &ClusterDir) -> FakeFirmware {
        let nodes: Vec<Node> = (0..dir.nodes())
            .map(|n| Node {
                sram: MappedFile::open(&dir.sram_path(n)).unwrap(),
                host: MappedFile::open(&dir.host_path(n)).unwrap(),
                ports: vec![FakePort::default(); NUM_PORTS],
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let knobs = Arc::new(Knobs::default());
        let (s, k) = (stop.clone(), knobs.clone());
        let thread = std::thread::spawn(move || {
            let mut fw = Fw { nodes, knobs: k };
            while !s.load(Ordering::Relaxed) {
                if !fw.step() {
                    std::thread::yield_now();
                }
            }
        });
        FakeFirmware { stop, knobs, thread: Some(thread) }
    }
}

impl Drop for FakeFirmware {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Fw {
    nodes: Vec<Node>,
    knobs: Arc<Knobs>,
}

fn u32_at(m: &MappedFile, off: u32) -> u32 {
    m.load_u32(off as u64).unwrap()
}

fn set_u32(m: &MappedFile, off: u32, v: u32) {
    assert!(m.store_u32(off as u64, v));
}

impl Fw {
    /// One pass over every node; true if anything happened.
    fn step(&mut self) -> bool {
        let mut busy = false;
        let mut bells = 0;
        for n in 0..self.nodes.len() {
            bells += u32_at(&self.nodes[n].sram, reg(regs::HOST_DOORBELL)) as u64;
            for p in 0..NUM_PORTS {
                busy |= self.handshake(n, p);
                busy |= self.take_descriptors(n, p);
            }
        }
        self.knobs.doorbells.store(bells, Ordering::Relaxed);
        for n in 0..self.nodes.len() {
            for p in 0..NUM_PORTS {
                busy |= self.deliver(n, p);
            }
        }
        for n in 0..self.nodes.len() {
            for p in 0..NUM_PORTS {
                busy |= self.flush(n, p);
            }
        }
        busy
    }

    fn handshake(&mut self, n: usize, p: usize) -> bool {
        let node = &mut self.nodes[n];
        let s = &node.sram;
        let state = u32_at(s, port_reg(p, pcb::STATE));
        let gen = u32_at(s, port_reg(p, pcb::GENERATION));
        let fp = &mut node.ports[p];
        if state == pcb::STATE_OPEN && (!fp.open || fp.generation != gen) {
            *fp = FakePort {
                open: true,
                generation: gen,
                evq_bus: s.load_u64(port_reg(p, pcb::EVQ_BUS) as u64).unwrap(),
                evq_len: u32_at(s, port_reg(p, pcb::EVQ_LEN)),
                ..FakePort::default()
            };
            set_u32(s, port_reg(p, pcb::SEND_CONS), 0);
            set_u32(s, port_reg(p, pcb::EVQ_PRODUCED), 0);
            set_u32(s, port_reg(p, pcb::FW_STATE), pcb::STATE_OPEN);
            set_u32(s, port_reg(p, pcb::FW_GENERATION), gen);
            let mut e = Event::empty(EventKind::PortOpened);
            e.port = p as u8;
            fp.pending.push_back(e);
            true
        } else if state != pcb::STATE_OPEN && fp.open {
            *fp = FakePort::default();
            set_u32(s, port_reg(p, pcb::FW_STATE), pcb::STATE_CLOSED);
            true
        } else {
            false
        }
    }

    fn take_descriptors(&mut self, n: usize, p: usize) -> bool {
        if !self.nodes[n].ports[p].open {
            return false;
        }
        let prod = u32_at(&self.nodes[n].sram, port_reg(p, pcb::SEND_PROD));
        let mut any = false;
        while self.nodes[n].ports[p].cons != prod {
            let cons = self.nodes[n].ports[p].cons;
            assert!(prod.wrapping_sub(cons) <= SEND_RING_LEN, "driver overran the send ring");
            let mut b = [0u8; DESC_SIZE as usize];
            assert!(self.nodes[n].sram.read(send_slot(p, cons) as u64, &mut b));
            self.nodes[n].ports[p].cons = cons.wrapping_add(1);
            set_u32(&self.nodes[n].sram, port_reg(p, pcb::SEND_CONS), cons.wrapping_add(1));
            self.execute(n, p, &b);
            any = true;
        }
        any
    }

    fn translate(&self, n: usize, port: usize, vaddr: u64, len: u64) -> Option<Vec<(u64, u64)>> {
        let s = &self.nodes[n].sram;
        let pte = |i: u32| {
            let mut b = [0u8; PTE_SIZE as usize];
            s.read((map::page_table(port) + i * PTE_SIZE) as u64, &mut b);
            Pte::decode(&b)
        };
        let mut out = Vec::new();
        for (va, k) in page_pieces(vaddr, len) {
            let bus_page = page_table::lookup(pte, va / PAGE_SIZE)?;
            out.push((bus_page * PAGE_SIZE + va % PAGE_SIZE, k));
        }
        Some(out)
    }

    fn error(&mut self, n: usize, p: usize, b: &[u8], cause: ErrorCause) {
        let mut e = Event::empty(EventKind::Error);
        e.status = cause as u8;
        e.tag = Descriptor::raw_tag(b);
        e.desc_kind = Descriptor::raw_kind(b);
        self.nodes[n].ports[p].pending.push_back(e);
    }

    fn complete(&mut self, n: usize, p: usize, d: &Descriptor, status: SendStatus) {
        let mut e = Event::empty(EventKind::Sent);
        e.status = status as u8;
        e.tag = d.tag;
        e.addr = d.local;
        e.len = d.len;
        e.node = d.target_node;
        e.port = d.target_port;
        e.priority = d.priority;
        self.nodes[n].ports[p].pending.push_back(e);
    }

    fn execute(&mut self, n: usize, p: usize, b: &[u8]) {
        let d = match Descriptor::decode(b) {
            Ok(d) => d,
            Err(cause) => return self.error(n, p, b, cause),
        };
        match d.kind {
            DescKind::Provide | DescKind::Send => {
                match self.translate(n, p, d.local, d.len as u64) {
                    Some(_) if d.len > 0 => {}
                    Some(_) => return self.error(n, p, b, ErrorCause::BadLength),
                    None => return self.error(n, p, b, ErrorCause::NotRegistered),
                }
                if d.kind == DescKind::Provide {
                    self.nodes[n].ports[p].provided.push(d);
                } else if d.target_node as usize >= self.nodes.len()
                    || d.target_port as usize >= NUM_PORTS
                {
                    self.error(n, p, b, ErrorCause::BadNode);
                } else {
                    self.nodes[n].ports[p].sends.push_back(d);
                }
            }
            DescKind::Resume => {}
            DescKind::Alarm => {
                let mut e = Event::empty(EventKind::Alarm);
                e.tag = d.tag;
                self.nodes[n].ports[p].pending.push_back(e);
            }
            DescKind::Put | DescKind::Get => self.error(n, p, b, ErrorCause::BadKind),
        }
    }

    /// Deliver the sends queued at (n, p), in order, while the target has
    /// a buffer of the class and priority.
    fn deliver(&mut self, n: usize, p: usize) -> bool {
        let mut any = false;
        while let Some(d) = self.nodes[n].ports[p].sends.front().copied() {
            let (tn, tp) = (d.target_node as usize, d.target_port as usize);
            if !self.nodes[tn].ports[tp].open {
                self.nodes[n].ports[p].sends.pop_front();
                self.complete(n, p, &d, SendStatus::TargetPortClosed);
                any = true;
                continue;
            }
            let Some(i) = self.nodes[tn].ports[tp]
                .provided
                .iter()
                .position(|r| r.size_class == d.size_class && r.priority == d.priority)
            else {
                return any; // no buffer yet: retried at the next step
            };
            self.nodes[n].ports[p].sends.pop_front();
            let r = self.nodes[tn].ports[tp].provided.remove(i);
            let from = self.translate(n, p, d.local, d.len as u64).unwrap_or_default();
            let mut data = Vec::with_capacity(d.len as usize);
            for (bus, k) in from {
                let mut chunk = vec![0u8; k as usize];
                self.nodes[n].host.read(bus, &mut chunk);
                data.extend_from_slice(&chunk);
            }
            let count = self.knobs.delivered.fetch_add(1, Ordering::Relaxed) + 1;
            if self.knobs.corrupt_msg.load(Ordering::Relaxed) == count {
                let last = data.len() - 1;
                data[last] ^= 0x5A;
            }
            let to = self.translate(tn, tp, r.local, d.len as u64).unwrap_or_default();
            let mut at = 0usize;
            for (bus, k) in to {
                self.nodes[tn].host.write(bus, &data[at..at + k as usize]);
                at += k as usize;
            }
            let mut e = Event::empty(EventKind::Received);
            e.node = n as u16;
            e.port = p as u8;
            e.priority = d.priority;
            e.size_class = d.size_class;
            e.len = d.len;
            e.addr = r.local;
            e.tag = r.tag;
            let k = data.len().min(INLINE_MAX);
            e.inline_len = k as u8;
            e.inline[..k].copy_from_slice(&data[..k]);
            self.nodes[tn].ports[tp].pending.push_back(e);
            self.complete(n, p, &d, SendStatus::Ok);
            any = true;
        }
        any
    }

    /// Write pending events while the port's queue has room.
    fn flush(&mut self, n: usize, p: usize) -> bool {
        let node = &mut self.nodes[n];
        let fp = &mut node.ports[p];
        if !fp.open || fp.pending.is_empty() {
            return false;
        }
        let consumed = u32_at(&node.sram, port_reg(p, pcb::EVQ_CONSUMED));
        let mut any = false;
        while let Some(e) = fp.pending.front().copied() {
            if fp.produced.wrapping_sub(consumed) >= fp.evq_len {
                break;
            }
            fp.pending.pop_front();
            let mut e = e;
            e.seq = fp.produced.wrapping_add(1);
            let mut rec = [0u8; EVENT_SIZE as usize];
            e.encode(&mut rec);
            let at = fp.evq_bus + (fp.produced & (fp.evq_len - 1)) as u64 * EVENT_SIZE as u64;
            // Body first, seq last (Release).
            assert!(node.host.write(at, &rec[..EVENT_SEQ_OFFSET as usize]));
            assert!(node.host.store_u32(at + EVENT_SEQ_OFFSET as u64, e.seq));
            fp.produced = fp.produced.wrapping_add(1);
            any = true;
        }
        set_u32(&node.sram, port_reg(p, pcb::EVQ_PRODUCED), fp.produced);
        any
    }
}
