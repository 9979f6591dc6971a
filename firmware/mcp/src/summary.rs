//! The summary of what changed that each pass reads first (the device's
//! news counters, as a NIC's interrupt-status register), and what the
//! last pass was: its kind, why it ran, whether it did work.

use crate::hw::Hw;
use crate::Mcp;
use nic_abi::regs;

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
