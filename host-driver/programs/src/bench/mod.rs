//! Measuring loops over an open port: ping-pong latency and streaming
//! bandwidth, each checking the content (and, for streams, the order) of
//! every message it receives. The `pingpong` and `stream` binaries are thin
//! shells around these; tests and `cargo xtask bench` call them directly.
//!
//! The loops block in `Port::wait`, so they need a backend that can wait
//! (live, qemu, or a test double whose `idle_wait` returns true); on the
//! sim they fail with `WouldBlock` (the sim has its own `HostApp`s).
//!
//! Files: `error.rs` (`BenchError`), `latency.rs` (`LatencySummary`),
//! `run.rs` (what both loops share: buffer pools, waiting for events,
//! checking a message), `pingpong.rs` and `stream.rs` (the two loops with
//! their configurations and reports).
//!
//! Messages: `pattern` with a stream id naming the kind of message and its
//! sender (`stream_id`), message index = position in the run (warm-up
//! included), so a message from the wrong sender, of the wrong kind or out
//! of order is caught, and every byte is checked (`Check::Full`).
//!
//! Start-up: the side that sends first (ping, stream sender) retries its
//! first message while the peer's port is not open yet (`TargetPortClosed`,
//! or `TimedOut`/`Dropped` then Resume), pausing 1 ms between tries, until
//! `timeout` has passed since the start. After the first delivery any
//! failed send is an error. `timeout` otherwise bounds each wait for an
//! event (no progress for that long is an error), not the whole run.

use std::time::Duration;

use serde::Serialize;

use host_driver::cluster::ClusterDir;
use host_driver::live::{AttachOptions, IdlePolicy, LiveBackend};
use host_driver::{Nic, Port, PortOptions};

mod error;
mod latency;
mod pingpong;
mod run;
mod stream;

pub use error::BenchError;
pub use latency::LatencySummary;
pub use pingpong::{pingpong, PingPongConfig, PingPongReport, PingRole};
pub use stream::{stream, StreamConfig, StreamReport, StreamRole};

/// Kinds of message, the top bits of a stream id.
pub const KIND_PING: u32 = 1;
pub const KIND_PONG: u32 = 2;
pub const KIND_STREAM: u32 = 3;

/// Most pages of buffers one loop registers (4 GiB): the loops size their
/// buffer pools to fit. (A port may register its whole slice of host
/// memory; an allocation past it fails with OutOfMemory.)
const PAGE_BUDGET: u64 = 1 << 20;

/// The pattern stream of messages of `kind` sent by (node, port).
pub const fn stream_id(kind: u32, node: u16, port: u8) -> u32 {
    (kind << 28) | ((node as u32) << 8) | port as u32
}

/// How much of each received message is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// Every byte (and the sender writes every byte of every message).
    Full,
    /// The first 8 bytes: message index and stream (order and sender).
    Index,
}

impl std::str::FromStr for Check {
    type Err = String;
    fn from_str(s: &str) -> Result<Check, String> {
        match s {
            "full" => Ok(Check::Full),
            "index" => Ok(Check::Index),
            _ => Err(format!("unknown check `{s}` (full or index)")),
        }
    }
}

/// Attach to (node, port) of a running cluster (name or path), open its
/// NIC (waiting up to `timeout` while the firmware boots) and the port:
/// what the `pingpong` and `stream` binaries do first. The error says
/// which step failed, with the cluster's path.
pub fn open_live_port(
    cluster: &str,
    node: u32,
    port: u8,
    timeout: Duration,
    idle: IdlePolicy,
) -> Result<(Nic<LiveBackend>, Port<LiveBackend>), String> {
    let dir = ClusterDir::open(cluster).map_err(|e| format!("cluster `{cluster}`: {e}"))?;
    let where_ = format!("node {node} port {port} of cluster {}", dir.path().display());
    let opts = AttachOptions { idle, ..AttachOptions::default() };
    let node16 = u16::try_from(node).map_err(|_| format!("{where_}: no such node"))?;
    let be = LiveBackend::attach_with(&dir, node16, port, &opts)
        .map_err(|e| format!("cannot attach to {where_}: {e}"))?;
    let nic = Nic::open_timeout(be, timeout).map_err(|e| {
        format!("cannot open the NIC of node {node} ({}): {e}", dir.path().display())
    })?;
    let p = nic
        .open_port(port, PortOptions::default())
        .map_err(|e| format!("cannot open {where_}: {e}"))?;
    Ok((nic, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_name_kind_and_sender() {
        assert_ne!(stream_id(KIND_PING, 1, 2), stream_id(KIND_PONG, 1, 2));
        assert_ne!(stream_id(KIND_PING, 1, 2), stream_id(KIND_PING, 2, 1));
        assert_eq!(stream_id(KIND_STREAM, 1023, 7) >> 28, KIND_STREAM);
    }
}
