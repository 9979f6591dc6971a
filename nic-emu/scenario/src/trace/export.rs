//! A cluster's trace as one Chrome trace-event JSON document (the JSON
//! object format: `{"traceEvents": [...], "otherData": {...}}`), which
//! ui.perfetto.dev and chrome://tracing open. `ts` and `dur` are
//! microseconds, the format's unit; `displayTimeUnit` is left out (it
//! only changes how times are shown, and a reader that took it for the
//! unit of `ts` would misplace everything).
//!
//! - Process `pid` = node number, named `NIC n`; threads (`tid`) 1 to 4
//!   are its machines SDMA, SEND, RECV, RDMA, thread 5 the node's host
//!   program, thread 6 the packet dispatches the rate-control trace
//!   recorded.
//! - Every state but `Idle` is a complete event (`ph: "X"`, `ts`/`dur` in
//!   microseconds) named after the state, its args the state it came
//!   from, the cause, its operand by name and the RTC tick.
//! - Host calls are complete events (`send`, `provide`) or instants
//!   (`event`).
//! - A data packet is one flow (`ph` `s`, `t`, `t`, `f` sharing an `id`,
//!   each bound to the slice it is written right after): the fill of its
//!   transmit buffer (SDMA `FillWait`), its start on the wire (SEND
//!   `Data`), its sequence check at the receiver (RECV `Accept`, or
//!   `Check` for one that was not accepted) and the copy into host
//!   memory (RDMA `Copying`). How a packet's records are found is
//!   [`flows`].
//! - Counter events (`ph: "C"`) per NIC, after its host calls, and the
//!   `fabric` process last (`super::tracks`).

use std::collections::BTreeMap;

use nic_abi::trace::{Cause, Machine};
use serde_json::{json, Map, Value};

use super::names::{self, IDLE};
use super::{decode, ClusterTrace, NodeTrace, Slice};
use nic_sim::trace::WirePacket;

/// Thread ids of a node's tracks.
pub const fn machine_tid(m: Machine) -> u64 {
    m as u64 + 1
}
pub const HOST_TID: u64 = 5;
pub const DISPATCH_TID: u64 = 6;

/// Where one data packet's journey is in the decoded slices: indices into
/// `decode(node's transitions)` of the sender (`src`) and the receiver
/// (`dst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub src: u16,
    pub dst: u16,
    pub seq: u32,
    /// The SDMA fill (`FillWait` entered with cause `Scheduled`), if found.
    pub fill: Option<usize>,
    /// The SEND `Data` slice.
    pub send: usize,
    /// The RECV `Accept` slice (or its `Check`, when it was not accepted).
    pub recv: usize,
    /// The RDMA `Copying` slice in effect after the accept, if any.
    pub rdma: Option<usize>,
}

/// The k-th element of `slices` (by index list) matching each of `items`
/// in order, where `fits` says whether a pairing is right; a pairing that
/// does not fit falls back to `fallback` for that item.
fn by_order<T>(
    items: &[T],
    candidates: &[usize],
    fits: impl Fn(&T, usize) -> bool,
    fallback: impl Fn(&T) -> Option<usize>,
) -> Vec<Option<usize>> {
    items
        .iter()
        .enumerate()
        .map(|(k, it)| match candidates.get(k) {
            Some(&i) if fits(it, i) => Some(i),
            _ => fallback(it),
        })
        .collect()
}

/// Every data packet the sim saw delivered whose records are found on
/// both NICs. The transition records do not name the stream (SEND's
/// `Data` carries only the sequence number, RECV's `Check` only the
/// receive buffer), so the join is made with what the sim saw on the wire
/// (`NicTrace::sent`, `NicTrace::delivered`; empty for a real-time
/// cluster, which then has no arrows):
///
/// - the k-th data-bearing packet a NIC put on the wire is its SEND's k-th
///   `Data` record (the send-DMA engine takes them in order; checked: the
///   same sequence number; else the latest `Data` of that number before
///   the packet left);
/// - the k-th `Scheduled` fill of its SDMA is that packet's fill (fills
///   complete and are sent in order; checked: not after the `Data`);
/// - the k-th packet a NIC delivered into a receive buffer is its RECV's
///   k-th `Check` (checked: the same buffer), and the first `Accept` of
///   that sequence number after it (before the next `Check`) its accept;
/// - a delivered packet came from the latest packet on the wire from its
///   source with the same stream, type and sequence number.
pub fn flows(t: &ClusterTrace) -> Vec<Flow> {
    let slices: Vec<Vec<Slice>> = t.nodes.iter().map(|n| decode(&n.nic.transitions)).collect();
    flows_of(t, &slices)
}

fn tick_of(t: &ClusterTrace, n: &NodeTrace, ns: u64) -> u64 {
    // ns -> RTC ticks on this node (floor): a record at tick k was
    // written at or after k's start.
    let rel = ns as i128 - n.origin_ns as i128;
    (rel.max(0) as u128 * t.rtc_hz as u128 / 1_000_000_000) as u64
}

type StreamKey = (u16, u16, u8, u8, u8, u8, u32);

fn key(p: &WirePacket) -> StreamKey {
    (p.src_node, p.dst_node, p.src_port, p.dst_port, p.priority, p.ptype, p.seq)
}

fn flows_of(t: &ClusterTrace, slices: &[Vec<Slice>]) -> Vec<Flow> {
    let is = |s: &Slice, m: Machine, name: &str| s.machine == m && s.name == name;
    // Sender side: each data packet on the wire -> (fill, Data slice).
    let mut sent: BTreeMap<StreamKey, Vec<(u64, Option<usize>, usize)>> = BTreeMap::new();
    for (ni, n) in t.nodes.iter().enumerate() {
        let sl = &slices[ni];
        let data: Vec<usize> =
            (0..sl.len()).filter(|&i| is(&sl[i], Machine::Send, "Data")).collect();
        let fills: Vec<usize> = (0..sl.len())
            .filter(|&i| is(&sl[i], Machine::Sdma, "FillWait") && sl[i].cause == Cause::Scheduled)
            .collect();
        let packets: Vec<&WirePacket> = n.nic.sent.iter().filter(|p| !p.is_control()).collect();
        let send_of = by_order(
            &packets,
            &data,
            |p, i| sl[i].arg == p.seq,
            |p| {
                let tick = tick_of(t, n, p.ns);
                data.iter().rev().copied().find(|&i| sl[i].arg == p.seq && sl[i].start <= tick)
            },
        );
        for (k, p) in packets.iter().enumerate() {
            let Some(d) = send_of[k] else { continue };
            // The fill by order, when the Data slice is that k-th one.
            let fill = (data.get(k) == Some(&d))
                .then(|| fills.get(k).copied())
                .flatten()
                .filter(|&f| sl[f].start <= sl[d].start);
            sent.entry(key(p)).or_default().push((p.ns, fill, d));
        }
    }
    let mut out = Vec::new();
    for (ni, n) in t.nodes.iter().enumerate() {
        let sl = &slices[ni];
        let checks: Vec<usize> = (0..sl.len())
            .filter(|&i| is(&sl[i], Machine::Recv, "Check") && sl[i].cause == Cause::Packet)
            .collect();
        let copying: Vec<usize> =
            (0..sl.len()).filter(|&i| is(&sl[i], Machine::Rdma, "Copying")).collect();
        let check_of = by_order(&n.nic.delivered, &checks, |p, i| sl[i].arg == p.buf, |_| None);
        for (k, p) in n.nic.delivered.iter().enumerate() {
            if p.is_control() {
                continue;
            }
            let Some(c) = check_of[k] else { continue };
            let Some(from) = sent.get(&key(p)) else { continue };
            let Some(&(_, fill, send)) = from.iter().rev().find(|(ns, _, _)| *ns <= p.ns) else {
                continue;
            };
            // The Accept after this Check, before the next Check.
            let accept = sl[c + 1..]
                .iter()
                .enumerate()
                .filter(|(_, s)| s.machine == Machine::Recv)
                .take_while(|(_, s)| s.name != "Check")
                .find(|(_, s)| s.name == "Accept" && s.arg == p.seq)
                .map(|(j, _)| c + 1 + j);
            let recv = accept.unwrap_or(c);
            let at = sl[recv].start;
            // The RDMA Copying slice in effect at the accept: the last to
            // start by then, if still running then; else the next one.
            let rdma = accept.and_then(|_| {
                let k = copying.partition_point(|&i| sl[i].start <= at);
                let before = k
                    .checked_sub(1)
                    .map(|j| copying[j])
                    .filter(|&i| sl[i].start == at || sl[i].end.is_none_or(|e| e > at));
                before.or_else(|| copying.get(k).copied())
            });
            out.push(Flow { src: p.src_node, dst: n.node, seq: p.seq, fill, send, recv, rdma });
        }
    }
    out
}

/// Nanoseconds as the format's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The whole cluster's trace as a Chrome trace-event JSON document.
pub fn chrome_json(t: &ClusterTrace) -> String {
    let slices: Vec<Vec<Slice>> = t.nodes.iter().map(|n| decode(&n.nic.transitions)).collect();
    let flows = flows_of(t, &slices);
    // Flow events to write right after a slice: (node, slice) -> events.
    let mut after: BTreeMap<(usize, usize), Vec<Value>> = BTreeMap::new();
    for (id, f) in flows.iter().enumerate() {
        let at = |node: u16| t.nodes.iter().position(|n| n.node == node);
        let (Some(s), Some(d)) = (at(f.src), at(f.dst)) else { continue };
        let name = format!("seq {} {}->{}", f.seq, f.src, f.dst);
        let mut steps: Vec<(usize, usize)> = Vec::new();
        if let Some(i) = f.fill {
            steps.push((s, i));
        }
        steps.push((s, f.send));
        steps.push((d, f.recv));
        if let Some(i) = f.rdma {
            steps.push((d, i));
        }
        let last = steps.len() - 1;
        for (k, &(node, i)) in steps.iter().enumerate() {
            let sl = &slices[node][i];
            let n = &t.nodes[node];
            let ph = match k {
                0 => "s",
                k if k == last => "f",
                _ => "t",
            };
            let mut e = json!({
                "ph": ph, "id": id, "name": name, "cat": "packet",
                "pid": n.node, "tid": machine_tid(sl.machine),
                "ts": us(t.record_ns(n, i)),
            });
            if ph == "f" {
                e["bp"] = json!("e");
            }
            after.entry((node, i)).or_default().push(e);
        }
    }

    let mut ev: Vec<Value> = Vec::new();
    for (ni, n) in t.nodes.iter().enumerate() {
        let pid = n.node;
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
            "args": {"name": format!("NIC {}", n.node)}}));
        ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
            "args": {"sort_index": n.node}}));
        let mut threads: Vec<(u64, String)> = names::MACHINES
            .iter()
            .map(|&m| (machine_tid(m), names::machine(m).to_string()))
            .collect();
        threads.push((HOST_TID, "host program".into()));
        threads.push((DISPATCH_TID, "dispatches".into()));
        for (tid, name) in threads {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                "args": {"name": name}}));
            ev.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                "ts": 0, "args": {"sort_index": tid}}));
        }
        let lost = n.nic.lost_transitions;
        for (i, s) in slices[ni].iter().enumerate() {
            if s.state == IDLE {
                continue;
            }
            let start = t.record_ns(n, i);
            let end = s.next.map_or(t.end_ns, |j| t.record_ns(n, j)).max(start);
            let mut args = Map::new();
            args.insert("from".into(), json!(s.from));
            args.insert("cause".into(), json!(names::cause(s.cause)));
            if let Some(a) = s.arg_name {
                args.insert(a.into(), json!(s.arg));
            }
            args.insert("rtc".into(), json!(s.start));
            if s.end.is_none() {
                args.insert("open".into(), json!("still in this state when the trace ended"));
            }
            if s.after_gap {
                args.insert("gap".into(), json!("records before this one were lost"));
            }
            ev.push(json!({
                "ph": "X", "name": s.name, "cat": names::machine(s.machine),
                "pid": pid, "tid": machine_tid(s.machine),
                "ts": us(start), "dur": us(end - start), "args": args,
            }));
            if let Some(fl) = after.remove(&(ni, i)) {
                ev.extend(fl);
            }
        }
        if lost > 0 {
            let at = slices[ni].iter().position(|s| s.after_gap).map_or(0, |i| t.record_ns(n, i));
            ev.push(json!({"ph": "i", "s": "p", "name": format!("{lost} records lost"),
                "pid": pid, "tid": 0, "ts": us(at),
                "args": {"lost": lost, "why": "the trace ring wrapped before it was read"}}));
        }
        for c in &n.host {
            let base = json!({"name": c.what, "cat": "host", "pid": pid, "tid": HOST_TID,
                "ts": us(c.start_ns), "args": {"port": c.port, "detail": c.detail}});
            let mut e = base;
            if c.end_ns > c.start_ns {
                e["ph"] = json!("X");
                e["dur"] = json!(us(c.end_ns - c.start_ns));
            } else {
                e["ph"] = json!("i");
                e["s"] = json!("t");
            }
            ev.push(e);
        }
        ev.extend(super::tracks::nic_counters(t, n, &slices[ni]));
        for d in &n.nic.dispatches {
            // The key's fields as `nic_abi::flows::flow_key` packs them.
            let (node, sport, dport, prio) =
                (d.key >> 7, (d.key >> 4) & 7, (d.key >> 1) & 7, d.key & 1);
            ev.push(json!({"ph": "i", "s": "t", "name": "dispatch", "cat": "rate",
                "pid": pid, "tid": DISPATCH_TID, "ts": us(t.tick_ns(n, d.rtc)),
                "args": {"flow": format!("port {sport} -> {node}:{dport} {}",
                    if prio == 1 { "high" } else { "low" }), "bytes": d.bytes, "rtc": d.rtc}}));
        }
    }
    ev.extend(super::tracks::fabric_events(t));
    let per_node: Vec<Value> = t
        .nodes
        .iter()
        .map(|n| {
            json!({"node": n.node, "transitions": n.nic.transitions.len(),
                "lost_transitions": n.nic.lost_transitions,
                "dispatches": n.nic.dispatches.len(),
                "lost_dispatches": n.nic.lost_dispatches,
                "undecodable": n.nic.undecodable, "host_calls": n.host.len()})
        })
        .collect();
    let doc = json!({
        "traceEvents": ev,
        "otherData": {
            "backend": t.backend,
            "rtc_hz": t.rtc_hz,
            "end_ns": t.end_ns,
            "packets_followed": flows.len(),
            "links": t.links.len(),
            "link_events": t.link_events.len(),
            "nodes": per_node,
        },
    });
    doc.to_string()
}
