//! Simulator speed: a 16-node all-to-all stream on one crossbar.
//!
//! `cargo run --release -p nic-emu --example bench -- [pump|mcp] [bytes] [count] [profile]`
//! (`--help` says more)
//!
//! - `pump`: the device model and fabric alone (`testfw::PumpFirmware`:
//!   every node sends `count` packets of `bytes` round-robin to the others
//!   and recycles its receive buffers).
//! - `mcp`: the whole stack: the MCP on every NIC and a host program per
//!   node (host driver) sending `count` messages of `bytes` round-robin to
//!   the other nodes while receiving theirs.
//!
//! Prints simulated packets (put on links by NICs, acks included) per
//! wall-clock second and per CPU-second of this process. `LIMIT_MS=n`
//! stops at n ms of virtual time; `VERBOSE=1` prints every NIC's counters.

use clap::{Parser, ValueEnum};
use host_driver::{DmaBuf, Event, Nic, Port, PortOptions, Priority};
use nic_abi::size_class_for;
use nic_emu::testfw::{Dest, PumpFirmware};
use nic_emu::{
    ClusterConfig, HostApp, HostCx, Profile, RunLimit, SimBackend, SimCluster, Topology,
};

struct AllToAll {
    be: SimBackend,
    port: Option<(Nic<SimBackend>, Port<SimBackend>)>,
    tx: Option<DmaBuf>,
    rx: Vec<DmaBuf>,
    node: u16,
    nodes: u16,
    bytes: u32,
    count: u64,
    posted: u64,
    completed: u64,
    received: u64,
    window: u64,
}

impl HostApp for AllToAll {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        let class = size_class_for(self.bytes.max(1) as u64);
        if self.port.is_none() {
            let nic = Nic::open(self.be.clone()).unwrap();
            let mut port = nic.open_port(0, PortOptions::default()).unwrap();
            self.tx = Some(port.alloc(1 << class).unwrap());
            for i in 0..port.recv_tokens() {
                let b = port.alloc(1 << class).unwrap();
                port.provide_receive_buffer(&b, class, Priority::Low, i as u64).unwrap();
                self.rx.push(b);
            }
            self.window = port.send_tokens() as u64;
            self.port = Some((nic, port));
            // Let every node open its port before traffic starts.
            cx.wake_at(200_000);
            return;
        }
        if cx.now_ns() < 200_000 {
            cx.wake_at(200_000);
            return;
        }
        let (_, port) = self.port.as_mut().unwrap();
        loop {
            while self.posted < self.count && self.posted - self.completed < self.window {
                let k = self.posted % (self.nodes as u64 - 1);
                let dst = (self.node as u64 + 1 + k) % self.nodes as u64;
                port.send(&self.tx.unwrap(), 0, self.bytes, class, Priority::Low, dst as u16, 0, 0)
                    .unwrap();
                self.posted += 1;
            }
            match port.poll() {
                Some(Event::Sent { .. }) => self.completed += 1,
                Some(Event::Received { tag, .. }) => {
                    self.received += 1;
                    port.provide_receive_buffer(&self.rx[tag as usize], class, Priority::Low, tag)
                        .unwrap();
                }
                Some(_) => {}
                None => break,
            }
        }
    }

    fn done(&self) -> bool {
        self.completed >= self.count && self.received >= self.count
    }
}

/// What runs on the 16 nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// The device model and fabric alone: every node sends `count`
    /// packets of `bytes` round-robin to the others and recycles its
    /// receive buffers.
    Pump,
    /// The whole stack: the MCP on every NIC and a host program per node
    /// sending `count` messages of `bytes` round-robin to the other nodes
    /// while receiving theirs.
    Mcp,
}

/// Simulator speed: a 16-node all-to-all stream on one crossbar.
///
/// Prints simulated packets (put on links by NICs, acks included) per
/// wall-clock second and per CPU-second of this process. Environment:
/// LIMIT_MS=n stops at n ms of virtual time; VERBOSE=1 prints every NIC's
/// counters.
#[derive(Parser)]
#[command(name = "bench")]
struct Args {
    /// What runs on the nodes.
    #[arg(value_enum, default_value = "pump")]
    mode: Mode,
    /// Bytes per packet (pump, at most 4096) or per message (mcp).
    #[arg(default_value_t = 64)]
    bytes: u32,
    /// Packets or messages each node sends.
    #[arg(default_value_t = 100_000)]
    count: u64,
    /// Timing profile.
    #[arg(default_value = "lanai9-gm")]
    profile: String,
}

fn main() {
    let Args { mode, bytes, count, profile } = Args::parse();
    let nodes = 16;
    let p = Profile::load(&profile).unwrap();
    let cfg = ClusterConfig::new(p, nodes, Topology::Star);
    let mut c = match mode {
        Mode::Pump => SimCluster::with_firmware(cfg, move |_| {
            Box::new(PumpFirmware::new(count, bytes.min(4096) as u16, Dest::AllOthers))
        })
        .unwrap(),
        Mode::Mcp => {
            let mut c = SimCluster::new(cfg).unwrap();
            // Each node sends `count` messages round-robin over its 15
            // peers, so it also receives `count` (count a multiple of 15).
            let count = count / (nodes as u64 - 1) * (nodes as u64 - 1);
            for n in 0..nodes {
                let app = AllToAll {
                    be: c.backend(n),
                    port: None,
                    tx: None,
                    rx: Vec::new(),
                    node: n as u16,
                    nodes: nodes as u16,
                    bytes,
                    count,
                    posted: 0,
                    completed: 0,
                    received: 0,
                    window: 1,
                };
                c.spawn(n, Box::new(app));
            }
            c
        }
    };
    let mode = match mode {
        Mode::Pump => "pump",
        Mode::Mcp => "mcp",
    };
    let limit = std::env::var("LIMIT_MS").ok().and_then(|v| v.parse::<u64>().ok());
    let cpu0 = cpu_seconds();
    let out = c.run(limit.map_or(RunLimit::Unlimited, |ms| RunLimit::Until(ms * 1_000_000)));
    let cpu = cpu_seconds() - cpu0;
    if std::env::var("VERBOSE").is_ok() {
        for n in 0..nodes {
            println!("{:?}", c.nic_stats(n));
        }
    }
    let s = c.sim_stats();
    let polls: u64 = (0..nodes).map(|n| c.nic_stats(n).nic_polls).sum();
    println!(
        "{mode} {profile} {nodes} nodes all-to-all, {bytes} B x {count}/node: {out}; simulated {:.3} ms; \
         {} packets, {} hops, {} events, {polls} polls; wall {:.0} ms => {:.2} M packets/s ({:.0} ns/packet, {:.2} M events/s)",
        s.end_ns as f64 / 1e6,
        s.packets,
        s.hops,
        s.events,
        s.wall_ms,
        s.packets_per_wall_s() / 1e6,
        s.wall_ms * 1e6 / s.packets as f64,
        s.events as f64 / s.wall_ms / 1e3,
    );
    if cpu > 0.0 {
        println!(
            "  process CPU time {:.0} ms => {:.2} M packets per CPU-second (wall time counts other load too)",
            cpu * 1e3,
            s.packets as f64 / cpu / 1e6
        );
    }
}

/// User + system CPU time of this process (Linux /proc; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields overall, in clock ticks (100 per second).
    let Some(rest) = stat.rsplit(')').next() else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
