//! The live backend's own one-way latency, without the scheduler: an
//! in-process cluster (one device thread) and ONE host thread that plays
//! both ends of a ping-pong (node 0 port 1 <-> node 1 port 1), busy
//! polling. Two threads on two cores, no hand-off through the kernel:
//! what is left is the device path (MCP polls, DMA engines, fabric) and
//! the driver's PIO and event polling.
//!
//! ```text
//! cargo run --release -p nic-emu --example rt_inproc_latency -- [--count 20000] [--size 8]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use host_driver::cluster::ClusterBackend;
use host_driver::nic_abi::{class_max_len, size_class_for};
use host_driver::{
    AttachOptions, ClusterDir, Event, IdlePolicy, LiveBackend, Nic, PortOptions, Priority,
};
use nic_emu::realtime::{Backoff, RtCluster, RtConfig};

/// The live backend's own one-way latency, without the scheduler: an
/// in-process cluster (one device thread) and one host thread that plays
/// both ends of a ping-pong (node 0 port 1 <-> node 1 port 1), busy
/// polling.
#[derive(Parser)]
#[command(name = "rt_inproc_latency")]
struct Args {
    /// Round trips measured (after 1000 of warm-up).
    #[arg(long, default_value_t = 20000)]
    count: u64,
    /// Bytes per message.
    #[arg(long, default_value_t = 8)]
    size: u32,
}

fn main() {
    let Args { count, size } = Args::parse();
    let path = std::env::temp_dir().join(format!("rt-inproc-{}", std::process::id()));
    let mut cfg = RtConfig::new(&path.to_string_lossy(), ClusterBackend::Live, 2);
    cfg.backoff = Backoff::busy();
    let c = RtCluster::start(cfg).expect("cluster");
    let dir = ClusterDir::open_path(c.path()).unwrap();
    let opts = AttachOptions { idle: IdlePolicy::busy(), ..AttachOptions::default() };
    let open = |node| {
        let be = LiveBackend::attach_with(&dir, node, 1, &opts).unwrap();
        let nic = Nic::open_timeout(be, Duration::from_secs(5)).unwrap();
        let p = nic.open_port(1, PortOptions::default()).unwrap();
        (nic, p)
    };
    let (_na, mut a) = open(0);
    let (_nb, mut b) = open(1);
    let class = size_class_for(size as u64);
    let (sa, sb) = (a.alloc(size as u64).unwrap(), b.alloc(size as u64).unwrap());
    let (ra, rb) = (a.alloc(class_max_len(class)).unwrap(), b.alloc(class_max_len(class)).unwrap());
    let mut samples = Vec::with_capacity(count as usize);
    let wait_rx = |p: &mut host_driver::Port<LiveBackend>| loop {
        match p.poll() {
            Some(Event::Received { .. }) => return,
            Some(Event::Sent { .. } | Event::PortOpened { .. }) | None => {}
            Some(e) => panic!("{e:?}"),
        }
    };
    for i in 0..count + 1000 {
        a.provide_receive_buffer(&ra, class, Priority::Low, 0).unwrap();
        b.provide_receive_buffer(&rb, class, Priority::Low, 0).unwrap();
        let t = Instant::now();
        a.send(&sa, 0, size, class, Priority::Low, 1, 1, 0).unwrap();
        wait_rx(&mut b);
        b.send(&sb, 0, size, class, Priority::Low, 0, 1, 0).unwrap();
        wait_rx(&mut a);
        if i >= 1000 {
            samples.push(t.elapsed().as_nanos() as u64 / 2);
        }
        // Collect the send completions (their tokens).
        while a.send_tokens_free() < a.send_tokens() {
            a.poll();
        }
        while b.send_tokens_free() < b.send_tokens() {
            b.poll();
        }
    }
    samples.sort_unstable();
    let q = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    println!(
        "in-process live ping-pong, {size} B x {count}, one thread plays both hosts: one-way min {:.2} us, median {:.2} us, p99 {:.2} us",
        q(0.0),
        q(0.5),
        q(0.99)
    );
    drop((a, b));
    c.stop().unwrap();
}
