//! The MCP's records: send tokens, receive slots, streams, connections,
//! transmit buffers, owed events and the messages between machines. Plain
//! data; the machines in sdma/send/recv/rdma own the logic and each record
//! kind has one owner at a time (module docs of `shared` and the machines).

mod messages;
mod streams;

pub use messages::*;
pub use streams::*;

use crate::pool::Id;
use crate::reliability::{GoBackN, RecvWindow, SendWindow};
use nic_abi::map;
use nic_abi::Priority;

/// A send token's id (`Shared::tokens`).
pub type TokenId = Id<SendToken>;
/// A receive slot's id (`Shared::slots`; the record is in SRAM).
pub type SlotId = Id<RecvSlot>;
/// A sending stream's id (`Sdma::txs`).
pub type TxId = Id<TxStream>;
/// A receiving stream's id (`Recv::rxs`).
pub type RxId = Id<RxStream>;
/// A connection's id (`Sdma::conns`).
pub type ConnId = Id<Conn>;
/// A multicast record's id (`Shared::mcasts`).
pub type McastId = Id<McastRec>;

// A link to a record, or none, is two bytes, as the bare index was.
const _: () = assert!(size_of::<Option<TokenId>>() == 2);
const _: () = assert!(size_of::<Option<TxId>>() == 2 && size_of::<Mrec>() == 2);

// Multicast's records live in its module, re-exported here beside the
// records that carry its fields (a transmit buffer's, a receive slot's).
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
/// Most doublings of the retransmission timeout (go-back-N; selective
/// repeat's polls are not backed off). A timeout sends one small poll,
/// not the window, so backing off further saves little and, at 10% loss
/// on every link, left single messages waiting hundreds of timeouts.
pub const MAX_BACKOFF: u8 = 4;
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
    pub next: Option<TokenId>,
    /// Stream the token is on.
    pub stream: Option<TxId>,
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
        next: None,
        stream: None,
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
    /// The multicast record this delivery counts for, or a leaf's
    /// multicast, or none.
    pub mrec: Mrec,
    /// The next slot in its port's list of posted slots (posting order;
    /// None: the last, or not posted). A message that takes the slot
    /// writes None over it.
    pub next: Option<SlotId>,
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
        mrec: Mrec::NONE,
        next: None,
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

/// Where a receive slot's link (`RecvSlot::next`) lies in its fifth word
/// (as `Id::raw_of`: the index, `pool::RAW_NONE` for none).
pub const SLOT_NEXT_SHIFT: u32 = 48;

/// The part of a receive slot's record a message that takes it writes
/// (its last three words, `Shared::fill_slot`): the rest is the host's.
/// The slot is taken off its port's list then: its link becomes none.
#[derive(Debug, Clone, Copy)]
pub struct SlotFill {
    pub msg_len: u32,
    pub src_node: u16,
    pub src_port: u8,
    pub inline_len: u8,
    pub tag_word: u64,
    pub mrec: Mrec,
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
                | (self.mrec.raw() as u64) << 32
                | (crate::pool::RAW_NONE as u64) << SLOT_NEXT_SHIFT,
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

#[cfg(test)]
mod tests;
