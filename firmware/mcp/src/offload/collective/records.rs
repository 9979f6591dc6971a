//! The records of held and sent chunks, kept in the offload's SRAM
//! (`Layout::held_rec`, `Layout::sent_rec`, 32 bytes each) beside
//! the chunks' bytes; which are in use is a bit set in `Collective`.
//!
//! ```text
//! held: 0 group u16  2 chunk u16  4 tag u8  5 pad  6 from u16  8 cseq u32  12 len u16
//! sent: 0 to u16  2 node u16  4 chunk u16  6 tag u8  7 port u8  8 len u16
//!      10 group u16  12 cseq u32  16 last_tx u64  24 life u64
//! ```

use crate::hw::Hw;

/// The set bits of `bits` (a set of slots), lowest first.
pub fn ones(mut bits: u32) -> impl Iterator<Item = u32> {
    core::iter::from_fn(move || {
        let i = (bits != 0).then(|| bits.trailing_zeros())?;
        bits &= bits - 1;
        Some(i)
    })
}

/// A chunk that came before its step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub group: u16,
    pub cseq: u32,
    pub chunk: u16,
    pub tag: u8,
    pub from: u16,
    pub len: u16,
}

impl Held {
    /// The record at `at`.
    pub fn load(hw: &impl Hw, at: u32) -> Held {
        let a = hw.load_u64(at);
        let b = hw.load_u64(at + 8);
        Held {
            group: a as u16,
            chunk: (a >> 16) as u16,
            tag: (a >> 32) as u8,
            from: (a >> 48) as u16,
            cseq: b as u32,
            len: (b >> 32) as u16,
        }
    }

    pub fn store(&self, hw: &mut impl Hw, at: u32) {
        let a = self.group as u64
            | (self.chunk as u64) << 16
            | (self.tag as u64) << 32
            | (self.from as u64) << 48;
        hw.store_u64(at, a);
        hw.store_u64(at + 8, self.cseq as u64 | (self.len as u64) << 32);
    }
}

/// A chunk sent and not yet acknowledged (its bytes at `Layout::sent_at`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// The collective it belongs to (its member ends before it is
    /// acknowledged: it is sent again until it is), and its port.
    pub group: u16,
    pub cseq: u32,
    pub port: u8,
    pub to: u16,
    pub node: u16,
    pub chunk: u16,
    pub tag: u8,
    pub len: u16,
    /// When it last went.
    pub last_tx: u64,
    /// When the receiver last showed it is there (sent, answered Busy).
    pub life: u64,
}

impl Sent {
    /// The record at `at`.
    pub fn load(hw: &impl Hw, at: u32) -> Sent {
        let a = hw.load_u64(at);
        let b = hw.load_u64(at + 8);
        Sent {
            to: a as u16,
            node: (a >> 16) as u16,
            chunk: (a >> 32) as u16,
            tag: (a >> 48) as u8,
            port: (a >> 56) as u8,
            len: b as u16,
            group: (b >> 16) as u16,
            cseq: (b >> 32) as u32,
            last_tx: hw.load_u64(at + 16),
            life: hw.load_u64(at + 24),
        }
    }

    pub fn store(&self, hw: &mut impl Hw, at: u32) {
        let a = self.to as u64
            | (self.node as u64) << 16
            | (self.chunk as u64) << 32
            | (self.tag as u64) << 48
            | (self.port as u64) << 56;
        hw.store_u64(at, a);
        hw.store_u64(
            at + 8,
            self.len as u64 | (self.group as u64) << 16 | (self.cseq as u64) << 32,
        );
        hw.store_u64(at + 16, self.last_tx);
        hw.store_u64(at + 24, self.life);
    }
}
