//! SDMA's part of multicast (the module above says how a multicast
//! goes; the descriptor is `intake`'s): the send tokens to children, the
//! reports children send back, and finishing a record: its report to the
//! parent, or at the root the one completion event.

use super::{self as mcast, child};
use crate::hw::Hw;
use crate::records::*;
use crate::sdma::intake::complete_token;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::event::SendStatus;
use nic_abi::stats::Stat;

impl Sdma {
    /// A send token to child `i` of record `r`, on its stream; false if
    /// no token or stream is free now.
    fn start_child(&mut self, cx: &mut Shared, hw: &impl Hw, r: McastId, i: u16) -> bool {
        let rec = cx.mcasts[r];
        let (node, subtree) = child(hw, cx, r, i);
        let key = stream_key(node, rec.port, rec.port, rec.prio);
        if !cx.mcast_tokens_free(1, TokKind::McastFwd) || !self.stream_room(cx, key, node) {
            return false;
        }
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::McastFwd;
        t.port = rec.port;
        t.prio = rec.prio;
        t.target_node = node;
        t.target_port = rec.port;
        t.size_class = rec.size_class;
        t.local = rec.local;
        t.len = rec.len;
        t.npkts = rec.npkts;
        t.remote = rec.tag.remote();
        t.cookie = r.raw() as u32;
        t.tag = subtree as u64;
        t.further = i > 0;
        let s = self.find_or_make_tx(cx, node, rec.port, rec.port, rec.prio);
        let (Some(s), Some(k)) = (s, cx.tokens.alloc(t)) else { return false };
        // Relays track each child; a send from host memory only its last.
        let slot = if rec.source == McastSource::RxBufs { i as usize } else { 0 };
        if slot < RELAY_CHILDREN {
            cx.mcasts[r].kids[slot] = Some(k);
        }
        cx.mcasts[r].started += 1;
        if self.txs[s].suspended {
            complete_token(cx, k, SendStatus::Dropped);
        } else {
            self.append_token(cx, s, k);
        }
        true
    }

    /// Has record `r`'s last started child (from host memory) sent all
    /// its packets (or ended)?
    fn last_child_sent(&self, cx: &Shared, r: McastId) -> bool {
        let rec = &cx.mcasts[r];
        if rec.started == 0 {
            return true;
        }
        let Some(t) = rec.kids[0] else { return true };
        !cx.tokens.is_live(t)
            || cx.tokens[t].kind != TokKind::McastFwd
            || cx.tokens[t].cookie != r.raw() as u32
            || cx.tokens[t].next_pkt >= cx.tokens[t].npkts
    }

    /// RECV took the first packet of a message this NIC relays out of its
    /// receive buffers: every child's send token now (RECV made sure
    /// there are enough).
    pub(crate) fn mcast_start(&mut self, cx: &mut Shared, hw: &impl Hw, r: McastId) {
        if !cx.mcasts.is_live(r) {
            return;
        }
        for i in 0..cx.mcasts[r].nchildren {
            if !self.start_child(cx, hw, r, i) {
                // Counted as not reached: the record finishes without it.
                cx.mcasts[r].done += 1;
                cx.mcasts[r].started += 1;
                if (i as usize) < RELAY_CHILDREN {
                    cx.mcasts[r].kid_acked[i as usize] = mcast::KID_DONE;
                }
            }
        }
    }

    /// Would [`Sdma::mcast_step`] act now: a failed child to name, a
    /// child to start, relayed buffers to give back, a record to finish
    /// (its end time is a deadline of its own)? Each record's conditions
    /// as the step tests them, without acting.
    #[inline(never)]
    pub(crate) fn mcast_step_due(&self, cx: &Shared) -> bool {
        if !cx.lost_pending.is_empty() {
            return true;
        }
        cx.mcasts.live_indices().any(|r| {
            self.next_child_due(cx, r)
                || mcast::acked_to_release(cx, r)
                || complete(&cx.mcasts[r])
                || cx.now >= mcast::ends_at(cx, r)
        })
    }

    /// Is record `r`'s next child (from host memory) due to start? From
    /// host memory, children go one after another, deepest subtree
    /// first: the next starts once the last has sent every packet
    /// (relays' packets, from receive buffers, interleave).
    fn next_child_due(&self, cx: &Shared, r: McastId) -> bool {
        let rec = &cx.mcasts[r];
        rec.source == McastSource::Host
            && rec.list != ChildList::Awaiting
            && rec.started < rec.nchildren
            && self.last_child_sent(cx, r)
    }

    /// The multicast records' step: children to start, buffers to give
    /// back, records to finish. Records are taken group by group in mseq
    /// order, not in slot order: a slot freed late is taken early, so two
    /// multicasts of a group taken from the ring in one pass may sit in
    /// their slots in reverse order, and the children of each must get
    /// them on their streams in the order they were posted.
    /// (Out of line: inlined into SDMA's step, its frame made every
    /// step save and restore a dozen registers, multicast or not.)
    #[inline(never)]
    pub(crate) fn mcast_step(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        let mut live: heapless::Vec<McastId, { nic_abi::map::MCAST_LISTS_LEN as usize }> =
            cx.mcasts.live_indices().collect();
        let before = |a: McastId, b: McastId| {
            let (x, y) = (cx.mcasts[a].tag, cx.mcasts[b].tag);
            x.group < y.group || (x.group == y.group && (y.mseq.wrapping_sub(x.mseq) as i32) > 0)
        };
        for i in 1..live.len() {
            let mut j = i;
            while j > 0 && before(live[j], live[j - 1]) {
                live.swap(j, j - 1);
                j -= 1;
            }
        }
        mcast::name_failed(cx, hw);
        // Leaves' reports, in delivery order.
        while let Some(to) = cx.leaf_reports.front().copied() {
            if !self.report(cx, &to, (1, 0), None) {
                break;
            }
            cx.leaf_reports.pop_front();
        }
        for r in live {
            if self.next_child_due(cx, r) {
                self.start_child(cx, hw, r, cx.mcasts[r].started);
            }
            mcast::release_acked(cx, hw, r);
            let complete = complete(&cx.mcasts[r]);
            if complete || cx.now >= mcast::ends_at(cx, r) {
                w.timers += (!complete) as u32;
                self.mcast_finish(cx, hw, r);
            }
        }
    }

    /// Send a report to `to.parent` on the report stream: a subtree of
    /// `subtree` members has the multicast but for `unreached`, and the
    /// lost-heads list of record `rec` (if any) names their heads. False
    /// when no token or stream is free now.
    fn report(
        &mut self,
        cx: &mut Shared,
        to: &ReportTo,
        (subtree, unreached): (u16, u16),
        rec: Option<McastId>,
    ) -> bool {
        let key = stream_key(to.parent, to.port, to.port, to.prio) | REPORT_STREAM;
        if !cx.mcast_tokens_free(1, TokKind::Report) || !self.stream_room(cx, key, to.parent) {
            return false;
        }
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::Report;
        t.port = to.port;
        t.prio = to.prio;
        t.target_node = to.parent;
        t.target_port = to.port;
        t.remote = to.remote;
        t.cookie = unreached as u32;
        t.tag = subtree as u64;
        t.local = list_raw(None) as u64;
        t.npkts = 1;
        let s = self.find_or_make_stream(cx, key, to.parent, to.port, to.port, to.prio);
        let (Some(s), Some(k)) = (s, cx.tokens.alloc(t)) else { return false };
        if let Some(r) = rec {
            cx.tokens[k].local = list_raw(mcast::hand_list(cx, r, k)) as u64;
        }
        let st = &mut self.txs[s];
        if st.head.is_none() && st.outstanding() == 0 && !st.sync_next {
            // Every earlier report was acknowledged: this one (re)starts
            // the stream. A root with more children than its stream table
            // holds lets report streams go (RECV's `evict_rx`); with the
            // SYNC it takes the report at once instead of asking for it
            // again (Unsynced).
            st.sync_next = true;
            st.sync_gen = st.sync_gen.wrapping_add(1);
        }
        cx.count_later(Stat::McastReports, 1);
        if self.txs[s].suspended {
            mcast::drop_list(cx, k);
            cx.tokens.free(k);
        } else {
            self.append_token(cx, s, k);
        }
        true
    }

    /// Record `r` is done (or out of time): report to the parent, or at
    /// the root complete the descriptor; the record goes.
    fn mcast_finish(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: McastId) {
        mcast::name_failed(cx, hw);
        mcast::name_silent(cx, hw, r);
        let rec = cx.mcasts[r];
        let below = rec.subtree.saturating_sub(1);
        let unreached = below - rec.reached.min(below);
        if let Some(parent) = rec.parent {
            let to = ReportTo { remote: rec.tag.remote(), parent, port: rec.port, prio: rec.prio };
            if !self.report(cx, &to, (rec.subtree, unreached), Some(r)) {
                return; // try again next pass
            }
        }
        if let Some(t) = rec.token.filter(|&t| cx.tokens.is_live(t)) {
            cx.tokens[t].cookie = unreached as u32;
            // The root names the heads lost in McastLost events before
            // its Sent (a relay's went with its report).
            let list = mcast::hand_list(cx, r, t);
            cx.tokens[t].first_seq = list_raw(list) as u32;
            if list.is_some() {
                let bytes = mcast::read_list(hw, list);
                for (k, part) in bytes.chunks(nic_abi::event::INLINE_MAX).enumerate() {
                    if part.iter().any(|&b| b != 0) {
                        cx.owe_event(cx.tokens[t].port as usize, EvRef::Lost(t, k as u8));
                    }
                }
            }
            let status = if unreached == 0 { SendStatus::Ok } else { SendStatus::Incomplete };
            if rec.parent.is_none() {
                cx.bump(hw, Stat::McastCompleted, 1);
            }
            complete_token(cx, t, status);
        }
        // Buffers still held go back (children that did not answer).
        let mut k = rec.released;
        while rec.source == McastSource::RxBufs && k < rec.have {
            cx.rx_release(hw, rec.bufs[k as usize % RELAY_WINDOW]);
            k += 1;
        }
        cx.mcasts.free(r);
    }
}

/// Has record `rec` its children's answers and the local copy delivered?
fn complete(rec: &McastRec) -> bool {
    rec.list != ChildList::Awaiting && rec.done >= rec.nchildren && rec.delivered
}
