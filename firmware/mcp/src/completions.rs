//! The engines' completions: the host-DMA commands the engine finished,
//! each handed to the machine that posted it, and the pass whose only
//! news they are (`Mcp::poll` takes it before a whole pass).

use crate::hw::Hw;
use crate::records::HdmaAction;
#[cfg(any(test, feature = "check-gating"))]
use crate::GATING_CHECKED;
use crate::{bit, offload, shared, Mcp, Work};

/// What the host-DMA completions of a pass gave the machines
/// ([`Mcp::completions`]), least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Gave {
    /// Nothing a machine waits on: event writes done (their staging
    /// slots free; only RDMA's flush of owed events waits for those).
    Nothing,
    /// A payload copied or a translation read: what the waiting machine
    /// needs is in its state now.
    Moved,
    /// A transmit buffer filled: SEND has it.
    Filled,
    /// An offload's completion: a whole pass.
    Other,
}

impl Mcp {
    /// A pass whose only news is the engines' completions (the most
    /// common after a busy pass: the packet left, the event was written,
    /// the payload is in its transmit buffer). The completions are
    /// taken; then, when nothing else waits (no queue between machines,
    /// nothing left in a ring, no fill to go on), only the parts they
    /// gave work run: SEND for a filled transmit buffer, RDMA's flush
    /// for owed events (with RDMA's and SDMA's steps before them, which
    /// find no copy and no stream to fill and settle what they wait for
    /// as a whole pass would). Completions that gave other work (a
    /// translation read, an offload's) need a whole pass. False: a whole
    /// pass is needed (it finds the completions taken).
    pub(crate) fn completions_pass(
        &mut self,
        hw: &mut impl Hw,
        now: u64,
        news: u32,
        w: &mut Work,
    ) -> bool {
        self.shared.now = now;
        let gave = if news & bit::HDMA != 0 { self.completions(hw) } else { Gave::Nothing };
        if gave == Gave::Other {
            return false;
        }
        let filled = gave == Gave::Filled;
        if news & bit::TXDMA != 0 {
            self.send.completions(&mut self.shared, hw);
        } else if gave == Gave::Nothing
            && self.shared.events_owed == 0
            && !self.sdma.leftover(&self.shared)
        {
            // Only commands with no action finished (events written, a
            // copy's first pieces): they free host-DMA ring slots, which a
            // fill that stopped for room may take now. Else what the last pass left (nothing, or this
            // would be a whole pass) is all there is.
            self.busy = false;
            self.checked_gating(hw, now);
            return true;
        }
        let cx = &self.shared;
        if !self.rdma.waits_for_completions(cx)
            || self.queued_besides_ready()
            || (!filled && !cx.tx_ready.is_empty())
            || (filled && !self.sdma.fills_nothing(cx))
            || self.recv.leftover()
            || self.sdma.leftover(cx)
        {
            return false;
        }
        if filled || cx.events_owed != 0 {
            self.light_pass(hw, w);
        } else {
            // Nothing ran that counts work: `w` is still zero.
            self.busy = false;
        }
        shared::Stats::flush(hw, &mut self.shared.later);
        self.checked_gating(hw, now);
        true
    }

    /// Feature `check-gating`: what the parts a completions pass left
    /// undone would have found (nothing, or the pass was wrong to skip
    /// them). Otherwise nothing.
    #[inline(always)]
    fn checked_gating(&mut self, _hw: &mut impl Hw, _now: u64) {
        #[cfg(any(test, feature = "check-gating"))]
        if !self.pending && GATING_CHECKED.with(|c| c.get()) {
            let busy = self.busy;
            self.check_gating(_hw, _now);
            self.busy = busy;
        }
    }

    /// The parts a filled buffer or owed events give work, as a whole
    /// pass runs them ([`Mcp::step_machines`], without the offloads'
    /// timers, none due, or the host's descriptors, no news of them):
    /// each finds nothing to do but what the completions gave. Out of
    /// line: a completions pass that gave none saves no register for it.
    #[inline(never)]
    fn light_pass(&mut self, hw: &mut impl Hw, w: &mut Work) {
        self.step_machines(hw, false, false, w);
    }

    /// Host-DMA commands the engine finished, in order: each completion
    /// goes to the machine that posted it. What they gave the machines
    /// beyond what the machines' own state shows: a filled buffer for
    /// SEND, an offload's completion; a payload copied, an event written
    /// or a translation read leave what the waiting machine needs in its
    /// state.
    pub(crate) fn completions(&mut self, hw: &mut impl Hw) -> Gave {
        let cx = &mut self.shared;
        let mut gave = Gave::Nothing;
        for _ in 0..cx.hdma.finished(hw) {
            match cx.hdma.complete_one() {
                HdmaAction::Nothing => {}
                HdmaAction::RxDone(b) => {
                    self.rdma.copied(cx, hw, b);
                    gave = gave.max(Gave::Moved);
                }
                HdmaAction::PtLine(i) => {
                    cx.pt_line_read(hw, i);
                    gave = gave.max(Gave::Moved);
                }
                HdmaAction::TxFilled(b) => {
                    self.sdma.filled(cx, hw, b);
                    gave = gave.max(Gave::Filled);
                }
                HdmaAction::Offload(id, tag) => {
                    cx.offloads_live = true;
                    let mut w = Work::default();
                    let mut sv = offload::Services::new(cx, hw, &mut w);
                    self.offloads.completion(&mut sv, id, tag);
                    gave = Gave::Other;
                }
            }
        }
        gave
    }
}
