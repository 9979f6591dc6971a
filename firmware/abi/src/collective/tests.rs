use super::reference::{run, Spec};
use super::*;
use crate::{event, map, packet, Priority};

fn combos() -> Vec<(Kind, Alg)> {
    let mut v = Vec::new();
    for k in Kind::ALL {
        for a in Alg::ALL {
            if a.serves(k) {
                v.push((k, a));
            }
        }
    }
    v
}

fn sizes() -> Vec<u16> {
    let mut v: Vec<u16> = (2..=33).collect();
    v.extend([63, 64, 100, 256]);
    v
}

fn u64_inputs(n: u16, elems: usize) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|r| (0..elems as u64).flat_map(|e| (r * 1000 + e + 1).to_le_bytes()).collect())
        .collect()
}

#[test]
fn every_algorithm_finishes_at_every_size_with_each_message_taken_once() {
    for (kind, alg) in combos() {
        for n in sizes() {
            for root in [0, n / 2, n - 1] {
                let root = if matches!(kind, Kind::Reduce | Kind::Broadcast) { root } else { 0 };
                let s = Spec::new(kind, alg, n, root, Op::Sum, Dtype::U64, (1024, map::SRAM_MIN));
                let elems = if kind.has_data() { 300 } else { 0 };
                let out = run(&s, &u64_inputs(n, elems)).unwrap_or_else(|e| panic!("{s:?}: {e}"));
                let want: Vec<u8> = (0..elems as u64)
                    .flat_map(|e| {
                        (0..n as u64).map(|r| r * 1000 + e + 1).sum::<u64>().to_le_bytes()
                    })
                    .collect();
                let root_in = u64_inputs(n, elems)[root as usize].clone();
                for r in 0..n as usize {
                    match kind {
                        Kind::Allreduce => assert_eq!(out.values[r], want, "{s:?} rank {r}"),
                        Kind::Reduce if r == root as usize => assert_eq!(out.values[r], want),
                        Kind::Broadcast => assert_eq!(out.values[r], root_in, "{s:?} rank {r}"),
                        _ => {}
                    }
                    if matches!(kind, Kind::Barrier | Kind::Allreduce) {
                        assert!(out.heard[r].iter().all(|&h| h), "{s:?}: rank {r} left early");
                    }
                }
            }
        }
    }
}

#[test]
fn message_counts_are_the_algorithms() {
    let n = 16u16;
    let count = |k, a| {
        let s = Spec::new(k, a, n, 0, Op::Sum, Dtype::U64, (1024, map::SRAM_MIN));
        run(&s, &u64_inputs(n, if k.has_data() { 1 } else { 0 })).unwrap().messages
    };
    assert_eq!(count(Kind::Barrier, Alg::Dissemination), 16 * 4);
    assert_eq!(count(Kind::Barrier, Alg::Pairwise), 16 * 4);
    assert_eq!(count(Kind::Barrier, Alg::Tree), 2 * 15);
    assert_eq!(count(Kind::Allreduce, Alg::Binomial), 2 * 15);
    assert_eq!(count(Kind::Allreduce, Alg::Ring), 2 * 15);
    assert_eq!(count(Kind::Reduce, Alg::Binomial), 15);
}

#[test]
fn floating_point_results_are_bit_identical_at_every_member() {
    for alg in [Alg::Pairwise, Alg::Binomial, Alg::Ring] {
        for n in [3u16, 7, 12, 16, 33] {
            let s =
                Spec::new(Kind::Allreduce, alg, n, 0, Op::Sum, Dtype::F64, (1024, map::SRAM_MIN));
            let inputs: Vec<Vec<u8>> = (0..n)
                .map(|r| {
                    (0..700)
                        .flat_map(|e| (1.0 / (r as f64 + e as f64 + 0.3)).to_le_bytes())
                        .collect()
                })
                .collect();
            let out = run(&s, &inputs).unwrap();
            assert!(out.values.iter().all(|v| *v == out.values[0]), "{alg:?} {n}");
        }
    }
}

#[test]
fn the_binomial_order_is_rank_order() {
    // Non-commutative in effect: min with NaN keeps the left operand, so
    // the rank order shows in the result.
    let n = 8u16;
    let s =
        Spec::new(Kind::Reduce, Alg::Binomial, n, 0, Op::Min, Dtype::F64, (1024, map::SRAM_MIN));
    let mut inputs: Vec<Vec<u8>> =
        (0..n).map(|r| (r as f64 + 1.0).to_le_bytes().to_vec()).collect();
    inputs[0] = f64::NAN.to_le_bytes().to_vec();
    let out = run(&s, &inputs).unwrap();
    assert!(f64::from_le_bytes(out.values[0][..].try_into().unwrap()).is_nan(), "rank 0 leftmost");
}

#[test]
fn descriptors_round_trip_and_refuse_what_is_out_of_domain() {
    let f = CollFields {
        kind: Kind::Allreduce,
        port: 2,
        group: 3,
        local: 0x1000,
        len: 64,
        cseq: 7,
        remote: 0x2000,
        tag: 99,
        op: Op::Max,
        dtype: Dtype::F32,
        alg: Alg::Ring,
        root: 0,
        assisted: false,
        step: 0,
    };
    let mut b = [0u8; 64];
    f.encode(&mut b);
    assert_eq!(CollFields::decode(&b), Ok(f));
    let bad = |g: &dyn Fn(&mut CollFields), cause| {
        let mut x = f;
        g(&mut x);
        let mut b = [0u8; 64];
        x.encode(&mut b);
        assert_eq!(CollFields::decode(&b), Err(cause), "{x:?}");
    };
    bad(&|x| x.op = Op::Band, event::ErrorCause::BadDescriptor);
    bad(&|x| x.alg = Alg::Dissemination, event::ErrorCause::BadDescriptor);
    bad(&|x| x.len = 6, event::ErrorCause::BadLength);
    bad(&|x| x.len = 0, event::ErrorCause::BadLength);
    bad(&|x| x.cseq = 0, event::ErrorCause::BadLength);
    bad(
        &|x| {
            x.kind = Kind::Barrier;
            x.alg = Alg::Tree;
        },
        event::ErrorCause::BadLength,
    );
    b[50] = 1;
    assert_eq!(CollFields::decode(&b), Err(event::ErrorCause::BadDescriptor));
}

#[test]
fn packets_round_trip_through_the_header() {
    let r = CollRepr {
        addr: packet::Addr {
            src_node: 3,
            src_port: 2,
            dst_node: 9,
            dst_port: 2,
            priority: Priority::Low,
        },
        ctl: Some(CtlCode::Busy),
        group: 5,
        cseq: 1234,
        tag: schedule::TAG_POST,
        chunk: 77,
        from_rank: 1000,
        len: 1 << 20,
    };
    let mut b = [0u8; packet::HEADER_LEN];
    r.emit().encode(&mut b);
    let h = packet::Header::parse(&b).unwrap();
    assert_eq!(packet::PacketRepr::parse(&h).unwrap(), packet::PacketRepr::Coll(r));
    let data = CollRepr { ctl: None, ..r };
    assert_eq!(CollRepr::parse(&data.emit()), Some(data));
}

#[test]
fn chunks_are_whole_elements_of_at_most_a_packet() {
    let (small, big) = (map::SRAM_MIN, 8 << 20);
    assert_eq!(chunk_bytes(4096, small, 8), CHUNK_SMALL);
    assert_eq!(chunk_bytes(4096, big, 8), CHUNK_MAX);
    assert_eq!(chunk_bytes(4096, 2 << 20, 8), CHUNK_MAX);
    assert_eq!(chunk_bytes(4096, map::SRAM_MIN + map::COLL_EXT_MIN - 1, 8), CHUNK_SMALL);
    assert_eq!(chunk_bytes(1000, small, 8), 1000);
    assert_eq!(chunk_bytes(1001, big, 8), 1000);
    assert_eq!(chunk_bytes(4, small, 8), 8);
    assert_eq!(chunk_bytes(4096, big, 12), 4092);
    assert_eq!(max_len(Kind::Allreduce, Dtype::F64, 4096, big), 4096 * MAX_VECTOR_CHUNKS);
    assert_eq!(map::coll_ext_len(small), 0);
    assert_eq!(map::coll_ext_len(2 << 20), 1 << 20);
    assert_eq!(map::coll_ext_len(64 << 20), map::COLL_EXT_MAX);
    assert_eq!(chunks(0, 1024), 1);
    assert_eq!(chunks(1 << 20, 1024), 1024);
}

#[test]
fn assisted_descriptors_round_trip_and_refuse_the_ring_and_stray_steps() {
    let f = CollFields {
        kind: Kind::Allreduce,
        port: 2,
        group: 3,
        local: 0x1000,
        len: 64,
        cseq: 7,
        remote: 0x2000,
        tag: 99,
        op: Op::Sum,
        dtype: Dtype::F64,
        alg: Alg::Pairwise,
        root: 0,
        assisted: true,
        step: 5,
    };
    let mut b = [0u8; 64];
    f.encode(&mut b);
    assert_eq!((b[6], b[46], b[43]), (0, 1, 5));
    assert_eq!(CollFields::decode(&b), Ok(f));
    let ring = CollFields { alg: Alg::Ring, ..f };
    ring.encode(&mut b);
    assert_eq!(CollFields::decode(&b), Err(event::ErrorCause::BadDescriptor));
    // A step without the flag, and flags unknown.
    let plain = CollFields { assisted: false, ..f };
    plain.encode(&mut b);
    assert_eq!(CollFields::decode(&b), Err(event::ErrorCause::BadDescriptor));
    f.encode(&mut b);
    b[46] = 3;
    assert_eq!(CollFields::decode(&b), Err(event::ErrorCause::BadDescriptor));
}
