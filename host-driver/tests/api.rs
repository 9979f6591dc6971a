//! The everyday calls (`send_to`, `provide`, `put_to`, `get_from`,
//! `recv`, `read_message`) on node 2 of a simulated cluster: size classes
//! derived or checked before anything is posted, and `recv` giving the
//! program its events only (no PortOpened, no completion it did not ask
//! for, every failure).

mod sim_rig;

use std::time::Duration;

use host_driver::nic_abi::event::ErrorCause;
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

/// Two ports of node 2 (the rig's node under test): a receiver on port 1
/// and a sender on port 0, their PortOpened events written.
fn two_ports() -> (Rig, Port<SimBackend>, Port<SimBackend>) {
    let mut rig = Rig::new(Config::default());
    let nic = rig.nic();
    let rx = nic.open_port(1, PortOptions::default()).unwrap();
    let tx = nic.open_port(0, PortOptions::default()).unwrap();
    rig.step();
    (rig, rx, tx)
}

const RX: Dest = Dest { node: 2, port: 1 };

#[test]
fn recv_skips_port_opened_and_the_completion_nobody_asked_for() {
    let (mut rig, mut rx, mut tx) = two_ports();
    let inbox = rx.alloc(128).unwrap();
    rx.provide(&inbox, RecvOpts { tag: 0xB0, ..RecvOpts::default() }).unwrap();
    let msg: Vec<u8> = (0..100u8).collect();
    let out = tx.alloc_from(&msg).unwrap();
    tx.send_to(&out, RX, SendOpts { tag: 0x51, ..SendOpts::default() }).unwrap();
    rig.step();

    // The receiver's queue holds PortOpened, then the message: recv gives
    // the message.
    let e = rx.recv().unwrap();
    match e {
        Event::Received { node, port, len, buffer, tag, size_class, .. } => {
            assert_eq!((node, port, len), (2, 0, 100));
            assert_eq!((buffer, tag, size_class), (inbox.vaddr, 0xB0, 7));
        }
        other => panic!("expected Received, got {other:?}"),
    }
    assert_eq!(rx.stats().events, 2, "PortOpened and Received consumed");
    assert_eq!(rx.read_message(&e).unwrap(), msg);
    // The sender's queue holds PortOpened and the Sent nobody asked for:
    // nothing for the program, and the send token is back.
    assert_eq!(tx.try_recv(), None);
    assert_eq!(tx.stats().events, 2);
    assert_eq!(tx.send_tokens_free(), tx.send_tokens());
    // The sim cannot block: an empty queue is WouldBlock at once.
    assert_eq!(tx.recv(), Err(DriverError::WouldBlock));
    assert_eq!(rx.recv(), Err(DriverError::WouldBlock));
}

#[test]
fn a_send_that_asks_for_its_completion_gets_it() {
    let (mut rig, mut rx, mut tx) = two_ports();
    let inbox = rx.alloc(64).unwrap();
    rx.provide(&inbox, RecvOpts::default()).unwrap();
    let out = tx.alloc_from(&[9u8; 40]).unwrap();
    // Same tag as a quiet send's before it: one completion is reported.
    tx.send_to(&out, RX, SendOpts { tag: 5, ..SendOpts::default() }).unwrap();
    rig.step();
    assert!(matches!(rx.recv(), Ok(Event::Received { len: 40, .. })));
    rx.provide(&inbox, RecvOpts::default()).unwrap();
    tx.send_to(&out, RX, SendOpts { tag: 5, notify: true, ..SendOpts::default() }).unwrap();
    rig.step();
    match tx.recv() {
        Ok(Event::Sent { tag, status, .. }) => assert_eq!((tag, status), (5, SendStatus::Ok)),
        other => panic!("expected Sent, got {other:?}"),
    }
    assert_eq!(tx.try_recv(), None);
    // read_message wants a received message.
    let sent = Event::Sent { tag: 5, status: SendStatus::Ok, mcast: None, rtc: 1 };
    assert_eq!(rx.read_message(&sent), Err(DriverError::NotAMessage(Box::new(sent))));
}

#[test]
fn after_no_send_token_recv_returns_the_completion_that_frees_one() {
    let mut rig = Rig::new(Config::default());
    let nic = rig.nic();
    let mut rx = nic.open_port(1, PortOptions::default()).unwrap();
    let opts = PortOptions { send_tokens: Some(2), ..PortOptions::default() };
    let mut tx = nic.open_port(0, opts).unwrap();
    rig.step();
    for tag in 0..4 {
        let b = rx.alloc(64).unwrap();
        rx.provide(&b, RecvOpts { tag, ..RecvOpts::default() }).unwrap();
    }
    rig.step();
    let out = tx.alloc_from(&[5u8; 40]).unwrap();
    let quiet = |tag| SendOpts { tag, ..SendOpts::default() };
    tx.send_to(&out, RX, quiet(1)).unwrap();
    tx.send_to(&out, RX, quiet(2)).unwrap();
    assert_eq!((tx.send_tokens_free(), tx.sends_in_flight()), (0, 2));
    assert_eq!(tx.send_to(&out, RX, quiet(3)), Err(DriverError::NoSendToken));
    // Nothing has completed yet.
    assert_eq!(tx.recv(), Err(DriverError::WouldBlock));
    rig.step();
    // Both sends completed. The program waits for a token: the first
    // completion, not asked for, ends the wait ...
    match tx.recv() {
        Ok(Event::Sent { tag, status, .. }) => assert_eq!((tag, status), (1, SendStatus::Ok)),
        other => panic!("expected the completion of send 1, got {other:?}"),
    }
    assert_eq!(tx.send_tokens_free(), 1);
    // ... and only it: the second is quiet again (its token comes back
    // all the same).
    assert_eq!(tx.try_recv(), None);
    assert_eq!((tx.send_tokens_free(), tx.sends_in_flight()), (2, 0));
    tx.send_to(&out, RX, quiet(3)).unwrap();
    rig.step();
    assert_eq!(tx.try_recv(), None, "a quiet send with tokens to spare reports nothing");
    // `send_room` refusing a token is a wait for one too.
    tx.send_to(&out, RX, quiet(4)).unwrap();
    assert_eq!(tx.send_room(), Ok(()));
    let more = rx.alloc(64).unwrap();
    rx.provide(&more, RecvOpts { tag: 9, ..RecvOpts::default() }).unwrap();
    tx.send_to(&out, RX, quiet(5)).unwrap();
    assert_eq!(tx.send_room(), Err(DriverError::NoSendToken));
    rig.step();
    assert!(matches!(tx.recv(), Ok(Event::Sent { tag: 4, status: SendStatus::Ok, .. })));
    // The receiver got all five, in order, each once.
    let tags: Vec<u64> = std::iter::from_fn(|| rx.try_recv())
        .map(|e| match e {
            Event::Received { tag, len: 40, .. } => tag,
            other => panic!("expected a message, got {other:?}"),
        })
        .collect();
    assert_eq!(tags, [0, 1, 2, 3, 9]);
}

#[test]
fn recv_any_gives_the_next_event_of_any_port_and_says_which() {
    let mut rig = Rig::new(Config::default());
    let nic = rig.nic();
    let mut a = nic.open_port(1, PortOptions::default()).unwrap();
    let mut b = nic.open_port(3, PortOptions::default()).unwrap();
    let mut tx = nic.open_port(0, PortOptions::default()).unwrap();
    rig.step();
    for p in [&mut a, &mut b] {
        let inbox = p.alloc(64).unwrap();
        p.provide(&inbox, RecvOpts { tag: p.number() as u64, ..RecvOpts::default() }).unwrap();
    }
    rig.step();
    // Nothing for the program yet (PortOpened is not for it): the sim
    // cannot block.
    let wait = Duration::from_secs(1);
    assert_eq!(Port::recv_any(&mut [&mut a, &mut b], wait), Err(DriverError::WouldBlock));
    let out = tx.alloc_from(&[4u8; 40]).unwrap();
    tx.send_to(&out, Dest::new(2, 3), SendOpts { tag: 1, notify: true, ..SendOpts::default() })
        .unwrap();
    rig.step();
    // The message is at the second port, the completion at the third.
    match Port::recv_any(&mut [&mut a, &mut b, &mut tx], wait) {
        Ok((1, Event::Received { tag: 3, len: 40, .. })) => {}
        other => panic!("expected port 3's message, got {other:?}"),
    }
    match Port::recv_any(&mut [&mut a, &mut b, &mut tx], wait) {
        Ok((2, Event::Sent { tag: 1, status: SendStatus::Ok, .. })) => {}
        other => panic!("expected the send's completion, got {other:?}"),
    }
    tx.send_to(&out, Dest::new(2, 1), SendOpts::default()).unwrap();
    rig.step();
    match Port::recv_any(&mut [&mut tx, &mut b, &mut a], wait) {
        Ok((2, Event::Received { tag: 1, .. })) => {}
        other => panic!("expected port 1's message, got {other:?}"),
    }
    assert_eq!(Port::recv_any(&mut [&mut a, &mut b, &mut tx], wait), Err(DriverError::WouldBlock));
    // No port: nothing can come.
    assert_eq!(Port::<SimBackend>::recv_any(&mut [], wait), Err(DriverError::Timeout));
}

#[test]
fn a_failed_quiet_send_is_always_reported() {
    let (mut rig, _rx, mut tx) = two_ports();
    let out = tx.alloc_from(b"nobody home").unwrap();
    // Port 5 of node 2 is closed: the send completes TargetPortClosed.
    tx.send_to(&out, Dest::new(2, 5), SendOpts { tag: 0xC1, ..SendOpts::default() }).unwrap();
    // Node 40 does not exist: the NIC refuses the descriptor.
    tx.send_to(&out, Dest::new(40, 0), SendOpts { tag: 0xC2, ..SendOpts::default() }).unwrap();
    for _ in 0..50 {
        rig.step();
    }
    let mut got = Vec::new();
    while let Some(e) = tx.try_recv() {
        got.push(e);
    }
    let refused = got.iter().find_map(|e| match *e {
        Event::Error { cause, tag: 0xC2, desc_kind, .. } => Some((cause, desc_kind)),
        _ => None,
    });
    assert_eq!(refused, Some((ErrorCause::BadNode, Some(DescKind::Send))), "{got:?}");
    let closed = got.iter().find_map(|e| match *e {
        Event::Sent { tag: 0xC1, status, .. } => Some(status),
        _ => None,
    });
    assert_eq!(closed, Some(SendStatus::TargetPortClosed), "{got:?}");
    assert_eq!(got.len(), 2, "{got:?}");
}

#[test]
fn a_size_class_too_small_is_an_error_and_posts_nothing() {
    let (_rig, mut rx, mut tx) = two_ports();
    let out = tx.alloc_from(&[1u8; 100]).unwrap();
    let posted = tx.stats().posted;
    let small = SendOpts { size_class: Some(6), ..SendOpts::default() };
    assert_eq!(tx.send_to(&out, RX, small), Err(DriverError::ClassTooSmall { class: 6, len: 100 }));
    let huge = SendOpts { size_class: Some(30), ..SendOpts::default() };
    assert_eq!(tx.send_to(&out, RX, huge), Err(DriverError::ClassTooLarge { class: 30 }));
    assert_eq!(tx.stats().posted, posted);
    assert_eq!(tx.send_tokens_free(), tx.send_tokens());
    // A receive buffer too small for the class asked for.
    let inbox = rx.alloc(100).unwrap();
    let big = RecvOpts { size_class: Some(7), ..RecvOpts::default() };
    assert_eq!(rx.provide(&inbox, big), Err(DriverError::BufferTooSmall { class: 7, len: 100 }));
    assert_eq!(rx.recv_tokens_free(), rx.recv_tokens());
    assert_eq!(
        DriverError::BufferTooSmall { class: 7, len: 100 }.to_string(),
        "a receive buffer of size class 7 must hold 128 bytes, this one has 100 (leave \
         RecvOpts::size_class None to take the largest class it holds)"
    );
}

#[test]
fn a_message_lands_only_in_a_buffer_of_its_class() {
    let (mut rig, mut rx, mut tx) = two_ports();
    // 4096 bytes: class 12. A 100-byte message sent with its own class
    // (7) does not fit it; sent with class 12 it does.
    let inbox = rx.alloc(4096).unwrap();
    rx.provide(&inbox, RecvOpts { priority: Priority::High, ..RecvOpts::default() }).unwrap();
    let out = tx.alloc_from(&[3u8; 100]).unwrap();
    let opts = SendOpts { priority: Priority::High, size_class: Some(12), ..SendOpts::default() };
    tx.send_to(&out, RX, opts).unwrap();
    rig.step();
    match rx.recv() {
        Ok(e @ Event::Received { size_class: 12, priority: Priority::High, len: 100, .. }) => {
            assert_eq!(rx.read_message(&e).unwrap(), vec![3u8; 100]);
        }
        other => panic!("expected a class-12 message, got {other:?}"),
    }
}

#[test]
fn put_and_get_write_and_read_remote_memory() {
    // Put and get go to another node (a NIC refuses its own node): port 1
    // of node 1.
    let mut rig = Rig::new(Config::default());
    let (nic1, nic2) = (rig.nic_of(1), rig.nic());
    let mut rx = nic1.open_port(1, PortOptions::default()).unwrap();
    let mut tx = nic2.open_port(0, PortOptions::default()).unwrap();
    rig.step();
    let window = rx.alloc(4096).unwrap();
    let there = Dest::new(1, 1).at(window.vaddr + 100);
    let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    let out = tx.alloc_from(&data).unwrap();
    tx.put_to(&out, there, PutOpts { tag: 1, ..PutOpts::default() }).unwrap();
    rig.step();
    // The put asked for nothing: no event for the program.
    assert_eq!(tx.try_recv(), None);
    let mut seen = vec![0u8; 200];
    rx.read(&window, 100, &mut seen).unwrap();
    assert_eq!(seen, data);
    // A get is always reported: the data is there then.
    let back = tx.alloc(200).unwrap();
    tx.get_from(&back, there, GetOpts { tag: 2, ..GetOpts::default() }).unwrap();
    rig.step();
    match tx.recv() {
        Ok(Event::GetDone { tag, status, .. }) => assert_eq!((tag, status), (2, SendStatus::Ok)),
        other => panic!("expected GetDone, got {other:?}"),
    }
    let mut got = vec![0u8; 200];
    tx.read(&back, 0, &mut got).unwrap();
    assert_eq!(got, data);
    // A put that asks is reported.
    tx.put_to(&out, there, PutOpts { tag: 3, notify: true, ..PutOpts::default() }).unwrap();
    rig.step();
    match tx.recv() {
        Ok(Event::PutDone { tag, status, .. }) => assert_eq!((tag, status), (3, SendStatus::Ok)),
        other => panic!("expected PutDone, got {other:?}"),
    }
    // The receiver saw none of it but its PortOpened.
    assert_eq!(rx.try_recv(), None);
    assert_eq!(rx.stats().events, 1);
}

#[test]
fn a_port_knows_its_address() {
    let (_rig, rx, tx) = two_ports();
    assert_eq!(rx.address(), Dest { node: 2, port: 1 });
    assert_eq!(tx.address(), Dest::new(2, 0));
}

#[test]
fn wait_served_says_when_the_nic_serves_the_port() {
    let mut rig = Rig::new(Config::default());
    let nic = rig.nic();
    let mut p = nic.open_port(3, PortOptions::default()).unwrap();
    // The NIC has not run since the open: not served yet.
    assert_eq!(p.wait_served(std::time::Duration::ZERO), Err(DriverError::PortNotServed(3)));
    assert_eq!(p.wait_served(std::time::Duration::from_secs(1)), Err(DriverError::WouldBlock));
    rig.step();
    assert_eq!(p.wait_served(std::time::Duration::ZERO), Ok(()));
    // PortOpened stays in the queue: poll returns it, recv would skip it.
    assert!(matches!(p.poll(), Some(Event::PortOpened { .. })));
    assert_eq!(p.poll(), None);
}
