//! The MCP's records: send tokens, receive slots, streams, connections,
//! transmit buffers, owed events and the messages between machines. Plain
//! data; the machines in sdma/send/recv/rdma own the logic and each record
//! kind has one owner at a time (module docs of `shared` and the machines).

use crate::pool::NIL;
use crate::reliability::{GoBackN, RecvWindow, SendWindow};
use nic_abi::map;
use nic_abi::Priority;

// Multicast's records live in its module; the machines still name them
// here until its hooks go through the offload interface.
pub use crate::offload::multicast::records::*;

/// Send tokens per port at most (the configured count may be lower).
pub const PORT_SEND_TOKENS_MAX: u32 = nic_abi::regs::PORT_SEND_TOKENS_MAX;
/// Receive tokens per port at most.
pub const PORT_RECV_TOKENS_MAX: u32 = nic_abi::regs::PORT_RECV_TOKENS_MAX;
/// Tokens the NIC keeps for its own get responses.
pub const INTERNAL_TOKENS: usize = 16;
/// Tokens the NIC keeps for multicast: sends to children, reports.
pub const MCAST_TOKENS: usize = 16;
/// The token table's share per port (a port may hold up to
/// `PORT_SEND_TOKENS_MAX` while others hold fewer).
pub const TOKENS_PER_PORT: usize = 32;
pub const MAX_TOKENS: usize = nic_abi::NUM_PORTS * TOKENS_PER_PORT + INTERNAL_TOKENS + MCAST_TOKENS;
/// Receive buffers posted, all ports together (each port up to its count).
pub const MAX_SLOTS: usize = nic_abi::map::RX_INLINE_SLOTS as usize;
/// Streams each way (a stream is remote node, local port, remote port,
/// priority); a send that would need one more waits in its ring until a
/// stream goes idle (a multicast's children are refused: TooManyStreams).
pub const MAX_STREAMS: usize = 128;
// Each sending stream has its selective-repeat stamps in SRAM.
const _: () = assert!(MAX_STREAMS <= nic_abi::map::SR_STREAMS as usize);
pub const MAX_CONNS: usize = 128;
/// Most doublings of the retransmission timeout.
pub const MAX_BACKOFF: u8 = 6;
/// Largest window (unacked packets per stream).
pub const WINDOW_MAX: u32 = 64;

/// What a send token is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokKind {
    Send,
    Put,
    Get,
    /// The NIC's own answer to a peer's get: `local` is this port's memory,
    /// `cookie` names the requester's token.
    GetResp,
    /// A refused descriptor waiting for its error event.
    Error,
    /// Host scheme: one multicast packet train to one listed child, from
    /// host memory (the host serves the tree; the NIC only tags it).
    McastSend,
    /// A multicast descriptor the NIC serves (root, or an assisted relay's
    /// child list): on no stream; it completes when its multicast record
    /// says the subtree has the message. `remote` holds the tag, `cookie`
    /// the record, then the members not reached; `first_seq` the
    /// lost-heads list it carries to its events (`NO_LIST`: none; unused
    /// on no stream).
    McastRoot,
    /// The NIC's own send of a multicast to one child (`cookie`: the
    /// record; `remote`: the tag; `size_class`, `len`, `local` as the
    /// message's).
    McastFwd,
    /// The NIC's report to its parent that its subtree has a multicast
    /// (`remote`: the tag; `cookie`: members not reached; `tag`: its
    /// subtree; `local`: the lost-heads list its payload is, `NO_LIST`:
    /// none).
    Report,
}

/// Where a token is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokState {
    /// Queued on its stream: packets still to send or to be acked.
    Active,
    /// A get whose request was acked: waiting for the answer.
    AwaitGet,
    /// Done; its event (status) waits in the port's event queue.
    Completing(u8),
}

#[derive(Debug, Clone, Copy)]
pub struct SendToken {
    pub kind: TokKind,
    pub state: TokState,
    pub port: u8,
    pub prio: Priority,
    pub target_node: u16,
    pub target_port: u8,
    pub size_class: u8,
    pub local: u64,
    pub len: u32,
    pub remote: u64,
    pub tag: u64,
    /// Requester's token id for GetResp; this token's id for Get.
    pub cookie: u32,
    /// Packets in this message (at least one).
    pub npkts: u32,
    /// Next packet to send (0..=npkts).
    pub next_pkt: u32,
    /// Sequence number of packet 0 (valid once packet 0 was sent).
    pub first_seq: u32,
    /// The first packet carries SYNC (earlier sequence numbers abandoned).
    pub sync: bool,
    /// Next token on the stream's list.
    pub next: u16,
    /// Stream the token is on.
    pub stream: u16,
    /// Descriptor kind byte (for error events).
    pub desc_kind: u8,
    /// A multicast child after the sender's first (`McastCost::Further`).
    pub further: bool,
}

impl SendToken {
    pub const EMPTY: SendToken = SendToken {
        kind: TokKind::Send,
        state: TokState::Active,
        port: 0,
        prio: Priority::Low,
        target_node: 0,
        target_port: 0,
        size_class: 0,
        local: 0,
        len: 0,
        remote: 0,
        tag: 0,
        cookie: 0,
        npkts: 1,
        next_pkt: 0,
        first_seq: 0,
        sync: false,
        next: NIL,
        stream: NIL,
        desc_kind: 0,
        further: false,
    };

    /// The NIC's own token (no descriptor, no event, no port credit).
    pub fn is_internal(&self) -> bool {
        matches!(self.kind, TokKind::GetResp | TokKind::McastFwd | TokKind::Report)
    }

    /// A multicast token of the NIC's own (from the multicast reserve).
    pub fn is_mcast_internal(&self) -> bool {
        matches!(self.kind, TokKind::McastFwd | TokKind::Report)
    }
}

/// A posted receive buffer: what the host's Provide gave (written whole
/// when it is posted), its link in its port's list while it waits, then
/// what the message it takes says (written by RECV when the message's
/// first packet comes: [`SlotFill`]).
#[derive(Debug, Clone, Copy)]
pub struct RecvSlot {
    pub port: u8,
    pub prio: Priority,
    pub size_class: u8,
    pub vaddr: u64,
    pub len: u32,
    pub tag: u64,
    pub msg_len: u32,
    pub src_node: u16,
    pub src_port: u8,
    /// The message's first bytes for the event, kept in SRAM at
    /// `map::rx_inline(slot)` (a small message's whole payload).
    pub inline_len: u8,
    /// Error event instead of Received (refused Provide): its cause.
    pub error: u8,
    /// A multicast's message: its tag (`packet::McastTag::remote`), with
    /// `MCAST_PRESENT` set; 0 for a unicast (kept in one word: there are
    /// many slots).
    pub mcast: u64,
    /// The multicast record this delivery counts for (NIL: none).
    pub mrec: u16,
    /// The next slot in its port's list of posted slots (posting order;
    /// NIL: the last, or not posted). A message that takes the slot
    /// writes NIL over it.
    pub next: u16,
}

impl RecvSlot {
    pub const EMPTY: RecvSlot = RecvSlot {
        port: 0,
        prio: Priority::Low,
        size_class: 0,
        vaddr: 0,
        len: 0,
        tag: 0,
        msg_len: 0,
        src_node: 0,
        src_port: 0,
        inline_len: 0,
        error: 0,
        mcast: 0,
        mrec: NIL,
        next: NIL,
    };

    /// What a message that takes the slot writes over it.
    pub fn fill(&self) -> SlotFill {
        SlotFill {
            msg_len: self.msg_len,
            src_node: self.src_node,
            src_port: self.src_port,
            inline_len: self.inline_len,
            tag_word: self.mcast,
            mrec: self.mrec,
        }
    }
}

/// Where a receive slot's link (`RecvSlot::next`) lies in its fifth word.
pub const SLOT_NEXT_SHIFT: u32 = 48;

/// The part of a receive slot's record a message that takes it writes
/// (its last three words, `Shared::fill_slot`): the rest is the host's.
/// The slot is taken off its port's list then: its link becomes NIL.
#[derive(Debug, Clone, Copy)]
pub struct SlotFill {
    pub msg_len: u32,
    pub src_node: u16,
    pub src_port: u8,
    pub inline_len: u8,
    pub tag_word: u64,
    pub mrec: u16,
}

impl SlotFill {
    /// The record's words 3, 4 and 5 (`RecvSlot::encode`'s layout).
    #[inline(always)]
    pub fn words(&self) -> [u64; 3] {
        [
            self.tag_word,
            self.src_port as u64
                | (self.inline_len as u64) << 8
                | (self.src_node as u64) << 16
                | (self.mrec as u64) << 32
                | (NIL as u64) << SLOT_NEXT_SHIFT,
            self.msg_len as u64,
        ]
    }
}

/// The last SYNC a receiving stream adopted: (sync_boot, incarnation,
/// sync_gen); the incarnation is 0 unless the SYNC named one
/// (`Flags::INCARNATION`). Eight bytes, not the twelve of an `Option` of
/// the triple (there are many streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSeen {
    boot: u16,
    gen: u8,
    seen: bool,
    inc: u32,
}

impl SyncSeen {
    pub const NONE: SyncSeen = SyncSeen { boot: 0, gen: 0, seen: false, inc: 0 };

    pub fn new(boot: u16, inc: u32, gen: u8) -> SyncSeen {
        SyncSeen { boot, gen, seen: true, inc }
    }

    pub fn get(&self) -> Option<(u16, u32, u8)> {
        self.seen.then_some((self.boot, self.inc, self.gen))
    }

    pub fn is_none(&self) -> bool {
        !self.seen
    }

    pub fn is_some(&self) -> bool {
        self.seen
    }
}

/// A stream is (remote node, local port, remote port, priority); packed as
/// the flow key of the rate-control table (a sending stream is a flow).
pub fn stream_key(remote_node: u16, local_port: u8, remote_port: u8, prio: Priority) -> u32 {
    nic_abi::flows::flow_key(local_port, remote_node, remote_port, prio)
}

/// Sending half of a stream.
#[derive(Debug, Clone, Copy)]
pub struct TxStream {
    pub key: u32,
    pub remote_node: u16,
    pub local_port: u8,
    pub remote_port: u8,
    pub prio: Priority,
    /// The go-back-N window: una, next, high.
    pub win: GoBackN,
    /// Sequence number of the head token's first packet: the tokens on the
    /// list cover `base..` contiguously.
    pub base: u32,
    /// The next message's first packet must carry SYNC (a new stream starts
    /// with it).
    pub sync_next: bool,
    /// The sync_gen SYNC packets carry; changes at every resynchronisation.
    pub sync_gen: u8,
    /// When the receiver last acknowledged progress (or the stream woke).
    pub acked_at: u64,
    /// Retransmission timeouts in a row without progress: the timeout
    /// doubles with each (exponential backoff), so a congested receiver is
    /// not buried in go-back-N resends.
    pub backoff: u8,
    /// Token list, oldest first.
    pub head: u16,
    pub tail: u16,
    /// Token being sent (NIL: all sent).
    pub cursor: u16,
    /// When acks last made progress (or the timer was restarted).
    pub last_progress: u64,
    /// Do not send before this (no-buffer or busy retry).
    pub hold_until: u64,
    /// When the target first refused for lack of a buffer (0: not now).
    pub nobuf_since: u64,
    /// `NoBuffer` refusals in a row without progress. The wait before
    /// sending again (the window, or under selective repeat the refused
    /// packet) doubles with each, so a receiver short of buffers is not
    /// kept busy turning it away.
    pub refusals: u8,
    /// Sends are dropped until the host resumes (after a timeout).
    pub suspended: bool,
    /// Bumped at every rewind: filled buffers of an older epoch are stale.
    pub epoch: u16,
    /// Connection this stream belongs to, and its ring links.
    pub conn: u16,
    pub ring_next: u16,
    pub ring_prev: u16,
    pub in_ring: bool,
    /// On the active list (streams with unacked packets).
    pub active: bool,
    /// What the scheduler policy keeps beside the stream (rate control:
    /// its pacing clock and flow-table entry).
    pub pace: crate::offload::policy::StreamPace,
    /// Set-up order (ties of the scheduler; the incarnation).
    pub order: u32,
    /// The measured round trip, which sets the retransmission timeout.
    pub rtt: crate::rtt::Rtt,
    /// Why the stream last went back (`RetxCause`): the packets it sends
    /// again are counted under it.
    pub retx_cause: RetxCause,
    /// The retransmission timer ran out and a poll went: the gap its
    /// answer reports is the timeout's to resend.
    pub polled: bool,
    /// Made after this NIC let an idle stream go: its SYNC packets name
    /// its incarnation (`order`, with `Flags::INCARNATION`).
    pub reborn: bool,
    /// What the window policy keeps beside the window (selective repeat:
    /// what was acknowledged out of order, what is to be resent, the poll
    /// number; each packet's stamp is in SRAM, `map::sr_stamp`).
    pub marks: crate::offload::policy::StreamMarks,
}

/// Why a stream sends packets again; each has its counter
/// (`RetxCause::stat`), and they add up to `Stat::Retransmits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RetxCause {
    /// Nothing acknowledged for a retransmission timeout.
    Timeout,
    /// The receiver saw a gap and nacked the first missing packet.
    Gap,
    /// The receiver had no buffer (or, relaying a multicast, no room).
    NoBuffer,
    /// The receiver refused a message (port closed, memory not
    /// registered): the stream goes on from the next one.
    Refused,
    /// The receiver lost the stream's state (its NIC was reset): the
    /// stream starts again with SYNC.
    Resync,
}

impl RetxCause {
    pub fn stat(self) -> nic_abi::stats::Stat {
        use nic_abi::stats::Stat;
        match self {
            RetxCause::Timeout => Stat::RetxTimeout,
            RetxCause::Gap => Stat::RetxGap,
            RetxCause::NoBuffer => Stat::RetxNoBuffer,
            RetxCause::Refused => Stat::RetxRefused,
            RetxCause::Resync => Stat::RetxResync,
        }
    }
}

impl TxStream {
    pub const EMPTY: TxStream = TxStream {
        key: 0,
        remote_node: 0,
        local_port: 0,
        remote_port: 0,
        prio: Priority::Low,
        win: GoBackN::new(),
        base: 0,
        sync_next: true,
        sync_gen: 0,
        acked_at: 0,
        backoff: 0,
        head: NIL,
        tail: NIL,
        cursor: NIL,
        last_progress: 0,
        hold_until: 0,
        nobuf_since: 0,
        refusals: 0,
        suspended: false,
        epoch: 0,
        conn: NIL,
        ring_next: NIL,
        ring_prev: NIL,
        in_ring: false,
        active: false,
        pace: <crate::offload::policy::StreamPace as crate::offload::policy::Pacing>::NEW,
        order: 0,
        rtt: crate::rtt::Rtt::new(),
        retx_cause: RetxCause::Timeout,
        polled: false,
        reborn: false,
        marks: <crate::offload::policy::StreamMarks as crate::offload::policy::Marks>::NEW,
    };

    pub fn outstanding(&self) -> u32 {
        self.win.outstanding()
    }

    /// The stream starts a new round: packets filled before are stale
    /// (the epoch moves on), and so, for selective repeat, whose packets
    /// carry their poll stamp as their round, does the poll number.
    pub fn next_round(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        crate::offload::policy::Marks::poll(&mut self.marks);
    }

    /// When to poll after the last progress: the retransmission timeout,
    /// or under selective repeat (a poll resends nothing blindly) the
    /// measured round trip's with a quarter of the configured floor, not
    /// backed off. Backoff never spaces the tries so far apart that fewer
    /// than [`TRIES_PER_TIMEOUT`] fit in the send timeout: a stream is
    /// given up on when nothing was acknowledged for that long, and on a
    /// lossy path with a short send timeout a handful of tries could all
    /// be lost.
    pub fn poll_after(&self, rto: u64, selective: bool, send_timeout: u64) -> u64 {
        // Selective: no backoff, as a poll is one small packet and resends
        // nothing (measured: doubling it per poll without progress left
        // streams a receiver kept cutting idle for milliseconds).
        let (floor, backoff) =
            if selective { (rto / POLL_FLOOR_DIV, 0) } else { (rto, self.backoff) };
        let once = self.rtt.rto(floor);
        let cap = (send_timeout / TRIES_PER_TIMEOUT).max(once);
        once.saturating_mul(1 << backoff.min(MAX_BACKOFF)).min(cap)
    }

    /// How long to wait before sending again (the window, or under
    /// selective repeat the refused packet) after the target refused a
    /// packet for want of a buffer, counting this
    /// refusal: the profile's retry time, doubled for each refusal in a
    /// row before this one without progress, at most
    /// `2^MAX_REFUSAL_SHIFT` times it and never more than a
    /// [`TRIES_PER_TIMEOUT`]th of the send timeout. A receiver short of
    /// buffers for long would otherwise spend its memory bus taking in and
    /// dropping what its senders try again.
    pub fn refused(&mut self, nobuf_retry: u64, send_timeout: u64) -> u64 {
        let shift = self.refusals.min(MAX_REFUSAL_SHIFT);
        self.refusals = self.refusals.saturating_add(1);
        let cap = (send_timeout / TRIES_PER_TIMEOUT).max(nobuf_retry);
        nobuf_retry.saturating_mul(1 << shift).min(cap)
    }
}

/// The most a refused sender's wait doubles ([`TxStream::refused`]).
pub const MAX_REFUSAL_SHIFT: u8 = 6;

/// The fewest retransmission timeouts a send timeout holds, however far
/// they are backed off. Each try is a poll and its answer, which over a
/// path losing 28% of round trips (four hops each way at 4% a hop) all
/// fail about once in 10^9 with sixteen; with eight, once in 10^4.5, which
/// random runs with a short send timeout found.
pub const TRIES_PER_TIMEOUT: u64 = 16;

/// A selective stream's poll timer has this fraction of the configured
/// retransmission timeout as its floor.
pub const POLL_FLOOR_DIV: u64 = 4;

/// What a receiving stream is assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assembly {
    Idle,
    /// A message into receive slot `slot`.
    Message {
        slot: u16,
    },
    /// A put into the local port's memory at `base`.
    Put {
        base: u64,
    },
    /// A get answer for local token `token`.
    GetResp {
        token: u16,
    },
}

/// Receiving half of a stream.
#[derive(Debug, Clone, Copy)]
pub struct RxStream {
    pub key: u32,
    pub remote_node: u16,
    pub local_port: u8,
    pub remote_port: u8,
    pub prio: Priority,
    /// The next sequence number expected.
    pub win: RecvWindow,
    /// An ack is owed; send it by `ack_due`.
    pub ack_pending: bool,
    pub ack_due: u64,
    /// Packets accepted since the last ack went out (at most what a
    /// counter of 16 bits holds: acks are owed at half a window).
    pub unacked: u16,
    /// Last out-of-order nack: for which expected value, the sender's
    /// round of the packet that drew it, and when.
    pub nacked: Option<u32>,
    pub nack_round: u8,
    /// The last SYNC adopted, if any.
    pub sync_seen: SyncSeen,
    pub nack_time: u64,
    pub assembly: Assembly,
    /// Bytes of the current message placed so far.
    pub offset: u32,
    pub msg_len: u32,
    /// On the ack list.
    pub on_ack_list: bool,
    /// The multicast record of the message being assembled (NIL: none).
    pub mrec: u16,
}

impl RxStream {
    pub const EMPTY: RxStream = RxStream {
        key: 0,
        remote_node: 0,
        local_port: 0,
        remote_port: 0,
        prio: Priority::Low,
        win: RecvWindow::new(),
        ack_pending: false,
        ack_due: 0,
        unacked: 0,
        nacked: None,
        nack_round: 0,
        sync_seen: SyncSeen::NONE,
        nack_time: 0,
        assembly: Assembly::Idle,
        offset: 0,
        msg_len: 0,
        on_ack_list: false,
        mrec: NIL,
    };
}

/// A connection: a remote node with streams that have packets to send.
/// Its streams form a circular list (GM's sub-port queue).
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub node: u16,
    /// Current stream of the ring (the next to serve), NIL if empty.
    pub ring: u16,
    /// Streams on the ring.
    pub ring_len: u16,
    /// Links of the circular connection queue.
    pub next: u16,
    pub prev: u16,
    pub in_queue: bool,
}

impl Conn {
    pub const EMPTY: Conn =
        Conn { node: 0, ring: NIL, ring_len: 0, next: NIL, prev: NIL, in_queue: false };
}

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
    /// Data packet: its stream and the stream's epoch when filled.
    pub stream: u16,
    pub epoch: u16,
    /// Route length and packet length (header + payload).
    pub route_len: u8,
    pub len: u32,
    /// Control packet (ack/nack): no stream.
    pub control: bool,
    pub seq: u32,
    /// The payload is gathered from this receive buffer (a relayed
    /// multicast packet; `GATHER_NONE`: the payload is in this buffer).
    pub gather: u8,
    /// A packet of a NIC-served multicast: how its send is priced.
    pub mcast: McastCost,
}

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
        put_u16(b, 36, self.mrec);
        put_u16(b, 38, self.next);
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
            mrec: get_u16(b, 36),
            next: get_u16(b, 38),
            msg_len: get_u32(b, 40),
        }
    }

    /// The multicast tag of the message, if it is one.
    pub fn mcast_tag(&self) -> Option<u64> {
        (self.mcast & MCAST_PRESENT != 0).then_some(self.mcast & !MCAST_PRESENT)
    }
}

/// `TxBuf::gather` of a buffer that holds its own payload.
pub const GATHER_NONE: u8 = u8::MAX;

impl TxBuf {
    pub const EMPTY: TxBuf = TxBuf {
        state: TxBufState::Free,
        stream: NIL,
        epoch: 0,
        route_len: 0,
        len: 0,
        control: false,
        seq: 0,
        gather: GATHER_NONE,
        mcast: McastCost::None,
    };
}

/// An event owed to a port, by reference to what holds its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvRef {
    Token(u16),
    Slot(u16),
    Alarm,
    PortOpened,
    /// Piece `part` (16 bytes) of the lost-heads list root token `t`
    /// carries: a `McastLost` event before its Sent.
    Lost(u16, u8),
    /// An event an offload composed (`offload::CoreSide::events` entry).
    Offload(u8),
}

/// What the MCP does when a host-DMA command completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HdmaAction {
    Nothing,
    /// The payload of transmit buffer i is in SRAM.
    TxFilled(u8),
    /// Receive buffer i was copied out: give it back to the rx-DMA engine.
    RxDone(u8),
    /// Event staging slot i was written to host memory.
    EventDone(u8),
    /// Page-table line i was read from host memory.
    PtLine(u8),
    /// A command of offload `.0` (its place in the list), its tag `.1`.
    Offload(u8, u16),
}

/// A control packet to send: ack or nack for a receiving stream, or a
/// poll for a sending one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// The receiving stream the ack or nack is for (a poll: the sending
    /// stream that asks).
    pub rx_stream: u16,
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
    pub fn new(rx_stream: u16, nack: Option<(u8, u32)>) -> Control {
        let (code, seq) = nack.unwrap_or((0, 0));
        Control { rx_stream, code, round: 0, seq }
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
    pub fn poll(tx_stream: u16) -> Control {
        Control { rx_stream: tx_stream, code: POLL, round: 0, seq: 0 }
    }

    /// Selective repeat: a STAT answering poll number `ps` whose next new
    /// sequence number was `ns` (what it lists is read when it leaves).
    pub fn stat(rx_stream: u16, ns: u32, ps: u8) -> Control {
        Control { rx_stream, code: STAT, round: ps, seq: ns }
    }

    /// Selective repeat: a USTAT naming `lo..hi` missing (at most a hold
    /// span: the length fits in `round`).
    pub fn ustat(rx_stream: u16, lo: u32, hi: u32) -> Control {
        let n = hi.wrapping_sub(lo).min(crate::reliability::HOLD_SPAN) as u8;
        Control { rx_stream, code: USTAT, round: n, seq: lo }
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
    /// The receive buffer the payload is in (`NO_RX_BUF`: none; the job
    /// owes only its event).
    pub rx_buf: u8,
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

/// [`RdmaJob::rx_buf`] of a job that copies nothing.
pub const NO_RX_BUF: u8 = u8::MAX;

#[cfg(test)]
mod tests {
    use super::*;
    use nic_abi::packet::NackCode;

    const GAP: u8 = NackCode::OutOfOrder as u8;
    const NOBUF: u8 = NackCode::NoBuffer as u8;

    #[test]
    fn a_queued_control_folds_later_news_for_its_stream() {
        // An ack becomes a nack (which carries the ack too).
        let mut c = Control::new(3, None);
        c.merge(Some((GAP, 10)), 2);
        assert_eq!((c.nack(), c.round), (Some((GAP, 10)), 2));
        // A later ack adds nothing.
        c.merge(None, 0);
        assert_eq!((c.nack(), c.round), (Some((GAP, 10)), 2));
        // A no-buffer nack for the same packet says more than a gap.
        c.merge(Some((NOBUF, 10)), 3);
        assert_eq!((c.nack(), c.round), (Some((NOBUF, 10)), 3));
        // ... and a gap for it afterwards keeps the code, takes the round.
        c.merge(Some((GAP, 10)), 4);
        assert_eq!((c.nack(), c.round), (Some((NOBUF, 10)), 4));
        // Another sequence number replaces it.
        c.merge(Some((GAP, 12)), 4);
        assert_eq!(c.nack(), Some((GAP, 12)));
    }

    #[test]
    fn backoff_leaves_room_for_sixteen_tries_in_the_send_timeout() {
        let rto = 1_000_000;
        let once = TxStream::EMPTY.rtt.rto(rto);
        let mut st = TxStream::EMPTY;
        // A minute's send timeout: doubled up to the most backoff.
        st.backoff = MAX_BACKOFF;
        assert_eq!(st.poll_after(rto, false, 60_000_000_000), once << MAX_BACKOFF);
        // A short one: no try waits more than a sixteenth of it ...
        let short = 32 * once;
        for b in 0..=MAX_BACKOFF {
            st.backoff = b;
            assert_eq!(st.poll_after(rto, false, short), (once << b).min(2 * once), "{b}");
        }
        // ... nor less than one timeout, however short it is.
        assert_eq!(st.poll_after(rto, false, once), once);
    }

    #[test]
    fn a_refused_window_waits_twice_as_long_each_time_up_to_a_cap() {
        let retry = 200_000;
        let minute = 60_000_000_000;
        let mut st = TxStream::EMPTY;
        // The first refusal waits the retry time, each after it twice
        // the one before, up to 2^MAX_REFUSAL_SHIFT times it.
        for k in 0..=MAX_REFUSAL_SHIFT {
            assert_eq!(st.refused(retry, minute), retry << k, "{k}");
        }
        assert_eq!(st.refused(retry, minute), retry << MAX_REFUSAL_SHIFT);
        // Never more than a sixteenth of a short send timeout ...
        let mut st = TxStream::EMPTY;
        let short = 32 * retry;
        let waits: Vec<u64> = (0..5).map(|_| st.refused(retry, short)).collect();
        assert_eq!(waits, [retry, 2 * retry, 2 * retry, 2 * retry, 2 * retry]);
        // ... nor less than the retry time.
        let mut st = TxStream::EMPTY;
        assert_eq!(st.refused(retry, retry), retry);
    }

    #[test]
    fn a_poll_is_neither_an_ack_nor_a_nack() {
        let p = Control::poll(5);
        assert!(p.is_poll());
        assert_eq!(p.nack(), None);
        assert!(!Control::new(5, Some((GAP, 1))).is_poll());
        assert!(!Control::new(5, None).is_poll());
    }
}
