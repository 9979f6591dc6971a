//! The bandwidth resource manager (BRM) of ../shared/spec/rate-control.md
//! on the simulator: a master ([`master::Master`]: admission by the
//! spec's three criteria over the fabric's real routes, IDT = T * Bmax /
//! B, best-effort shares) and one agent per node
//! (`host_driver::brm::Agent`, owning that NIC's flow table), wired as
//! components of one [`SimCluster`](crate::SimCluster) by [`SimBrm`].
//! Programs reach the master through `host_driver::brm::BrmClient` over
//! [`SimTransport`]; every message between program, master and agents
//! crosses as postcard bytes, so live and qemu clusters can carry the same
//! messages between processes.
//!
//! - [`calibration`]: T, Bmax, link capacity and the node-capacity curve
//!   a profile was measured to have (`cargo xtask calibrate`).
//! - [`experiments`]: the spec's experiments as scenario text (tests and
//!   `cargo xtask report rate-control`).
//! - [`master`]: the decisions; pure, unit-tested.
//! - [`sim`]: the wiring into the simulator.
//! - [`live`]: the rate-control experiments on a running live or qemu
//!   cluster (traffic from host threads, rates from flow counters).
//! - [`server`]: the master as a process of a live or qemu cluster
//!   (`nic-cluster brm`), over Unix sockets; its agents live in the
//!   device process (`crate::realtime`).

pub mod calibration;
pub mod experiments;
pub mod live;
pub mod master;
pub mod server;
pub mod sim;

pub use calibration::{Calibration, CurvePoint, SweepPoint};
pub use master::{AgentLinks, Managed, Master};
pub use sim::{SimBrm, SimTransport};
