//! nic-emu: the emulated NIC and network.
//!
//! - [`profile`]: timing profiles as data (`profiles/*.toml`, embedded).
//! - [`topology`], `fabric`, [`faults`]: links, crossbar switches with
//!   source routing and wormhole timing, seeded fault injection; the
//!   wiring and link entry are shared with the real-time fabric.
//! - `device`: the device model, one implementation for every backend
//!   (register reset, RTC, the three DMA engines over a node's memories);
//!   `sim_nic` runs it in virtual time over [`memory`] (SRAM and host
//!   memory as heap buffers), `realtime` in wall-clock time over file
//!   mappings.
//! - [`sim`], `event`: the deterministic discrete-event core
//!   ([`SimCluster`]) that runs firmware ([`firmware::Firmware`], the MCP by
//!   default) and simulated host programs ([`HostApp`]) through
//!   [`SimBackend`], the sim's `host_driver::NicBackend`.
//! - [`testfw`]: stand-in firmwares that exercise the device model and
//!   the fabric without the MCP (tests, fabric benchmark).
//! - [`scenario`]: scenario files and their runner.
//! - [`brm`]: the bandwidth resource manager (rate control): admission
//!   by the spec's three criteria, best-effort shares, IDTs to the NICs.
//! - [`realtime`]: the device process of the live and qemu backends (a
//!   cluster directory served in wall-clock time; the `nic-cluster`
//!   binary).
#![forbid(unsafe_code)]

pub mod backend;
pub mod brm;
pub mod calibrate;
pub mod host;
pub mod realtime;
pub mod scenario;
pub mod sim;
pub(crate) mod sim_nic;

use nic_device::device;
pub use nic_device::{faults, firmware, memory, profile, rng, testfw};
use nic_fabric::{event, fabric};
pub use nic_fabric::{stats, topology};

pub use backend::SimBackend;
pub use device::crc_ok;
pub use faults::Faults;
pub use firmware::{Firmware, IdleFirmware, Work};
pub use host::{HostApp, HostCost, HostCx};
pub use profile::{Profile, ProfileError};
pub use sim::{ClusterConfig, EmuError, RunLimit, RunOutcome, SimCluster};
pub use stats::{DeviceCounters, LinkEnd, LinkStats, NicStats, SimStats};
pub use topology::Topology;
