//! What each member of a collective flow saw (the ledger), and the
//! flow's part of the report.

use std::collections::BTreeMap;

use nic_abi::collective::Alg;
use serde::Serialize;

use super::CollSpec;
use crate::report::{Latency, P50Max, Samples};

/// One collective on its way: who entered and finished it, and when.
#[derive(Debug, Default, Clone)]
pub struct Pending {
    pub first_entry_ns: Option<u64>,
    pub done: u32,
    pub first_done_ns: u64,
    pub last_done_ns: u64,
}

/// What a collective flow's members saw.
#[derive(Debug, Default)]
pub struct CollLedger {
    /// The algorithm run (set when the members start).
    pub alg: Option<Alg>,
    pub inflight: BTreeMap<u64, Pending>,
    /// Per member: collectives completed (their numbers in order).
    pub completed: Vec<u64>,
    /// Collectives complete at every member.
    pub all_done: u64,
    /// Per collective: first entry to last completion, and the spread of
    /// the completions.
    pub latencies: Samples,
    pub skews: Vec<u64>,
    /// Per member and collective: its node's host CPU and NIC CPU busy
    /// from entry to completion (sim).
    pub host_cpu_ns: Vec<u64>,
    pub nic_cpu_ns: Vec<u64>,
    /// Results checked against the reference, and those that differed.
    pub checked: u64,
    pub wrong: u64,
    /// Completions that came twice, out of order, or ended Incomplete.
    pub duplicates: u64,
    pub out_of_order: u64,
    pub incomplete: u64,
    /// The expected results of the collectives in flight (by number).
    pub expected: BTreeMap<u64, Vec<Vec<u8>>>,
    /// The first entry of any member, and the last completion.
    pub first_entry_ns: Option<u64>,
    pub last_done_ns: u64,
}

impl CollLedger {
    pub fn new(members: usize) -> CollLedger {
        CollLedger { completed: vec![0; members], ..CollLedger::default() }
    }

    /// Member `rank` entered collective `k` at `now`.
    pub fn entered(&mut self, k: u64, now: u64) {
        let p = self.inflight.entry(k).or_default();
        p.first_entry_ns = Some(p.first_entry_ns.map_or(now, |t| t.min(now)));
        self.first_entry_ns = Some(self.first_entry_ns.map_or(now, |t| t.min(now)));
    }

    /// Member `rank` of `n` completed collective `k` at `now`: false when
    /// it was not the one expected (a duplicate, or out of order).
    pub fn finished(&mut self, rank: u16, n: u16, k: u64, now: u64, ok: bool) -> bool {
        let Some(c) = self.completed.get_mut(rank as usize) else { return false };
        if k <= *c {
            self.duplicates += 1;
            return false;
        }
        if k != *c + 1 {
            self.out_of_order += 1;
        }
        *c = k;
        if !ok {
            self.incomplete += 1;
        }
        self.last_done_ns = self.last_done_ns.max(now);
        let p = self.inflight.entry(k).or_default();
        p.first_done_ns = if p.done == 0 { now } else { p.first_done_ns.min(now) };
        p.last_done_ns = p.last_done_ns.max(now);
        p.done += 1;
        if p.done == n as u32 {
            let p = self.inflight.remove(&k).unwrap_or_default();
            let entry = p.first_entry_ns.unwrap_or(p.first_done_ns);
            self.latencies.push(p.last_done_ns.saturating_sub(entry));
            self.skews.push(p.last_done_ns - p.first_done_ns);
            self.all_done += 1;
            self.expected.remove(&k);
        }
        true
    }
}

/// What a collective flow adds to its report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollReport {
    pub kind: String,
    pub scheme: String,
    /// The algorithm run (under `auto`, the one picked); a broadcast run
    /// as a multicast names its tree: "multicast binomial", "multicast
    /// k-binomial(3)".
    pub algorithm: String,
    /// What the file asked for (an algorithm's name or `auto`).
    pub requested: String,
    pub group_size: u16,
    pub group: Vec<u16>,
    pub op: Option<String>,
    pub datatype: Option<String>,
    pub elements: u32,
    /// Collectives run, and those complete at every member.
    pub count: u64,
    pub completed: u64,
    /// The time per collective of the flow as a loop runs them: from the
    /// first member's first entry to the last member's last completion,
    /// over the collectives complete at every member (ns; what a
    /// benchmark's loop of collectives reports).
    pub interval_ns: f64,
    /// Completion spread among the members per collective (ns).
    pub skew_ns: Option<P50Max>,
    /// Sim: host CPU busy per member per collective (ns).
    pub host_cpu_ns: Option<P50Max>,
    /// Sim: NIC CPU busy per member per collective (ns), from the member's
    /// entry to its completion, other flows' work on that NIC included.
    pub nic_cpu_ns: Option<P50Max>,
    /// Results checked against the reference, and how many differed.
    pub results_checked: u64,
    pub results_wrong: u64,
    /// Every member's result equal to the reference in every collective
    /// (null for a barrier).
    pub results_ok: Option<bool>,
    /// Members' completions that ended with members missing.
    pub incomplete: u64,
}

/// The report of collective flow `c` (`l` its ledger) run with `alg`.
pub fn report(c: &CollSpec, l: &CollLedger, alg: Alg) -> (Latency, CollReport) {
    let data = c.kind.has_data();
    let r = CollReport {
        kind: c.kind.name().into(),
        scheme: c.scheme.as_str().into(),
        algorithm: c.algorithm_name(alg),
        requested: match &c.mcast {
            Some(m) => m.requested.clone(),
            None => c.requested.map_or("auto", |a| a.name()).into(),
        },
        group_size: c.size(),
        group: c.members.clone(),
        op: c.kind.combines().then(|| c.op.name().into()),
        datatype: data.then(|| c.dtype.name().into()),
        elements: c.elements,
        count: c.count,
        completed: l.all_done,
        interval_ns: match (l.first_entry_ns, l.all_done) {
            (Some(t), n) if n > 0 => l.last_done_ns.saturating_sub(t) as f64 / n as f64,
            _ => 0.0,
        },
        skew_ns: P50Max::of(&mut l.skews.clone()),
        host_cpu_ns: P50Max::of(&mut l.host_cpu_ns.clone()),
        nic_cpu_ns: P50Max::of(&mut l.nic_cpu_ns.clone()),
        results_checked: l.checked,
        results_wrong: l.wrong,
        results_ok: data.then_some(l.wrong == 0 && l.checked > 0),
        incomplete: l.incomplete,
    };
    (l.latencies.latency(), r)
}

impl CollReport {
    /// One line of the human summary: what ran, and how it ended.
    pub fn summary_line(&self, flow: &str) -> String {
        let auto = if self.requested.ends_with("auto") { ", auto" } else { "" };
        let results = match self.results_ok {
            Some(true) => format!(", {} results right", self.results_checked),
            Some(false) => {
                format!(", {} of {} results WRONG", self.results_wrong, self.results_checked)
            }
            None => String::new(),
        };
        format!(
            "collective {flow}: {} by {} ({}{auto}) over {} members, {} of {} complete{results}",
            self.kind, self.algorithm, self.scheme, self.group_size, self.completed, self.count
        )
    }
}
