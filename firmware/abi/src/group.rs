//! The multicast group table in SRAM (`map::GROUPS`): what a NIC knows of
//! each group it belongs to. Written only by the privileged side (the
//! driver, as it writes page tables) when a group is created; the
//! firmware reads it. A group has a fixed root: its members are listed in
//! rank order, the root at rank 0 (ranks relative to the root), and every
//! member receives on the same port.
//!
//! Entry layout (`map::group_entry(id)`, `map::GROUP_ENTRY_SIZE` bytes):
//! ```text
//!  0 valid u32     GROUP_VALID once the entry is complete (written last)
//!  4 size u16      G, members including the root
//!  6 rank u16      this NIC's rank in the group
//!  8 port u8       the port every member uses
//!  9 alg u8       10 k u8     the algorithm of the cached tree
//! 11 reserved u8  12 nchildren u16  this NIC's children in the cached tree
//! 14 reserved[50]
//! 64 members[MAX_GROUP] u16       node of each rank
//! MEMBERS + 2 * MAX_GROUP: children[MAX_GROUP - 1] (rank u16, subtree u16),
//!    this NIC's children in the cached tree, in send order
//! ```
//! The driver invalidates an entry (valid = 0) before rewriting it.

use crate::le::*;

pub use crate::multicast::MAX_GROUP;
/// `valid` of a complete entry.
pub const GROUP_VALID: u32 = 0x4752_5031; // "GRP1"

pub const VALID: u32 = 0;
pub const SIZE: u32 = 4;
pub const RANK: u32 = 6;
pub const PORT: u32 = 8;
pub const ALG: u32 = 9;
pub const K: u32 = 10;
pub const NCHILDREN: u32 = 12;
pub const MEMBERS: u32 = 64;
pub const CHILDREN: u32 = MEMBERS + 2 * MAX_GROUP as u32;
/// First byte past an entry's fields.
pub const ENTRY_END: u32 = CHILDREN + 4 * (MAX_GROUP as u32 - 1);

/// An entry's fixed part as a plain struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHead {
    pub size: u16,
    pub rank: u16,
    pub port: u8,
    pub alg: u8,
    pub k: u8,
    pub nchildren: u16,
}

impl GroupHead {
    pub const LEN: usize = 16;

    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, VALID as usize, 0);
        put_u16(b, SIZE as usize, self.size);
        put_u16(b, RANK as usize, self.rank);
        put_u8(b, PORT as usize, self.port);
        put_u8(b, ALG as usize, self.alg);
        put_u8(b, K as usize, self.k);
        put_u8(b, 11, 0);
        put_u16(b, NCHILDREN as usize, self.nchildren);
        put_u16(b, 14, 0);
    }

    /// The head of an entry whose first [`GroupHead::LEN`] bytes are `b`:
    /// None unless it is valid and self-consistent (rank inside the
    /// group, children fewer than members).
    pub fn decode(b: &[u8]) -> Option<GroupHead> {
        if b.len() < Self::LEN || get_u32(b, VALID as usize) != GROUP_VALID {
            return None;
        }
        let h = GroupHead {
            size: get_u16(b, SIZE as usize),
            rank: get_u16(b, RANK as usize),
            port: get_u8(b, PORT as usize),
            alg: get_u8(b, ALG as usize),
            k: get_u8(b, K as usize),
            nchildren: get_u16(b, NCHILDREN as usize),
        };
        let ok = h.size >= 1
            && h.size as usize <= MAX_GROUP
            && h.rank < h.size
            && (h.port as usize) < crate::NUM_PORTS
            && h.nchildren < h.size;
        ok.then_some(h)
    }
}

/// Offset of member `rank`'s node in entry `id`.
pub const fn member(id: u32, rank: u16) -> u32 {
    crate::map::group_entry(id) + MEMBERS + 2 * rank as u32
}

/// Offset of cached child `i` of entry `id`.
pub const fn child(id: u32, i: u16) -> u32 {
    crate::map::group_entry(id) + CHILDREN + 4 * i as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trips_once_valid() {
        let h = GroupHead { size: 16, rank: 3, port: 2, alg: 2, k: 0, nchildren: 2 };
        let mut b = [0u8; GroupHead::LEN];
        h.encode(&mut b);
        assert_eq!(GroupHead::decode(&b), None, "not valid until the valid word is set");
        put_u32(&mut b, 0, GROUP_VALID);
        assert_eq!(GroupHead::decode(&b), Some(h));
    }

    #[test]
    fn inconsistent_heads_are_refused() {
        let mut b = [0u8; GroupHead::LEN];
        for h in [
            GroupHead { size: 0, rank: 0, port: 0, alg: 0, k: 0, nchildren: 0 },
            GroupHead { size: 4, rank: 4, port: 0, alg: 0, k: 0, nchildren: 0 },
            GroupHead { size: 4, rank: 0, port: 8, alg: 0, k: 0, nchildren: 0 },
            GroupHead { size: 4, rank: 0, port: 0, alg: 0, k: 0, nchildren: 4 },
            GroupHead { size: 2000, rank: 0, port: 0, alg: 0, k: 0, nchildren: 0 },
        ] {
            h.encode(&mut b);
            put_u32(&mut b, 0, GROUP_VALID);
            assert_eq!(GroupHead::decode(&b), None, "{h:?}");
        }
    }
}
