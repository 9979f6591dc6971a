//! `cargo xtask fuzz --scenarios N`: N random scenarios on the simulator
//! (`nic_scenario::fuzz`: the generator and checks the suite's property
//! test uses), case `i` drawn from seed `S + i`, on every core; then a
//! sample of the cases that passed on live and qemu clusters. Every
//! failure is listed with its scenario file (under `out/fuzz/`) and the
//! commands that run it again.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use host_driver::cluster::ClusterBackend;
use nic_emu::scenario as nic_scenario;
use nic_scenario::fuzz::{self, Verdict};

/// What the sweep is asked to do.
pub struct Opts {
    pub cases: u64,
    pub seed: u64,
    /// Cases to run again on each real-time backend (live, qemu).
    pub realtime: usize,
    pub quiet: bool,
}

/// A case that failed: its seed, why, and its file.
struct Failure {
    seed: u64,
    why: String,
    file: PathBuf,
}

/// Small and short cases are the sample run in real time: at most this
/// many nodes ...
const RT_MAX_NODES: u16 = 6;
/// ... and ended within this much simulated time.
const RT_MAX_SIM_NS: u64 = 50_000_000;

pub fn run(root: &Path, o: &Opts) -> crate::Result<ExitCode> {
    let t = Instant::now();
    let out = root.join("out/fuzz");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(64);
    println!(
        "==> {} random scenarios on the simulator, seeds {}..={} ({threads} threads)",
        o.cases,
        o.seed,
        o.seed.saturating_add(o.cases - 1)
    );
    let pb = crate::progress::bar(o.cases, "scenarios", o.quiet);
    let next = AtomicU64::new(0);
    let (passed, not_cases) = (AtomicU64::new(0), AtomicU64::new(0));
    let failures = Mutex::new(Vec::<Failure>::new());
    // Small cases that passed, as candidates for the real-time sample
    // (the lowest seeds, so the sample is the same for the same sweep).
    let sample = Mutex::new(Vec::<(u64, String)>::new());
    let last_line = Mutex::new(Instant::now());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= o.cases {
                    break;
                }
                let seed = o.seed.wrapping_add(i);
                let g = fuzz::case(seed);
                let text = g.text();
                match fuzz::check(&text) {
                    Verdict::Passed { end_ns } => {
                        passed.fetch_add(1, Ordering::Relaxed);
                        if g.nodes() <= RT_MAX_NODES
                            && end_ns <= RT_MAX_SIM_NS
                            && runs_in_real_time(&text)
                        {
                            sample.lock().unwrap().push((seed, text));
                        }
                    }
                    Verdict::NotACase => {
                        not_cases.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::Failed(why) => {
                        let file = out.join(format!("case-{seed}.toml"));
                        let _ = std::fs::write(&file, &text);
                        crate::progress::println(
                            &pb,
                            &format!("case {seed} FAILED: {}", first_line(&why)),
                        );
                        failures.lock().unwrap().push(Failure { seed, why, file });
                    }
                }
                pb.inc(1);
                // Without a bar (not a terminal): a line every 30 s.
                if !crate::progress::shown(o.quiet) {
                    let mut l = last_line.lock().unwrap();
                    if l.elapsed().as_secs() >= 30 {
                        *l = Instant::now();
                        println!(
                            "  {} of {} cases run, {} failed ({:.0} s)",
                            next.load(Ordering::Relaxed).min(o.cases),
                            o.cases,
                            failures.lock().unwrap().len(),
                            t.elapsed().as_secs_f64()
                        );
                    }
                }
            });
        }
    });
    pb.finish_and_clear();
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|f| f.seed);
    let (passed, not_cases) = (passed.into_inner(), not_cases.into_inner());
    println!(
        "simulator: {passed} passed, {} failed, {not_cases} not cases (refused by design: \
         two flows on one stream, or into a host collective's port) in {:.0} s",
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    for f in &failures {
        println!("\ncase {} FAILED:\n{}", f.seed, indent(&f.why));
        println!("  again: cargo xtask fuzz --scenarios 1 --seed {}", f.seed);
        println!("         cargo xtask sim {}", shown_path(root, &f.file));
    }
    // The real-time sample.
    let mut sample = sample.into_inner().unwrap();
    sample.sort_by_key(|(s, _)| *s);
    let mut rt_failed = 0;
    if o.realtime > 0 {
        rt_failed = realtime_sample(root, &out, &sample, o.realtime)?;
    }
    let ok = failures.is_empty() && rt_failed == 0;
    println!(
        "\ncargo xtask fuzz --scenarios {}: {} ({} on the simulator failed, {rt_failed} in real \
         time; {:.0} s)",
        o.cases,
        if ok { "OK" } else { "FAILED" },
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Run `n` of the sampled cases on a live cluster and `n` others on a
/// qemu one, each through `xtask sim FILE --backend B`: the failures.
fn realtime_sample(
    root: &Path,
    out: &Path,
    sample: &[(u64, String)],
    n: usize,
) -> crate::Result<usize> {
    if sample.is_empty() {
        println!("\nno case small and short enough to run in real time");
        return Ok(0);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut failed = 0;
    // Spread the picks over the sample: live takes every other one from
    // the start, qemu from the second.
    for (b, backend) in ["live", "qemu"].into_iter().enumerate() {
        let picks: Vec<_> = sample.iter().skip(b).step_by(2).take(n).collect();
        println!("\n==> {} of the cases that passed, on a {backend} cluster", picks.len());
        for (seed, text) in picks {
            let file = out.join(format!("case-{seed}.toml"));
            std::fs::write(&file, text)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            let t = Instant::now();
            let o = Command::new(&exe)
                .args(["sim", "--quiet", "--backend", backend])
                .arg(&file)
                .output()
                .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
            if o.status.success() {
                println!("  case {seed} on {backend}: ok ({:.1} s)", t.elapsed().as_secs_f64());
                let _ = std::fs::remove_file(&file);
            } else {
                failed += 1;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                println!("  case {seed} on {backend}: FAILED ({})\n{}", o.status, indent(&text));
                println!(
                    "  again: cargo xtask sim {} --backend {backend}",
                    shown_path(root, &file)
                );
            }
        }
    }
    Ok(failed)
}

/// Whether both real-time backends take the case (the simulator's
/// fabric reads some it cannot: wide switches).
fn runs_in_real_time(text: &str) -> bool {
    nic_scenario::Scenario::parse_validated(text).is_ok_and(|v| {
        [ClusterBackend::Live, ClusterBackend::Qemu]
            .into_iter()
            .all(|b| nic_scenario::check_realtime(&v, b).is_ok())
    })
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect::<String>().trim_end().to_string()
}

fn shown_path(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}
