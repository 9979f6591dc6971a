//! `cargo xtask trace`: record the state-machine transitions of a running
//! live or qemu cluster's NICs for a while and write them as a Chrome
//! trace-event JSON timeline (docs/trace.md); and the `--trace FILE` part
//! of `cargo xtask sim` (writing what `scenario::run_traced` collected).
//!
//! A running cluster is read through its directory, as the cluster's
//! owner's tools do (`ClusterDir::map_sram`): `TRACE_ENABLE` and
//! `DISPATCH_TRACE_ENABLE` are set in each traced NIC's registers, both
//! rings are read every `POLL` (`nic_sim::trace::NicTrace::drain`, which
//! counts the records the firmware overwrote before they were read), and
//! the registers are put back as they were at the end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterDir;
use host_driver::nic_abi::regs::{self, reg};
use nic_emu::scenario::trace::{chrome_json, ClusterTrace, Cursors, NicTrace};

/// How often the rings of a running cluster are read. A NIC writes a few
/// records per packet: at 2,048 records a ring holds some hundreds of
/// packets, more than a NIC moves in a millisecond here.
const POLL: Duration = Duration::from_millis(1);

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
    if m.pid != 0 && !host_driver::cluster::pid_alive(m.pid) {
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
    let srams = nodes
        .iter()
        .map(|&n| dir.map_sram(n).map_err(|e| format!("node {n}: mapping its SRAM: {e}")))
        .collect::<crate::Result<Vec<_>>>()?;
    let load = |s: &host_driver::mapped::MappedFile, off: u32| s.load_u32(off as u64).unwrap_or(0);
    let rtc_hz = srams[0].load_u64(reg(regs::RTC_HZ) as u64).unwrap_or(0);
    if rtc_hz == 0 {
        return Err(format!(
            "cluster `{}`: node {} shows no RTC_HZ (not booted?)",
            m.name, nodes[0]
        ));
    }
    // Switch tracing on, remembering how the registers were.
    let before: Vec<(u32, u32)> = srams
        .iter()
        .map(|s| (load(s, reg(regs::TRACE_ENABLE)), load(s, reg(regs::DISPATCH_TRACE_ENABLE))))
        .collect();
    let start = Instant::now();
    let mut traces: Vec<(NicTrace, Cursors)> = srams
        .iter()
        .map(|s| {
            let c = Cursors {
                transitions: load(s, reg(regs::TRACE_PROD)),
                dispatches: load(s, reg(regs::DISPATCH_TRACE_PROD)),
            };
            s.store_u32(reg(regs::TRACE_ENABLE) as u64, 1);
            s.store_u32(reg(regs::DISPATCH_TRACE_ENABLE) as u64, 1);
            (NicTrace::default(), c)
        })
        .collect();
    // Each NIC's RTC runs from its first boot, on the device process's
    // clock; where its tick 0 falls on ours is estimated from readings of
    // its RTC register, taken at every poll. A register is only as fresh
    // as the NIC's last firmware pass (an idle NIC's lags), so the
    // earliest origin any reading gives is the best: while the NIC works,
    // within microseconds.
    let mut origin = vec![i64::MAX; srams.len()];
    let sample = |origin: &mut [i64]| {
        for (s, o) in srams.iter().zip(origin.iter_mut()) {
            let ticks = s.load_u64(reg(regs::RTC) as u64).unwrap_or(0);
            let now = start.elapsed().as_nanos() as i64;
            *o = (*o).min(now - (ticks as u128 * 1_000_000_000 / rtc_hz as u128) as i64);
        }
    };
    sample(&mut origin);
    eprintln!(
        "tracing {} NIC(s) of cluster `{}` ({}) for {} ms ...",
        nodes.len(),
        m.name,
        m.backend,
        a.for_ms
    );
    let until = Duration::from_millis(a.for_ms);
    let mut last_note = start;
    while start.elapsed() < until {
        sample(&mut origin);
        for (s, (t, c)) in srams.iter().zip(traces.iter_mut()) {
            t.drain(c, &|off| load(s, off), &mut |off, b| {
                if !s.read(off as u64, b) {
                    b.fill(0);
                }
            });
        }
        if last_note.elapsed() >= Duration::from_secs(2) {
            last_note = Instant::now();
            let n: usize = traces.iter().map(|t| t.0.transitions.len()).sum();
            eprintln!("  {:.1} s: {n} transitions", start.elapsed().as_secs_f64());
        }
        std::thread::sleep(POLL);
    }
    let end_ns = start.elapsed().as_nanos() as u64;
    sample(&mut origin);
    for (s, (t, c)) in srams.iter().zip(traces.iter_mut()) {
        t.drain(c, &|off| load(s, off), &mut |off, b| {
            if !s.read(off as u64, b) {
                b.fill(0);
            }
        });
    }
    for (s, (tr, di)) in srams.iter().zip(&before) {
        s.store_u32(reg(regs::TRACE_ENABLE) as u64, *tr);
        s.store_u32(reg(regs::DISPATCH_TRACE_ENABLE) as u64, *di);
    }
    // Times on the trace's clock: ns since this command started.
    let nics: Vec<(NicTrace, i64)> =
        traces.into_iter().zip(origin).map(|((t, _), o)| (t, o)).collect();
    let mut t = ClusterTrace::collect(&m.backend.to_string(), rtc_hz, end_ns, nics, Vec::new());
    for (i, n) in t.nodes.iter_mut().enumerate() {
        n.node = nodes[i] as u16;
    }
    write(&a.out, file, &t, false)?;
    Ok(ExitCode::SUCCESS)
}
