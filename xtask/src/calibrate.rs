//! `cargo xtask calibrate --profile P`: the rate-control calibration of a
//! timing profile (nic_emu::calibrate::rate): the IDT sweep that gives T
//! and Bmax, and the node-capacity curve. Prints both tables and writes
//! the result beside the profile (nic_emu::brm::Calibration::path_for:
//! `nic-emu/profiles/<name>.calibration.toml` for a built-in profile),
//! where the bandwidth manager and `idt_t` find it.

use std::process::ExitCode;
use std::time::Instant;

use nic_emu::brm::Calibration;
use nic_emu::calibrate::rate;

/// The source testbed's figures (spec/rate-control.md, gm-mcp.md).
const TARGETS: [(&str, f64, f64); 1] = [("lanai4-gm", 96.0, 82.0)];

pub fn run(profiles: &[String], quick: bool, save: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    let profiles: Vec<String> = if profiles.is_empty() {
        nic_emu::Profile::names().iter().map(|s| s.to_string()).collect()
    } else {
        profiles.to_vec()
    };
    for profile in &profiles {
        let started = Instant::now();
        let m = rate::measure(profile, quick)?;
        print!("{}", table(&m.cal, &m.log));
        if let Some(&(_, t, b)) = TARGETS.iter().find(|(n, _, _)| n == profile) {
            let c = &m.cal;
            println!(
                "  source testbed: T = {t} ticks ({:+.1}%), Bmax = {b} MB/s ({:+.1}%)",
                (c.t_ticks - t) / t * 100.0,
                (c.bmax_mb_s - b) / b * 100.0
            );
            let implied = c.mtu as f64 * c.rtc_hz as f64 / (t * 1e6);
            println!(
                "  note: {} B per {t} ticks would be {implied:.1} MB/s (10^6 B/s) = {:.1} MiB/s; \
                 at Bmax = {:.1} MB/s an MTU packet takes {:.1} ticks",
                c.mtu,
                implied * 1e6 / 1048576.0,
                c.bmax_mb_s,
                c.mtu as f64 * c.rtc_hz as f64 / (c.bmax_mb_s * 1e6)
            );
        }
        println!("  ({:.1} s wall)", started.elapsed().as_secs_f64());
        if save {
            let path = Calibration::path_for(profile);
            std::fs::write(&path, m.cal.to_toml())
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            println!("  written to {}", path.display());
        }
        println!();
    }
    if save {
        println!("(built-in calibrations are embedded: the next build picks them up)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The sweep and the node-capacity curve as text tables.
pub fn table(c: &Calibration, log: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "profile {}: rate-control calibration", c.profile);
    for l in log {
        let _ = writeln!(s, "  {l}");
    }
    let _ = writeln!(
        s,
        "  T = {:.2} RTC ticks ({:.2} us), Bmax = {:.2} MB/s, link {:.1} MB/s of payload",
        c.t_ticks,
        c.t_ticks * 1e6 / c.rtc_hz as f64,
        c.bmax_mb_s,
        c.link_mb_s
    );
    let _ = writeln!(s, "\n  IDT sweep, one flow of 64 KiB messages:");
    let _ =
        writeln!(s, "  {:>8} {:>7} {:>10} {:>10} {:>7}", "IDT", "IDT/T", "MB/s", "model", "dev");
    for p in &c.sweep {
        let model = c.mb_s_for(p.idt);
        let _ = writeln!(
            s,
            "  {:>8} {:>7.2} {:>10.2} {:>10.2} {:>+6.1}%",
            p.idt,
            p.idt as f64 / c.t_ticks,
            p.mb_s,
            model,
            (p.mb_s - model) / model * 100.0
        );
    }
    let _ = writeln!(s, "\n  node capacity (A -> B at a rate, B -> C unregulated):");
    let _ = writeln!(s, "  {:>12} {:>12} {:>10}", "B in MB/s", "B out MB/s", "in + out");
    for p in &c.node_curve {
        let _ = writeln!(
            s,
            "  {:>12.2} {:>12.2} {:>10.2}",
            p.in_mb_s,
            p.out_mb_s,
            p.in_mb_s + p.out_mb_s
        );
    }
    s
}
