//! News of a dead or reset NIC reaches the program waiting for it fast
//! and named: a port waiting for a message learns within 200 ms that its
//! device process was killed, that its own NIC was reflashed, or that a
//! peer it talks with was reset or lost its QEMU, with an error naming
//! the node and what happened (`NicDown`, `NicReset`, `PeerReset`); a
//! port with many receive buffers on a dead device closes at once; and
//! the `stream` program prints the named error instead of blaming its
//! peer. Each test prints what it measured.
//!
//! On live and qemu. The qemu tests FAIL, naming what is missing, when
//! qemu-system-riscv64 or the riscv64imac-unknown-none-elf target is not
//! installed: they are never skipped.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use host_driver::cluster::{ClusterBackend, ClusterDir};
use host_driver::{DownCause, DriverError, Port, RecvOpts};
use nic_abi::regs::{self, reg};
use nic_emu::realtime::process::ClusterProcess;
use nic_emu::realtime::{qemu, RtCluster, RtConfig};

/// How soon a waiting program must know.
const PROMPT: Duration = Duration::from_millis(200);

/// The port the tests wait on.
const PORT: u8 = 3;

/// Attach port `PORT` of `node`, give it a receive buffer, watch `peer`
/// (the node it waits for a message from), and wait for a message in a
/// thread for 30 s. `act` then does something to the cluster and returns
/// when it happened (its own clock); the result is the wait's error and
/// how long after that moment the wait returned.
fn wait_through(
    cluster: &Path,
    node: u16,
    peer: Option<u16>,
    act: impl FnOnce() -> Instant,
) -> (DriverError, Duration) {
    let mut port = Port::attach(&cluster.to_string_lossy(), node, PORT).expect("attach");
    let inbox = port.alloc(4096).unwrap();
    port.provide(&inbox, RecvOpts::default()).unwrap();
    if let Some(p) = peer {
        port.watch(p);
    }
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = port.recv_timeout(Duration::from_secs(30));
        let _ = tx.send(Instant::now());
        r.map(|e| format!("{e:?}"))
    });
    // The wait is under way (and has seen a heartbeat or two).
    std::thread::sleep(Duration::from_millis(100));
    let at = act();
    let done = rx.recv_timeout(Duration::from_secs(40)).expect("the wait returned");
    let r = waiter.join().expect("the waiting thread");
    let e = r.expect_err("the wait ended with an error, not an event");
    (e, done.saturating_duration_since(at))
}

/// The error is `want`, came within `PROMPT`, and says so naming the
/// node; prints the figure.
fn assert_prompt(what: &str, e: &DriverError, took: Duration, want: &DriverError, node: u16) {
    eprintln!("{what}: learned in {} ms: {e}", took.as_millis());
    assert_eq!(e, want, "{what}");
    assert!(e.to_string().contains(&format!("node {node}")), "{what}: {e}");
    assert!(took < PROMPT, "{what}: learned {took:?} after it happened (at most {PROMPT:?})");
}

/// SIGKILL `pid` and say when (just before the signal went).
fn kill_now(pid: u32) -> Instant {
    let t = Instant::now();
    rt::kill_pid(pid);
    t
}

/// The moment NIC `node` of `c` is reset after `start` (its BOOT_COUNT
/// moves), watched every 100 us; the write that causes it is `cause`.
fn reset_seen(c: &RtCluster, node: u32, cause: impl FnOnce()) -> Instant {
    let sram = c.dir().map_sram(node).unwrap();
    let boots = || sram.load_u32(reg(regs::BOOT_COUNT) as u64).unwrap_or(0);
    let before = boots();
    let written = Instant::now();
    cause();
    while boots() == before {
        assert!(written.elapsed() < Duration::from_secs(10), "node {node} was not reset");
        std::thread::sleep(Duration::from_micros(100));
    }
    let t = Instant::now();
    eprintln!(
        "node {node} reset {} ms after its flash was written",
        t.duration_since(written).as_millis()
    );
    t
}

/// Reflash NIC `node` of `c` (the firmware image under qemu, any bytes
/// on live: the supervisor watches the file and resets the NIC).
fn reflash(c: &RtCluster, node: u32) -> Instant {
    let flash = c.dir().flash_path(node);
    reset_seen(c, node, || match c.manifest().backend {
        ClusterBackend::Qemu => qemu::write_flash(&rt::firmware_image(), &flash).unwrap(),
        ClusterBackend::Live => std::fs::write(&flash, b"a new image").unwrap(),
    })
}

fn cluster(backend: ClusterBackend, tag: &str, nodes: usize) -> RtCluster {
    match backend {
        ClusterBackend::Live => rt::live(tag, nodes),
        ClusterBackend::Qemu => rt::qemu_cluster(tag, nodes),
    }
}

/// A device process of its own (the `nic-cluster` binary), so that the
/// test can kill it.
fn device_process(backend: ClusterBackend, tag: &str) -> ClusterProcess {
    let mut cfg = RtConfig::new(&rt::cluster_path(tag), backend, 2);
    if backend == ClusterBackend::Qemu {
        rt::require_qemu();
        cfg.image = Some(rt::firmware_image());
    }
    let p = ClusterProcess::spawn(&rt::nic_cluster_bin(), &cfg, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("start the device process: {e}"));
    let d = ClusterDir::open_path(p.path()).unwrap();
    let t = Instant::now();
    while (0..2).any(|n| {
        d.map_sram(n).unwrap().load_u32(reg(regs::FW_STATUS) as u64) != Some(regs::FW_RUNNING)
    }) {
        assert!(t.elapsed() < Duration::from_secs(30), "the NICs did not boot");
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

fn device_killed(backend: ClusterBackend) {
    let p = device_process(backend, "dn-kill");
    let path = p.path().to_path_buf();
    let pid = p.pid();
    let (e, took) = wait_through(&path, 1, Some(0), || kill_now(pid));
    let want = DriverError::NicDown { node: 1, why: DownCause::DeviceProcess };
    assert_prompt(&format!("{backend}: device process killed"), &e, took, &want, 1);
    drop(p);
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn a_waiting_port_learns_its_device_process_was_killed_within_200ms_on_live() {
    device_killed(ClusterBackend::Live);
}

#[test]
fn a_waiting_port_learns_its_device_process_was_killed_within_200ms_on_qemu() {
    device_killed(ClusterBackend::Qemu);
}

fn own_nic_reflashed(backend: ClusterBackend) {
    let c = cluster(backend, "dn-own", 2);
    let (e, took) = wait_through(c.path(), 1, Some(0), || reflash(&c, 1));
    let want = DriverError::NicReset { node: 1 };
    assert_prompt(&format!("{backend}: its own NIC reflashed"), &e, took, &want, 1);
}

#[test]
fn a_waiting_port_learns_its_own_nic_was_reflashed_within_200ms_on_live() {
    own_nic_reflashed(ClusterBackend::Live);
}

#[test]
fn a_waiting_port_learns_its_own_nic_was_reflashed_within_200ms_on_qemu() {
    own_nic_reflashed(ClusterBackend::Qemu);
}

fn peer_reflashed(backend: ClusterBackend) {
    let c = cluster(backend, "dn-peer", 3);
    let (e, took) = wait_through(c.path(), 1, Some(0), || reflash(&c, 0));
    let want = DriverError::PeerReset { node: 0 };
    assert_prompt(&format!("{backend}: the peer's NIC reflashed"), &e, took, &want, 0);
    // Node 2, which it does not talk with, changes nothing: the wait runs
    // out its time.
    let mut port = Port::attach(&c.path().to_string_lossy(), 1, 2).unwrap();
    port.watch(0);
    reflash(&c, 2);
    assert_eq!(port.recv_timeout(Duration::from_millis(300)), Err(DriverError::Timeout));
}

#[test]
fn a_waiting_port_learns_its_peers_nic_was_reset_within_200ms_on_live() {
    peer_reflashed(ClusterBackend::Live);
}

#[test]
fn a_waiting_port_learns_its_peers_nic_was_reset_within_200ms_on_qemu() {
    peer_reflashed(ClusterBackend::Qemu);
}

#[test]
fn a_waiting_port_learns_its_peers_qemu_was_killed_within_200ms() {
    let c = rt::qemu_cluster("dn-peer-qemu", 2);
    let pid = c.qemu_pid(0).expect("node 0's QEMU");
    let (e, took) = wait_through(c.path(), 1, Some(0), || kill_now(pid));
    let want = DriverError::NicDown { node: 0, why: DownCause::Qemu };
    assert_prompt("qemu: the peer's QEMU killed", &e, took, &want, 0);
}

#[test]
fn a_waiting_port_learns_its_own_qemu_was_killed_within_200ms() {
    let c = rt::qemu_cluster("dn-own-qemu", 2);
    let pid = c.qemu_pid(1).expect("node 1's QEMU");
    let (e, took) = wait_through(c.path(), 1, Some(0), || kill_now(pid));
    let want = DriverError::NicDown { node: 1, why: DownCause::Qemu };
    assert_prompt("qemu: its own QEMU killed", &e, took, &want, 1);
}

#[test]
fn a_port_that_sent_to_a_peer_learns_of_its_reset_without_being_told_to_watch_it() {
    let c = rt::live("dn-sent", 2);
    let path = c.path().to_string_lossy().into_owned();
    let mut a = Port::attach(&path, 0, PORT).unwrap();
    let mut b = Port::attach(&path, 1, PORT).unwrap();
    let inbox = b.alloc(64).unwrap();
    b.provide(&inbox, RecvOpts::default()).unwrap();
    let msg = a.alloc_from(&[7u8; 64]).unwrap();
    a.send_to(&msg, b.address(), host_driver::SendOpts::default()).unwrap();
    assert!(matches!(
        b.recv_timeout(Duration::from_secs(5)),
        Ok(host_driver::Event::Received { .. })
    ));
    // a sent to node 1: a reset of node 1 ends a's wait.
    let t = reflash(&c, 1);
    let e = a.recv_timeout(Duration::from_secs(10)).expect_err("the wait fails");
    let took = t.elapsed();
    assert_prompt(
        "live: a peer it sent to reset",
        &e,
        took,
        &DriverError::PeerReset { node: 1 },
        1,
    );
    // Reported once: the next wait waits.
    assert_eq!(a.recv_timeout(Duration::from_millis(100)), Err(DriverError::Timeout));
    // b's own NIC was reset: every wait says so from now on.
    for _ in 0..2 {
        assert_eq!(b.recv_timeout(Duration::from_secs(1)), Err(DriverError::NicReset { node: 1 }));
    }
}

/// A port with `bufs` receive buffers on a device process that is then
/// killed: freeing every buffer and dropping the port (what a program
/// does on its way out) takes how long.
fn drop_on_dead_device(backend: ClusterBackend, bufs: usize) {
    let p = device_process(backend, "dn-drop");
    let path = p.path().to_path_buf();
    let mut port = Port::attach(&path.to_string_lossy(), 1, PORT).unwrap();
    let n = bufs.min(port.recv_tokens_free() as usize);
    let mut posted = Vec::new();
    for i in 0..n {
        let b = port.alloc(4096).unwrap();
        port.provide(&b, RecvOpts { tag: i as u64, ..RecvOpts::default() }).unwrap();
        posted.push(b);
    }
    assert!(n >= 8, "only {n} receive buffers");
    rt::kill_pid(p.pid());
    // The device process is gone before the port finds out.
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    for b in posted {
        port.free(b).unwrap();
    }
    drop(port);
    let took = t.elapsed();
    eprintln!(
        "{backend}: freeing {n} receive buffers and dropping the port on a dead device took {} ms",
        took.as_millis()
    );
    assert!(took < PROMPT, "{took:?} (at most {PROMPT:?})");
    drop(p);
    let _ = std::fs::remove_dir_all(&path);
}

#[test]
fn dropping_a_port_with_many_receive_buffers_on_a_dead_device_returns_at_once_on_live() {
    drop_on_dead_device(ClusterBackend::Live, 64);
}

#[test]
fn dropping_a_port_with_many_receive_buffers_on_a_dead_device_returns_at_once_on_qemu() {
    drop_on_dead_device(ClusterBackend::Qemu, 64);
}

/// The `stream` receiver, waiting for a sender that never comes, when
/// `what` happens to node `node`: it exits at once and prints the named
/// error, not a time-out that blames the peer program.
fn stream_receiver_names(c: &RtCluster, what: &str, act: impl FnOnce() -> Instant, said: &str) {
    let path = c.path().to_string_lossy().into_owned();
    let mut recv = Command::new(rt::host_bin("stream"))
        .args(["--cluster", &path, "--role", "recv", "--node", "1", "--port", "3"])
        .args(["--peer", "0", "--peer-port", "3", "--size", "4096", "--count", "10"])
        .args(["--timeout", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !c.port_open(1, 3) {
        assert!(t.elapsed() < Duration::from_secs(20), "the receiver did not open its port");
        assert!(recv.try_wait().unwrap().is_none(), "the receiver ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    let at = act();
    let out = rt::finish(recv, Duration::from_secs(40));
    let took = at.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("stream receiver, {what}: exited {} ms after it: {}", took.as_millis(), err.trim());
    assert!(!out.status.success(), "{}", rt::text(&out));
    assert!(err.contains(said), "{what}: expected `{said}` in:\n{}", rt::text(&out));
    assert!(!err.contains("is the program at node"), "it blames the peer:\n{err}");
    assert!(took < Duration::from_secs(1), "{what}: the receiver exited {took:?} after it");
}

#[test]
fn the_stream_receiver_names_a_reset_peer_and_exits_at_once_on_live() {
    let c = rt::live("dn-stream", 2);
    stream_receiver_names(&c, "node 0 reflashed", || reflash(&c, 0), "node 0's NIC");
}

#[test]
fn the_stream_receiver_names_a_peer_whose_qemu_died_and_exits_at_once() {
    let c = rt::qemu_cluster("dn-stream-q", 2);
    let pid = c.qemu_pid(0).expect("node 0's QEMU");
    stream_receiver_names(
        &c,
        "node 0's QEMU killed",
        || kill_now(pid),
        "node 0's NIC is down: its QEMU process exited or was killed",
    );
}
