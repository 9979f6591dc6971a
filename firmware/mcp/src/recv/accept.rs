//! RECV's acceptance of data-bearing packets: the SYNC that (re)starts a
//! stream, the sequence check ([`crate::reliability::RecvWindow`]: in
//! order, duplicate, gap: go-back-N nacks a gap, another window policy
//! may hold the packet, `offload::policy::Window`), the target port, then by packet type: a Data
//! message's receive buffer (exact size class and priority), a put's or
//! get's registered memory, a get answer's waiting token. Accepted
//! payloads go to RDMA as jobs; refusals become nacks for SEND. And a
//! port's close: its partial messages and posted receive buffers dropped.

use super::take::Take;
use super::{Arrived, Next, Recv, RecvState};
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Win, Window};
use crate::records::*;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::translate::Xlat;
use nic_abi::event::INLINE_MAX;
use nic_abi::map;
use nic_abi::packet::{
    AddrView, DataKind, DataView, NackCode, PacketView, PollView, SeqView, HEADER_LEN,
};
use nic_abi::stats::Stat;
use nic_abi::trace::Cause;
use nic_abi::{class_max_len, Priority};

impl Recv {
    /// Port `p` closed: partial messages into it are dropped and its
    /// posted receive buffers freed.
    pub fn port_closed(&mut self, cx: &mut Shared, hw: &mut impl Hw, p: usize) {
        self.take_provided(cx, hw);
        let rx: heapless::Vec<RxId, MAX_STREAMS> =
            self.rxs.live_indices().filter(|&i| self.rxs[i].local_port as usize == p).collect();
        for r in rx {
            // (Slots taken early go back first: the list keeps its order.)
            Win::release(self, cx, hw, r);
            self.abort_assembly(cx, hw, r);
        }
        let mut next = self.slots_head[p];
        while let Some(s) = next {
            next = cx.slot_link(hw, s);
            cx.slots.free(s);
        }
        self.slots_head[p] = None;
        self.slots_tail[p] = None;
    }

    /// A packet beyond a gap: nack the expected one and drop it. The
    /// packets behind the gap that the sender sent in the same round (see
    /// [`SeqView::round`]) draw no more nacks: one per gap and round.
    pub(super) fn gap(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        expected: u32,
        round: u8,
    ) {
        cx.bump(hw, Stat::OutOfOrder, 1);
        let rx = &mut self.rxs[r];
        if rx.nacked != Some(expected) || rx.nack_round != round {
            rx.nacked = Some(expected);
            rx.nack_round = round;
            rx.nack_time = cx.now;
            self.queue_control(cx, r, Some((NackCode::OutOfOrder as u8, expected)), round);
        }
        cx.bump(hw, Stat::Drops, 1);
        cx.rxfree.give(hw, buf);
    }

    /// A poll from the sender of stream `key` (`q`): answer where the
    /// stream stands. Every packet it sent before the poll has arrived
    /// or been dropped by now, so a gap named here is really missing.
    pub(super) fn poll_in(&mut self, cx: &mut Shared, hw: &mut impl Hw, q: PollView<'_>, key: u32) {
        let Some(r) = self.find_or_make_rx(cx, hw, key, q.addr()) else { return };
        // A poll names the sender's boot and the incarnation of a stream
        // made again. This side, still synchronised to an earlier boot or
        // incarnation, has lost the new one's SYNC: it forgets the old
        // stream (everything of it was acknowledged, or its sender is
        // gone) and says Unsynced, so the sender starts again with SYNC.
        // A poll of an earlier incarnation is stale.
        let inc = q.incarnation().unwrap_or(0);
        if let Some((boot, was, _)) = self.rxs[r].sync_seen.get() {
            if boot != q.boot() || was != inc {
                if boot == q.boot() && !crate::reliability::seq_lt(was, inc) {
                    return;
                }
                // (Slots taken early go back first: the list keeps its order.)
                Win::release(self, cx, hw, r);
                self.abort_assembly(cx, hw, r);
                self.rxs[r].sync_seen = SyncSeen::NONE;
            }
        }
        let rx = self.rxs[r];
        if rx.sync_seen.is_some() && Win::answer_poll(self, cx, r, q) {
            return;
        }
        let expected = rx.win.expected();
        let nack = if rx.sync_seen.is_none() {
            Some((NackCode::Unsynced as u8, q.una()))
        } else if crate::reliability::seq_lt(expected, q.next()) {
            Some((NackCode::OutOfOrder as u8, expected))
        } else {
            None
        };
        self.queue_control(cx, r, nack, q.round());
    }

    /// The receiving stream of `key`, made (between the ends `a`) if
    /// there is none.
    fn find_or_make_rx(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        key: u32,
        a: AddrView<'_>,
    ) -> Option<RxId> {
        if let Some(r) = self.rx_of(key) {
            return Some(r);
        }
        if self.rxs.available() == 0 {
            self.evict_rx(cx, hw);
        }
        let mut rx = RxStream::EMPTY;
        rx.key = key;
        rx.remote_node = a.src_node();
        rx.local_port = a.dst_port();
        rx.remote_port = a.src_port();
        rx.prio = a.priority();
        let r = self.rxs.alloc(rx)?;
        if self.rx_index.insert(key, r).is_err() {
            self.rxs.free(r);
            self.ack_next = 0;
            return None;
        }
        // A stream let go of earlier comes back where it stood.
        if let Some(g) = super::ghosts::take(hw, key) {
            self.rxs[r].sync_seen = g.sync;
            self.rxs[r].win.restart(g.expected);
        }
        Some(r)
    }

    /// The stream table is full: free one stream that holds nothing (no
    /// message being placed, no ack owed or queued). First one that never
    /// got its SYNC (a stray or forged packet's), carries only reports, or
    /// has been quiet for a send timeout (its sender finished or went
    /// away): should that sender come back it is told Unsynced and starts
    /// again with SYNC. A report taken twice is harmless (the root counts
    /// each member once), so a root with more children than the table
    /// holds lets their report streams go at once. Otherwise the data
    /// stream quiet longest, leaving its ghost (where it stood,
    /// `ghosts`): a data stream forgotten outright could take a message
    /// twice, sent again because its ack was lost. Without this, stray
    /// keys would fill the table for good and every new sender's packets
    /// be dropped.
    fn evict_rx(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        let last = |rx: &RxStream| rx.ack_due.max(rx.nack_time);
        let quiet = |rx: &RxStream| {
            rx.sync_seen.is_none()
                || rx.key & REPORT_STREAM != 0
                || cx.now.saturating_sub(last(rx)) >= cx.cfg.send_timeout
        };
        let idle = |r: RxId| {
            let rx = &self.rxs[r];
            matches!(rx.assembly, Assembly::Idle)
                && rx.win.held() == 0
                && !rx.ack_pending
                && !rx.on_ack_list
                && rx.mrec == Mrec::NONE
                && !cx.controls.iter().any(|c| c.is_for(r))
        };
        let mut victim = self.rxs.live_indices().find(|&r| idle(r) && quiet(&self.rxs[r]));
        // Otherwise the idle ones, quiet longest first, until one's ghost
        // finds room (no sort: it would cost the image more than the
        // rare repeated search costs time).
        let mut after: Option<(u64, RxId)> = None;
        while victim.is_none() {
            let Some((l, r)) = self
                .rxs
                .live_indices()
                .filter(|&r| idle(r))
                .map(|r| (last(&self.rxs[r]), r))
                .filter(|&c| after.is_none_or(|a| c > a))
                .min()
            else {
                break;
            };
            let rx = &self.rxs[r];
            let g = super::ghosts::Ghost {
                key: rx.key,
                sync: rx.sync_seen,
                expected: rx.win.expected(),
                last: l,
            };
            if super::ghosts::put(hw, cx.now, cx.cfg.send_timeout, &g) {
                victim = Some(r);
            }
            after = Some((l, r));
        }
        if let Some(r) = victim {
            self.rx_index.remove(&self.rxs[r].key);
            self.rxs.free(r);
            self.ack_next = 0;
            if self.last_rx.1 == Some(r) {
                self.last_rx = (0, None);
            }
            cx.bump(hw, Stat::StreamsEvicted, 1);
        }
    }

    /// Owe an ack on `r`, due after the ack delay (or now when `urgent`).
    pub(super) fn owe_ack(&mut self, cx: &Shared, r: RxId, urgent: bool) {
        let now = cx.now;
        let delay = cx.cfg.ack_delay;
        let half_window = (cx.cfg.window / 2).max(1);
        let rx = &mut self.rxs[r];
        if !rx.ack_pending {
            rx.ack_pending = true;
            rx.ack_due = now.saturating_add(delay);
        }
        if urgent || u32::from(rx.unacked) >= half_window {
            rx.ack_due = now;
        }
        self.ack_next = self.ack_next.min(rx.ack_due);
        if !rx.on_ack_list {
            rx.on_ack_list = true;
            let _ = self.ack_list.push(r);
        }
    }

    pub(super) fn nack(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        code: NackCode,
        s: SeqView<'_>,
    ) {
        // The round of the packet refused goes back with the nack.
        self.queue_control(cx, r, Some((code as u8, s.seq())), s.round());
        Win::refused_in(self, cx, hw, r, code, s);
        if code == NackCode::NoBuffer {
            cx.bump(hw, Stat::NoBuffer, 1);
        }
        cx.bump(hw, Stat::Drops, 1);
        cx.rxfree.give(hw, buf);
    }

    /// Drop a receiving stream's partial message (its sender gave it up).
    pub(super) fn abort_assembly(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: RxId) {
        if let Assembly::Message { slot } = self.rxs[r].assembly {
            // The buffer was never reported: back to the front of its port's list.
            if cx.slots.is_live(slot) {
                self.unclaim_slot(cx, hw, slot);
            }
        }
        self.rxs[r].assembly = Assembly::Idle;
        self.rxs[r].offset = 0;
        // A relayed message cut short: its fan-out's record ends when the
        // rest is overdue and counts its subtree as not reached.
        self.rxs[r].mrec = Mrec::NONE;
    }

    /// Take the first posted buffer of `port` with this class and
    /// priority: the slot and its length. Two words read per slot looked
    /// at (what it matches on, its link), the link of the one before it
    /// written when it is not the first.
    pub(crate) fn claim_slot(
        &mut self,
        cx: &Shared,
        hw: &mut impl Hw,
        port: usize,
        class: u8,
        prio: Priority,
    ) -> Option<(SlotId, u32)> {
        let mut prev = None;
        let mut at = *self.slots_head.get(port)?;
        while let Some(s) = at {
            let (_, p, c, len) = cx.slot_posted(hw, s);
            let next = cx.slot_link(hw, s);
            if c == class && p == prio {
                match prev {
                    None => self.slots_head[port] = next,
                    Some(before) => cx.link_slot(hw, before, next),
                }
                if self.slots_tail[port] == Some(s) {
                    self.slots_tail[port] = prev;
                }
                return Some((s, len));
            }
            prev = Some(s);
            at = next;
        }
        None
    }

    /// Sequenced packet `s` in `buf`, of our sending stream `key`, checked:
    /// to be placed once SDMA took its ack.
    #[inline(always)]
    pub(super) fn arrived(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        s: SeqView<'_>,
        key: u32,
    ) -> Next {
        self.go(cx, hw, RecvState::Accept { seq: s.seq() }, Cause::Accepted);
        Next::Accept(Arrived { buf, header: s.to_header(), key })
    }

    /// Place data-bearing packet `a` (its ack is with SDMA already).
    #[inline(never)]
    pub fn accept(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        a: Arrived,
        w: &mut crate::Work,
    ) {
        let (buf, key, s) = (a.buf, a.key, a.header.view());
        let Some(r) = self.find_or_make_rx(cx, hw, key, s.addr()) else {
            self.drop_packet(cx, hw, buf, Stat::BadHeaders);
            return;
        };
        if s.first() && s.sync() {
            self.sync_in(cx, hw, r, s);
        }
        if self.rxs[r].sync_seen.is_none() {
            // Every stream starts with SYNC: without one this NIC lost the
            // stream's state (a reset). Ask the sender to start again.
            self.nack(cx, hw, buf, r, NackCode::Unsynced, s);
            return;
        }
        if !self.in_order(cx, hw, buf, r, s) {
            return;
        }
        let port = s.addr().dst_port() as usize;
        if !cx.is_open(port) {
            self.nack(cx, hw, buf, r, NackCode::PortClosed, s);
            return;
        }
        let at = (buf, r, port);
        let take = match s.packet() {
            PacketView::Data(d) => match d.kind() {
                DataKind::Data { .. } => self.take_data(cx, sdma, hw, at, d, w),
                DataKind::Put { remote_addr } => self.take_put(cx, hw, at, d, remote_addr),
                DataKind::GetResp { get } => self.take_get_resp(cx, hw, at, d, get),
            },
            PacketView::GetReq(g) => self.take_get_req(cx, sdma, hw, at, key, g),
            PacketView::Report(rp) => {
                Fan::report_in(cx, hw, buf, rp);
                Take::Taken
            }
            // (No other type is sequenced.)
            _ => {
                cx.rxfree.give(hw, buf);
                Take::Taken
            }
        };
        match take {
            Take::Stopped => return,
            Take::Taken => {}
            Take::Job(j) => {
                self.rxs[r].offset = self.rxs[r].offset.wrapping_add(j.len);
                if s.last() {
                    self.rxs[r].assembly = Assembly::Idle;
                }
                let _ = cx.rdma_jobs.push_back(&self.to_rdma, j);
            }
        }
        self.advance(cx, r);
    }

    /// The in-order packet was taken (placed or consciously discarded).
    /// Is the range a put or get names (`len` bytes from `remote`)
    /// registered by `port`? None: yes. Else the nack to send: not
    /// registered (RemoteAccess), or not known yet (Busy: a translation is
    /// being read; the check goes on from where it got when the sender
    /// comes again).
    pub(super) fn remote_check(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        r: RxId,
        port: u8,
        (remote, len): (u64, u32),
    ) -> Option<NackCode> {
        // One check is remembered at a time (the stream, the range's
        // start, the bytes found so far): the one a sender comes back for.
        let (s, at, bytes) = self.remote_checked;
        let mut from = if (s, at) == (Some(r), remote) { bytes } else { 0 };
        let x = cx.registered(hw, port, remote, len as u64, &mut from);
        self.remote_checked = if x == Xlat::Wait { (Some(r), remote, from) } else { (None, 0, 0) };
        match x {
            Xlat::Bus(_) => None,
            Xlat::Wait => Some(NackCode::Busy),
            Xlat::Fault => Some(NackCode::RemoteAccess),
        }
    }

    pub(crate) fn advance(&mut self, cx: &Shared, r: RxId) {
        let rx = &mut self.rxs[r];
        let held_next = rx.win.advance();
        rx.unacked = rx.unacked.saturating_add(1);
        rx.nacked = None;
        self.owe_ack(cx, r, false);
        if held_next {
            // The next one is held (by the window policy): RECV takes it
            // before new packets.
            Win::next_held(self, r);
        }
    }

    /// Give a claimed receive slot back to the front of its port's list.
    pub(crate) fn unclaim_slot(&mut self, cx: &Shared, hw: &mut impl Hw, s: SlotId) {
        let port = cx.slot_posted(hw, s).0 as usize;
        let Some(&head) = self.slots_head.get(port) else { return };
        cx.link_slot(hw, s, head);
        self.slots_head[port] = Some(s);
        if self.slots_tail[port].is_none() {
            self.slots_tail[port] = Some(s);
        }
    }
}

/// Does the message `d` starts fit a receive slot of `len` bytes (and its
/// size class)? A sender that broke the size-class rule is refused.
pub(crate) fn fits_slot(len: u32, d: DataView<'_>) -> bool {
    d.msg_len() as u64 <= class_max_len(d.stream().size_class()).min(len as u64)
}

/// Slot `s` takes the message whose first packet, `d`, is in receive
/// buffer `buf`: what its event says (three words of its record), and a
/// small message's bytes (two words: the event masks what is past them).
pub(crate) fn fill_slot(
    cx: &mut Shared,
    hw: &mut impl Hw,
    s: SlotId,
    buf: u8,
    d: DataView<'_>,
    tag_word: u64,
    mrec: Mrec,
) {
    let mut inline_len = 0;
    if d.msg_len() as usize <= INLINE_MAX {
        const _: () = assert!(INLINE_MAX == 16 && HEADER_LEN.is_multiple_of(8));
        let from = map::rx_buf(buf as u32) + HEADER_LEN as u32;
        let to = map::rx_inline(s.raw() as u32);
        hw.store_u64(to, hw.load_u64(from));
        hw.store_u64(to + 8, hw.load_u64(from + 8));
        inline_len = (d.payload_len() as usize).min(INLINE_MAX) as u8;
    }
    let f = SlotFill {
        msg_len: d.msg_len(),
        src_node: d.stream().addr().src_node(),
        src_port: d.stream().addr().src_port(),
        inline_len,
        tag_word,
        mrec,
    };
    cx.fill_slot(hw, s, &f);
}
