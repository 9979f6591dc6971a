//! Assisted collectives on the MCP's test bench: the NIC takes each
//! chunk only through the steps its host released, posts one `CollStep`
//! per step but the last and then the `Collective` event with the
//! reference's result; bad steps are refused; a member whose host is slow
//! to release is waited for, not named missing; loss, corruption and
//! duplication are repaired as for any collective.

use super::tests::{bench, fields, post, GROUP, PORT};
use crate::tests::Bench;
use nic_abi::collective::reference::{run, Spec};
use nic_abi::collective::{Alg, CollFields, Dtype, Kind, Op, Shape};
use nic_abi::event::{ErrorCause, Event, EventKind, SendStatus};
use nic_abi::map;
use std::vec::Vec;

/// Member `i`'s steps in collective `f` of `n` members.
fn steps(f: &CollFields, n: usize, i: usize) -> usize {
    let s = Shape { kind: f.kind, alg: f.alg, n: n as u16, rank: i as u16, root: f.root };
    s.steps(0).len()
}

/// Post `fs[i]` (step 0) at every member but those `late` names, then
/// release each member's next step on its `CollStep` event (a member in
/// `late` posts step 0 only after `late.1` rounds); each node's events.
fn drive(b: &mut Bench, fs: &[CollFields], late: (&[usize], u32), rounds: u32) -> Vec<Vec<Event>> {
    let n = fs.len();
    for (i, f) in fs.iter().enumerate().filter(|(i, _)| !late.0.contains(i)) {
        post(b, i, f);
    }
    let mut got: Vec<Vec<Event>> = (0..n).map(|_| Vec::new()).collect();
    let mut round = 0;
    let done = b.run_until(rounds, |b| {
        round += 1;
        if round == late.1 {
            for &i in late.0 {
                post(b, i, &fs[i]);
            }
        }
        for (i, g) in got.iter_mut().enumerate() {
            for e in b.events(i, PORT) {
                if e.kind == EventKind::CollStep {
                    let next = CollFields { step: e.addr as u8 + 1, tag: 100 + e.addr, ..fs[i] };
                    post(b, i, &next);
                }
                g.push(e);
            }
        }
        got.iter().all(|g| g.iter().any(|e| e.kind == EventKind::Collective))
    });
    assert!(done, "not every member ended: {got:?}");
    got
}

/// An assisted collective of `spec` with `elems` elements at every member:
/// each member's step events in order, one per step but the last, then
/// its Collective event, Ok, with the reference's result.
fn assisted(b: &mut Bench, spec: &Spec, elems: usize, late: (&[usize], u32)) {
    let n = b.nodes.len();
    let len = elems * spec.dtype.size();
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            (0..elems)
                .flat_map(|e| (1.0 / (r as f64 * 3.0 + e as f64 + 0.7)).to_le_bytes())
                .collect()
        })
        .collect();
    let mut fs = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let v = b.alloc(i, PORT, len.max(8) as u64);
        b.write_host(i, v, input);
        let data = spec.kind.has_data();
        fs.push(CollFields {
            len: if data { len as u32 } else { 0 },
            local: v,
            remote: v,
            dtype: spec.dtype,
            root: spec.root,
            assisted: true,
            ..fields(spec.kind, spec.alg, 1)
        });
    }
    let got = drive(b, &fs, late, 400_000);
    let want = run(spec, &inputs).unwrap();
    for (i, evs) in got.iter().enumerate() {
        let last = steps(&fs[i], n, i) - 1;
        let seen: Vec<(EventKind, u64, u64)> =
            evs.iter().map(|e| (e.kind, e.addr, e.tag)).collect();
        let mut expect: Vec<(EventKind, u64, u64)> = (0..last as u64)
            .map(|s| (EventKind::CollStep, s, if s == 0 { 1 } else { 99 + s }))
            .collect();
        expect.push((
            EventKind::Collective,
            fs[i].remote,
            if last == 0 { 1 } else { 99 + last as u64 },
        ));
        assert_eq!(seen, expect, "{spec:?} node {i}");
        let e = evs.last().unwrap();
        assert_eq!((e.len, e.status, e.node), (1, SendStatus::Ok as u8, GROUP), "node {i}");
        if spec.kind.has_data() && spec.kind != Kind::Reduce || i == spec.root as usize {
            let got = b.read_host(i, fs[i].remote, len);
            if spec.kind.has_data() && (spec.kind != Kind::Broadcast || i != spec.root as usize) {
                assert!(got == want.values[i], "{spec:?} node {i}: result differs");
            }
        }
    }
}

fn spec(kind: Kind, alg: Alg, n: usize, root: u16) -> Spec {
    Spec::new(kind, alg, n as u16, root, Op::Sum, Dtype::F64, (4096, map::SRAM_MIN))
}

#[test]
fn every_step_released_ends_with_the_reference_result_and_a_step_event_per_step() {
    for n in [2usize, 5, 8] {
        for (kind, alg, root) in [
            (Kind::Barrier, Alg::Dissemination, 0),
            (Kind::Barrier, Alg::Pairwise, 0),
            (Kind::Barrier, Alg::Tree, 0),
            (Kind::Allreduce, Alg::Pairwise, 0),
            (Kind::Allreduce, Alg::Binomial, 0),
            (Kind::Reduce, Alg::Binomial, 1),
            (Kind::Broadcast, Alg::Binomial, 1),
        ] {
            let mut b = bench(n);
            // 8 chunks of 1 KiB (the most): every chunk through each step.
            assisted(&mut b, &spec(kind, alg, n, root), 1000, (&[], 0));
        }
    }
}

#[test]
fn nothing_goes_past_the_steps_released() {
    let n = 4;
    let mut b = bench(n);
    let f = CollFields { assisted: true, ..fields(Kind::Barrier, Alg::Dissemination, 1) };
    for i in 0..n {
        post(&mut b, i, &f);
    }
    b.run(20_000);
    for i in 0..n {
        let evs = b.events(i, PORT);
        let kinds: Vec<(EventKind, u64)> = evs.iter().map(|e| (e.kind, e.addr)).collect();
        // Step 0 (round 0's send) done everywhere; step 1 (its receive)
        // waits for the host.
        assert_eq!(kinds, [(EventKind::CollStep, 0)], "node {i}");
    }
}

#[test]
fn a_member_whose_host_is_slow_to_release_is_waited_for_not_named_missing() {
    // Node 3 posts its step 0 three send timeouts late; its NIC answers
    // the others' probes meanwhile.
    let n = 6;
    let mut b = bench(n);
    assisted(&mut b, &spec(Kind::Allreduce, Alg::Pairwise, n, 0), 40, (&[3], 150_000));
    let mut b = bench(n);
    assisted(&mut b, &spec(Kind::Reduce, Alg::Binomial, n, 0), 40, (&[2, 4], 150_000));
}

#[test]
fn assisted_collectives_survive_loss_corruption_and_duplication() {
    let n = 8;
    let mut b = bench(n);
    b.faults.drop_every = 13;
    b.faults.corrupt_every = 17;
    b.faults.dup_every = 11;
    b.set_jitter(7, 5);
    assisted(&mut b, &spec(Kind::Allreduce, Alg::Pairwise, n, 0), 1000, (&[], 0));
    let resent: u64 = (0..n).map(|i| b.stat(i, nic_abi::stats::Stat::Retransmits)).sum();
    assert!(resent > 0, "the faults cost nothing: not exercised");
}

#[test]
fn bad_steps_are_refused_with_their_cause() {
    let n = 4;
    let mut b = bench(n);
    let f = CollFields { assisted: true, ..fields(Kind::Barrier, Alg::Dissemination, 1) };
    let mut stepped = 0;
    // No run of that number: nothing to release.
    stepped += refused(&mut b, &CollFields { step: 1, ..f }, ErrorCause::BadStep);
    // The ring's steps depend on the chunk; too long a vector.
    let v = b.alloc(0, PORT, 1 << 16);
    let ar = CollFields { len: 8, local: v, remote: v, ..fields(Kind::Allreduce, Alg::Ring, 1) };
    stepped += refused(&mut b, &CollFields { assisted: true, ..ar }, ErrorCause::BadDescriptor);
    let long = CollFields { alg: Alg::Pairwise, assisted: true, len: 9 * 4096, ..ar };
    stepped += refused(&mut b, &long, ErrorCause::BadLength);
    // Step 0 taken (it runs; the others have not come): step 2 is out
    // of order, step 1 comes once.
    post(&mut b, 0, &f);
    b.run(200);
    stepped += refused(&mut b, &CollFields { step: 2, ..f }, ErrorCause::BadStep);
    let other = CollFields { port: 1, step: 1, ..f };
    let mut raw = [0u8; 64];
    other.encode(&mut raw);
    b.open(0, 1);
    b.post_raw(0, 1, &raw);
    let evs = b.await_events(0, 1, 2_000).expect("an answer");
    assert_eq!(evs[0].status, ErrorCause::BadStep as u8, "another port's");
    for i in 1..n {
        post(&mut b, i, &f);
    }
    b.run(5_000);
    let evs = b.events(0, PORT);
    stepped += evs.iter().filter(|e| e.kind == EventKind::CollStep).count();
    assert_eq!((stepped, evs.iter().all(|e| e.kind == EventKind::CollStep)), (1, true));
    post(&mut b, 0, &CollFields { step: 1, ..f });
    b.run(100);
    refused(&mut b, &CollFields { step: 1, ..f }, ErrorCause::BadStep);
}

/// Post `f` at node 0: it must be refused with `cause` (the step events
/// that came meanwhile counted).
fn refused(b: &mut Bench, f: &CollFields, cause: ErrorCause) -> usize {
    post(b, 0, f);
    let evs = b.await_events(0, PORT, 2_000).expect("an answer");
    let e = evs.iter().find(|e| e.kind == EventKind::Error).expect("an error");
    assert_eq!(e.status, cause as u8, "{f:?}");
    evs.iter().filter(|e| e.kind == EventKind::CollStep).count()
}

#[test]
fn a_nic_reset_mid_collective_ends_it_with_the_member_named() {
    let n = 6;
    let mut b = bench(n);
    let f = CollFields { assisted: true, ..fields(Kind::Barrier, Alg::Dissemination, 1) };
    for i in (0..n).filter(|&i| i != 4) {
        post(&mut b, i, &f);
    }
    let mut got: Vec<Vec<Event>> = (0..n).map(|_| Vec::new()).collect();
    let mut round = 0;
    b.run_until(300_000, |b| {
        round += 1;
        if round == 300 {
            b.reboot(4);
        }
        for (i, g) in got.iter_mut().enumerate().filter(|(i, _)| *i != 4) {
            for e in b.events(i, PORT) {
                if e.kind == EventKind::CollStep {
                    post(b, i, &CollFields { step: e.addr as u8 + 1, ..f });
                }
                g.push(e);
            }
        }
        got.iter()
            .enumerate()
            .all(|(i, g)| i == 4 || g.iter().any(|e| e.kind == EventKind::Collective))
    });
    for (i, evs) in got.iter().enumerate().filter(|(i, _)| *i != 4) {
        let e = evs.iter().find(|e| e.kind == EventKind::Collective).expect("an end");
        assert_eq!(e.status, SendStatus::Incomplete as u8, "node {i}");
        let mut lost = nic_abi::event::LostHeads::NONE;
        for p in evs.iter().filter(|e| e.kind == EventKind::McastLost) {
            lost.merge(p.len as usize, &p.inline);
        }
        assert!(lost.contains(4), "node {i}: {:?}", lost.iter().collect::<Vec<_>>());
    }
}
