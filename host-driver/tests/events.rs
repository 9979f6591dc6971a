//! The event queue: sequence numbers, wrap-around, batched EVQ_CONSUMED,
//! typed events, blocking wait.

mod common;

use std::time::Duration;

use common::*;
use host_driver::nic_abi::event::{self as abi, EventKind};
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::*;

fn setup(cfg: Config) -> (MemBackend, Nic<MemBackend>, FakeNic) {
    let be = backend(cfg);
    let nic = Nic::open(be.clone()).unwrap();
    let fake = FakeNic::new(&be);
    (be, nic, fake)
}

#[test]
fn a_looped_message_arrives_with_typed_fields_and_inline_bytes() {
    let (_be, nic, mut fake) = setup(Config::default());
    let mut rxp = nic.open_port(1, PortOptions::default()).unwrap();
    let mut txp = nic.open_port(0, PortOptions::default()).unwrap();
    let rx = rxp.alloc(1024).unwrap();
    let tx = txp.alloc(1024).unwrap();
    rxp.provide_receive_buffer(&rx, 10, Priority::High, 0xBEEF).unwrap();
    fake.step();
    let msg: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
    txp.write(&tx, 0, &msg).unwrap();
    txp.send(&tx, 0, 600, 10, Priority::High, 2, 1, 0x5E4D).unwrap();
    fake.step();

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
            assert_eq!(inline.as_slice(), &msg[..16]);
        }
        other => panic!("expected Received, got {other:?}"),
    }
    let mut got = vec![0u8; 600];
    rxp.read(&rx, 0, &mut got).unwrap();
    assert_eq!(got, msg);

    assert!(matches!(txp.poll(), Some(Event::PortOpened { .. })));
    assert_eq!(txp.poll(), Some(Event::Sent { tag: 0x5E4D, status: SendStatus::Ok, rtc: 0 }));
    assert_eq!(txp.poll(), None);
}

#[test]
fn put_and_get_move_data_between_registered_regions() {
    let (_be, nic, mut fake) = setup(Config::default());
    let mut a = nic.open_port(0, PortOptions::default()).unwrap();
    let mut b = nic.open_port(1, PortOptions::default()).unwrap();
    let la = a.alloc(8192).unwrap();
    let rb = b.alloc(8192).unwrap();
    a.write(&la, 0, b"put me there").unwrap();
    a.put(&la, 0, 12, 2, 1, rb.vaddr + 4090, Priority::Low, 1).unwrap();
    b.write(&rb, 100, b"get me back").unwrap();
    a.get(&la, 5000, 11, 2, 1, rb.vaddr + 100, Priority::Low, 2).unwrap();
    // Not registered at the target: the NIC says so in the status.
    a.put(&la, 0, 12, 2, 1, rb.vaddr + 8192, Priority::Low, 3).unwrap();
    fake.step();
    let mut evs = Vec::new();
    a.poll_batch(&mut evs, 10);
    assert_eq!(
        &evs[1..],
        [
            Event::PutDone { tag: 1, status: SendStatus::Ok, rtc: 0 },
            Event::GetDone { tag: 2, status: SendStatus::Ok, rtc: 0 },
            Event::PutDone { tag: 3, status: SendStatus::RemoteAccess, rtc: 0 },
        ]
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
    let (be, nic, mut fake) = setup(Config::default());
    let opts = PortOptions { send_tokens: Some(4), recv_tokens: Some(4), ..Default::default() };
    let mut port = nic.open_port(2, opts).unwrap();
    let len = port.event_queue_len();
    assert_eq!(len, 32);
    let buf = port.alloc(64).unwrap();
    fake.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    let mut tag = 0u64;
    let mut seen = Vec::new();
    while tag < 10 * len as u64 {
        while port.send_tokens_free() > 0 {
            port.send(&buf, 0, 8, 3, Priority::Low, 0, 0, tag).unwrap();
            tag += 1;
        }
        fake.step();
        while let Some(e) = port.poll() {
            seen.push(e.tag());
        }
    }
    assert_eq!(seen, (0..tag).collect::<Vec<_>>());
    assert_eq!(port.stats().bad_events, 0);
    // The NIC never found the queue full.
    assert_eq!(fake.queue_full_stalls, 0);
    // EVQ_CONSUMED trails by less than half a queue.
    let consumed = be.u32_at(port_reg(2, pcb::EVQ_CONSUMED));
    assert!(tag as u32 + 1 - consumed < len / 2, "consumed {consumed}, events {}", tag + 1);
}

#[test]
fn evq_consumed_is_written_in_batches_of_half_the_queue() {
    let (be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let len = port.event_queue_len(); // 64
    fake.step();
    for i in 0..(len as u64 / 2 - 1) {
        fake.push_event(0, abi::Event { tag: i, ..abi::Event::empty(EventKind::Alarm) });
    }
    // PortOpened + 31 alarms = 32 = half the queue.
    let mut n = 0;
    while port.poll().is_some() {
        n += 1;
        let reported = be.u32_at(port_reg(0, pcb::EVQ_CONSUMED));
        let want = if n < len / 2 { 0 } else { len / 2 };
        assert_eq!(reported, want, "after {n} events");
    }
    assert_eq!(n, len / 2);
    assert_eq!(port.stats().consumed_writes, 1);
    // Explicit report, only when behind.
    fake.push_event(0, abi::Event::empty(EventKind::Alarm));
    port.poll().unwrap();
    port.report_consumed();
    port.report_consumed();
    assert_eq!(be.u32_at(port_reg(0, pcb::EVQ_CONSUMED)), len / 2 + 1);
    assert_eq!(port.stats().consumed_writes, 2);
}

#[test]
fn the_nic_stalls_on_a_full_queue_and_resumes_after_the_host_reports() {
    let (be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let len = port.event_queue_len();
    fake.step();
    for i in 0..(len as u64 + 10) {
        fake.push_event(0, abi::Event { tag: i, ..abi::Event::empty(EventKind::Alarm) });
    }
    assert!(fake.queue_full_stalls > 0);
    let mut tags = Vec::new();
    for _ in 0..4 {
        while let Some(e) = port.poll() {
            tags.push(e.tag());
        }
        fake.flush_events();
    }
    assert_eq!(tags.len(), len as usize + 11);
    assert_eq!(&tags[1..], (0..len as u64 + 10).collect::<Vec<_>>());
    assert_eq!(be.u32_at(port_reg(0, pcb::EVQ_CONSUMED)), len);
}

#[test]
fn stale_records_in_reused_memory_are_not_taken_for_events() {
    let (be, nic, mut fake) = setup(Config::default());
    let port = nic.open_port(0, PortOptions::default()).unwrap();
    let evq = port.event_queue_bus();
    fake.step();
    for i in 0..20 {
        fake.push_event(0, abi::Event { tag: i, ..abi::Event::empty(EventKind::Alarm) });
    }
    port.close();
    fake.step(); // firmware lets go; memory becomes free
                 // The new port gets the same memory back, full of old records.
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.event_queue_bus(), evq);
    assert_eq!(port.poll(), None);
    fake.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    assert_eq!(port.poll(), None);
    let _ = be;
}

#[test]
fn polls_are_charged_as_found_or_empty() {
    let (be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.poll(), None);
    fake.step();
    fake.push_event(0, abi::Event::empty(EventKind::Alarm));
    assert!(port.poll().is_some());
    assert!(port.poll().is_some());
    assert_eq!(port.poll(), None);
    assert_eq!(be.charged(HostOp::EventFound), 2);
    assert_eq!(be.charged(HostOp::EventEmpty), 2);
    assert_eq!(port.stats().empty_polls, 2);
}

#[test]
fn poll_batch_takes_at_most_max() {
    let (_be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    fake.step();
    for i in 0..5 {
        fake.push_event(0, abi::Event { tag: i, ..abi::Event::empty(EventKind::Alarm) });
    }
    let mut v = Vec::new();
    assert_eq!(port.poll_batch(&mut v, 4), 4);
    assert_eq!(port.poll_batch(&mut v, 4), 2);
    assert_eq!(port.poll_batch(&mut v, 4), 0);
    assert_eq!(v.len(), 6);
}

#[test]
fn undecodable_records_are_skipped_counted_and_still_return_tokens() {
    let (_be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(64).unwrap();
    fake.step();
    fake.hold_completions = true;
    port.send(&buf, 0, 8, 3, Priority::Low, 0, 0, 1).unwrap();
    fake.step();
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    // A Sent record with an unknown status, then garbage, then an alarm.
    let mut rec = [0u8; 64];
    abi::Event { status: 200, ..abi::Event::empty(EventKind::Sent) }.encode(&mut rec);
    fake.push_raw_event(0, rec);
    fake.push_raw_event(0, [0xEE; 64]);
    fake.push_event(0, abi::Event { tag: 5, ..abi::Event::empty(EventKind::Alarm) });
    assert_eq!(port.poll(), Some(Event::Alarm { tag: 5, rtc: 0 }));
    assert_eq!(port.stats().bad_events, 2);
    assert_eq!(port.send_tokens_free(), 6);
}

#[test]
fn wait_in_the_sim_would_block() {
    let (_be, nic, mut fake) = setup(Config::default());
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.wait(Duration::from_secs(1)), Err(DriverError::WouldBlock));
    fake.step();
    assert!(matches!(port.wait(Duration::from_secs(1)), Ok(Event::PortOpened { .. })));
}

#[test]
fn wait_blocks_until_the_nic_writes_or_the_timeout() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    be.0.borrow_mut().blocking = true;
    let fake = FakeNic::shared(&be);
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert!(matches!(port.wait(Duration::from_millis(1)), Ok(Event::PortOpened { .. })));
    port.set_alarm(10, 33).unwrap();
    assert_eq!(port.wait(Duration::from_millis(1)), Ok(Event::Alarm { tag: 33, rtc: 10 }));
    let waits = be.0.borrow().idle_waits;
    assert_eq!(port.wait(Duration::from_micros(10)), Err(DriverError::Timeout));
    assert_eq!(be.0.borrow().idle_waits, waits + 10);
    drop(fake);
}
