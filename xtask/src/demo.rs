//! `cargo xtask demo`: a 4-node cluster at work. By default on the qemu
//! backend (the riscv64 MCP image under QEMU; installed with apt-get when
//! missing and running as root) or, without QEMU, the live backend, driven
//! by host processes (`pingpong` and `stream`, through `crate::rt`).
//! `--backend sim` runs the scenario scenarios/demo-4node.toml (built in,
//! so the demo runs from anywhere) on the deterministic simulator.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, RtConfig};
use nic_emu::scenario::{self, report::fmt_bytes, report::fmt_ns, Scenario};

use crate::fw;
use crate::rt::{self, Backend};

const DEMO: &str = include_str!("../../scenarios/demo-4node.toml");

/// `cargo xtask demo`: the real-time demo (qemu, else live) unless the
/// sim is asked for (or `--json`, which is the sim's document).
pub fn run(root: &Path, backend: Option<Backend>, json: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    if json || backend == Some(Backend::Sim) {
        return run_sim(json);
    }
    run_realtime(root, backend)
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
            match f.dst {
                Some(d) => format!("{}:{} -> {}:{}", f.src[0], f.src[1], d[0], d[1]),
                None => format!("{}:{} -> group", f.src[0], f.src[1]),
            },
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

/// Where a demo's threads run on a small machine: the NICs' processors on
/// `nic` (qemu: the QEMU guests; live: the device thread, which runs the
/// MCPs), the host programs (and under qemu the device thread) on `rest`.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub nic: usize,
    pub rest: Vec<usize>,
}

/// On a machine of 2 or 3 cores the OS puts a NIC processor that polls for
/// work on the core a host program needs (a QEMU guest does not yield
/// while it polls; the live device thread spins before it yields). On a
/// 2-core VM the demo's 8-byte ping-pong answered in about 180 us that way
/// under qemu, in about 80 us with the guests on a core of their own (live:
/// about 4 and 1.7 us). With 4 cores or more there are cores enough, and
/// pinning all four guests to one would crowd them; on one core there is
/// nothing to choose. There the OS places everything.
pub fn small_machine_layout(cores: &[usize]) -> Option<Layout> {
    match cores.split_last() {
        Some((&nic, rest)) if (1..=2).contains(&rest.len()) => {
            Some(Layout { nic, rest: rest.to_vec() })
        }
        _ => None,
    }
}

/// `cargo xtask demo` on a real-time backend (qemu when QEMU is here or
/// can be installed, else live).
fn run_realtime(root: &Path, want: Option<Backend>) -> crate::Result<ExitCode> {
    let t0 = Instant::now();
    let backend = match want {
        Some(Backend::Live) => ClusterBackend::Live,
        Some(Backend::Qemu) => {
            if !rt::ensure_qemu()? {
                return Err(format!("--backend qemu: {} is missing", qemu::QEMU_PROGRAM));
            }
            ClusterBackend::Qemu
        }
        _ => {
            if rt::ensure_qemu()? {
                ClusterBackend::Qemu
            } else {
                println!("falling back to the live backend (the MCP as native threads)");
                ClusterBackend::Live
            }
        }
    };
    // The live backend runs the MCP natively: only qemu needs the image.
    let elf = if backend == ClusterBackend::Qemu {
        println!("==> firmware image");
        let elf = fw::build_image(root, false)?;
        fw::report_size(&elf)?;
        Some(elf)
    } else {
        None
    };
    println!("==> host programs (pingpong, stream)");
    let bins = fw::build_host_programs(root)?;
    let name = format!("demo-{}", std::process::id());
    let mut cfg = RtConfig::new(&name, backend, 4);
    cfg.image = elf.clone();
    let layout = small_machine_layout(&host_driver::affinity::current()?);
    let mut host_args = Vec::new();
    if let Some(l) = &layout {
        if backend == ClusterBackend::Qemu {
            cfg.guest_cpus = vec![l.nic];
            cfg.cpus = l.rest.clone();
        } else {
            cfg.cpus = vec![l.nic];
        }
        host_args = vec!["--cpus".to_string(), crate::bench_rt::cpu_list(&l.rest)];
    }
    let host_args: Vec<&str> = host_args.iter().map(String::as_str).collect();
    let stop = rt::stop_flag()?;
    println!(
        "==> starting a 4-node cluster on the {} backend ({})",
        backend,
        if backend == ClusterBackend::Qemu {
            "one qemu-system-riscv64 per NIC running the riscv64 MCP image"
        } else {
            "the MCP as native threads; no QEMU"
        }
    );
    let c = rt::start(cfg)?;
    if let Some(elf) = &elf {
        println!(
            "flashed {} into node0..node3/flash; every NIC booted it (FW_STATUS = RUNNING)",
            elf.display()
        );
    }
    rt::print_where(&c);
    if let Some(l) = &layout {
        let (nic, rest) = if backend == ClusterBackend::Qemu {
            ("the NICs' CPUs (the QEMU guests)", "the device thread and the host programs")
        } else {
            ("the device thread (every NIC's MCP)", "the host programs")
        };
        println!(
            "on {} cores: {nic} on cpu {}, {rest} on cpu {} (a NIC has a processor of its own; \
             this layout answers about twice as fast here as leaving it to the OS: \
             docs/design/performance.md)",
            l.rest.len() + 1,
            l.nic,
            crate::bench_rt::cpu_list(&l.rest),
        );
    }
    let path = c.path().to_path_buf();
    let qemu = backend == ClusterBackend::Qemu;
    let (pp_count, st_count) = if qemu { (1000, 200) } else { (5000, 2000) };
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let mut failed = None;
    println!("==> host processes: pingpong (nodes 0 <-> 1), stream (node 2 -> node 3)");
    for size in [8u32, 1024] {
        match rt::pingpong(&bins, &path, 1, size, pp_count, &host_args) {
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
        match rt::stream(&bins, &path, 4, 2, size, st_count, &host_args) {
            Ok(mb) => rows.push((
                "stream".into(),
                "2 -> 3".into(),
                format!("{} KiB x {st_count}", size / 1024),
                format!("{mb:.1} MB/s"),
            )),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if qemu && failed.is_none() {
        // What a NIC with nothing to do costs its host: node 0's QEMU,
        // once it has settled after the traffic above.
        match rt::idle_cpu(&c, 0) {
            Ok(idle) => rows.push((
                "idle NIC".into(),
                "0".into(),
                "none, 2 s".into(),
                format!("{:.1} ms of CPU per wall second (its QEMU)", idle * 1000.0),
            )),
            Err(e) => failed = Some(e),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nics_get_the_last_core_of_a_small_machine_only() {
        assert_eq!(small_machine_layout(&[0, 1]), Some(Layout { nic: 1, rest: vec![0] }));
        assert_eq!(small_machine_layout(&[2, 5, 7]), Some(Layout { nic: 7, rest: vec![2, 5] }));
        assert_eq!(small_machine_layout(&[3]), None);
        assert_eq!(small_machine_layout(&[]), None);
        assert_eq!(small_machine_layout(&[0, 1, 2, 3]), None);
    }
}
