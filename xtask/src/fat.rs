//! The fat-LTO xtask, for the commands whose figures are its own speed.
//!
//! `cargo xtask` builds xtask in the `quick` profile (no LTO, incremental,
//! many codegen units) so that a one-line change to the MCP reaches a
//! simulated result in seconds. The simulator's speed and the live
//! backend's device thread, which run inside xtask's own process, are
//! about a quarter faster with fat LTO and one codegen unit
//! (`[profile.release]`), and those are what `bench` and the live and
//! qemu rate-control reports measure. Such a command run from any other
//! build first builds `target/release/xtask` and runs the same command
//! line there.

use std::path::Path;
use std::process::{Command, ExitCode};

/// Set in the environment of the re-run, so that it never loops.
const RERUN: &str = "XTASK_FAT_RERUN";

/// Whether this process is the fat-LTO build (`<target>/release/xtask`).
pub fn is_fat() -> bool {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(|p| p.file_name()).map(|n| n == "release"))
        .unwrap_or(false)
}

/// Run this command line in the fat-LTO xtask when this process is not
/// it: `None` when this one should go on (it is the fat build, or it is
/// already a re-run), else the re-run's exit status. `why` says which
/// command needs it, for the line printed before the build.
pub fn rerun_if_thin(root: &Path, why: &str) -> Option<crate::Result<ExitCode>> {
    if is_fat() || std::env::var_os(RERUN).is_some() {
        return None;
    }
    eprintln!(
        "xtask: {why} measures speed, so it runs in the fat-LTO build of xtask \
         (target/release/xtask; the `cargo xtask` alias builds the quick profile)"
    );
    if let Err(e) = crate::fw::cargo_build(root, &["-p", "xtask"], "xtask") {
        return Some(Err(e));
    }
    let exe = crate::fw::release_dir(root).join("xtask");
    let status = Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(RERUN, "1")
        .status()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()));
    Some(status.map(|s| match s.code() {
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }))
}
