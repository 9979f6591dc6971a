//! NIC resets in scenarios (`[[faults.nic_reset]]`, sim): the NIC's ports
//! close with everything in them, its peers' sends to it fail with
//! TargetPortClosed, flows that do not touch it are untouched.

use nic_scenario::{run, Scenario};

/// Two streams into node 1 (from nodes 0 and 2) and one beside it; NIC 1
/// resets at `at_us`.
fn scenario(profile: &str, at_us: u32) -> String {
    format!(
        "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = 4\n\
         [[flows]]\nname = \"a\"\nkind = \"stream\"\nsrc = [0, 1]\ndst = [1, 1]\nsizes = [3000, 64]\nmessages = 400\n\
         [[flows]]\nname = \"b\"\nkind = \"stream\"\nsrc = [2, 1]\ndst = [1, 2]\nsizes = [9000]\nmessages = 200\n\
         [[flows]]\nname = \"e\"\nkind = \"stream\"\nsrc = [3, 1]\ndst = [2, 3]\nsizes = [1000]\nmessages = 300\n\
         [[faults.nic_reset]]\nnode = 1\nat_us = {at_us}\n"
    )
}

#[test]
fn a_reset_nic_closes_its_ports_and_its_peers_get_target_port_closed() {
    for (profile, at_us) in [("lanai9-gm", 2000), ("modern", 100)] {
        let r = run(&Scenario::parse_validated(&scenario(profile, at_us)).unwrap()).unwrap();
        assert!(r.complete && r.problems.is_empty(), "{profile}: {:?}\n{}", r.problems, r.summary());
        assert!(r.all_delivered_intact(), "{profile}\n{}", r.summary());
        assert_eq!(r.nic_reset.len(), 1);
        assert!(r.nic_reset[0].done && r.nic_reset[0].node == 1, "{:?}", r.nic_reset);
        for f in &r.flows {
            assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{profile} {}", f.name);
            if f.name == "e" {
                // Beside the reset NIC: every message, once.
                assert_eq!((f.delivered, f.send_errors, f.cut_by_reset_us), (300, 0, None));
                continue;
            }
            // Into the reset NIC: what arrived before it, then only
            // TargetPortClosed (a message its NIC took but had not yet
            // handed to the host is lost with it).
            assert_eq!(f.cut_by_reset_us, Some(at_us as f64), "{profile} {}", f.name);
            assert!(f.delivered > 0 && f.delivered < f.messages, "{profile} {}: {f:?}", f.name);
            assert!(f.send_errors > 0 && f.delivered + f.send_errors <= f.messages, "{f:?}");
            assert_eq!(
                f.send_error_statuses.keys().collect::<Vec<_>>(),
                ["TargetPortClosed"],
                "{profile} {}",
                f.name
            );
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
        ("node = 4\nat_us = 10", "faults.nic_reset[0].node: 4 is no node (0..4)"),
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

#[test]
fn real_time_backends_refuse_resets_by_name() {
    let v = Scenario::parse_validated(&scenario("modern", 100)).unwrap();
    for b in [host_driver::cluster::ClusterBackend::Live, host_driver::cluster::ClusterBackend::Qemu]
    {
        let e = nic_scenario::check_realtime(&v, b).unwrap_err().to_string();
        assert!(e.contains("faults.nic_reset") && e.contains("--backend sim"), "{e}");
    }
}
