//! `cargo xtask sim FILE [--json]`: run one scenario on the simulator.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nic_emu::scenario::{self, Progress};

/// A progress printer for long runs: a line on stderr at most every two
/// seconds of wall time, nothing for runs shorter than that.
pub fn progress_printer(label: String) -> impl FnMut(&Progress) {
    let start = Instant::now();
    let mut last = start;
    move |p: &Progress| {
        let now = Instant::now();
        if now.duration_since(last) >= Duration::from_secs(2) {
            last = now;
            eprintln!(
                "  [{label}] {:>5.1} s wall: virtual {}, {}/{} messages, {} packets",
                now.duration_since(start).as_secs_f64(),
                scenario::report::fmt_ns(p.now_ns),
                p.messages_done,
                p.messages_total,
                p.packets,
            );
        }
    }
}

pub fn run(file: &Path, json: bool, seed: Option<u64>, quiet: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    let mut sc = match scenario::load_file(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(s) = seed {
        sc.seed = s;
    }
    let label = file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let report = if quiet {
        scenario::run(&sc)
    } else {
        scenario::run_with_progress(&sc, &mut progress_printer(label))
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if json {
        crate::emit(&format!("{}\n", report.to_json()));
    } else {
        crate::emit(&report.summary());
    }
    Ok(if report.all_delivered_intact() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}
