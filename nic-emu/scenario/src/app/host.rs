//! How a node's program reaches its NIC ([`NodeHost`]): a backend for
//! each port it opens and the host clock. [`SimHost`] is the sim's; the
//! real-time one is in realtime.rs. [`NoBrm`] stands for the bandwidth
//! manager on backends that have none.

use host_brm::BrmTransport;
use host_driver::{DriverError, NicBackend};

use nic_sim::SimBackend;

/// How a node's program reaches its NIC: a backend for each port it
/// opens, and the host clock.
pub trait NodeHost {
    type B: NicBackend;
    /// A backend not tied to one port, to open the NIC through and every
    /// port from (the sim's); None when each port needs its own.
    fn shared(&self) -> Option<Self::B>;
    /// A backend that serves port `port` (real time: attached to it).
    fn attach(&mut self, port: u8) -> Result<Self::B, DriverError>;
    /// Host time in ns on the run's clock.
    fn now_ns(&self) -> u64;
    /// Every port of the cluster is open: the traffic starts now (a
    /// real-time clock may start here; the sim's runs from the start).
    fn traffic_starts(&mut self) {}
    /// The clock a trace puts this program's calls on (ns): the run's
    /// clock unless the host keeps another for traces.
    fn trace_ns(&self) -> u64 {
        self.now_ns()
    }
    /// Host CPU time this node has been busy so far (ns), where the
    /// backend keeps such a clock (the sim's charged work); None elsewhere.
    fn busy_ns(&self) -> Option<u64> {
        None
    }
    /// This node's NIC CPU time busy so far (ns), where the backend keeps
    /// such a clock (the sim's priced passes); None elsewhere.
    fn nic_busy_ns(&self) -> Option<u64> {
        None
    }
    /// Call `f` on `len` bytes of this host's memory at bus address `bus`
    /// in place, where the program reaches it so (the sim): a message is
    /// then filled or checked where it lies, not through a copy. False
    /// when not done (the program copies through the driver instead).
    fn in_place(&self, _bus: u64, _len: usize, _f: &mut dyn FnMut(&[u8])) -> bool {
        false
    }
    /// `in_place`, to write.
    fn in_place_mut(&self, _bus: u64, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> bool {
        false
    }
}

/// The sim: every port of a node goes through the node's one backend,
/// and time is virtual.
pub struct SimHost(pub SimBackend);

impl NodeHost for SimHost {
    type B = SimBackend;
    fn shared(&self) -> Option<SimBackend> {
        Some(self.0.clone())
    }
    fn attach(&mut self, _port: u8) -> Result<SimBackend, DriverError> {
        Ok(self.0.clone())
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn busy_ns(&self) -> Option<u64> {
        Some(self.0.host_busy_ns())
    }
    fn nic_busy_ns(&self) -> Option<u64> {
        Some(self.0.nic_busy_ns())
    }
    fn in_place(&self, bus: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        self.0.with_host(bus, len, f)
    }
    fn in_place_mut(&self, bus: u64, len: usize, f: &mut dyn FnMut(&mut [u8])) -> bool {
        self.0.with_host_mut(bus, len, f)
    }
}

/// A bandwidth-manager transport for runs without a manager: every call
/// fails (a scenario that needs one is refused before such a run).
pub struct NoBrm;

impl BrmTransport for NoBrm {
    fn call(&mut self, _request: &[u8]) -> Result<Vec<u8>, String> {
        Err("no bandwidth manager on this backend".into())
    }
}
