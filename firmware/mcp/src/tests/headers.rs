//! What the packets of a message carry on the wire.

use super::*;

/// The packets of each message carry one header but for their own
/// fields (sequence number, offset, length, the first's and last's flags,
/// the ack SEND writes in, and the round: a packet sent again after a
/// go-back-N rewind echoes the new one). Checked on the wire against the
/// header of the message's first packet.
#[test]
fn every_packet_of_a_message_carries_the_messages_header_with_its_own_fields() {
    use nic_abi::packet::{Flags, PacketType};
    for drop_every in [0, 9] {
        let mut b = Bench::new(2);
        b.faults.drop_every = drop_every;
        let sizes = [5 * 4096, 3 * 4096 + 10, 4096, 7 * 4096 - 1, 2 * 4096];
        transfer(&mut b, &sizes, Priority::High);
        let data: Vec<&Header> = b.log.iter().filter(|h| h.ptype == PacketType::Data).collect();
        assert!(data.len() >= 19, "{} data packets", data.len());
        for h in &data {
            // The packet's own fields, from its sequence number: which
            // message, which packet of it.
            let (mut first_seq, mut k) = (0u32, 0usize);
            while h.seq >= first_seq + sizes[k].div_ceil(4096) {
                first_seq += sizes[k].div_ceil(4096);
                k += 1;
            }
            let (len, pkt) = (sizes[k], h.seq - first_seq);
            let npkts = len.div_ceil(4096);
            assert_eq!(h.msg_len, len, "{h:?}");
            assert_eq!(h.offset, pkt * 4096, "{h:?}");
            assert_eq!(h.payload_len as u32, (len - pkt * 4096).min(4096), "{h:?}");
            assert_eq!(h.has(Flags::FIRST), pkt == 0, "{h:?}");
            assert_eq!(h.has(Flags::LAST), pkt + 1 == npkts, "{h:?}");
            assert_eq!(
                (h.src_node, h.src_port, h.dst_node, h.dst_port, h.priority),
                (0, 1, 1, 2, Priority::High),
                "{h:?}"
            );
            assert_eq!(h.size_class, nic_abi::size_class_for(len as u64), "{h:?}");
            // The rest is the message's: as its first packet's.
            let lead = data.iter().find(|f| f.seq == first_seq).expect("the first packet");
            let (mut x, mut y) = (**h, **lead);
            for z in [&mut x, &mut y] {
                (z.seq, z.offset, z.payload_len, z.ack, z.crc, z.nack_code) = (0, 0, 0, 0, 0, 0);
                z.flags.remove(Flags::FIRST | Flags::LAST | Flags::ACK_VALID | Flags::SYNC);
                z.flags.remove(Flags::INCARNATION);
            }
            assert_eq!(x, y, "packet {pkt} of message {k} and its first differ");
        }
        // Rewinds: middle packets sent in two rounds.
        let rounds = data.iter().map(|h| h.nack_code).max().unwrap_or(0);
        assert_eq!(rounds > 0, drop_every > 0, "rounds {rounds}");
    }
}
