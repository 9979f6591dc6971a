//! The host driver: the std library host programs use to drive the
//! emulated NIC, one API whatever the backend (sim, live, qemu). Generic
//! over [`NicBackend`], the seam to the backing.
//!
//! A program on a running live or qemu cluster (`cargo xtask run` serves
//! one named `nic`) opens a [`Port`] with [`Port::attach`] and uses the
//! everyday calls; `examples/hello.rs` is a whole program, and
//! `examples/stream.rs` one that streams at full speed (a window of sends
//! in flight, receive buffers provided ahead of them):
//!
//! ```no_run
//! use std::time::Duration;
//! use host_driver::{Dest, Port, RecvOpts, SendOpts};
//!
//! # fn main() -> Result<(), host_driver::DriverError> {
//! let mut rx = Port::attach("nic", 1, 0)?; // node 1, port 0
//! let mut tx = Port::attach("nic", 0, 0)?;
//! let inbox = rx.alloc(64)?;
//! rx.provide(&inbox, RecvOpts::default())?; // messages of 33 to 64 bytes (size class 6)
//! let msg = tx.alloc_from(b"forty bytes of greeting, give or take...")?;
//! tx.send_to(&msg, Dest { node: 1, port: 0 }, SendOpts::default())?;
//! let got = rx.recv_timeout(Duration::from_secs(5))?;
//! assert_eq!(rx.read_message(&got)?, b"forty bytes of greeting, give or take...");
//! # Ok(())
//! # }
//! ```
//!
//! Underneath, the layers (any backend):
//!
//! ```text
//! Nic::open(backend)            identity, firmware status, configuration
//!   nic.open_port(p, opts)      -> Port: event queue, page table, handshake
//!     port.alloc(len)           -> DmaBuf: DMA memory, registered
//!     port.send_to / provide / put_to / get_from   (Dest, *Opts)
//!     port.recv / recv_timeout / try_recv   -> the program's Events
//!     Port::recv_any(&mut [ports], timeout) -> (which port, its Event)
//!     port.send / provide_receive_buffer / put / get / resume / set_alarm
//!     port.poll / poll_batch / wait   -> every Event
//!     port.close()              (or drop)
//! ```
//!
//! The data path is OS bypass: a call writes one descriptor into the port's
//! send ring in SRAM and rings the doorbell; completions and receives come
//! back as events the NIC writes into the port's event queue in host
//! memory. The driver checks what only it knows (tokens, ring space, its
//! own buffers); the NIC checks every descriptor and answers a bad one
//! with an error event.
//!
//! Files: `nic.rs` (opening a NIC), `port.rs` (handshake, descriptors,
//! events), `opts.rs` (destinations, options, size classes),
//! `memory.rs` (DMA buffers, page table), `event.rs` (typed
//! events), `error.rs`, `backend.rs` (the seam). Rate control:
//! `flows.rs` (the NIC's flow table and dispatch trace: `Nic::set_flow_idt`,
//! `Nic::flow`, `Nic::dispatch_trace_since`; the bandwidth resource
//! manager that sets it is the crate `host-brm`, beside this one). Real time: `live.rs`
//! (`LiveBackend`), over the crate `nic-cluster-dir` (re-exported as
//! `cluster` and `mapped`: the cluster directory contract and
//! `MappedFile`, shared with the device process). `affinity.rs` (CPU
//! lists, pinning a thread to cores: host programs and the device
//! process's threads alike). The programs built on the driver (pingpong,
//! stream, the measuring loops) are the crate `host-programs`, beside
//! this one.

#![forbid(unsafe_code)]

pub mod affinity;
pub mod backend;
pub mod collective;
mod error;
mod event;
pub mod flows;
pub mod live;
mod memory;
pub mod multicast;
mod nic;
mod opts;
mod port;

pub use backend::{HostOp, NicBackend, Pio};
pub use nic_cluster_dir::{cluster, control, mapped};

pub use cluster::{ClusterBackend, ClusterDir, ClusterError, ClusterManifest};
pub use error::{ClusterFault, DownCause, DriverError};
pub use event::{Event, Inline};
pub use flows::{FlowInfo, FlowKey, TraceRead};
pub use live::{last_attach_refusal, AttachOptions, IdlePolicy, LiveBackend, ATTACH_WAIT};
pub use mapped::MappedFile;
pub use memory::{vaddr_of, DmaBuf, VIRT_BASE, VIRT_PORT_SHIFT};
pub use multicast::{
    Algorithm, Group, Multicast, NotReached, RelayPlan, Relayed, RootPlan, Scheme,
};
pub use nic::{Nic, NicInfo};
pub use opts::{Dest, GetOpts, PutOpts, RecvOpts, RemoteAddr, SendOpts};
pub use port::{default_event_queue_len, Port, PortOptions, PortStats, MAX_EVENT_QUEUE_LEN};

/// The ABI crate, for layouts a program or test wants to look at.
pub use nic_abi;
pub use nic_abi::desc::{DescKind, Descriptor};
pub use nic_abi::event::{ErrorCause, SendStatus};
pub use nic_abi::stats::Stat;
pub use nic_abi::Priority;
