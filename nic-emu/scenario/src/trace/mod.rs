//! Decoded state-machine traces as timelines (Chrome trace-event JSON,
//! which ui.perfetto.dev and chrome://tracing open; docs/trace.md).
//!
//! In: what was read from each NIC's trace rings (`nic_sim::trace`:
//! transition records, dispatch records, and how many were lost) and what
//! each node's host program did ([`HostCall`]). [`decode`] turns one
//! NIC's transition records into the states each of its four machines
//! was in, as [`Slice`]s with names (`names`); [`chrome_json`] writes a
//! whole cluster's as one document: a process per NIC, a thread per
//! machine and one for the host program, and flow arrows that follow each
//! data packet from the sender's SDMA and SEND to the receiver's RECV and
//! RDMA (`export`); a `fabric` process with a track per link, and counter
//! tracks per NIC for its queues, send windows and tokens (`tracks`).

mod export;
mod live;
pub mod names;
mod tracks;

pub use export::{chrome_json, flows, Flow};
pub use live::LiveTracer;
pub use nic_sim::trace::{Cursors, NicTrace};
pub use tracks::{packet_name, FABRIC_PID};

use nic_abi::trace::{Cause, Machine};
pub use nic_fabric::linklog::{LinkEvent, LinkWhat, PacketSummary};

/// One call a node's host program made (or an event it took).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCall {
    pub node: u16,
    /// When the call began and ended (host time, ns on the run's clock;
    /// equal for an event taken).
    pub start_ns: u64,
    pub end_ns: u64,
    /// What: `send`, `provide`, `event`.
    pub what: &'static str,
    /// The port it concerns.
    pub port: u8,
    /// Its operands in words (`to 1:2, 64 B, message 3`).
    pub detail: String,
    /// The port's tokens right after the call, if the port was open: send
    /// tokens in use (sends not yet completed) and receive tokens in use
    /// (receive buffers posted and not yet filled).
    pub tokens: Option<(u32, u32)>,
}

/// What was traced on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTrace {
    pub node: u16,
    /// The NIC's rings.
    pub nic: NicTrace,
    /// Where the NIC's RTC tick 0 falls on the run's clock (ns): 0 in the
    /// sim, whose NICs share one clock; a real-time reader measures it.
    pub origin_ns: i64,
    /// The host program's calls, oldest first.
    pub host: Vec<HostCall>,
}

/// What was traced on a whole cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterTrace {
    /// `sim`, `live` or `qemu`.
    pub backend: String,
    /// RTC ticks per second (every NIC of a cluster runs the same profile).
    pub rtc_hz: u64,
    /// When the trace ends (ns on the run's clock): the last state of
    /// each machine lasts until then.
    pub end_ns: u64,
    pub nodes: Vec<NodeTrace>,
    /// The sim only: every directed link's name (`node0 -> sw0.p0`), in
    /// link order, and what happened at the links (`nic_fabric::linklog`,
    /// in the order the fabric saw it). Empty elsewhere.
    pub links: Vec<String>,
    pub link_events: Vec<LinkEvent>,
}

impl ClusterTrace {
    /// A cluster's trace from each node's rings (with the NIC's RTC
    /// origin) and every node's host calls (any order; each node's kept
    /// in call order).
    pub fn collect(
        backend: &str,
        rtc_hz: u64,
        end_ns: u64,
        nics: Vec<(NicTrace, i64)>,
        calls: Vec<HostCall>,
    ) -> ClusterTrace {
        let mut nodes: Vec<NodeTrace> = nics
            .into_iter()
            .enumerate()
            .map(|(i, (nic, origin_ns))| NodeTrace {
                node: i as u16,
                nic,
                origin_ns,
                host: Vec::new(),
            })
            .collect();
        for c in calls {
            if let Some(n) = nodes.get_mut(c.node as usize) {
                n.host.push(c);
            }
        }
        ClusterTrace {
            backend: backend.to_string(),
            rtc_hz,
            end_ns,
            nodes,
            links: Vec::new(),
            link_events: Vec::new(),
        }
    }

    /// A tick of node `n`'s RTC on the run's clock (ns).
    pub fn tick_ns(&self, n: &NodeTrace, tick: u64) -> u64 {
        let hz = self.rtc_hz.max(1) as u128;
        let ns = (tick as u128 * 1_000_000_000 / hz) as i128 + n.origin_ns as i128;
        ns.clamp(0, u64::MAX as i128) as u64
    }

    /// When node `n`'s transition record `i` was written (ns on the run's
    /// clock): the sim's pass time where it kept one, else the record's
    /// RTC tick.
    pub fn record_ns(&self, n: &NodeTrace, i: usize) -> u64 {
        match n.nic.transition_ns.get(i) {
            Some(&ns) if n.nic.transition_ns.len() == n.nic.transitions.len() => ns,
            _ => self.tick_ns(n, n.nic.transitions.get(i).map_or(0, |r| r.rtc)),
        }
    }

    /// Transition records lost (overwritten unread) on any node.
    pub fn lost_transitions(&self) -> u64 {
        self.nodes.iter().map(|n| n.nic.lost_transitions).sum()
    }
}

/// One state a machine was in, from the transition into it to the next
/// transition of that machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub machine: Machine,
    /// The state's code and name.
    pub state: u8,
    pub name: &'static str,
    /// The state it came from, and why it changed.
    pub from: &'static str,
    pub cause: Cause,
    /// The state's main operand, and what it is (None: the state has
    /// none).
    pub arg: u32,
    pub arg_name: Option<&'static str>,
    /// RTC ticks: entered at `start`, left at `end` (None: still in it
    /// when the trace ended).
    pub start: u64,
    pub end: Option<u64>,
    /// The index of the record that ended it (slice `i` is record `i`).
    pub next: Option<usize>,
    /// The record's `from` is not the state the previous record of this
    /// machine went to: records between them were lost.
    pub after_gap: bool,
}

/// One NIC's transition records as the states each machine was in,
/// oldest first, idle states included. Records of one machine are taken
/// in ring order (the firmware writes them in time order).
pub fn decode(records: &[nic_abi::trace::TraceRecord]) -> Vec<Slice> {
    let mut out: Vec<Slice> = Vec::with_capacity(records.len());
    // Per machine: the index in `out` of its current state.
    let mut open: [Option<usize>; 4] = [None; 4];
    for r in records {
        let m = r.machine as usize;
        let mut after_gap = false;
        if let Some(i) = open[m] {
            out[i].end = Some(r.rtc.max(out[i].start));
            out[i].next = Some(out.len());
            after_gap = out[i].state != r.from;
        }
        open[m] = Some(out.len());
        out.push(Slice {
            machine: r.machine,
            state: r.to,
            name: names::state(r.machine, r.to),
            from: names::state(r.machine, r.from),
            cause: r.cause,
            arg: r.arg,
            arg_name: names::operand(r.machine, r.to),
            start: r.rtc,
            end: None,
            next: None,
            after_gap,
        });
    }
    out
}

#[cfg(test)]
mod tests;
