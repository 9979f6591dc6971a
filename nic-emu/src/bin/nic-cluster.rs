//! `nic-cluster`: the device process of a live or qemu cluster.
//!
//! ```text
//! nic-cluster run --name demo --nodes 4 --backend live            # serves until Ctrl-C
//! nic-cluster run --name demo --nodes 2 --backend qemu --image target-fw/.../mcp-image
//! nic-cluster run --name dbg --nodes 2 --backend qemu --image ELF --halted-node 0 --gdb-port 1234
//! nic-cluster run --name demo --nodes 4 --backend live --detach   # returns once up
//! nic-cluster run --name demo --nodes 4 --profile lanai4-gm --brm   # with a bandwidth manager
//! nic-cluster run --name shared --nodes 2 --allow-uid 1001          # user 1001's programs too
//! nic-cluster run --dir /dev/shm/mine/c1 --nodes 2                 # a directory of your choice
//! nic-cluster stop --name demo
//! nic-cluster list
//! nic-cluster brm --cluster DIR --calibration FILE                 # (started by `run --brm`)
//! ```
//!
//! `run` creates the cluster directory (`--name`: one path component of
//! letters, digits, `-`, `_` and `.`, under $NIC_CLUSTER_DIR or
//! /dev/shm/nic-clusters; `--dir`: a path, new or a cluster directory of
//! this user's, never anything else), resets
//! every NIC, starts the firmware, publishes the manifest, prints where
//! the files are and `nic-cluster: ready <dir>`, then serves until
//! SIGINT/SIGTERM, when it stops the guests and removes the directory.
//! With `--detach` it starts itself in the background (own process group,
//! output in `<dir>/nic-cluster.log`, inside the cluster directory) and
//! returns once the cluster is up. `stop` signals the device process only
//! once it is checked to be the one the manifest names (its start time and
//! executable), and removes only a directory the tools made (its marker).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use host_brm::server::{self, BrmServer};
use host_brm::Calibration;
use host_driver::cluster::{self, ClusterBackend, ClusterDir, ClusterLocation, DeviceState};
use nic_abi::regs::{self, reg};
use nic_emu::cli::ClusterOpts;
use nic_emu::realtime::process::{self, READY_PREFIX};
use nic_emu::realtime::{Backoff, BrmSetup, Pacing, RtCluster, RtConfig, MASTER_READY};
use nic_emu::{Faults, Profile, Topology};

/// `eprintln!` that does not panic when stderr fails: a device process's
/// log may sit on the file system its cluster filled.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

#[derive(Parser)]
#[command(name = "nic-cluster", about = "The device process of a live or qemu NIC cluster")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a cluster and serve it until Ctrl-C (SIGINT) or SIGTERM.
    Run(Box<RunArgs>),
    /// Stop a running cluster (SIGTERM to its device process, once it is
    /// checked to be the one that started the cluster) and wait until it
    /// is gone; a cluster whose device process died has its directory
    /// removed.
    Stop(StopArgs),
    /// List the clusters under $NIC_CLUSTER_DIR (or /dev/shm/nic-clusters).
    List,
    /// The bandwidth resource manager's master for a running cluster
    /// (`run --brm` starts it): serves `<dir>/brm.sock` until SIGTERM or
    /// until the device process is gone.
    Brm(BrmArgs),
}

#[derive(clap::Args, Clone)]
#[command(group(clap::ArgGroup::new("place").required(true).args(["name", "dir"])))]
struct StopArgs {
    /// Cluster name (under $NIC_CLUSTER_DIR or /dev/shm/nic-clusters).
    #[arg(long, value_parser = nic_emu::cli::cluster_name)]
    name: Option<String>,
    /// Cluster directory.
    #[arg(long, value_parser = nic_emu::cli::cluster_dir)]
    dir: Option<String>,
    /// Seconds to wait.
    #[arg(long, default_value_t = 10.0, value_parser = nic_emu::cli::positive_secs)]
    timeout: f64,
}

impl StopArgs {
    fn location(&self) -> ClusterLocation {
        location(self.name.as_deref(), self.dir.as_deref())
    }
}

/// Where `--name` or `--dir` (both checked as they were parsed) put the
/// cluster.
fn location(name: Option<&str>, dir: Option<&str>) -> ClusterLocation {
    match (name, dir) {
        (_, Some(d)) => ClusterLocation::Dir(PathBuf::from(d)),
        (Some(n), None) => ClusterLocation::Name(n.to_string()),
        (None, None) => unreachable!("clap requires --name or --dir"),
    }
}

#[derive(clap::Args, Clone)]
struct BrmArgs {
    /// Cluster name or directory.
    #[arg(long)]
    cluster: String,
    /// The topology the cluster was started with.
    #[arg(long, default_value = "star")]
    topology: Topology,
    /// Ports per switch (the profile's `switch.ports`).
    #[arg(long, default_value_t = 16)]
    switch_ports: usize,
    /// The calibration file (`*.calibration.toml`).
    #[arg(long)]
    calibration: PathBuf,
}

#[derive(clap::Args, Clone)]
#[command(group(clap::ArgGroup::new("place").required(true).args(["name", "dir"])))]
struct RunArgs {
    /// Cluster name: one path component of letters, digits, `-`, `_` and
    /// `.`, at most 64 bytes; the cluster lives in `<base>/<name>`, `<base>`
    /// being $NIC_CLUSTER_DIR or /dev/shm/nic-clusters.
    #[arg(long, value_parser = nic_emu::cli::cluster_name)]
    name: Option<String>,
    /// Cluster directory: a new one, or a cluster directory of yours
    /// (holding the marker the tools write); anything else is refused
    /// untouched. Its last component is the cluster's name.
    #[arg(long, value_parser = nic_emu::cli::cluster_dir)]
    dir: Option<String>,
    #[arg(long, default_value_t = 2, value_parser = nic_emu::cli::at_least_one::<usize>)]
    nodes: usize,
    /// live (native MCP) or qemu (the riscv64 image under QEMU).
    #[arg(long, default_value = "live")]
    backend: ClusterBackend,
    /// Profile, topology, fault injection, --stats, --reliability (shared
    /// with `cargo xtask run`).
    #[command(flatten)]
    opts: ClusterOpts,
    /// Firmware image (ELF) flashed into every NIC (qemu).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Start this node's QEMU halted, waiting for gdb on its gdbstub.
    #[arg(long, value_parser = nic_emu::cli::unsigned::<usize>)]
    halted_node: Option<usize>,
    /// TCP port of the halted node's gdbstub (default: one the OS picks,
    /// printed and named in the manifest).
    #[arg(long, requires = "halted_node", value_parser = nic_emu::cli::unsigned::<u16>)]
    gdb_port: Option<u16>,
    /// Serve in this process until Ctrl-C (the default).
    #[arg(long, conflicts_with = "detach")]
    foreground: bool,
    /// Start the device process in the background and return once the
    /// cluster is up.
    #[arg(long)]
    detach: bool,
    /// Device threads to spread the NICs over (1: one thread runs all).
    #[arg(long, default_value_t = 1, value_parser = nic_emu::cli::at_least_one::<usize>)]
    threads: usize,
    /// CPUs the device threads run on (`1`, `2-3`; default: anywhere).
    /// Give host programs the other cores (their `--cpus`): a NIC with a
    /// processor of its own.
    #[arg(long)]
    cpus: Option<host_driver::affinity::CpuList>,
    /// qemu: CPUs the QEMU guests (the NICs' processors) run on (`0`,
    /// `2-3`; default: anywhere). On a small machine a core of their own,
    /// with the device threads and host programs on the others, answers
    /// fastest.
    #[arg(long)]
    guest_cpus: Option<host_driver::affinity::CpuList>,
    /// fast (as fast as possible) or link (paced at the link bandwidth).
    #[arg(long, default_value = "fast")]
    pacing: Pacing,
    /// SRAM bytes per NIC (default: the profile's; qemu: at least 8 MiB).
    #[arg(long, value_parser = nic_emu::cli::unsigned::<u64>)]
    sram_size: Option<u64>,
    /// Host memory bytes per node.
    #[arg(long, default_value_t = cluster::DEFAULT_HOST_SIZE, value_parser = nic_emu::cli::unsigned::<u64>)]
    host_size: u64,
    /// Override of the profile's send timeout (us).
    #[arg(long)]
    send_timeout_us: Option<f64>,
    /// The QEMU program.
    #[arg(long, default_value = nic_emu::realtime::qemu::QEMU_PROGRAM)]
    qemu: String,
    /// Never sleep while idle (lowest latency; one busy core per thread).
    #[arg(long)]
    busy: bool,
    /// Idle device thread: spin this long (us) after the last progress,
    #[arg(long, default_value_t = 2, value_parser = nic_emu::cli::unsigned::<u64>)]
    spin_us: u64,
    /// then yield the CPU until this long (us) after it,
    #[arg(long, default_value_t = 2000, value_parser = nic_emu::cli::unsigned::<u64>)]
    yield_us: u64,
    /// then sleep in naps of this length (us),
    #[arg(long, default_value_t = 100, value_parser = nic_emu::cli::unsigned::<u64>)]
    nap_us: u64,
    /// growing after 50 ms of idleness up to this (us).
    #[arg(long, default_value_t = 1000, value_parser = nic_emu::cli::unsigned::<u64>)]
    max_nap_us: u64,
    /// Seconds to wait for every NIC's firmware to run.
    #[arg(long, default_value_t = 30.0, value_parser = nic_emu::cli::positive_secs)]
    boot_timeout: f64,
    /// Run a bandwidth resource manager (agents in this process, the
    /// master as `nic-cluster brm`; programs use `BrmClient::connect`).
    #[arg(long)]
    brm: bool,
    /// The calibration the BRM decides with (default: the profile's
    /// stored one).
    #[arg(long, requires = "brm")]
    brm_calibration: Option<PathBuf>,
    /// Let programs of this user (a uid) use the cluster too, through
    /// each node's control socket only: they are handed their port's
    /// window and memory, never the cluster's files. Repeatable. (The
    /// cluster's own user and root always may.)
    #[arg(long = "allow-uid", value_name = "UID", value_parser = nic_emu::cli::uid)]
    allow_uid: Vec<u32>,
    /// How many ports of each node one allowed user's programs may hold at
    /// once (1 to 8; the cluster's own user and root hold any number), so
    /// that no allowed user can take every port of a node.
    #[arg(long = "ports-per-user", value_name = "N", default_value_t = nic_emu::realtime::DEFAULT_PORTS_PER_USER, value_parser = nic_emu::cli::ports_per_user)]
    ports_per_user: u8,
    /// Write every packet the fabric carries, from when the NICs run until
    /// the cluster stops, to this pcapng file (times on the cluster's
    /// clock); Wireshark reads it with tools/wireshark/nic_emu.lua.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
}

impl RunArgs {
    fn location(&self) -> ClusterLocation {
        location(self.name.as_deref(), self.dir.as_deref())
    }
}

fn config(a: &RunArgs) -> Result<RtConfig, String> {
    // A directory is a path (it holds a `/`: `--dir` made it absolute),
    // a name is not: `RtConfig::cluster` tells them apart so.
    let mut c = RtConfig::new(&a.location().to_string(), a.backend, a.nodes);
    c.allow_uids = a.allow_uid.clone();
    c.ports_per_user = a.ports_per_user;
    c.profile = Profile::load(&a.opts.profile).map_err(|e| e.to_string())?;
    if let Some(r) = a.opts.reliability {
        c.profile.firmware.reliability = r;
    }
    c.topology = a.opts.topology;
    c.image = a.image.clone();
    c.threads = a.threads;
    c.cpus = a.cpus.clone().map(|c| c.0).unwrap_or_default();
    c.guest_cpus = a.guest_cpus.clone().map(|c| c.0).unwrap_or_default();
    c.pacing = a.pacing;
    c.faults = Faults { drop: a.opts.drop, corrupt: a.opts.corrupt, duplicate: a.opts.duplicate };
    c.seed = a.opts.seed;
    c.sram_size = a.sram_size;
    c.host_size = a.host_size;
    c.send_timeout_us = a.send_timeout_us;
    c.qemu_program = a.qemu.clone();
    c.halted_node = a.halted_node.map(|n| (n, a.gdb_port.unwrap_or(0)));
    c.brm = a.brm.then(|| BrmSetup {
        calibration: a.brm_calibration.clone(),
        // This very program serves `brm`.
        program: std::env::current_exe().ok(),
    });
    c.log_to_stderr = true;
    c.backoff = if a.busy {
        Backoff::busy()
    } else {
        Backoff {
            spin: Duration::from_micros(a.spin_us),
            yield_until: Duration::from_micros(a.yield_us),
            nap: Duration::from_micros(a.nap_us),
            max_nap: Duration::from_micros(a.max_nap_us),
            ..Backoff::default()
        }
    };
    Ok(c)
}

fn secs(s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("{s}: not a duration in seconds"))
}

fn print_where(c: &mut RtCluster, a: &RunArgs) {
    let m = c.manifest();
    println!(
        "nic-cluster: cluster `{}` is up: {} backend, {} nodes, profile {}, topology {}",
        m.name, m.backend, m.nodes, m.profile, a.opts.topology
    );
    println!("  directory:  {}", c.path().display());
    println!("  manifest:   {}", c.dir().manifest_path().display());
    println!(
        "  per node:   node<N>/control.sock (host programs get their port there), sram ({} B) \
         with regs and port<P>.win, host ({} B) with port<P>.mem, port<P>.lock{}",
        m.sram_size,
        m.host_size,
        if m.backend == ClusterBackend::Qemu {
            ", flash, console.log (defmt frames), qemu.log"
        } else {
            ""
        }
    );
    for n in 0..c.nodes() {
        match c.qemu_pid(n) {
            Some(pid) => println!(
                "  node {n}:     {} (QEMU pid {pid}{})",
                c.dir().node_dir(n as u32).display(),
                c.manifest()
                    .gdb_port(n as u32)
                    .map_or(String::new(), |p| format!(", gdbstub 127.0.0.1:{p}"))
            ),
            None => println!("  node {n}:     {}", c.dir().node_dir(n as u32).display()),
        }
    }
    if a.brm {
        println!(
            "  bandwidth manager: {} (master pid {})",
            c.dir().brm_socket_path().display(),
            c.brm_pid().map_or("?".to_string(), |p| p.to_string())
        );
    }
    if let Some((node, port)) =
        a.halted_node.and_then(|n| Some((n, c.dir().manifest().gdb_port(n as u32)?)))
    {
        println!(
            "  node {node} is halted: attach gdb-multiarch with `target remote 127.0.0.1:{port}`"
        );
    }
    println!(
        "  device process: pid {}; stop with Ctrl-C or `nic-cluster stop {}`",
        std::process::id(),
        a.location().args().join(" ")
    );
}

fn run(a: &RunArgs) -> Result<(), String> {
    if a.detach {
        return detach(a);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in
        [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP]
    {
        // A second signal, while the first one's stop is under way, ends
        // the process at once (exit status 1); the first sets `stop`.
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop.clone()))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let cfg = config(a)?;
    let mut c = RtCluster::start(cfg).map_err(|e| e.to_string())?;
    match c.wait_running_or_stop(secs(a.boot_timeout)?, &stop) {
        Ok(true) => {}
        Ok(false) => {
            let _ = c.stop();
            return Err("stopped by a signal before every NIC's firmware ran".into());
        }
        Err(e) => {
            let _ = c.stop();
            return Err(e.to_string());
        }
    }
    if let Some(p) = &a.pcap {
        if let Err(e) = c.capture_to(p) {
            let _ = c.stop();
            return Err(format!("--pcap {}: {e}", p.display()));
        }
    }
    print_where(&mut c, a);
    println!("{READY_PREFIX} {}", c.path().display());
    c.serve_until(&stop);
    say!("nic-cluster: stopping `{}`", c.manifest().name);
    if let Some(p) = &a.pcap {
        match c.finish_capture() {
            Ok(n) => say!("nic-cluster: captured {n} packet records to {}", p.display()),
            Err(e) => say!("nic-cluster: --pcap {}: {e}", p.display()),
        }
    }
    if a.opts.stats {
        // Final counters: the threads stopped first.
        c.halt();
        for n in 0..c.nodes() {
            say!("{}", stats_line(&c.nic_stats(n)));
        }
    }
    c.stop().map_err(|e| e.to_string())
}

/// One NIC's counters in words (`--stats`, when the cluster stops).
fn stats_line(s: &nic_emu::realtime::RtNicStats) -> String {
    let (w, d, x) = (&s.counters.work, &s.counters.device, &s.drops);
    let state = match s.fw_status {
        regs::FW_RUNNING => "running",
        regs::FW_HALTED => "halted",
        _ => "booting",
    };
    format!(
        "node {}: firmware {state}, {} polls, {} resets; MCP: {} descriptors, {} packets sent, {} \
         received, {} DMA commands, {} events, {} timers; device: {} packets sent ({} B), {} \
         received ({} B), {} with a bad CRC, {} truncated, {} misrouted, {} lost while the NIC was \
         down, {} interrupts raised in its CPU, {} packets lent in place ({} of them copied out \
         untaken); fabric: {} dropped, {} corrupted, {} duplicated by fault injection, {} dropped \
         waiting for a busy link, {} for a bad route",
        s.node,
        s.counters.polls,
        s.counters.resets,
        w.descriptors,
        w.tx_packets,
        w.rx_packets,
        w.dma_cmds,
        w.events,
        w.timers,
        d.tx_packets,
        d.tx_bytes,
        d.rx_packets,
        d.rx_bytes,
        d.rx_crc_bad,
        d.rx_truncated,
        d.rx_misrouted,
        s.counters.down_drops,
        s.counters.irqs,
        s.counters.lent,
        s.counters.reclaimed,
        x.fault_drops,
        x.fault_corrupts,
        x.fault_dups,
        x.blocked_drops,
        x.bad_routes,
    )
}

/// Start `nic-cluster run ... --foreground` in the background and wait
/// for the cluster to come up. Its output goes to `nic-cluster.log` in
/// the cluster directory, which is checked first (new, or a cluster
/// directory of this user's that no live device process serves: a
/// refused start touches nothing of a running cluster's).
fn detach(a: &RunArgs) -> Result<(), String> {
    use std::io::{Read, Seek};
    use std::os::unix::process::CommandExt;
    let loc = a.location();
    let path = loc.path();
    if std::fs::symlink_metadata(&path).is_ok() {
        cluster::check_marked(&path).map_err(|e| e.to_string())?;
        if let Ok(d) = ClusterDir::open_path(&path) {
            if d.device_alive() {
                return Err(
                    cluster::ClusterError::Exists { path, pid: d.manifest().pid }.to_string()
                );
            }
        }
    }
    let made = cluster::claim_dir(&path, !a.allow_uid.is_empty()).map_err(|e| e.to_string())?;
    let log = path.join(cluster::DETACHED_LOG);
    // What the device process said if it fails to start; then the
    // directory this made goes (the log it holds was read first), or
    // the log alone from a directory that was there before.
    let give_up = |mut out: std::fs::File, why: String| -> String {
        let mut text = String::new();
        let _ = out.rewind().and_then(|_| out.read_to_string(&mut text));
        if made {
            let _ = cluster::remove_cluster_dir(&path);
        } else if cluster::check_marked(&path).is_ok() {
            let _ = std::fs::remove_file(&log);
        }
        format!("{why}:\n{text}")
    };
    let out =
        cluster::open_in_cluster(&path, cluster::DETACHED_LOG, true).map_err(|e| e.to_string())?;
    let (stdout, stderr) = match (out.try_clone(), out.try_clone()) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => return Err(give_up(out, format!("{}: {e}", log.display()))),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let args: Vec<String> = std::env::args().skip(1).filter(|x| x != "--detach").collect();
    let spawned = Command::new(exe)
        .args(args)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Err(give_up(out, format!("starting the device process: {e}"))),
    };
    let except = a.halted_node.map(|n| n as u32);
    let t = Instant::now();
    let timeout = secs(a.boot_timeout)?;
    let arg = loc.to_string();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            // Its output is the error: said here, the log is not kept.
            return Err(give_up(out, format!("the device process exited ({s})")));
        }
        match process::wait_published(&arg, except, Duration::from_millis(50)) {
            Ok(d) if d.manifest().pid == child.id() => break,
            _ if t.elapsed() > timeout => {
                let _ = child.kill();
                return Err(format!(
                    "the cluster did not come up within {timeout:?}; see {}",
                    log.display()
                ));
            }
            _ => {}
        }
    }
    println!("nic-cluster: cluster `{}` is up in the background", loc.cluster_name());
    println!("  directory:  {}", path.display());
    println!("  log:        {}", log.display());
    println!(
        "  device process: pid {}; stop with `nic-cluster stop {}`",
        child.id(),
        loc.args().join(" ")
    );
    println!("{READY_PREFIX} {}", path.display());
    Ok(())
}

/// The last `n` lines of the detached device process's log in `dir`, if
/// it has one (said before a dead cluster's directory goes).
fn log_tail(dir: &std::path::Path, n: usize) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(cluster::DETACHED_LOG)).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    (!lines.is_empty()).then(|| lines[lines.len().saturating_sub(n)..].join("\n"))
}

fn stop(a: &StopArgs) -> Result<(), String> {
    let loc = a.location();
    let name = loc.to_string();
    let d = ClusterDir::open_path(&loc.path()).map_err(|e| e.to_string())?;
    let pid = d.manifest().pid;
    if d.manifest().device_state() == DeviceState::Gone {
        // It died (killed, or crashed): nothing to stop, only its files
        // (if they are a cluster directory of this user's).
        let path = d.path().to_path_buf();
        let tail = log_tail(&path, 20);
        d.remove().map_err(|e| format!("cluster `{name}`: not removed: {e}"))?;
        println!(
            "nic-cluster: cluster `{name}`: its device process {pid} was not running (it died); \
             removed its directory {}",
            path.display()
        );
        if let Some(t) = tail {
            println!("  the end of its log:\n{t}");
        }
        return Ok(());
    }
    // Checked to be the device process, then signalled through a pidfd;
    // anything else is refused and never signalled.
    d.terminate_device().map_err(|e| format!("cluster `{name}`: not stopped: {e}"))?;
    let t = Instant::now();
    let limit = secs(a.timeout)?;
    // Until the process is gone: it removes the manifest first and the
    // directory after, so a gone manifest is not yet a stopped cluster.
    while d.device_alive() {
        if t.elapsed() > limit {
            return Err(format!(
                "cluster `{name}`: device process {pid} did not stop within {} s",
                a.timeout
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("nic-cluster: cluster `{name}` stopped");
    Ok(())
}

/// Each NIC's firmware state, as `list` shows it: `dead` for every NIC of
/// a cluster whose device process is gone.
fn nic_states(d: &ClusterDir) -> Vec<&'static str> {
    let m = d.manifest();
    if !d.device_alive() {
        return vec!["dead"; m.nodes as usize];
    }
    (0..m.nodes)
        .map(|n| {
            d.map_sram(n)
                .ok()
                .and_then(|s| s.load_u32(reg(regs::FW_STATUS) as u64))
                .map(|s| match s {
                    regs::FW_RUNNING => "running",
                    regs::FW_HALTED => "halted",
                    _ => "booting",
                })
                .unwrap_or("?")
        })
        .collect()
}

/// A message on one line: its first line and its last (a TOML error
/// draws the place in between).
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

fn list() {
    let all = ClusterDir::list_all();
    if all.is_empty() {
        println!("no clusters under {}", cluster::base_dir().display());
    }
    for (path, d) in all {
        let d = match d {
            Ok(d) => d,
            Err(cluster::ClusterError::NotFound { .. }) => {
                println!(
                    "{:<16} no manifest (starting, or its device process ended before it was \
                     up)  {}",
                    path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
                    path.display()
                );
                continue;
            }
            Err(e) => {
                println!(
                    "{:<16} unreadable: {}",
                    path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
                    one_line(&e.to_string())
                );
                continue;
            }
        };
        let m = d.manifest();
        let state = match m.device_state() {
            DeviceState::Alive => "up  ",
            DeviceState::Unverified => "up? ",
            DeviceState::Gone | DeviceState::Other(_) => "dead",
        };
        println!(
            "{:<16} {:<5} {:>3} nodes  pid {:<7} {}  {}  [{}]",
            m.name,
            m.backend,
            m.nodes,
            m.pid,
            state,
            d.path().display(),
            nic_states(&d).join(" ")
        );
    }
}

/// `nic-cluster brm`: the BRM master of a running cluster.
fn brm(a: &BrmArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in
        [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP]
    {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let dir = ClusterDir::open(&a.cluster).map_err(|e| e.to_string())?;
    let cal = Calibration::read_file(&a.calibration)?;
    let t_ticks = cal.t_ticks;
    let bmax = cal.bmax_mb_s;
    let server = Arc::new(BrmServer::new(&dir, a.topology, a.switch_ports, cal)?);
    server::serve(&dir, server, stop, |p| {
        println!(
            "nic-cluster brm: cluster `{}`, {} nodes, {} topology, T = {t_ticks:.1} ticks, Bmax = \
             {bmax:.2} MB/s",
            dir.manifest().name,
            dir.nodes(),
            a.topology
        );
        println!("{MASTER_READY} {}", p.display());
    })
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    // A negative number is a value its option's parser refuses by name,
    // not an unknown argument.
    let cmd = nic_emu::cli::allow_negative_numbers(Cli::command());
    let cli = match cmd.try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let r = match &cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::Stop(a) => stop(a),
        Cmd::List => {
            list();
            Ok(())
        }
        Cmd::Brm(a) => brm(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("nic-cluster: error: {e}");
            ExitCode::FAILURE
        }
    }
}
