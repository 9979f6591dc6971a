//! `cargo xtask report rate-control --backend live` (or `qemu`): the
//! rate-control acceptance experiments on a LIVE cluster (real time, the
//! MCP as native threads) or a QEMU cluster (the riscv64 image, one guest
//! per NIC) with its bandwidth manager process: traffic from host threads
//! of this process, bandwidth asked over `<dir>/brm.sock`, achieved
//! rates from the source NIC's flow counters (`nic_emu::brm::live`).
//!
//! Steps: start a 4-node lanai4-gm cluster whose links are paced at
//! the profile's bandwidth, with a BRM on the profile's stored
//! calibration; measure the unregulated flow (T and Bmax the way
//! `calibrate` takes them: bandwidth, and mean ticks between dispatches);
//! then either keep the stored calibration or (`measured`) restart the
//! cluster with a quick live calibration and run the experiments under
//! it. Returns the Markdown section and prints it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use host_driver::cluster::ClusterBackend;
use nic_emu::brm::live::{self, Achieved, LiveResults, Timing};
use nic_emu::brm::{Calibration, CurvePoint};
use nic_emu::realtime::{qemu, BrmSetup, Pacing, RtCluster, RtConfig};
use nic_emu::Profile;

/// Which calibration the live BRM decides with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LiveCal {
    /// The profile's stored (simulator) calibration.
    Stored,
    /// T and Bmax measured on the live cluster first.
    Measured,
}

/// The cluster to measure on: the backend, and the image a qemu one
/// flashes.
struct On {
    backend: ClusterBackend,
    image: Option<PathBuf>,
}

fn start(
    on: &On,
    profile: &Profile,
    name: &str,
    cal_file: Option<&Path>,
    root: &Path,
) -> crate::Result<RtCluster> {
    let mut cfg = RtConfig::new(name, on.backend, 4);
    cfg.profile = profile.clone();
    cfg.image = on.image.clone();
    cfg.pacing = Pacing::LinkBandwidth;
    cfg.brm = Some(BrmSetup {
        calibration: cal_file.map(Path::to_path_buf),
        program: Some(crate::fw::release_dir(root).join("nic-cluster")),
    });
    let b = on.backend;
    let c = RtCluster::start(cfg).map_err(|e| format!("{b} cluster: {e}"))?;
    c.wait_running(Duration::from_secs(60)).map_err(|e| format!("{b} cluster: {e}"))?;
    Ok(c)
}

/// The stored calibration with T and Bmax from the live unregulated flow;
/// the node curve scaled by the ratio of the two Bmax (an assumption: it
/// is not measured live), no sweep.
fn live_calibration(stored: &Calibration, u: &Achieved) -> Calibration {
    let k = u.mb_s / stored.bmax_mb_s;
    let mut c = stored.clone();
    c.t_ticks = u.ticks_per_packet;
    c.bmax_mb_s = u.mb_s;
    c.dispatch_interval_ticks = u.ticks_per_packet;
    c.sweep.clear();
    c.node_curve = stored
        .node_curve
        .iter()
        .map(|p| CurvePoint { in_mb_s: p.in_mb_s * k, out_mb_s: p.out_mb_s * k })
        .collect();
    c
}

fn row(md: &mut String, what: &str, asked: f64, a: &Achieved, note: &str) {
    let _ = writeln!(
        md,
        "| {what} | {asked:.2} | {} | {:.2} | {:.1} | {note} |",
        a.idt, a.mb_s, a.ticks_per_packet
    );
}

fn ratio_line(lo: &Achieved, hi: &Achieved) -> (f64, f64, String) {
    let got = hi.mb_s / lo.mb_s.max(1e-9);
    let want = lo.idt as f64 / hi.idt.max(1) as f64;
    let dev = (got - want) / want * 100.0;
    (got, want, format!("achieved {got:.3} vs IDT ratio {want:.3} ({dev:+.1}%)"))
}

/// The experiments on `backend` (live or qemu), deciding with the
/// calibration `which` (None: stored on live, measured on qemu, whose
/// guest firmware is slower than the stored Bmax: stored rates would not
/// pace there).
pub fn run(
    root: &Path,
    dir: &Path,
    profile_name: &str,
    backend: ClusterBackend,
    which: Option<LiveCal>,
) -> crate::Result<String> {
    let which = which.unwrap_or(match backend {
        ClusterBackend::Qemu => LiveCal::Measured,
        _ => LiveCal::Stored,
    });
    let profile = Profile::load(profile_name).map_err(|e| e.to_string())?;
    let stored = Calibration::for_profile(profile_name, &profile)?.ok_or_else(|| {
        format!("profile {profile_name} is not calibrated (cargo xtask calibrate)")
    })?;
    crate::fw::build_host_programs(root)?;
    let image = match backend {
        ClusterBackend::Qemu => {
            if !crate::rt::ensure_qemu()? {
                return Err(format!("--backend qemu: {} is missing", qemu::QEMU_PROGRAM));
            }
            Some(crate::fw::build_image(root, false)?)
        }
        _ => None,
    };
    let on = On { backend, image };
    let name = host_driver::cluster::memory_temp_dir()
        .join(format!("rate-control-{backend}-{}", std::process::id()))
        .display()
        .to_string();
    let t = Timing::default();

    // The unregulated flow on this machine, under the stored calibration.
    let c = start(&on, &profile, &name, None, root)?;
    let cl = c.path().display().to_string();
    let mut probe = live::Probe::new(&cl, 4);
    let mut brm = host_brm::BrmClient::connect(&cl)?;
    let f = host_brm::FlowId::new(0, 1, 1, 1, host_driver::Priority::Low);
    // (live::experiments' first flow too)
    brm.best_effort(f).map_err(|e| e.to_string())?;
    let tr = live::Traffic::start(&cl, f)?;
    let u = live::measure(&mut probe, &[f], t.settle, t.window * 2)?[0];
    tr.stop()?;
    drop((probe, brm));
    let (cal, c) = match which {
        LiveCal::Stored => (stored.clone(), c),
        LiveCal::Measured => {
            c.stop().map_err(|e| e.to_string())?;
            let lc = live_calibration(&stored, &u);
            let f = dir.join(format!("{backend}.calibration.toml"));
            std::fs::write(&f, lc.to_toml()).map_err(|e| format!("{}: {e}", f.display()))?;
            (lc, start(&on, &profile, &name, Some(&f), root)?)
        }
    };
    let cl = c.path().display().to_string();
    let r = live::experiments(&cl, &cal, t);
    let notes = c.notes();
    c.stop().map_err(|e| e.to_string())?;
    let r: LiveResults = r?;

    let mut md = String::new();
    let (title, what) = match backend {
        ClusterBackend::Qemu => {
            ("Qemu", "QEMU cluster (real time: the riscv64 image, one qemu-system-riscv64 per NIC")
        }
        _ => ("Live", "LIVE cluster (real time: the MCP as native threads, one device thread"),
    };
    let _ = writeln!(md, "## {title} backend\n");
    let _ = writeln!(
        md,
        "A 4-node `{profile_name}` {what}; links paced at {:.0} MB/s, `Pacing::LinkBandwidth`; \
         the DMA engines are not paced), its bandwidth manager a `nic-cluster brm` process. \
         Traffic: threads \
         of this process as host programs (`LiveBackend`), 64 KiB messages, 8 sends \
         outstanding; bandwidth asked over `brm.sock`; achieved = payload the source NIC \
         dispatched (its flow counters) over {:.1} s after {:.1} s of settling. Machine: {} \
         CPUs, shared.\n",
        profile.link.bandwidth_bytes_per_s as f64 / 1e6,
        t.window.as_secs_f64(),
        t.settle.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        md,
        "Unregulated flow alone (node 0 -> 1): **{:.2} MB/s**, **{:.1} RTC ticks per packet** \
         (stored simulator calibration: Bmax {:.2} MB/s, T {:.1} ticks).\n",
        u.mb_s, u.ticks_per_packet, stored.bmax_mb_s, stored.t_ticks
    );
    let _ = writeln!(
        md,
        "The manager decides with the {} calibration: T = {:.1} ticks, Bmax = {:.2} MB/s{}.\n",
        if which == LiveCal::Stored { "profile's stored" } else { "measured" },
        cal.t_ticks,
        cal.bmax_mb_s,
        if which == LiveCal::Measured {
            " (node curve: the stored one scaled by the Bmax ratio, not measured live)"
        } else {
            ""
        }
    );
    let _ =
        writeln!(md, "| experiment | asked MB/s | IDT | achieved MB/s | ticks/packet | check |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---|");
    if let [(ba, a), (bb, b)] = r.equal.as_slice() {
        let (_, _, chk) = ratio_line(a, b);
        row(&mut md, "(2T, 2T) 0 -> 1", *ba, a, "");
        row(&mut md, "(2T, 2T) 0 -> 2", *bb, b, &chk);
    }
    if let [(ba, a), (bb, b)] = r.three_seven.as_slice() {
        let (_, _, chk) = ratio_line(a, b);
        row(&mut md, "(10T/3) 0 -> 2", *ba, a, "");
        row(&mut md, "(10T/7) 0 -> 1", *bb, b, &format!("{chk}; 7/3 = 2.333"));
    }
    if let Some((ask, why)) = &r.refused {
        let _ = writeln!(
            md,
            "\nA third request, {ask:.2} MB/s on 0 -> 3 while the 3:7 pair holds node 0: \
             **refused**: {why}."
        );
    }
    if let Some((ask, idt)) = r.after_release {
        let _ = writeln!(
            md,
            "After 0 -> 2's release the same request is **admitted** (IDT {idt}), {ask:.2} MB/s.\n"
        );
    }
    let _ = writeln!(md, "Best effort (0 -> 1) while premium flows 0 -> 2, 0 -> 3 come and go:\n");
    let _ = writeln!(
        md,
        "| phase | best effort IDT | T x Bmax / IDT | best effort MB/s | premium flows (asked: achieved MB/s) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---|");
    for ph in &r.best_effort {
        let p: Vec<String> =
            ph.premium.iter().map(|(asked, a)| format!("{asked:.0}: {:.2}", a.mb_s)).collect();
        let be = &ph.best_effort;
        let expect = if be.idt == 0 {
            "unregulated".to_string()
        } else {
            format!("{:.2}", cal.t_bmax() / be.idt as f64)
        };
        let _ = writeln!(
            md,
            "| {} | {} | {expect} | {:.2} | {} |",
            ph.name,
            be.idt,
            be.mb_s,
            p.join(", ")
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(md, "\nDevice process notes: {}\n", notes.join("; "));
    }
    Ok(md)
}
