//! SDMA's timers: the retransmission and send timeouts and the ports'
//! alarms (`timers`), and the deadline they make: the sending streams'
//! timer list, kept with a view of what each stream's timers depend on
//! so the next deadline is worked out again only when one changed.

use super::*;
use crate::offload::policy::{Marks, Window};
use crate::reliability::SendWindow;
use nic_abi::event::SendStatus;
use nic_abi::stats::Stat;

impl Sdma {
    /// Retransmission and send timeouts, and the ports' alarms. A step of
    /// the machine, kept out of line (a debugger breaks here) and short.
    #[inline(never)]
    pub fn timers(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        // No stream on the timer list, no alarm: nothing can fall due.
        if self.active_tx.is_empty() && self.alarms == 0 {
            if let SdmaState::Timeout { .. } = self.state {
                self.go(cx, hw, SdmaState::Ready, Cause::Timeout);
            }
            return;
        }
        // Nothing written since the deadline was worked out, nothing due
        // by now, no alarm: the scan would find nothing either.
        let idle = !self.active_tx.is_empty() && self.timers_idle(cx, cx.now);
        if idle && self.alarms == 0 && !matches!(self.state, SdmaState::Timeout { .. }) {
            return;
        }
        self.timers_due(cx, hw, w, idle);
    }

    /// The timer scan (kept out of line: its frame is large); `idle`: the
    /// streams' timers have nothing to do (`timers_idle`), only the
    /// alarms may.
    #[inline(never)]
    fn timers_due(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work, idle: bool) {
        let now = cx.now;
        // Retransmission and send timeouts.
        let mut i = if idle { self.active_tx.len() } else { 0 };
        while i < self.active_tx.len() {
            let s = self.active_tx[i];
            // What the timers need, not a copy of the whole record.
            let live = self.txs.is_live(s);
            let v = self.timer_view(cx, s);
            if !live || (!v.busy && v.hold_until <= now) {
                if live {
                    self.txs[s].active = false;
                }
                self.active_tx.swap_remove(i);
                self.txs.list_changed();
                continue;
            }
            if !v.busy {
                // Held, with nothing to time out.
                i += 1;
                continue;
            }
            // A peer silent for the send timeout is given up on then, not
            // at the next retransmission timeout after (which backoff may
            // put far later).
            let expired = now >= v.expire_at;
            let silent = now.saturating_sub(v.acked_at) >= cx.cfg.send_timeout;
            if expired || silent {
                let st = &self.txs[s];
                let (una, remote_node) = (st.win.una(), st.remote_node);
                w.timers += 1;
                self.go(cx, hw, SdmaState::Timeout { stream: s.raw(), una }, Cause::Timeout);
                if silent {
                    cx.bump(hw, Stat::Timeouts, 1);
                    log_warn!(
                        "stream {=u16}: node {=u16} silent for the send timeout: unreachable",
                        s.raw(),
                        remote_node
                    );
                    self.abandon_stream(cx, s, Some(SendStatus::Unreachable));
                } else {
                    // Ask where the stream stands rather than resend what
                    // may be queued at a busy receiver: its answer comes
                    // after every packet sent before it (one route, in
                    // order), and names the first one really missing.
                    log_debug!("stream {=u16} to node {=u16}: timeout: poll", s.raw(), remote_node);
                    cx.push_control(&self.polls, Control::poll(s));
                    let st = &mut self.txs[s];
                    // What goes from now on is stamped with this poll's
                    // number (for a window policy that stamps).
                    Marks::poll(&mut st.marks);
                    st.polled = true;
                    Win::polled(&cx.cfg, st, now);
                    st.last_progress = now;
                    st.backoff = (st.backoff + 1).min(MAX_BACKOFF);
                }
            }
            i += 1;
        }
        // Alarms, in port order (only the ports that have one).
        let mut alarms = self.alarms;
        while alarms != 0 {
            let p = alarms.trailing_zeros() as usize;
            alarms &= alarms - 1;
            if let Some(t) = self.alarm_at[p] {
                if now >= t && cx.is_open(p) {
                    self.set_alarm(p, None);
                    cx.owe_event(p, EvRef::Alarm);
                    w.timers += 1;
                }
            }
        }
        // A rewind leaves packets to send again.
        if let SdmaState::Timeout { .. } = self.state {
            self.go(cx, hw, SdmaState::Ready, Cause::Timeout);
        }
    }

    /// Tests: every stream with packets unacknowledged or a hold still to
    /// end is on the timer list, so the NIC's next deadline covers it (a
    /// NIC with nothing else due sleeps until then).
    #[cfg(any(test, feature = "check-timers"))]
    fn check_timer_list(&self, cx: &Shared) {
        for s in self.txs.live_indices() {
            let st = &self.txs[s];
            let timed = st.outstanding() != 0 || st.hold_until > cx.now;
            assert!(
                !timed || (st.active && self.active_tx.contains(&s)),
                "stream {} to node {} has a timer to keep (una {}, next {}, high {}, hold until \
                 {} at {}) but is not on the timer list",
                s.raw(),
                st.remote_node,
                st.win.una(),
                st.win.next(),
                st.win.high(),
                st.hold_until,
                cx.now
            );
        }
    }

    /// Stream `s` has a timer to keep (packets unacknowledged, or a hold
    /// to end): on the timer list (`active_tx`) if it is not there yet.
    /// (A stream is on it at most once, so the list has room.)
    pub(crate) fn watch(&mut self, s: TxId) {
        if !self.txs[s].active {
            self.txs[s].active = true;
            let _ = self.active_tx.push(s);
            self.txs.list_changed();
        }
    }

    /// Stream `s` sends nothing for `wait` ticks; the timer list wakes
    /// the NIC when they are over.
    pub(crate) fn hold(&mut self, cx: &Shared, s: TxId, wait: u64) {
        self.txs[s].hold_until = cx.now.saturating_add(wait);
        self.watch(s);
    }

    /// Host builds: take again the timer views of the streams handed out
    /// for writing since the last look, and count the active streams'
    /// deadline stale only if one of them changed (a stream written
    /// without touching what its timers depend on, e.g. a packet sent while
    /// others are unacknowledged, leaves the deadline as it was). Its
    /// views are then those `timer_view` would take: each is taken again
    /// from the record as it is now, and a later write notes the stream
    /// again.
    #[cfg(not(target_os = "none"))]
    #[inline]
    fn settle_views(&mut self, cx: &Shared) {
        if !self.txs.touched {
            return;
        }
        self.txs.touched = false;
        for w in 0..self.txs.changed.len() {
            let mut bits = core::mem::take(&mut self.txs.changed[w]);
            while bits != 0 {
                let s = TxId::new((w * 64) as u16 + bits.trailing_zeros() as u16);
                bits &= bits - 1;
                let v = TimerView::of(&self.txs[s], cx);
                if v != self.views[s.index()] {
                    self.views[s.index()] = v;
                    self.txs.dl_stale = true;
                }
            }
        }
    }

    /// The image keeps no views: a stream handed out for writing since
    /// the last look counts the active streams' deadline stale (one flag
    /// for them all, so a pass that wrote no stream neither scans the
    /// timer list nor works the deadline out again).
    #[cfg(target_os = "none")]
    #[inline]
    fn settle_views(&mut self, _cx: &Shared) {
        if self.txs.touched {
            self.txs.touched = false;
            self.txs.dl_stale = true;
        }
    }

    /// What the timers of sending stream `s` depend on. Host builds keep
    /// it from one look to the next and take it again only after the
    /// stream changed (`TxPool` notes every change): the timer scan and
    /// the deadline read each active stream every pass, and a record on a
    /// cache line of its own per stream made those scans a large part of
    /// a pass in the simulator. The image reads the record each time.
    #[inline]
    fn timer_view(&mut self, cx: &Shared, s: TxId) -> TimerView {
        #[cfg(not(target_os = "none"))]
        {
            if !self.txs.take_changed(s) {
                return self.views[s.index()];
            }
            let v = TimerView::of(&self.txs[s], cx);
            self.views[s.index()] = v;
            v
        }
        #[cfg(target_os = "none")]
        TimerView::of(&self.txs[s], cx)
    }

    /// The active streams' timers: the earliest retransmission or send
    /// timeout of those with packets unacknowledged, and the earliest hold
    /// still to end. Kept while no stream changed and the list stayed
    /// the same (the first only depends on the streams; the second also
    /// on the time, and stays while that hold has not ended).
    #[inline]
    fn active_deadline(&mut self, cx: &Shared) -> (Option<u64>, Option<u64>) {
        self.settle_views(cx);
        if !self.txs.dl_stale && cx.now >= self.dl.at && self.dl.hold.is_none_or(|h| h > cx.now) {
            return (self.dl.busy, self.dl.hold);
        }
        let (mut busy, mut hold) = (None::<u64>, None::<u64>);
        let mut removable = false;
        for k in 0..self.active_tx.len() {
            let s = self.active_tx[k];
            let v = self.timer_view(cx, s);
            removable |= !self.txs.is_live(s) || (!v.busy && v.hold_until <= cx.now);
            if v.busy {
                let t = v.expire_at.min(v.acked_at.saturating_add(cx.cfg.send_timeout));
                busy = Some(busy.map_or(t, |b| b.min(t)));
            }
            if v.hold_until > cx.now {
                hold = Some(hold.map_or(v.hold_until, |h| h.min(v.hold_until)));
            }
        }
        self.dl = ActiveDeadline { at: cx.now, busy, hold, removable };
        self.txs.dl_stale = false;
        (busy, hold)
    }

    /// Would the timer scan at `now` find nothing to do (no stream to
    /// take off the list, none timed out)? Known when nothing changed
    /// since the active streams' deadline was worked out, no hold has
    /// ended since and no timer falls due by `now`.
    #[inline]
    fn timers_idle(&mut self, cx: &Shared, now: u64) -> bool {
        self.settle_views(cx);
        !self.txs.dl_stale
            && now >= self.dl.at
            && now < u64::MAX
            && !self.dl.removable
            && self.dl.hold.is_none_or(|h| h > now)
            && self.dl.busy.is_none_or(|b| b > now)
    }

    /// The earliest RTC tick one of SDMA's timers falls due.
    pub fn deadline(&mut self, cx: &Shared, mut at: impl FnMut(u64)) {
        #[cfg(any(test, feature = "check-timers"))]
        self.check_timer_list(cx);
        let (busy, hold) = self.active_deadline(cx);
        if let Some(t) = busy {
            at(t);
        }
        if let Some(t) = hold {
            at(t);
        }
        let mut alarms = self.alarms;
        while alarms != 0 {
            let p = alarms.trailing_zeros() as usize;
            alarms &= alarms - 1;
            if let Some(t) = self.alarm_at[p] {
                at(t);
            }
        }
        if cx.offloads_live {
            if let Some(t) = self.sched.wait() {
                at(t);
            }
            Fan::deadlines(cx, &mut at);
        }
    }
}

/// Bytes of SDMA's state that only host builds have (the timer views and
/// the changed bits): not part of the image's budget.
#[cfg(not(target_os = "none"))]
pub const HOST_ONLY_BYTES: usize =
    core::mem::size_of::<[TimerView; MAX_STREAMS]>() + MAX_STREAMS.div_ceil(64) * 8;

/// What a sending stream's timers depend on (`Sdma::timer_view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TimerView {
    /// Packets are unacknowledged.
    busy: bool,
    hold_until: u64,
    /// When the retransmission timer runs out: the last progress and
    /// the poll interval after it.
    expire_at: u64,
    acked_at: u64,
}

impl TimerView {
    #[cfg(not(target_os = "none"))]
    pub(super) const NONE: TimerView =
        TimerView { busy: false, hold_until: 0, expire_at: 0, acked_at: 0 };

    #[inline]
    fn of(st: &TxStream, cx: &Shared) -> TimerView {
        TimerView {
            busy: st.outstanding() != 0,
            hold_until: st.hold_until,
            expire_at: st.last_progress.saturating_add(st.poll_after(
                cx.cfg.rto,
                Win::on(&cx.cfg),
                cx.cfg.send_timeout,
            )),
            acked_at: st.acked_at,
        }
    }
}

/// `Sdma::active_deadline` as worked out at RTC `at`.
#[derive(Debug, Clone, Copy)]
pub(super) struct ActiveDeadline {
    pub(super) at: u64,
    pub(super) busy: Option<u64>,
    pub(super) hold: Option<u64>,
    /// A stream on the list was let go, or has nothing unacknowledged and
    /// no hold left: the timer scan takes it off.
    pub(super) removable: bool,
}
