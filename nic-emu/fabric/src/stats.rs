//! What a run reports: the event core's totals ([`SimStats`]) and, per
//! NIC, the firmware's STATS block read from SRAM together with the
//! device model's own counters ([`NicStats`]). Plain data; owns nothing.

use nic_abi::stats::{Stat, STAT_COUNT};

pub use crate::fabric::{LinkEnd, LinkStats};
pub use nic_device::device::DeviceCounters;

/// Totals of a simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SimStats {
    /// Virtual time at the end of the last `run` (ns).
    pub end_ns: u64,
    /// Events handled.
    pub events: u64,
    /// Packets NICs put on their links (each packet once).
    pub packets: u64,
    /// Link traversals (a packet crossing k links counts k).
    pub hops: u64,
    /// Wall-clock time spent in `run` (ms): the only figure that is not a
    /// function of the configuration.
    pub wall_ms: f64,
}

impl SimStats {
    /// Simulated packets per wall-clock second.
    pub fn packets_per_wall_s(&self) -> f64 {
        if self.wall_ms > 0.0 {
            self.packets as f64 / (self.wall_ms / 1e3)
        } else {
            0.0
        }
    }
}

/// One NIC's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct NicStats {
    pub node: usize,
    /// The firmware's STATS block, indexed by `nic_abi::stats::Stat as usize`.
    pub fw: [u64; STAT_COUNT],
    /// The `FW_STATUS` register.
    pub fw_status: u32,
    /// The DMA engines' counters.
    pub device: DeviceCounters,
    /// Packets this NIC sent that fault injection dropped / corrupted /
    /// duplicated somewhere in the fabric.
    pub fault_drops: u64,
    pub fault_corrupts: u64,
    pub fault_dups: u64,
    /// Packets this NIC sent that a switch dropped: blocked too long, or a
    /// route byte naming no connected port.
    pub link_blocked_drops: u64,
    pub link_bad_routes: u64,
    /// Firmware main-loop passes the core ran, and NIC CPU time they cost.
    pub nic_polls: u64,
    pub nic_busy_ns: u64,
    /// The work those passes reported, summed (what the NIC CPU was
    /// charged for, unit by unit).
    pub nic_work: nic_device::firmware::Work,
    /// Host CPU time charged through the backend (ns).
    pub host_busy_ns: u64,
    /// Out-of-range SRAM accesses by the firmware.
    pub hw_faults: u64,
}

impl NicStats {
    /// One counter of the firmware's STATS block.
    pub fn stat(&self, s: Stat) -> u64 {
        self.fw[s as usize]
    }
}
