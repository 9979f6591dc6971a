//! Helpers of the real-time backend tests (`realtime_*.rs`): unique
//! cluster directories, the programs the tests run as separate host
//! processes (host-programs' `pingpong` and `stream`, this crate's
//! `rt_alltoall` example, built with cargo on first use into this test's
//! own target directory), the firmware image (built with cargo for the
//! riscv target), and QEMU (a missing one fails the test, naming it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, RtCluster, RtConfig};

pub const FW_TARGET: &str = "riscv64imac-unknown-none-elf";

/// A fresh cluster directory path for test `tag` (never a name under the
/// shared base, so tests need no environment variable).
pub fn cluster_path(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir()
        .join("nic-emu-rt-tests")
        .join(format!("{tag}-{}-{n}", std::process::id()))
        .to_string_lossy()
        .into_owned()
}

/// The cargo profile directory this test runs from (`target/<profile>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps").to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string())
}

/// The cargo flags that build in this test's profile.
pub fn profile_args() -> Vec<String> {
    match profile_dir().file_name().and_then(|n| n.to_str()) {
        Some("release") => vec!["--release".into()],
        Some("debug") | None => vec![],
        Some(p) => vec!["--profile".into(), p.into()],
    }
}

/// The workspace root: the first directory above the including crate's
/// that holds the firmware (crates include this file from different
/// depths).
fn workspace() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = here.ancestors().find(|d| d.join("firmware/image").is_dir());
    root.expect("the workspace root (the directory with firmware/image)").to_path_buf()
}

/// Serialises cargo invocations of this test process.
static CARGO_LOCK: Mutex<()> = Mutex::new(());

fn cargo_build(args: &[&str], what: &str) {
    let _g = CARGO_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let target = profile_dir().parent().expect("target dir").to_path_buf();
    let out = Command::new(cargo())
        .current_dir(workspace())
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--quiet"])
        .args(profile_args())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {what}: {e}"));
    assert!(
        out.status.success(),
        "building {what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A host-programs binary (`pingpong`, `stream`).
pub fn host_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT
        .get_or_init(|| cargo_build(&["-p", "host-programs", "--bins"], "host-programs' binaries"));
    profile_dir().join(name)
}

/// The `nic-cluster` binary, built once into this test's target
/// directory (`target/<profile>/nic-cluster`, where
/// `process::find_binary` looks): a cluster with a bandwidth manager runs
/// its master as `nic-cluster brm`.
pub fn nic_cluster_bin() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo_build(&["-p", "nic-emu", "--bin", "nic-cluster"], "the nic-cluster binary")
    });
    profile_dir().join("nic-cluster")
}

/// This crate's `rt_alltoall` example.
pub fn alltoall_bin() -> PathBuf {
    example_bin("nic-emu", "rt_alltoall")
}

/// Example `name` of workspace package `package`, built once.
pub fn example_bin(package: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let key = format!("{package}/{name}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&key) {
        cargo_build(&["-p", package, "--example", name], &format!("the {name} example"));
        built.push(key);
    }
    profile_dir().join("examples").join(name)
}

/// Is this process's effective uid root's? (The third field of
/// /proc/self/status's Uid line.) Tests that run programs as another
/// user, or mount a file system, need it.
pub fn euid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// QEMU, or a failed test that says it is missing.
pub fn require_qemu() {
    assert!(
        qemu::find_program(qemu::QEMU_PROGRAM).is_some(),
        "{} is not installed (not found on PATH): the qemu backend tests need it \
         (Debian/Ubuntu: apt-get install qemu-system-misc; `cargo xtask test` and `cargo xtask demo` install it as root)",
        qemu::QEMU_PROGRAM
    );
}

/// The bare-metal MCP image, built once with cargo for the riscv target.
/// Fails clearly when the target is not installed.
pub fn firmware_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if let Ok(o) = Command::new("rustup").args(["target", "list", "--installed"]).output() {
                let list = String::from_utf8_lossy(&o.stdout);
                assert!(
                    !o.status.success() || list.lines().any(|l| l.trim() == FW_TARGET),
                    "the Rust target {FW_TARGET} is not installed: the qemu backend tests build \
                     the firmware image for it (rustup target add {FW_TARGET})"
                );
            }
            let _g = CARGO_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            let target = profile_dir().parent().expect("target dir").join("fw");
            let out = Command::new(cargo())
                .current_dir(workspace().join("firmware/image"))
                .env("CARGO_TARGET_DIR", &target)
                .env("DEFMT_LOG", "info")
                .args(["build", "--quiet", "--release"])
                .output()
                .unwrap_or_else(|e| panic!("cannot run cargo to build the firmware image: {e}"));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "building the firmware image (firmware/image, target {FW_TARGET}) failed{}:\n{err}",
                if err.contains("target may not be installed")
                    || err.contains("can't find crate for `core`")
                {
                    format!(" because the target is not installed (rustup target add {FW_TARGET})")
                } else {
                    String::new()
                }
            );
            target.join(FW_TARGET).join("release").join("mcp-image")
        })
        .clone()
}

/// A live cluster of `nodes` at a fresh path, running.
pub fn live(tag: &str, nodes: usize) -> RtCluster {
    start(RtConfig::new(&cluster_path(tag), ClusterBackend::Live, nodes))
}

/// A qemu cluster of `nodes` at a fresh path, running.
pub fn qemu_cluster(tag: &str, nodes: usize) -> RtCluster {
    require_qemu();
    let mut cfg = RtConfig::new(&cluster_path(tag), ClusterBackend::Qemu, nodes);
    cfg.image = Some(firmware_image());
    start(cfg)
}

pub fn start(cfg: RtConfig) -> RtCluster {
    let c = RtCluster::start(cfg).unwrap_or_else(|e| panic!("cluster start: {e}"));
    c.wait_running(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    c
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn a host process")
}

/// Wait for `child` at most `timeout`; kill it after that.
pub fn finish(mut child: Child, timeout: Duration) -> Output {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let o = child.wait_with_output().expect("output");
    panic!("a host process did not finish within {timeout:?}:\n{}", text(&o));
}

/// Two `pingpong` processes: pong on (node b, port pb), ping on (node a,
/// port pa); both content-check every message. Returns the ping's JSON.
pub fn pingpong(
    cluster: &Path,
    a: (u16, u8),
    b: (u16, u8),
    size: u32,
    count: u64,
) -> serde_json::Value {
    let bin = host_bin("pingpong");
    let path = cluster.to_string_lossy().into_owned();
    let common = |c: &mut Command| {
        c.args(["--cluster", &path, "--size", &size.to_string(), "--count", &count.to_string()])
            .args(["--timeout", "20"]);
    };
    let mut pong = Command::new(&bin);
    common(&mut pong);
    pong.args(["--node", &b.0.to_string(), "--port", &b.1.to_string()]).args([
        "--peer",
        &a.0.to_string(),
        "--peer-port",
        &a.1.to_string(),
        "--role",
        "pong",
    ]);
    let mut ping = Command::new(&bin);
    common(&mut ping);
    ping.args(["--node", &a.0.to_string(), "--port", &a.1.to_string()])
        .args(["--peer", &b.0.to_string(), "--peer-port", &b.1.to_string(), "--role", "ping"])
        .arg("--json");
    let pong = spawn(pong);
    let ping = spawn(ping);
    let ping = finish(ping, Duration::from_secs(60));
    let pong = finish(pong, Duration::from_secs(60));
    both_succeed(cluster, [("ping", &ping), ("pong", &pong)]);
    let v: serde_json::Value =
        serde_json::from_slice(&ping.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&ping)));
    assert_eq!(v["one_way"]["samples"], count, "{v}");
    v
}

/// A `stream` receiver on b and sender on a; every byte checked. Returns
/// the receiver's output.
pub fn stream(cluster: &Path, a: (u16, u8), b: (u16, u8), size: u32, count: u64) -> Output {
    let (send, recv) = stream_spawn(cluster, a, b, size, count, &[]);
    let send = finish(send, Duration::from_secs(60));
    let recv = finish(recv, Duration::from_secs(60));
    both_succeed(cluster, [("sender", &send), ("receiver", &recv)]);
    recv
}

/// Start a `stream` pair (sender on a, receiver on b) without waiting.
pub fn stream_spawn(
    cluster: &Path,
    a: (u16, u8),
    b: (u16, u8),
    size: u32,
    count: u64,
    extra: &[&str],
) -> (Child, Child) {
    let bin = host_bin("stream");
    let path = cluster.to_string_lossy().into_owned();
    let mk = |me: (u16, u8), peer: (u16, u8), role: &str| {
        let mut c = Command::new(&bin);
        c.args(["--cluster", &path, "--size", &size.to_string(), "--count", &count.to_string()])
            .args(["--timeout", "20", "--role", role])
            .args(["--node", &me.0.to_string(), "--port", &me.1.to_string()])
            .args(["--peer", &peer.0.to_string(), "--peer-port", &peer.1.to_string()])
            .args(extra);
        c
    };
    let recv = spawn(mk(b, a, "recv"));
    let send = spawn(mk(a, b, "send"));
    (send, recv)
}

/// One `rt_alltoall` process per node, `count` messages of `size` to
/// every other node; all must succeed.
pub fn alltoall(cluster: &Path, nodes: u16, port: u8, size: u32, count: u32) -> Vec<String> {
    let bin = alltoall_bin();
    let barrier = PathBuf::from(cluster_path("barrier"));
    let kids: Vec<Child> = (0..nodes)
        .map(|n| {
            let mut c = Command::new(&bin);
            c.arg("--cluster")
                .arg(cluster)
                .args(["--node", &n.to_string(), "--nodes", &nodes.to_string()])
                .args(["--port", &port.to_string(), "--size", &size.to_string()])
                .args(["--count", &count.to_string(), "--timeout", "30"])
                .arg("--barrier")
                .arg(&barrier);
            spawn(c)
        })
        .collect();
    let outs: Vec<Output> = kids.into_iter().map(|k| finish(k, Duration::from_secs(90))).collect();
    let _ = std::fs::remove_dir_all(&barrier);
    let mut lines = Vec::new();
    if outs.iter().any(|o| !o.status.success()) {
        let each: Vec<String> =
            outs.iter().enumerate().map(|(n, o)| format!("node {n}: {}", text(o))).collect();
        panic!("{}\n{}", each.join("\n"), cluster_state(cluster));
    }
    for o in &outs {
        lines.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    lines
}

/// Both processes succeeded; else fail with what each printed and the
/// cluster's state (when one end fails, the other's error and the NICs'
/// counters usually say why).
pub fn both_succeed(cluster: &Path, outs: [(&str, &Output); 2]) {
    if outs.iter().all(|(_, o)| o.status.success()) {
        return;
    }
    let each: Vec<String> = outs.iter().map(|(who, o)| format!("{who}: {}", text(o))).collect();
    panic!("{}\n{}", each.join("\n"), cluster_state(cluster));
}

/// Each NIC's firmware status and non-zero firmware counters, and the
/// end of each guest's qemu.log (under qemu).
pub fn cluster_state(cluster: &Path) -> String {
    use host_driver::cluster::ClusterDir;
    use nic_abi::regs::{self, reg};
    use nic_abi::stats::{stat_offset, ALL_STATS};
    let Ok(d) = ClusterDir::open_path(cluster) else {
        return format!("cluster {} is gone", cluster.display());
    };
    let mut out = String::from("cluster state:");
    for node in 0..d.manifest().nodes {
        let Ok(s) = d.map_sram(node) else { continue };
        let status = s.load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0);
        out += &format!("\n  node {node}: FW_STATUS {status:#x}:");
        // The rings between the firmware and the engines: which side is
        // behind says whether the guest or the device model stalled.
        for (name, r) in [
            ("HDMA", [regs::HDMA_PROD, regs::HDMA_DONE]),
            ("TXDMA", [regs::TXDMA_PROD, regs::TXDMA_DONE]),
            ("RXFREE", [regs::RXFREE_PROD, regs::RXFREE_CONS]),
            ("RXDONE", [regs::RXDONE_PROD, regs::RXDONE_CONS]),
        ] {
            let v = r.map(|x| s.load_u32(reg(x) as u64).unwrap_or(0));
            out += &format!(" {name} {}/{}", v[0], v[1]);
        }
        out += &format!(" RTC {}", s.load_u64(reg(regs::RTC) as u64).unwrap_or(0));
        for st in ALL_STATS {
            let v = s.load_u64(stat_offset(st) as u64).unwrap_or(0);
            if v != 0 {
                out += &format!(" {st:?}={v}");
            }
        }
        let qlog = d.node_dir(node).join("qemu.log");
        if let Ok(t) = std::fs::read_to_string(&qlog) {
            let lines: Vec<&str> = t.lines().collect();
            for l in &lines[lines.len().saturating_sub(5)..] {
                out += &format!("\n    qemu.log: {l}");
            }
        }
    }
    out
}

/// SIGKILL process `pid`.
pub fn kill_pid(pid: u32) {
    let st = Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill -KILL {pid}");
}

/// Wait on port 3 of `cluster` node `node` in another thread; `kill` the
/// NIC; the wait must fail with NicDown. Returns how long after the kill
/// it failed.
pub fn wait_then_kill(cluster: &Path, node: u16, kill: impl FnOnce()) -> Duration {
    use host_driver::{DriverError, LiveBackend, Nic, PortOptions};
    let be = LiveBackend::attach(&cluster.to_string_lossy(), node, 3).unwrap();
    let nic = Nic::open(be).unwrap();
    let mut port = nic.open_port(3, PortOptions::default()).unwrap();
    port.wait(Duration::from_secs(10)).unwrap(); // PortOpened
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = port.wait(Duration::from_secs(30));
        let _ = tx.send(Instant::now());
        r
    });
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    kill();
    let done = rx.recv_timeout(Duration::from_secs(10)).expect("the wait returned");
    let r = waiter.join().unwrap();
    assert!(matches!(r, Err(DriverError::NicDown { node: n, .. }) if n == node), "{r:?}");
    println!("NicDown after {:?}: {}", done - t, r.unwrap_err());
    done - t
}

/// Cut node 1's `sram` and `host` files to one page while a
/// stream of `count` 16 KiB messages between nodes 0 and 2 runs (every
/// byte checked; it must still run when the files are cut): the device
/// process lives on (the mappings' SIGBUS guard and the supervisor set the
/// sizes back), the log says so, node 1 is reset and works
/// again afterwards, and no other node is reset.
pub fn cut_node_files(c: &RtCluster, count: u64) {
    let (mut send, recv) = stream_spawn(c.path(), (0, 3), (2, 3), 16384, count, &[]);
    let files = [c.dir().sram_path(1), c.dir().host_path(1)];
    let sizes: Vec<u64> = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).collect();
    std::thread::sleep(Duration::from_millis(100));
    assert!(send.try_wait().unwrap().is_none(), "the stream ended too soon: give it more messages");
    for path in &files {
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(4096).unwrap();
    }
    let t = Instant::now();
    while c.nic_stats(1).counters.resets == 0 {
        assert!(
            // (The supervisor looks every 50 ms; a loaded 2-core machine
            // has taken over 10 s to get the reset through.)
            t.elapsed() < Duration::from_secs(30),
            "no reset after node 1's files were cut: {:?}",
            c.notes()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // (Under qemu the guest died of the cut and is being started again.)
    let t = Instant::now();
    while c.fw_status().iter().any(|&s| s != nic_abi::regs::FW_RUNNING) {
        assert!(t.elapsed() < Duration::from_secs(30), "node 1 did not come back: {:?}", c.notes());
        std::thread::sleep(Duration::from_millis(10));
    }
    let send = finish(send, Duration::from_secs(60));
    let recv = finish(recv, Duration::from_secs(60));
    both_succeed(c.path(), [("sender", &send), ("receiver", &recv)]);
    for (path, size) in files.iter().zip(sizes) {
        assert_eq!(std::fs::metadata(path).unwrap().len(), size, "{} set back", path.display());
    }
    let notes = c.notes().join("\n");
    for what in ["sram", "host"] {
        assert!(notes.contains(&format!("node 1: its {what} file")), "nothing logged:\n{notes}");
    }
    pingpong(c.path(), (0, 1), (1, 1), 8, 50);
    assert_eq!((c.nic_stats(0).counters.resets, c.nic_stats(2).counters.resets), (0, 0));
}
