//! The `nic-cluster` binary as the device process: started as a child by
//! the library (`realtime::process`), in the background with `--detach`,
//! listed and stopped by name.

mod rt;

use std::process::Command;
use std::time::Duration;

use host_driver::cluster::{ClusterBackend, ClusterDir};
use nic_emu::realtime::process::{self, ClusterProcess};
use nic_emu::realtime::RtConfig;

const BIN: &str = env!("CARGO_BIN_EXE_nic-cluster");

#[test]
fn a_child_device_process_serves_a_cluster_until_stopped() {
    let cfg = RtConfig::new(&rt::cluster_path("child"), ClusterBackend::Live, 2);
    let p = ClusterProcess::spawn(BIN.as_ref(), &cfg, Duration::from_secs(30)).unwrap();
    let d =
        process::wait_published(&p.path().to_string_lossy(), None, Duration::from_secs(5)).unwrap();
    assert_eq!(d.manifest().pid, p.pid());
    rt::pingpong(p.path(), (0, 1), (1, 1), 8, 20);
    let path = p.path().to_path_buf();
    let status = p.stop().unwrap();
    assert!(status.success(), "{status}");
    assert!(!path.exists(), "SIGTERM removes the cluster");
}

#[test]
fn a_detached_cluster_is_listed_and_stopped_by_name() {
    let base = std::path::PathBuf::from(rt::cluster_path("base"));
    let run = |args: &[&str]| {
        let o = Command::new(BIN).env("NIC_CLUSTER_DIR", &base).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}:\n{}", rt::text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = run(&["run", "--name", "bg", "--nodes", "2", "--detach"]);
    assert!(out.contains("nic-cluster: ready"), "{out}");
    let log = base.join("bg").join("nic-cluster.log");
    assert!(log.exists(), "--detach writes the device process's output to {}", log.display());
    let d = ClusterDir::open_path(&base.join("bg")).unwrap();
    assert!(d.device_alive());
    let list = run(&["list"]);
    assert!(list.contains("bg") && list.contains("running running"), "{list}");
    run(&["stop", "--name", "bg"]);
    assert!(!base.join("bg").join("cluster.toml").exists());
    assert!(!log.exists(), "a clean stop removes the cluster directory with its log");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_cluster_whose_device_process_died_is_listed_dead_and_stop_removes_it() {
    let base = std::path::PathBuf::from(rt::cluster_path("dead"));
    let run = |args: &[&str]| {
        let o = Command::new(BIN).env("NIC_CLUSTER_DIR", &base).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}:\n{}", rt::text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    run(&["run", "--name", "gone", "--nodes", "2", "--detach"]);
    let d = ClusterDir::open_path(&base.join("gone")).unwrap();
    let pid = d.manifest().pid;
    rt::kill_pid(pid);
    let t = std::time::Instant::now();
    while d.device_alive() {
        assert!(t.elapsed() < Duration::from_secs(5), "pid {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
    let list = run(&["list"]);
    assert!(list.lines().any(|l| l.starts_with("gone") && l.contains("dead")), "{list}");
    let out = run(&["stop", "--name", "gone"]);
    assert!(out.contains("was not running") && out.contains("removed its directory"), "{out}");
    assert!(!base.join("gone").exists(), "stop removes a dead cluster's directory");
    assert!(!run(&["list"]).contains("gone"));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_wait_on_a_cluster_whose_device_process_is_killed_fails_with_nic_down_at_once() {
    let base = std::path::PathBuf::from(rt::cluster_path("kill"));
    let o = Command::new(BIN)
        .env("NIC_CLUSTER_DIR", &base)
        .args(["run", "--name", "k", "--nodes", "2", "--detach"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", rt::text(&o));
    let d = ClusterDir::open_path(&base.join("k")).unwrap();
    let pid = d.manifest().pid;
    let took = rt::wait_then_kill(d.path(), 1, || rt::kill_pid(pid));
    assert!(took < Duration::from_millis(100), "NicDown {took:?} after the kill");
    let _ = std::fs::remove_dir_all(&base);
}

/// The device process's messages reach its stderr while it runs (one line
/// each, not held back until it stops): a reflash of node 0 is logged,
/// and the line is read while the process still serves the cluster. With
/// --stats it prints each NIC's counters in words when it stops.
#[test]
fn a_device_process_logs_a_reset_on_stderr_as_it_happens() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;

    let path = rt::cluster_path("log");
    let mut child = Command::new(BIN)
        .args(["run", "--dir", &path, "--nodes", "1", "--foreground", "--stats"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(&str, String)>();
    let pipes: [(&str, Box<dyn std::io::Read + Send>); 2] = [
        ("stdout", Box::new(child.stdout.take().unwrap())),
        ("stderr", Box::new(child.stderr.take().unwrap())),
    ];
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|(which, r)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send((which, line));
                }
            })
        })
        .collect();
    drop(tx);
    let wait_for = |which: &str, want: &str, seen: &mut Vec<String>| {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok((w, line)) = rx.recv_timeout(Duration::from_millis(100)) {
                seen.push(format!("{w}: {line}"));
                if w == which && line.contains(want) {
                    return;
                }
            }
        }
        panic!("no {which} line with `{want}` within 20 s; seen:\n{}", seen.join("\n"));
    };
    let mut seen = Vec::new();
    wait_for("stdout", process::READY_PREFIX, &mut seen);
    // A new flash file: the device process resets the NIC and says so.
    let flash = ClusterDir::open_path(path.as_ref()).unwrap().flash_path(0);
    std::fs::write(&flash, b"not an image: the live backend runs the native MCP").unwrap();
    wait_for("stderr", "node 0: flash changed: resetting the NIC", &mut seen);
    assert!(child.try_wait().unwrap().is_none(), "the line came while the process runs");
    process::request_stop(child.id()).unwrap();
    // --stats: each NIC's counters in words as it stops (the reset counted).
    wait_for("stderr", "node 0: firmware running, ", &mut seen);
    let stats = seen.last().unwrap().clone();
    assert!(stats.contains(" polls, 1 resets; MCP: "), "{stats}");
    assert!(!stats.contains('{') && !stats.contains("Work"), "Rust Debug text: {stats}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}; seen:\n{}", seen.join("\n"));
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn a_detached_start_that_fails_says_why_and_leaves_no_log() {
    let base = std::path::PathBuf::from(rt::cluster_path("refused"));
    let run = |args: &[&str]| {
        Command::new(BIN).env("NIC_CLUSTER_DIR", &base).args(args).output().unwrap()
    };
    let o = run(&["run", "--name", "big", "--nodes", "5000", "--detach"]);
    assert_eq!(o.status.code(), Some(1), "{}", rt::text(&o));
    assert!(rt::text(&o).contains("5000 is more than the ABI's 1024"), "{}", rt::text(&o));
    assert!(
        !base.join("big").exists(),
        "the error was said: the directory made for it, log and all, is not kept"
    );
    // Counts and times that cannot work are usage errors (exit 2).
    for (opt, val) in [("--threads", "0"), ("--boot-timeout", "0"), ("--boot-timeout", "inf")] {
        let o = run(&["run", "--name", "u", "--nodes", "2", opt, val]);
        assert_eq!(o.status.code(), Some(2), "{opt} {val}: {}", rt::text(&o));
        assert!(rt::text(&o).contains(opt), "{}", rt::text(&o));
    }
    let _ = std::fs::remove_dir_all(&base);
}
