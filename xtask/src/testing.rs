//! `cargo xtask test`: everything CI runs. The cargo test suite (profile
//! `quick`: release code without LTO; nextest when installed), then each
//! scenario under scenarios/ through the scenario runner with its checks.
//! Ends with one closing line, `total: N passed, M failed`, and a non-zero
//! exit on any failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use nic_emu::scenario::{self, Report};

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
}

/// Add up cargo test's `test result: ... N passed; M failed` lines, or
/// (`nextest`) nextest's `Summary ... N tests run: X passed, Y failed`
/// line (nextest echoes a failed test's own `test result:` line; that one
/// must not count).
pub fn parse_counts(line: &str, nextest: bool, c: &mut Counts) {
    let l = line.trim();
    let grab = |word: &str| -> Option<u64> {
        let i = l.find(word)?;
        l[..i].split(|ch: char| !ch.is_ascii_digit()).rfind(|s| !s.is_empty())?.parse().ok()
    };
    let closing = if nextest {
        l.starts_with("Summary") && l.contains("tests run")
    } else {
        l.starts_with("test result:")
    };
    if closing {
        c.passed += grab(" passed").unwrap_or(0);
        c.failed += grab(" failed").unwrap_or(0);
    }
}

/// The cargo profile the suite builds in: release code without LTO
/// (Cargo.toml), which builds in less than half the time of `release`.
const TEST_PROFILE: &str = "quick";

fn cargo_tests(root: &Path, nextest: bool) -> crate::Result<(bool, Counts)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args: Vec<&str> = if nextest {
        vec!["nextest", "run", "--workspace", "--cargo-profile", TEST_PROFILE, "--no-fail-fast"]
    } else {
        vec!["test", "--workspace", "--profile", TEST_PROFILE, "--no-fail-fast"]
    };
    println!("==> cargo {}", args.join(" "));
    let mut child = Command::new(&cargo)
        .args(&args)
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    // nextest reports on stderr, cargo test on stdout: read both, echo both.
    let stderr = child.stderr.take();
    let err_thread = std::thread::spawn(move || {
        let mut c = Counts::default();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(|l| l.ok()) {
                eprintln!("{line}");
                parse_counts(&line, nextest, &mut c);
            }
        }
        c
    });
    let mut counts = Counts::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            println!("{line}");
            parse_counts(&line, nextest, &mut counts);
        }
    }
    let status = child.wait().map_err(|e| format!("cargo: {e}"))?;
    let ec = err_thread.join().unwrap_or_default();
    counts.passed += ec.passed;
    counts.failed += ec.failed;
    Ok((status.success(), counts))
}

/// The MCP's hostile-input test (random port-window, descriptor,
/// page-table and wire input; then a good transfer) in a debug build, so
/// that an arithmetic overflow panics. `steps`/`seed` default to the
/// test's own (a short run); `cargo xtask fuzz` asks for a million.
pub fn fuzz_mcp(
    root: &Path,
    steps: Option<u64>,
    seed: Option<u64>,
) -> crate::Result<(bool, Counts)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args = ["test", "-p", "mcp", "--lib", "tests::fuzz", "--", "--nocapture"];
    println!("==> cargo {} (debug build: overflow checks on)", args.join(" "));
    let mut cmd = Command::new(&cargo);
    cmd.args(args).current_dir(root);
    if let Some(n) = steps {
        cmd.env("MCP_FUZZ_STEPS", n.to_string());
    }
    if let Some(s) = seed {
        cmd.env("MCP_FUZZ_SEED", s.to_string());
    }
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    let mut c = Counts::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("{line}");
        parse_counts(line, false, &mut c);
    }
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((out.status.success(), c))
}

/// The decoders' and the scenario parser's property tests (`fuzz_*`) with
/// `cases` cases each (the quick profile, as the test suite).
fn fuzz_decoders(root: &Path, cases: u64) -> crate::Result<bool> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut ok = true;
    for args in [
        &["test", "--profile", "quick", "-p", "nic-abi", "--lib", "fuzz_"][..],
        &["test", "--profile", "quick", "-p", "nic-scenario", "--test", "fuzz_parser"][..],
    ] {
        println!("==> PROPTEST_CASES={cases} cargo {}", args.join(" "));
        let status = Command::new(&cargo)
            .args(args)
            .env("PROPTEST_CASES", cases.to_string())
            .current_dir(root)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        ok &= status.success();
    }
    Ok(ok)
}

/// `cargo xtask fuzz`: the hostile-input test of the MCP at the given
/// count, then every nic-abi decoder and the scenario parser with `cases`
/// random inputs each.
pub fn fuzz_command(root: &Path, steps: u64, seed: u64, cases: u64) -> crate::Result<ExitCode> {
    let t = Instant::now();
    let (mcp_ok, _) = fuzz_mcp(root, Some(steps), Some(seed))?;
    let decoders_ok = fuzz_decoders(root, cases)?;
    let ok = mcp_ok && decoders_ok;
    println!(
        "cargo xtask fuzz: {} (MCP {steps} steps, seed {seed}: {}; decoders and scenario parser, \
         {cases} cases each: {}; {:.0} s)",
        if ok { "OK" } else { "FAILED" },
        if mcp_ok { "ok" } else { "FAILED" },
        if decoders_ok { "ok" } else { "FAILED" },
        t.elapsed().as_secs_f64()
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The checks every example scenario must pass. Returns the problems.
pub fn check_scenario(report: &Report, has_faults: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if !report.complete {
        problems.push(format!("did not finish ({})", report.sim.stopped));
    }
    for f in &report.flows {
        if f.delivered != f.messages
            || f.corrupted + f.duplicates + f.out_of_order + f.send_errors > 0
        {
            problems.push(format!(
                "flow {}: delivered {}/{}, corrupted {}, duplicates {}, out of order {}, send errors {}",
                f.name, f.delivered, f.messages, f.corrupted, f.duplicates, f.out_of_order, f.send_errors
            ));
        }
    }
    for (f, c) in report.flows.iter().filter_map(|f| f.collective.as_ref().map(|c| (f, c))) {
        if c.results_wrong > 0 || c.incomplete > 0 || c.completed != c.count {
            problems.push(format!(
                "flow {}: {} of {} collectives complete at every member, {} results wrong, {} \
                 ended with members missing",
                f.name, c.completed, c.count, c.results_wrong, c.incomplete
            ));
        }
    }
    let errors: u64 = report.nics.iter().map(|n| n.errors).sum();
    if errors > 0 {
        problems.push(format!("{errors} descriptors refused by the NICs"));
    }
    if has_faults {
        let retrans: u64 = report.nics.iter().map(|n| n.retransmits).sum();
        let drops: u64 = report.nics.iter().map(|n| n.drops).sum();
        if retrans == 0 || drops == 0 {
            problems.push(format!(
                "faults injected but retransmits = {retrans}, drops = {drops} (both should be > 0)"
            ));
        }
    }
    problems
}

pub fn scenario_files(root: &Path) -> crate::Result<Vec<PathBuf>> {
    let dir = root.join("scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
}

fn run_scenarios(root: &Path) -> crate::Result<Counts> {
    let mut c = Counts::default();
    let files = scenario_files(root)?;
    println!("==> {} scenarios under scenarios/", files.len());
    for path in files {
        let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let t = Instant::now();
        let outcome = scenario::load_file(&path).and_then(|sc| {
            let faults = sc.faults.drop + sc.faults.corrupt + sc.faults.duplicate > 0.0;
            let mut progress = crate::sim::progress_printer(name.clone(), false);
            scenario::run_with_progress(&sc, &mut progress).map(|r| (r, faults))
        });
        let problems = match &outcome {
            Ok((r, faults)) => check_scenario(r, *faults),
            Err(e) => vec![e.to_string()],
        };
        let detail = match &outcome {
            Ok((r, _)) => format!(
                "{} flows, {} messages, {} packets, {} simulated",
                r.flows.len(),
                r.flows.iter().map(|f| f.delivered).sum::<u64>(),
                r.sim.packets,
                scenario::report::fmt_ns(r.sim.end_ns)
            ),
            Err(_) => String::new(),
        };
        if problems.is_empty() {
            c.passed += 1;
            println!("scenario {name} ... ok ({detail}; {:.1} s)", t.elapsed().as_secs_f64());
        } else {
            c.failed += 1;
            println!("scenario {name} ... FAILED");
            for p in problems {
                println!("    {p}");
            }
        }
    }
    Ok(c)
}

pub fn run(root: &Path, scenarios_only: bool, nextest: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    if !scenarios_only {
        // The qemu tests run the firmware image; one test drives gdb,
        // one decodes a packet capture with tshark.
        use crate::prereq::Need;
        let needs = [Need::FwTarget, Need::Qemu, Need::Gdb, Need::Tshark, Need::Mpi];
        crate::prereq::ensure("cargo xtask test", &needs)?;
    }
    let start = Instant::now();
    let mut total = Counts::default();
    let mut cargo_ok = true;
    let mut cargo_counts = Counts::default();
    if !scenarios_only {
        let use_nextest = nextest && crate::prereq::has_nextest();
        let (ok, c) = cargo_tests(root, use_nextest)?;
        cargo_ok = ok;
        cargo_counts = c;
        total.passed += c.passed;
        total.failed += c.failed;
    }
    if !scenarios_only {
        let (ok, c) = fuzz_mcp(root, None, None)?;
        cargo_ok &= ok;
        cargo_counts.passed += c.passed;
        cargo_counts.failed += c.failed;
        total.passed += c.passed;
        total.failed += c.failed;
    }
    let sc = run_scenarios(root)?;
    total.passed += sc.passed;
    total.failed += sc.failed;
    let ok = cargo_ok && total.failed == 0;
    println!();
    println!(
        "cargo xtask test: {} in {:.0} s (cargo tests: {} passed, {} failed{}; scenarios: {} passed, {} failed)",
        if ok { "OK" } else { "FAILED" },
        start.elapsed().as_secs_f64(),
        cargo_counts.passed,
        cargo_counts.failed,
        if cargo_ok { "" } else { ", cargo exited non-zero" },
        sc.passed,
        sc.failed,
    );
    // A build failure counts as a failure even though no test ran.
    let failed = total.failed + u64::from(!cargo_ok && cargo_counts.failed == 0);
    println!("total: {} passed, {} failed", total.passed, failed);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_and_nextest_closing_lines_are_counted() {
        let mut c = Counts::default();
        parse_counts("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured", false, &mut c);
        parse_counts("test result: FAILED. 3 passed; 2 failed; 0 ignored", false, &mut c);
        parse_counts("running 12 tests", false, &mut c);
        assert_eq!(c, Counts { passed: 15, failed: 2 });
        let mut n = Counts::default();
        parse_counts("    test result: FAILED. 0 passed; 1 failed; 0 ignored", true, &mut n);
        parse_counts(
            "     Summary [   2.345s] 40 tests run: 39 passed, 1 failed, 0 skipped",
            true,
            &mut n,
        );
        assert_eq!(n, Counts { passed: 39, failed: 1 });
    }
}
