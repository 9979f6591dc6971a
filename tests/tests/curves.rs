//! The latency and bandwidth curves of a 2-node cluster: every size from
//! 4 B to 1 MiB (powers of 4) arrives intact, latency grows with size,
//! bandwidth grows with size up to 64 KiB, and the profiles meet their
//! calibration targets within 10%.

use cluster_tests::{assert_all_intact, run_text};
use nic_emu::scenario::Report;

fn sizes() -> Vec<u64> {
    (1..=10).map(|k| 4u64.pow(k)).collect()
}

fn pingpong(profile: &str, bytes: u64, rounds: u64) -> Report {
    run_text(&format!(
        "profile = \"{profile}\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"pp\"\nsrc = [0, 2]\n\
         dst = [1, 2]\nkind = \"pingpong\"\nbytes = {bytes}\nmessages = {rounds}\n"
    ))
}

fn stream(profile: &str, bytes: u64, messages: u64, window: u64) -> Report {
    run_text(&format!(
        "profile = \"{profile}\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"st\"\nsrc = [0, 2]\n\
         dst = [1, 2]\nkind = \"stream\"\nbytes = {bytes}\nmessages = {messages}\nwindow = {window}\n"
    ))
}

fn non_decreasing(v: &[(u64, f64)]) -> Result<(), String> {
    for w in v.windows(2) {
        if w[1].1 < w[0].1 {
            return Err(format!("{} B: {} < {} B: {}", w[1].0, w[1].1, w[0].0, w[0].1));
        }
    }
    Ok(())
}

#[test]
fn pingpong_4b_to_1mib_intact_latency_and_bandwidth_grow_with_size() {
    for profile in ["lanai4-gm", "lanai9-gm"] {
        let mut lat = Vec::new();
        let mut bw = Vec::new();
        for size in sizes() {
            let r = pingpong(profile, size, if size >= 1 << 18 { 3 } else { 8 });
            assert_all_intact(&r);
            let f = &r.flows[0];
            lat.push((size, f.latency_ns.p50 as f64));
            if size <= 65536 {
                bw.push((size, f.bandwidth_mb_s));
            }
        }
        non_decreasing(&lat)
            .unwrap_or_else(|e| panic!("{profile}: one-way latency falls: {e}\n{lat:?}"));
        non_decreasing(&bw)
            .unwrap_or_else(|e| panic!("{profile}: pingpong bandwidth falls: {e}\n{bw:?}"));
    }
}

#[test]
fn stream_bandwidth_grows_with_size_up_to_64k() {
    let mut bw = Vec::new();
    for size in sizes().into_iter().filter(|&s| s <= 65536) {
        let messages = ((4 << 20) / size).clamp(16, 400);
        let r = stream("lanai4-gm", size, messages, 8);
        assert_all_intact(&r);
        bw.push((size, r.flows[0].bandwidth_mb_s));
    }
    non_decreasing(&bw).unwrap_or_else(|e| panic!("stream bandwidth falls: {e}\n{bw:?}"));
}

#[test]
fn a_1mib_stream_arrives_intact() {
    let r = stream("lanai9-gm", 1 << 20, 6, 2);
    assert_all_intact(&r);
}

fn within_10_percent(got: f64, target: f64) -> bool {
    ((got - target) / target).abs() <= 0.10
}

#[test]
fn calibration_lanai4_gm_64k_stream_is_about_82_mb_s() {
    let r = stream("lanai4-gm", 65536, 200, 8);
    assert_all_intact(&r);
    let bw = r.flows[0].bandwidth_mb_s;
    assert!(within_10_percent(bw, 82.0), "lanai4-gm 64 KiB stream: {bw} MB/s, target 82 +-10%");
}

#[test]
fn calibration_lanai9_gm_small_message_one_way_latency_is_about_17_us() {
    let r = pingpong("lanai9-gm", 4, 50);
    assert_all_intact(&r);
    let us = r.flows[0].latency_ns.p50 as f64 / 1e3;
    assert!(within_10_percent(us, 17.0), "lanai9-gm 4 B one-way latency: {us} us, target 17 +-10%");
}
