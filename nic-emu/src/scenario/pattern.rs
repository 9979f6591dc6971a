//! Message contents: a deterministic pattern of (stream, message index,
//! byte index), so a receiver checks every byte and knows where a message
//! belongs in its stream's order without any side channel.
//!
//! Layout: the first 8 bytes are `msg u32 LE, stream u32 LE` (a message of
//! 4 bytes or more names its index; one of 8 or more names its stream
//! too); word j >= 1 is `seed + j * STEP` with `seed` a hash of (stream,
//! msg), so a flipped bit, a word from another message or from another
//! place of the same message never matches.
//! Shorter messages carry a prefix of the same bytes.

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

/// The pattern's words in order: the header, then `seed + j * STEP` for
/// word j (cheap: the generator runs over every byte sent and received).
struct Words {
    next: u64,
    first: Option<u64>,
}

impl Words {
    fn new(stream: u32, msg: u32) -> Words {
        let s = seed(stream, msg);
        Words { next: s.wrapping_add(STEP), first: Some(header(stream, msg)) }
    }

    #[inline]
    fn next_word(&mut self) -> u64 {
        match self.first.take() {
            Some(h) => h,
            None => {
                let w = self.next;
                self.next = w.wrapping_add(STEP);
                w
            }
        }
    }
}

/// Fill `buf` with message `msg` of `stream`.
pub fn fill(buf: &mut [u8], stream: u32, msg: u32) {
    let mut words = Words::new(stream, msg);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&words.next_word().to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&words.next_word().to_le_bytes()[..n]);
}

/// A fresh buffer holding message `msg` of `stream`, `len` bytes.
pub fn make(len: usize, stream: u32, msg: u32) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, stream, msg);
    v
}

/// Does `buf` hold exactly message `msg` of `stream`?
pub fn matches(buf: &[u8], stream: u32, msg: u32) -> bool {
    let mut words = Words::new(stream, msg);
    let mut chunks = buf.chunks_exact(8);
    for chunk in &mut chunks {
        let got = u64::from_le_bytes([
            chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
        ]);
        if got != words.next_word() {
            return false;
        }
    }
    let tail = chunks.remainder();
    tail == &words.next_word().to_le_bytes()[..tail.len()]
}

/// The message index a buffer claims to be, if it is long enough to say.
pub fn claimed_index(buf: &[u8]) -> Option<u32> {
    let b: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// Stream numbers: a flow's requests (or messages) and its replies.
pub fn forward_stream(flow: usize) -> u32 {
    (flow as u32) << 1
}

pub fn reply_stream(flow: usize) -> u32 {
    ((flow as u32) << 1) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_itself_at_every_length() {
        for len in [0usize, 1, 3, 4, 7, 8, 9, 15, 16, 4095, 4096, 65537] {
            let b = make(len, 3, 17);
            assert!(matches(&b, 3, 17), "len {len}");
        }
    }

    #[test]
    fn one_flipped_bit_anywhere_is_caught() {
        let b = make(1000, 1, 2);
        for pos in [0usize, 5, 8, 500, 999] {
            let mut c = b.clone();
            c[pos] ^= 0x10;
            assert!(!matches(&c, 1, 2), "flip at {pos}");
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
    fn other_messages_and_streams_differ() {
        let b = make(64, 4, 9);
        assert!(!matches(&b, 4, 10));
        assert!(!matches(&b, 5, 9));
        assert_eq!(claimed_index(&b), Some(9));
        assert_eq!(claimed_index(&b[..3]), None);
        // Even short messages tell neighbours apart.
        assert!(!matches(&make(4, 0, 1), 0, 2));
    }
}
