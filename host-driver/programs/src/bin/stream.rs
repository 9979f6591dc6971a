//! `stream`: one-way streaming bandwidth between two ports of a running
//! live or qemu cluster. Run one process with `--role recv` and one with
//! `--role send`, each naming the other as its peer. The receiver checks
//! the content and order of every message; both print MB/s (10^6 B/s).
//! Any error, timeout or content/order mismatch exits non-zero with a
//! message on stderr.
//!
//! ```text
//! stream --cluster demo --node 1 --port 3 --peer 0 --peer-port 3 --role recv --size 65536 --count 2000 &
//! stream --cluster demo --node 0 --port 3 --peer 1 --peer-port 3 --role send --size 65536 --count 2000
//! ```

use std::process::ExitCode;

use clap::{Parser, ValueEnum};

mod common;
use host_programs::bench::{self, StreamConfig, StreamRole};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Send,
    Recv,
}

#[derive(Parser, Debug)]
#[command(about = "Streaming bandwidth between two ports of a running NIC cluster")]
struct Args {
    #[command(flatten)]
    end: common::Endpoint,
    #[arg(long, value_enum)]
    role: Role,
    /// Bytes per message; several (comma separated) run one after the
    /// other, `--count` messages each (both ends must give the same list).
    #[arg(long, value_delimiter = ',', default_value = "65536")]
    size: Vec<u32>,
    /// Messages per size.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Sender: most sends outstanding.
    #[arg(long, default_value_t = 8)]
    window: u32,
    /// Receiver: receive buffers kept posted.
    #[arg(long, default_value_t = 16)]
    recv_buffers: u32,
}

fn run(a: &Args) -> Result<(), String> {
    let timeout = a.end.timeout()?;
    let (nic, mut port) = a.end.open()?;
    for &size in &a.size {
        let mut cfg = StreamConfig::new(
            match a.role {
                Role::Send => StreamRole::Send,
                Role::Recv => StreamRole::Recv,
            },
            a.end.peer,
            a.end.peer_port,
            size,
            a.count,
        );
        cfg.window = a.window;
        cfg.recv_buffers = a.recv_buffers;
        cfg.timeout = timeout;
        cfg.priority = a.end.priority();
        cfg.check = a.end.check();
        let r = bench::stream(&nic, &mut port, &cfg).map_err(|e| format!("size {size}: {e}"))?;
        if a.end.json {
            let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
            v["cluster"] = serde_json::Value::from(a.end.cluster.clone());
            println!("{v}");
        } else {
            let what = match r.role {
                StreamRole::Send => "sent",
                StreamRole::Recv => "received (content and order checked)",
            };
            let mbs = r.mb_per_s.map_or("n/a".to_string(), |m| format!("{m:.1} MB/s"));
            let mps = r.msgs_per_s.map_or(String::new(), |m| format!(", {m:.0} msg/s"));
            println!(
                "stream {what}: {} x {} B, node {} port {} -> node {} port {}, depth {}: {mbs}{mps} ({:.3} ms)",
                r.count,
                r.size,
                if r.role == StreamRole::Send { r.node } else { r.peer_node },
                if r.role == StreamRole::Send { r.port } else { r.peer_port },
                if r.role == StreamRole::Send { r.peer_node } else { r.node },
                if r.role == StreamRole::Send { r.peer_port } else { r.port },
                r.depth,
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
            eprintln!("stream: error: {e}");
            ExitCode::FAILURE
        }
    }
}
