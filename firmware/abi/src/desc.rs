//! Send-ring descriptors: what a host process writes (by programmed I/O)
//! into its port's send ring. One ring carries every request of the port,
//! in order: sends, puts, gets, receive buffers, resumes and alarms.
//!
//! Layout (64 bytes):
//! ```text
//!  0 kind u8        1 priority u8     2 size_class u8   3 target_port u8
//!  4 target_node u16                  6 flags u16 (zero)
//!  8 local u64      virtual address of the local buffer
//! 16 len u32        bytes            20 reserved u32
//! 24 remote u64     put/get: remote virtual address; alarm: delay in ticks
//! 32 tag u64        returned untouched in the completion event
//! 40 reserved[24]
//! ```
//!
//! A multicast descriptor (kind 7) reuses the layout: `target_node` is the
//! group, `target_port` the port every member receives on, and
//! ```text
//! 20 mseq u32      the multicast's number in its group
//! 40 scheme u8     41 alg u8     42 k u8     43 reserved (zero)
//! 44 nchildren u16 children listed (host and assisted schemes)
//! 46 reserved u16
//! 48 children[4]   (node u16, subtree u16) each, in send order
//! ```
//! When more than [`INLINE_CHILDREN`] children are listed, the next
//! `ceil((nchildren - 4) / 16)` ring slots hold the rest, 16 entries each
//! ([`child_slots`]): the descriptor and its continuation are taken
//! together.

use crate::event::ErrorCause;
use crate::le::*;
use crate::Priority;

pub const DESC_SIZE: u32 = 64;

/// The words of a descriptor that hold a core kind's fields (bytes
/// `0..40`; the rest is a multicast's or an offload's).
pub const DESC_CORE_WORDS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescKind {
    /// Send `len` bytes at `local` to (target_node, target_port) into a
    /// receive buffer of `size_class` and `priority`.
    Send = 1,
    /// Provide a receive buffer of `size_class` and `priority` at `local`
    /// (`len` bytes, at least 2^size_class).
    Provide = 2,
    /// Directed send: write `len` bytes at `local` into the target port's
    /// registered memory at `remote`. No receive buffer is consumed; the
    /// completion comes to the sender only.
    Put = 3,
    /// Read `len` bytes at `remote` of the target port into `local`.
    Get = 4,
    /// Resume sends from (port, priority) to (target_node, target_port)
    /// after a send timed out there. No token, no event.
    Resume = 5,
    /// Raise an alarm event (tag returned) after `remote` ticks. No token;
    /// one alarm per port is pending at a time (a new one replaces it).
    Alarm = 6,
    /// Multicast `len` bytes at `local` to a group (see the module doc):
    /// at the root, or (assisted scheme) a relay handing its NIC the child
    /// list for a message it received. One completion event when the
    /// subtree it serves has the message (host scheme: when the one listed
    /// child acked it).
    Multicast = 7,
    /// Echo offload: ask the NIC of `target_node` to answer a ping from
    /// this NIC (no host there takes part). One `Echo` event carries
    /// `tag` back with the round trip in RTC ticks. No token.
    Echo = 8,
    /// Collective offload: this member's part of a barrier, reduce,
    /// allreduce or broadcast of a group (`collective::CollFields`). One
    /// `Collective` event when this member is done. No token.
    Collective = 9,
}

/// Kinds from this one on belong to offloads (`mcp::offload`): the intake
/// hands such a descriptor to the offload that owns its kind, and refuses
/// it as an unknown kind when none does (its offload is compiled out).
pub const OFFLOAD_KINDS_FROM: u8 = 8;

/// Children listed inside a multicast descriptor itself.
pub const INLINE_CHILDREN: usize = 4;
/// Children listed in each continuation slot.
pub const SLOT_CHILDREN: usize = 16;
/// Most children one multicast descriptor lists (so that a descriptor and
/// its continuation fit a quarter of the send ring).
pub const MAX_LISTED_CHILDREN: usize = 255;

/// Continuation slots that follow a multicast descriptor listing `n`
/// children.
pub const fn child_slots(n: usize) -> usize {
    n.saturating_sub(INLINE_CHILDREN).div_ceil(SLOT_CHILDREN)
}

/// A child in a multicast descriptor's list: its node, and the size of
/// the subtree it heads (itself included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListedChild {
    pub node: u16,
    pub subtree: u16,
}

/// The multicast fields of a kind-7 descriptor (beside [`Descriptor`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McastFields {
    pub mseq: u32,
    pub scheme: u8,
    pub alg: u8,
    pub k: u8,
    pub nchildren: u16,
}

impl McastFields {
    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 20, self.mseq);
        put_u8(b, 40, self.scheme);
        put_u8(b, 41, self.alg);
        put_u8(b, 42, self.k);
        put_u8(b, 43, 0);
        put_u16(b, 44, self.nchildren);
        put_u16(b, 46, 0);
    }

    /// The fields of a descriptor whose kind is Multicast (no domain
    /// checks: the firmware checks them against the group).
    pub fn decode(b: &[u8]) -> Result<McastFields, ErrorCause> {
        if b.len() < DESC_SIZE as usize {
            return Err(ErrorCause::BadDescriptor);
        }
        if get_u8(b, 43) != 0 || get_u16(b, 46) != 0 {
            return Err(ErrorCause::BadDescriptor);
        }
        Ok(McastFields {
            mseq: get_u32(b, 20),
            scheme: get_u8(b, 40),
            alg: get_u8(b, 41),
            k: get_u8(b, 42),
            nchildren: get_u16(b, 44),
        })
    }
}

/// Child `i` of a multicast list: where it lives (descriptor slot 0 holds
/// the first [`INLINE_CHILDREN`], each continuation slot the next
/// [`SLOT_CHILDREN`]): (slot, byte offset in the slot).
pub const fn child_at(i: usize) -> (usize, usize) {
    if i < INLINE_CHILDREN {
        (0, 48 + 4 * i)
    } else {
        let j = i - INLINE_CHILDREN;
        (1 + j / SLOT_CHILDREN, 4 * (j % SLOT_CHILDREN))
    }
}

impl ListedChild {
    pub fn encode(&self, b: &mut [u8], at: usize) {
        put_u16(b, at, self.node);
        put_u16(b, at + 2, self.subtree);
    }

    pub fn decode(b: &[u8], at: usize) -> ListedChild {
        ListedChild { node: get_u16(b, at), subtree: get_u16(b, at + 2) }
    }
}

impl DescKind {
    pub const fn from_u8(v: u8) -> Option<DescKind> {
        Some(match v {
            1 => DescKind::Send,
            2 => DescKind::Provide,
            3 => DescKind::Put,
            4 => DescKind::Get,
            5 => DescKind::Resume,
            6 => DescKind::Alarm,
            7 => DescKind::Multicast,
            8 => DescKind::Echo,
            9 => DescKind::Collective,
            _ => return None,
        })
    }

    /// Does this kind consume a send token? Send, Put and Get do; each
    /// returns it with exactly one completion or error event.
    pub const fn uses_send_token(self) -> bool {
        matches!(self, DescKind::Send | DescKind::Put | DescKind::Get | DescKind::Multicast)
    }

    /// Does this kind consume a receive token? Provide does; it returns
    /// with the Received event (or an error event).
    pub const fn uses_recv_token(self) -> bool {
        matches!(self, DescKind::Provide)
    }
}

/// A descriptor as the host wrote it, after the syntactic checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: DescKind,
    pub priority: Priority,
    pub size_class: u8,
    pub target_port: u8,
    pub target_node: u16,
    pub local: u64,
    pub len: u32,
    pub remote: u64,
    pub tag: u64,
}

impl Descriptor {
    /// An echo request to node `node`'s NIC (the echo offload): no port,
    /// no memory; `tag` comes back in the completion.
    pub const fn echo(node: u16, tag: u64) -> Descriptor {
        Descriptor {
            kind: DescKind::Echo,
            priority: Priority::Low,
            size_class: 0,
            target_port: 0,
            target_node: node,
            local: 0,
            len: 0,
            remote: 0,
            tag,
        }
    }

    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u8(b, 0, self.kind as u8);
        put_u8(b, 1, self.priority as u8);
        put_u8(b, 2, self.size_class);
        put_u8(b, 3, self.target_port);
        put_u16(b, 4, self.target_node);
        put_u16(b, 6, 0);
        put_u64(b, 8, self.local);
        put_u32(b, 16, self.len);
        put_u32(b, 20, 0);
        put_u64(b, 24, self.remote);
        put_u64(b, 32, self.tag);
        if let Some(rest) = b.get_mut(40..DESC_SIZE as usize) {
            rest.fill(0);
        }
    }

    /// Parse a descriptor. Errors name the cause the host will be told; the
    /// tag is still recoverable with [`Descriptor::raw_tag`] and the kind
    /// with [`Descriptor::raw_kind`].
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Descriptor, ErrorCause> {
        if b.len() < DESC_SIZE as usize {
            return Err(ErrorCause::BadDescriptor);
        }
        let kind = DescKind::from_u8(get_u8(b, 0)).ok_or(ErrorCause::BadKind)?;
        let priority = Priority::from_u8(get_u8(b, 1)).ok_or(ErrorCause::BadPriority)?;
        if get_u16(b, 6) != 0 {
            return Err(ErrorCause::BadDescriptor);
        }
        Ok(Descriptor {
            kind,
            priority,
            size_class: get_u8(b, 2),
            target_port: get_u8(b, 3),
            target_node: get_u16(b, 4),
            local: get_u64(b, 8),
            len: get_u32(b, 16),
            remote: get_u64(b, 24),
            tag: get_u64(b, 32),
        })
    }

    /// Parse a descriptor from its first [`DESC_CORE_WORDS`] little-endian
    /// 64-bit words (bytes `0..40`, every field a core kind has), as
    /// [`Descriptor::decode`] parses the bytes: for firmware that loads
    /// words rather than copying the slot and decoding it byte by byte.
    #[inline]
    pub fn decode_words(w: &[u64; DESC_CORE_WORDS]) -> Result<Descriptor, ErrorCause> {
        let kind = DescKind::from_u8(w[0] as u8).ok_or(ErrorCause::BadKind)?;
        let priority = Priority::from_u8((w[0] >> 8) as u8).ok_or(ErrorCause::BadPriority)?;
        if (w[0] >> 48) as u16 != 0 {
            return Err(ErrorCause::BadDescriptor);
        }
        Ok(Descriptor {
            kind,
            priority,
            size_class: (w[0] >> 16) as u8,
            target_port: (w[0] >> 24) as u8,
            target_node: (w[0] >> 32) as u16,
            local: w[1],
            len: w[2] as u32,
            remote: w[3],
            tag: w[4],
        })
    }

    /// The tag of a descriptor that failed to parse (0 if truncated).
    pub fn raw_tag(b: &[u8]) -> u64 {
        get_u64(b, 32)
    }

    /// The kind byte of a descriptor that failed to parse.
    pub fn raw_kind(b: &[u8]) -> u8 {
        get_u8(b, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Descriptor {
        Descriptor {
            kind: DescKind::Put,
            priority: Priority::High,
            size_class: 12,
            target_port: 3,
            target_node: 15,
            local: 0x7000_0000_1000,
            len: 4000,
            remote: 0x7000_0002_0000,
            tag: 0xdead_beef,
        }
    }

    #[test]
    fn descriptor_round_trips() {
        let d = sample();
        let mut b = [0xAAu8; 64];
        d.encode(&mut b);
        assert_eq!(Descriptor::decode(&b), Ok(d));
    }

    #[test]
    fn descriptor_words_decode_as_its_bytes() {
        let mut b = [0u8; 64];
        sample().encode(&mut b);
        let word = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        let words: [u64; DESC_CORE_WORDS] = core::array::from_fn(word);
        assert_eq!(Descriptor::decode_words(&words), Descriptor::decode(&b));
        for (at, v, cause) in [
            (0, 0, ErrorCause::BadKind),
            (1, 9, ErrorCause::BadPriority),
            (6, 1, ErrorCause::BadDescriptor),
        ] {
            let mut bad = b;
            bad[at] = v;
            let word = |i: usize| u64::from_le_bytes(bad[8 * i..8 * i + 8].try_into().unwrap());
            let words: [u64; DESC_CORE_WORDS] = core::array::from_fn(word);
            assert_eq!(Descriptor::decode_words(&words), Err(cause));
            assert_eq!(Descriptor::decode(&bad), Err(cause));
        }
    }

    #[test]
    fn truncated_descriptor_is_refused() {
        let mut b = [0u8; 64];
        sample().encode(&mut b);
        for n in 0..64 {
            assert_eq!(Descriptor::decode(&b[..n]), Err(ErrorCause::BadDescriptor));
        }
    }

    #[test]
    fn unknown_kind_and_priority_are_named() {
        let mut b = [0u8; 64];
        sample().encode(&mut b);
        b[0] = 0;
        assert_eq!(Descriptor::decode(&b), Err(ErrorCause::BadKind));
        b[0] = 1;
        b[1] = 2;
        assert_eq!(Descriptor::decode(&b), Err(ErrorCause::BadPriority));
        assert_eq!(Descriptor::raw_tag(&b), 0xdead_beef);
    }

    #[test]
    fn multicast_fields_and_children_round_trip() {
        let mut b = [0u8; 64];
        let mut d = sample();
        d.kind = DescKind::Multicast;
        d.encode(&mut b);
        let f = McastFields { mseq: 9, scheme: 2, alg: 4, k: 3, nchildren: 21 };
        f.encode(&mut b);
        assert_eq!(McastFields::decode(&b), Ok(f));
        assert_eq!(Descriptor::decode(&b).map(|d| d.kind), Ok(DescKind::Multicast));
        let c = ListedChild { node: 12, subtree: 4 };
        c.encode(&mut b, child_at(3).1);
        assert_eq!(ListedChild::decode(&b, 60), c);
        assert_eq!(child_slots(4), 0);
        assert_eq!(child_slots(5), 1);
        assert_eq!(child_slots(20), 1);
        assert_eq!(child_slots(21), 2);
        assert_eq!(child_at(4), (1, 0));
        assert_eq!(child_at(20), (2, 0));
        assert_eq!(child_at(19), (1, 60));
        b[43] = 1;
        assert_eq!(McastFields::decode(&b), Err(ErrorCause::BadDescriptor));
        // Enough room for the largest list in a send ring.
        assert!(child_slots(MAX_LISTED_CHILDREN) < crate::map::SEND_RING_LEN as usize / 2);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Descriptor::decode(&bytes);
            let _ = McastFields::decode(&bytes);
            let _ = Descriptor::raw_tag(&bytes);
        }
    }
}
