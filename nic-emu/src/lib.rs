//! nic-emu: the emulated NIC and network, as one facade over the crates
//! that hold each idea, and what is still built on all of them.
//!
//! Below it (re-exported here under their old paths):
//! - `nic-device` (nic-emu/device): the device model, one implementation
//!   for every backend: registers, RTC, the three DMA engines, NIC
//!   memory, timing profiles ([`profile`]), [`faults`], [`rng`], the
//!   [`firmware`] seam and stand-in firmwares ([`testfw`]).
//! - `nic-fabric` (nic-emu/fabric): links, crossbar switches, [`topology`],
//!   the event queue, the backends' shared cluster plan, [`stats`].
//! - `nic-sim` (nic-emu/sim): the deterministic discrete-event core
//!   ([`SimCluster`], [`sim`]), [`SimBackend`] (the sim's
//!   `host_driver::NicBackend`), simulated host programs ([`host`]).
//!
//! Here, until they become crates of their own:
//! - [`scenario`]: scenario files and their runner.
//! - [`brm`]: the bandwidth resource manager (rate control): admission
//!   by the spec's three criteria, best-effort shares, IDTs to the NICs.
//! - [`realtime`]: the device process of the live and qemu backends (a
//!   cluster directory served in wall-clock time; the `nic-cluster`
//!   binary).
//! - [`calibrate`]: the sim's calibration programs and the rate-control
//!   calibration, which runs scenarios for the bandwidth manager.
#![forbid(unsafe_code)]

pub mod brm;
pub mod calibrate;
pub mod realtime;
pub mod scenario;

pub use nic_device::{faults, firmware, memory, profile, rng, testfw};
pub use nic_fabric::{stats, topology};
pub use nic_sim::{backend, host, sim};

pub use backend::SimBackend;
pub use faults::Faults;
pub use firmware::{Firmware, IdleFirmware, Work};
pub use host::{HostApp, HostCost, HostCx};
pub use nic_device::crc_ok;
pub use profile::{Profile, ProfileError};
pub use sim::{ClusterConfig, EmuError, RunLimit, RunOutcome, SimCluster};
pub use stats::{DeviceCounters, LinkEnd, LinkStats, NicStats, SimStats};
pub use topology::Topology;
