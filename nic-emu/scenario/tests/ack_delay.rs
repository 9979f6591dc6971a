//! `[firmware] ack_delay_us`: how long a receiver holds an owed ack for
//! data to carry it before it sends the ack alone, overriding the
//! profile's. A ping-pong whose replies come within the delay sends no
//! ack alone; with no delay, every message draws one.

use nic_scenario::{run, Report, Scenario};

/// An 8 B ping-pong of 200 round trips between two nodes, with
/// `firmware` as the scenario's `[firmware]` table.
fn pingpong(firmware: &str) -> Report {
    let text = format!(
        "profile = \"lanai9-gm\"\nseed = 1\n[fabric]\nnodes = 2\n\
         [[flows]]\nname = \"p\"\nsrc = [0, 1]\ndst = [1, 1]\nkind = \"pingpong\"\n\
         bytes = 8\nmessages = 200\n{firmware}"
    );
    let v = Scenario::parse_validated(&text).unwrap_or_else(|e| panic!("{e}"));
    let r = run(&v).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.all_delivered_intact(), "{}", r.summary());
    r
}

/// Acks sent alone, over both NICs.
fn lone_acks(r: &Report) -> u64 {
    r.nics.iter().map(|n| n.acks_sent).sum()
}

#[test]
fn replies_carry_the_acks_within_the_delay_and_none_does_without_one() {
    // 400 one-way messages. With the acks sent at once, each draws one
    // of its own (the last reply's may still be owed when the run ends).
    let at_once = lone_acks(&pingpong("[firmware]\nack_delay_us = 0\n"));
    assert!((399..=400).contains(&at_once), "{at_once} acks alone");
    // Held for a ms, far longer than the simulated hosts take to reply:
    // every reply carries its ack; only the last message's is sent alone.
    let held = lone_acks(&pingpong("[firmware]\nack_delay_us = 1000\n"));
    assert!(held <= 1, "{held} acks alone");
    // The profile's own delay, given explicitly, is its default.
    let default = pingpong("");
    let given = pingpong("[firmware]\nack_delay_us = 10\n");
    assert_eq!(given.deterministic_json(), default.deterministic_json());
}
