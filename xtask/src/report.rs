//! `cargo xtask report rate-control`: runs the rate-control experiments on
//! the simulator and writes a Markdown report with SVG plots
//! (plotters, SVG back end) into an output directory (default
//! out/reports/rate-control/):
//!
//! - the IDT sweep (bandwidth vs IDT, with the model Bmax / T over IDT)
//!   and the node-capacity curve: a fresh calibration;
//! - proportional shares: two flows from one node at (2T, 2T) and
//!   (10T/3, 10T/7), and three bandwidth requests; bars of achieved vs
//!   requested;
//! - admission: one request breaking each of the three criteria, and one
//!   let in after a release;
//! - best effort: the dispatch frequency of a best-effort flow over time
//!   while premium flows of 40 and 20 MB/s come and go;
//! - the cost of rate control with every IDT 0 (`bench --rate`).
//!
//! Every experiment is a scenario (written into the directory too), so
//! `cargo xtask sim` reruns any of them. `--backend live` (or `qemu`) runs
//! the same acceptance experiments on a live (or qemu) cluster with its
//! BRM process instead (`report_live.rs`, written to live.md or qemu.md),
//! `--backend all` the sim and live.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::ProgressBar;
use nic_emu::brm::experiments::{self, head, stream};
use nic_emu::brm::Calibration;
use nic_emu::calibrate::rate;
use nic_emu::scenario::{FlowReport, Report};

use crate::plot::{self, Axis};

use crate::bench::{overhead_table, rate_overhead, run_toml};
pub use crate::report_live::LiveCal;

const PROFILE: &str = "lanai4-gm";

/// Which backends a report runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportBackend {
    /// The deterministic simulator (report.md).
    Sim,
    /// A live cluster with its BRM process (live.md; printed too).
    Live,
    /// A qemu cluster (the riscv64 image under qemu-system-riscv64) with
    /// its BRM process (qemu.md; printed too).
    Qemu,
    /// The sim and live (report.md with the live section at the end).
    All,
}

pub fn run(
    which: &str,
    out: Option<PathBuf>,
    profile: Option<String>,
    backend: ReportBackend,
    live_cal: Option<LiveCal>,
    quiet: bool,
) -> crate::Result<ExitCode> {
    if which != "rate-control" {
        return Err(format!(
            "unknown report `{which}` (known: rate-control, multicast, reliability, collectives)"
        ));
    }
    crate::prereq::require_now()?;
    let profile = profile.unwrap_or_else(|| PROFILE.to_string());
    let dir = out.unwrap_or_else(|| crate::workspace_root().join("out/reports/rate-control"));
    std::fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let root = crate::workspace_root();
    use host_driver::cluster::ClusterBackend::{Live, Qemu};
    let (md, file) = match backend {
        ReportBackend::Sim => (rate_control(&profile, &dir, quiet)?, "report.md"),
        ReportBackend::Live => {
            let live = crate::report_live::run(&root, &dir, &profile, Live, live_cal)?;
            print!("{live}");
            (format!("# Rate control on the live backend: report\n\n{live}"), "live.md")
        }
        ReportBackend::Qemu => {
            let q = crate::report_live::run(&root, &dir, &profile, Qemu, live_cal)?;
            print!("{q}");
            (format!("# Rate control on the qemu backend: report\n\n{q}"), "qemu.md")
        }
        ReportBackend::All => {
            let sim = rate_control(&profile, &dir, quiet)?;
            let live = crate::report_live::run(&root, &dir, &profile, Live, live_cal)?;
            (sim + "\n" + &live, "report.md")
        }
    };
    let path = dir.join(file);
    std::fs::write(&path, md).map_err(|err| format!("{}: {err}", path.display()))?;
    println!("rate-control report written to {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn flow<'a>(r: &'a Report, name: &str) -> &'a FlowReport {
    r.flows.iter().find(|f| f.name == name).expect("flow of the experiment")
}

/// Steps of the rate-control report's progress bar: calibration, two
/// share experiments, requests, admission, best effort, the IDT-0 cost.
const STEPS: u64 = 7;

/// Run an experiment's scenario, keeping its text beside the report (one
/// step of the bar).
fn experiment(dir: &Path, name: &str, text: &str, pb: &ProgressBar) -> crate::Result<Report> {
    let _ = std::fs::write(dir.join(format!("{name}.toml")), text);
    pb.set_message(format!("rate-control: {name}"));
    let (r, bad) = run_toml(text)?;
    pb.inc(1);
    if let Some(b) = bad {
        return Err(format!("experiment {name} did not run clean: {b}"));
    }
    Ok(r)
}

pub(crate) fn rate_control(profile: &str, dir: &Path, quiet: bool) -> crate::Result<String> {
    let pb = crate::progress::bar(STEPS, "rate-control: calibration", quiet);
    let mut md = String::new();
    let _ = writeln!(md, "# Rate control and the bandwidth resource manager: report\n");
    let _ = writeln!(
        md,
        "Profile `{profile}`, deterministic simulator. Generated by `cargo xtask report \
         rate-control`; every experiment's scenario is beside this file (`cargo xtask sim \
         FILE --json` reruns it). Semantics and design: docs/rate-control.md.\n"
    );

    // 1. Calibration.
    let m = rate::measure(profile, false)?;
    pb.inc(1);
    let c = m.cal.clone();
    let _ = writeln!(md, "## Calibration: T and Bmax\n");
    let _ = writeln!(
        md,
        "One flow of 64 KiB messages, node 0 -> 1, at IDT 0 and multiples of T. \
         **T = {:.2} RTC ticks** ({:.2} us), **Bmax = {:.2} MB/s** (10^6 B/s); the \
         unregulated flow's mean dispatch interval is {:.2} ticks. A link carries {:.1} MB/s \
         of payload. (Source testbed: T = 96 ticks, Bmax ~82 MB/s; 4096 B every 96 ticks of \
         0.5 us would be 85.3 MB/s, so at 82 MB/s our T is 100 ticks: see \
         docs/rate-control.md.)\n",
        c.t_ticks,
        c.t_ticks * 1e6 / c.rtc_hz as f64,
        c.bmax_mb_s,
        c.dispatch_interval_ticks,
        c.link_mb_s
    );
    let _ = writeln!(md, "![bandwidth vs IDT](idt-sweep.svg)\n");
    let _ = writeln!(md, "| IDT (ticks) | IDT / T | MB/s | model | deviation |");
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|");
    for p in &c.sweep {
        let model = c.mb_s_for(p.idt);
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2} | {:+.2}% |",
            p.idt,
            p.idt as f64 / c.t_ticks,
            p.mb_s,
            model,
            (p.mb_s - model) / model * 100.0
        );
    }
    plot_sweep(&c, &dir.join("idt-sweep.svg"))?;
    let _ = writeln!(md, "\n### Node capacity\n");
    let _ = writeln!(
        md,
        "Three nodes A -> B -> C: A sends to B at a rate (IDT), B sends to C unregulated. \
         The bandwidth manager takes a node's capacity from this curve (past its last point \
         it goes on along its last segment).\n"
    );
    let _ = writeln!(md, "![node capacity](node-capacity.svg)\n");
    let _ = writeln!(md, "| B receives (MB/s) | B sends at most (MB/s) | sum |");
    let _ = writeln!(md, "|---:|---:|---:|");
    for p in &c.node_curve {
        let _ = writeln!(
            md,
            "| {:.2} | {:.2} | {:.2} |",
            p.in_mb_s,
            p.out_mb_s,
            p.in_mb_s + p.out_mb_s
        );
    }
    plot_curve(&c, &dir.join("node-capacity.svg"))?;

    // 2. Proportional shares.
    let _ = writeln!(md, "\n## Proportional shares\n");
    let mut bars: Vec<(String, f64, f64)> = Vec::new();
    let _ =
        writeln!(md, "| experiment | flow | IDT | expected MB/s | achieved MB/s | ratio check |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---|");
    for (name, ka, kb, ma, mb) in
        [("2T-2T", 2.0, 2.0, 40u64, 40u64), ("10T3-10T7", 10.0 / 3.0, 10.0 / 7.0, 30, 70)]
    {
        let text = head(profile, 3, "star")
            + &stream("a", 0, 1, ma, &format!("idt_t = {ka}"))
            + &stream("b", 0, 2, mb, &format!("idt_t = {kb}"));
        let r = experiment(dir, &format!("shares-{name}"), &text, &pb)?;
        let (a, b) = (flow(&r, "a"), flow(&r, "b"));
        let (ia, ib) = (a.idt.unwrap_or(0), b.idt.unwrap_or(0));
        let want = ia as f64 / ib.max(1) as f64;
        let got = b.bandwidth_mb_s / a.bandwidth_mb_s.max(1e-9);
        let check = format!(
            "b/a = {got:.3} vs IDT_a/IDT_b = {want:.3} ({:+.2}%)",
            (got - want) / want * 100.0
        );
        for (f, idt, chk) in [(a, ia, check.as_str()), (b, ib, "")] {
            let expect = c.mb_s_for(idt);
            let _ = writeln!(
                md,
                "| {name} | {} | {idt} | {expect:.2} | {:.2} | {chk} |",
                f.name, f.bandwidth_mb_s
            );
            bars.push((format!("{name} {}", f.name), expect, f.bandwidth_mb_s));
        }
    }
    // Bandwidth requests through the manager.
    let text = head(profile, 4, "star")
        + &stream("r10", 0, 1, 15, "rate_mb_s = 10")
        + &stream("r20", 0, 2, 30, "rate_mb_s = 20")
        + &stream("r40", 0, 3, 60, "rate_mb_s = 40");
    let r = experiment(dir, "requests", &text, &pb)?;
    for (name, want) in [("r10", 10.0), ("r20", 20.0), ("r40", 40.0)] {
        let f = flow(&r, name);
        let _ = writeln!(
            md,
            "| requests | {name} ({want} MB/s asked) | {} | {want:.2} | {:.2} | admitted: {} |",
            f.idt.unwrap_or(0),
            f.bandwidth_mb_s,
            f.admitted.unwrap_or(false)
        );
        bars.push((format!("request {name}"), want, f.bandwidth_mb_s));
    }
    let _ = writeln!(md, "\n![achieved vs requested](shares.svg)\n");
    plot_bars(&bars, &dir.join("shares.svg"))?;

    // 3. Admission.
    let _ = writeln!(md, "## Admission by the three criteria\n");
    let _ = writeln!(
        md,
        "Two switches (nodes 0 to 4 on switch 0, 5 to 9 on switch 1, joined by switch 0 port \
         15). Node 0 holds 60 MB/s to node 1 until 20 ms; three 55 MB/s flows want the \
         trunk (t1 and t2 at 0 ms, t3 at 1 ms); `src-full` and `dst-full` ask at 1 ms; \
         `src-later` asks at 40 ms, after node 0's reservation was released.\n"
    );
    let r = experiment(dir, "admission", &experiments::admission(profile), &pb)?;
    let _ = writeln!(md, "| flow | route | admitted | IDT | MB/s | refused because |");
    let _ = writeln!(md, "|---|---|---|---:|---:|---|");
    for f in &r.flows {
        let dst = f.dst.unwrap_or_default();
        let _ = writeln!(
            md,
            "| {} | {}:{} -> {}:{} | {} | {} | {:.2} | {} |",
            f.name,
            f.src[0],
            f.src[1],
            dst[0],
            dst[1],
            f.admitted.map_or("-".to_string(), |a| a.to_string()),
            f.idt.map_or("-".to_string(), |i| i.to_string()),
            f.bandwidth_mb_s,
            f.refused_reason.as_deref().unwrap_or("")
        );
    }

    // 4. Best effort.
    let phase_ms = 60u64;
    let us = |k: u64| k * phase_ms * 1000;
    let text = experiments::best_effort(profile, phase_ms);
    let r = experiment(dir, "best-effort", &text, &pb)?;
    let _ = writeln!(md, "\n## Best effort\n");
    let _ = writeln!(
        md,
        "A best-effort flow 0 -> 1 runs alone; at {} ms a 40 MB/s premium flow 0 -> 2 \
         starts, at {} ms a 20 MB/s one 0 -> 3; both stop sending at {} ms and release \
         their reservations when their last message completes. Dispatch frequency from the \
         NIC's dispatch trace, in 2 ms bins (MB/s of 4 KiB packets).\n",
        us(1) / 1000,
        us(2) / 1000,
        us(3) / 1000
    );
    let _ = writeln!(md, "![dispatch frequency over time](best-effort.svg)\n");
    let rate_in =
        |f: &FlowReport, a: f64, b: f64| experiments::dispatch_mb_s(f, c.rtc_hz, c.mtu, a, b);
    let _ =
        writeln!(md, "| phase (last 25 ms) | best effort MB/s | expected | p40 MB/s | p20 MB/s |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    let p = phase_ms as f64;
    for (k, what, expect) in [
        (1.0, "alone", c.bmax_mb_s),
        (2.0, "with p40", c.bmax_mb_s - 40.0),
        (3.0, "with p40 + p20", c.bmax_mb_s - 60.0),
        (4.0, "alone again", c.bmax_mb_s),
    ] {
        let (a, b) = (k * p - 25.0, k * p);
        let _ = writeln!(
            md,
            "| {what} | {:.2} | {expect:.2} | {:.2} | {:.2} |",
            rate_in(flow(&r, "be"), a, b),
            rate_in(flow(&r, "p40"), a, b),
            rate_in(flow(&r, "p20"), a, b)
        );
    }
    let hist = flow(&r, "be").idt_history.clone().unwrap_or_default();
    let _ = writeln!(
        md,
        "\nIDTs the manager gave the best-effort flow: {}.\n",
        hist.iter()
            .map(|(t, i)| format!(
                "{} at {:.1} ms",
                i.map_or("removed".to_string(), |i| i.to_string()),
                *t as f64 / 1e6
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        md,
        "When an IDT changes the MCP restarts the flow's NDT at the RTC (no credit for \
         time it ran at its old rate; see docs/rate-control.md), so each phase's rate holds \
         from its first packets. The table's windows are the steady state.\n"
    );
    plot_dispatch(&r, &c, phase_ms, &dir.join("best-effort.svg"))?;

    // 5. Cost with every IDT 0.
    let _ = writeln!(md, "## Cost of rate control with every IDT 0\n");
    let mut unclean = Vec::new();
    pb.set_message("rate-control: the cost with every IDT 0");
    let rows = rate_overhead(profile, false, &mut unclean)?;
    pb.inc(1);
    pb.finish_and_clear();
    let (table, o) = overhead_table(&rows);
    let _ = writeln!(
        md,
        "Ping-pong one-way latency (median) and stream bandwidth, 2 nodes, the same firmware \
         with a flow entry of IDT 0 on every stream vs no flow entries \
         (`cargo xtask bench --rate`). Median difference over the sizes: latency {:+.3}%, \
         bandwidth {:+.3}% (mean {:+.3}% and {:+.3}%). (The sim prices NIC CPU by units of \
         firmware work, and flow accounting is charged as its own: `Work::flow_ops`, the \
         profile's `flow_op` cycles.)\n\n```\n{table}```\n",
        o.lat_median, o.bw_median, o.lat_mean, o.bw_mean
    );
    for u in unclean {
        let _ = writeln!(md, "NOT CLEAN: {u}\n");
    }
    Ok(md)
}

/// Bandwidth against IDT: the measured sweep, the model Bmax / max(1,
/// IDT / T) dashed, and T marked.
fn plot_sweep(c: &Calibration, path: &Path) -> crate::Result<()> {
    let measured: Vec<(f64, f64)> = c.sweep.iter().map(|p| (p.idt as f64, p.mb_s)).collect();
    let xmax = measured.iter().map(|p| p.0).fold(0.0, f64::max);
    let model: Vec<(f64, f64)> =
        (0..=400).map(|k| k as f64 * xmax / 400.0).map(|x| (x, c.mb_s_for(x as u32))).collect();
    plot::figure(
        path,
        &format!("{}: bandwidth vs IDT (64 KiB messages)", c.profile),
        Axis::linear("IDT (RTC ticks)"),
        Axis::linear("bandwidth (MB/s)"),
        &[("measured".to_string(), measured)],
        &[(
            plot::model_label(&format!(
                "Bmax = {:.1} MB/s, T = {:.1} ticks",
                c.bmax_mb_s, c.t_ticks
            )),
            model,
        )],
        &plot::Extras { vlines: &[(c.t_ticks, "T".to_string())], ..Default::default() },
    )
}

/// What node B can send while it receives: measured, and the capacity
/// the bandwidth manager decides with.
fn plot_curve(c: &Calibration, path: &Path) -> crate::Result<()> {
    let measured: Vec<(f64, f64)> = c.node_curve.iter().map(|p| (p.in_mb_s, p.out_mb_s)).collect();
    let line: Vec<(f64, f64)> = (0..=200)
        .map(|k| k as f64 * c.in_capacity() / 200.0)
        .map(|x| (x, c.out_capacity(x)))
        .collect();
    plot::curves(
        path,
        &format!("{}: node capacity (A -> B -> C)", c.profile),
        Axis::linear("B receives (MB/s)"),
        Axis::linear("B sends at most (MB/s)"),
        &[("measured".to_string(), measured)],
        &[(plot::model_label("capacity the bandwidth manager uses"), line)],
    )
}

/// Grouped bars: (label, requested or expected, achieved).
fn plot_bars(bars: &[(String, f64, f64)], path: &Path) -> crate::Result<()> {
    let groups: Vec<(String, Vec<f64>)> =
        bars.iter().map(|(l, want, got)| (l.clone(), vec![*want, *got])).collect();
    plot::grouped_bars(
        path,
        "achieved vs requested (expected) bandwidth",
        "experiment and flow",
        Axis::linear("bandwidth (MB/s)"),
        &["requested / expected", "achieved"],
        &groups,
    )
}

/// Dispatch frequency (MB/s of MTU packets in 2 ms bins) of every traced
/// flow over time, the phases' boundaries marked.
fn plot_dispatch(r: &Report, c: &Calibration, phase_ms: u64, path: &Path) -> crate::Result<()> {
    let bin_ms = 2.0;
    let end_ms = r.sim.end_ns as f64 / 1e6;
    let mut curves = Vec::new();
    for f in r.flows.iter().filter(|f| f.dispatch_ticks.is_some()) {
        let nbins = (end_ms / bin_ms).ceil() as usize + 1;
        let mut counts = vec![0u64; nbins];
        for &t in f.dispatch_ticks.as_deref().unwrap_or(&[]) {
            let ms = t as f64 * 1e3 / c.rtc_hz as f64;
            if let Some(b) = counts.get_mut((ms / bin_ms) as usize) {
                *b += 1;
            }
        }
        let pts: Vec<(f64, f64)> = counts
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                ((k as f64 + 0.5) * bin_ms, n as f64 * c.mtu as f64 / (bin_ms / 1e3) / 1e6)
            })
            .collect();
        let label = match f.admitted {
            Some(_) if f.refused_reason.is_none() && f.name.starts_with('p') => {
                format!("{} (premium)", f.name)
            }
            _ => format!("{} (best effort)", f.name),
        };
        curves.push((label, pts));
    }
    let vlines: Vec<(f64, String)> =
        (1..4).map(|k| ((k * phase_ms) as f64, format!("phase {}", k + 1))).collect();
    plot::figure(
        path,
        "dispatch frequency over time (best effort + premium)",
        Axis::linear("simulated time (ms)"),
        Axis::linear("dispatched (MB/s, 2 ms bins)"),
        &curves,
        &[],
        &plot::Extras { marker_every: 8, vlines: &vlines, ..Default::default() },
    )
}
