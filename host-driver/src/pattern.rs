//! Message contents for tests and measurements: a deterministic pattern of
//! (stream, message index, byte index), so a receiver checks every byte
//! and knows where a message belongs in its stream's order without any
//! side channel. The same layout and words as the sim's scenario pattern
//! (`nic_emu::scenario::pattern`), so a message means the same on every
//! backend.
//!
//! Layout: the first 8 bytes are `msg u32 LE, stream u32 LE` (a message of
//! 4 bytes or more names its index; one of 8 or more names its stream
//! too); every further 8-byte word is a hash of (stream, msg, word index).
//! Shorter messages carry a prefix of the same bytes.

/// The pattern's word `j` for (stream, msg).
#[inline]
fn word(stream: u32, msg: u32, j: u64) -> u64 {
    if j == 0 {
        return u64::from(msg) | (u64::from(stream) << 32);
    }
    // splitmix64 of a per-message seed plus the word index.
    let seed = (u64::from(stream) << 32 | u64::from(msg)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let mut z = seed.wrapping_add(j.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fill `buf` with message `msg` of `stream`.
pub fn fill(buf: &mut [u8], stream: u32, msg: u32) {
    for (j, chunk) in buf.chunks_mut(8).enumerate() {
        let w = word(stream, msg, j as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Fill only the first word (index and stream): enough to check order.
pub fn fill_header(buf: &mut [u8], stream: u32, msg: u32) {
    let n = buf.len().min(8);
    fill(&mut buf[..n], stream, msg);
}

/// A fresh buffer holding message `msg` of `stream`, `len` bytes.
pub fn make(len: usize, stream: u32, msg: u32) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, stream, msg);
    v
}

/// Does `buf` hold exactly message `msg` of `stream`?
pub fn matches(buf: &[u8], stream: u32, msg: u32) -> bool {
    first_mismatch(buf, stream, msg).is_none()
}

/// Offset of the first byte of `buf` that differs from message `msg` of
/// `stream`, with (expected, found).
pub fn first_mismatch(buf: &[u8], stream: u32, msg: u32) -> Option<(usize, u8, u8)> {
    for (j, chunk) in buf.chunks(8).enumerate() {
        let w = word(stream, msg, j as u64).to_le_bytes();
        if chunk != &w[..chunk.len()] {
            let k = (0..chunk.len()).find(|&k| chunk[k] != w[k]).unwrap_or(0);
            return Some((j * 8 + k, w[k], chunk[k]));
        }
    }
    None
}

/// The message index a buffer claims to be, if it is long enough to say.
pub fn claimed_index(buf: &[u8]) -> Option<u32> {
    let b: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_itself_at_every_length() {
        for len in 0..40 {
            let b = make(len, 3, 7);
            assert!(matches(&b, 3, 7), "len {len}");
        }
    }

    #[test]
    fn messages_and_streams_differ_and_the_index_is_readable() {
        let a = make(64, 1, 5);
        assert!(!matches(&a, 1, 6));
        assert!(!matches(&a, 2, 5));
        assert_eq!(claimed_index(&a), Some(5));
        assert_eq!(claimed_index(&a[..3]), None);
    }

    #[test]
    fn first_mismatch_names_the_byte() {
        let mut a = make(100, 0, 9);
        a[77] ^= 0x10;
        let (off, want, got) = first_mismatch(&a, 0, 9).unwrap();
        assert_eq!(off, 77);
        assert_eq!(want ^ 0x10, got);
    }

    #[test]
    fn header_fill_carries_index_and_stream() {
        let mut a = vec![0u8; 32];
        fill_header(&mut a, 4, 11);
        assert!(matches(&a[..8], 4, 11));
        assert_eq!(&a[8..], &[0u8; 24]);
    }
}
