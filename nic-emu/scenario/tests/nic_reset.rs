//! NIC resets in scenarios (`[[faults.nic_reset]]`, sim): the NIC's ports
//! close with everything in them, its peers' sends to it fail with
//! TargetPortClosed, flows that do not touch it are untouched.

use nic_scenario::{run, Scenario};

/// Two streams into node 1 (from nodes 0 and 2), one out of it, and two
/// beside it (one from node 2, which also streams into node 1); NIC 1
/// resets at `at_us`.
fn scenario(profile: &str, at_us: u32) -> String {
    format!(
        "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = 4\n\
         [[flows]]\nname = \"a\"\nkind = \"stream\"\nsrc = [0, 1]\ndst = [1, 1]\nsizes = [3000, 64]\nmessages = 400\n\
         [[flows]]\nname = \"b\"\nkind = \"stream\"\nsrc = [2, 1]\ndst = [1, 2]\nsizes = [9000]\nmessages = 200\n\
         [[flows]]\nname = \"c\"\nkind = \"stream\"\nsrc = [1, 3]\ndst = [3, 1]\nsizes = [128]\nmessages = 600\n\
         [[flows]]\nname = \"d\"\nkind = \"stream\"\nsrc = [2, 3]\ndst = [3, 3]\nsizes = [1000]\nmessages = 300\n\
         [[flows]]\nname = \"e\"\nkind = \"stream\"\nsrc = [3, 2]\ndst = [0, 2]\nsizes = [1000]\nmessages = 300\n\
         [[faults.nic_reset]]\nnode = 1\nat_us = {at_us}\n"
    )
}

#[test]
fn a_reset_nic_closes_its_ports_and_its_peers_get_target_port_closed() {
    for (profile, at_us) in [("lanai9-gm", 2000), ("modern", 100)] {
        let r = run(&Scenario::parse_validated(&scenario(profile, at_us)).unwrap()).unwrap();
        assert!(
            r.complete && r.problems.is_empty(),
            "{profile}: {:?}\n{}",
            r.problems,
            r.summary()
        );
        assert!(r.all_delivered_intact(), "{profile}\n{}", r.summary());
        assert_eq!(r.nic_reset.len(), 1);
        assert!(r.nic_reset[0].done && r.nic_reset[0].node == 1, "{:?}", r.nic_reset);
        for f in &r.flows {
            assert_eq!(
                (f.duplicates, f.corrupted, f.out_of_order),
                (0, 0, 0),
                "{profile} {}",
                f.name
            );
            match f.name.as_str() {
                "d" | "e" => {
                    // Beside the reset NIC: every message, once.
                    assert_eq!((f.delivered, f.send_errors, f.cut_by_reset_us), (300, 0, None));
                }
                "c" => {
                    // Out of the reset NIC: what left it before.
                    assert_eq!(f.cut_by_reset_us, Some(at_us as f64), "{profile} c");
                    assert!(f.delivered > 0 && f.delivered < f.messages, "{profile}: {f:?}");
                }
                _ => {
                    // Into the reset NIC: what arrived before it, then
                    // only TargetPortClosed (a message its NIC took but
                    // had not yet handed to the host is lost with it).
                    // Node 2 streams both into it and beside it: its
                    // stream into it starts again with the new boot.
                    assert_eq!(f.cut_by_reset_us, Some(at_us as f64), "{profile} {}", f.name);
                    assert!(f.delivered > 0 && f.delivered < f.messages, "{profile}: {f:?}");
                    assert!(
                        f.send_errors > 0 && f.delivered + f.send_errors <= f.messages,
                        "{f:?}"
                    );
                    assert_eq!(
                        f.send_error_statuses.keys().collect::<Vec<_>>(),
                        ["TargetPortClosed"],
                        "{profile} {}",
                        f.name
                    );
                }
            }
        }
        let json = r.to_json();
        assert!(json.contains("\"nic_reset\"") && json.contains("\"cut_by_reset_us\""), "{json}");
    }
}

#[test]
fn a_reset_after_the_run_ended_is_reported_as_not_reached() {
    let text = scenario("modern", 60_000_000);
    let r = run(&Scenario::parse_validated(&text).unwrap()).unwrap();
    assert!(r.all_delivered_intact(), "{}", r.summary());
    assert!(!r.nic_reset[0].done);
    assert!(r.flows.iter().all(|f| f.cut_by_reset_us.is_none()));
    assert!(r.summary().contains("not reached"), "{}", r.summary());
}

#[test]
fn without_resets_the_report_has_no_reset_fields() {
    let text = scenario("modern", 100);
    let text = &text[..text.find("[[faults.nic_reset]]").unwrap()];
    let json = run(&Scenario::parse_validated(text).unwrap()).unwrap().to_json();
    assert!(!json.contains("nic_reset") && !json.contains("cut_by_reset"), "{json}");
    assert!(!json.contains("send_error_statuses"), "{json}");
}

#[test]
fn bad_resets_are_refused_with_their_key() {
    let base = scenario("modern", 100);
    let base = &base[..base.find("[[faults.nic_reset]]").unwrap()];
    for (tail, want) in [
        ("node = 4\nat_us = 10", "faults.nic_reset[0].node: 4 is no node (nodes 0 to 3)"),
        ("node = 1\nat_us = -1", "faults.nic_reset[0].at_us"),
        ("node = 1\nat_us = nan", "faults.nic_reset[0].at_us"),
        ("node = 1\nat_us = 4e9", "faults.nic_reset[0].at_us"),
        ("node = 1", "at_us"),
        ("node = 1\nat_us = 5\nfor_us = 3", "for_us"),
    ] {
        let text = format!("{base}[[faults.nic_reset]]\n{tail}\n");
        let e = Scenario::parse_validated(&text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "{tail}: {e}");
    }
}

/// The reset catches node 2's stream into node 1 with the first packet of
/// a three-packet message acknowledged by the old NIC: the new boot has
/// none of it, so the stream starts again with that message's first
/// packet (SYNC) and then fails each send with TargetPortClosed. (It once
/// went back below its acknowledged mark and retransmitted without SYNC
/// for good.)
#[test]
fn a_stream_into_a_reset_nic_starts_again_from_a_partly_acknowledged_message() {
    let text = "profile = \"lanai9-gm\"\nseed = 3\n[fabric]\nnodes = 4\n\
        [[flows]]\nname = \"b\"\nkind = \"stream\"\nsrc = [2, 1]\ndst = [1, 2]\nsizes = [9000]\nmessages = 200\n\
        [[flows]]\nname = \"d\"\nkind = \"stream\"\nsrc = [2, 3]\ndst = [3, 3]\nsizes = [1000]\nmessages = 300\n\
        [[faults.nic_reset]]\nnode = 1\nat_us = 2000\n[run]\nlimit_ms = 200\n";
    let r = run(&Scenario::parse_validated(text).unwrap()).unwrap();
    assert!(r.complete && r.all_delivered_intact(), "{}", r.summary());
    let b = &r.flows[0];
    assert_eq!(b.delivered + b.send_errors, b.messages, "{b:?}");
    assert_eq!(b.send_error_statuses.get("TargetPortClosed"), Some(&b.send_errors));
    assert_eq!((r.flows[1].delivered, r.flows[1].send_errors), (300, 0));
}

/// Runs that a NIC reset used to leave stuck until the time limit (or
/// end with false problems): each must end, every flow the reset cut
/// marked so, every other flow checked as usual.
#[test]
fn runs_with_a_reset_anywhere_end_with_only_the_flows_it_cut_short() {
    let cases = [
        // NIC 3 resets while its program is still opening its two ports
        // (its host clock runs ahead of the reset's time): the opens are
        // lost with the reset and no PortOpened ever comes. A ping-pong
        // into it is done at once, before its own port was ready.
        (
            "a reset during the opens",
            r#"profile = "lanai9-gm"
seed = 12211
[fabric]
nodes = 5
topology = "clos"
switch_ports = 4
[[flows]]
name = "p"
src = [1, 4]
dst = [3, 1]
kind = "pingpong"
bytes = 9000
messages = 1
[[flows]]
name = "s"
src = [2, 4]
dst = [3, 3]
kind = "stream"
sizes = [1, 70000]
messages = 23
start_us = 5000
[[flows]]
name = "beside"
src = [0, 1]
dst = [4, 1]
kind = "stream"
bytes = 4096
messages = 20
[faults]
drop = 0.01
[[faults.nic_reset]]
node = 3
at_us = 1
[firmware]
reliability = "selective"
"#,
        ),
        // A member resets before the multicasts start: every multicast
        // fails for it (TargetPortClosed at the root, not a problem),
        // and the other member still takes each one, some after the
        // root's completion said it failed.
        (
            "a member reset before a nic-cached multicast",
            r#"profile = "lanai4-gm"
seed = 4280
[fabric]
nodes = 3
[[flows]]
name = "m"
src = [2, 2]
kind = "multicast"
group_size = 3
scheme = "nic-cached"
algorithm = "separate"
window = 2
bytes = 70000
messages = 22
start_us = 5000
[faults]
drop = 0.01
corrupt = 0.01
[[faults.nic_reset]]
node = 0
at_us = 2000
[firmware]
reliability = "selective"
"#,
        ),
        // Host scheme: the reset member is a relay of the tree, members
        // below it miss what it would have relayed, the others keep
        // taking 1-byte multicasts (too short to carry their index) after
        // the root saw them fail.
        (
            "a relay reset under the host scheme",
            r#"profile = "lanai4-gm"
seed = 29988
[fabric]
nodes = 10
topology = "two-switch"
[[flows]]
name = "beside"
src = [5, 3]
dst = [6, 1]
kind = "stream"
sizes = [1, 4096]
messages = 11
window = 10
start_us = 100
[[flows]]
name = "m"
src = [1, 4]
kind = "multicast"
group_size = 6
scheme = "host"
algorithm = "binomial"
window = 3
bytes = 1
messages = 16
start_us = 5000
[faults]
drop = 0.03
[[faults.nic_reset]]
node = 2
at_us = 2000
"#,
        ),
    ];
    for (what, text) in cases {
        let text = format!("{text}[run]\nlimit_ms = 20000\n");
        let r = run(&Scenario::parse_validated(&text).unwrap()).unwrap();
        assert_eq!(r.sim.stopped, "done", "{what}:\n{}", r.summary());
        assert!(r.complete && r.problems.is_empty(), "{what}: {:?}\n{}", r.problems, r.summary());
        assert!(r.all_delivered_intact(), "{what}:\n{}", r.summary());
        for f in &r.flows {
            assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{what} {}", f.name);
            if f.name == "beside" {
                assert_eq!((f.delivered, f.send_errors, f.cut_by_reset_us), (f.messages, 0, None));
            } else {
                assert!(f.cut_by_reset_us.is_some(), "{what} {}: {f:?}", f.name);
            }
        }
    }
}

#[test]
fn a_relayed_multicast_its_root_cut_short_leaves_the_relays_other_sends_to_that_child_alone() {
    // Node 9 relays NIC-served multicasts of 70,000 bytes from root 8 and
    // streams 1-byte messages to node 0, one of its children, on the same
    // port. Root 8 resets in the middle of a multicast: node 9's record of
    // it runs out of time with its send to node 0 part-way. That send is
    // dropped, and the stream to node 0 starts again with SYNC behind it;
    // node 9's own messages to node 0, queued on that stream, all arrive.
    let text = r#"profile = "modern"
seed = 2873331658
[fabric]
nodes = 10
topology = "two-switch"
[[flows]]
name = "m"
src = [8, 2]
kind = "multicast"
group_size = 6
scheme = "nic"
algorithm = "k-binomial"
window = 1
sizes = [0, 70000]
messages = 2
[[alltoall]]
name = "a"
port = 2
bytes = 1
messages = 7
window = 2
[faults]
drop = 0.03
[[faults.nic_reset]]
node = 1
at_us = 0
[[faults.nic_reset]]
node = 8
at_us = 100
[firmware]
send_timeout_us = 2000000
[run]
limit_ms = 60000
"#;
    let r = run(&Scenario::parse_validated(text).unwrap()).unwrap();
    assert_eq!(r.sim.stopped, "done", "{}", r.summary());
    assert!(r.problems.is_empty(), "{:?}\n{}", r.problems, r.summary());
    assert!(r.all_delivered_intact(), "{}", r.summary());
    let f = r.flows.iter().find(|f| f.name == "a.9-0").unwrap();
    assert_eq!((f.delivered, f.send_errors, f.cut_by_reset_us), (7, 0, None), "{f:?}");
}

#[test]
fn a_relayed_message_that_stops_coming_ends_its_record_before_the_relays_own_multicasts_give_up() {
    // Node 0 relays root 10's NIC-served multicasts (70,000 bytes) to
    // node 1 and multicasts to node 1 itself (separate addressing) on the
    // same port. Root 10 resets 24 us in, with node 0 part-way through
    // its first message: node 0's send of it to node 1 waits for packets
    // that never come, and node 0's own multicasts wait behind it on the
    // stream to node 1. Their deadline (two send timeouts from posting)
    // fell before the relay's record's (two from its first packet), and
    // three of them ended with node 1 not reached. The relay's record now
    // ends a send timeout and a quarter after its last packet came.
    let text = r#"profile = "modern"
seed = 288560444
[fabric]
nodes = 11
topology = "two-switch"
[[flows]]
name = "own"
src = [0, 1]
kind = "multicast"
group_size = 2
scheme = "nic"
algorithm = "separate"
window = 3
bytes = 70000
messages = 5
[[flows]]
name = "relayed"
src = [10, 1]
kind = "multicast"
group_size = 3
scheme = "nic"
algorithm = "k-binomial"
window = 1
bytes = 70000
messages = 2
[[faults.link_down]]
link = "sw0.p31"
at_us = 24
for_us = 1000
[[faults.nic_reset]]
node = 10
at_us = 24
[firmware]
send_timeout_us = 2000000
[run]
limit_ms = 60000
"#;
    for mode in ["go-back-n", "selective"] {
        let text = text.replace("[firmware]\n", &format!("[firmware]\nreliability = \"{mode}\"\n"));
        let r = run(&Scenario::parse_validated(&text).unwrap()).unwrap();
        assert_eq!(r.sim.stopped, "done", "{mode}: {}", r.summary());
        assert!(r.problems.is_empty(), "{mode}: {:?}\n{}", r.problems, r.summary());
        assert!(r.all_delivered_intact(), "{mode}: {}", r.summary());
        let own = r.flows.iter().find(|f| f.name == "own").unwrap();
        assert_eq!((own.delivered, own.send_errors, own.cut_by_reset_us), (5, 0, None), "{own:?}");
        // Held up for a send timeout and a quarter (2.5 s), not more.
        let end_ms = r.sim.end_ns as f64 / 1e6;
        eprintln!("{mode}: ends at {end_ms:.1} ms");
        assert!((2500.0..2600.0).contains(&end_ms), "{mode}: {}", r.summary());
    }
}

/// An 8-member NIC-served binomial multicast whose relay (node 2, under
/// the root) is reset after taking the first message, on lanai4-gm (a
/// one-minute send timeout); `extra` is appended.
fn relay_reset(scheme: &str, extra: &str) -> String {
    format!(
        "profile = \"lanai4-gm\"\nseed = 29\n[fabric]\nnodes = 8\n\
         [[flows]]\nname = \"m\"\nsrc = [0, 2]\nkind = \"multicast\"\ngroup_size = 8\n\
         scheme = \"{scheme}\"\nalgorithm = \"binomial\"\nsizes = [64, 9000]\nmessages = 40\n\
         [[faults.nic_reset]]\nnode = 2\nat_us = 500\n{extra}"
    )
}

#[test]
fn a_run_a_relay_reset_keeps_past_its_limit_says_which_limit_would_do_and_that_one_does() {
    let send_timeout_ns = 60_000_000_000;
    for scheme in ["nic", "nic-cached"] {
        let sc = Scenario::parse_validated(&relay_reset(scheme, "")).unwrap();
        let r = run(&sc).unwrap();
        assert!(!r.complete && r.sim.stopped == "time-limit", "{scheme}\n{}", r.summary());
        let hints = r.limit_hints(send_timeout_ns, sc.limit_ns);
        assert_eq!(hints.len(), 1, "{scheme}: {hints:?}");
        // Binomial over 8: four levels below the root (its subtree of 8
        // counts itself), and one more.
        assert!(hints[0].contains("up to 300.000 s after the reset"), "{}", hints[0]);
        let ms: u64 = hints[0]
            .split("limit_ms = ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no limit in {}", hints[0]));
        assert_eq!(ms, 360_001);
        // With the limit it names the run ends by itself: the flow the
        // reset cut, every other check as usual, and no advice.
        let sc =
            Scenario::parse_validated(&relay_reset(scheme, &format!("[run]\nlimit_ms = {ms}\n")))
                .unwrap();
        let r = run(&sc).unwrap();
        assert!(r.complete && r.sim.stopped == "done", "{scheme}\n{}", r.summary());
        assert!(r.all_delivered_intact(), "{scheme}\n{}", r.summary());
        assert!(r.flows[0].cut_by_reset_us.is_some());
        assert!(r.limit_hints(send_timeout_ns, sc.limit_ns).is_empty());
    }
    // A run that ends in time, or host-served multicast, has no advice.
    let sc = Scenario::parse_validated(&relay_reset("host", "")).unwrap();
    let r = run(&sc).unwrap();
    assert!(r.limit_hints(send_timeout_ns, sc.limit_ns).is_empty(), "{}", r.summary());
}
