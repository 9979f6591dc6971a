//! scenarios/multicast-6node.toml on every backend: the sim, a live
//! cluster (the MCP as native threads) and a qemu cluster (the riscv64
//! image under qemu-system-riscv64), with the same host programs and
//! checks. Every member must get every multicast exactly once, intact and
//! in order, every root every completion, and the stream beside them every
//! message. Then every bundled multicast scenario (the 16-node ones under
//! faults and with overlapping groups too) on live and on qemu; `cargo
//! xtask test` runs them all on the sim.
//!
//! The qemu test FAILS, naming what is missing, when qemu-system-riscv64
//! or the riscv64imac-unknown-none-elf target is not installed: it is
//! never skipped.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::time::Duration;

use cluster_tests::{assert_all_intact, example};
use host_driver::cluster::ClusterBackend;
use nic_emu::scenario::{self, FlowKind, Report, RtScenarioOptions, Validated};

const FILE: &str = "multicast-6node.toml";

fn load() -> Validated {
    scenario::load_file(&example(FILE)).unwrap_or_else(|e| panic!("{e}"))
}

fn rt_options(backend: ClusterBackend) -> RtScenarioOptions {
    cluster_tests::rt_options(backend, Duration::from_secs(60), None)
}

/// The file's counts, every multicast at every member, each scheme.
fn assert_every_member_got_everything(v: &Validated, r: &Report, backend: &str) {
    assert_eq!(r.backend, backend);
    assert_all_intact(r);
    assert_eq!(r.sim.stopped, "done");
    let mut schemes = Vec::new();
    for (f, spec) in r.flows.iter().zip(&v.flows) {
        assert_eq!((f.name.as_str(), f.delivered), (spec.name.as_str(), spec.messages));
        assert!(f.latency_ns.min > 0, "{}: {f:?}", f.name);
        if spec.kind != FlowKind::Multicast {
            continue;
        }
        let m = f.multicast.as_ref().expect("a multicast report");
        let members = spec.mcast.as_ref().unwrap().members.len() as u64 - 1;
        assert_eq!(m.deliveries, spec.messages * members, "{}", f.name);
        assert!(m.link_concentration.is_some_and(|c| c >= 1.0), "{}", f.name);
        // Priced at the profile's costs, or the sim's busy clock: sim only.
        assert_eq!(m.root_cpu_ns.is_some(), backend == "sim", "{}", f.name);
        assert_eq!(m.tree_ns.is_some(), backend == "sim", "{}", f.name);
        assert_eq!(m.link_concurrency.is_some(), backend == "sim", "{}", f.name);
        schemes.push(m.scheme.clone());
    }
    schemes.sort();
    schemes.dedup();
    assert_eq!(schemes, ["assisted", "host", "nic", "nic-cached"]);
}

#[test]
fn the_multicast_scenario_is_exactly_once_in_order_and_intact_on_the_sim() {
    let v = load();
    let r = scenario::run(&v).unwrap_or_else(|e| panic!("{e}"));
    assert_every_member_got_everything(&v, &r, "sim");
    // The file exercises what it says: multi-packet messages, a window
    // above 1, a tree the profile chose.
    assert!(r.flows.iter().flat_map(|f| &f.sizes).any(|&s| s > 4096));
    let auto = r.flows.iter().filter_map(|f| f.multicast.as_ref()).find(|m| m.requested == "auto");
    assert!(auto.is_some_and(|m| m.algorithm != "auto"));
}

#[test]
fn the_multicast_scenario_is_exactly_once_in_order_and_intact_on_live() {
    let v = load();
    let r = scenario::run_realtime(&v, &rt_options(ClusterBackend::Live))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_every_member_got_everything(&v, &r, "live");
}

#[test]
fn the_multicast_scenario_is_exactly_once_in_order_and_intact_on_qemu() {
    rt::require_qemu();
    let v = load();
    let mut o = rt_options(ClusterBackend::Qemu);
    o.image = Some(rt::firmware_image());
    let r = scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{e}"));
    assert_every_member_got_everything(&v, &r, "qemu");
}

/// Every bundled multicast scenario (scenarios/multicast-*.toml), by name.
fn bundled() -> Vec<String> {
    let dir = example("");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("multicast-") && n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "the bundled multicast scenarios: {names:?}");
    names
}

/// Run every bundled multicast scenario on `backend`: each must finish
/// with every message delivered exactly once, intact, in order.
fn every_bundled_scenario_on(backend: ClusterBackend, image: Option<std::path::PathBuf>) {
    for name in bundled() {
        let v = scenario::load_file(&example(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut o = rt_options(backend);
        o.image = image.clone();
        let r = scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.sim.stopped, "done", "{name}");
        assert_all_intact(&r);
        for (f, spec) in r.flows.iter().zip(&v.flows) {
            assert_eq!(f.delivered, spec.messages, "{name}: {}", f.name);
        }
    }
}

#[test]
fn every_bundled_multicast_scenario_passes_on_live() {
    every_bundled_scenario_on(ClusterBackend::Live, None);
}

#[test]
fn every_bundled_multicast_scenario_passes_on_qemu() {
    rt::require_qemu();
    every_bundled_scenario_on(ClusterBackend::Qemu, Some(rt::firmware_image()));
}

/// A group of 6 whose member node 3 sits behind a cable that stays down:
/// every multicast completes at the root as Incomplete, naming the
/// members it did not reach (the binomial subtree node 3 heads) in the
/// scenario's problem line; the others get every message. The send
/// timeout (1 s) is long enough for a loaded machine's guests to answer:
/// only the dead cable's members go silent.
fn dead_cable() -> Validated {
    let text = "profile = \"lanai9-gm\"\nseed = 3\n[firmware]\nsend_timeout_us = 1000000\n\
                [run]\nlimit_ms = 20000\n[fabric]\nnodes = 6\n\
                [[faults.link_down]]\nlink = \"node3\"\nat_us = 0\nfor_us = 10000000\n\
                [[flows]]\nname = \"m\"\nsrc = [0, 2]\nkind = \"multicast\"\ngroup_size = 6\n\
                scheme = \"nic-cached\"\nalgorithm = \"binomial\"\nbytes = 64\nmessages = 2\n\
                start_us = 100\n";
    scenario::Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}"))
}

fn assert_the_dead_members_are_named(r: &Report, backend: &str) {
    use host_driver::nic_abi::multicast::{subtree_ranks, Algorithm};
    let lost: Vec<u16> = subtree_ranks(Algorithm::Binomial, 6, 3).collect();
    assert!(lost.len() > 1, "node 3 heads a subtree: {lost:?}");
    let line = format!("{} members not reached nodes {lost:?}", lost.len());
    let named = r.problems.iter().filter(|p| p.contains(&line)).count();
    assert_eq!(named, 2, "{backend}: {:?}", r.problems);
    assert!(r.problems.iter().all(|p| p.contains(&line)), "{backend}: {:?}", r.problems);
    let m = r.flows[0].multicast.as_ref().expect("a multicast report");
    let reached = 5 - lost.len() as u64;
    assert_eq!(m.deliveries, 2 * reached, "{backend}: the others got both");
    let f = &r.flows[0];
    assert_eq!((f.corrupted, f.duplicates, f.out_of_order), (0, 0, 0), "{backend}");
}

#[test]
fn members_behind_a_dead_cable_are_named_in_the_roots_completion_on_every_backend() {
    let v = dead_cable();
    let r = scenario::run(&v).unwrap_or_else(|e| panic!("{e}"));
    assert_the_dead_members_are_named(&r, "sim");
    let r = scenario::run_realtime(&v, &rt_options(ClusterBackend::Live))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_the_dead_members_are_named(&r, "live");
    rt::require_qemu();
    let mut o = rt_options(ClusterBackend::Qemu);
    o.image = Some(rt::firmware_image());
    let r = scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{e}"));
    assert_the_dead_members_are_named(&r, "qemu");
}

/// A NIC-relayed multicast (scheme `nic` or `nic-cached`) of 64 KiB
/// messages, several in flight, over a lossy or corrupting fabric.
struct Lossy {
    profile: &'static str,
    seed: u64,
    nodes: u32,
    root: u32,
    group: u32,
    scheme: &'static str,
    algorithm: &'static str,
    messages: u64,
    drop: f64,
    corrupt: f64,
    reliability: &'static str,
}

impl Lossy {
    fn scenario(&self) -> Validated {
        let Lossy { profile, seed, nodes, root, group, scheme, algorithm, messages, .. } = self;
        let (drop, corrupt, reliability) = (self.drop, self.corrupt, self.reliability);
        let text = format!(
            "profile = \"{profile}\"\nseed = {seed}\n[fabric]\nnodes = {nodes}\n\
             [firmware]\nreliability = \"{reliability}\"\n[run]\nlimit_ms = 10000\n\
             [faults]\ndrop = {drop}\ncorrupt = {corrupt}\n\
             [[flows]]\nname = \"m\"\nsrc = [{root}, 1]\nkind = \"multicast\"\n\
             group_size = {group}\nscheme = \"{scheme}\"\nalgorithm = \"{algorithm}\"\n\
             bytes = 65536\nmessages = {messages}\nwindow = 3\n"
        );
        scenario::Scenario::parse_validated(&text).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A relay holds the receive buffers of the packets it forwards until
/// its children acknowledge them, and the acks need receive buffers to
/// come in. With three 64 KiB multicasts in flight under loss, relays
/// used to end up holding every buffer (the bound on what relays hold
/// counted only packets not yet copied to the host, and was checked only
/// at a message's first packet), or to refuse the very packet that fills
/// a selective-repeat gap because of the packets held past it: the
/// multicast stopped for good with every NIC idle. Each case below did,
/// on the sim, before relays were bounded to half of the receive buffers
/// at every packet.
#[test]
fn relays_under_loss_with_multicasts_in_flight_never_hold_every_receive_buffer() {
    let g = |reliability| Lossy {
        profile: "lanai4-gm",
        seed: 0,
        nodes: 4,
        root: 0,
        group: 4,
        scheme: "nic",
        algorithm: "serial",
        messages: 3,
        drop: 0.03,
        corrupt: 0.0,
        reliability,
    };
    let cases = [
        Lossy { seed: 8, ..g("go-back-n") },
        Lossy { seed: 3, nodes: 5, group: 5, ..g("go-back-n") },
        Lossy { seed: 2, nodes: 8, group: 8, scheme: "nic-cached", messages: 10, ..g("go-back-n") },
        Lossy {
            profile: "lanai9-gm",
            seed: 584933,
            nodes: 11,
            root: 9,
            group: 6,
            messages: 9,
            corrupt: 0.03,
            ..g("go-back-n")
        },
        Lossy {
            profile: "lanai9-gm",
            seed: 619972,
            nodes: 6,
            root: 5,
            algorithm: "binomial",
            messages: 8,
            drop: 0.0,
            corrupt: 0.03,
            ..g("selective")
        },
        Lossy {
            profile: "lanai9-gm",
            seed: 412500,
            nodes: 8,
            group: 8,
            scheme: "nic-cached",
            algorithm: "binary",
            messages: 6,
            corrupt: 0.01,
            ..g("selective")
        },
    ];
    for c in &cases {
        let v = c.scenario();
        let r = scenario::run(&v).unwrap_or_else(|e| panic!("{e}"));
        let what = format!("{} {} seed {} ({})", c.scheme, c.algorithm, c.seed, c.reliability);
        assert_eq!(r.sim.stopped, "done", "{what}: {:?}", r.problems);
        assert_all_intact(&r);
        let m = r.flows[0].multicast.as_ref().expect("a multicast report");
        assert_eq!(m.deliveries, c.messages * (c.group as u64 - 1), "{what}");
        assert_eq!(r.flows[0].delivered, c.messages, "{what}");
    }
}
