//! What moves between the machines and the engines: transmit buffers,
//! owed events, host-DMA completions' actions, controls (acks, nacks,
//! polls, reports) and RDMA's jobs.

use super::*;

/// A transmit buffer's life: Free -> Filling (host-DMA) -> Filled -> Sending
/// (send-DMA) -> Free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxBufState {
    Free = 0,
    Filling = 1,
    Filled = 2,
    Sending = 3,
    /// Ready without a host-DMA (a relayed packet, a report), but an
    /// earlier packet of its stream is still filling: it waits so the
    /// stream's packets leave in order.
    Held = 4,
}

#[derive(Debug, Clone, Copy)]
pub struct TxBuf {
    pub state: TxBufState,
    /// Data packet: its stream and the stream's epoch when filled (no
    /// stream: a control packet, an offload's).
    pub stream: Option<TxId>,
    pub epoch: u16,
    /// Route length and packet length (header + payload).
    pub route_len: u8,
    pub len: u32,
    /// Control packet (ack/nack): no stream.
    pub control: bool,
    pub seq: u32,
    /// The payload is gathered from this receive buffer (a relayed
    /// multicast packet; None: the payload is in this buffer).
    pub gather: Option<NonMaxU8>,
    /// A packet of a NIC-served multicast: how its send is priced.
    pub mcast: McastCost,
}

/// A byte that is never `u8::MAX`, so that an `Option` of it is one byte,
/// as the `u8` with `u8::MAX` for none it replaces (a receive buffer's
/// number in a transmit buffer's record or an RDMA job: measured, the
/// two-byte `Option<u8>` cost the copies of those records eight
/// instructions a packet). Kept inverted in a `NonZeroU8`: `u8::MAX` is
/// the niche, `None` is 0.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NonMaxU8(core::num::NonZeroU8);

impl NonMaxU8 {
    /// `v`, or None for `u8::MAX`.
    #[inline(always)]
    pub const fn new(v: u8) -> Option<NonMaxU8> {
        match core::num::NonZeroU8::new(!v) {
            Some(n) => Some(NonMaxU8(n)),
            None => None,
        }
    }

    #[inline(always)]
    pub const fn get(self) -> u8 {
        !self.0.get()
    }
}

impl core::fmt::Debug for NonMaxU8 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.get().fmt(f)
    }
}

const _: () = assert!(size_of::<Option<NonMaxU8>>() == 1);
const _: () = assert!(map::RX_BUF_COUNT <= u8::MAX as u32);

/// How a transmit buffer's send is priced (`crate::Work`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastCost {
    /// Not a NIC-served multicast packet.
    None,
    /// A multicast packet built for its first child (`Work::mcast_packets`).
    First,
    /// The same packet for a further child (`Work::mcast_further`, at this
    /// algorithm index).
    Further(u8),
}

/// Marks `RecvSlot::mcast` as holding a tag (a bit no tag uses: the
/// scheme field's top bit).
pub const MCAST_PRESENT: u64 = 1 << 51;

impl RecvSlot {
    /// The record as kept in SRAM (`map::rx_slot`): six words, the
    /// host's first (port, priority, size class, error, length; address;
    /// tag), then the message's ([`SlotFill::words`]: multicast tag;
    /// source port, inline length, source node, record, and the link;
    /// message length).
    pub fn encode(&self, b: &mut [u8; map::RX_SLOT_SIZE as usize]) {
        use nic_abi::le::*;
        put_u8(b, 0, self.port);
        put_u8(b, 1, self.prio as u8);
        put_u8(b, 2, self.size_class);
        put_u8(b, 3, self.error);
        put_u32(b, 4, self.len);
        put_u64(b, 8, self.vaddr);
        put_u64(b, 16, self.tag);
        put_u64(b, 24, self.mcast);
        put_u8(b, 32, self.src_port);
        put_u8(b, 33, self.inline_len);
        put_u16(b, 34, self.src_node);
        put_u16(b, 36, self.mrec.raw());
        put_u16(b, 38, Id::raw_of(self.next));
        put_u32(b, 40, self.msg_len);
    }

    pub fn decode(b: &[u8; map::RX_SLOT_SIZE as usize]) -> RecvSlot {
        use nic_abi::le::*;
        RecvSlot {
            port: get_u8(b, 0),
            prio: Priority::from_u8(get_u8(b, 1)).unwrap_or(Priority::Low),
            size_class: get_u8(b, 2),
            error: get_u8(b, 3),
            len: get_u32(b, 4),
            vaddr: get_u64(b, 8),
            tag: get_u64(b, 16),
            mcast: get_u64(b, 24),
            src_port: get_u8(b, 32),
            inline_len: get_u8(b, 33),
            src_node: get_u16(b, 34),
            mrec: Mrec::from_raw(get_u16(b, 36)),
            next: Id::from_raw(get_u16(b, 38)),
            msg_len: get_u32(b, 40),
        }
    }

    /// The multicast tag of the message, if it is one.
    pub fn mcast_tag(&self) -> Option<u64> {
        (self.mcast & MCAST_PRESENT != 0).then_some(self.mcast & !MCAST_PRESENT)
    }
}

impl TxBuf {
    pub const EMPTY: TxBuf = TxBuf {
        state: TxBufState::Free,
        stream: None,
        epoch: 0,
        route_len: 0,
        len: 0,
        control: false,
        seq: 0,
        gather: None,
        mcast: McastCost::None,
    };
}

/// An event owed to a port, by reference to what holds its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvRef {
    Token(TokenId),
    Slot(SlotId),
    Alarm,
    PortOpened,
    /// Piece `part` (16 bytes) of the lost-heads list root token `t`
    /// carries: a `McastLost` event before its Sent.
    Lost(TokenId, u8),
    /// An event an offload composed (`offload::CoreSide::events` entry).
    Offload(crate::offload::OffloadEventId),
}

/// What the MCP does when a host-DMA command completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HdmaAction {
    /// No machine waits for this one: an event written to host memory
    /// (from the staging slot of its ring slot's number), a piece of a
    /// copy before its last.
    Nothing,
    /// The payload of transmit buffer i is in SRAM.
    TxFilled(u8),
    /// Receive buffer i was copied out: give it back to the rx-DMA engine.
    RxDone(u8),
    /// Page-table line i was read from host memory.
    PtLine(u8),
    /// A command of offload `.0` (its place in the list), its tag `.1`.
    Offload(u8, u16),
}

impl HdmaAction {
    /// Does a machine wait for this completion? A receive buffer copied
    /// out only goes back to the rx-DMA engine, which may wait for the
    /// next pass with news (`Mcp::poll`); a transmit buffer filled, a
    /// page-table line read or an offload's command give work.
    pub fn waited(self) -> bool {
        !matches!(self, HdmaAction::Nothing | HdmaAction::RxDone(_))
    }
}

/// A control packet to send: ack or nack for a receiving stream, or a
/// poll for a sending one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// The index of the receiving stream the ack, nack or report is for
    /// (a poll: of the sending stream that asks): [`Control::rx_stream`],
    /// [`Control::tx_stream`].
    stream: u16,
    /// 0: a plain ack; else a nack with this code for `seq` (8 bytes a
    /// record, not the 16 of an `Option` of a pair).
    code: u8,
    /// A nack: the sender's round of the packet that drew it, echoed so
    /// the sender can tell a nack about packets it has since sent again.
    pub round: u8,
    seq: u32,
}

impl Control {
    /// An ack (`nack` None) or a nack (code, seq) for stream `rx_stream`.
    pub fn new(rx_stream: RxId, nack: Option<(u8, u32)>) -> Control {
        let (code, seq) = nack.unwrap_or((0, 0));
        Control { stream: rx_stream.raw(), code, round: 0, seq }
    }

    /// The receiving stream an ack, a nack or a report is for (None: a
    /// poll).
    #[inline]
    pub fn rx_stream(&self) -> Option<RxId> {
        if self.is_poll() {
            None
        } else {
            RxId::from_raw(self.stream)
        }
    }

    /// Is this an ack, a nack or a report for receiving stream `r`? (What
    /// `rx_stream() == Some(r)` says, in two compares.)
    #[inline]
    pub fn is_for(&self, r: RxId) -> bool {
        self.stream == r.raw() && !self.is_poll()
    }

    /// The sending stream a poll asks for (None: not a poll).
    #[inline]
    pub fn tx_stream(&self) -> Option<TxId> {
        if self.is_poll() {
            TxId::from_raw(self.stream)
        } else {
            None
        }
    }

    /// The stream's index, whichever way (what SEND's state shows).
    pub fn stream_raw(&self) -> u16 {
        self.stream
    }

    /// Fold a later ack (`nack` None) or nack for the same stream into
    /// this queued entry: a nack carries the ack too; a later nack for
    /// another sequence number replaces it; a gap nack for the same one
    /// keeps the code it found (a no-buffer nack says more) and takes the
    /// later round.
    pub fn merge(&mut self, nack: Option<(u8, u32)>, round: u8) {
        let Some((code, seq)) = nack else { return };
        if self.nack().map(|(_, s)| s) != Some(seq)
            || code != nic_abi::packet::NackCode::OutOfOrder as u8
        {
            self.code = code;
            self.seq = seq;
        }
        self.round = round;
    }

    /// A poll for the sending stream `tx_stream` (what it carries is read
    /// when it leaves).
    pub fn poll(tx_stream: TxId) -> Control {
        Control { stream: tx_stream.raw(), code: POLL, round: 0, seq: 0 }
    }

    /// Selective repeat: a STAT answering poll number `ps` whose next new
    /// sequence number was `ns` (what it lists is read when it leaves).
    pub fn stat(rx_stream: RxId, ns: u32, ps: u8) -> Control {
        Control { stream: rx_stream.raw(), code: STAT, round: ps, seq: ns }
    }

    /// Selective repeat: a USTAT naming `lo..hi` missing (at most a hold
    /// span: the length fits in `round`).
    pub fn ustat(rx_stream: RxId, lo: u32, hi: u32) -> Control {
        let n = hi.wrapping_sub(lo).min(crate::reliability::HOLD_SPAN) as u8;
        Control { stream: rx_stream.raw(), code: USTAT, round: n, seq: lo }
    }

    pub fn is_poll(&self) -> bool {
        self.code == POLL
    }

    /// A status report of the window policy (a STAT or a USTAT).
    pub fn is_report(&self) -> bool {
        self.code == STAT || self.code == USTAT
    }

    /// An ack or a nack (what a later ack or nack may fold into).
    pub fn is_ack_or_nack(&self) -> bool {
        self.code < USTAT
    }

    pub fn nack(&self) -> Option<(u8, u32)> {
        (self.code != 0 && self.code < USTAT).then_some((self.code, self.seq))
    }

    /// A STAT: the poll's next sequence number and poll number.
    pub fn stat_of(&self) -> Option<(u32, u8)> {
        (self.code == STAT).then_some((self.seq, self.round))
    }

    /// A USTAT: the range missing.
    pub fn ustat_of(&self) -> Option<(u32, u32)> {
        (self.code == USTAT).then_some((self.seq, self.seq.wrapping_add(self.round as u32)))
    }
}

/// [`Control::code`] of a poll, a STAT and a USTAT: no nack code has
/// these values (nack codes are below `USTAT`).
const POLL: u8 = 0xff;
const STAT: u8 = 0xfe;
const USTAT: u8 = 0xfd;

/// An accepted data-bearing packet waiting for RDMA.
#[derive(Debug, Clone, Copy)]
pub struct RdmaJob {
    /// The receive buffer the payload is in (None: the job owes only its
    /// event).
    pub rx_buf: Option<NonMaxU8>,
    pub port: u8,
    /// Virtual address the payload goes to (in `port`'s space).
    pub vaddr: u64,
    pub len: u32,
    /// After the payload: the event to owe (a receive slot or get token).
    pub then: Option<EvRef>,
    /// A relayed multicast packet: its copy to this host waits a pass, so
    /// the forward to the children goes first (the two overlap).
    pub relayed: bool,
}

impl crate::ring::Vacant for EvRef {
    const VACANT: EvRef = EvRef::Alarm;
}

impl crate::ring::Vacant for Control {
    const VACANT: Control = Control { stream: 0, code: 0, round: 0, seq: 0 };
}

impl crate::ring::Vacant for RdmaJob {
    const VACANT: RdmaJob =
        RdmaJob { rx_buf: None, port: 0, vaddr: 0, len: 0, then: None, relayed: false };
}
