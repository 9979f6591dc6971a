//! Why packets are sent again: every retransmission is counted under the
//! reason its stream went back (`retransmit_causes`, which add up to
//! `retransmits` on every NIC), and the retransmission timeout follows the
//! measured round trip, so an incast that holds acks in queues does not
//! make senders resend what their receivers already have.

use nic_scenario::{run, Report, Scenario};

fn run_text(text: &str) -> Report {
    let v = Scenario::parse_validated(text).unwrap();
    let r = run(&v).unwrap();
    assert!(r.complete && r.problems.is_empty(), "{:?}\n{}", r.problems, r.summary());
    for f in &r.flows {
        assert_eq!(f.delivered, f.messages, "{}: every message", f.name);
        assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{}", f.name);
    }
    r
}

/// A 16-node all-to-all of `bytes`-byte streams (incast at every node).
fn alltoall(profile: &str, bytes: u32, messages: u32, faults: &str) -> String {
    format!(
        "profile = \"{profile}\"\nseed = 7\n[fabric]\nnodes = 16\n{faults}\n\
         [[alltoall]]\nname = \"a\"\nport = 2\nkind = \"stream\"\nsizes = [{bytes}]\nmessages = {messages}\n"
    )
}

fn causes_add_up(r: &Report) -> (u64, u64) {
    let mut total = (0, 0);
    for n in &r.nics {
        let c = &n.retransmit_causes;
        let sum = c.timeout + c.gap + c.no_buffer + c.refused + c.resync;
        assert_eq!(sum, n.retransmits, "node {}: causes {c:?} against {}", n.node, n.retransmits);
        total.0 += n.retransmits;
        total.1 += n.duplicates;
    }
    total
}

#[test]
fn every_retransmission_has_a_cause_on_a_clean_fabric_and_under_faults() {
    let clean = run_text(&alltoall("lanai4-gm", 4096, 6, ""));
    let (retx, _) = causes_add_up(&clean);
    assert!(retx > 0, "an all-to-all on lanai4-gm resends nothing: the test shows nothing");
    let faulty = run_text(&alltoall(
        "lanai9-gm",
        1500,
        8,
        "[faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002",
    ));
    let (retx, _) = causes_add_up(&faulty);
    assert!(retx > 0);
    let gaps: u64 = faulty.nics.iter().map(|n| n.retransmit_causes.gap).sum();
    assert!(gaps > 0, "drops on the wire are recovered through gap nacks");
}

#[test]
fn under_incast_few_retransmissions_are_timeouts_and_few_packets_arrive_twice() {
    // 16 KiB streams on modern: every node's input is shared by 15
    // senders, and acks wait in the same queues. With a fixed 100 us
    // timeout most resends were blind timeouts of packets that had
    // arrived (about 1,700 duplicates); with the measured round trip the
    // timeouts are a minority of the resends.
    let r = run_text(&alltoall("modern", 16384, 20, ""));
    let (retx, dups) = causes_add_up(&r);
    let timeouts: u64 = r.nics.iter().map(|n| n.retransmit_causes.timeout).sum();
    let sent: u64 = r.nics.iter().map(|n| n.packets_sent).sum();
    assert!(timeouts * 4 < retx, "timeouts {timeouts} of {retx} retransmissions");
    assert!(dups * 40 < sent, "{dups} duplicates of {sent} packets");
}
