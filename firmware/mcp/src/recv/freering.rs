//! The audit of the receive-free ring: entries something other than
//! this firmware overwrote are put back, and buffers the engine holds but
//! never reported are posted again after a send timeout.

use super::*;

/// The longest wait between two audits of the receive-free ring that
/// found nothing amiss, in retransmission timeouts. The audit reads every
/// entry the engine has yet to take: run each timeout, it was a tenth of
/// a ping-pong's instructions.
const REPAIR_BACKOFF_MAX: u64 = 64;

impl Recv {
    /// When the free ring's audit (`Recv::reclaim`) is next due: a pass
    /// at or after it steps RECV whatever the news (it is no timer: it
    /// wakes no sleeping NIC).
    pub fn repair_at(&self) -> u64 {
        self.next_repair
    }

    /// RECV is idle. Free-ring entries that something other than this
    /// firmware overwrote are put right. And when the engine has reported
    /// every buffer it filled, yet holds buffers that are in no entry it
    /// has still to take, it skipped or misused overwritten entries: once
    /// the same buffers have been lost so for a send timeout, they are
    /// posted again, and counted as errors. (A buffer the engine is filling
    /// looks lost too until it is reported, and an engine on a loaded
    /// machine may be late by milliseconds: only a wait as long as a send
    /// timeout makes a second use of a buffer it still holds unlikely.)
    #[cold]
    #[inline(never)]
    pub(super) fn reclaim(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        let (fixed, lost) = cx.rxfree.audit(hw);
        // A clean audit doubles the wait for the next (up to
        // `REPAIR_BACKOFF_MAX` retransmission timeouts); anything amiss
        // brings it back to one timeout.
        let rto = cx.cfg.rto.max(1);
        self.repair_every = if fixed == 0 && lost == 0 {
            self.repair_every.saturating_mul(2).clamp(rto, rto.saturating_mul(REPAIR_BACKOFF_MAX))
        } else {
            rto
        };
        self.next_repair = cx.now.saturating_add(self.repair_every);
        if fixed > 0 {
            cx.bump(hw, Stat::Errors, fixed as u64);
            log_warn!("receive ring repaired: {=u32} entries", fixed);
        }
        let since = match self.lost_since {
            _ if lost == 0 => None,
            Some((t, set)) if set == lost => Some(t),
            _ => Some(cx.now),
        };
        self.lost_since = since.map(|t| (t, lost));
        let Some(t) = since else { return };
        if cx.now.saturating_sub(t) < cx.cfg.send_timeout {
            return;
        }
        self.lost_since = None;
        log_warn!("receive buffers {=u32:#x} lost by the engine: taken back", lost);
        for b in 0..map::RX_BUF_COUNT {
            if lost & (1 << b) != 0 {
                cx.rxfree.back(b);
                cx.rxfree.give(hw, b as u8);
                cx.bump(hw, Stat::Errors, 1);
            }
        }
    }
}
