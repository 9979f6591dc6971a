//! The packet types as plain values (after smoltcp's `Repr` types): one
//! struct per type, or per family of types sharing a layout, its fields
//! named for what they mean for that type, and [`PacketRepr`] over them,
//! parsed from a [`Header`] and emitted to one. The MCP builds every
//! header it sends from these; it reads received ones through the views
//! ([`super::view`]), which name the same fields without a copy.
//!
//! `emit` writes zero in every field the type does not use (and in
//! `crc`, the send-DMA engine's); `parse` ignores them. So `parse` of
//! `emit` gives the repr back, and `emit` of `parse` gives the header back
//! for every header the MCP sends.

use super::view::PacketView;
use super::{Flags, Header, McastTag, NackCode, PacketType, HEADER_WORDS};
use crate::{ParseError, Priority};

/// The ends of a packet: what every type carries alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    /// The sending NIC.
    pub src_node: u16,
    /// The sending port.
    pub src_port: u8,
    /// The receiving NIC.
    pub dst_node: u16,
    /// The receiving port.
    pub dst_port: u8,
    /// The priority: with the ports, the stream a packet belongs to.
    pub priority: Priority,
}

impl Addr {
    #[inline(always)]
    pub(super) fn of(h: &Header) -> Addr {
        Addr {
            src_node: h.src_node,
            src_port: h.src_port,
            dst_node: h.dst_node,
            dst_port: h.dst_port,
            priority: h.priority,
        }
    }

    /// A header of `ptype` between these ends, every other field zero.
    #[inline(always)]
    fn header(&self, ptype: PacketType) -> Header {
        Header {
            ptype,
            flags: Flags::empty(),
            priority: self.priority,
            nack_code: 0,
            src_node: self.src_node,
            dst_node: self.dst_node,
            src_port: self.src_port,
            dst_port: self.dst_port,
            size_class: 0,
            seq: 0,
            ack: 0,
            msg_len: 0,
            offset: 0,
            payload_len: 0,
            remote: 0,
            cookie: 0,
            sync_boot: 0,
            sync_gen: 0,
            crc: 0,
        }
    }
}

/// Which start of its stream a message belongs to: the sender stamps
/// every packet of a message it sends with `Flags::SYNC` (the flag is on
/// the first only), and zero on the others; a receiver reads the stamp of
/// the SYNC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStamp {
    /// The sender NIC's boot nonce (changes when it restarts).
    pub boot: u16,
    /// Which resynchronisation of the stream, in this boot.
    pub gen: u8,
}

impl SyncStamp {
    /// The stamp of a message sent without SYNC.
    pub const NONE: SyncStamp = SyncStamp { boot: 0, gen: 0 };
}

/// What every sequenced packet (Data, Put, GetReq, GetResp, Report) says
/// about its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRepr {
    pub addr: Addr,
    /// The message's size class (a Data message's receive buffer class).
    pub size_class: u8,
    /// The packet's sequence number in its stream.
    pub seq: u32,
    /// The sender's round when it sent the packet (the window policy's
    /// number: go-back-N's rewinds, selective repeat's poll stamp): a nack
    /// it draws echoes it (`nack_code` on the wire).
    pub round: u8,
    /// The first packet of its message (`Flags::FIRST`).
    pub first: bool,
    /// The last packet of its message (`Flags::LAST`).
    pub last: bool,
    /// The cumulative ack of the reverse stream piggybacked
    /// (`Flags::ACK_VALID`; SEND writes it in as the packet leaves,
    /// [`super::piggyback`]). Never with `incarnation`, which takes its
    /// room: `emit` leaves it out then.
    pub ack: Option<u32>,
    /// `Flags::SYNC` (on a message's first packet only): the sender
    /// (re)starts the stream here.
    pub sync: bool,
    /// Which start of the stream the packet's message belongs to.
    pub stamp: SyncStamp,
    /// `Flags::INCARNATION` (with SYNC): the stream's incarnation, in the
    /// ack's room (`ack` on the wire): the sender let an idle stream go
    /// and made it again.
    pub incarnation: Option<u32>,
}

impl SeqRepr {
    #[inline(always)]
    fn parse(v: super::SeqView<'_>) -> SeqRepr {
        SeqRepr {
            addr: v.addr().repr(),
            size_class: v.size_class(),
            seq: v.seq(),
            round: v.round(),
            first: v.first(),
            last: v.last(),
            ack: v.ack(),
            sync: v.sync(),
            stamp: v.stamp(),
            incarnation: v.incarnation(),
        }
    }

    /// A header of `ptype` with the stream's fields, the others zero.
    #[inline(always)]
    fn header(&self, ptype: PacketType) -> Header {
        let mut flags = Flags::empty();
        flags.set(Flags::FIRST, self.first);
        flags.set(Flags::LAST, self.last);
        flags.set(Flags::SYNC, self.sync);
        let ack = match (self.incarnation, self.ack) {
            (Some(inc), _) => {
                flags |= Flags::INCARNATION;
                inc
            }
            (None, Some(ack)) => {
                flags |= Flags::ACK_VALID;
                ack
            }
            (None, None) => 0,
        };
        Header {
            flags,
            nack_code: self.round,
            size_class: self.size_class,
            seq: self.seq,
            ack,
            sync_boot: self.stamp.boot,
            sync_gen: self.stamp.gen,
            ..self.addr.header(ptype)
        }
    }
}

/// What a fragment of a message is for: its type and what that type
/// carries besides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// `Data`: for a receive buffer. `mcast`: a multicast's message
    /// (`Flags::MCAST`), its tag (`remote`) with the size of the subtree
    /// the receiver heads (`cookie`).
    Data { mcast: Option<McastTag> },
    /// `Put`: for the receiver's registered memory, from `remote_addr`
    /// (`remote`) on.
    Put { remote_addr: u64 },
    /// `GetResp`: the answer to the get `get` names (the requester's
    /// `GetReqRepr::get`, in `cookie`), for the memory it reads into.
    GetResp { get: u32 },
}

/// `Data`, `Put`, `GetResp`: a fragment of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr {
    pub stream: SeqRepr,
    pub kind: DataKind,
    /// The message's length.
    pub msg_len: u32,
    /// The payload's offset in the message.
    pub offset: u32,
    /// The payload's length.
    pub payload_len: u16,
}

impl DataRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let (ptype, mcast, remote, cookie) = match self.kind {
            DataKind::Data { mcast: None } => (PacketType::Data, Flags::empty(), 0, 0),
            DataKind::Data { mcast: Some(t) } => {
                (PacketType::Data, Flags::MCAST, t.remote(), t.cookie())
            }
            DataKind::Put { remote_addr } => (PacketType::Put, Flags::empty(), remote_addr, 0),
            DataKind::GetResp { get } => (PacketType::GetResp, Flags::empty(), 0, get),
        };
        let h = self.stream.header(ptype);
        Header {
            flags: h.flags | mcast,
            msg_len: self.msg_len,
            offset: self.offset,
            payload_len: self.payload_len,
            remote,
            cookie,
            ..h
        }
    }
}

/// `GetReq`: a request to read the receiver's memory. No payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetReqRepr {
    pub stream: SeqRepr,
    /// Where to read, in the receiving port's registered memory
    /// (`remote`).
    pub remote_addr: u64,
    /// How many bytes (`msg_len`).
    pub len: u32,
    /// Names the get (the requester's token, in `cookie`): its answer
    /// carries it back.
    pub get: u32,
}

impl GetReqRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        Header {
            remote: self.remote_addr,
            msg_len: self.len,
            cookie: self.get,
            ..self.stream.header(PacketType::GetReq)
        }
    }
}

/// `Report`: a multicast member tells its parent that its subtree has the
/// message; the payload names the heads of the subtrees lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportRepr {
    pub stream: SeqRepr,
    /// The multicast it speaks of (`remote`), with the size of the
    /// reporting member's subtree (`cookie`).
    pub tag: McastTag,
    /// How many members of that subtree were not reached (`msg_len`).
    pub unreached: u32,
    /// `Flags::MCAST`: the ack of the data stream the multicast came on
    /// (`offset`; SEND writes it in as the report leaves,
    /// [`super::piggyback`]).
    pub data_ack: Option<u32>,
    /// The bytes of the lost heads' bitmap in the payload (the first
    /// bytes of an `event::LostHeads`, up to its last byte with a bit set;
    /// none when nothing was lost).
    pub lost_len: u16,
}

impl ReportRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let h = self.stream.header(PacketType::Report);
        Header {
            flags: if self.data_ack.is_some() { h.flags | Flags::MCAST } else { h.flags },
            msg_len: self.unreached,
            offset: self.data_ack.unwrap_or(0),
            payload_len: self.lost_len,
            remote: self.tag.remote(),
            cookie: self.tag.cookie(),
            ..h
        }
    }
}

/// The `Flags::MCAST` of a control packet: of the report stream between
/// its two ports (`report_stream`).
#[inline(always)]
fn report_flag(report_stream: bool) -> Flags {
    if report_stream {
        Flags::MCAST
    } else {
        Flags::empty()
    }
}

/// The `Flags::ACK_VALID` and the `ack` field of `ack`.
#[inline(always)]
fn ack_fields(ack: Option<u32>) -> (Flags, u32) {
    match ack {
        Some(a) => (Flags::ACK_VALID, a),
        None => (Flags::empty(), 0),
    }
}

/// `Ack`: a cumulative ack alone. No payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRepr {
    pub addr: Addr,
    /// `Flags::ACK_VALID`: everything of the reverse stream before it is
    /// received (always, as the MCP sends it).
    pub ack: Option<u32>,
    /// `Flags::MCAST`: of the report stream between the two ports.
    pub report_stream: bool,
}

impl AckRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let (flags, ack) = ack_fields(self.ack);
        Header {
            flags: flags | report_flag(self.report_stream),
            ack,
            ..self.addr.header(PacketType::Ack)
        }
    }
}

/// `Nack`: the refusal of one sequence number of the reverse stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackRepr {
    pub addr: Addr,
    /// Why (`nack_code`).
    pub code: NackCode,
    /// The sequence number refused (`OutOfOrder`: the one expected).
    pub seq: u32,
    /// The round of the packet (or poll) that drew it (`offset`).
    pub round: u8,
    /// `Flags::ACK_VALID`: the cumulative ack, as an Ack's.
    pub ack: Option<u32>,
    /// `Flags::MCAST`: of the report stream between the two ports.
    pub report_stream: bool,
}

impl NackRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let (flags, ack) = ack_fields(self.ack);
        Header {
            flags: flags | report_flag(self.report_stream),
            nack_code: self.code as u8,
            seq: self.seq,
            ack,
            offset: self.round as u32,
            ..self.addr.header(PacketType::Nack)
        }
    }
}

/// `Poll`: the sender of a stream asks where it stands (its
/// retransmission timer ran out). No payload, no ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollRepr {
    pub addr: Addr,
    /// The sender's first unacknowledged sequence number (`seq`).
    pub una: u32,
    /// The first sequence number it has not put on the wire yet
    /// (`offset`).
    pub next: u32,
    /// Its round (`nack_code`): a nack answering the poll echoes it.
    pub round: u8,
    /// Its poll number under selective repeat, 0 under go-back-N
    /// (`msg_len`).
    pub poll: u8,
    /// The sending NIC's boot nonce (`sync_boot`).
    pub boot: u16,
    /// `Flags::INCARNATION`: the incarnation of a stream made again
    /// (`ack`).
    pub incarnation: Option<u32>,
    /// `Flags::MCAST`: of the report stream between the two ports.
    pub report_stream: bool,
}

impl PollRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let mut flags = report_flag(self.report_stream);
        if self.incarnation.is_some() {
            flags |= Flags::INCARNATION;
        }
        Header {
            flags,
            nack_code: self.round,
            seq: self.una,
            ack: self.incarnation.unwrap_or(0),
            msg_len: self.poll as u32,
            offset: self.next,
            sync_boot: self.boot,
            ..self.addr.header(PacketType::Poll)
        }
    }
}

/// `Stat` or `Ustat`: selective repeat's report of what a receiver
/// misses; the payload lists it (`offload::selective`'s layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatRepr {
    pub addr: Addr,
    /// A `Ustat` (a gap named at once), not a `Stat` (a poll's answer).
    pub ustat: bool,
    /// `Flags::ACK_VALID`: the cumulative ack, as an Ack's.
    pub ack: Option<u32>,
    /// The bytes of the list.
    pub payload_len: u16,
    /// `Flags::MCAST`: of the report stream between the two ports.
    pub report_stream: bool,
}

impl StatRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let ptype = if self.ustat { PacketType::Ustat } else { PacketType::Stat };
        let (flags, ack) = ack_fields(self.ack);
        Header {
            flags: flags | report_flag(self.report_stream),
            ack,
            payload_len: self.payload_len,
            ..self.addr.header(ptype)
        }
    }
}

/// `EchoRequest` or `EchoReply`: the echo offload asks a NIC to answer
/// at once, or answers. Not sequenced, no payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRepr {
    pub addr: Addr,
    /// An `EchoReply`, not an `EchoRequest`.
    pub reply: bool,
    /// Names the request; the reply carries it back.
    pub cookie: u32,
    /// The asking NIC's RTC when the request went (`remote`); the reply
    /// carries it back.
    pub sent: u64,
}

impl EchoRepr {
    #[inline(always)]
    pub fn emit(&self) -> Header {
        let ptype = if self.reply { PacketType::EchoReply } else { PacketType::EchoRequest };
        Header { cookie: self.cookie, remote: self.sent, ..self.addr.header(ptype) }
    }
}

/// A packet header as its type's repr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketRepr {
    /// `Data`, `Put`, `GetResp`.
    Data(DataRepr),
    GetReq(GetReqRepr),
    Report(ReportRepr),
    Ack(AckRepr),
    Nack(NackRepr),
    Poll(PollRepr),
    /// `Stat`, `Ustat`.
    Stat(StatRepr),
    /// `EchoRequest`, `EchoReply`.
    Echo(EchoRepr),
    /// `Coll`, `CollCtl`.
    Coll(crate::collective::CollRepr),
}

impl PacketRepr {
    /// `h` as its type's repr: the fields that type uses, named (the
    /// others are ignored). Parsing the header (`Header::parse`,
    /// `Header::from_words`) checked every field's domain; this checks
    /// again what a header built by hand may get wrong (a Nack's code).
    pub fn parse(h: &Header) -> Result<PacketRepr, ParseError> {
        Ok(match h.view() {
            PacketView::Data(v) => PacketRepr::Data(DataRepr {
                stream: SeqRepr::parse(v.stream()),
                kind: v.kind(),
                msg_len: v.msg_len(),
                offset: v.offset(),
                payload_len: v.payload_len(),
            }),
            PacketView::GetReq(v) => PacketRepr::GetReq(GetReqRepr {
                stream: SeqRepr::parse(v.stream()),
                remote_addr: v.remote_addr(),
                len: v.len(),
                get: v.get(),
            }),
            PacketView::Report(v) => PacketRepr::Report(ReportRepr {
                stream: SeqRepr::parse(v.stream()),
                tag: v.tag(),
                unreached: v.unreached(),
                data_ack: v.data_ack(),
                lost_len: v.lost_len(),
            }),
            PacketView::Ack(v) => PacketRepr::Ack(AckRepr {
                addr: v.addr().repr(),
                ack: v.ack(),
                report_stream: v.report_stream(),
            }),
            PacketView::Nack(v) => PacketRepr::Nack(NackRepr {
                addr: v.addr().repr(),
                code: v.code().ok_or(ParseError::BadField("nack_code"))?,
                seq: v.seq(),
                round: v.round(),
                ack: v.ack(),
                report_stream: v.report_stream(),
            }),
            PacketView::Poll(v) => PacketRepr::Poll(PollRepr {
                addr: v.addr().repr(),
                una: v.una(),
                next: v.next(),
                round: v.round(),
                poll: v.poll(),
                boot: v.boot(),
                incarnation: v.incarnation(),
                report_stream: v.report_stream(),
            }),
            PacketView::Stat(v) => PacketRepr::Stat(StatRepr {
                addr: v.addr().repr(),
                ustat: v.is_ustat(),
                ack: v.ack(),
                payload_len: v.payload_len(),
                report_stream: v.report_stream(),
            }),
            PacketView::Echo(v) => PacketRepr::Echo(EchoRepr {
                addr: v.addr().repr(),
                reply: v.is_reply(),
                cookie: v.cookie(),
                sent: v.sent(),
            }),
            PacketView::Coll(v) => {
                PacketRepr::Coll(v.repr().ok_or(ParseError::BadField("nack_code"))?)
            }
        })
    }

    /// Parse the header's words (as `Header::from_words`, of a packet of
    /// `total` bytes) as its type's repr.
    pub fn from_words(w: &[u64; HEADER_WORDS], total: usize) -> Result<PacketRepr, ParseError> {
        PacketRepr::parse(&Header::from_words(w, total)?)
    }

    /// The header (`crc` zero: the send-DMA engine fills it in).
    #[inline(always)]
    pub fn emit(&self) -> Header {
        match self {
            PacketRepr::Data(r) => r.emit(),
            PacketRepr::GetReq(r) => r.emit(),
            PacketRepr::Report(r) => r.emit(),
            PacketRepr::Ack(r) => r.emit(),
            PacketRepr::Nack(r) => r.emit(),
            PacketRepr::Poll(r) => r.emit(),
            PacketRepr::Stat(r) => r.emit(),
            PacketRepr::Echo(r) => r.emit(),
            PacketRepr::Coll(r) => r.emit(),
        }
    }

    /// The header as its six words (`Header::words`).
    #[inline(always)]
    pub fn words(&self) -> [u64; HEADER_WORDS] {
        self.emit().words()
    }

    /// The packet's ends.
    pub fn addr(&self) -> Addr {
        match self {
            PacketRepr::Data(r) => r.stream.addr,
            PacketRepr::GetReq(r) => r.stream.addr,
            PacketRepr::Report(r) => r.stream.addr,
            PacketRepr::Ack(r) => r.addr,
            PacketRepr::Nack(r) => r.addr,
            PacketRepr::Poll(r) => r.addr,
            PacketRepr::Stat(r) => r.addr,
            PacketRepr::Echo(r) => r.addr,
            PacketRepr::Coll(r) => r.addr,
        }
    }
}
