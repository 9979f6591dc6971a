//! IDT rate control, a scheduler policy (docs/rate-control.md): when a
//! flow (a sending stream with an entry in the flow table) has an
//! inter-packet dispatch time, SDMA's choice of the next stream to send
//! from is no longer GM's rotation but the sendable stream with the
//! smallest next dispatch time (NDT), dispatched only once it is due.
//! The machines reach it only through the hooks of
//! [`Scheduler`] (`offload::policy::Sched`).
//!
//! - `logic`: the pure part (a flow's pacing clock, the choice), tested
//!   on the spec's worked example and proportionality.
//! - `sched`: SDMA's side (the flow table read again when the host bumps
//!   `FLOW_GEN` or a stream is set up, the choice among the rings, each
//!   dispatch's accounting and trace).
//!
//! Owns: SRAM `FLOWS` and `DISPATCH_TRACE`, each sending stream's `pace`,
//! SDMA's `sched`. May touch: SDMA's sending streams and connection
//! rings, through the hooks.

mod logic;
mod sched;

pub use logic::*;

use crate::hw::Hw;
use crate::offload::policy::{Pacing, Scheduler};
use crate::records::TxId;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;

/// What rate control keeps beside each sending stream: its pacing clock
/// ([`Pace`]'s two words, kept flat so the record packs) and its
/// flow-table entry (its index, if it has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPace {
    pub idt: u32,
    pub ndt: u64,
    pub flow: Option<u16>,
}

impl StreamPace {
    fn with_clock(&mut self, f: impl FnOnce(&mut Pace)) {
        let mut p = Pace { idt: self.idt, ndt: self.ndt };
        f(&mut p);
        self.ndt = p.ndt;
    }

    /// One packet of the flow was dispatched.
    #[inline(always)]
    pub fn dispatched(&mut self) {
        self.with_clock(Pace::dispatched)
    }
}

impl Pacing for StreamPace {
    const NEW: StreamPace = StreamPace { idt: 0, ndt: 0, flow: None };

    /// The first sendable token of the flow: NDT = max(NDT, RTC).
    #[inline(always)]
    fn wake(&mut self, now: u64) {
        self.with_clock(|p| p.wake(now))
    }

    /// No flow entry and no rate of its own.
    #[inline(always)]
    fn unpaced(&self) -> bool {
        self.flow.is_none() && self.idt == 0
    }
}

/// Rate control's state in SDMA.
pub struct Rate {
    /// Streams with a non-zero IDT: with none, the rotation chooses.
    regulated: u16,
    /// The flow-table generation (`FLOW_GEN`) last read.
    gen: u32,
    /// When the next regulated stream may dispatch (RTC tick), if one
    /// waits for its NDT.
    wait: Option<u64>,
    /// `DISPATCH_TRACE_ENABLE` as this pass read it, and the trace's
    /// producer index.
    trace: bool,
    trace_prod: u32,
    /// A stream was set up since the flow table was last read.
    pending: bool,
    /// Valid flow-table entries at the last read: with none, a new stream
    /// has no flow and the table is not searched for it.
    entries: u16,
}

impl Scheduler for Rate {
    type Pace = StreamPace;
    const NEW: Rate = Rate {
        regulated: 0,
        gen: 0,
        wait: None,
        trace: false,
        trace_prod: 0,
        pending: false,
        entries: 0,
    };

    fn init(sdma: &mut Sdma, cx: &Shared, hw: &mut impl Hw) {
        sdma.sched.gen = hw.reg(nic_abi::regs::FLOW_GEN);
        sdma.reload_flows(cx, hw, &mut Work::default());
        sdma.sched.trace_prod = hw.reg(nic_abi::regs::DISPATCH_TRACE_PROD);
    }

    #[inline(always)]
    fn begin_pass(sdma: &mut Sdma, cx: &Shared, hw: &mut impl Hw, w: &mut Work) {
        sdma.sched.trace = hw.reg(nic_abi::regs::DISPATCH_TRACE_ENABLE) != 0;
        let gen = hw.reg(nic_abi::regs::FLOW_GEN);
        if gen != sdma.sched.gen {
            sdma.sched.gen = gen;
            sdma.reload_flows(cx, hw, w);
        }
    }

    #[inline(always)]
    fn stream_made(&mut self) {
        // Its flow, if the table has any (rate control unused: no search).
        self.pending |= self.entries > 0;
    }

    #[inline(always)]
    fn fill_start(sdma: &mut Sdma, cx: &Shared, hw: &mut impl Hw, w: &mut Work) {
        if sdma.sched.pending {
            sdma.reload_flows(cx, hw, w);
        }
        sdma.sched.wait = None;
    }

    #[inline(always)]
    fn may_pick(&self) -> bool {
        self.regulated != 0 || self.pending
    }

    /// Besides streams to pace: flow entries whose counters a dispatch
    /// moves, and the dispatch trace.
    #[inline(always)]
    fn live(&self) -> bool {
        self.may_pick() || self.wait.is_some() || self.entries > 0 || self.trace
    }

    #[inline(always)]
    fn pick(sdma: &mut Sdma, cx: &Shared, w: &mut Work) -> Option<Option<TxId>> {
        if sdma.sched.regulated == 0 {
            return None;
        }
        Some(sdma.pick_by_ndt(cx, w))
    }

    #[inline(always)]
    fn dispatched(
        sdma: &mut Sdma,
        cx: &Shared,
        hw: &mut impl Hw,
        s: TxId,
        bytes: u32,
        w: &mut Work,
    ) {
        // A stream with no rate (no flow entry, no IDT of its own) keeps
        // no clock: nothing to account but the dispatch trace.
        if !sdma.txs.is_live(s) {
            return;
        }
        if !sdma.txs[s].pace.unpaced() || sdma.sched.trace {
            sdma.account(cx, hw, s, bytes, w)
        }
    }

    #[inline(always)]
    fn wait(&self) -> Option<u64> {
        self.wait
    }
}
