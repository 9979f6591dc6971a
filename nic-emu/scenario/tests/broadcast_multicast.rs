//! Broadcast collective flows run as multicasts (docs/collectives.md,
//! section Broadcast as a multicast) on the simulator: under each of the
//! four multicast schemes and each tree, every member but the root gets
//! the root's vector of every collective intact, exactly once, in order;
//! likewise under loss, corruption and duplication; `auto` picks the tree
//! by the multicast's latency model and names it; `nic` and `host` with
//! `binomial` or `auto` stay the collective's own broadcast.

use nic_device::Profile;
mod common;

use common::run_text;
use nic_scenario::coll::CollReport;
use nic_scenario::FlowReport;

const HEAD: &str = "profile = \"lanai9-gm\"\nseed = 7\n[fabric]\nnodes = 9\n";

/// A broadcast flow on `port`: 9 members in a scrambled rank order, the
/// root rank 5 (node 1), `count` vectors of 2,500 u32 (10 KB: three
/// packets).
fn flow(name: &str, port: u32, scheme: &str, alg: &str, count: u32) -> String {
    format!(
        "[[flows]]\nname = \"{name}\"\nkind = \"broadcast\"\nport = {port}\n\
         group = [6, 3, 8, 0, 4, 1, 7, 2, 5]\nroot = 5\nscheme = \"{scheme}\"\n\
         algorithm = \"{alg}\"\ndatatype = \"u32\"\nelements = 2500\ncount = {count}\n"
    )
}

/// Every broadcast complete at every member once, in order, and every
/// member but the root checked against the root's vector each time.
fn assert_broadcasts_right(f: &FlowReport) -> &CollReport {
    let c = f.collective.as_ref().unwrap_or_else(|| panic!("{}: no collective report", f.name));
    assert_eq!(c.kind, "broadcast");
    assert_eq!((f.delivered, c.completed), (c.count, c.count), "{}: {c:?}", f.name);
    assert_eq!(
        (f.duplicates, f.out_of_order, c.incomplete, c.results_wrong),
        (0, 0, 0, 0),
        "{}: {c:?}",
        f.name
    );
    let others = c.group_size as u64 - 1;
    assert_eq!(c.results_checked, c.count * others, "{}: every member but the root", f.name);
    assert_eq!(c.results_ok, Some(true), "{}", f.name);
    assert!(f.latency_ns.min > 0, "{}", f.name);
    let (host, nic) = (c.host_cpu_ns.unwrap(), c.nic_cpu_ns.unwrap());
    assert!(host.p50 > 0 && nic.p50 > 0, "{}: {c:?}", f.name);
    assert!(c.skew_ns.is_some(), "{}", f.name);
    c
}

#[test]
fn every_scheme_and_tree_delivers_the_root_s_vector_to_every_member_once() {
    let trees = ["separate", "serial", "multicast-binomial", "binary", "k-binomial"];
    for scheme in ["host", "nic", "assisted", "nic-cached"] {
        let mut text = HEAD.to_string();
        for (i, tree) in trees.iter().enumerate() {
            text += &flow(tree, i as u32 + 1, scheme, tree, 5);
        }
        let r = run_text(&text);
        assert!(r.complete && r.problems.is_empty(), "{scheme}: {}", r.summary());
        for (f, tree) in r.flows.iter().zip(trees) {
            let c = assert_broadcasts_right(f);
            let tree = tree.trim_start_matches("multicast-");
            assert_eq!(c.scheme, scheme);
            assert!(c.algorithm.starts_with(&format!("multicast {tree}")), "{c:?}");
            assert!(r.summary().contains(&format!("({scheme})")), "{}", r.summary());
        }
    }
}

#[test]
fn broadcasts_by_multicast_survive_loss_corruption_and_duplication() {
    let mut text = HEAD.to_string();
    for (i, (scheme, tree)) in
        [("host", "binary"), ("nic", "serial"), ("assisted", "binomial"), ("nic-cached", "auto")]
            .into_iter()
            .enumerate()
    {
        text += &flow(scheme, i as u32 + 1, scheme, tree, 15);
    }
    text += "[faults]\ndrop = 0.03\ncorrupt = 0.003\nduplicate = 0.02\n";
    let r = run_text(&text);
    assert!(r.complete && r.problems.is_empty(), "{}", r.summary());
    for f in &r.flows {
        assert_broadcasts_right(f);
    }
    let resent: u64 = r.nics.iter().map(|n| n.retransmits).sum();
    let dups: u64 = r.nics.iter().map(|n| n.duplicates).sum();
    assert!(resent > 0 && dups > 0, "the faults were not exercised: {}", r.summary());
}

#[test]
fn auto_picks_the_tree_by_the_multicast_model_and_nic_binomial_stays_the_collective_s() {
    let mut text = HEAD.to_string();
    let cases = [
        ("nic", "auto"),
        ("host", "binomial"),
        ("nic", "multicast-auto"),
        ("assisted", "auto"),
        ("nic-cached", "auto"),
    ];
    for (i, (scheme, alg)) in cases.into_iter().enumerate() {
        text += &flow(&format!("{scheme}-{alg}"), i as u32 + 1, scheme, alg, 3);
    }
    let r = run_text(&text);
    assert!(r.complete && r.problems.is_empty(), "{}", r.summary());
    let p = Profile::load("lanai9-gm").unwrap();
    let got: Vec<(&str, &str)> = r
        .flows
        .iter()
        .map(|f| {
            let c = assert_broadcasts_right(f);
            (c.requested.as_str(), c.algorithm.as_str())
        })
        .collect();
    assert_eq!(got[..2], [("auto", "binomial"), ("binomial", "binomial")]);
    use nic_abi::multicast::Scheme;
    for ((requested, alg), scheme) in
        got[2..].iter().zip([Scheme::Nic, Scheme::Assisted, Scheme::NicCached])
    {
        let pick = nic_device::mcast::pick(&p, scheme, 9, 10_000);
        assert_eq!(*alg, format!("multicast {pick}"), "{scheme:?}");
        assert!(requested.ends_with("auto"));
    }
    assert!(r.summary().contains("broadcast by multicast"), "{}", r.summary());
}
