//! nic-device: the emulated NIC itself, one implementation for every
//! backend (the sim in virtual time, the real-time device process in
//! wall-clock time).
//!
//! - [`device`]: register reset, the RTC, the three DMA engines (host-DMA,
//!   send-DMA, receive-DMA) over a node's memories ([`device::NicMem`]),
//!   the device counters.
//! - [`memory`]: SRAM and host memory as heap buffers (the sim's; the
//!   real-time backends map files instead).
//! - [`profile`]: timing profiles as data (`nic-emu/profiles/*.toml`,
//!   embedded; the directory stays at nic-emu/ because the bandwidth
//!   manager's calibrations live beside them).
//! - [`faults`], [`rng`]: seeded fault injection and its generator.
//! - [`firmware`]: the seam to the program the NIC CPU runs (the MCP by
//!   default) and [`testfw`], stand-in firmwares for tests and benchmarks.
//!
//! Owns the device's behaviour and its figures. May touch nic-abi (the
//! layouts) and the MCP (as the default firmware); never the host driver,
//! the fabric or any scheduler of time: callers say when things happen.
#![forbid(unsafe_code)]

pub mod costs;
pub mod device;
pub mod faults;
pub mod firmware;
pub mod mcast;
pub mod memory;
pub mod profile;
pub mod rng;
pub mod testfw;

pub use device::{crc_ok, DeviceCounters};
pub use faults::Faults;
pub use firmware::{Firmware, IdleFirmware, Work};
pub use profile::{Profile, ProfileError};
