//! Setup for the driver's tests over the simulator: a cluster of NICs
//! running the real MCP on nic-emu's device model and event core, the
//! `SimBackend` of the node under test, virtual time run on demand, and
//! read-only looks at what the driver wrote into SRAM (page tables).
//!
//! It has no NIC behaviour of its own: whatever a test sees the NIC do,
//! the MCP did. A test that wants the NIC to do nothing for a while simply
//! does not run the cluster.
#![allow(dead_code)]

use host_driver::nic_abi::map;
use host_driver::nic_abi::page_table::{self, PTE_SIZE};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::PAGE_SIZE;
use host_driver::{HostOp, Nic, NicBackend};
use nic_emu::{
    ClusterConfig, HostCost, KeepAlive, Profile, RunLimit, SimBackend, SimCluster, Topology,
};

/// Most DMA-able host memory per node.
pub const HOST_MEM: u64 = 8 << 20;

/// Virtual time one `step` lets pass: ample for the NICs of one switch
/// to take what was posted, move it, and write the events.
pub const STEP_NS: u64 = 2_000_000;

/// The cluster and what its registers say (through the profile).
#[derive(Clone, Copy)]
pub struct Config {
    /// The node under test.
    pub node: usize,
    pub nodes: usize,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub mtu: u32,
    pub rtc_hz: u64,
    /// The firmware's send timeout, if not the profile's.
    pub send_timeout_ns: Option<u64>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            node: 2,
            nodes: 4,
            send_tokens: 6,
            recv_tokens: 5,
            mtu: 4096,
            rtc_hz: 500_000_000,
            send_timeout_ns: None,
        }
    }
}

pub struct Rig {
    pub c: SimCluster,
    pub node: usize,
}

impl Rig {
    /// A star of `cfg.nodes` NICs (the lanai9-gm profile with `cfg`'s
    /// clock, MTU, tokens, the smallest SRAM and `HOST_MEM` of host
    /// memory), every MCP booted.
    pub fn new(cfg: Config) -> Rig {
        Rig::with_profile(cfg, "lanai9-gm")
    }

    /// The same with another built-in profile's timing.
    pub fn with_profile(cfg: Config, profile: &str) -> Rig {
        let mut p = Profile::load(profile).expect("built-in profile");
        p.nic.rtc_hz = cfg.rtc_hz;
        p.nic.sram_bytes = map::SRAM_MIN;
        p.nic.mtu = cfg.mtu;
        p.firmware.send_tokens = cfg.send_tokens;
        p.firmware.recv_tokens = cfg.recv_tokens;
        p.host.memory_bytes = HOST_MEM;
        if let Some(t) = cfg.send_timeout_ns {
            p.firmware.send_timeout_ns = t;
        }
        let mut c =
            SimCluster::new(ClusterConfig::new(p, cfg.nodes, Topology::Star)).expect("cluster");
        c.spawn(0, Box::new(KeepAlive));
        Rig { c, node: cfg.node }
    }

    /// The node under test's backend.
    pub fn backend(&self) -> SimBackend {
        self.backend_of(self.node)
    }

    /// Node `n`'s backend, its host clock brought up to now.
    pub fn backend_of(&self, n: usize) -> SimBackend {
        let be = self.c.backend(n);
        be.advance_to(self.c.now_ns());
        be
    }

    /// The node under test's NIC, opened by the driver.
    pub fn nic(&self) -> Nic<SimBackend> {
        self.nic_of(self.node)
    }

    pub fn nic_of(&self, n: usize) -> Nic<SimBackend> {
        Nic::open(self.backend_of(n)).expect("open NIC")
    }

    /// Let the NICs work for `STEP_NS` of virtual time.
    pub fn step(&mut self) {
        self.run_for(STEP_NS);
    }

    /// Let `ns` of virtual time pass, then bring every host clock up to it
    /// (so what a test posts next rings the doorbell now, not in the past).
    pub fn run_for(&mut self, ns: u64) {
        let t = self.c.now_ns() + ns;
        self.c.run(RunLimit::Until(t));
        for n in 0..self.c.nodes() {
            self.c.backend(n).advance_to(self.c.now_ns());
        }
    }

    /// What the profile charges the host for `op` (ns).
    pub fn price(&self, op: HostOp) -> u64 {
        self.c.profile().host_cost_ns(op)
    }
}

pub fn u32_at(be: &impl NicBackend, off: u32) -> u32 {
    be.sram_load_u32(off)
}

/// The `HOST_DOORBELL` register.
pub fn doorbells(be: &impl NicBackend) -> u32 {
    be.sram_load_u32(reg(regs::HOST_DOORBELL))
}

/// Port `port`'s page table in host memory: (bus address, first virtual
/// page, entries), as the NIC's registers say.
pub fn table_of(be: &impl NicBackend, port: u8) -> (u64, u64, u64) {
    let p = port as usize;
    let bus = be.sram_load_u64(reg(regs::port_pt_bus(p)));
    let first = be.sram_load_u64(reg(regs::port_pt_vbase(p))) / PAGE_SIZE;
    let entries = be.sram_load_u64(reg(regs::port_slice_len(p))) / PAGE_SIZE;
    (bus, first, entries)
}

/// Page-table entry `i` of `port`, as stored in host memory.
pub fn pte(be: &impl NicBackend, port: u8, i: u64) -> u64 {
    let (bus, _, _) = table_of(be, port);
    let mut b = [0u8; 8];
    be.host_read(bus + i * PTE_SIZE as u64, &mut b);
    u64::from_le_bytes(b)
}

/// Translate through `port`'s page table (what the NIC reads).
pub fn lookup(be: &impl NicBackend, port: u8, vpn: u64) -> Option<u64> {
    let (_, first, entries) = table_of(be, port);
    let i = vpn.checked_sub(first).filter(|&i| i < entries)?;
    page_table::pte_bus_page(pte(be, port, i))
}

/// Valid entries in `port`'s table.
pub fn pte_count(be: &impl NicBackend, port: u8) -> u64 {
    let (bus, _, entries) = table_of(be, port);
    let mut b = vec![0u8; entries as usize * 8];
    be.host_read(bus, &mut b);
    b.chunks(8).filter(|e| e[0] & 1 != 0).count() as u64
}

/// Is `[bus, bus + len)` free host memory at the bottom of what the
/// allocator has (its first fit lands there)? Allocates and gives back.
pub fn first_fit_is(be: &impl NicBackend, bus: u64, len: u64) -> bool {
    let got = be.alloc_dma(len);
    if let Some(b) = got {
        be.free_dma(b, len);
    }
    got == Some(bus)
}
