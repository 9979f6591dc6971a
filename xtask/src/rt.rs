//! What the real-time commands (`run`, `demo`, `gdb`, `bench`'s real-time
//! section, `sim --backend live|qemu`) share: the backend a command asked
//! for, starting a cluster served by this process
//! (`nic_emu::realtime::RtCluster`) and saying where its files are,
//! installing QEMU, and running the host programs (host-programs'
//! `pingpong` and `stream`) as separate processes, as a user's would, with
//! their figures read from their JSON lines. Each command lives in a file of
//! its own (run.rs, demo.rs, gdb.rs, bench_rt.rs) and touches clusters only
//! through these.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, RtCluster, RtConfig};

use crate::fw;

/// Which backend a command asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Sim,
    Live,
    Qemu,
}

/// Install signal flags for Ctrl-C / SIGTERM (so this process outlives
/// them long enough to stop its cluster and remove its files).
pub fn stop_flag() -> crate::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    Ok(stop)
}

/// Is QEMU here? If not: install it as root (apt-get), else say how.
/// Returns whether it is usable now.
pub fn ensure_qemu() -> crate::Result<bool> {
    if qemu::find_program(qemu::QEMU_PROGRAM).is_some() {
        return Ok(true);
    }
    println!("{} is not installed", qemu::QEMU_PROGRAM);
    if !fw::apt_install(&["qemu-system-misc"])? {
        return Ok(false);
    }
    Ok(qemu::find_program(qemu::QEMU_PROGRAM).is_some())
}

/// Start a cluster and wait until every NIC's firmware runs.
pub fn start(cfg: RtConfig) -> crate::Result<RtCluster> {
    let qemu = cfg.backend == ClusterBackend::Qemu;
    let c = RtCluster::start(cfg).map_err(|e| format!("starting the cluster: {e}"))?;
    c.wait_running(Duration::from_secs(if qemu { 60 } else { 20 }))
        .map_err(|e| format!("booting the cluster: {e}"))?;
    Ok(c)
}

/// The CPU time node `node`'s QEMU uses per wall second while its NIC
/// is idle: after 500 ms to settle, over 2 s.
pub fn idle_cpu(c: &RtCluster, node: usize) -> crate::Result<f64> {
    std::thread::sleep(Duration::from_millis(500));
    let pid = c.qemu_pid(node).ok_or("no QEMU pid")?;
    let c0 = qemu::process_cpu_seconds(pid).ok_or("cannot read QEMU's CPU time")?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let c1 = qemu::process_cpu_seconds(pid).ok_or("cannot read QEMU's CPU time")?;
    Ok((c1 - c0) / t0.elapsed().as_secs_f64())
}

/// Print where the cluster's files are: its directory, manifest, each
/// node's files and the bandwidth manager's socket.
pub fn print_where(c: &RtCluster) {
    let m = c.manifest();
    println!(
        "cluster `{}`: {} backend, {} nodes, profile {}",
        m.name, m.backend, m.nodes, m.profile
    );
    println!("  directory:  {}", c.path().display());
    println!("  manifest:   {}", c.dir().manifest_path().display());
    for n in 0..c.nodes() {
        let d = c.dir().node_dir(n as u32);
        match c.qemu_pid(n) {
            Some(pid) => println!(
                "  node {n}:     {}  (control.sock, memory files, flash, console.log, qemu.log; \
                 QEMU pid {pid}{})",
                d.display(),
                m.gdb_port(n as u32).map_or(String::new(), |p| format!(", gdbstub 127.0.0.1:{p}"))
            ),
            None => println!(
                "  node {n}:     {}  (control.sock, memory files, port locks)",
                d.display()
            ),
        }
    }
    let users = &m.users;
    if !users.is_empty() {
        println!("  also for:   uid {users:?} (through the control sockets only)");
    }
    let brm = c.dir().brm_socket_path();
    if brm.exists() {
        println!("  BRM master: {}  (agents: node<N>/brm-agent.sock)", brm.display());
    }
}

/// A finished process's status and output, for an error message.
pub fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spawn(bin: &Path, args: &[String]) -> crate::Result<Child> {
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))
}

pub fn finish(mut child: Child, what: &str, timeout: Duration) -> crate::Result<Output> {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            let o = child.wait_with_output().map_err(|e| e.to_string())?;
            if !o.status.success() {
                return Err(format!("{what} failed: {}", text(&o)));
            }
            return Ok(o);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let o = child.wait_with_output().map_err(|e| e.to_string())?;
    Err(format!("{what} did not finish within {timeout:?}: {}", text(&o)))
}

/// The last JSON line a host program printed (`--json`).
pub fn json_line(o: &Output) -> crate::Result<serde_json::Value> {
    let s = String::from_utf8_lossy(&o.stdout);
    let line = s.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("{e}: {}", text(o)))
}

/// Ping-pong figures (one-way, us).
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub median_us: f64,
    pub min_us: f64,
    pub p99_us: f64,
}

/// The flags a `pingpong` or `stream` process takes: this end, the peer on
/// the same port, its role, the message size and count, JSON output, then
/// `extra`.
#[allow(clippy::too_many_arguments)]
fn endpoint_args(
    cluster: &Path,
    me: u16,
    peer: u16,
    port: u8,
    role: &str,
    size: u32,
    count: u64,
    extra: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--cluster",
        &cluster.to_string_lossy(),
        "--node",
        &me.to_string(),
        "--port",
        &port.to_string(),
        "--peer",
        &peer.to_string(),
        "--peer-port",
        &port.to_string(),
        "--role",
        role,
        "--size",
        &size.to_string(),
        "--count",
        &count.to_string(),
        "--timeout",
        "30",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Two `pingpong` processes (pong on node 1, ping on node 0, port
/// `port`); every message content-checked. `extra`: more flags for both.
pub fn pingpong(
    bin_dir: &Path,
    cluster: &Path,
    port: u8,
    size: u32,
    count: u64,
    extra: &[&str],
) -> crate::Result<Latency> {
    let bin = bin_dir.join("pingpong");
    let args = |me: u16, peer: u16, role: &str| {
        endpoint_args(cluster, me, peer, port, role, size, count, extra)
    };
    let pong = spawn(&bin, &args(1, 0, "pong"))?;
    let ping = spawn(&bin, &args(0, 1, "ping"))?;
    let ping = finish(ping, "pingpong (ping)", Duration::from_secs(120))?;
    finish(pong, "pingpong (pong)", Duration::from_secs(30))?;
    let v = json_line(&ping)?;
    let f = |k: &str| v["one_way_us"][k].as_f64().unwrap_or(f64::NAN);
    Ok(Latency { median_us: f("median"), min_us: f("min"), p99_us: f("p99") })
}

/// A `stream` pair (sender node 2 % nodes, receiver node 3 % nodes);
/// the receiver checks every byte and the order. Returns the receiver's
/// MB/s.
pub fn stream(
    bin_dir: &Path,
    cluster: &Path,
    nodes: usize,
    port: u8,
    size: u32,
    count: u64,
    extra: &[&str],
) -> crate::Result<f64> {
    let bin = bin_dir.join("stream");
    let (a, b) = if nodes >= 4 { (2u16, 3u16) } else { (0, 1) };
    let args = |me: u16, peer: u16, role: &str| {
        endpoint_args(cluster, me, peer, port, role, size, count, extra)
    };
    let recv = spawn(&bin, &args(b, a, "recv"))?;
    let send = spawn(&bin, &args(a, b, "send"))?;
    finish(send, "stream (sender)", Duration::from_secs(120))?;
    let r = finish(recv, "stream (receiver)", Duration::from_secs(30))?;
    let v = json_line(&r)?;
    v["mb_per_s"].as_f64().ok_or_else(|| format!("no mb_per_s in {v}"))
}
