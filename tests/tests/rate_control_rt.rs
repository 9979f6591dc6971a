//! Rate control in real time: scenarios/rate-shares.toml (two flows from
//! one node at IDTs 10T/3 and 10T/7) and scenarios/rate-best-effort.toml
//! (a best-effort flow beside bandwidth-manager reservations that come and
//! go, every dispatch traced) on a live cluster and on a qemu cluster:
//! every message delivered intact exactly once, the IDTs the scenario asks
//! for installed, and on live the shares the IDTs set.
//!
//! The qemu tests FAIL, naming what is missing, when qemu-system-riscv64
//! or the riscv64imac-unknown-none-elf target is not installed: they are
//! never skipped.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cluster_tests::{assert_all_intact, example};
use host_driver::cluster::ClusterBackend;
use nic_emu::brm::Calibration;
use nic_emu::scenario::{self, FlowReport, Report, Scenario};
use nic_emu::Profile;

const PROFILE: &str = "lanai4-gm";

fn cal() -> Calibration {
    let p = Profile::load(PROFILE).unwrap();
    Calibration::for_profile(PROFILE, &p).unwrap().expect("lanai4-gm is calibrated")
}

fn flow<'a>(r: &'a Report, name: &str) -> &'a FlowReport {
    r.flows.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no flow {name}"))
}

/// The tests measure shares in wall-clock time, so they run one at a
/// time: under `cargo test` (threads of one process) by this lock; under
/// nextest (a process a test) by `.config/nextest.toml`, which gives each
/// the whole machine.
fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run scenario file `file` on `backend` (qemu: QEMU and the image are
/// required, a missing one fails the test naming it). The bandwidth
/// manager's master is `nic-cluster brm`: built first.
fn run(file: &str, backend: ClusterBackend) -> Report {
    rt::nic_cluster_bin();
    let _alone = alone();
    let image = (backend == ClusterBackend::Qemu).then(|| {
        rt::require_qemu();
        rt::firmware_image()
    });
    let v = scenario::load_file(&example(file)).unwrap_or_else(|e| panic!("{e}"));
    scenario::check_realtime(&v, backend).unwrap_or_else(|e| panic!("{backend}: {e}"));
    let o = cluster_tests::rt_options(backend, Duration::from_secs(120), image);
    let r = scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{backend}: {e}"));
    eprintln!("{file} on {backend}:\n{}", r.summary());
    assert_eq!(r.backend, backend.to_string());
    assert_all_intact(&r);
    r
}

/// Run scenario text on `backend` as `run` runs a file.
fn run_text(text: &str, backend: ClusterBackend) -> Report {
    let _alone = alone();
    let image = (backend == ClusterBackend::Qemu).then(|| {
        rt::require_qemu();
        rt::firmware_image()
    });
    let v = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}"));
    let o = cluster_tests::rt_options(backend, Duration::from_secs(120), image);
    let r = scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{backend}: {e}"));
    eprintln!("on {backend}:\n{}", r.summary());
    assert_all_intact(&r);
    r
}

/// rate-shares.toml (its `idt_t` values times `scale`): both flows whole,
/// exactly once, at IDTs round(scale x 10T/3) and round(scale x 10T/7)
/// from the stored calibration. Returns (achieved ratio b / a, IDT ratio
/// a / b, the shares of their IDTs' rates b and a reached).
fn shares(backend: ClusterBackend, scale: f64) -> (f64, f64, f64, f64) {
    let r = if scale == 1.0 {
        run("rate-shares.toml", backend)
    } else {
        let text = std::fs::read_to_string(example("rate-shares.toml")).unwrap();
        let text = text
            .replace("idt_t = 3.3333333333333335", &format!("idt_t = {}", scale * 10.0 / 3.0))
            .replace("idt_t = 1.4285714285714286", &format!("idt_t = {}", scale * 10.0 / 7.0));
        assert_eq!(text.matches("idt_t = ").count(), 2);
        run_text(&text, backend)
    };
    let c = cal();
    let (a, b) = (flow(&r, "a"), flow(&r, "b"));
    assert_eq!((a.messages, a.delivered, a.duplicates), (30, 30, 0));
    assert_eq!((b.messages, b.delivered, b.duplicates), (70, 70, 0));
    let idt = |k: f64| Some((scale * k * c.t_ticks).round() as u32);
    assert_eq!((a.idt, b.idt), (idt(10.0 / 3.0), idt(10.0 / 7.0)));
    let got = b.bandwidth_mb_s / a.bandwidth_mb_s;
    let want = a.idt.unwrap() as f64 / b.idt.unwrap() as f64;
    let b_share = b.bandwidth_mb_s / c.mb_s_for(b.idt.unwrap());
    let a_share = a.bandwidth_mb_s / c.mb_s_for(a.idt.unwrap());
    eprintln!(
        "{backend}, IDTs x {scale}: a {:.2} MB/s, b {:.2} MB/s: ratio {got:.3} vs IDT ratio \
         {want:.3}; b at {:.0} %, a at {:.0} % of its IDT's rate",
        a.bandwidth_mb_s,
        b.bandwidth_mb_s,
        b_share * 100.0,
        a_share * 100.0
    );
    // An IDT caps its flow: neither goes faster than its rate (5 %: the
    // first and last packets of the measured span).
    for f in [a, b] {
        let cap = c.mb_s_for(f.idt.unwrap());
        assert!(
            f.bandwidth_mb_s <= 1.05 * cap,
            "{}: {} MB/s over {cap:.2}",
            f.name,
            f.bandwidth_mb_s
        );
    }
    (got, want, b_share, a_share)
}

#[test]
fn rate_shares_on_live_come_out_3_to_7() {
    let (got, want, b_share, _) = shares(ClusterBackend::Live, 1.0);
    // The live NIC is faster than the calibrated T (docs/rate-control.md),
    // so both IDTs pace: measured 2.343 vs 2.336 on an idle machine. On a
    // loaded 2-core machine the device thread may not keep up with b's
    // rate, and the ratio shrank toward 1:1 (measured 1.50 with b at 61 %
    // of its rate) until the device thread's stalls were kept from the
    // NICs' clock; since, a loaded machine gave 2.21 .. 2.35 with b at 67
    // .. 99 % (both flows slowed alike by the clock the stalls hold back).
    // Within 10 % when b got at least 95 % of its rate (with a at its
    // own, b's share alone moves the ratio by as much as b falls short),
    // within 1.6 .. 3.2 (unpaced flows share about 1:1) always.
    assert!((1.6..=3.2).contains(&got), "ratio {got:.3} vs IDT ratio {want:.3}");
    if b_share >= 0.95 {
        assert!((got - want).abs() / want <= 0.10, "ratio {got:.3} vs IDT ratio {want:.3}");
    }
}

#[test]
fn rate_shares_on_qemu_come_out_3_to_7_when_the_guest_keeps_up() {
    // The guest firmware keeps up with b's 57 MB/s on an idle machine
    // (measured 23.4 and 51.0 MB/s, ratio 2.18 vs 2.34) but not on a
    // loaded one (4.4 and 6.5 MB/s, ratio 1.48; b at 84 %: ratio 2.08).
    // With a at its rate, the ratio is b's share of its rate times the
    // IDT ratio: within 10 % when b got at least 95 % of its rate (at 90
    // % the ratio is 10 % short by that alone, and a loaded machine gave
    // 2.06 with b at 85 %, 2.16 at 91 %); b the faster always.
    let (got, want, b_share, _) = shares(ClusterBackend::Qemu, 1.0);
    assert!(got > 1.0, "b (more messages, shorter IDT) is the faster: {got:.3}");
    if b_share >= 0.95 {
        assert!((got - want).abs() / want <= 0.10, "ratio {got:.3} vs IDT ratio {want:.3}");
    }
}

#[test]
fn rate_shares_scaled_to_the_qemu_nic_come_out_3_to_7() {
    // IDTs ten times as long (2.5 and 5.7 MB/s): under what the guest
    // firmware moves, so the IDTs set the share.
    let (got, want, _, _) = shares(ClusterBackend::Qemu, 10.0);
    assert!((got - want).abs() / want <= 0.10, "ratio {got:.3} vs IDT ratio {want:.3}");
}

/// rate-best-effort.toml: every flow admitted at the manager's IDTs, each
/// stopped by its `stop_us`, intact and exactly once, every one traced.
fn best_effort(backend: ClusterBackend) -> Report {
    let r = run("rate-best-effort.toml", backend);
    let c = cal();
    for (name, idt) in [("be", 0), ("p40", c.idt_for(40.0)), ("p20", c.idt_for(20.0))] {
        let f = flow(&r, name);
        assert_eq!(f.admitted, Some(true), "{name}: {:?}", f.refused_reason);
        assert_eq!(f.idt, Some(idt), "{name}");
        assert!(f.messages > 0 && f.messages < 100_000, "{name}: stop_us ended it");
        assert_eq!((f.delivered, f.duplicates), (f.messages, 0), "{name}");
        assert!(f.dispatch_ticks.is_some(), "{name} is traced");
    }
    // Every dispatch of node 0 traced: 16 packets of 4 KiB per 64 KiB
    // message, and each retransmission (an unregulated flow may outrun
    // its receiver's buffers in real time) once more.
    let traced: u64 = r.flows.iter().map(|f| f.dispatch_ticks.as_ref().unwrap().len() as u64).sum();
    let sent: u64 = r.flows.iter().map(|f| 16 * f.messages).sum();
    assert_eq!(traced, sent + r.nics[0].retransmits, "{}", r.summary());
    r
}

/// A traced flow's dispatch rate (MB/s of 4 KiB packets) between RTC
/// ticks `from` and `to`.
fn rate(f: &FlowReport, from: u64, to: u64) -> f64 {
    let rtc_hz = Profile::load(PROFILE).unwrap().nic.rtc_hz as f64;
    let n = f.dispatch_ticks.as_ref().unwrap().iter().filter(|&&t| t >= from && t < to).count();
    n as f64 * 4096.0 / ((to - from) as f64 / rtc_hz) / 1e6
}

#[test]
fn best_effort_on_live_takes_what_the_reservations_leave() {
    let r = best_effort(ClusterBackend::Live);
    let c = cal();
    let (be, p40, p20) = (flow(&r, "be"), flow(&r, "p40"), flow(&r, "p20"));
    let ticks = |f: &FlowReport| f.dispatch_ticks.clone().unwrap();
    let first = |f: &FlowReport| ticks(f)[0];
    let last = |f: &FlowReport| *ticks(f).last().unwrap();
    // The phases as the NIC saw them (a live RTC counts from the NIC's
    // boot; a request to the manager takes a while): the best-effort
    // flow alone, with p40, with both, alone again (a phase's second half
    // where the best-effort flow's IDT changed at its start).
    let (p40_on, p40_off) = (first(p40), last(p40));
    let (p20_on, p20_off) = (first(p20), last(p20));
    let half = |a: u64, b: u64| (a + (b - a) / 2, b);
    let w_alone = half(first(be), p40_on);
    let w_40 = half(p40_on, p20_on);
    let w_both = (p20_on, p20_off.min(p40_off));
    let w_again = half(p40_off.max(p20_off), last(be));
    let m = |f: &FlowReport, w: (u64, u64)| rate(f, w.0, w.1);
    let (alone, with40, with_both, again) =
        (m(be, w_alone), m(be, w_40), m(be, w_both), m(be, w_again));
    let (p40a, p40b, p20b) = (m(p40, w_40), m(p40, w_both), m(p20, w_both));
    eprintln!(
        "live best effort: alone {alone:.1}, with p40 {with40:.1} (p40 {p40a:.1}), with both \
         {with_both:.1} (p40 {p40b:.1}, p20 {p20b:.1}), again alone {again:.1} MB/s"
    );
    // Each IDT caps its flow over its whole life: a flow that fell behind
    // its NDT within a message catches up back to back (measured 47.7
    // MB/s for p40 over 30 ms once), never past its rate for long.
    let life = |f: &FlowReport| rate(f, first(f), last(f));
    let (p40_life, p20_life) = (life(p40), life(p20));
    eprintln!("over their lives: p40 {p40_life:.1}, p20 {p20_life:.1} MB/s");
    assert!(p40_life <= 1.05 * 40.0 && p20_life <= 1.05 * 20.0, "{p40_life:.1} {p20_life:.1}");
    // The best-effort flow stays under what the reservations leave (10 %:
    // the same catching up).
    assert!(with40 <= 1.10 * (c.bmax_mb_s - 40.0), "best effort with p40: {with40:.1}");
    assert!(with_both <= 1.10 * (c.bmax_mb_s - 60.0), "best effort with both: {with_both:.1}");
    // The reservations get most of their rate even on a loaded machine
    // (measured 37-40 and 18-20 MB/s).
    assert!(p40_life >= 0.8 * 40.0 && p20_life >= 0.8 * 20.0, "{p40_life:.1} {p20_life:.1}");
    // Alone the best-effort flow is unregulated (IDT 0): faster than
    // beside both reservations. (Not held to Bmax - 40: on a loaded
    // machine the live NIC moved it at 36.7 MB/s alone once.)
    assert!(alone > with_both && again > with_both, "{alone:.1}, {again:.1} vs {with_both:.1}");
}

#[test]
fn best_effort_on_qemu_is_admitted_traced_and_exactly_once() {
    best_effort(ClusterBackend::Qemu);
}
