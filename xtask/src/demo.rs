//! `cargo xtask demo`: a 4-node cluster at work. By default on the qemu
//! backend (the riscv64 MCP image under QEMU; installed with apt-get when
//! missing and running as root) or, without QEMU, the live backend, driven
//! by host processes (`crate::rt::demo`). `--backend sim` runs the
//! scenario scenarios/demo-4node.toml (built in, so the demo runs from
//! anywhere) on the deterministic simulator.

use std::path::Path;
use std::process::ExitCode;

use crate::rt::Backend;
use nic_emu::scenario::{self, report::fmt_bytes, report::fmt_ns, Scenario};

const DEMO: &str = include_str!("../../scenarios/demo-4node.toml");

/// `cargo xtask demo`: the real-time demo (qemu, else live) unless the
/// sim is asked for (or `--json`, which is the sim's document).
pub fn run(root: &Path, backend: Option<Backend>, json: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    if json || backend == Some(Backend::Sim) {
        return run_sim(json);
    }
    crate::rt::demo(root, backend)
}

/// The demo scenario on the deterministic simulator.
pub fn run_sim(json: bool) -> crate::Result<ExitCode> {
    let sc = Scenario::parse_validated(DEMO).map_err(|e| format!("demo scenario: {e}"))?;
    if !json {
        println!(
            "demo: {} nodes, topology {}, profile {}, {} flows (scenarios/demo-4node.toml)",
            sc.nodes,
            sc.topology,
            sc.profile,
            sc.flows.len()
        );
        println!("backend: deterministic simulation (virtual time)\n");
    }
    let r = scenario::run(&sc).map_err(|e| e.to_string())?;
    if json {
        crate::emit(&format!("{}\n", r.to_json()));
        return Ok(if r.all_delivered_intact() { ExitCode::SUCCESS } else { ExitCode::from(2) });
    }
    println!(
        "{:<12} {:<9} {:<13} {:<5} {:>8} {:>11} {:>9} {:>11} {:>11}",
        "flow", "kind", "from -> to", "prio", "size", "delivered", "MB/s", "lat p50", "lat max"
    );
    for f in &r.flows {
        let size = if f.sizes.len() == 1 { fmt_bytes(f.sizes[0]) } else { "mixed".into() };
        println!(
            "{:<12} {:<9} {:<13} {:<5} {:>8} {:>5}/{:<5} {:>9.2} {:>11} {:>11}",
            f.name,
            f.kind,
            format!("{}:{} -> {}:{}", f.src[0], f.src[1], f.dst[0], f.dst[1]),
            f.priority,
            size,
            f.delivered,
            f.messages,
            f.bandwidth_mb_s,
            fmt_ns(f.latency_ns.p50),
            fmt_ns(f.latency_ns.max),
        );
    }
    let sent: u64 = r.nics.iter().map(|n| n.packets_sent).sum();
    let retrans: u64 = r.nics.iter().map(|n| n.retransmits).sum();
    println!(
        "\nsimulated {} in {:.0} ms of wall time: {} packets ({} link hops), {} retransmits",
        fmt_ns(r.sim.end_ns),
        r.sim.wall_ms,
        sent,
        r.sim.hops,
        retrans
    );
    if r.all_delivered_intact() {
        println!(
            "every message delivered exactly once, intact and in order (checked byte by byte)"
        );
        println!("next: `cargo xtask sim scenarios/alltoall-16-faults.toml`, `cargo xtask bench`, `cargo xtask test`");
        Ok(ExitCode::SUCCESS)
    } else {
        print!("{}", r.summary());
        Ok(ExitCode::from(2))
    }
}
