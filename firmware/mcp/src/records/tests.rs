//! Tests of the records' encodings.

use super::*;
use nic_abi::packet::NackCode;

const GAP: u8 = NackCode::OutOfOrder as u8;
const NOBUF: u8 = NackCode::NoBuffer as u8;

#[test]
fn a_queued_control_folds_later_news_for_its_stream() {
    // An ack becomes a nack (which carries the ack too).
    let mut c = Control::new(RxId::new(3), None);
    c.merge(Some((GAP, 10)), 2);
    assert_eq!((c.nack(), c.round), (Some((GAP, 10)), 2));
    // A later ack adds nothing.
    c.merge(None, 0);
    assert_eq!((c.nack(), c.round), (Some((GAP, 10)), 2));
    // A no-buffer nack for the same packet says more than a gap.
    c.merge(Some((NOBUF, 10)), 3);
    assert_eq!((c.nack(), c.round), (Some((NOBUF, 10)), 3));
    // ... and a gap for it afterwards keeps the code, takes the round.
    c.merge(Some((GAP, 10)), 4);
    assert_eq!((c.nack(), c.round), (Some((NOBUF, 10)), 4));
    // Another sequence number replaces it.
    c.merge(Some((GAP, 12)), 4);
    assert_eq!(c.nack(), Some((GAP, 12)));
}

#[test]
fn backoff_leaves_room_for_sixteen_tries_in_the_send_timeout() {
    let rto = 1_000_000;
    let once = TxStream::EMPTY.rtt.rto(rto);
    let mut st = TxStream::EMPTY;
    // A minute's send timeout: doubled up to the most backoff.
    st.backoff = MAX_BACKOFF;
    assert_eq!(st.poll_after(rto, false, 60_000_000_000), once << MAX_BACKOFF);
    // A short one: no try waits more than a sixteenth of it ...
    let short = 32 * once;
    for b in 0..=MAX_BACKOFF {
        st.backoff = b;
        assert_eq!(st.poll_after(rto, false, short), (once << b).min(2 * once), "{b}");
    }
    // ... nor less than one timeout, however short it is.
    assert_eq!(st.poll_after(rto, false, once), once);
}

#[test]
fn a_refused_window_waits_twice_as_long_each_time_up_to_a_cap() {
    let retry = 200_000;
    let minute = 60_000_000_000;
    let mut st = TxStream::EMPTY;
    // The first refusal waits the retry time, each after it twice
    // the one before, up to 2^MAX_REFUSAL_SHIFT times it.
    for k in 0..=MAX_REFUSAL_SHIFT {
        assert_eq!(st.refused(retry, minute), retry << k, "{k}");
    }
    assert_eq!(st.refused(retry, minute), retry << MAX_REFUSAL_SHIFT);
    // Never more than a sixteenth of a short send timeout ...
    let mut st = TxStream::EMPTY;
    let short = 32 * retry;
    let waits: Vec<u64> = (0..5).map(|_| st.refused(retry, short)).collect();
    assert_eq!(waits, [retry, 2 * retry, 2 * retry, 2 * retry, 2 * retry]);
    // ... nor less than the retry time.
    let mut st = TxStream::EMPTY;
    assert_eq!(st.refused(retry, retry), retry);
}

#[test]
fn a_poll_is_neither_an_ack_nor_a_nack() {
    let p = Control::poll(TxId::new(5));
    assert!(p.is_poll());
    assert_eq!(p.nack(), None);
    assert!(!Control::new(RxId::new(5), Some((GAP, 1))).is_poll());
    assert!(!Control::new(RxId::new(5), None).is_poll());
    // A poll names a sending stream, the others a receiving one.
    assert_eq!((p.tx_stream(), p.rx_stream()), (Some(TxId::new(5)), None));
    let a = Control::new(RxId::new(5), None);
    assert_eq!((a.tx_stream(), a.rx_stream()), (None, Some(RxId::new(5))));
    assert!(a.is_for(RxId::new(5)) && !a.is_for(RxId::new(4)) && !p.is_for(RxId::new(5)));
}

#[test]
fn a_receive_slots_links_keep_their_raw_layout() {
    // None is written as `pool::RAW_NONE`, a leaf one below it, a
    // record and a slot as their index: what the image always wrote.
    let mut v = RecvSlot::EMPTY;
    let mut b = [0u8; map::RX_SLOT_SIZE as usize];
    v.encode(&mut b);
    assert_eq!((&b[36..38], &b[38..40]), (&[0xff, 0xff][..], &[0xff, 0xff][..]));
    v.mrec = Mrec::LEAF;
    v.next = Some(SlotId::new(0x42));
    v.encode(&mut b);
    assert_eq!((&b[36..38], &b[38..40]), (&[0xfe, 0xff][..], &[0x42, 0][..]));
    let back = RecvSlot::decode(&b);
    assert_eq!((back.mrec, back.next), (Mrec::LEAF, Some(SlotId::new(0x42))));
    let seven = McastId::new(7);
    for (m, rec) in [(Mrec::NONE, None), (Mrec::LEAF, None), (Mrec::rec_of(seven), Some(seven))] {
        assert_eq!((Mrec::from_raw(m.raw()), m.rec()), (m, rec));
    }
    assert_eq!(size_of::<Mrec>(), 2);
}
