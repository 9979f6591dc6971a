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
mod tests;
