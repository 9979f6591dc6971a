//! Selective repeat in the machines: the same transfers as go-back-N's
//! tests (lost, corrupted, duplicated packets; no receive buffer; a
//! refused message), each message intact, once, in order; and what only
//! selective repeat does: packets past a gap are kept and only what is
//! missing goes again.

use super::*;

fn selective(n: usize) -> Bench {
    Bench::with(n, |node| node.w32(reg(regs::RELIABILITY), regs::RELIABILITY_SELECTIVE))
}

/// The same transfer under each mode with the same faults: the
/// counters of both senders and receivers (retransmits, resent bytes,
/// held packets).
fn both(faults: Faults, sizes: &[u32]) -> [(u64, u64, u64); 2] {
    let run = |mut b: Bench| {
        b.faults = faults;
        transfer(&mut b, sizes, Priority::Low);
        (b.stat(0, Stat::Retransmits), b.stat(0, Stat::RetxBytes), b.stat(1, Stat::Held))
    };
    [run(Bench::new(2)), run(selective(2))]
}

#[test]
fn the_mode_is_read_from_its_register() {
    assert!(!Bench::new(1).nodes[0].mcp.config().selective);
    let b = selective(1);
    assert!(b.nodes[0].mcp.config().selective);
    // Its window fits the bitmaps that track it.
    assert!(b.nodes[0].mcp.config().window <= crate::offload::selective::SR_WINDOW);
}

#[test]
fn lost_packets_are_resent_selectively_and_fewer_go_again() {
    let sizes: Vec<u32> = (0..40).map(|k| 1000 + k * 997).collect();
    let f = Faults { drop_every: 7, ..Faults::default() };
    let [gbn, sr] = both(f, &sizes);
    assert_eq!(gbn.2, 0, "go-back-N holds nothing");
    assert!(sr.2 > 0, "packets past a gap were held");
    assert!(sr.0 > 0, "what was lost went again");
    assert!(sr.0 < gbn.0, "selective resent {} packets, go-back-N {}", sr.0, gbn.0);
    assert!(sr.1 < gbn.1, "selective resent {} bytes, go-back-N {}", sr.1, gbn.1);
}

#[test]
fn corrupted_and_duplicated_packets_are_survived_selectively() {
    let mut b = selective(2);
    b.faults.corrupt_every = 5;
    let sizes: Vec<u32> = (0..30).map(|k| 500 + k * 1500).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(1, Stat::CrcErrors) + b.stat(0, Stat::CrcErrors) > 0);
    let mut b = selective(2);
    b.faults.dup_every = 3;
    let sizes: Vec<u32> = (0..30).map(|k| 100 + k * 800).collect();
    transfer(&mut b, &sizes, Priority::High);
    assert!(b.stat(1, Stat::Duplicates) > 0);
}

#[test]
fn a_gap_is_named_at_once_and_only_its_packet_goes_again() {
    // One 12-packet message; the wire loses its third packet once.
    let mut b = selective(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 12 * 4096;
    let v = b.alloc(0, 1, len as u64);
    b.write_host(0, v, &pattern(3, len));
    let rv = b.alloc(1, 2, 1 << 16);
    b.post(1, 2, provide(rv, 16, Priority::Low, 9));
    b.run(50);
    b.faults.drop_at = b.wire_count + 3;
    b.post(0, 1, send(v, len as u32, 1, 2, Priority::Low, 1));
    let got = b.await_events(1, 2, 20_000).expect("delivered");
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 9));
    assert!(b.read_host(1, got[0].addr, len) == pattern(3, len), "intact");
    assert_eq!(b.stat(0, Stat::Retransmits), 1, "only the lost packet went again");
    assert_eq!(b.stat(0, Stat::RetxGap), 1, "named by a USTAT, not a timeout");
    assert_eq!(b.stat(0, Stat::RetxBytes), 4096);
    assert!(b.stat(1, Stat::UstatsSent) >= 1);
    assert!(b.stat(1, Stat::Held) >= 1);
    assert_eq!(b.stat(1, Stat::Duplicates), 0);
    let sent = b.await_events(0, 1, 20_000).expect("completed");
    assert_eq!((sent[0].kind, sent[0].status), (EventKind::Sent, SendStatus::Ok as u8));
}

#[test]
fn a_lost_ustat_and_lost_resends_are_recovered_by_polls() {
    // Every fourth packet lost, control packets too: USTATs and resends
    // go missing, and the polls' STATs bring what is missing.
    let mut b = selective(2);
    b.faults.drop_every = 4;
    let sizes: Vec<u32> = (0..24).map(|k| 3000 + k * 1200).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(0, Stat::PollsSent) > 0);
    assert!(b.stat(1, Stat::StatsSent) > 0);
    assert!(b.stat(0, Stat::RetxTimeout) > 0, "a STAT's resends count as the timeout's");
}

#[test]
fn a_clean_wire_resends_nothing_and_holds_nothing() {
    let mut b = selective(2);
    let sizes: Vec<u32> = (0..30).map(|k| 1 + k * 2222).collect();
    transfer(&mut b, &sizes, Priority::Low);
    for s in [Stat::Retransmits, Stat::Duplicates, Stat::Held, Stat::UstatsSent] {
        assert_eq!(b.stat(0, s) + b.stat(1, s), 0, "{s:?}");
    }
}

#[test]
fn messages_after_a_gap_take_their_slots_early_in_the_stream_s_order() {
    // Six 2-packet messages; the wire loses the second packet of the
    // first once. The packets of the five after it arrive past the gap:
    // each message's first packet takes its receive slot early (the
    // message before it has its slot), its packets go straight to host
    // memory, and the slots are taken in posting order all the same.
    let mut b = selective(2);
    b.open(0, 1);
    b.open(1, 2);
    let (len, n) = (8192usize, 6u64);
    let class = nic_abi::size_class_for(len as u64);
    let v = b.alloc(0, 1, len as u64 * n);
    for k in 0..n {
        b.write_host(0, v + k * len as u64, &pattern(k + 1, len));
    }
    let rv = b.alloc(1, 2, (1u64 << class) * n);
    for k in 0..n {
        b.post(1, 2, provide(rv + (k << class), class, Priority::Low, 100 + k));
    }
    b.run(50);
    b.faults.drop_at = b.wire_count + 2;
    for k in 0..n {
        b.post(0, 1, send(v + k * len as u64, len as u32, 1, 2, Priority::Low, k));
    }
    let (mut got, mut kept) = (Vec::new(), 0);
    b.run_until(50_000, |b| {
        kept = kept.max(b.nodes[1].mcp.recv.held_buffers());
        got.extend(b.events(1, 2));
        got.len() as u64 >= n
    });
    assert_eq!(kept, 0, "no receive buffer was kept: every packet went to host memory");
    assert_eq!(got.len() as u64, n, "every message delivered");
    for (k, e) in got.iter().enumerate() {
        let k = k as u64;
        assert_eq!((e.kind, e.tag), (EventKind::Received, 100 + k), "in order, in posting order");
        assert_eq!(e.addr, rv + (k << class), "message {k} in the {k}th buffer posted");
        assert!(b.read_host(1, e.addr, len) == pattern(k + 1, len), "message {k} intact");
    }
    assert_eq!(b.stat(0, Stat::Retransmits), 1, "only the lost packet went again");
    assert_eq!(b.stat(1, Stat::Held), 2 * n - 2, "every packet past the gap was kept");
    assert_eq!(b.stat(1, Stat::Drops) + b.stat(1, Stat::Duplicates), 0);
}
