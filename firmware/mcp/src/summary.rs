//! The summary of what changed that each pass reads first (the device's
//! news counters, as a NIC's interrupt-status register); whether the news
//! gives a machine work, or the pass ends there (quiet); and what the
//! last pass was: its kind, why it ran, whether it did work.

use crate::hw::Hw;
#[cfg(any(test, feature = "check-gating"))]
use crate::GATING_CHECKED;
use crate::{offload, Mcp, Work};
use nic_abi::{map, regs};

/// What a pass of [`Mcp::poll`] was, by how much of the MCP it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum PassKind {
    /// No news, no timer due, nothing left by the last pass: it read the
    /// summary of what changed and stopped there (or the MCP is halted).
    /// Completions that give no machine work are no news: the transmit
    /// buffers send completions free are taken back, and the receive
    /// buffers copied out given back, at the next pass with other news;
    /// events written are taken at once (`Mcp::no_work_in`).
    #[default]
    Quiet = 0,
    /// Its only news was the engines' completions, and it ran only what
    /// they gave work ([`Mcp::poll`]).
    Completions = 1,
    /// It stepped the machines.
    Whole = 2,
}

/// [`Mcp::pass_cause`]'s bit for work the last pass left (the bits
/// below it are the news and the timer).
pub const CAUSE_PENDING_SHIFT: u32 = 6;

/// The summary of what changed, as the device keeps it (a NIC's
/// interrupt-status register): counters it moves at every host-DMA
/// completion, send-DMA completion, arrival, host write the firmware
/// reads (`HOST_WRITES`: a doorbell, a send ring's producer, an event
/// queue's consumer, a page table, a trace switch, the flow table) and
/// port open or close (`PORT_NEWS`). A pass compares them with what the
/// last one saw: bit i of its news is counter i moved.
pub const NEWS: [regs::Reg<u32>; 5] =
    [regs::HDMA_DONE, regs::TXDMA_DONE, regs::RXDONE_PROD, regs::HOST_WRITES, regs::PORT_NEWS];

/// The bits of a pass's news: which counters of [`NEWS`] moved.
pub(crate) mod bit {
    pub const HDMA: u32 = 1 << 0;
    pub const TXDMA: u32 = 1 << 1;
    pub const RX: u32 = 1 << 2;
    pub const HOST: u32 = 1 << 3;
    pub const PORTS: u32 = 1 << 4;
    /// Not a counter: the next timer fell due.
    pub const TIMER_SHIFT: u32 = 5;
    /// Every bit: what a pass that must look at everything is given.
    #[cfg(any(test, feature = "check-gating"))]
    pub const ALL: u32 = (1 << (TIMER_SHIFT + 1)) - 1;
}

impl Mcp {
    /// Did the last pass leave nothing behind, with the receive ring's
    /// audit not due? Then only news gives a machine work.
    #[inline(always)]
    pub(crate) fn nothing_left(&self, now: u64) -> bool {
        !self.pending && now < self.recv.repair_at()
    }

    /// A pass ends at the summary: it did nothing. (Feature
    /// `check-gating`, and this crate's tests: it runs whole instead, and
    /// must find nothing.)
    #[inline(always)]
    pub(crate) fn end_quiet(&mut self, _hw: &mut impl Hw, _now: u64, _w: &mut Work) {
        #[cfg(any(test, feature = "check-gating"))]
        if GATING_CHECKED.with(|c| c.get()) {
            *_w = self.check_gating(_hw, _now);
            return;
        }
        self.busy = false;
    }

    /// Is news of the engines' completions all there is, and does it give
    /// no machine work? Then it is left for the next pass with other news
    /// (`owed`), or taken if that costs less. Packets that left, when no
    /// machine waits for transmit buffers: their buffers come back then
    /// (SEND's state shows them in flight till then). Host-DMA commands
    /// no machine waits for, when neither owed events, a fill nor a live
    /// offload wait for the ring room they free: events written are
    /// taken; receive buffers copied out go back to the engine then,
    /// while it has half its buffers or more (the next packet's arrival
    /// is news, and a burst finds room).
    #[inline(always)]
    pub(crate) fn no_work_in(&mut self, hw: &mut impl Hw, news: u32) -> bool {
        if news & bit::TXDMA != 0 && self.wants_tx_bufs() {
            return false;
        }
        if news & bit::HDMA != 0 {
            let cx = &self.shared;
            if !cx.hdma.none_waited()
                || cx.events_owed != 0
                || self.sdma.waits_for_room()
                || cx.offloads_live
            {
                return false;
            }
            if cx.hdma.none_acted() {
                self.shared.hdma.take_inactive(hw);
            } else {
                let engine = cx.rxfree.out();
                if engine.count_ones() < map::RX_BUF_COUNT / 2 {
                    return false;
                }
                self.owed |= bit::HDMA;
            }
        }
        self.owed |= news & bit::TXDMA;
        true
    }

    /// Would transmit buffers coming free give a machine work? SDMA's
    /// fill or its scheduler policy, or an offload's packet for SEND.
    /// (SEND's acks and filled buffers are work left: no pass is quiet
    /// while they wait.)
    fn wants_tx_bufs(&self) -> bool {
        let cx = &self.shared;
        self.sdma.waits_for_tx_bufs(cx)
            || (offload::Offloads::ANY && cx.offloads_live && !cx.offload.tx.is_empty())
    }

    /// What changed since the last pass: a bit per counter of [`NEWS`]
    /// that moved (and the counters taken as seen). The registers are
    /// read together: in the image, a load each and one fence.
    /// A quiet pass compares their sum with the last one's, and no more.
    #[inline(always)]
    pub(crate) fn news(&mut self, hw: &impl Hw) -> u32 {
        let c = hw.regs(NEWS);
        let sum = c[0].wrapping_add(c[1]).wrapping_add(c[2]).wrapping_add(c[3]).wrapping_add(c[4]);
        if sum == self.seen_sum {
            return 0;
        }
        self.seen_sum = sum;
        let s = self.seen;
        self.seen = c;
        // Spelled out: the loop over both arrays was not unrolled.
        (c[0] != s[0]) as u32
            | ((c[1] != s[1]) as u32) << 1
            | ((c[2] != s[2]) as u32) << 2
            | ((c[3] != s[3]) as u32) << 3
            | ((c[4] != s[4]) as u32) << 4
    }

    /// After a pass that took news: what it took past the summary it
    /// read first (packets stored, commands finished while it ran) is no
    /// news for the next pass. A counter is taken as seen up to where the
    /// machine that reads it got (RECV's last look at the receive ring,
    /// with what it left there `Recv::leftover`; the completions taken),
    /// never back: a pass that only found what an earlier one took is
    /// quiet, not whole.
    #[inline(always)]
    pub(crate) fn mark_taken(&mut self, rx_looked: bool) {
        let taken = [
            (0, Some(self.shared.hdma.done())),
            (1, Some(self.send.done())),
            (2, rx_looked.then(|| self.recv.seen_prod())),
        ];
        for (i, v) in taken {
            let Some(v) = v else { continue };
            let old = self.seen[i];
            let ahead = v.wrapping_sub(old);
            if (ahead as i32) > 0 {
                self.seen[i] = v;
                self.seen_sum = self.seen_sum.wrapping_add(ahead);
            }
        }
    }

    /// What the last [`Mcp::poll`] was.
    pub fn pass_kind(&self) -> PassKind {
        self.kind
    }

    /// Why the last [`Mcp::poll`] ran: bit i for counter i of [`NEWS`]
    /// that moved, bit 5 for a timer that fell due, bit 6
    /// ([`CAUSE_PENDING_SHIFT`]) for work the pass before left. For a
    /// quiet pass, the engines' completions it took or left for later
    /// (none: 0, the summary read and nothing more). A measuring build
    /// counts passes by it (`cargo xtask bench --firmware` prints them),
    /// to show which news costs whole passes.
    pub fn pass_cause(&self) -> u32 {
        u32::from(self.cause)
    }

    /// Did the last [`Mcp::poll`] do work? (`!work.is_idle()`, worked out
    /// once by the pass.)
    pub fn busy(&self) -> bool {
        self.busy
    }
}
