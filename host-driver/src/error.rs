//! The driver's typed errors. Every call that can fail returns one of these
//! at once; none of them is a panic, and none of them blocks the NIC.
//!
//! Errors about a *descriptor's content* (a bad size class, a target node
//! out of range, an unregistered range) are not found here: the NIC checks
//! those and answers with an `Event::Error`. The driver refuses only what it
//! alone knows: tokens, ring space, its own buffers, its own options.

use core::fmt;
use std::path::{Path, PathBuf};

use nic_abi::{class_max_len, size_class_for, MAX_SIZE_CLASS};

use crate::cluster::{ClusterError, NodeFile};
use crate::Event;

/// Everything a driver call can refuse. `Display` says what went wrong and,
/// where there is one, what to do about it; the cluster errors carry the
/// cluster directory they concern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// `MAGIC` does not hold "NICE": not one of our NICs, or not mapped.
    BadMagic { found: u32 },
    /// The NIC's ABI version differs from the one this driver was built for.
    AbiMismatch { nic: u32, driver: u32 },
    /// The firmware is not running (`FW_STATUS`: 0 booting, 2 halted).
    NicNotReady { fw_status: u32 },
    /// A configuration register holds a value the driver cannot use.
    BadConfig(&'static str),
    /// Port number out of range (`0..NUM_PORTS`).
    BadPort(u8),
    /// The port is already open (its `STATE` word says so), or, on a live
    /// backend, another process (or attach) holds its lock.
    PortBusy(u8),
    /// A `PortOptions` field is out of range (named).
    InvalidOption(&'static str),
    /// No send token free. Every send, put and get holds one from its
    /// post until the driver reads its completion from the port's event
    /// queue (any of `recv`, `recv_timeout`, `try_recv`, `poll`, `wait`
    /// reads it, whether or not it is handed to the program). After this
    /// error `recv` returns the completion that frees the next token, even
    /// of a send or put that did not ask for one (`notify`): wait with
    /// `recv`/`recv_timeout` and post again.
    NoSendToken,
    /// No receive token free. Every buffer provided holds one until the
    /// driver reads the `Received` event of the message that fills it (or
    /// the `Error` that refuses it): wait with `recv`/`recv_timeout`.
    NoRecvToken,
    /// The send ring holds `SEND_RING_LEN` descriptors the NIC has not taken.
    RingFull,
    /// The buffer is not memory of this port (driver-side lookup), or a
    /// range to deregister is not registered.
    NotRegistered,
    /// A length or offset does not fit (zero-length allocation, a range past
    /// the end of a buffer, a length above `u32::MAX`).
    BadSize,
    /// The backend has no DMA-able host memory left for `len` bytes.
    OutOfMemory { len: u64 },
    /// The port's page table has no entry for the memory (it lies outside
    /// the port's slice of host memory; the table has an entry for every
    /// page of the slice, so the port's own allocations always fit).
    PageTableFull,
    /// No event, and this backend cannot block (the sim): return and let
    /// the program be called back when the NIC has written something.
    WouldBlock,
    /// No event arrived within the timeout of a blocking wait.
    Timeout,
    /// The NIC of node `node` (this port's own, or a peer's this port
    /// talked with) is down, for the reason `why`. A wait reports it
    /// within about 100 ms.
    NicDown { node: u16, why: DownCause },
    /// This port's own NIC (of node `node`) was reset (reflashed, or
    /// reset by its device process): every port of it was closed, this
    /// one too; attach again. A wait reports it within a heartbeat.
    NicReset { node: u16 },
    /// The NIC of node `node`, which this port talked with (sent to,
    /// received from, or `Port::watch`ed), was reset while this port
    /// waited: its ports were closed, and what was on its way to or from
    /// it is lost. Reported once per reset, within a heartbeat.
    PeerReset { node: u16 },
    /// The firmware refused to serve the port: its registered event queue
    /// (`regs::port_evq_bus`/`port_evq_len`) is not a power of two of
    /// entries in the port's own slice of host memory. Only a
    /// registration made by someone other than this driver does that.
    PortRefused(u8),
    /// The backend serves one port (`NicBackend::port_hint`, e.g. a live
    /// backend attached to port `attached`) and `port` was asked for.
    PortNotAttached { port: u8, attached: u8 },
    /// A real-time backend could not use the cluster directory at `path`
    /// (attach, or a request on its control socket later).
    Cluster { path: PathBuf, fault: ClusterFault },
    /// The device process would not hand over port `port` now, and says
    /// who has it (`by`: the process holding it, or an earlier holder's
    /// process, or one it forked, that still maps the port's memory).
    PortHeld { port: u8, by: String },
    /// The device process of the cluster at `path` refused to hand over
    /// a port, and why (e.g. this user may not use the cluster, or holds
    /// as many of the node's ports as it may).
    AttachRefused { path: PathBuf, why: String },
    /// A send's size class (given in `SendOpts::size_class`) is too small
    /// for its `len` bytes: a class holds messages of up to 2^class bytes.
    ClassTooSmall { class: u8, len: u64 },
    /// A receive buffer of `len` bytes is too small for size class
    /// `class` (given in `RecvOpts::size_class`): it must hold 2^class
    /// bytes.
    BufferTooSmall { class: u8, len: u64 },
    /// A size class above `nic_abi::MAX_SIZE_CLASS`.
    ClassTooLarge { class: u8 },
    /// A message longer than the largest size class holds
    /// (2^`MAX_SIZE_CLASS` bytes).
    MessageTooLong { len: u64 },
    /// The NIC did not start serving the port within the time
    /// `Port::wait_served` was given.
    PortNotServed(u8),
    /// `Port::read_message` was given an event that is not a received
    /// message (the event).
    NotAMessage(Box<Event>),
    /// `Port::attach` could not open port `port` of node `node` of the
    /// cluster at `path`: `cause` says why (`root_cause` reaches it).
    /// Errors about the cluster directory itself come as `Cluster`, which
    /// names it already.
    Attach { path: PathBuf, node: u16, port: u8, cause: Box<DriverError> },
    /// A flow (rate control) names something out of range (what).
    BadFlow(&'static str),
    /// Every entry of the NIC's flow table is in use.
    FlowTableFull,
    /// A multicast group or request that cannot be (why).
    BadGroup(&'static str),
    /// A collective that cannot be (why).
    BadCollective(&'static str),
}

/// Why a NIC is down (`DriverError::NicDown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownCause {
    /// The device process serving the cluster died (it was killed, or
    /// the cluster was stopped): every NIC of the cluster is gone.
    DeviceProcess,
    /// The node's QEMU (the NIC's processor) exited or was killed.
    Qemu,
    /// The node's firmware halted (a panic, a boot that did not finish
    /// in time, or the device process stopped it).
    Firmware,
}

impl fmt::Display for DownCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DownCause::DeviceProcess => {
                "the cluster's device process died (killed, or the cluster was stopped)"
            }
            DownCause::Qemu => "its QEMU process exited or was killed",
            DownCause::Firmware => "its firmware halted",
        })
    }
}

/// Why a cluster directory could not be attached to (the `Copy` summary
/// of a `cluster::ClusterError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterFault {
    /// No `cluster.toml` there: no such cluster, or it is not running.
    NotFound,
    /// `cluster.toml` does not parse or holds a value out of its domain.
    BadManifest,
    /// The cluster has no node `node` (it has `0..nodes`).
    NoSuchNode { node: u16, nodes: u32 },
    /// A node file is missing, cannot be opened or mapped (`io`), or is
    /// not the size `cluster.toml` says (`io` None).
    BadFile { file: NodeFile, io: Option<std::io::ErrorKind> },
    /// The device process named in `cluster.toml` is not running.
    DeviceGone { pid: u32 },
    /// Another I/O failure.
    Io(std::io::ErrorKind),
    /// The device process refused the request on the node's control
    /// socket (e.g. this user may not use the cluster); the reason is in
    /// the refusal (`LiveBackend::last_refusal`, the cluster's log).
    Refused,
}

impl From<&ClusterError> for ClusterFault {
    fn from(e: &ClusterError) -> ClusterFault {
        match e {
            ClusterError::NotFound { .. } => ClusterFault::NotFound,
            ClusterError::Exists { .. } => ClusterFault::Io(std::io::ErrorKind::AlreadyExists),
            ClusterError::BadManifest { .. } => ClusterFault::BadManifest,
            ClusterError::NoSuchNode { node, nodes } => ClusterFault::NoSuchNode {
                node: u16::try_from(*node).unwrap_or(u16::MAX),
                nodes: *nodes,
            },
            ClusterError::BadFile { file, .. } => ClusterFault::BadFile { file: *file, io: None },
            ClusterError::Io { err, .. } => ClusterFault::Io(err.kind()),
        }
    }
}

impl fmt::Display for ClusterFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterFault::NotFound => f.write_str("not found: no cluster.toml there"),
            ClusterFault::BadManifest => f.write_str("cluster.toml is unreadable or invalid"),
            ClusterFault::NoSuchNode { node, nodes } => {
                write!(
                    f,
                    "node {node} does not exist (the cluster has nodes 0 to {})",
                    nodes.saturating_sub(1)
                )
            }
            ClusterFault::BadFile { file, io: Some(kind) } => {
                write!(f, "the node's {} file cannot be used: {kind}", file.as_str())
            }
            ClusterFault::BadFile { file, io: None } => {
                write!(f, "the node's {} file is not the size cluster.toml says", file.as_str())
            }
            ClusterFault::DeviceGone { pid } => {
                write!(f, "the cluster's device process (pid {pid}) is not running")
            }
            ClusterFault::Io(kind) => write!(f, "I/O error: {kind}"),
            ClusterFault::Refused => f.write_str(
                "the node's control socket refused the request (LiveBackend::last_refusal says why)",
            ),
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DriverError::*;
        match self {
            BadMagic { found } => {
                write!(f, "no NIC here: MAGIC reads {found:#010x}, expected \"NICE\"")
            }
            AbiMismatch { nic, driver } => {
                write!(f, "NIC speaks ABI version {nic}, this driver speaks {driver}")
            }
            NicNotReady { fw_status } => {
                let what = match *fw_status {
                    nic_abi::regs::FW_BOOTING => "still booting",
                    nic_abi::regs::FW_HALTED => "halted",
                    _ => "in an unknown state",
                };
                write!(f, "NIC firmware is {what} (FW_STATUS = {fw_status})")
            }
            BadConfig(what) => write!(f, "NIC configuration register `{what}` is unusable"),
            BadPort(p) => {
                write!(f, "port {p} does not exist (ports are 0 to {})", nic_abi::NUM_PORTS - 1)
            }
            PortBusy(p) => {
                write!(f, "port {p} is already open (held by another process or handle)")
            }
            PortHeld { port, by } => {
                write!(f, "port {port} is held by another process: {by}")
            }
            AttachRefused { path, why } => {
                write!(f, "cluster {}: the device process refused the port: {why}", path.display())
            }
            InvalidOption(what) => write!(f, "port option `{what}` is out of range"),
            NoSendToken => f.write_str(
                "no send token free on this port: each send, put and get holds one until the \
                 driver reads its completion from the port's event queue; recv or recv_timeout \
                 returns as soon as one is free (with the completion that freed it, asked for \
                 or not)",
            ),
            NoRecvToken => f.write_str(
                "no receive token free on this port: each buffer provided holds one until the \
                 driver reads the Received event of the message that fills it; recv or \
                 recv_timeout returns it",
            ),
            RingFull => f.write_str("the port's send ring is full"),
            NotRegistered => f.write_str("buffer is not registered memory of this port"),
            BadSize => f.write_str("length or offset out of range for this buffer"),
            OutOfMemory { len } => write!(f, "no DMA-able host memory left for {len} bytes"),
            PageTableFull => f.write_str(
                "the port's page table has no entry for this memory (outside its slice)",
            ),
            WouldBlock => f.write_str("no event yet and this backend cannot block"),
            Timeout => f.write_str("no event before the timeout"),
            NicDown { node, why } => write!(f, "node {node}'s NIC is down: {why}"),
            NicReset { node } => write!(
                f,
                "node {node}'s NIC, this port's own, was reset (reflashed or reset by its device \
                 process): its ports are closed, this one too (attach again)"
            ),
            PeerReset { node } => write!(
                f,
                "node {node}'s NIC, which this port exchanges messages with, was reset \
                 (reflashed or reset by its device process): its ports were closed and what \
                 was on its way to or from it is lost"
            ),
            PortRefused(p) => write!(
                f,
                "the NIC refused port {p}: its event queue is not in the port's own host memory \
                 (someone else wrote the port window)"
            ),
            PortNotAttached { port, attached } => write!(
                f,
                "port {port} asked for, but this backend is attached to port {attached} only"
            ),
            Cluster { path, fault } => cluster_message(f, path, fault),
            ClassTooSmall { class, len } => write!(
                f,
                "size class {class} holds messages of at most {} bytes, this one has {len} \
                 (its class is {}: leave SendOpts::size_class None to derive it)",
                class_max_len(*class),
                size_class_for(*len)
            ),
            BufferTooSmall { class, len } => write!(
                f,
                "a receive buffer of size class {class} must hold {} bytes, this one has {len} \
                 (leave RecvOpts::size_class None to take the largest class it holds)",
                class_max_len(*class)
            ),
            ClassTooLarge { class } => write!(
                f,
                "size class {class} does not exist (classes are 0 to {MAX_SIZE_CLASS}, \
                 messages of up to {} bytes)",
                class_max_len(MAX_SIZE_CLASS)
            ),
            NotAMessage(e) => write!(f, "expected a received message, got {e:?}"),
            PortNotServed(p) => write!(
                f,
                "the NIC did not start serving port {p} in time (its firmware is stuck or \
                 far behind)"
            ),
            Attach { path, node, port, cause } => write!(
                f,
                "cannot open port {port} of node {node} of the cluster at {}: {cause}",
                path.display()
            ),
            MessageTooLong { len } => write!(
                f,
                "a message of {len} bytes is longer than the largest size class holds ({} bytes)",
                class_max_len(MAX_SIZE_CLASS)
            ),
            BadFlow(what) => write!(f, "bad flow: {what}"),
            FlowTableFull => f.write_str("the NIC's flow table is full"),
            BadGroup(why) => write!(f, "bad multicast group: {why}"),
            BadCollective(why) => write!(f, "bad collective: {why}"),
        }
    }
}

/// "cluster directory PATH: what is wrong", and for a cluster that is not
/// there, how to start one of that name.
fn cluster_message(f: &mut fmt::Formatter<'_>, path: &Path, fault: &ClusterFault) -> fmt::Result {
    write!(f, "cluster directory {}: {fault}", path.display())?;
    match fault {
        ClusterFault::NotFound | ClusterFault::DeviceGone { .. } => {
            let name = path.file_name().map_or("NAME".into(), |n| n.to_string_lossy());
            write!(
                f,
                " (is the cluster running? Start one with `cargo xtask run --name {name}` or \
                 `nic-cluster run --name {name} --nodes 2`)"
            )
        }
        _ => Ok(()),
    }
}

impl DriverError {
    /// The error under any `Attach` context: what to match on.
    pub fn root_cause(&self) -> &DriverError {
        match self {
            DriverError::Attach { cause, .. } => cause.root_cause(),
            e => e,
        }
    }

    /// The `Cluster` error for `fault` at the cluster directory `path`.
    pub fn cluster(path: &Path, fault: ClusterFault) -> DriverError {
        DriverError::Cluster { path: path.to_path_buf(), fault }
    }

    /// A `cluster::ClusterError` met at the cluster directory `path`,
    /// keeping the path (the directory the error names if it names one).
    pub fn from_cluster_error(path: &Path, e: &ClusterError) -> DriverError {
        let path = match e {
            ClusterError::NotFound { path } | ClusterError::Exists { path, .. } => path,
            _ => path,
        };
        DriverError::cluster(path, e.into())
    }
}

impl std::error::Error for DriverError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_error_names_its_directory_and_how_to_start_one() {
        let e = DriverError::cluster(Path::new("/tmp/x/c7"), ClusterFault::NotFound);
        assert_eq!(
            e.to_string(),
            "cluster directory /tmp/x/c7: not found: no cluster.toml there (is the cluster \
             running? Start one with `cargo xtask run --name c7` or `nic-cluster run --name c7 \
             --nodes 2`)"
        );
        let e = DriverError::cluster(
            Path::new("/tmp/x/c7"),
            ClusterFault::NoSuchNode { node: 4, nodes: 2 },
        );
        assert_eq!(
            e.to_string(),
            "cluster directory /tmp/x/c7: node 4 does not exist (the cluster has nodes 0 to 1)"
        );
    }

    #[test]
    fn a_cluster_error_from_the_directory_keeps_the_path_it_names() {
        let asked = Path::new("/asked");
        let missing = ClusterError::NotFound { path: "/dev/shm/nic-clusters/c9".into() };
        assert_eq!(
            DriverError::from_cluster_error(asked, &missing),
            DriverError::Cluster {
                path: "/dev/shm/nic-clusters/c9".into(),
                fault: ClusterFault::NotFound
            }
        );
        let bad = ClusterError::BadManifest { path: "/asked/cluster.toml".into(), why: "x".into() };
        assert_eq!(
            DriverError::from_cluster_error(asked, &bad),
            DriverError::Cluster { path: asked.into(), fault: ClusterFault::BadManifest }
        );
    }
}
