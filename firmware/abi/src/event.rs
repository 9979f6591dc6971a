//! Event records: written by the NIC (host-DMA) into a per-port event queue
//! in HOST memory, in order; the host consumes them by polling its own
//! memory. A slot is fresh when its `seq` equals the sequence number the
//! host expects next (1, 2, 3, ...; 0 never occurs), so slots need no
//! clearing. The device writes `seq` last (Release); the host reads it
//! first (Acquire).
//!
//! Layout (64 bytes):
//! ```text
//!  0 kind u8   1 status u8   2 priority u8   3 port u8 (the remote port)
//!  4 node u16 (the remote node)   6 size_class u8   7 inline_len u8
//!  8 len u32  12 desc_kind u8 (Error: the refused descriptor's kind byte)  13 reserved[3]
//! 16 addr u64  local virtual address (receive buffer, or the send's buffer)
//! 24 tag u64   the descriptor's tag (receive: the buffer's Provide tag)
//! 32 rtc u64   NIC clock when the event was made
//! 40 inline[16] first bytes of a small received message
//! 56 reserved u32   60 seq u32
//! ```
//!
//! A multicast's events (a Received at a member, the root's Sent) say so
//! in bit 7 of byte 12 and carry the multicast ([`McastInfo`]):
//! ```text
//! 12 0x80 | scheme (bits 0..4) | alg << 4 (bits 4..7)   13 k u8
//! 14 group u16   56 mseq u32
//! Sent only: inline[0..2] = members not reached (u16)
//! ```
//!
//! Which members a multicast did not reach comes before its Sent event, in
//! `McastLost` events (one per 16 bytes of the [`LostHeads`] bitmap that
//! have a bit set; none when every member was reached): `tag` the root's
//! tag, `len` the byte offset of the piece, `inline` the 16 bytes.

use crate::le::*;
use crate::{ParseError, Priority};

pub const EVENT_SIZE: u32 = 64;
/// Bytes of a received message copied into its event.
pub const INLINE_MAX: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A message arrived in a receive buffer (the receive token returns).
    Received = 1,
    /// A send completed (status says how); the send token returns.
    Sent = 2,
    /// A put completed at the sender.
    PutDone = 3,
    /// A get completed: the data is in the local buffer.
    GetDone = 4,
    /// A descriptor was refused (status holds an [`ErrorCause`]); its token
    /// returns: a receive token if `desc_kind` is Provide, none if it is
    /// Resume or Alarm, otherwise (Send, Put, Get, or a kind byte that is
    /// no kind at all) a send token.
    Error = 5,
    /// An alarm set with an Alarm descriptor went off.
    Alarm = 6,
    /// The port was opened and the firmware is serving it.
    PortOpened = 7,
    /// A piece of the [`LostHeads`] of the multicast whose Sent event (same
    /// tag) follows, or of the members missing from the collective whose
    /// Collective event (same tag) follows; no token returns.
    McastLost = 8,
    /// Echo offload: the answer to an Echo descriptor (`tag` its tag,
    /// `node` the NIC asked); `addr` holds the round trip in RTC ticks,
    /// `status` a `SendStatus` (Ok, or Unreachable when no answer came
    /// within the send timeout). No token returns.
    Echo = 9,
    /// Collective offload: this member's part of a collective is done
    /// (`collective` module: the fields). No token returns.
    Collective = 10,
    /// Collective offload, assisted: every chunk went through the steps
    /// the host released; the NIC waits for the next (`collective`
    /// module: the fields). No token returns.
    CollStep = 11,
}

impl EventKind {
    pub const fn from_u8(v: u8) -> Option<EventKind> {
        Some(match v {
            1 => EventKind::Received,
            2 => EventKind::Sent,
            3 => EventKind::PutDone,
            4 => EventKind::GetDone,
            5 => EventKind::Error,
            6 => EventKind::Alarm,
            7 => EventKind::PortOpened,
            8 => EventKind::McastLost,
            9 => EventKind::Echo,
            10 => EventKind::Collective,
            11 => EventKind::CollStep,
            _ => return None,
        })
    }
}

/// How a send, put or get ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    Ok = 0,
    /// The target had no matching receive buffer for the send timeout.
    /// Later sends from this sub-port to that target are dropped until a
    /// Resume descriptor.
    TimedOut = 1,
    /// The target port is not open.
    TargetPortClosed = 2,
    /// Dropped because an earlier send to the same target timed out.
    Dropped = 3,
    /// The remote range of a put or get is not registered by the target.
    RemoteAccess = 4,
    /// The target node did not answer (no ack) for the send timeout.
    Unreachable = 5,
    /// A multicast ended with members not reached (their NIC down, their
    /// port closed, or no answer for the send timeout); the event's
    /// [`McastInfo::unreached`] counts them.
    Incomplete = 6,
}

impl SendStatus {
    pub const fn from_u8(v: u8) -> Option<SendStatus> {
        Some(match v {
            0 => SendStatus::Ok,
            1 => SendStatus::TimedOut,
            2 => SendStatus::TargetPortClosed,
            3 => SendStatus::Dropped,
            4 => SendStatus::RemoteAccess,
            5 => SendStatus::Unreachable,
            6 => SendStatus::Incomplete,
            _ => return None,
        })
    }
}

/// Why a descriptor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ErrorCause {
    /// Malformed descriptor (reserved bits set).
    BadDescriptor = 1,
    BadKind = 2,
    BadPriority = 3,
    /// Target port out of range.
    BadPort = 4,
    /// Target node out of range (or this node itself for a put/get).
    BadNode = 5,
    /// Size class above `MAX_SIZE_CLASS`.
    BadSizeClass = 6,
    /// Length does not fit the size class (send), or the buffer is smaller
    /// than its class (provide), or zero where data is needed.
    BadLength = 7,
    /// Some byte of the local range is not registered by this port.
    NotRegistered = 8,
    /// More descriptors outstanding than the port has tokens.
    NoToken = 9,
    /// The NIC already tracks as many streams (remote node, port pair,
    /// priority) as it can.
    TooManyStreams = 10,
    /// A multicast names a group this NIC has not installed, on another
    /// port, or one in which this NIC cannot send as asked (a root-only
    /// scheme from a member that is not the root).
    BadGroup = 11,
    /// A multicast names an unknown scheme or algorithm, or its child list
    /// is empty, too long or names a node outside the cluster.
    BadMulticast = 12,
    /// An assisted collective's step released out of order: not the one
    /// after the last released, or of a collective not begun here.
    BadStep = 13,
}

impl ErrorCause {
    pub const fn from_u8(v: u8) -> Option<ErrorCause> {
        Some(match v {
            1 => ErrorCause::BadDescriptor,
            2 => ErrorCause::BadKind,
            3 => ErrorCause::BadPriority,
            4 => ErrorCause::BadPort,
            5 => ErrorCause::BadNode,
            6 => ErrorCause::BadSizeClass,
            7 => ErrorCause::BadLength,
            8 => ErrorCause::NotRegistered,
            9 => ErrorCause::NoToken,
            10 => ErrorCause::TooManyStreams,
            11 => ErrorCause::BadGroup,
            12 => ErrorCause::BadMulticast,
            13 => ErrorCause::BadStep,
            _ => return None,
        })
    }
}

/// The multicast an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McastInfo {
    pub group: u16,
    pub mseq: u32,
    /// `multicast::Scheme` code.
    pub scheme: u8,
    /// `multicast::Algorithm` code, and its k.
    pub alg: u8,
    pub k: u8,
    /// Root's Sent event: members not reached (0 on success).
    pub unreached: u16,
    /// Root's Sent event: the heads of the subtrees not reached (a member
    /// whose send failed, or whose parent says it lost it; the driver
    /// gathers them from the `McastLost` events before the Sent). Empty
    /// when every member was reached, or when only a count is known (a
    /// member that did not answer before its deadline, or a NIC with no
    /// room left to list them).
    pub lost: LostHeads,
}

/// Bytes of a [`LostHeads`] bitmap (one bit per node).
pub const LOST_BYTES: usize = crate::MAX_NODES / 8;

/// Nodes heading subtrees a multicast did not reach: bit `n % 8` of byte
/// `n / 8` for node n, as on the wire (a Report's payload, `McastLost`
/// events) and in NIC SRAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostHeads(pub [u64; LOST_BYTES / 8]);

impl Default for LostHeads {
    fn default() -> Self {
        LostHeads::NONE
    }
}

impl LostHeads {
    pub const NONE: LostHeads = LostHeads([0; LOST_BYTES / 8]);

    pub fn insert(&mut self, node: u16) {
        if let Some(w) = self.0.get_mut(node as usize / 64) {
            *w |= 1 << (node % 64);
        }
    }

    pub fn contains(&self, node: u16) -> bool {
        self.0.get(node as usize / 64).is_some_and(|w| w >> (node % 64) & 1 != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The nodes, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..LOST_BYTES as u16 * 8).filter(|&n| self.contains(n))
    }

    /// Add the nodes of `bytes`, the bitmap's bytes from byte `offset` on
    /// (bytes past the bitmap are ignored).
    pub fn merge(&mut self, offset: usize, bytes: &[u8]) {
        for (i, &b) in bytes.iter().enumerate() {
            let at = offset.saturating_add(i);
            if at < LOST_BYTES {
                self.0[at / 8] |= (b as u64) << (8 * (at % 8));
            }
        }
    }
}

/// An event as a plain struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// `SendStatus` for completions, `ErrorCause` for errors, else 0.
    pub status: u8,
    pub priority: Priority,
    pub port: u8,
    pub node: u16,
    pub size_class: u8,
    pub inline_len: u8,
    pub len: u32,
    /// For `Error` events: the kind byte of the refused descriptor, so the
    /// host knows which token came back.
    pub desc_kind: u8,
    pub addr: u64,
    pub tag: u64,
    pub rtc: u64,
    pub inline: [u8; INLINE_MAX],
    /// A multicast's Received or Sent event.
    pub mcast: Option<McastInfo>,
    pub seq: u32,
}

impl Event {
    pub const fn empty(kind: EventKind) -> Event {
        Event {
            kind,
            status: 0,
            priority: Priority::Low,
            port: 0,
            node: 0,
            size_class: 0,
            inline_len: 0,
            len: 0,
            desc_kind: 0,
            addr: 0,
            tag: 0,
            rtc: 0,
            inline: [0; INLINE_MAX],
            mcast: None,
            seq: 0,
        }
    }

    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u8(b, 0, self.kind as u8);
        put_u8(b, 1, self.status);
        put_u8(b, 2, self.priority as u8);
        put_u8(b, 3, self.port);
        put_u16(b, 4, self.node);
        put_u8(b, 6, self.size_class);
        put_u8(b, 7, self.inline_len);
        put_u32(b, 8, self.len);
        put_u32(b, 12, self.desc_kind as u32);
        put_u64(b, 16, self.addr);
        put_u64(b, 24, self.tag);
        put_u64(b, 32, self.rtc);
        if let Some(s) = b.get_mut(40..40 + INLINE_MAX) {
            s.copy_from_slice(&self.inline);
        }
        put_u32(b, 56, 0);
        if let Some(m) = self.mcast {
            put_u8(b, 12, 0x80 | (m.scheme & 0xF) | (m.alg & 0x7) << 4);
            put_u8(b, 13, m.k);
            put_u16(b, 14, m.group);
            put_u32(b, 56, m.mseq);
            if self.kind == EventKind::Sent {
                put_u16(b, 40, m.unreached);
            }
        }
        put_u32(b, 60, self.seq);
    }

    #[inline]
    pub fn decode(b: &[u8]) -> Result<Event, ParseError> {
        if b.len() < EVENT_SIZE as usize {
            return Err(ParseError::Truncated);
        }
        let kind = EventKind::from_u8(get_u8(b, 0)).ok_or(ParseError::BadField("kind"))?;
        let priority = Priority::from_u8(get_u8(b, 2)).ok_or(ParseError::BadField("priority"))?;
        let inline_len = get_u8(b, 7);
        if inline_len as usize > INLINE_MAX {
            return Err(ParseError::BadField("inline_len"));
        }
        let mut inline = [0u8; INLINE_MAX];
        inline.copy_from_slice(&b[40..40 + INLINE_MAX]);
        let m = get_u8(b, 12);
        let mcast =
            (matches!(kind, EventKind::Received | EventKind::Sent) && m & 0x80 != 0).then(|| {
                McastInfo {
                    group: get_u16(b, 14),
                    mseq: get_u32(b, 56),
                    scheme: m & 0xF,
                    alg: (m >> 4) & 0x7,
                    k: get_u8(b, 13),
                    unreached: if kind == EventKind::Sent { get_u16(b, 40) } else { 0 },
                    lost: LostHeads::NONE,
                }
            });
        Ok(Event {
            kind,
            status: get_u8(b, 1),
            priority,
            port: get_u8(b, 3),
            node: get_u16(b, 4),
            size_class: get_u8(b, 6),
            inline_len,
            len: get_u32(b, 8),
            desc_kind: if mcast.is_some() { 0 } else { get_u8(b, 12) },
            addr: get_u64(b, 16),
            tag: get_u64(b, 24),
            rtc: get_u64(b, 32),
            inline,
            mcast,
            seq: get_u32(b, 60),
        })
    }

    /// The sequence number of an event slot, read without parsing the rest.
    #[inline]
    pub fn slot_seq(b: &[u8]) -> u32 {
        get_u32(b, 60)
    }
}

/// Offset of the `seq` word in an event record.
pub const EVENT_SEQ_OFFSET: u32 = 60;

#[cfg(test)]
#[path = "event_tests.rs"]
mod tests;
