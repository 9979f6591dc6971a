//! The SRAM memory map. Offsets are from the start of NIC SRAM (in the qemu
//! backend SRAM is the guest's RAM, so guest address = RAM base + offset).
//!
//! ```text
//! 0x00000 IMAGE       256 KiB  firmware code, data, bss, stack
//! 0x40000 REGS          4 KiB  register block (see regs)
//! 0x41000 ROUTES        8 KiB  route to each node (written by the mapper)
//! 0x43000 STATS         1 KiB  NIC counters (firmware writes, host reads)
//! 0x43400 HDMA_RING     2 KiB  host-DMA command ring
//! 0x43C00 TXDMA_RING  512 B    send-DMA (SRAM -> wire) command ring (16 x 32 B)
//! 0x43E00 RXFREE_RING 256 B    free receive buffers, firmware -> rx-DMA
//! 0x44000 RXDONE_RING   1 KiB  filled receive buffers, rx-DMA -> firmware
//! 0x44400 EVT_STAGING   4 KiB  events composed before host-DMA to host memory
//! 0x46000 TRACE        32 KiB  transition trace ring
//! 0x4E000 FLOWS         8 KiB  flow table (rate control: IDT, NDT, counters)
//! 0x50000 PORTS        64 KiB  one 8 KiB window per port (control + send ring)
//! 0x60000 TLB          96 KiB  the translation cache (fw; page tables are in host memory)
//! 0x78000 PT_LINES    512 B   page-table lines being read (fw)
//! 0x80000 TX_BUFS      66 KiB  transmit buffers
//! 0x91000 RX_BUFS     132 KiB  receive buffers
//! 0xB2000 DISPATCH_TRACE 64 KiB packet dispatch trace (flow, RTC)
//! 0xC2000 GROUPS      128 KiB  multicast group table (privileged side writes only)
//! 0xE2000 MCAST_LISTS   8 KiB  child lists of the multicasts in flight (fw)
//! 0xE4000 RX_INLINE     4 KiB  small messages' bytes for their events (fw)
//! 0xE5000 MCAST_HEARD   1 KiB  children each multicast record heard from (fw)
//! 0xE5400 MCAST_LOST    2 KiB  lists of the members a multicast did not reach (fw)
//! 0xE5C00 RX_SLOTS     12 KiB  the firmware's records of posted receive buffers (fw)
//! 0xE8C00 RX_GHOSTS    24 KiB  where receiving streams let go of stood (fw)
//! 0xEEC00 SR_STAMPS     4 KiB  selective repeat: each sending stream's poll stamps (fw)
//! 0xEFC00 ECHO        512 B    echo offload: its requests in flight (fw)
//! 0xEFE00 OFFLOAD_EVENTS 512 B  events offloads composed, for RDMA to write (fw)
//! 0xF0000 COLL         64 KiB  collective offload: vectors, chunks held and sent (fw)
//! 0x100000 (end of the map; SRAM is at least 1 MiB)
//! ```

use crate::{MAX_MTU, MAX_NODES, NUM_PORTS};

pub const IMAGE: u32 = 0x0000_0000;
pub const IMAGE_SIZE: u32 = 0x0004_0000;

pub const REGS: u32 = 0x0004_0000;
pub const REGS_SIZE: u32 = 0x1000;

/// Route table: `MAX_NODES` entries of `ROUTE_ENTRY` bytes: `[len, b0..b6]`,
/// the route bytes as they go on the wire (`packet::route_byte(port)`).
pub const ROUTES: u32 = 0x0004_1000;
pub const ROUTE_ENTRY: u32 = 8;
/// Longest source route (switch hops).
pub const ROUTE_MAX: usize = 7;

pub const STATS: u32 = 0x0004_3000;
pub const STATS_SIZE: u32 = 0x400;

pub const HDMA_RING: u32 = 0x0004_3400;
pub const HDMA_RING_LEN: u32 = 64;
pub const TXDMA_RING: u32 = 0x0004_3C00;
/// One command per transmit buffer at most (each is on the wire once).
pub const TXDMA_RING_LEN: u32 = 16;
pub const RXFREE_RING: u32 = 0x0004_3E00;
pub const RXFREE_RING_LEN: u32 = 64;
pub const RXDONE_RING: u32 = 0x0004_4000;
pub const RXDONE_RING_LEN: u32 = 64;

/// Event staging slots: `EVT_STAGING_LEN` slots of `event::EVENT_SIZE`,
/// one per slot of the host-DMA ring (an event is staged in the slot of
/// the number of the ring slot its write takes).
pub const EVT_STAGING: u32 = 0x0004_4400;
pub const EVT_STAGING_LEN: u32 = 64;

pub const TRACE: u32 = 0x0004_6000;
pub const TRACE_LEN: u32 = 2048;

/// Flow table: `FLOW_ENTRIES` entries of `flows::FLOW_ENTRY_SIZE` bytes.
pub const FLOWS: u32 = 0x0004_E000;
pub const FLOW_ENTRIES: u32 = 256;

/// Port windows: port p's window starts at `PORTS + p * PORT_WINDOW`. A host
/// process maps exactly its port's window (control block + send ring):
/// on the real-time backends each window is a file of its own.
pub const PORTS: u32 = 0x0005_0000;
pub const PORT_WINDOW: u32 = 0x2000;
/// Offset of the send ring inside a port window.
pub const PORT_SEND_RING: u32 = 0x1000;
/// Entries in a port's send ring (descriptors of `desc::DESC_SIZE` bytes).
pub const SEND_RING_LEN: u32 = 64;

/// The translation cache: up to `TLB_MAX` entries of `TLB_ENTRY_SIZE`
/// bytes (the profile picks how many are used, `regs::TLB_SETS` x
/// `regs::TLB_WAYS`). The layout is the firmware's own; the page tables
/// themselves are in host memory (`page_table`).
pub const TLB: u32 = 0x0006_0000;
pub const TLB_MAX: u32 = 4096;
pub const TLB_ENTRY_SIZE: u32 = 24;
/// Page-table lines being read from host memory: `PT_LINES_LEN` of
/// `page_table::LINE_BYTES` bytes.
pub const PT_LINES: u32 = 0x0007_8000;
pub const PT_LINES_LEN: u32 = 8;

/// Room before a packet's header in a buffer for the source route.
pub const ROUTE_ROOM: u32 = 16;
/// Distance between two packet buffers (route room + header + MTU, aligned).
pub const BUF_STRIDE: u32 = 4224;
pub const TX_BUFS: u32 = 0x0008_0000;
pub const TX_BUF_COUNT: u32 = 16;
pub const RX_BUFS: u32 = 0x0009_1000;
pub const RX_BUF_COUNT: u32 = 32;

/// First byte past the map.
/// Dispatch trace: `DISPATCH_TRACE_LEN` records of
/// `flows::DISPATCH_RECORD_SIZE` bytes.
pub const DISPATCH_TRACE: u32 = 0x000B_2000;
pub const DISPATCH_TRACE_LEN: u32 = 4096;

/// Multicast group table: `GROUP_ENTRIES` entries of `GROUP_ENTRY_SIZE`
/// bytes (`group` module); a group's id is its entry's index.
pub const GROUPS: u32 = 0x000C_2000;
pub const GROUP_ENTRIES: u32 = 16;
pub const GROUP_ENTRY_SIZE: u32 = 0x2000;

/// Child lists of the multicasts the firmware serves: `MCAST_LISTS_LEN`
/// lists of `MCAST_LIST_SIZE` bytes, (node u16, subtree u16) each.
pub const MCAST_LISTS: u32 = 0x000E_2000;
pub const MCAST_LISTS_LEN: u32 = 8;
pub const MCAST_LIST_SIZE: u32 = 0x400;

/// The first bytes of each filled receive slot's message, kept for its
/// Received event (`event::INLINE_MAX` bytes per slot, `RX_INLINE_SLOTS`
/// slots): the receive buffer goes back to the engine long before the
/// event is written.
pub const RX_INLINE: u32 = 0x000E_4000;
pub const RX_INLINE_SLOTS: u32 = 256;

/// Which children each multicast record has heard from (a report, or a
/// failed send): one bit per node, `MCAST_HEARD_SIZE` bytes for each of
/// the `MCAST_LISTS_LEN` records. A report taken twice counts once.
pub const MCAST_HEARD: u32 = 0x000E_5000;
pub const MCAST_HEARD_SIZE: u32 = MAX_NODES as u32 / 8;

/// Lists of the heads of subtrees a multicast did not reach
/// (`event::LostHeads` bitmaps of `event::LOST_BYTES`): `MCAST_LOST_LISTS`
/// of them, each used by a multicast record, then by the report or the
/// root's completion that carries it on.
pub const MCAST_LOST: u32 = 0x000E_5400;
pub const MCAST_LOST_LISTS: u32 = 16;

/// The firmware's records of the receive buffers posted (one per receive
/// slot, `RX_INLINE_SLOTS` of them, `RX_SLOT_SIZE` bytes each): kept in
/// SRAM outside the image, as the buffers are. The layout is the
/// firmware's own.
pub const RX_SLOTS: u32 = 0x000E_5C00;
pub const RX_SLOT_SIZE: u32 = 48;

/// Where receiving streams the firmware let go of (its table was full)
/// stood: `RX_GHOSTS_LEN` records of `RX_GHOST_SIZE` bytes, in buckets of
/// 4 by key. A packet of such a stream brings it back where it was, so
/// nothing is taken twice. The layout is the firmware's own.
pub const RX_GHOSTS: u32 = 0x000E_8C00;
pub const RX_GHOSTS_LEN: u32 = 1024;
pub const RX_GHOST_SIZE: u32 = 24;

/// Selective repeat: each sending stream's poll stamps, one byte per
/// packet of its window (by sequence number modulo `SR_STAMPS_PER_STREAM`):
/// the poll number current when the packet last went. `SR_STREAMS`
/// streams. The layout is the firmware's own.
pub const SR_STAMPS: u32 = 0x000E_EC00;
pub const SR_STREAMS: u32 = 128;
pub const SR_STAMPS_PER_STREAM: u32 = 32;

/// Echo offload (`mcp::offload::echo`): its requests in flight,
/// `ECHO_SLOTS` records of `ECHO_SLOT_SIZE` bytes. The layout is the
/// firmware's own.
pub const ECHO: u32 = 0x000E_FC00;
pub const ECHO_SLOTS: u32 = 16;
pub const ECHO_SLOT_SIZE: u32 = 32;

/// Events the offloads composed (`mcp::offload::Services::event`), each
/// as the record RDMA writes (`event::EVENT_SIZE` bytes), until RDMA
/// writes it to its port's event queue: `OFFLOAD_EVENTS_LEN` of them.
pub const OFFLOAD_EVENTS: u32 = 0x000E_FE00;
pub const OFFLOAD_EVENTS_LEN: u32 = 8;

/// Collective offload (`mcp::offload::collective`): the vector of the
/// collective in progress (`COLL_VECTOR` bytes), chunks that came before
/// their step (`COLL_HELD` slots), and chunks sent and not yet
/// acknowledged (`COLL_SENT` slots), each slot `collective::CHUNK_MAX`
/// bytes; then the members missing from each group's last collective
/// (`event::LOST_BYTES` each, `GROUP_ENTRIES` of them). The layout is the
/// firmware's own.
pub const COLL: u32 = 0x000F_0000;
pub const COLL_VECTOR: u32 = 32 * 1024;
pub const COLL_HELD: u32 = 8;
pub const COLL_SENT: u32 = 16;
pub const COLL_MISSING: u32 =
    COLL + COLL_VECTOR + (COLL_HELD + COLL_SENT) * crate::collective::CHUNK_SMALL;
/// Collective offload: the records of the held chunks (`COLL_REC_SIZE`
/// bytes each), then of the sent ones.
pub const COLL_RECS: u32 = COLL_MISSING + GROUP_ENTRIES * crate::event::LOST_BYTES as u32;
pub const COLL_REC_SIZE: u32 = 32;
/// Collective offload: answers (acks, probes' answers) that found no
/// transmit buffer, kept to go at the next pass: `COLL_ANSWERS` packet
/// headers of `packet::HEADER_LEN` bytes.
pub const COLL_ANSWER: u32 = COLL_RECS + (COLL_HELD + COLL_SENT) * COLL_REC_SIZE;
pub const COLL_ANSWERS: u32 = 16;
/// Collective offload: each group's numbers (the last collective done
/// here, the last that ended with members missing: u32 each).
pub const COLL_GROUPS: u32 = COLL_ANSWER + COLL_ANSWERS * crate::packet::HEADER_LEN as u32;
/// Collective offload: per run and chunk of its window, the receive steps
/// taken ahead of their turn (a bit per step: u32 each, `COLL_RUNS` x
/// `COLL_CHUNKS`; chunk c at c mod `COLL_CHUNKS`). A run works on at
/// most `COLL_CHUNKS` chunks of its vector at once.
pub const COLL_AHEAD: u32 = COLL_GROUPS + GROUP_ENTRIES * 8;
pub const COLL_RUNS: u32 = 8;
pub const COLL_CHUNKS: u32 = 64;
/// Collective offload: the records of the collectives running (and of
/// those ended whose events are still to post), `COLL_RUN_SIZE` bytes
/// each.
pub const COLL_RUN: u32 = COLL_AHEAD + COLL_RUNS * COLL_CHUNKS * 4;
pub const COLL_RUN_SIZE: u32 = 256;
pub const COLL_END: u32 = COLL_RUN + COLL_RUNS * COLL_RUN_SIZE;

pub const MAP_END: u32 = 0x0010_0000;
/// Smallest SRAM that holds the map.
pub const SRAM_MIN: u32 = 0x0010_0000;

/// Collective offload, on a NIC with SRAM past the map: up to
/// `COLL_EXT_MAX` bytes from `COLL_EXT` hold its chunk slots and vectors
/// ([`coll_ext_len`]). With at least `COLL_EXT_MIN` bytes there, the
/// collectives cut vectors in chunks of up to `collective::CHUNK_MAX`
/// bytes; with less, of `collective::CHUNK_SMALL` (what `COLL` holds).
/// `COLL_EXT + COLL_EXT_MAX` stays below where QEMU puts its device tree
/// in an 8 MiB guest (6 MiB).
pub const COLL_EXT: u32 = MAP_END;
pub const COLL_EXT_MAX: u32 = 4 << 20;
pub const COLL_EXT_MIN: u32 = 512 << 10;

/// The collective offload's SRAM past the map on a NIC of `sram_size`
/// bytes (0 when it is below `COLL_EXT_MIN`).
pub const fn coll_ext_len(sram_size: u32) -> u32 {
    let end = if sram_size < COLL_EXT + COLL_EXT_MAX { sram_size } else { COLL_EXT + COLL_EXT_MAX };
    let len = end.saturating_sub(COLL_EXT);
    if len < COLL_EXT_MIN {
        0
    } else {
        len
    }
}

pub const fn port_window(port: usize) -> u32 {
    PORTS + port as u32 * PORT_WINDOW
}

/// Translation cache entry `i` (`TLB`).
pub const fn tlb_entry(i: u32) -> u32 {
    TLB + i * TLB_ENTRY_SIZE
}

/// Page-table line `i` (`PT_LINES`).
pub const fn pt_line(i: u32) -> u32 {
    PT_LINES + i * crate::page_table::LINE_BYTES
}

pub const fn flow_entry(i: u32) -> u32 {
    FLOWS + i * crate::flows::FLOW_ENTRY_SIZE
}

pub const fn group_entry(id: u32) -> u32 {
    GROUPS + id * GROUP_ENTRY_SIZE
}

pub const fn mcast_list(i: u32) -> u32 {
    MCAST_LISTS + i * MCAST_LIST_SIZE
}

/// The bit of `node` in multicast record `rec`'s heard-from set: (byte
/// address, mask).
pub const fn mcast_heard(rec: u32, node: u16) -> (u32, u8) {
    (MCAST_HEARD + rec * MCAST_HEARD_SIZE + node as u32 / 8, 1 << (node % 8))
}

/// Start of lost-heads list `i`.
pub const fn mcast_lost(i: u32) -> u32 {
    MCAST_LOST + i * crate::event::LOST_BYTES as u32
}

/// The firmware's record of receive slot `slot`.
pub const fn rx_slot(slot: u32) -> u32 {
    RX_SLOTS + slot * RX_SLOT_SIZE
}

/// Ghost record `i` (`RX_GHOSTS`).
pub const fn rx_ghost(i: u32) -> u32 {
    RX_GHOSTS + i * RX_GHOST_SIZE
}

/// Stream `stream`'s poll stamp of sequence number `seq` (`SR_STAMPS`).
pub const fn sr_stamp(stream: u32, seq: u32) -> u32 {
    SR_STAMPS + stream * SR_STAMPS_PER_STREAM + seq % SR_STAMPS_PER_STREAM
}

/// Offload event `i` (`OFFLOAD_EVENTS`).
pub const fn offload_event(i: u32) -> u32 {
    OFFLOAD_EVENTS + i * crate::event::EVENT_SIZE
}

/// Collective offload, with no SRAM past the map: held chunk `i`'s slot.
pub const fn coll_held(i: u32) -> u32 {
    COLL + COLL_VECTOR + i * crate::collective::CHUNK_SMALL
}

/// Collective offload, with no SRAM past the map: sent chunk `i`'s slot.
pub const fn coll_sent(i: u32) -> u32 {
    COLL + COLL_VECTOR + (COLL_HELD + i) * crate::collective::CHUNK_SMALL
}

/// Collective offload: held chunk `i`'s record.
pub const fn coll_held_rec(i: u32) -> u32 {
    COLL_RECS + i * COLL_REC_SIZE
}

/// Collective offload: sent chunk `i`'s record.
pub const fn coll_sent_rec(i: u32) -> u32 {
    COLL_RECS + (COLL_HELD + i) * COLL_REC_SIZE
}

/// Collective offload: run `r`'s chunk `c`'s receive steps taken ahead.
pub const fn coll_ahead(r: u32, c: u32) -> u32 {
    COLL_AHEAD + (r * COLL_CHUNKS + c) * 4
}

/// Collective offload: run `r`'s record.
pub const fn coll_run(r: u32) -> u32 {
    COLL_RUN + r * COLL_RUN_SIZE
}

/// Collective offload: group `g`'s numbers.
pub const fn coll_group(g: u32) -> u32 {
    COLL_GROUPS + g * 8
}

/// Collective offload: kept answer `i`'s header.
pub const fn coll_answer(i: u32) -> u32 {
    COLL_ANSWER + i * crate::packet::HEADER_LEN as u32
}

/// Collective offload: the members missing from group `g`'s last
/// collective (an `event::LostHeads` bitmap).
pub const fn coll_missing(g: u32) -> u32 {
    COLL_MISSING + g * crate::event::LOST_BYTES as u32
}

/// Inline bytes of receive slot `slot`.
pub const fn rx_inline(slot: u32) -> u32 {
    RX_INLINE + slot * crate::event::INLINE_MAX as u32
}

pub const fn route_entry(node: usize) -> u32 {
    ROUTES + node as u32 * ROUTE_ENTRY
}

/// Start of transmit buffer `i` (its route room).
pub const fn tx_buf(i: u32) -> u32 {
    TX_BUFS + i * BUF_STRIDE
}

/// Start of receive buffer `i` (a received packet has no route bytes left:
/// its header is at the start).
pub const fn rx_buf(i: u32) -> u32 {
    RX_BUFS + i * BUF_STRIDE
}

// The map is checked at compile time: regions in order, no overlap.
const _: () = {
    assert!(IMAGE + IMAGE_SIZE <= REGS);
    assert!(REGS + REGS_SIZE <= ROUTES);
    assert!(ROUTES + MAX_NODES as u32 * ROUTE_ENTRY <= STATS);
    assert!(STATS + STATS_SIZE <= HDMA_RING);
    assert!(HDMA_RING + HDMA_RING_LEN * crate::rings::HDMA_CMD_SIZE <= TXDMA_RING);
    assert!(TXDMA_RING + TXDMA_RING_LEN * crate::rings::TXDMA_CMD_SIZE <= RXFREE_RING);
    assert!(RXFREE_RING + RXFREE_RING_LEN * crate::rings::RXFREE_SIZE <= RXDONE_RING);
    assert!(RXDONE_RING + RXDONE_RING_LEN * crate::rings::RXDONE_SIZE <= EVT_STAGING);
    assert!(EVT_STAGING + EVT_STAGING_LEN * crate::event::EVENT_SIZE <= TRACE);
    assert!(EVT_STAGING_LEN == HDMA_RING_LEN);
    assert!(TRACE + TRACE_LEN * crate::trace::TRACE_RECORD_SIZE <= FLOWS);
    assert!(FLOWS + FLOW_ENTRIES * crate::flows::FLOW_ENTRY_SIZE <= PORTS);
    assert!(PORT_SEND_RING + SEND_RING_LEN * crate::desc::DESC_SIZE <= PORT_WINDOW);
    assert!(PORTS + NUM_PORTS as u32 * PORT_WINDOW <= TLB);
    assert!(TLB + TLB_MAX * TLB_ENTRY_SIZE <= PT_LINES);
    assert!(PT_LINES + PT_LINES_LEN * crate::page_table::LINE_BYTES <= TX_BUFS);
    assert!(ROUTE_ROOM as usize >= ROUTE_MAX);
    assert!(BUF_STRIDE as usize >= ROUTE_ROOM as usize + crate::packet::HEADER_LEN + MAX_MTU);
    assert!(TX_BUFS + TX_BUF_COUNT * BUF_STRIDE <= RX_BUFS);
    assert!(RX_BUFS + RX_BUF_COUNT * BUF_STRIDE <= DISPATCH_TRACE);
    assert!(DISPATCH_TRACE + DISPATCH_TRACE_LEN * crate::flows::DISPATCH_RECORD_SIZE <= GROUPS);
    assert!(GROUPS + GROUP_ENTRIES * GROUP_ENTRY_SIZE <= MCAST_LISTS);
    assert!(MCAST_LISTS + MCAST_LISTS_LEN * MCAST_LIST_SIZE <= RX_INLINE);
    assert!(RX_INLINE + RX_INLINE_SLOTS * crate::event::INLINE_MAX as u32 <= MCAST_HEARD);
    assert!(MCAST_HEARD + MCAST_LISTS_LEN * MCAST_HEARD_SIZE <= MCAST_LOST);
    assert!(MCAST_LOST + MCAST_LOST_LISTS * crate::event::LOST_BYTES as u32 <= RX_SLOTS);
    assert!(RX_SLOTS + RX_INLINE_SLOTS * RX_SLOT_SIZE <= RX_GHOSTS);
    assert!(RX_GHOSTS + RX_GHOSTS_LEN * RX_GHOST_SIZE <= SR_STAMPS);
    assert!(SR_STAMPS + SR_STREAMS * SR_STAMPS_PER_STREAM <= ECHO);
    assert!(ECHO + ECHO_SLOTS * ECHO_SLOT_SIZE <= OFFLOAD_EVENTS);
    assert!(OFFLOAD_EVENTS + OFFLOAD_EVENTS_LEN * crate::event::EVENT_SIZE <= COLL);
    assert!(COLL_END <= MAP_END);
    assert!(RX_GHOSTS_LEN.is_power_of_two());
    assert!(crate::desc::MAX_LISTED_CHILDREN as u32 * 4 <= MCAST_LIST_SIZE);
    assert!(crate::group::ENTRY_END <= GROUP_ENTRY_SIZE);
    assert!(MAP_END <= SRAM_MIN);
    assert!(COLL_EXT >= MAP_END);
    assert!(COLL_EXT + COLL_EXT_MAX <= 6 << 20);
    assert!(COLL_EXT_MIN >= (COLL_HELD + COLL_SENT + COLL_CHUNKS) * crate::collective::CHUNK_MAX);
    assert!(HDMA_RING_LEN.is_power_of_two());
    assert!(TXDMA_RING_LEN.is_power_of_two());
    assert!(RXFREE_RING_LEN.is_power_of_two());
    assert!(RXDONE_RING_LEN.is_power_of_two());
    assert!(SEND_RING_LEN.is_power_of_two());
    assert!(TLB_MAX.is_power_of_two());
};
