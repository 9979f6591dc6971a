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
