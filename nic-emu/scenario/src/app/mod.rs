//! The host program of one node: it opens the ports its plan names, keeps
//! receive buffers posted, drives its flows' senders, and checks every
//! received message (content, length, place in its stream's order) into
//! the shared [`Ledger`] (ledger.rs).
//!
//! It is an ordinary host-driver program (`Nic`, `Port`, `DmaBuf`,
//! events), generic over how it reaches its NIC ([`NodeHost`]): on the
//! sim ([`SimHost`]) the event core calls `wake` when the NIC wrote into
//! this host's memory and at the times the app asks for; in real time
//! (`realtime.rs`) a driver loop calls [`NodeApp::step`] over and over.
//! The same code and the same ledger check every backend's messages.
//!
//! Files: this one (the program's state and its `step`), `host.rs` (how
//! it reaches its NIC), `setup.rs` (opening ports, posting buffers),
//! `events.rs` (taking events: receptions, completions), `send.rs`
//! (sending), `role.rs` (the roles it plays and their rate control),
//! `mcast.rs` (multicast: groups, the root's posts, members' checks and
//! relays), `coll.rs` (collective flows), `bcast.rs` (broadcast flows run
//! as multicasts), `tags.rs` (the tags that name buffers and sends).

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};

use host_brm::{BrmClient, BrmTransport};
use host_driver::{DmaBuf, Nic, NicBackend, Port};

use super::format::FlowKind;
use super::plan::{Dir, NodePlan, RoleKind};
use nic_sim::SimTransport;
use nic_sim::{HostApp, HostCx};

mod assist;
mod bcast;
mod coll;
mod events;
mod host;
mod mcast;
mod role;
mod send;
mod setup;
mod tags;

pub use super::ledger::{FlowLedger, Ledger, SharedLedger, StreamLedger, Verdict};
pub use host::{NoBrm, NodeHost, SimHost};
use mcast::{McastCtx, PendingRelay};
use role::{Gate, Role};

/// Until every port of the cluster is open, senders look again this often.
const BARRIER_POLL_NS: u64 = 2_000;
/// How long a port's first receive buffers may sit in its ring untaken
/// before the port counts as ready anyway.
const READY_STALL_NS: u64 = 50_000;

/// While a flow is traced, the program asks to be called again at least
/// this often, so that its NIC's dispatch trace is read (`read_trace`
/// reads it when due; the ring holds 4096 records).
const TRACE_POLL_NS: u64 = 10_000_000;

/// A node receiving a flow that may end early (stopped, or refused by the
/// bandwidth manager) looks again this often whether it is done.
const END_POLL_NS: u64 = 1_000_000;
/// A member of a multicast a NIC reset cut is done once its root is
/// through and no member has received any of the flow's multicasts for
/// this long: several times the longest retransmission timeout floor of
/// the bundled profiles (2 ms), so that relays still retrying into it
/// find its buffers.
const CUT_QUIET_NS: u64 = 20_000_000;

/// Receive buffers of one size class and priority on a port.
struct Pool {
    class: u8,
    priority: host_driver::Priority,
    bufs: Vec<DmaBuf>,
}

/// A port this node opened, with its receive pools.
struct PortCtx<B: NicBackend> {
    num: u8,
    port: Port<B>,
    pools: Vec<Pool>,
    /// Receive buffers to post again (the ring was full): (pool, index).
    repost: VecDeque<(usize, usize)>,
    opened: bool,
    /// Opened and its first receive buffers taken: counted ready.
    ready: bool,
    /// Descriptors the NIC had not taken at the last look, and since when.
    pending: (u32, u64),
}

/// The host program of one node (see the module doc).
pub struct NodeApp<H: NodeHost = SimHost, T: BrmTransport = SimTransport> {
    node: u16,
    host: H,
    plan: NodePlan,
    ledger: SharedLedger,
    /// The NIC opened through the first backend (flow table, trace).
    nic: Option<Nic<H::B>>,
    /// Setup is done (NIC and ports open, buffers posted).
    set_up: bool,
    /// Every port of the cluster was open when this program last looked.
    started: bool,
    ports: Vec<PortCtx<H::B>>,
    roles: Vec<Role>,
    scratch: Vec<u8>,
    failed: bool,
    /// This node's NIC was reset under it (its ports are no longer
    /// served): the program stops.
    nic_lost: bool,
    /// Every port of the plan counted ready on this program's behalf
    /// (`give_up_ports`).
    ports_given_up: bool,
    /// Stream flows this node receives (their receiving side is ours).
    incoming: Vec<usize>,
    /// Incoming flows may end early (stop, refusal): look now and then.
    incoming_may_end: bool,
    brm: Option<BrmClient<T>>,
    /// The role whose request to the bandwidth manager waits for its
    /// answer (one at a time).
    brm_for: Option<usize>,
    /// Dispatch trace cursor, while a role of this node is traced.
    trace_cursor: Option<u32>,
    /// When `read_trace` last read it, and when it reads it next.
    trace_read: (u64, u64),
    /// Events taken from the ports so far.
    events: u64,
    /// The multicast groups this node is a member of (root included).
    mcasts: Vec<McastCtx>,
    /// The collective flows this node is a member of.
    colls: Vec<coll::CollCtx>,
    /// Receive buffers a relay's sends go out of: (port, pool, index) ->
    /// (sends not completed yet, flow). Posted again when none is left.
    lent: BTreeMap<(usize, usize, usize), (u32, usize)>,
    /// Relays the driver could not post yet (no send token, ring full).
    pending_relays: VecDeque<PendingRelay>,
    /// This NIC's `McastTreeOps` counter when last credited to a
    /// multicast.
    tree_ops_seen: u64,
    /// `my_work_done`: the roles, and the incoming flows, before these
    /// indices were seen done.
    roles_seen_done: Cell<usize>,
    incoming_seen_done: Cell<usize>,
    /// A role of this node is a ping-pong's (a reception may queue its
    /// next message).
    ping_roles: bool,
    /// The ledger's streams into this node, in key order (`StreamKey::packed`):
    /// the flow and direction of each (looked up for every message received).
    my_streams: Vec<(u64, (usize, Dir))>,
    /// Bit i: role i may find something to do in a pass (`pump`).
    may_send: Vec<u64>,
    /// Per port, bit i: role i sends on it.
    port_roles: Vec<Vec<u64>>,
    /// Bit i: role i waits for a time or the bandwidth manager, or is a
    /// multicast root (`pump` looks at it even when its port has no room).
    special_roles: Vec<u64>,
    /// `pump`'s scratch.
    skip_scratch: Vec<u64>,
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    pub fn new(
        host: H,
        plan: NodePlan,
        ledger: SharedLedger,
        brm: Option<BrmClient<T>>,
    ) -> NodeApp<H, T> {
        let (incoming, incoming_may_end, my_streams) = {
            let l = ledger.borrow();
            let my_streams: Vec<(u64, (usize, Dir))> = l
                .streams
                .iter()
                .filter(|(k, _)| k.dst_node == plan.node)
                .map(|(k, &v)| (k.packed(), v))
                .collect();
            let v: Vec<usize> = l
                .streams
                .iter()
                .filter(|(k, &(f, _))| {
                    k.dst_node == plan.node && l.flows[f].spec.kind == FlowKind::Stream
                })
                .map(|(_, &(f, _))| f)
                .collect();
            let may_end = v.iter().any(|&f| {
                let s = &l.flows[f].spec;
                s.stop_ns.is_some() || s.rate.uses_brm()
            });
            (v, may_end, my_streams)
        };
        NodeApp {
            node: plan.node,
            host,
            plan,
            ledger,
            nic: None,
            set_up: false,
            started: false,
            ports: Vec::new(),
            roles: Vec::new(),
            scratch: Vec::new(),
            failed: false,
            nic_lost: false,
            ports_given_up: false,
            incoming,
            incoming_may_end,
            brm,
            brm_for: None,
            trace_cursor: None,
            trace_read: (0, 0),
            events: 0,
            mcasts: Vec::new(),
            colls: Vec::new(),
            lent: BTreeMap::new(),
            pending_relays: VecDeque::new(),
            tree_ops_seen: 0,
            roles_seen_done: Cell::new(0),
            incoming_seen_done: Cell::new(0),
            ping_roles: false,
            my_streams,
            may_send: Vec::new(),
            port_roles: Vec::new(),
            special_roles: Vec::new(),
            skip_scratch: Vec::new(),
        }
    }

    /// Events this node's program has taken from its ports so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// With a trace: log a call this program made on port `port`, begun
    /// at `start_ns` (on `NodeHost::trace_ns`) and done now; an `event`
    /// is an instant. `detail` is only built when logged.
    fn log_call(
        &self,
        what: &'static str,
        port: u8,
        start_ns: u64,
        detail: impl FnOnce() -> String,
    ) {
        let mut l = self.ledger.borrow_mut();
        if let Some(calls) = l.host_calls.as_mut() {
            let end_ns = if what == "event" { start_ns } else { self.host.trace_ns() };
            let tokens = self.ports.iter().find(|p| p.num == port).map(|p| {
                let p = &p.port;
                (
                    p.send_tokens().saturating_sub(p.send_tokens_free()),
                    p.recv_tokens().saturating_sub(p.recv_tokens_free()),
                )
            });
            calls.push(super::trace::HostCall {
                node: self.node,
                start_ns,
                end_ns,
                what,
                port,
                detail: detail(),
                tokens,
            });
        }
    }

    fn problem(&self, msg: String) {
        self.ledger.borrow_mut().problems.push(format!("node {}: {msg}", self.node));
    }

    /// Done when everything this node itself must see has happened: the
    /// completions of its sends and the arrival of every message it
    /// receives. (The core never calls a done program again, and asks only
    /// after the program's own turn, so this must not wait on other nodes.)
    fn my_work_done(&self) -> bool {
        if self.failed || self.nic_lost {
            return true;
        }
        if !self.set_up {
            return false;
        }
        let l = self.ledger.borrow();
        // (Without NIC resets nothing is cut: the clock is not read.)
        let resets = !l.resets.is_empty();
        let now = if resets { self.host.now_ns() } else { 0 };
        let cut = |f: usize| resets && l.cut_at(f, now).is_some();
        // A flow a NIC reset cut: its senders still see every send
        // complete (failing with TargetPortClosed); nothing more will
        // arrive.
        let role_done = |r: &Role| {
            let f = &l.flows[r.flow];
            let m = f.spec.messages;
            let cut = cut(r.flow);
            if !cut && (r.gate.waits() || (r.gate == Gate::Running && r.rate.uses_brm())) {
                return false;
            }
            match r.kind {
                RoleKind::StreamSender => f.completed[0] >= m,
                // Cut: the answer to a ping the reset NIC took never
                // comes, and the next ping waits for it.
                RoleKind::PingInitiator => {
                    cut || (f.completed[0] >= m && f.streams[1].expected >= m)
                }
                RoleKind::PingResponder => {
                    cut || (f.completed[1] >= m && f.streams[0].expected >= m)
                }
                RoleKind::McastRoot => f.completed[0] >= m,
            }
        };
        let incoming_done =
            |&f: &usize| cut(f) || l.flows[f].streams[0].expected >= l.flows[f].spec.messages;
        // A role or an incoming flow once done stays done (counts only
        // grow, a flow's messages only shrink, a gate only moves on, a cut
        // stays): each list is looked at from the first one not yet seen
        // done, not from its start every time.
        let mut i = self.roles_seen_done.get();
        while self.roles.get(i).is_some_and(role_done) {
            i += 1;
        }
        self.roles_seen_done.set(i);
        if i < self.roles.len() {
            // Not done (the incoming flows are looked at when it may be).
            return false;
        }
        let mut j = self.incoming_seen_done.get();
        while self.incoming.get(j).is_some_and(incoming_done) {
            j += 1;
        }
        self.incoming_seen_done.set(j);
        i == self.roles.len()
            && j == self.incoming.len()
            && self.mcasts.iter().filter(|c| c.rank > 0).all(|c| {
                let f = &l.flows[c.flow];
                let m = f.spec.messages;
                let Some(mc) = f.mcast.as_ref() else { return false };
                let me = &mc.members[c.rank as usize - 1];
                let cut = cut(c.flow);
                if me.expected >= m && (me.all_received() || !cut) {
                    return true;
                }
                // A NIC reset cut it: some multicasts may never come (the
                // root's failures skip them) and some that failed for
                // others may still come. This member goes on taking what
                // comes (the root and the relays wait on its buffers and
                // acks) until the root is through (every multicast
                // completed, or its NIC reset) and the flow has been quiet
                // for `CUT_QUIET_NS`.
                cut && (f.completed[0] >= m || l.reset_by(f.spec.src_node, now))
                    && now.saturating_sub(mc.last_activity_ns) >= CUT_QUIET_NS
            })
            && self.lent.is_empty()
            && self.pending_relays.is_empty()
            && self.colls_done()
    }
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Look at the ports and act: open everything on the first call, take
    /// every event, post buffers again, send what may be sent. `wake_at`
    /// is told when the program wants to be called again at the latest
    /// (the sim schedules it; a real-time loop calls again anyway).
    /// Returns how many events it took.
    pub fn step(&mut self, wake_at: &mut dyn FnMut(u64)) -> u64 {
        if self.failed {
            return 0;
        }
        if !self.set_up {
            match self.setup() {
                Ok(true) => {}
                Ok(false) => {
                    wake_at(self.host.now_ns() + BARRIER_POLL_NS);
                    return 0;
                }
                Err(e) => {
                    self.problem(e);
                    self.failed = true;
                    self.give_up_ports();
                    return 0;
                }
            }
        }
        if self.nic_lost {
            return 0;
        }
        if self.ports.iter().any(|p| p.port.closed_by_nic()) {
            // The NIC was reset: its ports closed with everything in
            // them (also one whose open it had not seen yet). Peers see
            // TargetPortClosed; this program stops.
            self.nic_lost = true;
            self.give_up_ports();
            return 0;
        }
        let began = self.host.now_ns();
        let events = self.drain_events();
        self.repost_pending();
        // A port is ready once open and its first receive buffers taken by
        // the NIC, so that no peer's first message finds none; or once the
        // NIC has taken none of them for `READY_STALL_NS` (it holds all the
        // receive buffers it can: the rest wait for traffic).
        let now = self.host.now_ns();
        for p in self.ports.iter_mut().filter(|p| p.opened && !p.ready) {
            let pending = p.port.ring_pending();
            if pending != p.pending.0 {
                p.pending = (pending, now);
            }
            if pending == 0 || now.saturating_sub(p.pending.1) >= READY_STALL_NS {
                p.ready = true;
                self.ledger.borrow_mut().ports_ready += 1;
            }
        }
        if self.ports.iter().any(|p| !p.ready) && self.my_work_done() {
            // Done before its ports were ready (every flow it has was cut
            // by a NIC reset): the core calls it no more, so they count
            // as ready now, or the others would wait at the start for
            // ever.
            self.give_up_ports();
        }
        self.retry_relays(began, wake_at);
        self.release_finished();
        self.read_trace(self.host.now_ns());
        let ready = {
            let l = self.ledger.borrow();
            l.ports_ready >= l.ports_total
        };
        if ready && !self.started {
            self.started = true;
            self.host.traffic_starts();
        }
        let now = self.host.now_ns();
        if !ready {
            // Until every port is ready: a node that sends nothing still
            // looks again (its incoming flows may be refused, or end).
            if !self.my_work_done() {
                wake_at(now + BARRIER_POLL_NS);
            }
            return events;
        }
        self.release_delivered(now, wake_at);
        self.post_due_roots(now, wake_at);
        if let Some(t) = self.pump(now) {
            wake_at(t);
        }
        // Multicasts the pass started post once their root's host work
        // is done (now, when there was none).
        self.post_due_roots(now, wake_at);
        if let Some(t) = self.coll_pump(now) {
            wake_at(t);
        }
        // A role that ended at once (refused, stopped with nothing in
        // flight) has nothing left to complete.
        self.release_finished();
        // That may have finished this program's work just now (a role
        // stopped by its `stop_us` with every send completed), and a
        // finished program is called no more: what its NIC dispatched
        // since the last read of the trace is read now, or it would be
        // missing from the flows' `dispatch_ticks`.
        if self.trace_cursor.is_some() && self.my_work_done() {
            self.read_trace(now);
        }
        if self.trace_cursor.is_some() && !self.my_work_done() {
            wake_at(now + TRACE_POLL_NS);
        }
        // (After a NIC reset, what a program waits for may end on another
        // node: a root's last multicast failing, say.)
        let resets = !self.ledger.borrow().resets.is_empty();
        if (self.incoming_may_end || resets) && !self.my_work_done() {
            wake_at(now + END_POLL_NS);
        }
        // A relay waiting for a send token or ring room looks again soon.
        if !self.pending_relays.is_empty() {
            wake_at(now + BARRIER_POLL_NS);
        }
        // Flush consumption so the NIC never waits on a drained queue.
        for p in &mut self.ports {
            p.port.report_consumed();
        }
        events
    }

    /// Has a NIC reset cut flow `f` by now (a NIC it touches reset)?
    pub(super) fn cut_now(&self, f: usize) -> bool {
        self.ledger.borrow().cut_at(f, self.host.now_ns()).is_some()
    }

    /// This program stops before (or after) its ports were ready: they
    /// count as ready, so that the others do not wait at the start for
    /// ever.
    fn give_up_ports(&mut self) {
        if self.ports_given_up {
            return;
        }
        self.ports_given_up = true;
        let ready = self.ports.iter().filter(|p| p.ready).count();
        for p in &mut self.ports {
            p.ready = true;
        }
        // (Ports the setup did not get to are not in `ports`.)
        let unready = self.plan.ports.len().saturating_sub(ready);
        self.ledger.borrow_mut().ports_ready += unready;
    }

    /// Everything this node must see has happened (or its setup failed).
    pub fn done(&self) -> bool {
        self.my_work_done()
    }
}

impl HostApp for NodeApp<SimHost, SimTransport> {
    fn wake(&mut self, cx: &mut HostCx) {
        self.step(&mut |t| cx.wake_at(t));
    }

    fn done(&self) -> bool {
        self.my_work_done()
    }
}
