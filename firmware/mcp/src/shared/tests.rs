//! Tests of the shared records' word-wise access and the rings.

use super::*;
use nic_abi::rings::HostDmaCmd;

#[test]
fn a_receive_slot_read_by_words_is_the_record_encode_wrote() {
    let mut sram = std::vec![0u8; map::SRAM_MIN as usize];
    let mut hw = crate::hw::SliceHw::new(&mut sram);
    let cx = Shared::new();
    let v = RecvSlot {
        port: 5,
        prio: nic_abi::Priority::High,
        size_class: 12,
        vaddr: 0x1234_5678_9abc_def0,
        len: 4096,
        tag: u64::MAX - 3,
        msg_len: 3000,
        src_node: 0xBEEF,
        src_port: 7,
        inline_len: 64,
        error: 9,
        mcast: MCAST_PRESENT | 77,
        mrec: Mrec::rec_of(McastId::new(0x1234)),
        next: Some(SlotId::new(0x0042)),
    };
    // Written by words, it is the byte layout `encode` gives...
    cx.set_slot(&mut hw, SlotId::new(3), &v);
    let mut b = [0u8; map::RX_SLOT_SIZE as usize];
    v.encode(&mut b);
    let at = map::rx_slot(3) as usize;
    assert_eq!(&hw.sram[at..at + b.len()], &b[..]);
    // ...and read back by words, the same record.
    let mut again = [0u8; map::RX_SLOT_SIZE as usize];
    cx.slot(&hw, SlotId::new(3)).encode(&mut again);
    assert_eq!(again, b);
}

#[test]
fn a_posted_host_dma_command_reads_back_as_the_command_and_a_route_ends_at_the_header() {
    let mut sram = std::vec![0u8; map::SRAM_MIN as usize];
    let mut hw = crate::hw::SliceHw::new(&mut sram);
    let mut ring = HostDmaRing::new();
    let cmd = HostDmaCmd {
        dir: rings::DmaDir::SramToHost,
        len: 4096,
        sram: 0x8_1234,
        host: 0xdead_beef_0000_1000,
        cookie: u64::MAX - 5,
    };
    ring.post(&mut hw, cmd, HdmaAction::Nothing);
    let at = map::HDMA_RING as usize;
    let got = HostDmaCmd::decode(&hw.sram[at..at + rings::HDMA_CMD_SIZE as usize]);
    assert_eq!(got, Ok(cmd));
    let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
    cmd.encode(&mut b);
    assert_eq!(&hw.sram[at..at + b.len()], &b[..]);
    // A route of 3 bytes: the 3 bytes before buffer 2's header.
    let e = map::route_entry(9) as usize;
    hw.sram[e..e + 8].copy_from_slice(&[3, 0xa1, 0xa2, 0xa3, 0x77, 0x77, 0x77, 0x77]);
    assert_eq!(write_route(&mut hw, 2, 9), 3);
    let hdr = (map::tx_buf(2) + map::ROUTE_ROOM) as usize;
    assert_eq!(&hw.sram[hdr - 3..hdr], &[0xa1, 0xa2, 0xa3]);
    // The longest route fills the word.
    hw.sram[e..e + 8].copy_from_slice(&[7, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(write_route(&mut hw, 2, 9), 7);
    assert_eq!(&hw.sram[hdr - 7..hdr], &[1, 2, 3, 4, 5, 6, 7]);
}

fn take(cx: &mut Shared, b: u8, stream: u16, seq: u32, state: TxBufState) {
    let stream = Some(TxId::new(stream));
    cx.txbufs.take(b, TxBuf { state, stream, seq, ..TxBuf::EMPTY });
}

fn ready(cx: &mut Shared) -> std::vec::Vec<u32> {
    let mut v = std::vec::Vec::new();
    // (SEND's half of the queue, as the test plays it.)
    let half = crate::queue::consumer();
    while let Some(b) = cx.tx_ready.pop_front(&half) {
        v.push(cx.txbufs.get(b).seq);
    }
    v
}

#[test]
fn a_packet_ready_without_host_dma_waits_for_the_earlier_fills_of_its_stream() {
    let mut cx = Shared::new();
    // (SDMA's half of the queue, as the test plays it.)
    let sdma = crate::queue::producer();
    // Stream 1: seq 4 and 6 filling by host-DMA; seq 5 (a relayed
    // packet, ready at once) must not overtake 4. Stream 2's packet
    // has nothing before it.
    take(&mut cx, 0, 1, 4, TxBufState::Filling);
    take(&mut cx, 1, 1, 5, TxBufState::Filled);
    cx.ready(&sdma, 1);
    take(&mut cx, 2, 1, 6, TxBufState::Filling);
    take(&mut cx, 3, 2, 9, TxBufState::Filled);
    cx.ready(&sdma, 3);
    assert_eq!(cx.txbufs.get(1).state, TxBufState::Held);
    assert_eq!(ready(&mut cx), [9]);
    // Host-DMA completes in order: 4, then the held 5 (6 is after it).
    cx.filled(&sdma, 0);
    assert_eq!(ready(&mut cx), [4, 5]);
    cx.filled(&sdma, 2);
    assert_eq!(ready(&mut cx), [6]);
    // The buffers it names are no longer waiting: nothing unsent.
    for b in 0..3 {
        cx.txbufs.sending(b);
    }
    assert_eq!(cx.txbufs.unsent_from(TxId::new(1), 0), None);
}

#[test]
fn the_first_unsent_packet_of_a_stream_is_the_lowest_still_in_a_buffer() {
    let mut cx = Shared::new();
    take(&mut cx, 0, 1, u32::MAX, TxBufState::Filled);
    take(&mut cx, 1, 1, 0, TxBufState::Filling);
    take(&mut cx, 2, 1, 7, TxBufState::Sending);
    // Across the wrap, u32::MAX comes before 0; a buffer with the
    // engine is sent.
    assert_eq!(cx.txbufs.unsent_from(TxId::new(1), 0), Some(u32::MAX));
    // Another epoch's buffers are stale: they do not count.
    assert_eq!(cx.txbufs.unsent_from(TxId::new(1), 1), None);
}
