//! Streams across restarts and strays: a receiver that comes late, SYNCs
//! of later and earlier incarnations, polls from a new boot, stray streams
//! that must not fill the table, a ping-pong across a NIC restart, and
//! garbage in the free-buffer ring.

use super::*;

/// The sender's program of a stream's start-up: post the message; on a
/// retryable failure (the receiver's port not open yet, or no buffer)
/// wait a while, resume and post it again. Returns (Ok events, retries)
/// once the message is delivered, or None if nothing happens for
/// `quiet` rounds (a wedge).
fn first_message_when_the_receiver_comes_late(seed: u64) -> Result<u32, String> {
    let mut b = Bench::new(2);
    b.jitter = Some(Jitter { state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, max: 300 });
    let mut rng = Jitter { state: seed ^ 0xdead_beef_cafe, max: 1 };
    let open_at = rng.next() % 600;
    let provide_at = open_at + rng.next() % 5000;
    b.open(0, 1);
    let len = 16 * 4096;
    let v = b.alloc(0, 1, len as u64);
    b.write_host(0, v, &pattern(seed, len as usize));
    b.post(0, 1, send(v, len, 1, 2, Priority::Low, 1));
    let (mut retries, mut repost_at, mut last_event) = (0u32, None, 0u64);
    let mut received = Vec::new();
    let mut sent_ok = false;
    let mut rv = 0;
    for round in 0..400_000u64 {
        if round == open_at {
            b.open(1, 2);
            rv = b.alloc(1, 2, 1 << 16);
        }
        if round == provide_at.max(open_at) && round >= open_at {
            b.post(1, 2, provide(rv, 16, Priority::Low, 5));
        }
        if repost_at == Some(round) {
            repost_at = None;
            let mut r = send(0, 0, 1, 2, Priority::Low, 0);
            r.kind = DescKind::Resume;
            b.post(0, 1, r);
            b.post(0, 1, send(v, len, 1, 2, Priority::Low, 1));
        }
        b.round();
        for e in b.events(0, 1) {
            last_event = round;
            match SendStatus::from_u8(e.status) {
                Some(SendStatus::Ok) => sent_ok = true,
                Some(SendStatus::TargetPortClosed | SendStatus::TimedOut | SendStatus::Dropped) => {
                    retries += 1;
                    repost_at = Some(round + 20);
                }
                s => return Err(format!("seed {seed}: send completed {s:?}")),
            }
        }
        if round >= open_at {
            received.extend(b.events(1, 2));
        }
        if sent_ok && !received.is_empty() {
            break;
        }
        if round - last_event > 100_000 {
            return Err(format!(
                "seed {seed}: wedged (port open at {open_at}, buffer at {provide_at}, \
                 {retries} retries, {} received, sent ok {sent_ok})",
                received.len()
            ));
        }
    }
    if !(sent_ok && received.len() == 1) {
        return Err(format!("seed {seed}: {} received, sent ok {sent_ok}", received.len()));
    }
    let e = received[0];
    if e.len != len || b.read_host(1, e.addr, len as usize) != pattern(seed, len as usize) {
        return Err(format!("seed {seed}: the message arrived damaged"));
    }
    Ok(retries)
}

#[test]
fn a_stream_whose_receiver_comes_late_starts_whatever_the_wire_delays() {
    let mut errs = Vec::new();
    let mut retried = 0;
    for seed in 0..300 {
        match first_message_when_the_receiver_comes_late(seed) {
            Ok(r) => retried += (r > 0) as u32,
            Err(e) => errs.push(e),
        }
    }
    assert!(errs.is_empty(), "{} of 300 failed:\n{}", errs.len(), errs.join("\n"));
    // The sender acts only on refusals of packets it sent in its current
    // round: a "port closed" for a packet it has since sent again (the
    // jitter reorders, so a gap nack can come first) is old news, and
    // the packet sent again may find the port open. About 50 runs of 300
    // see the refusal.
    assert!(retried > 30, "the port opened late in only {retried} runs");
}

impl Bench {
    /// A one-packet Data message onto node `dst`'s wire from (src node,
    /// port) to `dst_port`, with a good CRC; `sync` marks it a stream start.
    fn stray(&mut self, dst: usize, src: (u16, u8), dst_port: u8, sync: bool, priority: Priority) {
        self.stray_at(dst, src, dst_port, sync, priority, (0, None));
    }

    /// [`Bench::stray`] with sequence number `seq`, and with `incarnation`
    /// a SYNC that names one (`Flags::INCARNATION`).
    fn stray_at(
        &mut self,
        dst: usize,
        src: (u16, u8),
        dst_port: u8,
        sync: bool,
        priority: Priority,
        (seq, incarnation): (u32, Option<u32>),
    ) {
        let mut flags = nic_abi::packet::Flags::FIRST | nic_abi::packet::Flags::LAST;
        if sync {
            flags |= nic_abi::packet::Flags::SYNC;
        }
        if incarnation.is_some() {
            flags |= nic_abi::packet::Flags::INCARNATION;
        }
        let h = Header {
            ptype: nic_abi::packet::PacketType::Data,
            flags,
            priority,
            nack_code: 0,
            src_node: src.0,
            dst_node: dst as u16,
            src_port: src.1,
            dst_port,
            size_class: 4,
            seq,
            ack: incarnation.unwrap_or(0),
            msg_len: 8,
            offset: 0,
            payload_len: 8,
            remote: 0,
            cookie: 0,
            sync_boot: 7,
            sync_gen: 0,
            crc: 0,
        };
        self.onto_wire(dst, &h);
    }

    /// Packet `h` (with `h.payload_len` zero bytes) onto node `dst`'s
    /// wire, with a good CRC.
    fn onto_wire(&mut self, dst: usize, h: &Header) {
        let mut pkt = vec![0u8; HEADER_LEN + h.payload_len as usize];
        h.encode(&mut pkt);
        let crc = crc32fast::hash(&pkt);
        pkt[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        self.nodes[dst].inbox.push_back(pkt);
    }
}

#[test]
fn a_sync_of_a_later_incarnation_restarts_the_stream_and_an_earlier_ones_does_not() {
    // A sender that let its stream go makes it again: the new stream's
    // SYNC names its incarnation and starts far from the old sequence
    // numbers. The receiver, still holding the old stream, takes it at
    // once; a SYNC of an earlier incarnation (late, duplicated) is stale.
    let mut b = Bench::new(3);
    b.open(1, 2);
    for k in 0..6 {
        let rv = b.alloc(1, 2, 4096);
        b.post(1, 2, provide(rv, 4, Priority::Low, k));
    }
    b.run(10); // the NIC takes the buffers (reads their translations)
    let delivered = |b: &Bench| b.stat(1, Stat::MessagesReceived);
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (0, None));
    b.run(50);
    assert_eq!(delivered(&b), 1);
    // Incarnation 300: a SYNC, then the next message of that stream.
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (300 << 20, Some(300)));
    b.stray_at(1, (2, 2), 2, false, Priority::Low, ((300 << 20) + 1, None));
    b.run(50);
    assert_eq!(delivered(&b), 3, "the new incarnation is taken at once");
    assert_eq!(b.stat(1, Stat::NacksSent), 0, "nothing asked again");
    // The same SYNC again, and one of an earlier incarnation: neither is
    // delivered.
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (300 << 20, Some(300)));
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (200 << 20, Some(200)));
    b.run(50);
    assert_eq!(delivered(&b), 3);
    // A later one again restarts it.
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (301 << 20, Some(301)));
    b.run(50);
    assert_eq!(delivered(&b), 4);
}

impl Bench {
    /// A poll onto node `dst`'s wire from (src node, port) to `dst_port`
    /// for the stream whose first unacknowledged packet is `seq`, from
    /// sender boot `boot` and stream incarnation `inc` (0: none named).
    fn poll_from(
        &mut self,
        dst: usize,
        src: (u16, u8),
        dst_port: u8,
        seq: u32,
        boot: u16,
        inc: u32,
    ) {
        let mut flags = nic_abi::packet::Flags::empty();
        if inc != 0 {
            flags |= nic_abi::packet::Flags::INCARNATION;
        }
        let h = Header {
            ptype: nic_abi::packet::PacketType::Poll,
            flags,
            priority: Priority::Low,
            nack_code: 0,
            src_node: src.0,
            dst_node: dst as u16,
            src_port: src.1,
            dst_port,
            size_class: 0,
            seq,
            ack: inc,
            msg_len: 0,
            // Nothing sent past `seq` yet.
            offset: seq,
            payload_len: 0,
            remote: 0,
            cookie: 0,
            sync_boot: boot,
            sync_gen: 0,
            crc: 0,
        };
        self.onto_wire(dst, &h);
    }
}

#[test]
fn a_poll_from_a_new_boot_or_incarnation_whose_sync_was_lost_draws_unsynced() {
    // Node 1 holds the stream from node 2 port 2, synchronised to boot 7.
    // A poll from that boot and incarnation is answered as usual (an ack);
    // one from another boot of node 2, or from a later incarnation, means
    // the SYNC that started the new stream was lost: Unsynced, so the
    // sender starts again with SYNC. One from an earlier incarnation is
    // stale and draws nothing.
    let mut b = Bench::new(3);
    b.open(1, 2);
    let rv = b.alloc(1, 2, 4096);
    b.post(1, 2, provide(rv, 4, Priority::Low, 0));
    b.run(5); // the NIC takes the buffer (reads its translation)
    b.stray_at(1, (2, 2), 2, true, Priority::Low, (100 << 20, Some(100)));
    b.run(50);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 1);
    // A poll to node 1 port 2 from `src`: node 1's nacks after it.
    let poll = |b: &mut Bench, src, seq, boot, inc| {
        b.poll_from(1, src, 2, seq, boot, inc);
        b.run(50);
        b.stat(1, Stat::NacksSent)
    };
    let (acks, nacks) = (b.stat(1, Stat::AcksSent), b.stat(1, Stat::NacksSent));
    assert_eq!(poll(&mut b, (2, 2), (100 << 20) + 1, 7, 100), nacks, "the stream it knows");
    assert!(b.stat(1, Stat::AcksSent) > acks, "answered with an ack");
    assert_eq!(poll(&mut b, (2, 2), 5, 7, 40), nacks, "an earlier incarnation's poll is stale");
    assert_eq!(poll(&mut b, (2, 2), 0, 7, 101), nacks + 1, "a later incarnation: Unsynced");
    // The stream is forgotten: without a SYNC nothing is taken.
    b.stray_at(1, (2, 2), 2, false, Priority::Low, (0, None));
    b.run(50);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 1, "no SYNC yet: not taken");
    // A stream that never named an incarnation, polled by a new boot of
    // its sender (same incarnation 0).
    let rv = b.alloc(1, 2, 4096);
    b.post(1, 2, provide(rv, 4, Priority::Low, 1));
    b.run(5);
    b.stray_at(1, (2, 3), 2, true, Priority::Low, (0, None));
    b.run(50);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 2);
    let nacks = b.stat(1, Stat::NacksSent);
    assert_eq!(poll(&mut b, (2, 3), 1, 7, 0), nacks, "the same boot: an ack");
    assert_eq!(poll(&mut b, (2, 3), 0, 9, 0), nacks + 1, "another boot: Unsynced");
}

impl Bench {
    /// More synchronised strays to node 1 than its stream table holds, of
    /// priority `prio`, each a key of its own.
    fn synced_strays(&mut self, prio: Priority) {
        for i in 0..crate::records::MAX_STREAMS as u16 + 32 {
            let src = (2 + i % 4, (i / 4 % 8) as u8);
            self.stray(1, src, [0, 3, 4, 5, 6, 7][i as usize / 32], true, prio);
            if i % 16 == 0 {
                self.run(20);
            }
        }
        self.run(50);
    }
}

#[test]
fn stray_streams_never_fill_the_receivers_table_for_good() {
    use crate::records::MAX_STREAMS;
    let mut b = Bench::new(6);
    b.open(0, 1);
    b.open(1, 2);
    b.exchange(0, 1, 1);
    // Unsynchronised strays from node 2 under every (port, port, key)
    // the table holds, and more: each takes a stream of no worth.
    let mut k = 0;
    'fill: for sp in 0..8u8 {
        for dp in [0u8, 3, 4, 5, 6, 7] {
            for src in [2u16, 3, 4, 5] {
                b.stray(1, (src, sp), dp, false, Priority::Low);
                k += 1;
                if k % 16 == 0 {
                    b.run(20);
                }
                if k > MAX_STREAMS + 20 {
                    break 'fill;
                }
            }
        }
    }
    b.run(50);
    // A sender new to node 1 still gets through; so does the old one.
    b.open(2, 1);
    let got = b.exchange(2, 1, 2);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 2));
    let got = b.exchange(0, 1, 3);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 3));

    // Synchronised strays fill it again: a stream of them is kept (its
    // sender may come back) until it has been quiet a send timeout.
    b.synced_strays(Priority::Low);
    let timeout = b.nodes[1].mcp.shared.cfg.send_timeout;
    b.run(timeout as u32 + 100);
    // As many new strays as the table holds: every quiet stream goes,
    // node 0's among them.
    b.synced_strays(Priority::High);
    // Node 0's next messages are taken once, in order, after a
    // resynchronisation (its stream was forgotten: it is told Unsynced).
    let before = b.stat(1, Stat::MessagesReceived);
    for tag in 10..13 {
        let got = b.exchange(0, 1, tag);
        assert_eq!((got.len(), got[0].kind, got[0].tag), (1, EventKind::Received, tag));
    }
    assert_eq!(b.stat(1, Stat::MessagesReceived), before + 3, "each delivered once");
}

/// A ping-pong between node 0 port 1 and node 1 port 1 over a wire that
/// delays packets a pseudo-random while (they overtake each other); node
/// 1's NIC restarts after `reboot_after` exchanges (its port reopened at
/// once, as a reflash and a new program do). Every message must be
/// delivered once and its send complete Ok.
/// The size class of the ping-pong's 8-byte messages.
const C8: u8 = nic_abi::size_class_for(8);

fn pingpong_across_a_reboot(seed: u64, jitter: u64, reboot_after: u64) -> Result<(), String> {
    let mut b = Bench::new(2);
    b.jitter = Some(Jitter { state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, max: jitter });
    b.open(0, 1);
    b.open(1, 1);
    let sv = [b.alloc(0, 1, 64), b.alloc(1, 1, 64)];
    let mut rv = [b.alloc(0, 1, 64), b.alloc(1, 1, 64)];
    b.post(0, 1, provide(rv[0], C8, Priority::Low, 100));
    b.post(1, 1, provide(rv[1], C8, Priority::Low, 100));
    for k in 0..20u64 {
        if k == reboot_after {
            // A restart takes longer than any packet is on the wire:
            // what was on its way to node 1 died with the old NIC.
            b.held.retain(|(_, dst, _)| *dst != 1);
            b.reboot(1);
            b.nodes[1].next_event = [1; 8];
            b.open(1, 1);
            rv[1] = b.alloc(1, 1, 64);
            b.post(1, 1, provide(rv[1], C8, Priority::Low, 100));
        }
        // ping
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            b.post(from, 1, send(sv[from], 8, to as u16, 1, Priority::Low, k));
            let mut got = false;
            let mut sent = None;
            let ok = b.run_until(200_000, |b| {
                for e in b.events(to, 1) {
                    if e.kind == EventKind::Received {
                        got = true;
                    }
                }
                for e in b.events(from, 1) {
                    if e.kind == EventKind::Sent {
                        sent = Some(e.status);
                    }
                }
                got && sent.is_some()
            });
            if !ok || sent != Some(SendStatus::Ok as u8) {
                return Err(format!(
                    "seed {seed} jitter {jitter}: exchange {k} {from}->{to} stalled (received \
                     {got}, sent {:?})",
                    sent.and_then(SendStatus::from_u8)
                ));
            }
            b.post(to, 1, provide(rv[to], C8, Priority::Low, 100));
        }
    }
    Ok(())
}

#[test]
fn a_pingpong_carries_on_across_a_nic_restart_whatever_the_wire_delays() {
    let mut errs = Vec::new();
    for seed in 0..100 {
        for jitter in [1, 50, 400] {
            if let Err(e) = pingpong_across_a_reboot(seed, jitter, 1 + seed % 5) {
                errs.push(e);
            }
        }
    }
    assert!(
        errs.is_empty(),
        "{} of 300 failed:\n{}",
        errs.len(),
        errs[..errs.len().min(10)].join("\n")
    );
}

impl Bench {
    /// Message `tag` (3000 B) from node 0 port 1 to node 1 port 2, within
    /// 50,000 rounds, intact.
    fn message_intact(&mut self, tag: u64) {
        let b = self;
        let v = b.alloc(0, 1, 3000);
        b.write_host(0, v, &pattern(tag, 3000));
        let rv = b.alloc(1, 2, 4096);
        b.post(1, 2, provide(rv, 12, Priority::Low, tag));
        b.post(0, 1, send(v, 3000, 1, 2, Priority::Low, tag));
        let got = b.await_events(1, 2, 50_000).unwrap_or_else(|| {
            panic!(
                "message {tag} never arrived: out {:#x} free {}/{} done {}/{} inbox {} errors {}",
                b.nodes[1].mcp.shared.rxfree.out(),
                b.nodes[1].r32(reg(regs::RXFREE_PROD)),
                b.nodes[1].r32(reg(regs::RXFREE_CONS)),
                b.nodes[1].r32(reg(regs::RXDONE_PROD)),
                b.nodes[1].r32(reg(regs::RXDONE_CONS)),
                b.nodes[1].inbox.len(),
                b.stat(1, Stat::Errors),
            )
        });
        assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, tag));
        assert_eq!(b.read_host(1, got[0].addr, 3000), pattern(tag, 3000), "message {tag} intact");
    }
}

#[test]
fn garbage_in_the_free_buffer_ring_is_survived_and_the_buffers_come_back() {
    // Only the firmware should write RXFREE; here something else fills it
    // with buffer numbers that do not exist, and with one that is in use.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    b.exchange(0, 1, 1);
    for k in 0..map::RXFREE_RING_LEN {
        let at = rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, k);
        b.nodes[1].w32(at, if k % 8 == 0 { 3 } else { 1000 + k });
    }
    for tag in 2..8u64 {
        b.message_intact(tag);
    }
    assert!(b.stat(1, Stat::Errors) > 0, "the overwritten entries were counted");
    // Garbage the engine already took (it skipped every entry): the
    // buffers are lost to it; traffic goes on through the one buffer that
    // was not with the engine then, and once they have been missing a send
    // timeout the 31 others are posted again.
    let prod = b.nodes[1].r32(reg(regs::RXFREE_PROD));
    b.nodes[1].w32(reg(regs::RXFREE_CONS), prod);
    let errors = b.stat(1, Stat::Errors);
    for tag in 8..11u64 {
        b.message_intact(tag);
    }
    // Idle again: every receive buffer is with the engine, once.
    let timeout = b.nodes[1].mcp.shared.cfg.send_timeout;
    b.run(timeout as u32 + 2_000);
    assert_eq!(b.nodes[1].mcp.shared.rxfree.out(), u32::MAX, "all 32 buffers posted");
    assert_eq!(b.stat(1, Stat::Errors), errors + 31, "each lost buffer counted");
    b.message_intact(11);
}
