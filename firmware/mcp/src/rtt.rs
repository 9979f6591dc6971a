//! The retransmission timeout from the measured round trip, per sending
//! stream: smoothed round trip (SRTT) and its mean deviation (RTTVAR), as
//! TCP keeps them, with Karn's rule (a packet sent twice gives no sample:
//! its ack cannot say which copy it answers).
//!
//! One packet of a stream is timed at a time: from the moment it goes
//! into a transmit buffer to the ack that covers it. The timeout is
//! `SRTT + 4 RTTVAR`, never below the profile's retransmission time (the
//! floor) and never above [`RTO_CEILING`] times it; until the first
//! sample it is [`RTO_INITIAL`] times the floor (a stream's first round
//! trip is often its slowest: every sender starts at once). Backoff
//! doubles it after each timeout in a row (the caller's). Under incast a receiver's queue holds acks for
//! longer than a fixed timeout: the measured round trip grows with it, so
//! senders stop resending what the receiver already has.
//!
//! Pure: times are RTC ticks given by the caller; tested below.

use crate::reliability::seq_lt;

/// The timeout is at most this many times the configured one.
pub const RTO_CEILING: u64 = 64;
/// Before any sample, the timeout is this many times the configured one.
pub const RTO_INITIAL: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtt {
    /// Smoothed round trip, in ticks x 8 (0: no sample yet).
    srtt8: u32,
    /// Mean deviation, in ticks x 4.
    rttvar4: u32,
    /// The packet being timed, and when it went into its buffer (low 32
    /// bits of the RTC, at least 1); `timed_at` 0: none.
    timed_seq: u32,
    timed_at: u32,
}

impl Default for Rtt {
    fn default() -> Self {
        Self::new()
    }
}

impl Rtt {
    pub const fn new() -> Rtt {
        Rtt { srtt8: 0, rttvar4: 0, timed_seq: 0, timed_at: 0 }
    }

    /// Packet `seq` was put in a buffer for the first time at `now`: time
    /// it unless another is being timed.
    #[inline]
    pub fn sent_new(&mut self, seq: u32, now: u64) {
        if self.timed_at == 0 {
            self.timed_seq = seq;
            self.timed_at = (now as u32).max(1);
        }
    }

    /// Everything before `ack` arrived, seen at `now`: a sample if the
    /// timed packet is among it.
    #[inline]
    pub fn acked(&mut self, ack: u32, now: u64) {
        if self.timed_at != 0 && seq_lt(self.timed_seq, ack) {
            self.sample((now as u32).wrapping_sub(self.timed_at));
            self.timed_at = 0;
        }
    }

    /// The stream goes back to `seq` (a timeout or a nack): if the timed
    /// packet is sent again, its ack would be ambiguous (Karn's rule).
    #[inline]
    pub fn rewound(&mut self, seq: u32) {
        if self.timed_at != 0 && !seq_lt(self.timed_seq, seq) {
            self.timed_at = 0;
        }
    }

    /// The stream timed out at `now` with the timed packet
    /// unacknowledged, and polls its receiver. Timed from its first
    /// send, the ack that ends the wait would measure the timeout itself
    /// (lost acks would feed it back into the timeout, up to its
    /// ceiling); timed from the poll, it measures the poll's round trip,
    /// which crosses the same queues (the answer comes after everything
    /// sent before the poll) and so still grows under incast.
    #[inline]
    pub fn timed_out(&mut self, now: u64) {
        if self.timed_at != 0 {
            self.timed_at = (now as u32).max(1);
        }
    }

    /// One round trip of `r` ticks (RFC 6298's smoothing: gains 1/8 and
    /// 1/4, kept in fixed point).
    pub fn sample(&mut self, r: u32) {
        let r = r.max(1);
        if self.srtt8 == 0 {
            self.srtt8 = r.saturating_mul(8);
            self.rttvar4 = r.saturating_mul(2);
            return;
        }
        let srtt = self.srtt8 / 8;
        let dev = srtt.abs_diff(r);
        // rttvar = 3/4 rttvar + 1/4 |srtt - r|, srtt = 7/8 srtt + 1/8 r
        self.rttvar4 = (self.rttvar4 - self.rttvar4 / 4).saturating_add(dev);
        self.srtt8 = (self.srtt8 - self.srtt8 / 8).saturating_add(r);
    }

    /// The smoothed round trip in ticks (None before the first sample).
    pub fn srtt(&self) -> Option<u32> {
        (self.srtt8 != 0).then_some(self.srtt8 / 8)
    }

    /// The timeout for a configured one of `floor` ticks, before backoff.
    pub fn rto(&self, floor: u64) -> u64 {
        if self.srtt8 == 0 {
            return floor.saturating_mul(RTO_INITIAL);
        }
        let measured = (self.srtt8 / 8) as u64 + self.rttvar4 as u64;
        measured.clamp(floor, floor.saturating_mul(RTO_CEILING))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_the_first_sample_the_timeout_is_a_multiple_of_the_configured_one() {
        let r = Rtt::new();
        assert_eq!(r.srtt(), None);
        assert_eq!(r.rto(100), 100 * RTO_INITIAL);
    }

    #[test]
    fn the_ack_that_ends_a_timeout_measures_the_poll_not_the_wait() {
        let mut r = Rtt::new();
        r.sent_new(5, 1000);
        // No ack for 89,000 ticks: the stream polls at 90,000 ...
        r.timed_out(90_000);
        // ... and the answer, 600 ticks later, acknowledges packet 5.
        r.acked(6, 90_600);
        assert_eq!(r.srtt(), Some(600), "the poll's round trip, not the wait");
        // Nothing timed: a timeout times nothing.
        let mut r = Rtt::new();
        r.timed_out(90_000);
        r.acked(6, 90_600);
        assert_eq!(r.srtt(), None);
    }

    #[test]
    fn first_sample_sets_srtt_and_half_of_it_as_deviation() {
        let mut r = Rtt::new();
        r.sent_new(5, 1000);
        r.acked(6, 1400);
        assert_eq!(r.srtt(), Some(400));
        // 400 + 4 x 200
        assert_eq!(r.rto(100), 1200);
    }

    #[test]
    fn smoothing_follows_rfc_6298_gains() {
        let mut r = Rtt::new();
        r.sample(800);
        r.sample(400);
        // srtt = 7/8 800 + 1/8 400 = 750; rttvar = 3/4 400 + 1/4 400 = 400
        assert_eq!(r.srtt(), Some(750));
        assert_eq!(r.rto(100), 750 + 4 * 400);
    }

    #[test]
    fn steady_round_trips_bring_the_timeout_down_to_the_floor() {
        let mut r = Rtt::new();
        for _ in 0..100 {
            r.sample(300);
        }
        assert_eq!(r.srtt(), Some(300));
        assert_eq!(r.rto(1000), 1000, "never below the configured timeout");
        assert!(r.rto(10) < 400, "the deviation decays: {}", r.rto(10));
    }

    #[test]
    fn the_timeout_is_bounded_above() {
        let mut r = Rtt::new();
        r.sample(u32::MAX);
        r.sample(u32::MAX);
        r.sample(1);
        assert_eq!(r.rto(10), 10 * RTO_CEILING);
    }

    #[test]
    fn an_ack_before_the_timed_packet_gives_no_sample() {
        let mut r = Rtt::new();
        r.sent_new(10, 100);
        r.acked(10, 500); // covers 0..10, not 10
        assert_eq!(r.srtt(), None);
        r.acked(11, 800);
        assert_eq!(r.srtt(), Some(700));
    }

    #[test]
    fn one_packet_is_timed_at_a_time() {
        let mut r = Rtt::new();
        r.sent_new(1, 100);
        r.sent_new(2, 150); // not timed: 1 is
        r.acked(3, 400);
        assert_eq!(r.srtt(), Some(300));
    }

    #[test]
    fn karns_rule_a_resent_packet_is_not_sampled() {
        let mut r = Rtt::new();
        r.sent_new(7, 0);
        r.rewound(7); // 7 goes out again
        r.acked(8, 5000);
        assert_eq!(r.srtt(), None);
        // A rewind past the timed packet keeps the sample.
        r.sent_new(8, 6000);
        r.rewound(9);
        r.acked(9, 6300);
        assert_eq!(r.srtt(), Some(300));
    }

    #[test]
    fn the_rtc_wrapping_its_low_bits_still_samples() {
        let mut r = Rtt::new();
        r.sent_new(0, u32::MAX as u64 - 49);
        r.acked(1, u32::MAX as u64 + 151);
        assert_eq!(r.srtt(), Some(200));
    }

    #[test]
    fn sequence_numbers_that_wrap_still_sample() {
        let mut r = Rtt::new();
        r.sent_new(u32::MAX, 10);
        r.acked(0, 100);
        assert_eq!(r.srtt(), Some(90));
    }
}
