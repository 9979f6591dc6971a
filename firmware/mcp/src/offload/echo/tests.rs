//! The echo offload on the MCP's test bench: a ping answered by the peer's
//! NIC alone, the round trip in the event, a lost answer reported as
//! unreachable, a bad target refused.

use crate::tests::Bench;
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::{ErrorCause, EventKind, SendStatus};
use nic_abi::packet::PacketType;
use nic_abi::stats::Stat;

fn echo(node: u16, tag: u64) -> Descriptor {
    Descriptor::echo(node, tag)
}

#[test]
fn a_ping_is_answered_by_the_peer_nic_and_reported_once_with_its_round_trip() {
    let mut b = Bench::new(2);
    b.open(0, 3);
    let e = b.complete(0, 3, echo(1, 77), 50);
    assert_eq!(e.kind, EventKind::Echo);
    assert_eq!((e.status, e.node, e.tag), (SendStatus::Ok as u8, 1, 77));
    // Request out at one round, answered by node 1 at its poll, the reply
    // seen at node 0's next: a few bench rounds (one RTC tick each).
    assert!(e.addr >= 1 && e.addr <= 4, "round trip {} ticks", e.addr);
    let types: Vec<_> = b.log.iter().map(|h| h.ptype).collect();
    assert_eq!(types, [PacketType::EchoRequest, PacketType::EchoReply]);
    // Node 1's host heard nothing (no port open there, no event), and
    // nothing more comes at node 0.
    b.run(20);
    assert!(b.events(0, 3).is_empty());
    assert_eq!(b.stat(1, Stat::PacketsReceived), 1);
}

#[test]
fn a_ping_whose_answer_is_lost_is_reported_unreachable_after_the_send_timeout() {
    let mut b = Bench::new(2);
    b.faults.drop_at = 2; // the reply
    b.open(0, 1);
    b.post(0, 1, echo(1, 5));
    let evs = b.await_events(0, 1, 60_000).expect("an event");
    assert_eq!(evs.len(), 1);
    let e = evs[0];
    assert_eq!(
        (e.kind, e.status, e.tag, e.addr),
        (EventKind::Echo, SendStatus::Unreachable as u8, 5, 0)
    );
    // Not before the send timeout (50,000 ticks on the bench).
    assert!(e.rtc >= 50_000, "reported at {}", e.rtc);
}

#[test]
fn a_ping_of_this_node_or_past_the_fabric_is_refused_as_a_bad_node() {
    let mut b = Bench::new(2);
    b.open(0, 2);
    for node in [0, 2, 999] {
        let e = b.complete(0, 2, echo(node, node as u64), 50);
        assert_eq!((e.kind, e.status), (EventKind::Error, ErrorCause::BadNode as u8), "{node}");
        assert_eq!(e.desc_kind, DescKind::Echo as u8);
    }
    assert!(b.log.is_empty(), "nothing went on the wire");
}

#[test]
fn many_pings_in_flight_each_come_back_once() {
    let mut b = Bench::new(3);
    b.open(0, 0);
    for t in 0..40u64 {
        b.post(0, 0, echo(1 + (t % 2) as u16, t));
    }
    let mut got = Vec::new();
    assert!(b.run_until(2_000, |b| {
        got.extend(b.events(0, 0));
        got.len() >= 40
    }));
    got.sort_by_key(|e| e.tag);
    for (t, e) in got.iter().enumerate() {
        assert_eq!((e.kind, e.status, e.tag), (EventKind::Echo, 0, t as u64));
        assert_eq!(e.node, 1 + (t % 2) as u16);
    }
}
