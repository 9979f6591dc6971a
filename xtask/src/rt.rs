//! The real-time commands: `run` (a cluster until Ctrl-C), `demo` on the
//! qemu or live backend, `gdb` (one NIC's QEMU halted under
//! gdb-multiarch) and the `--realtime` section of `bench`. Clusters are
//! served by this process (`nic_emu::realtime::RtCluster`); the host
//! programs (host-driver's `pingpong` and `stream`, nic-emu's
//! `rt_baselines` example) run as separate processes, as a user's would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_driver::affinity;
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
fn stop_flag() -> crate::Result<Arc<AtomicBool>> {
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
fn start(cfg: RtConfig) -> crate::Result<RtCluster> {
    let qemu = cfg.backend == ClusterBackend::Qemu;
    let c = RtCluster::start(cfg).map_err(|e| format!("starting the cluster: {e}"))?;
    c.wait_running(Duration::from_secs(if qemu { 60 } else { 20 }))
        .map_err(|e| format!("booting the cluster: {e}"))?;
    Ok(c)
}

fn print_where(c: &RtCluster) {
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
                "  node {n}:     {}  (sram, host, flash, console.log, qemu.log; QEMU pid {pid})",
                d.display()
            ),
            None => println!("  node {n}:     {}  (sram, host, port locks)", d.display()),
        }
    }
    let brm = c.dir().brm_socket_path();
    if brm.exists() {
        println!("  BRM master: {}  (agents: node<N>/brm-agent.sock)", brm.display());
    }
}

/// `cargo xtask run --nodes N --backend sim|live|qemu [--name NAME]`.
pub fn run(
    root: &Path,
    nodes: usize,
    backend: Backend,
    name: &str,
    brm: bool,
    cpus: Vec<usize>,
) -> crate::Result<ExitCode> {
    let backend = match backend {
        Backend::Sim => {
            println!(
                "the sim backend is not a long-running service: it runs a scenario in virtual \
                 time and exits. Running the demo scenario (scenarios/demo-4node.toml); write \
                 your own and run it with `cargo xtask sim FILE`.\n"
            );
            return crate::demo::run_sim(false);
        }
        Backend::Live => ClusterBackend::Live,
        Backend::Qemu => ClusterBackend::Qemu,
    };
    let mut cfg = RtConfig::new(name, backend, nodes);
    cfg.cpus = cpus;
    if backend == ClusterBackend::Qemu {
        if !ensure_qemu()? {
            return Err(format!("the qemu backend needs {}", qemu::QEMU_PROGRAM));
        }
        let elf = fw::build_image(root, false)?;
        fw::report_size(&elf)?;
        cfg.image = Some(elf);
    }
    if brm {
        let bins = fw::build_host_programs(root)?;
        cfg.brm = Some(nic_emu::realtime::BrmSetup {
            calibration: None,
            program: Some(bins.join(nic_emu::realtime::process::BINARY)),
        });
    }
    let stop = stop_flag()?;
    let c = start(cfg)?;
    print_where(&c);
    println!(
        "host programs find it as `--cluster {name}`, e.g.\n  \
         target/release/pingpong --cluster {name} --node 1 --port 1 --peer 0 --peer-port 1 --role pong &\n  \
         target/release/pingpong --cluster {name} --node 0 --port 1 --peer 1 --peer-port 1 --role ping"
    );
    if backend == ClusterBackend::Qemu {
        println!("reflash a NIC: cargo xtask flash --node N --cluster {name} [IMAGE]");
    }
    println!("serving until Ctrl-C");
    c.serve_until(&stop);
    println!("\nstopping `{name}`");
    for note in c.notes() {
        println!("  device process: {note}");
    }
    c.stop().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn text(o: &Output) -> String {
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

fn finish(mut child: Child, what: &str, timeout: Duration) -> crate::Result<Output> {
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

fn json_line(o: &Output) -> crate::Result<serde_json::Value> {
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

/// `cargo xtask demo` on a real-time backend (qemu when QEMU is here or
/// can be installed, else live).
pub fn demo(root: &Path, want: Option<Backend>) -> crate::Result<ExitCode> {
    let t0 = Instant::now();
    println!("==> firmware image");
    let elf = fw::build_image(root, false)?;
    fw::report_size(&elf)?;
    let backend = match want {
        Some(Backend::Live) => ClusterBackend::Live,
        Some(Backend::Qemu) => {
            if !ensure_qemu()? {
                return Err(format!("--backend qemu: {} is missing", qemu::QEMU_PROGRAM));
            }
            ClusterBackend::Qemu
        }
        _ => {
            if ensure_qemu()? {
                ClusterBackend::Qemu
            } else {
                println!("falling back to the live backend (the MCP as native threads)");
                ClusterBackend::Live
            }
        }
    };
    println!("==> host programs (pingpong, stream)");
    let bins = fw::build_host_programs(root)?;
    let name = format!("demo-{}", std::process::id());
    let mut cfg = RtConfig::new(&name, backend, 4);
    if backend == ClusterBackend::Qemu {
        cfg.image = Some(elf.clone());
    }
    let stop = stop_flag()?;
    println!(
        "==> starting a 4-node cluster on the {} backend ({})",
        backend,
        if backend == ClusterBackend::Qemu {
            "one qemu-system-riscv64 per NIC running the riscv64 MCP image"
        } else {
            "the MCP as native threads; no QEMU"
        }
    );
    let c = start(cfg)?;
    if backend == ClusterBackend::Qemu {
        println!(
            "flashed {} into node0..node3/flash; every NIC booted it (FW_STATUS = RUNNING)",
            elf.display()
        );
    }
    print_where(&c);
    let path = c.path().to_path_buf();
    let qemu = backend == ClusterBackend::Qemu;
    let (pp_count, st_count) = if qemu { (1000, 200) } else { (5000, 2000) };
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let mut failed = None;
    println!("==> host processes: pingpong (nodes 0 <-> 1), stream (node 2 -> node 3)");
    for size in [8u32, 1024] {
        match pingpong(&bins, &path, 1, size, pp_count, &[]) {
            Ok(l) => rows.push((
                "ping-pong".into(),
                "0 <-> 1".into(),
                format!("{size} B x {pp_count}"),
                format!(
                    "one-way {:.1} us median (min {:.1}, p99 {:.1})",
                    l.median_us, l.min_us, l.p99_us
                ),
            )),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    for size in [4096u32, 65536] {
        match stream(&bins, &path, 4, 2, size, st_count, &[]) {
            Ok(mb) => rows.push((
                "stream".into(),
                "2 -> 3".into(),
                format!("{} KiB x {st_count}", size / 1024),
                format!("{mb:.1} MB/s"),
            )),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    let stopped = stop.load(std::sync::atomic::Ordering::Relaxed);
    c.stop().map_err(|e| e.to_string())?;
    println!();
    println!(
        "{} backend, 4 nodes, lanai9-gm profile, every message checked byte by byte:",
        backend
    );
    println!("{:<10} {:<8} {:<14} result", "test", "nodes", "messages");
    for (a, b, cc, d) in &rows {
        println!("{a:<10} {b:<8} {cc:<14} {d}");
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if stopped {
        return Err("interrupted".into());
    }
    println!(
        "\ndone in {:.0} s. next: `cargo xtask run --nodes 4 --backend {backend}`, `cargo xtask gdb --node 0`, `cargo xtask bench`, `cargo xtask demo --backend sim`",
        t0.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// The step functions `gdb` breaks on (generic over the hardware
/// interface, so gdb names them with the image's `SramHw`).
pub const STEP_FUNCTIONS: [&str; 7] = [
    "mcp::Mcp::sdma_intake<mcp_image::hw::SramHw>",
    "mcp::Mcp::sdma_fill<mcp_image::hw::SramHw>",
    "mcp::Mcp::timers<mcp_image::hw::SramHw>",
    "mcp::Mcp::send_step<mcp_image::hw::SramHw>",
    "mcp::Mcp::recv_step<mcp_image::hw::SramHw>",
    "mcp::Mcp::rdma_step<mcp_image::hw::SramHw>",
    "mcp::Mcp::flush_events<mcp_image::hw::SramHw>",
];

/// The gdb-multiarch command line: the image's symbols, the remote
/// target, breakpoints on `breaks`, then `script` (batch) if given.
pub fn gdb_command(elf: &Path, port: u16, breaks: &[&str], script: Option<&Path>) -> Command {
    let mut c = Command::new("gdb-multiarch");
    c.arg("-q").arg("-nx");
    if script.is_some() {
        c.arg("-batch");
    }
    c.args(["-ex", "set pagination off", "-ex", "set confirm off"])
        .arg("-ex")
        .arg(format!("file {}", elf.display()))
        .arg("-ex")
        .arg(format!("target remote 127.0.0.1:{port}"));
    for b in breaks {
        c.arg("-ex").arg(format!("break '{b}'"));
    }
    if let Some(s) = script {
        c.arg("-x").arg(s);
    }
    c
}

fn free_port() -> crate::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// `cargo xtask gdb --node N [--nodes M] [--cluster NAME] [--batch SCRIPT]`.
pub fn gdb(
    root: &Path,
    node: usize,
    nodes: usize,
    name: &str,
    script: Option<PathBuf>,
    only_sdma: bool,
) -> crate::Result<ExitCode> {
    if qemu::find_program("gdb-multiarch").is_none() {
        println!("gdb-multiarch is not installed");
        if !fw::apt_install(&["gdb-multiarch"])? || qemu::find_program("gdb-multiarch").is_none() {
            return Err("`cargo xtask gdb` needs gdb-multiarch".into());
        }
    }
    if !ensure_qemu()? {
        return Err(format!("`cargo xtask gdb` needs {}", qemu::QEMU_PROGRAM));
    }
    let elf = fw::build_image(root, false)?;
    let port = free_port()?;
    let mut cfg = RtConfig::new(name, ClusterBackend::Qemu, nodes.max(node + 1));
    cfg.image = Some(elf.clone());
    cfg.halted_node = Some((node, port));
    // gdb takes Ctrl-C to interrupt the guest: this process must not die of it.
    let _stop = stop_flag()?;
    let c = start(cfg)?;
    print_where(&c);
    println!(
        "node {node}'s QEMU is halted with its gdbstub on tcp::{port}; starting gdb-multiarch \
         with {} and breakpoints on the state machines' step functions",
        elf.display()
    );
    let breaks: Vec<&str> =
        if only_sdma { vec![STEP_FUNCTIONS[0]] } else { STEP_FUNCTIONS.to_vec() };
    let st = gdb_command(&elf, port, &breaks, script.as_deref())
        .status()
        .map_err(|e| format!("cannot run gdb-multiarch: {e}"))?;
    c.stop().map_err(|e| e.to_string())?;
    Ok(if st.success() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// What the real-time figures mean and what bounds them (printed after them).
const BENCH_NOTES: &str = "\
(Live figures: the median of 5 runs. Every message is content-checked. memcpy: the stream's
 bytes, 5000 messages of 64 KiB, each from and to a place of its own; the hot copy is for
 reference. Host processes wait adaptively: on 2 cores or fewer they yield at once, else spin
 20 us first. qemu latency is bound by the guest's naps (WFI, 20 us while busy) and TCG.
 Streaming is bound by the one device thread ({cores} cores here; with the NIC on its own core
 that core is fully busy, the hosts' partly idle). Per 4 KiB packet it copies host memory to
 SRAM, SRAM to the wire, the wire to SRAM and SRAM to host memory (about 60% of its time, the
 last alone a third: it takes back lines the receiving process on the other core has read),
 computes the CRC (about 10%) and runs both MCPs, the engines' rings and the fabric (the rest).
 The cross-core hand-off before each stream run is how long one cache line takes between
 the NIC's CPU and a host CPU: on a 2-core VM it is about 30 ns most of the time and 150 ns
 or more in spells, and a stream run in such a spell goes at about half speed. More device
 threads are slower on 2 cores. docs/design/performance.md has more.)";

/// Runs of each live measurement; the median run is printed.
const RUNS: usize = 5;

/// How long the cross-core hand-off is probed before each stream run.
const PROBE: Duration = Duration::from_millis(50);

/// Messages of 64 KiB in the bench's live stream.
const STREAM_COUNT: u64 = 5000;

/// `[0, 1, 3]` as `0,1,3` (a `--cpus` argument).
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// The `--realtime` figures of `cargo xtask bench`.
pub fn bench(root: &Path, count: u64) -> crate::Result<()> {
    println!("\n== real-time backends (live and qemu), this machine ({} cores)", num_cpus());
    let elf = fw::build_image(root, false)?;
    let bins = fw::build_host_programs(root)?;
    // Baselines: UDP ping-pong over loopback between two processes, memcpy.
    let o = Command::new(bins.join("examples").join("rt_baselines"))
        .args(["--size", "8", "--count", &count.to_string(), "--json"])
        .args(["--stream-size", "65536", "--stream-count", &STREAM_COUNT.to_string()])
        .output()
        .map_err(|e| format!("rt_baselines: {e}"))?;
    if !o.status.success() {
        return Err(format!("rt_baselines failed: {}", text(&o)));
    }
    let base = json_line(&o)?;
    let udp = base["udp_one_way_us"]["median"].as_f64().unwrap_or(f64::NAN);
    let memcpy_hot = base["memcpy_mb_s"].as_f64().unwrap_or(f64::NAN);
    let memcpy = base["memcpy_stream_mb_s"].as_f64().unwrap_or(f64::NAN);

    // The live backend as the OS schedules it, then with the device
    // thread on a core of its own and the host programs on the others
    // (a NIC has its own processor).
    let cores = affinity::current()?;
    let layouts: Vec<(String, Vec<usize>, Vec<String>)> = match cores.split_last() {
        Some((&nic, rest)) if !rest.is_empty() => vec![
            ("".to_string(), vec![], vec![]),
            (format!(", NIC on cpu {nic}"), vec![nic], vec!["--cpus".to_string(), cpu_list(rest)]),
        ],
        _ => vec![("".to_string(), vec![], vec![])],
    };
    // The probe's two CPUs: the NIC's and a host program's.
    let probe = cores.split_last().and_then(|(&nic, rest)| rest.first().map(|&h| (nic, h)));
    let mut live = Vec::new();
    for (label, nic_cpus, host_args) in &layouts {
        let mut cfg =
            RtConfig::new(&format!("bench-live-{}", std::process::id()), ClusterBackend::Live, 2);
        cfg.cpus = nic_cpus.clone();
        let c = start(cfg)?;
        let extra: Vec<&str> = host_args.iter().map(String::as_str).collect();
        // RUNS runs each, the median run kept: one run of a few hundred
        // milliseconds on a 2-core machine is at the scheduler's mercy.
        let mut lats = Vec::new();
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            lats.push(pingpong(&bins, c.path(), 1, 8, count, &extra)?);
            // The cross-core hand-off just before, to tell this VM's slow
            // spells from the emulator's own variation.
            let handoff = probe.map(|(a, b)| affinity::handoff_ns(a, b, PROBE)).transpose()?;
            let bw = stream(&bins, c.path(), 2, 2, 65536, STREAM_COUNT, &extra)?;
            runs.push((bw, handoff));
        }
        c.stop().map_err(|e| e.to_string())?;
        lats.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
        let mut bws: Vec<f64> = runs.iter().map(|r| r.0).collect();
        bws.sort_by(f64::total_cmp);
        let (lat, bw) = (lats.swap_remove(RUNS / 2), bws[RUNS / 2]);
        live.push((label.clone(), lat, bw, runs));
    }

    let have_qemu = qemu::find_program(qemu::QEMU_PROGRAM).is_some();
    let mut q = None;
    if have_qemu {
        let mut cfg =
            RtConfig::new(&format!("bench-qemu-{}", std::process::id()), ClusterBackend::Qemu, 2);
        cfg.image = Some(elf);
        let c = start(cfg)?;
        let ql = pingpong(&bins, c.path(), 1, 8, count.min(2000), &[])?;
        // An idle NIC: let it fall asleep, then measure its QEMU's CPU time.
        std::thread::sleep(Duration::from_millis(500));
        let pid = c.qemu_pid(0).ok_or("no QEMU pid")?;
        let c0 = qemu::process_cpu_seconds(pid).ok_or("cannot read QEMU's CPU time")?;
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(2));
        let c1 = qemu::process_cpu_seconds(pid).ok_or("cannot read QEMU's CPU time")?;
        let idle = (c1 - c0) / t0.elapsed().as_secs_f64();
        c.stop().map_err(|e| e.to_string())?;
        q = Some((ql, idle));
    }

    let mark = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("{:<54} {:>12} {:>12} {:>8}  target", "", "measured", "baseline", "ratio");
    for (label, lat, _, _) in &live {
        println!(
            "{:<54} {:>9.2} us {:>9.2} us {:>8.2}  <= 0.5 x UDP: {}",
            format!("live ping-pong one-way, 8 B x {count}{label} vs UDP"),
            lat.median_us,
            udp,
            lat.median_us / udp,
            mark(lat.median_us <= 0.5 * udp)
        );
    }
    for (label, _, bw, _) in &live {
        println!(
            "{:<54} {:>7.0} MB/s {:>7.0} MB/s {:>8.2}  >= 30% of memcpy: {}",
            format!("live stream, 64 KiB x {STREAM_COUNT}{label} vs memcpy"),
            bw,
            memcpy,
            bw / memcpy,
            mark(*bw >= 0.3 * memcpy)
        );
    }
    let best = live.iter().map(|l| l.2).fold(0.0, f64::max);
    println!(
        "{:<54} {:>12} {:>7.0} MB/s {:>8.2}",
        "  (memcpy of one 64 KiB buffer again and again, hot)",
        "",
        memcpy_hot,
        best / memcpy_hot
    );
    match q {
        Some((ql, idle)) => {
            println!(
                "{:<54} {:>9.2} us {:>9.2} us {:>8.2}",
                format!("qemu ping-pong one-way, 8 B x {} (median) vs UDP", count.min(2000)),
                ql.median_us,
                udp,
                ql.median_us / udp
            );
            println!("{:<54} {:>9.1} ms", "idle qemu NIC: CPU time per wall second", idle * 1000.0);
        }
        None => println!("qemu: {} not installed; no qemu figures", qemu::QEMU_PROGRAM),
    }
    for (label, lat, _, runs) in &live {
        println!(
            "(live latency{label}: min {:.2} / median {:.2} / p99 {:.2} us)",
            lat.min_us, lat.median_us, lat.p99_us
        );
        let each: Vec<String> = runs
            .iter()
            .map(|(bw, h)| match h {
                Some(ns) => format!("{bw:.0} ({ns:.0} ns)"),
                None => format!("{bw:.0}"),
            })
            .collect();
        println!(
            "(live stream{label}, each run in MB/s (cross-core hand-off): {})",
            each.join(", ")
        );
    }
    println!("{}", BENCH_NOTES.replace("{cores}", &num_cpus().to_string()));
    Ok(())
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
