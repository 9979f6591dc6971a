//! Like host-programs' `pingpong` binary, with the host's idle policy as
//! flags, to study how the waiting of three busy actors (two host
//! processes and the device thread) on a small machine shapes latency.
//!
//! ```text
//! rt_pingpong --cluster C --node 1 --port 1 --peer 0 --peer-port 1 --role pong --spin-us 0 &
//! rt_pingpong --cluster C --node 0 --port 1 --peer 1 --peer-port 1 --role ping --spin-us 0
//! ```

use std::time::Duration;

use clap::{Parser, ValueEnum};
use host_driver::IdlePolicy;
use host_programs::bench::{self, PingPongConfig, PingRole};

/// Which end of the ping-pong this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Role {
    /// Sends first and measures.
    Ping,
    /// Answers.
    Pong,
}

/// One end of a ping-pong on a running live or qemu cluster, like
/// host-programs' `pingpong` binary, with the host's idle policy as flags:
/// how long to spin, then yield, before sleeping 50 us.
#[derive(Parser)]
#[command(name = "rt_pingpong")]
struct Args {
    /// The cluster (name or directory).
    #[arg(long)]
    cluster: String,
    /// This process's node.
    #[arg(long)]
    node: u32,
    /// This process's port.
    #[arg(long)]
    port: u8,
    /// The other end's node.
    #[arg(long)]
    peer: u16,
    /// The other end's port.
    #[arg(long)]
    peer_port: u8,
    /// Which end this process is.
    #[arg(long, value_enum)]
    role: Role,
    /// Bytes per message.
    #[arg(long, default_value_t = 8)]
    size: u32,
    /// Round trips.
    #[arg(long, default_value_t = 5000)]
    count: u64,
    /// Spin this long (us) waiting for an event before yielding.
    #[arg(long = "spin-us", default_value_t = 20)]
    spin: u64,
    /// Yield until this long (us), then sleep 50 us at a time (default:
    /// never sleep).
    #[arg(long = "yield-us")]
    yield_us: Option<u64>,
}

fn main() {
    let Args { cluster, node, port, peer, peer_port, role, size, count, spin, yield_us } =
        Args::parse();
    let idle = IdlePolicy {
        spin: Duration::from_micros(spin),
        yield_until: Duration::from_micros(yield_us.unwrap_or(u64::MAX / 1000)),
        sleep: Duration::from_micros(50),
    };
    let timeout = Duration::from_secs(30);
    let (nic, mut p) = bench::open_live_port(&cluster, node, port, timeout, idle)
        .unwrap_or_else(|e| panic!("{e}"));
    let r = match role {
        Role::Ping => PingRole::Ping,
        Role::Pong => PingRole::Pong,
    };
    let cfg = PingPongConfig { timeout, ..PingPongConfig::new(r, peer, peer_port, size, count) };
    let rep = bench::pingpong(&nic, &mut p, &cfg).unwrap_or_else(|e| panic!("{e}"));
    if let Some(l) = rep.one_way {
        println!(
            "one-way latency (us): min {:.2}  median {:.2}  p99 {:.2}  max {:.2}",
            l.min_ns as f64 / 1e3,
            l.median_ns as f64 / 1e3,
            l.p99_ns as f64 / 1e3,
            l.max_ns as f64 / 1e3
        );
    }
}
