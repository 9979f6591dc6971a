//! A checked [`Header`] read as its packet type: one view per type (or
//! family of types sharing a layout), each borrowing the header and
//! naming its fields for what they mean for that type. A view copies
//! nothing and checks nothing past the type: each accessor is one field
//! read (or a flag test), inlined. The [`repr`](super::repr) types are the
//! same fields as plain values, for building headers and for tests.

use super::repr::{Addr, DataKind, SyncStamp};
use super::{Flags, Header, McastTag, NackCode, PacketType};
use crate::Priority;

/// The accessors several views share, each the same for every packet
/// type that has it: `addr` (the two ends), `ack` (`Flags::ACK_VALID`:
/// the cumulative ack), `incarnation` (`Flags::INCARNATION`) and
/// `report_stream` (`Flags::MCAST`: of the report stream between the two
/// ports).
macro_rules! shared_accessors {
    ($($part:ident),*) => { $(shared_accessors!(@ $part);)* };
    (@ addr) => {
        /// The two ends.
        #[inline(always)]
        pub fn addr(&self) -> AddrView<'a> {
            AddrView(self.0)
        }
    };
    (@ ack) => {
        /// `Flags::ACK_VALID`: the cumulative ack.
        #[inline(always)]
        pub fn ack(&self) -> Option<u32> {
            ack_of(self.0)
        }
    };
    (@ incarnation) => {
        /// `Flags::INCARNATION`: the incarnation of a stream made again
        /// (carried in the ack's room).
        #[inline(always)]
        pub fn incarnation(&self) -> Option<u32> {
            if self.0.has(Flags::INCARNATION) {
                Some(self.0.ack)
            } else {
                None
            }
        }
    };
    (@ report_stream) => {
        /// `Flags::MCAST`: of the report stream between the two ports.
        #[inline(always)]
        pub fn report_stream(&self) -> bool {
            self.0.has(Flags::MCAST)
        }
    };
}

/// The ends of a packet, of any type ([`Addr`]'s fields).
#[derive(Debug, Clone, Copy)]
pub struct AddrView<'a>(&'a Header);

impl AddrView<'_> {
    /// The sending NIC.
    #[inline(always)]
    pub fn src_node(&self) -> u16 {
        self.0.src_node
    }

    /// The sending port.
    #[inline(always)]
    pub fn src_port(&self) -> u8 {
        self.0.src_port
    }

    /// The receiving NIC.
    #[inline(always)]
    pub fn dst_node(&self) -> u16 {
        self.0.dst_node
    }

    /// The receiving port.
    #[inline(always)]
    pub fn dst_port(&self) -> u8 {
        self.0.dst_port
    }

    /// The priority.
    #[inline(always)]
    pub fn priority(&self) -> Priority {
        self.0.priority
    }

    /// The ends as a value.
    #[inline(always)]
    pub fn repr(&self) -> Addr {
        Addr::of(self.0)
    }
}

/// A header seen as its type. Made by [`Header::view`].
#[derive(Debug, Clone, Copy)]
pub enum PacketView<'a> {
    /// `Data`, `Put`, `GetResp`: a fragment of a message.
    Data(DataView<'a>),
    /// `GetReq`: a request to read the receiver's memory.
    GetReq(GetReqView<'a>),
    /// `Report`: a multicast member's subtree has the message.
    Report(ReportView<'a>),
    /// `Ack`: a cumulative ack alone.
    Ack(AckView<'a>),
    /// `Nack`: the refusal of one sequence number.
    Nack(NackView<'a>),
    /// `Poll`: a sender asks where its stream stands.
    Poll(PollView<'a>),
    /// `Stat`, `Ustat`: selective repeat's reports of what is missing.
    Stat(StatView<'a>),
    /// `EchoRequest`, `EchoReply`: the echo offload's packets.
    Echo(EchoView<'a>),
    /// `Coll`, `CollCtl`: the collective offload's packets
    /// (`collective::CollRepr::parse` reads their fields).
    Coll(CollView<'a>),
}

impl Header {
    /// This header read as its type. Code reads a header's fields through
    /// the view (or [`PacketRepr::parse`](super::PacketRepr::parse)), not
    /// raw: several fields mean different things by type and flags.
    #[inline(always)]
    pub fn view(&self) -> PacketView<'_> {
        match self.ptype {
            PacketType::Data | PacketType::Put | PacketType::GetResp => {
                PacketView::Data(DataView(self))
            }
            PacketType::GetReq => PacketView::GetReq(GetReqView(self)),
            PacketType::Report => PacketView::Report(ReportView(self)),
            PacketType::Ack => PacketView::Ack(AckView(self)),
            PacketType::Nack => PacketView::Nack(NackView(self)),
            PacketType::Poll => PacketView::Poll(PollView(self)),
            PacketType::Stat | PacketType::Ustat => PacketView::Stat(StatView(self)),
            PacketType::EchoRequest | PacketType::EchoReply => PacketView::Echo(EchoView(self)),
            PacketType::Coll | PacketType::CollCtl => PacketView::Coll(CollView(self)),
        }
    }
}

impl<'a> PacketView<'a> {
    /// The header viewed.
    #[inline(always)]
    pub fn header(&self) -> &'a Header {
        match *self {
            PacketView::Data(v) => v.0,
            PacketView::GetReq(v) => v.0,
            PacketView::Report(v) => v.0,
            PacketView::Ack(v) => v.0,
            PacketView::Nack(v) => v.0,
            PacketView::Poll(v) => v.0,
            PacketView::Stat(v) => v.0,
            PacketView::Echo(v) => v.0,
            PacketView::Coll(v) => v.0,
        }
    }

    /// The ends: nodes, ports, priority.
    #[inline(always)]
    pub fn addr(&self) -> AddrView<'a> {
        AddrView(self.header())
    }

    /// The cumulative ack of the reverse stream the packet carries
    /// (`Flags::ACK_VALID`, and no `Flags::INCARNATION` in its room): a
    /// sequenced packet's piggybacked one, an Ack's, a Nack's, a Stat's
    /// or Ustat's. A Poll and the offloads' packets carry none.
    #[inline(always)]
    pub fn ack(&self) -> Option<u32> {
        match *self {
            PacketView::Poll(_) | PacketView::Echo(_) | PacketView::Coll(_) => None,
            _ => ack_of(self.header()),
        }
    }

    /// The stream part of a sequenced packet (Data, Put, GetReq, GetResp,
    /// Report).
    #[inline(always)]
    pub fn stream(&self) -> Option<SeqView<'a>> {
        match *self {
            PacketView::Data(v) => Some(v.stream()),
            PacketView::GetReq(v) => Some(v.stream()),
            PacketView::Report(v) => Some(v.stream()),
            _ => None,
        }
    }
}

/// The `ack` field as an ack: with `Flags::ACK_VALID`, unless
/// `Flags::INCARNATION` says it holds an incarnation instead.
#[inline(always)]
fn ack_of(h: &Header) -> Option<u32> {
    if h.flags.intersection(Flags::ACK_VALID | Flags::INCARNATION) == Flags::ACK_VALID {
        Some(h.ack)
    } else {
        None
    }
}

/// What every sequenced packet (Data, Put, GetReq, GetResp, Report) says
/// about its stream: [`SeqRepr`](super::SeqRepr)'s fields.
#[derive(Debug, Clone, Copy)]
pub struct SeqView<'a>(&'a Header);

/// A header known to be of a sequenced type, kept by value (a packet
/// waiting to be placed): its view needs no check again.
#[derive(Debug, Clone, Copy)]
pub struct SeqHeader(Header);

impl SeqHeader {
    /// `h`, if its type is sequenced.
    #[inline(always)]
    pub fn new(h: Header) -> Option<SeqHeader> {
        if h.ptype.is_sequenced() {
            Some(SeqHeader(h))
        } else {
            None
        }
    }

    #[inline(always)]
    pub fn view(&self) -> SeqView<'_> {
        SeqView(&self.0)
    }

    #[inline(always)]
    pub fn header(&self) -> &Header {
        &self.0
    }
}

impl<'a> SeqView<'a> {
    /// The stream part of `h`, if its type is sequenced.
    #[inline(always)]
    pub fn of(h: &'a Header) -> Option<SeqView<'a>> {
        if h.ptype.is_sequenced() {
            Some(SeqView(h))
        } else {
            None
        }
    }

    /// The whole packet, as its type.
    #[inline(always)]
    pub fn packet(&self) -> PacketView<'a> {
        self.0.view()
    }

    /// The header, kept by value.
    #[inline(always)]
    pub fn to_header(&self) -> SeqHeader {
        SeqHeader(*self.0)
    }

    #[inline(always)]
    pub fn addr(&self) -> AddrView<'a> {
        AddrView(self.0)
    }

    /// The message's size class.
    #[inline(always)]
    pub fn size_class(&self) -> u8 {
        self.0.size_class
    }

    /// Its sequence number in the stream.
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        self.0.seq
    }

    /// The sender's round when it sent the packet (a nack echoes it).
    #[inline(always)]
    pub fn round(&self) -> u8 {
        self.0.nack_code
    }

    /// The first packet of its message.
    #[inline(always)]
    pub fn first(&self) -> bool {
        self.0.has(Flags::FIRST)
    }

    /// The last packet of its message.
    #[inline(always)]
    pub fn last(&self) -> bool {
        self.0.has(Flags::LAST)
    }

    /// The piggybacked cumulative ack of the reverse stream
    /// (`Flags::ACK_VALID`; none with an incarnation, which takes its
    /// room).
    #[inline(always)]
    pub fn ack(&self) -> Option<u32> {
        ack_of(self.0)
    }

    /// `Flags::SYNC`: the sender (re)starts the stream here.
    #[inline(always)]
    pub fn sync(&self) -> bool {
        self.0.has(Flags::SYNC)
    }

    /// Which start of the stream the packet's message belongs to.
    #[inline(always)]
    pub fn stamp(&self) -> SyncStamp {
        SyncStamp { boot: self.0.sync_boot, gen: self.0.sync_gen }
    }

    shared_accessors!(incarnation);
}

/// A fragment of a message: `Data`, `Put` or `GetResp`
/// ([`DataRepr`](super::DataRepr)'s fields).
#[derive(Debug, Clone, Copy)]
pub struct DataView<'a>(&'a Header);

impl<'a> DataView<'a> {
    #[inline(always)]
    pub fn stream(&self) -> SeqView<'a> {
        SeqView(self.0)
    }

    /// What the message is for, by type: a receive buffer (a multicast's
    /// or not), a put's memory, a get's answer.
    #[inline(always)]
    pub fn kind(&self) -> DataKind {
        match self.0.ptype {
            PacketType::Put => DataKind::Put { remote_addr: self.0.remote },
            PacketType::GetResp => DataKind::GetResp { get: self.0.cookie },
            _ => DataKind::Data { mcast: self.mcast() },
        }
    }

    /// A `Data` packet of a multicast (`Flags::MCAST`): its tag, with the
    /// size of the subtree the receiver heads. None for any other.
    #[inline(always)]
    pub fn mcast(&self) -> Option<McastTag> {
        if self.0.ptype == PacketType::Data && self.0.has(Flags::MCAST) {
            Some(McastTag::from_header(self.0.remote, self.0.cookie))
        } else {
            None
        }
    }

    /// The message's length.
    #[inline(always)]
    pub fn msg_len(&self) -> u32 {
        self.0.msg_len
    }

    /// The payload's offset in the message.
    #[inline(always)]
    pub fn offset(&self) -> u32 {
        self.0.offset
    }

    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        self.0.payload_len
    }
}

/// A request to read the receiver's memory
/// ([`GetReqRepr`](super::GetReqRepr)'s fields).
#[derive(Debug, Clone, Copy)]
pub struct GetReqView<'a>(&'a Header);

impl<'a> GetReqView<'a> {
    #[inline(always)]
    pub fn stream(&self) -> SeqView<'a> {
        SeqView(self.0)
    }

    /// Where to read, in the receiving port's registered memory.
    #[inline(always)]
    pub fn remote_addr(&self) -> u64 {
        self.0.remote
    }

    /// How many bytes.
    #[inline(always)]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        self.0.msg_len
    }

    /// Names the get: its answer carries it back.
    #[inline(always)]
    pub fn get(&self) -> u32 {
        self.0.cookie
    }
}

/// A multicast member's report to its parent
/// ([`ReportRepr`](super::ReportRepr)'s fields).
#[derive(Debug, Clone, Copy)]
pub struct ReportView<'a>(&'a Header);

impl<'a> ReportView<'a> {
    #[inline(always)]
    pub fn stream(&self) -> SeqView<'a> {
        SeqView(self.0)
    }

    /// The multicast it speaks of, with the size of the reporting
    /// member's subtree.
    #[inline(always)]
    pub fn tag(&self) -> McastTag {
        McastTag::from_header(self.0.remote, self.0.cookie)
    }

    /// How many members of that subtree were not reached.
    #[inline(always)]
    pub fn unreached(&self) -> u32 {
        self.0.msg_len
    }

    /// `Flags::MCAST`: the ack of the data stream the multicast came on.
    #[inline(always)]
    pub fn data_ack(&self) -> Option<u32> {
        if self.0.has(Flags::MCAST) {
            Some(self.0.offset)
        } else {
            None
        }
    }

    /// The bytes of the lost subtrees' heads bitmap in the payload.
    #[inline(always)]
    pub fn lost_len(&self) -> u16 {
        self.0.payload_len
    }
}

/// A cumulative ack alone ([`AckRepr`](super::AckRepr)'s fields).
#[derive(Debug, Clone, Copy)]
pub struct AckView<'a>(&'a Header);

impl<'a> AckView<'a> {
    shared_accessors!(addr, ack, report_stream);
}

/// The refusal of one sequence number ([`NackRepr`](super::NackRepr)'s
/// fields).
#[derive(Debug, Clone, Copy)]
pub struct NackView<'a>(&'a Header);

impl<'a> NackView<'a> {
    shared_accessors!(addr, ack, report_stream);

    /// Why. None only in a header that was not parsed (parsing refuses
    /// an unknown code).
    #[inline(always)]
    pub fn code(&self) -> Option<NackCode> {
        NackCode::from_u8(self.0.nack_code)
    }

    /// The sequence number refused (`OutOfOrder`: the one expected).
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        self.0.seq
    }

    /// The round of the packet (or poll) that drew it.
    #[inline(always)]
    pub fn round(&self) -> u8 {
        self.0.offset as u8
    }
}

/// A sender's question where its stream stands
/// ([`PollRepr`](super::PollRepr)'s fields).
#[derive(Debug, Clone, Copy)]
pub struct PollView<'a>(&'a Header);

impl<'a> PollView<'a> {
    shared_accessors!(addr, report_stream, incarnation);

    /// The sender's first unacknowledged sequence number.
    #[inline(always)]
    pub fn una(&self) -> u32 {
        self.0.seq
    }

    /// The first sequence number it has not put on the wire yet.
    #[inline(always)]
    pub fn next(&self) -> u32 {
        self.0.offset
    }

    /// The sender's round (a nack answering the poll echoes it).
    #[inline(always)]
    pub fn round(&self) -> u8 {
        self.0.nack_code
    }

    /// Its poll number (selective repeat; 0 under go-back-N).
    #[inline(always)]
    pub fn poll(&self) -> u8 {
        self.0.msg_len as u8
    }

    /// The sending NIC's boot nonce.
    #[inline(always)]
    pub fn boot(&self) -> u16 {
        self.0.sync_boot
    }
}

/// Selective repeat's `Stat` or `Ustat` ([`StatRepr`](super::StatRepr)'s
/// fields).
#[derive(Debug, Clone, Copy)]
pub struct StatView<'a>(&'a Header);

impl<'a> StatView<'a> {
    shared_accessors!(addr, ack, report_stream);

    /// A `Ustat` (a gap named at once), not a `Stat` (a poll's answer).
    #[inline(always)]
    pub fn is_ustat(&self) -> bool {
        self.0.ptype == PacketType::Ustat
    }

    /// The bytes of its list of missing ranges.
    #[inline(always)]
    pub fn payload_len(&self) -> u16 {
        self.0.payload_len
    }
}

/// The echo offload's request or reply ([`EchoRepr`](super::EchoRepr)'s
/// fields).
#[derive(Debug, Clone, Copy)]
pub struct EchoView<'a>(&'a Header);

impl<'a> EchoView<'a> {
    shared_accessors!(addr);

    /// An `EchoReply`, not an `EchoRequest`.
    #[inline(always)]
    pub fn is_reply(&self) -> bool {
        self.0.ptype == PacketType::EchoReply
    }

    /// Names the request (the reply carries it back).
    #[inline(always)]
    pub fn cookie(&self) -> u32 {
        self.0.cookie
    }

    /// The asking NIC's RTC when the request went (the reply carries it
    /// back).
    #[inline(always)]
    pub fn sent(&self) -> u64 {
        self.0.remote
    }
}

/// The collective offload's packet (`collective::CollRepr` names its
/// fields).
#[derive(Debug, Clone, Copy)]
pub struct CollView<'a>(&'a Header);

impl<'a> CollView<'a> {
    shared_accessors!(addr);

    /// Its fields (None: a control code out of its domain).
    #[inline(always)]
    pub fn repr(&self) -> Option<crate::collective::CollRepr> {
        crate::collective::CollRepr::parse(self.0)
    }
}
