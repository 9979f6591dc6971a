//! `cargo xtask report reliability`: go-back-N against selective repeat
//! under link loss, on the simulator. For each profile (lanai9-gm with
//! 16 KiB messages, modern with 64 KiB: 4 and 16 packets of 4 KiB) two
//! workloads run at each loss rate in both modes, with three seeds (the
//! fault injection's draws; tables give their means, plots the means
//! with the least and most as error bars): streams
//! between disjoint pairs of nodes (loss recovery on its own, as the
//! protocols' own comparisons measure it) and an 8-node all-to-all (every
//! receiver taking seven streams at once, whose packets past gaps compete
//! for its 32 receive buffers);
//! the report gives goodput, what was sent again, the worst flow's p99
//! latency and the control packets' share of the wire, side by side, as
//! Markdown with SVG plots. Every run must deliver every message exactly
//! once, intact and in order; one that does not is printed on stderr and
//! the command exits 2.
//!
//! Every point is a scenario, written into the output directory, so
//! `cargo xtask sim FILE` reruns it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nic_emu::profile::Reliability;
use nic_emu::scenario::Report;

use crate::plot::{self, Axis, Curve};

/// The profiles, each with its message size: a few packets per message on
/// the slow links, more on the fast ones.
const PROFILES: [(&str, u64); 2] = [("lanai9-gm", 16 << 10), ("modern", 64 << 10)];
const NODES: u64 = 8;
/// Sends outstanding per flow.
const WINDOW: u64 = 8;

/// What a report runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// "full" or "quick".
    pub name: &'static str,
    /// Link loss rates, in percent (`[faults] drop` is a probability).
    pub losses: Vec<f64>,
    /// The seeds every point runs with: the fault injection's draws.
    pub seeds: Vec<u64>,
    /// Messages per flow.
    pub messages: u64,
    /// Messages on the heavy-loss section's stream.
    pub heavy_messages: u64,
}

impl Plan {
    /// Loss 0 to 5% in seven steps, seeds 1 to 3, 200 messages a flow
    /// (56 flows in the all-to-all: a flow's p99 is its second largest),
    /// 5,000 on the heavy-loss stream. About a minute on 2 cores.
    pub fn full() -> Plan {
        Plan {
            name: "full",
            losses: vec![0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0],
            seeds: vec![1, 2, 3],
            messages: 200,
            heavy_messages: 5000,
        }
    }

    /// Loss 0, 1 and 5%, seeds 1 and 2, 40 messages a flow, 500 on the
    /// heavy-loss stream: the same tables and plots in a few seconds.
    pub fn quick() -> Plan {
        Plan {
            name: "quick",
            losses: vec![0.0, 1.0, 5.0],
            seeds: vec![1, 2],
            messages: 40,
            heavy_messages: 500,
        }
    }
}

/// What runs at each point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Node 2i streams to node 2i + 1: one stream into each receiver.
    Pairs,
    /// Every node streams to every other.
    AllToAll,
}

impl Workload {
    pub const ALL: [Workload; 2] = [Workload::Pairs, Workload::AllToAll];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Pairs => "pairs",
            Workload::AllToAll => "all-to-all",
        }
    }

    fn flows(self, bytes: u64, messages: u64) -> String {
        let stream = |name: String, src: u64, dst: u64| {
            format!(
                "[[flows]]\nname = \"{name}\"\nkind = \"stream\"\nsrc = [{src}, 2]\n\
                 dst = [{dst}, 2]\nbytes = {bytes}\nmessages = {messages}\nwindow = {WINDOW}\n\n"
            )
        };
        match self {
            Workload::Pairs => {
                (0..NODES / 2).map(|i| stream(format!("p{i}"), 2 * i, 2 * i + 1)).collect()
            }
            Workload::AllToAll => format!(
                "[[alltoall]]\nname = \"a2a\"\nport = 2\nbytes = {bytes}\n\
                 messages = {messages}\nwindow = {WINDOW}\n\n"
            ),
        }
    }
}

/// The scenario of one point, `messages` a flow.
pub fn scenario_toml(
    messages: u64,
    workload: Workload,
    profile: &str,
    bytes: u64,
    mode: Reliability,
    loss_pct: f64,
    seed: u64,
) -> String {
    format!(
        "# cargo xtask report reliability: {}, {profile}, {mode}, link loss {loss_pct}%, \
         seed {seed}\n\
         profile = \"{profile}\"\nseed = {seed}\n\n[fabric]\nnodes = {NODES}\n\n{}\
         [faults]\ndrop = {}\n\n[firmware]\nreliability = \"{mode}\"\n",
        workload.name(),
        workload.flows(bytes, messages),
        loss_pct / 100.0
    )
}

/// What one run gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Delivered payload bytes over the time from the first send to the
    /// last receive, all flows together (10^6 B/s of simulated time).
    pub goodput_mb_s: f64,
    pub retx_packets: u64,
    /// `RetxBytes` summed over the NICs.
    pub retx_bytes: u64,
    /// The largest p99 latency of any flow (ns).
    pub p99_ns: u64,
    /// (acks + nacks + polls + STATs + USTATs) / packets sent.
    pub control_share: f64,
}

impl Point {
    /// The mean of `v` (each figure's), a point of none when empty.
    pub fn mean(v: &[Point]) -> Point {
        let n = v.len().max(1) as f64;
        let f = |g: fn(&Point) -> f64| v.iter().map(g).sum::<f64>() / n;
        Point {
            goodput_mb_s: f(|p| p.goodput_mb_s),
            retx_packets: f(|p| p.retx_packets as f64).round() as u64,
            retx_bytes: f(|p| p.retx_bytes as f64).round() as u64,
            p99_ns: f(|p| p.p99_ns as f64).round() as u64,
            control_share: f(|p| p.control_share),
        }
    }

    pub fn of(r: &Report) -> Point {
        let bytes: u64 = r.flows.iter().map(|f| f.bytes).sum();
        let first = r.flows.iter().map(|f| f.first_send_ns).min().unwrap_or(0);
        let last = r.flows.iter().map(|f| f.last_recv_ns).max().unwrap_or(0);
        let goodput_mb_s = nic_emu::scenario::report::bandwidth_mb_s(bytes, first, last);
        let sum = |g: fn(&nic_emu::scenario::NicReport) -> u64| r.nics.iter().map(g).sum::<u64>();
        let control =
            sum(|n| n.acks_sent + n.nacks_sent + n.polls_sent + n.stats_sent + n.ustats_sent);
        let sent = sum(|n| n.packets_sent);
        Point {
            goodput_mb_s,
            retx_packets: sum(|n| n.retransmits),
            retx_bytes: sum(|n| n.retx_bytes),
            p99_ns: r.flows.iter().map(|f| f.latency_ns.p99).max().unwrap_or(0),
            control_share: if sent == 0 { 0.0 } else { control as f64 / sent as f64 },
        }
    }
}

/// The file name of a point's scenario.
fn file_name(
    workload: Workload,
    profile: &str,
    mode: Reliability,
    loss_pct: f64,
    seed: u64,
) -> String {
    format!("{}-{profile}-{mode}-loss-{loss_pct}-seed-{seed}.toml", workload.name())
}

/// One loss rate's runs: per mode (go-back-N, selective), one point per
/// seed.
type Row = (f64, Vec<Point>, Vec<Point>);

/// `b / a` with two decimals, or `-` when `a` is 0.
fn ratio(b: f64, a: f64) -> String {
    if a == 0.0 {
        "-".into()
    } else {
        format!("{:.2}", b / a)
    }
}

/// One profile's table: both modes side by side at each loss rate.
fn table(md: &mut String, rows: &[Row]) {
    let _ = writeln!(
        md,
        "| loss % | goodput MB/s GBN | SR | SR/GBN | retx packets GBN | SR | retx bytes GBN | SR \
         | SR/GBN | p99 us GBN | SR | control share GBN | SR |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (loss, g, s) in rows {
        let (g, s) = (Point::mean(g), Point::mean(s));
        let _ = writeln!(
            md,
            "| {loss} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.3} \
             | {:.3} |",
            g.goodput_mb_s,
            s.goodput_mb_s,
            ratio(s.goodput_mb_s, g.goodput_mb_s),
            g.retx_packets,
            s.retx_packets,
            g.retx_bytes,
            s.retx_bytes,
            ratio(s.retx_bytes as f64, g.retx_bytes as f64),
            g.p99_ns as f64 / 1e3,
            s.p99_ns as f64 / 1e3,
            g.control_share,
            s.control_share,
        );
    }
}

/// A plot over the loss rate, one line per mode: the mean over the seeds,
/// their least and most as error bars.
fn plot_modes(
    path: &Path,
    title: &str,
    ylabel: &str,
    rows: &[Row],
    y: fn(&Point) -> f64,
) -> crate::Result<()> {
    let curve = |label: &str, pick: fn(&Row) -> &Vec<Point>| -> (Curve, plot::Bars) {
        let mut pts = Vec::new();
        let mut bars = Vec::new();
        for r in rows {
            let v: Vec<f64> = pick(r).iter().map(y).collect();
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            pts.push((r.0, mean));
            bars.push((
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ));
        }
        ((label.to_string(), pts), bars)
    };
    let (g, gb) = curve("go-back-n", |r| &r.1);
    let (s, sb) = curve("selective", |r| &r.2);
    plot::curves_with_bars(
        path,
        title,
        Axis::linear("link loss (%)"),
        Axis::linear(ylabel),
        &[g, s],
        &[gb, sb],
        &[],
    )
}

pub fn report(
    out: Option<PathBuf>,
    profile: Option<String>,
    backend: crate::report::ReportBackend,
    quick: bool,
    quiet: bool,
) -> crate::Result<ExitCode> {
    if profile.is_some() {
        return Err("report reliability: --profile does not apply (it runs lanai9-gm and \
                    modern)"
            .into());
    }
    if backend != crate::report::ReportBackend::Sim {
        return Err("report reliability: runs on the simulator only (--backend sim)".into());
    }
    crate::prereq::require_now()?;
    let dir = out.unwrap_or_else(|| crate::workspace_root().join("out/reports/reliability"));
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let failed = write(&dir, &plan, quiet)?;
    if !failed.is_empty() {
        eprintln!(
            "FAILED: {} run(s) did not deliver every message exactly once, intact and in order \
             in the mode asked for (listed above and in the report)",
            failed.len()
        );
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `plan` and write the report, its plots and every point's scenario
/// into `dir`; the runs that failed.
pub fn write(dir: &Path, plan: &Plan, quiet: bool) -> crate::Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let (seeds, messages) = (&plan.seeds, plan.messages);
    let runs = (Workload::ALL.len() * PROFILES.len() * plan.losses.len() * Reliability::ALL.len())
        as u64
        * seeds.len() as u64;
    let pb = crate::progress::bar(runs, "reliability report", quiet);
    let wall = std::time::Instant::now();
    let mut failed = Vec::new();
    let mut md = String::new();
    let _ = writeln!(md, "# Reliability: go-back-N and selective repeat under link loss\n");
    let _ = writeln!(
        md,
        "Deterministic simulator ({} plan), seeds {seeds:?} at every point (tables: their means; \
         plots: the means, with the least and most as error bars). {NODES} nodes on one \
         switch; each flow \
         streams {messages} messages (port 2, {WINDOW} sends outstanding). Two workloads: \
         **pairs**, node 2i streaming to node 2i + 1 ({} flows: loss recovery on its own), \
         and **all-to-all**, every node streaming to every other ({} flows: each receiver \
         takes seven streams at once, and the packets it keeps past gaps share its 32 \
         receive buffers, at most 24 of them kept). Each link drops each packet it carries \
         with the given probability (`[faults] drop`; a packet crosses two links, node to \
         switch to node). GBN: `[firmware] reliability = \"go-back-n\"`, SR: \
         `\"selective\"`. Generated by `cargo xtask report reliability`; every point's \
         scenario is beside this file (`cargo xtask sim FILE` reruns it).\n",
        plan.name,
        NODES / 2,
        NODES * (NODES - 1)
    );
    let _ = writeln!(
        md,
        "- **goodput**: delivered payload bytes of all flows over the time from the first send \
         to the last receive (10^6 B per simulated second);\n\
         - **retx packets**, **retx bytes**: data packets sent again and their payload bytes \
         (`retransmits`, `retx_bytes`), all NICs;\n\
         - **p99**: the largest of the flows' p99 message latencies (send call to receive \
         event), not a merged percentile;\n\
         - **control share**: (acks + nacks + polls + STATs + USTATs) / packets sent, all NICs.\n"
    );
    // The tables and plots, after the notes on what they show.
    let mut body = String::new();
    let mut all_same = true;
    // Packets were resent but no NIC counted their bytes.
    let mut bytes_uncounted = false;
    for (workload, (profile, bytes)) in Workload::ALL.iter().flat_map(|&w| PROFILES.map(|p| (w, p)))
    {
        let mut rows = Vec::new();
        for &loss in &plan.losses {
            let mut pair = Vec::new();
            for (mode, seed) in
                Reliability::ALL.iter().flat_map(|&m| seeds.iter().map(move |&s| (m, s)))
            {
                let name = file_name(workload, profile, mode, loss, seed);
                let text = scenario_toml(messages, workload, profile, bytes, mode, loss, seed);
                std::fs::write(dir.join(&name), &text)
                    .map_err(|err| format!("{}: {err}", dir.join(&name).display()))?;
                pb.set_message(format!(
                    "reliability: {} {profile} {mode} loss {loss}% seed {seed}",
                    workload.name()
                ));
                let (r, _) = crate::bench::run_toml(&text).map_err(|e| format!("{name}: {e}"))?;
                pb.inc(1);
                for what in faults(&r, mode) {
                    let line = format!("{name}: {what}");
                    pb.suspend(|| eprintln!("FAILED: {line}"));
                    failed.push(line);
                }
                pair.push(Point::of(&r));
            }
            let s = pair.split_off(seeds.len());
            let g = pair;
            all_same &= g == s;
            bytes_uncounted |= g.iter().chain(&s).any(|p| p.retx_packets > 0 && p.retx_bytes == 0);
            rows.push((loss, g, s));
        }
        let _ = writeln!(body, "## {}, {profile}: {} messages\n", workload.name(), fmt_size(bytes));
        table(&mut body, &rows);
        let _ = writeln!(body);
        for (stem, title, ylabel, y) in [
            (
                "goodput",
                "goodput",
                "goodput (MB/s, 10^6 B/s)",
                (|p: &Point| p.goodput_mb_s) as fn(&Point) -> f64,
            ),
            ("retx-bytes", "retransmitted bytes", "retransmitted (bytes)", |p: &Point| {
                p.retx_bytes as f64
            }),
            ("p99", "worst flow's p99 latency", "p99 latency (µs)", |p: &Point| {
                p.p99_ns as f64 / 1e3
            }),
        ] {
            let file = format!("{stem}-{}-{profile}.svg", workload.name());
            plot_modes(
                &dir.join(&file),
                &format!(
                    "{}, {profile}, {}: {title} vs link loss",
                    workload.name(),
                    fmt_size(bytes)
                ),
                ylabel,
                &rows,
                y,
            )?;
            let _ = writeln!(body, "![{}, {profile}: {title}]({file})\n", workload.name());
        }
    }
    // One stream at 10% loss: the slowest message against its bound.
    for line in crate::reliability_heavy::section(dir, plan.heavy_messages, &mut body)? {
        pb.suspend(|| eprintln!("FAILED: {line}"));
        failed.push(line);
    }
    if all_same {
        let _ = writeln!(
            md,
            "The two modes gave the same figures at every point (their lines coincide): the \
             firmware that ran recovered from loss the same way in both modes.\n"
        );
    }
    if bytes_uncounted {
        let _ = writeln!(
            md,
            "Retransmitted bytes read 0 where packets were sent again: the firmware that ran \
             does not count `RetxBytes` there.\n"
        );
    }
    if !failed.is_empty() {
        let _ = writeln!(
            md,
            "**RUNS THAT FAILED** (not every message delivered exactly once, intact and in \
             order, or not in the mode asked for):\n"
        );
        for f in &failed {
            let _ = writeln!(md, "- {f}");
        }
        let _ = writeln!(md);
    }
    md += &body;
    pb.finish_and_clear();
    let path = dir.join("report.md");
    std::fs::write(&path, &md).map_err(|err| format!("{}: {err}", path.display()))?;
    println!(
        "reliability report ({} plan) written to {} ({runs} runs, {:.1} s)",
        plan.name,
        path.display(),
        wall.elapsed().as_secs_f64()
    );
    Ok(failed)
}

/// What is wrong with a run of `mode`: not every message delivered
/// exactly once, intact and in order (the summary's verdict), or another
/// mode ran. Empty when it is clean.
fn faults(r: &Report, mode: Reliability) -> Vec<String> {
    let mut v = Vec::new();
    if !r.all_delivered_intact() {
        v.push(r.summary().lines().last().unwrap_or("run not clean").to_string());
    }
    if r.reliability != mode.as_str() {
        v.push(format!("ran as {}, not {mode}", r.reliability));
    }
    v
}

fn fmt_size(bytes: u64) -> String {
    nic_emu::scenario::report::fmt_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_point_is_a_valid_scenario_with_its_mode_and_loss() {
        for (w, flows) in [(Workload::AllToAll, 56), (Workload::Pairs, 4)] {
            let text = scenario_toml(200, w, "modern", 65536, Reliability::Selective, 0.5, 2);
            let v = nic_emu::scenario::Scenario::parse_validated(&text).unwrap();
            assert_eq!(v.reliability, Some(Reliability::Selective));
            assert_eq!(v.faults.drop, 0.005);
            assert_eq!(v.seed, 2);
            assert_eq!(v.flows.len(), flows);
            assert!(v.flows.iter().all(|f| f.sizes == [65536] && f.messages == 200));
        }
        assert_eq!(
            file_name(Workload::Pairs, "modern", Reliability::GoBackN, 0.5, 3),
            "pairs-modern-go-back-n-loss-0.5-seed-3.toml"
        );
        assert_eq!(ratio(3.0, 2.0), "1.50");
        assert_eq!(ratio(3.0, 0.0), "-");
    }

    #[test]
    fn a_plot_has_both_modes_once_in_its_legend_error_bars_and_axes_with_units() {
        let dir = std::env::temp_dir().join(format!("xtask-rel-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = |g: f64| Point {
            goodput_mb_s: g,
            retx_packets: 0,
            retx_bytes: 0,
            p99_ns: 0,
            control_share: 0.0,
        };
        // Three seeds a mode at each loss rate, spread out.
        let rows: Vec<Row> = [1.0, 2.0, 3.0]
            .iter()
            .map(|&l| {
                let g = vec![p(100.0 - l), p(102.0 - l), p(98.0 - l)];
                let s = vec![p(101.0 - l), p(101.0 - l), p(101.0 - l)];
                (l, g, s)
            })
            .collect();
        let path = dir.join("goodput.svg");
        plot_modes(&path, "t", "goodput (MB/s, 10^6 B/s)", &rows, |p| p.goodput_mb_s).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let texts = plot::svg_texts(&svg);
        for label in ["go-back-n", "selective", "goodput (MB/s, 10^6 B/s)", "link loss (%)"] {
            assert_eq!(texts.iter().filter(|t| *t == label).count(), 1, "{label}: {texts:?}");
        }
        // The loss axis starts near 1, not at 0; the goodput axis near 95.
        let ticks: Vec<f64> = texts.iter().filter_map(|t| t.parse().ok()).collect();
        let x_min = ticks.iter().copied().filter(|v| *v < 10.0).fold(f64::MAX, f64::min);
        assert!(x_min >= 0.9, "{ticks:?}");
        let y_min = ticks.iter().copied().filter(|v| *v > 10.0).fold(f64::MAX, f64::min);
        assert!(y_min >= 90.0, "{ticks:?}");
        // Go-back-N's spread (98..102 at each rate) is drawn as bars:
        // three bars of two caps each, beside the two curves.
        let lines = svg.matches("<polyline").count();
        assert!(lines >= 2 + 3 * 3, "{lines} polylines");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_run_that_misses_messages_or_runs_another_mode_is_a_failure() {
        let text = scenario_toml(
            2,
            Workload::AllToAll,
            "lanai9-gm",
            16384,
            Reliability::Selective,
            1.0,
            1,
        )
        .replace("[fabric]\nnodes = 8", "[fabric]\nnodes = 2");
        let (r, _) = crate::bench::run_toml(&text).unwrap();
        assert_eq!(faults(&r, Reliability::Selective), Vec::<String>::new());
        let p = Point::of(&r);
        assert!(p.goodput_mb_s > 0.0 && p.p99_ns > 0 && p.control_share > 0.0, "{p:?}");
        let f = faults(&r, Reliability::GoBackN);
        assert_eq!(f, ["ran as selective, not go-back-n"]);
        // Stopped long before the last message: incomplete.
        let (cut, _) =
            crate::bench::run_toml(&format!("{text}\n[run]\nlimit_ms = 0.01\n")).unwrap();
        let f = faults(&cut, Reliability::Selective);
        assert!(f.len() == 1 && f[0].contains("INCOMPLETE"), "{f:?}");
    }
}
