//! Where the collective offload keeps its chunks on this NIC: the slots
//! of chunks held and sent, their records, the answers waiting for a
//! transmit buffer, and the vector area the runs' windows are cut from.

use super::MAX_RUNS;
use nic_abi::collective::{CHUNK_MAX, CHUNK_SMALL};
use nic_abi::map::{self, COLL, COLL_HELD, COLL_SENT};
use nic_abi::packet::HEADER_LEN;

/// Where the chunk slots, their records and the vector area are: in
/// `map::COLL` (`COLL_HELD` and `COLL_SENT` slots of `CHUNK_SMALL`
/// bytes), or, on a NIC with SRAM past the map, there (`EXT_HELD` and
/// `EXT_SENT` slots of `CHUNK_MAX` bytes, their records, and a much
/// larger vector area).
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// The NIC's SRAM size, which fixes the chunk size
    /// (`collective::chunk_bytes`).
    pub sram: u32,
    /// Bytes per held or sent slot (the largest chunk).
    pub slot: u32,
    /// Slots for held chunks and for sent ones.
    pub nheld: u32,
    pub nsent: u32,
    pub held: u32,
    pub sent: u32,
    /// Their records (`map::COLL_REC_SIZE` bytes each; the sent ones
    /// after the held ones).
    pub recs: u32,
    /// Answers kept for want of a transmit buffer (`HEADER_LEN` bytes
    /// each).
    pub answer: u32,
    pub nanswers: u32,
    /// The vector area: 32 blocks of `block` bytes.
    pub vector: u32,
    pub block: u32,
}

/// Slots for held and sent chunks on a NIC with SRAM past the map.
const EXT_HELD: u32 = 16;
const EXT_SENT: u32 = 32;
const EXT_ANSWERS: u32 = 32;

const _: () = assert!(COLL_HELD <= 32 && COLL_SENT <= 32 && EXT_HELD <= 32 && EXT_SENT <= 32);
const _: () = assert!(map::COLL_ANSWERS <= 32 && EXT_ANSWERS <= 32 && MAX_RUNS <= 8);
const _: () = assert!(
    (EXT_HELD + EXT_SENT) * (CHUNK_MAX + map::COLL_REC_SIZE)
        + EXT_ANSWERS * HEADER_LEN as u32
        + 32 * CHUNK_MAX
        <= map::COLL_EXT_MIN
);

impl Layout {
    pub(super) const SMALL: Layout = Layout {
        sram: map::SRAM_MIN,
        slot: CHUNK_SMALL,
        nheld: COLL_HELD,
        nsent: COLL_SENT,
        held: map::coll_held(0),
        sent: map::coll_sent(0),
        recs: map::coll_held_rec(0),
        answer: map::coll_answer(0),
        nanswers: map::COLL_ANSWERS,
        vector: COLL,
        block: map::COLL_VECTOR / 32,
    };

    /// The layout on a NIC of `sram` bytes of SRAM.
    pub(super) fn of(sram: u32) -> Layout {
        let ext = map::coll_ext_len(sram);
        if ext == 0 {
            return Layout { sram, ..Self::SMALL };
        }
        let n = EXT_HELD + EXT_SENT;
        let recs = map::COLL_EXT + n * CHUNK_MAX;
        let answer = recs + n * map::COLL_REC_SIZE;
        let vector = answer + EXT_ANSWERS * HEADER_LEN as u32;
        Layout {
            sram,
            slot: CHUNK_MAX,
            nheld: EXT_HELD,
            nsent: EXT_SENT,
            held: map::COLL_EXT,
            sent: map::COLL_EXT + EXT_HELD * CHUNK_MAX,
            recs,
            answer,
            nanswers: EXT_ANSWERS,
            vector,
            block: (map::COLL_EXT + ext - vector) / 32 / 8 * 8,
        }
    }

    pub(super) fn held_at(&self, i: u32) -> u32 {
        self.held + i * self.slot
    }

    pub(super) fn sent_at(&self, i: u32) -> u32 {
        self.sent + i * self.slot
    }

    pub(super) fn held_rec(&self, i: u32) -> u32 {
        self.recs + i * map::COLL_REC_SIZE
    }

    pub(super) fn sent_rec(&self, i: u32) -> u32 {
        self.recs + (self.nheld + i) * map::COLL_REC_SIZE
    }

    pub(super) fn answer_at(&self, i: u32) -> u32 {
        self.answer + i * HEADER_LEN as u32
    }

    /// The set of all held slots, and of all sent ones.
    pub(super) fn all_held(&self) -> u32 {
        low_bits(self.nheld)
    }

    pub(super) fn all_sent(&self) -> u32 {
        low_bits(self.nsent)
    }

    pub(super) fn all_answers(&self) -> u32 {
        low_bits(self.nanswers)
    }
}

/// The `n` lowest bits (n up to 32).
fn low_bits(n: u32) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1 << n) - 1
    }
}
