//! libgm: GM's C programming interface over the host driver, so that a
//! program written for Myricom's GM (gm.h, API 1.0 to 2.0.16) runs on an
//! emulated NIC of a live or qemu cluster unchanged.
//!
//! C programs include `include/gm.h` and link `libgm.a` (or `libgm.so`,
//! which `cargo xtask gm build` links from it). Which cluster and node a
//! process uses comes from its environment (`target`). docs/gm-api.md
//! lists every call of the interface with its status here.
//!
//! Files: `api/` (the calls C makes: ports and nodes, communication,
//! utilities, and those not supported), `port.rs` (an open port and its
//! memory, mapped at the addresses the NIC translates), `send.rs`
//! (operations, completions, a failed connection's held sends),
//! `register.rs` (the program's own memory registered),
//! `recv.rs` (GM's receive events), `alarm.rs`, `status.rs` (status codes
//! and messages), `target.rs` (which NIC). `csrc/varargs.c` holds the two
//! calls with C variadic arguments.
//!
//! GM's interface is single-threaded per port, and so is this library: a
//! port is used by one thread at a time, and callbacks run from
//! `gm_unknown` in the thread that calls it.

pub mod alarm;
pub mod api;
pub mod port;
pub mod recv;
pub mod register;
pub mod send;
pub mod status;
pub mod target;

pub use port::GmPort;
pub use recv::RawEvent;
