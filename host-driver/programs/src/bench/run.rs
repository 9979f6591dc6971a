//! What the ping-pong and stream loops share: `Run`, one end of a
//! measurement on a port (its send slots and receive buffers, waiting for
//! the next event that matters, filling and posting messages, checking a
//! received one's header and content), the page-aligned `Scratch` copy of
//! a message, and the checks of a configuration. Touches only its port.

use std::time::Duration;

use nic_abi::{class_max_len, size_class_for, MAX_SIZE_CLASS, PAGE_SIZE};

use super::{BenchError, Check};
use crate::pattern;
use host_driver::{DmaBuf, DriverError, Event, Nic, NicBackend, Port, Priority, SendStatus};

/// A send buffer: free, holding a message not yet sent, or in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Free,
    Filled(u64),
    InFlight(u64),
}

/// A received message.
pub(super) struct Rx {
    /// Which of the run's receive buffers (its tag).
    pub(super) idx: usize,
    node: u16,
    port: u8,
    priority: Priority,
    size_class: u8,
    len: u32,
    buffer: u64,
    /// Backend time the event was taken.
    pub(super) t: u64,
}

/// The next event that matters to a loop.
pub(super) enum Got {
    Rx(Rx),
    Sent { msg: u64, status: SendStatus },
}

/// One end of a measurement on a port: its send slots and receive
/// buffers, the peer, and the pattern streams it sends and expects.
pub(super) struct Run<'a, B: NicBackend> {
    pub(super) port: &'a mut Port<B>,
    timeout: Duration,
    pub(super) priority: Priority,
    pub(super) peer: (u16, u8),
    size: u32,
    pub(super) class: u8,
    check: Check,
    out_stream: u32,
    in_stream: u32,
    send: Vec<DmaBuf>,
    pub(super) slots: Vec<Slot>,
    recv: Vec<DmaBuf>,
    /// Receive buffers provided so far, and how many messages will come.
    posted: u64,
    expect: u64,
    scratch: Scratch,
    /// A message or a completed send has come (so the peer's program is
    /// there). A send refused because the peer's port was not open yet
    /// does not count: the peer may come up after it with another size.
    heard: bool,
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

    pub(super) fn new(len: usize) -> Scratch {
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
    pub(super) fn new(
        port: &'a mut Port<B>,
        timeout: Duration,
        priority: Priority,
        peer: (u16, u8),
        size: u32,
        check: Check,
        out_stream: u32,
        in_stream: u32,
    ) -> Self {
        // A reset or a NIC gone at the peer ends a wait at once, naming
        // the peer's node (`PeerReset`, `NicDown`), even before its first
        // message.
        port.watch(peer.0);
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
            heard: false,
        }
    }

    pub(super) fn alloc_send(&mut self, n: u32) -> Result<(), BenchError> {
        for _ in 0..n {
            let b = self.port.alloc(self.size as u64)?;
            self.send.push(b);
            self.slots.push(Slot::Free);
        }
        Ok(())
    }

    /// Allocate `n` receive buffers (of the class's full size) and post as
    /// many as `expect` messages need.
    pub(super) fn alloc_recv(&mut self, n: u32, expect: u64) -> Result<(), BenchError> {
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
    pub(super) fn repost(&mut self, i: usize) -> Result<(), BenchError> {
        if self.posted < self.expect {
            let b = self.recv[i];
            self.port.provide_receive_buffer(&b, self.class, self.priority, i as u64)?;
            self.posted += 1;
        }
        Ok(())
    }

    pub(super) fn now(&self) -> u64 {
        self.port.backend().now_ns()
    }

    /// Wait a little (backend time), e.g. before sending again to a peer
    /// that is not up.
    pub(super) fn pause(&self, d: Duration) -> Result<(), BenchError> {
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

    /// The first message failed with `status`, the peer's port not up
    /// yet: give up (`PeerNotUp`) once the timeout has passed since
    /// `start`, else pause 1 ms and resume sending to the peer.
    pub(super) fn retry_first(&mut self, start: u64, status: SendStatus) -> Result<(), BenchError> {
        let limit = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
        let (node, port) = self.peer;
        if self.now().saturating_sub(start) >= limit {
            return Err(BenchError::PeerNotUp { node, port, timeout: self.timeout, last: status });
        }
        self.pause(Duration::from_millis(1))?;
        self.port.resume(node, port, self.priority)?;
        Ok(())
    }

    /// Wait for the next event that matters: a received message or a send
    /// completion (its slot is freed here).
    pub(super) fn pump(&mut self, what: &dyn Fn() -> String) -> Result<Got, BenchError> {
        loop {
            let ev = match self.port.wait(self.timeout) {
                Ok(e) => e,
                Err(DriverError::Timeout) => {
                    let (what, timeout) = (what(), self.timeout);
                    let silent = (!self.heard).then_some(self.peer);
                    return Err(BenchError::Timeout { what, timeout, silent });
                }
                Err(e) => return Err(e.into()),
            };
            let t = self.now();
            self.heard |=
                matches!(ev, Event::Received { .. } | Event::Sent { status: SendStatus::Ok, .. });
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

    pub(super) fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s, Slot::InFlight(_))).count()
    }

    pub(super) fn fill(&mut self, slot: usize, msg: u64) -> Result<(), BenchError> {
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
    pub(super) fn prefill(&mut self, msg: u64) -> Result<(), BenchError> {
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
    pub(super) fn ready_slot(&mut self, msg: u64) -> Result<usize, BenchError> {
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
    pub(super) fn post(&mut self, slot: usize) -> Result<(), Option<BenchError>> {
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
    pub(super) fn post_waiting(&mut self, slot: usize) -> Result<(), BenchError> {
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
    pub(super) fn check_header(&self, rx: &Rx, msg: u64) -> Result<(), BenchError> {
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
    pub(super) fn check_content(&mut self, rx: &Rx, msg: u64) -> Result<(), BenchError> {
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
    pub(super) fn drain(&mut self) -> Result<(), BenchError> {
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
    pub(super) fn free_all(&mut self) {
        for b in self.send.drain(..).chain(self.recv.drain(..)) {
            let _ = self.port.free(b);
        }
        self.slots.clear();
    }
}

/// Pages a buffer of `bytes` registers.
pub(super) fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE).max(1)
}

/// The checks both loops make of their configuration before allocating.
pub(super) fn check_common<B: NicBackend>(
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
            "peer node {} does not exist (the cluster has nodes 0 to {})",
            peer.0,
            nic.num_nodes().saturating_sub(1)
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

/// A send status that means the peer's port is not up yet: the first
/// message is sent again.
pub(super) fn retryable(status: SendStatus) -> bool {
    matches!(status, SendStatus::TargetPortClosed | SendStatus::TimedOut | SendStatus::Dropped)
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
}
