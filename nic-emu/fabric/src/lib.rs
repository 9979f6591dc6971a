//! nic-fabric: the emulated network between NICs.
//!
//! - [`fabric`]: directed links and crossbar switches with source routing,
//!   cut-through (wormhole) timing, backpressure and fault injection; the
//!   wiring and the link entry are shared with the real-time fabric.
//! - [`topology`]: how nodes and switches are laid out, and the source
//!   route between two nodes.
//! - [`event`]: the discrete-event queue the sim's fabric schedules its
//!   own events on (the sim's core uses the same queue).
//! - [`plan`]: what every backend derives from a cluster configuration
//!   (wiring, send timeout, routes) and [`EmuError`].
//! - [`stats`]: what a run reports, per link and per NIC.
//!
//! Owns links, switches and packets in flight. May touch the device model
//! (profiles, faults, counters) and nic-abi; never the host driver, and
//! never a NIC's memory: the receiving side is the caller's.
#![forbid(unsafe_code)]

pub mod capture;
pub mod event;
pub mod fabric;
pub mod linklog;
pub mod plan;
pub mod stats;
pub mod topology;

pub use plan::EmuError;
pub use stats::{LinkEnd, LinkStats, NicStats};
pub use topology::Topology;
