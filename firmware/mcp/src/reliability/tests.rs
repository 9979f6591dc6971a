//! Tests of the window logic: sequence comparison across the wrap, the
//! send window's accounting, the receive window's order and holds.

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
