//! nic-emu: the emulated NIC and network, as one facade over the crates
//! that hold each idea (re-exported here under the paths users know), and
//! what is built on several of them.
//!
//! Below it:
//! - `nic-device` (nic-emu/device): the device model, one implementation
//!   for every backend: registers, RTC, the three DMA engines, NIC
//!   memory, timing profiles ([`profile`]), [`faults`], [`rng`], the
//!   [`firmware`] seam and stand-in firmwares ([`testfw`]).
//! - `nic-fabric` (nic-emu/fabric): links, crossbar switches, [`topology`],
//!   the event queue, the backends' shared cluster plan, [`stats`].
//! - `nic-sim` (nic-emu/sim): the deterministic discrete-event core
//!   ([`SimCluster`], [`sim`]), [`SimBackend`] (the sim's
//!   `host_driver::NicBackend`), simulated host programs ([`host`]).
//! - `nic-realtime` (nic-emu/realtime, here [`realtime`]): the device
//!   process of the live and qemu backends (a cluster directory served in
//!   wall-clock time).
//! - `nic-scenario` (nic-emu/scenario, here [`scenario`]): scenario files,
//!   their plan, runner and report.
//! - `host-brm` (host-driver/brm, here [`brm`]): the bandwidth resource
//!   manager.
//!
//! Here, because each uses several of those:
//! - [`brm::experiments`], [`brm::live`]: the rate-control experiments (as
//!   scenario text; on a running live or qemu cluster).
//! - [`mcast`]: multicast measurements (completion latency, root CPU,
//!   tree time) for the model and the report.
//! - [`calibrate`]: the sim's calibration programs and the rate-control
//!   calibration, which runs scenarios for the bandwidth manager.
//! - the `nic-cluster` binary: the device process (`nic-cluster run`)
//!   and the BRM master (`nic-cluster brm`) in one program.
//!
//! Owns no behaviour of its own beyond those; the device model and the
//! fabric below it never depend on the host driver.
#![forbid(unsafe_code)]

pub mod brm;
pub mod calibrate;
pub mod cli;
pub mod mcast;

pub use nic_realtime as realtime;
pub use nic_scenario as scenario;

pub use nic_device::mcast as mcast_model;
pub use nic_device::{costs, faults, firmware, memory, profile, rng, testfw};
pub use nic_fabric::fabric::Outage;
pub use nic_fabric::{plan, stats, topology};
pub use nic_sim::{backend, host, sim};

pub use backend::SimBackend;
pub use faults::Faults;
pub use firmware::{Firmware, IdleFirmware, Work};
pub use host::{HostApp, HostCost, HostCx, KeepAlive};
pub use nic_device::crc_ok;
pub use profile::{Profile, ProfileError};
pub use sim::{ClusterConfig, EmuError, RunLimit, RunOutcome, SimCluster};
pub use stats::{DeviceCounters, LinkEnd, LinkStats, NicStats, SimStats};
pub use topology::Topology;
