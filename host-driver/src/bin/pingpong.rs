//! `pingpong`: one-way latency (half the round trip) between two ports of a
//! running live or qemu cluster. Run one process with `--role pong` and one
//! with `--role ping`, each naming the other as its peer; the ping prints
//! min / median / p99 / max in microseconds. Every message is
//! content-checked at both ends; any error, timeout or content mismatch
//! exits non-zero with a message on stderr.
//!
//! ```text
//! pingpong --cluster demo --node 1 --port 2 --peer 0 --peer-port 2 --role pong &
//! pingpong --cluster demo --node 0 --port 2 --peer 1 --peer-port 2 --role ping --size 8 --count 10000
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use host_driver::bench::{self, Check, PingPongConfig, PingRole};
use host_driver::{IdlePolicy, Priority};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Ping,
    Pong,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Prio {
    Low,
    High,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CheckArg {
    /// Every byte of every message.
    Full,
    /// Index and sender (first 8 bytes) of every message.
    Index,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Wait {
    /// Spin, then yield, then sleep while idle (kind to a small machine).
    Adaptive,
    /// Spin only: lowest latency, one busy core per process.
    Spin,
}

#[derive(Parser, Debug)]
#[command(about = "Ping-pong latency between two ports of a running NIC cluster")]
struct Args {
    /// Cluster name (under $NIC_CLUSTER_DIR or <tmp>/nic-clusters) or directory.
    #[arg(long)]
    cluster: String,
    /// This process's node.
    #[arg(long)]
    node: u16,
    /// This process's port.
    #[arg(long)]
    port: u8,
    /// The other end's node.
    #[arg(long)]
    peer: u16,
    /// The other end's port.
    #[arg(long)]
    peer_port: u8,
    #[arg(long, value_enum)]
    role: Role,
    /// Bytes per message (both ways).
    #[arg(long, default_value_t = 8)]
    size: u32,
    /// Round trips measured.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Round trips before measuring (both ends must agree).
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    #[arg(long, value_enum, default_value_t = Prio::Low)]
    priority: Prio,
    /// Seconds without progress (or for the peer to come up) before giving up.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    #[arg(long, value_enum, default_value_t = CheckArg::Full)]
    check: CheckArg,
    #[arg(long, value_enum, default_value_t = Wait::Adaptive)]
    wait: Wait,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn run(a: &Args) -> Result<(), String> {
    let timeout = Duration::try_from_secs_f64(a.timeout)
        .map_err(|_| format!("--timeout {}: not a duration", a.timeout))?;
    let idle = match a.wait {
        Wait::Adaptive => IdlePolicy::default(),
        Wait::Spin => IdlePolicy::busy(),
    };
    let (nic, mut port) = bench::open_live_port(&a.cluster, a.node as u32, a.port, timeout, idle)?;
    let mut cfg = PingPongConfig::new(
        match a.role {
            Role::Ping => PingRole::Ping,
            Role::Pong => PingRole::Pong,
        },
        a.peer,
        a.peer_port,
        a.size,
        a.count,
    );
    cfg.warmup = a.warmup;
    cfg.timeout = timeout;
    cfg.priority = match a.priority {
        Prio::Low => Priority::Low,
        Prio::High => Priority::High,
    };
    cfg.check = match a.check {
        CheckArg::Full => Check::Full,
        CheckArg::Index => Check::Index,
    };
    let r = bench::pingpong(&nic, &mut port, &cfg).map_err(|e| e.to_string())?;
    if a.json {
        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
        if let Some(l) = r.one_way {
            v["one_way_us"] = serde_json::json!({
                "min": us(l.min_ns), "median": us(l.median_ns), "p99": us(l.p99_ns),
                "max": us(l.max_ns), "mean": us(l.mean_ns),
            });
        }
        v["cluster"] = serde_json::Value::from(a.cluster.clone());
        println!("{v}");
    } else {
        println!(
            "pingpong {:?}: node {} port {} <-> node {} port {}, {} B x {} (+{} warm-up), {:?} priority, all content checked",
            a.role, r.node, r.port, r.peer_node, r.peer_port, r.size, r.count, r.warmup, cfg.priority
        );
        if let Some(l) = r.one_way {
            println!(
                "one-way latency (us): min {:.2}  median {:.2}  p99 {:.2}  max {:.2}  (mean {:.2}, {} samples)",
                us(l.min_ns),
                us(l.median_ns),
                us(l.p99_ns),
                us(l.max_ns),
                us(l.mean_ns),
                l.samples
            );
        } else {
            println!(
                "answered {} requests in {:.3} ms",
                r.count + r.warmup,
                r.elapsed_ns as f64 / 1e6
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: error: {e}");
            ExitCode::FAILURE
        }
    }
}
