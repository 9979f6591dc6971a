//! The reprs and views against the wire: `emit` then `parse` gives the
//! repr back, `parse` then `emit` gives back every header as the MCP
//! sends it (the fields a type does not use zero), the views read what
//! the reprs say, and the piggybacked acks land where `emit` puts them.

use super::*;
use proptest::prelude::*;
use std::vec::Vec;

const A: Addr =
    Addr { src_node: 3, src_port: 1, dst_node: 0x1234, dst_port: 7, priority: Priority::High };

/// A header of `ptype` from `A`, every other field zero.
fn blank(ptype: PacketType) -> Header {
    Header {
        ptype,
        flags: Flags::empty(),
        priority: A.priority,
        nack_code: 0,
        src_node: A.src_node,
        dst_node: A.dst_node,
        src_port: A.src_port,
        dst_port: A.dst_port,
        size_class: 0,
        seq: 0,
        ack: 0,
        msg_len: 0,
        offset: 0,
        payload_len: 0,
        remote: 0,
        cookie: 0,
        sync_boot: 0,
        sync_gen: 0,
        crc: 0,
    }
}

/// The header's bytes with a zero payload of its length, parsed back.
fn on_the_wire(h: &Header) -> Result<Header, ParseError> {
    let mut b = std::vec![0u8; HEADER_LEN + h.payload_len as usize];
    h.encode(&mut b);
    Header::parse(&b)
}

/// One header of each type, as the MCP builds it.
fn as_sent() -> Vec<Header> {
    let mut v = sequenced_as_sent();
    v.extend(controls_as_sent());
    v
}

/// Sequenced packets as the MCP builds them (the first seven of
/// `as_sent`).
fn sequenced_as_sent() -> Vec<Header> {
    let tag = McastTag { group: 9, mseq: 77, scheme: 2, alg: 3, k: 4, subtree: 5 };
    let seq = |ptype, flags| Header {
        flags,
        nack_code: 0x42,
        size_class: 12,
        seq: 0x1000_0001,
        sync_boot: 0xb007,
        sync_gen: 3,
        ..blank(ptype)
    };
    let first = Flags::FIRST | Flags::SYNC | Flags::INCARNATION;
    std::vec![
        // A SYNC naming its incarnation, then a later packet of its
        // message: stamped, no flag, an ack piggybacked.
        Header { ack: 17, msg_len: 8192, payload_len: 4096, ..seq(PacketType::Data, first) },
        Header {
            ack: 99,
            msg_len: 8192,
            offset: 4096,
            payload_len: 4096,
            ..seq(PacketType::Data, Flags::LAST | Flags::ACK_VALID)
        },
        Header {
            msg_len: 100,
            payload_len: 100,
            remote: tag.remote(),
            cookie: tag.cookie(),
            ..seq(PacketType::Data, Flags::FIRST | Flags::LAST | Flags::MCAST)
        },
        Header {
            msg_len: 64,
            payload_len: 64,
            remote: 0x7f00_1000,
            ..seq(PacketType::Put, Flags::FIRST | Flags::LAST)
        },
        Header {
            msg_len: 1 << 20,
            remote: 0x7f00_2000,
            cookie: 12,
            ..seq(PacketType::GetReq, Flags::FIRST | Flags::LAST | Flags::ACK_VALID)
        },
        Header {
            msg_len: 1 << 20,
            offset: 4096,
            payload_len: 4096,
            cookie: 12,
            ..seq(PacketType::GetResp, Flags::empty())
        },
        Header {
            msg_len: 2,
            offset: 55,
            payload_len: 3,
            remote: tag.remote(),
            cookie: tag.cookie(),
            ..seq(PacketType::Report, Flags::FIRST | Flags::LAST | Flags::MCAST)
        },
    ]
}

/// Control and offload packets as the MCP builds them.
fn controls_as_sent() -> Vec<Header> {
    std::vec![
        Header { flags: Flags::ACK_VALID, ack: 5, ..blank(PacketType::Ack) },
        Header { flags: Flags::ACK_VALID | Flags::MCAST, ack: 5, ..blank(PacketType::Ack) },
        Header {
            flags: Flags::ACK_VALID,
            nack_code: NackCode::OutOfOrder as u8,
            seq: 5,
            ack: 5,
            offset: 0xfe,
            ..blank(PacketType::Nack)
        },
        Header {
            flags: Flags::INCARNATION | Flags::MCAST,
            nack_code: 7,
            seq: 5,
            ack: 40,
            msg_len: 9,
            offset: 12,
            sync_boot: 0xb007,
            ..blank(PacketType::Poll)
        },
        Header { flags: Flags::ACK_VALID, ack: 5, payload_len: 24, ..blank(PacketType::Stat) },
        Header { flags: Flags::ACK_VALID, ack: 5, payload_len: 24, ..blank(PacketType::Ustat) },
        Header { cookie: 8, remote: 123_456_789, ..blank(PacketType::EchoRequest) },
        Header { cookie: 8, remote: 123_456_789, ..blank(PacketType::EchoReply) },
    ]
}

#[test]
fn every_type_as_sent_comes_back_word_for_word() {
    let sent = as_sent();
    for t in 1..=12 {
        let ptype = PacketType::from_u8(t).unwrap();
        assert!(sent.iter().any(|h| h.ptype == ptype), "no {ptype:?}");
    }
    for h in sent {
        assert_eq!(on_the_wire(&h), Ok(h), "{h:?}");
        let r = PacketRepr::parse(&h).unwrap();
        assert_eq!(r.words(), h.words(), "{r:?}");
        assert_eq!(PacketRepr::from_words(&h.words(), HEADER_LEN + h.payload_len as usize), Ok(r));
    }
}

#[test]
fn the_views_name_each_field_by_type() {
    let sent = as_sent();
    let PacketView::Data(d) = sent[0].view() else { panic!() };
    let s = d.stream();
    assert!(s.first() && s.sync() && !s.last());
    assert_eq!((s.incarnation(), s.ack(), s.round()), (Some(17), None, 0x42));
    assert_eq!(s.stamp(), SyncStamp { boot: 0xb007, gen: 3 });
    assert_eq!(d.kind(), DataKind::Data { mcast: None });
    let PacketView::Data(d) = sent[1].view() else { panic!() };
    assert!(!d.stream().sync() && d.stream().last());
    assert_eq!((d.stream().ack(), d.stream().incarnation(), d.offset()), (Some(99), None, 4096));
    let PacketView::Data(d) = sent[2].view() else { panic!() };
    assert_eq!(d.mcast().map(|t| (t.group, t.subtree)), Some((9, 5)));
    let PacketView::Data(d) = sent[3].view() else { panic!() };
    assert_eq!((d.kind(), d.mcast()), (DataKind::Put { remote_addr: 0x7f00_1000 }, None));
    let PacketView::GetReq(g) = sent[4].view() else { panic!() };
    assert_eq!((g.remote_addr(), g.len(), g.get()), (0x7f00_2000, 1 << 20, 12));
    let PacketView::Data(d) = sent[5].view() else { panic!() };
    assert_eq!(d.kind(), DataKind::GetResp { get: 12 });
    let PacketView::Report(r) = sent[6].view() else { panic!() };
    assert_eq!((r.tag().mseq, r.unreached(), r.data_ack(), r.lost_len()), (77, 2, Some(55), 3));
    let PacketView::Ack(a) = sent[8].view() else { panic!() };
    assert_eq!((a.ack(), a.report_stream()), (Some(5), true));
    let PacketView::Nack(n) = sent[9].view() else { panic!() };
    assert_eq!((n.code(), n.seq(), n.round()), (Some(NackCode::OutOfOrder), 5, 0xfe));
    let PacketView::Poll(p) = sent[10].view() else { panic!() };
    assert_eq!((p.una(), p.next(), p.round(), p.poll()), (5, 12, 7, 9));
    assert_eq!((p.boot(), p.incarnation(), p.report_stream()), (0xb007, Some(40), true));
    assert_eq!(sent[10].view().ack(), None);
    let PacketView::Stat(u) = sent[12].view() else { panic!() };
    assert_eq!((u.is_ustat(), u.ack(), u.payload_len()), (true, Some(5), 24));
    let PacketView::Echo(e) = sent[14].view() else { panic!() };
    assert_eq!((e.is_reply(), e.cookie(), e.sent()), (true, 8, 123_456_789));
}

#[test]
fn a_nack_of_no_known_code_does_not_parse() {
    let h = Header { nack_code: 0, ..blank(PacketType::Nack) };
    assert_eq!(PacketRepr::parse(&h), Err(ParseError::BadField("nack_code")));
}

/// The header's word at byte `at`.
fn word(h: &Header, at: u32) -> u64 {
    h.words()[at as usize / 8]
}

#[test]
fn piggybacked_acks_land_where_emit_puts_them() {
    let stream = match PacketRepr::parse(&as_sent()[1]).unwrap() {
        PacketRepr::Data(d) => d,
        r => panic!("{r:?}"),
    };
    let bare = DataRepr { stream: SeqRepr { ack: None, ..stream.stream }, ..stream };
    let (h, want) = (bare.emit(), stream.emit());
    assert!(piggyback::has_ack_room(h.words()[0]));
    let w0 = piggyback::with_flags(h.words()[0], Flags::ACK_VALID);
    let w2 = piggyback::with_ack(word(&h, piggyback::ACK_WORD), 99);
    assert_eq!((w0, w2), (want.words()[0], word(&want, piggyback::ACK_WORD)));
    assert!(!piggyback::has_ack_room(as_sent()[0].words()[0]));
    assert_eq!(piggyback::flags(w0), Flags::LAST | Flags::ACK_VALID);

    let report = match PacketRepr::parse(&as_sent()[6]).unwrap() {
        PacketRepr::Report(r) => r,
        r => panic!("{r:?}"),
    };
    let h = ReportRepr { data_ack: None, ..report }.emit();
    let want = report.emit();
    let w0 = piggyback::with_flags(h.words()[0], Flags::MCAST);
    let w3 = piggyback::with_data_ack(word(&h, piggyback::DATA_ACK_WORD), 55);
    assert_eq!((w0, w3), (want.words()[0], word(&want, piggyback::DATA_ACK_WORD)));
}

fn addr() -> impl Strategy<Value = Addr> {
    (any::<u16>(), 0u8..8, any::<u16>(), 0u8..8, any::<bool>()).prop_map(
        |(src_node, src_port, dst_node, dst_port, high)| Addr {
            src_node,
            src_port,
            dst_node,
            dst_port,
            priority: if high { Priority::High } else { Priority::Low },
        },
    )
}

fn tag() -> impl Strategy<Value = McastTag> {
    (any::<u16>(), any::<u32>(), 0u8..16, 0u8..16, any::<u8>(), any::<u16>()).prop_map(
        |(group, mseq, scheme, alg, k, subtree)| McastTag { group, mseq, scheme, alg, k, subtree },
    )
}

/// A stream part as a sender makes it: no ack beside an incarnation.
fn stream() -> impl Strategy<Value = SeqRepr> {
    let flags = (any::<bool>(), any::<bool>(), any::<bool>());
    let words = (any::<u8>(), any::<u32>(), any::<u8>(), any::<Option<u32>>());
    let sync = (any::<u16>(), any::<u8>(), any::<Option<u32>>());
    (addr(), flags, words, sync).prop_map(
        |(addr, (first, last, sync), (size_class, seq, round, ack), (boot, gen, inc))| SeqRepr {
            addr,
            size_class,
            seq,
            round,
            first,
            last,
            ack: if inc.is_some() { None } else { ack },
            sync,
            stamp: SyncStamp { boot, gen },
            incarnation: inc,
        },
    )
}

fn data() -> impl Strategy<Value = PacketRepr> {
    let kind = prop_oneof![
        Just(DataKind::Data { mcast: None }),
        tag().prop_map(|t| DataKind::Data { mcast: Some(t) }),
        any::<u64>().prop_map(|remote_addr| DataKind::Put { remote_addr }),
        any::<u32>().prop_map(|get| DataKind::GetResp { get }),
    ];
    // The fragment lies within the message.
    (stream(), kind, 0u16..=64, 0u32..1 << 30, 0u32..1 << 30).prop_map(
        |(stream, kind, payload_len, offset, more)| {
            let msg_len = offset + payload_len as u32 + more;
            PacketRepr::Data(DataRepr { stream, kind, msg_len, offset, payload_len })
        },
    )
}

fn sequenced() -> impl Strategy<Value = PacketRepr> {
    prop_oneof![
        data(),
        (stream(), any::<u64>(), any::<u32>(), any::<u32>()).prop_map(
            |(stream, remote_addr, len, get)| {
                PacketRepr::GetReq(GetReqRepr { stream, remote_addr, len, get })
            }
        ),
        (stream(), tag(), any::<u32>(), any::<Option<u32>>(), 0u16..=128).prop_map(
            |(stream, tag, unreached, data_ack, lost_len)| {
                PacketRepr::Report(ReportRepr { stream, tag, unreached, data_ack, lost_len })
            }
        ),
    ]
}

fn code() -> impl Strategy<Value = NackCode> {
    (1u8..=6).prop_map(|c| NackCode::from_u8(c).unwrap())
}

fn control() -> impl Strategy<Value = PacketRepr> {
    prop_oneof![
        (addr(), any::<Option<u32>>(), any::<bool>()).prop_map(|(addr, ack, report_stream)| {
            PacketRepr::Ack(AckRepr { addr, ack, report_stream })
        }),
        (addr(), code(), any::<u32>(), any::<u8>(), any::<Option<u32>>(), any::<bool>()).prop_map(
            |(addr, code, seq, round, ack, report_stream)| {
                PacketRepr::Nack(NackRepr { addr, code, seq, round, ack, report_stream })
            }
        ),
        (addr(), (any::<u32>(), any::<u32>(), any::<u8>(), any::<u8>()), any::<u16>())
            .prop_flat_map(|(addr, (una, next, round, poll), boot)| {
                (any::<Option<u32>>(), any::<bool>()).prop_map(move |(incarnation, report)| {
                    PacketRepr::Poll(PollRepr {
                        addr,
                        una,
                        next,
                        round,
                        poll,
                        boot,
                        incarnation,
                        report_stream: report,
                    })
                })
            }),
        (addr(), any::<bool>(), any::<Option<u32>>(), 0u16..=144, any::<bool>()).prop_map(
            |(addr, ustat, ack, payload_len, report_stream)| {
                PacketRepr::Stat(StatRepr { addr, ustat, ack, payload_len, report_stream })
            }
        ),
        (addr(), any::<bool>(), any::<u32>(), any::<u64>()).prop_map(
            |(addr, reply, cookie, sent)| PacketRepr::Echo(EchoRepr { addr, reply, cookie, sent })
        ),
    ]
}

fn any_repr() -> impl Strategy<Value = PacketRepr> {
    prop_oneof![sequenced(), control()]
}

proptest! {
    /// `emit` then `parse` gives the repr back; the header it emits is
    /// one the wire takes (the fields' domains, the length), and `parse`
    /// then `emit` gives its words back.
    #[test]
    fn reprs_round_trip_through_the_wire(r in any_repr()) {
        let h = r.emit();
        prop_assert_eq!(on_the_wire(&h), Ok(h));
        prop_assert_eq!(PacketRepr::parse(&h), Ok(r));
        prop_assert_eq!(PacketRepr::parse(&h).map(|p| p.words()), Ok(h.words()));
        prop_assert_eq!(r.addr(), h.view().addr().repr());
        prop_assert_eq!(h.view().stream().is_some(), h.ptype.is_sequenced());
    }

    /// Any header the wire takes has a repr (a Nack's code is checked
    /// there); its `emit` keeps every field the type uses, so it parses
    /// to the same repr.
    #[test]
    fn any_header_parses_to_a_repr_that_emits_it_again(
        w in proptest::array::uniform6(any::<u64>()),
        ptype in 1u8..=12,
        flags in 0u8..64,
        len in 0u16..=64,
    ) {
        let mut w = w;
        // A type, known flags, ports in range, a short payload.
        w[0] = (w[0] & !0xffff) | ptype as u64 | (flags as u64) << 8;
        w[0] = (w[0] & !(0xff << 16)) | ((w[0] >> 16) & 1) << 16;
        w[1] &= !0xffff;
        w[1] |= ((w[1] >> 32) % 8) | (((w[1] >> 40) % 8) << 8);
        w[3] = (w[3] & !(0xffff << 32)) | (len as u64) << 32;
        let Ok(h) = Header::from_words(&w, HEADER_LEN + len as usize) else {
            return Ok(());
        };
        let r = PacketRepr::parse(&h).unwrap();
        prop_assert_eq!(PacketRepr::parse(&r.emit()), Ok(r));
        // (A payload is a fragment's, a report's or a Stat's: a Nack's or
        // an echo's, which the wire lets through, is nothing.)
        if matches!(r, PacketRepr::Data(_) | PacketRepr::Report(_) | PacketRepr::Stat(_)) {
            prop_assert_eq!(r.emit().payload_len, h.payload_len);
        }
        prop_assert_eq!(r.addr(), h.view().addr().repr());
    }
}
