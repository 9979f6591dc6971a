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
        rt::euid_is_root(),
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
        AttackerBin::of("attacker")
    }

    /// The `holder` example, copied the same way.
    fn holder() -> AttackerBin {
        AttackerBin::of("holder")
    }

    fn of(name: &str) -> AttackerBin {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let to = std::env::temp_dir().join(format!("nic-{name}-{}-{n}", std::process::id()));
        std::fs::copy(rt::example_bin("cluster-tests", name), &to)
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
        "taking the victim's port: refused (port 2 is held by another process: held by process",
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
    assert!(
        rt::euid_is_root(),
        "this test runs a program as another user (uid {NOBODY}): run as root"
    );
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

/// The `holder` program (copied where `nobody` can run it), run as
/// `nobody` with `args` after the cluster's path; its standard streams
/// piped.
fn holder_as_nobody(c: &RtCluster, bin: &AttackerBin, args: &[&str]) -> std::process::Child {
    Command::new(&bin.0)
        .arg(c.path())
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the holder")
}

/// Lines of `out` until one containing `want` (all of them, joined);
/// fails with what came if the stream ends first.
fn read_until(out: &mut impl BufRead, want: &str) -> String {
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("the holder stopped before saying {want:?}:\n{said}");
        }
        said.push_str(&line);
        if line.contains(want) {
            return said;
        }
    }
}

/// A holder that forks and exits leaves its child mapping the port's
/// window and slice (the child even drops the control connection, so to
/// the device process the holder is gone). The port must not change
/// hands while any such process maps it: the next holder is told who
/// still has it, the child sees nothing of anyone else's, and once the
/// child exits the port is handed over whole.
fn a_forked_child_keeps_nothing_past_the_handover(c: &RtCluster) {
    let bin = AttackerBin::holder();
    let mut h = holder_as_nobody(c, &bin, &["1", "3", "fork"]);
    let mut out = BufReader::new(h.stdout.take().unwrap());
    let mut err = h.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = err.read_to_string(&mut e);
        e
    });
    let said = read_until(&mut out, "keeps the port's memory");
    // The parent (the process we started) exits; its child lives on,
    // until its standard input closes (`wait` would close it: keep it).
    let stdin = h.stdin.take();
    let status = h.wait().unwrap();
    assert!(status.success(), "{said}");
    let path = c.path().to_string_lossy().into_owned();
    let t = std::time::Instant::now();
    let e = host_driver::LiveBackend::attach(&path, 1, 3).err();
    eprintln!("attach while a forked child maps port 3: {e:?} after {:?}", t.elapsed());
    match e {
        Some(host_driver::DriverError::PortHeld { port: 3, by }) => assert!(
            by.contains("still has the port's memory mapped") || by.contains("forked"),
            "{by}"
        ),
        other => {
            drop(stdin);
            let mut rest = String::new();
            let _ = out.read_to_string(&mut rest);
            panic!(
                "the port changed hands while a forked child mapped it: {other:?}\n{said}{rest}\n\
                 stderr: {}",
                errs.join().unwrap_or_default()
            )
        }
    }
    let (still_mapped, _) = c.control_limits();
    assert!(still_mapped >= 1, "counted: {:?}", c.control_limits());
    // The child goes: the port is handed over, and a stream through it
    // arrives whole (the child scribbled 0xAA over the slice until then).
    drop(stdin);
    let rest = read_until(&mut out, "foreign bytes:");
    assert!(rest.contains("foreign bytes: 0"), "{rest}");
    let t = std::time::Instant::now();
    loop {
        let o = rt::stream(c.path(), (0, 3), (1, 3), 4096, 400);
        if String::from_utf8_lossy(&o.stdout).contains("content and order checked") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", rt::text(&o));
    }
}

#[test]
fn a_forked_child_keeps_nothing_past_the_handover_on_live() {
    let c = cluster("fork", host_driver::cluster::ClusterBackend::Live);
    a_forked_child_keeps_nothing_past_the_handover(&c);
}

#[test]
fn a_forked_child_keeps_nothing_past_the_handover_on_qemu() {
    let c = cluster("fork", host_driver::cluster::ClusterBackend::Qemu);
    a_forked_child_keeps_nothing_past_the_handover(&c);
}

/// An allowed user takes every port of a node it can: it gets its share
/// (`RtConfig::ports_per_user`), the rest are refused with the reason; a
/// port it holds is refused to the owner naming the holder; and once it
/// lets go, the owner has every port at once although the user's process
/// lives on.
fn an_allowed_user_squats_no_more_than_its_share(c: &RtCluster) {
    let bin = AttackerBin::holder();
    let mut h = holder_as_nobody(c, &bin, &["0", "0", "squat"]);
    let mut out = BufReader::new(h.stdout.take().unwrap());
    let said = read_until(&mut out, "holding");
    let share = nic_emu::realtime::DEFAULT_PORTS_PER_USER as usize;
    assert_eq!(said.matches(": attached").count(), share, "{said}");
    assert!(said.contains(&format!("holds {share} of node 0's ports already")), "{said}");
    let path = c.path().to_string_lossy().into_owned();
    match host_driver::LiveBackend::attach(&path, 0, 0).err() {
        Some(host_driver::DriverError::PortHeld { port: 0, by }) => {
            assert!(by.contains(&format!("(uid {NOBODY})")), "{by}")
        }
        other => panic!("a held port was not refused naming its holder: {other:?}"),
    }
    let mut stdin = h.stdin.take().unwrap();
    use std::io::Write;
    writeln!(stdin).unwrap();
    read_until(&mut out, "released");
    let t = std::time::Instant::now();
    let mine: Vec<_> = (0..nic_abi::NUM_PORTS as u8)
        .map(|p| {
            host_driver::LiveBackend::attach(&path, 0, p)
                .unwrap_or_else(|e| panic!("port {p} after the squatter let go: {e}"))
        })
        .collect();
    eprintln!("the owner took all {} ports in {:?}", mine.len(), t.elapsed());
    drop(mine);
    drop(stdin);
    assert!(h.wait().unwrap().success());
}

#[test]
fn an_allowed_user_squats_no_more_than_its_share_on_live() {
    let c = cluster("squat", host_driver::cluster::ClusterBackend::Live);
    an_allowed_user_squats_no_more_than_its_share(&c);
}

#[test]
fn an_allowed_user_squats_no_more_than_its_share_on_qemu() {
    let c = cluster("squat", host_driver::cluster::ClusterBackend::Qemu);
    an_allowed_user_squats_no_more_than_its_share(&c);
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
