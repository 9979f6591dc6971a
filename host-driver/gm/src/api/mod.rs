//! The calls of gm.h, as C sees them. Every function here is
//! `extern "C"` under its GM name; what it does is in the modules beside
//! (`crate::port`, `crate::send`, `crate::recv`, `crate::alarm`).
//!
//! Files: `ports.rs` (initialisation, ports, nodes and names),
//! `memory.rs` (DMA memory, registration, sizes), `sends.rs` (sends, puts,
//! gets, tokens, a failed send), `receive.rs` (receive buffers, receiving,
//! gm_unknown, alarms), `util.rs` (status messages, exit, the small C
//! utilities), `modules.rs` (hash tables, lookaside lists, mutexes, mark
//! sets), `unsupported.rs` (calls this library does not provide:
//! each says so and fails).

pub mod memory;
pub mod modules;
pub mod ports;
pub mod receive;
pub mod sends;
pub mod unsupported;
pub mod util;

use crate::port::GmPort;

/// `struct gm_port *` as C holds it.
pub type PortPtr = *mut GmPort;

/// The port behind `p`, or a stop with a message naming `call` when `p`
/// is null (GM left that undefined; here it is a clear error).
///
/// # Safety
/// `p` is null or a pointer `gm_open` returned that `gm_close` has not
/// closed, and no other reference to that port is live.
pub(crate) unsafe fn port<'a>(p: PortPtr, call: &str) -> &'a mut GmPort {
    if p.is_null() {
        stop(call, "the port is NULL (gm_open did not open it)");
    }
    // SAFETY: the caller's promise.
    unsafe { &mut *p }
}

/// Stop the process with a message naming `call`: a misuse GM would not
/// have survived either.
pub(crate) fn stop(call: &str, why: &str) -> ! {
    eprintln!("libgm: {call}: {why}");
    std::process::abort()
}
