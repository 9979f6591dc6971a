//! Rate control and the bandwidth resource manager on the simulator
//! (lanai4-gm), as docs/rate-control.md describes them: proportional
//! shares by IDT, admission by the three criteria, best-effort
//! redistribution, and the cost of rate control when every IDT is 0.

use cluster_tests::{assert_all_intact, run_text};
use nic_emu::brm::{experiments, Calibration};
use nic_emu::scenario::{FlowReport, Report};
use nic_emu::Profile;

const PROFILE: &str = "lanai4-gm";

fn cal() -> Calibration {
    let p = Profile::load(PROFILE).unwrap();
    Calibration::for_profile(PROFILE, &p).unwrap().expect("lanai4-gm is calibrated")
}

fn flow<'a>(r: &'a Report, name: &str) -> &'a FlowReport {
    r.flows.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no flow {name}"))
}

fn stream(name: &str, src: u32, dst: u32, messages: u64, extra: &str) -> String {
    experiments::stream(name, src, dst, messages, extra)
}

fn head(nodes: u32, topology: &str) -> String {
    experiments::head(PROFILE, nodes, topology)
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    ((got - want) / want).abs() <= tol
}

#[test]
fn calibration_finds_t_and_bmax_of_the_profile() {
    let c = cal();
    // Bmax is the profile's 82 MB/s target; T = MTU / Bmax (see
    // docs/rate-control.md for why it is 100 ticks rather than the
    // source's 96).
    assert!(within(c.bmax_mb_s, 82.0, 0.02), "Bmax {}", c.bmax_mb_s);
    assert!(within(c.t_ticks, 100.0, 0.03), "T {}", c.t_ticks);
    assert!(within(c.dispatch_interval_ticks, c.t_ticks, 0.01), "{c:?}");
    // Past the knee the sweep follows T / IDT * Bmax.
    for p in c.sweep.iter().filter(|p| p.idt as f64 > 1.2 * c.t_ticks) {
        assert!(within(p.mb_s, c.mb_s_for(p.idt), 0.01), "{p:?}");
    }
}

#[test]
fn two_flows_at_2t_each_get_half_of_bmax() {
    let text =
        head(3, "star") + &stream("a", 0, 1, 40, "idt_t = 2") + &stream("b", 0, 2, 40, "idt_t = 2");
    let r = run_text(&text);
    assert_all_intact(&r);
    let (a, b) = (flow(&r, "a"), flow(&r, "b"));
    let idt = (2.0 * cal().t_ticks).round() as u32;
    assert_eq!((a.idt, b.idt), (Some(idt), Some(idt)));
    // The source testbed: 40.91 MB/s each.
    for f in [a, b] {
        assert!(within(f.bandwidth_mb_s, 40.9, 0.02), "{}: {} MB/s", f.name, f.bandwidth_mb_s);
    }
    assert!(within(a.bandwidth_mb_s / b.bandwidth_mb_s, 1.0, 0.03));
}

#[test]
fn flows_at_10t_over_3_and_10t_over_7_share_3_to_7() {
    let text = head(3, "star")
        + &stream("a", 0, 1, 30, &format!("idt_t = {}", 10.0 / 3.0))
        + &stream("b", 0, 2, 70, &format!("idt_t = {}", 10.0 / 7.0));
    let r = run_text(&text);
    assert_all_intact(&r);
    let (a, b) = (flow(&r, "a"), flow(&r, "b"));
    // The source testbed: 24.96 and 56.88 MB/s.
    assert!(within(a.bandwidth_mb_s, 25.0, 0.03), "a: {} MB/s", a.bandwidth_mb_s);
    assert!(within(b.bandwidth_mb_s, 57.0, 0.03), "b: {} MB/s", b.bandwidth_mb_s);
    let want = a.idt.unwrap() as f64 / b.idt.unwrap() as f64;
    let got = b.bandwidth_mb_s / a.bandwidth_mb_s;
    assert!(within(got, want, 0.03), "ratio {got:.3}, inverse IDT ratio {want:.3}");
}

#[test]
fn a_request_breaking_any_criterion_is_refused_naming_it_and_release_lets_it_in() {
    // Two switches; which flow breaks which criterion: experiments::admission.
    let text = experiments::admission(PROFILE);
    let r = run_text(&text);
    assert_all_intact(&r);
    let c = cal();
    for (name, criterion) in [
        ("src-full", "criterion 1 (source node 0 capacity)"),
        ("dst-full", "criterion 3 (destination node 1 capacity)"),
        ("t3", "criterion 2 (switch 0 output port 15 link capacity)"),
    ] {
        let f = flow(&r, name);
        assert_eq!(f.admitted, Some(false), "{name}");
        let why = f.refused_reason.as_deref().unwrap_or("");
        assert!(why.contains(criterion), "{name}: {why}");
        assert_eq!((f.messages, f.delivered), (0, 0), "{name} sent nothing");
    }
    for (name, mb_s) in [("n0-60", 60.0), ("t1", 55.0), ("t2", 55.0), ("src-later", 30.0)] {
        let f = flow(&r, name);
        assert_eq!(f.admitted, Some(true), "{name}: {:?}", f.refused_reason);
        assert_eq!(f.idt, Some(c.idt_for(mb_s)), "{name}");
        assert!(f.bandwidth_mb_s <= mb_s * 1.01, "{name}: {} MB/s", f.bandwidth_mb_s);
        assert!(within(f.bandwidth_mb_s, mb_s, 0.05), "{name}: {} MB/s", f.bandwidth_mb_s);
    }
    // The stopped flow sent what it could in 20 ms, then gave its
    // reservation back (its entry was removed).
    let n0 = flow(&r, "n0-60");
    assert!(n0.messages > 10 && n0.messages < 1000, "{}", n0.messages);
    assert_eq!(n0.idt_history.as_ref().unwrap().last().unwrap().1, None);
}

/// Dispatch rate (MB/s of 4 KiB packets) of a traced flow in [from, to) ms.
fn dispatch_mb_s(f: &FlowReport, from_ms: f64, to_ms: f64) -> f64 {
    assert!(f.dispatch_ticks.is_some(), "{} is traced", f.name);
    experiments::dispatch_mb_s(f, 2_000_000, 4096, from_ms, to_ms)
}

#[test]
fn best_effort_uses_what_premium_flows_leave_and_returns_to_peak() {
    let ph = 60.0;
    let r = run_text(&experiments::best_effort(PROFILE, ph as u64));
    assert_all_intact(&r);
    let c = cal();
    let (be, p40, p20) = (flow(&r, "be"), flow(&r, "p40"), flow(&r, "p20"));
    // Each phase's last 25 ms: steady state (see docs/rate-control.md on
    // the transient after a rate change).
    let last = |k: f64| (k * ph - 25.0, k * ph);
    let (a, b) = last(1.0);
    assert!(dispatch_mb_s(be, a, b) > 0.97 * c.bmax_mb_s, "alone: {}", dispatch_mb_s(be, a, b));
    let (a, b) = last(2.0);
    let left = c.bmax_mb_s - 40.0;
    assert!(within(dispatch_mb_s(be, a, b), left, 0.05), "with p40: {}", dispatch_mb_s(be, a, b));
    assert!(within(dispatch_mb_s(p40, a, b), 40.0, 0.03), "p40: {}", dispatch_mb_s(p40, a, b));
    let (a, b) = last(3.0);
    let left = c.bmax_mb_s - 60.0;
    assert!(within(dispatch_mb_s(be, a, b), left, 0.05), "with both: {}", dispatch_mb_s(be, a, b));
    assert!(within(dispatch_mb_s(p40, a, b), 40.0, 0.03), "p40: {}", dispatch_mb_s(p40, a, b));
    assert!(within(dispatch_mb_s(p20, a, b), 20.0, 0.03), "p20: {}", dispatch_mb_s(p20, a, b));
    let (a, b) = last(4.0);
    assert!(
        dispatch_mb_s(be, a, b) > 0.97 * c.bmax_mb_s,
        "again alone: {}",
        dispatch_mb_s(be, a, b)
    );
    // The manager's IDTs for it: unregulated, T Bmax / 41.8, T Bmax /
    // 21.8, ..., unregulated, removed at its end.
    let idts: Vec<Option<u32>> = be.idt_history.as_ref().unwrap().iter().map(|h| h.1).collect();
    assert_eq!(idts[..3], [Some(0), Some(c.idt_for(c.bmax_mb_s - 40.0)), Some(c.idt_for(left))]);
    assert_eq!(idts[idts.len() - 2..], [Some(0), None]);
}

/// A flow whose IDT changes starts its new rate at max(NDT, RTC): a
/// best-effort flow that ran unregulated gets no credit for its old NDT,
/// so a premium flow gets its rate from its first packets.
#[test]
fn a_premium_flow_gets_its_rate_from_the_moment_it_starts() {
    let r = run_text(&experiments::best_effort(PROFILE, 60));
    let p40 = flow(&r, "p40");
    let got = dispatch_mb_s(p40, 62.0, 80.0);
    assert!(within(got, 40.0, 0.05), "p40 in its first 20 ms: {got} MB/s");
}

/// The spec's overhead figure, as `cargo xtask bench --rate` measures it:
/// the same firmware with a flow entry of IDT 0 on every stream vs none,
/// ping-pong latency and stream bandwidth at 4 B .. 64 KiB. The sim
/// charges rate control's own work (`Work::flow_ops`, the profile's
/// `flow_op` cycles), so the cost is real but must stay under 1% (the
/// median over the sizes: a stream whose window outruns its receiver's
/// buffers in one run and not the other pays a no-buffer retry of a
/// millisecond, which is not rate control's cost, and the mean would
/// count it).
#[test]
fn with_every_idt_0_rate_control_costs_under_one_percent() {
    let (mut lat_diffs, mut bw_diffs) = (Vec::new(), Vec::new());
    for size in (1..=8).map(|k| 4u64.pow(k)) {
        let rounds = ((4 << 20) / size).clamp(4, 100);
        let messages = ((16 << 20) / size).clamp(16, 2000);
        let window = ((3 << 20) / size).clamp(1, 8);
        let pp = |extra: &str| {
            head(2, "star")
                + &format!(
                    "[[flows]]\nname = \"pp\"\nsrc = [0, 1]\ndst = [1, 1]\nkind = \"pingpong\"\n\
                     bytes = {size}\nmessages = {rounds}\n{extra}\n"
                )
        };
        let st = |extra: &str| {
            head(2, "star")
                + &format!(
                    "[[flows]]\nname = \"st\"\nsrc = [0, 1]\ndst = [1, 1]\nkind = \"stream\"\n\
                     bytes = {size}\nmessages = {messages}\nwindow = {window}\n{extra}\n"
                )
        };
        let (p0, p1) = (run_text(&pp("")), run_text(&pp("idt = 0")));
        let (s0, s1) = (run_text(&st("")), run_text(&st("idt = 0")));
        for r in [&p0, &p1, &s0, &s1] {
            assert_all_intact(r);
        }
        assert_eq!(p1.flows[0].idt, Some(0));
        let lat = |r: &Report| r.flows[0].latency_ns.p50 as f64;
        let bw = |r: &Report| r.flows[0].bandwidth_mb_s;
        // Flow accounting is on every packet's path: never free.
        assert!(lat(&p1) > lat(&p0), "{size} B: {} vs {} ns", lat(&p1), lat(&p0));
        lat_diffs.push(lat(&p1) / lat(&p0) - 1.0);
        bw_diffs.push(bw(&s1) / bw(&s0) - 1.0);
    }
    let median = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    let (l, b) = (median(&lat_diffs), median(&bw_diffs));
    assert!(l < 0.01, "latency {:.3}% (median) ({lat_diffs:?})", l * 100.0);
    assert!(b > -0.01, "bandwidth {:.3}% (median) ({bw_diffs:?})", b * 100.0);
}
