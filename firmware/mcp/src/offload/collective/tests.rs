//! The collective offload on the MCP's test bench: every algorithm on 16
//! NICs gives each member one event per collective, in order, with the
//! reference's result to the bit; under loss, corruption, duplication
//! and reordering likewise; a member that goes away ends the collective
//! with it named; bad descriptors are refused.

use crate::tests::Bench;
use nic_abi::collective::reference::{run, Spec};
use nic_abi::collective::{Alg, CollFields, Dtype, Kind, Op};
use nic_abi::event::{ErrorCause, Event, EventKind, LostHeads, SendStatus};
use nic_abi::group::{self, GroupHead, GROUP_VALID};
use nic_abi::map;
use std::vec::Vec;

pub(super) const PORT: usize = 2;
pub(super) const GROUP: u16 = 3;

/// Install group `GROUP` (members 0..n in rank order) on every NIC and
/// open the port.
pub(super) fn bench(n: usize) -> Bench {
    let mut b = Bench::new(n);
    for i in 0..n {
        install(&mut b, i, (GROUP, PORT), n);
        b.open(i, PORT);
    }
    b
}

/// Install group `id` on port `port` of node `i`'s NIC: members 0..n.
fn install(b: &mut Bench, i: usize, (id, port): (u16, usize), n: usize) {
    let at = map::group_entry(id as u32) as usize;
    let h =
        GroupHead { size: n as u16, rank: i as u16, port: port as u8, alg: 0, k: 0, nchildren: 0 };
    let sram = b.sram_mut(i);
    h.encode(&mut sram[at..at + GroupHead::LEN]);
    for r in 0..n as u16 {
        let m = group::member(id as u32, r) as usize;
        sram[m..m + 2].copy_from_slice(&r.to_le_bytes());
    }
    sram[at..at + 4].copy_from_slice(&GROUP_VALID.to_le_bytes());
}

pub(super) fn fields(kind: Kind, alg: Alg, cseq: u32) -> CollFields {
    CollFields {
        kind,
        port: PORT as u8,
        group: GROUP,
        local: 0,
        len: 0,
        cseq,
        remote: 0,
        tag: cseq as u64,
        op: Op::Sum,
        dtype: Dtype::U64,
        alg,
        root: 0,
        assisted: false,
        step: 0,
    }
}

pub(super) fn post(b: &mut Bench, node: usize, f: &CollFields) {
    let mut raw = [0u8; 64];
    f.encode(&mut raw);
    b.post_raw(node, PORT, &raw);
}

/// Run until every node has `want` Collective events (or `rounds`
/// pass): each node's events.
fn gather(b: &mut Bench, want: usize, rounds: u32) -> Vec<Vec<Event>> {
    let n = b.nodes.len();
    let mut got: Vec<Vec<Event>> = (0..n).map(|_| Vec::new()).collect();
    b.run_until(rounds, |b| {
        for (i, g) in got.iter_mut().enumerate() {
            g.extend(b.events(i, PORT));
        }
        got.iter().all(|g| g.iter().filter(|e| e.kind == EventKind::Collective).count() >= want)
    });
    got
}

fn assert_done_in_order(got: &[Vec<Event>], count: u32) {
    for (i, evs) in got.iter().enumerate() {
        let seqs: Vec<(u32, u8)> = evs.iter().map(|e| (e.len, e.status)).collect();
        let want: Vec<(u32, u8)> = (1..=count).map(|k| (k, SendStatus::Ok as u8)).collect();
        assert_eq!(seqs, want, "node {i}: {evs:?}");
        assert!(evs.iter().all(|e| e.kind == EventKind::Collective && e.node == GROUP));
    }
}

#[test]
fn consecutive_barriers_complete_once_each_in_order_at_every_member() {
    for alg in [Alg::Dissemination, Alg::Pairwise, Alg::Tree] {
        for n in [2usize, 5, 16] {
            let mut b = bench(n);
            for k in 1..=4 {
                for i in 0..n {
                    post(&mut b, i, &fields(Kind::Barrier, alg, k));
                }
            }
            let got = gather(&mut b, 4, 5_000);
            assert_done_in_order(&got, 4);
        }
    }
}

#[test]
fn a_barrier_waits_for_its_last_member() {
    let mut b = bench(8);
    for i in 0..7 {
        post(&mut b, i, &fields(Kind::Barrier, Alg::Dissemination, 1));
    }
    b.run(3_000);
    for i in 0..8 {
        assert!(b.events(i, PORT).is_empty(), "node {i} left before node 7 came");
    }
    post(&mut b, 7, &fields(Kind::Barrier, Alg::Dissemination, 1));
    assert_done_in_order(&gather(&mut b, 1, 2_000), 1);
}

/// Post a collective with data at every member: inputs from `input`,
/// results read back; checks them against the reference.
fn with_data(b: &mut Bench, spec: &Spec, elems: usize, cseq: u32) {
    let n = b.nodes.len();
    let len = elems * spec.dtype.size();
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| match spec.dtype {
            Dtype::F64 => (0..elems)
                .flat_map(|e| (1.0 / (r as f64 * 7.0 + e as f64 + cseq as f64 + 0.5)).to_le_bytes())
                .collect(),
            _ => (0..elems)
                .flat_map(|e| ((r * 1000 + e) as u64 * cseq as u64).to_le_bytes())
                .collect(),
        })
        .collect();
    let mut outs = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let local = b.alloc(i, PORT, len as u64);
        let remote = b.alloc(i, PORT, len as u64);
        b.write_host(i, local, input);
        let f = CollFields {
            len: len as u32,
            local,
            remote,
            op: spec.op,
            dtype: spec.dtype,
            root: spec.root,
            ..fields(spec.kind, spec.alg, cseq)
        };
        post(b, i, &f);
        outs.push(remote);
    }
    let got = gather(b, 1, 20_000 + 100 * len as u32 / 1024);
    let want = run(spec, &inputs).unwrap();
    for i in 0..n {
        assert_eq!(got[i].len(), 1, "node {i}: {:?}", got[i]);
        assert_eq!((got[i][0].len, got[i][0].status), (cseq, 0));
        let writes = match spec.kind {
            Kind::Reduce => i == spec.root as usize,
            Kind::Broadcast => i != spec.root as usize,
            _ => true,
        };
        if writes {
            let v = b.read_host(i, outs[i], len);
            assert!(v == want.values[i], "{spec:?} node {i}: result differs from the reference");
        }
    }
}

#[test]
fn allreduce_reduce_and_broadcast_give_the_reference_result_at_every_member() {
    let n = 16u16;
    let mut b = bench(n as usize);
    let mut cseq = 0;
    for (kind, alg, root) in [
        (Kind::Allreduce, Alg::Pairwise, 0),
        (Kind::Allreduce, Alg::Binomial, 0),
        (Kind::Allreduce, Alg::Ring, 0),
        (Kind::Reduce, Alg::Binomial, 5),
        (Kind::Broadcast, Alg::Binomial, 11),
    ] {
        for (dtype, elems) in [(Dtype::U64, 1), (Dtype::F64, 300), (Dtype::U64, 1000)] {
            cseq += 1;
            let spec = Spec::new(kind, alg, n, root, Op::Sum, dtype, (4096, map::SRAM_MIN));
            with_data(&mut b, &spec, elems, cseq);
        }
    }
}

/// A bench of `n` NICs with `sram` bytes of SRAM each.
fn bench_sram(n: usize, sram: usize) -> Bench {
    let mut b = Bench::with(n, |node| node.set_sram_size(sram));
    for i in 0..n {
        install(&mut b, i, (GROUP, PORT), n);
        b.open(i, PORT);
    }
    b
}

#[test]
fn vectors_longer_than_the_window_are_worked_through_it_chunk_by_chunk() {
    // 1 MiB of SRAM: chunks of 1 KiB, a window of at most 32 of them (the
    // vector area); 2 MiB: chunks of 4 KiB, a window of 64.
    for (n, sram, elems) in [(6usize, 1usize << 20, 12_800), (4, 2 << 20, 40_000)] {
        let mut b = bench_sram(n, sram);
        let mut cseq = 0;
        for (kind, alg, dtype) in [
            (Kind::Allreduce, Alg::Ring, Dtype::F64),
            (Kind::Allreduce, Alg::Pairwise, Dtype::U64),
            (Kind::Allreduce, Alg::Binomial, Dtype::F64),
            (Kind::Reduce, Alg::Binomial, Dtype::U64),
            (Kind::Broadcast, Alg::Binomial, Dtype::F64),
        ] {
            cseq += 1;
            let root = ((cseq + 1) % n as u32) as u16;
            let fabric = (4096, sram as u32);
            let spec = Spec::new(kind, alg, n as u16, root, Op::Sum, dtype, fabric);
            with_data(&mut b, &spec, elems, cseq);
        }
    }
}

#[test]
fn collectives_survive_loss_corruption_duplication_and_reordering() {
    let n = 16usize;
    let mut b = bench(n);
    b.faults.drop_every = 13;
    b.faults.corrupt_every = 17;
    b.faults.dup_every = 11;
    b.set_jitter(7, 5);
    for k in 1..=30 {
        let alg = [Alg::Dissemination, Alg::Pairwise, Alg::Tree][k as usize % 3];
        for i in 0..n {
            post(&mut b, i, &fields(Kind::Barrier, alg, k));
        }
    }
    assert_done_in_order(&gather(&mut b, 30, 200_000), 30);
    let resent: u64 = (0..n).map(|i| b.stat(i, nic_abi::stats::Stat::Retransmits)).sum();
    assert!(resent > 0, "the faults cost nothing: not exercised");
    for (k, alg) in [Alg::Pairwise, Alg::Binomial, Alg::Ring].into_iter().enumerate() {
        let spec = Spec::new(
            Kind::Allreduce,
            alg,
            n as u16,
            0,
            Op::Sum,
            Dtype::F64,
            (4096, map::SRAM_MIN),
        );
        with_data(&mut b, &spec, 700, 31 + k as u32);
    }
}

#[test]
fn a_member_whose_port_closes_mid_barrier_is_named_missing_within_the_send_timeout() {
    let n = 8usize;
    let mut b = bench(n);
    for i in 0..n - 1 {
        post(&mut b, i, &fields(Kind::Barrier, Alg::Tree, 1));
    }
    b.run(500);
    b.close(n - 1, PORT);
    let got = gather(&mut b, 1, 120_000);
    for (i, evs) in got.iter().enumerate().take(n - 1) {
        let e = evs.iter().find(|e| e.kind == EventKind::Collective).expect("an end");
        assert_eq!(e.status, SendStatus::Incomplete as u8, "node {i}");
        // Its NIC answers "gone" at once: well within the send timeout.
        assert!(e.rtc < 500 + 50_000 / 4, "node {i} ended at {}", e.rtc);
        let mut lost = LostHeads::NONE;
        for p in evs.iter().filter(|e| e.kind == EventKind::McastLost && e.tag == 1) {
            lost.merge(p.len as usize, &p.inline);
        }
        assert_eq!(lost.iter().collect::<Vec<_>>(), [n as u16 - 1], "node {i}");
    }
}

#[test]
fn a_nic_reset_mid_barrier_ends_it_with_the_member_named() {
    let n = 6usize;
    let mut b = bench(n);
    for i in 0..n {
        if i != 4 {
            post(&mut b, i, &fields(Kind::Barrier, Alg::Dissemination, 1));
        }
    }
    b.run(300);
    b.reboot(4);
    let got = gather(&mut b, 1, 200_000);
    for (i, evs) in got.iter().enumerate().filter(|(i, _)| *i != 4) {
        let e = evs.iter().find(|e| e.kind == EventKind::Collective).expect("an end");
        assert_eq!(e.status, SendStatus::Incomplete as u8, "node {i}");
        let mut lost = LostHeads::NONE;
        for p in evs.iter().filter(|e| e.kind == EventKind::McastLost) {
            lost.merge(p.len as usize, &p.inline);
        }
        assert!(lost.contains(4), "node {i}: {:?}", lost.iter().collect::<Vec<_>>());
    }
}

#[test]
fn bad_collectives_are_refused_with_their_cause() {
    let mut b = bench(4);
    let big = nic_abi::collective::max_len(Kind::Allreduce, Dtype::U64, 4096, map::SRAM_MIN) + 8;
    let v = b.alloc(0, PORT, 4096);
    let f = CollFields { len: 8, local: v, remote: v, ..fields(Kind::Allreduce, Alg::Ring, 1) };
    let reduce = CollFields { kind: Kind::Reduce, alg: Alg::Binomial, ..f };
    for (bad, cause) in [
        (CollFields { group: 9, ..f }, ErrorCause::BadGroup),
        (CollFields { group: 99, ..f }, ErrorCause::BadGroup),
        (CollFields { port: 1, ..f }, ErrorCause::BadGroup),
        (CollFields { local: 0x10, ..f }, ErrorCause::NotRegistered),
        (CollFields { remote: v + (1 << 30), ..f }, ErrorCause::NotRegistered),
        (CollFields { len: big, ..f }, ErrorCause::BadLength),
        (CollFields { len: 12, ..f }, ErrorCause::BadLength),
        (CollFields { cseq: 0, ..f }, ErrorCause::BadLength),
        (CollFields { root: 4, ..reduce }, ErrorCause::BadGroup),
    ] {
        post(&mut b, 0, &bad);
        let evs = b.await_events(0, PORT, 200).expect("an answer");
        assert_eq!((evs[0].kind, evs[0].status), (EventKind::Error, cause as u8), "{bad:?}");
    }
    for (at, v) in [(42, 0u8), (40, 9), (41, 4), (2, 7), (50, 1)] {
        // Dissemination does no allreduce; no op 9; band of f32; no kind 7; reserved bytes.
        let mut raw = [0u8; 64];
        CollFields { op: Op::Band, ..f }.encode(&mut raw);
        raw[at] = v;
        b.post_raw(0, PORT, &raw);
        let evs = b.await_events(0, PORT, 200).expect("an answer");
        assert_eq!(evs[0].status, ErrorCause::BadDescriptor as u8, "byte {at} = {v}");
    }
    // A number already done is refused; nothing went on the wire.
    assert!(b.log.is_empty());
}

#[test]
fn collectives_of_two_groups_posted_in_either_order_both_complete() {
    // Half the members post group A's barriers first, the others group
    // B's: with one collective at a time per NIC this would deadlock.
    let n = 8usize;
    let mut b = bench(n);
    const OTHER: (u16, usize) = (5, 4);
    for i in 0..n {
        install(&mut b, i, OTHER, n);
        b.open(i, OTHER.1);
    }
    let other = |k| CollFields {
        group: OTHER.0,
        port: OTHER.1 as u8,
        ..fields(Kind::Barrier, Alg::Pairwise, k)
    };
    for k in 1..=5 {
        for i in 0..n {
            let mine = fields(Kind::Barrier, Alg::Dissemination, k);
            let pair = if i % 2 == 0 { [mine, other(k)] } else { [other(k), mine] };
            for f in pair {
                let mut raw = [0u8; 64];
                f.encode(&mut raw);
                b.post_raw(i, f.port as usize, &raw);
            }
        }
    }
    let mut got: Vec<[Vec<u32>; 2]> = (0..n).map(|_| [Vec::new(), Vec::new()]).collect();
    assert!(
        b.run_until(20_000, |b| {
            for (i, g) in got.iter_mut().enumerate() {
                g[0].extend(b.events(i, PORT).iter().map(|e| e.len));
                g[1].extend(b.events(i, OTHER.1).iter().map(|e| e.len));
            }
            got.iter().all(|g| g[0].len() >= 5 && g[1].len() >= 5)
        }),
        "{got:?}"
    );
    for g in &got {
        assert_eq!(g[0], [1, 2, 3, 4, 5]);
        assert_eq!(g[1], [1, 2, 3, 4, 5]);
    }
}
