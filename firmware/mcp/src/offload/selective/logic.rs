//! Selective repeat as pure logic, after SSCOP (the loss recovery of ATM's
//! adaptation layer): the receiver keeps packets that arrive ahead of a
//! gap and says at once which are missing (USTAT); the sender resends only
//! those. A POLL the sender sends while data is unacknowledged carries the
//! next new sequence number and a poll sequence number (a logical clock);
//! the receiver answers with a STAT listing what is still missing. A
//! packet is resent for a STAT only if that STAT answers a POLL sent after
//! the packet's last transmission: a resend still on its way is not sent
//! again. There is no per-packet timer: POLL and STAT drive recovery, and
//! a lost USTAT or STAT is covered by the next POLL.
//!
//! No hardware, no records, no time: the machines keep [`SrMarks`] beside
//! each sending stream's window (and each packet's poll stamp in SRAM),
//! and hold packets in each receiving stream's
//! [`crate::reliability::RecvWindow`]; they send what these answer and
//! tell them what arrived. [`SrSender`] and [`SrReceiver`] put the pieces
//! together for the tests. Both sides track at most [`SR_WINDOW`] packets
//! past the oldest one not acknowledged (bitmaps), so a stream's window
//! may not exceed it.

use crate::reliability::{seq_le, seq_lt, Arrival, RecvWindow, HOLD_SPAN};
use nic_abi::packet::STAT_PAYLOAD_MAX;

/// Packets tracked past the oldest unacknowledged one, each side.
pub const SR_WINDOW: u32 = HOLD_SPAN;

/// A POLL: the sender's next new sequence number `ns` (N(S)) and the poll
/// sequence number `ps` (N(PS)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll {
    pub ns: u32,
    pub ps: u32,
}

/// Missing ranges a STAT or USTAT lists, `lo..hi` each (hi exclusive).
/// A STAT lists at most `SR_WINDOW / 2` ranges (every other packet
/// missing); more would not fit and are not needed: the next POLL asks
/// again.
pub type Gaps = heapless::Vec<(u32, u32), { SR_WINDOW as usize / 2 }>;

const _: () = assert!(Stat::encoded_len(SR_WINDOW as usize / 2) == STAT_PAYLOAD_MAX);
const _: () = assert!(SR_WINDOW == nic_abi::map::SR_STAMPS_PER_STREAM);

/// A STAT: the POLL's `ps` and `ns`, everything before `ack` arrived, and
/// the ranges still missing between `ack` and `ns` (the rest of that span
/// arrived).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub ps: u32,
    pub ns: u32,
    pub ack: u32,
    pub missing: Gaps,
}

impl Stat {
    /// Bytes of an encoded STAT with `n` missing ranges.
    pub const fn encoded_len(n: usize) -> usize {
        16 + 8 * n
    }

    /// The STAT as a packet payload: ps, ns, ack, the number of ranges
    /// (u32 each, little-endian), then each range's lo and hi. Returns the
    /// bytes written; None if `b` is too short.
    pub fn encode(&self, b: &mut [u8]) -> Option<usize> {
        let n = Stat::encoded_len(self.missing.len());
        let out = b.get_mut(..n)?;
        let words = [self.ps, self.ns, self.ack, self.missing.len() as u32];
        for (i, w) in words.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        for (i, &(lo, hi)) in self.missing.iter().enumerate() {
            let at = 16 + 8 * i;
            out[at..at + 4].copy_from_slice(&lo.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&hi.to_le_bytes());
        }
        Some(n)
    }

    /// A STAT from a packet payload. None unless the payload is exactly
    /// one STAT whose ranges lie in order, each non-empty, inside
    /// `ack..ns` and within a window of `ack` (what a receiver sends).
    pub fn decode(b: &[u8]) -> Option<Stat> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(4 * i..4 * i + 4)?.try_into().ok()?))
        };
        let (ps, ns, ack, n) = (word(0)?, word(1)?, word(2)?, word(3)? as usize);
        if n > SR_WINDOW as usize / 2 || b.len() != Stat::encoded_len(n) {
            return None;
        }
        if seq_lt(ns, ack) || ns.wrapping_sub(ack) > SR_WINDOW {
            return None;
        }
        let mut missing = Gaps::new();
        let mut floor = ack;
        for i in 0..n {
            let (lo, hi) = (word(4 + 2 * i)?, word(5 + 2 * i)?);
            if seq_lt(lo, floor) || !seq_lt(lo, hi) || seq_lt(ns, hi) {
                return None;
            }
            missing.push((lo, hi)).ok()?;
            floor = hi;
        }
        Some(Stat { ps, ns, ack, missing })
    }
}

/// `a` comes before `b` among poll sequence numbers kept in a byte (a
/// packet's stamp): polls go one per retransmission timeout, so far
/// fewer than 128 lie between a packet's transmission and the STAT that
/// names it.
#[inline]
pub fn ps_lt(a: u8, b: u8) -> bool {
    (a.wrapping_sub(b) as i8) < 0
}

/// A sending stream's selective-repeat marks, relative to its window's
/// oldest unacknowledged packet `una` (the window itself, `una` and
/// `high`, one past the highest packet sent, is the stream's
/// [`crate::reliability::GoBackN`]): which packets a STAT acknowledged
/// out of order (not resent while so; only the receiver's cumulative ack
/// moves `una`, since a receiver may still let go of a packet it held:
/// one it then cannot place), which are to be resent, and the stream's
/// poll sequence number. Each transmission is stamped with the poll number current
/// when it went (the caller keeps the stamps: [`Stamps`]). What both
/// sides track spans [`SR_WINDOW`] packets past `una`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrMarks {
    /// Bit i: `una + i` was acknowledged by a STAT (selectively).
    acked: u32,
    /// Bit i: `una + i` is to be resent.
    resend: u32,
    /// The poll sequence number of the last POLL sent (0: none yet).
    ps: u8,
}

/// Where a sender keeps each packet's stamp: the poll number current
/// when the packet last went (by sequence number modulo [`SR_WINDOW`]).
pub trait Stamps {
    fn stamp(&self, seq: u32) -> u8;
}

impl Stamps for [u8; SR_WINDOW as usize] {
    fn stamp(&self, seq: u32) -> u8 {
        self[(seq % SR_WINDOW) as usize]
    }
}

impl SrMarks {
    pub const NEW: SrMarks = SrMarks { acked: 0, resend: 0, ps: 0 };

    /// The poll number a transmission now is stamped with.
    pub fn ps(&self) -> u8 {
        self.ps
    }

    /// A POLL goes out now: its poll number (transmissions from now on
    /// are stamped with it).
    pub fn poll(&mut self) -> u8 {
        self.ps = self.ps.wrapping_add(1);
        self.ps
    }

    /// Forget the marks (the stream goes back and sends everything again,
    /// or starts over); the poll number goes on.
    pub fn clear(&mut self) {
        self.acked = 0;
        self.resend = 0;
    }

    /// The window's front moved on by `n` packets (a cumulative ack).
    pub fn shift(&mut self, n: u32) {
        self.acked = self.acked.checked_shr(n).unwrap_or(0);
        self.resend = self.resend.checked_shr(n).unwrap_or(0);
    }

    /// The oldest packet to resend.
    pub fn next_resend(&self, una: u32) -> Option<u32> {
        (self.resend != 0).then(|| una.wrapping_add(self.resend.trailing_zeros()))
    }

    /// `seq` was resent: no longer marked.
    pub fn resent(&mut self, una: u32, seq: u32) {
        let i = seq.wrapping_sub(una);
        if i < SR_WINDOW {
            self.resend &= !(1 << i);
        }
    }

    /// A USTAT (or a refusal) named `lo..hi` missing: mark those (sent,
    /// between `una` and `high`) to be resent at once, even one a STAT
    /// acknowledged: the receiver let go of it since (a held packet it
    /// could not place). Returns how many were marked anew.
    pub fn ustat(&mut self, una: u32, high: u32, lo: u32, hi: u32) -> u32 {
        self.mark_missing(una, high, lo, hi, None, &[0; SR_WINDOW as usize])
    }

    /// A STAT arrived (its cumulative `ack` was taken already, so `una` is
    /// at least as far): what lies between its gaps, and after the last
    /// up to its `ns`, arrived; each packet it lists missing is resent
    /// only if its stamp is earlier than the STAT's poll number (sent
    /// before the POLL it answers: a resend sent since may still be on
    /// its way). Returns how many were marked to be resent.
    pub fn stat(&mut self, una: u32, high: u32, s: &Stat, stamps: &impl Stamps) -> u32 {
        let mut cursor = s.ack;
        let mut n = 0;
        for &(lo, hi) in &s.missing {
            self.ack_range(una, high, cursor, lo);
            n += self.mark_missing(una, high, lo, hi, Some(s.ps as u8), stamps);
            cursor = hi;
        }
        self.ack_range(una, high, cursor, s.ns);
        n
    }

    /// `seq`'s bit position, if it was sent and is not cumulatively
    /// acknowledged.
    fn offset(una: u32, high: u32, seq: u32) -> Option<u32> {
        let i = seq.wrapping_sub(una);
        (seq_le(una, seq) && seq_lt(seq, high) && i < SR_WINDOW).then_some(i)
    }

    /// `lo..hi` arrived (at most a window's worth is looked at).
    fn ack_range(&mut self, una: u32, high: u32, lo: u32, hi: u32) {
        let mut s = lo;
        for _ in 0..SR_WINDOW {
            if !seq_lt(s, hi) {
                break;
            }
            if let Some(i) = Self::offset(una, high, s) {
                self.acked |= 1 << i;
                self.resend &= !(1 << i);
            }
            s = s.wrapping_add(1);
        }
    }

    fn mark_missing(
        &mut self,
        una: u32,
        high: u32,
        lo: u32,
        hi: u32,
        before_ps: Option<u8>,
        stamps: &impl Stamps,
    ) -> u32 {
        let mut s = lo;
        let mut n = 0;
        // At most the window's worth: a range from a confused peer ends.
        for _ in 0..SR_WINDOW {
            if !seq_lt(s, hi) {
                break;
            }
            if let Some(i) = Self::offset(una, high, s) {
                // Named missing now: whatever a STAT said before, the
                // receiver does not have it.
                let bit = 1 << i;
                self.acked &= !bit;
                let stale = before_ps.is_none_or(|ps| ps_lt(stamps.stamp(s), ps));
                if self.resend & bit == 0 && stale {
                    self.resend |= bit;
                    n += 1;
                }
            }
            s = s.wrapping_add(1);
        }
        n
    }
}

/// The sending side of one stream, whole: the window (`una`, `next`),
/// the marks, and each packet's stamp. The MCP keeps the same pieces in
/// its stream records (the stamps in SRAM); this type puts them together
/// for the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrSender {
    /// Oldest sequence number not acknowledged.
    una: u32,
    /// Next new sequence number.
    next: u32,
    marks: SrMarks,
    stamps: [u8; SR_WINDOW as usize],
}

/// What the sender should transmit next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrNext {
    /// Send `seq` again (a resend goes ahead of new data).
    Resend(u32),
    /// Send the next new packet, `seq`.
    New(u32),
}

impl SrSender {
    /// A stream starting at `seq`.
    pub const fn new(seq: u32) -> SrSender {
        SrSender { una: seq, next: seq, marks: SrMarks::NEW, stamps: [0; SR_WINDOW as usize] }
    }

    pub fn una(&self) -> u32 {
        self.una
    }

    pub fn next(&self) -> u32 {
        self.next
    }

    /// Packets sent and not yet acknowledged (cumulatively).
    pub fn outstanding(&self) -> u32 {
        self.next.wrapping_sub(self.una)
    }

    /// What to transmit next with at most `window` packets outstanding
    /// (capped at `SR_WINDOW`): the oldest resend, else a new packet if
    /// there is room and `have_new`, else nothing.
    pub fn next_to_send(&self, window: u32, have_new: bool) -> Option<SrNext> {
        if let Some(s) = self.marks.next_resend(self.una) {
            return Some(SrNext::Resend(s));
        }
        (have_new && self.outstanding() < window.min(SR_WINDOW)).then_some(SrNext::New(self.next))
    }

    /// `what` (from `next_to_send`) went on the wire: its transmission is
    /// stamped with the last POLL sent.
    pub fn sent(&mut self, what: SrNext) {
        let seq = match what {
            SrNext::Resend(s) => {
                self.marks.resent(self.una, s);
                s
            }
            SrNext::New(s) => {
                debug_assert_eq!(s, self.next);
                self.next = self.next.wrapping_add(1);
                s
            }
        };
        self.stamps[(seq % SR_WINDOW) as usize] = self.marks.ps();
    }

    /// A POLL goes out now: what it carries (the next poll sequence
    /// number; transmissions from now on are stamped with it).
    pub fn poll(&mut self) -> Poll {
        Poll { ns: self.next, ps: self.marks.poll() as u32 }
    }

    /// A USTAT named `lo..hi` missing: resend those (of the packets sent
    /// and not acknowledged) at once.
    pub fn ustat(&mut self, lo: u32, hi: u32) {
        self.marks.ustat(self.una, self.next, lo, hi);
    }

    /// A STAT arrived: acknowledge what it acknowledges, and resend each
    /// packet it lists missing whose last transmission came before the
    /// POLL it answers. A late or repeated STAT resends nothing already
    /// resent since.
    pub fn stat(&mut self, s: &Stat) {
        self.ack_to(s.ack);
        self.marks.stat(self.una, self.next, s, &self.stamps);
    }

    /// Everything before `ack` arrived (ignored unless it lies in
    /// `[una, next]`).
    fn ack_to(&mut self, ack: u32) {
        if seq_lt(ack, self.una) || seq_lt(self.next, ack) {
            return;
        }
        let n = ack.wrapping_sub(self.una);
        self.una = ack;
        self.marks.shift(n);
    }
}

/// What the receiver makes of an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrArrival {
    /// The next one in order: deliver it, then the `then` held packets
    /// that follow it (now in order), oldest first.
    InOrder { then: u32 },
    /// Ahead of a gap and kept; if `ustat` is `Some((lo, hi))` a new gap
    /// opened: tell the sender at once.
    Held { ustat: Option<(u32, u32)> },
    /// Received before (delivered or held): drop it.
    Duplicate,
    /// Ahead of a gap but not kept (no buffer, or past the window): drop
    /// it; a STAT will list it missing.
    Dropped,
}

/// The receiving side of one stream, for the tests: the receive window
/// the MCP keeps ([`RecvWindow`]), with its held packets delivered as
/// soon as they are in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrReceiver {
    win: RecvWindow,
}

impl SrReceiver {
    /// A stream starting at `seq`.
    pub fn new(seq: u32) -> SrReceiver {
        let mut win = RecvWindow::new();
        win.restart(seq);
        SrReceiver { win }
    }

    pub fn expected(&self) -> u32 {
        self.win.expected()
    }

    /// Packets held ahead of a gap.
    pub fn held(&self) -> u32 {
        self.win.held()
    }

    /// Packet `seq` arrived; `can_hold`: a buffer is free to keep it if it
    /// comes ahead of a gap.
    pub fn arrive(&mut self, seq: u32, can_hold: bool) -> SrArrival {
        match self.win.check(seq) {
            Arrival::Duplicate => SrArrival::Duplicate,
            Arrival::InOrder => {
                let mut then = 0;
                while self.win.advance() {
                    self.win.unhold(self.win.expected());
                    then += 1;
                }
                SrArrival::InOrder { then }
            }
            Arrival::Gap { .. } if !can_hold || !self.win.can_hold(seq) => SrArrival::Dropped,
            Arrival::Gap { .. } => SrArrival::Held { ustat: self.win.hold(seq) },
        }
    }

    /// The answer to POLL `p`: what arrived before the first gap and the
    /// ranges missing up to the POLL's next new packet.
    pub fn stat(&mut self, p: Poll) -> Stat {
        self.win.stat(p)
    }

    /// The sender (re)starts the stream at `seq` (a SYNC): nothing held.
    pub fn restart(&mut self, seq: u32) {
        self.win.restart(seq);
    }
}

/// The receiving window's answers for selective repeat.
impl RecvWindow {
    /// The answer to POLL `p` (selective repeat): what arrived before the
    /// first gap and the ranges missing up to the poll's next new packet
    /// (at most a span's worth; the next poll asks again).
    pub fn stat(&mut self, p: Poll) -> Stat {
        if seq_lt(self.high, p.ns) {
            self.high = p.ns;
        }
        let end = if seq_le(p.ns, self.expected()) {
            self.expected()
        } else if p.ns.wrapping_sub(self.expected()) < HOLD_SPAN {
            p.ns
        } else {
            self.expected().wrapping_add(HOLD_SPAN)
        };
        Stat {
            ps: p.ps,
            ns: end,
            ack: self.expected(),
            missing: self.missing(self.expected(), end),
        }
    }

    /// The runs missing (not held) in `from..end`, from the expected one
    /// on: what a STAT lists, and a USTAT of that span.
    pub fn missing(&self, from: u32, end: u32) -> Gaps {
        let mut missing = Gaps::new();
        let mut s = if seq_lt(from, self.expected()) { self.expected() } else { from };
        while seq_lt(s, end) {
            if self.is_held(s) {
                s = s.wrapping_add(1);
                continue;
            }
            let lo = s;
            while seq_lt(s, end) && !self.is_held(s) {
                s = s.wrapping_add(1);
            }
            if missing.push((lo, s)).is_err() {
                break;
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    #[test]
    fn the_worked_example_resends_the_lost_packet_once() {
        // Packets 1-4 sent, POLL(ps=1) -> STAT acks 1-4. Packets 5-9 sent,
        // 7 lost; POLL(ps=2) goes after 9. Packet 8 arrives: USTAT [7,7];
        // the sender resends 7 and records ps=2 with it. POLL 2 reaches
        // the receiver before the resent 7: its STAT still lists 7
        // missing, but 7's record (2) is not earlier than the STAT's ps
        // (2): no second resend. The resent 7 arrives; the next STAT acks
        // through 9.
        let (mut tx, mut rx) = (SrSender::new(1), SrReceiver::new(1));
        for s in 1..=4 {
            assert_eq!(tx.next_to_send(16, true), Some(SrNext::New(s)));
            tx.sent(SrNext::New(s));
            assert_eq!(rx.arrive(s, true), SrArrival::InOrder { then: 0 });
        }
        let p1 = tx.poll();
        assert_eq!(p1, Poll { ns: 5, ps: 1 });
        let st = rx.stat(p1);
        assert_eq!((st.ack, st.missing.len()), (5, 0));
        tx.stat(&st);
        assert_eq!(tx.una(), 5);
        for s in 5..=9 {
            tx.sent(SrNext::New(s));
        }
        let p2 = tx.poll();
        assert_eq!(p2, Poll { ns: 10, ps: 2 });
        assert_eq!(rx.arrive(5, true), SrArrival::InOrder { then: 0 });
        assert_eq!(rx.arrive(6, true), SrArrival::InOrder { then: 0 });
        assert_eq!(rx.arrive(8, true), SrArrival::Held { ustat: Some((7, 8)) });
        tx.ustat(7, 8);
        assert_eq!(tx.next_to_send(16, false), Some(SrNext::Resend(7)));
        tx.sent(SrNext::Resend(7));
        assert_eq!(rx.arrive(9, true), SrArrival::Held { ustat: None });
        let st = rx.stat(p2);
        assert_eq!(st.ack, 7);
        assert_eq!(st.missing.as_slice(), &[(7, 8)]);
        tx.stat(&st);
        assert_eq!(tx.next_to_send(16, false), None, "7 went again after POLL 2: not resent");
        assert_eq!(rx.arrive(7, true), SrArrival::InOrder { then: 2 });
        let st = rx.stat(tx.poll());
        assert_eq!((st.ack, st.missing.len()), (10, 0));
        tx.stat(&st);
        assert_eq!((tx.una(), tx.outstanding()), (10, 0));
    }

    #[test]
    fn a_stat_answering_a_later_poll_resends_what_is_still_missing() {
        let (mut tx, mut rx) = (SrSender::new(0), SrReceiver::new(0));
        for s in 0..3 {
            tx.sent(SrNext::New(s));
        }
        // 0 and 1 lost, the USTAT for them lost too: the STAT of the next
        // POLL has them resent.
        assert_eq!(rx.arrive(2, true), SrArrival::Held { ustat: Some((0, 2)) });
        let st1 = rx.stat(tx.poll());
        assert_eq!(st1.missing.as_slice(), &[(0, 2)]);
        tx.stat(&st1);
        assert_eq!(tx.next_to_send(8, false), Some(SrNext::Resend(0)));
        tx.sent(SrNext::Resend(0));
        assert_eq!(tx.next_to_send(8, false), Some(SrNext::Resend(1)));
        tx.sent(SrNext::Resend(1));
        // The same STAT again (late, or repeated): the resends went after
        // its POLL, nothing goes again.
        tx.stat(&st1);
        assert_eq!(tx.next_to_send(8, false), None);
        // Both resends lost: the STAT of a POLL sent after them asks again.
        let st2 = rx.stat(tx.poll());
        tx.stat(&st2);
        assert_eq!(tx.next_to_send(8, false), Some(SrNext::Resend(0)));
    }

    #[test]
    fn held_packets_are_delivered_in_order_once_the_gap_fills() {
        let mut rx = SrReceiver::new(u32::MAX - 1);
        assert_eq!(rx.arrive(0, true), SrArrival::Held { ustat: Some((u32::MAX - 1, 0)) });
        assert_eq!(rx.arrive(u32::MAX, true), SrArrival::Held { ustat: None });
        assert_eq!(rx.arrive(0, true), SrArrival::Duplicate);
        assert_eq!(rx.held(), 2);
        assert_eq!(rx.arrive(u32::MAX - 1, true), SrArrival::InOrder { then: 2 });
        assert_eq!((rx.expected(), rx.held()), (1, 0));
        assert_eq!(rx.arrive(0, true), SrArrival::Duplicate);
    }

    #[test]
    fn a_packet_with_no_buffer_or_past_the_window_is_dropped_and_listed_missing() {
        let mut rx = SrReceiver::new(10);
        assert_eq!(rx.arrive(12, false), SrArrival::Dropped);
        assert_eq!(rx.arrive(10 + SR_WINDOW, true), SrArrival::Dropped);
        let st = rx.stat(Poll { ns: 13, ps: 1 });
        assert_eq!(st.missing.as_slice(), &[(10, 13)]);
    }

    #[test]
    fn a_stat_acknowledges_what_lies_between_its_gaps() {
        let (mut tx, mut rx) = (SrSender::new(0), SrReceiver::new(0));
        for s in 0..6 {
            tx.sent(SrNext::New(s));
        }
        for s in [1, 2, 4] {
            rx.arrive(s, true);
        }
        let st = rx.stat(tx.poll());
        assert_eq!(st.missing.as_slice(), &[(0, 1), (3, 4), (5, 6)]);
        tx.stat(&st);
        assert_eq!(tx.una(), 0);
        let mut resent = Vec::new();
        while let Some(n) = tx.next_to_send(8, false) {
            tx.sent(n);
            resent.push(n);
        }
        assert_eq!(resent, [SrNext::Resend(0), SrNext::Resend(3), SrNext::Resend(5)]);
        // 0 arrives: the receiver's cumulative ack jumps over 1 and 2, and
        // the sender's una over everything selectively acknowledged.
        assert_eq!(rx.arrive(0, true), SrArrival::InOrder { then: 2 });
        let st = rx.stat(tx.poll());
        tx.stat(&st);
        assert_eq!(tx.una(), 3);
    }

    #[test]
    fn a_stat_survives_its_encoding_and_bad_ones_are_refused() {
        let mut rx = SrReceiver::new(u32::MAX - 3);
        for s in [u32::MAX - 1, 1, 2] {
            rx.arrive(s, true);
        }
        let st = rx.stat(Poll { ns: 5, ps: 9 });
        assert_eq!(st.missing.as_slice(), &[(u32::MAX - 3, u32::MAX - 1), (u32::MAX, 1), (3, 5)]);
        let mut b = [0u8; 64];
        let n = st.encode(&mut b).unwrap();
        assert_eq!(n, Stat::encoded_len(3));
        assert_eq!(Stat::decode(&b[..n]), Some(st.clone()));
        assert_eq!(st.encode(&mut b[..n - 1]), None, "too short a buffer");
        assert_eq!(Stat::decode(&b[..n - 1]), None, "truncated");
        let mut bad = b;
        bad[12] = 2; // says two ranges, carries three
        assert_eq!(Stat::decode(&bad[..n]), None);
        let mut bad = b;
        bad[16..20].copy_from_slice(&7u32.to_le_bytes()); // first range after the second
        assert_eq!(Stat::decode(&bad[..n]), None);
    }

    #[test]
    fn a_packet_a_stat_acknowledged_goes_again_when_named_missing_later() {
        // 0 lost; 1..3 held at the receiver and acknowledged by a STAT.
        // Only the cumulative ack moves the window: the receiver may yet
        // let go of a held packet (one it then cannot place), and must
        // be able to have it again.
        let (mut tx, mut rx) = (SrSender::new(0), SrReceiver::new(0));
        for s in 0..4 {
            tx.sent(SrNext::New(s));
        }
        for s in 1..4 {
            rx.arrive(s, true);
        }
        let p = tx.poll();
        tx.stat(&rx.stat(p));
        assert_eq!(tx.una(), 0, "selective acks do not move the window");
        assert_eq!(tx.next_to_send(8, false), Some(SrNext::Resend(0)));
        tx.sent(SrNext::Resend(0));
        assert_eq!(tx.next_to_send(8, false), None, "1..3 are not resent");
        // The receiver took 0 and 1, then refused 2 (no buffer): 2 goes
        // again though a STAT acknowledged it.
        tx.stat(&Stat { ps: 0, ns: 4, ack: 2, missing: Gaps::new() });
        tx.ustat(2, 3);
        assert_eq!((tx.una(), tx.next_to_send(8, false)), (2, Some(SrNext::Resend(2))));
    }

    #[test]
    fn the_window_caps_new_packets() {
        let mut tx = SrSender::new(0);
        for s in 0..SR_WINDOW {
            assert_eq!(tx.next_to_send(1000, true), Some(SrNext::New(s)));
            tx.sent(SrNext::New(s));
        }
        assert_eq!(tx.next_to_send(1000, true), None);
        assert_eq!(tx.next_to_send(4, true), None);
    }

    /// Sender and receiver over a channel that loses, duplicates and
    /// reorders data packets, finds no buffer for some and loses control
    /// packets, as `script` says (four times over, then the channel is
    /// clean); POLLs go whenever the sender has nothing to send. Returns
    /// the packets delivered in order and how many were resent.
    fn run(start: u32, msgs: u32, window: u32, script: &[u8]) -> (Vec<u32>, u32) {
        let (mut tx, mut rx) = (SrSender::new(start), SrReceiver::new(start));
        let mut wire: VecDeque<u32> = VecDeque::new();
        let mut delivered = Vec::new();
        let mut held: Vec<u32> = Vec::new();
        let mut k = 0usize;
        let mut roll = || {
            let r = if k < 4 * script.len() { script[k % script.len()] } else { 3 };
            k += 1;
            r
        };
        let end = start.wrapping_add(msgs);
        let mut resent = 0;
        for _ in 0..100_000 {
            if tx.una() == end {
                break;
            }
            match tx.next_to_send(window, tx.next() != end) {
                Some(n) => {
                    tx.sent(n);
                    let seq = match n {
                        SrNext::Resend(s) => {
                            resent += 1;
                            s
                        }
                        SrNext::New(s) => s,
                    };
                    match roll() % 8 {
                        0 => {}                       // lost
                        1 => wire.extend([seq, seq]), // duplicated
                        2 => wire.push_front(seq),    // overtakes
                        _ => wire.push_back(seq),
                    }
                }
                None => {
                    // Deliver what is on the wire, then POLL.
                    while let Some(s) = wire.pop_front() {
                        match rx.arrive(s, roll() % 5 != 0) {
                            SrArrival::InOrder { then } => {
                                delivered.push(s);
                                held.sort_by_key(|h| h.wrapping_sub(s));
                                for _ in 0..then {
                                    delivered.push(held.remove(0));
                                }
                            }
                            SrArrival::Held { ustat } => {
                                held.push(s);
                                if let Some((lo, hi)) = ustat {
                                    if roll() % 4 != 0 {
                                        tx.ustat(lo, hi);
                                    }
                                }
                            }
                            SrArrival::Duplicate | SrArrival::Dropped => {}
                        }
                    }
                    let p = tx.poll();
                    if roll() % 4 != 0 {
                        // Over the wire: what a receiver sends decodes.
                        let mut b = [0u8; Stat::encoded_len(SR_WINDOW as usize / 2)];
                        let n = rx.stat(p).encode(&mut b).unwrap();
                        let st = Stat::decode(&b[..n]).expect("a receiver's STAT decodes");
                        if roll() % 4 != 0 {
                            tx.stat(&st);
                        }
                    }
                }
            }
        }
        (delivered, resent)
    }

    #[test]
    fn a_lossy_channel_is_recovered_from_by_resending() {
        // Every eighth roll loses a data packet (and drops or loses what
        // the other rolls say); all 200 arrive once, in order, after
        // resends of no more than what went missing or was not kept.
        let script: Vec<u8> = (0u8..=255).collect();
        let (got, resent) = run(100, 200, 16, &script);
        assert_eq!(got, (100..300).collect::<Vec<u32>>());
        assert!(resent > 0 && resent < 200, "{resent} resends");
    }

    proptest! {
        #[test]
        fn every_packet_is_delivered_once_in_order(
            start in prop_oneof![Just(u32::MAX - 20), Just(0u32), any::<u32>()],
            msgs in 1u32..300,
            window in 1u32..80,
            script in proptest::collection::vec(any::<u8>(), 1..64),
        ) {
            let (got, _) = run(start, msgs, window, &script);
            let want: Vec<u32> = (0..msgs).map(|i| start.wrapping_add(i)).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn decoding_any_bytes_never_panics_and_what_decodes_reencodes(
            b in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            if let Some(st) = Stat::decode(&b) {
                let mut out = [0u8; 300];
                let n = st.encode(&mut out).unwrap();
                prop_assert_eq!(&out[..n], &b[..]);
            }
        }

        #[test]
        fn a_clean_channel_resends_nothing(msgs in 1u32..300, window in 1u32..80) {
            // Every roll picks "deliver, keep, pass on".
            let (got, resent) = run(7, msgs, window, &[3]);
            prop_assert_eq!(got.len() as u32, msgs);
            prop_assert_eq!(resent, 0);
        }
    }
}
