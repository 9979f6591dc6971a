//! The MCP: the NIC control program, after Myricom's GM. Four state
//! machines over one hardware interface ([`hw::Hw`]):
//!
//! - SDMA ([`sdma`]): takes descriptors from the port send rings, validates
//!   and translates them, makes send tokens, queues them on streams and
//!   connections, picks the next packet (GM rotation: one packet per turn)
//!   and has the host-DMA engine copy its payload into a transmit buffer.
//! - SEND ([`send`]): puts the route and header on filled transmit buffers
//!   (piggybacking acks) and hands them to the send-DMA engine; sends acks
//!   and nacks.
//! - RECV ([`recv`]): takes packets from the receive-DMA engine, checks
//!   CRC status and header, handles acks and nacks, sequence numbers
//!   (duplicates acked and dropped, gaps nacked), matches receive buffers.
//! - RDMA ([`rdma`]): copies accepted payloads to host memory and writes
//!   events into the ports' event queues in host memory.
//!
//! Each machine is a struct that owns its records and its state enum; the
//! state persists between polls and names what the machine is doing or
//! waiting for, with its operands. Machines hand work to each other only
//! through bounded queues and buffers whose owner is visible (`shared`):
//! a queue's producer half and consumer half are fields of the machines
//! at its ends (`queue`). One may ask another a question through a
//! method, never write its fields (they are private to its module).
//!
//! `Mcp::poll` is one pass of the main loop, a short scheduler that steps
//! each machine in turn; it returns the [`Work`] done so a simulator can
//! charge NIC CPU time. Time is only ever the RTC read at the start of a
//! pass. Every transition is a trace record (machine, from, to, cause) in
//! an SRAM ring when tracing is on. Reliability's sequence and window
//! logic is a pure module ([`reliability`]), as is rate control's
//! (`offload::rate`). No heap, no panics on input from the host or the
//! wire, no unsafe.
#![cfg_attr(not(any(test, feature = "check-gating")), no_std)]
#![forbid(unsafe_code)]

pub mod hw;
#[macro_use]
mod log;
mod completions;
mod config;
mod gating;
pub mod offload;
mod pool;
mod ports;
mod queue;
pub mod rdma;
mod records;
pub mod recv;
pub mod reliability;
mod ring;
pub mod rtt;
pub mod sdma;
pub mod send;
mod shared;
mod summary;
pub mod tlb;
mod translate;
mod work;

use hw::Hw;
use nic_abi::regs;
use nic_abi::stats::Stat;
use nic_abi::NUM_PORTS;
use shared::Shared;
use summary::bit;
pub use summary::{PassKind, CAUSE_PENDING_SHIFT, NEWS};

pub use config::{Config, InitError};
pub use gating::check_gating_here;
#[cfg(any(test, feature = "check-gating"))]
use gating::GATING_CHECKED;
pub use rdma::{Rdma, RdmaState};
pub use records::{PORT_RECV_TOKENS_MAX, PORT_SEND_TOKENS_MAX, WINDOW_MAX};
pub use recv::{Recv, RecvState};
pub use sdma::{Sdma, SdmaState};
pub use send::{Send, SendState};
pub use work::Work;

/// Are the multicast paths compiled in? (Feature `multicast`, on by
/// default; off, or `--cfg mcast_off`, leaves them out: multicast
/// descriptors are refused as an unknown kind, multicast packets handled
/// as plain data, and no multicast check is made on the unicast paths; for
/// measuring what multicast costs unicast.)
pub const MULTICAST: bool = cfg!(feature = "multicast") && !cfg!(mcast_off);

/// Data transmit buffers may not take the last few: acks and nacks must
/// always find one.
const CONTROL_RESERVE: u32 = 2;

/// The MCP: the four machines and what they share. The field names are
/// what a debugger prints: `MCP.sdma.state`, `MCP.send.state`,
/// `MCP.recv.state`, `MCP.rdma.state`.
///
/// `repr(C)`, in this order: what every pass reads first (the image reaches
/// a field within 2 KiB of the struct's start with one load, one further
/// out with three), then the small machines, then the large records
/// (RECV's and SDMA's streams, the shared pools), each of which keeps its
/// own busiest fields first.
#[repr(C)]
pub struct Mcp {
    deadline: Option<u64>,
    /// The device's news counters ([`NEWS`]) as the last pass found them.
    seen: [u32; NEWS.len()],
    /// Their sum (wrapping): the counters only move forward, so the sum
    /// of the ones read moved if and only if one of them did (short of
    /// 2^32 moves between two passes).
    seen_sum: u32,
    /// `regs::PORT_NEWS` as the last look at the port windows found it
    /// (None: look at the next pass).
    port_news: Option<u32>,
    running: bool,
    /// The last pass left work for the next whatever the news: a queue
    /// between machines not empty, packets left in the receive ring,
    /// descriptors left in a send ring, a fill that may go on, a
    /// multicast in progress, or RDMA's retry counted from the time of
    /// the pass. Only then does a pass without news run whole (feature
    /// `check-gating` checks that a pass it skips would find nothing).
    pending: bool,
    /// The last pass did work (its [`Work`] was not idle).
    busy: bool,
    /// What the last pass was.
    kind: PassKind,
    /// Why the last pass that was not quiet ran ([`Mcp::pass_cause`]).
    cause: u8,
    /// News a quiet pass left for the next one with other news: send
    /// completions (nothing waited for the transmit buffers they free),
    /// host-DMA completions (receive buffers copied out, for the rx-DMA
    /// engine that had others).
    owed: u32,
    pub send: Send,
    pub rdma: Rdma,
    shared: Shared,
    pub recv: Recv,
    /// The offloads compiled in (`offload::list`).
    offloads: offload::Offloads,
    pub sdma: Sdma,
}

impl Default for Mcp {
    fn default() -> Self {
        Self::new()
    }
}

impl Mcp {
    pub const fn new() -> Mcp {
        Mcp {
            sdma: Sdma::new(),
            send: Send::new(),
            recv: Recv::new(),
            rdma: Rdma::new(),
            shared: Shared::new(),
            offloads: offload::Offloads::new(),
            running: false,
            deadline: None,
            port_news: None,
            seen: [0; NEWS.len()],
            seen_sum: 0,
            pending: true,
            busy: false,
            kind: PassKind::Quiet,
            cause: 0,
            owed: 0,
        }
    }

    /// Read the configuration, give every receive buffer to the rx-DMA
    /// engine, and report FW_RUNNING (or FW_HALTED with the reason).
    pub fn init(&mut self, hw: &mut impl Hw) -> Result<(), InitError> {
        // A fresh state, for a NIC reset under the sim or live. The
        // bare-metal image runs init once per boot on the static as it was
        // loaded (already `Mcp::new()`), and building a whole MCP there
        // would put one on its stack for the copy: as much stack as the MCP
        // is large, which the image does not have to spare.
        if !cfg!(target_os = "none") {
            *self = Mcp::new();
        }
        let cfg = match Config::read(hw) {
            Ok(c) => c,
            Err(e) => {
                hw.set_reg(regs::FW_STATUS, regs::FW_HALTED);
                return Err(e);
            }
        };
        let cx = &mut self.shared;
        cx.cfg = cfg;
        cx.now = hw.rtc();
        let n = ((hw.reg(regs::BOOT_COUNT) as u64) << 32) ^ cx.now;
        cx.boot = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as u16;
        // Pick up the engines' counters as they are (a warm restart);
        // entries a host left in the flow table count from now.
        self.sdma.init(cx, hw);
        cx.hdma.init(hw);
        cx.xlat.init(hw);
        self.send.init(hw);
        self.recv.init(hw);
        cx.rxfree.init(hw);
        for p in 0..NUM_PORTS {
            hw.store_u32(nic_abi::port::port_reg(p, nic_abi::port::FW_STATE), 0);
        }
        shared::Stats::clear(hw);
        self.offloads.init(&mut offload::Services::new(cx, hw, &mut Work::default()));
        shared::Stats::flush(hw, &mut self.shared.later);
        self.port_news = None;
        self.pending = true;
        self.running = true;
        hw.set_reg(regs::FW_STATUS, regs::FW_RUNNING);
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// One pass of the main loop. It reads the summary of what changed
    /// first ([`NEWS`]): with no news, no timer due, the receive ring's
    /// audit not due and nothing left by the last pass, no machine has
    /// work and the pass ends there. When only the engines' completion
    /// counters moved, the completions are taken and the pass ends there
    /// unless one gave a machine work (`Mcp::completions_pass`).
    /// Otherwise `Mcp::pass` runs.
    #[inline(always)]
    pub fn poll(&mut self, hw: &mut impl Hw) -> Work {
        let mut w = Work::default();
        self.poll_into(hw, &mut w);
        w
    }

    /// [`Mcp::poll`], counting the pass's work into `w`, which must be
    /// zero: a caller that keeps one `Work` (and zeroes it only after a
    /// pass that did work) spares a quiet pass the zeroing.
    #[inline(always)]
    pub fn poll_into(&mut self, hw: &mut impl Hw, w: &mut Work) {
        self.kind = PassKind::Quiet;
        if !self.running {
            return;
        }
        shared::Stats::bump(hw, Stat::Polls, 1);
        let now = hw.rtc();
        let news = self.news(hw);
        let due = self.deadline.is_some_and(|d| now >= d);
        let news = news | (due as u32) << bit::TIMER_SHIFT;
        if news & !(bit::HDMA | bit::TXDMA) == 0
            && self.nothing_left(now)
            && (news == 0 || self.no_work_in(hw, news))
        {
            // (The completions it took or left, if any: `pass_cause`.)
            self.cause = news as u8;
            self.end_quiet(hw, now, w);
            return;
        }
        self.poll_news(hw, now, news, w);
    }

    /// The rest of a pass that has news (out of line: a quiet pass saves
    /// no register for it).
    #[inline(never)]
    fn poll_news(&mut self, hw: &mut impl Hw, now: u64, news: u32, w: &mut Work) {
        let news = news | core::mem::take(&mut self.owed);
        self.cause = news as u8 | (self.pending as u8) << CAUSE_PENDING_SHIFT;
        if news & !(bit::HDMA | bit::TXDMA) == 0
            && self.nothing_left(now)
            && self.completions_pass(hw, now, news, w)
        {
            self.kind = PassKind::Completions;
            return;
        }
        self.kind = PassKind::Whole;
        self.pass(hw, now, news, w);
    }

    /// A pass that may find work: the scheduler. Completions first (they
    /// free buffers the machines need); RECV, whose acks and nacks SDMA
    /// takes at once (they free window space); RDMA's copies; SDMA
    /// (descriptors, timers, fills); SEND; then RDMA's events.
    #[inline(never)]
    ///
    /// A part whose inputs are only the words of a news counter runs when
    /// that counter moved: the host's switches and tables (`HOST_WRITES`,
    /// and `PORT_NEWS` for a port just opened), the host-DMA completions
    /// (`HDMA_DONE`).
    /// The pass counts its work into `w` (zero when it starts), which the
    /// caller owns: no copy of it on the way out.
    fn pass(&mut self, hw: &mut impl Hw, now: u64, news: u32, w: &mut Work) {
        // (The first pass after init looks at everything.)
        let first = self.port_news.is_none();
        let host = first || news & (bit::HOST | bit::PORTS) != 0;
        let cx = &mut self.shared;
        cx.now = now;
        if host {
            cx.trace.on = hw.reg(regs::TRACE_ENABLE) != 0;
            self.sdma.begin_pass(cx, hw, w);
        }
        if first || news & bit::PORTS != 0 {
            self.check_ports(hw, w);
        }
        if host {
            self.shared.sync_tables(hw);
        }
        if news & bit::HDMA != 0 {
            self.completions(hw);
        }
        let cx = &mut self.shared;
        if news & bit::TXDMA != 0 {
            self.send.completions(cx, hw);
        }
        // RECV, packet by packet: SDMA takes each packet's ack or nack
        // before RECV places the packet. With no packet stored since the
        // last pass, none left in the ring or held, and the free ring's
        // audit not due, RECV's steps would find nothing.
        self.recv.begin_pass(cx, hw);
        let rx = news & bit::RX != 0 || self.recv.leftover() || now >= self.recv.repair_at();
        let budget = if rx { recv::RECV_BUDGET } else { 0 };
        for _ in 0..budget {
            match self.recv.step(cx, hw, w) {
                recv::Next::Empty => break,
                recv::Next::Handled => {}
                recv::Next::Accept(a) => {
                    self.sdma.take_from_recv(cx, hw);
                    self.recv.accept(cx, &self.sdma, hw, a, w);
                }
                recv::Next::Offload(p) => {
                    offload_packet(&mut self.offloads, &mut self.recv, cx, hw, &p, w)
                }
            }
        }
        self.sdma.take_from_recv(cx, hw);
        self.step_machines(hw, true, host, w);
        self.mark_taken(budget > 0);
        shared::Stats::flush(hw, &mut self.shared.later);
    }

    /// The machines' steps after RECV's packets, in the one order a whole
    /// pass and a completions pass's light part share: RECV's end of pass
    /// (acks due), RDMA's copies, the offloads' timers (`timers`), SDMA
    /// (descriptors when `host`, then timers and fills), SEND, RDMA's
    /// events; then the next deadline, what the next pass must do, and
    /// whether this one did work.
    #[inline(always)]
    fn step_machines(&mut self, hw: &mut impl Hw, timers: bool, host: bool, w: &mut Work) {
        let cx = &mut self.shared;
        self.recv.end_pass(cx, hw, w);
        self.rdma.step(cx, hw, w);
        if offload::Offloads::ANY && timers && cx.offloads_live && self.offloads.due(cx.now) {
            self.offloads.expire(&mut offload::Services::new(cx, hw, w));
        }
        self.sdma.step(cx, hw, &mut self.offloads, host, w);
        // Receive buffers the host posted this pass join RECV's lists now:
        // left in the queue, they alone would run the next pass whole.
        if !cx.provided.is_empty() {
            self.recv.take_provided(cx, hw);
        }
        self.send.step(cx, &self.sdma, &mut self.recv, hw, w);
        self.rdma.flush_events(cx, &self.sdma, hw, w);
        self.settle();
        self.busy = !w.is_idle();
    }

    /// After a pass that stepped the machines: the next deadline, and
    /// whether the next pass must run whole. Work in a queue between
    /// machines (say a relayed packet RDMA copies at the next pass) is
    /// left for the next pass too.
    fn settle(&mut self) {
        debug_assert!(self.shared.provided.is_empty(), "posted receive buffers left for RECV");
        if self.shared.offloads_live {
            self.shared.offloads_live = self.offloads_hold_state();
        }
        #[cfg(any(test, feature = "check-gating"))]
        assert!(
            self.shared.offloads_live || !self.offloads_hold_state(),
            "an offload holds state that no hook set offloads_live for"
        );
        let relative = self.compute_deadline();
        self.pending =
            relative || self.queued() || self.recv.leftover() || self.sdma.leftover(&self.shared);
    }

    /// Does an offload hold state the per-pass hooks look at? (What
    /// `Shared::offloads_live` stands for: worked out at the end of a pass
    /// that had it set; out of line, as a unicast pass never asks.)
    #[inline(never)]
    fn offloads_hold_state(&mut self) -> bool {
        let cx = &self.shared;
        <offload::fanout::Fan as offload::fanout::Fanout>::live(&self.sdma, cx)
            || <offload::policy::Sched as offload::policy::Scheduler>::live(&self.sdma.sched)
            || (offload::Offloads::ANY
                && (!cx.offload.tx.is_empty() || self.offloads.deadline().is_some()))
    }

    /// Is there work in a queue between machines?
    fn queued(&self) -> bool {
        !self.shared.tx_ready.is_empty() || self.queued_besides_ready()
    }

    /// Is there work in a queue between machines other than SEND's
    /// filled buffers?
    fn queued_besides_ready(&self) -> bool {
        let cx = &self.shared;
        !(cx.rdma_jobs.is_empty()
            && cx.controls.is_empty()
            && cx.from_recv.is_empty()
            && cx.leaf_reports.is_empty())
            // (Posted receive buffers are not among them: RECV takes them
            // in the pass SDMA's intake queued them, `step_machines`.)
            // (A multicast's next child starts once the last one's
            // packets are filled, later in the pass: the fan-out says
            // whether its step would act.)
            || (cx.offloads_live
                && <offload::fanout::Fan as offload::fanout::Fanout>::step_due(&self.sdma, cx))
    }

    /// RTC tick when a timer falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// RTC tick when rate control next dispatches a packet, if a regulated
    /// stream waits for it (one of the timers `next_deadline` counts). A
    /// CPU that is late to wake costs that stream its pace, so the qemu
    /// image wakes early for this one and polls the rest of the way.
    pub fn next_dispatch(&self) -> Option<u64> {
        if !self.shared.offloads_live {
            return None;
        }
        self.sdma.paced_until()
    }

    /// Current states of the four machines (for debuggers and tests).
    pub fn states(&self) -> (SdmaState, SendState, RecvState, RdmaState) {
        (self.sdma.state(), self.send.state(), self.recv.state(), self.rdma.state())
    }

    /// Work out the next deadline; true when RDMA has a timer in it, which
    /// it counts from the time of the pass (a retry while the host is
    /// behind): each pass moves it, so no pass may be skipped then.
    fn compute_deadline(&mut self) -> bool {
        // (u64::MAX: none; a timer at the end of time is none either.)
        let mut d = u64::MAX;
        let mut at = |t: u64| d = d.min(t);
        self.sdma.deadline(&self.shared, &mut at);
        self.recv.deadline(&self.shared, &mut at);
        let mut relative = false;
        self.rdma.deadline(&self.shared, |t| {
            relative = true;
            at(t)
        });
        if self.shared.offloads_live {
            if let Some(t) = self.offloads.deadline() {
                at(t);
            }
        }
        self.deadline = (d != u64::MAX).then_some(d);
        relative
    }
}

/// A packet of a type that belongs to offloads, to the one that owns it
/// (out of line: the pass's frame stays the one it has for unicast).
#[inline(never)]
fn offload_packet(
    offloads: &mut offload::Offloads,
    recv: &mut Recv,
    cx: &mut Shared,
    hw: &mut impl Hw,
    p: &offload::Packet,
    w: &mut Work,
) {
    cx.offloads_live = true;
    let mut sv = offload::Services::new(cx, hw, w);
    match offloads.packet(&mut sv, p) {
        Some(offload::Received::Done) => cx.rx_release(hw, p.buf),
        Some(offload::Received::Kept) => {}
        None => recv.drop_unowned(cx, hw, p.buf),
    }
}

#[cfg(test)]
mod tests;
