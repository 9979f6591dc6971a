//! Bandwidth requests: the host side of the bandwidth resource manager
//! (BRM, docs/rate-control.md). The BRM is a logical service, a
//! master plus one agent per node: a program asks the master for
//! bandwidth on a flow (blocking: admitted with an IDT, or refused naming
//! the criterion that failed), the master tells the agents of the source
//! nodes the IDTs to install in their NICs' flow tables.
//!
//! This module is transport-independent: every message is a serde enum
//! carried as postcard bytes ([`encode`], [`decode`]). The sim carries
//! them by direct calls between simulated components (`nic_sim::brm`);
//! live and qemu clusters will carry the same bytes between processes.
//!
//! - [`Request`] / [`Reply`]: a program (through [`BrmClient`]) and the
//!   master.
//! - [`AgentCommand`] / [`AgentReply`]: the master and a node's
//!   [`Agent`], which owns that NIC's flow table.
//!
//! Owns no state of the master; touches a NIC only through [`Agent`].

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use host_driver::FlowKey;
use host_driver::Nic;
use host_driver::NicBackend;
use nic_abi::Priority;

/// A flow across the cluster: (source node, source port, target node,
/// target port, priority).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FlowId {
    pub src_node: u16,
    pub src_port: u8,
    pub dst_node: u16,
    pub dst_port: u8,
    /// 0 low, 1 high.
    pub prio: u8,
}

impl FlowId {
    pub fn new(src_node: u16, src_port: u8, dst_node: u16, dst_port: u8, prio: Priority) -> FlowId {
        FlowId { src_node, src_port, dst_node, dst_port, prio: prio as u8 }
    }

    /// The flow as its source NIC names it.
    pub fn key(&self) -> FlowKey {
        FlowKey {
            src_port: self.src_port,
            node: self.dst_node,
            port: self.dst_port,
            prio: self.prio,
        }
    }
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} -> {}:{} {}",
            self.src_node,
            self.src_port,
            self.dst_node,
            self.dst_port,
            if self.prio == 0 { "low" } else { "high" }
        )
    }
}

/// The admission criteria of the spec, with the resource that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Criterion {
    /// 1: the flows starting or ending at the source node would exceed its
    /// capacity (the node-capacity curve).
    SourceNode { node: u16 },
    /// 2: the flows through this switch output port would exceed the link.
    SwitchPort { switch: u16, port: u8 },
    /// 3: the same as 1 for the destination node.
    DestinationNode { node: u16 },
}

impl Criterion {
    /// 1, 2 or 3, as numbered in the spec.
    pub fn number(&self) -> u8 {
        match self {
            Criterion::SourceNode { .. } => 1,
            Criterion::SwitchPort { .. } => 2,
            Criterion::DestinationNode { .. } => 3,
        }
    }

    /// A short stable name (scenario JSON, reports).
    pub fn name(&self) -> &'static str {
        match self {
            Criterion::SourceNode { .. } => "source-node",
            Criterion::SwitchPort { .. } => "switch-port",
            Criterion::DestinationNode { .. } => "destination-node",
        }
    }
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Criterion::SourceNode { node } => {
                write!(f, "criterion 1 (source node {node} capacity)")
            }
            Criterion::SwitchPort { switch, port } => {
                write!(f, "criterion 2 (switch {switch} output port {port} link capacity)")
            }
            Criterion::DestinationNode { node } => {
                write!(f, "criterion 3 (destination node {node} capacity)")
            }
        }
    }
}

/// A reservation was made: the flow's IDT in RTC ticks (T * Bmax / B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    pub idt: u32,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Refused {
    /// Admitting it would break `criterion`: `available_mb_s` is what that
    /// resource has left for this flow.
    Capacity { criterion: Criterion, requested_mb_s: f64, available_mb_s: f64 },
    /// The request itself is bad (a rate <= 0, a node out of range, ...).
    BadRequest(String),
    /// The BRM could not be reached, or its answer made no sense.
    Unavailable(String),
}

impl Refused {
    /// The criterion that failed, if it was one.
    pub fn criterion(&self) -> Option<Criterion> {
        match self {
            Refused::Capacity { criterion, .. } => Some(*criterion),
            _ => None,
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Capacity { criterion, requested_mb_s, available_mb_s } => write!(
                f,
                "refused by {criterion}: {requested_mb_s:.2} MB/s asked, {available_mb_s:.2} MB/s left"
            ),
            Refused::BadRequest(m) => write!(f, "bad request: {m}"),
            Refused::Unavailable(m) => write!(f, "bandwidth manager unavailable: {m}"),
        }
    }
}

impl std::error::Error for Refused {}

/// A program to the master.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Reserve `mb_s` (10^6 B/s of payload) for `flow`; replaces the flow's
    /// earlier reservation, if any.
    Reserve { flow: FlowId, mb_s: f64 },
    /// Run `flow` as best effort: it gets a share of the surplus.
    BestEffort { flow: FlowId },
    /// Forget `flow` (its reservation or best-effort registration); its
    /// flow-table entry is removed.
    Release { flow: FlowId },
    /// The IDT the master last gave each flow it manages.
    Status,
}

/// The master's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Admitted(Admitted),
    Refused(Refused),
    /// Best effort registered, with the IDT it has now.
    Registered {
        idt: u32,
    },
    /// `had`: the flow was known.
    Released {
        had: bool,
    },
    /// (flow, reserved MB/s or None for best effort, IDT).
    Status(Vec<(FlowId, Option<f64>, u32)>),
}

impl Reply {
    /// The IDT a reservation was admitted at or a best-effort run was
    /// registered with; the refusal, or `Unavailable` for another reply.
    pub fn into_idt(self) -> Result<u32, Refused> {
        match self {
            Reply::Admitted(a) => Ok(a.idt),
            Reply::Registered { idt } => Ok(idt),
            Reply::Refused(r) => Err(r),
            other => Err(Refused::Unavailable(format!("unexpected reply {other:?}"))),
        }
    }
}

/// The master to a node's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentCommand {
    /// Install `idt` for `flow` in the NIC's flow table.
    SetIdt { flow: FlowKey, idt: u32 },
    /// Remove `flow`'s entry.
    Clear { flow: FlowKey },
}

/// A node's agent to the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentReply {
    Done,
    Failed(String),
}

/// A message that would not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable BRM message: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// A message as postcard bytes.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    // Serializing these types into a Vec cannot fail (no maps with
    // non-string keys, no unsized sequences).
    postcard::to_allocvec(m).unwrap_or_default()
}

/// A message from postcard bytes.
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, DecodeError> {
    postcard::from_bytes(b).map_err(|e| DecodeError(e.to_string()))
}

/// What carries a program's requests to the master and brings back the
/// reply (blocking). The sim calls the master directly; live and qemu
/// send the bytes to the BRM process.
///
/// A transport may also send a request and bring its reply later
/// (`send`, `reply`), so that a program with other work (a flow already
/// sending beside the one that asks) goes on with it meanwhile; one that
/// does not (the default) is called, and answers at once.
pub trait BrmTransport {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String>;

    /// Send `request` and return without its reply (`reply` gives it).
    /// Ok(false): this transport only calls; nothing was sent.
    fn send(&mut self, _request: &[u8]) -> Result<bool, String> {
        Ok(false)
    }

    /// The reply to the request `send` sent, once it came (never waits).
    fn reply(&mut self) -> Option<Result<Vec<u8>, String>> {
        None
    }
}

/// A program's handle on the BRM.
pub struct BrmClient<T: BrmTransport> {
    t: T,
    /// A request `begin` sent whose answer has not been taken.
    pending: bool,
}

impl<T: BrmTransport> BrmClient<T> {
    pub fn new(transport: T) -> BrmClient<T> {
        BrmClient { t: transport, pending: false }
    }

    fn call(&mut self, r: &Request) -> Result<Reply, Refused> {
        if self.pending {
            return Err(Refused::Unavailable("a request is still waiting for its answer".into()));
        }
        let bytes = self.t.call(&encode(r)).map_err(Refused::Unavailable)?;
        decode(&bytes).map_err(|e| Refused::Unavailable(e.to_string()))
    }

    /// Start request `r` without waiting for its answer where the
    /// transport can: None then, and [`BrmClient::answer`] gives it once
    /// it came. Some(answer) when it was answered at once (a transport
    /// that only calls, or a request it could not send). One request at
    /// a time: while one waits, another is answered `Unavailable`.
    pub fn begin(&mut self, r: &Request) -> Option<Result<Reply, Refused>> {
        if self.pending {
            return Some(Err(Refused::Unavailable(
                "a request is still waiting for its answer".into(),
            )));
        }
        let bytes = encode(r);
        match self.t.send(&bytes) {
            Ok(true) => {
                self.pending = true;
                None
            }
            Ok(false) => Some(self.call(r)),
            Err(e) => Some(Err(Refused::Unavailable(e))),
        }
    }

    /// The answer to the request [`BrmClient::begin`] left waiting, once
    /// it came (never waits); None while it has not.
    pub fn answer(&mut self) -> Option<Result<Reply, Refused>> {
        if !self.pending {
            return None;
        }
        let got = self.t.reply()?;
        self.pending = false;
        Some(
            got.map_err(Refused::Unavailable)
                .and_then(|bytes| decode(&bytes).map_err(|e| Refused::Unavailable(e.to_string()))),
        )
    }

    /// Is a request [`BrmClient::begin`] sent still waiting for its
    /// answer?
    pub fn waiting(&self) -> bool {
        self.pending
    }

    /// The transport, the client given up.
    pub fn into_transport(self) -> T {
        self.t
    }

    /// Ask for `mb_s` on `flow`. Blocks until the master answers.
    pub fn request_bandwidth(&mut self, flow: FlowId, mb_s: f64) -> Result<Admitted, Refused> {
        match self.call(&Request::Reserve { flow, mb_s })? {
            Reply::Admitted(a) => Ok(a),
            Reply::Refused(r) => Err(r),
            other => Err(Refused::Unavailable(format!("unexpected reply {other:?}"))),
        }
    }

    /// Run `flow` as best effort. Returns its IDT now.
    pub fn best_effort(&mut self, flow: FlowId) -> Result<u32, Refused> {
        match self.call(&Request::BestEffort { flow })? {
            Reply::Registered { idt } => Ok(idt),
            Reply::Refused(r) => Err(r),
            other => Err(Refused::Unavailable(format!("unexpected reply {other:?}"))),
        }
    }

    /// Give `flow`'s bandwidth back (or end its best-effort run). Returns
    /// whether the master knew the flow.
    pub fn release_bandwidth(&mut self, flow: FlowId) -> Result<bool, Refused> {
        match self.call(&Request::Release { flow })? {
            Reply::Released { had } => Ok(had),
            Reply::Refused(r) => Err(r),
            other => Err(Refused::Unavailable(format!("unexpected reply {other:?}"))),
        }
    }

    /// Every managed flow: (flow, reserved MB/s or None, IDT).
    pub fn status(&mut self) -> Result<Vec<(FlowId, Option<f64>, u32)>, Refused> {
        match self.call(&Request::Status)? {
            Reply::Status(v) => Ok(v),
            Reply::Refused(r) => Err(r),
            other => Err(Refused::Unavailable(format!("unexpected reply {other:?}"))),
        }
    }
}

/// A node's BRM agent: applies the master's commands to its NIC's flow
/// table.
pub struct Agent<B: NicBackend> {
    nic: Nic<B>,
}

impl<B: NicBackend> Agent<B> {
    pub fn new(nic: Nic<B>) -> Agent<B> {
        Agent { nic }
    }

    pub fn nic(&self) -> &Nic<B> {
        &self.nic
    }

    /// Carry out one command.
    pub fn apply(&mut self, cmd: AgentCommand) -> AgentReply {
        match cmd {
            AgentCommand::SetIdt { flow, idt } => match self.nic.set_flow_idt(flow, idt) {
                Ok(_) => AgentReply::Done,
                Err(e) => AgentReply::Failed(e.to_string()),
            },
            AgentCommand::Clear { flow } => {
                self.nic.clear_flow(flow);
                AgentReply::Done
            }
        }
    }

    /// Carry out one command given as postcard bytes; the reply as bytes.
    pub fn handle(&mut self, cmd: &[u8]) -> Vec<u8> {
        let reply = match decode::<AgentCommand>(cmd) {
            Ok(c) => self.apply(c),
            Err(e) => AgentReply::Failed(e.to_string()),
        };
        encode(&reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_postcard_bytes() {
        let flow = FlowId::new(0, 2, 5, 3, Priority::High);
        let msgs = [
            Request::Reserve { flow, mb_s: 40.5 },
            Request::BestEffort { flow },
            Request::Release { flow },
            Request::Status,
        ];
        for m in msgs {
            assert_eq!(decode::<Request>(&encode(&m)), Ok(m));
        }
        let r = Reply::Refused(Refused::Capacity {
            criterion: Criterion::SwitchPort { switch: 1, port: 15 },
            requested_mb_s: 50.0,
            available_mb_s: 12.5,
        });
        assert_eq!(decode::<Reply>(&encode(&r)), Ok(r));
        let c = AgentCommand::SetIdt { flow: flow.key(), idt: 205 };
        assert_eq!(decode::<AgentCommand>(&encode(&c)), Ok(c));
        assert!(decode::<Reply>(&[0xFF, 0xFF]).is_err());
    }

    #[test]
    fn refusals_name_their_criterion() {
        let r = Refused::Capacity {
            criterion: Criterion::DestinationNode { node: 3 },
            requested_mb_s: 60.0,
            available_mb_s: 21.8,
        };
        assert_eq!(r.criterion().map(|c| c.number()), Some(3));
        assert!(r.to_string().contains("criterion 3 (destination node 3"), "{r}");
    }

    struct Loop(Box<dyn FnMut(Request) -> Reply>);

    impl BrmTransport for Loop {
        fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
            let r = decode(request).map_err(|e| e.to_string())?;
            Ok(encode(&(self.0)(r)))
        }
    }

    #[test]
    fn the_client_maps_replies_to_results() {
        let mut c = BrmClient::new(Loop(Box::new(|r| match r {
            Request::Reserve { mb_s, .. } if mb_s <= 40.0 => Reply::Admitted(Admitted { idt: 205 }),
            Request::Reserve { .. } => Reply::Refused(Refused::Capacity {
                criterion: Criterion::SourceNode { node: 0 },
                requested_mb_s: 50.0,
                available_mb_s: 40.0,
            }),
            Request::Release { .. } => Reply::Released { had: true },
            _ => Reply::Status(vec![]),
        })));
        let f = FlowId::new(0, 0, 1, 0, Priority::Low);
        assert_eq!(c.request_bandwidth(f, 40.0), Ok(Admitted { idt: 205 }));
        let e = c.request_bandwidth(f, 50.0).unwrap_err();
        assert_eq!(e.criterion(), Some(Criterion::SourceNode { node: 0 }));
        assert_eq!(c.release_bandwidth(f), Ok(true));
        assert!(matches!(c.best_effort(f), Err(Refused::Unavailable(_))));
        // A transport that only calls answers `begin` at once.
        let r = c.begin(&Request::Reserve { flow: f, mb_s: 40.0 });
        assert_eq!(r.map(|r| r.and_then(Reply::into_idt)), Some(Ok(205)));
        assert!(!c.waiting() && c.answer().is_none());
    }

    /// Sends requests into a queue; `answer_next` answers the oldest.
    #[derive(Default)]
    struct Later {
        sent: Vec<Request>,
        replies: std::collections::VecDeque<Vec<u8>>,
    }

    impl Later {
        fn answer_next(&mut self, r: &Reply) {
            self.sent.remove(0);
            self.replies.push_back(encode(r));
        }
    }

    impl BrmTransport for Later {
        fn call(&mut self, _: &[u8]) -> Result<Vec<u8>, String> {
            Err("only sends".into())
        }
        fn send(&mut self, request: &[u8]) -> Result<bool, String> {
            self.sent.push(decode(request).map_err(|e| e.to_string())?);
            Ok(true)
        }
        fn reply(&mut self) -> Option<Result<Vec<u8>, String>> {
            self.replies.pop_front().map(Ok)
        }
    }

    #[test]
    fn a_request_begun_is_answered_later_and_one_waits_at_a_time() {
        let mut c = BrmClient::new(Later::default());
        let f = FlowId::new(0, 1, 2, 1, Priority::Low);
        assert!(c.begin(&Request::Reserve { flow: f, mb_s: 40.0 }).is_none());
        assert!(c.waiting() && c.answer().is_none(), "no answer yet");
        // A second request while the first waits: refused at once, not sent.
        let second = c.begin(&Request::BestEffort { flow: f });
        assert!(matches!(second, Some(Err(Refused::Unavailable(_)))));
        assert!(matches!(c.release_bandwidth(f), Err(Refused::Unavailable(_))));
        assert_eq!(c.t.sent.len(), 1);
        c.t.answer_next(&Reply::Admitted(Admitted { idt: 205 }));
        assert_eq!(c.answer().map(|r| r.and_then(Reply::into_idt)), Some(Ok(205)));
        assert!(!c.waiting() && c.answer().is_none());
        // An undecodable reply is an answer too: Unavailable.
        assert!(c.begin(&Request::Release { flow: f }).is_none());
        c.t.sent.clear();
        c.t.replies.push_back(vec![0xFF, 0xFF]);
        assert!(matches!(c.answer(), Some(Err(Refused::Unavailable(_)))));
        assert!(!c.waiting());
    }
}
