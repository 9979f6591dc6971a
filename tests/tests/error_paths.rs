//! Error paths, driven with the host driver on a simulated cluster: a send
//! that finds no receive buffer times out after the configured time and
//! traffic flows again after a resume; a send to a closed port says so;
//! every kind of bad descriptor gets its error event and the NIC carries on.

use cluster_tests::rig::Rig;
use host_driver::{
    DescKind, Descriptor, DmaBuf, ErrorCause, Event, Nic, Port, PortOptions, Priority, SendStatus,
    Stat,
};
use nic_abi::{size_class_for, NUM_PORTS};
use nic_emu::SimBackend;

const MS: u64 = 1_000_000;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Two open ports: `a` on node 0, `b` on node 1, both port 2.
struct Pair {
    rig: Rig,
    nic0: Nic<SimBackend>,
    nic1: Nic<SimBackend>,
    a: Port<SimBackend>,
    b: Port<SimBackend>,
}

fn pair(send_timeout_us: Option<f64>) -> Pair {
    let mut rig = Rig::new("lanai9-gm", 2, send_timeout_us);
    let nic0 = rig.nic(0);
    let nic1 = rig.nic(1);
    let mut a = nic0.open_port(2, PortOptions::default()).unwrap();
    let mut b = nic1.open_port(2, PortOptions::default()).unwrap();
    for p in [&mut a, &mut b] {
        match rig.next_event(p, MS) {
            Some((Event::PortOpened { .. }, _)) => {}
            other => panic!("expected PortOpened, got {other:?}"),
        }
    }
    Pair { rig, nic0, nic1, a, b }
}

/// Send `data` from `a` to node 1 port 2 and check it lands intact in a
/// fresh receive buffer of `b`.
fn good_send_is_delivered(p: &mut Pair, data: &[u8], tag: u64) {
    let class = size_class_for(data.len() as u64);
    let rbuf = p.b.alloc(1 << class.max(6)).unwrap();
    p.rig.sync();
    p.b.provide_receive_buffer(&rbuf, class, Priority::Low, 7000 + tag).unwrap();
    let sbuf = p.a.alloc(data.len().max(1) as u64).unwrap();
    p.a.write(&sbuf, 0, data).unwrap();
    p.a.send(&sbuf, 0, data.len() as u32, class, Priority::Low, 1, 2, tag).unwrap();
    match p.rig.next_real_event(&mut p.b, 50 * MS) {
        Some((Event::Received { node: 0, port: 2, len, tag: t, .. }, _)) => {
            assert_eq!(len as usize, data.len());
            assert_eq!(t, 7000 + tag);
            let mut got = vec![0u8; data.len()];
            p.b.read(&rbuf, 0, &mut got).unwrap();
            assert_eq!(got, data, "payload changed on the way");
        }
        other => panic!("good send {tag}: expected Received at node 1, got {other:?}"),
    }
    match p.rig.next_real_event(&mut p.a, 50 * MS) {
        Some((Event::Sent { tag: t, status: SendStatus::Ok, .. }, _)) => assert_eq!(t, tag),
        other => panic!("good send {tag}: expected Sent Ok at node 0, got {other:?}"),
    }
}

#[test]
fn send_without_receive_buffer_times_out_after_the_configured_time_then_flows_after_resume() {
    let timeout_ns = 5 * MS;
    let mut p = pair(Some(5_000.0));
    let data = pattern(64, 1);
    let buf = p.a.alloc(4096).unwrap();
    p.a.write(&buf, 0, &data).unwrap();
    p.rig.sync();
    let t_send = p.rig.now();
    p.a.send(&buf, 0, 64, 6, Priority::Low, 1, 2, 11).unwrap();
    let (ev, t_ev) =
        p.rig.next_real_event(&mut p.a, 100 * MS).expect("no completion within 100 ms");
    match ev {
        Event::Sent { tag: 11, status: SendStatus::TimedOut, .. } => {}
        other => panic!("expected Sent TimedOut, got {other:?}"),
    }
    let waited = t_ev - t_send;
    assert!(
        waited >= timeout_ns && waited <= timeout_ns + 2 * MS,
        "timed out after {waited} ns, configured {timeout_ns} ns"
    );
    assert_eq!(p.nic0.stat(Stat::Timeouts), 1);
    assert!(p.nic1.stat(Stat::NoBuffer) > 0, "the receiver never refused for lack of a buffer");

    // Until resumed, later sends from this sub-port to that target are dropped.
    p.rig.sync();
    p.a.send(&buf, 0, 64, 6, Priority::Low, 1, 2, 12).unwrap();
    match p.rig.next_real_event(&mut p.a, 100 * MS) {
        Some((Event::Sent { tag: 12, status: SendStatus::Dropped, .. }, _)) => {}
        other => panic!("expected Sent Dropped before resume, got {other:?}"),
    }

    // Resume, give the receiver a buffer: traffic flows again.
    p.rig.sync();
    p.a.resume(1, 2, Priority::Low).unwrap();
    good_send_is_delivered(&mut p, &pattern(64, 2), 13);
    good_send_is_delivered(&mut p, &pattern(9000, 3), 14);
}

#[test]
fn a_sender_refused_for_want_of_a_buffer_resends_ever_less_often_then_delivers_once_there_is_one() {
    // Go-back-N (the default): a refused 64 KiB message (16 packets) goes
    // again whole after each refusal. The profile's retry time is 100 us;
    // resending every 100 us would put some 1,600 packets on the link in
    // 50 ms, all dropped. The waits double instead (100 us, 200, 400 ...
    // up to 6.4 ms), so about a dozen windows go in that time.
    let mut p = pair(None);
    let data = pattern(65536, 9);
    let class = size_class_for(data.len() as u64);
    let buf = p.a.alloc(65536).unwrap();
    p.a.write(&buf, 0, &data).unwrap();
    p.rig.sync();
    p.a.send(&buf, 0, 65536, class, Priority::Low, 1, 2, 31).unwrap();
    p.rig.run_for(50 * MS);
    let refused = p.nic1.stat(Stat::NoBuffer);
    let resent = p.nic0.stat(Stat::RetxNoBuffer);
    assert!((5..=20).contains(&refused), "{refused} refusals in 50 ms");
    assert!(resent <= 20 * 16, "{resent} packets resent for want of a buffer in 50 ms");
    // A buffer at last: the message arrives within one longest wait (6.4
    // ms) and a bit, intact, once.
    let rbuf = p.b.alloc(65536).unwrap();
    p.rig.sync();
    let t_posted = p.rig.now();
    p.b.provide_receive_buffer(&rbuf, class, Priority::Low, 32).unwrap();
    match p.rig.next_real_event(&mut p.b, 50 * MS) {
        Some((Event::Received { node: 0, port: 2, len: 65536, tag: 32, .. }, t)) => {
            assert!(t - t_posted <= 10 * MS, "delivered {} ns after the buffer", t - t_posted);
            let mut got = vec![0u8; data.len()];
            p.b.read(&rbuf, 0, &mut got).unwrap();
            assert_eq!(got, data, "payload changed on the way");
        }
        other => panic!("expected Received at node 1, got {other:?}"),
    }
    match p.rig.next_real_event(&mut p.a, 50 * MS) {
        Some((Event::Sent { tag: 31, status: SendStatus::Ok, .. }, _)) => {}
        other => panic!("expected Sent Ok at node 0, got {other:?}"),
    }
    assert_eq!(p.rig.next_real_event(&mut p.b, MS).map(|e| e.0), None, "delivered twice");
}

#[test]
fn send_to_a_closed_port_reports_target_port_closed() {
    let mut p = pair(None);
    let buf = p.a.alloc(4096).unwrap();
    p.a.write(&buf, 0, &pattern(100, 4)).unwrap();
    // Port 5 of node 1 was never opened.
    p.rig.sync();
    p.a.send(&buf, 0, 100, 7, Priority::Low, 1, 5, 21).unwrap();
    match p.rig.next_real_event(&mut p.a, 100 * MS) {
        Some((Event::Sent { tag: 21, status: SendStatus::TargetPortClosed, .. }, _)) => {}
        other => panic!("expected TargetPortClosed for a never-opened port, got {other:?}"),
    }
    // Port 6: opened, then closed.
    let c = p.nic1.open_port(6, PortOptions::default()).unwrap();
    p.rig.run_for(MS);
    c.close();
    p.rig.run_for(MS);
    p.a.send(&buf, 0, 100, 7, Priority::Low, 1, 6, 22).unwrap();
    match p.rig.next_real_event(&mut p.a, 100 * MS) {
        Some((Event::Sent { tag: 22, status: SendStatus::TargetPortClosed, .. }, _)) => {}
        other => panic!("expected TargetPortClosed for a closed port, got {other:?}"),
    }
    // The NIC carries on.
    good_send_is_delivered(&mut p, &pattern(100, 5), 23);
}

/// A good send descriptor from `buf` to node 1 port 2 (tag `tag`).
fn send_desc(buf: &DmaBuf, len: u32, tag: u64) -> Descriptor {
    Descriptor {
        kind: DescKind::Send,
        priority: Priority::Low,
        size_class: size_class_for(len as u64),
        target_port: 2,
        target_node: 1,
        local: buf.vaddr,
        len,
        remote: 0,
        tag,
    }
}

/// Post `bytes`, expect an Error event with `cause` and `tag`, the token
/// back, then a good send delivered.
fn refused(p: &mut Pair, what: &str, bytes: [u8; 64], cause: ErrorCause, tag: u64, n: &mut u64) {
    let free = p.a.send_tokens_free();
    let errors = p.nic0.stat(Stat::Errors);
    p.rig.sync();
    p.a.post_raw_bytes(&bytes).unwrap();
    match p.rig.next_real_event(&mut p.a, 50 * MS) {
        Some((Event::Error { cause: c, tag: t, .. }, _)) => {
            assert_eq!(c, cause, "{what}: wrong cause");
            assert_eq!(t, tag, "{what}: wrong tag");
        }
        other => {
            let later = p.rig.next_real_event(&mut p.a, 2_000 * MS);
            let b_ev = p.rig.next_real_event(&mut p.b, MS);
            panic!("{what}: expected Error {cause:?}, got {other:?}; later: {later:?}; at node 1: {b_ev:?}")
        }
    }
    assert_eq!(p.a.send_tokens_free(), free, "{what}: the token did not come back");
    assert_eq!(p.nic0.stat(Stat::Errors), errors + 1, "{what}: not counted in STATS");
    *n += 1;
    good_send_is_delivered(p, &pattern(200, *n as u8), 1000 + *n);
}

fn encoded(d: Descriptor) -> [u8; 64] {
    let mut b = [0u8; 64];
    d.encode(&mut b);
    b
}

/// A fresh pair with an 8 KiB registered send buffer on `a`.
fn pair_with_buffer() -> (Pair, DmaBuf) {
    let mut p = pair(None);
    let buf = p.a.alloc(8192).unwrap();
    p.a.write(&buf, 0, &pattern(200, 9)).unwrap();
    (p, buf)
}

/// Post `d` as modified by `edit`, expect the error, then a good send.
fn bad_send(what: &str, cause: ErrorCause, edit: impl FnOnce(&mut Pair, &DmaBuf, &mut [u8; 64])) {
    let (mut p, buf) = pair_with_buffer();
    let mut n = 0;
    let mut b = encoded(send_desc(&buf, 200, 77));
    edit(&mut p, &buf, &mut b);
    refused(&mut p, what, b, cause, 77, &mut n);
    // Nothing was delivered that should not have been.
    assert_eq!(p.nic1.stat(Stat::MessagesReceived), n, "{what}");
}

#[test]
fn bad_kind_is_refused_and_the_nic_carries_on() {
    bad_send("bad kind", ErrorCause::BadKind, |_, _, b| b[0] = 0x7F);
}

#[test]
fn bad_priority_is_refused_and_the_nic_carries_on() {
    bad_send("bad priority", ErrorCause::BadPriority, |_, _, b| b[1] = 2);
}

#[test]
fn bad_target_port_is_refused_and_the_nic_carries_on() {
    bad_send("bad port", ErrorCause::BadPort, |_, _, b| b[3] = NUM_PORTS as u8);
}

#[test]
fn bad_target_node_is_refused_and_the_nic_carries_on() {
    // A 2-node cluster has no node 2.
    bad_send("bad node", ErrorCause::BadNode, |_, _, b| {
        b[4..6].copy_from_slice(&2u16.to_le_bytes())
    });
}

#[test]
fn bad_size_class_is_refused_and_the_nic_carries_on() {
    bad_send("bad size class", ErrorCause::BadSizeClass, |_, _, b| {
        b[2] = nic_abi::MAX_SIZE_CLASS + 1
    });
}

#[test]
fn length_too_big_for_its_size_class_is_refused_and_the_nic_carries_on() {
    // 200 bytes do not fit class 6 (64 bytes).
    bad_send("bad length", ErrorCause::BadLength, |_, _, b| b[2] = 6);
}

#[test]
fn unregistered_buffer_is_refused_and_the_nic_carries_on() {
    bad_send("not registered", ErrorCause::NotRegistered, |p, _, b| {
        let unreg = p.a.alloc_unregistered(4096).unwrap();
        b[8..16].copy_from_slice(&unreg.vaddr.to_le_bytes());
    });
}

#[test]
fn deregistered_buffer_is_refused_and_the_nic_carries_on() {
    bad_send("deregistered", ErrorCause::NotRegistered, |p, _, b| {
        let dereg = p.a.alloc(4096).unwrap();
        p.a.deregister(&dereg).unwrap();
        b[8..16].copy_from_slice(&dereg.vaddr.to_le_bytes());
    });
}

#[test]
fn a_buffer_sent_from_then_deregistered_is_refused_the_nic_forgets_its_translations() {
    let (mut p, buf) = pair_with_buffer();
    // A send from the buffer: the NIC reads its page-table line from host
    // memory and caches the translations.
    let rbuf = p.b.alloc(256).unwrap();
    p.rig.sync();
    p.b.provide_receive_buffer(&rbuf, 8, Priority::Low, 5).unwrap();
    p.a.send(&buf, 0, 200, 8, Priority::Low, 1, 2, 6).unwrap();
    match p.rig.next_real_event(&mut p.b, 50 * MS) {
        Some((Event::Received { tag: 5, len: 200, .. }, _)) => {}
        other => panic!("the first send: {other:?}"),
    }
    assert!(p.nic0.stat(Stat::TlbMisses) > 0 && p.nic0.stat(Stat::TlbHits) > 0);
    while let Some((e, _)) = p.rig.next_real_event(&mut p.a, 5 * MS) {
        assert!(matches!(e, Event::Sent { tag: 6, .. }), "{e:?}");
    }
    // Deregistered: the cached translations go with it.
    p.a.deregister(&buf).unwrap();
    let mut n = 0;
    refused(
        &mut p,
        "sent from, then deregistered",
        encoded(send_desc(&buf, 200, 77)),
        ErrorCause::NotRegistered,
        77,
        &mut n,
    );
}

#[test]
fn range_running_past_its_registration_is_refused_and_the_nic_carries_on() {
    bad_send("range past the registration", ErrorCause::NotRegistered, |p, buf, b| {
        // The page after `buf` is allocated but not registered.
        let _next = p.a.alloc_unregistered(4096).unwrap();
        b[8..16].copy_from_slice(&(buf.vaddr + 8192 - 100).to_le_bytes());
    });
}

#[test]
fn receive_buffer_smaller_than_its_class_is_refused_and_the_nic_carries_on() {
    let (mut p, _) = pair_with_buffer();
    let small = p.a.alloc(4096).unwrap();
    let prov = Descriptor {
        kind: DescKind::Provide,
        priority: Priority::Low,
        size_class: 14,
        target_port: 0,
        target_node: 0,
        local: small.vaddr,
        len: 4096,
        remote: 0,
        tag: 40,
    };
    let free = p.a.recv_tokens_free();
    p.rig.sync();
    p.a.post_raw(prov).unwrap();
    match p.rig.next_real_event(&mut p.a, 50 * MS) {
        Some((Event::Error { cause: ErrorCause::BadLength, tag: 40, .. }, _)) => {}
        other => panic!("small receive buffer: expected Error BadLength, got {other:?}"),
    }
    assert_eq!(p.a.recv_tokens_free(), free, "the receive token did not come back");
    good_send_is_delivered(&mut p, &pattern(300, 1), 41);
}

#[test]
fn many_bad_descriptors_in_a_row_leave_the_nic_working() {
    let (mut p, buf) = pair_with_buffer();
    let good = encoded(send_desc(&buf, 200, 50));
    let mut bads = Vec::new();
    for (i, (k, v)) in
        [(0usize, 0x7Fu8), (1, 2), (3, NUM_PORTS as u8), (2, 30), (2, 6)].into_iter().enumerate()
    {
        let mut b = good;
        b[k] = v;
        b[32..40].copy_from_slice(&(60 + i as u64).to_le_bytes());
        bads.push(b);
    }
    p.rig.sync();
    for b in &bads {
        p.a.post_raw_bytes(b).unwrap();
    }
    let mut errors = 0;
    while let Some((ev, _)) = p.rig.next_real_event(&mut p.a, 10 * MS) {
        match ev {
            Event::Error { .. } => errors += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(errors, bads.len());
    assert_eq!(p.a.send_tokens_free(), p.a.send_tokens());
    good_send_is_delivered(&mut p, &pattern(1000, 2), 70);
}
