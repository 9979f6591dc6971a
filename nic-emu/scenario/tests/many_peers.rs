//! A NIC talks to more peers than it has stream records, sending or
//! receiving: it lets idle streams go and makes them again, and every
//! message still arrives exactly once, in order, intact, on a clean
//! fabric and under faults.

use nic_scenario::{run, Report, Scenario};

const FAULTS: &str = "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002";

/// Streams of `messages` messages between node 0 and each of nodes
/// 1..nodes, from and to each of ports 2, 3 and 4, all flows at once:
/// 3 (nodes - 1) streams at node 0, outgoing (`out`) or incoming.
fn fan(profile: &str, nodes: u16, messages: u32, faults: &str, out: bool) -> String {
    let mut s = format!(
        "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = {nodes}\ntopology = \"clos\"\n{faults}\n"
    );
    for d in 1..nodes {
        for p in [2, 3, 4] {
            let (src, dst) = if out { (0, d) } else { (d, 0) };
            s += &format!(
                "[[flows]]\nname = \"{src}-{dst}.{p}\"\nsrc = [{src}, {p}]\ndst = [{dst}, {p}]\n\
                 kind = \"stream\"\nsizes = [64, 3000]\nmessages = {messages}\nwindow = 1\n"
            );
        }
    }
    s
}

/// Run `text`: every message of every flow exactly once, in order,
/// intact; node 0 let at least the streams beyond its 128 go.
fn run_checked(text: &str, what: &str) -> Report {
    let r = run(&Scenario::parse_validated(text).unwrap()).unwrap();
    assert!(r.complete && r.problems.is_empty(), "{what}: {:?}", r.problems);
    for f in &r.flows {
        assert_eq!(f.delivered, f.messages, "{what} {}: every message", f.name);
        assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{what} {}", f.name);
    }
    let evicted = r.nics[0].streams_evicted;
    assert!(evicted >= 297 - 128, "{what}: {evicted} streams let go");
    r
}

#[test]
fn a_sender_with_more_peers_than_streams_lets_idle_ones_go_and_loses_nothing() {
    for (profile, faults) in [("modern", ""), ("modern", FAULTS), ("lanai9-gm", FAULTS)] {
        let what = format!("{profile} {faults:?}");
        let r = run_checked(&fan(profile, 100, 10, faults, true), &what);
        // On modern the three ports' 192 send tokens want more streams
        // busy than the 128 records: a send to a new peer waits in its
        // ring until a stream goes idle, and streams are let go and made
        // again for the same peers (the new incarnation's SYNC at a peer
        // that still holds the old one): more evictions than making each
        // stream once needs, and no send refused.
        let evicted = r.nics[0].streams_evicted;
        if profile == "modern" {
            assert!(evicted > 2 * (297 - 128), "{what}: {evicted} streams let go");
        }
        assert_eq!(r.nics[0].errors, 0, "{what}: no send was refused");
    }
}

#[test]
fn a_receiver_with_more_peers_than_streams_lets_idle_ones_go_and_takes_nothing_twice() {
    // 297 streams into one NIC whose table holds 128: idle ones are let go
    // of, leaving where they stood, and come back there, so a message sent
    // again after a lost ack is still a duplicate (dropped, acked).
    for (profile, faults) in [("modern", ""), ("modern", FAULTS), ("lanai9-gm", FAULTS)] {
        run_checked(&fan(profile, 100, 6, faults, false), &format!("{profile} {faults:?}"));
    }
}
