//! RDMA: accepted payloads from receive buffers to host memory (host-DMA,
//! one command per page piece, translated through the port's page table),
//! then events into the ports' event queues in host memory. A message's
//! Received event is owed only after its last packet's copy was posted,
//! and the host-DMA engine completes in order, so the host never sees an
//! event before the data.
//!
//! Owns: the ports' event queues in host memory (where, how long, how far
//! written), the event staging slots in SRAM, the copies in flight. Takes
//! from: `Shared::rdma_jobs` (RECV), `Shared::events` (every machine).
//! Gives back: receive buffers (to the rx-DMA engine, once copied), the
//! ports' tokens (`Shared::credits`, once their event is written).

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::records::*;
use crate::sdma::Sdma;
use crate::shared::{MachineState, Shared};
use crate::translate::{Piece, Xlat, MAX_PIECES};
use crate::Work;
use nic_abi::desc::DescKind;
use nic_abi::event::{Event, EventKind, SendStatus, EVENT_SIZE, INLINE_MAX};
use nic_abi::map;
use nic_abi::packet::HEADER_LEN;
use nic_abi::port::{port_reg, EVQ_CONSUMED, EVQ_PRODUCED};
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
    staging_busy: [bool; map::EVT_STAGING_LEN as usize],
    staging_next: u32,
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
}

impl Rdma {
    pub(crate) const fn new() -> Rdma {
        Rdma {
            state: RdmaState::Idle,
            evq: [EventQueue::NONE; NUM_PORTS],
            staging_busy: [false; map::EVT_STAGING_LEN as usize],
            staging_next: 0,
            copying: [0; map::RX_BUF_COUNT as usize],
            bytes_left: 0,
            last_port: 0,
            leaf_wait: false,
            xlat_wait: None,
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
                EvRef::Offload(i) => cx.offload.events.free(i as u16),
                _ => {}
            }
        }
        self.evq[p] = EventQueue::NONE;
    }

    /// The copy out of receive buffer `b` completed: the buffer goes back
    /// to the rx-DMA engine.
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

    /// Event staging slot `i` was written to host memory.
    pub fn event_written(&mut self, i: u8) {
        if let Some(s) = self.staging_busy.get_mut(i as usize) {
            *s = false;
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
        while let Some(job) = cx.rdma_jobs.front_mut() {
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
                if cx.leaf_reports.is_full() && cx.slot(hw, s).mrec == MREC_LEAF);
            if self.leaf_wait {
                break;
            }
            if job.rx_buf == NO_RX_BUF {
                // Only the event of a message whose packets were placed
                // (copied) before.
                cx.rdma_jobs.pop_front();
                if let Some(ev) = job.then {
                    if matches!(ev, EvRef::Slot(_)) {
                        cx.bump(Stat::MessagesReceived, 1);
                    }
                    cx.owe_event(job.port as usize, ev);
                }
                continue;
            }
            let mut pieces = [Piece { bus: 0, len: 0, at: 0 }; MAX_PIECES];
            let (n, xlat) = cx.pieces_into(hw, job.port, job.vaddr, job.len, &mut pieces);
            let pieces = &pieces[..n];
            if xlat == Xlat::Wait {
                self.xlat_wait = Some(job.port);
                break;
            }
            cx.rdma_jobs.pop_front();
            if xlat == Xlat::Fault {
                // Deregistered while the message was arriving: the bytes
                // cannot be placed; the event still comes.
                cx.bump(Stat::Errors, 1);
            }
            if n == 0 {
                cx.rx_release(hw, job.rx_buf);
            } else {
                let bytes: u32 = pieces.iter().map(|p| p.len).sum();
                self.copying[job.rx_buf as usize] = bytes;
                self.bytes_left = self.bytes_left.saturating_add(bytes);
                self.last_port = job.port;
                let to = RdmaState::Copying { port: job.port, bytes_left: self.bytes_left };
                self.go(cx, hw, to, Cause::Accepted);
            }
            let src = map::rx_buf(job.rx_buf as u32) + HEADER_LEN as u32;
            for (k, piece) in pieces.iter().enumerate() {
                let action =
                    if k + 1 == n { HdmaAction::RxDone(job.rx_buf) } else { HdmaAction::Nothing };
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
                    cx.bump(Stat::MessagesReceived, 1);
                    Fan::delivered(cx, hw, s, w);
                }
                cx.owe_event(job.port as usize, ev);
            }
        }
    }

    /// Write owed events into the ports' event queues (host memory).
    /// A step of the machine (kept out of line: a debugger breaks here).
    /// With nothing owed and nothing moving it returns before any
    /// register is saved (the work is a tail call).
    #[inline(never)]
    pub fn flush_events(&mut self, cx: &mut Shared, sdma: &Sdma, hw: &mut impl Hw, w: &mut Work) {
        if cx.events_owed == 0 && self.xlat_wait.is_none() && self.is_idle(cx) {
            return;
        }
        self.flush_step(cx, sdma, hw, w);
    }

    /// The flush's work: the events, then the state.
    #[inline(never)]
    fn flush_step(&mut self, cx: &mut Shared, sdma: &Sdma, hw: &mut impl Hw, w: &mut Work) {
        let behind = if cx.events_owed != 0 { self.write_events(cx, sdma, hw, w) } else { None };
        let next = match behind {
            Some(port) => RdmaState::HostBehind { port },
            None => self.at_rest(cx),
        };
        let cause = if behind.is_some() { Cause::HostBehind } else { Cause::Drained };
        self.go(cx, hw, next, cause);
    }

    /// The owed events written, port by port, while there is room; the
    /// port whose host is behind (its queue full), if one is.
    #[inline(never)]
    fn write_events(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        w: &mut Work,
    ) -> Option<u8> {
        let mut behind = None;
        // The ports owed events, in port order.
        let mut owed = cx.events_owed;
        'ports: while owed != 0 {
            let p = owed.trailing_zeros() as usize;
            owed &= owed - 1;
            if cx.events[p].is_empty() {
                cx.events_owed &= !(1 << p);
                continue;
            }
            while let Some(&ev) = cx.events[p].front() {
                let q = self.evq[p];
                if !cx.is_open(p) || q.len == 0 {
                    break;
                }
                let consumed = hw.load_u32(port_reg(p, EVQ_CONSUMED));
                if q.produced.wrapping_sub(consumed) >= q.len {
                    behind = Some(p as u8);
                    break; // the host is behind: its queue is full
                }
                if cx.hdma.space() == 0 {
                    break 'ports;
                }
                let Some(slot) = self.free_staging() else { break 'ports };
                cx.events[p].pop_front();
                self.go(cx, hw, RdmaState::Event { port: p as u8 }, Cause::EventOwed);
                let staging = map::EVT_STAGING + slot as u32 * EVENT_SIZE;
                let seq = q.produced.wrapping_add(1);
                if !stage_unicast(cx, hw, ev, staging, seq) {
                    stage_event(cx, sdma, hw, p, ev, staging, seq);
                }
                self.staging_busy[slot as usize] = true;
                let at = q.bus + (q.produced & (q.len - 1)) as u64 * EVENT_SIZE as u64;
                let cmd = HostDmaCmd {
                    dir: DmaDir::SramToHost,
                    len: EVENT_SIZE,
                    sram: staging,
                    host: at,
                    cookie: 0,
                };
                cx.hdma.post(hw, cmd, HdmaAction::EventDone(slot));
                w.dma_cmds += 1;
                w.events += 1;
                self.evq[p].produced = q.produced.wrapping_add(1);
                hw.store_u32(port_reg(p, EVQ_PRODUCED), self.evq[p].produced);
                release_event_source(cx, p, ev);
            }
            if cx.events[p].is_empty() {
                cx.events_owed &= !(1 << p);
            }
        }
        behind
    }

    fn free_staging(&mut self) -> Option<u8> {
        let n = map::EVT_STAGING_LEN;
        for k in 0..n {
            let i = (self.staging_next + k) % n;
            if !self.staging_busy[i as usize] {
                self.staging_next = (i + 1) % n;
                return Some(i as u8);
            }
        }
        None
    }
}

/// The event of a unicast message received, sent, put or got, composed
/// as its eight words straight into staging slot `staging` (the layout
/// of [`Event::encode`]). False for any other event: [`stage_event`]
/// composes it.
#[inline(always)]
fn stage_unicast(cx: &Shared, hw: &mut impl Hw, ev: EvRef, staging: u32, seq: u32) -> bool {
    let b = |x: u8, at: u32| (x as u64) << at;
    let (w0, w1, addr, tag, inline) = match ev {
        EvRef::Slot(s) => {
            let sl = cx.slot(hw, s);
            if sl.error != 0 || Fan::slot_is_its(&sl) {
                return false;
            }
            let n = (sl.inline_len as u32).min(INLINE_MAX as u32);
            let inline = if n == 0 {
                (0, 0)
            } else {
                let at = map::rx_inline(s as u32);
                let (lo, hi) = (hw.load_u64(at), hw.load_u64(at + 8));
                // Only the message's bytes: the rest of the slot's room
                // holds an earlier message's.
                let mask = |k: u32| if k >= 8 { u64::MAX } else { (1u64 << (8 * k)) - 1 };
                (lo & mask(n), hi & mask(n.saturating_sub(8)))
            };
            let w0 = b(EventKind::Received as u8, 0)
                | b(sl.prio as u8, 16)
                | b(sl.src_port, 24)
                | (sl.src_node as u64) << 32
                | b(sl.size_class, 48)
                | b(sl.inline_len, 56);
            (w0, sl.msg_len as u64, sl.vaddr, sl.tag, inline)
        }
        EvRef::Token(t) => {
            let tok = &cx.tokens[t];
            let kind = match tok.kind {
                TokKind::Send => EventKind::Sent,
                TokKind::Put => EventKind::PutDone,
                TokKind::Get => EventKind::GetDone,
                _ => return false,
            };
            let status = match tok.state {
                TokState::Completing(s) => s,
                _ => SendStatus::Ok as u8,
            };
            let w0 = b(kind as u8, 0)
                | b(status, 8)
                | b(tok.prio as u8, 16)
                | b(tok.target_port, 24)
                | (tok.target_node as u64) << 32
                | b(tok.size_class, 48);
            (w0, tok.len as u64 | (tok.desc_kind as u64) << 32, tok.local, tok.tag, (0, 0))
        }
        _ => return false,
    };
    let words = [w0, w1, addr, tag, cx.now, inline.0, inline.1, (seq as u64) << 32];
    for (i, &x) in words.iter().enumerate() {
        hw.store_u64(staging + 8 * i as u32, x);
    }
    true
}

/// Any event, composed as an [`Event`] and encoded into staging slot
/// `staging` (out of line: its `Event` stays off the unicast path's
/// stack).
#[inline(never)]
fn stage_event(
    cx: &mut Shared,
    sdma: &Sdma,
    hw: &mut impl Hw,
    p: usize,
    ev: EvRef,
    staging: u32,
    seq: u32,
) {
    let mut e = compose_event(cx, sdma, hw, p, ev);
    match ev {
        EvRef::Slot(s) => {
            let n = (e.inline_len as usize).min(e.inline.len());
            hw.read(map::rx_inline(s as u32), &mut e.inline[..n]);
        }
        EvRef::Offload(i) => cx.offload.events.free(i as u16),
        _ => {}
    }
    e.seq = seq;
    e.rtc = cx.now;
    let mut b = [0u8; EVENT_SIZE as usize];
    e.encode(&mut b);
    hw.write(staging, &b);
}

fn compose_event(cx: &Shared, sdma: &Sdma, hw: &impl Hw, p: usize, ev: EvRef) -> Event {
    match ev {
        EvRef::PortOpened => Event::empty(EventKind::PortOpened),
        EvRef::Offload(i) => crate::offload::CoreSide::event(hw, i),
        EvRef::Alarm => {
            let mut e = Event::empty(EventKind::Alarm);
            e.tag = sdma.alarm_tag(p);
            e
        }
        EvRef::Token(t) => {
            let tok = cx.tokens[t];
            let status = match tok.state {
                TokState::Completing(s) => s,
                _ => SendStatus::Ok as u8,
            };
            let kind = match tok.kind {
                TokKind::Send => EventKind::Sent,
                TokKind::Put => EventKind::PutDone,
                TokKind::Get => EventKind::GetDone,
                k => Fan::token_kind(k).unwrap_or(EventKind::Error),
            };
            let mut e = Event::empty(kind);
            e.status = status;
            e.priority = tok.prio;
            e.port = tok.target_port;
            e.node = tok.target_node;
            e.size_class = tok.size_class;
            e.len = tok.len;
            e.addr = tok.local;
            e.tag = tok.tag;
            e.desc_kind = tok.desc_kind;
            Fan::token_event(&tok, &mut e);
            e
        }
        EvRef::Lost(t, part) => Fan::lost_event(cx, hw, t, part),
        EvRef::Slot(s) => {
            let sl = cx.slot(hw, s);
            if sl.error != 0 {
                let mut e = Event::empty(EventKind::Error);
                e.status = sl.error;
                e.tag = sl.tag;
                e.desc_kind = DescKind::Provide as u8;
                return e;
            }
            let mut e = Event::empty(EventKind::Received);
            e.priority = sl.prio;
            e.port = sl.src_port;
            e.node = sl.src_node;
            e.size_class = sl.size_class;
            e.len = sl.msg_len;
            e.addr = sl.vaddr;
            e.tag = sl.tag;
            e.inline_len = sl.inline_len;
            Fan::slot_event(&sl, &mut e);
            e
        }
    }
}

/// The event is written: free the token or slot that held it and give
/// the port its token back.
fn release_event_source(cx: &mut Shared, p: usize, ev: EvRef) {
    match ev {
        EvRef::Token(t) => {
            let tok = cx.tokens[t];
            let counted = match DescKind::from_u8(tok.desc_kind) {
                Some(k) => k.uses_send_token(),
                // A descriptor too broken to name its kind took a send token.
                None => tok.kind == TokKind::Error,
            };
            if counted {
                let c = &mut cx.credits[p];
                if c.send_in_use() > 0 {
                    c.send_returned = c.send_returned.wrapping_add(1);
                }
            }
            Fan::token_freed(cx, t);
            cx.tokens.free(t);
        }
        EvRef::Slot(s) => {
            let c = &mut cx.credits[p];
            if c.recv_in_use() > 0 {
                c.recv_returned = c.recv_returned.wrapping_add(1);
            }
            cx.slots.free(s);
        }
        _ => {}
    }
}
