//! The echo offload on each backend: a port asks its NIC to ping another
//! NIC (`Port::nic_echo`); the NIC there answers by itself (no port open
//! on it, no host program there), and the asking port gets one
//! `Event::Echo` with the round trip in NIC clock ticks. A ping of a node
//! past the fabric is refused as a bad node.
//!
//! The qemu test FAILS, naming what is missing, when qemu-system-riscv64
//! or the riscv64imac-unknown-none-elf target is not installed: it is
//! never skipped.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::time::Duration;

use cluster_tests::rig::Rig;
use host_driver::{DescKind, ErrorCause, Event, Port, PortOptions, SendStatus};

const MS: u64 = 1_000_000;

/// Check one answered echo from node 1 and a refused one (node 9 of a
/// 2-node fabric), `next` giving the port's next event.
fn check(backend: &str, mut next: impl FnMut() -> Event, post: &mut dyn FnMut(u16, u64)) {
    post(1, 41);
    match next() {
        Event::Echo { node: 1, tag: 41, status: SendStatus::Ok, rtt, .. } => {
            assert!(rtt > 0, "{backend}: a round trip of {rtt} ticks")
        }
        other => panic!("{backend}: expected an answered Echo, got {other:?}"),
    }
    post(9, 42);
    match next() {
        Event::Error {
            cause: ErrorCause::BadNode,
            tag: 42,
            desc_kind: Some(DescKind::Echo),
            ..
        } => {}
        other => panic!("{backend}: expected the echo of node 9 refused, got {other:?}"),
    }
}

#[test]
fn a_nic_answers_an_echo_by_itself_on_the_sim() {
    let mut rig = Rig::new("lanai9-gm", 2, None);
    let nic = rig.nic(0);
    let port = std::cell::RefCell::new(nic.open_port(3, PortOptions::default()).unwrap());
    let rig = std::cell::RefCell::new(&mut rig);
    let next = || {
        let (e, _) = rig
            .borrow_mut()
            .next_real_event(&mut port.borrow_mut(), 10 * MS)
            .expect("an event within 10 ms");
        e
    };
    let mut post = |node: u16, tag: u64| {
        rig.borrow().sync();
        port.borrow_mut().nic_echo(node, tag).unwrap();
    };
    check("sim", next, &mut post);
}

fn on_cluster(backend: &str, c: &nic_emu::realtime::RtCluster) {
    let path = c.path().to_string_lossy().into_owned();
    let port = std::cell::RefCell::new(Port::attach(&path, 0, 2).unwrap());
    let next = || loop {
        match port.borrow_mut().recv_timeout(Duration::from_secs(10)) {
            Ok(Event::PortOpened { .. }) => continue,
            Ok(e) => return e,
            Err(e) => panic!("{backend}: no event: {e}"),
        }
    };
    let mut post = |node: u16, tag: u64| port.borrow_mut().nic_echo(node, tag).unwrap();
    check(backend, next, &mut post);
}

#[test]
fn a_nic_answers_an_echo_by_itself_on_live() {
    let c = rt::live("echo", 2);
    on_cluster("live", &c);
}

#[test]
fn a_nic_answers_an_echo_by_itself_on_qemu() {
    let c = rt::qemu_cluster("echo", 2);
    on_cluster("qemu", &c);
}
