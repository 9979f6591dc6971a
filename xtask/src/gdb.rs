//! `cargo xtask gdb`: gdb-multiarch on one or more NICs of a qemu cluster,
//! one gdb inferior per NIC, each attached to its QEMU's gdbstub (every
//! qemu guest has one; `cluster.toml` lists their ports).
//!
//! With `--cluster C` it attaches to the running cluster C (started with
//! `cargo xtask run --backend qemu` or `nic-cluster run`): attaching halts
//! each chosen NIC; detaching (or quitting gdb) lets it run on. Without
//! `--cluster` it starts a new cluster with the first chosen NIC halted at
//! its first instruction, which stops when gdb exits.
//!
//! Either way gdb gets the image's symbols, breakpoints on the MCP's step
//! functions, the `mcp` command (tools/gdb/mcp.py: the four machines'
//! states, queues and the NIC's counters), and a substitute-path from the
//! `/rustc/<commit>` paths in the image's debug information to the
//! toolchain's rust-src, so stepping into core shows its source.
//!
//! A batch script runs under a time limit (`--timeout`, a minute by
//! default): past it gdb is killed. However gdb ends (its own exit, the
//! time limit, Ctrl-C of a batch session, SIGTERM or SIGHUP of this
//! process, a crash), every NIC of a running cluster it was attached to
//! is then detached and resumed through its gdbstub (`resume_nic`): a
//! gdbstub keeps its guest stopped when its debugger goes away without
//! detaching.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_driver::cluster::{ClusterBackend, ClusterDir};
use nic_emu::realtime::RtConfig;

use crate::fw;
use crate::rt;

/// The step functions `gdb` breaks on (generic over the hardware
/// interface, so gdb names them with the image's `SramHw`).
pub const STEP_FUNCTIONS: [&str; 8] = [
    "mcp::sdma::Sdma::intake<mcp_image::hw::SramHw>",
    "mcp::sdma::Sdma::timers<mcp_image::hw::SramHw>",
    "mcp::sdma::Sdma::fill<mcp_image::hw::SramHw>",
    "mcp::send::Send::step<mcp_image::hw::SramHw>",
    "mcp::recv::Recv::step<mcp_image::hw::SramHw>",
    "mcp::recv::Recv::accept<mcp_image::hw::SramHw>",
    "mcp::rdma::Rdma::step<mcp_image::hw::SramHw>",
    "mcp::rdma::Rdma::flush_events<mcp_image::hw::SramHw>",
];

/// The gdb script defining `mcp`, relative to the repository root.
pub const MCP_SCRIPT: &str = "tools/gdb/mcp.py";

/// One NIC to debug: its node number, its gdbstub's port on 127.0.0.1 and
/// the ELF with its symbols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub node: usize,
    pub port: u16,
    pub elf: PathBuf,
}

/// What the gdb session is given besides the targets.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// Breakpoints (function names).
    pub breaks: Vec<&'static str>,
    /// Batch mode with this command file.
    pub script: Option<PathBuf>,
    /// Read no gdbinit (gdb's `-nx`).
    pub nx: bool,
    /// `set substitute-path FROM TO` for core's sources.
    pub rust_src: Option<(String, PathBuf)>,
    /// The `mcp` command's script (`source`d).
    pub mcp_script: Option<PathBuf>,
}

/// The gdb-multiarch command line: settings, the `mcp` command, one
/// inferior per target (its symbols, `target extended-remote`, its node
/// as `mcp`'s label), the breakpoints (in every inferior), back to the
/// first inferior, then the batch script if any.
pub fn gdb_command(targets: &[Target], s: &Session) -> Command {
    let mut c = Command::new("gdb-multiarch");
    c.arg("-q");
    if s.nx {
        c.arg("-nx");
    }
    if s.script.is_some() {
        c.arg("-batch");
    }
    let ex = |c: &mut Command, cmd: String| {
        c.arg("-ex").arg(cmd);
    };
    ex(&mut c, "set pagination off".into());
    ex(&mut c, "set confirm off".into());
    if let Some((from, to)) = &s.rust_src {
        ex(&mut c, format!("set substitute-path {from} {}", to.display()));
    }
    if let Some(p) = &s.mcp_script {
        ex(&mut c, format!("source {}", p.display()));
    }
    for (i, t) in targets.iter().enumerate() {
        if i > 0 {
            ex(&mut c, "add-inferior -no-connection".into());
            ex(&mut c, format!("inferior {}", i + 1));
        }
        ex(&mut c, format!("file {}", t.elf.display()));
        ex(&mut c, format!("target extended-remote 127.0.0.1:{}", t.port));
        if s.mcp_script.is_some() {
            ex(&mut c, format!("mcp-label {}", t.node));
        }
    }
    for b in &s.breaks {
        ex(&mut c, format!("break '{b}'"));
    }
    if targets.len() > 1 {
        ex(&mut c, "inferior 1".into());
    }
    if let Some(script) = &s.script {
        c.arg("-x").arg(script);
    }
    c
}

/// `/rustc/<commit>` (the prefix of core's paths in the image's debug
/// information) and `<sysroot>/lib/rustlib/src/rust`, from the rustc that
/// builds the image. Err says what could not be found out.
pub fn rust_src_mapping() -> crate::Result<(String, PathBuf)> {
    let run = |args: &[&str]| -> crate::Result<String> {
        let o = Command::new("rustc")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run rustc {}: {e}", args.join(" ")))?;
        if !o.status.success() {
            return Err(format!("rustc {} failed", args.join(" ")));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let vv = run(&["-vV"])?;
    let hash = commit_hash(&vv).ok_or("rustc -vV names no commit-hash")?;
    let sysroot = run(&["--print", "sysroot"])?;
    let src = Path::new(sysroot.trim()).join("lib/rustlib/src/rust");
    Ok((format!("/rustc/{hash}"), src))
}

/// The `commit-hash:` of `rustc -vV`'s output.
pub fn commit_hash(rustc_vv: &str) -> Option<&str> {
    rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("commit-hash:"))
        .map(str::trim)
        .filter(|h| !h.is_empty() && *h != "unknown")
}

/// The batch script, checked before anything starts: it must be a
/// readable file.
fn check_script(script: &Path) -> crate::Result<()> {
    match std::fs::metadata(script) {
        Ok(m) if m.is_file() => std::fs::File::open(script)
            .map(drop)
            .map_err(|e| format!("gdb batch script {}: {e}", script.display())),
        Ok(_) => Err(format!("gdb batch script {}: not a file", script.display())),
        Err(e) => Err(format!("gdb batch script {}: {e}", script.display())),
    }
}

/// What `cargo xtask gdb` was asked.
#[derive(Debug, Clone)]
pub struct Opts {
    /// The NICs to debug (at least one, no repeats).
    pub nodes: Vec<usize>,
    /// Attach to this running cluster (name or directory); None: start one.
    pub cluster: Option<String>,
    /// A new cluster's name and size.
    pub name: String,
    pub cluster_nodes: usize,
    /// Symbols from this ELF (default: each node's flash file when
    /// attaching, the freshly built image otherwise).
    pub image: Option<PathBuf>,
    pub batch: Option<PathBuf>,
    /// A batch script's time limit: gdb is killed past it.
    pub timeout: Duration,
    pub sdma_only: bool,
    pub nx: bool,
}

/// The longest `--timeout`: a day.
const MAX_TIMEOUT_S: f64 = 86_400.0;

/// `--timeout SECS`: seconds, more than 0 and at most a day.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_TIMEOUT_S) {
        return Err(format!("`{s}`: the time limit must be more than 0 s and at most 86400 s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `cargo xtask gdb`.
pub fn run(root: &Path, o: &Opts) -> crate::Result<ExitCode> {
    use crate::prereq::Need;
    if o.nodes.is_empty() {
        return Err("gdb: name at least one NIC (--node N, or --node 0,1)".into());
    }
    let mut seen = o.nodes.clone();
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("gdb: --node {:?} names a NIC twice", o.nodes));
    }
    if let Some(s) = &o.batch {
        check_script(s)?;
    }
    let mcp_script = root.join(MCP_SCRIPT);
    if !mcp_script.is_file() {
        return Err(format!("gdb: the `mcp` command's script {} is missing", mcp_script.display()));
    }
    let rust_src = match rust_src_mapping() {
        Ok((from, to)) => {
            if !to.is_dir() {
                println!(
                    "note: no rust-src at {} (`rustup component add rust-src`): stepping into \
                     core will show no source",
                    to.display()
                );
            }
            Some((from, to))
        }
        Err(e) => {
            println!("note: no source path for core: {e}");
            None
        }
    };
    let breaks: Vec<&'static str> =
        if o.sdma_only { vec![STEP_FUNCTIONS[0]] } else { STEP_FUNCTIONS.to_vec() };
    let session = Session {
        breaks,
        script: o.batch.clone(),
        nx: o.nx,
        rust_src,
        mcp_script: Some(mcp_script),
    };
    match &o.cluster {
        Some(c) => {
            crate::prereq::ensure("cargo xtask gdb", &[Need::Gdb])?;
            attach(c, o, &session)
        }
        None => {
            crate::prereq::ensure("cargo xtask gdb", &[Need::FwTarget, Need::Qemu, Need::Gdb])?;
            start_and_attach(root, o, &session)
        }
    }
}

/// The targets of `nodes` in the running cluster `dir`, their symbols
/// from `image` or each node's flash file.
pub fn cluster_targets(
    dir: &ClusterDir,
    nodes: &[usize],
    image: Option<&Path>,
) -> crate::Result<Vec<Target>> {
    let m = dir.manifest();
    let name = dir.path().display();
    if m.backend != ClusterBackend::Qemu {
        return Err(format!(
            "cluster {name} runs the {} backend: only qemu NICs have a gdbstub",
            m.backend
        ));
    }
    if !dir.device_alive() {
        return Err(format!("cluster {name}: its device process {} is not running", m.pid));
    }
    let mut out = Vec::new();
    for &node in nodes {
        if node >= m.nodes as usize {
            return Err(format!(
                "cluster {name} has no node {node} (nodes 0 to {})",
                m.nodes.saturating_sub(1)
            ));
        }
        let port = m.gdb_port(node as u32).ok_or_else(|| {
            format!(
                "cluster {name}: cluster.toml lists no gdb port for node {node} (a cluster \
                 started before QEMU guests had gdbstubs? restart it)"
            )
        })?;
        let elf = match image {
            Some(i) => i.to_path_buf(),
            None => dir.flash_path(node as u32),
        };
        out.push(Target { node, port, elf });
    }
    Ok(out)
}

/// Does every target's gdbstub accept a connection? (gdb itself carries
/// on after a failed `target` command, even in batch mode.) A connection
/// stops the guest: when one target does not answer, those reached
/// before it are resumed before the error is returned.
fn check_reachable(targets: &[Target]) -> crate::Result<()> {
    for (i, t) in targets.iter().enumerate() {
        let addr = SocketAddr::from(([127, 0, 0, 1], t.port));
        if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            let mut msg = format!(
                "node {}'s gdbstub 127.0.0.1:{} does not answer ({e}): is its QEMU running?",
                t.node, t.port
            );
            if let Err(r) = resume_all(&targets[..i]) {
                msg = format!("{msg}; and {r}");
            }
            return Err(msg);
        }
    }
    Ok(())
}

fn print_targets(targets: &[Target]) {
    for (i, t) in targets.iter().enumerate() {
        println!(
            "  inferior {}: node {} (gdbstub 127.0.0.1:{}, symbols {})",
            i + 1,
            t.node,
            t.port,
            t.elf.display()
        );
    }
    println!(
        "in gdb: `mcp` shows the current NIC's machines (SDMA, SEND, RECV, RDMA), queues and \
         counters, `mcp all` every NIC's; `inferior N` switches NIC; `detach inferiors 1 2` \
         lets them run on"
    );
}

/// How a gdb session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// gdb exited by itself with this status.
    Exited(ExitStatus),
    /// The batch script ran past its time limit; gdb was killed.
    TimedOut(Duration),
    /// This process was told to stop (the signal's name); gdb was killed.
    Signalled(&'static str),
}

/// The signals a session watches: SIGINT ends a batch session only (in an
/// interactive one Ctrl-C is gdb's: it interrupts the guest), SIGTERM and
/// SIGHUP end either.
struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> crate::Result<Signals> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let s = Signals {
            int: Arc::new(AtomicBool::new(false)),
            term: Arc::new(AtomicBool::new(false)),
            hup: Arc::new(AtomicBool::new(false)),
        };
        for (sig, flag) in [(SIGINT, &s.int), (SIGTERM, &s.term), (SIGHUP, &s.hup)] {
            signal_hook::flag::register(sig, flag.clone())
                .map_err(|e| format!("gdb: cannot install a signal handler: {e}"))?;
        }
        Ok(s)
    }

    /// The signal that ends the session, if one came.
    fn ending(&self, batch: bool) -> Option<&'static str> {
        if self.term.load(Ordering::Relaxed) {
            Some("SIGTERM")
        } else if self.hup.load(Ordering::Relaxed) {
            Some("SIGHUP")
        } else if batch && self.int.load(Ordering::Relaxed) {
            Some("SIGINT")
        } else {
            None
        }
    }
}

/// Run gdb (`cmd`) until it exits, a batch session's `timeout` passes or
/// this process is told to stop; in the last two cases gdb is killed.
fn supervise(mut cmd: Command, batch: bool, timeout: Duration) -> crate::Result<Ending> {
    let signals = Signals::install()?;
    let mut child = cmd.spawn().map_err(|e| format!("gdb: cannot run gdb-multiarch: {e}"))?;
    let t0 = Instant::now();
    let ending = loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(Ending::Exited(st)),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("gdb: cannot wait for gdb-multiarch: {e}"));
            }
        }
        if let Some(sig) = signals.ending(batch) {
            break Ending::Signalled(sig);
        }
        if batch && t0.elapsed() >= timeout {
            break Ending::TimedOut(timeout);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // gdb waiting on a running guest does not answer SIGTERM promptly;
    // SIGKILL, then the NICs are detached by `resume_nic`.
    let _ = child.kill();
    let _ = child.wait();
    Ok(ending)
}

/// What the session's ending means for `cargo xtask gdb`'s exit status,
/// with the message to print when it failed.
pub fn verdict(ending: &Ending, batch: Option<&Path>) -> Result<(), String> {
    let what = match batch {
        Some(b) => format!("the batch script {}", b.display()),
        None => "the gdb session".to_string(),
    };
    match ending {
        Ending::Exited(s) if s.success() => Ok(()),
        Ending::Exited(s) => Err(match batch {
            Some(_) => format!("gdb: {what} failed ({s})"),
            None => format!("gdb: gdb-multiarch exited with {s}"),
        }),
        Ending::TimedOut(t) => Err(format!(
            "gdb: {what} did not finish within its time limit of {} (--timeout): gdb was \
             stopped (a `continue` that no breakpoint ends waits for ever)",
            fmt_secs(*t)
        )),
        Ending::Signalled(sig) => Err(format!("gdb: {sig} received: {what} was stopped")),
    }
}

fn fmt_secs(t: Duration) -> String {
    let s = t.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// How long `resume_nic` waits for a gdbstub to take its connection and
/// answer (the stub takes the next connection once it has seen the last
/// one close).
const RESUME_WAIT: Duration = Duration::from_secs(5);

/// A gdb remote-protocol packet: `$body#cc`, cc the modulo-256 sum of
/// body's bytes in hex.
pub fn packet(body: &str) -> String {
    let sum = body.bytes().fold(0u8, |a, b| a.wrapping_add(b));
    format!("${body}#{sum:02x}")
}

/// Read one packet's body from `r` (acks `+`/`-` and stray bytes before
/// `$` are skipped; the checksum is not checked: the link is a local TCP
/// socket).
fn read_packet(r: &mut impl Read) -> std::io::Result<String> {
    let mut body = Vec::new();
    let mut byte = [0u8; 1];
    let mut started = false;
    let mut sum_left = None::<u8>;
    loop {
        if r.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the gdbstub closed the connection",
            ));
        }
        match (started, sum_left, byte[0]) {
            (false, _, b'$') => started = true,
            (false, _, _) => {}
            (true, None, b'#') => sum_left = Some(2),
            (true, None, b) => body.push(b),
            (true, Some(n), _) => {
                if n == 1 {
                    return Ok(String::from_utf8_lossy(&body).into_owned());
                }
                sum_left = Some(n - 1);
            }
        }
    }
}

/// Is `p` a stop reply (`T..`, `S..`)? The stub sends one on its own when
/// a connection stops the guest, so it may come before or after the
/// answer to a request.
fn is_stop_reply(p: &str) -> bool {
    p.starts_with('T') || p.starts_with('S')
}

/// Send `body` as a packet and return the answer's body (stop replies
/// the stub sends meanwhile are acknowledged and passed over).
fn exchange(s: &mut (impl Read + Write), body: &str) -> std::io::Result<String> {
    s.write_all(packet(body).as_bytes())?;
    loop {
        let answer = read_packet(s)?;
        s.write_all(b"+")?;
        if !is_stop_reply(&answer) {
            return Ok(answer);
        }
    }
}

/// Detach from node `t`'s guest through its gdbstub and let it run: the
/// stub stops its guest when a debugger connects and keeps it stopped
/// when the debugger goes away without detaching (gdb killed or crashed).
/// A fresh connection that detaches (`D;1`, after announcing the
/// multiprocess protocol so the stub takes a process id) removes every
/// breakpoint and resumes the guest.
pub fn resume_nic(t: &Target) -> Result<(), String> {
    let who = format!("node {}'s gdbstub 127.0.0.1:{}", t.node, t.port);
    let addr = SocketAddr::from(([127, 0, 0, 1], t.port));
    let mut s = TcpStream::connect_timeout(&addr, RESUME_WAIT)
        .map_err(|e| format!("{who} does not answer ({e}): is its QEMU running?"))?;
    let io = |e: std::io::Error| format!("{who}: {e}");
    s.set_read_timeout(Some(RESUME_WAIT)).map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    exchange(&mut s, "qSupported:multiprocess+").map_err(io)?;
    match exchange(&mut s, "D;1").map_err(io)?.as_str() {
        "OK" => Ok(()),
        other => Err(format!("{who} refused to detach (answer `{other}`)")),
    }
}

/// Detach every target's guest and let it run (after gdb has ended, or
/// after `check_reachable` stopped some). Err names those that may stay
/// halted.
fn resume_all(targets: &[Target]) -> Result<(), String> {
    let failed: Vec<String> = targets.iter().filter_map(|t| resume_nic(t).err()).collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("a NIC could not be resumed and may stay halted: {}", failed.join("; ")))
    }
}

/// Run the session and, when `resume`, resume the targets after it
/// however it ended. Failures are printed; the exit status says whether
/// both went well.
fn session(
    targets: &[Target],
    s: &Session,
    timeout: Duration,
    resume: bool,
) -> crate::Result<ExitCode> {
    let ending = supervise(gdb_command(targets, s), s.script.is_some(), timeout);
    let resumed = if resume {
        resume_all(targets).map_err(|e| format!("gdb: after gdb ended, {e}"))
    } else {
        Ok(())
    };
    if resume && resumed.is_ok() {
        let nodes: Vec<String> = targets.iter().map(|t| t.node.to_string()).collect();
        println!("gdb ended: NIC(s) {} detached and running", nodes.join(", "));
    }
    let ending = ending?;
    let mut ok = true;
    for e in [verdict(&ending, s.script.as_deref()), resumed].into_iter().flat_map(Result::err) {
        eprintln!("{e}");
        ok = false;
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `--cluster C`: attach to the running cluster's NICs.
fn attach(cluster: &str, o: &Opts, s: &Session) -> crate::Result<ExitCode> {
    let dir = ClusterDir::open(cluster).map_err(|e| format!("gdb --cluster {cluster}: {e}"))?;
    let targets = cluster_targets(&dir, &o.nodes, o.image.as_deref())?;
    check_reachable(&targets)?;
    println!("attaching gdb-multiarch to cluster {} (each NIC halts until detached):", cluster);
    print_targets(&targets);
    if s.script.is_some() {
        println!("batch script time limit: {} (--timeout)", fmt_secs(o.timeout));
    }
    session(&targets, s, o.timeout, true)
}

/// No `--cluster`: a new cluster, the first chosen NIC halted at its
/// first instruction; stopped when gdb exits.
fn start_and_attach(root: &Path, o: &Opts, s: &Session) -> crate::Result<ExitCode> {
    let elf = fw::build_image(root, false)?;
    let first = o.nodes[0];
    let most = o.nodes.iter().copied().max().unwrap_or(0);
    let mut cfg = RtConfig::new(&o.name, ClusterBackend::Qemu, o.cluster_nodes.max(most + 1));
    cfg.image = Some(elf.clone());
    // Port 0: the cluster binds one the OS picks and holds it; the
    // manifest names it.
    cfg.halted_node = Some((first, 0));
    let _stop = rt::stop_flag()?;
    let c = rt::start(cfg)?;
    rt::print_where(&c);
    let image = o.image.clone().unwrap_or(elf);
    let targets = cluster_targets(c.dir(), &o.nodes, Some(&image));
    let code = match targets {
        Ok(t) => {
            println!("node {first}'s QEMU is halted at its first instruction; gdb-multiarch on:");
            print_targets(&t);
            // The cluster stops with the session: nothing to resume.
            session(&t, s, o.timeout, false)
        }
        Err(e) => Err(e),
    };
    c.stop().map_err(|e| e.to_string())?;
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &Command) -> Vec<String> {
        c.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn two_nics_make_two_inferiors_each_attached_and_labelled() {
        let t = |node, port| Target { node, port, elf: PathBuf::from(format!("/f{node}")) };
        let s = Session {
            breaks: vec![STEP_FUNCTIONS[0]],
            script: Some("/s.gdb".into()),
            nx: true,
            rust_src: Some(("/rustc/abc".into(), "/sys/lib/rustlib/src/rust".into())),
            mcp_script: Some("/r/tools/gdb/mcp.py".into()),
        };
        let a = args(&gdb_command(&[t(0, 4000), t(3, 4003)], &s));
        let ex: Vec<&str> = a
            .iter()
            .zip(a.iter().skip(1))
            .filter(|(k, _)| *k == "-ex")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(&a[..3], ["-q", "-nx", "-batch"]);
        assert_eq!(
            ex,
            [
                "set pagination off",
                "set confirm off",
                "set substitute-path /rustc/abc /sys/lib/rustlib/src/rust",
                "source /r/tools/gdb/mcp.py",
                "file /f0",
                "target extended-remote 127.0.0.1:4000",
                "mcp-label 0",
                "add-inferior -no-connection",
                "inferior 2",
                "file /f3",
                "target extended-remote 127.0.0.1:4003",
                "mcp-label 3",
                "break 'mcp::sdma::Sdma::intake<mcp_image::hw::SramHw>'",
                "inferior 1",
            ]
        );
        assert_eq!(&a[a.len() - 2..], ["-x", "/s.gdb"]);
    }

    #[test]
    fn a_gdbinit_is_read_unless_nx() {
        let t = [Target { node: 1, port: 9, elf: "/e".into() }];
        let a = args(&gdb_command(&t, &Session::default()));
        assert!(!a.contains(&"-nx".to_string()) && !a.contains(&"-batch".to_string()), "{a:?}");
        assert_eq!(a[0], "-q");
    }

    #[test]
    fn the_commit_hash_comes_from_rustc_vv() {
        let vv = "rustc 1.91.0 (f8297e351 2025-10-28)\nbinary: rustc\n\
                  commit-hash: 59807616e1fa2540724bfbac14d7976d7e4a3860\nhost: x\n";
        assert_eq!(commit_hash(vv), Some("59807616e1fa2540724bfbac14d7976d7e4a3860"));
        assert_eq!(commit_hash("commit-hash: unknown\n"), None);
        assert_eq!(commit_hash("rustc 1\n"), None);
    }

    #[test]
    fn a_missing_batch_script_is_an_error_naming_it() {
        let e = check_script(Path::new("/nonexistent/x.gdb")).unwrap_err();
        assert!(e.starts_with("gdb batch script /nonexistent/x.gdb: "), "{e}");
        let e = check_script(Path::new("/")).unwrap_err();
        assert_eq!(e, "gdb batch script /: not a file");
    }

    #[test]
    fn a_packet_carries_its_bodys_checksum() {
        assert_eq!(packet("D"), "$D#44");
        assert_eq!(packet("OK"), "$OK#9a");
        assert_eq!(packet("D;1"), "$D;1#b0");
        assert_eq!(packet(""), "$#00");
    }

    #[test]
    fn a_packet_is_read_past_acks_and_up_to_its_checksum() {
        let mut r: &[u8] = b"++$OK#9a$next#00";
        assert_eq!(read_packet(&mut r).unwrap(), "OK");
        assert_eq!(read_packet(&mut r).unwrap(), "next");
        let e = read_packet(&mut r).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        let mut cut: &[u8] = b"+$O";
        assert!(read_packet(&mut cut).is_err());
    }

    /// A stand-in for QEMU's gdbstub: takes one connection, sends the
    /// stop reply of a guest the connection stopped (QEMU does, unasked),
    /// answers qSupported and then `detach` with `answer`; returns the
    /// packets it got.
    fn fake_stub(answer: &'static str) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            // Connections that send nothing (a reachability check) are
            // passed over.
            loop {
                let (mut s, _) = l.accept().unwrap();
                let _ = s.write_all(packet("T02thread:p01.01;").as_bytes());
                let mut got = Vec::new();
                for reply in ["PacketSize=1000;multiprocess+", answer] {
                    match read_packet(&mut s) {
                        Ok(p) => got.push(p),
                        Err(_) => break,
                    }
                    s.write_all(b"+").unwrap();
                    s.write_all(packet(reply).as_bytes()).unwrap();
                }
                if !got.is_empty() {
                    return got;
                }
            }
        });
        (port, h)
    }

    #[test]
    fn resuming_a_nic_detaches_its_process_through_the_gdbstub() {
        let (port, stub) = fake_stub("OK");
        let t = Target { node: 3, port, elf: "/e".into() };
        resume_nic(&t).unwrap();
        assert_eq!(stub.join().unwrap(), ["qSupported:multiprocess+", "D;1"]);
    }

    #[test]
    fn a_stub_that_refuses_or_is_gone_is_an_error_naming_the_node_and_port() {
        let (port, stub) = fake_stub("E22");
        let t = Target { node: 2, port, elf: "/e".into() };
        let e = resume_nic(&t).unwrap_err();
        assert_eq!(
            e,
            format!("node 2's gdbstub 127.0.0.1:{port} refused to detach (answer `E22`)")
        );
        stub.join().unwrap();
        // Nothing listens there any more.
        let e = resume_nic(&t).unwrap_err();
        assert!(
            e.starts_with(&format!("node 2's gdbstub 127.0.0.1:{port} does not answer")),
            "{e}"
        );
        let e = resume_all(&[t]).unwrap_err();
        assert!(e.contains("may stay halted") && e.contains("node 2's gdbstub"), "{e}");
    }

    #[test]
    fn nics_reached_before_one_that_does_not_answer_are_resumed() {
        let (port, stub) = fake_stub("OK");
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone_port = gone.local_addr().unwrap().port();
        drop(gone);
        let t = [
            Target { node: 0, port, elf: "/e".into() },
            Target { node: 1, port: gone_port, elf: "/e".into() },
        ];
        let e = check_reachable(&t).unwrap_err();
        assert!(
            e.starts_with(&format!("node 1's gdbstub 127.0.0.1:{gone_port} does not answer")),
            "{e}"
        );
        assert!(!e.contains("may stay halted"), "{e}");
        // Node 0, stopped by the check's connection, was detached.
        assert_eq!(stub.join().unwrap(), ["qSupported:multiprocess+", "D;1"]);
    }

    #[test]
    fn the_time_limit_is_positive_finite_seconds_up_to_a_day() {
        assert_eq!(parse_timeout("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_timeout("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("86400"), Ok(Duration::from_secs(86_400)));
        for bad in ["0", "-1", "nan", "inf", "86401", "1e300"] {
            let e = parse_timeout(bad).unwrap_err();
            assert!(e.contains("more than 0 s and at most 86400 s"), "{bad}: {e}");
        }
        assert_eq!(parse_timeout("x").unwrap_err(), "`x` is not a number of seconds");
    }

    #[test]
    fn each_ending_of_gdb_is_named_in_the_message() {
        let b = Path::new("/s.gdb");
        let e = verdict(&Ending::TimedOut(Duration::from_secs(3)), Some(b)).unwrap_err();
        assert!(
            e.starts_with(
                "gdb: the batch script /s.gdb did not finish within its time limit of 3 s \
                 (--timeout): gdb was stopped"
            ),
            "{e}"
        );
        let e = verdict(&Ending::Signalled("SIGTERM"), None).unwrap_err();
        assert_eq!(e, "gdb: SIGTERM received: the gdb session was stopped");
        let ok = Command::new("true").status().unwrap();
        assert_eq!(verdict(&Ending::Exited(ok), Some(b)), Ok(()));
        let bad = Command::new("false").status().unwrap();
        let e = verdict(&Ending::Exited(bad), Some(b)).unwrap_err();
        assert!(e.starts_with("gdb: the batch script /s.gdb failed ("), "{e}");
    }

    #[test]
    fn a_batch_gdb_past_its_time_limit_is_killed() {
        // `sleep` stands in for a gdb waiting on a guest that never stops.
        let mut c = Command::new("sleep");
        c.arg("30");
        let t0 = Instant::now();
        let end = supervise(c, true, Duration::from_millis(300)).unwrap();
        assert_eq!(end, Ending::TimedOut(Duration::from_millis(300)));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // An interactive session has no time limit: it ends when gdb does.
        let mut c = Command::new("sleep");
        c.arg("0.5");
        let end = supervise(c, false, Duration::from_millis(10)).unwrap();
        assert!(matches!(end, Ending::Exited(s) if s.success()), "{end:?}");
    }

    /// tools/gdb/mcp.py reads the STATS block by its own constants: they
    /// must be the ABI's.
    #[test]
    fn the_mcp_script_knows_the_abis_stats_block() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let py = std::fs::read_to_string(root.join(MCP_SCRIPT)).unwrap();
        let stats = format!("STATS = {:#x}\n", host_driver::nic_abi::map::STATS);
        assert!(py.contains(&stats), "mcp.py lacks `{stats}`");
        let base = format!("GUEST_RAM_BASE = {:#x}\n", nic_emu::realtime::qemu::GUEST_RAM_BASE);
        assert!(py.contains(&base), "mcp.py lacks `{base}`");
        let list = py.split("STAT_NAMES = [").nth(1).unwrap().split(']').next().unwrap();
        let names: Vec<String> = list
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_string())
            .filter(|n| !n.is_empty())
            .collect();
        let abi: Vec<String> =
            host_driver::nic_abi::stats::ALL_STATS.iter().map(|s| format!("{s:?}")).collect();
        assert_eq!(names, abi);
    }
}
