//! The wire format. A packet on a link is its remaining source route
//! followed by the packet proper:
//!
//! ```text
//! route bytes (0x80 | switch output port), one per switch still to cross;
//! each switch consumes the first. A byte with bit 7 clear starts the header.
//! header (48 bytes):
//!  0 ptype u8 (bit 7 clear)  1 flags u8  2 priority u8  3 nack_code u8
//!  4 src_node u16   6 dst_node u16   8 src_port u8   9 dst_port u8
//! 10 size_class u8 11 sync_gen u8   12 seq u32   16 ack u32
//! 20 msg_len u32   24 offset u32    28 payload_len u16   30 sync_boot u16
//! 32 remote u64    40 cookie u32    44 crc u32
//! payload (payload_len bytes)
//! ```
//!
//! `crc` is CRC-32 (IEEE 802.3 polynomial, as zlib's `crc32`) over header
//! and payload with the crc field taken as zero. The send-DMA engine fills
//! it in; the receive-DMA engine checks it and flags a mismatch.
//!
//! Sequence and ack numbers belong to a *stream*: (sending node, sending
//! port, receiving node, receiving port, priority). A data-bearing packet
//! (Data, Put, GetReq, GetResp) from S:a to D:b carries `seq` of stream
//! S:a->D:b. With `ACK_VALID`, `ack` tells D that S has everything before
//! `ack` of the reverse stream D:b->S:a (same priority): a cumulative ack,
//! piggybacked on data or sent alone in an Ack packet. A Nack from S:a to
//! D:b refuses `seq` of stream D:b->S:a for `nack_code`.
//!
//! Multicast rides on these streams: a multicast is unicasts along the
//! edges of a tree (or chain), each packet flagged `MCAST` with the
//! multicast's [`McastTag`] in `remote`/`cookie`; a member tells its
//! parent that its subtree has the message with a sequenced `Report`.

use crate::le::*;
use crate::{ParseError, Priority, MAX_MTU};

pub mod piggyback;
mod repr;
#[cfg(test)]
mod repr_tests;
mod view;

pub use repr::*;
pub use view::*;

pub const HEADER_LEN: usize = 48;

/// The header in 64-bit words.
pub const HEADER_WORDS: usize = HEADER_LEN / 8;
/// Route bytes have bit 7 set.
pub const ROUTE_FLAG: u8 = 0x80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    /// A fragment of a message for a receive buffer.
    Data = 1,
    /// A cumulative ack alone.
    Ack = 2,
    /// A refusal of one sequence number (see `NackCode`).
    Nack = 3,
    /// A fragment of a directed send into registered memory at `remote`.
    Put = 4,
    /// A request to read `msg_len` bytes at `remote`; `cookie` names it.
    GetReq = 5,
    /// A fragment of the answer to a get, for the requester's `remote`.
    GetResp = 6,
    /// A multicast member tells its parent in the tree that its subtree
    /// has the message `remote` names ([`McastTag`]); `msg_len` counts the
    /// members of that subtree that could not be reached; the payload (the
    /// first bytes of an `event::LostHeads` bitmap, up to its last byte
    /// with a bit set; none when nothing was lost) names the heads of the
    /// subtrees lost.
    Report = 7,
    /// The sender of a stream asks where it stands (sent when its
    /// retransmission timer runs out, instead of resending blindly):
    /// `seq` is its first unacknowledged sequence number, `offset` the next
    /// it would send, `nack_code` its round. The receiver answers with an
    /// ack, or an `OutOfOrder` nack for the first packet it lacks. Under
    /// selective repeat `msg_len` carries the poll sequence number (its
    /// low byte) and the receiver answers with a `Stat`.
    Poll = 8,
    /// Selective repeat: a receiver's answer to a poll (ack in `ack`,
    /// `ACK_VALID`): the payload lists the ranges it misses, as
    /// `STAT_PAYLOAD_MAX` bytes at most (poll number, the poll's next
    /// sequence number, the cumulative ack, the count of ranges, then
    /// each range's first and one-past-last sequence number; u32 each,
    /// little-endian).
    Stat = 9,
    /// Selective repeat: a receiver names at once the gap a packet
    /// arriving past it opened (ack in `ack`, `ACK_VALID`): the payload
    /// lists the runs of it still missing, as a `Stat`'s does (poll
    /// number 0, the gap's end as the next sequence number).
    Ustat = 10,
    /// Echo offload: a NIC asks the NIC `dst_node` to answer at once
    /// (`cookie` names the request, `remote` the asking NIC's RTC when it
    /// went). Not sequenced, no payload.
    EchoRequest = 11,
    /// Echo offload: the answer to an `EchoRequest`, with its `cookie` and
    /// `remote` as they came.
    EchoReply = 12,
    /// Collective offload: a chunk of a collective's vector, or a
    /// barrier's signal (`collective::CollRepr`). Not sequenced: the
    /// offload acknowledges and retransmits its own.
    Coll = 13,
    /// Collective offload: an ack, a probe or an abort
    /// (`collective::CtlCode` in `nack_code`).
    CollCtl = 14,
}

/// Types from this one on belong to offloads (`mcp::offload`): RECV hands
/// a checked packet of such a type to the offload that owns it, and counts
/// and drops it when none does (its offload is compiled out).
pub const OFFLOAD_TYPES_FROM: u8 = 11;

/// Most ranges a `Stat` lists.
pub const STAT_RANGES_MAX: usize = 16;
/// Longest `Stat` payload: four words and two per range.
pub const STAT_PAYLOAD_MAX: usize = 16 + 8 * STAT_RANGES_MAX;

impl PacketType {
    pub const fn from_u8(v: u8) -> Option<PacketType> {
        Some(match v {
            1 => PacketType::Data,
            2 => PacketType::Ack,
            3 => PacketType::Nack,
            4 => PacketType::Put,
            5 => PacketType::GetReq,
            6 => PacketType::GetResp,
            7 => PacketType::Report,
            8 => PacketType::Poll,
            9 => PacketType::Stat,
            10 => PacketType::Ustat,
            11 => PacketType::EchoRequest,
            12 => PacketType::EchoReply,
            13 => PacketType::Coll,
            14 => PacketType::CollCtl,
            _ => return None,
        })
    }

    /// Does this packet carry a sequence number of its stream?
    pub const fn is_sequenced(self) -> bool {
        matches!(
            self,
            PacketType::Data
                | PacketType::Put
                | PacketType::GetReq
                | PacketType::GetResp
                | PacketType::Report
        )
    }
}

/// Why a packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackCode {
    /// A gap: `seq` is the one expected; resend from it (go-back-N).
    OutOfOrder = 1,
    /// No receive buffer of the class and priority: retry later.
    NoBuffer = 2,
    /// The target port is closed.
    PortClosed = 3,
    /// The put/get range is not registered by the target port.
    RemoteAccess = 4,
    /// The receiver lacks resources for now: retry later.
    Busy = 5,
    /// The receiver has no state for this stream (its NIC was reset) and
    /// the packet is not a SYNC: start the stream again with SYNC.
    Unsynced = 6,
}

impl NackCode {
    pub const fn from_u8(v: u8) -> Option<NackCode> {
        Some(match v {
            1 => NackCode::OutOfOrder,
            2 => NackCode::NoBuffer,
            3 => NackCode::PortClosed,
            4 => NackCode::RemoteAccess,
            5 => NackCode::Busy,
            6 => NackCode::Unsynced,
            _ => return None,
        })
    }
}

bitflags::bitflags! {
    /// Header flag bits.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Flags: u8 {
        /// First packet of a message.
        const FIRST = 1;
        /// Last packet of a message.
        const LAST = 2;
        /// `ack` is valid.
        const ACK_VALID = 4;
        /// The sender (re)starts this stream here: it is new (the NIC
        /// booted), it abandoned earlier sequence numbers (its port closed,
        /// or the peer was unreachable), or the receiver lost its state. The
        /// receiver takes `seq` as the next expected one, dropping any
        /// partial message, when the SYNC is news: the first it sees, one
        /// from another boot of the sender (`sync_boot`), or a new
        /// `sync_gen` that does not go back before what it already took.
        /// Only on the first packet of a message.
        const SYNC = 8;
        /// A packet of a multicast message: `remote` holds its
        /// [`McastTag`] (group, message number, scheme, algorithm, and the
        /// receiver's subtree size). On a Report: `offset` holds the ack of
        /// the data stream the multicast came on. On an Ack, Nack, Poll,
        /// Stat or Ustat: it is of the report stream between the two ports.
        const MCAST = 16;
        /// With SYNC, and on a Poll: `ack` holds the stream's incarnation,
        /// not an ack (whatever `ACK_VALID` says, a packet with it carries
        /// none). A sender that let an idle stream go (its table was full)
        /// and makes it again numbers the new one; the receiver takes a
        /// SYNC of a later incarnation as news even where a new `sync_gen`
        /// would not be (the new stream's sequence numbers start
        /// elsewhere).
        const INCARNATION = 32;
    }
}

/// What a multicast packet (Data with `Flags::MCAST`, or a Report) says
/// about the multicast it belongs to, packed into the header's `remote`:
///
/// ```text
/// bits  0..16 group     the group's id (its slot in the group table)
/// bits 16..48 mseq      the multicast's number in its group
/// bits 48..52 scheme    nic_abi::multicast::Scheme code
/// bits 52..56 alg       nic_abi::multicast::Algorithm code
/// bits 56..64 k         the k of a k-binomial tree (else 0)
/// ```
/// and into `cookie`: the size of the subtree the receiver heads (itself
/// included; 1 for a leaf); a Report's: the reporting member's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McastTag {
    pub group: u16,
    pub mseq: u32,
    pub scheme: u8,
    pub alg: u8,
    pub k: u8,
    pub subtree: u16,
}

impl McastTag {
    pub const fn remote(&self) -> u64 {
        self.group as u64
            | (self.mseq as u64) << 16
            | ((self.scheme & 0xF) as u64) << 48
            | ((self.alg & 0xF) as u64) << 52
            | (self.k as u64) << 56
    }

    pub const fn cookie(&self) -> u32 {
        self.subtree as u32
    }

    pub const fn from_header(remote: u64, cookie: u32) -> McastTag {
        McastTag {
            group: remote as u16,
            mseq: (remote >> 16) as u32,
            scheme: ((remote >> 48) & 0xF) as u8,
            alg: ((remote >> 52) & 0xF) as u8,
            k: (remote >> 56) as u8,
            subtree: cookie as u16,
        }
    }
}

/// Field offsets (for firmware that patches a header in place).
pub mod field {
    pub const SEQ: usize = 12;
    pub const ACK: usize = 16;
    pub const OFFSET: usize = 24;
    pub const FLAGS: usize = 1;
    pub const PAYLOAD_LEN: usize = 28;
    pub const CRC: usize = 44;
}

/// A packet header as a plain struct: the wire's fields as they are, for
/// the codecs (`words`, `encode`, `parse`), the simulator, captures and
/// tools. Several fields mean different things by packet type and flags
/// (`nack_code`, `ack`, `msg_len`, `offset`, `remote`, `cookie`, the sync
/// fields): code that acts on a packet reads it through its type's view
/// ([`Header::view`]) and builds it from its type's repr ([`PacketRepr`]),
/// which name each field for what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub ptype: PacketType,
    pub flags: Flags,
    pub priority: Priority,
    pub nack_code: u8,
    pub src_node: u16,
    pub dst_node: u16,
    pub src_port: u8,
    pub dst_port: u8,
    pub size_class: u8,
    pub seq: u32,
    pub ack: u32,
    pub msg_len: u32,
    pub offset: u32,
    pub payload_len: u16,
    pub remote: u64,
    pub cookie: u32,
    /// The sender NIC's boot nonce (changes when it restarts): on each
    /// packet of a message sent with SYNC ([`SyncStamp`]), and in a Poll.
    pub sync_boot: u16,
    /// Which resynchronisation of the stream, in this boot: on each
    /// packet of a message sent with SYNC ([`SyncStamp`]).
    pub sync_gen: u8,
    pub crc: u32,
}

impl Header {
    /// The header as the six little-endian 64-bit words [`Header::encode`]
    /// writes (word `i` is bytes `8 i..8 i + 8`): firmware stores them as
    /// words, not byte by byte.
    #[inline]
    pub fn words(&self) -> [u64; HEADER_WORDS] {
        let b8 = |v: u8, at: u32| (v as u64) << at;
        let b16 = |v: u16, at: u32| (v as u64) << at;
        let b32 = |v: u32, at: u32| (v as u64) << at;
        [
            b8(self.ptype as u8, 0)
                | b8(self.flags.bits(), 8)
                | b8(self.priority as u8, 16)
                | b8(self.nack_code, 24)
                | b16(self.src_node, 32)
                | b16(self.dst_node, 48),
            b8(self.src_port, 0)
                | b8(self.dst_port, 8)
                | b8(self.size_class, 16)
                | b8(self.sync_gen, 24)
                | b32(self.seq, 32),
            b32(self.ack, 0) | b32(self.msg_len, 32),
            b32(self.offset, 0) | b16(self.payload_len, 32) | b16(self.sync_boot, 48),
            self.remote,
            b32(self.cookie, 0) | b32(self.crc, 32),
        ]
    }

    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u8(b, 0, self.ptype as u8);
        put_u8(b, 1, self.flags.bits());
        put_u8(b, 2, self.priority as u8);
        put_u8(b, 3, self.nack_code);
        put_u16(b, 4, self.src_node);
        put_u16(b, 6, self.dst_node);
        put_u8(b, 8, self.src_port);
        put_u8(b, 9, self.dst_port);
        put_u8(b, 10, self.size_class);
        put_u8(b, 11, self.sync_gen);
        put_u32(b, 12, self.seq);
        put_u32(b, 16, self.ack);
        put_u32(b, 20, self.msg_len);
        put_u32(b, 24, self.offset);
        put_u16(b, 28, self.payload_len);
        put_u16(b, 30, self.sync_boot);
        put_u64(b, 32, self.remote);
        put_u32(b, 40, self.cookie);
        put_u32(b, 44, self.crc);
    }

    /// Parse the header of a packet of `b.len()` bytes (header + payload,
    /// no route bytes). Checks every field's domain and that the length
    /// agrees with `payload_len`. Never panics.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<Header, ParseError> {
        Header::parse_prefix(b, b.len())
    }

    /// Parse from the first bytes of a packet whose whole length is
    /// `total` (for firmware that reads only the header out of SRAM).
    #[inline]
    pub fn parse_prefix(b: &[u8], total: usize) -> Result<Header, ParseError> {
        if b.len() < HEADER_LEN || total < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let w: [u64; HEADER_WORDS] = core::array::from_fn(|i| get_u64(b, 8 * i));
        Header::from_words(&w, total)
    }

    /// Parse the header as its six little-endian words (as firmware loads
    /// them out of SRAM), of a packet whose whole length is `total`: the
    /// checks of [`Header::parse_prefix`], without a byte copy.
    #[inline]
    pub fn from_words(w: &[u64; HEADER_WORDS], total: usize) -> Result<Header, ParseError> {
        if total < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let byte = |k: usize| (w[k / 8] >> (8 * (k % 8))) as u8;
        let half = |k: usize| (w[k / 8] >> (8 * (k % 8))) as u16;
        let word = |k: usize| (w[k / 8] >> (8 * (k % 8))) as u32;
        let ptype = PacketType::from_u8(byte(0)).ok_or(ParseError::BadField("ptype"))?;
        let fl = Flags::from_bits(byte(1)).ok_or(ParseError::BadField("flags"))?;
        let priority = Priority::from_u8(byte(2)).ok_or(ParseError::BadField("priority"))?;
        let h = Header {
            ptype,
            flags: fl,
            priority,
            nack_code: byte(3),
            src_node: half(4),
            dst_node: half(6),
            src_port: byte(8),
            dst_port: byte(9),
            size_class: byte(10),
            seq: word(12),
            ack: word(16),
            msg_len: word(20),
            offset: word(24),
            payload_len: half(28),
            remote: w[4],
            cookie: word(40),
            sync_boot: half(30),
            sync_gen: byte(11),
            crc: word(44),
        };
        if h.payload_len as usize > MAX_MTU {
            return Err(ParseError::BadField("payload_len"));
        }
        if total < HEADER_LEN + h.payload_len as usize {
            return Err(ParseError::Truncated);
        }
        if total > HEADER_LEN + h.payload_len as usize {
            return Err(ParseError::BadField("payload_len"));
        }
        if h.src_port as usize >= crate::NUM_PORTS || h.dst_port as usize >= crate::NUM_PORTS {
            return Err(ParseError::BadField("port"));
        }
        match ptype {
            PacketType::Data | PacketType::Put | PacketType::GetResp => {
                if (h.offset as u64 + h.payload_len as u64) > h.msg_len as u64 {
                    return Err(ParseError::BadField("offset"));
                }
            }
            PacketType::Nack => {
                if NackCode::from_u8(h.nack_code).is_none() {
                    return Err(ParseError::BadField("nack_code"));
                }
            }
            PacketType::Ack | PacketType::GetReq | PacketType::Poll => {
                if h.payload_len != 0 {
                    return Err(ParseError::BadField("payload_len"));
                }
            }
            // A Report may name the subtrees it lost: (node, members) u32s.
            PacketType::Report => {
                if h.payload_len as usize > crate::event::LOST_BYTES {
                    return Err(ParseError::BadField("payload_len"));
                }
            }
            PacketType::Stat | PacketType::Ustat => {
                if h.payload_len as usize > STAT_PAYLOAD_MAX {
                    return Err(ParseError::BadField("payload_len"));
                }
            }
            // The offloads' types: their owners check what they carry.
            PacketType::EchoRequest
            | PacketType::EchoReply
            | PacketType::Coll
            | PacketType::CollCtl => {}
        }
        Ok(h)
    }

    #[inline]
    pub fn has(&self, flag: Flags) -> bool {
        self.flags.contains(flag)
    }
}

/// Length of the route at the start of `wire` (its leading bytes with bit
/// 7 set).
#[inline]
pub fn route_len(wire: &[u8]) -> usize {
    wire.iter().take_while(|b| *b & ROUTE_FLAG != 0).count()
}

/// A route byte naming switch output port `port` (0..=127).
pub const fn route_byte(port: u8) -> u8 {
    ROUTE_FLAG | (port & 0x7F)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data() -> Header {
        Header {
            ptype: PacketType::Data,
            flags: Flags::FIRST.union(Flags::ACK_VALID),
            priority: Priority::High,
            nack_code: 0,
            src_node: 1,
            dst_node: 15,
            src_port: 2,
            dst_port: 7,
            size_class: 16,
            seq: 100,
            ack: 55,
            msg_len: 65536,
            offset: 4096,
            payload_len: 4,
            remote: 0,
            cookie: 0,
            sync_boot: 0,
            sync_gen: 0,
            crc: 0xabcd,
        }
    }

    #[test]
    fn words_are_the_encoded_bytes() {
        let h = Header {
            ptype: PacketType::Put,
            flags: Flags::FIRST | Flags::SYNC,
            priority: Priority::High,
            nack_code: 0xa1,
            src_node: 0x1234,
            dst_node: 0x5678,
            src_port: 3,
            dst_port: 5,
            size_class: 12,
            seq: 0xdead_beef,
            ack: 0x0102_0304,
            msg_len: 0x1111_2222,
            offset: 0x3333_4444,
            payload_len: 0x0fed,
            remote: 0x7000_0001_2345_6789,
            cookie: 0x5555_6666,
            sync_boot: 0xbeef,
            sync_gen: 0x42,
            crc: 0x7777_8888,
        };
        let mut b = [0u8; HEADER_LEN];
        h.encode(&mut b);
        let mut from_words = [0u8; HEADER_LEN];
        for (i, w) in h.words().iter().enumerate() {
            from_words[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        assert_eq!(from_words, b);
    }

    fn bytes(h: &Header) -> [u8; HEADER_LEN + 4] {
        let mut b = [0u8; HEADER_LEN + 4];
        h.encode(&mut b);
        b
    }

    #[test]
    fn header_round_trips() {
        let h = data();
        assert_eq!(Header::parse(&bytes(&h)), Ok(h));
    }

    #[test]
    fn every_field_comes_back_from_its_place_in_the_words() {
        let h = Header {
            nack_code: 3,
            remote: 0x1122_3344_5566_7788,
            cookie: 0x99aa_bbcc,
            sync_boot: 0xddee,
            sync_gen: 0x5a,
            ..data()
        };
        let b = bytes(&h);
        let w: [u64; HEADER_WORDS] =
            core::array::from_fn(|i| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()));
        assert_eq!(Header::from_words(&w, b.len()), Ok(h));
        assert_eq!(Header::from_words(&w, HEADER_LEN - 1), Err(ParseError::Truncated));
    }

    #[test]
    fn truncated_packets_are_refused() {
        let b = bytes(&data());
        for n in 0..b.len() {
            assert_eq!(Header::parse(&b[..n]), Err(ParseError::Truncated), "len {n}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let mut h = data();
        let mut b = bytes(&h);
        b[0] = 0x7f;
        assert_eq!(Header::parse(&b), Err(ParseError::BadField("ptype")));
        let mut b = bytes(&h);
        b[1] = 0x80;
        assert_eq!(Header::parse(&b), Err(ParseError::BadField("flags")));
        let mut b = bytes(&h);
        b[2] = 3;
        assert_eq!(Header::parse(&b), Err(ParseError::BadField("priority")));
        h.dst_port = 8;
        assert_eq!(Header::parse(&bytes(&h)), Err(ParseError::BadField("port")));
        h = data();
        h.offset = 65534;
        assert_eq!(Header::parse(&bytes(&h)), Err(ParseError::BadField("offset")));
        h = data();
        h.ptype = PacketType::Nack;
        h.nack_code = 99;
        assert_eq!(Header::parse(&bytes(&h)), Err(ParseError::BadField("nack_code")));
        h = data();
        h.ptype = PacketType::Ack;
        assert_eq!(Header::parse(&bytes(&h)), Err(ParseError::BadField("payload_len")));
        // Longer than payload_len says.
        let mut long = [0u8; HEADER_LEN + 8];
        data().encode(&mut long);
        assert_eq!(Header::parse(&long), Err(ParseError::BadField("payload_len")));
    }

    #[test]
    fn mcast_tag_round_trips_through_remote_and_cookie() {
        let t = McastTag { group: 7, mseq: 0xDEAD_BEEF, scheme: 3, alg: 4, k: 5, subtree: 300 };
        assert_eq!(McastTag::from_header(t.remote(), t.cookie()), t);
        let mut h = data();
        h.flags |= Flags::MCAST;
        h.remote = t.remote();
        h.cookie = t.cookie();
        let b = bytes(&h);
        let p = Header::parse(&b).unwrap();
        assert!(p.has(Flags::MCAST));
        assert_eq!(McastTag::from_header(p.remote, p.cookie), t);
    }

    #[test]
    fn a_report_carries_at_most_a_whole_lost_heads_bitmap() {
        let mut h = data();
        h.ptype = PacketType::Report;
        for (len, ok) in [(0, true), (3, true), (128, true), (129, false), (4000, false)] {
            h.payload_len = len;
            let mut b = vec![0u8; HEADER_LEN + len as usize];
            h.encode(&mut b);
            let got = Header::parse(&b).map(|h| h.ptype);
            let want =
                if ok { Ok(PacketType::Report) } else { Err(ParseError::BadField("payload_len")) };
            assert_eq!(got, want, "{len} bytes");
        }
        assert!(PacketType::Report.is_sequenced());
    }

    #[test]
    fn route_is_the_leading_flagged_bytes() {
        assert_eq!(route_len(&[route_byte(3), route_byte(0), 1, 0x80]), 2);
        assert_eq!(route_len(&[]), 0);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Header::parse(&bytes);
            let _ = route_len(&bytes);
        }

        #[test]
        fn valid_headers_round_trip(seq: u32, ack: u32, len in 0u16..=64, prio in 0u8..2) {
            let mut h = data();
            h.seq = seq; h.ack = ack; h.payload_len = len; h.offset = 0; h.msg_len = 64;
            h.priority = Priority::from_u8(prio).unwrap();
            let mut b = std::vec![0u8; HEADER_LEN + len as usize];
            h.encode(&mut b);
            prop_assert_eq!(Header::parse(&b), Ok(h));
        }
    }
}
