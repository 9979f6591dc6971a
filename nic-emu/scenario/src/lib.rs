//! nic-scenario (`nic_emu::scenario`): the scenario runner: a cluster
//! and its traffic described in a TOML file
//! (`format`), turned into a plan of ports, buffers and roles per host
//! (`plan`), run on the deterministic simulator by one host program per
//! node (`app`, an ordinary host-driver program, which checks every
//! message into the `ledger`), and summed up as a report (`report`: JSON
//! and a human summary; `mcast`: multicast flows' trees, link figures and
//! report). Message contents are a
//! pattern of (stream, message, byte) (`pattern`) so every byte and every
//! message's place in its stream is checked at the receiver.
//!
//! Entry points: [`load_file`] / [`Scenario::parse_validated`], then
//! [`run`] or [`run_with_progress`] on the simulator, or [`run_realtime`]
//! on a live or qemu cluster (`realtime`: the same host programs and
//! checks, wall-clock times). The format and the JSON document are
//! documented in docs/scenarios.md.
//!
//! Owns nothing of the simulator or the real-time cluster: it uses
//! `SimCluster`, `HostApp`, `RtCluster` and the backends as any other
//! program would.

pub mod app;
pub mod coll;
pub mod format;
pub mod fuzz;
mod ledger;
pub mod mcast;
pub mod pattern;
pub mod plan;
mod rates;
mod realtime;
pub mod report;
mod runner;
pub mod trace;

use std::path::Path;

pub use format::{
    AlgorithmChoice, FlowKind, FlowSpec, McastSpec, RatePlan, Scenario, ScenarioError, StreamKey,
    Validated,
};
pub use realtime::{
    check_realtime, run_realtime, run_realtime_traced, run_realtime_with_progress,
    RtScenarioOptions,
};
pub use report::{FlowReport, Latency, McastReport, NicReport, Report, Samples, SimReport};
pub use runner::{
    run, run_priced, run_traced, run_with_options, run_with_progress, Progress, SimOptions,
};

/// Largest scenario file read (bytes).
pub const SCENARIO_MAX_BYTES: u64 = 4 << 20;

/// Read, parse and validate a scenario file (at most
/// `SCENARIO_MAX_BYTES`). Errors start with the path.
pub fn load_file(path: &Path) -> Result<Validated, ScenarioError> {
    let text = nic_device::profile::read_text(path, SCENARIO_MAX_BYTES)
        .map_err(|e| ScenarioError::new(format!("{}: {e}", path.display())))?;
    Scenario::parse_validated(&text).map_err(|e| {
        let e = format::with_excerpt(&text, e);
        ScenarioError::new(format!("{}: {}", path.display(), e.message))
    })
}
