//! Multicast on the simulated cluster, as the study measured it
//! (lanai9-gm unless said): exactly once to every member for every scheme
//! x algorithm and G = 4..16, under faults too; the division of work the
//! traces show; the root's CPU; cached pipelined trees on the modern
//! profile.

use host_driver::nic_abi::multicast::relays_on_deepest_path;
use host_driver::nic_abi::trace::{Cause, Machine};
use host_driver::{Algorithm, Scheme};
use nic_emu::mcast::{measure, median, McastRun};
use nic_emu::{Faults, Profile};

fn lanai9() -> Profile {
    Profile::load("lanai9-gm").unwrap()
}

fn algorithms() -> [Algorithm; 5] {
    [
        Algorithm::Separate,
        Algorithm::Serial,
        Algorithm::Binomial,
        Algorithm::Binary,
        Algorithm::KBinomial { k: 3 },
    ]
}

#[test]
fn every_scheme_and_algorithm_reaches_every_member_exactly_once_for_g_4_to_16() {
    let p = lanai9();
    for g in (4..=16).step_by(2) {
        for scheme in Scheme::ALL {
            for alg in algorithms() {
                let r = measure(&McastRun::new(&p, scheme, alg, g, 2, 3));
                assert!(r.ok, "{scheme} {alg} G={g}: {:?}", r.problems);
                let reports = if scheme == Scheme::Host { 0 } else { 3 * (g as u64 - 1) };
                assert_eq!(r.reports, reports, "{scheme} {alg} G={g}: one report per member");
            }
        }
    }
}

#[test]
fn relays_on_the_deepest_path_follow_the_tree() {
    for g in 4..=16u16 {
        let log = 15 - g.leading_zeros() as u16; // floor(log2 g)
        assert_eq!(relays_on_deepest_path(Algorithm::Binomial, g), log - 1, "G={g}");
        assert_eq!(relays_on_deepest_path(Algorithm::Binary, g), log - 1, "G={g}");
        assert_eq!(relays_on_deepest_path(Algorithm::Serial, g), g - 2, "G={g}");
        assert_eq!(relays_on_deepest_path(Algorithm::Separate, g), 0, "G={g}");
    }
}

#[test]
fn every_scheme_and_algorithm_survives_loss_corruption_and_duplication_on_16_nodes() {
    let p = lanai9();
    let faults = Faults { drop: 0.02, corrupt: 0.002, duplicate: 0.002 };
    for scheme in Scheme::ALL {
        for alg in algorithms() {
            let mut run = McastRun::new(&p, scheme, alg, 16, 2, 6);
            run.faults = faults;
            run.seed = 7;
            let r = measure(&run);
            assert!(r.ok, "{scheme} {alg} under faults: {:?}", r.problems);
        }
    }
    // Multi-packet messages relayed packet by packet, too.
    let modern = Profile::load("modern").unwrap();
    for scheme in [Scheme::Nic, Scheme::NicCached, Scheme::Assisted, Scheme::Host] {
        let mut run = McastRun::new(&modern, scheme, Algorithm::Binomial, 16, 3 * 4096 + 7, 4);
        run.faults = faults;
        run.seed = 11;
        let r = measure(&run);
        assert!(r.ok, "{scheme} 12 KiB under faults: {:?}", r.problems);
    }
}

#[test]
fn a_root_with_more_destinations_than_stream_records_reaches_every_one() {
    // Separate addressing to 255 destinations: the root needs a sending
    // stream to each and a receiving stream for each one's report, twice
    // what its tables hold. It lets idle streams go and makes them again.
    let p = lanai9();
    for scheme in Scheme::ALL {
        let r = measure(&McastRun::new(&p, scheme, Algorithm::Separate, 256, 2, 3));
        assert!(r.ok, "{scheme}: {:?}", r.problems);
        let reports = if scheme == Scheme::Host { 0 } else { 3 * 255 };
        assert_eq!(r.reports, reports, "{scheme}: one report per member");
        assert!(r.streams_evicted > 255, "{scheme}: {} streams let go", r.streams_evicted);
    }
    let mut run = McastRun::new(&p, Scheme::NicCached, Algorithm::Separate, 256, 2, 4);
    run.faults = Faults { drop: 0.02, corrupt: 0.002, duplicate: 0.002 };
    run.seed = 5;
    let r = measure(&run);
    assert!(r.ok, "under faults: {:?}", r.problems);
}

/// Descriptors SDMA took (its transitions into Intake).
fn intakes(t: &[host_driver::nic_abi::trace::TraceRecord]) -> usize {
    t.iter()
        .filter(|r| {
            r.machine == Machine::Sdma
                && r.cause == Cause::Descriptor
                && r.to == nic_emu::firmware::SdmaState::INTAKE
        })
        .count()
}

/// Transitions of one machine with one cause in a trace.
fn count(t: &[host_driver::nic_abi::trace::TraceRecord], m: Machine, c: Cause) -> usize {
    t.iter().filter(|r| r.machine == m && r.cause == c).count()
}

#[test]
fn traces_show_who_does_the_work() {
    // Binomial over 8: rank 4 relays to 6 and 5.
    let p = lanai9();
    let mut run = McastRun::new(&p, Scheme::Assisted, Algorithm::Binomial, 8, 2, 2);
    run.trace = true;
    let a = measure(&run);
    assert!(a.ok, "{:?}", a.problems);
    let relay = &a.traces[4];
    // At an assisted relay: one receive, one delivery to the host, one
    // host step, one child-list descriptor, then the sends (descriptors
    // after the first send are its receive buffers posted again).
    assert_eq!(a.host_steps[4], 2, "one host step per multicast at the relay");
    let first_send = relay
        .iter()
        .position(|r| r.machine == Machine::Send && r.cause == Cause::DataOut)
        .expect("the relay sends");
    let before = &relay[..first_send];
    assert_eq!(count(before, Machine::Recv, Cause::Accepted), 1, "one receive");
    assert_eq!(count(before, Machine::Rdma, Cause::EventOwed), 1, "one delivery");
    assert_eq!(intakes(before), 1, "one child-list descriptor, before the sends");
    let root = &a.traces[0];
    let root_intake = root
        .iter()
        .filter(|r| r.machine == Machine::Sdma && r.cause == Cause::Descriptor && r.to == 1)
        .count();
    assert_eq!(root_intake, 1, "exactly one descriptor at the root");

    for scheme in [Scheme::Nic, Scheme::NicCached] {
        let mut run = McastRun::new(&p, scheme, Algorithm::Binomial, 8, 2, 2);
        run.trace = true;
        let n = measure(&run);
        assert!(n.ok, "{:?}", n.problems);
        assert!(n.host_steps.iter().all(|&s| s == 0), "{scheme}: no host step anywhere");
        let relay = &n.traces[4];
        let first_send = relay
            .iter()
            .position(|r| r.machine == Machine::Send && r.cause == Cause::DataOut)
            .expect("the relay sends");
        let before = &relay[..first_send];
        assert_eq!(intakes(before), 0, "{scheme}: no descriptor at a NIC relay");
        assert_eq!(count(before, Machine::Rdma, Cause::EventOwed), 0, "{scheme}: forwarded first");
        assert_eq!(intakes(&n.traces[0]), 1, "{scheme}: exactly one descriptor at the root");
        assert!(n.forwarded > 0, "{scheme}: relays forward on the NIC");
    }
}

#[test]
fn the_root_cpu_is_least_busy_with_nic_based_multicast_and_most_with_host_based() {
    let p = lanai9();
    let cpu = |s, g| {
        let r = measure(&McastRun::new(&p, s, Algorithm::Separate, g, 2, 3));
        assert!(r.ok, "{:?}", r.problems);
        median(&r.root_cpu_ns)
    };
    let (nic4, nic16) = (cpu(Scheme::Nic, 4), cpu(Scheme::Nic, 16));
    let (host4, host16) = (cpu(Scheme::Host, 4), cpu(Scheme::Host, 16));
    let assisted16 = cpu(Scheme::Assisted, 16);
    assert_eq!(nic4, nic16, "NIC-based: flat in G");
    assert!(nic16 < assisted16 && assisted16 < host16, "{nic16} < {assisted16} < {host16}");
    assert!(host16 > 3 * host4, "host-based grows with G: {host4} -> {host16}");
}

#[test]
fn cached_pipelined_trees_beat_host_based_multicast_on_a_modern_nic() {
    let p = Profile::load("modern").unwrap();
    for (bytes, factor) in [(2u32, 1.5), (512, 1.5), (16384, 1.7), (65536, 1.7)] {
        let lat = |s, a| {
            let r = measure(&McastRun::new(&p, s, a, 16, bytes, 4));
            assert!(r.ok, "{s} {a} {bytes}: {:?}", r.problems);
            median(&r.latency_ns) as f64
        };
        let host =
            Algorithm::FIXED.iter().map(|&a| lat(Scheme::Host, a)).fold(f64::INFINITY, f64::min);
        let k = nic_emu::mcast_model::k_for(&p, 16, bytes as u64);
        let cached = [Algorithm::Binomial, Algorithm::Serial, Algorithm::KBinomial { k }]
            .iter()
            .map(|&a| lat(Scheme::NicCached, a))
            .fold(f64::INFINITY, f64::min);
        assert!(host / cached >= factor, "{bytes} B: {:.2}x (want {factor}x)", host / cached);
    }
    let bin = measure(&McastRun::new(&p, Scheme::NicCached, Algorithm::Binomial, 16, 65536, 4));
    let kb =
        measure(&McastRun::new(&p, Scheme::NicCached, Algorithm::KBinomial { k: 3 }, 16, 65536, 4));
    assert!(
        median(&kb.latency_ns) < median(&bin.latency_ns),
        "k-binomial beats binomial at 64 KiB"
    );
}

#[test]
fn small_messages_follow_the_published_model_within_ten_percent() {
    // 2 B, every G from 4 to 16 (odd ones too: there a sender's further
    // children lead the longest path): every scheme x algorithm's mean
    // over 10 repetitions (after a warm-up) within 10% of the model, and
    // no multicast faster than its root's CPU time for it.
    let p = lanai9();
    let params = nic_emu::mcast_model::model_params(&p);
    let mut outside = Vec::new();
    for g in 4..=16 {
        for scheme in Scheme::ALL {
            for alg in algorithms() {
                let alg = match alg {
                    Algorithm::KBinomial { .. } => {
                        Algorithm::KBinomial { k: nic_emu::mcast_model::k_for(&p, g, 2) }
                    }
                    a => a,
                };
                let r = measure(&McastRun::new(&p, scheme, alg, g, 2, 11));
                assert!(r.ok, "{scheme} {alg} G={g}: {:?}", r.problems);
                assert_eq!(r.latency_ns.len(), 10, "{scheme} {alg} G={g}");
                for (lat, cpu) in r.latency_ns.iter().zip(&r.root_cpu_ns) {
                    assert!(lat >= cpu, "{scheme} {alg} G={g}: {lat} ns, root CPU {cpu} ns");
                }
                let sim = r.latency_ns.iter().sum::<u64>() as f64 / 10.0 / 1000.0;
                let model = host_driver::nic_abi::multicast::model::model_latency_us(
                    &params, scheme, alg, g, 2,
                );
                let diff = sim / model - 1.0;
                if diff.abs() >= 0.10 {
                    outside.push(format!("{scheme} {alg} G={g}: {sim:.1} us, model {model:.1} us"));
                }
            }
        }
    }
    assert!(outside.is_empty(), "outside 10%: {outside:#?}");
}

#[test]
fn a_roots_destinations_get_the_message_one_send_apart_not_in_pairs() {
    // NIC-assisted separate addressing to 8 members: the root's NIC builds
    // and sends one packet a pass, each after the pass that built it, so
    // consecutive members get the message about one send time apart
    // (t_nic_send, 17.4 us at 2 B, with the acks and reports the root
    // takes between its sends), never two at once.
    let p = lanai9();
    let r = measure(&McastRun::new(&p, Scheme::Assisted, Algorithm::Separate, 8, 2, 4));
    assert!(r.ok, "{:?}", r.problems);
    let at = &r.last_arrivals_ns[1..];
    for w in at.windows(2) {
        let gap = w[1].saturating_sub(w[0]) as f64 / 1000.0;
        assert!((12.0..30.0).contains(&gap), "arrivals {at:?}: a gap of {gap:.1} us");
    }
}

#[test]
fn a_relay_sends_its_further_children_the_packet_it_built_for_the_first() {
    // NIC-based binary tree of 5: 0 -> 1, 2; 1 -> 3, 4. Relay 1 builds the
    // packet once (t_np, t_ns) and sends member 4 the same packet right
    // behind member 3's, before delivering to its own host.
    let p = lanai9();
    let r = measure(&McastRun::new(&p, Scheme::Nic, Algorithm::Binary, 5, 2, 4));
    assert!(r.ok, "{:?}", r.problems);
    let (m3, m4) = (r.last_arrivals_ns[3], r.last_arrivals_ns[4]);
    let gap = m4.abs_diff(m3) as f64 / 1000.0;
    assert!(gap < 3.0, "members 3 and 4 {gap:.1} us apart");
}

#[test]
fn at_64_kib_the_host_binomial_tree_beats_the_binary_tree_by_its_fewer_sends_in_a_row() {
    // G = 16: the published model ranks the binary tree first (same
    // relays on the deepest path, less processing), but a sender here
    // sends a message to one child after another, and at 64 KiB each
    // send is long. The binary tree's last member is rank 14, reached
    // 0 -> 2 -> 6 -> 14, each the second child of its sender: six
    // whole-message sends in a row, where the binomial tree reaches
    // everyone within four.
    let p = lanai9();
    let run = |a| {
        let r = measure(&McastRun::new(&p, Scheme::Host, a, 16, 65536, 3));
        assert!(r.ok, "{a}: {:?}", r.problems);
        r
    };
    let (bin, bnl) = (run(Algorithm::Binary), run(Algorithm::Binomial));
    let mean = |v: &[u64]| v.iter().sum::<u64>() / v.len() as u64;
    let (tb, tn) = (mean(&bin.latency_ns), mean(&bnl.latency_ns));
    let last = |r: &nic_emu::mcast::McastResult| {
        (0..16).max_by_key(|&k| r.last_arrivals_ns[k]).expect("members")
    };
    assert_eq!(last(&bin), 14, "{:?}", bin.last_arrivals_ns);
    // One 64 KiB send: the root's first child has it after about one.
    let send = bin.last_arrivals_ns[1];
    assert!(bin.last_arrivals_ns[14] > bin.last_arrivals_ns[15], "the second children lag");
    assert!(tn < tb, "binomial {tn} ns, binary {tb} ns");
    assert!(tb - tn > send / 2, "by a good part of a send: {tn} vs {tb} ns, a send {send} ns");
    // The model, charging one send per relay, says the opposite.
    let params = nic_emu::mcast_model::model_params(&p);
    let model = |a| {
        host_driver::nic_abi::multicast::model::model_latency_us(
            &params,
            Scheme::Host,
            a,
            16,
            65536,
        )
    };
    assert!(model(Algorithm::Binary) < model(Algorithm::Binomial));
}
