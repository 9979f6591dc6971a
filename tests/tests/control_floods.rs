//! Floods of the control sockets, as a hostile or careless user would
//! send them (the `holder` example, in processes of their own): what the
//! device process spends on them must stay bounded, and it must go on
//! answering.
//!
//! - writes: eight processes, each holding a port, send requests of 4096
//!   empty writes (each reply names 16 refusals and counts the rest), one
//!   of 50,000 writes (refused whole) and a frame past the size limit;
//! - connections: 20,000 connections of a user the cluster does not allow
//!   (each refused and counted, a few noted);
//! - descriptors: the device process out of file descriptors while a
//!   program holds connections open: its acceptor waits instead of
//!   spinning, and serves again once they close.
//!
//! The device process is this test process (one test in this binary, so
//! its memory is the device's): its anonymous memory after the floods is
//! within 20 MB of before. On live and qemu. Needs root (the refused
//! connections come from another user).

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{RtCluster, RtConfig};

/// A user the clusters do not allow.
const STRANGER: u32 = 65533;

/// This process's anonymous resident memory (kB): the heap, thread stacks.
fn rss_anon_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .expect("RssAnon in /proc/self/status")
}

/// The stat files of this process's threads named `name`, open (so that
/// reading them needs no descriptor when the process has none left).
fn thread_stats(name: &str) -> Vec<std::fs::File> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            out.push(std::fs::File::open(e.path().join("stat")).unwrap());
        }
    }
    out
}

/// CPU time (s) of the threads whose stat files these are.
fn thread_cpu(stats: &[std::fs::File]) -> f64 {
    use std::os::unix::fs::FileExt;
    let mut total = 0u64;
    for f in stats {
        let mut b = [0u8; 1024];
        let n = f.read_at(&mut b, 0).unwrap_or(0);
        let stat = String::from_utf8_lossy(&b[..n]);
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        // After the command: the state, then numbers; utime and stime are
        // stat's fields 14 and 15.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += num(11) + num(12);
    }
    total as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf with a valid name.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

fn holder(c: &RtCluster, args: &[&str], uid: Option<u32>) -> std::process::Child {
    let mut cmd = Command::new(holder_bin());
    cmd.arg(c.path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(u) = uid {
        cmd.uid(u).gid(u);
    }
    cmd.spawn().expect("run the holder")
}

/// The `holder` example where another user can run it.
fn holder_bin() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let to = std::env::temp_dir().join(format!("nic-holder-flood-{}", std::process::id()));
        std::fs::copy(rt::example_bin("cluster-tests", "holder"), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    })
    .clone()
}

fn floods(backend: ClusterBackend) {
    let mut cfg = RtConfig::new(&rt::cluster_path("flood"), backend, 2);
    // Another user is allowed (so that the stranger can find the control
    // socket at all, and be refused there).
    cfg.allow_uids = vec![STRANGER + 1];
    if backend == ClusterBackend::Qemu {
        rt::require_qemu();
        cfg.image = Some(rt::firmware_image());
    }
    let c = rt::start(cfg);
    // Warm up: one of each flood, so that what the first costs once (a
    // thread's stack, the allocator's arenas) is in "before".
    let run = |args: &[&str], uid: Option<u32>| {
        let out = holder(&c, args, uid).wait_with_output().unwrap();
        assert!(out.status.success(), "{}", rt::text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["0", "0", "write-flood"], None);
    let before = rss_anon_kb();
    let t = Instant::now();
    let kids: Vec<_> =
        (0..8).map(|p| holder(&c, &["0", &p.to_string(), "write-flood"], None)).collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", rt::text(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("a request of 50000 writes (at most 4096)"), "{said}");
        assert!(said.contains("frame of 2097152 bytes"), "{said}");
    }
    let writes = rss_anon_kb();
    eprintln!(
        "{backend}: 8 write floods in {:?}: anonymous memory {before} -> {writes} kB",
        t.elapsed()
    );
    // Connections of a user the cluster does not allow.
    let (_, _, refused_before, _, _) = c.control_counters();
    let t = Instant::now();
    let said = run(&["0", "20", "connect-flood"], Some(STRANGER));
    assert!(said.contains("connections: 20000 answered"), "{said}");
    let (_, _, refused, _, _) = c.control_counters();
    assert_eq!(refused - refused_before, 20_000, "every refused connection counted");
    let noted = c
        .notes()
        .iter()
        .filter(|n| n.contains(&format!("refused a process of uid {STRANGER}")))
        .count();
    assert!((1..=8).contains(&noted), "{noted} refused connections noted one by one");
    let conns = rss_anon_kb();
    eprintln!(
        "{backend}: 20,000 refused connections in {:?}: anonymous memory {writes} -> {conns} kB, \
         {noted} noted",
        t.elapsed()
    );
    assert!(
        conns < before + 20 * 1024,
        "the device's memory grew from {before} to {conns} kB over the floods"
    );
    // Out of descriptors: connections held open past the process's limit.
    let mut h = holder(&c, &["0", "60", "hold-conns"], None);
    let stats = thread_stats("nic-rt-control");
    assert!(!stats.is_empty(), "no control thread found");
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let mut saved = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid struct; the soft limit is
    // set back below.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut saved), 0);
        let low = libc::rlimit { rlim_cur: open_now + 20, rlim_max: saved.rlim_max };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &low), 0);
    }
    let mut stdin = h.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    let mut out = BufReader::new(h.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (cpu0, t0) = (thread_cpu(&stats), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let busy = (thread_cpu(&stats) - cpu0) / t0.elapsed().as_secs_f64();
    let (_, over) = c.control_limits();
    drop(stdin);
    let _ = h.wait();
    // SAFETY: as above: the limit as it was.
    unsafe {
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &saved), 0);
    }
    eprintln!(
        "{backend}: out of descriptors ({line:?}): the acceptor used {:.1}% of a core; {over} \
         accepts put off",
        busy * 100.0
    );
    assert!(over >= 1, "the device never ran out of descriptors: {line}");
    assert!(busy < 0.2, "the acceptor spun at {:.0}% of a core", busy * 100.0);
    // And it serves again.
    let t = Instant::now();
    loop {
        match host_driver::LiveBackend::attach(&c.path().to_string_lossy(), 0, 1) {
            Ok(_) => break,
            Err(e) => assert!(t.elapsed() < Duration::from_secs(10), "after the flood: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rt::pingpong(c.path(), (0, 2), (1, 2), 64, 20);
}

#[test]
fn control_socket_floods_cost_the_device_a_bounded_amount_on_live_and_qemu() {
    assert!(
        rt::euid_is_root(),
        "this test connects as another user (uid {STRANGER}): run `cargo xtask test` as root (CI \
         does)"
    );
    floods(ClusterBackend::Live);
    floods(ClusterBackend::Qemu);
}
