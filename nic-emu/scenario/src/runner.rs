//! Running a validated scenario on the simulator: load the profile, plan,
//! build the `SimCluster`, spawn one `NodeApp` per node, run in slices of
//! virtual time (so long runs can report progress), and sum up the
//! report. The pieces a real-time run shares (profile and plan checks,
//! the ledger, the flow and NIC reports) are here too, `pub(super)`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use super::app::{FlowLedger, Ledger, NodeApp, SharedLedger, SimHost};
use super::format::{FlowSpec, ScenarioError, Validated};
use super::mcast;
use super::plan::{plan, Limits, Plan};
use super::report::{
    bandwidth_mb_s, FlowReport, LinkDownReport, NicReport, NicResetReport, Report, SimReport,
};
use super::trace::ClusterTrace;
use nic_device::profile::Pricing;
use nic_device::{Faults, Profile};
use nic_fabric::capture::end_name;
use nic_fabric::fabric::Outage;
use nic_fabric::topology::Layout;
use nic_fabric::Topology;
use nic_sim::SimBrm;
use nic_sim::{ClusterConfig, NicCycles, RunLimit, SimCluster};

/// How far a run has got, for progress output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time (sim) or wall-clock time since the traffic started
    /// (real time), and where the run stops at the latest.
    pub now_ns: u64,
    pub limit_ns: u64,
    /// Messages resolved (received, or failed at the sender) so far.
    pub messages_done: u64,
    pub messages_total: u64,
    pub packets: u64,
}

/// Virtual time between two progress reports.
const SLICE_NS: u64 = 2_000_000;

pub fn run(v: &Validated) -> Result<Report, ScenarioError> {
    run_with_progress(v, &mut |_| {})
}

pub fn run_with_progress(
    v: &Validated,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, ScenarioError> {
    run_with_options(v, &SimOptions::default(), progress)
}

/// How to run a scenario on the simulator, beyond the scenario itself.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// Write every packet the fabric carries to this pcapng file
    /// (`nic_fabric::capture`; Wireshark reads it with
    /// tools/wireshark/nic_emu.lua).
    pub pcap: Option<std::path::PathBuf>,
}

pub fn run_with_options(
    v: &Validated,
    opts: &SimOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, ScenarioError> {
    run_sim(v, opts, false, progress).map(|(r, _, _)| r)
}

/// As [`run_with_progress`], with each NIC's passes and the NIC CPU
/// cycles they were priced at over the whole run
/// (`SimCluster::nic_cycles`, in node order).
pub fn run_priced(
    v: &Validated,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Report, Vec<NicCycles>), ScenarioError> {
    run_sim(v, &SimOptions::default(), false, progress).map(|(r, _, c)| (r, c))
}

/// As [`run_with_options`], with every NIC's transition and dispatch trace
/// on (read after every firmware pass, so no record is lost) and every
/// host program call logged: the report (the same as without the trace)
/// and what was traced, for [`crate::trace::chrome_json`].
pub fn run_traced(
    v: &Validated,
    opts: &SimOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Report, ClusterTrace), ScenarioError> {
    let (r, t, _) = run_sim(v, opts, true, progress)?;
    Ok((r, t.unwrap_or_default()))
}

fn run_sim(
    v: &Validated,
    opts: &SimOptions,
    trace: bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Report, Option<ClusterTrace>, Vec<NicCycles>), ScenarioError> {
    let err = |m: String| ScenarioError::new(m);
    let (profile, topology) = load_profile(v)?;
    let v = &mcast::resolve(v, &profile)?;
    let layout = mcast::layout(v, topology, &profile);
    let the_plan = plan(v, limits(&profile, profile.host.memory_bytes))?;
    let profile_name = profile.name.clone();
    // Rate control: `idt_t` needs the profile's calibrated T, the
    // bandwidth manager its whole calibration.
    let super::rates::Rates { flows: flows_spec, uses_brm, calibration: cal } =
        super::rates::resolve(v, &profile)?;
    let cfg = ClusterConfig {
        profile,
        nodes: v.nodes,
        topology,
        seed: v.seed,
        faults: Faults {
            drop: v.faults.drop,
            corrupt: v.faults.corrupt,
            duplicate: v.faults.duplicate,
        },
        send_timeout_us: v.send_timeout_us,
    };
    let mut cluster =
        SimCluster::new(cfg).map_err(|e| err(format!("building the cluster: {e}")))?;
    let outages = outages(v, cluster.layout())?;
    cluster.set_link_outages(&outages).map_err(err)?;
    if let Some(p) = &opts.pcap {
        cluster.capture_to(p).map_err(|e| pcap_error(p, e))?;
    }
    let brm = match (uses_brm, cal) {
        (true, Some(c)) => Some(SimBrm::new(&cluster, c).map_err(err)?.shared()),
        _ => None,
    };

    let ledger = new_ledger(&flows_spec, &the_plan);
    if trace {
        cluster.trace_transitions();
        ledger.borrow_mut().host_calls = Some(Vec::new());
    }
    let mut resets = reset_schedule(v);
    let messages_total = messages_total(v);
    for np in the_plan.nodes {
        let node = np.node as usize;
        let client = brm.as_ref().map(|b| SimBrm::client(b, cluster.backend(node)));
        let app = NodeApp::new(SimHost(cluster.backend(node)), np, ledger.clone(), client);
        cluster.spawn(node, Box::new(app));
    }

    // Multicast flows: when each of their packets is in the fabric.
    let multicast = v.flows.iter().any(|f| f.mcast.is_some());
    if multicast {
        cluster.log_mcast_packets();
    }
    let mut spans = Vec::new();
    let wall = Instant::now();
    let mut until = 0u64;
    let stopped = loop {
        until = (until + SLICE_NS).min(v.limit_ns);
        if let Some(&(t, _)) = resets.peek() {
            until = until.min(t);
        }
        let mut outcome = cluster.run(RunLimit::Until(until));
        // NIC resets due now (the run stops at each one's time).
        while let Some(&(t, node)) = resets.peek() {
            if outcome != RunOutcome::TimeLimit || cluster.now_ns() < t {
                break;
            }
            resets.next();
            cluster.reset_nic(node as usize).map_err(|e| err(format!("NIC reset: {e}")))?;
            ledger.borrow_mut().resets.push((node, t));
            // The bandwidth manager installs that NIC's flow entries again.
            if let Some(b) = &brm {
                b.borrow_mut().nic_reset(cluster.now_ns(), node);
            }
            // Every program looks again: flows the reset cut may be done.
            cluster.wake_all_apps();
            outcome = RunOutcome::TimeLimit;
        }
        if multicast {
            spans.extend(cluster.take_mcast_spans());
        }
        let st = cluster.sim_stats();
        progress(&Progress {
            now_ns: cluster.now_ns(),
            limit_ns: v.limit_ns,
            messages_done: ledger.borrow().resolved,
            messages_total,
            packets: st.packets,
        });
        match outcome {
            RunOutcome::Done => break "done".to_string(),
            RunOutcome::TimeLimit if until >= v.limit_ns => break "time-limit".to_string(),
            RunOutcome::TimeLimit => {}
            other => break other.as_str().to_string(),
        }
    };
    let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
    let captured = finish_pcap(opts.pcap.as_deref(), || cluster.finish_capture())?;

    let st = cluster.sim_stats();
    let traced = trace.then(|| {
        let calls = ledger.borrow_mut().host_calls.take().unwrap_or_default();
        let mut t = ClusterTrace::collect(
            "sim",
            cluster.profile().nic.rtc_hz,
            cluster.now_ns(),
            (0..v.nodes).map(|n| (cluster.take_trace(n), 0)).collect(),
            calls,
        );
        t.links = cluster
            .link_specs()
            .iter()
            .map(|l| format!("{} -> {}", end_name(l.from), end_name(l.to)))
            .collect();
        t.link_events = cluster.take_link_log();
        t
    });
    mcast::count_in_flight(&mut ledger.borrow_mut(), &spans);
    let l = ledger.borrow();
    let brm_ref = brm.as_ref().map(|b| b.borrow());
    let mut problems = l.problems.clone();
    for n in 0..v.nodes {
        let f = cluster.nic_stats(n).hw_faults;
        if f > 0 {
            problems.push(format!(
                "node {n}: the MCP made {f} SRAM accesses out of range or off alignment"
            ));
        }
    }
    if let Some(b) = &brm_ref {
        problems.extend(b.master().failures.iter().map(|e| format!("bandwidth manager: {e}")));
    }
    let flows = flow_reports(&l, layout.as_ref(), true, |s| match (&brm_ref, s.rate.uses_brm()) {
        (Some(b), true) => Some(
            b.history()
                .iter()
                .filter(|(_, id, _)| {
                    id.src_node == s.src_node
                        && id.src_port == s.src_port
                        && id.dst_node == s.dst_node
                        && id.dst_port == s.dst_port
                        && id.prio == s.priority as u8
                })
                .map(|(t, _, idt)| (*t, *idt))
                .collect(),
        ),
        _ => None,
    });
    let nics = (0..v.nodes).map(|n| nic_report(&cluster, n)).collect();
    let links = cluster.link_stats();
    let complete = stopped == "done" && l.all_accounted_for();
    let report = Report {
        profile: profile_name,
        seed: v.seed,
        sim: SimReport {
            end_ns: st.end_ns,
            events: st.events,
            packets: st.packets,
            wall_ms: (wall_ms * 1000.0).round() / 1000.0,
            stopped,
            hops: st.hops,
            link_drops: links.iter().map(|l| l.fault_drops).sum(),
            link_corrupts: links.iter().map(|l| l.fault_corrupts).sum(),
            link_dups: links.iter().map(|l| l.fault_dups).sum(),
        },
        flows,
        nics,
        topology: topology.name().to_string(),
        nodes: v.nodes,
        complete,
        problems,
        backend: "sim".into(),
        reliability: cluster.profile().firmware.reliability.to_string(),
        pricing: match cluster.profile().nic_cpu.pricing {
            Pricing::Published => None,
            p => Some(p.to_string()),
        },
        link_down: link_down_reports(v, cluster.outage_drops()),
        nic_reset: nic_reset_reports(v, |n| cluster.nic_resets(n)),
        captured,
    };
    let cycles = (0..v.nodes).map(|n| cluster.nic_cycles(n)).collect();
    Ok((report, traced, cycles))
}

/// The scenario's NIC resets as (time, node), earliest first.
pub(super) fn reset_schedule(v: &Validated) -> std::iter::Peekable<std::vec::IntoIter<(u64, u16)>> {
    let mut resets: Vec<(u64, u16)> =
        v.faults.nic_reset.iter().map(|r| (r.at_ns(), r.node as u16)).collect();
    resets.sort_unstable();
    resets.into_iter().peekable()
}

/// A packet capture file that could not be written.
pub(super) fn pcap_error(p: &std::path::Path, e: std::io::Error) -> ScenarioError {
    ScenarioError::new(format!("--pcap {}: {e}", p.display()))
}

/// With a capture (`pcap`): flush it (`finish`) and say how many records it
/// holds.
pub(super) fn finish_pcap(
    pcap: Option<&std::path::Path>,
    finish: impl FnOnce() -> std::io::Result<u64>,
) -> Result<Option<u64>, ScenarioError> {
    match pcap {
        Some(p) => finish().map(Some).map_err(|e| pcap_error(p, e)),
        None => Ok(None),
    }
}

/// The report of each NIC reset: `counts(node)` gives the node's resets so
/// far and the packets they lost at its input.
pub(super) fn nic_reset_reports(
    v: &Validated,
    counts: impl Fn(usize) -> (u64, u64),
) -> Vec<NicResetReport> {
    let all = &v.faults.nic_reset;
    all.iter()
        .enumerate()
        .map(|(i, r)| {
            let (resets, lost) = counts(r.node as usize);
            // This node's resets up to this one, by time.
            let nth = all
                .iter()
                .enumerate()
                .filter(|&(j, o)| o.node == r.node && (o.at_us, j) <= (r.at_us, i))
                .count() as u64;
            NicResetReport { node: r.node, at_us: r.at_us, done: resets >= nth, lost_packets: lost }
        })
        .collect()
}

/// The scenario's cable outages as the fabric's directed links, times from
/// the start of the traffic; a name that is no cable of `layout` is refused
/// with its key.
pub(super) fn outages(v: &Validated, layout: &Layout) -> Result<Vec<Outage>, ScenarioError> {
    let mut outages = Vec::new();
    for (i, d) in v.faults.link_down.iter().enumerate() {
        let links = layout
            .cable(d.link.trim())
            .map_err(|e| ScenarioError::new(format!("faults.link_down[{i}].link: {e}")))?;
        let (from_ns, until_ns) = d.span_ns();
        outages.extend(links.into_iter().map(|link| Outage { link, from_ns, until_ns, index: i }));
    }
    Ok(outages)
}

/// The report of each cable outage: what it lost (`drops` by its index).
pub(super) fn link_down_reports(v: &Validated, drops: &[u64]) -> Vec<LinkDownReport> {
    v.faults
        .link_down
        .iter()
        .enumerate()
        .map(|(i, d)| LinkDownReport {
            link: d.link.trim().to_string(),
            at_us: d.at_us,
            for_us: d.for_us,
            dropped: drops.get(i).copied().unwrap_or(0),
        })
        .collect()
}

fn nic_report(cluster: &SimCluster, node: usize) -> NicReport {
    let s = cluster.nic_stats(node);
    nic_report_of(node, |k| s.stat(k))
}

/// A NIC's report from its STATS block.
pub(super) fn nic_report_of(node: usize, stat: impl Fn(nic_abi::stats::Stat) -> u64) -> NicReport {
    use nic_abi::stats::Stat;
    let g = |k: Stat| stat(k);
    NicReport {
        node,
        packets_sent: g(Stat::PacketsSent),
        packets_received: g(Stat::PacketsReceived),
        retransmits: g(Stat::Retransmits),
        drops: g(Stat::Drops),
        errors: g(Stat::Errors),
        crc_errors: g(Stat::CrcErrors),
        duplicates: g(Stat::Duplicates),
        out_of_order: g(Stat::OutOfOrder),
        bad_headers: g(Stat::BadHeaders),
        acks_sent: g(Stat::AcksSent),
        nacks_sent: g(Stat::NacksSent),
        timeouts: g(Stat::Timeouts),
        messages_sent: g(Stat::MessagesSent),
        messages_received: g(Stat::MessagesReceived),
        no_buffer: g(Stat::NoBuffer),
        polls_sent: g(Stat::PollsSent),
        control_drops: g(Stat::ControlDrops),
        streams_evicted: g(Stat::StreamsEvicted),
        retransmit_causes: crate::report::RetransmitCauses {
            timeout: g(Stat::RetxTimeout),
            gap: g(Stat::RetxGap),
            no_buffer: g(Stat::RetxNoBuffer),
            refused: g(Stat::RetxRefused),
            resync: g(Stat::RetxResync),
        },
        retx_bytes: g(Stat::RetxBytes),
        stats_sent: g(Stat::StatsSent),
        ustats_sent: g(Stat::UstatsSent),
        held: g(Stat::Held),
        tlb: crate::report::TlbCounts {
            hits: g(Stat::TlbHits),
            misses: g(Stat::TlbMisses),
            evictions: g(Stat::TlbEvictions),
        },
    }
}

/// The profile and topology a scenario names, checked to fit.
pub(super) fn load_profile(v: &Validated) -> Result<(Profile, Topology), ScenarioError> {
    let err = |m: String| ScenarioError::new(m);
    let mut profile = Profile::load(&v.profile).map_err(|e| err(format!("profile: {e}")))?;
    // `[firmware] reliability` overrides the profile's: the device model
    // writes it into `regs::RELIABILITY` at every reset, on every backend.
    if let Some(r) = v.reliability {
        profile.firmware.reliability = r;
    }
    // So does `[firmware] ack_delay_us` (written into `regs::ACK_DELAY_TICKS`
    // at every reset, on every backend).
    if let Some(t) = v.ack_delay_ns {
        profile.firmware.ack_delay_ns = t;
    }
    // `[nic_cpu]` overrides the profile's pricing (the sim's only).
    let c = &v.nic_cpu;
    if let Some(p) = c.pricing {
        profile.nic_cpu.pricing = p;
    }
    if let Some(x) = c.cycles_per_instruction {
        profile.nic_cpu.cycles_per_instruction = x;
    }
    if let Some(t) = &c.firmware_costs {
        profile.nic_cpu.firmware_costs = Some(t.clone());
    }
    if profile.nic_cpu.pricing == Pricing::Firmware {
        profile.firmware_costs().map_err(err)?;
    }
    // `fabric.switch_ports` overrides the profile's switches.
    if let Some(p) = v.switch_ports {
        profile.switch.ports = p;
    }
    let topology: Topology =
        v.topology.parse().map_err(|e| err(format!("fabric.topology: {e}")))?;
    let ports = profile.switch.ports as usize;
    if v.nodes > topology.max_nodes(ports) {
        return Err(err(format!(
            "fabric.nodes: {} nodes do not fit topology {} with {ports}-port switches (at most \
             {}; fabric.switch_ports sets the ports per switch)",
            v.nodes,
            topology.name(),
            topology.max_nodes(ports)
        )));
    }
    Ok((profile, topology))
}

/// A port's resources from the profile, with `host_memory` bytes per host.
pub(super) fn limits(profile: &Profile, host_memory: u64) -> Limits {
    Limits {
        send_tokens: profile.firmware.send_tokens,
        recv_tokens: profile.firmware.recv_tokens,
        host_memory,
    }
}

/// The ledger every node's app shares, before anything happened.
pub(super) fn new_ledger(flows: &[FlowSpec], the_plan: &Plan) -> SharedLedger {
    Rc::new(RefCell::new(Ledger {
        flows: flows.iter().cloned().map(FlowLedger::new).collect(),
        streams: the_plan.streams.clone(),
        groups: the_plan.groups.clone(),
        ports_total: the_plan.nodes.iter().map(|n| n.ports.len()).sum(),
        ports_ready: 0,
        problems: Vec::new(),
        resolved: 0,
        resets: Vec::new(),
        host_calls: None,
    }))
}

/// Messages a scenario sends (a ping-pong round trip is two, a multicast
/// one per member).
pub(super) fn messages_total(v: &Validated) -> u64 {
    v.flows
        .iter()
        .map(|f| match f.kind {
            super::FlowKind::Stream => f.messages,
            super::FlowKind::Pingpong => 2 * f.messages,
            super::FlowKind::Multicast => mcast::receptions(f),
            // A collective: one completion per member.
            _ => f.coll.as_ref().map_or(0, |c| c.count * c.size() as u64),
        })
        .sum()
}

/// Every flow's report from the ledger; `idt_history` gives a flow's
/// bandwidth-manager history, if it has one. `layout` is the fabric's (for
/// multicast link figures); `sim`: the run was in virtual time.
pub(super) fn flow_reports(
    l: &Ledger,
    layout: Option<&Layout>,
    sim: bool,
    idt_history: impl Fn(&FlowSpec) -> Option<Vec<(u64, Option<u32>)>>,
) -> Vec<FlowReport> {
    l.flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let s = &f.spec;
            let first = f.first_send_ns.unwrap_or(0);
            let coll = match (&s.coll, &f.coll) {
                (Some(c), Some(l)) => {
                    Some(super::coll::report(c, l, l.alg.unwrap_or(c.alg((4096, u32::MAX)))))
                }
                _ => None,
            };
            FlowReport {
                name: s.name.clone(),
                messages: s.messages,
                delivered: f.coll.as_ref().map_or(f.delivered, |c| c.all_done),
                bytes: f.bytes,
                corrupted: f.corrupted,
                duplicates: f.duplicates,
                first_send_ns: first,
                last_recv_ns: f.last_recv_ns,
                bandwidth_mb_s: bandwidth_mb_s(f.bytes, first, f.last_recv_ns),
                latency_ns: coll.as_ref().map_or_else(|| f.latencies.latency(), |c| c.0),
                kind: s.kind.as_str().to_string(),
                src: [s.src_node as u64, s.src_port as u64],
                dst: s.mcast.is_none().then_some([s.dst_node as u64, s.dst_port as u64]),
                priority: s.priority.name().into(),
                sizes: s.sizes.clone(),
                out_of_order: f.out_of_order,
                send_errors: f.send_errors,
                send_error_statuses: f.send_error_statuses.clone(),
                complete: f.finished(),
                cut_by_reset_us: l.cut(i).map(|t| t as f64 / 1e3),
                idt: f.idt,
                admitted: f.admitted,
                refused_reason: f.refused_reason.clone(),
                idt_history: idt_history(s),
                dispatch_ticks: s.trace.then(|| f.dispatch_ticks.clone()),
                multicast: mcast::report(f, layout, sim),
                collective: coll.as_ref().map(|c| c.1.clone()),
            }
        })
        .collect()
}

use nic_sim::RunOutcome;
