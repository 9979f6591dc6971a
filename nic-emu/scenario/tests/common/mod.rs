//! What the collective flows' test files share: running a scenario's
//! text, a fabric's head, and the checks every collective flow passes.
#![allow(dead_code)] // (each test file uses its part)

use nic_scenario::coll::CollReport;
use nic_scenario::{run, FlowReport, Report, Scenario};

/// Run scenario `text` on the simulator (it must parse and start).
pub fn run_text(text: &str) -> Report {
    let v = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    run(&v).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A `lanai9-gm` fabric of `nodes`.
pub fn head(nodes: u32) -> String {
    format!("profile = \"lanai9-gm\"\nseed = 5\n[fabric]\nnodes = {nodes}\n")
}

/// Every collective complete at every member, once, in order, right.
pub fn assert_collectives_right(f: &FlowReport) -> &CollReport {
    let c = f.collective.as_ref().unwrap_or_else(|| panic!("{}: no collective report", f.name));
    assert_eq!((f.delivered, c.completed), (c.count, c.count), "{}: {c:?}", f.name);
    assert_eq!(
        (f.duplicates, f.out_of_order, c.incomplete, c.results_wrong),
        (0, 0, 0, 0),
        "{}",
        f.name
    );
    if c.kind != "barrier" {
        assert_eq!(c.results_ok, Some(true), "{}: {c:?}", f.name);
        assert!(c.results_checked > 0);
    }
    // The sim keeps the NIC CPU's busy clock: every member's NIC works
    // for each collective, running it (nic) or sending and receiving the
    // hosts' messages (host).
    let nic = c.nic_cpu_ns.unwrap_or_else(|| panic!("{}: no nic_cpu_ns on the sim", f.name));
    assert!(nic.p50 > 0 && nic.max >= nic.p50, "{}: {c:?}", f.name);
    c
}
