//! The bandwidth resource manager: the crate `host-brm` (master,
//! agents, messages, sockets, calibration) and its wiring into the sim
//! (`nic_sim::brm`), re-exported under their old paths, and what is
//! built above the BRM and the scenario runner:
//!
//! - [`experiments`]: the spec's experiments as scenario text (tests and
//!   `cargo xtask report rate-control`).
//! - [`live`]: the rate-control experiments on a running live or qemu
//!   cluster (traffic from host threads, rates from flow counters).

pub use host_brm::*;
pub use nic_sim::brm as sim;
pub use nic_sim::{SimBrm, SimTransport};

pub mod experiments;
pub mod live;
