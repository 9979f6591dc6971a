//! Multicast's records: what this NIC keeps of each multicast it serves
//! (`McastRec`, in `Shared::mcasts`), where its data and child list are,
//! the reports a leaf owes, the lost-heads lists, and the limits of a
//! relay. Plain data; the logic is in this module's siblings.

use crate::records::{McastId, TokenId};
use nic_abi::Priority;

/// Where a multicast's data comes from at this NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastSource {
    /// Host memory of `port` at the token's `local` (root; assisted relay).
    Host,
    /// The receive buffers its packets arrived in (NIC relay, pipelined).
    RxBufs,
}

/// Where a multicast's child list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildList {
    /// In `map::mcast_list(record)` (listed by the host, or computed here).
    Scratch,
    /// In the group table (cached at group creation).
    Cached,
    /// Not known yet (an assisted relay waits for its host's list).
    Awaiting,
}

/// What a receiving stream's message (`RxStream::mrec`), and the receive
/// slot it fills (`RecvSlot::mrec`), count for as a multicast: nothing
/// (a unicast, or a multicast the hosts serve), a leaf's multicast (no
/// record: its report goes out when the message is delivered), or the
/// record that serves it ([`Mrec::rec`]). Two bytes, as the record's id
/// (an enum of the three would take four, and grow every receiving
/// stream by eight): what it holds is the number a receive slot keeps in
/// SRAM ([`Mrec::raw`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Mrec(u16);

impl Mrec {
    /// Nothing.
    pub const NONE: Mrec = Mrec(crate::pool::RAW_NONE);
    /// A leaf's multicast. (No record has this index: the pool is
    /// smaller, as checked below.)
    pub const LEAF: Mrec = Mrec(crate::pool::RAW_NONE - 1);

    /// Record `m` serves it.
    #[inline(always)]
    pub fn rec_of(m: McastId) -> Mrec {
        Mrec(m.raw())
    }

    /// The record that serves it, if one does.
    #[inline(always)]
    pub fn rec(self) -> Option<McastId> {
        McastId::from_raw(self.0).filter(|_| self != Mrec::LEAF)
    }

    /// As kept in a receive slot's record in SRAM: the record's index,
    /// `pool::RAW_NONE` for nothing, one less for a leaf.
    #[inline(always)]
    pub fn raw(self) -> u16 {
        self.0
    }

    /// What `raw` gave. (Whether the record is live is `Shared::mcasts`'
    /// to say.)
    #[inline(always)]
    pub fn from_raw(v: u16) -> Mrec {
        Mrec(v)
    }
}

impl core::fmt::Debug for Mrec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (*self, self.rec()) {
            (Mrec::NONE, _) => f.write_str("None"),
            (_, Some(m)) => write!(f, "Rec({m:?})"),
            _ => f.write_str("Leaf"),
        }
    }
}

// Every record's id is below the two numbers `Mrec` keeps for itself.
const _: () = assert!((nic_abi::map::MCAST_LISTS_LEN as usize) < Mrec::LEAF.0 as usize);

/// Where a report goes and which multicast it speaks of: a relay's when
/// its record finishes, a leaf's queued by RDMA at delivery
/// (`Shared::leaf_reports`) for SDMA to send.
#[derive(Debug, Clone, Copy)]
pub struct ReportTo {
    /// The multicast's tag (`McastTag::remote`).
    pub remote: u64,
    pub parent: u16,
    pub port: u8,
    pub prio: Priority,
}

/// Leaf reports waiting for SDMA; RDMA holds a delivery back while full.
pub const LEAF_REPORTS: usize = 16;

/// Set in a stream key: the stream carries reports, apart from the data
/// streams between the same two ports. A report is never refused, so it
/// must not queue behind a data packet its receiver refused for want of
/// a multicast record: that record may be waiting for this very report.
/// On the wire: `PacketType::Report`, and acks/nacks with `Flags::MCAST`.
pub const REPORT_STREAM: u32 = 1 << 23;

/// Receive buffers of a relayed message a relay keeps at once (packet k
/// in `bufs[k % RELAY_WINDOW]`).
pub const RELAY_WINDOW: usize = 16;
/// Most children a relay forwards to out of its receive buffers.
pub const RELAY_CHILDREN: usize = 12;

/// A multicast this NIC serves: as root, relay or leaf (module `mcast`).
#[derive(Debug, Clone, Copy)]
pub struct McastRec {
    pub tag: nic_abi::packet::McastTag,
    pub port: u8,
    pub prio: Priority,
    pub size_class: u8,
    pub len: u32,
    pub npkts: u32,
    /// Host memory address of the message (Host source).
    pub local: u64,
    pub source: McastSource,
    pub list: ChildList,
    /// Size of the subtree this NIC heads (itself included).
    pub subtree: u16,
    pub nchildren: u16,
    /// Children whose send token was made.
    pub started: u16,
    /// Children done (reported, or their send failed).
    pub done: u16,
    /// Members of the children's subtrees known to have the message.
    pub reached: u16,
    /// The parent to report to (None: this NIC is the root).
    pub parent: Option<u16>,
    /// The descriptor token to complete (root; assisted relay), if any.
    pub token: Option<TokenId>,
    /// This NIC's own host has the message (always, at the root).
    pub delivered: bool,
    /// When to stop waiting for children's reports.
    pub deadline: u64,
    /// RxBufs source: when the last packet of the message came in (a
    /// message that stops coming will not be finished: `mcast::ends_at`).
    pub last_in: u64,
    /// RxBufs source: packets arrived, packets whose buffers went back,
    /// packets whose multicast handling was priced (once per packet, at
    /// its first copy out: further copies are only sends).
    pub have: u32,
    pub released: u32,
    pub priced: u32,
    pub bufs: [u8; RELAY_WINDOW],
    /// RxBufs source: the children's send tokens (None: not made), and
    /// packets each has acked (`KID_DONE` once done).
    pub kids: [Option<TokenId>; RELAY_CHILDREN],
    pub kid_acked: [u16; RELAY_CHILDREN],
    /// The heads of the subtrees below this member not reached: a list
    /// in SRAM (`map::mcast_lost`), taken at the first one (None: none).
    pub lost: Option<u8>,
}

/// A lost-heads list as a token's raw field carries it (a `Report`'s
/// `local`, a completed `McastRoot`'s `first_seq`): its number, this for
/// none ([`list_raw`], [`list_from_raw`]).
pub const NO_LIST: u8 = u8::MAX;

/// List `l` as a token's raw field carries it.
pub fn list_raw(l: Option<u8>) -> u8 {
    l.unwrap_or(NO_LIST)
}

/// The list a token's raw field names: none for `NO_LIST` (or any
/// number past the lists).
pub fn list_from_raw(v: u64) -> Option<u8> {
    (v < nic_abi::map::MCAST_LOST_LISTS as u64).then_some(v as u8)
}

const _: () = assert!(nic_abi::map::MCAST_LOST_LISTS <= NO_LIST as u32);

/// Who holds lost-heads list i (`map::mcast_lost`): a multicast record
/// while it collects the heads, then the token that carries them on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostOwner {
    Free,
    Record(McastId),
    Token(TokenId),
}

impl McastRec {
    /// Is this the record of the multicast `tag` names (group and mseq)?
    pub fn is_for(&self, tag: &nic_abi::packet::McastTag) -> bool {
        self.tag.group == tag.group && self.tag.mseq == tag.mseq
    }

    pub const EMPTY: McastRec = McastRec {
        tag: nic_abi::packet::McastTag { group: 0, mseq: 0, scheme: 0, alg: 0, k: 0, subtree: 0 },
        port: 0,
        prio: Priority::Low,
        size_class: 0,
        len: 0,
        npkts: 1,
        local: 0,
        source: McastSource::Host,
        list: ChildList::Awaiting,
        subtree: 1,
        nchildren: 0,
        started: 0,
        done: 0,
        reached: 0,
        parent: None,
        token: None,
        delivered: false,
        deadline: 0,
        last_in: 0,
        have: 0,
        released: 0,
        priced: 0,
        bufs: [0; RELAY_WINDOW],
        kids: [None; RELAY_CHILDREN],
        kid_acked: [0; RELAY_CHILDREN],
        lost: None,
    };
}

impl crate::ring::Vacant for ReportTo {
    const VACANT: ReportTo = ReportTo { remote: 0, parent: 0, port: 0, prio: Priority::Low };
}
