//! Faults and limits: garbage from the wire, tracing, the MCP's size, acks
//! holding buffers, a NIC reset, a duplicated SYNC, IDT pacing, a port
//! closing mid-message, events and page tables at the end of the bus.

use super::*;

#[test]
fn garbage_from_the_wire_is_counted_and_dropped() {
    let mut b = Bench::new(2);
    b.open(1, 2);
    let mut junk = vec![0u8; HEADER_LEN + 10];
    for (i, x) in junk.iter_mut().enumerate() {
        *x = (i * 37) as u8;
    }
    let crc = crc32fast::hash(&junk);
    junk[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    for _ in 0..100 {
        b.nodes[1].inbox.push_back(junk.clone());
        b.nodes[1].inbox.push_back(vec![1, 2, 3]);
    }
    b.run(100);
    assert_eq!(b.stat(1, Stat::Drops), 200);
    // Buffers all came back: normal traffic still flows.
    b.open(0, 1);
    transfer_again(&mut b);
}

#[test]
fn state_machines_record_transitions_when_traced() {
    let mut b = Bench::new(2);
    b.nodes[0].w32(reg(regs::TRACE_ENABLE), 1);
    transfer(&mut b, &[5000], Priority::Low);
    let n = b.nodes[0].r32(reg(regs::TRACE_PROD));
    assert!(n > 5);
    let recs: Vec<_> = (0..n.min(map::TRACE_LEN))
        .map(|i| {
            let o = (map::TRACE + i * 16) as usize;
            nic_abi::trace::TraceRecord::decode(&b.nodes[0].sram[o..o + 16]).unwrap()
        })
        .collect();
    assert!(recs
        .iter()
        .any(|r| r.machine == nic_abi::trace::Machine::Sdma && r.to == SdmaState::FILL_WAIT));
    assert!(recs.iter().any(|r| r.machine == nic_abi::trace::Machine::Send));
    assert_eq!(b.nodes[1].r32(reg(regs::TRACE_PROD)), 0, "off unless enabled");
}

#[test]
fn mcp_fits_the_firmware_budget() {
    // The bare-metal image (text + data + bss) must stay under 208 KiB;
    // the MCP's state is most of its data. (Host builds keep a little
    // more, which the image does without.)
    let size = core::mem::size_of::<Mcp>() - crate::sdma::HOST_ONLY_BYTES;
    assert!(size < 64 * 1024, "Mcp is {size} bytes");
}

#[test]
fn what_a_pass_reads_first_lies_within_2_kib_of_its_struct() {
    // The image reaches a field up to 2 KiB from the pointer it holds with
    // one load, and one further out with three: the records a pass tests
    // first are laid out ahead of the large tables (`repr(C)`).
    use crate::shared::Shared;
    use core::mem::offset_of;
    let hot = [
        ("running", offset_of!(Mcp, running)),
        ("pending", offset_of!(Mcp, pending)),
        ("seen", offset_of!(Mcp, seen)),
        ("deadline", offset_of!(Mcp, deadline)),
        ("kind", offset_of!(Mcp, kind)),
        ("send", offset_of!(Mcp, send)),
        ("rdma", offset_of!(Mcp, rdma)),
        ("shared", offset_of!(Mcp, shared)),
        ("now", offset_of!(Shared, now)),
        ("cfg", offset_of!(Shared, cfg)),
        ("events_owed", offset_of!(Shared, events_owed)),
        ("trace", offset_of!(Shared, trace)),
        ("hdma", offset_of!(Shared, hdma)),
        ("rxfree", offset_of!(Shared, rxfree)),
        ("tx_ready", offset_of!(Shared, tx_ready)),
        ("from_recv", offset_of!(Shared, from_recv)),
        ("txbufs", offset_of!(Shared, txbufs)),
        ("ports", offset_of!(Shared, ports)),
        ("offload", offset_of!(Shared, offload)),
        ("leaf_reports", offset_of!(Shared, leaf_reports)),
        ("mcasts", offset_of!(Shared, mcasts)),
    ];
    for (name, at) in hot {
        assert!(at < 2048, "{name} at {at}");
    }
}

#[test]
fn acks_holding_buffers_do_not_wedge_the_scheduler() {
    // Many peers sending to node 0 while node 0 sends to all of them: acks
    // and data compete for transmit buffers; every poll must end.
    let mut b = Bench::new(6);
    for n in 0..6 {
        b.open(n, 1);
    }
    let mut want = 0;
    for n in 0..6 {
        for d in 0..6 {
            if n == d {
                continue;
            }
            for k in 0..4 {
                let rv = b.alloc(d, 1, 8192);
                b.post(d, 1, provide(rv, 13, Priority::Low, k));
                let v = b.alloc(n, 1, 8192);
                b.post(n, 1, send(v, 5000, d as u16, 1, Priority::Low, k));
                want += 1;
            }
        }
    }
    let mut got = 0;
    assert!(b.run_until(100_000, |b| {
        for d in 0..6 {
            got += b.events(d, 1).iter().filter(|e| e.kind == EventKind::Received).count();
        }
        got == want
    }));
}

impl Bench {
    /// Reset node n's NIC CPU: a fresh MCP (as after a reflash); its ports
    /// close.
    pub(crate) fn reboot(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        for p in 0..8 {
            node.w32(port_reg(p, STATE), STATE_CLOSED);
        }
        node.inbox.clear();
        let boots = node.r32(reg(regs::BOOT_COUNT));
        node.w32(reg(regs::BOOT_COUNT), boots + 1);
        let mut mcp = Box::new(Mcp::new());
        mcp.init(&mut SliceHw::new(&mut node.sram)).unwrap();
        node.mcp = mcp;
    }

    pub(super) fn exchange(&mut self, from: usize, to: usize, tag: u64) -> Vec<Event> {
        let v = self.alloc(from, 1, 100);
        let rv = self.alloc(to, 2, 128);
        self.post(to, 2, provide(rv, 7, Priority::Low, tag));
        self.post(from, 1, send(v, 100, to as u16, 2, Priority::Low, tag));
        self.await_events(to, 2, 3_000)
            .unwrap_or_else(|| panic!("message {tag} from {from} to {to} not delivered"))
    }
}

#[test]
fn peers_recover_quickly_when_a_nic_is_reset() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    for k in 0..5 {
        b.exchange(0, 1, k);
    }
    // The receiver forgets every stream: the sender resynchronises.
    b.reboot(1);
    b.open(1, 2);
    let got = b.exchange(0, 1, 10);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 10));
    // The sender forgets: its new streams start with SYNC and are taken.
    b.reboot(0);
    b.open(0, 1);
    for k in 20..23 {
        let got = b.exchange(0, 1, k);
        assert_eq!(got[0].tag, k);
    }
}

#[test]
fn a_duplicated_sync_packet_does_not_deliver_twice() {
    let mut b = Bench::new(2);
    b.faults.dup_every = 1; // every packet arrives twice
    transfer(&mut b, &[10, 20, 5000, 30], Priority::Low);
    assert_eq!(b.stat(1, Stat::MessagesReceived), 4);
}

impl Bench {
    fn set_flow(&mut self, n: usize, i: u32, key: u32, idt: u32) {
        let e = nic_abi::flows::FlowEntry { valid: true, key, idt, ..Default::default() };
        let o = map::flow_entry(i) as usize;
        e.encode(&mut self.nodes[n].sram[o..o + 32]);
        let g = self.nodes[n].r32(reg(regs::FLOW_GEN));
        self.nodes[n].w32(reg(regs::FLOW_GEN), g + 1);
    }

    fn flow(&self, n: usize, i: u32) -> nic_abi::flows::FlowEntry {
        let o = map::flow_entry(i) as usize;
        nic_abi::flows::FlowEntry::decode(&self.nodes[n].sram[o..o + 32])
    }
}

#[test]
fn flows_are_paced_by_their_idt_in_proportion() {
    // Node 0 streams to node 1 (IDT 20 ticks) and node 2 (IDT 30 ticks).
    let mut b = Bench::new(3);
    b.nodes[0].w32(reg(regs::DISPATCH_TRACE_ENABLE), 1);
    for n in 0..3 {
        b.open(n, 1);
    }
    let ka = nic_abi::flows::flow_key(1, 1, 1, Priority::Low);
    let kb = nic_abi::flows::flow_key(1, 2, 1, Priority::Low);
    b.set_flow(0, 0, ka, 20);
    b.set_flow(0, 1, kb, 30);
    let len = 16 * 4096;
    let v = b.alloc(0, 1, len as u64);
    for d in 1..3 {
        for k in 0..4 {
            let rv = b.alloc(d, 1, len as u64);
            b.post(d, 1, provide(rv, 16, Priority::Low, k));
        }
    }
    for k in 0..4 {
        b.post(0, 1, send(v, len, 1, 1, Priority::Low, k));
        b.post(0, 1, send(v, len, 2, 1, Priority::Low, k));
    }
    b.run(1200);
    let (fa, fb) = (b.flow(0, 0), b.flow(0, 1));
    // Over 1200 ticks: about 60 and 40 packets, never faster than the IDT.
    assert!((58..=61).contains(&fa.packets), "flow A sent {}", fa.packets);
    assert!((38..=41).contains(&fb.packets), "flow B sent {}", fb.packets);
    assert_eq!(fa.bytes, fa.packets * 4096);
    // The dispatch trace shows the spacing.
    let n = b.nodes[0].r32(reg(regs::DISPATCH_TRACE_PROD));
    let recs: Vec<_> = (0..n)
        .map(|i| {
            let o = (map::DISPATCH_TRACE + i * 16) as usize;
            nic_abi::flows::DispatchRecord::decode(&b.nodes[0].sram[o..o + 16]).unwrap()
        })
        .collect();
    let a_times: Vec<u64> = recs.iter().filter(|r| r.key == ka).map(|r| r.rtc).collect();
    assert!(a_times.windows(2).all(|w| w[1] - w[0] >= 20), "{a_times:?}");
    let b_times: Vec<u64> = recs.iter().filter(|r| r.key == kb).map(|r| r.rtc).collect();
    assert!(b_times.windows(2).all(|w| w[1] - w[0] >= 30), "{b_times:?}");
    // Without flows the same traffic is not paced (rotation, as fast as it goes).
    let mut c = Bench::new(3);
    for n in 0..3 {
        c.open(n, 1);
    }
    let v = c.alloc(0, 1, len as u64);
    for d in 1..3 {
        let rv = c.alloc(d, 1, len as u64);
        c.post(d, 1, provide(rv, 16, Priority::Low, 0));
        c.post(0, 1, send(v, len, d as u16, 1, Priority::Low, 0));
    }
    c.run(200);
    assert_eq!(c.stat(0, Stat::MessagesSent), 2);
}

#[test]
fn a_regulated_stream_waiting_for_its_dispatch_time_leaves_the_nic_idle_until_then() {
    // Node 0 streams 4 packets to node 1 at an IDT of 1000 ticks. Between
    // dispatches the NIC has nothing to do: its passes are idle (so the
    // emulator lets it sleep, rather than poll again at once), and its
    // next deadline is the next dispatch time.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    b.set_flow(0, 0, nic_abi::flows::flow_key(1, 1, 1, Priority::Low), 1000);
    let len = 4 * 4096;
    let v = b.alloc(0, 1, len as u64);
    let rv = b.alloc(1, 1, len as u64);
    b.post(1, 1, provide(rv, 14, Priority::Low, 7));
    b.post(0, 1, send(v, len, 1, 1, Priority::Low, 8));
    b.run(300);
    assert_eq!(b.flow(0, 0).packets, 1);
    let ndt = b.flow(0, 0).ndt;
    assert!(ndt > b.rtc, "the next dispatch ({ndt}) is still to come at {}", b.rtc);
    for _ in 0..3 {
        let node = &mut b.nodes[0];
        let mut hw = SliceHw::new(&mut node.sram);
        let w = node.mcp.poll(&mut hw);
        assert!(w.is_idle(), "a pass with nothing to dispatch did work: {w:?}");
    }
    let due = b.nodes[0].mcp.next_deadline().expect("a deadline");
    assert!(due <= ndt, "wakes at {due}, after the dispatch time {ndt}");
    // And the stream goes on at its pace.
    b.run(3000);
    assert_eq!(b.flow(0, 0).packets, 4);
}

#[test]
fn a_port_closing_in_the_middle_of_a_message_fails_that_send() {
    // A 20-packet message; the receiver's port closes after a few packets
    // arrived: the send completes TargetPortClosed (no endless resends),
    // and once the port is open again the stream carries on.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let len = 20 * 4096;
    let v = b.alloc(0, 1, len as u64);
    let rv = b.alloc(1, 2, 1 << 17);
    b.post(1, 2, provide(rv, 17, Priority::Low, 1));
    b.run(10); // the receiver's NIC takes the buffer (reads its translations)
    b.post(0, 1, send(v, len, 1, 2, Priority::Low, 7));
    // Wait until the receiver took a few packets of the message.
    assert!(b.run_until(1000, |b| { b.nodes[1].mcp.recv.max_expected() >= 4 }));
    b.close(1, 2);
    let mut evs = Vec::new();
    assert!(
        b.run_until(20_000, |b| {
            evs.extend(b.events(0, 1));
            !evs.is_empty()
        }),
        "the send never completed"
    );
    assert_eq!((evs[0].tag, evs[0].status), (7, SendStatus::TargetPortClosed as u8));
    // The buffer the message was filling went with the port: none leaked.
    assert_eq!(b.nodes[1].mcp.shared.slots.available(), crate::records::MAX_SLOTS);
    b.open(1, 2);
    let got = b.exchange(0, 1, 9);
    assert_eq!((got[0].kind, got[0].tag), (EventKind::Received, 9));
}

#[test]
fn an_event_queue_at_the_end_of_the_bus_is_refused_without_harm() {
    // A port whose event queue would run past 2^64: its events would land
    // at wrapped addresses (an overflow panic in a debug build before).
    let mut b = Bench::new(2);
    let node = &mut b.nodes[0];
    node.w64(evq_bus(5), u64::MAX - 10);
    node.w32(evq_len(5), 64);
    node.w32(port_reg(5, GENERATION), 1);
    node.w32(port_reg(5, STATE), STATE_OPEN);
    b.run(10);
    assert_eq!(b.stat(0, Stat::Errors), 1, "counted");
    // An event queue of a length that is not a power of two: refused too.
    let node = &mut b.nodes[0];
    node.w64(evq_bus(6), 0);
    node.w32(evq_len(6), 48);
    node.w32(port_reg(6, GENERATION), 1);
    node.w32(port_reg(6, STATE), STATE_OPEN);
    b.run(10);
    assert_eq!(b.stat(0, Stat::Errors), 2);
    // Other ports are unharmed.
    transfer(&mut b, &[1, 3000, 9000], Priority::Low);
}

#[test]
fn a_page_table_entry_at_the_end_of_the_bus_is_not_used() {
    // A table entry whose page ends past 2^64 (the privileged side's
    // table, corrupted): the MCP never uses it.
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    let v = b.alloc(0, 1, 4096);
    b.set_pte(0, 1, v / PAGE_SIZE, nic_abi::page_table::pte(u64::MAX / PAGE_SIZE));
    b.post(0, 1, send(v, 64, 1, 1, Priority::Low, 5));
    b.post(0, 1, send(v + 4000, 96, 1, 1, Priority::Low, 6));
    b.run(50);
    let got: Vec<(EventKind, u8, u64)> =
        b.events(0, 1).iter().map(|e| (e.kind, e.status, e.tag)).collect();
    let refused = (EventKind::Error, ErrorCause::NotRegistered as u8);
    assert_eq!(got, [(refused.0, refused.1, 5), (refused.0, refused.1, 6)]);
    assert_eq!(b.stat(0, Stat::PacketsSent), 0);
}
