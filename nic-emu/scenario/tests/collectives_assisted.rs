//! Assisted collective flows (`scheme = "assisted"`) through the scenario
//! runner on the simulator: every kind and algorithm the scheme runs
//! completes each collective exactly once at every member with the
//! reference's result, also under loss, corruption and duplication; a
//! member whose NIC resets mid-collective is named missing by the
//! others; the ring and too long a vector are refused.

mod common;

use common::{assert_collectives_right, head, run_text};
use nic_scenario::coll::CollReport;
use nic_scenario::FlowReport;
use nic_scenario::Scenario;

/// Collective flow `i` (its port `i % 8`) of `kind` by `alg`, assisted.
fn flow(i: usize, kind: &str, alg: &str, extra: &str) -> String {
    format!(
        "[[flows]]\nname = \"{kind}-{alg}\"\nkind = \"{kind}\"\nport = {}\ngroup_size = 11\n\
         scheme = \"assisted\"\nalgorithm = \"{alg}\"\ncount = 4\n{extra}\n",
        i % 8
    )
}

/// Every collective complete at every member, once, in order, right,
/// run assisted, its host and NIC CPU time kept.
fn assert_assisted_right(f: &FlowReport) -> &CollReport {
    let c = assert_collectives_right(f);
    assert_eq!(c.scheme, "assisted", "{}", f.name);
    let host = c.host_cpu_ns.unwrap_or_else(|| panic!("{}: no host_cpu_ns on the sim", f.name));
    assert!(host.p50 > 0, "{}: {c:?}", f.name);
    c
}

const CASES: [(&str, &str, &str); 7] = [
    ("barrier", "dissemination", ""),
    ("barrier", "pairwise", ""),
    ("barrier", "tree", ""),
    ("allreduce", "pairwise", "datatype = \"f64\"\nelements = 300\n"),
    ("allreduce", "binomial", "datatype = \"f32\"\nop = \"max\"\nelements = 700\n"),
    ("allreduce", "auto", "datatype = \"i64\"\nelements = 900\n"),
    ("reduce", "binomial", "datatype = \"i64\"\nop = \"min\"\nelements = 200\nroot = 4\n"),
];

#[test]
fn every_kind_and_algorithm_assisted_gives_the_reference_result_once() {
    let mut text = head(12);
    for (i, (kind, alg, extra)) in CASES.iter().enumerate() {
        text += &flow(i, kind, alg, extra);
    }
    let r = run_text(&text);
    assert!(r.complete && r.problems.is_empty(), "{:?}\n{}", r.problems, r.summary());
    for f in &r.flows {
        let c = assert_assisted_right(f);
        assert_ne!(c.algorithm, "ring", "{}", f.name);
    }
}

#[test]
fn assisted_collectives_survive_loss_corruption_and_duplication() {
    let text = head(16)
        + "[[flows]]\nname = \"b\"\nkind = \"barrier\"\nport = 2\ngroup_size = 16\n\
           scheme = \"assisted\"\ncount = 200\n"
        + "[[flows]]\nname = \"a\"\nkind = \"allreduce\"\nport = 3\ngroup_size = 16\n\
           scheme = \"assisted\"\ndatatype = \"f64\"\nelements = 256\ncount = 40\n"
        + "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002\n";
    let r = run_text(&text);
    assert!(r.complete, "{}", r.summary());
    for f in &r.flows {
        assert_assisted_right(f);
    }
    let resent: u64 = r.nics.iter().map(|n| n.retransmits).sum();
    assert!(resent > 0, "the faults cost nothing: not exercised");
}

#[test]
fn a_member_whose_nic_resets_mid_collective_is_named_missing_by_the_others() {
    for scheme in ["nic", "assisted"] {
        let text = head(8)
            + &format!(
                "[[flows]]\nname = \"b\"\nkind = \"barrier\"\nport = 2\ngroup_size = 8\n\
                 scheme = \"{scheme}\"\nalgorithm = \"dissemination\"\ncount = 100000\n\
                 [[faults.nic_reset]]\nnode = 5\nat_us = 2000\n"
            );
        let r = run_text(&text);
        let c = r.flows[0].collective.as_ref().expect("a collective report");
        assert!(c.incomplete > 0, "{scheme}: {c:?}\n{}", r.summary());
        assert!(
            r.problems.iter().any(|p| p.contains("ended with members missing")),
            "{scheme}: {:?}",
            r.problems
        );
    }
}

#[test]
fn the_ring_and_long_vectors_are_refused_assisted() {
    for (flow, want) in [
        (
            "kind = \"allreduce\"\nport = 2\ngroup_size = 4\nscheme = \"assisted\"\nalgorithm = \"ring\"\n",
            "flows[0].algorithm: \"ring\" cannot run assisted: its steps depend on the chunk \
             (assisted, a allreduce takes pairwise, binomial, auto)",
        ),
        (
            "kind = \"allreduce\"\nport = 2\ngroup_size = 4\nscheme = \"assisted\"\nelements = 5000\n",
            "flows[0].elements: 40000 bytes, more than an assisted collective takes (32768",
        ),
    ] {
        let text = format!("{}[[flows]]\n{flow}", head(4));
        let e = Scenario::parse_validated(&text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{flow}\ngot: {e}\nwant: {want}");
    }
}
