//! One NIC in real time: its DMA engines (`engines`), its RTC register,
//! its reset, and in the live backend its MCP, run natively over the
//! mapped SRAM (`hw::MappedHw`). Under QEMU the MCP is the guest's and
//! this runs only the engines.
//!
//! A step writes the RTC, then alternates MCP poll and engine service
//! while either makes progress (bounded), so a packet can go from the
//! wire to an event in host memory within one step: no thread hand-off
//! inside the cluster.
//!
//! Owned by exactly one worker thread; what others may see of it goes
//! through `NodeShared` (reset requests, a counters snapshot).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::NUM_PORTS;
use nic_cluster_dir::mapped::{self, FileFault};
use nic_cluster_dir::MappedFile;

use super::engines::{RtEngines, Service};
use super::fabric::{Held, RtFabric};
use super::hw::MappedHw;
use super::irq::IrqLine;
use nic_device::device::{reset_sram, DeviceCounters, ResetConfig, Rtc};
use nic_device::firmware::Work;
use nic_device::profile::Profile;

/// Host-written words a qemu node's device watches besides the
/// doorbells (`NodeRt::host_words`).
const HOST_WORDS: usize = 3 + 3 * NUM_PORTS;

/// Their SRAM offsets: the trace switches and `FLOW_GEN`, then each port's
/// `STATE`, `PT_ADDED` and `PT_GEN`. Not `EVQ_CONSUMED`: the host writes
/// it after every event it reads, and the firmware needs it only while a
/// port's event queue is full, when it looks again every `NOBUF_RETRY`
/// (as news, each one ran a whole pass that found nothing).
const HOST_WORD_OFFSETS: [u32; HOST_WORDS] = {
    let mut w = [0; HOST_WORDS];
    w[0] = reg(regs::TRACE_ENABLE);
    w[1] = reg(regs::FLOW_GEN);
    w[2] = reg(regs::DISPATCH_TRACE_ENABLE);
    let mut p = 0;
    while p < NUM_PORTS {
        w[3 + 3 * p] = port_reg(p, pcb::STATE);
        w[4 + 3 * p] = port_reg(p, pcb::PT_ADDED);
        w[5 + 3 * p] = port_reg(p, pcb::PT_GEN);
        p += 1;
    }
    w
};

/// Every port's `STATE` and `GENERATION` (host words of the windows),
/// watched on both backends for `PORT_NEWS` (`NodeRt::port_words`).
const PORT_WORDS: usize = 2 * NUM_PORTS;

/// The engines' completion counters the firmware reads: a poll finds new
/// work from the engines only after one of them moved (`NodeRt::news`).
const ENGINE_NEWS: [u32; 3] = [reg(regs::HDMA_DONE), reg(regs::TXDMA_DONE), reg(regs::RXDONE_PROD)];

/// Most MCP-poll + engine rounds per step of one NIC.
const MAX_ROUNDS: u32 = 8;
/// A sleeping native MCP is polled at least this often (ns), for host
/// writes no doorbell announces (e.g. event queue space freed).
const SAFETY_POLL_NS: u64 = 100_000;

/// What a step or reset needs to know about the cluster.
pub(crate) struct ResetParams {
    pub profile: Profile,
    pub nodes: usize,
    pub send_timeout_ns: u64,
    /// `routes[src][dst]`.
    pub routes: Vec<Vec<Vec<u8>>>,
    /// Bytes of each node's host memory (split into the ports' slices).
    pub host_size: u64,
}

/// A copy of one node's counters, refreshed by its worker now and then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// The DMA engines' counters.
    pub device: DeviceCounters,
    /// MCP polls (live backend).
    pub polls: u64,
    /// The work those polls reported, summed.
    pub work: Work,
    /// Out-of-range SRAM accesses by the native MCP.
    pub hw_faults: u64,
    /// Resets of this NIC since the cluster started (reflash, reset_node).
    pub resets: u64,
    /// Packets lost because they arrived while the NIC was down.
    pub down_drops: u64,
    /// Interrupts raised in the guest (qemu backend).
    pub irqs: u64,
    /// Packets the send-DMA engine lent to the fabric in place, and those
    /// of them reclaimed (copied out) because no receiver had taken them
    /// by this NIC's next step.
    pub lent: u64,
    pub reclaimed: u64,
    /// Times the worker found it had been off the CPU (a stall: more
    /// than `worker::STALL_SLACK` beyond what it asked to sleep), and
    /// the time its native MCP's RTC did not count for them (ns).
    pub stalls: u64,
    pub stalled_ns: u64,
}

/// The part of a node other threads touch.
#[derive(Default)]
pub(crate) struct NodeShared {
    /// Resets asked for (the supervisor bumps it) and done (the worker).
    pub reset_req: AtomicU64,
    pub reset_done: AtomicU64,
    /// Someone (RtCluster::reset_node) wants the supervisor to reset it.
    pub reset_wanted: AtomicBool,
    /// The node stopped for good: a page of one of its files could not
    /// be backed (`NodeRt::stop_for_fault`). It is not reset, and under
    /// QEMU its guest is stopped and not started again.
    pub stopped: AtomicBool,
    pub snapshot: Mutex<NodeCounters>,
}

pub(crate) struct NodeRt {
    pub node: usize,
    pub eng: RtEngines,
    /// The native MCP (live backend); None under QEMU.
    pub mcp: Option<Box<mcp::Mcp>>,
    /// Under QEMU: the guest CPU's interrupt, raised while it waits
    /// (`regs::IRQ_WAIT` odd) when something it would see happens.
    irq: Option<Arc<IrqLine>>,
    /// The `IRQ_WAIT` value last raised for.
    raised_for: u32,
    /// Firmware not running (booting, halted): arriving packets are lost.
    down: bool,
    /// The RTC; its origin is the cluster's start (ns on its clock).
    rtc: Rtc,
    last_doorbell: u32,
    /// Under QEMU: the other host-written words the firmware reads, as
    /// last seen (`host_words`).
    last_host: [u32; HOST_WORDS],
    /// Every port's `STATE` and `GENERATION` as last seen (`port_words`).
    last_ports: [u32; PORT_WORDS],
    /// The doorbells and the engines' completion counters just before
    /// the native MCP's last poll (`doorbell`, `news`).
    seen_bell: u32,
    seen: [u32; ENGINE_NEWS.len()],
    /// The native MCP's last poll found nothing to do and nothing it
    /// would see changed since: as the sim's NIC CPU (and the qemu image,
    /// which watches the same counters), it sleeps until a doorbell, port
    /// news, an engine completion or its next timer.
    asleep: bool,
    /// When it was last polled, and when its next timer falls due (ns).
    last_poll: u64,
    deadline_ns: u64,
    pub reset_seen: u64,
    /// Stopped for good (`stop_for_fault`): each step only loses what
    /// arrives.
    stopped: bool,
    /// `mapped::pages_isolated()` when its files were last looked at.
    isolated_seen: u64,
    c: NodeCounters,
}

/// A file of a node that could not back a page: which of its memories
/// ("SRAM", "host memory") and the fault.
pub(crate) struct NodeFault {
    pub what: &'static str,
    pub fault: FileFault,
}

impl NodeFault {
    /// The one log line of a node stopped for it: the file, the cause,
    /// the room left on its file system.
    pub fn line(&self, node: usize) -> String {
        let f = &self.fault;
        let space = match mapped::fs_space(&f.path) {
            Ok(s) => format!(" ({s})"),
            Err(_) => String::new(),
        };
        format!(
            "node {node}: {} file {}: {}{space}: node {node} stopped (its NIC is marked halted; \
             restart the cluster once the file system has room)",
            self.what,
            f.path.display(),
            f.cause
        )
    }
}

impl NodeRt {
    pub fn new(
        node: usize,
        eng: RtEngines,
        mcp: Option<Box<mcp::Mcp>>,
        irq: Option<Arc<IrqLine>>,
        rtc_hz: u64,
    ) -> NodeRt {
        NodeRt {
            node,
            eng,
            mcp,
            irq,
            raised_for: 0,
            down: true,
            rtc: Rtc::new(rtc_hz),
            last_doorbell: 0,
            last_host: [0; HOST_WORDS],
            last_ports: [0; PORT_WORDS],
            seen_bell: 0,
            seen: [0; ENGINE_NEWS.len()],
            asleep: false,
            last_poll: 0,
            deadline_ns: u64::MAX,
            reset_seen: 0,
            stopped: false,
            isolated_seen: 0,
            c: NodeCounters::default(),
        }
    }

    /// Has a page of one of its files (through any mapping of this
    /// process) been isolated since the last look? Cheap while no page
    /// was (one atomic load).
    pub fn file_fault(&mut self) -> Option<NodeFault> {
        let now = mapped::pages_isolated();
        if now == self.isolated_seen {
            return None;
        }
        self.isolated_seen = now;
        let m = &self.eng.mem;
        if let Some(fault) = m.host.fault() {
            return Some(NodeFault { what: "host memory", fault });
        }
        m.sram.fault().map(|fault| NodeFault { what: "SRAM", fault })
    }

    /// Stopped for good (`stop_for_fault`)?
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Stop the NIC for good: a page of its files could not be backed,
    /// so what it reads or writes there reaches nobody. Its firmware is
    /// marked halted (host programs waiting on it get `NicDown`), its
    /// lent packets are taken back, and from now on each step only loses
    /// what arrives; no reset starts it again.
    pub fn stop_for_fault(&mut self, fab: &RtFabric, held: &mut Held) {
        self.stopped = true;
        self.down = true;
        self.asleep = false;
        self.deadline_ns = u64::MAX;
        self.eng.mem.sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_HALTED);
        self.eng.unlend(fab, held);
    }

    /// Reset the NIC at `now`: firmware status BOOTING first, the engines
    /// stopped, the cfg registers and route table rewritten (MAGIC last),
    /// every port closed on its holder's behalf. The
    /// native MCP (live) is then booted again; under QEMU the supervisor
    /// restarts the guest. `first`: the cluster's initial reset (the
    /// counters do not count it).
    pub fn reset(
        &mut self,
        fab: &RtFabric,
        held: &mut Held,
        p: &ResetParams,
        now: u64,
        first: bool,
    ) -> Result<(), String> {
        self.eng.mem.sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_BOOTING);
        self.down = true;
        self.eng.reset(fab, held);
        let cfg = ResetConfig {
            node: self.node,
            nodes: p.nodes,
            profile: &p.profile,
            send_timeout_ns: p.send_timeout_ns,
            routes: &p.routes[self.node],
            host: nic_abi::page_table::HostLayout::new(p.host_size, false),
        };
        reset_sram(&mut self.eng.mem, &cfg);
        // The RTC runs from power-on (the cluster's start); a NIC reset
        // does not restart it, so that what a new boot derives from it
        // (the MCP's stream sync ids) differs from the last boot's.
        if first {
            self.rtc.origin = now;
        } else {
            self.c.resets += 1;
        }
        let rtc = self.rtc.write(&mut self.eng.mem.sram, now);
        self.eng.mem.sram.store_u32(reg(regs::IRQ_WAIT) as u64, 0);
        self.raised_for = 0;
        self.last_doorbell = self.doorbell();
        self.last_host = self.host_words();
        self.last_ports = self.port_words();
        self.asleep = false;
        self.deadline_ns = u64::MAX;
        self.boot(rtc)
    }

    /// Boot the native MCP, if this NIC runs one.
    fn boot(&mut self, rtc: u64) -> Result<(), String> {
        let Some(m) = self.mcp.as_mut() else { return Ok(()) };
        let mut hw = MappedHw::new(&self.eng.mem.sram, rtc);
        let r = m.init(&mut hw).map_err(|e| format!("MCP init failed: {e:?}"));
        self.c.hw_faults += hw.faults.get();
        self.down = r.is_err();
        r
    }

    /// The register's doorbell plus every port window's (a host process
    /// can write only its own window).
    fn doorbell(&self) -> u32 {
        let sram = &self.eng.mem.sram;
        let bell = |off: u32| sram.load_u32(off as u64).unwrap_or(0);
        (0..NUM_PORTS).fold(bell(reg(regs::HOST_DOORBELL)), |sum, p| {
            sum.wrapping_add(bell(port_reg(p, pcb::DOORBELL)))
        })
    }

    /// The engines' completion counters (`ENGINE_NEWS`). Until one of
    /// them moves (or a doorbell, or `PORT_NEWS`, or a timer falls due),
    /// a poll after an idle one would be idle too.
    #[inline]
    fn news(&self) -> [u32; ENGINE_NEWS.len()] {
        ENGINE_NEWS.map(|off| self.eng.mem.sram.load_u32(off as u64).unwrap_or(0))
    }

    /// Under QEMU, the words besides the doorbells that a host writes
    /// without ringing and the firmware reads: every port's `STATE` and
    /// `PT_ADDED` (a registration, whose first page-table lines the
    /// firmware reads ahead) and `PT_GEN`, the trace switches and
    /// `FLOW_GEN`. Compared word by word:
    /// a change of any one is news.
    fn host_words(&self) -> [u32; HOST_WORDS] {
        HOST_WORD_OFFSETS.map(|off| self.eng.mem.sram.load_u32(off as u64).unwrap_or(0))
    }

    /// Every port's `STATE` and `GENERATION`: a host process writes them
    /// in its own window, the device (the privileged side) tells the
    /// firmware by moving `PORT_NEWS` when one changed (the firmware reads
    /// the windows only then).
    fn port_words(&self) -> [u32; PORT_WORDS] {
        let sram = &self.eng.mem.sram;
        core::array::from_fn(|i| {
            let off = port_reg(i / 2, if i % 2 == 0 { pcb::STATE } else { pcb::GENERATION });
            sram.load_u32(off as u64).unwrap_or(0)
        })
    }

    /// Raise the guest's interrupt if it waits and has not been raised
    /// for this wait: after a change it would see (a completion, a
    /// doorbell). The fence orders the change before the look at
    /// `IRQ_WAIT`, as the guest's orders its `IRQ_WAIT` before its last
    /// look at the rings: one of the two sees the other.
    fn wake_guest(&mut self) {
        let Some(irq) = &self.irq else { return };
        fence(Ordering::SeqCst);
        let w = self.eng.mem.sram.load_u32(reg(regs::IRQ_WAIT) as u64).unwrap_or(0);
        if w & 1 == 1 && w != self.raised_for {
            self.raised_for = w;
            irq.raise();
            self.c.irqs += 1;
        }
    }

    /// One step at `now` (ns on the cluster clock).
    pub fn step(
        &mut self,
        fab: &RtFabric,
        held: &mut Held,
        now: u64,
        pool: &mut Vec<Vec<u8>>,
    ) -> Service {
        let mut s = Service::default();
        if self.stopped {
            self.c.down_drops += self.eng.rx_discard(fab, held, pool);
            return s;
        }
        let rtc = self.rtc.write(&mut self.eng.mem.sram, now);
        self.eng.begin_step();
        let bell = self.doorbell();
        if bell != self.last_doorbell {
            self.last_doorbell = bell;
            s.progress = true;
        }
        let ports = self.port_words();
        let ports_moved = ports != self.last_ports;
        if ports_moved {
            // After the words the firmware will read (the native MCP polls
            // below on this thread; a guest reads PORT_NEWS before them).
            self.last_ports = ports;
            self.eng.mem.sram.fetch_add_u32(reg(regs::PORT_NEWS) as u64, 1);
            s.progress = true;
        }
        // The other host writes too, counted in the one word the
        // firmware reads first to learn what changed (and a waiting guest
        // watches).
        let host = self.host_words();
        if s.progress || host != self.last_host {
            self.last_host = host;
            let at = reg(regs::HOST_WRITES) as u64;
            self.eng.mem.sram.fetch_add_u32(at, 1);
            s.progress = true;
        }
        if self.down {
            // Under QEMU the guest says when it is up.
            if self.mcp.is_none()
                && self.eng.mem.sram.load_u32(reg(regs::FW_STATUS) as u64) == Some(regs::FW_RUNNING)
            {
                self.down = false;
            } else {
                self.c.down_drops += self.eng.rx_discard(fab, held, pool);
                // Whatever runs next may write its transmit buffers.
                self.eng.unlend(fab, held);
                return s;
            }
        }
        // The native MCP is polled when something it reads may have
        // changed since just before its last poll: a doorbell, an engine
        // completion, `PORT_NEWS`; when its timer falls due; after a poll
        // that did work (it may have left some); and at least every
        // SAFETY_POLL_NS (host writes no doorbell announces, such as
        // event queue space freed). An engine pass that completed nothing
        // the firmware reads (a packet launched, a lent one taken) wakes
        // no poll, nor does a doorbell rung for descriptors a poll has
        // taken already.
        let native = self.mcp.is_some();
        let mut poll = native
            && (!self.asleep
                || ports_moved
                || bell != self.seen_bell
                || now >= self.deadline_ns
                || now.saturating_sub(self.last_poll) >= SAFETY_POLL_NS
                || self.news() != self.seen);
        for round in 0..MAX_ROUNDS {
            let mut busy = false;
            if poll {
                self.seen_bell = if round == 0 { bell } else { self.doorbell() };
                self.seen = self.news();
                if let Some(m) = self.mcp.as_mut() {
                    let mut hw = MappedHw::new(&self.eng.mem.sram, rtc);
                    let w = m.poll(&mut hw);
                    self.c.hw_faults += hw.faults.get();
                    self.c.polls += 1;
                    self.c.work.add(&w);
                    busy = !w.is_idle();
                    self.last_poll = now;
                    self.deadline_ns = match m.next_deadline() {
                        Some(t) => self.rtc.ns_at_tick(t),
                        None => u64::MAX,
                    };
                }
            }
            let moved = self.eng.hdma_service();
            let t = self.eng.tx_service(fab, held, now, pool);
            let r = self.eng.rx_service(fab, held, now, pool);
            let moved = moved || t.progress || r.progress;
            s.timed |= t.timed || r.timed;
            if mapped::pages_isolated() != self.isolated_seen {
                // A page that could not be backed (perhaps this NIC's):
                // no poll may see what the engines just did; the worker
                // looks (`file_fault`) and stops the NIC if it is its.
                s.progress = true;
                break;
            }
            poll = native && (busy || (moved && self.news() != self.seen));
            if !(busy || moved) {
                break;
            }
            s.progress = true;
        }
        self.asleep = !poll;
        if self.mcp.is_none() && !s.progress {
            // A guest that stopped (halted, or killed for a reflash).
            if self.eng.mem.sram.load_u32(reg(regs::FW_STATUS) as u64) != Some(regs::FW_RUNNING) {
                self.down = true;
            }
        }
        if s.progress {
            self.wake_guest();
        }
        s
    }

    /// The worker was off the CPU for `ns` it did not ask for (the OS ran
    /// something else): the native MCP's RTC does not count that time, as
    /// a NIC's processor, never descheduled, would not have seen it. Its
    /// clock moves on from where it was, and its timers with it, so an
    /// IDT-paced flow does not find itself a stall behind its NDT and
    /// send the stall's packets back to back (nor a retransmission timer
    /// fire for acks the stopped device could not carry). Under QEMU the
    /// guest keeps its own clock (the CLINT's): nothing to do.
    pub fn skip_stall(&mut self, ns: u64) {
        if self.mcp.is_none() || ns == 0 {
            return;
        }
        self.rtc.origin = self.rtc.origin.saturating_add(ns);
        if self.deadline_ns != u64::MAX {
            self.deadline_ns = self.deadline_ns.saturating_add(ns);
        }
        self.c.stalls += 1;
        self.c.stalled_ns += ns;
    }

    /// When the native MCP next wants a poll (ns on the cluster clock).
    pub fn deadline(&self) -> Option<u64> {
        self.mcp.as_ref()?;
        (self.deadline_ns != u64::MAX).then_some(self.deadline_ns)
    }

    pub fn counters(&self) -> NodeCounters {
        let (lent, reclaimed) = self.eng.lend_counts();
        NodeCounters { device: self.eng.counters(), lent, reclaimed, ..self.c }
    }
}

/// Every node's state as published into every port window
/// (`nic_abi::port::NODE_TABLE`, `NODE_NEWS`), so that a host process
/// waiting on its port learns within a heartbeat that a NIC it talks with
/// was reset or is gone. Kept by the supervisor thread, the one writer.
pub(crate) struct NodeNews {
    /// The entries last written, by node.
    published: Vec<u16>,
}

impl NodeNews {
    /// Entries of a fresh cluster: all zero, as its new window files read.
    pub fn new(nodes: usize) -> NodeNews {
        NodeNews { published: vec![0; nodes] }
    }

    /// The entry of a node: `resets` resets so far; `status` its
    /// `FW_STATUS`; `guest_gone`: it runs under QEMU and no guest runs.
    pub fn entry(resets: u64, status: u32, guest_gone: bool) -> u16 {
        let state = if status != regs::FW_HALTED {
            pcb::NODE_UP
        } else if guest_gone {
            pcb::NODE_GONE
        } else {
            pcb::NODE_HALTED
        };
        pcb::node_entry_value(resets, state)
    }

    /// Publish `now` (every node's entry): the words that changed go into
    /// every port window of every node, then each window's `NODE_NEWS`
    /// moves. Nothing is written when nothing changed.
    pub fn publish(&mut self, srams: &[Arc<MappedFile>], now: &[u16]) {
        let mut words: Vec<usize> = Vec::new();
        for (node, (&e, old)) in now.iter().zip(self.published.iter_mut()).enumerate() {
            if e != *old {
                *old = e;
                if words.last() != Some(&(node / 2)) {
                    words.push(node / 2);
                }
            }
        }
        if words.is_empty() {
            return;
        }
        let entry = |n: usize| self.published.get(n).copied().unwrap_or(0);
        for sram in srams {
            for port in 0..NUM_PORTS {
                for &k in &words {
                    let word = (entry(2 * k) as u32) | (entry(2 * k + 1) as u32) << 16;
                    sram.store_u32(port_reg(port, pcb::node_word(2 * k)) as u64, word);
                }
                sram.fetch_add_u32(port_reg(port, pcb::NODE_NEWS) as u64, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_news_writes_changed_entries_into_every_window_then_moves_its_count() {
        let path = std::env::temp_dir().join(format!("node-news-{}.sram", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(nic_abi::map::SRAM_MIN as u64).unwrap();
        let sram = Arc::new(MappedFile::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let srams = [sram.clone()];
        let at = |p: usize, off: u32| sram.load_u32(port_reg(p, off) as u64).unwrap();
        let entry = |p: usize, n: usize| pcb::node_entry(at(p, pcb::node_word(n)), n);
        let mut news = NodeNews::new(3);
        news.publish(&srams, &[0, 0, 0]);
        assert!((0..NUM_PORTS).all(|p| at(p, pcb::NODE_NEWS) == 0), "nothing changed");
        let reset = NodeNews::entry(1, regs::FW_BOOTING, false);
        let gone = NodeNews::entry(0, regs::FW_HALTED, true);
        assert_eq!(pcb::node_state(gone), pcb::NODE_GONE);
        assert_eq!(pcb::node_state(NodeNews::entry(0, regs::FW_HALTED, false)), pcb::NODE_HALTED);
        news.publish(&srams, &[0, reset, gone]);
        news.publish(&srams, &[0, reset, gone]);
        for p in 0..NUM_PORTS {
            assert_eq!(at(p, pcb::NODE_NEWS), 1, "port {p}: one change, one move");
            assert_eq!([entry(p, 0), entry(p, 1), entry(p, 2)], [0, reset, gone], "port {p}");
        }
    }
}
