//! Running a validated scenario in real time, on a live or qemu cluster:
//! the same plan, the same per-node host programs (`NodeApp`) and the same
//! ledger as on the sim, so the same content checks; only the clock (wall
//! time) and the way the programs reach their NICs differ.
//!
//! ```text
//! rate control: the calibration its keys need, idt_t -> raw IDTs (rates.rs)
//! RtCluster::start(profile, nodes, topology, faults, seed, ...,
//!                  a bandwidth manager if a flow asks for one)
//!   wait until every NIC's firmware runs
//!   one NodeApp per node, each port attached as its own LiveBackend
//!     (flow table and dispatch-trace switch: through the cluster
//!     owner's SRAM mapping, as the BRM agents write them), a BRM client
//!     on <dir>/brm.sock when the cluster runs a manager
//!   loop: step every unfinished app (one thread), idle a little when
//!         nothing happened, until all are done, the wall-clock limit
//!         passes or a NIC goes down
//!   what is missing -> problems; NIC counters; stop the cluster
//! ```
//!
//! Owns nothing of the device process: it uses `RtCluster` and
//! `host_driver::LiveBackend` as any program in this process would. Times
//! in the report, `start_us` and `stop_us` are wall-clock ns since every
//! port of the cluster was open (the programs' setup is not counted); the
//! time limit counts from when the programs started.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_brm::socket::Background;
use host_brm::BrmClient;
use host_driver::cluster::{ClusterBackend, ClusterDir};
use host_driver::{AttachOptions, DriverError, HostOp, LiveBackend, NicBackend};
use nic_abi::flows::FLOW_ENTRY_SIZE;
use nic_abi::map::{FLOWS, FLOW_ENTRIES};
use nic_abi::regs::reg;
use nic_abi::stats::Stat;
use nic_abi::{regs, NUM_PORTS};

use super::app::{Ledger, NodeApp, NodeHost};
use super::format::{FlowKind, ScenarioError, Validated};
use super::mcast;
use super::plan::{plan, Dir};
use super::rates;
use super::report::{Report, SimReport};
use super::runner::{
    finish_pcap, flow_reports, limits, link_down_reports, load_profile, messages_total, new_ledger,
    nic_report_of, nic_reset_reports, outages, pcap_error, reset_schedule, Progress,
};
use super::trace::{ClusterTrace, LiveTracer};
use nic_device::Faults;
use nic_fabric::topology::NARROW_PORTS;
use nic_realtime::{BrmSetup, FlowTableBackend, Pacing, RtCluster, RtConfig};

/// How to run a scenario in real time.
#[derive(Debug, Clone)]
pub struct RtScenarioOptions {
    /// Live (the MCP as native threads) or qemu (the riscv64 image under
    /// qemu-system-riscv64, one guest per NIC).
    pub backend: ClusterBackend,
    /// The firmware image (ELF) the qemu backend flashes; required there.
    pub image: Option<PathBuf>,
    /// Wall-clock limit from when the host programs start; None: the scenario's
    /// `run.limit_ms`, read as wall-clock time.
    pub timeout: Option<Duration>,
    /// How long the NICs may take to boot.
    pub boot_timeout: Duration,
    /// How the fabric spends time (as fast as possible, or the profile's
    /// link bandwidth).
    pub pacing: Pacing,
    /// The cluster directory (a path); None: a fresh one under the
    /// memory temp directory (`/dev/shm`), removed at the end.
    pub cluster: Option<String>,
    /// Write every packet the fabric carries to this pcapng file (times on
    /// the cluster's wall clock; docs/capture.md).
    pub pcap: Option<PathBuf>,
    /// More QEMU arguments for every guest (qemu backend; e.g. `-icount
    /// shift=0` for exact instruction counts).
    pub qemu_args: Vec<String>,
}

impl RtScenarioOptions {
    pub fn new(backend: ClusterBackend) -> RtScenarioOptions {
        RtScenarioOptions {
            backend,
            image: None,
            timeout: None,
            boot_timeout: Duration::from_secs(60),
            pacing: Pacing::AsFastAsPossible,
            cluster: None,
            pcap: None,
            qemu_args: Vec::new(),
        }
    }
}

/// A node's host program in real time: each port it opens is attached
/// as a `LiveBackend` of its own (which holds that port's lock and memory
/// slice). The clock, shared by every node, starts when the first program
/// sees every port of the cluster open (0 before).
struct RtHost {
    dir: ClusterDir,
    node: u32,
    /// The node's SRAM as the cluster's owner maps it (flow table,
    /// `FLOW_GEN` and `DISPATCH_TRACE_ENABLE` writable), when the
    /// scenario uses rate control or the dispatch trace.
    flow_table: Option<FlowTableBackend>,
    clock: TrafficClock,
    /// With a trace: the tracer's clock starts here (host calls are put
    /// on it, before the traffic starts too).
    trace_origin: Option<Instant>,
}

/// Wall-clock ns since the traffic started.
type TrafficClock = Rc<Cell<Option<Instant>>>;

fn since(clock: &TrafficClock) -> u64 {
    clock.get().map_or(0, |t| u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl NodeHost for RtHost {
    type B = RtBackend;
    fn shared(&self) -> Option<RtBackend> {
        None
    }
    fn attach(&mut self, port: u8) -> Result<RtBackend, DriverError> {
        // (A node past u16 is refused as NoSuchNode.)
        let node = u16::try_from(self.node).unwrap_or(u16::MAX);
        let live = LiveBackend::attach_with(&self.dir, node, port, &AttachOptions::default())?;
        Ok(RtBackend { live, flow_table: self.flow_table.clone() })
    }
    fn now_ns(&self) -> u64 {
        since(&self.clock)
    }
    fn trace_ns(&self) -> u64 {
        match self.trace_origin {
            Some(t) => u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX),
            None => self.now_ns(),
        }
    }
    fn traffic_starts(&mut self) {
        if self.clock.get().is_none() {
            self.clock.set(Some(Instant::now()));
        }
    }
}

/// Check, before any cluster starts, what a real-time run of `v` needs
/// beyond the sim's checks: switches the real-time fabric can route
/// (one route byte a hop), the profile loads, and the rate-control keys
/// that need a calibration (`idt_t`, `rate_mb_s`, `best_effort`) find
/// one; an error names the key (and the backend).
pub fn check_realtime(v: &Validated, backend: ClusterBackend) -> Result<(), ScenarioError> {
    if let Some(p) = v.switch_ports.filter(|&p| p as usize > NARROW_PORTS) {
        return Err(ScenarioError::new(format!(
            "fabric.switch_ports: {p}-port switches take two route bytes a hop, which only the \
             sim's fabric reads (at most {NARROW_PORTS} on the {backend} backend; --backend sim)"
        )));
    }
    let (profile, _) = load_profile(v)?;
    rates::resolve(v, &profile)?;
    Ok(())
}

pub fn run_realtime(v: &Validated, opts: &RtScenarioOptions) -> Result<Report, ScenarioError> {
    run_realtime_with_progress(v, opts, &mut |_| {})
}

/// Wall-clock time between two progress reports (and NIC health checks).
const CHECK_EVERY: Duration = Duration::from_millis(50);

pub fn run_realtime_with_progress(
    v: &Validated,
    opts: &RtScenarioOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, ScenarioError> {
    run_rt(v, opts, false, progress).map(|(r, _)| r)
}

/// As [`run_realtime_with_progress`], with every NIC's transition and
/// dispatch trace on, read every `TRACE_POLL` (`trace::LiveTracer`: what
/// a ring overwrote before it was read is counted), and the host
/// programs' calls logged. A real-time trace has no packet log, so no
/// arrows between NICs (docs/trace.md).
pub fn run_realtime_traced(
    v: &Validated,
    opts: &RtScenarioOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Report, ClusterTrace), ScenarioError> {
    let (r, t) = run_rt(v, opts, true, progress)?;
    Ok((r, t.unwrap_or_default()))
}

/// How often a traced real-time run reads the NICs' trace rings. A live
/// ping-pong makes a few thousand transitions per millisecond on a fast
/// machine: a 2,048-record ring read every millisecond lost records. A
/// read with nothing new is two loads per NIC.
const TRACE_POLL: Duration = Duration::from_micros(50);

fn run_rt(
    v: &Validated,
    opts: &RtScenarioOptions,
    trace: bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Report, Option<ClusterTrace>), ScenarioError> {
    let err = |m: String| ScenarioError::new(m);
    let backend = opts.backend;
    check_realtime(v, backend)?;
    if backend == ClusterBackend::Qemu && opts.image.is_none() {
        return Err(err("the qemu backend needs a firmware image (ELF) to flash".into()));
    }
    let wall = Instant::now();
    let (profile, topology) = load_profile(v)?;
    let v = &mcast::resolve(v, &profile)?;
    let layout = mcast::layout(v, topology, &profile);
    let mut cfg = RtConfig::new(&cluster_path(opts), backend, v.nodes);
    let the_plan = plan(v, limits(&profile, profile.host.memory_bytes))?;
    let rates = rates::resolve(v, &profile)?;
    if rates.uses_brm {
        // The master decides with the profile's stored calibration, the
        // one `idt_t` and `rates::resolve` use.
        cfg.brm = Some(BrmSetup::default());
    }
    // Each port has a slice of its own: large enough for the port that
    // needs most (host memory files are sparse: what is not touched costs
    // nothing), within the profile's host.
    let unit = NUM_PORTS as u64 * nic_abi::PAGE_SIZE;
    let need = (the_plan.largest_port_bytes() + (1 << 20)) * NUM_PORTS as u64 * 513 / 512;
    let need = need.div_ceil(unit) * unit;
    if need > cfg.host_size {
        if need > profile.host.memory_bytes {
            return Err(err(format!(
                "a port needs {} MiB of DMA-able memory: {} ports of it are more than the \
                 profile's host {} MiB",
                the_plan.largest_port_bytes() >> 20,
                NUM_PORTS,
                profile.host.memory_bytes >> 20
            )));
        }
        cfg.host_size = need;
    }
    let profile_name = profile.name.clone();
    // The scenario's `firmware.reliability` is in the profile already
    // (`load_profile`): every NIC's reset writes it, live and qemu alike.
    let reliability = profile.firmware.reliability;
    cfg.profile = profile;
    cfg.topology = topology;
    cfg.image = opts.image.clone();
    cfg.qemu_args = opts.qemu_args.clone();
    cfg.pacing = opts.pacing;
    cfg.faults =
        Faults { drop: v.faults.drop, corrupt: v.faults.corrupt, duplicate: v.faults.duplicate };
    cfg.seed = v.seed;
    cfg.send_timeout_us = v.send_timeout_us;
    let cluster =
        RtCluster::start(cfg).map_err(|e| err(format!("starting the {backend} cluster: {e}")))?;
    cluster
        .wait_running(opts.boot_timeout)
        .map_err(|e| err(format!("booting the {backend} cluster: {e}")))?;

    if let Some(p) = &opts.pcap {
        cluster.capture_to(p).map_err(|e| pcap_error(p, e))?;
    }

    // Cable outages: their links now, their times once the traffic
    // clock starts (`start_us` counts from there too).
    let mut outages = match &layout {
        Some(l) => outages(v, l)?,
        None if v.faults.link_down.is_empty() => Vec::new(),
        None => return Err(err("faults.link_down: the fabric has no layout".into())),
    };

    let ledger = new_ledger(&rates.flows, &the_plan);
    let mut tracer = None;
    if trace {
        let nodes: Vec<u32> = (0..v.nodes as u32).collect();
        tracer = Some(LiveTracer::start(cluster.dir(), &nodes).map_err(err)?);
        ledger.borrow_mut().host_calls = Some(Vec::new());
    }
    let mut last_trace_poll = Instant::now();
    let total = messages_total(v);
    let origin = Instant::now();
    let clock = TrafficClock::default();
    let cluster_name = cluster.path().display().to_string();
    let mut apps = Vec::new();
    for np in the_plan.nodes {
        let node = np.node as u32;
        let flow_table = if rates.touches_flow_table() {
            let sram = cluster.dir().map_sram(node).map_err(|e| {
                err(format!("node {node}: mapping its SRAM for the flow table: {e}"))
            })?;
            Some(FlowTableBackend::new(Arc::new(sram)))
        } else {
            None
        };
        let host = RtHost {
            dir: cluster.dir().clone(),
            node,
            flow_table,
            clock: clock.clone(),
            trace_origin: tracer.as_ref().map(LiveTracer::started),
        };
        // Requests go out from a thread of the client's own: a program
        // waits for no answer while its other flows have work.
        let brm: Option<BrmClient<Background>> = match rates.uses_brm {
            true => Some(BrmClient::connect_background(&cluster_name).map_err(|e| {
                err(format!("node {node}: connecting to the bandwidth manager: {e}"))
            })?),
            false => None,
        };
        apps.push(NodeApp::new(host, np, ledger.clone(), brm));
    }
    let limit = opts.timeout.unwrap_or(Duration::from_nanos(v.limit_ns));
    let packets = |c: &RtCluster| -> u64 {
        (0..v.nodes).map(|n| c.nic_stats(n).fw[Stat::PacketsSent as usize]).sum()
    };

    // NIC resets: asked for at their times on the traffic clock (the
    // supervisor carries each out within a few ms); a NIC being reset is
    // not "down" until it has had time to boot again.
    let mut resets = reset_schedule(v);
    let mut resetting: Vec<(usize, Instant)> = Vec::new();

    let mut last_check = Instant::now();
    let mut idle_since: Option<Instant> = None;
    // When a yield last came back late (see the idle wait below).
    let mut busy_since: Option<Instant> = None;
    let mut down: Vec<String> = Vec::new();
    let stopped = loop {
        let mut events = 0;
        for app in apps.iter_mut().filter(|a| !a.done()) {
            events += app.step(&mut |_| {});
        }
        while clock.get().is_some() && resets.peek().is_some_and(|&(t, _)| since(&clock) >= t) {
            let Some((_, node)) = resets.next() else { break };
            cluster.reset_node(node as usize);
            ledger.borrow_mut().resets.push((node, since(&clock)));
            resetting.push((node as usize, Instant::now()));
        }
        if !outages.is_empty() && clock.get().is_some() {
            let base = cluster.now_ns().saturating_sub(since(&clock));
            for o in &mut outages {
                o.from_ns += base;
                o.until_ns += base;
            }
            cluster.set_link_outages(&outages).map_err(err)?;
            outages.clear();
        }
        if let Some(t) = tracer.as_mut().filter(|_| last_trace_poll.elapsed() >= TRACE_POLL) {
            t.poll();
            last_trace_poll = Instant::now();
        }
        if apps.iter().all(|a| a.done()) {
            break "done";
        }
        let now = origin.elapsed();
        if now >= limit {
            break "timeout";
        }
        if last_check.elapsed() >= CHECK_EVERY {
            last_check = Instant::now();
            progress(&Progress {
                now_ns: now.as_nanos() as u64,
                limit_ns: limit.as_nanos() as u64,
                messages_done: ledger.borrow().resolved,
                messages_total: total,
                packets: packets(&cluster),
            });
            let st = cluster.fw_status();
            resetting.retain(|&(_, at)| at.elapsed() < RESET_GRACE);
            down = (0..st.len())
                .filter(|&n| st[n] != regs::FW_RUNNING && !resetting.iter().any(|&(r, _)| r == n))
                .map(|n| format!("node {n}: its NIC stopped running (FW_STATUS {:#x})", st[n]))
                .collect();
            if !down.is_empty() {
                break "nic-down";
            }
        }
        // Nothing happened: spin a little, then yield, then sleep, so the
        // device threads (and QEMU) get the CPU. On a busy machine (a
        // yield came back late: the OS ran something else meanwhile) the
        // programs nap instead of yielding for a while: a thread that
        // yields waits for its turn, milliseconds there, while one that
        // slept gets the CPU back soon, and a program that waits that
        // long lets its paced flows run out of posted sends.
        if events > 0 {
            idle_since = None;
        } else {
            let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
            if idle < Duration::from_micros(50) {
                std::hint::spin_loop();
            } else if idle < Duration::from_millis(2)
                && busy_since.is_none_or(|t| t.elapsed() > BUSY_FOR)
            {
                let t = Instant::now();
                std::thread::yield_now();
                if t.elapsed() >= YIELD_LATE {
                    busy_since = Some(Instant::now());
                }
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    };
    let end_ns = since(&clock);
    let events: u64 = apps.iter().map(|a| a.events()).sum();
    let notes = cluster.notes();
    let nics = (0..v.nodes)
        .map(|n| {
            let s = cluster.nic_stats(n);
            nic_report_of(n, |k| s.fw[k as usize])
        })
        .collect();
    let sent = packets(&cluster);
    let links = cluster.link_stats();
    let hops = links.iter().map(|l| l.packets).sum();
    let sum = |f: fn(&nic_fabric::fabric::LinkStats) -> u64| links.iter().map(f).sum();
    let (link_drops, link_corrupts, link_dups) =
        (sum(|l| l.fault_drops), sum(|l| l.fault_corrupts), sum(|l| l.fault_dups));
    let outage_drops = cluster.outage_drops();
    let captured = finish_pcap(opts.pcap.as_deref(), || cluster.finish_capture())?;
    let reset_counts: Vec<(u64, u64)> = (0..v.nodes)
        .map(|n| {
            let c = cluster.nic_stats(n).counters;
            (c.resets, c.down_drops)
        })
        .collect();
    let agents = cluster.brm_agent_counters();
    let traced = tracer.map(|t| {
        let calls = ledger.borrow_mut().host_calls.take().unwrap_or_default();
        t.finish(&backend.to_string(), calls)
    });
    // Close the ports before the cluster goes away.
    drop(apps);
    let stop = cluster.stop();

    let l = ledger.borrow();
    let mut problems = l.problems.clone();
    problems.extend(down);
    // The resets the scenario asked for are not problems.
    let asked = |n: &str| {
        v.faults
            .nic_reset
            .iter()
            .any(|r| n == nic_realtime::reset_note(r.node as usize, nic_realtime::RESET_ASKED))
    };
    problems
        .extend(notes.into_iter().filter(|n| !asked(n)).map(|n| format!("device process: {n}")));
    problems.extend(missing(&l, stopped, limit));
    if let Some((_, malformed, broken, refused)) = agents.filter(|a| a.1 + a.2 + a.3 > 0) {
        problems.push(format!(
            "bandwidth manager agents: {malformed} malformed commands, {broken} broken \
             connections, {refused} refused SRAM accesses"
        ));
    }
    if let Err(e) = stop {
        problems.push(format!("stopping the cluster: {e}"));
    }
    let flows = flow_reports(&l, layout.as_ref(), false, |_| None);
    let complete = stopped == "done" && l.all_accounted_for();
    let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
    let report = Report {
        profile: profile_name,
        seed: v.seed,
        sim: SimReport {
            end_ns,
            events,
            packets: sent,
            wall_ms: (wall_ms * 1000.0).round() / 1000.0,
            stopped: stopped.to_string(),
            hops,
            link_drops,
            link_corrupts,
            link_dups,
        },
        flows,
        nics,
        topology: topology.name().to_string(),
        nodes: v.nodes,
        complete,
        problems,
        backend: backend.to_string(),
        reliability: reliability.to_string(),
        pricing: None,
        link_down: link_down_reports(v, &outage_drops),
        nic_reset: nic_reset_reports(v, |n| reset_counts[n]),
        captured,
    };
    Ok((report, traced))
}

/// A port's backend in a real-time scenario run: the port's
/// `LiveBackend`, except for the words only the privileged side may write
/// (the flow table, `FLOW_GEN`, `DISPATCH_TRACE_ENABLE`), which go through
/// the cluster owner's own SRAM mapping (`FlowTableBackend`, as the BRM
/// agents write them) when the scenario uses rate control or the dispatch
/// trace. So a flow's raw IDT and its trace switch take effect as on the
/// sim, while every other access keeps the live checks.
#[derive(Clone)]
struct RtBackend {
    live: LiveBackend,
    flow_table: Option<FlowTableBackend>,
}

impl RtBackend {
    /// The privileged mapping, if `[off, off + len)` is one of its words.
    fn privileged(&self, off: u32, len: usize) -> Option<&FlowTableBackend> {
        let (off, end) = (off as u64, off as u64 + len as u64);
        let inside = |start: u32, size: u64| off >= start as u64 && end <= start as u64 + size;
        let hit = inside(FLOWS, FLOW_ENTRIES as u64 * FLOW_ENTRY_SIZE as u64)
            || inside(reg(regs::FLOW_GEN), 4)
            || inside(reg(regs::DISPATCH_TRACE_ENABLE), 4);
        self.flow_table.as_ref().filter(|_| hit)
    }
}

impl NicBackend for RtBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        match self.privileged(off, buf.len()) {
            Some(p) => p.sram_read(off, buf),
            None => self.live.sram_read(off, buf),
        }
    }
    fn sram_write(&self, off: u32, data: &[u8]) {
        match self.privileged(off, data.len()) {
            Some(p) => p.sram_write(off, data),
            None => self.live.sram_write(off, data),
        }
    }
    fn sram_load_u32(&self, off: u32) -> u32 {
        match self.privileged(off, 4) {
            Some(p) => p.sram_load_u32(off),
            None => self.live.sram_load_u32(off),
        }
    }
    fn sram_store_u32(&self, off: u32, v: u32) {
        match self.privileged(off, 4) {
            Some(p) => p.sram_store_u32(off, v),
            None => self.live.sram_store_u32(off, v),
        }
    }
    fn sram_load_u64(&self, off: u32) -> u64 {
        match self.privileged(off, 8) {
            Some(p) => p.sram_load_u64(off),
            None => self.live.sram_load_u64(off),
        }
    }
    fn sram_store_u64(&self, off: u32, v: u64) {
        match self.privileged(off, 8) {
            Some(p) => p.sram_store_u64(off, v),
            None => self.live.sram_store_u64(off, v),
        }
    }
    fn host_read(&self, bus: u64, buf: &mut [u8]) {
        self.live.host_read(bus, buf)
    }
    fn host_write(&self, bus: u64, data: &[u8]) {
        self.live.host_write(bus, data)
    }
    fn host_load_u32(&self, bus: u64) -> u32 {
        self.live.host_load_u32(bus)
    }
    fn pt_write(&self, port: u8, first: u64, entries: &[u64]) {
        self.live.pt_write(port, first, entries)
    }
    fn alloc_dma(&self, len: u64) -> Option<u64> {
        self.live.alloc_dma(len)
    }
    fn free_dma(&self, bus: u64, len: u64) {
        self.live.free_dma(bus, len)
    }
    fn now_ns(&self) -> u64 {
        self.live.now_ns()
    }
    fn charge(&self, op: HostOp) {
        self.live.charge(op)
    }
    fn doorbell(&self) {
        self.live.doorbell()
    }
    fn idle_wait(&self) -> bool {
        self.live.idle_wait()
    }
    fn port_hint(&self) -> Option<u8> {
        self.live.port_hint()
    }
    fn commit(&self) -> Result<(), DriverError> {
        self.live.commit()
    }
    fn has_heartbeat(&self) -> bool {
        self.live.has_heartbeat()
    }
    fn device_alive(&self) -> bool {
        self.live.device_alive()
    }
}

/// A fresh cluster directory under the memory temp directory
/// (`cluster::memory_temp_dir`), unless one is given.
fn cluster_path(opts: &RtScenarioOptions) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    if let Some(c) = &opts.cluster {
        return c.clone();
    }
    let n = N.fetch_add(1, Ordering::Relaxed);
    host_driver::cluster::memory_temp_dir()
        .join("nic-scenarios")
        .join(format!("{}-{}-{n}", opts.backend, std::process::id()))
        .to_string_lossy()
        .into_owned()
}

/// A yield of the programs' thread that came back after this long gave
/// the CPU to another thread: the machine is busy, and for `BUSY_FOR`
/// from then the programs nap where they would yield.
const YIELD_LATE: Duration = Duration::from_micros(200);
const BUSY_FOR: Duration = Duration::from_millis(100);

/// How long a NIC whose reset the scenario asked for may take to boot
/// again before it counts as down (a QEMU guest restarts in seconds).
const RESET_GRACE: Duration = Duration::from_secs(30);

/// What each unfinished flow still lacked when the run stopped.
fn missing(l: &Ledger, stopped: &str, limit: Duration) -> Vec<String> {
    let why = match stopped {
        "timeout" => format!("the run timed out after {limit:?}"),
        "done" => "every host program had finished".to_string(),
        other => format!("the run stopped ({other})"),
    };
    l.flows
        .iter()
        .enumerate()
        .filter(|&(i, f)| !f.finished() && l.cut(i).is_none())
        .map(|(_, f)| {
            let s = &f.spec;
            let m = s.messages;
            let mut parts = vec![format!("{}/{m} delivered", f.delivered)];
            if let (Some(spec), Some(mc)) = (&s.mcast, &f.mcast) {
                let short: Vec<String> = mc
                    .members
                    .iter()
                    .zip(&spec.members[1..])
                    .filter(|(st, _)| st.expected < m)
                    .map(|(st, node)| format!("node {node} expects {}", st.expected))
                    .collect();
                parts.push(format!("members short: {}", short.join(", ")));
                parts.push(format!("root completions {}/{m}", mc.completed));
                return format!("flow {}: incomplete when {why}: {}", s.name, parts.join(", "));
            }
            parts.push(format!(
                "next message expected: {}",
                f.streams[Dir::Forward as usize].expected
            ));
            if s.kind == FlowKind::Pingpong {
                parts.push(format!(
                    "next reply expected: {}",
                    f.streams[Dir::Reply as usize].expected
                ));
                parts.push(format!("replies completed {}/{m}", f.completed[Dir::Reply as usize]));
            }
            parts.push(format!("sends completed {}/{m}", f.completed[Dir::Forward as usize]));
            format!("flow {}: incomplete when {why}: {}", s.name, parts.join(", "))
        })
        .collect()
}
