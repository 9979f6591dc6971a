//! Why a measurement stopped: `BenchError`, one variant per way a
//! ping-pong or stream can fail (configuration, driver, time-out, peer not
//! up, failed send, refused descriptor, and each content check).

use std::fmt;
use std::time::Duration;

use host_driver::{DriverError, SendStatus};

/// Why a measurement stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchError {
    /// The configuration cannot run (named).
    Config(String),
    /// A driver call failed.
    Driver(DriverError),
    /// No event for `timeout` while waiting for `what`; `silent`: the
    /// peer (node, port), when nothing at all had come yet.
    Timeout { what: String, timeout: Duration, silent: Option<(u16, u8)> },
    /// The peer's port did not open within `timeout`.
    PeerNotUp { node: u16, port: u8, timeout: Duration, last: SendStatus },
    /// A send completed with a failure status.
    SendFailed { msg: u64, status: SendStatus },
    /// The NIC refused a descriptor.
    Refused { cause: host_driver::ErrorCause, tag: u64 },
    /// A message from another sender, priority or size class than expected.
    WrongMessage { msg: u64, what: String },
    /// A message of the wrong length.
    Length { msg: u64, expected: u32, found: u32 },
    /// Message `found` arrived where `expected` was due.
    OutOfOrder { expected: u64, found: u64 },
    /// Byte `offset` of message `msg` differs from the pattern.
    Content { msg: u64, offset: usize, expected: u8, found: u8 },
    /// An event that has no place here (e.g. a message where none was due).
    Unexpected(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Config(s) => write!(f, "bad configuration: {s}"),
            BenchError::Driver(e) => write!(f, "driver: {e}"),
            BenchError::Timeout { what, timeout, silent } => {
                write!(f, "timed out after {timeout:?} without an event, waiting for {what}")?;
                if let Some((node, port)) = silent {
                    write!(
                        f,
                        " (nothing has come yet: is the program at node {node} port {port} \
                         running, with the same --size? A message lands only in a receive \
                         buffer of its size class)"
                    )?;
                }
                Ok(())
            }
            BenchError::PeerNotUp { node, port, timeout, last } => write!(
                f,
                "peer node {node} port {port} did not come up within {timeout:?} (the last send: {})",
                status_words(*last)
            ),
            BenchError::SendFailed { msg, status } => {
                write!(f, "send of message {msg} failed: {}", status_words(*status))
            }
            BenchError::Refused { cause, tag } => {
                write!(f, "the NIC refused a descriptor (tag {tag:#x}): {cause:?}")
            }
            BenchError::WrongMessage { msg, what } => {
                write!(f, "message {msg}: {what}")
            }
            BenchError::Length { msg, expected, found } => {
                write!(f, "message {msg}: length {found}, expected {expected}")
            }
            BenchError::OutOfOrder { expected, found } => {
                write!(f, "out of order: message {found} arrived where {expected} was due")
            }
            BenchError::Content { msg, offset, expected, found } => write!(
                f,
                "content error in message {msg} at byte {offset}: {found:#04x}, expected {expected:#04x}"
            ),
            BenchError::Unexpected(s) => write!(f, "unexpected event: {s}"),
        }
    }
}

impl std::error::Error for BenchError {}

/// A send status in words (for messages, not Rust's names).
pub fn status_words(s: SendStatus) -> &'static str {
    match s {
        SendStatus::Ok => "completed",
        SendStatus::TimedOut => "timed out with no receive buffer posted at the target",
        SendStatus::TargetPortClosed => "the target port is not open",
        SendStatus::Dropped => "dropped after an earlier send to that target timed out",
        SendStatus::RemoteAccess => "the remote range is not registered at the target",
        SendStatus::Unreachable => "the target node did not answer",
        SendStatus::Incomplete => "some multicast members were not reached",
    }
}

impl From<DriverError> for BenchError {
    fn from(e: DriverError) -> BenchError {
        BenchError::Driver(e)
    }
}
