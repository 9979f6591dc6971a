//! `cargo xtask sim FILE [--backend sim|live|qemu] [--json]`: run one
//! scenario on the simulator (virtual time, deterministic) or on a live or
//! qemu cluster started in this process (wall-clock time), with the same
//! host programs and content checks (`nic_emu::scenario`).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, Pacing};
use nic_emu::scenario::{self, Progress, RtScenarioOptions};

use crate::rt::Backend;

/// A progress printer for long runs, nothing for runs shorter than two
/// seconds of wall time: on a terminal a bar on stderr (messages done),
/// else a line on stderr at most every two seconds. `real_time`: the
/// run's clock is the wall clock, not virtual time.
pub fn progress_printer(label: String, real_time: bool) -> impl FnMut(&Progress) {
    let start = Instant::now();
    let mut last = start;
    let mut bar = crate::progress::RunBar::new(&format!("[{label}]"), false);
    move |p: &Progress| {
        if bar.shown() {
            let clock = if real_time { "run" } else { "virtual" };
            bar.update(p.messages_done, p.messages_total, || {
                format!(
                    "{clock} {} of {}, {} packets",
                    scenario::report::fmt_ns(p.now_ns),
                    scenario::report::fmt_ns(p.limit_ns),
                    p.packets
                )
            });
            return;
        }
        let now = Instant::now();
        if now.duration_since(last) >= Duration::from_secs(2) {
            last = now;
            eprintln!(
                "  [{label}] {:>5.1} s wall: {} {} of {}, {}/{} messages, {} packets",
                now.duration_since(start).as_secs_f64(),
                if real_time { "run" } else { "virtual" },
                scenario::report::fmt_ns(p.now_ns),
                scenario::report::fmt_ns(p.limit_ns),
                p.messages_done,
                p.messages_total,
                p.packets,
            );
        }
    }
}

/// What `sim` was asked for, beyond the file.
pub struct SimArgs {
    pub json: bool,
    pub seed: Option<u64>,
    pub quiet: bool,
    pub backend: Backend,
    /// Real time: the wall-clock limit (s) instead of `run.limit_ms`.
    pub timeout: Option<f64>,
    pub pacing: Pacing,
    /// Capture every packet into this pcapng file.
    pub pcap: Option<std::path::PathBuf>,
    /// Write the decoded transition trace into this file (sim only).
    pub trace: Option<std::path::PathBuf>,
    /// Override of the scenario's (and profile's) reliability mode.
    pub reliability: Option<nic_emu::profile::Reliability>,
    /// Override of the scenario's (and profile's) `[nic_cpu] pricing`.
    pub pricing: Option<nic_emu::profile::Pricing>,
}

/// `--trace` naming a directory (bare `--trace` is the current one):
/// `<scenario file stem>.trace.json` in it; else the file given.
pub fn trace_path(given: std::path::PathBuf, scenario: &std::path::Path) -> std::path::PathBuf {
    if !given.is_dir() {
        return given;
    }
    let stem = scenario.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
    given.join(format!("{stem}.trace.json"))
}

pub fn run(root: &Path, file: &Path, a: &SimArgs) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    let refused = |e: &dyn std::fmt::Display| -> crate::Result<ExitCode> {
        eprintln!("error: {e}");
        Ok(ExitCode::from(1))
    };
    let mut sc = match scenario::load_file(file) {
        Ok(s) => s,
        Err(e) => return refused(&e),
    };
    if let Some(s) = a.seed {
        sc.seed = s;
    }
    if let Some(r) = a.reliability {
        sc.reliability = Some(r);
    }
    if let Some(p) = a.pricing {
        sc.nic_cpu.pricing = Some(p);
    }
    let label = file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let rt_backend = match a.backend {
        Backend::Sim => None,
        Backend::Live => Some(ClusterBackend::Live),
        Backend::Qemu => Some(ClusterBackend::Qemu),
    };
    let sim_opts = scenario::SimOptions { pcap: a.pcap.clone() };
    // The trace file is opened before the run: a path that cannot be
    // written is refused at once.
    let trace_out = match &a.trace {
        Some(p) => match crate::trace::create_out("--trace", p) {
            Ok(f) => Some((p, f)),
            Err(e) => return refused(&e),
        },
        None => None,
    };
    let traced = trace_out.is_some();
    let run = match rt_backend {
        None => {
            let mut quiet = |_: &Progress| {};
            let mut loud = progress_printer(label, false);
            let progress: &mut dyn FnMut(&Progress) = if a.quiet { &mut quiet } else { &mut loud };
            if traced {
                scenario::run_traced(&sc, &sim_opts, progress).map(|(r, t)| (r, Some(t)))
            } else {
                scenario::run_with_options(&sc, &sim_opts, progress).map(|r| (r, None))
            }
        }
        Some(backend) => {
            // Refuse what real time cannot do before building anything.
            if let Err(e) = scenario::check_realtime(&sc, backend) {
                return refused(&e);
            }
            // A flow of the bandwidth manager: the cluster runs its master
            // as `nic-cluster brm`, the one built in release.
            if sc.flows.iter().any(|f| f.rate.uses_brm()) {
                crate::fw::cargo_build(
                    root,
                    &["-p", "nic-emu", "--bin", "nic-cluster"],
                    "nic-cluster (the bandwidth manager's master)",
                )?;
                crate::fw::use_release_nic_cluster(root);
            }
            let mut opts = RtScenarioOptions::new(backend);
            opts.pacing = a.pacing;
            opts.pcap = a.pcap.clone();
            if let Some(t) = a.timeout {
                if !(t.is_finite() && t > 0.0) {
                    return refused(&format!(
                        "--timeout: {t} must be a positive number of seconds"
                    ));
                }
                opts.timeout = Some(Duration::from_secs_f64(t));
            }
            if backend == ClusterBackend::Qemu {
                if !crate::rt::ensure_qemu()? {
                    return Err(format!("--backend qemu: {} is missing", qemu::QEMU_PROGRAM));
                }
                let elf = crate::fw::build_image(root, false)?;
                opts.image = Some(elf);
            }
            if !a.quiet {
                eprintln!(
                    "running {label} on a {}-node {backend} cluster (wall-clock time{})",
                    sc.nodes,
                    match opts.timeout {
                        Some(t) => format!(", limit {t:?}"),
                        None => format!(", limit run.limit_ms = {} ms", sc.limit_ns / 1_000_000),
                    }
                );
            }
            let mut quiet = |_: &Progress| {};
            let mut loud = progress_printer(label, true);
            let progress: &mut dyn FnMut(&Progress) = if a.quiet { &mut quiet } else { &mut loud };
            if traced {
                scenario::run_realtime_traced(&sc, &opts, progress).map(|(r, t)| (r, Some(t)))
            } else {
                scenario::run_realtime_with_progress(&sc, &opts, progress).map(|r| (r, None))
            }
        }
    };
    let report = match (run, trace_out) {
        (Ok((r, Some(t))), Some((p, f))) => {
            crate::trace::write(p, f, &t, a.quiet)?;
            r
        }
        (Ok((r, _)), _) => r,
        (Err(e), out) => {
            // Nothing was traced: no empty file is left behind.
            if let Some((p, f)) = out {
                drop(f);
                let _ = std::fs::remove_file(p);
            }
            return refused(&e);
        }
    };
    if let (Some(p), Some(n)) = (&a.pcap, report.captured) {
        if !a.quiet {
            eprintln!(
                "captured {n} packet records to {} (tools/wireshark/nic_emu.lua decodes them)",
                p.display()
            );
        }
    }
    if a.json {
        crate::emit(&format!("{}\n", report.to_json()));
    } else {
        crate::emit(&report.summary());
    }
    // (Advice, not progress: printed with --quiet too.)
    let limit_ns = match a.timeout {
        Some(t) if rt_backend.is_some() => (t * 1e9) as u64,
        _ => sc.limit_ns,
    };
    for hint in report.limit_hints(send_timeout_ns(&sc), limit_ns) {
        eprintln!("note: {hint}");
    }
    Ok(if report.all_delivered_intact() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// The run's send timeout: the scenario's, else its profile's (0 when
/// neither can be read: the run used it already, so it can).
fn send_timeout_ns(sc: &scenario::Validated) -> u64 {
    nic_emu::Profile::load(&sc.profile)
        .ok()
        .and_then(|p| nic_emu::plan::send_timeout_ns(&p, sc.send_timeout_us).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::trace_path;
    use std::path::{Path, PathBuf};

    #[test]
    fn a_bare_trace_flag_or_a_directory_names_the_file_after_the_scenario() {
        let sc = Path::new("scenarios/pingpong-2node.toml");
        assert_eq!(trace_path(PathBuf::from("."), sc), Path::new("./pingpong-2node.trace.json"));
        let dir = std::env::temp_dir();
        assert_eq!(trace_path(dir.clone(), sc), dir.join("pingpong-2node.trace.json"));
        let file = dir.join("no-such-dir-here").join("x.json");
        assert_eq!(trace_path(file.clone(), sc), file);
    }
}
