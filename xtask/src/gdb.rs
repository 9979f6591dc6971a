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

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

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
    pub sdma_only: bool,
    pub nx: bool,
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
/// on after a failed `target` command, even in batch mode.)
fn check_reachable(targets: &[Target]) -> crate::Result<()> {
    for t in targets {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], t.port));
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).map_err(
            |e| {
                format!(
                    "node {}'s gdbstub 127.0.0.1:{} does not answer ({e}): is its QEMU running?",
                    t.node, t.port
                )
            },
        )?;
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

fn finish(st: std::io::Result<std::process::ExitStatus>, batch: Option<&Path>) -> ExitCode {
    match st {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            match batch {
                Some(b) => eprintln!("gdb: the batch script {} failed ({s})", b.display()),
                None => eprintln!("gdb: gdb-multiarch exited with {s}"),
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("gdb: cannot run gdb-multiarch: {e}");
            ExitCode::from(1)
        }
    }
}

/// `--cluster C`: attach to the running cluster's NICs.
fn attach(cluster: &str, o: &Opts, s: &Session) -> crate::Result<ExitCode> {
    let dir = ClusterDir::open(cluster).map_err(|e| format!("gdb --cluster {cluster}: {e}"))?;
    let targets = cluster_targets(&dir, &o.nodes, o.image.as_deref())?;
    check_reachable(&targets)?;
    println!("attaching gdb-multiarch to cluster {} (each NIC halts until detached):", cluster);
    print_targets(&targets);
    // gdb takes Ctrl-C to interrupt the guest: this process must not die of it.
    let _stop = rt::stop_flag()?;
    Ok(finish(gdb_command(&targets, s).status(), o.batch.as_deref()))
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
            Ok(finish(gdb_command(&t, s).status(), o.batch.as_deref()))
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
