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

use clap::{Parser, ValueEnum};

mod common;
use common::units;
use host_programs::bench::{self, PingPongConfig, PingRole};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Ping,
    Pong,
}

#[derive(Parser, Debug)]
#[command(about = "Ping-pong latency between two ports of a running NIC cluster")]
struct Args {
    #[command(flatten)]
    end: common::Endpoint,
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
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn run(a: &Args) -> Result<(), String> {
    let timeout = a.end.timeout()?;
    let (nic, mut port) = a.end.open()?;
    let mut cfg = PingPongConfig::new(
        match a.role {
            Role::Ping => PingRole::Ping,
            Role::Pong => PingRole::Pong,
        },
        a.end.peer,
        a.end.peer_port,
        a.size,
        a.count,
    );
    cfg.warmup = a.warmup;
    cfg.timeout = timeout;
    cfg.priority = a.end.priority();
    cfg.check = a.end.check();
    let r = bench::pingpong(&nic, &mut port, &cfg).map_err(|e| e.to_string())?;
    if a.end.json {
        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
        if let Some(l) = r.one_way {
            v["one_way_us"] = serde_json::json!({
                "min": us(l.min_ns), "median": us(l.median_ns), "p99": us(l.p99_ns),
                "max": us(l.max_ns), "mean": us(l.mean_ns),
            });
        }
        v["cluster"] = serde_json::Value::from(a.end.cluster.clone());
        println!("{v}");
    } else {
        println!(
            "pingpong {}: node {} port {} <-> node {} port {}, {} x {} (+{} warm-up), {} priority, all content checked",
            match a.role {
                Role::Ping => "ping",
                Role::Pong => "pong",
            },
            r.node,
            r.port,
            r.peer_node,
            r.peer_port,
            units::size(r.size as u64),
            r.count,
            r.warmup,
            cfg.priority.name()
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
                "answered {} requests in {}",
                r.count + r.warmup,
                units::duration(r.elapsed_ns)
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
