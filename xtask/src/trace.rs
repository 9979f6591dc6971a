//! `cargo xtask trace`: record the state-machine transitions of a running
//! live or qemu cluster's NICs for a while and write them as a Chrome
//! trace-event JSON timeline (docs/trace.md); and the `--trace FILE` part
//! of `cargo xtask sim` (writing what `scenario::run_traced` collected).
//!
//! A running cluster is read through its directory
//! (`nic_emu::scenario::trace::LiveTracer`): both trace rings of each
//! traced NIC every `POLL`, counting what the firmware overwrote before
//! it was read; the trace registers are put back as they were at the end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterDir;
use nic_emu::scenario::trace::{chrome_json, ClusterTrace, LiveTracer};

/// How often the rings of a running cluster are read. A NIC writes a few
/// records per packet and a 2,048-record ring holds some hundreds of
/// packets; a live ping-pong on a fast machine fills one in about a
/// millisecond, so the rings are read five times as often.
const POLL: Duration = Duration::from_micros(200);

/// `cargo xtask trace`'s options.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// The running cluster (its name, or its directory), as `cargo xtask
    /// run --name` gave it.
    #[arg(long, default_value = "c1")]
    pub cluster: String,
    /// Trace only this node's NIC (default: every node).
    #[arg(long)]
    pub node: Option<u32>,
    /// How long to record (milliseconds of wall-clock time).
    #[arg(long = "for-ms", value_name = "MS", default_value_t = 1000)]
    pub for_ms: u64,
    /// Where to write the trace (Chrome trace-event JSON; open it in
    /// ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE", default_value = "trace.json")]
    pub out: PathBuf,
}

/// Open `path` for writing now, so that a run is not wasted on a file
/// that cannot be written.
pub fn create_out(flag: &str, path: &Path) -> crate::Result<std::fs::File> {
    std::fs::File::create(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// Write a cluster's trace into `file` (opened by `create_out`) and say
/// what it holds.
pub fn write(path: &Path, file: std::fs::File, t: &ClusterTrace, quiet: bool) -> crate::Result<()> {
    use std::io::Write;
    let json = chrome_json(t);
    let mut w = std::io::BufWriter::new(file);
    w.write_all(json.as_bytes())
        .and_then(|_| w.flush())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    if !quiet {
        let records: usize = t.nodes.iter().map(|n| n.nic.transitions.len()).sum();
        let lost = t.lost_transitions();
        eprintln!(
            "trace: {records} transitions of {} NIC(s){} written to {} ({} KiB); open it in \
             ui.perfetto.dev (Open trace file) or chrome://tracing (docs/trace.md)",
            t.nodes.len(),
            if lost > 0 {
                format!(", {lost} lost (the ring wrapped before it was read)")
            } else {
                String::new()
            },
            path.display(),
            json.len().div_ceil(1024),
        );
    }
    Ok(())
}

/// `cargo xtask trace`.
pub fn run(a: &TraceArgs) -> crate::Result<ExitCode> {
    let dir = ClusterDir::open(&a.cluster).map_err(|e| {
        format!(
            "--cluster {}: {e} (start one with `cargo xtask run --nodes 2 --name {}`)",
            a.cluster, a.cluster
        )
    })?;
    let m = dir.manifest().clone();
    if !dir.device_alive() {
        return Err(format!(
            "--cluster {}: its device process {} is gone (start it again with `cargo xtask run`)",
            m.name, m.pid
        ));
    }
    let nodes: Vec<u32> = match a.node {
        Some(n) if n >= m.nodes => {
            return Err(format!(
                "--node {n}: cluster `{}` has nodes 0 to {}",
                m.name,
                m.nodes.saturating_sub(1)
            ))
        }
        Some(n) => vec![n],
        None => (0..m.nodes).collect(),
    };
    if a.for_ms == 0 || a.for_ms > 3_600_000 {
        return Err(format!("--for-ms {}: from 1 to 3600000 (an hour)", a.for_ms));
    }
    let file = create_out("--out", &a.out)?;
    let mut tracer =
        LiveTracer::start(&dir, &nodes).map_err(|e| format!("cluster `{}`: {e}", m.name))?;
    eprintln!(
        "tracing {} NIC(s) of cluster `{}` ({}) for {} ms ...",
        nodes.len(),
        m.name,
        m.backend,
        a.for_ms
    );
    let until = Duration::from_millis(a.for_ms);
    let mut last_note = Instant::now();
    while tracer.started().elapsed() < until {
        tracer.poll();
        if last_note.elapsed() >= Duration::from_secs(2) {
            last_note = Instant::now();
            eprintln!(
                "  {:.1} s: {} transitions",
                tracer.started().elapsed().as_secs_f64(),
                tracer.transitions()
            );
        }
        std::thread::sleep(POLL);
    }
    let t = tracer.finish(&m.backend.to_string(), Vec::new());
    write(&a.out, file, &t, false)?;
    Ok(ExitCode::SUCCESS)
}
