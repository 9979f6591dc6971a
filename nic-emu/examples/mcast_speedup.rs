//! NIC-cached pipelined multicast against the best host-based algorithm,
//! G = 16 (a calibration aid for the report).
//! `cargo run --release -p nic-emu --example mcast_speedup [profile]`
use host_driver::{Algorithm, Scheme};
use nic_emu::mcast::{measure, median, McastRun};
use nic_emu::Profile;

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "modern".into());
    let profile = Profile::load(&name).expect("profile");
    let g = 16;
    for bytes in [2u32, 512, 16384, 65536] {
        let run = |scheme, algorithm| {
            let r = measure(&McastRun::new(&profile, scheme, algorithm, g, bytes, 4));
            assert!(r.ok, "{scheme} {algorithm} {bytes}: {:?}", r.problems);
            median(&r.latency_ns) as f64 / 1000.0
        };
        let mut hosts: Vec<(f64, Algorithm)> =
            Algorithm::FIXED.iter().map(|&a| (run(Scheme::Host, a), a)).collect();
        hosts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let k = nic_device::mcast::k_for(&profile, g, bytes as u64);
        let kb = Algorithm::KBinomial { k };
        let cached_bin = run(Scheme::NicCached, Algorithm::Binomial);
        let cached_kb = run(Scheme::NicCached, kb);
        let cached_ser = run(Scheme::NicCached, Algorithm::Serial);
        let best = cached_bin.min(cached_kb).min(cached_ser);
        let auto = nic_device::mcast::pick(&profile, Scheme::NicCached, g, bytes as u64);
        println!(
            "{bytes:6} B: host best {:8.1} us ({}) | cached binomial {cached_bin:8.1} {kb} {cached_kb:8.1} serial {cached_ser:8.1} | speedup {:.2}x | auto picks {auto}",
            hosts[0].0, hosts[0].1, hosts[0].0 / best
        );
    }
}
