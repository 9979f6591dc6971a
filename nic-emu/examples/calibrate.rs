//! Print the calibration measurements of the timing profiles:
//! `cargo run --release -p nic-emu --example calibrate [profile...]`.

use clap::Parser;
use nic_emu::calibrate::{pingpong, stream};
use nic_emu::Profile;

/// Print the calibration measurements of the timing profiles: ping-pong
/// one-way latency (8 and 64 B) and stream bandwidth (64 KiB and 4 KiB
/// messages) on the simulator. VERBOSE=1 adds every NIC's counters.
#[derive(Parser)]
#[command(name = "calibrate")]
struct Args {
    /// Profiles to measure (default: every built-in one).
    profiles: Vec<String>,
}

fn main() {
    let args = Args::parse().profiles;
    let names: Vec<String> = if args.is_empty() {
        Profile::names().iter().map(|s| s.to_string()).collect()
    } else {
        args
    };
    for name in names {
        let p = Profile::load(&name).unwrap_or_else(|e| panic!("{e}"));
        for size in [8u32, 64] {
            let m = pingpong(p.clone(), size, 50).expect("cluster");
            println!(
                "{name}: ping-pong {size} B: one-way min {:.2} us, median {:.2} us ({}, {} samples)",
                m.min_ns() as f64 / 1e3,
                m.median_ns() as f64 / 1e3,
                m.outcome,
                m.samples.len()
            );
        }
        for (size, count) in [(65536u32, 200u64), (4096, 1000)] {
            let m = stream(p.clone(), size, count, 8).expect("cluster");
            println!(
                "{name}: stream {size} B x {count}: {:.2} MB/s ({}; {} packets, {} events, {:.0} ms wall)",
                m.mb_s(),
                m.outcome,
                m.sim.packets,
                m.sim.events,
                m.sim.wall_ms
            );
            if std::env::var("VERBOSE").is_ok() {
                for n in &m.nics {
                    println!(
                        "  node {}: polls {} busy {:.1}% work {:?} hdma {} rx_bp {}",
                        n.node,
                        n.nic_polls,
                        n.nic_busy_ns as f64 * 100.0 / m.sim.end_ns as f64,
                        n.nic_work,
                        n.device.hdma_cmds,
                        n.device.rx_backpressure_waits
                    );
                }
            }
        }
    }
}
