//! The discrete-event core: virtual time in ns, one thread, one event
//! queue for every NIC, link, switch and host of a cluster ([`SimCluster`]).
//!
//! NIC CPU. Each NIC runs its firmware on a CPU that is busy until some
//! time. Any reason to run it (doorbell, DMA completion, packet arrival,
//! the firmware's own timer) asks for a wake at max(now, busy-until);
//! pending wakes coalesce into the earliest one. A wake writes the RTC
//! register, calls `poll`, charges the reported work at the profile's
//! cycle prices (the CPU is busy that long), and starts the DMA engines on
//! whatever the firmware posted. While polls report work it polls again
//! when the previous pass ends (in place when no other event comes first).
//! When a pass is idle the CPU sleeps until the firmware's next deadline
//! (`next_deadline`, RTC ticks) or the next wake.
//!
//! Hosts. Programs ([`HostApp`]) are called at start, after their NIC
//! wrote into host memory, and when they asked (coalesced), at max(event
//! time, host clock): a host busy with charged work is called later.
//!
//! A run ends when every program is done and nothing is in flight (no
//! packet in the fabric, every DMA engine idle with nothing posted, every
//! NIC CPU idle: pending firmware timers do not keep it alive), or at a
//! limit. The same configuration gives the same run, bit for bit: no hash
//! maps, no wall clock in any decision, ties broken by scheduling order.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nic_abi::le::get_u64;
use nic_abi::regs::{self, reg};
use nic_abi::sram::Sram;
use nic_abi::stats::{stat_offset, ALL_STATS, STAT_COUNT};

use crate::backend::{Bells, HostPrices, NicBusy, SimBackend};
use crate::host::{HostApp, HostCx};
use crate::sim_nic::NicDevice;
use crate::trace::{Cursors, NicTrace};
use nic_device::device::{reset_sram, ResetConfig, Rtc};
use nic_device::faults::Faults;
use nic_device::firmware::{mcp_firmware, Firmware, SliceHw, Work};
use nic_device::memory::NodeMem;
use nic_device::profile::{Clock, Pricing, Profile};
use nic_fabric::event::{Ev, EventQueue, Next};
use nic_fabric::fabric::{Arrival, Fabric, Freed, LinkStats, McastSpan, NEVER};
pub use nic_fabric::plan::EmuError;
use nic_fabric::plan::{plan_sim, Plan};
use nic_fabric::stats::{NicStats, SimStats};
use nic_fabric::topology::{Layout, Topology};

/// How to build a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub profile: Profile,
    pub nodes: usize,
    pub topology: Topology,
    /// Seeds fault injection.
    pub seed: u64,
    pub faults: Faults,
    /// Override of the profile's send timeout (us).
    pub send_timeout_us: Option<f64>,
}

impl ClusterConfig {
    /// `nodes` nodes on `topology`, seed 0, no faults, the profile's timeouts.
    pub fn new(profile: Profile, nodes: usize, topology: Topology) -> ClusterConfig {
        ClusterConfig {
            profile,
            nodes,
            topology,
            seed: 0,
            faults: Faults::NONE,
            send_timeout_us: None,
        }
    }
}

/// When `run` stops early.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunLimit {
    /// Run until done (or stuck).
    #[default]
    Unlimited,
    /// Do not go past this absolute virtual time (ns).
    Until(u64),
    /// Handle at most this many events in this call.
    Events(u64),
}

/// Why `run` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every program is done and nothing is in flight.
    Done,
    /// The next event lies past `until_ns` (time now stands at it).
    TimeLimit,
    EventLimit,
    /// Nothing left to happen, yet a program is not done or a packet is
    /// stuck (e.g. waiting for a receive buffer that never comes). Time
    /// stands at `Until`'s limit if one was given.
    Stuck,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Done => "done",
            RunOutcome::TimeLimit => "time-limit",
            RunOutcome::EventLimit => "event-limit",
            RunOutcome::Stuck => "stuck",
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a NIC's reset writes: its node, the cluster's profile, send timeout
/// and the node's routes. One program per node, one memory: every port's
/// slice is the whole of it.
fn reset_config<'a>(
    node: usize,
    p: &'a Profile,
    send_timeout_ns: u64,
    routes: &'a [Vec<u8>],
) -> ResetConfig<'a> {
    ResetConfig {
        node,
        nodes: routes.len(),
        profile: p,
        send_timeout_ns,
        routes,
        host: nic_abi::page_table::HostLayout::new(p.host.memory_bytes, true),
    }
}

/// How a pass's priced units become time: whole cycles at the NIC clock
/// (`published` pricing), or thousandths of a cycle (`firmware` pricing:
/// instructions x cycles per instruction, not a whole number).
#[derive(Debug, Clone, Copy)]
enum PassClock {
    Cycles(Clock),
    MilliCycles { hz: u64 },
}

/// Prices of firmware work, in the units of `clock`: the profile's
/// `[nic_cpu]` cycle prices (`pricing = "published"`), or the firmware
/// cost table's instructions x `cycles_per_instruction` (`"firmware"`).
#[derive(Debug, Clone, Copy)]
struct WorkPrices {
    clock: PassClock,
    /// Every pass.
    poll: u64,
    /// A pass that did work, beyond `poll` (0 under published pricing).
    busy: u64,
    descriptor: u64,
    tx_packet: u64,
    rx_packet: u64,
    dma_cmd: u64,
    event: u64,
    timer: u64,
    flow_op: u64,
    tree_op: u64,
    relay_step: nic_device::profile::StepPrices,
    mcast_packet: u64,
    mcast_further: nic_device::profile::StepPrices,
    mcast_rx_packet: u64,
    mcast_desc: u64,
    mcast_delivery: u64,
    coll_element: u64,
    coll_float_element: u64,
}

impl WorkPrices {
    fn new(p: &Profile) -> Result<WorkPrices, EmuError> {
        match p.nic_cpu.pricing {
            Pricing::Published => Ok(WorkPrices::published(p)),
            Pricing::Firmware => {
                let table = p.firmware_costs().map_err(EmuError::Config)?;
                Ok(WorkPrices::firmware(p, &table.instructions))
            }
        }
    }

    fn published(p: &Profile) -> WorkPrices {
        let c = &p.nic_cpu;
        WorkPrices {
            clock: PassClock::Cycles(Clock::new(p.nic.cpu_hz)),
            poll: c.poll,
            busy: 0,
            descriptor: c.descriptor,
            tx_packet: c.tx_packet,
            rx_packet: c.rx_packet,
            dma_cmd: c.dma_cmd,
            event: c.event,
            timer: c.timer,
            flow_op: c.flow_op,
            tree_op: c.tree_op,
            relay_step: c.relay_step,
            mcast_packet: c.mcast_packet,
            mcast_further: c.mcast_further_packet.unwrap_or(nic_device::profile::StepPrices {
                separate: c.mcast_packet,
                serial: c.mcast_packet,
                binomial: c.mcast_packet,
                binary: c.mcast_packet,
            }),
            mcast_rx_packet: c.mcast_rx_packet.unwrap_or(c.mcast_packet),
            mcast_desc: c.mcast_desc,
            mcast_delivery: c.mcast_delivery,
            coll_element: c.coll_element,
            coll_float_element: c.coll_float_element,
        }
    }

    /// Thousandths of a cycle per unit of work: the table's instructions
    /// x the profile's cycles per instruction.
    fn firmware(p: &Profile, t: &nic_device::costs::Instructions) -> WorkPrices {
        let cpi = p.nic_cpu.cycles_per_instruction;
        let m = |instructions: f64| (instructions * cpi * 1000.0).round() as u64;
        let alg = |a: &nic_device::costs::PerAlgorithm| nic_device::profile::StepPrices {
            separate: m(a.separate),
            serial: m(a.serial),
            binomial: m(a.binomial),
            binary: m(a.binary),
        };
        WorkPrices {
            clock: PassClock::MilliCycles { hz: p.nic.cpu_hz.max(1) },
            poll: m(t.idle_pass),
            busy: m(t.busy_pass),
            descriptor: m(t.descriptor),
            tx_packet: m(t.tx_packet),
            rx_packet: m(t.rx_packet),
            dma_cmd: m(t.dma_cmd),
            event: m(t.event),
            timer: m(t.timer),
            flow_op: m(t.flow_op),
            tree_op: m(t.tree_op),
            relay_step: alg(&t.relay_step),
            mcast_packet: m(t.mcast_packet),
            mcast_further: alg(&t.mcast_further),
            mcast_rx_packet: m(t.mcast_rx_packet),
            mcast_desc: m(t.mcast_desc),
            mcast_delivery: m(t.mcast_delivery),
            coll_element: m(t.coll_element),
            coll_float_element: m(t.coll_float_element),
        }
    }

    /// Units of a pass's multicast work (none for unicast).
    #[inline]
    fn multicast(&self, w: &Work) -> u64 {
        if w.mcast_packets == 0
            && w.mcast_rx_packets == 0
            && w.mcast_descs == 0
            && w.mcast_deliveries == 0
            && w.relay_steps == [0; 4]
            && w.mcast_further == [0; 4]
        {
            return 0;
        }
        let steps: u64 = (0..4)
            .map(|i| {
                w.relay_steps[i] as u64 * self.relay_step.by_index(i)
                    + w.mcast_further[i] as u64 * self.mcast_further.by_index(i)
            })
            .sum();
        steps
            + w.mcast_packets as u64 * self.mcast_packet
            + w.mcast_rx_packets as u64 * self.mcast_rx_packet
            + w.mcast_descs as u64 * self.mcast_desc
            + w.mcast_deliveries as u64 * self.mcast_delivery
    }

    /// Units of one pass, `mcast` being its multicast units (`multicast`).
    #[inline]
    fn units(&self, w: &Work, mcast: u64) -> u64 {
        let busy = if self.busy != 0 && !w.is_idle() { self.busy } else { 0 };
        self.poll
            + busy
            + w.descriptors as u64 * self.descriptor
            + w.tx_packets as u64 * self.tx_packet
            + w.rx_packets as u64 * self.rx_packet
            + w.dma_cmds as u64 * self.dma_cmd
            + w.events as u64 * self.event
            + w.timers as u64 * self.timer
            + w.flow_ops as u64 * self.flow_op
            + w.tree_ops as u64 * self.tree_op
            + w.coll_elements as u64 * self.coll_element
            + w.coll_float_elements as u64 * self.coll_float_element
            + mcast
    }

    /// NIC CPU time of one pass (at least 1 ns, so time advances) and its
    /// NIC CPU cycles in thousandths, `mcast` being its multicast units.
    #[inline]
    fn ns(&self, w: &Work, mcast: u64) -> (u64, u64) {
        let units = self.units(w, mcast);
        match self.clock {
            PassClock::Cycles(c) => (c.cycles_ns(units).max(1), units.saturating_mul(1000)),
            PassClock::MilliCycles { hz } => {
                let ns = (units as u128 * 1_000_000).div_ceil(hz as u128);
                (ns.min(u64::MAX as u128).max(1) as u64, units)
            }
        }
    }
}

/// A NIC CPU's passes and their priced cycles ([`SimCluster::nic_cycles`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NicCycles {
    pub polls: u64,
    /// Polls that reported work.
    pub busy_polls: u64,
    /// NIC CPU cycles charged for every poll, and for the busy ones.
    pub cycles: f64,
    pub busy_cycles: f64,
}

struct NicCpu {
    fw: Box<dyn Firmware>,
    busy_until: u64,
    /// Time of the pending wake, if any (the one whose gen matches).
    wake_at: Option<u64>,
    wake_gen: u32,
    /// The last poll was idle and no work-wake came since.
    idle: bool,
    halted: bool,
    polls: u64,
    /// Time charged for its passes (ns), shared with the node's backend.
    busy_ns: NicBusy,
    hw_faults: u64,
    /// Work reported by every poll, summed.
    work: Work,
    /// Polls that reported work.
    busy_polls: u64,
    /// Priced NIC CPU cycles in thousandths: of every poll, of the busy ones.
    milli_cycles: u128,
    busy_milli_cycles: u128,
}

struct HostSide {
    apps: Vec<(Box<dyn HostApp>, bool)>,
    /// Programs not done.
    pending: usize,
    /// Time of the pending AppWake event, if any (the one whose gen matches).
    wake_at: Option<u64>,
    wake_gen: u32,
    /// The earliest time the programs asked to be called at (`wake_at`);
    /// kept until a call at or after it happens.
    timer: Option<u64>,
}

/// A simulated cluster: N hosts with a NIC each, on a switch fabric.
pub struct SimCluster {
    profile: Profile,
    layout: Layout,
    routes: Vec<Vec<Vec<u8>>>,
    send_timeout_ns: u64,
    /// Makes a NIC's firmware (at start and at each reset).
    make_fw: Box<dyn FnMut(usize) -> Box<dyn Firmware>>,
    q: EventQueue,
    now: u64,
    limit_ns: u64,
    fabric: Fabric,
    nics: Vec<NicDevice>,
    cpus: Vec<NicCpu>,
    hosts: Vec<HostSide>,
    backends: Vec<SimBackend>,
    bells: Bells,
    rtc: Rtc,
    prices: WorkPrices,
    apps_pending: usize,
    events: u64,
    wall: Duration,
    /// Scratch for `nic_entries`.
    entries: Vec<(u32, u64)>,
    /// Scratch for `drain_bells`.
    rung: Vec<(usize, u64)>,
    /// With `trace_transitions`: per node, what its trace rings held and
    /// where the reader is.
    traces: Option<Vec<(NicTrace, Cursors)>>,
}

impl SimCluster {
    /// A cluster running the MCP on every NIC.
    pub fn new(cfg: ClusterConfig) -> Result<SimCluster, EmuError> {
        // Deterministic: a build with the MCP's `check-gating` checks every
        // pass its summary skips.
        nic_device::firmware::check_gating_here(true);
        SimCluster::with_firmware(cfg, mcp_firmware)
    }

    /// A cluster running `make(node)` on each NIC.
    pub fn with_firmware(
        cfg: ClusterConfig,
        mut make: impl FnMut(usize) -> Box<dyn Firmware> + 'static,
    ) -> Result<SimCluster, EmuError> {
        let p = cfg.profile;
        let Plan { layout, send_timeout_ns, routes } =
            plan_sim(&p, cfg.nodes, cfg.topology, &cfg.faults, cfg.send_timeout_us)?;
        let n = cfg.nodes;
        let rtc = Rtc::new(p.nic.rtc_hz);
        let bells: Bells = Rc::new(RefCell::new(Vec::new()));
        let host_prices = HostPrices::new(&p);
        let fabric = Fabric::new(&layout, &p, cfg.seed, cfg.faults);
        let mut nics = Vec::with_capacity(n);
        let mut cpus = Vec::with_capacity(n);
        let mut backends = Vec::with_capacity(n);
        for (node, node_routes) in routes.iter().enumerate() {
            let mut mem = NodeMem::of_node(node, n, p.nic.sram_bytes as usize, p.host.memory_bytes);
            reset_sram(&mut mem, &reset_config(node, &p, send_timeout_ns, node_routes));
            let mut fw = make(node);
            let mut hw = SliceHw::new(&mut mem.sram);
            fw.init(&mut hw).map_err(|message| EmuError::FirmwareHalted { node, message })?;
            let hw_faults = hw.faults.get() as u64;
            let mem = Rc::new(RefCell::new(mem));
            let backend = SimBackend::new(node, mem.clone(), bells.clone(), host_prices, rtc);
            nics.push(NicDevice::new(node, mem, &p));
            cpus.push(NicCpu {
                fw,
                busy_until: 0,
                wake_at: None,
                wake_gen: 0,
                idle: false,
                halted: false,
                polls: 0,
                busy_ns: backend.nic_busy(),
                hw_faults,
                work: Work::default(),
                busy_polls: 0,
                milli_cycles: 0,
                busy_milli_cycles: 0,
            });
            backends.push(backend);
        }
        let prices = WorkPrices::new(&p)?;
        let mut c = SimCluster {
            prices,
            profile: p,
            layout,
            routes,
            send_timeout_ns,
            make_fw: Box::new(make),
            q: EventQueue::default(),
            now: 0,
            limit_ns: NEVER,
            fabric,
            nics,
            cpus,
            hosts: (0..n)
                .map(|_| HostSide {
                    apps: Vec::new(),
                    pending: 0,
                    wake_at: None,
                    wake_gen: 0,
                    timer: None,
                })
                .collect(),
            backends,
            bells,
            rtc,
            apps_pending: 0,
            events: 0,
            wall: Duration::ZERO,
            entries: Vec::new(),
            rung: Vec::new(),
            traces: None,
        };
        for node in 0..n {
            c.wake_nic(node, 0, true);
        }
        Ok(c)
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn nodes(&self) -> usize {
        self.nics.len()
    }

    pub fn topology(&self) -> Topology {
        self.layout.topology
    }

    /// The source route from `src` to `dst` (as in `src`'s route table).
    pub fn route(&self, src: usize, dst: usize) -> &[u8] {
        &self.routes[src][dst]
    }

    /// Node `node`'s backend (a cheap handle).
    pub fn backend(&self, node: usize) -> SimBackend {
        self.backends[node].clone()
    }

    /// Run `app` on `node`; it is first called at the current time (t = 0
    /// before the first `run`).
    pub fn spawn(&mut self, node: usize, app: Box<dyn HostApp>) {
        let done = app.done();
        if !done {
            self.apps_pending += 1;
            self.hosts[node].pending += 1;
        }
        self.hosts[node].apps.push((app, done));
        self.wake_apps(node, self.now);
    }

    /// Current virtual time (ns).
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Reset NIC `node` now, as pulling its reset line would: its engines
    /// stop (`NicDevice::reset`: posted commands and packets at its input
    /// are lost), the cfg registers and routes are written again, every
    /// port is closed on its holder's behalf, and a new firmware boots
    /// (the RTC runs on, so the new boot's stream sync ids differ). Peers
    /// find its ports closed; programs on the node see their ports no
    /// longer served (`Port::nic_serving`). Err: the new firmware halted
    /// at init (the NIC stays down).
    pub fn reset_nic(&mut self, node: usize) -> Result<(), EmuError> {
        let now = self.now;
        // What the old boot traced is read before the reset clears it.
        self.drain_trace(node, None);
        self.nics[node].reset(&mut self.q, &mut self.fabric, now);
        let mut fw = (self.make_fw)(node);
        let init = {
            let mut mem = self.nics[node].mem.borrow_mut();
            let cfg = reset_config(node, &self.profile, self.send_timeout_ns, &self.routes[node]);
            reset_sram(&mut *mem, &cfg);
            self.rtc.write(&mut mem.sram[..], now);
            let mut hw = SliceHw::new(&mut mem.sram);
            let r = fw.init(&mut hw);
            self.cpus[node].hw_faults += hw.faults.get() as u64;
            r
        };
        if self.traces.is_some() {
            self.start_trace(node);
        }
        let cpu = &mut self.cpus[node];
        cpu.fw = fw;
        // A pass in progress is cut short; a pending wake is forgotten.
        cpu.busy_until = now;
        cpu.wake_gen = cpu.wake_gen.wrapping_add(1);
        cpu.wake_at = None;
        if let Err(message) = init {
            cpu.halted = true;
            cpu.idle = true;
            return Err(EmuError::FirmwareHalted { node, message });
        }
        cpu.halted = false;
        self.wake_nic(node, now, true);
        self.wake_apps(node, now);
        Ok(())
    }

    /// Capture every packet the fabric carries from now on into a pcapng
    /// file (`nic_fabric::capture`: virtual timestamps, one record each
    /// time a packet enters a link).
    pub fn capture_to(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        self.fabric.capture_to(path)
    }

    /// Stop capturing and flush the file: the packets it holds.
    pub fn finish_capture(&mut self) -> std::io::Result<u64> {
        self.fabric.finish_capture()
    }

    /// Call every node's programs now (they look at their ports again).
    pub fn wake_all_apps(&mut self) {
        for node in 0..self.hosts.len() {
            self.wake_apps(node, self.now);
        }
    }

    /// Resets of NIC `node` so far, and the packets they lost at its input.
    pub fn nic_resets(&self, node: usize) -> (u64, u64) {
        (self.nics[node].resets, self.nics[node].reset_drops)
    }

    /// Wake `node`'s NIC CPU now (as a doorbell would).
    pub fn kick(&mut self, node: usize) {
        self.wake_nic(node, self.now, true);
    }

    /// Run until every program is done and nothing is in flight, or a limit.
    pub fn run(&mut self, limit: RunLimit) -> RunOutcome {
        let started = Instant::now();
        let (until, max_events) = match limit {
            RunLimit::Unlimited => (NEVER, u64::MAX),
            RunLimit::Until(t) => (t, u64::MAX),
            RunLimit::Events(n) => (NEVER, n),
        };
        self.limit_ns = until;
        self.drain_bells();
        let mut n = 0u64;
        let outcome = loop {
            if self.apps_pending == 0 && self.quiescent() {
                break RunOutcome::Done;
            }
            // The next event, unless the queue is empty or it falls past
            // the limit (it is then left queued); the event limit is
            // checked after those two.
            let next = if n < max_events {
                self.q.pop_until(self.limit_ns)
            } else {
                self.q.peek_time().map_or(Next::Empty, Next::Later)
            };
            let (t, ev) = match next {
                Next::Event(t, ev) => (t, ev),
                Next::Empty => {
                    // Nothing will ever happen: time runs on to the limit.
                    if self.limit_ns != NEVER {
                        self.now = self.now.max(self.limit_ns);
                    }
                    break RunOutcome::Stuck;
                }
                Next::Later(t) if t > self.limit_ns => {
                    self.now = self.now.max(self.limit_ns);
                    break RunOutcome::TimeLimit;
                }
                Next::Later(_) => break RunOutcome::EventLimit,
            };
            self.now = t;
            // Nothing enters a link before now any more.
            self.fabric.capture_release(t);
            n += 1;
            self.dispatch(ev);
            self.nic_entries();
        };
        self.events += n;
        self.wall += started.elapsed();
        outcome
    }

    /// Is nothing in flight (programs aside)?
    fn quiescent(&self) -> bool {
        self.fabric.in_flight() == 0
            && self.cpus.iter().all(|c| c.idle || c.halted)
            && self.nics.iter().all(|n| n.quiet())
    }

    fn dispatch(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::NicWake { node, gen } => {
                let node = node as usize;
                if self.cpus[node].wake_gen == gen {
                    self.cpus[node].wake_at = None;
                    self.nic_run(node);
                }
            }
            Ev::AppWake { node, gen } => {
                let node = node as usize;
                if self.hosts[node].wake_gen == gen {
                    self.hosts[node].wake_at = None;
                    self.app_run(node);
                }
            }
            Ev::HdmaDone { node, gen } => {
                let node = node as usize;
                let wrote_host = self.nics[node].hdma_complete(gen);
                self.nics[node].hdma_kick(&mut self.q, now);
                if wrote_host {
                    self.wake_apps_now(node);
                }
                self.wake_nic_now(node);
            }
            Ev::LinkFree { link } => {
                if let Freed::Tx(node) = self.fabric.link_free(&mut self.q, now, link) {
                    let nic = &mut self.nics[node];
                    let done = nic.tx_complete();
                    let errs = nic.tx_kick(&mut self.q, &mut self.fabric, now);
                    if done || errs {
                        self.wake_nic_now(node);
                    }
                }
            }
            Ev::Kick { node } => {
                let node = node as usize;
                if self.nics[node].kick(&mut self.q, &mut self.fabric, now) {
                    self.wake_nic_now(node);
                }
            }
            Ev::LinkTimeout { link } => self.fabric.link_timeout(&mut self.q, now, link),
            Ev::RxTimeout { node } => {
                self.nics[node as usize].rx_timeout(&mut self.q, &mut self.fabric, now)
            }
            Ev::HeadArrive { flight } => match self.fabric.head_arrive(&mut self.q, now, flight) {
                Arrival::AtNic(node) => {
                    self.nics[node].head_arrived(&mut self.q, &mut self.fabric, now, flight)
                }
                Arrival::Switched | Arrival::Gone => {}
            },
            Ev::RxDone { flight } => {
                let node = self.fabric.flight(flight).dst as usize;
                self.nics[node].rx_complete(&mut self.q, &mut self.fabric, now, flight);
                self.wake_nic_now(node);
            }
        }
    }

    /// Hand the packets that entered links into NICs to those NICs.
    /// (Checked after every event: the test is inlined, the work not.)
    #[inline]
    fn nic_entries(&mut self) {
        if self.fabric.has_nic_entries() {
            self.take_nic_entries();
        }
    }

    #[inline(never)]
    fn take_nic_entries(&mut self) {
        self.fabric.take_nic_entries(&mut self.entries);
        for &(flight, at) in &self.entries {
            let node = self.fabric.flight(flight).dst as usize;
            self.nics[node].head_due(&mut self.q, &mut self.fabric, flight, at);
        }
    }

    /// Ask for a NIC CPU wake at `t` (or when it is next free). `work`:
    /// something changed that the firmware must see (a timer is not).
    fn wake_nic(&mut self, node: usize, t: u64, work: bool) {
        let cpu = &mut self.cpus[node];
        if cpu.halted {
            return;
        }
        if work {
            cpu.idle = false;
        }
        let t = t.max(cpu.busy_until).max(self.now);
        if cpu.wake_at.is_some_and(|w| w <= t) {
            return;
        }
        cpu.wake_gen = cpu.wake_gen.wrapping_add(1);
        cpu.wake_at = Some(t);
        self.q.push(t, Ev::NicWake { node: node as u32, gen: cpu.wake_gen });
    }

    /// Something the firmware must see happened now: run the NIC CPU at
    /// once if it is free and no wake is due now anyway (saves an event;
    /// the same as a wake scheduled now and handled first), else ask for a
    /// wake.
    fn wake_nic_now(&mut self, node: usize) {
        let now = self.now;
        let cpu = &mut self.cpus[node];
        if cpu.halted {
            return;
        }
        if cpu.busy_until > now || cpu.wake_at.is_some_and(|w| w <= now) {
            self.wake_nic(node, now, true);
            return;
        }
        // A later pending wake is dropped: the run below asks again for
        // whatever it still needs (a continuation or the next deadline).
        cpu.wake_gen = cpu.wake_gen.wrapping_add(1);
        cpu.wake_at = None;
        cpu.idle = false;
        self.nic_run(node);
    }

    /// Run the NIC CPU from `now`: poll, charge, start engines; repeat
    /// while there is work and nothing else comes first.
    fn nic_run(&mut self, node: usize) {
        // Packets that just entered links into NICs are placed first: the
        // polls below may run ahead of `now`.
        self.nic_entries();
        let mut t = self.now;
        loop {
            let nic = &mut self.nics[node];
            let cpu = &mut self.cpus[node];
            // Commands an earlier pass held back are due now: they go
            // before this pass's own (which may hold more back).
            nic.release_held(&mut self.q, &mut self.fabric, t);
            let posted = nic.posted();
            let work = {
                let mut mem = nic.mem.borrow_mut();
                self.rtc.write(&mut mem.sram[..], t);
                let mut hw = SliceHw::new(&mut mem.sram);
                let w = cpu.fw.poll(&mut hw);
                cpu.hw_faults += hw.faults.get() as u64;
                w
            };
            // One pass writes far fewer records than a ring holds: read
            // after each, none is lost.
            if self.traces.is_some() {
                self.drain_trace(node, Some(t));
            }
            let nic = &mut self.nics[node];
            let cpu = &mut self.cpus[node];
            cpu.polls += 1;
            cpu.work.add(&work);
            let mcast = self.prices.multicast(&work);
            let (cost, milli_cycles) = self.prices.ns(&work, mcast);
            cpu.milli_cycles += milli_cycles as u128;
            if !work.is_idle() {
                cpu.busy_polls += 1;
                cpu.busy_milli_cycles += milli_cycles as u128;
            }
            let te = t + cost;
            cpu.busy_until = te;
            let mut busy = cpu.busy_ns.get();
            busy.add(cost, te);
            cpu.busy_ns.set(busy);
            if mcast > 0 {
                // Priced multicast work comes before what the pass posts
                // for it starts.
                nic.hold_until(posted, te);
            }
            nic.hdma_kick(&mut self.q, te);
            let errs = nic.tx_kick(&mut self.q, &mut self.fabric, te);
            nic.rx_kick(&mut self.q, &mut self.fabric, te);
            if work.is_idle() && !errs {
                cpu.idle = true;
                if let Some(tick) = cpu.fw.next_deadline() {
                    let at = self.rtc.ns_at_tick(tick).max(te);
                    self.wake_nic(node, at, false);
                }
                return;
            }
            if self.q.peek_time().is_some_and(|p| p <= te) || te > self.limit_ns {
                self.wake_nic(node, te, true);
                return;
            }
            // Nothing else happens before the pass ends: poll again in place.
            t = te;
            self.now = te;
        }
    }

    /// Ask for a call of `node`'s programs at `t` (or when its host is free).
    fn wake_apps(&mut self, node: usize, t: u64) {
        let h = &mut self.hosts[node];
        if h.pending == 0 {
            return;
        }
        let host_clock = self.backends[node].now_ns();
        let t = t.max(self.now).max(host_clock);
        if h.wake_at.is_some_and(|w| w <= t) {
            return;
        }
        h.wake_gen = h.wake_gen.wrapping_add(1);
        h.wake_at = Some(t);
        self.q.push(t, Ev::AppWake { node: node as u32, gen: h.wake_gen });
    }

    /// The NIC wrote host memory now: call the node's programs at once if
    /// its host is free and no call is due now anyway, else ask for one.
    fn wake_apps_now(&mut self, node: usize) {
        let now = self.now;
        let host_clock = self.backends[node].now_ns();
        let h = &mut self.hosts[node];
        if host_clock > now || h.wake_at.is_some_and(|w| w <= now) {
            self.wake_apps(node, now);
            return;
        }
        if h.pending == 0 {
            return;
        }
        // A later pending call is dropped: the run below asks again for
        // the programs' own wake time, which is kept in `timer`.
        h.wake_gen = h.wake_gen.wrapping_add(1);
        h.wake_at = None;
        self.app_run(node);
    }

    fn app_run(&mut self, node: usize) {
        let now = self.now;
        let backend = &self.backends[node];
        backend.advance_to(now);
        let h = &mut self.hosts[node];
        if h.timer.is_some_and(|t| t <= now) {
            h.timer = None;
        }
        let mut again = h.timer;
        let mut finished = 0;
        // (No program can be spawned meanwhile: spawn needs the cluster.)
        for (app, done) in h.apps.iter_mut().filter(|(_, d)| !*d) {
            let mut cx = HostCx { node, backend, wake: None };
            app.wake(&mut cx);
            if let Some(w) = cx.wake {
                again = Some(again.map_or(w, |a| a.min(w)));
            }
            if app.done() {
                *done = true;
                finished += 1;
            }
        }
        h.timer = again;
        h.pending -= finished;
        self.apps_pending -= finished;
        self.drain_bells();
        if let Some(w) = again {
            self.wake_apps(node, w);
        }
    }

    fn drain_bells(&mut self) {
        if self.bells.borrow().is_empty() {
            return;
        }
        // Swapped with a kept buffer: no allocation per program call.
        std::mem::swap(&mut *self.bells.borrow_mut(), &mut self.rung);
        for i in 0..self.rung.len() {
            let (node, at) = self.rung[i];
            self.wake_nic(node, at, true);
        }
        self.rung.clear();
    }

    /// Turn on every NIC's transition trace and dispatch trace
    /// (`TRACE_ENABLE`, `DISPATCH_TRACE_ENABLE`, again after each NIC
    /// reset) and read both rings after every firmware pass from now on,
    /// so that nothing is overwritten unread. Tracing costs the firmware
    /// no priced work: the run's results do not change.
    pub fn trace_transitions(&mut self) {
        if self.traces.is_none() {
            self.traces = Some(vec![Default::default(); self.nics.len()]);
            self.fabric.log_links();
            for node in 0..self.nics.len() {
                self.nics[node].wire_log = Some(Default::default());
                self.start_trace(node);
            }
        }
    }

    /// The trace collected from node `node` since the last call (empty
    /// unless `trace_transitions` was called).
    pub fn take_trace(&mut self, node: usize) -> NicTrace {
        self.drain_trace(node, None);
        match self.traces.as_mut().and_then(|t| t.get_mut(node)) {
            Some((t, _)) => std::mem::take(t),
            None => NicTrace::default(),
        }
    }

    /// What happened at the fabric's links since the last call (empty
    /// unless `trace_transitions` was called): `nic_fabric::linklog`.
    pub fn take_link_log(&mut self) -> Vec<nic_fabric::linklog::LinkEvent> {
        self.fabric.take_link_log()
    }

    /// Every directed link's two ends, in link order.
    pub fn link_specs(&self) -> Vec<nic_fabric::fabric::LinkSpec> {
        self.fabric.link_specs()
    }

    /// Switch node `node`'s traces on and start reading from where its
    /// rings are now.
    fn start_trace(&mut self, node: usize) {
        let mut mem = self.nics[node].mem.borrow_mut();
        mem.sram.store_u32(reg(regs::TRACE_ENABLE), 1);
        mem.sram.store_u32(reg(regs::DISPATCH_TRACE_ENABLE), 1);
        regs::host_wrote(&mut mem.sram[..]);
        let c = Cursors {
            transitions: mem.sram.load_u32(crate::trace::TRANSITIONS.prod_reg),
            dispatches: mem.sram.load_u32(crate::trace::DISPATCHES.prod_reg),
        };
        if let Some(t) = self.traces.as_mut() {
            t[node].1 = c;
        }
    }

    /// Read what is new in node `node`'s trace rings; `pass_ns`: when the
    /// firmware pass that wrote it began (else each record's RTC tick).
    fn drain_trace(&mut self, node: usize, pass_ns: Option<u64>) {
        let Some(traces) = self.traces.as_mut() else { return };
        let (t, c) = &mut traces[node];
        if let Some(log) = self.nics[node].wire_log.as_mut() {
            t.sent.append(&mut log.sent);
            t.delivered.append(&mut log.delivered);
        }
        let mem = self.nics[node].mem.borrow();
        let sram = &mem.sram[..];
        t.drain(c, &|off| sram.load_u32(off), &mut |off, b| sram.read(off, b));
        let rtc = self.rtc;
        let at = |r: &nic_abi::trace::TraceRecord| pass_ns.unwrap_or_else(|| rtc.ns_at_tick(r.rtc));
        let NicTrace { transitions, transition_ns, .. } = t;
        let first = transition_ns.len();
        transition_ns.extend(transitions[first..].iter().map(at));
    }

    /// Node `node`'s NIC CPU passes and the cycles they were priced at,
    /// since the start (across resets).
    pub fn nic_cycles(&self, node: usize) -> NicCycles {
        let cpu = &self.cpus[node];
        NicCycles {
            polls: cpu.polls,
            busy_polls: cpu.busy_polls,
            cycles: cpu.milli_cycles as f64 / 1000.0,
            busy_cycles: cpu.busy_milli_cycles as f64 / 1000.0,
        }
    }

    /// Node `node`'s counters.
    pub fn nic_stats(&self, node: usize) -> NicStats {
        let nic = &self.nics[node];
        let mem = nic.mem.borrow();
        let mut fw = [0u64; STAT_COUNT];
        for s in ALL_STATS {
            fw[s as usize] = get_u64(&mem.sram, stat_offset(s) as usize);
        }
        let src = self.fabric.by_src[node];
        let cpu = &self.cpus[node];
        NicStats {
            node,
            fw,
            fw_status: nic_abi::le::get_u32(&mem.sram, reg(regs::FW_STATUS) as usize),
            device: nic.counters(),
            fault_drops: src.fault_drops,
            fault_corrupts: src.fault_corrupts,
            fault_dups: src.fault_dups,
            link_blocked_drops: src.blocked_drops,
            link_bad_routes: src.bad_routes,
            nic_polls: cpu.polls,
            nic_busy_ns: cpu.busy_ns.get().total,
            nic_work: cpu.work,
            host_busy_ns: mem.host_busy_ns,
            hw_faults: cpu.hw_faults,
        }
    }

    /// Take cables down for a while (`nic_fabric::fabric::Outage`:
    /// everything entering them then is lost).
    pub fn set_link_outages(
        &mut self,
        outages: &[nic_fabric::fabric::Outage],
    ) -> Result<(), String> {
        self.fabric.set_outages(outages)
    }

    /// Packets lost to each outage of `set_link_outages`, by its index.
    pub fn outage_drops(&self) -> &[u64] {
        &self.fabric.outage_drops
    }

    /// The wiring plan (cable names: `Layout::cable`).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Record from now on when each multicast data packet enters and
    /// leaves the fabric (`take_mcast_spans`); the run is the same.
    pub fn log_mcast_packets(&mut self) {
        self.fabric.log_mcast_packets();
    }

    /// Multicast data packets that left the fabric since the last call.
    pub fn take_mcast_spans(&mut self) -> Vec<McastSpan> {
        self.fabric.take_mcast_spans()
    }

    /// Every link's counters, in link order (per node: out, in; then trunks).
    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.fabric.link_stats()
    }

    /// Totals so far.
    pub fn sim_stats(&self) -> SimStats {
        SimStats {
            end_ns: self.now,
            events: self.events,
            packets: self.nics.iter().map(|n| n.counters().tx_packets).sum(),
            hops: self.fabric.hops(),
            wall_ms: self.wall.as_secs_f64() * 1e3,
        }
    }

    /// Events waiting in the queue (stale ones included).
    pub fn pending_events(&self) -> usize {
        self.q.len()
    }
}
