//! RDMA: accepted payloads from receive buffers to host memory (host-DMA,
//! one command per page piece, translated through the port's page table),
//! then events into the ports' event queues in host memory. A message's
//! Received event is owed only after its last packet's copy was posted,
//! and the host-DMA engine completes in order, so the host never sees an
//! event before the data.
//!
//! Owns: the ports' event queues in host memory (where, how long, how far
//! written), the event staging slots in SRAM (one per host-DMA ring
//! slot: an event is staged in its write's), the copies in flight. Takes
//! from: `Shared::rdma_jobs` (RECV), `Shared::events` (every machine).
//! Gives back: receive buffers (to the rx-DMA engine, once copied), the
//! ports' tokens (`Shared::credits`, once their event is written).
//!
//! The copies are here; the events (composing, staging, writing them)
//! in `events`.

mod events;

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::queue::{self, Consumer};
use crate::records::*;
use crate::shared::{MachineState, Shared};
use crate::translate::{Piece, Xlat, MAX_PIECES};
use crate::Work;
use nic_abi::map;
use nic_abi::packet::HEADER_LEN;
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::trace::{Cause, Machine};
use nic_abi::NUM_PORTS;

/// What RDMA is doing or waiting for (persists between polls).
#[derive(Debug, Clone, Copy, Eq)]
pub enum RdmaState {
    /// No copy in flight, no event owed that can be written.
    Idle,
    /// Copies into `port`'s memory are in flight: `bytes_left` bytes not
    /// yet in host memory.
    Copying { port: u8, bytes_left: u32 },
    /// Accepted packets wait for room in the host-DMA ring.
    RingFull { jobs: u8 },
    /// Writing an event into `port`'s event queue.
    Event { port: u8 },
    /// Events are owed to `port` but its queue in host memory is full
    /// (the host is behind).
    HostBehind { port: u8 },
    /// The next copy into `port`'s memory waits for a translation (its
    /// page-table line is being read from host memory).
    TranslateWait { port: u8 },
}

impl RdmaState {
    pub const IDLE: u8 = 0;
    pub const COPYING: u8 = 1;
    pub const RING_FULL: u8 = 2;
    pub const EVENT: u8 = 3;
    pub const HOST_BEHIND: u8 = 4;
    pub const TRANSLATE_WAIT: u8 = 5;
}

impl PartialEq for RdmaState {
    /// Variant by variant, inlined: the steps' check for a change of
    /// state is on every pass.
    #[inline(always)]
    fn eq(&self, other: &RdmaState) -> bool {
        use RdmaState::*;
        match (*self, *other) {
            (Idle, Idle) => true,
            (Copying { port: a, bytes_left: x }, Copying { port: b, bytes_left: y }) => {
                a == b && x == y
            }
            (RingFull { jobs: a }, RingFull { jobs: b }) => a == b,
            (Event { port: a }, Event { port: b })
            | (HostBehind { port: a }, HostBehind { port: b })
            | (TranslateWait { port: a }, TranslateWait { port: b }) => a == b,
            _ => false,
        }
    }
}

impl MachineState for RdmaState {
    const MACHINE: Machine = Machine::Rdma;

    fn code(&self) -> u8 {
        match self {
            RdmaState::Idle => Self::IDLE,
            RdmaState::Copying { .. } => Self::COPYING,
            RdmaState::RingFull { .. } => Self::RING_FULL,
            RdmaState::Event { .. } => Self::EVENT,
            RdmaState::HostBehind { .. } => Self::HOST_BEHIND,
            RdmaState::TranslateWait { .. } => Self::TRANSLATE_WAIT,
        }
    }

    fn arg(&self) -> u32 {
        match *self {
            RdmaState::Idle => 0,
            RdmaState::Copying { bytes_left, .. } => bytes_left,
            RdmaState::RingFull { jobs } => jobs as u32,
            RdmaState::Event { port }
            | RdmaState::HostBehind { port }
            | RdmaState::TranslateWait { port } => port as u32,
        }
    }
}

/// A port's event queue in host memory.
#[derive(Debug, Clone, Copy)]
struct EventQueue {
    bus: u64,
    /// Entries (a power of two; 0: the port has none).
    len: u32,
    produced: u32,
}

impl EventQueue {
    const NONE: EventQueue = EventQueue { bus: 0, len: 0, produced: 0 };
}

/// The RDMA machine.
pub struct Rdma {
    state: RdmaState,
    evq: [EventQueue; NUM_PORTS],
    /// Bytes copied out of each receive buffer, until its copy completes.
    copying: [u32; map::RX_BUF_COUNT as usize],
    /// Their sum.
    bytes_left: u32,
    /// The port the last copy went to.
    last_port: u8,
    /// A leaf's delivery waits for room among the leaf reports.
    leaf_wait: bool,
    /// The next copy waits for a translation into this port's memory.
    xlat_wait: Option<u8>,
    /// Its half of the queue of payloads to copy (`crate::queue`).
    jobs: Consumer<queue::Jobs>,
}

impl Rdma {
    pub(crate) const fn new() -> Rdma {
        Rdma {
            state: RdmaState::Idle,
            evq: [EventQueue::NONE; NUM_PORTS],
            copying: [0; map::RX_BUF_COUNT as usize],
            bytes_left: 0,
            last_port: 0,
            leaf_wait: false,
            xlat_wait: None,
            jobs: queue::consumer(),
        }
    }

    pub fn state(&self) -> RdmaState {
        self.state
    }

    /// A change of state (recorded when tracing); none, no call.
    #[inline(always)]
    fn go(&mut self, cx: &mut Shared, hw: &mut impl Hw, to: RdmaState, cause: Cause) {
        if self.state != to {
            cx.transition(hw, &mut self.state, to, cause);
        }
    }

    /// Idle, and nothing to do: no job, no copy in flight (so at rest
    /// too, once no translation is awaited).
    #[inline(always)]
    /// Would a step or a flush find nothing to do until a completion
    /// comes? Nothing to copy, no translation or host waited for (copies
    /// in flight wait for their completions).
    pub(crate) fn waits_for_completions(&self, cx: &Shared) -> bool {
        self.xlat_wait.is_none()
            && cx.rdma_jobs.is_empty()
            && matches!(self.state, RdmaState::Idle | RdmaState::Copying { .. })
    }

    fn is_idle(&self, cx: &Shared) -> bool {
        matches!(self.state, RdmaState::Idle) && cx.rdma_jobs.is_empty() && self.bytes_left == 0
    }

    /// What the machine waits for once it did what it could.
    #[inline(always)]
    fn at_rest(&self, cx: &Shared) -> RdmaState {
        let bytes_left = self.bytes_left;
        if let Some(port) = self.xlat_wait {
            RdmaState::TranslateWait { port }
        } else if !cx.rdma_jobs.is_empty() {
            RdmaState::RingFull { jobs: cx.rdma_jobs.len() as u8 }
        } else if bytes_left > 0 {
            RdmaState::Copying { port: self.last_port, bytes_left }
        } else {
            RdmaState::Idle
        }
    }

    /// Port `p` opened with its event queue at `bus`, `len` entries (the
    /// MCP checked it: a power of two, inside the port's slice of host
    /// memory, so no event address wraps).
    pub fn port_opened(&mut self, p: usize, bus: u64, len: u32) {
        self.evq[p] = EventQueue { bus, len, produced: 0 };
    }

    /// Port `p` closed: the events it was owed go, with what they hold.
    pub fn port_closed(&mut self, cx: &mut Shared, p: usize) {
        while let Some(ev) = cx.events[p].pop_front() {
            match ev {
                EvRef::Token(t) => cx.tokens.free(t),
                EvRef::Slot(s) => cx.slots.free(s),
                EvRef::Offload(i) => cx.offload.events.free(i),
                _ => {}
            }
        }
        self.evq[p] = EventQueue::NONE;
    }

    /// The copy out of receive buffer `b` completed: the buffer goes back
    /// to the rx-DMA engine.
    /// (Out of line: inlined, it made every pass that takes a
    /// completion save a dozen registers.)
    #[inline(never)]
    pub fn copied(&mut self, cx: &mut Shared, hw: &mut impl Hw, b: u8) {
        if let Some(n) = self.copying.get_mut(b as usize) {
            self.bytes_left = self.bytes_left.saturating_sub(core::mem::take(n));
        }
        // A relay may still be sending out of it.
        cx.rx_release(hw, b);
        if let RdmaState::Copying { .. } = self.state {
            let next = self.at_rest(cx);
            self.go(cx, hw, next, Cause::DmaDone);
        }
    }

    /// When RDMA wants to look again: while a port's event queue is full,
    /// the host's report (EVQ_CONSUMED) rings no doorbell, so RDMA looks
    /// again every NOBUF_RETRY.
    pub fn deadline(&self, cx: &Shared, mut at: impl FnMut(u64)) {
        if let RdmaState::HostBehind { .. } = self.state {
            at(cx.now.saturating_add(cx.cfg.nobuf_retry));
        }
        if self.leaf_wait {
            // SDMA sends leaf reports after RDMA's step: look again.
            let retry = if cx.leaf_reports.is_full() { cx.cfg.nobuf_retry } else { 0 };
            at(cx.now.saturating_add(retry));
        }
    }

    /// A step of the machine (kept out of line: a debugger breaks here):
    /// accepted payloads to host memory. Idle, it returns before any
    /// register is saved (the work is a tail call).
    #[inline(never)]
    pub fn step(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        self.xlat_wait = None;
        if self.is_idle(cx) {
            return;
        }
        self.copy_step(cx, hw, w);
    }

    /// The step's work: the copies, then the state.
    #[inline(never)]
    fn copy_step(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        if !cx.rdma_jobs.is_empty() {
            self.copy_jobs(cx, hw, w);
        }
        let next = self.at_rest(cx);
        self.go(cx, hw, next, Cause::NoRoom);
    }

    /// The accepted payloads' copies, in order, while there is room.
    #[inline(never)]
    fn copy_jobs(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        while let Some(job) = cx.rdma_jobs.front_mut(&self.jobs) {
            if job.relayed {
                // Forwarded first (SDMA's fill this pass), copied next pass.
                job.relayed = false;
                break;
            }
            let job = *job;
            // A packet spans at most two pages.
            if cx.hdma.space() < 3 {
                break;
            }
            // A leaf's delivery queues its report: wait for room.
            self.leaf_wait = matches!(job.then, Some(EvRef::Slot(s))
                if cx.leaf_reports.is_full() && cx.slot(hw, s).mrec == Mrec::LEAF);
            if self.leaf_wait {
                break;
            }
            let Some(rx_buf) = job.rx_buf.map(NonMaxU8::get) else {
                // Only the event of a message whose packets were placed
                // (copied) before.
                cx.rdma_jobs.pop_front(&self.jobs);
                if let Some(ev) = job.then {
                    if matches!(ev, EvRef::Slot(_)) {
                        cx.bump(hw, Stat::MessagesReceived, 1);
                    }
                    cx.owe_event(job.port as usize, ev);
                }
                continue;
            };
            let mut pieces = [Piece { bus: 0, len: 0, at: 0 }; MAX_PIECES];
            let (n, xlat) = cx.pieces_into(hw, job.port, job.vaddr, job.len, &mut pieces);
            let pieces = &pieces[..n];
            if xlat == Xlat::Wait {
                self.xlat_wait = Some(job.port);
                break;
            }
            cx.rdma_jobs.pop_front(&self.jobs);
            if xlat == Xlat::Fault {
                // Deregistered while the message was arriving: the bytes
                // cannot be placed; the event still comes.
                cx.bump(hw, Stat::Errors, 1);
            }
            if n == 0 {
                cx.rx_release(hw, rx_buf);
            } else {
                let bytes: u32 = pieces.iter().map(|p| p.len).sum();
                self.copying[rx_buf as usize] = bytes;
                self.bytes_left = self.bytes_left.saturating_add(bytes);
                self.last_port = job.port;
                let to = RdmaState::Copying { port: job.port, bytes_left: self.bytes_left };
                self.go(cx, hw, to, Cause::Accepted);
            }
            let src = map::rx_buf(rx_buf as u32) + HEADER_LEN as u32;
            for (k, piece) in pieces.iter().enumerate() {
                let action =
                    if k + 1 == n { HdmaAction::RxDone(rx_buf) } else { HdmaAction::Nothing };
                let cmd = HostDmaCmd {
                    dir: DmaDir::SramToHost,
                    len: piece.len,
                    sram: src + piece.at,
                    host: piece.bus,
                    cookie: 0,
                };
                cx.hdma.post(hw, cmd, action);
                w.dma_cmds += 1;
            }
            if let Some(ev) = job.then {
                if let EvRef::Slot(s) = ev {
                    cx.bump(hw, Stat::MessagesReceived, 1);
                    Fan::delivered(cx, hw, s, w);
                }
                cx.owe_event(job.port as usize, ev);
            }
        }
    }
}
