//! The bandwidth resource manager: the crate `host-brm` (master,
//! agents, messages, sockets, calibration, the sim's wiring), re-exported
//! under its old path, and what is built above it and the scenario
//! runner:
//!
//! - [`experiments`]: the spec's experiments as scenario text (tests and
//!   `cargo xtask report rate-control`).
//! - [`live`]: the rate-control experiments on a running live or qemu
//!   cluster (traffic from host threads, rates from flow counters).

pub use host_brm::*;

pub mod experiments;
pub mod live;
