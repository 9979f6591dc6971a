//! Integration tests across crates live in tests/tests/; this library holds
//! what they share: finding the example scenarios, running scenario text,
//! and the assertion that a run delivered everything intact.

use std::path::PathBuf;

use nic_emu::scenario::{self, Report, Scenario};

/// The workspace root (this crate lives in `tests/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// Path of an example scenario under scenarios/.
pub fn example(name: &str) -> PathBuf {
    root().join("scenarios").join(name)
}

/// Run an example scenario by file name.
pub fn run_example(name: &str) -> Report {
    let sc = scenario::load_file(&example(name)).unwrap_or_else(|e| panic!("{e}"));
    scenario::run(&sc).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Run scenario text.
pub fn run_text(text: &str) -> Report {
    let sc = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    scenario::run(&sc).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Every flow delivered every message exactly once, intact and in order,
/// nothing went wrong on the hosts, and no NIC refused a descriptor.
pub fn assert_all_intact(r: &Report) {
    let mut bad = Vec::new();
    for f in &r.flows {
        if f.delivered != f.messages
            || f.corrupted != 0
            || f.duplicates != 0
            || f.out_of_order != 0
            || f.send_errors != 0
            || !f.complete
        {
            bad.push(format!(
                "{}: delivered {}/{} corrupted {} duplicates {} out_of_order {} send_errors {}",
                f.name, f.delivered, f.messages, f.corrupted, f.duplicates, f.out_of_order, f.send_errors
            ));
        }
        let expect_bytes: u64 = (0..f.messages).map(|i| f.sizes[(i % f.sizes.len() as u64) as usize]).sum();
        let expect_bytes = if f.kind == "pingpong" { 2 * expect_bytes } else { expect_bytes };
        if f.bytes != expect_bytes {
            bad.push(format!("{}: {} bytes delivered, expected {expect_bytes}", f.name, f.bytes));
        }
    }
    let errors: u64 = r.nics.iter().map(|n| n.errors).sum();
    assert!(
        bad.is_empty() && r.complete && r.problems.is_empty() && errors == 0,
        "run not clean (stopped: {}, complete: {}, NIC errors: {errors}):\n{}\nproblems: {:#?}\n{}",
        r.sim.stopped,
        r.complete,
        bad.join("\n"),
        r.problems.iter().take(20).collect::<Vec<_>>(),
        r.summary()
    );
}
