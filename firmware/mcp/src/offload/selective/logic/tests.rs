//! Tests of selective repeat's logic: STAT encoding, poll sequence
//! comparison, and sender and receiver together over lossy runs.

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
