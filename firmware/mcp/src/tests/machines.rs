//! Single transitions of the four machines: what each state says while
//! the machine waits, read between polls as a debugger would. The bench's
//! engines are held back where a test needs a DMA to stay in flight.

use super::*;
use crate::{RdmaState, RecvState, SendState};
use nic_abi::trace::{Cause, Machine, TraceRecord};

impl Bench {
    /// Node `i` polls once; no engine runs.
    fn poll_only(&mut self, i: usize) {
        self.rtc += 1;
        let rtc = self.rtc;
        let node = &mut self.nodes[i];
        node.w64(reg(regs::RTC), rtc);
        node.mcp.poll(&mut SliceHw::new(&mut node.sram));
    }

    fn hdma_outstanding(&self, i: usize) -> u32 {
        let n = &self.nodes[i];
        n.r32(reg(regs::HDMA_PROD)).wrapping_sub(n.r32(reg(regs::HDMA_DONE)))
    }

    fn traced(&self, i: usize, m: Machine) -> Vec<TraceRecord> {
        let n = self.nodes[i].r32(reg(regs::TRACE_PROD));
        (0..n.min(map::TRACE_LEN))
            .map(|k| {
                let o = (map::TRACE + k * 16) as usize;
                TraceRecord::decode(&self.nodes[i].sram[o..o + 16]).unwrap()
            })
            .filter(|r| r.machine == m)
            .collect()
    }
}

/// Open node 0 port 1 and node 1 port 2, post a receive buffer and a send
/// of `len` bytes; nothing polled yet.
fn one_send(b: &mut Bench, len: u32) {
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, len as u64);
    let class = nic_abi::size_class_for(len as u64);
    let rv = b.alloc(1, 2, 1 << class);
    b.post(1, 2, provide(rv, class, Priority::Low, 1));
    b.post(0, 1, send(v, len, 1, 2, Priority::Low, 2));
    // The sender's NIC reads the send's page-table line first (its intake
    // waits for it), so the next pass takes the descriptor and fills.
    // So does the receiver's, for its buffer.
    for n in [0, 1] {
        b.poll_only(n);
        assert_eq!(b.nodes[n].mcp.sdma.state(), SdmaState::Idle);
        b.engines(n);
    }
}

#[test]
fn a_translation_not_cached_is_read_from_the_page_table_in_host_memory() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    let v = b.alloc(0, 1, 3 * 4096);
    b.nodes[0].w32(reg(regs::TRACE_ENABLE), 1);
    b.post(0, 1, send(v, 3 * 4096, 1, 2, Priority::Low, 2));
    b.poll_only(0);
    // Intake waited for the line of the send's pages: one host-DMA read of
    // eight entries from the port's table, into SRAM.
    let sdma = b.traced(0, Machine::Sdma);
    assert!(sdma.iter().any(|r| r.to == SdmaState::TRANSLATE_WAIT && r.arg == 1), "{sdma:?}");
    assert_eq!(b.stat(0, Stat::TlbMisses), 1);
    assert_eq!(b.hdma_outstanding(0), 1);
    b.engines(0);
    b.poll_only(0);
    // Then the descriptor is taken (its check goes on: two more pages)
    // and its three packets filled from the cache: hits only.
    assert!(matches!(b.nodes[0].mcp.sdma.state(), SdmaState::FillWait { packet: 2, .. }));
    assert_eq!((b.stat(0, Stat::TlbMisses), b.stat(0, Stat::TlbHits)), (1, 5));
    // A deregistration (the table's generation moves): the cached pages
    // are forgotten, and a send from them is refused.
    b.run(50);
    b.deregister(0, 1, v, 3 * 4096);
    b.post(0, 1, send(v, 100, 1, 2, Priority::Low, 3));
    b.run(5);
    assert_eq!(b.nodes[0].r32(port_reg(1, PT_ACK)), b.nodes[0].r32(port_reg(1, PT_GEN)));
    let errs: Vec<_> = b.events(0, 1).into_iter().filter(|e| e.tag == 3).collect();
    assert_eq!((errs[0].kind, errs[0].status), (EventKind::Error, ErrorCause::NotRegistered as u8));
    assert_eq!(b.stat(0, Stat::TlbMisses), 2, "read again, and found not valid");
}

#[test]
fn sdma_waits_for_its_fill_then_for_acks_then_rests() {
    let mut b = Bench::new(2);
    assert_eq!(b.nodes[0].mcp.sdma.state(), SdmaState::Idle);
    one_send(&mut b, 3 * 4096);
    b.poll_only(0);
    // Three packets filled in one pass: SDMA waits for the last one's
    // host-DMA, naming its token and packet.
    let SdmaState::FillWait { token, packet: 2, buf } = b.nodes[0].mcp.sdma.state() else {
        panic!("{:?}", b.nodes[0].mcp.sdma.state());
    };
    assert!(b.hdma_outstanding(0) >= 3);
    // The engine completes the fills; the next pass hands the buffers to
    // SEND and, with every packet of the message out, SDMA waits for acks.
    b.engines(0);
    b.poll_only(0);
    match b.nodes[0].mcp.sdma.state() {
        SdmaState::AckWait { una, .. } => assert_eq!(una, 0, "nothing acked yet"),
        s => panic!("after the fills: {s:?} (was FillWait token {token} buf {buf})"),
    }
    // SEND handed the three packets to the send-DMA engine, which has not
    // run: it waits on the wire.
    assert_eq!(b.nodes[0].mcp.send.state(), SendState::Wire { buf, in_flight: 3 });
    let mut done = Vec::new();
    assert!(b.run_until(1000, |b| {
        done.extend(b.events(0, 1));
        !done.is_empty()
    }));
    b.run(5);
    assert_eq!(b.nodes[0].mcp.states().0, SdmaState::Idle, "acked and complete");
    assert_eq!(b.nodes[0].mcp.send.state(), SendState::Idle);
}

#[test]
fn rdma_copies_then_says_the_host_is_behind_when_its_event_queue_is_full() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 2);
    let v = b.alloc(0, 1, 64);
    // The receiving host never reads its events: after EVQ_ENTRIES of
    // them RDMA cannot write the next and says whose queue is full.
    let mut sent = 0;
    let ok = b.run_until(200_000, |b| {
        sent += b.events(0, 1).len();
        let posted = b.nodes[0].r32(port_reg(1, SEND_PROD));
        if posted - (sent as u32) < 4 && posted < EVQ_ENTRIES + 8 {
            let rv = b.alloc(1, 2, 64);
            b.post(1, 2, provide(rv, 6, Priority::Low, posted as u64));
            b.post(0, 1, send(v, 64, 1, 2, Priority::Low, posted as u64));
        }
        b.nodes[1].mcp.rdma.state() == RdmaState::HostBehind { port: 2 }
    });
    assert!(ok, "RDMA never reported the full queue: {:?}", b.nodes[1].mcp.rdma.state());
    let n = &b.nodes[1];
    let unread = n.r32(port_reg(2, EVQ_PRODUCED)) - n.r32(port_reg(2, EVQ_CONSUMED));
    assert_eq!(unread, EVQ_ENTRIES);
    // The host catches up: RDMA writes the rest and rests.
    let got = b.events(1, 2).len();
    assert_eq!(got, EVQ_ENTRIES as usize);
    b.run(20);
    assert!(!b.events(1, 2).is_empty());
    assert_ne!(b.nodes[1].mcp.rdma.state(), RdmaState::HostBehind { port: 2 });
}

#[test]
fn recv_and_rdma_rest_idle_between_messages() {
    let mut b = Bench::new(2);
    one_send(&mut b, 100);
    let mut got = Vec::new();
    assert!(b.run_until(1000, |b| {
        got.extend(b.events(1, 2));
        !got.is_empty()
    }));
    b.run(5);
    let (_, _, recv, rdma) = b.nodes[1].mcp.states();
    assert_eq!((recv, rdma), (RecvState::Idle, RdmaState::Idle));
}

#[test]
fn every_transition_is_one_record_with_its_cause_and_operand() {
    let mut b = Bench::new(2);
    b.nodes[0].w32(reg(regs::TRACE_ENABLE), 1);
    one_send(&mut b, 2 * 4096);
    b.poll_only(0);
    let sdma = b.traced(0, Machine::Sdma);
    // Intake (a descriptor), back; then two fills, each a FillWait with
    // its packet as the operand, caused by the scheduler.
    let fills: Vec<_> = sdma.iter().filter(|r| r.to == SdmaState::FILL_WAIT).collect();
    assert_eq!(fills.len(), 2, "{sdma:?}");
    assert!(fills.iter().all(|r| r.cause == Cause::Scheduled));
    assert_eq!((fills[0].arg, fills[1].arg), (0, 1));
    assert_eq!(fills[1].from, SdmaState::FILL_WAIT, "one fill after another");
    assert!(sdma.iter().any(|r| r.to == SdmaState::INTAKE && r.cause == Cause::Descriptor));
    // No record repeats a state: each is a change.
    assert!(sdma.windows(2).all(|w| w[0].to == w[1].from));
}
