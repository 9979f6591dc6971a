//! The tags a node's program gives the NIC, so an event names what it is
//! about: a receive buffer's Provide tag is `RECV_TAG | pool << 24 |
//! index`; a send's tag is `role << 48 | slot << 32 | message` (role below
//! 2^14); a multicast relay's sends out of a receive buffer carry
//! `RELAY_TAG | pool << 24 | index` (on the port the buffer belongs to).

/// The top bit: a receive buffer's tag (a send's never has it).
pub(super) const RECV_TAG: u64 = 1 << 63;
/// The next bit: a relay's send out of a receive buffer.
pub(super) const RELAY_TAG: u64 = 1 << 62;

/// The tag of a relay's sends out of receive buffer `idx` of pool `pool`.
pub(super) fn relay_tag(pool: usize, idx: usize) -> u64 {
    RELAY_TAG | (pool as u64) << 24 | idx as u64
}

/// (pool, index) of a relay send's tag; None for any other tag.
pub(super) fn decode_relay_tag(tag: u64) -> Option<(usize, usize)> {
    if tag & (RECV_TAG | RELAY_TAG) != RELAY_TAG {
        return None;
    }
    Some((((tag >> 24) & 0xFFFF) as usize, (tag & 0xFF_FFFF) as usize))
}

/// The Provide tag of receive buffer `idx` of pool `pool`.
pub(super) fn recv_tag(pool: usize, idx: usize) -> u64 {
    RECV_TAG | (pool as u64) << 24 | idx as u64
}

/// (pool, index) of a receive buffer's tag; None for a send's tag.
pub(super) fn decode_recv_tag(tag: u64) -> Option<(usize, usize)> {
    if tag & RECV_TAG == 0 {
        return None;
    }
    Some((((tag >> 24) & 0xFFFF) as usize, (tag & 0xFF_FFFF) as usize))
}

/// The tag of a send of `msg` by role `role` from its slot `slot`.
pub(super) fn send_tag(role: usize, slot: usize, msg: u64) -> u64 {
    (role as u64) << 48 | (slot as u64 & 0xFFFF) << 32 | (msg & 0xFFFF_FFFF)
}

/// (role, slot, message) of a send's tag.
pub(super) fn decode_send_tag(tag: u64) -> (usize, usize, u64) {
    (((tag >> 48) & 0x7FFF) as usize, ((tag >> 32) & 0xFFFF) as usize, tag & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        assert_eq!(decode_send_tag(send_tag(300, 7, 123_456)), (300, 7, 123_456));
        assert_eq!(decode_recv_tag(recv_tag(3, 31)), Some((3, 31)));
        assert_eq!(decode_recv_tag(send_tag(1, 2, 3)), None);
        assert_eq!(decode_relay_tag(relay_tag(2, 9)), Some((2, 9)));
        assert_eq!(decode_relay_tag(send_tag(300, 7, 5)), None);
        assert_eq!(decode_relay_tag(recv_tag(2, 9)), None);
        assert_eq!(decode_recv_tag(relay_tag(2, 9)), None);
    }
}
