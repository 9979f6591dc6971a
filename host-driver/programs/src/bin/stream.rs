//! `stream`: one-way streaming bandwidth between two ports of a running
//! live or qemu cluster. Run one process with `--role recv` and one with
//! `--role send`, each naming the other as its peer. The receiver checks
//! the content and order of every message and prints the bandwidth, one
//! figure with its definition: the bytes of every message after the
//! first over the time from the first message's arrival to the last's
//! (KB/s, MB/s: 10^3, 10^6 B/s). The sender prints how long its sends
//! took. With `--json` each prints its full report (`mb_per_s`: its own
//! side's rate).
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
use common::units;
use host_programs::bench::{self, StreamConfig, StreamReport, StreamRole};

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
            println!("{}", text(&r));
        }
    }
    Ok(())
}

/// What the receiver's bandwidth means (printed with it).
const DEFINITION: &str = "receiver side: bytes of every message after the first, over the time \
     from the first message's arrival to the last's";

/// One end's report as text: the receiver's line carries the bandwidth and
/// its definition, the sender's the time its sends took.
fn text(r: &StreamReport) -> String {
    let msgs = format!("{} x {}", r.count, units::size(r.size as u64));
    match r.role {
        StreamRole::Send => format!(
            "stream: sent {msgs}, node {} port {} -> node {} port {}, window {}, in {} \
             (first send to last completion); the receiver reports the bandwidth",
            r.node,
            r.port,
            r.peer_node,
            r.peer_port,
            r.depth,
            units::duration(r.elapsed_ns)
        ),
        StreamRole::Recv => {
            let bw = match r.mb_per_s {
                Some(m) => format!(
                    "bandwidth: {} ({DEFINITION}: {} x {} in {})",
                    units::rate(m * 1e6),
                    r.bytes / (r.size as u64).max(1),
                    units::size(r.size as u64),
                    units::duration(r.elapsed_ns)
                ),
                None => "bandwidth: n/a (it takes at least 2 messages: the clock starts at the \
                         first arrival)"
                    .to_string(),
            };
            format!(
                "stream: received {msgs}, node {} port {} -> node {} port {}, content and order \
                 checked\n{bw}",
                r.peer_node, r.peer_port, r.node, r.port
            )
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(role: StreamRole, count: u64, elapsed_ns: u64) -> StreamReport {
        let timed = if role == StreamRole::Recv { count - 1 } else { count };
        StreamReport {
            role,
            node: if role == StreamRole::Recv { 1 } else { 0 },
            port: 3,
            peer_node: if role == StreamRole::Recv { 0 } else { 1 },
            peer_port: 3,
            size: 65536,
            count,
            depth: 8,
            bytes: timed * 65536,
            elapsed_ns,
            mb_per_s: (elapsed_ns > 0 && timed > 0)
                .then(|| (timed * 65536) as f64 * 1e3 / elapsed_ns as f64),
            msgs_per_s: None,
            startup_retries: 0,
        }
    }

    #[test]
    fn the_receiver_prints_one_bandwidth_with_its_definition_in_human_units() {
        // 999 messages of 64 KiB timed over 80 ms: 818.4 MB/s.
        let t = text(&report(StreamRole::Recv, 1000, 80_000_000));
        assert_eq!(
            t,
            "stream: received 1000 x 64 KiB, node 0 port 3 -> node 1 port 3, content and order \
             checked\nbandwidth: 818.4 MB/s (receiver side: bytes of every message after the \
             first, over the time from the first message's arrival to the last's: 999 x 64 KiB \
             in 80.0 ms)"
        );
        assert_eq!(t.matches("B/s").count(), 1, "{t}");
    }

    #[test]
    fn the_sender_prints_its_time_and_no_second_bandwidth() {
        let t = text(&report(StreamRole::Send, 1000, 81_200_000));
        assert_eq!(
            t,
            "stream: sent 1000 x 64 KiB, node 0 port 3 -> node 1 port 3, window 8, in 81.2 ms \
             (first send to last completion); the receiver reports the bandwidth"
        );
        assert!(!t.contains("B/s") && !t.contains('{') && !t.contains("Some("), "{t}");
    }

    #[test]
    fn a_single_message_has_no_bandwidth_and_says_why() {
        let t = text(&report(StreamRole::Recv, 1, 0));
        assert!(
            t.ends_with(
                "\nbandwidth: n/a (it takes at least 2 messages: the clock starts at the first \
                 arrival)"
            ),
            "{t}"
        );
    }
}
