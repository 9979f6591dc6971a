//! The random scenarios of `nic_scenario::fuzz` run on the simulator,
//! each held to its checks (the module's documentation says which).
//! proptest shrinks a failing scenario and prints it as a file to run
//! with `cargo xtask sim`.
//!
//! The suite runs 1,024 cases from a fixed seed, the same ones every time
//! (about 5 s).
//! To look further: `cargo xtask fuzz --scenarios 100000` (every failure
//! listed with the command that runs it again), or
//! `PROPTEST_CASES=5000 PROPTEST_RNG_SEED=<any number>
//! cargo test --profile quick -p nic-scenario --test fuzz_runs` (some 5 ms a
//! case). With `FUZZ_SCENARIOS_OUT=<dir>` each case that runs is also
//! written there as `case-<n>.toml`, to run on the live or qemu backend
//! with `cargo xtask sim FILE --backend live`.

use nic_scenario::fuzz::{collectives_right, refused_by_design, scenario, Gen};
use nic_scenario::{run, Scenario};
use proptest::prelude::*;

/// Write `text` to `$FUZZ_SCENARIOS_OUT/case-<n>.toml` when that is set
/// (n counts the cases written by this process).
fn keep(text: &str) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let Some(dir) = std::env::var_os("FUZZ_SCENARIOS_OUT") else { return };
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::path::Path::new(&dir).join(format!("case-{n}.toml"));
    std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&path, text))
        .unwrap_or_else(|e| panic!("FUZZ_SCENARIOS_OUT: cannot write {}: {e}", path.display()));
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1024)
}

fn seed() -> proptest::test_runner::RngSeed {
    let s = std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok());
    proptest::test_runner::RngSeed::Fixed(s.unwrap_or(1))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: seed(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn fuzz_random_scenarios_end_and_deliver_every_flow_no_reset_cut(g in scenario()) {
        let g: Gen = g;
        let text = g.text();
        let v = Scenario::parse_validated(&text);
        // Two flows on one stream (same source port, target port and
        // priority), or a stream into a host collective's port, are
        // refused by design: not a case.
        prop_assume!(!matches!(&v, Err(e) if refused_by_design(&e.to_string())));
        let v = v.map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        keep(&text);
        let r = run(&v).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(
            r.sim.stopped == "done" && r.all_delivered_intact() && collectives_right(&r),
            "{}\nproblems: {:?}\n--- scenario ---\n{text}",
            r.summary(),
            r.problems
        );
    }
}
