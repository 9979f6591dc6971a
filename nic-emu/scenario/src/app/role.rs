//! The roles a node plays in its flows (`Role`) and their rate control:
//! where each is with the bandwidth manager (`Gate`: ask when starting,
//! refused, release when done), ending a role early, and reading the
//! NIC's dispatch trace into the traced flows' ledgers.

use std::collections::{BTreeMap, VecDeque};

use host_brm::{BrmTransport, FlowId, Refused, Reply, Request};
use host_driver::{DmaBuf, FlowKey};

use super::super::format::RatePlan;
use super::super::plan::{Dir, RoleKind};
use super::{NodeApp, NodeHost};

/// The dispatch trace is read at most this often, and at least this
/// often (a live NIC moves 4 KiB packets at up to about 1 GB/s: 250
/// records a ms, of the ring's 4096).
const TRACE_READ_MIN_NS: u64 = 20_000;
const TRACE_READ_MAX_NS: u64 = 1_000_000;

/// One flow end this node sends on (a stream sender, a ping initiator or
/// responder): its send slots, what it sends next, and its rate control.
pub(super) struct Role {
    pub(super) flow: usize,
    pub(super) kind: RoleKind,
    pub(super) port: usize,
    pub(super) peer_node: u16,
    pub(super) peer_port: u8,
    pub(super) priority: host_driver::Priority,
    pub(super) slots: Vec<DmaBuf>,
    pub(super) free: Vec<usize>,
    /// Stream: the next message to send. Ping-pong: messages ready to go.
    pub(super) next: u64,
    pub(super) queue: VecDeque<u64>,
    pub(super) start_ns: u64,
    pub(super) messages: u64,
    pub(super) sent_all: bool,
    /// Rate control of what this role sends.
    pub(super) rate: RatePlan,
    pub(super) gate: Gate,
    pub(super) stop_ns: Option<u64>,
    pub(super) trace: bool,
    /// A multicast root: per multicast posted and not complete, where it
    /// is.
    pub(super) mcast_pending: BTreeMap<u64, McastPending>,
    /// A multicast root: multicasts complete at the root that some member
    /// has not received yet, and their send slots, held until every
    /// member has (`release_delivered`): (mseq, slot, when the root
    /// completed it).
    pub(super) mcast_awaiting: Vec<(u64, usize, u64)>,
}

/// A multicast a root started and has not seen complete.
#[derive(Debug, Clone)]
pub(super) struct McastPending {
    /// Completions still to come (one per descriptor posted so far).
    pub(super) left: u32,
    /// All completions so far were Ok.
    pub(super) ok: bool,
    /// Host scheme: children posted so far (the rest are posted as send
    /// tokens and send ring slots come back).
    pub(super) posted: u32,
    /// Host scheme: the children to post (0 for the other schemes; as
    /// many as were posted once posting failed).
    pub(super) children: u32,
    /// The send slot its message is in.
    pub(super) slot: usize,
    /// Started and not posted yet: when the root host's work before the
    /// post is done, and what it worked out (`send_mcast`).
    pub(super) prepared: Option<(u64, host_driver::RootPlan)>,
}

/// Where a role is with the bandwidth manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Not asked yet (it asks when it starts, once no other request of
    /// the program waits for its answer).
    Pending,
    /// Asked; the answer has not come (a real-time program's request
    /// goes out without waiting, so its other flows go on meanwhile).
    Asked,
    /// Sending (admitted, registered, or no manager involved).
    Running,
    /// Refused: it sends nothing.
    Refused,
    /// Its reservation is being given back (the answer has not come).
    Releasing,
    /// Its reservation was given back.
    Released,
}

impl Gate {
    /// Waiting for the bandwidth manager (or not asked yet).
    pub(super) fn waits(self) -> bool {
        matches!(self, Gate::Pending | Gate::Asked | Gate::Releasing)
    }
}

impl Role {
    /// The direction of the flow this role sends.
    pub(super) fn sends(&self) -> Dir {
        match self.kind {
            RoleKind::PingResponder => Dir::Reply,
            _ => Dir::Forward,
        }
    }

    /// The flow-table key of the stream this role sends on.
    pub(super) fn key(&self, port_num: u8) -> FlowKey {
        FlowKey::new(port_num, self.peer_node, self.peer_port, self.priority)
    }
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Read the NIC's dispatch trace into the traced flows' ledgers: when
    /// a quarter of its ring may have filled since the last read, at the
    /// rate the records came then (at least every ms), and at each call
    /// once the program's work is done (so the last dispatches are
    /// read). A live NIC's trace is read through the device process, a
    /// request each time: a program that read it at every step would
    /// spend its time waiting on that process (on a loaded machine, long
    /// enough for a paced flow's window to run dry).
    pub(super) fn read_trace(&mut self, now: u64) {
        let (last, next) = self.trace_read;
        if now < next && !self.my_work_done() {
            return;
        }
        let (Some(cursor), Some(nic)) = (self.trace_cursor, self.nic.as_ref()) else { return };
        let t = nic.dispatch_trace_since(cursor);
        self.trace_cursor = Some(t.cursor);
        let n = t.records.len() as u64 + u64::from(t.lost);
        let quarter = u64::from(nic_abi::map::DISPATCH_TRACE_LEN / 4);
        let wait = match n {
            0 => TRACE_READ_MAX_NS,
            n => now.saturating_sub(last).saturating_mul(quarter) / n,
        };
        let wait = wait.clamp(TRACE_READ_MIN_NS, TRACE_READ_MAX_NS);
        self.trace_read = (now, now.saturating_add(wait));
        if t.lost > 0 {
            self.problem(format!("dispatch trace: {} records overwritten before read", t.lost));
        }
        if t.records.is_empty() {
            return;
        }
        let keys: Vec<(u32, usize)> = self
            .roles
            .iter()
            .filter(|r| r.trace)
            .map(|r| (r.key(self.ports[r.port].num).abi_key(), r.flow))
            .collect();
        let mut l = self.ledger.borrow_mut();
        for rec in &t.records {
            if let Some(&(_, f)) = keys.iter().find(|(k, _)| *k == rec.key) {
                l.flows[f].dispatch_ticks.push(rec.rtc);
            }
        }
    }

    /// The flow as the bandwidth manager names it.
    fn flow_id(&self, ri: usize) -> FlowId {
        let r = &self.roles[ri];
        FlowId::new(self.node, self.ports[r.port].num, r.peer_node, r.peer_port, r.priority)
    }

    /// A role that starts asks the bandwidth manager for its rate (or
    /// registers as best effort). Refused: it sends nothing. A request
    /// that goes out without its answer leaves the role `Asked`
    /// (`take_brm_answer`); while another request of this program waits
    /// for its answer, the role asks at a later pass.
    pub(super) fn open_gate(&mut self, ri: usize) {
        let id = self.flow_id(ri);
        let Some(brm) = self.brm.as_mut() else {
            self.roles[ri].gate = Gate::Refused;
            self.end_role(ri, 0);
            self.problem("no bandwidth manager for a rate-controlled flow".into());
            return;
        };
        if brm.waiting() {
            return;
        }
        let request = match self.roles[ri].rate {
            RatePlan::Reserve(b) => Request::Reserve { flow: id, mb_s: b },
            _ => Request::BestEffort { flow: id },
        };
        match brm.begin(&request) {
            None => {
                self.roles[ri].gate = Gate::Asked;
                self.brm_for = Some(ri);
            }
            Some(answer) => self.gate_answered(ri, answer.and_then(Reply::into_idt)),
        }
    }

    /// Role `ri`'s request was answered.
    fn gate_answered(&mut self, ri: usize, answer: Result<u32, Refused>) {
        let flow = self.roles[ri].flow;
        match answer {
            Ok(idt) => {
                self.roles[ri].gate = Gate::Running;
                let mut l = self.ledger.borrow_mut();
                l.flows[flow].idt = Some(idt);
                l.flows[flow].admitted = Some(true);
            }
            Err(refused) => {
                self.roles[ri].gate = Gate::Refused;
                {
                    let mut l = self.ledger.borrow_mut();
                    l.flows[flow].admitted = Some(false);
                    l.flows[flow].refused_reason = Some(refused.to_string());
                }
                self.end_role(ri, 0);
            }
        }
    }

    /// The answer to the request out, if it came: the asking role runs
    /// (or is refused), the releasing one is released.
    fn take_brm_answer(&mut self) {
        let Some(ri) = self.brm_for else { return };
        let Some(answer) = self.brm.as_mut().and_then(|b| b.answer()) else { return };
        self.brm_for = None;
        match self.roles[ri].gate {
            Gate::Asked => self.gate_answered(ri, answer.and_then(Reply::into_idt)),
            _ => self.released(ri, answer),
        }
    }

    /// Role `ri`'s reservation was given back (`answer`: the manager's
    /// word on it).
    fn released<R>(&mut self, ri: usize, answer: Result<R, Refused>) {
        self.roles[ri].gate = Gate::Released;
        if let Err(e) = answer {
            let id = self.flow_id(ri);
            self.problem(format!("releasing {id}: {e}"));
        }
    }

    /// The role sends no more than the `sent` messages it has sent.
    pub(super) fn end_role(&mut self, ri: usize, sent: u64) {
        let r = &mut self.roles[ri];
        r.messages = sent;
        r.sent_all = true;
        self.ledger.borrow_mut().flows[r.flow].spec.messages = sent;
    }

    /// Take the bandwidth manager's answer, if one came; give back the
    /// reservations of roles whose last send completed.
    #[inline(always)]
    pub(super) fn release_finished(&mut self) {
        // Without a manager no role holds a reservation (`open_gate`
        // refuses them all): nothing to look at, at every call.
        if self.brm.is_some() {
            self.take_brm_answer();
            self.release_reservations();
        }
    }

    fn release_reservations(&mut self) {
        for ri in 0..self.roles.len() {
            let r = &self.roles[ri];
            if r.gate != Gate::Running || !r.rate.uses_brm() || !r.sent_all {
                continue;
            }
            let done = self.ledger.borrow().flows[r.flow].completed[0] >= r.messages;
            if !done {
                continue;
            }
            let id = self.flow_id(ri);
            let Some(brm) = self.brm.as_mut() else { return };
            if brm.waiting() {
                // Given back once the request out is answered.
                return;
            }
            let answer = brm.begin(&Request::Release { flow: id });
            match answer {
                None => {
                    self.roles[ri].gate = Gate::Releasing;
                    self.brm_for = Some(ri);
                }
                Some(answer) => self.released(ri, answer),
            }
        }
    }
}
