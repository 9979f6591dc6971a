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
mod tests;
