//! RECV's acks and nacks: what RECV hands SDMA (acks and nacks that came
//! in), the controls it queues for SEND, the ack timers (an ack is owed
//! after the ack delay, at once when half a window is unacked), and what
//! SEND asks of it (the ack to piggyback, what a control carries).

use super::*;
use nic_abi::packet::NackCode;

impl Recv {
    /// The queue holds two messages per packet of a pass and SDMA drains
    /// it every pass: it cannot fill; should it, the loss is counted (a
    /// lost ack or nack costs the sender a timeout, nothing more).
    pub(crate) fn pass_to_sdma(&mut self, cx: &mut Shared, m: FromRecv) {
        if cx.from_recv.push_back(&self.to_sdma, m).is_err() {
            cx.count_later(Stat::ControlDrops, 1);
        }
    }

    /// Queue an ack or nack for receiving stream `r` (false when the
    /// queue is full: the loss is counted; acks are owed again by the ack
    /// timer, a lost nack costs the sender a timeout and a poll). The
    /// receive path never waits for it. A stream has one entry at most: a
    /// later ack or nack folds into the queued one ([`Control::merge`]),
    /// so the queue holds no more than the streams with news.
    pub(super) fn queue_control(
        &mut self,
        cx: &mut Shared,
        r: RxId,
        nack: Option<(u8, u32)>,
        round: u8,
    ) -> bool {
        // (A STAT or USTAT queued carries the ack too; a nack folds only
        // into an ack or nack.)
        let folds = |c: &Control| c.is_for(r) && (c.is_ack_or_nack() || nack.is_none());
        if let Some(c) = cx.controls.iter_mut(&self.controls).find(|c| folds(c)) {
            c.merge(nack, round);
            return true;
        }
        let mut c = Control::new(r, nack);
        c.round = round;
        cx.push_control(&self.controls, c)
    }

    /// Acks that fell due go to SEND.
    pub(super) fn ack_timers(&mut self, cx: &mut Shared, w: &mut Work) {
        let now = cx.now;
        let mut next = u64::MAX;
        let mut i = 0;
        while i < self.ack_list.len() {
            let r = self.ack_list[i];
            if !self.rxs.is_live(r) || !self.rxs[r].ack_pending {
                if self.rxs.is_live(r) {
                    self.rxs[r].on_ack_list = false;
                }
                self.ack_list.swap_remove(i);
                continue;
            }
            if now >= self.rxs[r].ack_due && self.queue_control(cx, r, None, 0) {
                self.rxs[r].ack_pending = false;
                self.rxs[r].on_ack_list = false;
                self.ack_list.swap_remove(i);
                w.timers += 1;
                continue;
            }
            next = next.min(self.rxs[r].ack_due);
            i += 1;
        }
        self.ack_next = next;
    }

    /// The earliest RTC tick an owed ack falls due.
    pub fn deadline(&self, cx: &Shared, mut at: impl FnMut(u64)) {
        // `ack_next`, when not 0, is the earliest owed ack's time already:
        // only the ack timers and `owe_ack` set it so, and every change
        // that could raise it (an ack gone out, a stream freed) sets 0.
        #[cfg(any(test, feature = "check-timers"))]
        if self.ack_next != 0 {
            let walked = self.walk_acks();
            assert_eq!(self.ack_next, walked, "RECV's ack_next against its ack list");
        }
        match self.ack_next {
            0 => {
                let t = self.walk_acks();
                if t != u64::MAX {
                    at(t);
                }
            }
            u64::MAX => {}
            t => at(t),
        }
        if let Some((t, _)) = self.lost_since {
            at(t.saturating_add(cx.cfg.send_timeout));
        }
    }

    /// The earliest time of an owed ack on the list (u64::MAX: none).
    /// (A stream whose ack went out meanwhile, piggybacked by SEND after
    /// RECV's part of the pass, stays on the list until the next ack
    /// check: its time is no deadline.)
    fn walk_acks(&self) -> u64 {
        let mut t = u64::MAX;
        for &r in self.ack_list.iter() {
            if self.rxs.is_live(r) && self.rxs[r].ack_pending {
                t = t.min(self.rxs[r].ack_due);
            }
        }
        t
    }

    /// SEND is about to send a data packet on the sending stream `key`:
    /// the ack it can carry for the reverse stream, which then owes none.
    pub fn piggyback_ack(&mut self, key: u32) -> Option<u32> {
        let r = self.rx_of(key)?;
        let rx = &mut self.rxs[r];
        rx.ack_pending = false;
        rx.unacked = 0;
        // (Off the list at the next pass.)
        self.ack_next = 0;
        Some(rx.win.expected())
    }

    /// SEND is about to send ack or nack `c`: what it carries, or None
    /// when it went stale (the stream is gone; a nack's packet was taken
    /// since, or the stream got its SYNC: sending it would contradict an
    /// ack that went out before it).
    pub fn control_out(&mut self, c: Control) -> Option<ControlOut> {
        let s = c.rx_stream()?;
        if !self.rxs.is_live(s) {
            return None;
        }
        let r = self.rxs[s];
        if let Some((code, seq)) = c.nack() {
            let stale = if code == NackCode::Unsynced as u8 {
                r.sync_seen.is_some()
            } else {
                seq != r.win.expected()
            };
            if stale {
                return None;
            }
        }
        let rx = &mut self.rxs[s];
        rx.ack_pending = false;
        rx.unacked = 0;
        self.ack_next = 0;
        Some(ControlOut {
            remote_node: r.remote_node,
            local_port: r.local_port,
            remote_port: r.remote_port,
            prio: r.prio,
            expected: r.win.expected(),
            report: r.key & REPORT_STREAM != 0,
            incarnation: 0,
        })
    }
}
