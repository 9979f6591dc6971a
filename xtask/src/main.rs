//! `cargo xtask`: the project's one build-and-run tool (after Hubris).
//!
//! Subcommands: `sim` runs a scenario file, `bench` prints the latency and
//! bandwidth curves next to the calibration targets and the simulator's
//! speed (`--rate`: the cost of rate control), `calibrate` measures a
//! profile's rate-control calibration, `report rate-control` writes the
//! rate-control experiments as Markdown with SVG plots, `test` runs the whole test suite and the example scenarios,
//! `demo` runs a small cluster, `doctor` checks prerequisites. The alias in
//! .cargo/config.toml builds this crate in release, so runs here are fast.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod calibrate;
mod demo;
mod prereq;
mod report;
mod sim;
mod testing;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, run, test and measure the emulated NIC cluster",
    long_about = "Build, run, test and measure the emulated NIC cluster.\n\n\
        On a fresh machine: `cargo xtask demo` shows a cluster at work, \
        `cargo xtask test` runs everything CI runs.",
    version
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario file on the deterministic simulator.
    ///
    /// Prints a human summary, or with --json the JSON document described
    /// in docs/scenarios.md. Exit status: 0 when every message was
    /// delivered exactly once, intact and in order; 1 when the scenario is
    /// refused; 2 when the run ended with problems (lost, corrupted,
    /// duplicated or reordered messages, failed sends, or the time limit).
    Sim {
        /// The scenario (TOML), e.g. scenarios/stream-2node.toml.
        file: PathBuf,
        /// Print the JSON document on stdout instead of the summary.
        #[arg(long)]
        json: bool,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// No progress lines on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Latency and bandwidth curves against the calibration targets, and
    /// the simulator's speed.
    ///
    /// For each profile: 2-node ping-pong one-way latency and 2-node stream
    /// bandwidth for messages of 4 B to 1 MiB in powers of 4. Then
    /// simulated packets per wall-clock second for a 16-node all-to-all
    /// stream.
    Bench {
        /// Profiles to measure (default: lanai4-gm and lanai9-gm).
        #[arg(long = "profile", value_name = "NAME")]
        profiles: Vec<String>,
        /// Fewer messages per point: a rough curve in a few seconds.
        #[arg(long)]
        quick: bool,
        /// Skip the simulator-speed run.
        #[arg(long)]
        no_speed: bool,
        /// Only the rate-control overhead comparison: ping-pong latency
        /// and stream bandwidth (4 B .. 64 KiB) with every flow at IDT 0
        /// vs without flows, side by side (default profile lanai4-gm).
        #[arg(long)]
        rate: bool,
    },
    /// Run the whole test suite: `cargo test --workspace --release` (or
    /// nextest when installed), then every scenario under scenarios/ with
    /// its checks. Exits non-zero on any failure.
    Test {
        /// Only the scenarios, not the cargo test suite.
        #[arg(long)]
        scenarios_only: bool,
        /// Use `cargo test` even when cargo-nextest is installed.
        #[arg(long)]
        no_nextest: bool,
    },
    /// A 4-node cluster at work: ping-pong, streams on both priorities.
    ///
    /// Runs on the deterministic simulator; the live and qemu backends
    /// come later.
    Demo {
        /// Print the JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Rate-control calibration: T and Bmax from an IDT sweep, and the
    /// node-capacity curve; written beside the profile for the bandwidth
    /// manager.
    ///
    /// Sweeps the IDT of one flow of 64 KiB messages (sim) and prints the
    /// table: bandwidth stays at Bmax while IDT <= T and falls as
    /// T / IDT * Bmax beyond. Then three nodes A -> B -> C: the most B
    /// sends to C while A sends to B at several rates. Writes
    /// nic-emu/profiles/<profile>.calibration.toml (built-in profiles) or
    /// <dir>/<name>.calibration.toml beside a profile file.
    Calibrate {
        /// Profiles to calibrate (default: every built-in one).
        #[arg(long = "profile", value_name = "NAME")]
        profiles: Vec<String>,
        /// Fewer messages per point: rougher, faster.
        #[arg(long)]
        quick: bool,
        /// Print only; do not write the calibration file.
        #[arg(long)]
        no_save: bool,
    },
    /// Run a set of experiments and write a Markdown report with SVG
    /// plots.
    ///
    /// `rate-control`: calibration (bandwidth vs IDT, node capacity),
    /// proportional shares, admission by the three criteria, best effort
    /// (dispatch frequency over time), and the cost of rate control with
    /// every IDT 0. Writes report.md, the plots and each experiment's
    /// scenario into the output directory.
    Report {
        /// Which report: rate-control.
        which: String,
        /// Output directory (default: out/reports/<which>/ under the
        /// workspace).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Timing profile (default lanai4-gm; it must be calibrated).
        #[arg(long)]
        profile: Option<String>,
    },
    /// Check the prerequisites of every command and print how to install
    /// what is missing.
    Doctor,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let result = match cli.cmd {
        Cmd::Sim { file, json, seed, quiet } => sim::run(&file, json, seed, quiet),
        Cmd::Bench { profiles, quick, rate: true, .. } => bench::run_rate(&profiles, quick),
        Cmd::Bench { profiles, quick, no_speed, rate: false } => {
            bench::run(&profiles, quick, !no_speed)
        }
        Cmd::Test { scenarios_only, no_nextest } => {
            testing::run(&root, scenarios_only, !no_nextest)
        }
        Cmd::Demo { json } => demo::run(&root, json),
        Cmd::Calibrate { profiles, quick, no_save } => calibrate::run(&profiles, quick, !no_save),
        Cmd::Report { which, out, profile } => report::run(&which, out, profile),
        Cmd::Doctor => prereq::doctor(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The workspace root: xtask lives one level below it.
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// Write to stdout, ignoring a closed pipe (`cargo xtask sim F --json | head`).
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// Errors of xtask itself: a message for the user.
pub type Result<T> = std::result::Result<T, String>;
