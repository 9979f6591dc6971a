//! The shared-memory contract of a real-time (live or qemu) cluster, for
//! both of its sides: the device process (nic-emu) and host processes
//! (host-driver). It sits below both, so that the device model does not
//! depend on the host driver.
//!
//! - [`cluster`]: the cluster directory's layout and manifest
//!   (`docs/design/cluster-dir.md`): paths, port slices, locks, liveness.
//! - [`control`]: the per-node control socket's messages and frames
//!   (descriptors passed along): how a host process asks the device
//!   process for its port.
//! - [`place`]: where a cluster may live (names, the base directory, the
//!   marker), checked before anything is changed.
//! - [`identity`]: which process a pid is (start time, executable), checked
//!   before any signal.
//! - [`mapped`]: [`MappedFile`], a node file mapped shared, reached only
//!   through bounds-checked atomic accesses; it implements
//!   `nic_abi::sram::Sram`. The only module with `unsafe`.
//!
//! Owns paths, the manifest and mappings; touches no file outside a
//! cluster directory (and `/proc` to see whether a pid lives).

#![deny(unsafe_code)]

pub mod cluster;
pub mod control;
pub mod identity;
#[allow(unsafe_code)]
pub mod mapped;
pub mod place;

pub use cluster::{ClusterBackend, ClusterDir, ClusterError, ClusterManifest, NodeFile};
pub use identity::DeviceState;
pub use mapped::MappedFile;
pub use place::ClusterLocation;
