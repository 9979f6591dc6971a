//! Message contents for tests and measurements: a deterministic pattern of
//! (stream, message index, byte index), so a receiver checks every byte
//! and knows where a message belongs in its stream's order without any
//! side channel. The sim's scenario programs (`nic_emu::scenario`) use the
//! same words, so a message means the same on every backend.
//!
//! Layout: the first 8 bytes are `msg u32 LE, stream u32 LE` (a message of
//! 4 bytes or more names its index; one of 8 or more names its stream
//! too); word j >= 1 is `seed + j * STEP` with `seed` a hash of (stream,
//! msg), so a flipped bit, a word from another message or from another
//! place of the same message never matches. Shorter messages carry a
//! prefix of the same bytes.
//!
//! Filling and checking run over every byte a measurement moves, so both
//! are written as straight word loops the compiler vectorises (an add per
//! word; the check ORs the differences and looks for the first bad byte
//! only when there is one).

/// Step between two consecutive words of a message (odd: every word of a
/// message differs, and so does every word of two messages' patterns).
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The per-message seed: a hash of (stream, msg) (splitmix64).
#[inline]
fn seed(stream: u32, msg: u32) -> u64 {
    let mut z = (u64::from(stream) << 32 | u64::from(msg)).wrapping_add(STEP);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word 0: the message's index and its stream, readable by a receiver.
#[inline]
fn header(stream: u32, msg: u32) -> u64 {
    u64::from(msg) | (u64::from(stream) << 32)
}

/// Word `j` of message `msg` of `stream`.
#[inline]
fn word(stream: u32, msg: u32, j: u64) -> u64 {
    if j == 0 {
        header(stream, msg)
    } else {
        seed(stream, msg).wrapping_add(j.wrapping_mul(STEP))
    }
}

#[inline]
fn load(c: &[u8]) -> u64 {
    u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
}

/// Fill `buf` with message `msg` of `stream`.
pub fn fill(buf: &mut [u8], stream: u32, msg: u32) {
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&header(stream, msg).to_le_bytes()[..n]);
    if buf.len() <= 8 {
        return;
    }
    let mut w = seed(stream, msg).wrapping_add(STEP);
    let mut chunks = buf[8..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&w.to_le_bytes());
        w = w.wrapping_add(STEP);
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&w.to_le_bytes()[..n]);
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
    let n = buf.len().min(8);
    if buf[..n] != header(stream, msg).to_le_bytes()[..n] {
        return false;
    }
    if buf.len() <= 8 {
        return true;
    }
    let mut w = seed(stream, msg).wrapping_add(STEP);
    let mut diff = 0u64;
    let mut chunks = buf[8..].chunks_exact(8);
    for c in &mut chunks {
        diff |= load(c) ^ w;
        w = w.wrapping_add(STEP);
    }
    let tail = chunks.remainder();
    diff == 0 && tail == &w.to_le_bytes()[..tail.len()]
}

/// Offset of the first byte of `buf` that differs from message `msg` of
/// `stream`, with (expected, found).
pub fn first_mismatch(buf: &[u8], stream: u32, msg: u32) -> Option<(usize, u8, u8)> {
    if matches(buf, stream, msg) {
        return None;
    }
    for (j, chunk) in buf.chunks(8).enumerate() {
        let w = word(stream, msg, j as u64).to_le_bytes();
        if let Some(k) = (0..chunk.len()).find(|&k| chunk[k] != w[k]) {
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
        for len in (0..40).chain([4095, 4096, 65537]) {
            let b = make(len, 3, 7);
            assert!(matches(&b, 3, 7), "len {len}");
            assert_eq!(first_mismatch(&b, 3, 7), None, "len {len}");
        }
    }

    #[test]
    fn words_are_the_header_then_seed_plus_j_steps() {
        let b = make(24, 5, 6);
        assert_eq!(load(&b[0..8]), 6 | 5u64 << 32);
        assert_eq!(load(&b[8..16]), seed(5, 6).wrapping_add(STEP));
        assert_eq!(load(&b[16..24]), seed(5, 6).wrapping_add(STEP).wrapping_add(STEP));
    }

    #[test]
    fn messages_and_streams_differ_and_the_index_is_readable() {
        let a = make(64, 1, 5);
        assert!(!matches(&a, 1, 6));
        assert!(!matches(&a, 2, 5));
        assert_eq!(claimed_index(&a), Some(5));
        assert_eq!(claimed_index(&a[..3]), None);
        // Even short messages tell neighbours apart.
        assert!(!matches(&make(4, 0, 1), 0, 2));
    }

    #[test]
    fn one_flipped_bit_anywhere_is_caught_and_named() {
        let b = make(1001, 0, 9);
        for pos in [0usize, 5, 8, 77, 500, 999, 1000] {
            let mut c = b.clone();
            c[pos] ^= 0x10;
            assert!(!matches(&c, 0, 9), "flip at {pos}");
            let (off, want, got) = first_mismatch(&c, 0, 9).unwrap();
            assert_eq!((off, want ^ 0x10), (pos, got));
        }
    }

    #[test]
    fn a_word_moved_to_another_place_is_caught() {
        let b = make(64, 2, 3);
        let mut c = b.clone();
        c.copy_within(8..16, 16);
        assert!(!matches(&c, 2, 3));
    }

    #[test]
    fn header_fill_carries_index_and_stream() {
        let mut a = vec![0u8; 32];
        fill_header(&mut a, 4, 11);
        assert!(matches(&a[..8], 4, 11));
        assert_eq!(&a[8..], &[0u8; 24]);
    }
}
