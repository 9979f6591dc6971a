//! The spec's rate-control experiments as scenario text, and what their
//! reports are read with: one definition for the tests
//! (tests/tests/rate_control.rs) and `cargo xtask report rate-control`.

use crate::scenario::FlowReport;

/// A scenario's header: `profile`, `nodes` NICs, `topology`.
pub fn head(profile: &str, nodes: u32, topology: &str) -> String {
    format!("profile = \"{profile}\"\n[fabric]\nnodes = {nodes}\ntopology = \"{topology}\"\n")
}

/// A flow of `messages` 64 KiB messages from port 1 of `src` to port 1 of
/// `dst`, with `extra` keys (rate control, start and stop times, ...).
pub fn stream(name: &str, src: u32, dst: u32, messages: u64, extra: &str) -> String {
    format!(
        "[[flows]]\nname = \"{name}\"\nsrc = [{src}, 1]\ndst = [{dst}, 1]\nkind = \"stream\"\n\
         bytes = 65536\nmessages = {messages}\n{extra}\n"
    )
}

/// The best-effort experiment: a best-effort flow 0 -> 1 alone, then with
/// a 40 MB/s premium flow 0 -> 2 from `phase_ms`, a 20 MB/s one 0 -> 3
/// from 2 `phase_ms` too; both stop at 3 `phase_ms`, the best-effort flow
/// at 4. Every flow traced.
pub fn best_effort(profile: &str, phase_ms: u64) -> String {
    let us = |k: u64| k * phase_ms * 1000;
    head(profile, 4, "star")
        + &stream(
            "be",
            0,
            1,
            100_000,
            &format!("best_effort = true\nstop_us = {}\ntrace = true", us(4)),
        )
        + &stream(
            "p40",
            0,
            2,
            100_000,
            &format!("rate_mb_s = 40\nstart_us = {}\nstop_us = {}\ntrace = true", us(1), us(3)),
        )
        + &stream(
            "p20",
            0,
            3,
            100_000,
            &format!("rate_mb_s = 20\nstart_us = {}\nstop_us = {}\ntrace = true", us(2), us(3)),
        )
}

/// The admission experiment: two switches (nodes 0..5 on switch 0, 5..10
/// on switch 1, joined by switch 0 port 15). Node 0 holds 60 MB/s to node
/// 1 until 20 ms (`n0-60`); at 1 ms `src-full` (node 0 has about 22 MB/s
/// left: criterion 1) and `dst-full` (node 1 receives 60 already:
/// criterion 3) ask for 30; three 55 MB/s flows want the 158 MB/s trunk
/// (`t1`, `t2` at 0 ms, `t3` at 1 ms: criterion 2); `src-later` asks for
/// 30 at 40 ms, after node 0's reservation is given back (its last message
/// completes by about 30 ms).
pub fn admission(profile: &str) -> String {
    head(profile, 10, "two-switch")
        + &stream("n0-60", 0, 1, 1000, "rate_mb_s = 60\nstop_us = 20000")
        + &stream("src-full", 0, 2, 5, "rate_mb_s = 30\nstart_us = 1000")
        + &stream("dst-full", 9, 1, 5, "rate_mb_s = 30\nstart_us = 1000")
        + &stream("t1", 2, 6, 10, "rate_mb_s = 55")
        + &stream("t2", 3, 7, 10, "rate_mb_s = 55")
        + &stream("t3", 4, 8, 5, "rate_mb_s = 55\nstart_us = 1000")
        + &stream("src-later", 0, 3, 5, "rate_mb_s = 30\nstart_us = 40000")
}

/// A traced flow's dispatch rate in `[from_ms, to_ms)`: MB/s of
/// `packet_bytes` packets, dispatch times in ticks of `rtc_hz`. 0 for an
/// untraced flow.
pub fn dispatch_mb_s(
    f: &FlowReport,
    rtc_hz: u64,
    packet_bytes: u32,
    from_ms: f64,
    to_ms: f64,
) -> f64 {
    let n = f
        .dispatch_ticks
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .filter(|&&t| {
            let ms = t as f64 * 1e3 / rtc_hz as f64;
            ms >= from_ms && ms < to_ms
        })
        .count();
    n as f64 * packet_bytes as f64 / ((to_ms - from_ms) / 1e3) / 1e6
}
