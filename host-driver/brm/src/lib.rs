//! host-brm: the bandwidth resource manager (BRM) of
//! docs/rate-control.md, host-side system software (as GM's
//! mapper is): a master that admits flows by the spec's three criteria
//! over the fabric's real routes (IDT = T * Bmax / B, best-effort
//! shares), and one agent per node that installs IDTs in its NIC's flow
//! table.
//!
//! - [`protocol`]: the messages (program <-> master, master <-> agent) as
//!   postcard bytes, [`BrmClient`] and [`Agent`]; transport-independent.
//! - [`socket`]: how those bytes cross Unix sockets in a live or qemu
//!   cluster (frames, timeouts, serving a connection).
//! - [`calibration`]: T, Bmax, link capacity and the node-capacity curve
//!   a profile was measured to have (`nic-emu/profiles/*.calibration.toml`).
//! - [`master`]: the decisions; pure, unit-tested.
//! - [`server`]: the master as a process (`nic-cluster brm`).
//!
//! Owns the BRM's decisions and messages. May touch a NIC only through
//! the host driver (its flow table); never the device model's internals
//! or the simulator (the sim wires the master and agents into a
//! `SimCluster` itself: `nic_sim::brm`). The
//! agents' sockets in a real-time cluster belong to the device process
//! (`nic-realtime`), which holds the privileged SRAM mapping.
#![forbid(unsafe_code)]

pub mod calibration;
pub mod master;
pub mod protocol;
pub mod server;
pub mod socket;

pub use calibration::{Calibration, CurvePoint, SweepPoint};
pub use master::{AgentLinks, Managed, Master};
pub use protocol::*;
