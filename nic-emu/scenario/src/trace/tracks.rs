//! The timeline's tracks beyond the state machines (docs/trace.md):
//!
//! - a `fabric` process with a track per directed link (the sim only):
//!   each packet as a slice from its head entering the link to its tail
//!   having entered, drops as instants (the link's faults and outages,
//!   and a switch dropping a packet blocked too long or badly routed), and
//!   a counter per link of the heads waiting for it;
//! - per NIC, counter tracks derived from what was already recorded:
//!   `queues` (packets RECV, SEND and RDMA have waiting, the operands of
//!   their `RdmaFull`/`Backlog`, `BufferWait` and `RingFull` states),
//!   `send window` (per stream, data packets on the wire not yet acked:
//!   from the sim's log of the packets the NIC sent and received) and
//!   `port N tokens` (send tokens and receive tokens in use after each
//!   host call on the port).

use std::collections::BTreeMap;

use nic_abi::packet::{Flags, PacketType};
use nic_abi::trace::Machine;
use serde_json::{json, Value};

use super::{ClusterTrace, LinkWhat, NodeTrace, PacketSummary, Slice};

/// The process id of the fabric's tracks (above any node number).
pub const FABRIC_PID: u64 = 1 << 16;

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// A packet's name on a link track: `Data 0:2->1:3 seq 5`.
pub fn packet_name(p: &PacketSummary) -> String {
    let ty = PacketType::from_u8(p.ptype)
        .map_or_else(|| format!("type {}", p.ptype), |t| format!("{t:?}"));
    format!("{ty} {}:{}->{}:{} seq {}", p.src_node, p.src_port, p.dst_node, p.dst_port, p.seq)
}

/// The fabric process: a thread per link with its packets and drops, and
/// a counter per link of the heads waiting for it.
pub fn fabric_events(t: &ClusterTrace) -> Vec<Value> {
    let mut ev = Vec::new();
    if t.links.is_empty() {
        return ev;
    }
    let pid = FABRIC_PID;
    ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
        "args": {"name": "fabric"}}));
    ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
        "args": {"sort_index": pid}}));
    for (i, name) in t.links.iter().enumerate() {
        let tid = i as u64 + 1;
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
            "args": {"name": format!("link{i} {name}")}}));
        ev.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0,
            "args": {"sort_index": tid}}));
    }
    for e in &t.link_events {
        let tid = e.link as u64 + 1;
        match e.what {
            LinkWhat::Packet { tail_ns, hit, packet } => {
                let mut did = Vec::new();
                if hit.drop {
                    did.push(if hit.outage.is_some() { "dropped (link down)" } else { "dropped" });
                }
                if hit.corrupt {
                    did.push("corrupted");
                }
                if hit.duplicate {
                    did.push("duplicated");
                }
                let mut name = packet_name(&packet);
                if !did.is_empty() {
                    name = format!("{name} [{}]", did.join(", "));
                }
                ev.push(json!({
                    "ph": "X", "name": name, "cat": "link", "pid": pid, "tid": tid,
                    "ts": us(e.t_ns), "dur": us(tail_ns.saturating_sub(e.t_ns)),
                    "args": {"bytes": packet.bytes, "link did": did.join(", ")},
                }));
                if hit.drop {
                    let cause = if hit.outage.is_some() { "link down" } else { "fault" };
                    ev.push(json!({"ph": "i", "s": "t", "name": "drop", "cat": "drop",
                        "pid": pid, "tid": tid, "ts": us(e.t_ns),
                        "args": {"packet": packet_name(&packet), "cause": cause}}));
                }
            }
            LinkWhat::SwitchDrop { blocked, packet } => {
                let cause = if blocked { "blocked too long" } else { "bad route" };
                ev.push(json!({"ph": "i", "s": "t", "name": "drop", "cat": "drop",
                    "pid": pid, "tid": tid, "ts": us(e.t_ns),
                    "args": {"packet": packet_name(&packet), "cause": cause}}));
            }
            LinkWhat::Waiting(n) => {
                ev.push(json!({"ph": "C", "name": format!("link{} waiting", e.link),
                    "pid": pid, "tid": 0, "ts": us(e.t_ns), "args": {"heads": n}}));
            }
        }
    }
    ev
}

/// What a queue counter says after a transition into `s`: the machine's
/// series and its value (None: the machine's transitions say nothing of
/// a queue).
fn queue_of(s: &Slice) -> Option<(&'static str, u32)> {
    let (series, waiting) = match s.machine {
        Machine::Recv => ("RECV waiting", ["RdmaFull", "Backlog"]),
        Machine::Send => ("SEND waiting", ["BufferWait", "BufferWait"]),
        Machine::Rdma => ("RDMA jobs", ["RingFull", "RingFull"]),
        Machine::Sdma => return None,
    };
    Some((series, if waiting.contains(&s.name) { s.arg } else { 0 }))
}

/// Node `n`'s counter tracks (its slices decoded already).
pub fn nic_counters(t: &ClusterTrace, n: &NodeTrace, slices: &[Slice]) -> Vec<Value> {
    let pid = n.node;
    let mut ev = Vec::new();
    // Queues: a value per change.
    let mut last: BTreeMap<&str, u32> = BTreeMap::new();
    for (i, s) in slices.iter().enumerate() {
        let Some((series, v)) = queue_of(s) else { continue };
        if last.get(series) == Some(&v) || (v == 0 && !last.contains_key(series)) {
            continue;
        }
        last.insert(series, v);
        ev.push(
            json!({"ph": "C", "name": "queues", "pid": pid, "tid": 0, "ts": us(t.record_ns(n, i)),
            "args": {series: v}}),
        );
    }
    ev.extend(send_windows(n));
    // Tokens, per port, after each host call.
    for c in &n.host {
        let Some((send, recv)) = c.tokens else { continue };
        ev.push(json!({"ph": "C", "name": format!("port {} tokens", c.port), "pid": pid, "tid": 0,
            "ts": us(c.end_ns), "args": {"send in use": send, "receive in use": recv}}));
    }
    ev
}

/// Types that carry a sequence number of their stream.
fn sequenced(ptype: u8) -> bool {
    use PacketType::*;
    [Data, Put, GetReq, GetResp, Report].iter().any(|&p| p as u8 == ptype)
}

/// Per stream the NIC sends on, data packets on the wire not yet acked:
/// the highest sequence number sent plus one, less the latest cumulative
/// ack its receiver sent back (sim only: empty without the wire log).
fn send_windows(n: &NodeTrace) -> Vec<Value> {
    // (dst node, src port, dst port, priority) -> (next, una)
    let mut st: BTreeMap<(u16, u8, u8, u8), (u32, u32)> = BTreeMap::new();
    let mut ev = Vec::new();
    let (sent, got) = (&n.nic.sent, &n.nic.delivered);
    let (mut i, mut j) = (0, 0);
    // Is `a` after `b`, sequence numbers wrapping?
    let after = |a: u32, b: u32| (a.wrapping_sub(b) as i32) > 0;
    while i < sent.len() || j < got.len() {
        let moved = if j >= got.len() || (i < sent.len() && sent[i].ns <= got[j].ns) {
            let p = sent[i];
            i += 1;
            if !sequenced(p.ptype) {
                continue;
            }
            let key = (p.dst_node, p.src_port, p.dst_port, p.priority);
            let s = st.entry(key).or_insert((p.seq, p.seq));
            let next = p.seq.wrapping_add(1);
            let moved = after(next, s.0);
            if moved {
                s.0 = next;
            }
            (p.ns, key, moved)
        } else {
            let p = got[j];
            j += 1;
            if p.flags & Flags::ACK_VALID.bits() == 0 {
                continue;
            }
            // An ack from D:b to S:a acks stream S:a -> D:b.
            let key = (p.src_node, p.dst_port, p.src_port, p.priority);
            let Some(s) = st.get_mut(&key) else { continue };
            let moved = after(p.ack, s.1);
            if moved {
                s.1 = p.ack;
            }
            (p.ns, key, moved)
        };
        let (ns, key, moved) = moved;
        if !moved {
            continue;
        }
        let s = st[&key];
        let unacked = if after(s.1, s.0) { 0 } else { s.0.wrapping_sub(s.1) };
        let prio = if key.3 == 1 { "high" } else { "low" };
        let series = format!("port {} -> {}:{} {prio}", key.1, key.0, key.2);
        ev.push(json!({"ph": "C", "name": "send window", "pid": n.node, "tid": 0, "ts": us(ns),
            "args": {series: unacked}}));
    }
    ev
}
