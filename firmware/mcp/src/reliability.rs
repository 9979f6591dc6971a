//! Reliability as pure logic: sequence arithmetic modulo 2^32, the sending
//! window and the receiving check. No hardware, no records, no time: the
//! SDMA machine keeps a [`SendWindow`] per sending stream and the RECV
//! machine a [`RecvWindow`] per receiving stream, and both act on what
//! these types answer. Go-back-N: the receiver takes only the next
//! packet in order; the sender rewinds to the first packet not
//! acknowledged. Selective repeat (`offload::selective`) keeps the same
//! sending window and adds marks of what was acknowledged selectively and
//! what is to be resent; its receiver holds packets past a gap in the
//! same [`RecvWindow`].

/// `a` comes before `b` in sequence space (modulo 2^32: the half of the
/// space behind `b` is "before").
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` is `b` or comes before it.
#[inline]
pub fn seq_le(a: u32, b: u32) -> bool {
    a == b || seq_lt(a, b)
}

/// Whether a packet just sent was new or a retransmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    New,
    Retransmit,
}

/// The sender's view of one stream's sequence space: what is acknowledged,
/// what goes next, how far it has ever gone.
pub trait SendWindow {
    /// Oldest unacknowledged sequence number.
    fn una(&self) -> u32;
    /// Sequence number of the next packet to send.
    fn next(&self) -> u32;
    /// One past the highest sequence number ever sent.
    fn high(&self) -> u32;
    /// Packets sent and not yet acknowledged.
    fn outstanding(&self) -> u32 {
        self.next().wrapping_sub(self.una())
    }
    /// May another packet go with at most `window` outstanding?
    fn has_room(&self, window: u32) -> bool {
        self.outstanding() < window
    }
    /// The packet `next()` was sent.
    fn sent(&mut self) -> Sent;
    /// A cumulative ack: everything before `ack` arrived. True when it
    /// acknowledged something new (it lies in `(una, high]`).
    fn ack(&mut self, ack: u32) -> bool;
    /// Does `seq` name a packet sent and not yet acknowledged?
    fn in_flight(&self, seq: u32) -> bool {
        seq_le(self.una(), seq) && seq_lt(seq, self.high())
    }
    /// Send again from `seq` on.
    fn rewind(&mut self, seq: u32);
    /// Start over at `seq`: nothing outstanding, nothing sent beyond it.
    fn restart(&mut self, seq: u32);
    /// The receiver lost its state (its NIC was reset): everything from
    /// `seq` on goes again, acknowledged by the old receiver or not.
    /// Packets below `high()` still count as resends.
    fn resend_from(&mut self, seq: u32);
    /// Forget what is outstanding: everything ever sent counts as done and
    /// the stream goes on from `high()`.
    fn abandon(&mut self) {
        let h = self.high();
        self.restart(h);
    }
}

/// Go-back-N: one cumulative `una`, a send cursor `next` that a rewind
/// moves back, and `high`, so a packet below it is known to be a resend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GoBackN {
    una: u32,
    next: u32,
    high: u32,
}

impl GoBackN {
    pub const fn new() -> GoBackN {
        GoBackN { una: 0, next: 0, high: 0 }
    }

    /// A window whose sequence space starts at `seq`.
    pub const fn starting_at(seq: u32) -> GoBackN {
        GoBackN { una: seq, next: seq, high: seq }
    }
}

impl SendWindow for GoBackN {
    #[inline]
    fn una(&self) -> u32 {
        self.una
    }
    #[inline]
    fn next(&self) -> u32 {
        self.next
    }
    #[inline]
    fn high(&self) -> u32 {
        self.high
    }

    fn sent(&mut self) -> Sent {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        if seq_lt(seq, self.high) {
            Sent::Retransmit
        } else {
            self.high = self.next;
            Sent::New
        }
    }

    fn ack(&mut self, ack: u32) -> bool {
        if !(seq_lt(self.una, ack) && seq_le(ack, self.high)) {
            return false;
        }
        self.una = ack;
        true
    }

    fn rewind(&mut self, seq: u32) {
        self.next = seq;
    }

    fn restart(&mut self, seq: u32) {
        *self = GoBackN::starting_at(seq);
    }

    fn resend_from(&mut self, seq: u32) {
        self.una = seq;
        self.next = seq;
    }
}

/// What a receiver makes of an arriving sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next one expected: take it.
    InOrder,
    /// Taken before (or, with selective repeat, held already): drop it
    /// and ack again.
    Duplicate,
    /// Ahead of the expected one (a packet was lost): go-back-N drops it
    /// and asks for `expected`; selective repeat may hold it
    /// ([`RecvWindow::hold`]).
    Gap { expected: u32 },
}

/// Packets a receiving stream may hold past a gap (selective repeat):
/// the span of its bitmap.
pub const HOLD_SPAN: u32 = 32;

/// The receiver's side: the next sequence number expected and, for
/// selective repeat, which packets past it are held (bit i: `expected +
/// i`; bit 0 never: that one is missing) and how far the sender is known
/// to have gone (`high`: one past the highest sequence number seen in a
/// packet or a poll; gaps below it were named already), and where the
/// stream was cut (`cut`: a packet past the gap found no room to be held;
/// its sender was told to send everything from it again, so what follows
/// it is dropped until it comes again; `expected + cut`, `NO_CUT`: none).
/// Go-back-N never holds or cuts, and `high` stays unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    expected: u32,
    pub(crate) high: u32,
    held: u32,
    cut: u8,
}

impl Default for RecvWindow {
    fn default() -> RecvWindow {
        RecvWindow::new()
    }
}

/// `RecvWindow::cut` when the stream is not cut.
const NO_CUT: u8 = u8::MAX;

impl RecvWindow {
    pub const fn new() -> RecvWindow {
        RecvWindow { expected: 0, high: 0, held: 0, cut: NO_CUT }
    }

    /// Where the stream is cut, if it is: the packet that found no room
    /// to be held. Until it comes again, what follows it is stale (its
    /// sender goes back to it).
    pub fn cut(&self) -> Option<u32> {
        (self.cut != NO_CUT).then(|| self.expected.wrapping_add(self.cut as u32))
    }

    /// `seq`, past the gap, found no room to be held: its sender is to
    /// send everything from it again. (Within a hold span of `expected`;
    /// further packets cannot come from a sender's window.)
    /// Returns where what the sender is to send again starts: at `seq`,
    /// or before it at a gap no packet has shown yet (packets lost on the
    /// way just before it), which is then named too.
    pub fn cut_at(&mut self, seq: u32) -> u32 {
        let i = seq.wrapping_sub(self.expected);
        if seq_lt(self.expected, seq) && i < HOLD_SPAN {
            self.cut = i as u8;
        }
        if seq_lt(self.high, self.expected) {
            self.high = self.expected;
        }
        if seq_lt(self.high, seq) {
            let lo = self.high;
            self.high = seq;
            lo
        } else {
            seq
        }
    }

    /// `seq` came again: the stream is no longer cut there.
    pub fn uncut(&mut self, seq: u32) {
        if self.cut() == Some(seq) {
            self.cut = NO_CUT;
        }
    }

    #[inline]
    pub fn expected(&self) -> u32 {
        self.expected
    }

    /// Packets held past a gap.
    pub fn held(&self) -> u32 {
        self.held.count_ones()
    }

    /// Is `seq` held? (The expected one is too, between `advance`
    /// saying so and `unhold`: a copy of it arriving then is a duplicate.)
    pub fn is_held(&self, seq: u32) -> bool {
        let i = seq.wrapping_sub(self.expected);
        seq_le(self.expected, seq) && i < HOLD_SPAN && self.held & (1 << i) != 0
    }

    pub fn check(&self, seq: u32) -> Arrival {
        if seq_lt(seq, self.expected) || self.is_held(seq) {
            Arrival::Duplicate
        } else if seq != self.expected {
            Arrival::Gap { expected: self.expected }
        } else {
            Arrival::InOrder
        }
    }

    /// The expected packet was taken. True when the next one is held
    /// already: take it now ([`RecvWindow::unhold`] first).
    pub fn advance(&mut self) -> bool {
        self.cut = match self.cut {
            // The packet it was cut at was taken.
            0 | NO_CUT => NO_CUT,
            c => c - 1,
        };
        self.expected = self.expected.wrapping_add(1);
        self.held >>= 1;
        if seq_lt(self.high, self.expected) {
            self.high = self.expected;
        }
        self.held & 1 != 0
    }

    /// Can `seq` (a gap's packet, `check` said so) be held: within the
    /// bitmap's span?
    pub fn can_hold(&self, seq: u32) -> bool {
        seq_lt(self.expected, seq) && seq.wrapping_sub(self.expected) < HOLD_SPAN
    }

    /// Hold `seq` past the gap (`can_hold` said yes). Returns the gap it
    /// opened, `lo..hi`, if it lies past every packet seen so far (a
    /// USTAT to send at once), and raises `high`.
    pub fn hold(&mut self, seq: u32) -> Option<(u32, u32)> {
        if !self.can_hold(seq) {
            return None;
        }
        self.held |= 1 << seq.wrapping_sub(self.expected);
        self.saw(seq)
    }

    /// The expected packet `seq` was refused (no buffer, busy): its
    /// sender was told, and goes back to it; a gap a later packet shows
    /// starts after it.
    pub fn refused(&mut self, seq: u32) {
        if seq_le(self.high, seq) {
            self.high = seq.wrapping_add(1);
        }
    }

    fn saw(&mut self, seq: u32) -> Option<(u32, u32)> {
        if seq_lt(self.high, self.expected) {
            self.high = self.expected;
        }
        let gap = seq_lt(self.high, seq).then_some((self.high, seq));
        if seq_le(self.high, seq) {
            self.high = seq.wrapping_add(1);
        }
        gap
    }

    /// A held packet is let go of (taken now, or dropped): no longer held.
    pub fn unhold(&mut self, seq: u32) {
        let i = seq.wrapping_sub(self.expected);
        if i < HOLD_SPAN {
            self.held &= !(1 << i);
        }
    }

    /// Let go of every held packet (the stream restarts, its sender
    /// renumbers what follows, or goes back to the gap). How far the
    /// sender went stays: its going back (or a poll) brings what was let
    /// go of, and a USTAT naming it again would have it sent twice.
    pub fn release_all(&mut self) {
        self.held = 0;
        self.cut = NO_CUT;
    }

    /// The sender (re)starts the stream at `seq` (a SYNC): nothing held.
    pub fn restart(&mut self, seq: u32) {
        *self = RecvWindow { expected: seq, high: seq, held: 0, cut: NO_CUT };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    #[test]
    fn a_cut_names_from_the_first_unnamed_gap_and_lasts_until_its_packet_comes_again() {
        let mut w = RecvWindow::new();
        w.restart(10);
        // 10 lost; 11 held (names 10); 12, 13 lost; 14 finds no room.
        assert_eq!(w.hold(11), Some((10, 11)));
        assert_eq!(w.cut_at(14), 12, "12 and 13 were never named: the cut names them too");
        assert_eq!(w.cut(), Some(14));
        // A later gap is not named again by a hold below the cut.
        assert_eq!(w.hold(12), None);
        // 10 comes: taken (11 is held, next); the cut stays where it is.
        assert!(w.advance());
        w.unhold(11);
        assert_eq!(w.expected(), 11);
        assert_eq!(w.cut(), Some(14));
        w.uncut(13);
        assert_eq!(w.cut(), Some(14), "only the packet it was cut at lifts it");
        w.uncut(14);
        assert_eq!(w.cut(), None);
        // A cut lifted by taking its packet in order.
        w.restart(0);
        assert_eq!(w.cut_at(1), 0);
        assert!(!w.advance());
        assert_eq!(w.cut(), Some(1));
        assert!(!w.advance());
        assert_eq!(w.cut(), None);
        // Restarting or letting go of the holds forgets it.
        w.cut_at(3);
        w.release_all();
        assert_eq!(w.cut(), None);
    }

    #[test]
    fn comparison_crosses_the_wrap() {
        assert!(seq_lt(u32::MAX, 0));
        assert!(seq_lt(u32::MAX - 5, 3));
        assert!(!seq_lt(3, u32::MAX - 5));
        assert!(seq_le(7, 7) && !seq_lt(7, 7));
        // Half the space ahead counts as ahead, the other half as behind.
        assert!(seq_lt(0, 0x7fff_ffff));
        assert!(!seq_lt(0, 0x8000_0001));
    }

    #[test]
    fn resending_from_below_the_acknowledged_mark_leaves_room_and_counts_resends() {
        let mut w = GoBackN::starting_at(78);
        for _ in 0..5 {
            w.sent();
        }
        assert!(w.ack(79));
        // The receiver lost its state: 78 goes again though it was acked.
        w.resend_from(78);
        assert_eq!((w.una(), w.next(), w.high(), w.outstanding()), (78, 78, 83, 0));
        assert!(w.has_room(1));
        assert_eq!(w.sent(), Sent::Retransmit);
        assert!(w.in_flight(78));
    }

    #[test]
    fn window_counts_outstanding_across_the_wrap() {
        let mut w = GoBackN::starting_at(u32::MAX - 1);
        assert_eq!(w.sent(), Sent::New);
        assert_eq!(w.sent(), Sent::New);
        assert_eq!(w.sent(), Sent::New);
        assert_eq!((w.next(), w.high(), w.outstanding()), (1, 1, 3));
        assert!(w.has_room(4) && !w.has_room(3));
        assert!(w.in_flight(u32::MAX) && w.in_flight(0) && !w.in_flight(1));
        assert!(w.ack(0));
        assert_eq!((w.una(), w.outstanding()), (0, 1));
    }

    #[test]
    fn ack_outside_una_to_high_is_ignored() {
        let mut w = GoBackN::starting_at(10);
        for _ in 0..5 {
            w.sent();
        }
        assert!(!w.ack(10), "no progress");
        assert!(!w.ack(16), "beyond what was sent");
        assert!(!w.ack(9), "behind una");
        assert!(w.ack(13));
        assert!(!w.ack(12), "an older ack after a newer one");
        assert!(w.ack(15));
        assert_eq!(w.outstanding(), 0);
    }

    #[test]
    fn resends_after_a_rewind_are_retransmits_until_high() {
        let mut w = GoBackN::starting_at(100);
        for _ in 0..4 {
            assert_eq!(w.sent(), Sent::New);
        }
        w.rewind(101);
        assert_eq!(w.next(), 101);
        assert_eq!(w.sent(), Sent::Retransmit);
        assert_eq!(w.sent(), Sent::Retransmit);
        assert_eq!(w.sent(), Sent::Retransmit);
        assert_eq!(w.sent(), Sent::New);
        assert_eq!(w.high(), 105);
    }

    #[test]
    fn abandon_moves_everything_to_high() {
        let mut w = GoBackN::starting_at(5);
        w.sent();
        w.sent();
        w.rewind(5);
        w.abandon();
        assert_eq!((w.una(), w.next(), w.high()), (7, 7, 7));
    }

    #[test]
    fn receiver_takes_in_order_drops_duplicates_and_reports_gaps_across_the_wrap() {
        let mut r = RecvWindow::new();
        r.restart(u32::MAX);
        assert_eq!(r.check(u32::MAX), Arrival::InOrder);
        r.advance();
        assert_eq!(r.expected(), 0);
        assert_eq!(r.check(u32::MAX), Arrival::Duplicate);
        assert_eq!(r.check(1), Arrival::Gap { expected: 0 });
        assert_eq!(r.check(0), Arrival::InOrder);
    }

    /// A go-back-N sender and receiver over a channel that loses,
    /// duplicates and reorders packets and acks by a fixed script; the
    /// sender retransmits from `una` when nothing moved for a while.
    fn run(start: u32, msgs: u32, window: u32, script: &[u8]) -> Vec<u32> {
        let mut tx = GoBackN::starting_at(start);
        let mut rx = RecvWindow::new();
        rx.restart(start);
        let mut wire: VecDeque<u32> = VecDeque::new();
        let mut acks: VecDeque<u32> = VecDeque::new();
        let mut delivered = Vec::new();
        let end = start.wrapping_add(msgs);
        let mut idle = 0;
        // Each packet's and ack's fate: a xorshift stream seeded by the
        // script (a fixed pattern could line up with the rounds and lose
        // the same packet forever).
        let mut x = script
            .iter()
            .fold(0x9E37_79B9_7F4A_7C15u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01B3))
            | 1;
        let mut fate = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        };
        for _ in 0..100_000 {
            if tx.una() == end {
                break;
            }
            let mut moved = false;
            while tx.has_room(window) && tx.next() != end {
                let seq = tx.next();
                tx.sent();
                match fate() % 8 {
                    0 => {}                                       // lost
                    1 => wire.extend([seq, seq]),                 // duplicated
                    2 if !wire.is_empty() => wire.insert(0, seq), // overtakes
                    _ => wire.push_back(seq),
                }
            }
            while let Some(seq) = wire.pop_front() {
                match rx.check(seq) {
                    Arrival::InOrder => {
                        delivered.push(seq);
                        rx.advance();
                    }
                    Arrival::Duplicate | Arrival::Gap { .. } => {}
                }
                if fate() % 5 != 0 {
                    acks.push_back(rx.expected());
                }
            }
            while let Some(a) = acks.pop_front() {
                if tx.ack(a) {
                    moved = true;
                }
            }
            idle = if moved { 0 } else { idle + 1 };
            if idle >= 2 {
                let una = tx.una();
                tx.rewind(una);
                idle = 0;
            }
        }
        delivered
    }

    proptest! {
        #[test]
        fn delivered_sequence_equals_sent_sequence(
            start in prop_oneof![Just(u32::MAX - 20), Just(0u32), any::<u32>()],
            msgs in 1u32..200,
            window in 1u32..16,
            script in proptest::collection::vec(any::<u8>(), 1..64),
        ) {
            let got = run(start, msgs, window, &script);
            let want: Vec<u32> = (0..msgs).map(|i| start.wrapping_add(i)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
