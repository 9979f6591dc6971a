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
use std::time::Duration;

use clap::{Parser, ValueEnum};
use host_driver::bench::{self, Check, StreamConfig, StreamRole};
use host_driver::{IdlePolicy, Priority};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Send,
    Recv,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Prio {
    Low,
    High,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CheckArg {
    /// Every byte of every message (the sender writes every byte too).
    Full,
    /// Index and sender (first 8 bytes) of every message: order only.
    Index,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Wait {
    /// Spin, then yield, then sleep while idle (kind to a small machine).
    Adaptive,
    /// Spin only: one busy core per process.
    Spin,
}

#[derive(Parser, Debug)]
#[command(about = "Streaming bandwidth between two ports of a running NIC cluster")]
struct Args {
    /// Cluster name (under $NIC_CLUSTER_DIR or <tmp>/nic-clusters) or directory.
    #[arg(long)]
    cluster: String,
    #[arg(long)]
    node: u16,
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
    #[arg(long, value_enum, default_value_t = Prio::Low)]
    priority: Prio,
    /// Seconds without progress (or for the peer to come up) before giving up.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    #[arg(long, value_enum, default_value_t = CheckArg::Full)]
    check: CheckArg,
    #[arg(long, value_enum, default_value_t = Wait::Adaptive)]
    wait: Wait,
    /// Print one JSON object per size instead of text.
    #[arg(long)]
    json: bool,
}

fn run(a: &Args) -> Result<(), String> {
    let timeout = Duration::try_from_secs_f64(a.timeout)
        .map_err(|_| format!("--timeout {}: not a duration", a.timeout))?;
    let idle = match a.wait {
        Wait::Adaptive => IdlePolicy::default(),
        Wait::Spin => IdlePolicy::busy(),
    };
    let (nic, mut port) = bench::open_live_port(&a.cluster, a.node as u32, a.port, timeout, idle)?;
    for &size in &a.size {
        let mut cfg = StreamConfig::new(
            match a.role {
                Role::Send => StreamRole::Send,
                Role::Recv => StreamRole::Recv,
            },
            a.peer,
            a.peer_port,
            size,
            a.count,
        );
        cfg.window = a.window;
        cfg.recv_buffers = a.recv_buffers;
        cfg.timeout = timeout;
        cfg.priority = match a.priority {
            Prio::Low => Priority::Low,
            Prio::High => Priority::High,
        };
        cfg.check = match a.check {
            CheckArg::Full => Check::Full,
            CheckArg::Index => Check::Index,
        };
        let r = bench::stream(&nic, &mut port, &cfg).map_err(|e| format!("size {size}: {e}"))?;
        if a.json {
            let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
            v["cluster"] = serde_json::Value::from(a.cluster.clone());
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
