//! The timing profiles meet their calibration targets with the MCP (see
//! the "Calibration" notes in nic-emu/profiles/*.toml). If the MCP's work
//! per message changes, these move: re-tune the profile, not the test.

use nic_emu::calibrate::{pingpong, stream};
use nic_emu::{Profile, RunOutcome};

#[test]
fn lanai4_gm_streams_64k_messages_at_about_82_mb_s() {
    let m = stream(Profile::load("lanai4-gm").unwrap(), 65536, 60, 8).unwrap();
    assert_eq!(m.outcome, RunOutcome::Done);
    assert_eq!(m.bytes, 60 * 65536);
    let bw = m.mb_s();
    assert!((78.0..86.0).contains(&bw), "lanai4-gm 64 KiB stream: {bw:.2} MB/s, target ~82");
}

#[test]
fn lanai9_gm_small_message_one_way_latency_is_about_17_us() {
    let m = pingpong(Profile::load("lanai9-gm").unwrap(), 8, 20).unwrap();
    assert_eq!(m.outcome, RunOutcome::Done);
    assert_eq!(m.samples.len(), 20);
    let us = m.min_ns() as f64 / 1e3;
    assert!((16.0..18.0).contains(&us), "lanai9-gm one-way latency: {us:.2} us, target ~17");
}

#[test]
fn a_run_with_the_mcp_is_deterministic() {
    let a = stream(Profile::load("lanai9-gm").unwrap(), 10_000, 30, 4).unwrap();
    let b = stream(Profile::load("lanai9-gm").unwrap(), 10_000, 30, 4).unwrap();
    assert_eq!(a.outcome, RunOutcome::Done);
    assert_eq!(
        (a.bytes, a.interval_ns, a.sim.end_ns, a.sim.events),
        (b.bytes, b.interval_ns, b.sim.end_ns, b.sim.events)
    );
    assert_eq!(a.nics, b.nics);
}
