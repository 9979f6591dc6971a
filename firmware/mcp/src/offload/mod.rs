//! Offloads: modules beside the core that own a descriptor kind, a packet
//! type, timers, completions and a share of SRAM, and that the core calls
//! through one narrow interface without naming them (docs/offloads.md).
//!
//! An offload is a type implementing [`Offload`]. The core calls it:
//!
//! - with a descriptor of a kind it owns ([`Offload::DESC_KINDS`]), taken
//!   from a port's send ring by SDMA's intake ([`Offload::descriptor`]);
//! - with a checked packet of a type it owns ([`Offload::PACKET_TYPES`]),
//!   taken from the receive ring by RECV ([`Offload::packet`]); it may
//!   answer, use the host-DMA engine, or drop it;
//! - when its timer falls due ([`Offload::deadline`], [`Offload::expire`]);
//! - when a host-DMA command it posted completes ([`Offload::completion`]).
//!
//! What it may touch is what [`Services`] offers (the time, the NIC's
//! configuration, a transmit buffer for a packet of its own, an event for
//! a port, the host-DMA engine, the counters) and its own SRAM
//! ([`Offload::SRAM`]: regions of `nic_abi::map`, checked there at compile
//! time). It never writes a machine's records.
//!
//! Offloads that change a decision of the core rather than own traffic of
//! their own (rate control: which stream sends next; selective repeat:
//! the window, ack and retransmit policy) are policies the machines are
//! generic over; see [`policy`].
//!
//! The offloads compiled in are listed once, in [`list`]; each is behind a
//! cargo feature of this crate (`multicast`, `rate`, `selective`, `echo`).
//! Dispatch is static: the list expands to a struct with one field per
//! offload and to calls by kind or type number, no `dyn`, no heap. With
//! none compiled in every hook is a constant and the unicast paths are the
//! code they were without offloads.

pub mod fanout;
pub mod list;
pub mod policy;
mod services;

// Compiled whatever the features: `crate::MULTICAST` gates its paths in
// the machines.
pub mod multicast;

#[cfg(feature = "selective")]
pub mod selective;

#[cfg(feature = "rate")]
pub mod rate;

#[cfg(feature = "echo")]
pub mod echo;

#[cfg(feature = "collective")]
pub mod collective;

pub use list::Offloads;
pub use services::{CoreSide, OffloadEventId, Services};

use crate::hw::Hw;
use nic_abi::desc::Descriptor;
use nic_abi::event::ErrorCause;
use nic_abi::packet::Header;

/// A region of SRAM an offload owns: `len` bytes from `start`. Its place
/// is in `nic_abi::map`, whose compile-time checks keep regions apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub start: u32,
    pub len: u32,
}

/// What an offload did with a descriptor of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// Taken: the ring slot is consumed.
    Taken,
    /// Not now (no room for what it needs): it stays in the ring and is
    /// offered again at a later pass.
    Wait,
    /// Refused: the core consumes the slot and posts an Error event with
    /// this cause.
    Refused(ErrorCause),
}

/// A packet of an offload's type, checked by RECV (CRC, length, header,
/// addressed to this node from a node of the fabric).
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// The receive buffer that holds it (header at its start).
    pub buf: u8,
    pub header: Header,
}

/// What an offload did with a packet of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Done with it: the core gives the receive buffer back.
    Done,
    /// It keeps the receive buffer (e.g. for a host-DMA from it) and gives
    /// it back itself ([`Services::release`]).
    Kept,
}

/// The interface between the core and one offload. Every entry point but
/// the constants has a default that does nothing, so an offload writes only
/// what it uses.
pub trait Offload {
    /// Its name (bench attribution, logs).
    const NAME: &'static str;
    /// Descriptor kind bytes it owns (at least `desc::OFFLOAD_KINDS_FROM`).
    const DESC_KINDS: &'static [u8] = &[];
    /// Packet type bytes it owns (at least `packet::OFFLOAD_TYPES_FROM`).
    const PACKET_TYPES: &'static [u8] = &[];
    /// Its SRAM.
    const SRAM: &'static [Region] = &[];
    /// Its state at power-on (the MCP is built in a `static`).
    const NEW: Self;

    /// The MCP started (or restarted warm): forget what was in flight.
    fn init<H: Hw>(&mut self, _sv: &mut Services<'_, H>) {}

    /// A validated descriptor of one of its kinds from port `port`'s send
    /// ring (`raw`: the ring slot's bytes).
    fn descriptor<H: Hw>(
        &mut self,
        _sv: &mut Services<'_, H>,
        _port: u8,
        _d: &Descriptor,
        _raw: &[u8],
    ) -> Intake {
        Intake::Refused(ErrorCause::BadKind)
    }

    /// A checked packet of one of its types.
    fn packet<H: Hw>(&mut self, _sv: &mut Services<'_, H>, _p: &Packet) -> Received {
        Received::Done
    }

    /// When it next wants to be called (`expire`), if at all. It must
    /// depend on the offload's own state only, as the core's calls left
    /// it: the core keeps the answer until it calls the offload again.
    fn deadline(&self) -> Option<u64> {
        None
    }

    /// Its deadline came (RTC `sv.now()` is at or past it).
    fn expire<H: Hw>(&mut self, _sv: &mut Services<'_, H>) {}

    /// Host-DMA command `tag` it posted ([`Services::host_dma`]) finished.
    fn completion<H: Hw>(&mut self, _sv: &mut Services<'_, H>, _tag: u16) {}

    /// Port `port` closed: drop what it holds for the port.
    fn port_closed<H: Hw>(&mut self, _sv: &mut Services<'_, H>, _port: u8) {}

    /// Does it own descriptor kind `kind`?
    #[inline(always)]
    fn owns_kind(kind: u8) -> bool {
        let mut i = 0;
        while i < Self::DESC_KINDS.len() {
            if Self::DESC_KINDS[i] == kind {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Does it own packet type `ptype`?
    #[inline(always)]
    fn owns_type(ptype: u8) -> bool {
        let mut i = 0;
        while i < Self::PACKET_TYPES.len() {
            if Self::PACKET_TYPES[i] == ptype {
                return true;
            }
            i += 1;
        }
        false
    }
}

/// Is descriptor kind byte `kind` one that belongs to offloads (owned by
/// one compiled in or not)?
#[inline(always)]
pub fn is_offload_kind(kind: u8) -> bool {
    kind >= nic_abi::desc::OFFLOAD_KINDS_FROM
}

/// Is packet type `ptype` one that belongs to offloads?
#[inline(always)]
pub fn is_offload_type(ptype: nic_abi::packet::PacketType) -> bool {
    ptype as u8 >= nic_abi::packet::OFFLOAD_TYPES_FROM
}
