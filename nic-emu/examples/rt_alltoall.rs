//! One host process of an all-to-all exchange on a running live or qemu
//! cluster: run one per node. Each opens `--port` on its node, posts
//! receive buffers, waits at a file barrier until every process is ready,
//! then sends `--count` messages of `--size` bytes to the same port of
//! every other node while receiving as many from each. Every received
//! message is checked byte for byte (`host_programs::pattern`, stream =
//! sender * 1024 + receiver) and in order per sender; every send must
//! complete Ok. Exits 0 and prints one line when all is well, else exits
//! 1 with the reason on stderr.
//!
//! ```text
//! for n in 0 1 2 3; do
//!   rt_alltoall --cluster C --node $n --nodes 4 --port 2 --count 50 --size 2000 --barrier /tmp/b &
//! done; wait
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use host_driver::nic_abi::{class_max_len, size_class_for};
use host_driver::{DmaBuf, Event, IdlePolicy, NicBackend, Priority, SendStatus};
use host_programs::{bench, pattern};

/// One host process of an all-to-all exchange on a running live or qemu
/// cluster: run one per node, with the same --nodes, --port, --count,
/// --size and --barrier. Every received message is checked byte for byte
/// and in order per sender; every send must complete Ok. Exits 0 with one
/// line when all is well, else 1 with the reason on stderr.
#[derive(Parser)]
#[command(name = "rt_alltoall")]
struct Args {
    /// The cluster (name or directory).
    #[arg(long)]
    cluster: String,
    /// This process's node.
    #[arg(long = "node", value_name = "NODE")]
    me: u16,
    /// Nodes taking part (0..nodes).
    #[arg(long)]
    nodes: u16,
    /// The port every process opens on its node and sends to.
    #[arg(long, default_value_t = 2)]
    port: u8,
    /// Messages to each other node.
    #[arg(long, default_value_t = 50)]
    count: u32,
    /// Bytes per message.
    #[arg(long, default_value_t = 2000)]
    size: u32,
    /// A directory where each process marks itself ready before sending.
    #[arg(long)]
    barrier: PathBuf,
    /// Give up after this many seconds without progress.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    timeout: u64,
}

fn run(args: Args) -> Result<String, String> {
    let Args { cluster, me, nodes, port, count, size, barrier, timeout } = args;
    let timeout = Duration::from_secs(timeout);
    let (nic, mut p) =
        bench::open_live_port(&cluster, me as u32, port, timeout, IdlePolicy::default())?;
    let t0 = Instant::now();
    while !p.nic_serving() {
        if t0.elapsed() > timeout {
            return Err("the NIC never served the port".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let class = size_class_for(size as u64);
    let peers: Vec<u16> = (0..nodes).filter(|&n| n != me).collect();
    let expect = peers.len() as u64 * count as u64;
    // Receive buffers: as many as the receive tokens allow.
    let nrecv = p.recv_tokens().min(16) as usize;
    let mut recv: Vec<DmaBuf> = Vec::new();
    for _ in 0..nrecv {
        recv.push(p.alloc(class_max_len(class)).map_err(|e| e.to_string())?);
    }
    let mut posted = 0u64;
    for (i, b) in recv.iter().enumerate() {
        if posted < expect {
            p.provide_receive_buffer(b, class, Priority::Low, i as u64)
                .map_err(|e| e.to_string())?;
            posted += 1;
        }
    }
    // Send buffers: one per send token (at most 8 in flight).
    let nsend = p.send_tokens().min(8) as usize;
    let mut send: Vec<(DmaBuf, bool)> = Vec::new();
    for _ in 0..nsend {
        send.push((p.alloc(size as u64).map_err(|e| e.to_string())?, false));
    }
    // Barrier: everyone has its port open and its buffers posted.
    std::fs::create_dir_all(&barrier).map_err(|e| e.to_string())?;
    std::fs::write(barrier.join(format!("ready-{me}")), b"").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    while (0..nodes).any(|n| !barrier.join(format!("ready-{n}")).exists()) {
        if t0.elapsed() > timeout {
            return Err("barrier: not every node came up".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }

    let stream = |src: u16, dst: u16| src as u32 * 1024 + dst as u32;
    // Round-robin over peers: message k goes to peers[k % P], index k / P.
    let total = expect;
    let (mut next_send, mut sent_ok, mut got) = (0u64, 0u64, 0u64);
    let mut next_from = vec![0u32; nodes as usize];
    let mut data = vec![0u8; size as usize];
    let mut last = Instant::now();
    while sent_ok < total || got < expect {
        // Send while there is a free buffer.
        while next_send < total {
            let Some(i) = send.iter().position(|s| !s.1) else { break };
            let dst = peers[(next_send % peers.len() as u64) as usize];
            let idx = (next_send / peers.len() as u64) as u32;
            pattern::fill(&mut data, stream(me, dst), idx);
            p.write(&send[i].0, 0, &data).map_err(|e| e.to_string())?;
            p.send(&send[i].0, 0, size, class, Priority::Low, dst, port, i as u64)
                .map_err(|e| format!("send {next_send}: {e}"))?;
            send[i].1 = true;
            next_send += 1;
        }
        let ev = match p.poll() {
            Some(ev) => ev,
            None => {
                if last.elapsed() > timeout {
                    return Err(format!(
                        "no progress for {timeout:?}: sent {sent_ok}/{total}, received {got}/{expect}"
                    ));
                }
                p.backend().idle_wait();
                continue;
            }
        };
        last = Instant::now();
        match ev {
            Event::Sent { tag, status, .. } => {
                if status != SendStatus::Ok {
                    return Err(format!("a send completed with {status:?}"));
                }
                send[tag as usize].1 = false;
                sent_ok += 1;
            }
            Event::Received { node, len, tag, .. } => {
                let b = recv[tag as usize];
                if len != size {
                    return Err(format!("from node {node}: {len} bytes, expected {size}"));
                }
                p.read(&b, 0, &mut data).map_err(|e| e.to_string())?;
                let want = next_from[node as usize];
                if let Some((at, e, f)) = pattern::first_mismatch(&data, stream(node, me), want) {
                    return Err(format!(
                        "from node {node}: message {want} differs at byte {at} (expected {e:#x}, found {f:#x}; claims index {:?})",
                        pattern::claimed_index(&data)
                    ));
                }
                next_from[node as usize] += 1;
                got += 1;
                if posted < expect {
                    p.provide_receive_buffer(&b, class, Priority::Low, tag)
                        .map_err(|e| e.to_string())?;
                    posted += 1;
                }
            }
            Event::PortOpened { .. } => {}
            other => return Err(format!("unexpected event {other:?}")),
        }
    }
    drop(nic);
    Ok(format!(
        "node {me}: sent {total} and received {expect} messages of {size} B, all content checked, in {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    ))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rt_alltoall: error: {e}");
            ExitCode::FAILURE
        }
    }
}
