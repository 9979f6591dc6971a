//! The event records' tests (event.rs).

use super::*;

#[test]
fn lost_heads_hold_every_node_and_merge_bytes_as_the_nic_writes_them() {
    let mut h = LostHeads::NONE;
    assert!(h.is_empty());
    for n in [0u16, 7, 8, 63, 64, 1023] {
        h.insert(n);
    }
    h.insert(1024); // past the bitmap: ignored
    assert_eq!(h.iter().collect::<Vec<_>>(), vec![0, 7, 8, 63, 64, 1023]);
    let mut bytes = [0u8; LOST_BYTES];
    for n in h.iter() {
        bytes[n as usize / 8] |= 1 << (n % 8);
    }
    let mut m = LostHeads::NONE;
    m.merge(0, &bytes[..64]);
    m.merge(64, &bytes[64..]);
    m.merge(LOST_BYTES - 1, &[0xff, 0xff]); // the second byte is past the end
    h.0[LOST_BYTES / 8 - 1] |= 0xff << 56;
    assert_eq!(m, h);
}

#[test]
fn event_round_trips() {
    let mut e = Event::empty(EventKind::Received);
    e.status = 0;
    e.priority = Priority::High;
    e.port = 5;
    e.node = 300;
    e.size_class = 20;
    e.inline_len = 3;
    e.inline[..3].copy_from_slice(b"abc");
    e.len = 1 << 20;
    e.addr = 0x1000;
    e.tag = 42;
    e.rtc = 1_000_000;
    e.seq = 9;
    let mut b = [0u8; 64];
    e.encode(&mut b);
    assert_eq!(Event::decode(&b), Ok(e));
    assert_eq!(Event::slot_seq(&b), 9);
}

#[test]
fn multicast_events_round_trip() {
    let mut e = Event::empty(EventKind::Received);
    e.len = 2;
    e.mcast = Some(McastInfo {
        group: 3,
        mseq: 77,
        scheme: 2,
        alg: 4,
        k: 3,
        unreached: 0,
        lost: LostHeads::NONE,
    });
    let mut b = [0u8; 64];
    e.encode(&mut b);
    assert_eq!(Event::decode(&b), Ok(e));
    let mut s = Event::empty(EventKind::Sent);
    s.status = SendStatus::Incomplete as u8;
    s.mcast = Some(McastInfo {
        group: 1,
        mseq: 5,
        scheme: 1,
        alg: 2,
        k: 0,
        unreached: 4,
        lost: LostHeads::NONE,
    });
    s.inline[..2].copy_from_slice(&4u16.to_le_bytes());
    s.encode(&mut b);
    assert_eq!(Event::decode(&b), Ok(s));
    // A piece of the lost heads: 16 bytes of the bitmap at an offset.
    let mut l = Event::empty(EventKind::McastLost);
    l.tag = 7;
    l.len = 16;
    l.inline_len = INLINE_MAX as u8;
    l.inline[3] = 0x81;
    l.encode(&mut b);
    let d = Event::decode(&b).unwrap();
    assert_eq!(d, l);
    let mut heads = LostHeads::NONE;
    heads.merge(d.len as usize, &d.inline);
    assert_eq!(heads.iter().collect::<Vec<_>>(), vec![(16 + 3) * 8, (16 + 3) * 8 + 7]);
    // A unicast event has none.
    Event::empty(EventKind::Received).encode(&mut b);
    assert_eq!(Event::decode(&b).unwrap().mcast, None);
}

#[test]
fn bad_events_are_refused() {
    let mut b = [0u8; 64];
    assert_eq!(Event::decode(&b), Err(ParseError::BadField("kind")));
    Event::empty(EventKind::Sent).encode(&mut b);
    assert_eq!(Event::decode(&b[..63]), Err(ParseError::Truncated));
    b[7] = 17;
    assert_eq!(Event::decode(&b), Err(ParseError::BadField("inline_len")));
}

#[test]
fn codes_round_trip() {
    for v in 0..=255u8 {
        if let Some(k) = EventKind::from_u8(v) {
            assert_eq!(k as u8, v);
        }
        if let Some(s) = SendStatus::from_u8(v) {
            assert_eq!(s as u8, v);
        }
        if let Some(c) = ErrorCause::from_u8(v) {
            assert_eq!(c as u8, v);
        }
    }
}
