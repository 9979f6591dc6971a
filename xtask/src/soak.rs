//! `cargo xtask soak [--messages N] [--seed S]`: a long run on the
//! simulator, 16 nodes on one switch, every node streaming to every other
//! under drop 2%, corrupt 0.2% and duplicate 0.2%, N messages in all
//! (default 10^6). It passes when every message arrived exactly once, in
//! order and intact; it prints the peak resident memory next to the
//! memory after a tenth of the run, so a leak shows as growth. It runs
//! once with go-back-N and once with selective repeat (`[firmware]
//! reliability`).

use std::process::ExitCode;

use nic_emu::scenario::{self, Report};

/// Nodes of the soak (one 16-port switch).
const NODES: u64 = 16;

/// The reliability modes the soak runs, as the scenario key names them.
pub const MODES: [&str; 2] = ["go-back-n", "selective"];

/// The soak's scenario: `messages` in all over every ordered pair of
/// nodes, streams recovering by `mode` (`MODES`).
pub fn scenario_text(messages: u64, seed: u64, mode: &str) -> String {
    let per_flow = messages.div_ceil(NODES * (NODES - 1)).max(1);
    format!(
        "profile = \"modern\"\nseed = {seed}\n[fabric]\nnodes = {NODES}\ntopology = \"star\"\n\
         [[alltoall]]\nname = \"soak\"\nport = 2\nkind = \"stream\"\n\
         sizes = [8, 1500, 4096, 9000]\nmessages = {per_flow}\nwindow = 4\n\
         [faults]\ndrop = 0.02\ncorrupt = 0.002\nduplicate = 0.002\n\
         [firmware]\nreliability = \"{mode}\"\n[run]\nlimit_ms = 3600000\n"
    )
}

/// Resident memory of this process now and at its peak (KiB), from
/// /proc/self/status; 0 where it cannot be read.
pub fn rss_kib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Run the soak with streams recovering by `mode`; Err names what went
/// wrong.
pub fn soak(messages: u64, seed: u64, mode: &str, progress: bool) -> Result<Report, String> {
    let v = scenario::Scenario::parse_validated(&scenario_text(messages, seed, mode))
        .map_err(|e| e.to_string())?;
    let total: u64 = v.flows.iter().map(|f| f.messages).sum();
    let mut early_rss = None;
    let start = std::time::Instant::now();
    let mut last = start;
    // On a terminal a bar; else (CI logs) a line every 2 s.
    let mut bar = crate::progress::RunBar::new(&format!("soak ({mode})"), !progress);
    let mut on_progress = |p: &scenario::Progress| {
        if early_rss.is_none() && p.messages_done * 10 >= total {
            early_rss = Some(rss_kib().0);
        }
        if bar.shown() {
            bar.update(p.messages_done, p.messages_total, || {
                format!("{} packets, RSS {} KiB", p.packets, rss_kib().0)
            });
        } else if progress && last.elapsed().as_secs() >= 2 {
            last = std::time::Instant::now();
            eprintln!(
                "  soak ({mode}): {:>6.1} s wall, {}/{} messages, {} packets, RSS {} KiB",
                start.elapsed().as_secs_f64(),
                p.messages_done,
                p.messages_total,
                p.packets,
                rss_kib().0
            );
        }
    };
    let r = scenario::run_with_progress(&v, &mut on_progress).map_err(|e| e.to_string())?;
    drop(bar);
    let (now, peak) = rss_kib();
    let delivered: u64 = r.flows.iter().map(|f| f.delivered).sum();
    let bad: u64 = r.flows.iter().map(|f| f.duplicates + f.corrupted + f.out_of_order).sum();
    println!(
        "soak ({mode}): {delivered}/{total} messages over {} flows in {} simulated ({:.1} s \
         wall), {} packets, {} retransmitted ({} payload bytes); duplicates + corrupted + out \
         of order delivered: {bad}",
        r.flows.len(),
        scenario::report::fmt_ns(r.sim.end_ns),
        start.elapsed().as_secs_f64(),
        r.sim.packets,
        r.nics.iter().map(|n| n.retransmits).sum::<u64>(),
        r.nics.iter().map(|n| n.retx_bytes).sum::<u64>(),
    );
    println!(
        "memory: RSS {} KiB after a tenth of the run, {now} KiB at the end, peak {peak} KiB",
        early_rss.unwrap_or(0)
    );
    if !(r.complete && r.problems.is_empty() && bad == 0 && delivered == total) {
        return Err(format!("the soak failed: {:?}\n{}", r.problems, r.summary()));
    }
    Ok(r)
}

/// `quiet`: no progress on stderr (neither bar nor lines).
pub fn run(messages: u64, seed: u64, quiet: bool) -> crate::Result<ExitCode> {
    if messages == 0 {
        return Err("--messages: give at least 1".into());
    }
    for mode in MODES {
        if let Err(e) = soak(messages, seed, mode, !quiet) {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
        println!("{mode}: every message delivered exactly once, in order, intact");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_soak_is_exactly_once_in_order_and_intact_in_both_modes() {
        for mode in MODES {
            let r = soak(2400, 1, mode, false).unwrap();
            assert_eq!(r.flows.len(), 240);
            assert!(r.nics.iter().map(|n| n.retransmits).sum::<u64>() > 0, "the faults bit");
            let held: u64 = r.nics.iter().map(|n| n.held).sum();
            assert_eq!(held > 0, mode == "selective", "{mode}: {held} packets held past a gap");
        }
    }

    #[test]
    fn the_scenario_spreads_the_messages_over_every_pair() {
        let v =
            scenario::Scenario::parse_validated(&scenario_text(1_000_000, 3, "selective")).unwrap();
        assert_eq!(v.flows.len(), 240);
        assert!(v.flows.iter().all(|f| f.messages == 4167));
        assert_eq!((v.faults.drop, v.faults.corrupt, v.faults.duplicate), (0.02, 0.002, 0.002));
    }
}
