//! Firmware log lines. On the NIC CPU (the image builds this crate with
//! the `defmt` feature) each macro is the `defmt` macro of its level: the
//! format string stays in the ELF, the NIC sends its index and the
//! arguments, and `cargo xtask logs` decodes them. Which levels are
//! compiled in is chosen when the image is built (`cargo xtask build-fw
//! --log debug`; `DEFMT_LOG`, info by default): the others cost nothing.
//! Host builds (sim, live) compile every line out; their arguments are
//! still type-checked and evaluated for nothing.
//!
//! What logs at which level: `info` ports opening and closing, the flow
//! table changing (the bandwidth manager); `warn` refused descriptors with
//! their cause, ports refused, sends that time out or find their peer
//! unreachable, receive buffers reclaimed from the engine; `debug` every
//! rewind of a sending stream (where to, why) and every poll; `trace`
//! every descriptor a port posts (its kind byte) and every data-bearing
//! packet taken in order (from where, its sequence number).

#[cfg(feature = "defmt")]
macro_rules! log_info { ($($t:tt)*) => { defmt::info!($($t)*) } }
#[cfg(feature = "defmt")]
macro_rules! log_warn { ($($t:tt)*) => { defmt::warn!($($t)*) } }
#[cfg(feature = "defmt")]
macro_rules! log_debug { ($($t:tt)*) => { defmt::debug!($($t)*) } }
#[cfg(feature = "defmt")]
macro_rules! log_trace { ($($t:tt)*) => { defmt::trace!($($t)*) } }

#[cfg(not(feature = "defmt"))]
macro_rules! log_info { ($f:literal $(, $a:expr)* $(,)?) => {{ $( let _ = &$a; )* }} }
#[cfg(not(feature = "defmt"))]
macro_rules! log_warn { ($f:literal $(, $a:expr)* $(,)?) => {{ $( let _ = &$a; )* }} }
#[cfg(not(feature = "defmt"))]
macro_rules! log_debug { ($f:literal $(, $a:expr)* $(,)?) => {{ $( let _ = &$a; )* }} }
#[cfg(not(feature = "defmt"))]
macro_rules! log_trace { ($f:literal $(, $a:expr)* $(,)?) => {{ $( let _ = &$a; )* }} }
