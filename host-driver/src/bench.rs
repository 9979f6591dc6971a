//! Measuring loops over an open port: ping-pong latency and streaming
//! bandwidth, each checking the content (and, for streams, the order) of
//! every message it receives. The `pingpong` and `stream` binaries are thin
//! shells around these; tests and `cargo xtask bench` call them directly.
//!
//! The loops block in `Port::wait`, so they need a backend that can wait
//! (live, qemu, or a test double whose `idle_wait` returns true); on the
//! sim they fail with `WouldBlock` (the sim has its own `HostApp`s).
//!
//! Contents: `pattern` with a stream id naming the kind of message and its
//! sender (`stream_id`), message index = position in the run (warm-up
//! included), so a message from the wrong sender, of the wrong kind or out
//! of order is caught, and every byte is checked (`Check::Full`).
//!
//! Start-up: the side that sends first (ping, stream sender) retries its
//! first message while the peer's port is not open yet (`TargetPortClosed`,
//! or `TimedOut`/`Dropped` then Resume), pausing 1 ms between tries, until
//! `timeout` has passed since the start. After the first delivery any
//! failed send is an error. `timeout` otherwise bounds each wait for an
//! event (no progress for that long is an error), not the whole run.

use std::fmt;
use std::time::Duration;

use nic_abi::{class_max_len, size_class_for, MAX_SIZE_CLASS, PAGE_SIZE};
use serde::Serialize;

use crate::cluster::ClusterDir;
use crate::live::{AttachOptions, IdlePolicy, LiveBackend};
use crate::{
    pattern, DmaBuf, DriverError, Event, Nic, NicBackend, Port, PortOptions, Priority, SendStatus,
};

/// Kinds of message, the top bits of a stream id.
pub const KIND_PING: u32 = 1;
pub const KIND_PONG: u32 = 2;
pub const KIND_STREAM: u32 = 3;

/// Most pages one port may register (`nic_abi::map::PAGE_TABLE_ENTRIES`);
/// the loops size their buffer pools to fit.
const PAGE_BUDGET: u64 = nic_abi::map::PAGE_TABLE_ENTRIES as u64;

/// The pattern stream of messages of `kind` sent by (node, port).
pub const fn stream_id(kind: u32, node: u16, port: u8) -> u32 {
    (kind << 28) | ((node as u32) << 8) | port as u32
}

/// How much of each received message is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// Every byte (and the sender writes every byte of every message).
    Full,
    /// The first 8 bytes: message index and stream (order and sender).
    Index,
}

impl std::str::FromStr for Check {
    type Err = String;
    fn from_str(s: &str) -> Result<Check, String> {
        match s {
            "full" => Ok(Check::Full),
            "index" => Ok(Check::Index),
            _ => Err(format!("unknown check `{s}` (full or index)")),
        }
    }
}

/// Why a measurement stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchError {
    /// The configuration cannot run (named).
    Config(String),
    /// A driver call failed.
    Driver(DriverError),
    /// No event for `timeout` while waiting for `what`.
    Timeout { what: String, timeout: Duration },
    /// The peer's port did not open within `timeout`.
    PeerNotUp { node: u16, port: u8, timeout: Duration, last: SendStatus },
    /// A send completed with a failure status.
    SendFailed { msg: u64, status: SendStatus },
    /// The NIC refused a descriptor.
    Refused { cause: crate::ErrorCause, tag: u64 },
    /// A message from another sender, priority or size class than expected.
    WrongMessage { msg: u64, what: String },
    /// A message of the wrong length.
    Length { msg: u64, expected: u32, found: u32 },
    /// Message `found` arrived where `expected` was due.
    OutOfOrder { expected: u64, found: u64 },
    /// Byte `offset` of message `msg` differs from the pattern.
    Content { msg: u64, offset: usize, expected: u8, found: u8 },
    /// An event that has no place here (e.g. a message where none was due).
    Unexpected(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Config(s) => write!(f, "bad configuration: {s}"),
            BenchError::Driver(e) => write!(f, "driver: {e}"),
            BenchError::Timeout { what, timeout } => {
                write!(f, "timed out after {timeout:?} without an event, waiting for {what}")
            }
            BenchError::PeerNotUp { node, port, timeout, last } => write!(
                f,
                "peer node {node} port {port} did not come up within {timeout:?} (last send status {last:?})"
            ),
            BenchError::SendFailed { msg, status } => {
                write!(f, "send of message {msg} completed with status {status:?}")
            }
            BenchError::Refused { cause, tag } => {
                write!(f, "the NIC refused a descriptor (tag {tag:#x}): {cause:?}")
            }
            BenchError::WrongMessage { msg, what } => {
                write!(f, "message {msg}: {what}")
            }
            BenchError::Length { msg, expected, found } => {
                write!(f, "message {msg}: length {found}, expected {expected}")
            }
            BenchError::OutOfOrder { expected, found } => {
                write!(f, "out of order: message {found} arrived where {expected} was due")
            }
            BenchError::Content { msg, offset, expected, found } => write!(
                f,
                "content error in message {msg} at byte {offset}: {found:#04x}, expected {expected:#04x}"
            ),
            BenchError::Unexpected(s) => write!(f, "unexpected event: {s}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<DriverError> for BenchError {
    fn from(e: DriverError) -> BenchError {
        BenchError::Driver(e)
    }
}

/// Latency statistics in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub min_ns: u64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

impl LatencySummary {
    /// Summary of `samples` (sorted in place); None if empty. The median
    /// is the upper middle sample, p99 the smallest sample with at least
    /// 99% of samples at or below it.
    pub fn from_samples(samples: &mut [u64]) -> Option<LatencySummary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let p99 = (n * 99).div_ceil(100).max(1) - 1;
        let sum: u128 = samples.iter().map(|&s| s as u128).sum();
        Some(LatencySummary {
            samples: n as u64,
            min_ns: samples[0],
            median_ns: samples[n / 2],
            p99_ns: samples[p99],
            max_ns: samples[n - 1],
            mean_ns: (sum / n as u128) as u64,
        })
    }
}

/// Which end of a ping-pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PingRole {
    /// Sends a request, waits for the reply, measures.
    Ping,
    /// Answers each request.
    Pong,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingPongConfig {
    pub role: PingRole,
    pub peer_node: u16,
    pub peer_port: u8,
    /// Bytes per message (both directions), at least 1.
    pub size: u32,
    /// Round trips measured.
    pub count: u64,
    /// Round trips before measuring (content-checked too).
    pub warmup: u64,
    pub priority: Priority,
    /// Longest wait for an event (and for the peer to come up).
    pub timeout: Duration,
    pub check: Check,
}

impl PingPongConfig {
    pub fn new(role: PingRole, peer_node: u16, peer_port: u8, size: u32, count: u64) -> Self {
        PingPongConfig {
            role,
            peer_node,
            peer_port,
            size,
            count,
            warmup: 10,
            priority: Priority::Low,
            timeout: Duration::from_secs(30),
            check: Check::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingPongReport {
    pub role: PingRole,
    pub node: u16,
    pub port: u8,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    pub warmup: u64,
    /// One-way latency (half the round trip), measured at the ping only.
    pub one_way: Option<LatencySummary>,
    /// Backend ns from the first measured send (ping) or first request
    /// (pong) to the end.
    pub elapsed_ns: u64,
    /// Times the first message was sent again because the peer was not up.
    pub startup_retries: u64,
}

/// Which end of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamRole {
    Send,
    Recv,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamConfig {
    pub role: StreamRole,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    /// Sender: most sends outstanding (also bounded by the port's send
    /// tokens and its registrable memory).
    pub window: u32,
    /// Receiver: receive buffers kept posted (also bounded by receive
    /// tokens and registrable memory).
    pub recv_buffers: u32,
    pub priority: Priority,
    pub timeout: Duration,
    pub check: Check,
}

impl StreamConfig {
    pub fn new(role: StreamRole, peer_node: u16, peer_port: u8, size: u32, count: u64) -> Self {
        StreamConfig {
            role,
            peer_node,
            peer_port,
            size,
            count,
            window: 8,
            recv_buffers: 16,
            priority: Priority::Low,
            timeout: Duration::from_secs(30),
            check: Check::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    pub role: StreamRole,
    pub node: u16,
    pub port: u8,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    /// Sends outstanding (sender) or buffers posted (receiver) actually used.
    pub depth: u32,
    /// Bytes the rate counts: sender, every message from its first send
    /// to its last completion; receiver, every message after the first,
    /// from the first arrival to the last.
    pub bytes: u64,
    pub elapsed_ns: u64,
    /// 10^6 bytes per second; None when nothing was timed.
    pub mb_per_s: Option<f64>,
    pub msgs_per_s: Option<f64>,
    pub startup_retries: u64,
}

/// Attach to (node, port) of a running cluster (name or path), open its
/// NIC (waiting up to `timeout` while the firmware boots) and the port:
/// what the `pingpong` and `stream` binaries do first. The error says
/// which step failed, with the cluster's path.
pub fn open_live_port(
    cluster: &str,
    node: u32,
    port: u8,
    timeout: Duration,
    idle: IdlePolicy,
) -> Result<(Nic<LiveBackend>, Port<LiveBackend>), String> {
    let dir = ClusterDir::open(cluster).map_err(|e| format!("cluster `{cluster}`: {e}"))?;
    let where_ = format!("node {node} port {port} of cluster {}", dir.path().display());
    let opts = AttachOptions { idle, ..AttachOptions::default() };
    let be = LiveBackend::attach_with(&dir, node, port, &opts)
        .map_err(|e| format!("cannot attach to {where_}: {e}"))?;
    let nic = Nic::open_timeout(be, timeout).map_err(|e| {
        format!("cannot open the NIC of node {node} ({}): {e}", dir.path().display())
    })?;
    let p = nic
        .open_port(port, PortOptions::default())
        .map_err(|e| format!("cannot open {where_}: {e}"))?;
    Ok((nic, p))
}

fn rate(units: u64, ns: u64) -> Option<f64> {
    (ns > 0 && units > 0).then(|| units as f64 * 1e9 / ns as f64)
}

// ---------------------------------------------------------------------
// Shared machinery: buffer pools, waiting, checking.
// ---------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    Filled(u64),
    InFlight(u64),
}

/// A received message.
struct Rx {
    idx: usize,
    node: u16,
    port: u8,
    priority: Priority,
    size_class: u8,
    len: u32,
    buffer: u64,
    /// Backend time the event was taken.
    t: u64,
}

enum Got {
    Rx(Rx),
    Sent { msg: u64, status: SendStatus },
}

struct Run<'a, B: NicBackend> {
    port: &'a mut Port<B>,
    timeout: Duration,
    priority: Priority,
    peer: (u16, u8),
    size: u32,
    class: u8,
    check: Check,
    out_stream: u32,
    in_stream: u32,
    send: Vec<DmaBuf>,
    slots: Vec<Slot>,
    recv: Vec<DmaBuf>,
    /// Receive buffers provided so far, and how many messages will come.
    posted: u64,
    expect: u64,
    scratch: Scratch,
}

/// The program's own copy of a message, page-aligned like the DMA
/// buffers it is copied to and from: a copy whose destination sits a few
/// bytes past its source modulo 4 KiB runs several times slower (4K
/// aliasing; `MappedFile` then falls back to a word loop), and a heap
/// `Vec` lands at such an offset more often than not.
struct Scratch {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Scratch {
    const ALIGN: usize = 4096;

    fn new(len: usize) -> Scratch {
        let buf = vec![0u8; len + Scratch::ALIGN - 1];
        let start = buf.as_ptr().align_offset(Scratch::ALIGN).min(Scratch::ALIGN - 1);
        Scratch { buf, start, len }
    }
}

impl std::ops::Deref for Scratch {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

impl<'a, B: NicBackend> Run<'a, B> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        port: &'a mut Port<B>,
        timeout: Duration,
        priority: Priority,
        peer: (u16, u8),
        size: u32,
        check: Check,
        out_stream: u32,
        in_stream: u32,
    ) -> Self {
        Run {
            port,
            timeout,
            priority,
            peer,
            size,
            class: size_class_for(size as u64),
            check,
            out_stream,
            in_stream,
            send: Vec::new(),
            slots: Vec::new(),
            recv: Vec::new(),
            posted: 0,
            expect: 0,
            scratch: Scratch::new(size as usize),
        }
    }

    fn alloc_send(&mut self, n: u32) -> Result<(), BenchError> {
        for _ in 0..n {
            let b = self.port.alloc(self.size as u64)?;
            self.send.push(b);
            self.slots.push(Slot::Free);
        }
        Ok(())
    }

    /// Allocate `n` receive buffers (of the class's full size) and post as
    /// many as `expect` messages need.
    fn alloc_recv(&mut self, n: u32, expect: u64) -> Result<(), BenchError> {
        self.expect = expect;
        for _ in 0..n {
            let b = self.port.alloc(class_max_len(self.class))?;
            self.recv.push(b);
        }
        for i in 0..self.recv.len() {
            self.repost(i)?;
        }
        Ok(())
    }

    /// Provide receive buffer `i` again if more messages will come than
    /// buffers are posted.
    fn repost(&mut self, i: usize) -> Result<(), BenchError> {
        if self.posted < self.expect {
            let b = self.recv[i];
            self.port.provide_receive_buffer(&b, self.class, self.priority, i as u64)?;
            self.posted += 1;
        }
        Ok(())
    }

    fn now(&self) -> u64 {
        self.port.backend().now_ns()
    }

    /// Wait a little (backend time), e.g. before sending again to a peer
    /// that is not up.
    fn pause(&self, d: Duration) -> Result<(), BenchError> {
        let be = self.port.backend();
        let start = be.now_ns();
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        while be.now_ns().saturating_sub(start) < ns {
            if !be.idle_wait() {
                return Err(BenchError::Driver(DriverError::WouldBlock));
            }
        }
        Ok(())
    }

    /// Wait for the next event that matters: a received message or a send
    /// completion (its slot is freed here).
    fn pump(&mut self, what: &dyn Fn() -> String) -> Result<Got, BenchError> {
        loop {
            let ev = match self.port.wait(self.timeout) {
                Ok(e) => e,
                Err(DriverError::Timeout) => {
                    return Err(BenchError::Timeout { what: what(), timeout: self.timeout })
                }
                Err(e) => return Err(e.into()),
            };
            let t = self.now();
            match ev {
                Event::Received { node, port, priority, len, buffer, tag, size_class, .. } => {
                    let idx = tag as usize;
                    if idx >= self.recv.len() {
                        return Err(BenchError::Unexpected(format!(
                            "a receive event with tag {tag}, not one of our buffers"
                        )));
                    }
                    return Ok(Got::Rx(Rx {
                        idx,
                        node,
                        port,
                        priority,
                        size_class,
                        len,
                        buffer,
                        t,
                    }));
                }
                Event::Sent { tag, status, .. } => {
                    let slot = (tag >> 32) as usize;
                    let msg = match self.slots.get(slot) {
                        Some(Slot::InFlight(m)) if (*m as u32) == tag as u32 => *m,
                        _ => {
                            return Err(BenchError::Unexpected(format!(
                                "a send completion with tag {tag:#x} that names no send in flight"
                            )))
                        }
                    };
                    self.slots[slot] = Slot::Free;
                    return Ok(Got::Sent { msg, status });
                }
                Event::Error { cause, tag, .. } => return Err(BenchError::Refused { cause, tag }),
                Event::PortOpened { .. } | Event::Alarm { .. } => continue,
                other => return Err(BenchError::Unexpected(format!("{other:?}"))),
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s, Slot::InFlight(_))).count()
    }

    fn fill(&mut self, slot: usize, msg: u64) -> Result<(), BenchError> {
        let n = match self.check {
            Check::Full => {
                pattern::fill(&mut self.scratch, self.out_stream, msg as u32);
                self.scratch.len()
            }
            Check::Index => {
                pattern::fill_header(&mut self.scratch, self.out_stream, msg as u32);
                self.scratch.len().min(8)
            }
        };
        let b = self.send[slot];
        self.port.write(&b, 0, &self.scratch[..n])?;
        self.slots[slot] = Slot::Filled(msg);
        Ok(())
    }

    /// Fill a free slot with `msg` ahead of time, if one is free and no
    /// slot holds it already.
    fn prefill(&mut self, msg: u64) -> Result<(), BenchError> {
        if self.slots.contains(&Slot::Filled(msg)) {
            return Ok(());
        }
        if let Some(s) = self.slots.iter().position(|s| *s == Slot::Free) {
            self.fill(s, msg)?;
        }
        Ok(())
    }

    /// A slot holding `msg`, filling one (and waiting for a completion if
    /// every slot is in flight). A message arriving meanwhile is an error
    /// (none can be due: the peer waits for us).
    fn ready_slot(&mut self, msg: u64) -> Result<usize, BenchError> {
        loop {
            if let Some(s) = self.slots.iter().position(|s| *s == Slot::Filled(msg)) {
                return Ok(s);
            }
            if let Some(s) = self.slots.iter().position(|s| !matches!(s, Slot::InFlight(_))) {
                self.fill(s, msg)?;
                return Ok(s);
            }
            match self.pump(&|| format!("a send buffer for message {msg} (a send completion)"))? {
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
                Got::Rx(rx) => {
                    return Err(BenchError::Unexpected(format!(
                        "a message in receive buffer {} while none was due",
                        rx.idx
                    )))
                }
            }
        }
    }

    /// Send the message in `slot`. Err(None): no token or ring room now.
    fn post(&mut self, slot: usize) -> Result<(), Option<BenchError>> {
        let Slot::Filled(msg) = self.slots[slot] else {
            return Err(Some(BenchError::Config("internal: posting an empty slot".into())));
        };
        let b = self.send[slot];
        let tag = (slot as u64) << 32 | (msg & 0xFFFF_FFFF);
        let (node, port) = self.peer;
        match self.port.send(&b, 0, self.size, self.class, self.priority, node, port, tag) {
            Ok(()) => {
                self.slots[slot] = Slot::InFlight(msg);
                Ok(())
            }
            Err(DriverError::NoSendToken | DriverError::RingFull) => Err(None),
            Err(e) => Err(Some(e.into())),
        }
    }

    /// Post, waiting for completions while the port has no token or room.
    fn post_waiting(&mut self, slot: usize) -> Result<(), BenchError> {
        loop {
            match self.post(slot) {
                Ok(()) => return Ok(()),
                Err(Some(e)) => return Err(e),
                Err(None) => {
                    match self.pump(&|| "a send token (a send completion)".to_string())? {
                        Got::Sent { status: SendStatus::Ok, .. } => {}
                        Got::Sent { msg, status } => {
                            return Err(BenchError::SendFailed { msg, status })
                        }
                        Got::Rx(rx) => {
                            return Err(BenchError::Unexpected(format!(
                                "a message in receive buffer {} while none was due",
                                rx.idx
                            )))
                        }
                    }
                }
            }
        }
    }

    /// The cheap checks of a received message (no memory read).
    fn check_header(&self, rx: &Rx, msg: u64) -> Result<(), BenchError> {
        let (node, port) = self.peer;
        if (rx.node, rx.port) != (node, port) {
            return Err(BenchError::WrongMessage {
                msg,
                what: format!(
                    "from node {} port {}, expected node {node} port {port}",
                    rx.node, rx.port
                ),
            });
        }
        if rx.priority != self.priority || rx.size_class != self.class {
            return Err(BenchError::WrongMessage {
                msg,
                what: format!(
                    "priority {:?} class {}, expected {:?} class {}",
                    rx.priority, rx.size_class, self.priority, self.class
                ),
            });
        }
        if rx.buffer != self.recv[rx.idx].vaddr {
            return Err(BenchError::WrongMessage {
                msg,
                what: format!("event names buffer {:#x}, not the one its tag posted", rx.buffer),
            });
        }
        if rx.len != self.size {
            return Err(BenchError::Length { msg, expected: self.size, found: rx.len });
        }
        Ok(())
    }

    /// Read the message and check it is `msg` of the peer's stream.
    fn check_content(&mut self, rx: &Rx, msg: u64) -> Result<(), BenchError> {
        let n = match self.check {
            Check::Full => rx.len as usize,
            Check::Index => (rx.len as usize).min(8),
        };
        let b = self.recv[rx.idx];
        self.port.read(&b, 0, &mut self.scratch[..n])?;
        let data = &self.scratch[..n];
        let Some((offset, expected, found)) =
            pattern::first_mismatch(data, self.in_stream, msg as u32)
        else {
            return Ok(());
        };
        // Another message of the same stream, intact: out of order.
        if let Some(c) = pattern::claimed_index(data) {
            if c != msg as u32 && pattern::matches(data, self.in_stream, c) {
                return Err(BenchError::OutOfOrder { expected: msg, found: c as u64 });
            }
        }
        Err(BenchError::Content { msg, offset, expected, found })
    }

    /// Wait for every send in flight to complete Ok.
    fn drain(&mut self) -> Result<(), BenchError> {
        while self.in_flight() > 0 {
            match self.pump(&|| "the last send completions".to_string())? {
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
                Got::Rx(rx) => {
                    return Err(BenchError::Unexpected(format!(
                        "a message in receive buffer {} after the last one",
                        rx.idx
                    )))
                }
            }
        }
        Ok(())
    }

    /// Give the buffers back (the port keeps the rest until it closes).
    fn free_all(&mut self) {
        for b in self.send.drain(..).chain(self.recv.drain(..)) {
            let _ = self.port.free(b);
        }
        self.slots.clear();
    }
}

fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE).max(1)
}

fn check_common<B: NicBackend>(
    nic: &Nic<B>,
    port: &Port<B>,
    peer: (u16, u8),
    size: u32,
    count: u64,
) -> Result<(), BenchError> {
    if size == 0 || size as u64 > class_max_len(MAX_SIZE_CLASS) {
        return Err(BenchError::Config(format!(
            "size {size}: 1..={} bytes",
            class_max_len(MAX_SIZE_CLASS)
        )));
    }
    if count == 0 {
        return Err(BenchError::Config("count must be at least 1".into()));
    }
    if peer.0 as u32 >= nic.num_nodes() {
        return Err(BenchError::Config(format!(
            "peer node {} does not exist (the cluster has nodes 0..{})",
            peer.0,
            nic.num_nodes()
        )));
    }
    if peer.1 as usize >= nic_abi::NUM_PORTS {
        return Err(BenchError::Config(format!("peer port {} out of range", peer.1)));
    }
    if peer == (nic.node_id(), port.number()) {
        return Err(BenchError::Config("the peer is this very port".into()));
    }
    Ok(())
}

// ---------------------------------------------------------------------
// Ping-pong
// ---------------------------------------------------------------------

/// Run one end of a ping-pong on `port` (opened on `nic`). The ping sends
/// request i, waits for reply i, and records half the round trip; the pong
/// answers each request. Both check every message (sender, class,
/// priority, length, content, index) and wait for their last sends to
/// complete before returning.
pub fn pingpong<B: NicBackend>(
    nic: &Nic<B>,
    port: &mut Port<B>,
    cfg: &PingPongConfig,
) -> Result<PingPongReport, BenchError> {
    let peer = (cfg.peer_node, cfg.peer_port);
    check_common(nic, port, peer, cfg.size, cfg.count)?;
    let total = cfg
        .count
        .checked_add(cfg.warmup)
        .filter(|&t| t <= u32::MAX as u64)
        .ok_or_else(|| BenchError::Config("count + warmup must fit in 32 bits".into()))?;
    let me = (nic.node_id(), port.number());
    let (out_kind, in_kind) = match cfg.role {
        PingRole::Ping => (KIND_PING, KIND_PONG),
        PingRole::Pong => (KIND_PONG, KIND_PING),
    };
    let class = size_class_for(cfg.size as u64);
    // Two send slots (prefill the next message while one is in flight)
    // and two receive buffers, fewer if tokens or the page table say so.
    let mut nsend = port.send_tokens_free().clamp(1, 2);
    let mut nrecv = port.recv_tokens_free().clamp(1, 2);
    while nsend as u64 * pages(cfg.size as u64) + nrecv as u64 * pages(class_max_len(class))
        > PAGE_BUDGET
    {
        if nsend > 1 {
            nsend -= 1;
        } else if nrecv > 1 {
            nrecv -= 1;
        } else {
            return Err(BenchError::Config(format!(
                "size {}: a send and a receive buffer do not fit in one port's {} registrable pages",
                cfg.size, PAGE_BUDGET
            )));
        }
    }
    let mut run = Run::new(
        port,
        cfg.timeout,
        cfg.priority,
        peer,
        cfg.size,
        cfg.check,
        stream_id(out_kind, me.0, me.1),
        stream_id(in_kind, peer.0, peer.1),
    );
    run.alloc_send(nsend)?;
    run.alloc_recv(nrecv, total)?;
    let result = match cfg.role {
        PingRole::Ping => ping(&mut run, cfg, total),
        PingRole::Pong => pong(&mut run, total),
    };
    run.free_all();
    let (one_way, elapsed_ns, startup_retries) = result?;
    Ok(PingPongReport {
        role: cfg.role,
        node: me.0,
        port: me.1,
        peer_node: peer.0,
        peer_port: peer.1,
        size: cfg.size,
        count: cfg.count,
        warmup: cfg.warmup,
        one_way,
        elapsed_ns,
        startup_retries,
    })
}

type PingResult = (Option<LatencySummary>, u64, u64);

fn retryable(status: SendStatus) -> bool {
    matches!(status, SendStatus::TargetPortClosed | SendStatus::TimedOut | SendStatus::Dropped)
}

fn ping<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &PingPongConfig,
    total: u64,
) -> Result<PingResult, BenchError> {
    let mut samples = Vec::with_capacity(cfg.count as usize);
    let mut retries = 0u64;
    let start = run.now();
    let limit = u64::try_from(cfg.timeout.as_nanos()).unwrap_or(u64::MAX);
    let mut first_measured = None;
    let mut started = false;
    let mut i = 0u64;
    run.prefill(0)?;
    while i < total {
        let slot = run.ready_slot(i)?;
        let t0 = run.now();
        run.post_waiting(slot)?;
        if i >= cfg.warmup && first_measured.is_none() {
            first_measured = Some(t0);
        }
        if i + 1 < total {
            run.prefill(i + 1)?;
        }
        // Wait for reply i; a failed first send means the peer is not up.
        let reply = loop {
            let what = || format!("the reply to request {i}");
            match run.pump(&what)? {
                Got::Rx(rx) => break Some(rx),
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } if !started && msg == i && retryable(status) => {
                    if run.now().saturating_sub(start) >= limit {
                        return Err(BenchError::PeerNotUp {
                            node: cfg.peer_node,
                            port: cfg.peer_port,
                            timeout: cfg.timeout,
                            last: status,
                        });
                    }
                    break None;
                }
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            }
        };
        let Some(rx) = reply else {
            retries += 1;
            run.pause(Duration::from_millis(1))?;
            let (node, port) = run.peer;
            run.port.resume(node, port, run.priority)?;
            continue;
        };
        let t1 = rx.t;
        run.check_header(&rx, i)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
        started = true;
        if i >= cfg.warmup {
            samples.push(t1.saturating_sub(t0) / 2);
        }
        i += 1;
    }
    run.drain()?;
    let elapsed = run.now().saturating_sub(first_measured.unwrap_or(start));
    Ok((LatencySummary::from_samples(&mut samples), elapsed, retries))
}

fn pong<B: NicBackend>(run: &mut Run<'_, B>, total: u64) -> Result<PingResult, BenchError> {
    let mut first = None;
    run.prefill(0)?;
    for i in 0..total {
        let rx = loop {
            match run.pump(&|| format!("request {i}"))? {
                Got::Rx(rx) => break rx,
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            }
        };
        first.get_or_insert(rx.t);
        // Answer at once; check the content while the reply travels.
        run.check_header(&rx, i)?;
        let slot = run.ready_slot(i)?;
        run.post_waiting(slot)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
        if i + 1 < total {
            run.prefill(i + 1)?;
        }
    }
    run.drain()?;
    let elapsed = run.now().saturating_sub(first.unwrap_or(0));
    Ok((None, elapsed, 0))
}

// ---------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------

/// Run one end of a stream on `port`. The sender keeps up to `window`
/// sends outstanding; the receiver keeps `recv_buffers` posted and checks
/// every message's sender, length, content and order.
pub fn stream<B: NicBackend>(
    nic: &Nic<B>,
    port: &mut Port<B>,
    cfg: &StreamConfig,
) -> Result<StreamReport, BenchError> {
    let peer = (cfg.peer_node, cfg.peer_port);
    check_common(nic, port, peer, cfg.size, cfg.count)?;
    if cfg.count > u32::MAX as u64 {
        return Err(BenchError::Config("count must fit in 32 bits".into()));
    }
    let me = (nic.node_id(), port.number());
    let (out_stream, in_stream) = match cfg.role {
        StreamRole::Send => (stream_id(KIND_STREAM, me.0, me.1), 0),
        StreamRole::Recv => (0, stream_id(KIND_STREAM, peer.0, peer.1)),
    };
    let mut run =
        Run::new(port, cfg.timeout, cfg.priority, peer, cfg.size, cfg.check, out_stream, in_stream);
    let class = run.class;
    let result = match cfg.role {
        StreamRole::Send => {
            let fit = (PAGE_BUDGET / pages(cfg.size as u64)) as u32;
            let depth = cfg.window.min(run.port.send_tokens_free()).min(fit);
            if depth == 0 {
                return Err(BenchError::Config(format!(
                    "window {}: no send buffer fits (tokens {}, registrable pages {PAGE_BUDGET})",
                    cfg.window,
                    run.port.send_tokens_free()
                )));
            }
            run.alloc_send(depth)?;
            stream_send(&mut run, cfg).map(|r| (depth, r))
        }
        StreamRole::Recv => {
            let fit = (PAGE_BUDGET / pages(class_max_len(class))) as u32;
            let depth = cfg.recv_buffers.min(run.port.recv_tokens_free()).min(fit);
            if depth == 0 {
                return Err(BenchError::Config(format!(
                    "recv_buffers {}: no receive buffer fits (tokens {}, registrable pages {PAGE_BUDGET})",
                    cfg.recv_buffers,
                    run.port.recv_tokens_free()
                )));
            }
            run.alloc_recv(depth, cfg.count)?;
            stream_recv(&mut run, cfg).map(|r| (depth, r))
        }
    };
    run.free_all();
    let (depth, (bytes, elapsed_ns, msgs, startup_retries)) = result?;
    Ok(StreamReport {
        role: cfg.role,
        node: me.0,
        port: me.1,
        peer_node: peer.0,
        peer_port: peer.1,
        size: cfg.size,
        count: cfg.count,
        depth,
        bytes,
        elapsed_ns,
        mb_per_s: rate(bytes, elapsed_ns).map(|r| r / 1e6),
        msgs_per_s: rate(msgs, elapsed_ns),
        startup_retries,
    })
}

/// (bytes timed, ns, messages timed, start-up retries)
type StreamResult = (u64, u64, u64, u64);

fn stream_send<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &StreamConfig,
) -> Result<StreamResult, BenchError> {
    let start = run.now();
    let limit = u64::try_from(cfg.timeout.as_nanos()).unwrap_or(u64::MAX);
    let mut retries = 0u64;
    // Message 0 alone until the receiver is there.
    let t_start = loop {
        let slot = run.ready_slot(0)?;
        let t = run.now();
        run.post_waiting(slot)?;
        match run.pump(&|| "the first send's completion".to_string())? {
            Got::Sent { status: SendStatus::Ok, .. } => break t,
            Got::Sent { status, .. } if retryable(status) => {
                if run.now().saturating_sub(start) >= limit {
                    return Err(BenchError::PeerNotUp {
                        node: cfg.peer_node,
                        port: cfg.peer_port,
                        timeout: cfg.timeout,
                        last: status,
                    });
                }
                retries += 1;
                run.pause(Duration::from_millis(1))?;
                let (node, port) = run.peer;
                run.port.resume(node, port, run.priority)?;
            }
            Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            Got::Rx(rx) => {
                return Err(BenchError::Unexpected(format!(
                    "a message in receive buffer {} at a sender",
                    rx.idx
                )))
            }
        }
    };
    let mut t_end = run.now();
    let mut next = 1u64;
    loop {
        // Fill every free slot with the next message and send it.
        while next < cfg.count {
            let Some(s) = run.slots.iter().position(|s| !matches!(s, Slot::InFlight(_))) else {
                break;
            };
            if run.slots[s] != Slot::Filled(next) {
                run.fill(s, next)?;
            }
            match run.post(s) {
                Ok(()) => next += 1,
                Err(None) => break,
                Err(Some(e)) => return Err(e),
            }
        }
        if run.in_flight() == 0 {
            break;
        }
        match run.pump(&|| format!("send completions ({next} of {} posted)", cfg.count))? {
            Got::Sent { status: SendStatus::Ok, .. } => t_end = run.now(),
            Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            Got::Rx(rx) => {
                return Err(BenchError::Unexpected(format!(
                    "a message in receive buffer {} at a sender",
                    rx.idx
                )))
            }
        }
    }
    let ns = t_end.saturating_sub(t_start);
    Ok((cfg.count * cfg.size as u64, ns, cfg.count, retries))
}

fn stream_recv<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &StreamConfig,
) -> Result<StreamResult, BenchError> {
    let mut t_first = 0;
    let mut t_last = 0;
    for i in 0..cfg.count {
        let rx = match run.pump(&|| format!("message {i} of {}", cfg.count))? {
            Got::Rx(rx) => rx,
            Got::Sent { msg, .. } => {
                return Err(BenchError::Unexpected(format!(
                    "a send completion (message {msg}) at a receiver"
                )))
            }
        };
        if i == 0 {
            t_first = rx.t;
        }
        t_last = rx.t;
        run.check_header(&rx, i)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
    }
    let timed = cfg.count - 1;
    Ok((timed * cfg.size as u64, t_last.saturating_sub(t_first), timed, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_page_aligned_and_exactly_its_length() {
        for len in [0usize, 1, 8, 4095, 4096, 65536] {
            let mut s = Scratch::new(len);
            assert_eq!(s.len(), len);
            assert!(s.as_ptr().addr().is_multiple_of(Scratch::ALIGN));
            s.fill(0xA5);
            assert!(s.iter().all(|&b| b == 0xA5));
        }
    }

    #[test]
    fn latency_summary_picks_min_median_p99_max() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        let l = LatencySummary::from_samples(&mut s).unwrap();
        assert_eq!(
            (l.samples, l.min_ns, l.median_ns, l.p99_ns, l.max_ns, l.mean_ns),
            (100, 1, 51, 99, 100, 50)
        );
        let l = LatencySummary::from_samples(&mut [7]).unwrap();
        assert_eq!((l.min_ns, l.median_ns, l.p99_ns, l.max_ns), (7, 7, 7, 7));
        assert!(LatencySummary::from_samples(&mut []).is_none());
    }

    #[test]
    fn stream_ids_name_kind_and_sender() {
        assert_ne!(stream_id(KIND_PING, 1, 2), stream_id(KIND_PONG, 1, 2));
        assert_ne!(stream_id(KIND_PING, 1, 2), stream_id(KIND_PING, 2, 1));
        assert_eq!(stream_id(KIND_STREAM, 1023, 7) >> 28, KIND_STREAM);
    }
}
