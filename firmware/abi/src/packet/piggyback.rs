//! The acks SEND writes into a sequenced packet's header as the packet
//! leaves: the header was built (and stored as its words,
//! [`Header::words`](super::Header::words)) when its transmit buffer was
//! filled, the acks are known only now. Each is a word read, changed and
//! stored back: a [`SeqRepr::ack`](super::SeqRepr::ack) (`Flags::ACK_VALID`)
//! and a report's [`ReportRepr::data_ack`](super::ReportRepr::data_ack)
//! (`Flags::MCAST`).

use super::{field, Flags};

/// The word (its byte offset in the header) that holds the flags.
pub const FLAGS_WORD: u32 = 0;
/// The word whose low half is the piggybacked ack.
pub const ACK_WORD: u32 = field::ACK as u32;
/// The word whose low half is a report's data ack.
pub const DATA_ACK_WORD: u32 = field::OFFSET as u32;

// Each of them is the low half of an aligned word; the flags are in the
// first.
const _: () = assert!(ACK_WORD.is_multiple_of(8) && DATA_ACK_WORD.is_multiple_of(8));
const FLAGS_SHIFT: u32 = 8 * field::FLAGS as u32;
const _: () = assert!(field::FLAGS < 8);

/// The flags in the first word.
#[inline(always)]
pub const fn flags(w0: u64) -> Flags {
    Flags::from_bits_retain((w0 >> FLAGS_SHIFT) as u8)
}

/// The first word with `add` set among its flags.
#[inline(always)]
pub const fn with_flags(w0: u64, add: Flags) -> u64 {
    w0 | (add.bits() as u64) << FLAGS_SHIFT
}

/// Has the packet (its first word) room for an ack? Not a SYNC naming its
/// incarnation: the incarnation takes the ack's room.
#[inline(always)]
pub const fn has_ack_room(w0: u64) -> bool {
    !flags(w0).contains(Flags::INCARNATION)
}

/// Word [`ACK_WORD`] carrying `ack`; the packet then has
/// `Flags::ACK_VALID` ([`with_flags`]).
#[inline(always)]
pub const fn with_ack(w: u64, ack: u32) -> u64 {
    with_low_half(w, ack)
}

/// A report's word [`DATA_ACK_WORD`] carrying `ack`, the ack of the
/// multicast's data stream; the report then has `Flags::MCAST`
/// ([`with_flags`]).
#[inline(always)]
pub const fn with_data_ack(w: u64, ack: u32) -> u64 {
    with_low_half(w, ack)
}

#[inline(always)]
const fn with_low_half(w: u64, v: u32) -> u64 {
    (w & !0xffff_ffff) | v as u64
}
