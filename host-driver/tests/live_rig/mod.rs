//! Setup for the driver's tests of the live path: a real-time cluster
//! from nic-emu (`RtCluster`, live backend) at a fresh temporary path,
//! served from this test process as the `nic-cluster` device process
//! would serve it: every NIC runs the real MCP natively over its mapped
//! SRAM file, with the DMA engines, the fabric and the supervisor (which
//! closes the ports of holders that died) on their own threads. The
//! driver reaches it only through the cluster directory, as a host
//! program in another process does.
//!
//! It has no NIC behaviour of its own. Dropping the cluster stops it and
//! removes its directory.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use host_driver::cluster::ClusterBackend;
use host_driver::nic_abi::map;
use host_driver::MappedFile;
use nic_emu::realtime::{RtCluster, RtConfig};

pub const SRAM: u64 = map::SRAM_MIN as u64;
/// Host memory per node: 2 MiB per port.
pub const HOST: u64 = 16 << 20;

/// What the NICs' configuration registers say (through the profile).
#[derive(Clone, Copy)]
pub struct Regs {
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub mtu: u32,
}

impl Default for Regs {
    fn default() -> Regs {
        Regs { send_tokens: 8, recv_tokens: 8, mtu: 4096 }
    }
}

/// A fresh directory name under the temp dir for test `tag`.
pub fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join("host-driver-tests").join(format!("{tag}-{}-{n}", std::process::id()))
}

/// The configuration of a live cluster of `nodes` for test `tag`: the
/// lanai9-gm profile with `r`, the smallest SRAM, `HOST` of host memory.
pub fn config(tag: &str, nodes: usize, r: Regs) -> RtConfig {
    let path = temp_path(tag);
    let mut cfg = RtConfig::new(&path.to_string_lossy(), ClusterBackend::Live, nodes);
    cfg.profile.firmware.send_tokens = r.send_tokens;
    cfg.profile.firmware.recv_tokens = r.recv_tokens;
    cfg.profile.nic.mtu = r.mtu;
    cfg.profile.nic.sram_bytes = SRAM as u32;
    cfg.sram_size = Some(SRAM);
    cfg.host_size = HOST;
    cfg
}

/// Start `cfg` and wait until every NIC's firmware runs.
pub fn start(cfg: RtConfig) -> RtCluster {
    let c = RtCluster::start(cfg).unwrap_or_else(|e| panic!("cluster start: {e}"));
    c.wait_running(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    c
}

/// A running live cluster of `nodes` for test `tag`.
pub fn cluster(tag: &str, nodes: usize, r: Regs) -> RtCluster {
    start(config(tag, nodes, r))
}

/// The cluster's directory as the string programs are given.
pub fn path_str(c: &RtCluster) -> String {
    c.path().to_string_lossy().into_owned()
}

/// Node `node`'s SRAM file, mapped with its port windows (as the device
/// process sees it; no port of the node changes hands while it lives).
pub fn sram(c: &RtCluster, node: u32) -> MappedFile {
    c.dir().map_sram_with_windows(node).expect("map the SRAM file")
}
