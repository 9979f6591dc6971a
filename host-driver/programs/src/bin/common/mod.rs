//! What the `pingpong` and `stream` binaries share: the endpoint arguments
//! (cluster, this port, the peer, priority, timeout, checking, waiting,
//! output) and how they turn into driver settings.

use std::time::Duration;

use clap::{Args, ValueEnum};
use host_driver::{IdlePolicy, LiveBackend, Nic, Port, Priority};
use host_programs::bench::{self, Check};

// Each binary prints only some of these units.
#[allow(dead_code)]
pub mod units;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Prio {
    Low,
    High,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CheckArg {
    /// Every byte of every message (the sender writes every byte too).
    Full,
    /// Index and sender (first 8 bytes) of every message: order only.
    Index,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Wait {
    /// Spin, then yield, then sleep while idle (kind to a small machine).
    Adaptive,
    /// Spin only: lowest latency, one busy core per process.
    Spin,
}

/// The arguments both binaries take.
#[derive(Args, Debug)]
pub struct Endpoint {
    /// Cluster name (under $NIC_CLUSTER_DIR or /dev/shm/nic-clusters) or directory.
    #[arg(long)]
    pub cluster: String,
    /// This process's node.
    #[arg(long)]
    pub node: u16,
    /// This process's port.
    #[arg(long)]
    pub port: u8,
    /// The other end's node.
    #[arg(long)]
    pub peer: u16,
    /// The other end's port.
    #[arg(long)]
    pub peer_port: u8,
    #[arg(long, value_enum, default_value_t = Prio::Low)]
    pub priority: Prio,
    /// Seconds without progress (or for the peer to come up) before giving up.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    #[arg(long, value_enum, default_value_t = CheckArg::Full)]
    pub check: CheckArg,
    #[arg(long, value_enum, default_value_t = Wait::Adaptive)]
    pub wait: Wait,
    /// Run this process on these CPUs only (`1`, `0-3`, `0,2`): keep it
    /// off the cores the device threads were given (`nic-cluster run --cpus`).
    #[arg(long)]
    pub cpus: Option<host_driver::affinity::CpuList>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl Endpoint {
    pub fn timeout(&self) -> Result<Duration, String> {
        Duration::try_from_secs_f64(self.timeout)
            .map_err(|_| format!("--timeout {}: not a duration", self.timeout))
    }

    pub fn priority(&self) -> Priority {
        match self.priority {
            Prio::Low => Priority::Low,
            Prio::High => Priority::High,
        }
    }

    pub fn check(&self) -> Check {
        match self.check {
            CheckArg::Full => Check::Full,
            CheckArg::Index => Check::Index,
        }
    }

    /// Attach to this endpoint's port of the running cluster.
    /// Pin this process (`--cpus`), then attach its port.
    pub fn open(&self) -> Result<(Nic<LiveBackend>, Port<LiveBackend>), String> {
        if let Some(cpus) = &self.cpus {
            host_driver::affinity::pin_current_thread(&cpus.0)?;
        }
        let idle = match self.wait {
            Wait::Adaptive => IdlePolicy::default(),
            Wait::Spin => IdlePolicy::busy(),
        };
        bench::open_live_port(&self.cluster, self.node as u32, self.port, self.timeout()?, idle)
    }
}
