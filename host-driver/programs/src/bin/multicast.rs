//! `multicast`: one member of a multicast group on a running live or qemu
//! cluster. Start one process per member (the root last or first: it
//! waits until every member is ready); every member checks each message
//! it gets (exactly once, intact, in order), relays when its scheme asks,
//! and the root prints the completion latency of each multicast (its call
//! to its completion event).
//!
//! ```text
//! for n in 1 2 3; do multicast --cluster demo --node $n --port 2 --group 0,1,2,3 --scheme nic & done
//! multicast --cluster demo --node 0 --port 2 --group 0,1,2,3 --scheme nic --algorithm binomial --size 2 --count 100
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use host_driver::{Algorithm, Group, IdlePolicy, Scheme};
use host_programs::bench;
use host_programs::mcast::{self, McastConfig};

#[derive(Parser, Debug)]
#[command(about = "One member of a multicast on a running NIC cluster")]
struct Args {
    /// Cluster name (under $NIC_CLUSTER_DIR or /dev/shm/nic-clusters) or directory.
    #[arg(long)]
    cluster: String,
    /// This process's node.
    #[arg(long)]
    node: u16,
    /// The group's port (every member uses it).
    #[arg(long)]
    port: u8,
    /// Members in rank order, the root first: `0,1,2,3`.
    #[arg(long, value_delimiter = ',', required = true)]
    group: Vec<u16>,
    /// The group's id (a slot of the NIC's group table, 0..16).
    #[arg(long, default_value_t = 0)]
    group_id: u16,
    /// host | nic | assisted | nic-cached
    #[arg(long, default_value = "nic-cached")]
    scheme: String,
    /// separate | serial | binomial | binary | k-binomial
    #[arg(long, default_value = "binomial")]
    algorithm: String,
    /// k of a k-binomial tree.
    #[arg(long, default_value_t = 3)]
    k: u8,
    /// Bytes per multicast.
    #[arg(long, default_value_t = 8)]
    size: u32,
    /// Multicasts, one after another.
    #[arg(long, default_value_t = 100)]
    count: u32,
    /// Seconds without progress (or for the others to come up) before giving up.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn run(a: &Args) -> Result<(), String> {
    let scheme = Scheme::parse(&a.scheme)
        .ok_or_else(|| format!("--scheme {}: host, nic, assisted or nic-cached", a.scheme))?;
    let algorithm = Algorithm::parse(&a.algorithm, a.k).ok_or_else(|| {
        format!(
            "--algorithm {} (k {}): separate, serial, binomial, binary or k-binomial (k >= 2)",
            a.algorithm, a.k
        )
    })?;
    let group = Group::new(a.group_id, a.port, a.group.clone()).map_err(|e| e.to_string())?;
    let timeout =
        Duration::try_from_secs_f64(a.timeout).map_err(|_| "--timeout: not a duration")?;
    let (nic, mut port) =
        bench::open_live_port(&a.cluster, a.node as u32, a.port, timeout, IdlePolicy::default())?;
    let cfg = McastConfig { group, scheme, algorithm, size: a.size, count: a.count, timeout };
    let r = mcast::run(&nic, &mut port, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    } else if r.rank == 0 {
        let mut l = r.completion_us.clone();
        l.sort_by(f64::total_cmp);
        let at = |q: f64| l.get(((l.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(f64::NAN);
        println!(
            "multicast {scheme} {algorithm}: {} B x {} to {} members, completion latency min {:.2} us, median {:.2} us, max {:.2} us",
            a.size,
            a.count,
            a.group.len() - 1,
            at(0.0),
            at(0.5),
            at(1.0)
        );
    } else {
        println!(
            "multicast member node {} (rank {}): {} messages, all intact, in order; relayed {}",
            r.node, r.rank, r.received, r.relayed
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multicast: {e}");
            ExitCode::FAILURE
        }
    }
}
