//! nic-sim: the deterministic discrete-event simulator. Virtual time in
//! ns, one thread, any number of nodes; the same configuration gives the
//! same run, bit for bit.
//!
//! - [`sim`]: the core ([`SimCluster`]): NIC CPUs running firmware
//!   (`nic_device::firmware`, the MCP by default) at the profile's cycle
//!   prices, the device model's engines (`sim_nic`) and the fabric on one
//!   event queue, and simulated host programs.
//! - [`backend`]: [`SimBackend`], the sim's `host_driver::NicBackend`
//!   (PIO on the heap SRAM, host memory, doorbells, the host clock).
//! - [`host`]: simulated host programs ([`HostApp`], [`HostCx`]) and the
//!   host CPU cost model ([`HostCost`]).
//! - [`brm`]: the bandwidth resource manager's master and agents
//!   (`host-brm`) as components of a cluster ([`SimBrm`]), every message
//!   crossing as postcard bytes at the requester's virtual time.
//! - [`calibrate`]: the two measurements the timing profiles are
//!   calibrated against (ping-pong latency, stream bandwidth).
//!
//! Owns virtual time and every scheduling decision. May touch the device
//! model, the fabric, the host driver (as its backend and as the API
//! simulated programs use) and the BRM (as a service simulated programs
//! call); never wall-clock time, files or threads.
#![forbid(unsafe_code)]

pub mod backend;
pub mod brm;
pub mod calibrate;
pub mod host;
pub mod sim;
pub(crate) mod sim_nic;
pub mod trace;

pub use backend::SimBackend;
pub use brm::{SimBrm, SimTransport};
pub use host::{HostApp, HostCost, HostCx, KeepAlive};
pub use sim::{ClusterConfig, EmuError, NicCycles, RunLimit, RunOutcome, SimCluster};
