//! Simulated host programs: the [`HostApp`] trait the event core calls
//! back, and the [`HostCx`] it hands them (the node's backend, the host
//! clock, and a way to ask for a later call). A program never blocks: it
//! looks at its ports, acts, and returns; it is called again at start,
//! whenever its NIC wrote into host memory, and at times it asked for.
//!
//! Owns these two types and the host CPU cost model ([`HostCost`]: what
//! a driver operation costs, at the profile's prices); the core (`sim`)
//! schedules the calls.

use host_driver::backend::HostOp;

use crate::backend::SimBackend;
use nic_device::profile::{Profile, Rate};

/// The host CPU cost model: virtual ns a node's host CPU spends on a
/// driver operation, at a profile's `[host]` prices.
pub trait HostCost {
    /// Virtual ns a node's host CPU spends on `op`.
    fn host_cost_ns(&self, op: HostOp) -> u64;
}

impl HostCost for Profile {
    fn host_cost_ns(&self, op: HostOp) -> u64 {
        let h = &self.host;
        match op {
            HostOp::PostDescriptor => {
                h.post_fixed_ns + Rate::new(h.pio_bandwidth_bytes_per_s).ns(h.descriptor_bytes)
            }
            HostOp::EventFound => h.event_found_ns,
            HostOp::EventEmpty => h.event_empty_ns,
            HostOp::Touch(n) => Rate::new(h.touch_bandwidth_bytes_per_s).ns(n),
            HostOp::TreeWork(n) => h.tree_child_ns.saturating_mul(n as u64),
            HostOp::RelayStep(alg) => h.relay_step_ns.by_code(alg),
            HostOp::McastReceive => h.mcast_recv_ns,
        }
    }
}

/// A program running on one simulated host.
pub trait HostApp {
    /// Look at your ports and act. Called at start, whenever this node's
    /// NIC wrote into host memory, and at times asked for with
    /// [`HostCx::wake_at`].
    fn wake(&mut self, cx: &mut HostCx<'_>);
    /// Finished: the run may end once every program is done and nothing
    /// is in flight.
    fn done(&self) -> bool;
}

/// A host program that does nothing and never finishes: it keeps a
/// cluster running to the time a caller asks for (a cluster whose programs
/// are all done stops at once).
pub struct KeepAlive;

impl HostApp for KeepAlive {
    fn wake(&mut self, _cx: &mut HostCx<'_>) {}
    fn done(&self) -> bool {
        false
    }
}

/// What a program sees while it runs.
pub struct HostCx<'a> {
    pub(crate) node: usize,
    pub(crate) backend: &'a SimBackend,
    pub(crate) wake: Option<u64>,
}

impl<'a> HostCx<'a> {
    /// The node this program runs on.
    pub fn node(&self) -> usize {
        self.node
    }

    /// The node's backend (clone it to open a `host_driver` NIC).
    pub fn backend(&self) -> &'a SimBackend {
        self.backend
    }

    /// The host clock (ns): the event's time plus host CPU time charged
    /// since.
    pub fn now_ns(&self) -> u64 {
        self.backend.now_ns()
    }

    /// Be called again at virtual time `t_ns` (or when the host is next
    /// free after it). The earliest request of a turn wins.
    pub fn wake_at(&mut self, t_ns: u64) {
        self.wake = Some(self.wake.map_or(t_ns, |w| w.min(t_ns)));
    }

    /// Be called again `dt_ns` after the host clock's current time.
    pub fn wake_in(&mut self, dt_ns: u64) {
        self.wake_at(self.now_ns().saturating_add(dt_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanai4_posts_a_descriptor_in_about_1_5_us_of_host_time() {
        let l4 = Profile::load("lanai4-gm").unwrap();
        // PIO at 44 MB/s: a 64-byte descriptor is about 1.5 us of host time.
        let post = l4.host_cost_ns(HostOp::PostDescriptor);
        assert!((1_450..2_500).contains(&post), "{post}");
    }
}
