//! Isolation between ports, tried as a hostile host process would: a
//! separate OS process (the `attacker` example), run as another user
//! whom the cluster allows (`nobody`), holds node 1 port 5 through the
//! public API. It tries to reach port 2's memory, page table, window and
//! event queue, the NIC's buffers and rings, every file of the cluster
//! and the device process's memory; then it floods everything it can
//! write with random bytes. Every attempt must be refused, named and
//! counted, while streams into ports 2 and 3 complete with every byte
//! checked.
//!
//! On live and on qemu. These tests FAIL when QEMU or the riscv target is
//! missing, and when not run as root: the attacker must be another user
//! (the cluster's own user is trusted, as root is: it may open the
//! cluster's files and trace the device process).

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nic_abi::stats::Stat;
use nic_emu::realtime::{RtCluster, RtConfig};

/// The user the attacker runs as.
const NOBODY: u32 = 65534;

fn cluster(tag: &str, backend: host_driver::cluster::ClusterBackend) -> RtCluster {
    assert!(
        euid_is_root(),
        "the isolation tests run the attacker as another user (uid {NOBODY}), which needs root: \
         run `cargo xtask test` as root (CI does)"
    );
    let mut cfg = RtConfig::new(&rt::cluster_path(tag), backend, 2);
    if backend == host_driver::cluster::ClusterBackend::Qemu {
        rt::require_qemu();
        cfg.image = Some(rt::firmware_image());
    }
    cfg.allow_uids = vec![NOBODY];
    rt::start(cfg)
}

/// The attacker program, where `nobody` can run it: the checkout may be
/// in a directory closed to other users (root's home), so the binary is
/// copied to the temporary directory, readable and executable by all, and
/// removed when the copy is dropped.
struct AttackerBin(std::path::PathBuf);

impl AttackerBin {
    fn new() -> AttackerBin {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let to = std::env::temp_dir().join(format!("nic-attacker-{}-{n}", std::process::id()));
        std::fs::copy(rt::example_bin("cluster-tests", "attacker"), &to)
            .unwrap_or_else(|e| panic!("copy the attacker to {}: {e}", to.display()));
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        AttackerBin(to)
    }
}

impl Drop for AttackerBin {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn euid_is_root() -> bool {
    // Our effective uid, the third field of /proc/self/status's Uid line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn attack_during_streams(c: &RtCluster) {
    let errors = |c: &RtCluster| c.nic_stats(1).fw[Stat::Errors as usize];
    let before = errors(c);
    // The victim: port 2 of node 1, open, with a secret in its memory.
    let victim = host_driver::LiveBackend::attach(&c.path().to_string_lossy(), 1, 2).unwrap();
    let vnic = host_driver::Nic::open(victim.clone()).unwrap();
    let mut vport = vnic.open_port(2, host_driver::PortOptions::default()).unwrap();
    let secret = vport.alloc(4096).unwrap();
    vport.write(&secret, 0, &[0x5E; 4096]).unwrap();
    let bin = AttackerBin::new();
    let mut attacker = Command::new(&bin.0)
        .arg(c.path())
        .args(["1", "5", "2", "--flood", "120"])
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the attacker");
    // Its attempts, up to the flood.
    let mut out = BufReader::new(attacker.stdout.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let mut err = String::new();
            let _ = attacker.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the attacker stopped before its flood:\n{said}\nstderr:\n{err}");
        }
        said.push_str(&line);
        if line.trim() == "flooding" {
            break;
        }
    }
    // The victim lets go of port 2; two streams into ports 2 and 3 of the
    // attacker's node, during the flood.
    drop((vport, vnic, victim));
    // Again until the flood has gone on for two seconds.
    let flood = std::time::Instant::now();
    let mut rounds = 0;
    while rounds == 0 || flood.elapsed() < Duration::from_secs(2) {
        let (s2, r2) = rt::stream_spawn(c.path(), (0, 2), (1, 2), 16384, 2000, &[]);
        let (s3, r3) = rt::stream_spawn(c.path(), (0, 3), (1, 3), 4096, 4000, &[]);
        let outs: Vec<_> =
            [s2, r2, s3, r3].into_iter().map(|p| rt::finish(p, Duration::from_secs(90))).collect();
        rt::both_succeed(c.path(), [("sender 2", &outs[0]), ("receiver 2", &outs[1])]);
        rt::both_succeed(c.path(), [("sender 3", &outs[2]), ("receiver 3", &outs[3])]);
        for r in [&outs[1], &outs[3]] {
            assert!(String::from_utf8_lossy(&r.stdout).contains("content and order checked"));
        }
        rounds += 1;
    }
    drop(attacker.stdin.take()); // ends the flood
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    said.push_str(&rest);
    let status = attacker.wait().unwrap();
    let mut err = String::new();
    let _ = attacker.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "an attack got through:\n{said}\nstderr:\n{err}");
    for line in [
        "a page-table entry onto the victim's memory: refused (page-table entry",
        "a write into the victim's page table: refused (host memory",
        "a write into its own page table in host memory: refused (host memory",
        "reading the translation cache: refused (port 5 may not read",
        "reading the victim's page table: refused (host memory",
        "closing the victim's port: refused",
        "a descriptor into the victim's send ring: refused",
        "reading the victim's window: refused (port 5 may not read",
        "reading the receive buffers: refused",
        "reading the victim's host memory: refused",
        "a receive buffer in unregistered memory: refused (NotRegistered)",
        "a send out of unregistered memory: refused (NotRegistered)",
        "an event queue in the victim's slice: refused (event queue",
        "an event queue at the end of the bus: refused (event queue",
        "registering the victim's event queue: refused (port 5 may not write",
        "taking the victim's port: refused (port 2 is held by another process)",
        "taking port 200: refused",
        "reading SRAM without a port: refused",
        "garbage on the control socket: refused",
        "listing the cluster directory: refused",
        "files and the device's memory: refused",
        "flood: ",
    ] {
        assert!(said.contains(line), "missing {line:?}:\n{said}");
    }
    // Counted: the NIC's own refusals (the two descriptors) and the
    // control sockets'.
    assert!(errors(c) >= before + 2, "errors {} -> {}", before, errors(c));
    let (attaches, refused, _, broken, _) = c.control_counters();
    assert!(attaches >= 5 && refused >= 10 && broken >= 1, "{:?}", c.control_counters());
    assert!(c.notes().iter().any(|n| n.contains("port 5 (uid 65534): refused")), "{:?}", c.notes());
    eprintln!("{said}{rounds} rounds of streams; control sockets: {:?}", c.control_counters());
    // The victim's port is still open and served after all that.
    rt::pingpong(c.path(), (0, 2), (1, 2), 64, 20);
}

#[test]
fn another_users_process_reaches_nothing_but_its_own_port_on_live() {
    let c = cluster("iso", host_driver::cluster::ClusterBackend::Live);
    attack_during_streams(&c);
}

#[test]
fn another_users_process_reaches_nothing_but_its_own_port_on_qemu() {
    let c = cluster("iso", host_driver::cluster::ClusterBackend::Qemu);
    attack_during_streams(&c);
}

#[test]
fn a_user_the_cluster_does_not_allow_is_refused_at_the_door() {
    // Allowed: some other user, not the attacker's.
    assert!(euid_is_root(), "this test runs a program as another user (uid {NOBODY}): run as root");
    let mut cfg =
        RtConfig::new(&rt::cluster_path("door"), host_driver::cluster::ClusterBackend::Live, 1);
    cfg.allow_uids = vec![NOBODY - 1];
    let c = rt::start(cfg);
    let (ok, said) = attacker_as_nobody(&c);
    assert!(!ok, "{said}");
    assert!(said.contains("uid 65534 may not use this cluster"), "{said}");
    assert_eq!(c.control_counters().2, 1, "one peer refused");
    assert!(
        c.notes().iter().any(|n| n.contains("refused a process of uid 65534")),
        "{:?}",
        c.notes()
    );
    // Not allowed at all: the cluster's files and directories are closed to it.
    let c = rt::live("closed", 1);
    let (ok, said) = attacker_as_nobody(&c);
    assert!(!ok && said.contains("open the cluster"), "{said}");
}

/// Run the attacker as `nobody` on node 0 port 1 of `c` (no flood): did
/// it succeed, and what it said.
fn attacker_as_nobody(c: &RtCluster) -> (bool, String) {
    let bin = AttackerBin::new();
    let out = Command::new(&bin.0)
        .arg(c.path())
        .args(["0", "1", "2"])
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run the attacker");
    (out.status.success(), rt::text(&out))
}
