//! A NIC talks to more peers than it has stream records, sending or
//! receiving: it lets idle streams go and makes them again, and every
//! message still arrives exactly once, in order, intact, on a clean
//! fabric and under faults.

use nic_scenario::{run, Scenario};

/// Node 0 streams `messages` messages from each of ports 2, 3 and 4 to the
/// same port of each of nodes 1..nodes, all flows at once (a stream per
/// peer and port: 3 (nodes - 1) of them), on `profile`, with `faults`.
fn fan_out(profile: &str, nodes: u16, messages: u32, faults: &str) -> String {
    let mut s = format!(
        "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = {nodes}\ntopology = \"clos\"\n{faults}\n"
    );
    for d in 1..nodes {
        for p in [2, 3, 4] {
            s += &format!(
                "[[flows]]\nname = \"to{d}.{p}\"\nsrc = [0, {p}]\ndst = [{d}, {p}]\n\
                 kind = \"stream\"\nsizes = [64, 3000]\nmessages = {messages}\nwindow = 1\n"
            );
        }
    }
    s
}

#[test]
fn a_sender_with_more_peers_than_streams_lets_idle_ones_go_and_loses_nothing() {
    let faults = "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002";
    for (profile, faults) in [("modern", ""), ("modern", faults), ("lanai9-gm", faults)] {
        let v = Scenario::parse_validated(&fan_out(profile, 100, 10, faults)).unwrap();
        let r = run(&v).unwrap();
        assert!(r.complete && r.problems.is_empty(), "{profile}: {:?}", r.problems);
        for f in &r.flows {
            assert_eq!(f.delivered, f.messages, "{profile} {}: every message", f.name);
            assert_eq!(
                (f.duplicates, f.corrupted, f.out_of_order),
                (0, 0, 0),
                "{profile} {}",
                f.name
            );
        }
        // 297 streams through 128 records: at least 169 let go. On modern
        // the 96 send tokens of the three ports keep at most 96 busy and
        // the rest idle between messages, so streams are let go and made
        // again for the same peers (the new incarnation's SYNC at a peer
        // that still holds the old one): more evictions than 169.
        let evicted = r.nics[0].streams_evicted;
        assert!(evicted >= 297 - 128, "{profile}: {evicted} streams let go");
        if profile == "modern" {
            assert!(evicted > 2 * (297 - 128), "{profile}: {evicted} streams let go");
        }
        assert_eq!(r.nics[0].errors, 0, "{profile}: no send was refused");
    }
}

/// Each of nodes 1..nodes streams `messages` messages from its ports 2, 3
/// and 4 to the same port of node 0, all at once: node 0 receives on
/// 3 (nodes - 1) streams.
fn fan_in(profile: &str, nodes: u16, messages: u32, faults: &str) -> String {
    let mut s = format!(
        "profile = \"{profile}\"\nseed = 4\n[fabric]\nnodes = {nodes}\ntopology = \"clos\"\n{faults}\n"
    );
    for d in 1..nodes {
        for p in [2, 3, 4] {
            s += &format!(
                "[[flows]]\nname = \"from{d}.{p}\"\nsrc = [{d}, {p}]\ndst = [0, {p}]\n\
                 kind = \"stream\"\nsizes = [64, 3000]\nmessages = {messages}\nwindow = 1\n"
            );
        }
    }
    s
}

#[test]
fn a_receiver_with_more_peers_than_streams_lets_idle_ones_go_and_takes_nothing_twice() {
    // 297 streams into one NIC whose table holds 128: idle ones are let go
    // of, leaving where they stood, and come back there, so a message sent
    // again after a lost ack is still a duplicate (dropped, acked).
    let faults = "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002";
    for (profile, faults) in [("modern", ""), ("modern", faults), ("lanai9-gm", faults)] {
        let v = Scenario::parse_validated(&fan_in(profile, 100, 6, faults)).unwrap();
        let r = run(&v).unwrap();
        assert!(r.complete && r.problems.is_empty(), "{profile}: {:?}", r.problems);
        for f in &r.flows {
            assert_eq!(f.delivered, f.messages, "{profile} {}: every message", f.name);
            assert_eq!(
                (f.duplicates, f.corrupted, f.out_of_order),
                (0, 0, 0),
                "{profile} {}",
                f.name
            );
        }
        let evicted = r.nics[0].streams_evicted;
        assert!(evicted >= 297 - 128, "{profile}: {evicted} streams let go");
    }
}
