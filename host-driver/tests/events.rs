//! The event queue: sequence numbers, wrap-around, batched EVQ_CONSUMED,
//! typed events, blocking wait; the events are the MCP's, on node 2 of a
//! simulated cluster (and a live one where the driver blocks or memory
//! comes back dirty).

mod live_rig;
mod sim_rig;

use std::time::{Duration, Instant};

use host_driver::nic_abi::event::{self as abi, EventKind, EVENT_SIZE};
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

fn setup(cfg: Config) -> (SimBackend, Nic<SimBackend>, Rig) {
    let rig = Rig::new(cfg);
    (rig.backend(), rig.nic(), rig)
}

/// Post Alarm descriptors with a reserved flag set, tagged `tags`: the
/// NIC refuses each with an Error event carrying its tag, and no token
/// is taken (an Alarm takes none). A way to make the NIC write events.
fn refused_alarms<B: NicBackend>(port: &mut Port<B>, tags: std::ops::Range<u64>) {
    for tag in tags {
        let mut raw = [0u8; 64];
        raw[0] = DescKind::Alarm as u8;
        raw[6] = 1; // reserved flags
        raw[32..40].copy_from_slice(&tag.to_le_bytes());
        port.post_raw_bytes(&raw).unwrap();
    }
}

/// (kind, tag, status) of a completion, its `rtc` (the NIC's clock) aside.
fn completion(e: &Event) -> Option<(&'static str, u64, SendStatus)> {
    match *e {
        Event::Sent { tag, status, .. } => Some(("sent", tag, status)),
        Event::PutDone { tag, status, .. } => Some(("put", tag, status)),
        Event::GetDone { tag, status, .. } => Some(("get", tag, status)),
        _ => None,
    }
}

#[test]
fn a_looped_message_arrives_with_typed_fields_and_inline_bytes() {
    let (_be, nic, mut rig) = setup(Config::default());
    let mut rxp = nic.open_port(1, PortOptions::default()).unwrap();
    let mut txp = nic.open_port(0, PortOptions::default()).unwrap();
    let rx = rxp.alloc(1024).unwrap();
    let tx = txp.alloc(1024).unwrap();
    let small = rxp.alloc(16).unwrap();
    rxp.provide_receive_buffer(&rx, 10, Priority::High, 0xBEEF).unwrap();
    rxp.provide_receive_buffer(&small, 4, Priority::High, 0xCAFE).unwrap();
    rig.step();
    let msg: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
    txp.write(&tx, 0, &msg).unwrap();
    txp.send(&tx, 0, 600, 10, Priority::High, 2, 1, 0x5E4D).unwrap();
    txp.send(&tx, 100, 12, 4, Priority::High, 2, 1, 0x5E4E).unwrap();
    rig.step();

    assert!(matches!(rxp.poll(), Some(Event::PortOpened { .. })));
    match rxp.poll() {
        Some(Event::Received {
            node,
            port,
            priority,
            len,
            buffer,
            tag,
            size_class,
            inline,
            ..
        }) => {
            assert_eq!((node, port, priority, len), (2, 0, Priority::High, 600));
            assert_eq!((buffer, tag, size_class), (rx.vaddr, 0xBEEF, 10));
            // Only a small message travels inline in its event.
            assert!(inline.is_empty(), "{inline:?}");
        }
        other => panic!("expected Received, got {other:?}"),
    }
    match rxp.poll() {
        Some(Event::Received { len, buffer, tag, size_class, inline, .. }) => {
            assert_eq!((len, buffer, tag, size_class), (12, small.vaddr, 0xCAFE, 4));
            assert_eq!(inline.as_slice(), &msg[100..112]);
        }
        other => panic!("expected Received, got {other:?}"),
    }
    let mut got = vec![0u8; 600];
    rxp.read(&rx, 0, &mut got).unwrap();
    assert_eq!(got, msg);

    assert!(matches!(txp.poll(), Some(Event::PortOpened { .. })));
    for tag in [0x5E4D, 0x5E4E] {
        let sent = txp.poll().unwrap();
        assert_eq!(completion(&sent), Some(("sent", tag, SendStatus::Ok)), "{sent:?}");
    }
    assert_eq!(txp.poll(), None);
}

#[test]
fn a_zero_length_message_is_delivered_and_completes() {
    let (_be, nic, mut rig) = setup(Config::default());
    let mut rxp = nic.open_port(1, PortOptions::default()).unwrap();
    let mut txp = nic.open_port(0, PortOptions::default()).unwrap();
    let rx = rxp.alloc(16).unwrap();
    let tx = txp.alloc(16).unwrap();
    rxp.provide_receive_buffer(&rx, 0, Priority::Low, 0xE0).unwrap();
    txp.send(&tx, 0, 0, 0, Priority::Low, 2, 1, 0xE1).unwrap();
    rig.step();
    let mut evs = Vec::new();
    rxp.poll_batch(&mut evs, 10);
    match evs.as_slice() {
        [Event::PortOpened { .. }, Event::Received { node: 2, port: 0, len: 0, tag: 0xE0, inline, .. }] =>
        {
            assert!(inline.is_empty())
        }
        other => panic!("{other:?}"),
    }
    evs.clear();
    txp.poll_batch(&mut evs, 10);
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert_eq!(completion(&evs[1]), Some(("sent", 0xE1, SendStatus::Ok)), "{evs:?}");
}

#[test]
fn put_and_get_move_data_between_registered_regions() {
    let (_be, nic, mut rig) = setup(Config::default());
    let mut a = nic.open_port(0, PortOptions::default()).unwrap();
    // The target: port 1 of node 1.
    let bnic = rig.nic_of(1);
    let mut b = bnic.open_port(1, PortOptions::default()).unwrap();
    let la = a.alloc(8192).unwrap();
    let rb = b.alloc(8192).unwrap();
    rig.step();
    a.write(&la, 0, b"put me there").unwrap();
    a.put(&la, 0, 12, 1, 1, rb.vaddr + 4090, Priority::Low, 1).unwrap();
    b.write(&rb, 100, b"get me back").unwrap();
    a.get(&la, 5000, 11, 1, 1, rb.vaddr + 100, Priority::Low, 2).unwrap();
    // Not registered at the target: the NIC says so in the status.
    a.put(&la, 0, 12, 1, 1, rb.vaddr + 8192, Priority::Low, 3).unwrap();
    rig.step();
    let mut evs = Vec::new();
    a.poll_batch(&mut evs, 10);
    // A get completes when its answer comes back, so after the put
    // behind it: in tag order.
    let mut done: Vec<_> = evs[1..].iter().map(completion).collect();
    done.sort_by_key(|c| c.map(|c| c.1));
    assert_eq!(
        done,
        [
            Some(("put", 1, SendStatus::Ok)),
            Some(("get", 2, SendStatus::Ok)),
            Some(("put", 3, SendStatus::RemoteAccess)),
        ],
        "{evs:?}"
    );
    let mut out = [0u8; 12];
    b.read(&rb, 4090, &mut out).unwrap();
    assert_eq!(&out, b"put me there");
    a.read(&la, 5000, &mut out[..11]).unwrap();
    assert_eq!(&out[..11], b"get me back");
    assert_eq!(a.send_tokens_free(), 6);
}

#[test]
fn the_event_queue_wraps_around_many_times_in_order() {
    let (be, nic, mut rig) = setup(Config::default());
    let opts = PortOptions { send_tokens: Some(4), recv_tokens: Some(4), ..Default::default() };
    let mut port = nic.open_port(2, opts).unwrap();
    let len = port.event_queue_len();
    assert_eq!(len, 32);
    let buf = port.alloc(64).unwrap();
    rig.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    let mut tag = 0u64;
    let mut seen = Vec::new();
    while tag < 10 * len as u64 {
        // Sends to port 0 of node 0, which is closed: each completes
        // TargetPortClosed, in order.
        while port.send_tokens_free() > 0 {
            port.send(&buf, 0, 8, 3, Priority::Low, 0, 0, tag).unwrap();
            tag += 1;
        }
        rig.step();
        // The NIC never found the queue full: it wrote every completion.
        let produced = be.sram_load_u32(port_reg(2, pcb::EVQ_PRODUCED));
        let consumed = be.sram_load_u32(port_reg(2, pcb::EVQ_CONSUMED));
        assert!(produced.wrapping_sub(consumed) < len, "{produced} {consumed}");
        assert_eq!(produced as u64, tag + 1);
        while let Some(e) = port.poll() {
            seen.push(e.tag());
        }
    }
    assert_eq!(seen, (0..tag).collect::<Vec<_>>());
    assert_eq!(port.stats().bad_events, 0);
    // EVQ_CONSUMED trails by less than half a queue.
    let consumed = be.sram_load_u32(port_reg(2, pcb::EVQ_CONSUMED));
    assert!(tag as u32 + 1 - consumed < len / 2, "consumed {consumed}, events {}", tag + 1);
}

#[test]
fn evq_consumed_is_written_in_batches_of_half_the_queue() {
    let (be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let len = port.event_queue_len(); // 64
    refused_alarms(&mut port, 0..(len as u64 / 2 - 1));
    rig.step();
    // PortOpened + 31 errors = 32 = half the queue.
    let mut n = 0;
    while port.poll().is_some() {
        n += 1;
        let reported = be.sram_load_u32(port_reg(0, pcb::EVQ_CONSUMED));
        let want = if n < len / 2 { 0 } else { len / 2 };
        assert_eq!(reported, want, "after {n} events");
    }
    assert_eq!(n, len / 2);
    assert_eq!(port.stats().consumed_writes, 1);
    // Explicit report, only when behind.
    port.set_alarm(1, 7).unwrap();
    rig.step();
    port.poll().unwrap();
    port.report_consumed();
    port.report_consumed();
    assert_eq!(be.sram_load_u32(port_reg(0, pcb::EVQ_CONSUMED)), len / 2 + 1);
    assert_eq!(port.stats().consumed_writes, 2);
}

#[test]
fn the_nic_stalls_on_a_full_queue_and_resumes_after_the_host_reports() {
    // A live node: its NIC polls EVQ_CONSUMED all the time, as the
    // hardware does.
    let c = live_rig::cluster("full-queue", 1, live_rig::Regs::default());
    let be = LiveBackend::attach(&live_rig::path_str(&c), 0, 0).unwrap();
    let nic = Nic::open(be.clone()).unwrap();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let len = port.event_queue_len();
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let word = |off| be.sram_load_u32(port_reg(0, off));
    refused_alarms(&mut port, 0..64);
    until("the NIC takes 64 descriptors", &|| word(pcb::SEND_CONS) == 64);
    refused_alarms(&mut port, 64..(len as u64 + 10));
    // The NIC takes every descriptor but writes only what the queue holds.
    until("the NIC takes the rest", &|| word(pcb::SEND_CONS) == len + 10);
    until("the queue fills", &|| word(pcb::EVQ_PRODUCED) == len);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(word(pcb::EVQ_PRODUCED), len);
    let mut tags = Vec::new();
    while let Some(e) = port.poll() {
        tags.push(e.tag());
    }
    assert_eq!(tags.len(), len as usize);
    // The host reported (in batches of half the queue): the NIC goes on.
    until("the NIC writes the rest", &|| word(pcb::EVQ_PRODUCED) == len + 11);
    while let Some(e) = port.poll() {
        tags.push(e.tag());
    }
    assert_eq!(tags.len(), len as usize + 11);
    assert_eq!(&tags[1..], (0..len as u64 + 10).collect::<Vec<_>>());
    assert_eq!(word(pcb::EVQ_CONSUMED), len);
    assert_eq!(port.poll(), None);
}

#[test]
fn a_simulated_nic_stalled_on_a_full_queue_resumes_after_the_host_reports() {
    // In the sim a NIC runs only when something wakes it: the host's
    // report rings no doorbell, so the firmware must look again by itself
    // while the host is behind.
    let (be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(2, PortOptions::default()).unwrap();
    let len = port.event_queue_len();
    rig.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    // In batches the send ring holds.
    let total = len as u64 + 16;
    for first in (0..total).step_by(32) {
        refused_alarms(&mut port, first..(first + 32).min(total));
        for _ in 0..5 {
            rig.step();
        }
    }
    let word = |off| be.sram_load_u32(port_reg(2, off));
    assert_eq!(word(pcb::EVQ_PRODUCED) - word(pcb::EVQ_CONSUMED), len, "the queue is full");
    let mut tags = Vec::new();
    while let Some(e) = port.poll() {
        tags.push(e.tag());
    }
    // Nothing is posted after the report: the NIC must find it itself.
    rig.run_for(10_000_000);
    while let Some(e) = port.poll() {
        tags.push(e.tag());
    }
    assert_eq!(tags, (0..total).collect::<Vec<_>>());
}

#[test]
fn stale_records_in_reused_memory_are_not_taken_for_events() {
    // A live node: its allocator hands memory back as it was left.
    let c = live_rig::cluster("stale-events", 1, live_rig::Regs::default());
    let be = LiveBackend::attach(&live_rig::path_str(&c), 0, 0).unwrap();
    let nic = Nic::open(be.clone()).unwrap();
    let t = Duration::from_secs(10);
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let evq = port.event_queue_bus();
    assert!(matches!(port.wait(t), Ok(Event::PortOpened { .. })));
    refused_alarms(&mut port, 0..20);
    for i in 0..20 {
        assert_eq!(port.wait(t).map(|e| e.tag()), Ok(i));
    }
    port.close();
    // The firmware lets go; the memory becomes free.
    let start = Instant::now();
    while be.sram_load_u32(port_reg(0, pcb::FW_STATE)) != pcb::STATE_CLOSED {
        assert!(start.elapsed() < t, "the firmware did not close the port");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The new port gets the same memory back, full of old records.
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.event_queue_bus(), evq);
    assert!(matches!(port.wait(t), Ok(Event::PortOpened { .. })));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(port.poll(), None);
    assert_eq!(port.stats().bad_events, 0);
}

#[test]
fn polls_are_charged_as_found_or_empty() {
    let (be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let mut charged = Vec::new();
    let mut poll = |port: &mut Port<SimBackend>| {
        let before = be.host_busy_ns();
        let e = port.poll();
        charged.push(be.host_busy_ns() - before);
        e
    };
    assert_eq!(poll(&mut port), None);
    port.set_alarm(1, 5).unwrap();
    rig.step();
    assert!(poll(&mut port).is_some());
    assert!(poll(&mut port).is_some());
    assert_eq!(poll(&mut port), None);
    let (found, empty) = (rig.price(HostOp::EventFound), rig.price(HostOp::EventEmpty));
    assert_ne!(found, empty);
    assert_eq!(charged, [empty, found, found, empty]);
    assert_eq!(port.stats().empty_polls, 2);
}

#[test]
fn poll_batch_takes_at_most_max() {
    let (_be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    refused_alarms(&mut port, 0..5);
    rig.step();
    let mut v = Vec::new();
    assert_eq!(port.poll_batch(&mut v, 4), 4);
    assert_eq!(port.poll_batch(&mut v, 4), 2);
    assert_eq!(port.poll_batch(&mut v, 4), 0);
    assert_eq!(v.len(), 6);
}

#[test]
fn undecodable_records_are_skipped_counted_and_still_return_tokens() {
    let (be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(64).unwrap();
    rig.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    // The NIC writes a Sent record (a send to a closed port), an Error
    // record, then an Alarm, in slots 1, 2 and 3.
    port.send(&buf, 0, 8, 3, Priority::Low, 0, 0, 1).unwrap();
    rig.step();
    refused_alarms(&mut port, 2..3);
    rig.step();
    port.set_alarm(1, 5).unwrap();
    rig.step();
    let slot = |i: u64| port.event_queue_bus() + i * EVENT_SIZE as u64;
    let mut rec = [0u8; 64];
    for (i, kind) in [(1, EventKind::Sent), (2, EventKind::Error), (3, EventKind::Alarm)] {
        be.host_read(slot(i), &mut rec);
        assert_eq!(abi::Event::decode(&rec).map(|e| e.kind), Ok(kind), "slot {i}");
    }
    // Host memory spoils the first two before the host looks: the Sent
    // record gets an unknown status, the Error record garbage (each
    // keeps its sequence number).
    be.host_write(slot(1) + 1, &[200]);
    be.host_write(slot(2), &[0xEE; 60]);
    match port.poll() {
        Some(Event::Alarm { tag: 5, .. }) => {}
        other => panic!("expected the alarm, got {other:?}"),
    }
    assert_eq!(port.stats().bad_events, 2);
    assert_eq!(port.send_tokens_free(), 6);
}

#[test]
fn wait_in_the_sim_would_block() {
    let (_be, nic, mut rig) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.wait(Duration::from_secs(1)), Err(DriverError::WouldBlock));
    rig.step();
    assert!(matches!(port.wait(Duration::from_secs(1)), Ok(Event::PortOpened { .. })));
}

#[test]
fn wait_blocks_until_the_nic_writes_or_the_timeout() {
    let c = live_rig::cluster("wait", 1, live_rig::Regs::default());
    let be = LiveBackend::attach(&live_rig::path_str(&c), 0, 0).unwrap();
    let nic = Nic::open(be).unwrap();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let t = Duration::from_secs(10);
    assert!(matches!(port.wait(t), Ok(Event::PortOpened { .. })));
    let posted = nic.clock();
    port.set_alarm(10, 33).unwrap();
    match port.wait(t) {
        // The event's rtc is the NIC's clock when it went off.
        Ok(Event::Alarm { tag: 33, rtc }) => assert!(rtc >= posted + 10, "{rtc} {posted}"),
        other => panic!("expected the alarm, got {other:?}"),
    }
    let start = Instant::now();
    assert_eq!(port.wait(Duration::from_micros(10)), Err(DriverError::Timeout));
    assert!(start.elapsed() >= Duration::from_micros(10));
}
