//! Whole transfers on the test bench: every size intact and in order, the
//! refusals (no buffer, closed port, bad descriptors), puts and gets, the
//! rotation, piggybacked acks.

use super::*;

#[test]
fn init_refuses_bad_magic_and_config() {
    let mut sram = vec![0u8; SRAM];
    let mut mcp = Box::new(Mcp::new());
    assert_eq!(mcp.init(&mut SliceHw::new(&mut sram)), Err(crate::InitError::BadMagic));
    let st = u32::from_le_bytes(sram[reg(regs::FW_STATUS) as usize..][..4].try_into().unwrap());
    assert_eq!(st, regs::FW_HALTED);
    let mut b = Bench::new(1);
    b.nodes[0].w32(reg(regs::NODE_ID), 5);
    let mut mcp = Box::new(Mcp::new());
    assert_eq!(mcp.init(&mut b.nodes[0].hw()), Err(crate::InitError::BadConfig("NODE_ID")));
    // Token counts the firmware cannot honour are refused, not lowered:
    // the host counts its tokens from the same registers.
    for (r, name, bad) in [
        (regs::SEND_TOKENS, "SEND_TOKENS", [0, regs::PORT_SEND_TOKENS_MAX + 1]),
        (regs::RECV_TOKENS, "RECV_TOKENS", [0, regs::PORT_RECV_TOKENS_MAX + 1]),
        (regs::MTU, "MTU", [regs::MTU_MIN - 1, nic_abi::MAX_MTU as u32 + 1]),
    ] {
        for v in bad {
            let mut b = Bench::new(1);
            b.nodes[0].w32(reg(r), v);
            let mut mcp = Box::new(Mcp::new());
            assert_eq!(mcp.init(&mut b.nodes[0].hw()), Err(crate::InitError::BadConfig(name)));
        }
    }
    let mut b = Bench::new(1);
    b.nodes[0].w32(reg(regs::SEND_TOKENS), regs::PORT_SEND_TOKENS_MAX);
    b.nodes[0].w32(reg(regs::RECV_TOKENS), regs::PORT_RECV_TOKENS_MAX);
    b.nodes[0].w32(reg(regs::MTU), regs::MTU_MIN);
    let mut mcp = Box::new(Mcp::new());
    assert_eq!(mcp.init(&mut b.nodes[0].hw()), Ok(()));
}

#[test]
fn messages_of_every_size_arrive_intact_in_order() {
    let mut b = Bench::new(2);
    transfer(
        &mut b,
        &[0, 1, 4, 16, 17, 100, 4096, 4097, 8192, 65536, 100_000, 1 << 20],
        Priority::Low,
    );
    assert_eq!(b.stat(0, Stat::Retransmits), 0);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 12);
}

#[test]
fn multi_packet_message_is_fragmented_at_the_mtu() {
    let mut b = Bench::new(2);
    transfer(&mut b, &[3 * 4096 + 10], Priority::High);
    let data: Vec<&Header> =
        b.log.iter().filter(|h| h.ptype == nic_abi::packet::PacketType::Data).collect();
    assert_eq!(data.len(), 4);
    assert_eq!(data.iter().map(|h| h.offset).collect::<Vec<_>>(), [0, 4096, 8192, 12288]);
    assert_eq!(data.iter().map(|h| h.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(
        data[0].has(nic_abi::packet::Flags::FIRST) && data[3].has(nic_abi::packet::Flags::LAST)
    );
}

#[test]
fn lost_packets_are_resent_go_back_n() {
    let mut b = Bench::new(2);
    b.faults.drop_every = 7;
    let sizes: Vec<u32> = (0..40).map(|k| 1000 + k * 997).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(0, Stat::Retransmits) > 0);
}

#[test]
fn corrupted_packets_are_caught_by_crc_and_resent() {
    let mut b = Bench::new(2);
    b.faults.corrupt_every = 5;
    let sizes: Vec<u32> = (0..30).map(|k| 500 + k * 1500).collect();
    transfer(&mut b, &sizes, Priority::Low);
    assert!(b.stat(1, Stat::CrcErrors) + b.stat(0, Stat::CrcErrors) > 0);
}

#[test]
fn duplicate_packet_is_acked_and_dropped() {
    let mut b = Bench::new(2);
    b.faults.dup_every = 3;
    let sizes: Vec<u32> = (0..30).map(|k| 100 + k * 800).collect();
    transfer(&mut b, &sizes, Priority::High);
    assert!(b.stat(1, Stat::Duplicates) > 0);
}

#[test]
fn send_without_receive_buffer_times_out_then_resume_lets_traffic_flow() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 64);
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 1));
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 2));
    let mut evs = Vec::new();
    let start = b.rtc;
    assert!(b.run_until(200_000, |b| {
        evs.extend(b.events(0, 1));
        evs.len() == 2
    }));
    let elapsed = b.rtc - start;
    assert_eq!((evs[0].tag, evs[0].status), (1, SendStatus::TimedOut as u8));
    assert_eq!((evs[1].tag, evs[1].status), (2, SendStatus::Dropped as u8));
    assert!(elapsed >= 50_000, "timed out after the send timeout, not before ({elapsed})");
    assert!(elapsed < 60_000, "and not much later ({elapsed})");
    // Suspended: a new send is dropped at once.
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 3));
    b.run(20);
    let e = b.events(0, 1);
    assert_eq!((e[0].tag, e[0].status), (3, SendStatus::Dropped as u8));
    // Resume, give a buffer: traffic flows again.
    b.post(0, 1, Descriptor { kind: DescKind::Resume, ..send(0, 0, 1, 2, Priority::Low, 0) });
    let rv = b.alloc(1, 2, 64);
    b.post(1, 2, provide(rv, 6, Priority::Low, 9));
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 4));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 9));
    b.run(100);
    let e = b.events(0, 1);
    assert_eq!((e[0].tag, e[0].status), (4, SendStatus::Ok as u8));
}

#[test]
fn send_to_closed_port_reports_target_port_closed() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    let v = b.alloc(0, 1, 10);
    b.post(0, 1, send(v, 10, 1, 5, Priority::Low, 7));
    let mut evs = Vec::new();
    assert!(b.run_until(10_000, |b| {
        evs.extend(b.events(0, 1));
        !evs.is_empty()
    }));
    assert_eq!(
        (evs[0].kind, evs[0].status, evs[0].tag),
        (EventKind::Sent, SendStatus::TargetPortClosed as u8, 7)
    );
    // Once open, the same stream works.
    b.open(1, 5);
    let rv = b.alloc(1, 5, 16);
    b.post(1, 5, provide(rv, 4, Priority::Low, 1));
    b.post(0, 1, send(v, 10, 1, 5, Priority::Low, 8));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 5));
        !got.is_empty()
    }));
    assert_eq!(got[0].kind, EventKind::Received);
}

#[test]
fn each_bad_descriptor_gets_its_error_event_and_the_nic_carries_on() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 4096);
    let good = send(v, 100, 1, 2, Priority::Low, 0);
    let gone = b.alloc(0, 1, 4096);
    b.deregister(0, 1, gone, 4096);
    let mut cases: Vec<([u8; 64], ErrorCause)> = Vec::new();
    let enc = |d: Descriptor| {
        let mut x = [0u8; 64];
        d.encode(&mut x);
        x
    };
    let mut raw = enc(good);
    raw[0] = 99;
    cases.push((raw, ErrorCause::BadKind));
    let mut raw = enc(good);
    raw[1] = 7;
    cases.push((raw, ErrorCause::BadPriority));
    let mut raw = enc(good);
    raw[6] = 1;
    cases.push((raw, ErrorCause::BadDescriptor));
    cases.push((enc(Descriptor { target_port: 8, ..good }), ErrorCause::BadPort));
    cases.push((enc(Descriptor { target_node: 2, ..good }), ErrorCause::BadNode));
    cases.push((enc(Descriptor { size_class: 40, ..good }), ErrorCause::BadSizeClass));
    cases.push((enc(Descriptor { size_class: 3, ..good }), ErrorCause::BadLength));
    cases.push((enc(Descriptor { local: v + 1_000_000, ..good }), ErrorCause::NotRegistered));
    cases.push((enc(Descriptor { local: gone, ..good }), ErrorCause::NotRegistered));
    cases.push((enc(Descriptor { local: v + 4000, ..good }), ErrorCause::NotRegistered));
    cases.push((
        enc(Descriptor { len: 8, ..provide(v, 4, Priority::Low, 0) }),
        ErrorCause::BadLength,
    ));
    cases.push((enc(provide(v, 13, Priority::Low, 0)), ErrorCause::NotRegistered));
    for (k, (raw, _)) in cases.iter_mut().enumerate() {
        raw[32..40].copy_from_slice(&(100 + k as u64).to_le_bytes());
        b.post_raw(0, 1, raw);
        b.run(5);
    }
    let evs = b.events(0, 1);
    assert_eq!(evs.len(), cases.len());
    for (k, (e, (_, cause))) in evs.iter().zip(cases.iter()).enumerate() {
        assert_eq!(e.kind, EventKind::Error, "case {k}");
        assert_eq!(e.status, *cause as u8, "case {k}");
        assert_eq!(e.tag, 100 + k as u64, "case {k}");
    }
    assert_eq!(b.stat(0, Stat::Errors), cases.len() as u64);
    // And a good send still goes through.
    let rv = b.alloc(1, 2, 128);
    b.post(1, 2, provide(rv, 7, Priority::Low, 5));
    b.post(0, 1, good);
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].kind, got[0].len), (EventKind::Received, 100));
}

#[test]
fn message_lands_in_buffer_of_its_exact_class_and_priority() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let big = b.alloc(1, 2, 1 << 10);
    let hi = b.alloc(1, 2, 1 << 6);
    let lo = b.alloc(1, 2, 1 << 6);
    b.post(1, 2, provide(big, 10, Priority::Low, 1));
    b.post(1, 2, provide(hi, 6, Priority::High, 2));
    b.post(1, 2, provide(lo, 6, Priority::Low, 3));
    let v = b.alloc(0, 1, 64);
    b.post(0, 1, send(v, 40, 1, 2, Priority::Low, 0));
    let mut got = Vec::new();
    assert!(b.run_until(10_000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    assert_eq!((got[0].tag, got[0].addr), (3, lo));
}

#[test]
fn put_writes_remote_memory_and_get_reads_it() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 10_000u32;
    let src = b.alloc(0, 1, len as u64);
    let dst = b.alloc(1, 2, len as u64);
    b.write_host(0, src, &pattern(3, len as usize));
    let e = b.complete(
        0,
        1,
        Descriptor { kind: DescKind::Put, remote: dst, ..send(src, len, 1, 2, Priority::Low, 11) },
        10_000,
    );
    assert_eq!((e.kind, e.status, e.tag), (EventKind::PutDone, 0, 11));
    assert_eq!(b.read_host(1, dst, len as usize), pattern(3, len as usize));
    assert!(b.events(1, 2).is_empty(), "a put completes at the sender only");
    // Get it back into a fresh buffer.
    let back = b.alloc(0, 1, len as u64);
    let e = b.complete(
        0,
        1,
        Descriptor {
            kind: DescKind::Get,
            remote: dst,
            ..send(back, len, 1, 2, Priority::High, 12)
        },
        10_000,
    );
    assert_eq!((e.kind, e.status, e.tag), (EventKind::GetDone, 0, 12));
    assert_eq!(b.read_host(0, back, len as usize), pattern(3, len as usize));
    // Unregistered remote range: refused with RemoteAccess.
    let e = b.complete(
        0,
        1,
        Descriptor {
            kind: DescKind::Put,
            remote: dst + (1 << 20),
            ..send(src, 8, 1, 2, Priority::Low, 13)
        },
        10_000,
    );
    assert_eq!((e.status, e.tag), (SendStatus::RemoteAccess as u8, 13));
}

#[test]
fn rotation_serves_streams_one_packet_per_turn() {
    // Node 0 sends a long message to node 1 and a long one to node 2: the
    // connection queue alternates their packets.
    let mut b = Bench::new(3);
    b.open(0, 1);
    b.open(1, 1);
    b.open(2, 1);
    let len = 8 * 4096;
    let v = b.alloc(0, 1, len as u64);
    for d in 1..3 {
        let rv = b.alloc(d, 1, len as u64);
        b.post(d, 1, provide(rv, 15, Priority::Low, 0));
    }
    b.post(0, 1, send(v, len, 1, 1, Priority::Low, 1));
    b.post(0, 1, send(v, len, 2, 1, Priority::Low, 2));
    b.run(200);
    let order: Vec<u16> = b
        .log
        .iter()
        .filter(|h| h.ptype == nic_abi::packet::PacketType::Data && h.src_node == 0)
        .map(|h| h.dst_node)
        .collect();
    assert_eq!(order.len(), 16);
    let alternations = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(alternations >= 13, "one packet per turn: {order:?}");
}

#[test]
fn acks_ride_on_reverse_traffic() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    let v0 = b.alloc(0, 1, 64);
    let v1 = b.alloc(1, 1, 64);
    for k in 0..20 {
        let r0 = b.alloc(0, 1, 64);
        let r1 = b.alloc(1, 1, 64);
        b.post(0, 1, provide(r0, 6, Priority::Low, k));
        b.post(1, 1, provide(r1, 6, Priority::Low, k));
    }
    for k in 0..20 {
        b.post(0, 1, send(v0, 64, 1, 1, Priority::Low, k));
        b.post(1, 1, send(v1, 64, 0, 1, Priority::Low, k));
    }
    b.run(3000);
    let piggy = b
        .log
        .iter()
        .filter(|h| {
            h.ptype == nic_abi::packet::PacketType::Data && h.has(nic_abi::packet::Flags::ACK_VALID)
        })
        .count();
    assert!(piggy > 0);
    assert_eq!(b.stat(0, Stat::MessagesSent) + b.stat(1, Stat::MessagesSent), 40);
}

#[test]
fn closing_a_port_drops_its_state_and_the_nic_carries_on() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 1 << 16);
    b.post(0, 1, send(v, 1 << 16, 1, 2, Priority::Low, 1)); // no buffer: retrying
    b.run(50);
    b.close(0, 1);
    b.open(0, 1);
    transfer_again(&mut b);
}

#[test]
fn a_4_mib_put_and_get_check_their_ranges_through_the_cache() {
    // 1,024 pages a side: more than the NIC caches (256 sets x 4 ways).
    // The target checks the whole remote range when the put's first
    // packet arrives, reading page-table lines from host memory; while it
    // waits, the sender is told Busy and comes again, and the check goes
    // on from where it got.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 4u32 << 20;
    let src = b.alloc(0, 1, len as u64);
    let dst = b.alloc(1, 2, len as u64);
    b.write_host(0, src, &pattern(8, len as usize));
    let put =
        Descriptor { kind: DescKind::Put, remote: dst, ..send(src, len, 1, 2, Priority::Low, 21) };
    let e = b.complete(0, 1, put, 400_000);
    assert_eq!((e.kind, e.status, e.tag), (EventKind::PutDone, 0, 21));
    assert_eq!(b.read_host(1, dst, len as usize), pattern(8, len as usize));
    // The range was read in lines of eight entries: once for the check,
    // and at most once more for the placement (the check's later lines
    // pushed the first pages out of the cache).
    let misses = b.stat(1, Stat::TlbMisses);
    assert!((128..=2 * 128 + 8).contains(&misses), "{misses} line reads for 1,024 pages");
    assert!(b.stat(1, Stat::TlbEvictions) > 0);
    // And back, by a get into the first 4 MiB of the sender's memory
    // again (its pattern overwritten first).
    b.write_host(0, src, &vec![0u8; len as usize]);
    let e = b.complete(
        0,
        1,
        Descriptor { kind: DescKind::Get, remote: dst, ..send(src, len, 1, 2, Priority::Low, 22) },
        400_000,
    );
    assert_eq!((e.kind, e.status, e.tag), (EventKind::GetDone, 0, 22));
    assert_eq!(b.read_host(0, src, len as usize), pattern(8, len as usize));
}

/// A send waiting in the ring for a token does not hold up the receive
/// buffers posted behind it. Node 0's port has 2 send tokens; its host
/// posts 3 sends to node 1 (which has no buffer yet: they wait there),
/// then a receive buffer. The third send waits for a token; the buffer
/// behind it is taken past it, so node 1's message to node 0 lands while
/// the sends are still stuck. When node 1 posts its buffers, everything
/// completes, each descriptor once.
#[test]
fn a_receive_buffer_posted_behind_a_waiting_send_is_taken_past_it() {
    let mut b = Bench::with(2, |n| n.w32(reg(regs::SEND_TOKENS), 2));
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 64);
    for tag in 1..=3 {
        b.post(0, 1, send(v, 64, 1, 2, Priority::Low, tag));
    }
    let rv = b.alloc(0, 1, 64);
    b.post(0, 1, provide(rv, 6, Priority::Low, 10));
    b.run(200);
    assert_eq!(b.stat(0, Stat::Errors), 0);
    // Node 1 sends to node 0's buffer: it is there.
    let sv = b.alloc(1, 2, 64);
    b.write_host(1, sv, &pattern(5, 64));
    b.post(1, 2, send(sv, 64, 0, 1, Priority::Low, 20));
    let mut got = Vec::new();
    assert!(b.run_until(5_000, |b| {
        got.extend(b.events(0, 1));
        got.iter().any(|e| e.kind == EventKind::Received)
    }));
    let r = got.iter().find(|e| e.kind == EventKind::Received).unwrap();
    assert_eq!(r.tag, 10);
    assert_eq!(b.read_host(0, rv, 64), pattern(5, 64));
    assert!(got.iter().all(|e| e.kind == EventKind::Received), "no send completed yet: {got:?}");
    // Node 1's buffers come: the three sends complete in order, once each.
    for k in 0..3 {
        let rb = b.alloc(1, 2, 64);
        b.post(1, 2, provide(rb, 6, Priority::Low, 30 + k));
    }
    let mut done = Vec::new();
    assert!(b.run_until(20_000, |b| {
        done.extend(b.events(0, 1).into_iter().map(|e| (e.tag, e.status)));
        done.len() == 3
    }));
    assert_eq!(done, [(1, 0), (2, 0), (3, 0)].map(|(t, _)| (t, SendStatus::Ok as u8)));
    let mut recv = Vec::new();
    b.run(200);
    recv.extend(b.events(1, 2).into_iter().map(|e| (e.kind, e.tag)));
    let r = EventKind::Received;
    assert_eq!(recv, [(EventKind::Sent, 20), (r, 30), (r, 31), (r, 32)]);
    // The ring is consumed past all five descriptors; a new send goes.
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 4));
    b.run(200);
    assert!(b.events(0, 1).is_empty(), "node 1 has no buffer left: it waits");
}

/// Alarms on several ports go off in their own time, each on its port,
/// and a port that closes takes its alarm with it (the ports with an alarm
/// are kept as bits: a pass with none reads no alarm).
#[test]
fn alarms_go_off_on_their_ports_and_a_closed_port_loses_its_own() {
    let alarm = |ticks: u64, tag: u64| Descriptor {
        kind: DescKind::Alarm,
        priority: Priority::Low,
        size_class: 0,
        target_port: 0,
        target_node: 0,
        local: 0,
        len: 0,
        remote: ticks,
        tag,
    };
    let mut b = Bench::new(1);
    for p in [1, 3, 6] {
        b.open(0, p);
    }
    b.post(0, 6, alarm(40, 60));
    b.post(0, 3, alarm(20, 30));
    b.post(0, 1, alarm(60, 10));
    b.run(5);
    // Port 1 closes before its alarm's time.
    b.close(0, 1);
    b.run(25);
    let e3 = b.events(0, 3);
    assert_eq!(e3.iter().map(|e| (e.kind, e.tag)).collect::<Vec<_>>(), [(EventKind::Alarm, 30)]);
    assert!(b.events(0, 6).is_empty(), "port 6's alarm is not due yet");
    b.run(30);
    let e6 = b.events(0, 6);
    assert_eq!(e6.iter().map(|e| (e.kind, e.tag)).collect::<Vec<_>>(), [(EventKind::Alarm, 60)]);
    b.run(100);
    assert!(b.events(0, 3).is_empty() && b.events(0, 6).is_empty());
    // Opened again, port 1 has no alarm left, and a new one goes off.
    b.open(0, 1);
    b.run(100);
    assert!(b.events(0, 1).is_empty(), "the closed port's alarm went with it");
    b.post(0, 1, alarm(5, 11));
    assert!(b
        .await_events(0, 1, 50)
        .is_some_and(|e| e[0].kind == EventKind::Alarm && e[0].tag == 11));
}
