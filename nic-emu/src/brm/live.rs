//! Rate-control experiments on a running live or qemu cluster with a
//! BRM: traffic from threads of this process (ordinary host programs:
//! `LiveBackend` ports), bandwidth asked with
//! `BrmClient::connect(cluster)`, achieved rates read from the source
//! NICs' flow-table counters (bytes dispatched over RTC ticks, readable
//! by any host process). `cargo xtask report rate-control --backend live`
//! runs [`experiments`].
//!
//! - [`Traffic`]: one flow of 64 KiB messages, a receiver keeping buffers
//!   posted and a sender keeping sends outstanding, until stopped.
//! - [`Probe`]: a flow's counters between two moments.
//! - [`experiments`]: the acceptance experiments of the spec, in units of
//!   the BRM's own calibration (T, Bmax).
//!
//! Owns its threads and ports; touches the NICs only as a host program.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use host_brm::socket::SocketTransport;
use host_brm::{BrmClient, FlowId, Refused};
use host_driver::{Event, FlowInfo, IdlePolicy, LiveBackend, Nic, Priority};
use host_programs::bench::open_live_port;
use nic_abi::{class_max_len, size_class_for};

use super::calibration::Calibration;

/// Message size of every experiment flow.
pub const MSG: u32 = 65536;

/// Port the probes attach to (experiment flows use 1..=5).
pub const PROBE_PORT: u8 = 7;

/// One flow's traffic: a receiver and a sender thread.
pub struct Traffic {
    pub flow: FlowId,
    stop_send: Arc<AtomicBool>,
    stop_recv: Arc<AtomicBool>,
    sender: Option<JoinHandle<Result<u64, String>>>,
    receiver: Option<JoinHandle<Result<u64, String>>>,
}

const OPEN: Duration = Duration::from_secs(10);

impl Traffic {
    /// Start `flow`: the receiver first, then the sender (which retries
    /// while the receiver's port is not open yet).
    pub fn start(cluster: &str, flow: FlowId) -> Result<Traffic, String> {
        let stop_send = Arc::new(AtomicBool::new(false));
        let stop_recv = Arc::new(AtomicBool::new(false));
        let (c, st) = (cluster.to_string(), stop_recv.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || receive(&c, flow, &st, ready_tx));
        match ready_rx.recv_timeout(OPEN * 2) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("flow {flow}: the receiver did not open its port")),
        }
        let (c, st) = (cluster.to_string(), stop_send.clone());
        let sender = std::thread::spawn(move || send(&c, flow, &st));
        Ok(Traffic { flow, stop_send, stop_recv, sender: Some(sender), receiver: Some(receiver) })
    }

    /// Stop sending, let the last messages land, stop receiving. Returns
    /// (messages sent, messages received).
    pub fn stop(mut self) -> Result<(u64, u64), String> {
        self.stop_inner()
    }

    /// Err if a thread already gave up (its error).
    pub fn check(&mut self) -> Result<(), String> {
        for (slot, what) in [(&mut self.sender, "sender"), (&mut self.receiver, "receiver")] {
            if slot.as_ref().is_some_and(|h| h.is_finished()) {
                let r = slot.take().map(|h| h.join());
                return match r {
                    Some(Ok(Err(e))) => Err(e),
                    _ => Err(format!("flow {}: the {what} stopped", self.flow)),
                };
            }
        }
        Ok(())
    }

    fn stop_inner(&mut self) -> Result<(u64, u64), String> {
        self.stop_send.store(true, Ordering::Relaxed);
        let sent = self.sender.take().map(|h| h.join());
        self.stop_recv.store(true, Ordering::Relaxed);
        let got = self.receiver.take().map(|h| h.join());
        let take = |r: Option<std::thread::Result<Result<u64, String>>>, what: &str| match r {
            None => Ok(0),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(format!("flow {}: the {what} panicked", self.flow)),
        };
        Ok((take(sent, "sender")?, take(got, "receiver")?))
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

fn receive(
    cluster: &str,
    f: FlowId,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<u64, String> {
    let opened =
        open_live_port(cluster, f.dst_node as u32, f.dst_port, OPEN, IdlePolicy::default());
    let (_nic, mut port) = match opened {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let class = size_class_for(MSG as u64);
    let prio = Priority::from_u8(f.prio).unwrap_or(Priority::Low);
    let n = port.recv_tokens_free().min(16);
    let mut bufs = Vec::new();
    for i in 0..n {
        let b = port.alloc(class_max_len(class)).map_err(|e| e.to_string())?;
        port.provide_receive_buffer(&b, class, prio, i as u64).map_err(|e| e.to_string())?;
        bufs.push(b);
    }
    let _ = ready.send(Ok(()));
    let mut got = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match port.wait(Duration::from_millis(50)) {
            Ok(Event::Received { tag, .. }) => {
                got += 1;
                let b = bufs.get(tag as usize).ok_or("a receive tag of no buffer")?;
                port.provide_receive_buffer(b, class, prio, tag).map_err(|e| e.to_string())?;
            }
            Ok(Event::PortOpened { .. }) => {}
            Ok(other) => return Err(format!("flow {f}: receiver got {other:?}")),
            Err(host_driver::DriverError::Timeout) => {}
            Err(e) => return Err(format!("flow {f}: receiver: {e}")),
        }
    }
    Ok(got)
}

fn send(cluster: &str, f: FlowId, stop: &AtomicBool) -> Result<u64, String> {
    let (_nic, mut port) =
        open_live_port(cluster, f.src_node as u32, f.src_port, OPEN, IdlePolicy::default())?;
    let class = size_class_for(MSG as u64);
    let prio = Priority::from_u8(f.prio).unwrap_or(Priority::Low);
    let buf = port.alloc(MSG as u64).map_err(|e| e.to_string())?;
    let window = port.send_tokens_free().min(8);
    let (mut out, mut sent) = (0u32, 0u64);
    let post = |port: &mut host_driver::Port<LiveBackend>| {
        port.send(&buf, 0, MSG, class, prio, f.dst_node, f.dst_port, 0).map_err(|e| e.to_string())
    };
    let deadline = |t: Instant| t.elapsed() > Duration::from_secs(10);
    let mut drain_since: Option<Instant> = None;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if stopping && drain_since.is_none() {
            drain_since = Some(Instant::now());
        }
        while !stopping && out < window {
            post(&mut port)?;
            out += 1;
        }
        if out == 0 {
            return Ok(sent);
        }
        if drain_since.is_some_and(deadline) {
            return Err(format!("flow {f}: {out} sends did not complete"));
        }
        match port.wait(Duration::from_millis(50)) {
            Ok(Event::Sent { status, .. }) => {
                out -= 1;
                if status == host_driver::SendStatus::Ok {
                    sent += 1;
                } else if matches!(
                    status,
                    host_driver::SendStatus::TargetPortClosed
                        | host_driver::SendStatus::TimedOut
                        | host_driver::SendStatus::Dropped
                ) {
                    std::thread::sleep(Duration::from_millis(1));
                    port.resume(f.dst_node, f.dst_port, prio).map_err(|e| e.to_string())?;
                } else {
                    return Err(format!("flow {f}: a send failed: {status:?}"));
                }
            }
            Ok(Event::PortOpened { .. }) => {}
            Ok(other) => return Err(format!("flow {f}: sender got {other:?}")),
            Err(host_driver::DriverError::Timeout) => {}
            Err(e) => return Err(format!("flow {f}: sender: {e}")),
        }
    }
}

/// Reads flows' counters at their source NICs (a host process attached
/// to [`PROBE_PORT`] of each node it looks at).
pub struct Probe {
    nics: Vec<Option<Nic<LiveBackend>>>,
    cluster: String,
}

impl Probe {
    pub fn new(cluster: &str, nodes: usize) -> Probe {
        Probe { nics: (0..nodes).map(|_| None).collect(), cluster: cluster.to_string() }
    }

    fn nic(&mut self, node: u16) -> Result<&Nic<LiveBackend>, String> {
        let slot = self.nics.get_mut(node as usize).ok_or(format!("no node {node}"))?;
        if slot.is_none() {
            let be = LiveBackend::attach(&self.cluster, node, PROBE_PORT)
                .map_err(|e| format!("probe on node {node}: {e}"))?;
            *slot = Some(Nic::open_timeout(be, OPEN).map_err(|e| e.to_string())?);
        }
        slot.as_ref().ok_or_else(|| "no probe".to_string())
    }

    /// `flow`'s entry at its source NIC now.
    pub fn read(&mut self, flow: FlowId) -> Result<FlowInfo, String> {
        self.nic(flow.src_node)?
            .flow(flow.key())
            .ok_or_else(|| format!("flow {flow} has no flow-table entry at node {}", flow.src_node))
    }

    pub fn rtc_hz(&mut self, node: u16) -> Result<u64, String> {
        Ok(self.nic(node)?.rtc_hz())
    }
}

/// What a flow did between two readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Achieved {
    pub idt: u32,
    pub mb_s: f64,
    /// Mean RTC ticks between two of its packet dispatches.
    pub ticks_per_packet: f64,
    pub packets: u64,
}

impl Achieved {
    pub fn between(a: &FlowInfo, b: &FlowInfo, rtc_hz: u64) -> Achieved {
        let pk = b.packets.saturating_sub(a.packets);
        Achieved {
            idt: b.idt,
            mb_s: b.mb_s_since(a, rtc_hz),
            ticks_per_packet: if pk == 0 {
                0.0
            } else {
                b.rtc.saturating_sub(a.rtc) as f64 / pk as f64
            },
            packets: pk,
        }
    }
}

/// Measure `flows` over `window` after `settle`.
pub fn measure(
    probe: &mut Probe,
    flows: &[FlowId],
    settle: Duration,
    window: Duration,
) -> Result<Vec<Achieved>, String> {
    std::thread::sleep(settle);
    let a: Vec<FlowInfo> = flows.iter().map(|f| probe.read(*f)).collect::<Result<_, _>>()?;
    std::thread::sleep(window);
    let b: Vec<FlowInfo> = flows.iter().map(|f| probe.read(*f)).collect::<Result<_, _>>()?;
    let hz = probe.rtc_hz(flows.first().map_or(0, |f| f.src_node))?;
    Ok(a.iter().zip(&b).map(|(a, b)| Achieved::between(a, b, hz)).collect())
}

/// One phase of the best-effort experiment.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    /// The best-effort flow.
    pub best_effort: Achieved,
    /// (asked MB/s, achieved) of the premium flows running.
    pub premium: Vec<(f64, Achieved)>,
}

/// The results of [`experiments`].
#[derive(Debug, Clone, Default)]
pub struct LiveResults {
    /// The unregulated flow alone (best effort, IDT 0): the live Bmax and
    /// T (its mean ticks per packet).
    pub unregulated: Option<Achieved>,
    /// (requested MB/s, achieved) of two flows 0 -> 1, 0 -> 2 at (2T, 2T).
    pub equal: Vec<(f64, Achieved)>,
    /// The same at (10T/3, 10T/7).
    pub three_seven: Vec<(f64, Achieved)>,
    /// A third request from node 0 while the 3:7 pair holds: refused by
    /// (criterion); then admitted after a release (IDT).
    pub refused: Option<(f64, Refused)>,
    pub after_release: Option<(f64, u32)>,
    /// Best effort, phase by phase.
    pub best_effort: Vec<Phase>,
}

/// How long each measurement runs.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub settle: Duration,
    pub window: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing { settle: Duration::from_millis(300), window: Duration::from_millis(1500) }
    }
}

/// Flow `s -> d` from source port `d` to target port `d` (flows from one
/// node use a port each).
fn flow(s: u16, d: u16) -> FlowId {
    FlowId::new(s, d as u8, d, d as u8, Priority::Low)
}

/// The acceptance experiments on the cluster `cluster` (at least 4
/// nodes, a BRM deciding with `cal`): node 0 sends to 1, 2, 3.
pub fn experiments(cluster: &str, cal: &Calibration, t: Timing) -> Result<LiveResults, String> {
    let mut brm: BrmClient<SocketTransport> = BrmClient::connect(cluster)?;
    let mut probe = Probe::new(cluster, 4);
    let mut r = LiveResults::default();
    let cap = cal.out_capacity(0.0).min(cal.bmax_mb_s);
    let (f1, f2, f3) = (flow(0, 1), flow(0, 2), flow(0, 3));
    let req = |brm: &mut BrmClient<SocketTransport>, f: FlowId, b: f64| {
        brm.request_bandwidth(f, b).map_err(|e| format!("flow {f} at {b:.2} MB/s: {e}"))
    };

    // The unregulated flow alone: best effort, uncontended -> IDT 0.
    brm.best_effort(f1).map_err(|e| e.to_string())?;
    let mut t1 = Traffic::start(cluster, f1)?;
    r.unregulated = Some(measure(&mut probe, &[f1], t.settle, t.window)?[0]);
    t1.check()?;

    // (2T, 2T): each asks half of what the node can send.
    let mut t2 = Traffic::start(cluster, f2)?;
    for f in [f1, f2] {
        req(&mut brm, f, cap / 2.0)?;
    }
    let m = measure(&mut probe, &[f1, f2], t.settle, t.window)?;
    r.equal = vec![(cap / 2.0, m[0]), (cap / 2.0, m[1])];
    t1.check()?;
    t2.check()?;

    // (10T/3, 10T/7).
    let (b1, b2) = (cap * 0.3, cap * 0.7);
    // Lower f2 first, so that f1's rise fits.
    req(&mut brm, f2, b1)?;
    req(&mut brm, f1, b2)?;
    let m = measure(&mut probe, &[f1, f2], t.settle, t.window)?;
    // f1 has 7 parts, f2 3: report in the spec's order (3, then 7).
    r.three_seven = vec![(b1, m[1]), (b2, m[0])];
    t1.check()?;
    t2.check()?;

    // Refusal, then a release lets it in.
    let ask = (cap * 0.25).max(1.0);
    match brm.request_bandwidth(f3, ask) {
        Ok(a) => return Err(format!("{ask:.2} MB/s on {f3} was admitted (IDT {})", a.idt)),
        Err(e) => r.refused = Some((ask, e)),
    }
    t1.stop()?;
    t2.stop()?;
    brm.release_bandwidth(f2).map_err(|e| e.to_string())?;
    let a = req(&mut brm, f3, ask)?;
    r.after_release = Some((ask, a.idt));
    for f in [f1, f3] {
        brm.release_bandwidth(f).map_err(|e| e.to_string())?;
    }

    // Best effort: alone, + 40 premium, + 20 premium, alone again.
    let (p1, p2) = (40.0f64.min(cap * 0.49), 20.0f64.min(cap * 0.24));
    brm.best_effort(f1).map_err(|e| e.to_string())?;
    let mut be = Traffic::start(cluster, f1)?;
    let alone = measure(&mut probe, &[f1], t.settle, t.window)?[0];
    r.best_effort.push(Phase { name: "alone".into(), best_effort: alone, premium: vec![] });
    req(&mut brm, f2, p1)?;
    let mut tp1 = Traffic::start(cluster, f2)?;
    let m = measure(&mut probe, &[f1, f2], t.settle, t.window)?;
    r.best_effort.push(Phase {
        name: format!("+ {p1:.0} MB/s premium"),
        best_effort: m[0],
        premium: vec![(p1, m[1])],
    });
    req(&mut brm, f3, p2)?;
    let mut tp2 = Traffic::start(cluster, f3)?;
    let m = measure(&mut probe, &[f1, f2, f3], t.settle, t.window)?;
    r.best_effort.push(Phase {
        name: format!("+ {p2:.0} MB/s premium"),
        best_effort: m[0],
        premium: vec![(p1, m[1]), (p2, m[2])],
    });
    for tr in [&mut be, &mut tp1, &mut tp2] {
        tr.check()?;
    }
    tp1.stop()?;
    tp2.stop()?;
    for f in [f2, f3] {
        brm.release_bandwidth(f).map_err(|e| e.to_string())?;
    }
    let again = measure(&mut probe, &[f1], t.settle, t.window)?[0];
    r.best_effort.push(Phase {
        name: "premium flows stopped".into(),
        best_effort: again,
        premium: vec![],
    });
    be.stop()?;
    brm.release_bandwidth(f1).map_err(|e| e.to_string())?;
    Ok(r)
}
