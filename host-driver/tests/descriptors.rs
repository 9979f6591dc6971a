//! Posting descriptors: ring layout, tokens, ring space, and what the
//! driver leaves to the NIC (the MCP of a simulated cluster's node 2).

mod sim_rig;

use host_driver::nic_abi::desc::DESC_SIZE;
use host_driver::nic_abi::map::SEND_RING_LEN;
use host_driver::nic_abi::port::{self as pcb, port_reg, send_slot};
use host_driver::nic_abi::PAGE_SIZE;
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

fn setup() -> (SimBackend, Nic<SimBackend>, Rig) {
    let rig = Rig::new(Config::default());
    (rig.backend(), rig.nic(), rig)
}

fn slot(be: &SimBackend, port: u8, idx: u32) -> Descriptor {
    let mut b = [0u8; DESC_SIZE as usize];
    be.sram_read(send_slot(port as usize, idx), &mut b);
    Descriptor::decode(&b).unwrap()
}

/// Drain events, return them.
fn drain(port: &mut Port<SimBackend>) -> Vec<Event> {
    let mut v = Vec::new();
    port.poll_batch(&mut v, usize::MAX);
    v
}

#[test]
fn each_call_writes_its_descriptor_bumps_send_prod_and_rings() {
    let (be, nic, rig) = setup();
    let mut port = nic.open_port(2, PortOptions::default()).unwrap();
    let buf = port.alloc(2 * PAGE_SIZE).unwrap();
    let bells = doorbells(&be);
    let busy = be.host_busy_ns();

    port.send(&buf, 100, 300, 9, Priority::High, 3, 5, 0xA1).unwrap();
    port.provide_receive_buffer(&buf, 12, Priority::Low, 0xA2).unwrap();
    port.put(&buf, 8, 16, 1, 6, 0x7777_0000, Priority::Low, 0xA3).unwrap();
    port.get(&buf, 0, 4096, 0, 7, 0x8888_0000, Priority::High, 0xA4).unwrap();
    port.resume(3, 5, Priority::High).unwrap();
    port.set_alarm(1_000_000, 0xA6).unwrap();

    let d = |kind, priority, size_class, target_port, target_node, local, len, remote, tag| {
        Descriptor { kind, priority, size_class, target_port, target_node, local, len, remote, tag }
    };
    let want = [
        d(DescKind::Send, Priority::High, 9, 5, 3, buf.vaddr + 100, 300, 0, 0xA1),
        d(DescKind::Provide, Priority::Low, 12, 0, 0, buf.vaddr, 8192, 0, 0xA2),
        d(DescKind::Put, Priority::Low, 0, 6, 1, buf.vaddr + 8, 16, 0x7777_0000, 0xA3),
        d(DescKind::Get, Priority::High, 0, 7, 0, buf.vaddr, 4096, 0x8888_0000, 0xA4),
        d(DescKind::Resume, Priority::High, 0, 5, 3, 0, 0, 0, 0),
        d(DescKind::Alarm, Priority::Low, 0, 0, 0, 0, 0, 1_000_000, 0xA6),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(slot(&be, 2, i as u32), *w, "slot {i}");
    }
    assert_eq!(be.sram_load_u32(port_reg(2, pcb::SEND_PROD)), 6);
    assert_eq!(doorbells(&be), bells + 6);
    assert_eq!(be.host_busy_ns() - busy, 6 * rig.price(HostOp::PostDescriptor));
    assert_eq!(port.stats().posted, 6);
    assert_eq!(port.send_tokens_free(), 6 - 3);
    assert_eq!(port.recv_tokens_free(), 5 - 1);
}

#[test]
fn a_range_past_the_buffer_is_refused_by_the_driver() {
    let (_be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(1000).unwrap();
    assert_eq!(port.send(&buf, 900, 101, 7, Priority::Low, 1, 0, 0), Err(DriverError::BadSize));
    assert_eq!(port.put(&buf, 1001, 0, 1, 0, 0, Priority::Low, 0), Err(DriverError::BadSize));
    assert_eq!(port.get(&buf, u64::MAX, 2, 1, 0, 0, Priority::Low, 0), Err(DriverError::BadSize));
    assert_eq!(port.send_tokens_free(), 6);
    assert_eq!(port.stats().posted, 0);
}

#[test]
fn send_tokens_run_out_and_come_back_with_completions() {
    let (_be, nic, mut rig) = setup();
    let mut port = nic.open_port(1, PortOptions::default()).unwrap();
    let buf = port.alloc(4096).unwrap();
    // The peer: node 0 port 1, with a receive buffer per token.
    let peer_nic = rig.nic_of(0);
    let mut peer = peer_nic.open_port(1, PortOptions::default()).unwrap();
    let rx = peer.alloc(5 * 64).unwrap();
    for i in 0..5 {
        peer.provide_receive_buffer(&rx.sub(i * 64, 64).unwrap(), 6, Priority::Low, i).unwrap();
    }
    rig.step();
    for i in 0..6 {
        port.send(&buf, 0, 64, 6, Priority::Low, 0, 1, i).unwrap();
    }
    assert_eq!(port.send(&buf, 0, 64, 6, Priority::Low, 0, 1, 6), Err(DriverError::NoSendToken));
    assert_eq!(port.put(&buf, 0, 64, 0, 1, 0, Priority::Low, 6), Err(DriverError::NoSendToken));
    assert_eq!(port.get(&buf, 0, 64, 0, 1, 0, Priority::Low, 6), Err(DriverError::NoSendToken));
    // Descriptors without a token still go.
    port.resume(0, 1, Priority::Low).unwrap();
    port.set_alarm(5, 77).unwrap();
    rig.step();
    // The NIC took them all and five sends are done; the tokens come
    // back only with the completions the host takes.
    assert_eq!(be_send_cons(&port, 1), 8);
    assert_eq!(port.send_tokens_free(), 0);
    // The sixth waits for a buffer at the peer.
    let got = drain(&mut peer);
    assert_eq!(got.iter().filter(|e| matches!(e, Event::Received { .. })).count(), 5);
    peer.provide_receive_buffer(&rx.sub(0, 64).unwrap(), 6, Priority::Low, 9).unwrap();
    rig.step();
    let evs = drain(&mut port);
    let sent =
        evs.iter().filter(|e| matches!(e, Event::Sent { status: SendStatus::Ok, .. })).count();
    assert_eq!(sent, 6);
    assert!(evs.iter().any(|e| matches!(e, Event::Alarm { tag: 77, .. })));
    assert_eq!(port.send_tokens_free(), 6);
    port.send(&buf, 0, 64, 6, Priority::Low, 0, 1, 9).unwrap();
}

/// Descriptors the firmware has taken from `port`'s ring.
fn be_send_cons(port: &Port<SimBackend>, n: usize) -> u32 {
    port.backend().sram_load_u32(port_reg(n, pcb::SEND_CONS))
}

#[test]
fn receive_tokens_run_out_and_come_back_with_received_events() {
    let (_be, nic, mut rig) = setup();
    let mut port = nic.open_port(3, PortOptions::default()).unwrap();
    let rx = port.alloc(5 * 256).unwrap();
    let tx = port.alloc(64).unwrap();
    for i in 0..5 {
        port.provide_receive_buffer(&rx.sub(i * 256, 256).unwrap(), 8, Priority::Low, i).unwrap();
    }
    let extra = rx.sub(0, 256).unwrap();
    assert_eq!(
        port.provide_receive_buffer(&extra, 8, Priority::Low, 9),
        Err(DriverError::NoRecvToken)
    );
    // Loop two messages to ourselves (node 2, port 3).
    port.send(&tx, 0, 10, 8, Priority::Low, 2, 3, 100).unwrap();
    port.send(&tx, 0, 10, 8, Priority::Low, 2, 3, 101).unwrap();
    rig.step();
    let evs = drain(&mut port);
    assert_eq!(evs.iter().filter(|e| matches!(e, Event::Received { .. })).count(), 2);
    assert_eq!(port.recv_tokens_free(), 2);
    assert_eq!(port.send_tokens_free(), 6);
    port.provide_receive_buffer(&extra, 8, Priority::Low, 9).unwrap();
}

#[test]
fn the_driver_does_not_precheck_registration_the_nic_refuses() {
    let (_be, nic, mut rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(4096).unwrap();
    port.deregister(&buf).unwrap();
    // The driver posts it; the NIC answers with an error event.
    port.send(&buf, 0, 64, 6, Priority::Low, 1, 0, 1).unwrap();
    port.provide_receive_buffer(&buf, 12, Priority::High, 2).unwrap();
    // A buffer the driver never saw, with any address.
    let forged = DmaBuf { vaddr: 0xdead_0000, bus: 0, len: 4096 };
    port.put(&forged, 0, 16, 1, 0, 0, Priority::Low, 3).unwrap();
    assert_eq!(port.send_tokens_free(), 4);
    assert_eq!(port.recv_tokens_free(), 4);
    rig.step();
    let errs: Vec<_> = drain(&mut port)
        .into_iter()
        .filter_map(|e| match e {
            Event::Error { cause, tag, desc_kind, .. } => Some((cause, tag, desc_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errs,
        [
            (ErrorCause::NotRegistered, 1, Some(DescKind::Send)),
            (ErrorCause::NotRegistered, 2, Some(DescKind::Provide)),
            (ErrorCause::NotRegistered, 3, Some(DescKind::Put)),
        ]
    );
    // Each error gave back the token of its descriptor's kind.
    assert_eq!(port.send_tokens_free(), 6);
    assert_eq!(port.recv_tokens_free(), 5);
}

#[test]
fn a_buffer_of_another_port_is_refused_by_the_nic() {
    let (_be, nic, mut rig) = setup();
    let mut a = nic.open_port(0, PortOptions::default()).unwrap();
    let mut b = nic.open_port(1, PortOptions::default()).unwrap();
    let abuf = a.alloc(4096).unwrap();
    // post_raw: any descriptor, token of its kind.
    b.post_raw(Descriptor {
        kind: DescKind::Get,
        priority: Priority::Low,
        size_class: 0,
        target_port: 0,
        target_node: 1,
        local: abuf.vaddr,
        len: 100,
        remote: 0,
        tag: 55,
    })
    .unwrap();
    assert_eq!(b.send_tokens_free(), 5);
    rig.step();
    let evs = drain(&mut b);
    assert!(evs.iter().any(|e| matches!(
        e,
        Event::Error {
            cause: ErrorCause::NotRegistered,
            tag: 55,
            desc_kind: Some(DescKind::Get),
            ..
        }
    )));
    assert_eq!(b.send_tokens_free(), 6);
}

#[test]
fn malformed_raw_descriptors_take_the_token_their_kind_byte_names() {
    let (_be, nic, mut rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let mut raw = [0u8; 64];
    raw[0] = 0; // no such kind: a send token, as the firmware counts it
    raw[32] = 1;
    port.post_raw_bytes(&raw).unwrap();
    raw[0] = DescKind::Send as u8;
    raw[1] = 7; // bad priority
    raw[32] = 2;
    port.post_raw_bytes(&raw).unwrap();
    raw[0] = DescKind::Provide as u8;
    raw[1] = 0;
    raw[6] = 1; // reserved flags
    raw[32] = 3;
    port.post_raw_bytes(&raw).unwrap();
    raw[0] = DescKind::Alarm as u8; // no token
    raw[32] = 4;
    port.post_raw_bytes(&raw).unwrap();
    assert_eq!(port.send_tokens_free(), 4);
    assert_eq!(port.recv_tokens_free(), 4);
    rig.step();
    let errs: Vec<_> = drain(&mut port)
        .into_iter()
        .filter_map(|e| match e {
            Event::Error { cause, tag, desc_kind, .. } => Some((cause, tag, desc_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errs,
        [
            (ErrorCause::BadKind, 1, None),
            (ErrorCause::BadPriority, 2, Some(DescKind::Send)),
            (ErrorCause::BadDescriptor, 3, Some(DescKind::Provide)),
            (ErrorCause::BadDescriptor, 4, Some(DescKind::Alarm)),
        ]
    );
    assert_eq!(port.send_tokens_free(), 6);
    assert_eq!(port.recv_tokens_free(), 5);
}

#[test]
fn the_ring_fills_when_the_nic_takes_nothing() {
    let (be, nic, mut rig) = setup();
    let mut port = nic.open_port(4, PortOptions::default()).unwrap();
    rig.step(); // the firmware serves the port
                // From here the NIC runs only at `rig.step()`.
    for _ in 0..SEND_RING_LEN {
        port.resume(1, 1, Priority::Low).unwrap();
    }
    assert_eq!(port.resume(1, 1, Priority::Low), Err(DriverError::RingFull));
    assert_eq!(be.sram_load_u32(port_reg(4, pcb::SEND_PROD)), SEND_RING_LEN);
    rig.step();
    for _ in 0..SEND_RING_LEN {
        port.resume(1, 1, Priority::Low).unwrap();
    }
    assert_eq!(port.resume(1, 1, Priority::Low), Err(DriverError::RingFull));
    rig.step();
    // The NIC took all of them.
    assert_eq!(be.sram_load_u32(port_reg(4, pcb::SEND_CONS)), 2 * SEND_RING_LEN);
    // The ring index wrapped: slot 0 now holds descriptor 128.
    port.resume(1, 1, Priority::Low).unwrap();
    assert_eq!(slot(&be, 4, 2 * SEND_RING_LEN).kind, DescKind::Resume);
    assert_eq!(be.sram_load_u32(port_reg(4, pcb::SEND_PROD)), 2 * SEND_RING_LEN + 1);
}

#[test]
fn ring_space_ignores_send_cons_of_a_previous_generation() {
    let (be, nic, _rig) = setup();
    be.sram_store_u32(port_reg(0, pcb::GENERATION), 3);
    be.sram_store_u32(port_reg(0, pcb::FW_GENERATION), 3);
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    // The firmware, still finishing generation 3, writes a stale SEND_CONS
    // over the opener's zero.
    be.sram_store_u32(port_reg(0, pcb::SEND_CONS), 40);
    for _ in 0..SEND_RING_LEN {
        port.resume(1, 1, Priority::Low).unwrap();
    }
    assert_eq!(port.resume(1, 1, Priority::Low), Err(DriverError::RingFull));
}
