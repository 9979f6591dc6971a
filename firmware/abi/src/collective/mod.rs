//! Collectives run by the NICs: barrier, reduce, allreduce and broadcast
//! over a group (the multicast group table's entry: its members in rank
//! order, all on one port). The collective offload of the MCP runs the
//! whole algorithm: it sends, receives, combines and counts, and posts one
//! `Collective` event per member when that member is done.
//!
//! - [`arith`]: the operations and element types, and the combination of
//!   two vectors.
//! - [`schedule`]: each algorithm as the steps of each member.
//! - The descriptor ([`CollFields`]), the packets ([`CollRepr`],
//!   [`CtlCode`]) and the event's fields, below.
//!
//! Descriptor (kind `DescKind::Collective`, 64 bytes):
//! ```text
//!  0 kind u8 (9)   1 priority u8   2 coll u8 (Kind)   3 port u8 (the group's)
//!  4 group u16     6 flags u16 (zero: the core's descriptor check refuses others)
//!  8 local u64     this member's vector (reduce, allreduce; broadcast: the root's)
//! 16 len u32       the vector's bytes, whole elements (0 for a barrier)
//! 20 cseq u32      the collective's number in its group: 1, 2, 3, ...
//! 24 remote u64    where the result goes (may be `local`)
//! 32 tag u64       returned in the event
//! 40 op u8   41 dtype u8   42 alg u8   43 step u8 (assisted: the step released; else zero)
//! 44 root u16 (a rank)   46 mode u8 (bit 0: assisted; the rest zero)   47 reserved[17] (zero)
//! ```
//!
//! Event (`EventKind::Collective`): `status` a `SendStatus` (Ok, or
//! Incomplete when members were missing: `McastLost` events with the same
//! tag come first and name their nodes), `node` the group, `len` the
//! collective's number, `addr` the result's address, `tag` the
//! descriptor's, `size_class` the kind, `port` the algorithm run.
//!
//! Assisted (flag [`FLAG_ASSISTED`]): the host releases the steps one by
//! one. The descriptor of step 0 begins the collective and releases its
//! first step; each next one (same group and number, `step` one more)
//! releases the next. When every chunk has gone through the steps
//! released, and more are to come, the NIC posts a `CollStep` event:
//! `status` 0, `node` the group, `len` the collective's number,
//! `addr` the step done, `tag` the releasing descriptor's,
//! `size_class` the kind, `port` the algorithm. After the last step the
//! `Collective` event ends it as above. Not with the ring (its steps
//! depend on the chunk), and at most [`MAX_ASSISTED_CHUNKS`] chunks.

pub mod arith;
pub mod schedule;

#[cfg(any(test, feature = "std"))]
pub mod reference;

#[cfg(test)]
mod tests;

pub use arith::{combine, Dtype, Op, Side};
pub use schedule::{Alg, How, Kind, Shape, Step, Steps, MAX_STEPS};

use crate::event::ErrorCause;
use crate::le::*;
use crate::packet::{Addr, Header, PacketType};
use crate::Priority;

/// The fields of a collective descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollFields {
    pub kind: Kind,
    pub port: u8,
    pub group: u16,
    pub local: u64,
    pub len: u32,
    pub cseq: u32,
    pub remote: u64,
    pub tag: u64,
    pub op: Op,
    pub dtype: Dtype,
    pub alg: Alg,
    pub root: u16,
    /// The host releases the steps one by one (`FLAG_ASSISTED`).
    pub assisted: bool,
    /// Assisted: the step this descriptor releases (0 begins the run).
    pub step: u8,
}

/// The descriptor's `mode` bit (byte 46) of an assisted collective. (Not
/// in `flags`, at 6: the core's check of every descriptor refuses a
/// non-zero one, and unicast should not pay for telling kinds apart.)
pub const FLAG_ASSISTED: u16 = 1;
/// Most chunks of an assisted collective's vector: its whole vector is
/// in its window (a chunk stopped at a step not yet released never
/// leaves it), and each send step's chunks fit in the sent slots at once
/// (else a send step would wait for acks its peer gives only once its
/// own host released the step after).
pub const MAX_ASSISTED_CHUNKS: u32 = 8;

impl CollFields {
    pub fn encode(&self, b: &mut [u8]) {
        b[..crate::desc::DESC_SIZE as usize].fill(0);
        put_u8(b, 0, crate::desc::DescKind::Collective as u8);
        put_u8(b, 1, Priority::Low as u8);
        put_u8(b, 2, self.kind as u8);
        put_u8(b, 3, self.port);
        put_u16(b, 4, self.group);
        put_u64(b, 8, self.local);
        put_u32(b, 16, self.len);
        put_u32(b, 20, self.cseq);
        put_u64(b, 24, self.remote);
        put_u64(b, 32, self.tag);
        put_u8(b, 40, self.op as u8);
        put_u8(b, 41, self.dtype as u8);
        put_u8(b, 42, self.alg as u8);
        put_u16(b, 44, self.root);
        put_u8(b, 46, if self.assisted { FLAG_ASSISTED as u8 } else { 0 });
        put_u8(b, 43, self.step);
    }

    /// The fields of a collective descriptor, each in its domain (the
    /// group's size, the root's rank and the buffers are the firmware's
    /// to check).
    pub fn decode(b: &[u8]) -> Result<CollFields, ErrorCause> {
        if b.len() < crate::desc::DESC_SIZE as usize {
            return Err(ErrorCause::BadDescriptor);
        }
        let assisted = get_u8(b, 46) == FLAG_ASSISTED as u8;
        if get_u16(b, 6) != 0
            || get_u8(b, 46) & !(FLAG_ASSISTED as u8) != 0
            || (!assisted && get_u8(b, 43) != 0)
            || b[47..64].iter().any(|&x| x != 0)
        {
            return Err(ErrorCause::BadDescriptor);
        }
        let kind = Kind::from_u8(get_u8(b, 2)).ok_or(ErrorCause::BadDescriptor)?;
        let op = Op::from_u8(get_u8(b, 40)).ok_or(ErrorCause::BadDescriptor)?;
        let dtype = Dtype::from_u8(get_u8(b, 41)).ok_or(ErrorCause::BadDescriptor)?;
        let alg = Alg::from_u8(get_u8(b, 42)).ok_or(ErrorCause::BadDescriptor)?;
        let f = CollFields {
            kind,
            port: get_u8(b, 3),
            group: get_u16(b, 4),
            local: get_u64(b, 8),
            len: get_u32(b, 16),
            cseq: get_u32(b, 20),
            remote: get_u64(b, 24),
            tag: get_u64(b, 32),
            op,
            dtype,
            alg,
            root: get_u16(b, 44),
            assisted,
            step: get_u8(b, 43),
        };
        let ring = assisted && alg == Alg::Ring;
        if !alg.serves(kind) || (kind.combines() && !op.applies_to(dtype)) || ring {
            return Err(ErrorCause::BadDescriptor);
        }
        if (kind.has_data() && (f.len == 0 || !(f.len as usize).is_multiple_of(f.elem_size())))
            || (!kind.has_data() && f.len != 0)
            || f.cseq == 0
        {
            return Err(ErrorCause::BadLength);
        }
        Ok(f)
    }

    /// Bytes per element (a broadcast's vector is bytes).
    pub fn elem_size(&self) -> usize {
        unit(self.kind, self.dtype)
    }
}

/// The bytes a collective of `kind` cuts its vector in whole numbers of:
/// an element of type `t` for a reduction, a byte otherwise.
pub const fn unit(kind: Kind, t: Dtype) -> usize {
    if kind.combines() {
        t.size()
    } else {
        1
    }
}

/// The chunks the NICs cut a vector of `len` bytes of collective `kind`
/// (elements of `t`) into on a fabric of MTU `mtu` whose NICs have
/// `sram` bytes of SRAM.
pub const fn chunks_of(kind: Kind, t: Dtype, len: u32, mtu: u32, sram: u32) -> u32 {
    chunks(len, chunk_bytes(mtu, sram, unit(kind, t)))
}

/// What a `CollCtl` packet says (its `nack_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtlCode {
    /// The chunk named was taken (or had been: a duplicate).
    Ack = 1,
    /// Not taken for now (no room): send it again later. The NIC is there.
    Busy = 2,
    /// This NIC has no such group on that port open: the member is gone.
    Gone = 3,
    /// Are you there? (A member waits long for this one.)
    Probe = 4,
    /// The answer to a probe: the NIC is there, the group open.
    Alive = 5,
    /// The collective is over with members missing (payload: their nodes,
    /// the first bytes of an `event::LostHeads` bitmap).
    Abort = 6,
}

impl CtlCode {
    pub const fn from_u8(v: u8) -> Option<CtlCode> {
        Some(match v {
            1 => CtlCode::Ack,
            2 => CtlCode::Busy,
            3 => CtlCode::Gone,
            4 => CtlCode::Probe,
            5 => CtlCode::Alive,
            6 => CtlCode::Abort,
            _ => return None,
        })
    }
}

/// A collective's packet: `Coll` (a chunk's value, or a barrier's
/// signal) or `CollCtl` (an ack, a probe, an abort). Not sequenced: the
/// collective offload acknowledges and retransmits its own.
///
/// Header fields: `seq` the collective's number, `cookie` the group (low
/// 16 bits) and the step's tag (bits 16..24), `offset` the chunk,
/// `msg_len` the sender's rank (a `Gone` answer's is 0: the NIC has no
/// rank there), `remote` the vector's length in bytes in a probe, an
/// `Ack`'s mask of the chunks it covers from `offset` (bit i: chunk
/// `offset + i`; 0: that chunk alone), 0 otherwise, `nack_code` the
/// control code (`CollCtl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollRepr {
    pub addr: Addr,
    /// None: a `Coll` packet; else a `CollCtl` with this code.
    pub ctl: Option<CtlCode>,
    pub group: u16,
    pub cseq: u32,
    pub tag: u8,
    pub chunk: u32,
    pub from_rank: u16,
    pub len: u32,
}

impl CollRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let a = &self.addr;
        Header {
            ptype: if self.ctl.is_some() { PacketType::CollCtl } else { PacketType::Coll },
            flags: crate::packet::Flags::empty(),
            priority: a.priority,
            nack_code: self.ctl.map_or(0, |c| c as u8),
            src_node: a.src_node,
            dst_node: a.dst_node,
            src_port: a.src_port,
            dst_port: a.dst_port,
            size_class: 0,
            seq: self.cseq,
            ack: 0,
            msg_len: self.from_rank as u32,
            offset: self.chunk,
            payload_len: 0,
            remote: self.len as u64,
            cookie: self.group as u32 | (self.tag as u32) << 16,
            sync_boot: 0,
            sync_gen: 0,
            crc: 0,
        }
    }

    /// The fields of a `Coll` or `CollCtl` header (None for another type,
    /// or a control code out of its domain).
    pub fn parse(h: &Header) -> Option<CollRepr> {
        let ctl = match h.ptype {
            PacketType::Coll => None,
            PacketType::CollCtl => Some(CtlCode::from_u8(h.nack_code)?),
            _ => return None,
        };
        Some(CollRepr {
            addr: Addr {
                src_node: h.src_node,
                src_port: h.src_port,
                dst_node: h.dst_node,
                dst_port: h.dst_port,
                priority: h.priority,
            },
            ctl,
            group: h.cookie as u16,
            cseq: h.seq,
            tag: (h.cookie >> 16) as u8,
            chunk: h.offset,
            from_rank: h.msg_len.min(u16::MAX as u32) as u16,
            len: h.remote.min(u32::MAX as u64) as u32,
        })
    }
}

/// The chunk size collectives use for a vector of `elem`-byte elements
/// on a fabric of MTU `mtu` whose NICs have `sram` bytes of SRAM: the
/// MTU's whole elements, at most [`chunk_limit`].
pub const fn chunk_bytes(mtu: u32, sram: u32, elem: usize) -> u32 {
    let lim = chunk_limit(sram);
    let m = if mtu < lim { mtu } else { lim };
    let e = if elem == 0 { 1 } else { elem as u32 };
    let c = m / e * e;
    if c == 0 {
        e
    } else {
        c
    }
}

/// Largest chunk (one packet's payload), on a NIC with SRAM past the map
/// (`map::coll_ext_len`).
pub const CHUNK_MAX: u32 = 4096;
/// Largest chunk on a NIC with no SRAM past the map.
pub const CHUNK_SMALL: u32 = 1024;
/// Most chunks of one vector (a host-DMA tag names one in 12 bits).
pub const MAX_VECTOR_CHUNKS: u32 = 4095;

/// The largest chunk on a NIC of `sram` bytes of SRAM.
pub const fn chunk_limit(sram: u32) -> u32 {
    if crate::map::coll_ext_len(sram) > 0 {
        CHUNK_MAX
    } else {
        CHUNK_SMALL
    }
}

/// The longest vector of collective `kind` (elements of `t`) on a fabric
/// of MTU `mtu` whose NICs have `sram` bytes of SRAM.
pub const fn max_len(kind: Kind, t: Dtype, mtu: u32, sram: u32) -> u32 {
    chunk_bytes(mtu, sram, unit(kind, t)) * MAX_VECTOR_CHUNKS
}

/// Chunks of a vector of `len` bytes in chunks of `chunk` bytes (a
/// barrier has one, with no data).
pub const fn chunks(len: u32, chunk: u32) -> u32 {
    if len == 0 || chunk == 0 {
        1
    } else {
        len.div_ceil(chunk)
    }
}
