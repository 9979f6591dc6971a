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
