//! Where receiving streams stood when RECV let them go (its table was
//! full and they held nothing): their key, their SYNC state and the next
//! sequence number they expected, in SRAM (`map::RX_GHOSTS`). When a
//! packet of such a stream comes again, the stream is made where it was,
//! so a message whose ack was lost, sent again, is still known as a
//! duplicate. A ghost may be overwritten only once its stream has been
//! quiet for a send timeout (by then its sender has had its acks, or
//! given up): until then the stream cannot be let go of.

use crate::hw::Hw;
use crate::records::SyncSeen;
use nic_abi::le::*;
use nic_abi::map;

/// One ghost: a stream let go of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ghost {
    pub key: u32,
    pub sync: SyncSeen,
    pub expected: u32,
    /// When the stream last did something (an ack owed or a nack).
    pub last: u64,
}

const WAYS: u32 = 4;

fn bucket(key: u32) -> u32 {
    let buckets = map::RX_GHOSTS_LEN / WAYS;
    (key.wrapping_mul(0x9E37_79B1) >> 16) & (buckets - 1)
}

fn read(hw: &impl Hw, i: u32) -> Option<Ghost> {
    let mut b = [0u8; map::RX_GHOST_SIZE as usize];
    hw.read(map::rx_ghost(i), &mut b);
    (get_u8(&b, 7) == 1).then(|| Ghost {
        key: get_u32(&b, 0),
        sync: SyncSeen::new(get_u16(&b, 4), get_u32(&b, 8), get_u8(&b, 6)),
        expected: get_u32(&b, 12),
        last: get_u64(&b, 16),
    })
}

fn write(hw: &mut impl Hw, i: u32, g: Option<&Ghost>) {
    let mut b = [0u8; map::RX_GHOST_SIZE as usize];
    if let Some(g) = g {
        let (boot, inc, gen) = g.sync.get().unwrap_or((0, 0, 0));
        put_u32(&mut b, 0, g.key);
        put_u16(&mut b, 4, boot);
        put_u8(&mut b, 6, gen);
        put_u8(&mut b, 7, 1);
        put_u32(&mut b, 8, inc);
        put_u32(&mut b, 12, g.expected);
        put_u64(&mut b, 16, g.last);
    }
    hw.write(map::rx_ghost(i), &b);
}

/// Keep `g`; false when its bucket holds only ghosts of streams not yet
/// quiet for `quiet` (then the stream must stay).
pub fn put(hw: &mut impl Hw, now: u64, quiet: u64, g: &Ghost) -> bool {
    let first = bucket(g.key) * WAYS;
    let free = (first..first + WAYS).find(|&i| match read(hw, i) {
        None => true,
        Some(o) => o.key == g.key || now.saturating_sub(o.last) >= quiet,
    });
    match free {
        Some(i) => {
            write(hw, i, Some(g));
            true
        }
        None => false,
    }
}

/// The ghost of stream `key`, taken out, if there is one.
pub fn take(hw: &mut impl Hw, key: u32) -> Option<Ghost> {
    let first = bucket(key) * WAYS;
    for i in first..first + WAYS {
        if let Some(g) = read(hw, i).filter(|g| g.key == key) {
            write(hw, i, None);
            return Some(g);
        }
    }
    None
}

/// Forget every ghost (a new boot: SRAM may hold an old one's).
pub fn clear(hw: &mut impl Hw) {
    for i in 0..map::RX_GHOSTS_LEN {
        write(hw, i, None);
    }
}
