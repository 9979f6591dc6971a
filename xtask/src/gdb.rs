//! `cargo xtask gdb`: a qemu cluster with one NIC's QEMU halted on its
//! gdbstub, and gdb-multiarch attached with the image's symbols and
//! breakpoints on the MCP's step functions (installing gdb-multiarch and
//! QEMU when missing). The cluster stops when gdb exits.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use host_driver::cluster::ClusterBackend;
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
pub fn run(
    root: &Path,
    node: usize,
    nodes: usize,
    name: &str,
    script: Option<PathBuf>,
    only_sdma: bool,
) -> crate::Result<ExitCode> {
    use crate::prereq::Need;
    crate::prereq::ensure("cargo xtask gdb", &[Need::FwTarget, Need::Qemu, Need::Gdb])?;
    let elf = fw::build_image(root, false)?;
    let port = free_port()?;
    let mut cfg = RtConfig::new(name, ClusterBackend::Qemu, nodes.max(node + 1));
    cfg.image = Some(elf.clone());
    cfg.halted_node = Some((node, port));
    // gdb takes Ctrl-C to interrupt the guest: this process must not die of it.
    let _stop = rt::stop_flag()?;
    let c = rt::start(cfg)?;
    rt::print_where(&c);
    println!(
        "node {node}'s QEMU is halted with its gdbstub on tcp::{port}; starting gdb-multiarch \
         with {} and breakpoints on the state machines' step functions",
        elf.display()
    );
    println!(
        "in gdb: `print mcp_image::MCP.sdma.state` (and .send, .recv, .rdma) says what each \
         machine is doing or waiting for; `print mcp_image::MCP` shows everything"
    );
    let breaks: Vec<&str> =
        if only_sdma { vec![STEP_FUNCTIONS[0]] } else { STEP_FUNCTIONS.to_vec() };
    let st = gdb_command(&elf, port, &breaks, script.as_deref())
        .status()
        .map_err(|e| format!("cannot run gdb-multiarch: {e}"))?;
    c.stop().map_err(|e| e.to_string())?;
    Ok(if st.success() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
