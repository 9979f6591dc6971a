//! `cargo xtask model multicast` and `cargo xtask report multicast`: the
//! published small-message multicast model next to the simulator, for
//! every scheme x algorithm, and the study's experiments (with the
//! pipelined, k-binomial and auto variants beside them) as a Markdown
//! report with SVG plots.
//!
//! Measurements come from `nic_emu::mcast::measure`: timed multicasts on
//! the deterministic simulator, every delivery checked; the model from
//! `nic_abi::multicast::model` with the profile's parameters
//! (`nic_emu::mcast_model::model_params`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use host_driver::{Algorithm, Scheme};
use indicatif::ProgressBar;
use nic_emu::mcast::{measure, McastResult, McastRun};
use nic_emu::Profile;

use crate::plot::{self, Axis, Curve};
use crate::progress::bar;

/// Multicasts per measured point: a warm-up, then `COUNT - 1` timed one
/// after another (each alone: the next starts once the last reached every
/// member).
const COUNT: u32 = 11;

/// The five algorithms a report compares: the study's four and the
/// k-binomial tree with the k chosen for the message.
fn algorithms(p: &Profile, g: u16, bytes: u32) -> Vec<Algorithm> {
    let mut v = Algorithm::FIXED.to_vec();
    v.push(Algorithm::KBinomial { k: nic_emu::mcast_model::k_for(p, g, bytes as u64) });
    v
}

fn model_us(p: &Profile, s: Scheme, a: Algorithm, g: u16, bytes: u32) -> f64 {
    let m = nic_emu::mcast_model::model_params(p);
    host_driver::nic_abi::multicast::model::model_latency_us(&m, s, a, g, bytes)
}

/// One measured point.
fn point(p: &Profile, scheme: Scheme, algorithm: Algorithm, g: u16, bytes: u32) -> McastResult {
    measure(&McastRun::new(p, scheme, algorithm, g, bytes, COUNT))
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Mean, least and most of `v` (ns), in us; zeros when empty.
fn spread_us(v: &[u64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64 / 1000.0;
    let lo = us(*v.iter().min().unwrap_or(&0));
    let hi = us(*v.iter().max().unwrap_or(&0));
    (mean, lo, hi)
}

/// A point's mean completion latency over its timed repetitions (us).
fn mean_us(r: &McastResult) -> f64 {
    spread_us(&r.latency_ns).0
}

/// Multicasts of `r` whose latency came out below the root host's CPU
/// time for them (there should be none: the root's work is part of it).
fn below_root_cpu(r: &McastResult) -> Vec<(usize, u64, u64)> {
    r.latency_ns
        .iter()
        .zip(&r.root_cpu_ns)
        .enumerate()
        .filter(|(_, (l, c))| l < c)
        .map(|(i, (l, c))| (i + 1, *l, *c))
        .collect()
}

/// Per rank of a G-member tree: how many whole-message sends lie on its
/// path from the root when each sender serves its children one after
/// another (a child waits for the siblings sent before it), and when a
/// sender shares its link among all its children at once (every child of
/// a sender with f children waits f sends). The parent of each rank too.
fn send_rounds(alg: Algorithm, g: u16) -> Vec<(u32, u32, u16)> {
    let mut out = vec![(0u32, 0u32, 0u16); g as usize];
    let mut todo = vec![0u16];
    while let Some(p) = todo.pop() {
        let kids: Vec<u16> =
            host_driver::nic_abi::multicast::children(alg, g, p).map(|c| c.rank).collect();
        let f = kids.len() as u32;
        for (i, &c) in kids.iter().enumerate() {
            out[c as usize] = (out[p as usize].0 + i as u32 + 1, out[p as usize].1 + f, p);
            todo.push(c);
        }
    }
    out
}

/// The path from the root to `rank` ("0 -> 2 -> 6 -> 14").
fn path_to(rounds: &[(u32, u32, u16)], rank: u16) -> String {
    let mut v = vec![rank];
    let mut at = rank;
    while at != 0 {
        at = rounds[at as usize].2;
        v.push(at);
    }
    v.iter().rev().map(|r| r.to_string()).collect::<Vec<_>>().join(" -> ")
}

/// Group sizes from `4..16` (step 2), `4..16/4` (step 4) or `4,8,64`.
pub fn parse_groups(s: &str) -> crate::Result<Vec<u16>> {
    let bad = || format!("--groups {s}: give a..b, a..b/step or a list a,b,c (2 <= G <= 1024)");
    let v: Vec<u16> = if let Some((a, rest)) = s.split_once("..") {
        let (b, step) = rest.split_once('/').unwrap_or((rest, "2"));
        let (a, b, step): (u16, u16, u16) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
            step.trim().parse().map_err(|_| bad())?,
        );
        if step == 0 || a > b {
            return Err(bad());
        }
        (a..=b).step_by(step as usize).collect()
    } else {
        s.split(',').map(|x| x.trim().parse().map_err(|_| bad())).collect::<Result<_, _>>()?
    };
    if v.is_empty() || v.iter().any(|&g| !(2..=1024).contains(&g)) {
        return Err(bad());
    }
    Ok(v)
}

/// `cargo xtask model multicast`: model and simulation side by side.
pub fn model(which: &str, profile: &str, bytes: u32, groups: &str) -> crate::Result<ExitCode> {
    if which != "multicast" {
        return Err(format!("unknown model `{which}` (known: multicast)"));
    }
    let p = Profile::load(profile).map_err(|e| e.to_string())?;
    let groups = parse_groups(groups)?;
    let largest = host_driver::nic_abi::class_max_len(host_driver::nic_abi::MAX_SIZE_CLASS);
    if u64::from(bytes) > largest {
        return Err(format!("--bytes {bytes}: at most {largest} (4 MiB, the largest message)"));
    }
    let total = (Scheme::ALL.len() * 5 * groups.len()) as u64;
    let pb = bar(total, "simulating", false);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Multicast completion latency, {bytes} B on {profile}: the published model (us) next to the \
         simulator (us), and the difference.\n{}\n",
        params_note(&p)
    );
    out.push_str(&size_caveats(&p, bytes));
    let mut worst: f64 = 0.0;
    let mut failed = Vec::new();
    for scheme in Scheme::ALL {
        let _ = writeln!(out, "{scheme}:");
        let _ = write!(out, "  {:14}", "G");
        for g in &groups {
            let _ = write!(out, " | {g:>23}");
        }
        let _ = writeln!(out);
        for alg in algorithms(&p, 16, bytes) {
            let _ = write!(out, "  {:14}", alg.to_string());
            for &g in &groups {
                let alg = match alg {
                    Algorithm::KBinomial { .. } => algorithms(&p, g, bytes)[4],
                    a => a,
                };
                let r = point(&p, scheme, alg, g, bytes);
                pb.inc(1);
                if !r.ok {
                    failed.push(format!("{scheme} {alg} G={g}: {}", r.problems.join("; ")));
                }
                let sim = mean_us(&r);
                let model = model_us(&p, scheme, alg, g, bytes);
                let diff = (sim / model - 1.0) * 100.0;
                worst = worst.max(diff.abs());
                let _ = write!(out, " | {model:7.1} {sim:7.1} {diff:+6.1}%");
            }
            let _ = writeln!(out);
        }
    }
    pb.finish_and_clear();
    let _ = writeln!(out, "\nlargest difference: {worst:.1}%");
    crate::emit(&out);
    if !failed.is_empty() {
        eprintln!("deliveries failed:\n  {}", failed.join("\n  "));
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// The message size the study fitted its table's NIC terms on.
const FIT_BYTES: u32 = 2;

/// What the model does not cover at `bytes` on `p`, one paragraph each
/// (empty when it covers it): the study's NIC send and receive terms away
/// from the size they were fitted on, and messages of more than one packet.
fn size_caveats(p: &Profile, bytes: u32) -> String {
    let m = nic_emu::mcast_model::model_params(p);
    let mut out = String::new();
    if p.multicast.is_some() && bytes != FIT_BYTES && m.nic_send_per_byte > 0.0 {
        let _ = writeln!(
            out,
            "Note: the table's NIC send and receive terms ({} + {} m us each) were fitted on \
             {FIT_BYTES} B messages ({:.2} us there); at {bytes} B they give {:.2} us, so the \
             model's nic, assisted and nic-cached figures are not a prediction at this size \
             (docs/multicast.md, The latency model).",
            m.nic_send,
            m.nic_send_per_byte,
            m.nic_send_us(FIT_BYTES),
            m.nic_send_us(bytes),
        );
    }
    if bytes > p.nic.mtu {
        let _ = writeln!(
            out,
            "Note: the model was fitted on one-packet messages; {bytes} B is {} packets of at \
             most {} B on this profile, and how they pipeline through a tree is not in it.",
            bytes.div_ceil(p.nic.mtu),
            p.nic.mtu,
        );
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// Where the model's parameters come from, as a sentence (or two).
fn params_note(p: &Profile) -> &'static str {
    if p.multicast.is_some() {
        "Model parameters: the profile's [multicast] table (the study's)."
    } else {
        "Model parameters: derived from the profile's prices (it carries no measured \
         [multicast] table). The derivation charges a NIC one packet's send per destination; \
         the simulated NIC also takes each destination's ack and report between its sends, \
         which the profile does not fold into its multicast prices, so on a slow NIC CPU the \
         simulated times run well above the model (docs/multicast.md, What the profiles carry)."
    }
}

/// Plot curves over the group size G.
fn plot(
    path: &Path,
    title: &str,
    ylabel: &str,
    curves: &[Curve],
    dashed: &[Curve],
) -> crate::Result<()> {
    plot::curves(path, title, Axis::linear("G (members)"), Axis::linear(ylabel), curves, dashed)
}

/// Plot each of `scheme`'s mean latencies over G, the least and most of
/// the timed repetitions as error bars, its models (when given) dashed.
fn plot_latency(
    path: &Path,
    title: &str,
    series: &[Series],
    scheme: Scheme,
    dashed: &[Curve],
) -> crate::Result<()> {
    let bars: Vec<plot::Bars> = series
        .iter()
        .filter(|s| s.scheme == scheme)
        .map(|s| {
            s.points
                .iter()
                .map(|(_, r, _)| {
                    let (_, lo, hi) = spread_us(&r.latency_ns);
                    (lo, hi)
                })
                .collect()
        })
        .collect();
    plot::curves_with_bars(
        path,
        title,
        Axis::linear("G (members)"),
        Axis::linear("latency (µs)"),
        &curves(series, scheme, |r, _| mean_us(r)),
        &bars,
        dashed,
    )
}

/// One scheme x algorithm over the group sizes, at one message size.
struct Series {
    scheme: Scheme,
    alg: String,
    points: Vec<(u16, McastResult, f64)>,
}

fn sweep(p: &Profile, bytes: u32, groups: &[u16], pb: &ProgressBar) -> (Vec<Series>, Vec<String>) {
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for scheme in Scheme::ALL {
        for (k, _) in algorithms(p, 16, bytes).iter().enumerate() {
            let mut s = Series { scheme, alg: String::new(), points: Vec::new() };
            for &g in groups {
                let alg = algorithms(p, g, bytes)[k];
                s.alg = if k == 4 { "k-binomial".into() } else { alg.to_string() };
                let r = point(p, scheme, alg, g, bytes);
                pb.inc(1);
                if !r.ok {
                    failed
                        .push(format!("{scheme} {alg} G={g} {bytes} B: {}", r.problems.join("; ")));
                }
                s.points.push((g, r, model_us(p, scheme, alg, g, bytes)));
            }
            out.push(s);
        }
    }
    (out, failed)
}

fn latency_table(md: &mut String, series: &[Series], groups: &[u16], with_model: bool) {
    let _ = write!(md, "| scheme | algorithm |");
    for g in groups {
        let _ = write!(md, " G={g} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(groups.len()));
    for s in series {
        let _ = write!(md, "| {} | {} |", s.scheme, s.alg);
        for (_, r, model) in &s.points {
            let (sim, lo, hi) = spread_us(&r.latency_ns);
            if with_model {
                let _ = write!(
                    md,
                    " {sim:.1} [{lo:.1}, {hi:.1}] / {model:.1} ({:+.1}%) |",
                    (sim / model - 1.0) * 100.0
                );
            } else {
                let _ = write!(md, " {sim:.1} [{lo:.1}, {hi:.1}] |");
            }
        }
        let _ = writeln!(md);
    }
}

/// The model's curve of each of `scheme`'s series, labelled as a model.
fn model_curves(series: &[Series], scheme: Scheme) -> Vec<Curve> {
    curves(series, scheme, |_, m| m)
        .into_iter()
        .map(|(label, pts)| (plot::model_label(&label), pts))
        .collect()
}

fn curves(series: &[Series], scheme: Scheme, f: impl Fn(&McastResult, f64) -> f64) -> Vec<Curve> {
    series
        .iter()
        .filter(|s| s.scheme == scheme)
        .map(|s| (s.alg.clone(), s.points.iter().map(|(g, r, m)| (*g as f64, f(r, *m))).collect()))
        .collect()
}

/// Why the host-based binomial tree beats the binary tree at 64 KiB here
/// when the study found the binary tree best at every size: figures from
/// the last timed multicast of G = 16 and from the trees themselves.
fn large_trees(md: &mut String, p: &Profile, big: &[Series]) {
    let find = |alg: &str| {
        big.iter()
            .find(|s| s.scheme == Scheme::Host && s.alg == alg)
            .and_then(|s| s.points.iter().find(|(g, _, _)| *g == 16))
    };
    let (Some((_, bin, _)), Some((_, bnl, _))) = (find("binary"), find("binomial")) else {
        return;
    };
    let g = 16u16;
    let model = |a| model_us(p, Scheme::Host, a, g, 2);
    let params = nic_emu::mcast_model::model_params(p);
    let last = |r: &McastResult| {
        let (rank, t) = r
            .last_arrivals_ns
            .iter()
            .enumerate()
            .max_by_key(|(_, &t)| t)
            .map_or((0, 0), |(k, &t)| (k as u16, t));
        (rank, us(t))
    };
    let first_child = |r: &McastResult| us(r.last_arrivals_ns.get(1).copied().unwrap_or(0));
    let (rb, rn) = (send_rounds(Algorithm::Binary, g), send_rounds(Algorithm::Binomial, g));
    let worst = |v: &[(u32, u32, u16)], shared: bool| {
        v.iter().map(|x| if shared { x.1 } else { x.0 }).max().unwrap_or(0)
    };
    let (lb, tb) = last(bin);
    let (ln, tn) = last(bnl);
    let _ = writeln!(
        md,
        "\n### Host-based binary and binomial trees at 64 KiB\n\n\
         Here the host-based binomial tree is the faster at G = 16 ({:.1} us against {:.1} for \
         the binary tree); the study found the binary tree the best host-based algorithm for \
         large messages as for small ones. The published model ranks them by the relays on the \
         deepest path alone (h = {} for both at G = 16) and their processing (t_hp binary {:.1}, \
         binomial {:.1} us at 2 B: {:.1} against {:.1} us): it charges every sender one send, \
         as if its further children cost nothing. At 64 KiB each further child costs a whole \
         message's send: the root's first child has the message {:.1} us after the start (binary) \
         and {:.1} us (binomial). A sender here sends a message to one child after another, so \
         a member waits for every send on its path and for the siblings served before it:\n",
        mean_us(bnl),
        mean_us(bin),
        host_driver::nic_abi::multicast::relays_on_deepest_path(Algorithm::Binary, g),
        params.host_proc.binary,
        params.host_proc.binomial,
        model(Algorithm::Binary),
        model(Algorithm::Binomial),
        first_child(bin),
        first_child(bnl),
    );
    let _ = writeln!(
        md,
        "| tree | last member (path) | its arrival | sends on its path, one child after another \
         | most sends on any path, one after another | ... a sender's link shared by all its \
         children |\n|---|---|---|---|---|---|"
    );
    for (name, rounds, rank, t) in [("binary", &rb, lb, tb), ("binomial", &rn, ln, tn)] {
        let _ = writeln!(
            md,
            "| {name} | rank {rank} ({}) | {t:.1} us | {} | {} | {} |",
            path_to(rounds, rank),
            rounds[rank as usize].0,
            worst(rounds, false),
            worst(rounds, true)
        );
    }
    let _ = writeln!(
        md,
        "\nServed one after another, the binomial tree reaches all {g} members within log2 G = {} \
         sends and the binary tree needs {} (its last member is the second child of a second \
         child of a second child); that, not the trees' computation, decides at this size. Were \
         a sender's link shared among all its children at once (packet by packet), every child \
         of a sender with f children would wait f sends, and the binary tree would need {} \
         against the binomial tree's {}: the study's ordering. The difference is the service \
         order of a sender's messages, which the model does not describe; the simulated NIC \
         sends a window of packets of one message before the next one's.\n",
        worst(&rn, false),
        worst(&rb, false),
        worst(&rb, true),
        worst(&rn, true),
    );
}

/// One profile's comparison of cached pipelined trees with the best
/// host-based algorithm, G = 16, for 2 B to 64 KiB.
fn cached_vs_host(
    md: &mut String,
    label: &str,
    prof: &Profile,
    pb: &ProgressBar,
    failed: &mut Vec<String>,
) {
    let _ =
        writeln!(md, "\n## Cached trees with pipelined forwarding (profile `{label}`, G = 16)\n");
    if prof.multicast.is_some() {
        let _ = writeln!(
            md,
            "On this profile's slow NIC CPU: where forwarding on the NIC wins and where it \
             cannot.\n"
        );
    }
    let _ = writeln!(
        md,
        "| bytes | best host-based | nic-cached binomial | nic-cached k-binomial | \
         nic-cached serial | speed-up | auto picks (its latency) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for bytes in [2u32, 512, 16384, 65536] {
        let mut lat = |s, a| {
            let r = point(prof, s, a, 16, bytes);
            pb.inc(1);
            if !r.ok {
                failed.push(format!("{label} {s} {a} {bytes} B: {}", r.problems.join("; ")));
            }
            mean_us(&r)
        };
        let mut host = (f64::INFINITY, Algorithm::Binomial);
        for a in Algorithm::FIXED {
            let t = lat(Scheme::Host, a);
            if t < host.0 {
                host = (t, a);
            }
        }
        let kb = Algorithm::KBinomial { k: nic_emu::mcast_model::k_for(prof, 16, bytes as u64) };
        let (b, k, s) = (
            lat(Scheme::NicCached, Algorithm::Binomial),
            lat(Scheme::NicCached, kb),
            lat(Scheme::NicCached, Algorithm::Serial),
        );
        let auto = nic_emu::mcast_model::pick(prof, Scheme::NicCached, 16, bytes as u64);
        let a = lat(Scheme::NicCached, auto);
        let _ = writeln!(
            md,
            "| {bytes} | {:.1} ({}) | {b:.1} | {k:.1} ({kb}) | {s:.1} | {:.2}x | {auto} ({a:.1}) |",
            host.0,
            host.1,
            host.0 / b.min(k).min(s).min(a)
        );
    }
}

/// `cargo xtask report multicast`.
pub fn report(
    out: Option<PathBuf>,
    profile: Option<String>,
    quiet: bool,
) -> crate::Result<ExitCode> {
    let name = profile.unwrap_or_else(|| "lanai9-gm".to_string());
    let p = Profile::load(&name).map_err(|e| e.to_string())?;
    let modern = Profile::load("modern").map_err(|e| e.to_string())?;
    let dir = out.unwrap_or_else(|| crate::workspace_root().join("out/reports/multicast"));
    std::fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let groups: Vec<u16> = (4..=16).step_by(2).collect();
    let large = [64u16, 256];
    let per = (Scheme::ALL.len() * 5) as u64;
    let pb =
        bar(per * (2 * groups.len() + large.len()) as u64 + 2 * 8 * 4, "multicast report", quiet);
    let (small, mut failed) = sweep(&p, 2, &groups, &pb);
    let (big, f2) = sweep(&p, 65536, &groups, &pb);
    let (wide, f3) = sweep(&p, 2, &large, &pb);
    failed.extend(f2);
    failed.extend(f3);

    let mut md = String::new();
    let _ = writeln!(md, "# Multicast: host-based, NIC-based and NIC-assisted: report\n");
    let _ = writeln!(
        md,
        "Profile `{name}`, deterministic simulator, {COUNT} multicasts per point, one after \
         another: a warm-up, then {} timed (latency: their mean, [least, most]). Each multicast \
         is timed alone, from the root program's start (its host work included) to the last \
         member's Received event; the next starts once it has reached every member. Generated \
         by `cargo xtask report multicast`; \
         `cargo xtask model multicast --profile {name}` prints the model comparison alone. \
         Design and the meaning of each profile figure: docs/multicast.md. {}\n",
        COUNT - 1,
        params_note(&p)
    );
    if !failed.is_empty() {
        let _ = writeln!(md, "**Deliveries that failed:**\n");
        for f in &failed {
            let _ = writeln!(md, "- {f}");
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "## 2 B messages, G = 4..16 on one 16-port switch\n");
    let _ = writeln!(md, "Simulated / model latency in us (difference):\n");
    latency_table(&mut md, &small, &groups, true);
    let worst = small
        .iter()
        .flat_map(|s| s.points.iter().map(|(_, r, m)| (mean_us(r) / m - 1.0).abs()))
        .fold(0.0f64, f64::max);
    let _ = writeln!(md, "\nLargest difference from the model: {:.1}%.\n", worst * 100.0);
    // A multicast's latency includes its root's CPU work for it: never less.
    let mut timed = 0usize;
    let mut below = Vec::new();
    for s in small.iter().chain(&big).chain(&wide) {
        for (g, r, _) in &s.points {
            timed += r.latency_ns.len();
            for (i, l, c) in below_root_cpu(r) {
                below.push(format!(
                    "{} {} G={g}: multicast {i}: {:.1} us, root CPU {:.1} us",
                    s.scheme,
                    s.alg,
                    us(l),
                    us(c)
                ));
            }
        }
    }
    if below.is_empty() {
        let _ = writeln!(
            md,
            "Every timed multicast of the report ({timed}) took at least its root host's CPU \
             time for it.\n"
        );
    } else {
        let _ = writeln!(md, "**Multicasts faster than their root's CPU time for them:**\n");
        for b in &below {
            let _ = writeln!(md, "- {b}");
        }
        let _ = writeln!(md);
        failed.extend(below.into_iter().map(|b| format!("latency below root CPU: {b}")));
    }
    for scheme in Scheme::ALL {
        let file = format!("latency-2B-{scheme}.svg");
        plot_latency(
            &dir.join(&file),
            &format!("{scheme}: completion latency, 2 B (mean of 10, least and most)"),
            &small,
            scheme,
            &model_curves(&small, scheme),
        )?;
        let _ = writeln!(md, "![{scheme}, 2 B]({file})\n");
    }
    let _ = writeln!(md, "## Root CPU utilisation (2 B)\n");
    let _ =
        writeln!(md, "Root host CPU busy time / completion time, means over the repetitions:\n");
    let util = |r: &McastResult| {
        let (l, _, _) = spread_us(&r.latency_ns);
        spread_us(&r.root_cpu_ns).0 / l.max(1e-3)
    };
    let _ = writeln!(
        md,
        "| scheme | algorithm |{}",
        groups.iter().map(|g| format!(" G={g} |")).collect::<String>()
    );
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(groups.len()));
    for s in &small {
        let _ = write!(md, "| {} | {} |", s.scheme, s.alg);
        for (_, r, _) in &s.points {
            let _ = write!(md, " {:.2} |", util(r));
        }
        let _ = writeln!(md);
    }
    let mut util_curves = Vec::new();
    for scheme in Scheme::ALL {
        if let Some(s) = small.iter().find(|s| s.scheme == scheme && s.alg == "binomial") {
            util_curves.push((
                format!("{scheme} binomial"),
                s.points.iter().map(|(g, r, _)| (*g as f64, util(r))).collect(),
            ));
        }
    }
    plot(
        &dir.join("root-cpu.svg"),
        "root CPU utilisation, 2 B, binomial",
        "root CPU busy / completion time (fraction)",
        &util_curves,
        &[],
    )?;
    let _ = writeln!(md, "\n![root CPU](root-cpu.svg)\n");
    let _ = writeln!(md, "## Tree creation time at the root (2 B)\n");
    let mut tree_curves = Vec::new();
    for scheme in Scheme::ALL {
        if let Some(s) = small.iter().find(|s| s.scheme == scheme && s.alg == "binomial") {
            tree_curves.push((
                format!("{scheme} binomial"),
                s.points.iter().map(|(g, r, _)| (*g as f64, us(r.tree_ns))).collect(),
            ));
        }
    }
    plot(
        &dir.join("tree-time.svg"),
        "tree creation time at the root, binomial",
        "tree creation time (µs)",
        &tree_curves,
        &[],
    )?;
    let _ = writeln!(
        md,
        "Host and assisted schemes compute the tree on the host (priced per child), the NIC-based \
         scheme on the NIC (priced per step and per child), the cached scheme reads it (no cost \
         per message).\n\n![tree time](tree-time.svg)\n"
    );
    let _ = writeln!(md, "## 64 KiB messages, G = 4..16\n");
    latency_table(&mut md, &big, &groups, false);
    for scheme in Scheme::ALL {
        let file = format!("latency-64KiB-{scheme}.svg");
        plot_latency(
            &dir.join(&file),
            &format!("{scheme}: completion latency, 64 KiB (mean of 10, least and most)"),
            &big,
            scheme,
            &[],
        )?;
        let _ = writeln!(md, "\n![{scheme}, 64 KiB]({file})");
    }
    let assisted_vs_host = |alg: &str| -> Option<f64> {
        let a = big.iter().find(|s| s.scheme == Scheme::Assisted && s.alg == alg)?;
        let h = big.iter().find(|s| s.scheme == Scheme::Host && s.alg == alg)?;
        let (ra, rh) = (&a.points.last()?.1, &h.points.last()?.1);
        Some(mean_us(ra) / mean_us(rh))
    };
    let _ = writeln!(md, "\nNIC-assisted over host-based at G = 16, 64 KiB:");
    for alg in ["binomial", "binary", "serial"] {
        if let Some(x) = assisted_vs_host(alg) {
            let _ = writeln!(md, "- {alg}: {x:.2}x");
        }
    }
    large_trees(&mut md, &p, &big);
    let _ = writeln!(md, "\n## Large groups: G = 64 and 256 on one large switch (2 B)\n");
    latency_table(&mut md, &wide, &large, true);
    for (label, prof) in [("modern", &modern), (name.as_str(), &p)] {
        cached_vs_host(&mut md, label, prof, &pb, &mut failed);
    }
    pb.finish_and_clear();
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|err| format!("{}: {err}", path.display()))?;
    println!("multicast report written to {}", path.display());
    if !failed.is_empty() {
        eprintln!("deliveries failed in {} points (listed in the report)", failed.len());
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// The programs `bench --multicast-cost` runs, built in `dir` (a cargo
/// target directory), with `rustflags` added: `<dir>/release`.
fn build_cost_programs(root: &Path, dir: &Path, rustflags: &str) -> crate::Result<PathBuf> {
    let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        flags = format!("{flags} {rustflags}").trim().to_string();
    }
    let st = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .env("CARGO_TARGET_DIR", dir)
        .env("RUSTFLAGS", flags)
        .args(["build", "--quiet", "--release", "-p", "nic-emu", "--example", "mcast_cost"])
        .args(["--bin", "nic-cluster", "-p", "host-programs", "--bins"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !st.success() {
        return Err(format!("building the unicast bench in {} failed", dir.display()));
    }
    Ok(dir.join("release"))
}

/// The figures of one build: its sim JSON, and live ping-pong (8 B,
/// one-way us) and stream (64 KiB, MB/s) medians.
struct Cost {
    sim: serde_json::Value,
    live_us: Vec<f64>,
    live_mb_s: Vec<f64>,
}

/// `cargo xtask bench --multicast-cost`: unicast with the MCP's multicast
/// paths compiled in (as shipped: present but unused) and compiled out
/// (`--cfg mcast_off`), side by side, on the sim and on a live cluster.
pub fn bench_cost(root: &Path, count: u64, runs: usize) -> crate::Result<ExitCode> {
    let target = crate::fw::target_dir(root);
    println!("building the unicast bench twice: with multicast (as shipped) and without it");
    let with = build_cost_programs(root, &target, "")?;
    let without = build_cost_programs(root, &target.join("mcast-off"), "--cfg mcast_off")?;
    let mut costs = Vec::new();
    for bins in [&with, &without] {
        let o = std::process::Command::new(bins.join("examples").join("mcast_cost"))
            .output()
            .map_err(|e| format!("mcast_cost: {e}"))?;
        let sim = crate::rt::json_line(&o)?;
        costs.push(Cost { sim, live_us: Vec::new(), live_mb_s: Vec::new() });
    }
    // Live: the two builds' device processes and programs, interleaved run
    // by run so that this machine's slow spells hit both alike.
    let pb = bar((2 * runs) as u64, "live runs", false);
    for _ in 0..runs {
        for (k, bins) in [&with, &without].into_iter().enumerate() {
            std::env::set_var(nic_emu::realtime::process::BINARY_ENV, bins.join("nic-cluster"));
            let name = format!("mcost-{}-{k}", std::process::id());
            let c = crate::rt::start(nic_emu::realtime::RtConfig::new(
                &name,
                host_driver::ClusterBackend::Live,
                2,
            ))?;
            let lat = crate::rt::pingpong(bins, c.path(), 1, 8, count, &[]);
            let bw = crate::rt::stream(bins, c.path(), 2, 2, 65536, count / 2, &[]);
            c.stop().map_err(|e| e.to_string())?;
            costs[k].live_us.push(lat?.median_us);
            costs[k].live_mb_s.push(bw?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    std::env::remove_var(nic_emu::realtime::process::BINARY_ENV);
    let med = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (a, b) = (&costs[0], &costs[1]);
    let flag = |c: &Cost| c.sim["multicast"].as_bool().unwrap_or(false);
    if !flag(a) || flag(b) {
        return Err("the two builds do not differ in their multicast paths".into());
    }
    println!("\nunicast with the multicast paths compiled in (shipped) vs compiled out:");
    println!("{:<44} {:>14} {:>14} {:>8}", "", "with", "without", "diff");
    let row = |what: &str, x: f64, y: f64| {
        println!("{what:<44} {x:>14.3} {y:>14.3} {:>+7.2}%", (x / y - 1.0) * 100.0);
    };
    for p in ["lanai9-gm", "modern"] {
        for (key, what) in [
            ("oneway_ns_8", "one-way 8 B (ns)"),
            ("oneway_ns_4096", "one-way 4 KiB (ns)"),
            ("stream_mb_s_65536", "stream 64 KiB (MB/s)"),
        ] {
            let f = |c: &Cost| c.sim[p][key].as_f64().unwrap_or(f64::NAN);
            row(&format!("sim {p} {what}"), f(a), f(b));
        }
    }
    row(
        &format!("live ping-pong one-way 8 B (us, median of {runs})"),
        med(&a.live_us),
        med(&b.live_us),
    );
    row(
        &format!("live stream 64 KiB (MB/s, median of {runs})"),
        med(&a.live_mb_s),
        med(&b.live_mb_s),
    );
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0f64, f64::max);
        (hi / lo - 1.0) * 100.0
    };
    println!(
        "live run-to-run spread (max/min - 1): latency {:.1}% / {:.1}%, bandwidth {:.1}% / {:.1}%",
        spread(&a.live_us),
        spread(&b.live_us),
        spread(&a.live_mb_s),
        spread(&b.live_mb_s)
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_plot_labels_each_tree_and_its_model_once_on_an_axis_from_the_data() {
        let p = Profile::load("lanai9-gm").unwrap();
        let groups = [4u16, 6];
        let series: Vec<Series> = [Algorithm::Binomial, Algorithm::Binary]
            .into_iter()
            .map(|a| Series {
                scheme: Scheme::Host,
                alg: a.to_string(),
                points: groups
                    .iter()
                    .map(|&g| {
                        (g, point(&p, Scheme::Host, a, g, 2), model_us(&p, Scheme::Host, a, g, 2))
                    })
                    .collect(),
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("xtask-mcast-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("l.svg");
        plot(
            &path,
            "t",
            "latency (µs)",
            &curves(&series, Scheme::Host, |r, _| mean_us(r)),
            &model_curves(&series, Scheme::Host),
        )
        .unwrap();
        let texts = crate::plot::svg_texts(&std::fs::read_to_string(&path).unwrap());
        for label in ["binomial", "binary", "binomial (model)", "binary (model)"] {
            assert_eq!(texts.iter().filter(|t| *t == label).count(), 1, "{label}: {texts:?}");
        }
        assert!(
            texts.iter().any(|t| t == "latency (µs)") && texts.iter().any(|t| t == "G (members)")
        );
        let ticks: Vec<f64> = texts.iter().filter_map(|t| t.parse().ok()).collect();
        assert!(!ticks.contains(&0.0), "no axis from 0: {ticks:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_model_says_where_its_fit_does_not_hold() {
        let l9 = Profile::load("lanai9-gm").unwrap();
        assert_eq!(size_caveats(&l9, FIT_BYTES), "");
        let one = size_caveats(&l9, 4096);
        assert!(one.contains("fitted on 2 B messages (17.36 us there)"), "{one}");
        assert!(one.contains("at 4096 B they give 34130.62 us"), "{one}");
        assert!(!one.contains("one-packet"), "{one}");
        let many = size_caveats(&l9, 65536);
        assert!(many.contains("65536 B is 16 packets of at most 4096 B"), "{many}");
        // A profile without the study's table derives its terms from its
        // own prices: no fit to warn about, only the packet count.
        let modern = Profile::load("modern").unwrap();
        assert_eq!(size_caveats(&modern, 4096), "");
        assert!(size_caveats(&modern, 8192).contains("2 packets"));
    }

    #[test]
    fn each_output_says_where_the_model_parameters_come_from() {
        let l9 = Profile::load("lanai9-gm").unwrap();
        assert!(params_note(&l9).contains("[multicast] table (the study's)"));
        for name in ["lanai4-gm", "modern"] {
            let p = Profile::load(name).unwrap();
            let note = params_note(&p);
            assert!(
                note.starts_with("Model parameters: derived from the profile's prices"),
                "{note}"
            );
            assert!(note.contains("ack and report"), "{note}");
        }
    }

    #[test]
    fn a_size_above_the_largest_message_is_refused_before_simulating() {
        let e = model("multicast", "lanai9-gm", 5_000_000, "4").unwrap_err();
        assert_eq!(e, "--bytes 5000000: at most 4194304 (4 MiB, the largest message)");
    }
}
