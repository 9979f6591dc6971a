//! `cargo xtask report collectives`: the NIC-offloaded collectives
//! (docs/collectives.md) against the host-based ones, on the
//! deterministic simulator, as a Markdown report with SVG plots (default
//! out/reports/collectives/):
//!
//! - every section shows the assisted scheme (the host releases each
//!   step, the NIC does the rest) beside the two, where it runs (`runs`:
//!   not the ring, vectors of up to 8 KiB, up to 256 members);
//! - a summary on `modern`: NIC against the best host-based algorithm at
//!   16 and 256 nodes, for the barrier and for allreduces of 8 B and
//!   256 B;
//! - the published NIC-based barrier (Buntinas, Panda and Sadayappan,
//!   IPDPS 2001) beside the simulated one on `lanai4-gm` and `lanai9-gm`;
//! - barrier time against the group size (2 to 1,024 members) for each
//!   scheme x algorithm on `lanai4-gm`, `lanai9-gm` and `modern`;
//! - allreduce time against the vector size (8 B to 1 MiB of f64) at 16
//!   nodes, the same way, and under `modern`'s table the acceptance
//!   figure: the 1 MiB allreduce, best NIC-based against best host-based
//!   algorithm;
//! - a LogP-style model of each barrier algorithm (a round's cost,
//!   measured as a 2-member barrier, times the algorithm's rounds) next
//!   to the simulated figure.
//!
//! Every point is one scenario (`nic_emu::scenario`: a collective flow
//! running `count` collectives one after another) written into the
//! output directory's `scenarios/`, so `cargo xtask sim FILE` reruns it;
//! its figure is the flow's `collective.interval_ns`, the time per
//! collective as the loop ran them. Loops of large vectors are shorter
//! (`Plan::count`). `--quick` runs fewer sizes (vectors up to 128 KiB,
//! and the acceptance figure's 1 MiB on `modern`) and shorter loops.
//!
//! The measuring is in `coll_report/run.rs`, the Markdown in
//! `coll_report/md.rs` (the allreduce section in
//! `coll_report/allreduce.rs`), the model in `coll_report/model.rs` and
//! the plots in `coll_report/svg.rs`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod allreduce;
mod md;
mod model;
mod run;
mod svg;
#[cfg(test)]
mod tests;

pub use run::{Kind, Results, Spec};

/// The profiles every section runs on.
pub const PROFILES: [&str; 3] = ["lanai4-gm", "lanai9-gm", "modern"];
pub const SCHEMES: [&str; 3] = ["nic", "host", "assisted"];
/// The assisted scheme's points: its vectors are at most 8 chunks (1 KiB
/// on `lanai4-gm`: 1,024 f64), and its barriers stop at 256 members (a
/// host event and a post per step make the largest ones slow to
/// simulate and add nothing the smaller ones do not show).
pub const ASSISTED_MAX_ELEMENTS: u32 = 1024;
pub const ASSISTED_MAX_NODES: u16 = 256;

/// Does the report run `scheme` x `alg` at (`n`, `elements`)? Everything
/// but the assisted scheme's ring (its steps depend on the chunk: it
/// cannot run assisted), long vectors and largest groups.
pub fn runs(scheme: &str, alg: &str, _kind: Kind, n: u16, elements: u32) -> bool {
    scheme != "assisted"
        || (alg != "ring" && elements <= ASSISTED_MAX_ELEMENTS && n <= ASSISTED_MAX_NODES)
}
pub const BARRIER_ALGS: [&str; 3] = ["dissemination", "pairwise", "tree"];
pub const ALLREDUCE_ALGS: [&str; 3] = ["pairwise", "binomial", "ring"];
/// The allreduce sweep's group size.
pub const ALLREDUCE_NODES: u16 = 16;
/// A group size that is not a power of two, run for the model only (its
/// pairwise barrier takes the two extra steps).
pub const MODEL_EXTRA_NODES: u16 = 12;
/// The summary's profile, group sizes and allreduce vectors (f64
/// elements: 8 B and 256 B).
pub const SUMMARY_PROFILE: &str = "modern";
pub const SUMMARY_NODES: [u16; 2] = [16, 256];
pub const SUMMARY_ELEMENTS: [u32; 2] = [1, 32];
/// The acceptance figure: a 1 MiB f64 allreduce of `ALLREDUCE_NODES`
/// members on `SUMMARY_PROFILE`, best NIC-based algorithm against best
/// host-based, and the speed-up it should reach (best host / best NIC).
pub const ACCEPT_ELEMENTS: u32 = 1 << 17;
pub const ACCEPT_SPEEDUP: f64 = 1.5;

/// What a report runs: sizes and loop lengths.
#[derive(Debug, Clone)]
pub struct Plan {
    /// "full", "quick" (or a test's).
    pub name: &'static str,
    pub barrier_sizes: Vec<u16>,
    /// f64 elements per member (8 B each).
    pub allreduce_elements: Vec<u32>,
    /// Barriers per loop up to 256 members, and beyond.
    pub barrier_count: u64,
    pub large_barrier_count: u64,
    /// Allreduces per loop at 16 nodes: `allreduce_count`, or for large
    /// vectors as many as make `allreduce_loop_bytes` per member, at
    /// least `min_allreduce_count`.
    pub allreduce_count: u64,
    pub allreduce_loop_bytes: u64,
    pub min_allreduce_count: u64,
    /// Allreduces per loop at the summary's 256 nodes.
    pub large_allreduce_count: u64,
}

impl Plan {
    /// Vectors of 8 B to 1 MiB; loops of 50 allreduces up to 32 KiB,
    /// then of 1.6 MiB per member (25 of 64 KiB, 12 of 128 KiB, 6 of
    /// 256 KiB, 5 of 512 KiB and 1 MiB).
    pub fn full() -> Plan {
        Plan {
            name: "full",
            barrier_sizes: vec![2, 4, 8, 16, 64, 256, 1024],
            allreduce_elements: (0..18).map(|k| 1u32 << k).collect(),
            barrier_count: 100,
            large_barrier_count: 100,
            allreduce_count: 50,
            allreduce_loop_bytes: 50 * 32 * 1024,
            min_allreduce_count: 5,
            large_allreduce_count: 50,
        }
    }

    /// Vectors of 8 B to 128 KiB (and the acceptance figure's 1 MiB on
    /// `modern`); loops of 20 allreduces up to 4 KiB, 3 from 32 KiB.
    pub fn quick() -> Plan {
        Plan {
            name: "quick",
            barrier_sizes: vec![2, 4, 8, 16, 64, 256],
            allreduce_elements: vec![1, 4, 32, 256, 4096, 16384],
            barrier_count: 50,
            large_barrier_count: 20,
            allreduce_count: 20,
            allreduce_loop_bytes: 20 * 4 * 1024,
            min_allreduce_count: 3,
            large_allreduce_count: 10,
        }
    }

    /// The loop length of a point.
    pub fn count(&self, kind: Kind, n: u16, elements: u32) -> u64 {
        match kind {
            Kind::Barrier if n > 256 => self.large_barrier_count,
            Kind::Barrier => self.barrier_count,
            Kind::Allreduce if n > ALLREDUCE_NODES => self.large_allreduce_count,
            Kind::Allreduce => (self.allreduce_loop_bytes / (8 * elements.max(1) as u64)).clamp(
                self.min_allreduce_count,
                self.allreduce_count.max(self.min_allreduce_count),
            ),
        }
    }

    /// Every point the report needs, in the order they run: the sweeps,
    /// and whatever the published comparison, the summary and the model
    /// need that the sweeps do not hold (the acceptance figure's 1 MiB
    /// allreduces on `modern` among them).
    pub fn specs(&self) -> Vec<Spec> {
        let mut v = Vec::new();
        let mut add = |profile, kind, n, elements| {
            let algs: &[&'static str] =
                if kind == Kind::Barrier { &BARRIER_ALGS } else { &ALLREDUCE_ALGS };
            for scheme in SCHEMES {
                for &alg in algs.iter().filter(|&&a| runs(scheme, a, kind, n, elements)) {
                    let s = Spec { profile, kind, scheme, alg, n, elements };
                    if !v.contains(&s) {
                        v.push(s);
                    }
                }
            }
        };
        for profile in PROFILES {
            for &n in self.barrier_sizes.iter().chain(&[2, MODEL_EXTRA_NODES]) {
                add(profile, Kind::Barrier, n, 0);
            }
            for &e in &self.allreduce_elements {
                add(profile, Kind::Allreduce, ALLREDUCE_NODES, e);
            }
        }
        for (profile, n) in md::PUBLISHED.iter().map(|p| (p.profile, p.nodes)) {
            add(profile, Kind::Barrier, n, 0);
        }
        add(SUMMARY_PROFILE, Kind::Allreduce, ALLREDUCE_NODES, ACCEPT_ELEMENTS);
        for n in SUMMARY_NODES {
            add(SUMMARY_PROFILE, Kind::Barrier, n, 0);
            for e in SUMMARY_ELEMENTS {
                add(SUMMARY_PROFILE, Kind::Allreduce, n, e);
            }
        }
        v
    }
}

/// `cargo xtask report collectives`.
pub fn report(
    out: Option<PathBuf>,
    profile: Option<String>,
    backend: crate::report::ReportBackend,
    quick: bool,
    quiet: bool,
) -> crate::Result<ExitCode> {
    if profile.is_some() {
        return Err("report collectives: --profile does not apply (it runs lanai4-gm, \
                    lanai9-gm and modern)"
            .into());
    }
    if backend != crate::report::ReportBackend::Sim {
        return Err("report collectives: runs on the simulator only (--backend sim)".into());
    }
    let dir = out.unwrap_or_else(|| crate::workspace_root().join("out/reports/collectives"));
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let (text, failed) = write(&dir, &plan, quiet)?;
    crate::emit(&text);
    if failed > 0 {
        eprintln!("{failed} point(s) did not run clean (listed in the report)");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `plan` and write the report into `dir`: what to print (the
/// summary and the published comparison, and where the report is), and
/// how many points failed.
pub fn write(dir: &Path, plan: &Plan, quiet: bool) -> crate::Result<(String, usize)> {
    let scen = dir.join("scenarios");
    std::fs::create_dir_all(&scen).map_err(|err| format!("{}: {err}", scen.display()))?;
    let start = Instant::now();
    let results = measure_all(plan, &scen, quiet)?;
    let wall = start.elapsed();
    let report = md::render(plan, &results, dir, wall)?;
    let path = dir.join("report.md");
    std::fs::write(&path, &report.markdown).map_err(|err| format!("{}: {err}", path.display()))?;
    let csv = dir.join("points.csv");
    std::fs::write(&csv, results.csv()).map_err(|err| format!("{}: {err}", csv.display()))?;
    let text = format!(
        "{}\n\ncollectives report ({} plan: {} runs, {:.0} s) written to {}\n",
        report.printed.trim_end(),
        plan.name,
        results.len(),
        wall.as_secs_f64(),
        path.display()
    );
    Ok((text, results.failed().len()))
}

/// Run every point of `plan`, each scenario written into `scen`, with a
/// progress bar on stderr (a line every 15 s where no bar is drawn).
fn measure_all(plan: &Plan, scen: &Path, quiet: bool) -> crate::Result<Results> {
    let specs = plan.specs();
    let pb = crate::progress::bar(specs.len() as u64, "collectives report", quiet);
    let lines = !quiet && !crate::progress::shown(quiet);
    let start = Instant::now();
    let mut last_line = start;
    let mut results = Results::default();
    for (i, s) in specs.iter().enumerate() {
        pb.set_message(format!("collectives: {}", s.label()));
        let count = plan.count(s.kind, s.n, s.elements);
        let text = run::scenario_toml(s, count);
        let file = scen.join(s.file_name());
        std::fs::write(&file, &text).map_err(|err| format!("{}: {err}", file.display()))?;
        let p = run::measure(&text, count).map_err(|e| format!("{}: {e}", file.display()))?;
        if let Some(problem) = &p.problem {
            pb.suspend(|| eprintln!("FAILED: {}: {problem}", s.label()));
        }
        results.insert(*s, p);
        pb.inc(1);
        if lines && last_line.elapsed() >= Duration::from_secs(15) {
            last_line = Instant::now();
            eprintln!(
                "collectives report: {}/{} runs ({:.0} s), at {}",
                i + 1,
                specs.len(),
                start.elapsed().as_secs_f64(),
                s.label()
            );
        }
    }
    pb.finish_and_clear();
    Ok(results)
}
