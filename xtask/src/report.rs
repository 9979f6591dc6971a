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
use plotters::prelude::*;

/// Okabe-Ito colours (apart for readers with any common colour-vision
/// deficiency; `plot::COLOURS`): blue, vermillion, bluish green.
const OI_BLUE: RGBColor = crate::plot::COLOURS[4];
const OI_VERMILLION: RGBColor = crate::plot::COLOURS[5];
const OI_GREEN: RGBColor = crate::plot::COLOURS[3];

use crate::bench::{overhead_table, rate_overhead, run_toml};
pub use crate::report_live::LiveCal;

const PROFILE: &str = "lanai4-gm";

fn e<E: std::fmt::Display>(err: E) -> String {
    format!("plot: {err}")
}

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

fn rate_control(profile: &str, dir: &Path, quiet: bool) -> crate::Result<String> {
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

fn plot_sweep(c: &Calibration, path: &Path) -> crate::Result<()> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let xmax = c.sweep.iter().map(|p| p.idt).max().unwrap_or(100) as f64 * 1.05;
    let ymax = c.bmax_mb_s * 1.15;
    let mut ch = ChartBuilder::on(&root)
        .caption(format!("{}: bandwidth vs IDT (64 KiB messages)", c.profile), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(e)?;
    ch.configure_mesh().x_desc("IDT (RTC ticks)").y_desc("bandwidth (MB/s)").draw().map_err(e)?;
    let model: Vec<(f64, f64)> =
        (0..=400).map(|k| k as f64 * xmax / 400.0).map(|x| (x, c.mb_s_for(x as u32))).collect();
    ch.draw_series(LineSeries::new(model, OI_BLUE.stroke_width(2)))
        .map_err(e)?
        .label(format!("model: Bmax = {:.1}, T = {:.1}", c.bmax_mb_s, c.t_ticks))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OI_BLUE));
    ch.draw_series(
        c.sweep.iter().map(|p| Circle::new((p.idt as f64, p.mb_s), 5, OI_VERMILLION.filled())),
    )
    .map_err(e)?
    .label("measured")
    .legend(|(x, y)| Circle::new((x + 10, y), 5, OI_VERMILLION.filled()));
    ch.draw_series(LineSeries::new(vec![(c.t_ticks, 0.0), (c.t_ticks, ymax)], BLACK.mix(0.3)))
        .map_err(e)?;
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

fn plot_curve(c: &Calibration, path: &Path) -> crate::Result<()> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let m = c.in_capacity().max(c.bmax_mb_s) * 1.1;
    let mut ch = ChartBuilder::on(&root)
        .caption(format!("{}: node capacity (A -> B -> C)", c.profile), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..m, 0f64..m)
        .map_err(e)?;
    ch.configure_mesh()
        .x_desc("B receives (MB/s)")
        .y_desc("B sends at most (MB/s)")
        .draw()
        .map_err(e)?;
    let line: Vec<(f64, f64)> = (0..=200)
        .map(|k| k as f64 * c.in_capacity() / 200.0)
        .map(|x| (x, c.out_capacity(x)))
        .collect();
    ch.draw_series(LineSeries::new(line, OI_BLUE.stroke_width(2)))
        .map_err(e)?
        .label("capacity used by the bandwidth manager")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OI_BLUE));
    ch.draw_series(
        c.node_curve
            .iter()
            .map(|p| Circle::new((p.in_mb_s, p.out_mb_s), 5, OI_VERMILLION.filled())),
    )
    .map_err(e)?
    .label("measured")
    .legend(|(x, y)| Circle::new((x + 10, y), 5, OI_VERMILLION.filled()));
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// Grouped bars: (label, requested or expected, achieved).
fn plot_bars(bars: &[(String, f64, f64)], path: &Path) -> crate::Result<()> {
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let n = bars.len();
    let ymax = bars.iter().map(|b| b.1.max(b.2)).fold(1.0, f64::max) * 1.4;
    let mut ch = ChartBuilder::on(&root)
        .caption("achieved vs requested (expected) bandwidth", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(10)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
        .map_err(e)?;
    ch.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc("bandwidth (MB/s)")
        .draw()
        .map_err(e)?;
    // Each group's name above its bars.
    let style = TextStyle::from(("sans-serif", 13).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Bottom,
        ),
    );
    ch.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(b.0.clone(), (i as f64 + 0.5, b.1.max(b.2) + ymax * 0.02), style.clone())
    }))
    .map_err(e)?;
    ch.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new([(x + 0.12, 0.0), (x + 0.48, b.1)], OI_BLUE.mix(0.6).filled())
    }))
    .map_err(e)?
    .label("requested / expected")
    .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], OI_BLUE.mix(0.6).filled()));
    ch.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new([(x + 0.52, 0.0), (x + 0.88, b.2)], OI_VERMILLION.mix(0.7).filled())
    }))
    .map_err(e)?
    .label("achieved")
    .legend(|(x, y)| {
        Rectangle::new([(x, y - 5), (x + 14, y + 5)], OI_VERMILLION.mix(0.7).filled())
    });
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// Dispatch frequency (MB/s of MTU packets in 2 ms bins) of every traced
/// flow over time.
fn plot_dispatch(r: &Report, c: &Calibration, phase_ms: u64, path: &Path) -> crate::Result<()> {
    let bin_ms = 2.0;
    let end_ms = r.sim.end_ns as f64 / 1e6;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut ch = ChartBuilder::on(&root)
        .caption("dispatch frequency over time (best effort + premium)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..end_ms, 0f64..c.bmax_mb_s * 1.5)
        .map_err(e)?;
    ch.configure_mesh()
        .x_desc("virtual time (ms)")
        .y_desc("dispatched (MB/s)")
        .draw()
        .map_err(e)?;
    for k in 1..4 {
        let x = (k * phase_ms) as f64;
        ch.draw_series(LineSeries::new(vec![(x, 0.0), (x, c.bmax_mb_s * 1.5)], BLACK.mix(0.25)))
            .map_err(e)?;
    }
    let colors = [OI_VERMILLION, OI_BLUE, OI_GREEN];
    for (i, f) in r.flows.iter().filter(|f| f.dispatch_ticks.is_some()).enumerate() {
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
        let col = colors[i % colors.len()];
        let label = match f.admitted {
            Some(_) if f.refused_reason.is_none() && f.name.starts_with('p') => {
                format!("{} (premium)", f.name)
            }
            _ => format!("{} (best effort)", f.name),
        };
        ch.draw_series(LineSeries::new(pts, col.stroke_width(2)))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col));
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}
