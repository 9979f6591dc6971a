//! Cable outages (`[[faults.link_down]]`) on the simulator: a cable that
//! loses everything for 5 ms and comes back costs retransmissions, never a
//! message; names that match no cable are refused with the key. (Live and
//! qemu: tests/tests/link_down.rs.)

use nic_scenario::{run, Scenario};

/// Three streams through node 1's cable (two into it, one out of it) and
/// one beside it; the cable `link` is down for 5 ms from `at_us`.
fn scenario(link: &str, profile: &str, at_us: u32) -> String {
    format!(
        "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = 4\n\
         [[flows]]\nname = \"a\"\nkind = \"stream\"\nsrc = [0, 1]\ndst = [1, 1]\nsizes = [3000, 64]\nmessages = 400\n\
         [[flows]]\nname = \"b\"\nkind = \"stream\"\nsrc = [2, 1]\ndst = [1, 2]\nsizes = [9000]\nmessages = 200\n\
         [[flows]]\nname = \"c\"\nkind = \"stream\"\nsrc = [1, 3]\ndst = [3, 1]\nsizes = [128]\nmessages = 600\n\
         [[flows]]\nname = \"d\"\nkind = \"stream\"\nsrc = [2, 3]\ndst = [3, 3]\nsizes = [1000]\nmessages = 300\n\
         [[faults.link_down]]\nlink = \"{link}\"\nat_us = {at_us}\nfor_us = 5000\n"
    )
}

#[test]
fn a_cable_down_for_5_ms_loses_packets_but_no_message() {
    for (profile, link, at_us) in
        [("lanai9-gm", "node1", 2000), ("modern", "node1", 100), ("lanai9-gm", "sw0.p1", 2000)]
    {
        let text = scenario(link, profile, at_us);
        let v = Scenario::parse_validated(&text).unwrap();
        let r = run(&v).unwrap();
        let what = format!("{profile} {link}");
        assert!(r.complete && r.problems.is_empty(), "{what}: {:?}\n{}", r.problems, r.summary());
        for f in &r.flows {
            assert_eq!(f.delivered, f.messages, "{what} {}: every message", f.name);
            assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{what} {}", f.name);
        }
        assert_eq!(r.link_down.len(), 1);
        let d = &r.link_down[0];
        assert_eq!((d.link.as_str(), d.at_us, d.for_us), (link, at_us as f64, 5000.0));
        assert!(d.dropped > 0, "{what}: the outage lost nothing: {d:?}");
        // The run outlasted the outage: the flows through the cable
        // finished after it came back.
        let back_ns = (at_us as u64 + 5000) * 1000;
        assert!(r.sim.end_ns > back_ns, "{what}: ended at {} ns", r.sim.end_ns);
        let json = r.to_json();
        assert!(json.contains("\"link_down\"") && json.contains("\"dropped\""), "{json}");
    }
}

#[test]
fn without_outages_the_report_has_no_link_down_field() {
    let text = scenario("node1", "lanai9-gm", 2000);
    let text = &text[..text.find("[[faults.link_down]]").unwrap()];
    let r = run(&Scenario::parse_validated(text).unwrap()).unwrap();
    assert!(r.link_down.is_empty() && !r.to_json().contains("link_down"));
}

#[test]
fn bad_outages_are_refused_with_their_key() {
    let run_err = |text: &str| match Scenario::parse_validated(text) {
        Err(e) => e.to_string(),
        Ok(v) => run(&v).err().map(|e| e.to_string()).unwrap_or_default(),
    };
    let base = scenario("node1", "lanai9-gm", 2000);
    for (from, to, want) in [
        ("link = \"node1\"", "link = \"node9\"", "faults.link_down[0].link: no cable `node9`"),
        ("link = \"node1\"", "link = \"eth0\"", "faults.link_down[0].link: no cable `eth0`"),
        ("link = \"node1\"", "link = \"\"", "faults.link_down[0].link: must name a cable"),
        ("for_us = 5000", "for_us = 0", "faults.link_down[0].for_us: 0 out of range (0.001..="),
        ("at_us = 2000", "at_us = -1", "faults.link_down[0].at_us: -1 out of range"),
        ("at_us = 2000", "at_us = 1e300", "faults.link_down[0].at_us: 1e300 out of range"),
        ("for_us = 5000", "for_us = 5000\nwhen = 3", "when"),
    ] {
        let e = run_err(&base.replace(from, to));
        assert!(e.contains(want), "{to}: {e}");
    }
}

#[test]
fn under_selective_repeat_a_node_back_from_an_outage_is_not_flooded_by_retries() {
    // Node 12's cable is down for the first 30 ms of an all-to-all of
    // 4 KiB messages on lanai4-gm (its memory bus barely outpaces its
    // link), beside two small multicasts on the same port. Back, node 12
    // had no buffers for the 14 streams whose messages had waited: each
    // sender tried its refused packet again every retry time (200 us)
    // without backing off, which kept node 12's link full of packets it
    // took in and refused (77,560 of them), its host-DMA waited behind
    // them, its host saw nothing for 2 s, and 12 senders timed out.
    // Refusals now back the retries off as go-back-N's do.
    let text = r#"profile = "lanai4-gm"
[fabric]
nodes = 15
topology = "two-switch"
[[flows]]
name = "f0"
src = [14, 4]
kind = "multicast"
group_size = 5
scheme = "nic"
algorithm = "binary"
window = 3
sizes = [64, 1]
messages = 5
[[flows]]
name = "f1"
src = [9, 2]
kind = "multicast"
group_size = 12
scheme = "host"
algorithm = "binomial"
window = 2
sizes = [8, 1]
messages = 2
[[flows]]
name = "f2"
src = [0, 1]
kind = "stream"
dst = [1, 1]
window = 1
priority = "low"
bytes = 0
messages = 1
[[alltoall]]
name = "a"
port = 2
bytes = 4096
messages = 8
window = 2
[[faults.link_down]]
link = "node12"
at_us = 0
for_us = 30000
[firmware]
reliability = "selective"
send_timeout_us = 2000000
[run]
limit_ms = 60000
"#;
    let r = run(&Scenario::parse_validated(text).unwrap()).unwrap();
    assert_eq!(r.sim.stopped, "done", "{}", r.summary());
    assert!(r.problems.is_empty(), "{:?}\n{}", r.problems, r.summary());
    assert!(r.all_delivered_intact(), "{}", r.summary());
    let refused = r.nics[12].no_buffer;
    assert!(refused < 1_000, "node 12 refused {refused} packets\n{}", r.summary());
}
