//! Like host-driver's `pingpong` binary, with the host's idle policy as
//! flags, to study how the waiting of three busy actors (two host
//! processes and the device thread) on a small machine shapes latency.
//!
//! ```text
//! rt_pingpong --cluster C --node 1 --port 1 --peer 0 --peer-port 1 --role pong --spin-us 0 &
//! rt_pingpong --cluster C --node 0 --port 1 --peer 1 --peer-port 1 --role ping --spin-us 0
//! ```

use std::time::Duration;

use host_driver::bench::{self, PingPongConfig, PingRole};
use host_driver::IdlePolicy;

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1)).and_then(|v| v.parse().ok())
}

fn main() {
    let cluster: String = arg("--cluster").expect("--cluster");
    let node: u32 = arg("--node").expect("--node");
    let port: u8 = arg("--port").expect("--port");
    let peer: u16 = arg("--peer").expect("--peer");
    let peer_port: u8 = arg("--peer-port").expect("--peer-port");
    let role: String = arg("--role").expect("--role");
    let size: u32 = arg("--size").unwrap_or(8);
    let count: u64 = arg("--count").unwrap_or(5000);
    let spin: u64 = arg("--spin-us").unwrap_or(20);
    let yield_us: u64 = arg("--yield-us").unwrap_or(u64::MAX / 1000);
    let idle = IdlePolicy {
        spin: Duration::from_micros(spin),
        yield_until: Duration::from_micros(yield_us),
        sleep: Duration::from_micros(50),
    };
    let timeout = Duration::from_secs(30);
    let (nic, mut p) = bench::open_live_port(&cluster, node, port, timeout, idle)
        .unwrap_or_else(|e| panic!("{e}"));
    let r = if role == "ping" { PingRole::Ping } else { PingRole::Pong };
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
