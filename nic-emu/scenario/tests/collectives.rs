//! Collective flows through the scenario runner on the simulator: every
//! kind and algorithm, on the NICs and on the hosts, completes each
//! collective exactly once at every member with the reference's result;
//! under loss, corruption, duplication and a cable outage likewise; each
//! member's NIC CPU time per collective is reported, and grows with the
//! vector; the keys that do not apply are refused by name.

mod common;

use common::{assert_collectives_right, head, run_text};
use nic_scenario::Scenario;

fn flow(kind: &str, scheme: &str, alg: &str, extra: &str) -> String {
    format!(
        "[[flows]]\nname = \"{kind}-{scheme}-{alg}\"\nkind = \"{kind}\"\nport = 2\n\
         group_size = 11\nscheme = \"{scheme}\"\nalgorithm = \"{alg}\"\ncount = 4\n{extra}\n"
    )
}

#[test]
fn every_kind_and_algorithm_on_nics_and_hosts_gives_the_reference_result_once() {
    let cases = [
        ("barrier", "dissemination", ""),
        ("barrier", "pairwise", ""),
        ("barrier", "tree", ""),
        ("allreduce", "pairwise", "datatype = \"f64\"\nelements = 300\n"),
        ("allreduce", "binomial", "datatype = \"f32\"\nop = \"max\"\nelements = 700\n"),
        ("allreduce", "ring", "datatype = \"f64\"\nelements = 1500\n"),
        ("reduce", "binomial", "datatype = \"i64\"\nop = \"min\"\nelements = 200\nroot = 4\n"),
        ("broadcast", "binomial", "datatype = \"u32\"\nelements = 999\nroot = 10\n"),
    ];
    for scheme in ["nic", "host"] {
        let mut text = head(12);
        for (kind, alg, extra) in cases {
            text += &flow(kind, scheme, alg, extra)
                .replace("port = 2", &format!("port = {}", text.matches("[[flows]]").count() % 8));
        }
        let r = run_text(&text);
        assert!(r.complete, "{scheme}: {}", r.summary());
        for f in &r.flows {
            let c = assert_collectives_right(f);
            assert_eq!(c.scheme, scheme);
            assert_eq!(c.group_size, 11);
        }
    }
}

#[test]
fn auto_names_the_algorithm_it_picked() {
    let text = head(12)
        + &flow("barrier", "nic", "auto", "")
        + &flow("allreduce", "nic", "auto", "elements = 4000\n").replace("port = 2", "port = 3");
    let r = run_text(&text);
    let algs: Vec<(&str, &str)> = r
        .flows
        .iter()
        .map(|f| {
            let c = assert_collectives_right(f);
            (c.requested.as_str(), c.algorithm.as_str())
        })
        .collect();
    assert_eq!(algs, [("auto", "dissemination"), ("auto", "ring")]);
}

#[test]
fn barriers_and_allreduces_survive_loss_corruption_duplication_and_an_outage() {
    let text = head(16)
        + "[[flows]]\nname = \"b\"\nkind = \"barrier\"\nport = 2\ngroup_size = 16\ncount = 300\n"
        + "[[flows]]\nname = \"a\"\nkind = \"allreduce\"\nport = 3\ngroup_size = 16\n\
           datatype = \"f64\"\nelements = 256\ncount = 60\n"
        + "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002\n\
           [[faults.link_down]]\nlink = \"node5\"\nat_us = 3000\nfor_us = 5000\n";
    let r = run_text(&text);
    assert!(r.complete, "{}", r.summary());
    for f in &r.flows {
        assert_collectives_right(f);
    }
    let resent: u64 = r.nics.iter().map(|n| n.retransmits).sum();
    assert!(resent > 0, "the faults cost nothing: not exercised");
}

#[test]
fn nic_cpu_per_member_grows_with_the_vector() {
    let nic_cpu = |extra: &str| {
        let r = run_text(&(head(12) + &flow("allreduce", "nic", "pairwise", extra)));
        assert!(r.complete, "{}", r.summary());
        let c = assert_collectives_right(&r.flows[0]);
        c.nic_cpu_ns.unwrap()
    };
    let small = nic_cpu("datatype = \"f64\"\nelements = 1\n");
    let large = nic_cpu("datatype = \"f64\"\nelements = 2048\n");
    assert!(large.p50 > small.p50, "8 B: {small:?}, 16 KiB: {large:?}");
    assert!(large.max > small.max, "8 B: {small:?}, 16 KiB: {large:?}");
}

#[test]
fn keys_that_do_not_apply_to_a_collective_are_refused_by_name() {
    let base = head(4);
    for (flow, want) in [
        ("kind = \"barrier\"\nport = 2\ngroup_size = 4\nmessages = 3\n", "flows[0].messages: does not apply to a barrier flow (give `count`)"),
        ("kind = \"barrier\"\nsrc = [0, 2]\ngroup_size = 4\n", "flows[0].src: does not apply to a barrier flow"),
        ("kind = \"barrier\"\nport = 2\ngroup_size = 4\nalgorithm = \"ring\"\n", "flows[0].algorithm: \"ring\" does not do a barrier (dissemination, pairwise, tree, auto)"),
        ("kind = \"allreduce\"\nport = 2\ngroup_size = 4\nop = \"band\"\n", "flows[0].op: band does not apply to f64"),
        ("kind = \"allreduce\"\nport = 2\ngroup_size = 4\nelements = 3000000\n", "flows[0].elements: 3000000 out of range (1..=2096640"),
        ("kind = \"reduce\"\nport = 2\ngroup_size = 4\nroot = 4\n", "flows[0].root: rank 4 is not a member's"),
        ("kind = \"barrier\"\nport = 2\ngroup_size = 4\nroot = 1\n", "flows[0].root: applies to reduce and broadcast"),
        ("kind = \"barrier\"\nport = 2\ngroup_size = 4\ndatatype = \"f64\"\n", "flows[0].datatype: does not apply to a barrier"),
        ("kind = \"barrier\"\ngroup_size = 4\n", "flows[0]: a barrier flow needs `port`"),
        ("kind = \"barrier\"\nport = 2\n", "flows[0]: a barrier flow needs `group` or `group_size`"),
        ("kind = \"barrier\"\nport = 2\ngroup = [1, 1]\n", "flows[0].group[1]: node 1 is listed twice"),
        ("kind = \"barrier\"\nport = 2\ngroup_size = 4\nscheme = \"nic-cached\"\n", "flows[0].scheme: \"nic-cached\" runs a broadcast as a multicast; a barrier takes host, nic or assisted"),
        ("kind = \"stream\"\nsrc = [0, 1]\ndst = [1, 1]\nbytes = 8\nmessages = 1\ncount = 3\n", "flows[0].count: applies to collective flows only"),
    ] {
        let text = format!("{base}[[flows]]\n{flow}");
        let e = Scenario::parse_validated(&text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{flow}\ngot: {e}\nwant: {want}");
    }
}

#[test]
fn a_stream_between_members_into_a_host_collectives_port_is_refused() {
    // The host scheme's messages carry no stream of their own: the
    // collective takes every message its members send to its port, and
    // an all-to-all there stalled with none delivered. Another port, a
    // NIC-scheme collective, or a sender outside the group are fine.
    let coll = "[[flows]]\nname = \"b\"\nkind = \"barrier\"\nport = 2\ngroup_size = 3\n\
                scheme = \"host\"\ncount = 5\n";
    let stream = |src: u16, port: u8| {
        format!(
            "[[flows]]\nname = \"s\"\nkind = \"stream\"\nsrc = [{src}, 1]\ndst = [1, {port}]\nbytes = 64\n\
             messages = 20\n"
        )
    };
    let e = Scenario::parse_validated(&format!("{}{coll}{}", head(4), stream(0, 2)))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "flows[1]: its stream 0:1 -> 1:2 low goes into port 2 between members of the \
             host-scheme collective b (flows[0])"
        ),
        "{e}"
    );
    // Two host-scheme collectives on one port with members in common:
    // each would take the other's messages (the second never completed).
    let second = "[[flows]]\nname = \"a\"\nkind = \"allreduce\"\nport = 2\ngroup_size = 4\n\
                  scheme = \"host\"\ncount = 5\n";
    let e =
        Scenario::parse_validated(&format!("{}{coll}{second}", head(4))).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "flows[1]: the host-scheme collective a shares port 2 and 3 members with the \
             host-scheme collective b (flows[0])"
        ),
        "{e}"
    );
    for ok in [
        format!("{}{coll}{}", head(4), second.replace("port = 2", "port = 3")),
        format!("{}{coll}{}", head(4), stream(0, 3)),
        format!("{}{coll}{}", head(4), stream(3, 2)),
        format!("{}{}{}", head(4), coll.replace("\"host\"", "\"nic\""), stream(0, 2)),
    ] {
        let r = run_text(&ok);
        assert!(r.complete && r.all_delivered_intact(), "{ok}\n{}", r.summary());
        for f in r.flows.iter().filter(|f| f.collective.is_some()) {
            assert_collectives_right(f);
        }
    }
}

#[test]
fn a_one_mebibyte_allreduce_is_cut_in_4_kib_chunks_and_right_at_every_member() {
    // modern: 8 MiB of SRAM (4 KiB chunks, 256 of them, through a window
    // of 64), 16 members; `auto` picks by the profile's costs.
    let mut text = "profile = \"modern\"\nseed = 3\n[fabric]\nnodes = 16\n".to_string();
    for (i, scheme) in ["nic", "host"].into_iter().enumerate() {
        text += &format!(
            "[[flows]]\nname = \"{scheme}\"\nkind = \"allreduce\"\nport = {}\ngroup_size = 16\n\
             scheme = \"{scheme}\"\ndatatype = \"f64\"\nelements = 131072\ncount = 2\n\
             start_us = {}\n",
            i + 1,
            i * 10_000
        );
    }
    let r = run_text(&text);
    assert!(r.complete, "{}", r.summary());
    for f in &r.flows {
        let c = assert_collectives_right(f);
        assert_eq!((c.requested.as_str(), c.algorithm.as_str()), ("auto", "ring"), "{}", f.name);
        assert_eq!(c.results_checked, 32, "{}: every member's result, twice", f.name);
    }
}

#[test]
fn a_pairwise_allreduce_of_many_float_chunks_never_wedges_in_busy_answers() {
    // lanai9-gm, 16 members, 128 KiB of f64 (32 chunks of 4 KiB, each
    // through 4 exchanges): members run ahead of each other by whole
    // exchanges, and the chunks sent ahead fill the slots their peers
    // hold early chunks in. Each member keeps sent slots for its lowest
    // chunk, which its peer always takes at once, so every allreduce
    // ends, right at every member.
    let text = format!(
        "{}[run]\nlimit_ms = 5000\n{}",
        head(16),
        flow("allreduce", "nic", "pairwise", "datatype = \"f64\"\nelements = 16384\n")
    )
    .replace("group_size = 11", "group_size = 16")
    .replace("count = 4", "count = 3");
    let r = run_text(&text);
    assert!(r.complete, "{}", r.summary());
    let c = assert_collectives_right(&r.flows[0]);
    assert_eq!(c.results_checked, 48);
}
