//! What a run produced: the JSON document (`--json`) and the human summary.
//!
//! Field order is part of the format (docs/scenarios.md): the fields the
//! issue names come first in its order, extras follow. On the sim,
//! everything but `sim.wall_ms` is a function of the scenario, so two runs
//! of one scenario give the same document once `wall_ms` is taken out. A
//! real-time run (`backend` live or qemu) fills the same document with
//! wall-clock times; only its content checks are reproducible.

use std::fmt::Write as _;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub profile: String,
    pub seed: u64,
    pub sim: SimReport,
    pub flows: Vec<FlowReport>,
    pub nics: Vec<NicReport>,
    pub topology: String,
    pub nodes: usize,
    /// Every flow finished (each message accounted for) before the limit.
    pub complete: bool,
    /// What should not have happened, as the host programs saw it: refused
    /// descriptors, failed sends, messages of no flow, driver errors.
    pub problems: Vec<String>,
    /// What ran it: "sim" (virtual time), "live" or "qemu" (wall-clock
    /// time; see docs/scenarios.md for how the numbers differ).
    pub backend: String,
    /// How the NICs' streams recovered lost packets: "go-back-n" or
    /// "selective" (the profile's `firmware.reliability`, or the
    /// scenario's override).
    pub reliability: String,
    /// How the sim priced the NIC CPU's passes when not the profile's
    /// published cycle prices: "firmware" (absent under published pricing
    /// and on live and qemu, where the firmware runs at its own speed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing: Option<String>,
    /// `[[faults.link_down]]`: each outage and what it cost (absent when
    /// the scenario has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub link_down: Vec<LinkDownReport>,
    /// `[[faults.nic_reset]]`: each reset (absent when the scenario has
    /// none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nic_reset: Vec<NicResetReport>,
    /// With a packet capture (`--pcap`): the records written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<u64>,
}

/// One NIC reset of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicResetReport {
    pub node: u64,
    pub at_us: f64,
    /// The run got that far (it may have ended before).
    pub done: bool,
    /// Packets the reset lost at the NIC's input (waiting for a buffer
    /// or arriving).
    pub lost_packets: u64,
}

/// One cable outage of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkDownReport {
    /// The cable as the scenario named it.
    pub link: String,
    pub at_us: f64,
    pub for_us: f64,
    /// Packets that entered the cable (either way) while it was down.
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// Virtual time when the run ended (ns).
    pub end_ns: u64,
    /// Events the event core handled.
    pub events: u64,
    /// Packets the NICs put on their links (each packet once).
    pub packets: u64,
    /// Wall-clock time of the run (ms); the only non-deterministic field.
    pub wall_ms: f64,
    /// Why the run stopped: "done", "time-limit", "stuck" (nothing left to
    /// happen, yet a flow is unfinished).
    pub stopped: String,
    /// Link traversals (a packet crossing k links counts k).
    pub hops: u64,
    /// Packets the links' fault injection (`[faults]`) and outages
    /// (`[[faults.link_down]]`) dropped, bits it flipped and packets it
    /// delivered twice, summed over the links (a packet can be hit on
    /// each link it crosses).
    pub link_drops: u64,
    pub link_corrupts: u64,
    pub link_dups: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowReport {
    pub name: String,
    /// Stream: messages to send; pingpong: round trips.
    pub messages: u64,
    /// Stream: messages received intact and in order; pingpong: round
    /// trips whose request and reply both arrived intact and in order.
    pub delivered: u64,
    /// Payload bytes delivered intact (pingpong: both directions).
    pub bytes: u64,
    /// Messages whose content or length was wrong.
    pub corrupted: u64,
    /// Messages received again (an index already delivered).
    pub duplicates: u64,
    /// Virtual time of the first send call (ns).
    pub first_send_ns: u64,
    /// Virtual time of the last receive event (ns).
    pub last_recv_ns: u64,
    /// `bytes / (last_recv_ns - first_send_ns)` in 10^6 B/s.
    pub bandwidth_mb_s: f64,
    /// Stream: send call to receive event; pingpong: half the round trip.
    pub latency_ns: Latency,
    pub kind: String,
    pub src: [u64; 2],
    /// Stream and pingpong flows (a multicast's receivers are its group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<[u64; 2]>,
    pub priority: String,
    /// Message sizes used in turn.
    pub sizes: Vec<u64>,
    /// Messages that arrived ahead of their turn (an index was skipped).
    pub out_of_order: u64,
    /// Sends that completed with a status other than Ok, or were refused.
    pub send_errors: u64,
    /// Those by status (absent when none failed).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub send_error_statuses: std::collections::BTreeMap<String, u64>,
    /// Every message of the flow is accounted for.
    pub complete: bool,
    /// A NIC reset of a node the flow runs between cut it at this time
    /// (us): messages after it may be lost, and its peers' sends fail
    /// (`send_errors`); neither counts as a problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_by_reset_us: Option<f64>,
    /// Rate control (present only for flows that use it): the IDT
    /// installed when the flow started (RTC ticks; 0 unregulated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idt: Option<u32>,
    /// `rate_mb_s` / `best_effort` flows: whether the bandwidth manager
    /// admitted (registered) it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted: Option<bool>,
    /// Why it was refused (names the criterion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_reason: Option<String>,
    /// `rate_mb_s` / `best_effort` flows: every IDT the manager gave the
    /// flow, as (virtual ns, IDT or null when its entry was removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idt_history: Option<Vec<(u64, Option<u32>)>>,
    /// With `trace = true`: the NIC clock (RTC ticks) of each packet
    /// dispatch of the flow, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_ticks: Option<Vec<u64>>,
    /// Multicast flows: the group, the tree and what it cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multicast: Option<McastReport>,
    /// Collective flows: the group, the algorithm, the skew, the CPU
    /// and whether every result was right. (`latency_ns` is then each
    /// collective's, from the first member's entry to the last member's
    /// completion; `delivered` counts those complete at every member.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<super::coll::CollReport>,
}

/// What a multicast flow adds to its report (docs/scenarios.md). Figures
/// that are null on live and qemu are priced at the profile's costs or
/// need the sim's view (its host busy clock).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McastReport {
    pub scheme: String,
    /// The tree used (under `auto`, the one chosen).
    pub algorithm: String,
    /// The k of a k-binomial tree (null for the others).
    pub k: Option<u8>,
    /// What the file asked for: a tree's name, `k-binomial` without a k,
    /// or `auto`.
    pub requested: String,
    /// G: members, the root included.
    pub group_size: u16,
    /// The members in rank order, the root first.
    pub group: Vec<u16>,
    /// Member receptions delivered intact and in order, in all.
    pub deliveries: u64,
    /// Nodes that receive and forward on the tree's deepest path.
    pub relays_deepest: u16,
    /// Completion latency over the flow's multicasts (each from the root
    /// program's start to the last member's reception): mean, least, most
    /// and standard deviation (ns).
    pub latency_ns: Option<MeanSpread>,
    /// Sim: the root host's CPU busy time between its start and its
    /// completion, per multicast.
    pub root_cpu_ns: Option<P50Max>,
    /// Sim: multicasts whose latency came out below their root's CPU time
    /// for them (the root's work is part of the latency: always 0).
    pub below_root_cpu: Option<u64>,
    /// Sim: that busy time over the post-to-completion time (median).
    pub root_cpu_util: Option<f64>,
    /// Sim: tree work per multicast at the profile's prices (hosts'
    /// children at `host.tree_child_ns`, NICs' at `nic_cpu.tree_op`).
    pub tree_ns: Option<P50>,
    /// Children of the tree computed per multicast, by hosts and NICs.
    pub tree_children: Option<P50>,
    /// Link visits of one multicast over the distinct links it uses (from
    /// the tree and the fabric's source routes).
    pub link_concentration: Option<f64>,
    /// Sim: the most data packets of one multicast in the fabric at once.
    pub link_concurrency: Option<P50Max>,
}

/// A mean with its spread (ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MeanSpread {
    pub mean: u64,
    pub min: u64,
    pub max: u64,
    pub stddev: u64,
}

impl MeanSpread {
    /// Of `samples`; None when there are none.
    pub fn of(samples: &[u64]) -> Option<MeanSpread> {
        let n = samples.len() as f64;
        let min = *samples.iter().min()?;
        let max = *samples.iter().max()?;
        let mean = samples.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = samples.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        Some(MeanSpread { mean: mean.round() as u64, min, max, stddev: var.sqrt().round() as u64 })
    }
}

/// A median.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct P50 {
    pub p50: u64,
}

/// A median and a maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct P50Max {
    pub p50: u64,
    pub max: u64,
}

impl P50Max {
    /// Nearest-rank median and maximum of `samples` (sorted in place);
    /// None when there are none.
    pub fn of(samples: &mut [u64]) -> Option<P50Max> {
        if samples.is_empty() {
            return None;
        }
        let l = Latency::of(samples);
        Some(P50Max { p50: l.p50, max: l.max })
    }
}

/// A flow's latency samples in bounded memory: kept one by one up to
/// `Samples::EXACT` (percentiles exactly as `Latency::of`), then folded
/// into a log-linear histogram of `BUCKETS` counts (about 60 KiB):
/// percentiles then within 1/128 of the true value (rounded down to their
/// bucket), minimum and maximum still exact. A flow of 10^9 messages
/// costs no more memory than one of 10^6.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples {
    exact: Vec<u64>,
    /// Empty until the samples outgrow `EXACT`.
    hist: Vec<u64>,
    n: u64,
    min: u64,
    max: u64,
}

/// Values below this are their own bucket; above, 128 buckets per power
/// of two.
const SUB: u64 = 128;
const SUB_BITS: u32 = 7;
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

impl Samples {
    /// Samples kept one by one (8 MiB per flow at most).
    pub const EXACT: usize = 1 << 20;

    pub fn push(&mut self, v: u64) {
        self.min = if self.n == 0 { v } else { self.min.min(v) };
        self.max = self.max.max(v);
        self.n += 1;
        if self.hist.is_empty() {
            if self.exact.len() < Samples::EXACT {
                self.exact.push(v);
                return;
            }
            self.hist = vec![0; BUCKETS];
            for e in std::mem::take(&mut self.exact) {
                self.hist[bucket(e)] += 1;
            }
        }
        self.hist[bucket(v)] += 1;
    }

    /// Samples pushed.
    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The samples one by one, while they are kept so (None once folded).
    pub fn exact(&self) -> Option<&[u64]> {
        self.hist.is_empty().then_some(&self.exact[..])
    }

    /// Nearest-rank percentiles (all zero when empty).
    pub fn latency(&self) -> Latency {
        if self.hist.is_empty() {
            return Latency::of(&mut self.exact.clone());
        }
        let rank = |p: f64| {
            let r = ((p * self.n as f64).ceil() as u64).clamp(1, self.n);
            let mut seen = 0;
            for (i, &c) in self.hist.iter().enumerate() {
                seen += c;
                if seen >= r {
                    return bucket_low(i).clamp(self.min, self.max);
                }
            }
            self.max
        };
        Latency { min: self.min, p50: rank(0.50), p99: rank(0.99), max: self.max }
    }
}

/// The histogram bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (e - SUB_BITS)) & (SUB - 1);
    ((e - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The smallest value of bucket `i`.
fn bucket_low(i: usize) -> u64 {
    let (hi, sub) = ((i as u64) / SUB, (i as u64) % SUB);
    if hi == 0 {
        return sub;
    }
    let e = hi as u32 + SUB_BITS - 1;
    (1u64 << e) | (sub << (e - SUB_BITS))
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Latency {
    /// Nearest-rank percentiles of `samples` (sorted in place). All zero
    /// when there are none.
    pub fn of(samples: &mut [u64]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let rank = |p: f64| {
            let n = samples.len();
            let r = ((p * n as f64).ceil() as usize).clamp(1, n);
            samples[r - 1]
        };
        Latency {
            min: samples[0],
            p50: rank(0.50),
            p99: rank(0.99),
            max: samples[samples.len() - 1],
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NicReport {
    pub node: usize,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmits: u64,
    pub drops: u64,
    pub errors: u64,
    pub crc_errors: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub bad_headers: u64,
    pub acks_sent: u64,
    pub nacks_sent: u64,
    pub timeouts: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub no_buffer: u64,
    /// Polls its sending streams sent when their retransmission timers ran
    /// out (each answered by an ack or a nack naming what is missing).
    pub polls_sent: u64,
    /// Acks, nacks and polls not queued because the control queue was
    /// full (each costs its sender a timeout).
    pub control_drops: u64,
    /// Idle streams let go of because the stream table was full (the NIC
    /// talked to more peers at once than it holds streams for).
    pub streams_evicted: u64,
    /// `retransmits` by cause (they add up to it).
    pub retransmit_causes: RetransmitCauses,
    /// Payload bytes of the data packets sent again (`retransmits`).
    pub retx_bytes: u64,
    /// Selective repeat: STATs sent (answers to polls naming what is
    /// missing), USTATs sent (a gap named at once), and packets kept past
    /// a gap until it filled. 0 under go-back-N.
    pub stats_sent: u64,
    pub ustats_sent: u64,
    pub held: u64,
    /// The translation cache: translations found in it, translations read
    /// from a page table in host memory (a line of entries each), and
    /// cached translations overwritten.
    pub tlb: TlbCounts,
}

/// A NIC's translation cache counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlbCounts {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

/// Why data packets were sent again: after a retransmission timeout, a
/// receiver's gap nack, its no-buffer (or busy) nack, a refused message,
/// or a receiver that lost the stream (reset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetransmitCauses {
    pub timeout: u64,
    pub gap: u64,
    pub no_buffer: u64,
    pub refused: u64,
    pub resync: u64,
}

/// Bandwidth in 10^6 B/s; 0 when no time passed.
pub fn bandwidth_mb_s(bytes: u64, first_ns: u64, last_ns: u64) -> f64 {
    if last_ns <= first_ns {
        return 0.0;
    }
    // bytes per ns * 1000 = MB/s (10^6 B/s); round to 1e-3 for stable output.
    let v = bytes as f64 * 1000.0 / (last_ns - first_ns) as f64;
    (v * 1000.0).round() / 1000.0
}

impl Report {
    /// The JSON document (pretty, stable field order).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The JSON value with `sim.wall_ms` removed: what must be identical
    /// across two runs of one scenario.
    pub fn deterministic_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(sim) = v.get_mut("sim").and_then(|s| s.as_object_mut()) {
            sim.remove("wall_ms");
        }
        v
    }

    /// Every flow delivered every message exactly once, intact and in order.
    pub fn all_delivered_intact(&self) -> bool {
        self.complete
            && self.problems.is_empty()
            && self.flows.iter().all(|f| {
                let cut = f.cut_by_reset_us.is_some();
                (cut || (f.delivered == f.messages && f.send_errors == 0))
                    && f.corrupted == 0
                    && f.duplicates == 0
                    && f.out_of_order == 0
            })
    }

    /// A short human summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let state = if self.complete {
            "complete".to_string()
        } else {
            format!("INCOMPLETE ({})", self.sim.stopped)
        };
        if self.backend == "sim" {
            let ns_per_pkt = if self.sim.packets > 0 {
                self.sim.wall_ms * 1e6 / self.sim.packets as f64
            } else {
                0.0
            };
            let pricing = match &self.pricing {
                Some(p) => format!("  pricing {p}"),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "profile {}{pricing}  reliability {}  seed {}  {} nodes ({})  simulated {}  {} \
                 events  {} packets  wall {:.0} ms ({:.0} ns/packet)  {state}",
                self.profile,
                self.reliability,
                self.seed,
                self.nodes,
                self.topology,
                fmt_ns(self.sim.end_ns),
                self.sim.events,
                self.sim.packets,
                self.sim.wall_ms,
                ns_per_pkt,
            );
        } else {
            let _ = writeln!(
                s,
                "{} backend (wall-clock times)  profile {}  reliability {}  seed {}  {} nodes \
                 ({})  traffic {}  {} host events  {} packets  wall {:.0} ms with cluster start \
                 and stop  {state}",
                self.backend,
                self.profile,
                self.reliability,
                self.seed,
                self.nodes,
                self.topology,
                fmt_ns(self.sim.end_ns),
                self.sim.events,
                self.sim.packets,
                self.sim.wall_ms,
            );
        }
        for d in &self.link_down {
            let _ = writeln!(
                s,
                "cable {} down at {} us for {} us: {} packets lost",
                d.link, d.at_us, d.for_us, d.dropped
            );
        }
        for r in &self.nic_reset {
            let _ = writeln!(
                s,
                "NIC {} reset at {} us: {}",
                r.node,
                r.at_us,
                if r.done {
                    format!("{} packets lost at its input", r.lost_packets)
                } else {
                    "not reached (the run ended before)".into()
                }
            );
        }
        let _ = writeln!(
            s,
            "{:<14} {:<8} {:>9} {:>9} {:>9} {:>5} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10}",
            "flow",
            "kind",
            "size",
            "messages",
            "delivered",
            "corr",
            "dup",
            "ooo",
            "MB/s",
            "lat min",
            "lat p50",
            "lat p99"
        );
        for f in &self.flows {
            let size = if f.sizes.len() == 1 { fmt_bytes(f.sizes[0]) } else { "mixed".into() };
            let _ = writeln!(
                s,
                "{:<14} {:<8} {:>9} {:>9} {:>9} {:>5} {:>5} {:>5} {:>10.2} {:>10} {:>10} {:>10}",
                truncate(&f.name, 14),
                f.kind,
                size,
                f.messages,
                f.delivered,
                f.corrupted,
                f.duplicates,
                f.out_of_order,
                f.bandwidth_mb_s,
                fmt_ns(f.latency_ns.min),
                fmt_ns(f.latency_ns.p50),
                fmt_ns(f.latency_ns.p99),
            );
        }
        for f in &self.flows {
            let Some(m) = &f.multicast else { continue };
            let alg = match m.k {
                Some(k) => format!("{}(k={k})", m.algorithm),
                None => m.algorithm.clone(),
            };
            let cpu = m.root_cpu_ns.map_or("-".to_string(), |c| fmt_ns(c.p50));
            let lat = m.latency_ns.map_or("-".to_string(), |l| {
                format!("{} [{}, {}]", fmt_ns(l.mean), fmt_ns(l.min), fmt_ns(l.max))
            });
            let below = match m.below_root_cpu {
                Some(n) if n > 0 => format!(", {n} below their root CPU"),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "multicast {}: {} {alg}{} over {} members, {} receptions, latency mean {lat}, \
                 root CPU p50 {cpu}{below}",
                truncate(&f.name, 14),
                m.scheme,
                if m.requested == "auto" { " (auto)" } else { "" },
                m.group_size,
                m.deliveries,
            );
        }
        for f in &self.flows {
            if let Some(c) = &f.collective {
                let _ = writeln!(s, "{}", c.summary_line(&truncate(&f.name, 14)));
            }
        }
        let _ = writeln!(
            s,
            "{:<6} {:>10} {:>10} {:>8} {:>7} {:>7} {:>6} {:>6} {:>6} {:>8}",
            "nic",
            "pkts out",
            "pkts in",
            "retrans",
            "drops",
            "errors",
            "crc",
            "dups",
            "nacks",
            "timeouts"
        );
        for n in &self.nics {
            let _ = writeln!(
                s,
                "{:<6} {:>10} {:>10} {:>8} {:>7} {:>7} {:>6} {:>6} {:>6} {:>8}",
                n.node,
                n.packets_sent,
                n.packets_received,
                n.retransmits,
                n.drops,
                n.errors,
                n.crc_errors,
                n.duplicates,
                n.nacks_sent,
                n.timeouts
            );
        }
        for p in self.problems.iter().take(10) {
            let _ = writeln!(s, "problem: {p}");
        }
        if self.problems.len() > 10 {
            let _ = writeln!(s, "... and {} more problems", self.problems.len() - 10);
        }
        let cut: Vec<&str> =
            self.flows.iter().filter(|f| f.cut_by_reset_us.is_some()).map(|f| &*f.name).collect();
        let verdict = if self.all_delivered_intact() && !cut.is_empty() {
            format!(
                "cut by a NIC reset: {} (messages lost, or failed at the sender); every other \
                 message delivered exactly once, intact, in order",
                cut.join(", ")
            )
        } else if self.all_delivered_intact() {
            "every message delivered exactly once, intact, in order".to_string()
        } else {
            let bad: Vec<&str> = self
                .flows
                .iter()
                .filter(|f| {
                    (f.cut_by_reset_us.is_none()
                        && (f.delivered != f.messages || f.send_errors > 0))
                        || f.corrupted + f.duplicates + f.out_of_order > 0
                })
                .map(|f| f.name.as_str())
                .collect();
            let mut v = Vec::new();
            if !bad.is_empty() {
                v.push(format!("PROBLEMS in {} flow(s): {}", bad.len(), bad.join(", ")));
            }
            if !self.complete {
                v.push(format!("INCOMPLETE: the run stopped ({})", self.sim.stopped));
            }
            if !self.problems.is_empty() {
                v.push(format!("{} problem(s) on the hosts", self.problems.len()));
            }
            v.join("; ")
        };
        let _ = writeln!(s, "{verdict}");
        s
    }

    /// Advice for a run that stopped at its limit where the scenario
    /// explains why (empty otherwise): a multicast served by NICs (`nic`,
    /// `nic-cached`, `assisted`) whose relay's NIC reset after taking a
    /// message completes only when the relay's parent gives up on it, and
    /// a member waits the send timeout for each level of its subtree and
    /// one more before it does (the root longest). `send_timeout_ns` and
    /// `limit_ns`: the run's.
    pub fn limit_hints(&self, send_timeout_ns: u64, limit_ns: u64) -> Vec<String> {
        if self.complete || !matches!(self.sim.stopped.as_str(), "time-limit" | "timeout") {
            return Vec::new();
        }
        self.flows
            .iter()
            .filter(|f| f.delivered < f.messages || !f.complete)
            .filter_map(|f| {
                let m = f.multicast.as_ref().filter(|m| m.scheme != "host")?;
                let at_ns = (f.cut_by_reset_us? * 1e3) as u64;
                // The root waits longest: every level below it, and one more.
                let alg = nic_abi::multicast::Algorithm::parse(&m.algorithm, m.k.unwrap_or(0));
                // (A member's subtree counts itself: the root's is G.)
                let wait = nic_abi::multicast::report_wait(alg, m.group_size, send_timeout_ns);
                // One more send timeout for what follows (the later
                // multicasts, which find the reset member's port closed).
                let needed = at_ns.saturating_add(wait).saturating_add(send_timeout_ns);
                (needed > limit_ns).then(|| {
                    format!(
                        "flow {}: a {} multicast whose relay's NIC was reset (at {}) completes \
                         when the relay's parent gives up on it, after the send timeout ({}) \
                         for each level below the root and one more: up to {} after the \
                         reset here, and this run's limit is {}. Give it [run] limit_ms = {} \
                         or more (that and one more send timeout for what follows; on live and \
                         qemu, or --timeout), or a shorter [firmware] send_timeout_us.",
                        f.name,
                        m.scheme,
                        fmt_ns(at_ns),
                        fmt_ns(send_timeout_ns),
                        fmt_ns(wait),
                        fmt_ns(limit_ns),
                        needed.div_ceil(1_000_000),
                    )
                })
            })
            .collect()
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// 1234 -> "1.23 us" and so on.
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// 65536 -> "64 KiB".
pub fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let l = Latency::of(&mut v);
        assert_eq!(l, Latency { min: 1, p50: 50, p99: 99, max: 100 });
        assert_eq!(Latency::of(&mut []), Latency::default());
        assert_eq!(Latency::of(&mut [7]), Latency { min: 7, p50: 7, p99: 7, max: 7 });
    }

    #[test]
    fn samples_stay_exact_then_fold_into_bounded_memory() {
        let mut s = Samples::default();
        assert_eq!(s.latency(), Latency::default());
        for v in (1..=100u64).rev() {
            s.push(v);
        }
        assert_eq!(s.latency(), Latency { min: 1, p50: 50, p99: 99, max: 100 });
        // Past EXACT: folded, the samples freed, percentiles within 1/128.
        let mut s = Samples::default();
        let n = Samples::EXACT as u64 * 3;
        let mut all = Vec::new();
        for k in 0..n {
            let v = 1000 + (k * 7919) % 1_000_000;
            s.push(v);
            all.push(v);
        }
        assert_eq!(s.len(), n);
        assert!(s.exact().is_none() && s.exact.capacity() == 0, "the samples were let go");
        let (got, want) = (s.latency(), Latency::of(&mut all));
        assert_eq!((got.min, got.max), (want.min, want.max));
        for (g, w) in [(got.p50, want.p50), (got.p99, want.p99)] {
            assert!(g <= w && (w - g) as f64 <= w as f64 / 128.0, "{g} vs {w}");
        }
    }

    #[test]
    fn every_value_has_a_bucket_whose_low_end_is_at_most_it() {
        for v in (0..5000u64).chain([u64::MAX, u64::MAX / 3, 1 << 40, (1 << 40) - 1]) {
            let b = bucket(v);
            assert!(b < BUCKETS);
            let low = bucket_low(b);
            assert!(low <= v && (v - low) as f64 <= v as f64 / 128.0, "{v}: {low}");
        }
    }

    #[test]
    fn bandwidth_is_in_decimal_megabytes() {
        // 1 MB in 1 ms = 1000 MB/s.
        assert_eq!(bandwidth_mb_s(1_000_000, 0, 1_000_000), 1000.0);
        assert_eq!(bandwidth_mb_s(5, 10, 10), 0.0);
    }

    #[test]
    fn sizes_and_times_print_readably() {
        assert_eq!(fmt_bytes(65536), "64 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1 MiB");
        assert_eq!(fmt_bytes(1500), "1500 B");
        assert_eq!(fmt_ns(17_000), "17.00 us");
    }
}
