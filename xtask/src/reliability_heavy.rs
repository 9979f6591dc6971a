//! The reliability report's heavy-loss section: one stream of 5,000 small
//! messages at 10% loss on every link, each way, in both modes on every
//! built-in profile, and its slowest message against the bound the
//! firmware keeps: no message waits more than 250 retransmission floors
//! (the timeout's backoff stops at 16 floors, and the ack that ends a
//! timeout is never taken as a round trip; docs/firmware.md).

use std::fmt::Write as _;
use std::path::Path;

use nic_emu::profile::{Profile, Reliability};

/// The messages' size, the loss and the seed.
const BYTES: u64 = 64;
const DROP: f64 = 0.1;
const SEED: u64 = 1;
/// The bound, in retransmission floors (`[firmware] retransmit_ns`).
pub const BOUND_FLOORS: u64 = 250;
const PROFILES: [&str; 3] = ["lanai4-gm", "lanai9-gm", "modern"];

/// The scenario of one run.
pub fn scenario_toml(profile: &str, mode: Reliability, messages: u64) -> String {
    format!(
        "# cargo xtask report reliability: heavy loss, {profile}, {mode}\n\
         profile = \"{profile}\"\nseed = {SEED}\n\n[fabric]\nnodes = 2\n\n\
         [[flows]]\nname = \"s\"\nkind = \"stream\"\nsrc = [0, 2]\ndst = [1, 2]\n\
         bytes = {BYTES}\nmessages = {messages}\n\n[faults]\ndrop = {DROP}\n\n\
         [firmware]\nreliability = \"{mode}\"\n"
    )
}

/// Run the section's six scenarios (written into `dir`), append its table
/// to `md`, and return the runs that failed (not delivered exactly once,
/// or a message past the bound).
pub fn section(dir: &Path, messages: u64, md: &mut String) -> crate::Result<Vec<String>> {
    let mut failed = Vec::new();
    let _ = writeln!(
        md,
        "## Heavy loss: {messages} x {BYTES} B on one stream, link loss {}%\n\n\
         Two nodes; every link drops each packet with probability {DROP}, both ways (data \
         and acks). **time**: simulated time to the last message; **slowest**: the largest \
         message latency (send call to receive event); **bound**: {BOUND_FLOORS} times the \
         profile's retransmission floor, which no message may exceed (a run past it is \
         listed as failed).\n\n\
         | profile | mode | time | p50 | p99 | slowest | bound |\n\
         |---|---|---:|---:|---:|---:|---:|",
        DROP * 100.0
    );
    for profile in PROFILES {
        let floor = Profile::load(profile).map_err(|e| e.to_string())?.firmware.retransmit_ns;
        for mode in Reliability::ALL {
            let name = format!("heavy-loss-{profile}-{mode}.toml");
            let text = scenario_toml(profile, mode, messages);
            std::fs::write(dir.join(&name), &text)
                .map_err(|err| format!("{}: {err}", dir.join(&name).display()))?;
            let (r, bad) = crate::bench::run_toml(&text).map_err(|e| format!("{name}: {e}"))?;
            let f = &r.flows[0];
            let l = &f.latency_ns;
            let bound = BOUND_FLOORS * floor;
            let ms = |ns: u64| format!("{:.3} ms", ns as f64 / 1e6);
            let _ = writeln!(
                md,
                "| {profile} | {mode} | {} | {} | {} | {} | {} |",
                ms(r.sim.end_ns),
                ms(l.p50),
                ms(l.p99),
                ms(l.max),
                ms(bound)
            );
            if let Some(b) = bad {
                failed.push(format!("{name}: {b}"));
            }
            if l.max > bound {
                failed.push(format!(
                    "{name}: a message waited {} (bound {})",
                    ms(l.max),
                    ms(bound)
                ));
            }
        }
    }
    let _ = writeln!(md);
    Ok(failed)
}
