//! SDMA's half of reliability: acks and nacks that RECV passes on move
//! each sending stream's go-back-N window ([`crate::reliability`]);
//! rewinds, resynchronisation after a peer's reset, the no-buffer send
//! timeout, retransmission timers; and the ports' alarms.

use super::intake::complete_token;
use super::Sdma;
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Marks, Win, Window};
use crate::records::*;
use crate::reliability::{seq_le, seq_lt, SendWindow};
use crate::shared::{FromRecv, Shared};
use nic_abi::event::SendStatus;
use nic_abi::packet::NackCode;
use nic_abi::stats::Stat;

impl Sdma {
    /// Take what RECV passed on this pass: acks and nacks for the sending
    /// streams, answers to peers' gets to queue.
    #[inline]
    pub fn take_from_recv(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        if !cx.from_recv.is_empty() {
            self.take_all_from_recv(cx, hw);
        }
    }

    /// Acks, the usual news, are taken here; the rest out of line
    /// (`take_other`), so this frame stays small.
    #[inline(never)]
    fn take_all_from_recv(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        while let Some(m) = cx.from_recv.pop_front(&self.from_recv) {
            match m {
                FromRecv::Ack { key, ack } => {
                    if let Some(s) = self.stream_of(key) {
                        self.on_ack(cx, s, ack);
                    }
                }
                other => self.take_other(cx, hw, other),
            }
        }
    }

    /// What RECV passed on besides an ack: nacks, get answers, a
    /// fan-out's starts and the window policy's reports.
    #[inline(never)]
    fn take_other(&mut self, cx: &mut Shared, hw: &mut impl Hw, m: FromRecv) {
        match m {
            FromRecv::Ack { .. } => {}
            FromRecv::Nack { key, code, seq, round } => {
                if let Some(s) = self.stream_of(key) {
                    self.on_nack(cx, hw, s, code, seq, round);
                }
            }
            FromRecv::Answer { token } => self.queue_answer(cx, token),
            FromRecv::FanStart { rec } => Fan::start(self, cx, hw, rec),
            FromRecv::Stat { key, buf, ustat } => Win::report_in(self, cx, hw, key, buf, ustat),
        }
    }

    /// A get answer (an internal GetResp token RECV made) joins the stream
    /// back to the requester.
    fn queue_answer(&mut self, cx: &mut Shared, token: TokenId) {
        let t = cx.tokens[token];
        match self.find_or_make_tx(cx, t.target_node, t.port, t.target_port, t.prio) {
            Some(s) if !self.txs[s].suspended => self.append_token(cx, s, token),
            // No stream after all (RECV checked for room), or suspended:
            // the requester's get times out.
            _ => cx.tokens.free(token),
        }
    }

    /// Move stream `s`'s send cursor to sequence number `seq` (within the
    /// tokens on its list), renumbering the tokens from `base`; packets
    /// filled before are stale (the stream's epoch moves on).
    pub(crate) fn seek(&mut self, cx: &mut Shared, s: TxId, seq: u32) {
        self.txs[s].next_round();
        self.seek_to(cx, s, seq);
    }

    /// Move stream `s`'s send cursor to `seq`, leaving packets filled
    /// before good.
    pub(crate) fn seek_to(&mut self, cx: &mut Shared, s: TxId, seq: u32) {
        let mut first = self.txs[s].base;
        let mut next = self.txs[s].head;
        let mut cursor = None;
        let mut found_seq = first;
        while let Some(t) = next {
            let n = cx.tokens[t].npkts;
            cx.tokens[t].first_seq = first;
            if cursor.is_none() {
                let end = first.wrapping_add(n);
                if seq_lt(seq, end) {
                    cursor = Some(t);
                    let k = seq.wrapping_sub(first).min(n);
                    cx.tokens[t].next_pkt = k;
                    found_seq = first.wrapping_add(k);
                } else {
                    cx.tokens[t].next_pkt = n;
                    found_seq = end;
                }
            } else {
                cx.tokens[t].next_pkt = 0;
            }
            first = first.wrapping_add(n);
            next = cx.tokens[t].next;
        }
        let st = &mut self.txs[s];
        st.cursor = cursor;
        st.win.rewind(found_seq);
        // The window policy may move the cursor forward too, past
        // packets still unacknowledged (an ack that leaves nothing to
        // resend puts it back at the highest sent): they need their timer
        // even if the stream, with nothing outstanding a moment ago, left
        // the list.
        if st.outstanding() != 0 {
            self.watch(s);
        }
        if cursor.is_some() {
            self.ring_insert(s);
        }
    }

    /// A cumulative ack for stream `s`: everything before `ack` arrived.
    /// One that moves nothing (most piggybacked acks repeat the last) is
    /// let go at a look at the window, the stream not written.
    #[inline]
    pub(crate) fn on_ack(&mut self, cx: &mut Shared, s: TxId, ack: u32) {
        let win = &self.txs[s].win;
        if seq_lt(win.una(), ack) && seq_le(ack, win.high()) {
            self.on_new_ack(cx, s, ack);
        }
    }

    /// `on_ack` for an ack that moves the window on.
    #[inline(never)]
    fn on_new_ack(&mut self, cx: &mut Shared, s: TxId, ack: u32) {
        let st = &mut self.txs[s];
        let old = st.win.una();
        if !st.win.ack(ack) {
            return;
        }
        st.marks.shift(ack.wrapping_sub(old));
        {
            let st = &mut self.txs[s];
            st.rtt.acked(ack, cx.now);
            st.last_progress = cx.now;
            st.acked_at = cx.now;
            st.nobuf_since = 0;
            st.refusals = 0;
            st.backoff = 0;
            st.polled = false;
        }
        if !Win::acked(self, cx, s) && seq_lt(self.txs[s].win.next(), ack) {
            self.seek(cx, s, ack);
        }
        // Complete the tokens wholly acked.
        while let Some(t) = self.txs[s].head {
            let end = self.txs[s].base.wrapping_add(cx.tokens[t].npkts);
            if !seq_le(end, self.txs[s].win.una()) {
                break;
            }
            self.pop_head(cx, s);
            self.txs[s].base = end;
            match cx.tokens[t].kind {
                TokKind::Get => cx.tokens[t].state = TokState::AwaitGet,
                TokKind::GetResp => cx.tokens.free(t),
                _ if cx.tokens[t].is_internal() => complete_token(cx, t, SendStatus::Ok),
                _ => {
                    cx.count_later(Stat::MessagesSent, 1);
                    complete_token(cx, t, SendStatus::Ok)
                }
            }
        }
        // The head now, once the messages before it, wholly acknowledged
        // by the same ack, are done: what a fan-out keeps for its
        // acknowledged part may go.
        Fan::head_acked(self, cx, s);
    }

    /// Take stream `s`'s head token off its list: the token, if any.
    fn pop_head(&mut self, cx: &mut Shared, s: TxId) -> Option<TokenId> {
        let t = self.txs[s].head?;
        let next = cx.tokens[t].next;
        let st = &mut self.txs[s];
        st.head = next;
        if next.is_none() {
            st.tail = None;
        }
        if st.cursor == Some(t) {
            st.cursor = next;
        }
        cx.tokens[t].next = None;
        Some(t)
    }

    /// A nack for stream `s`: `seq` was refused for `code`, and the packet
    /// that drew it went out in `round` (the stream's epoch, low byte).
    pub(crate) fn on_nack(
        &mut self,
        cx: &mut Shared,
        hw: &impl Hw,
        s: TxId,
        code: NackCode,
        seq: u32,
        round: u8,
    ) {
        if code == NackCode::Unsynced {
            // The receiver has no state for the stream (its NIC was reset):
            // start again from the first unfinished message, with SYNC.
            let st = self.txs[s];
            if st.win.in_flight(seq) {
                self.resync(cx, s);
            }
            return;
        }
        // A nack drawn by a packet sent before the stream's last rewind
        // is old news: what was sent again since answers for itself, and
        // acting on it would send packets the receiver may have by then
        // (on one route, packets of a stream arrive in the order sent).
        // (The window policy may number rounds its own way.)
        let current = match Win::nack_news(self, cx, hw, s, seq, round) {
            Some(news) => news,
            None => self.txs[s].epoch as u8 == round,
        };
        // The receiver holds everything before `seq`.
        self.on_ack(cx, s, seq);
        let st = self.txs[s];
        if !current || !st.win.in_flight(seq) {
            return;
        }
        match code {
            NackCode::OutOfOrder => {
                let cause = if st.polled { RetxCause::Timeout } else { RetxCause::Gap };
                self.rewind(cx, s, seq, cause);
            }
            NackCode::NoBuffer | NackCode::Busy => self.on_refusal(cx, s, code, seq),
            NackCode::PortClosed | NackCode::RemoteAccess => {
                let status = if code == NackCode::PortClosed {
                    SendStatus::TargetPortClosed
                } else {
                    SendStatus::RemoteAccess
                };
                // The refused packet belongs to the head message (everything
                // before it is acked): that message fails, even when the port
                // closed in its middle; the receiver expects `seq` next, so the
                // following messages start there.
                let base = self.txs[s].base;
                if let Some(t) = self.txs[s].head {
                    if seq_lt(seq, base.wrapping_add(cx.tokens[t].npkts)) {
                        self.pop_head(cx, s);
                        complete_token(cx, t, status);
                        self.txs[s].base = seq;
                    }
                }
                self.rewind(cx, s, seq, RetxCause::Refused);
            }
            NackCode::Unsynced => {}
        }
    }

    /// A packet refused for want of a buffer (`NoBuffer`) or because the
    /// target is at work on it (`Busy`): the window policy's answer, or
    /// a rewind; the stream holds for the wait, and a refusal that lasts
    /// a send timeout fails the message.
    fn on_refusal(&mut self, cx: &mut Shared, s: TxId, code: NackCode, seq: u32) {
        let wait = if let Some(wait) = Win::refused(self, cx, s, seq, code) {
            wait
        } else {
            self.rewind(cx, s, seq, RetxCause::NoBuffer);
            if code == NackCode::NoBuffer {
                // The whole window goes again, backed off while
                // the refusals go on (a `Busy` target is at work
                // on the packet, a remote range's check going on
                // only as the sender comes again: it is not).
                self.txs[s].refused(cx.cfg.nobuf_retry, cx.cfg.send_timeout)
            } else {
                cx.cfg.nobuf_retry
            }
        };
        self.hold(cx, s, wait);
        let st = &mut self.txs[s];
        if code == NackCode::NoBuffer {
            if st.nobuf_since == 0 {
                st.nobuf_since = cx.now.max(1);
            } else if cx.now.saturating_sub(st.nobuf_since) >= cx.cfg.send_timeout {
                self.send_timed_out(cx, s, seq);
            }
        }
    }

    /// Resend from the first unfinished message, with a new SYNC.
    fn resync(&mut self, cx: &mut Shared, s: TxId) {
        log_info!(
            "stream {=u16}: node {=u16} lost it (reset?): resynchronising",
            s.raw(),
            self.txs[s].remote_node
        );
        let st = &mut self.txs[s];
        st.sync_gen = st.sync_gen.wrapping_add(1);
        let Some(head) = st.head else {
            st.sync_next = true;
            return;
        };
        cx.tokens[head].sync = true;
        let base = self.txs[s].base;
        // The old receiver may have acknowledged packets of the head
        // message: the new one has none of them, so the window goes back
        // to its start (a rewind below `una` would leave no room to send
        // and the stream would retransmit from `una` without SYNC forever).
        self.txs[s].win.resend_from(base);
        self.rewind(cx, s, base, RetxCause::Resync);
    }

    fn rewind(&mut self, cx: &mut Shared, s: TxId, seq: u32, cause: RetxCause) {
        log_debug!(
            "stream {=u16} to node {=u16}: back to {=u32}: {}",
            s.raw(),
            self.txs[s].remote_node,
            seq,
            cause
        );
        self.seek(cx, s, seq);
        let st = &mut self.txs[s];
        // Everything from `seq` goes again (whatever the window policy,
        // when the receiver lost, refused or could not keep what it had):
        // marked to resend, so the cursor comes back for each after the
        // first.
        let (una, high) = (st.win.una(), st.win.high());
        st.marks.rewound(una, high, seq);
        st.rtt.rewound(seq);
        st.retx_cause = cause;
        st.polled = false;
        st.last_progress = cx.now;
    }

    /// The target refused `seq` (a message start) for want of a buffer for
    /// the whole send timeout: that send times out, the rest queued on the
    /// stream are dropped, and the stream stays suspended until Resume.
    fn send_timed_out(&mut self, cx: &mut Shared, s: TxId, seq: u32) {
        cx.count_later(Stat::Timeouts, 1);
        if self.txs[s].head.is_some_and(|head| cx.tokens[head].is_internal()) {
            // The NIC's own send (a relay's to a child): the host was not
            // told, so it would never resume the stream, and its own sends
            // to that port would be dropped from now on. That send alone
            // times out (its fan-out counts the child not reached); the
            // rest go on, with SYNC (the receiver may hold packets after
            // `seq` of the old numbering).
            log_warn!(
                "stream {=u16} to node {=u16}: no buffer there for a relayed send",
                s.raw(),
                self.txs[s].remote_node
            );
            self.end_head(cx, s, SendStatus::TimedOut);
            return;
        }
        log_warn!(
            "stream {=u16} to node {=u16}: no buffer there for the send timeout: suspended",
            s.raw(),
            self.txs[s].remote_node
        );
        let mut first = true;
        while let Some(t) = self.pop_head(cx, s) {
            let status = if first { SendStatus::TimedOut } else { SendStatus::Dropped };
            first = false;
            complete_token(cx, t, status);
        }
        // The receiver expects `seq` still: start again there.
        let st = &mut self.txs[s];
        st.base = seq;
        st.win.restart(seq);
        st.cursor = None;
        st.suspended = true;
        st.nobuf_since = 0;
        st.marks.clear();
        st.next_round();
        self.ring_remove(s);
    }

    /// Stream `s`'s message at the cursor, `t`, can go no further (a
    /// fan-out's relayed message whose record ended without it): it alone is
    /// dropped, not the messages queued behind it on the same stream
    /// (the host's own sends to that port among them). Packets of it may
    /// be on their way or held at the receiver, so once everything before
    /// it is acknowledged (it is the head) it leaves the stream and the
    /// rest start again with SYNC, which makes the receiver let go of its
    /// part of it. Until then the stream is held for a retry interval at
    /// a time (the messages before it may still need resending).
    pub(crate) fn cut_message(&mut self, cx: &mut Shared, s: TxId, t: TokenId) {
        if self.txs[s].head != Some(t) {
            self.hold(cx, s, cx.cfg.nobuf_retry);
            return;
        }
        log_debug!(
            "stream {=u16} to node {=u16}: head message cut short: restarting",
            s.raw(),
            self.txs[s].remote_node
        );
        self.end_head(cx, s, SendStatus::Dropped);
    }

    /// Stream `s`'s head message ends with `status`, alone: the rest start
    /// again (`restart_after_head`).
    fn end_head(&mut self, cx: &mut Shared, s: TxId, status: SendStatus) {
        if let Some(t) = self.pop_head(cx, s) {
            complete_token(cx, t, status);
        }
        self.restart_after_head(cx, s);
    }

    /// The stream goes on from a fresh sequence number with SYNC, its
    /// queued messages (all unsent now) first. (The next message starts
    /// afresh: its first timeout is not the last one's, doubled.)
    fn restart_after_head(&mut self, cx: &mut Shared, s: TxId) {
        let st = &mut self.txs[s];
        st.win.abandon();
        st.marks.clear();
        st.base = st.win.high();
        st.sync_next = true;
        st.sync_gen = st.sync_gen.wrapping_add(1);
        st.nobuf_since = 0;
        st.backoff = 0;
        st.last_progress = cx.now;
        if st.head.is_none() {
            st.cursor = None;
            st.next_round();
            self.ring_remove(s);
        } else {
            let base = st.base;
            self.seek(cx, s, base);
        }
    }

    /// Give up every token of stream `s` (with `status` events, or silently
    /// when the port closed). The receiver's state is unknown, so the next
    /// message carries SYNC with a fresh sequence number.
    pub(crate) fn abandon_stream(&mut self, cx: &mut Shared, s: TxId, status: Option<SendStatus>) {
        while let Some(t) = self.pop_head(cx, s) {
            match status {
                Some(st) => complete_token(cx, t, st),
                // The port closed: no event; the NIC's own tokens still
                // count as failed where a fan-out waits for them.
                None if cx.tokens[t].is_internal() => complete_token(cx, t, SendStatus::Dropped),
                None => cx.tokens.free(t),
            }
        }
        self.restart_after_head(cx, s);
    }
}
