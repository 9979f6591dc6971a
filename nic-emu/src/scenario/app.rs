//! The host program of one node: it opens the ports its plan names, keeps
//! receive buffers posted, drives its flows' senders, and checks every
//! received message (content, length, place in its stream's order) into
//! the shared [`Ledger`].
//!
//! It is an ordinary host-driver program (`Nic`, `Port`, `DmaBuf`,
//! events), generic over how it reaches its NIC ([`NodeHost`]): on the
//! sim ([`SimHost`]) the event core calls `wake` when the NIC wrote into
//! this host's memory and at the times the app asks for; in real time
//! (`realtime.rs`) a driver loop calls [`NodeApp::step`] over and over.
//! The same code and the same ledger check every backend's messages.
//!
//! Tags: a receive buffer's Provide tag is `RECV_TAG | pool << 24 | index`;
//! a send's tag is `role << 48 | slot << 32 | message`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use host_driver::brm::{BrmClient, BrmTransport, FlowId};
use host_driver::{
    DmaBuf, DriverError, Event, FlowKey, Nic, NicBackend, Port, PortOptions, SendStatus,
};

use super::format::{FlowKind, FlowSpec, RatePlan, StreamKey};
use super::pattern;
use super::plan::{align, class_of, Dir, NodePlan, RoleKind};
use crate::brm::SimTransport;
use crate::{HostApp, HostCx, SimBackend};

const RECV_TAG: u64 = 1 << 63;

/// Until every port of the cluster is open, senders look again this often.
const BARRIER_POLL_NS: u64 = 2_000;

/// While a flow is traced, its NIC's dispatch trace is read this often
/// (the ring holds 4096 records).
const TRACE_POLL_NS: u64 = 10_000_000;

/// A node receiving a flow that may end early (stopped, or refused by the
/// bandwidth manager) looks again this often whether it is done.
const END_POLL_NS: u64 = 1_000_000;

/// One direction of a flow, as its receiver sees it.
#[derive(Debug, Default)]
pub struct StreamLedger {
    /// The message index expected next.
    pub expected: u64,
    /// Messages whose send failed (the receiver will not see them).
    pub failed: BTreeMap<u64, ()>,
}

impl StreamLedger {
    fn skip_failed(&mut self) {
        while self.failed.remove(&self.expected).is_some() {
            self.expected += 1;
        }
    }
}

/// What happened to one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The expected message, intact.
    Good(u64),
    /// An intact message whose index was already delivered.
    Duplicate(u64),
    /// An intact message ahead of its turn (earlier ones were skipped).
    Ahead(u64),
    /// Wrong content or length: taken as the expected one, mangled.
    Corrupted(u64),
}

/// Everything about one flow the apps of both ends update.
#[derive(Debug)]
pub struct FlowLedger {
    pub spec: FlowSpec,
    pub streams: [StreamLedger; 2],
    /// Send-call times of requests (stream messages) not yet answered.
    pub send_ns: HashMap<u64, u64>,
    pub delivered: u64,
    pub bytes: u64,
    pub corrupted: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub send_errors: u64,
    pub first_send_ns: Option<u64>,
    pub last_recv_ns: u64,
    pub latencies: Vec<u64>,
    /// Sends completed (any status), per direction.
    pub completed: [u64; 2],
    /// Rate control: the IDT installed (raw, admitted or best effort at
    /// its start), whether the bandwidth manager admitted it, and why not.
    pub idt: Option<u32>,
    pub admitted: Option<bool>,
    pub refused_reason: Option<String>,
    /// NIC clock of each packet dispatch (with `trace`).
    pub dispatch_ticks: Vec<u64>,
}

impl FlowLedger {
    pub fn new(spec: FlowSpec) -> FlowLedger {
        FlowLedger {
            spec,
            streams: Default::default(),
            send_ns: HashMap::new(),
            delivered: 0,
            bytes: 0,
            corrupted: 0,
            duplicates: 0,
            out_of_order: 0,
            send_errors: 0,
            first_send_ns: None,
            last_recv_ns: 0,
            latencies: Vec::new(),
            completed: [0, 0],
            idt: None,
            admitted: None,
            refused_reason: None,
            dispatch_ticks: Vec::new(),
        }
    }

    fn stream_id(&self, dir: Dir) -> u32 {
        match dir {
            Dir::Forward => pattern::forward_stream(self.spec.index),
            Dir::Reply => pattern::reply_stream(self.spec.index),
        }
    }

    fn is_message(&self, data: &[u8], dir: Dir, idx: u64) -> bool {
        idx < self.spec.messages
            && data.len() as u64 == self.spec.size_of(idx)
            && pattern::matches(data, self.stream_id(dir), idx as u32)
    }

    /// Check a received message of direction `dir` and account for it.
    pub fn receive(&mut self, dir: Dir, data: &[u8], now: u64) -> Verdict {
        let st = &mut self.streams[dir as usize];
        st.skip_failed();
        let e = st.expected;
        let verdict = if self.is_message(data, dir, e) {
            Verdict::Good(e)
        } else {
            match pattern::claimed_index(data).map(u64::from) {
                Some(c) if c != e && self.is_message(data, dir, c) => {
                    if c < e {
                        Verdict::Duplicate(c)
                    } else {
                        Verdict::Ahead(c)
                    }
                }
                _ => Verdict::Corrupted(e),
            }
        };
        let st = &mut self.streams[dir as usize];
        match verdict {
            Verdict::Good(i) => {
                st.expected = i + 1;
                self.bytes += data.len() as u64;
                self.last_recv_ns = self.last_recv_ns.max(now);
                let stream_done = self.spec.kind == FlowKind::Stream || dir == Dir::Reply;
                if stream_done {
                    self.delivered += 1;
                    if let Some(t) = self.send_ns.remove(&i) {
                        let lat = now.saturating_sub(t);
                        self.latencies.push(match self.spec.kind {
                            FlowKind::Stream => lat,
                            FlowKind::Pingpong => lat / 2,
                        });
                    }
                }
            }
            Verdict::Duplicate(_) => self.duplicates += 1,
            Verdict::Ahead(i) => {
                st.expected = i + 1;
                self.out_of_order += 1;
            }
            Verdict::Corrupted(i) => {
                st.expected = i + 1;
                self.corrupted += 1;
            }
        }
        verdict
    }

    /// A send of `msg` in direction `dir` completed (or was refused).
    pub fn send_done(&mut self, dir: Dir, msg: u64, ok: bool) {
        self.completed[dir as usize] += 1;
        if !ok {
            self.send_errors += 1;
            self.send_ns.remove(&msg);
            let st = &mut self.streams[dir as usize];
            if msg >= st.expected {
                st.failed.insert(msg, ());
            }
            st.skip_failed();
        }
    }

    /// Every message of the flow has been resolved at its receiver (and
    /// every send has completed).
    pub fn finished(&self) -> bool {
        let m = self.spec.messages;
        match self.spec.kind {
            FlowKind::Stream => self.streams[0].expected >= m && self.completed[0] >= m,
            FlowKind::Pingpong => {
                self.streams[1].expected >= m && self.completed[0] >= m && self.completed[1] >= m
            }
        }
    }
}

/// State every app shares (the sim is one thread).
#[derive(Debug)]
pub struct Ledger {
    pub flows: Vec<FlowLedger>,
    pub streams: BTreeMap<StreamKey, (usize, Dir)>,
    /// Ports every app opens, and how many the firmware has opened so far.
    pub ports_total: usize,
    pub ports_ready: usize,
    /// Things that should not happen (refused descriptors, stray messages,
    /// driver errors), in the order they happened.
    pub problems: Vec<String>,
    /// Messages the apps have resolved so far (for progress output).
    pub resolved: u64,
}

pub type SharedLedger = Rc<RefCell<Ledger>>;

struct Pool {
    class: u8,
    priority: host_driver::Priority,
    bufs: Vec<DmaBuf>,
}

struct PortCtx<B: NicBackend> {
    num: u8,
    port: Port<B>,
    pools: Vec<Pool>,
    /// Receive buffers to post again (the ring was full): (pool, index).
    repost: VecDeque<(usize, usize)>,
    opened: bool,
}

struct Role {
    flow: usize,
    kind: RoleKind,
    port: usize,
    peer_node: u16,
    peer_port: u8,
    priority: host_driver::Priority,
    slots: Vec<DmaBuf>,
    free: Vec<usize>,
    /// Stream: the next message to send. Ping-pong: messages ready to go.
    next: u64,
    queue: VecDeque<u64>,
    start_ns: u64,
    messages: u64,
    sent_all: bool,
    /// Rate control of what this role sends.
    rate: RatePlan,
    gate: Gate,
    stop_ns: Option<u64>,
    trace: bool,
}

/// Where a role is with the bandwidth manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Not asked yet (it asks when it starts).
    Pending,
    /// Sending (admitted, registered, or no manager involved).
    Running,
    /// Refused: it sends nothing.
    Refused,
    /// Its reservation was given back.
    Released,
}

impl Role {
    fn sends(&self) -> Dir {
        match self.kind {
            RoleKind::PingResponder => Dir::Reply,
            _ => Dir::Forward,
        }
    }

    /// The flow-table key of the stream this role sends on.
    fn key(&self, port_num: u8) -> FlowKey {
        FlowKey::new(port_num, self.peer_node, self.peer_port, self.priority)
    }
}

/// How a node's program reaches its NIC: a backend for each port it
/// opens, and the host clock.
pub trait NodeHost {
    type B: NicBackend;
    /// A backend not tied to one port, to open the NIC through and every
    /// port from (the sim's); None when each port needs its own.
    fn shared(&self) -> Option<Self::B>;
    /// A backend that serves port `port` (real time: attached to it).
    fn attach(&mut self, port: u8) -> Result<Self::B, DriverError>;
    /// Host time in ns on the run's clock.
    fn now_ns(&self) -> u64;
    /// Every port of the cluster is open: the traffic starts now (a
    /// real-time clock may start here; the sim's runs from the start).
    fn traffic_starts(&mut self) {}
}

/// The sim: every port of a node goes through the node's one backend,
/// and time is virtual.
pub struct SimHost(pub SimBackend);

impl NodeHost for SimHost {
    type B = SimBackend;
    fn shared(&self) -> Option<SimBackend> {
        Some(self.0.clone())
    }
    fn attach(&mut self, _port: u8) -> Result<SimBackend, DriverError> {
        Ok(self.0.clone())
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
}

/// A bandwidth-manager transport for runs without a manager: every call
/// fails (a scenario that needs one is refused before such a run).
pub struct NoBrm;

impl BrmTransport for NoBrm {
    fn call(&mut self, _request: &[u8]) -> Result<Vec<u8>, String> {
        Err("no bandwidth manager on this backend".into())
    }
}

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
    /// Stream flows this node receives (their receiving side is ours).
    incoming: Vec<usize>,
    /// Incoming flows may end early (stop, refusal): look now and then.
    incoming_may_end: bool,
    brm: Option<BrmClient<T>>,
    /// Dispatch trace cursor, while a role of this node is traced.
    trace_cursor: Option<u32>,
    /// Events taken from the ports so far.
    events: u64,
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    pub fn new(
        host: H,
        plan: NodePlan,
        ledger: SharedLedger,
        brm: Option<BrmClient<T>>,
    ) -> NodeApp<H, T> {
        let (incoming, incoming_may_end) = {
            let l = ledger.borrow();
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
            (v, may_end)
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
            incoming,
            incoming_may_end,
            brm,
            trace_cursor: None,
            events: 0,
        }
    }

    /// Events this node's program has taken from its ports so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    fn problem(&self, msg: String) {
        self.ledger.borrow_mut().problems.push(format!("node {}: {msg}", self.node));
    }

    /// Open the NIC and the ports, allocate and post buffers. Ok(false):
    /// the firmware is still booting, try again later.
    fn setup(&mut self) -> Result<bool, String> {
        let attach = |host: &mut H, port: u8| {
            host.attach(port).map_err(|e| format!("attaching port {port}: {e}"))
        };
        let first = match (self.host.shared(), self.plan.ports.first()) {
            (Some(b), _) => b,
            (None, Some(pp)) => attach(&mut self.host, pp.port)?,
            // Nothing to open: a node without flows.
            (None, None) => {
                self.set_up = true;
                return Ok(true);
            }
        };
        let nic = match Nic::open(first) {
            Ok(n) => n,
            Err(DriverError::NicNotReady { fw_status: 0 }) => return Ok(false),
            Err(e) => return Err(format!("opening the NIC: {e}")),
        };
        for pp in &self.plan.ports {
            // A backend tied to one port serves only that one: the others
            // are opened through backends of their own.
            let serves = |n: &Nic<H::B>| n.backend().port_hint().is_none_or(|p| p == pp.port);
            let opened = if serves(&nic) {
                nic.open_port(pp.port, PortOptions::default())
            } else {
                // (The port keeps what it needs of that NIC handle.)
                Nic::open(attach(&mut self.host, pp.port)?)
                    .map_err(|e| format!("opening the NIC for port {}: {e}", pp.port))?
                    .open_port(pp.port, PortOptions::default())
            };
            let mut port = opened.map_err(|e| format!("opening port {}: {e}", pp.port))?;
            let mut pools = Vec::new();
            for (pi, q) in pp.pools.iter().enumerate() {
                let stride = align(q.buf_len);
                let region = port
                    .alloc(stride * q.count as u64)
                    .map_err(|e| format!("port {}: receive buffers: {e}", pp.port))?;
                let mut bufs = Vec::new();
                for k in 0..q.count as u64 {
                    let b = region.sub(k * stride, q.buf_len).ok_or("receive buffer carving")?;
                    port.provide_receive_buffer(&b, q.class, q.priority, recv_tag(pi, k as usize))
                        .map_err(|e| format!("port {}: posting a receive buffer: {e}", pp.port))?;
                    bufs.push(b);
                }
                pools.push(Pool { class: q.class, priority: q.priority, bufs });
            }
            self.ports.push(PortCtx {
                num: pp.port,
                port,
                pools,
                repost: VecDeque::new(),
                opened: false,
            });
        }
        for rp in &self.plan.roles {
            let port = self
                .ports
                .iter()
                .position(|p| p.num == rp.port)
                .ok_or("a role's port is not open")?;
            let stride = align(rp.slot_len);
            let region = self.ports[port]
                .port
                .alloc(stride * rp.slots as u64)
                .map_err(|e| format!("port {}: send buffers: {e}", rp.port))?;
            let slots: Vec<DmaBuf> = (0..rp.slots as u64)
                .map(|k| region.sub(k * stride, rp.slot_len.max(1)))
                .collect::<Option<_>>()
                .ok_or("send buffer carving")?;
            let (messages, rate, stop_ns, trace) = {
                let l = self.ledger.borrow();
                let s = &l.flows[rp.flow].spec;
                (s.messages, s.rate, s.stop_ns, s.trace && rp.kind != RoleKind::PingResponder)
            };
            let mut queue = VecDeque::new();
            if rp.kind == RoleKind::PingInitiator {
                queue.push_back(0);
            }
            self.roles.push(Role {
                flow: rp.flow,
                kind: rp.kind,
                port,
                peer_node: rp.peer_node,
                peer_port: rp.peer_port,
                priority: rp.priority,
                free: (0..slots.len()).rev().collect(),
                slots,
                next: 0,
                queue,
                start_ns: rp.start_ns,
                messages,
                sent_all: false,
                rate,
                gate: if rate.uses_brm() { Gate::Pending } else { Gate::Running },
                stop_ns,
                trace,
            });
        }
        // Raw IDTs go into the flow table before anything is sent (both
        // directions of a ping-pong).
        for r in &self.roles {
            if let RatePlan::Idt(idt) = r.rate {
                let key = r.key(self.ports[r.port].num);
                nic.set_flow_idt(key, idt).map_err(|e| format!("flow table ({key}): {e}"))?;
                if r.kind != RoleKind::PingResponder {
                    self.ledger.borrow_mut().flows[r.flow].idt = Some(idt);
                }
            }
        }
        if self.roles.iter().any(|r| r.trace) {
            self.trace_cursor = Some(nic.set_dispatch_trace(true));
        }
        self.nic = Some(nic);
        self.set_up = true;
        Ok(true)
    }

    /// Read the dispatch trace into the traced flows' ledgers.
    fn read_trace(&mut self) {
        let (Some(cursor), Some(nic)) = (self.trace_cursor, self.nic.as_ref()) else { return };
        let t = nic.dispatch_trace_since(cursor);
        self.trace_cursor = Some(t.cursor);
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
    /// registers as best effort). Refused: it sends nothing.
    fn open_gate(&mut self, ri: usize) {
        let id = self.flow_id(ri);
        let r = &self.roles[ri];
        let flow = r.flow;
        let Some(brm) = self.brm.as_mut() else {
            self.roles[ri].gate = Gate::Refused;
            self.end_role(ri, 0);
            self.problem("no bandwidth manager for a rate-controlled flow".into());
            return;
        };
        let answer = match r.rate {
            RatePlan::Reserve(b) => brm.request_bandwidth(id, b).map(|a| a.idt),
            _ => brm.best_effort(id),
        };
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

    /// The role sends no more than the `sent` messages it has sent.
    fn end_role(&mut self, ri: usize, sent: u64) {
        let r = &mut self.roles[ri];
        r.messages = sent;
        r.sent_all = true;
        self.ledger.borrow_mut().flows[r.flow].spec.messages = sent;
    }

    /// Give back the reservations of roles whose last send completed.
    fn release_finished(&mut self) {
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
            self.roles[ri].gate = Gate::Released;
            if let Some(brm) = self.brm.as_mut() {
                if let Err(e) = brm.release_bandwidth(id) {
                    self.problem(format!("releasing {id}: {e}"));
                }
            }
        }
    }

    /// Take every event of every port.
    fn drain_events(&mut self) -> u64 {
        let mut n = 0;
        for pi in 0..self.ports.len() {
            while let Some(ev) = self.ports[pi].port.poll() {
                n += 1;
                self.on_event(pi, ev);
            }
        }
        self.events += n;
        n
    }

    fn on_event(&mut self, pi: usize, ev: Event) {
        match ev {
            Event::PortOpened { .. } => {
                if !self.ports[pi].opened {
                    self.ports[pi].opened = true;
                    self.ledger.borrow_mut().ports_ready += 1;
                }
            }
            Event::Received { node, port, priority, len, tag, .. } => {
                self.on_received(pi, node, port, priority, len, tag)
            }
            Event::Sent { tag, status, .. } => self.on_sent(tag, status == SendStatus::Ok, status),
            Event::Error { cause, tag, desc_kind, .. } => {
                self.problem(format!(
                    "port {}: the NIC refused a {:?} descriptor (tag {tag:#x}): {cause:?}",
                    self.ports[pi].num, desc_kind
                ));
                if tag & RECV_TAG == 0 && desc_kind.is_some_and(|k| k.uses_send_token()) {
                    self.on_sent(tag, false, SendStatus::Dropped);
                }
            }
            other => {
                self.problem(format!("port {}: unexpected event {other:?}", self.ports[pi].num))
            }
        }
    }

    fn on_received(
        &mut self,
        pi: usize,
        node: u16,
        port: u8,
        priority: host_driver::Priority,
        len: u32,
        tag: u64,
    ) {
        let (pool, idx) = match decode_recv_tag(tag) {
            Some((p, i))
                if p < self.ports[pi].pools.len() && i < self.ports[pi].pools[p].bufs.len() =>
            {
                (p, i)
            }
            _ => {
                self.problem(format!("received into an unknown buffer (tag {tag:#x})"));
                return;
            }
        };
        let buf = self.ports[pi].pools[pool].bufs[idx];
        let key = StreamKey {
            src_node: node,
            src_port: port,
            dst_node: self.node,
            dst_port: self.ports[pi].num,
            priority,
        };
        let now = self.host.now_ns();
        let len = len as usize;
        let found = self.ledger.borrow().streams.get(&key).copied();
        match found {
            Some((flow, dir)) if len as u64 <= buf.len => {
                if self.scratch.len() < len {
                    self.scratch.resize(len, 0);
                }
                let _ = self.ports[pi].port.read(&buf, 0, &mut self.scratch[..len]);
                let verdict = {
                    let mut l = self.ledger.borrow_mut();
                    l.resolved += 1;
                    l.flows[flow].receive(dir, &self.scratch[..len], now)
                };
                self.after_receive(flow, dir, verdict);
            }
            Some((flow, dir)) => {
                // Longer than its buffer: the NIC should never do this.
                self.problem(format!("{key}: a {len}-byte message in a {}-byte buffer", buf.len));
                let v = self.ledger.borrow_mut().flows[flow].receive(dir, &[], now);
                self.after_receive(flow, dir, v);
            }
            None => self.problem(format!("a message from no flow: {key}, {len} bytes")),
        }
        self.repost(pi, pool, idx);
    }

    /// Ping-pong: a request asks for its reply; a reply lets the next
    /// request go.
    fn after_receive(&mut self, flow: usize, dir: Dir, v: Verdict) {
        let next = match v {
            Verdict::Good(i) | Verdict::Ahead(i) | Verdict::Corrupted(i) => i,
            Verdict::Duplicate(_) => return,
        };
        let want = match dir {
            Dir::Forward => RoleKind::PingResponder,
            Dir::Reply => RoleKind::PingInitiator,
        };
        if let Some(r) = self.roles.iter_mut().find(|r| r.flow == flow && r.kind == want) {
            let m = if dir == Dir::Forward { next } else { next + 1 };
            if m < r.messages {
                r.queue.push_back(m);
            }
        }
    }

    fn repost(&mut self, pi: usize, pool: usize, idx: usize) {
        let pc = &mut self.ports[pi];
        let q = &pc.pools[pool];
        match pc.port.provide_receive_buffer(&q.bufs[idx], q.class, q.priority, recv_tag(pool, idx))
        {
            Ok(()) => {}
            Err(DriverError::RingFull | DriverError::NoRecvToken) => {
                pc.repost.push_back((pool, idx))
            }
            Err(e) => {
                let n = pc.num;
                self.problem(format!("port {n}: posting a receive buffer again: {e}"));
            }
        }
    }

    fn repost_pending(&mut self) {
        for pi in 0..self.ports.len() {
            let n = self.ports[pi].repost.len();
            for _ in 0..n {
                if let Some((pool, idx)) = self.ports[pi].repost.pop_front() {
                    self.repost(pi, pool, idx);
                }
            }
        }
    }

    fn on_sent(&mut self, tag: u64, ok: bool, status: SendStatus) {
        let (ri, slot, msg) = decode_send_tag(tag);
        let Some(r) = self.roles.get_mut(ri) else {
            self.problem(format!("a completion with an unknown tag {tag:#x}"));
            return;
        };
        if slot < r.slots.len() && !r.free.contains(&slot) {
            r.free.push(slot);
        }
        let dir = r.sends();
        let (flow, kind, port, peer_node, peer_port, prio) =
            (r.flow, r.kind, r.port, r.peer_node, r.peer_port, r.priority);
        if !ok {
            // The request will get no reply: go on with the next one.
            if kind == RoleKind::PingInitiator && msg + 1 < r.messages {
                r.queue.push_back(msg + 1);
            }
            let name = self.ledger.borrow().flows[flow].spec.name.clone();
            self.problem(format!("flow {name}: message {msg} ({dir:?}) completed with {status:?}"));
            if status == SendStatus::TimedOut {
                // Later sends to that target are dropped until resumed.
                let _ = self.ports[port].port.resume(peer_node, peer_port, prio);
            }
        }
        let mut l = self.ledger.borrow_mut();
        l.flows[flow].send_done(dir, msg, ok);
        if !ok {
            l.resolved += 1;
        }
    }

    /// Send what can be sent now. Returns the earliest future start time
    /// of a role that is waiting for it.
    fn pump(&mut self, now: u64) -> Option<u64> {
        let mut later: Option<u64> = None;
        for ri in 0..self.roles.len() {
            let r = &self.roles[ri];
            if r.sent_all {
                continue;
            }
            if now < r.start_ns {
                later = Some(later.map_or(r.start_ns, |l: u64| l.min(r.start_ns)));
                continue;
            }
            if r.gate == Gate::Pending {
                self.open_gate(ri);
                if self.roles[ri].sent_all {
                    continue;
                }
            }
            if let Some(stop) = self.roles[ri].stop_ns {
                if now >= stop {
                    let sent = self.roles[ri].next;
                    self.end_role(ri, sent);
                    continue;
                }
                later = Some(later.map_or(stop, |l: u64| l.min(stop)));
            }
            loop {
                let r = &self.roles[ri];
                let msg = match r.kind {
                    RoleKind::StreamSender => {
                        if r.next >= r.messages {
                            break;
                        }
                        r.next
                    }
                    _ => match r.queue.front() {
                        Some(&m) => m,
                        None => break,
                    },
                };
                let Some(&slot) = r.free.last() else { break };
                match self.send_one(ri, slot, msg) {
                    Ok(()) => {}
                    Err(DriverError::NoSendToken | DriverError::RingFull) => break,
                    Err(e) => {
                        let flow = self.roles[ri].flow;
                        let name = self.ledger.borrow().flows[flow].spec.name.clone();
                        self.problem(format!(
                            "flow {name}: send of message {msg} refused by the driver: {e}"
                        ));
                        let dir = self.roles[ri].sends();
                        let mut l = self.ledger.borrow_mut();
                        l.flows[flow].send_done(dir, msg, false);
                        l.resolved += 1;
                    }
                }
                let r = &mut self.roles[ri];
                match r.kind {
                    RoleKind::StreamSender => r.next += 1,
                    _ => {
                        r.queue.pop_front();
                    }
                }
                // A failed send above already gave its slot back.
            }
            let r = &mut self.roles[ri];
            r.sent_all = match r.kind {
                RoleKind::StreamSender => r.next >= r.messages,
                _ => false,
            };
        }
        later
    }

    fn send_one(&mut self, ri: usize, slot: usize, msg: u64) -> Result<(), DriverError> {
        let r = &self.roles[ri];
        let (len, stream, class) = {
            let l = self.ledger.borrow();
            let spec = &l.flows[r.flow].spec;
            let len = spec.size_of(msg);
            let stream = match r.sends() {
                Dir::Forward => pattern::forward_stream(r.flow),
                Dir::Reply => pattern::reply_stream(r.flow),
            };
            (len, stream, class_of(len))
        };
        let buf = r.slots[slot];
        let n = len as usize;
        if self.scratch.len() < n {
            self.scratch.resize(n, 0);
        }
        pattern::fill(&mut self.scratch[..n], stream, msg as u32);
        let pc = &mut self.ports[r.port];
        if n > 0 {
            pc.port.write(&buf, 0, &self.scratch[..n])?;
        }
        let now = self.host.now_ns();
        pc.port.send(
            &buf,
            0,
            len as u32,
            class,
            r.priority,
            r.peer_node,
            r.peer_port,
            send_tag(ri, slot, msg),
        )?;
        let r = &mut self.roles[ri];
        r.free.pop();
        let mut l = self.ledger.borrow_mut();
        let f = &mut l.flows[r.flow];
        f.first_send_ns = Some(f.first_send_ns.map_or(now, |t| t.min(now)));
        if r.kind != RoleKind::PingResponder {
            f.send_ns.insert(msg, now);
        }
        Ok(())
    }

    /// Done when everything this node itself must see has happened: the
    /// completions of its sends and the arrival of every message it
    /// receives. (The core never calls a done program again, and asks only
    /// after the program's own turn, so this must not wait on other nodes.)
    fn my_work_done(&self) -> bool {
        if self.failed {
            return true;
        }
        if !self.set_up {
            return false;
        }
        let l = self.ledger.borrow();
        let roles_done = self.roles.iter().all(|r| {
            let f = &l.flows[r.flow];
            let m = f.spec.messages;
            if r.gate == Gate::Pending || (r.gate == Gate::Running && r.rate.uses_brm()) {
                return false;
            }
            match r.kind {
                RoleKind::StreamSender => f.completed[0] >= m,
                RoleKind::PingInitiator => f.completed[0] >= m && f.streams[1].expected >= m,
                RoleKind::PingResponder => f.completed[1] >= m && f.streams[0].expected >= m,
            }
        });
        roles_done
            && self
                .incoming
                .iter()
                .all(|&f| l.flows[f].streams[0].expected >= l.flows[f].spec.messages)
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
                    return 0;
                }
            }
        }
        let events = self.drain_events();
        self.repost_pending();
        self.release_finished();
        self.read_trace();
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
            if self.roles.iter().any(|r| !r.sent_all) {
                wake_at(now + BARRIER_POLL_NS);
            }
            return events;
        }
        if let Some(t) = self.pump(now) {
            wake_at(t);
        }
        // A role that ended at once (refused, stopped with nothing in
        // flight) has nothing left to complete.
        self.release_finished();
        if self.trace_cursor.is_some() && !self.my_work_done() {
            wake_at(now + TRACE_POLL_NS);
        }
        if self.incoming_may_end && !self.my_work_done() {
            wake_at(now + END_POLL_NS);
        }
        // Flush consumption so the NIC never waits on a drained queue.
        for p in &mut self.ports {
            p.port.report_consumed();
        }
        events
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

fn recv_tag(pool: usize, idx: usize) -> u64 {
    RECV_TAG | (pool as u64) << 24 | idx as u64
}

fn decode_recv_tag(tag: u64) -> Option<(usize, usize)> {
    if tag & RECV_TAG == 0 {
        return None;
    }
    Some((((tag >> 24) & 0xFFFF) as usize, (tag & 0xFF_FFFF) as usize))
}

fn send_tag(role: usize, slot: usize, msg: u64) -> u64 {
    (role as u64) << 48 | (slot as u64 & 0xFFFF) << 32 | (msg & 0xFFFF_FFFF)
}

fn decode_send_tag(tag: u64) -> (usize, usize, u64) {
    (((tag >> 48) & 0x7FFF) as usize, ((tag >> 32) & 0xFFFF) as usize, tag & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::super::format::Scenario;
    use super::*;

    fn ledger(kind: &str) -> FlowLedger {
        let v = Scenario::parse_validated(&format!(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
             kind = \"{kind}\"\nsizes = [16, 32]\nmessages = 4\n"
        ))
        .unwrap();
        FlowLedger::new(v.flows[0].clone())
    }

    fn msg(f: &FlowLedger, dir: Dir, i: u64) -> Vec<u8> {
        pattern::make(f.spec.size_of(i) as usize, f.stream_id(dir), i as u32)
    }

    #[test]
    fn in_order_messages_are_delivered_with_their_latency() {
        let mut f = ledger("stream");
        f.send_ns.insert(0, 100);
        let m0 = msg(&f, Dir::Forward, 0);
        assert_eq!(f.receive(Dir::Forward, &m0, 350), Verdict::Good(0));
        assert_eq!((f.delivered, f.bytes, f.latencies.clone()), (1, 16, vec![250]));
    }

    #[test]
    fn duplicates_reordering_and_corruption_are_told_apart() {
        let mut f = ledger("stream");
        let m0 = msg(&f, Dir::Forward, 0);
        let m2 = msg(&f, Dir::Forward, 2);
        assert_eq!(f.receive(Dir::Forward, &m0, 1), Verdict::Good(0));
        assert_eq!(f.receive(Dir::Forward, &m0, 2), Verdict::Duplicate(0));
        assert_eq!(f.receive(Dir::Forward, &m2, 3), Verdict::Ahead(2));
        let mut m3 = msg(&f, Dir::Forward, 3);
        m3[9] ^= 1;
        assert_eq!(f.receive(Dir::Forward, &m3, 4), Verdict::Corrupted(3));
        assert_eq!((f.delivered, f.duplicates, f.out_of_order, f.corrupted), (1, 1, 1, 1));
        // A message of the wrong length is corrupted too.
        let mut g = ledger("stream");
        let mut long = msg(&g, Dir::Forward, 0);
        long.push(0);
        assert_eq!(g.receive(Dir::Forward, &long, 1), Verdict::Corrupted(0));
        // An intact message of a later index is ahead of its turn.
        assert_eq!(g.receive(Dir::Forward, &msg(&g, Dir::Forward, 3), 2), Verdict::Ahead(3));
    }

    #[test]
    fn failed_sends_are_skipped_by_the_receiver() {
        let mut f = ledger("stream");
        f.send_done(Dir::Forward, 0, false);
        assert_eq!(f.receive(Dir::Forward, &msg(&f, Dir::Forward, 1), 1), Verdict::Good(1));
        assert_eq!(f.send_errors, 1);
    }

    #[test]
    fn pingpong_counts_round_trips_and_halves_them() {
        let mut f = ledger("pingpong");
        f.send_ns.insert(0, 1000);
        assert_eq!(f.receive(Dir::Forward, &msg(&f, Dir::Forward, 0), 1500), Verdict::Good(0));
        assert_eq!(f.delivered, 0);
        assert_eq!(f.receive(Dir::Reply, &msg(&f, Dir::Reply, 0), 2000), Verdict::Good(0));
        assert_eq!((f.delivered, f.bytes, f.latencies.clone()), (1, 32, vec![500]));
        // A request's pattern is not a reply's.
        assert_eq!(f.receive(Dir::Reply, &msg(&f, Dir::Forward, 1), 2100), Verdict::Corrupted(1));
    }

    #[test]
    fn tags_round_trip() {
        assert_eq!(decode_send_tag(send_tag(300, 7, 123_456)), (300, 7, 123_456));
        assert_eq!(decode_recv_tag(recv_tag(3, 31)), Some((3, 31)));
        assert_eq!(decode_recv_tag(send_tag(1, 2, 3)), None);
    }
}
