//! host-programs: what is built on the host driver to measure it, as any
//! user's program would be: the `pingpong`, `stream` and `multicast` binaries
//! (`src/bin/`), the measuring loops they are thin shells around
//! ([`mod@bench`]: ping-pong latency, streaming bandwidth; also called by
//! tests and `cargo xtask bench`; [`mcast`]: one member of a multicast),
//! and checkable message contents
//! ([`pattern`], shared with the scenario runner's simulated programs).
//!
//! Owns nothing but its programs' state. May touch the NIC only through
//! the host driver's public API (`Nic`, `Port`, `LiveBackend`); never
//! the device process or the driver's internals.
#![forbid(unsafe_code)]

pub mod bench;
pub mod mcast;
pub mod pattern;
