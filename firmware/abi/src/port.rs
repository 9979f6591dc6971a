//! The control block at the start of each port window (`map::port_window`).
//! The send ring follows at `map::PORT_SEND_RING`. Offsets are relative to
//! the window; use [`port_reg`] for an absolute SRAM offset.
//!
//! Open/close handshake: the driver has the port's event queue registered
//! (`regs::port_evq_bus`, `port_evq_len`: written by the privileged side,
//! not by a host process), zeroes SEND_PROD,
//! SEND_CONS and EVQ_CONSUMED (the port is not served while closed, so it
//! may write the firmware's SEND_CONS then), bumps GENERATION, then sets
//! STATE = OPEN. The privileged side moves `regs::PORT_NEWS` (the sim's
//! driver layer at the write, the real-time device model at its next
//! step), the firmware, which reads STATE and GENERATION only after news,
//! notices,
//! resets its view of the port, sets FW_STATE = OPEN and writes a
//! PortOpened event. To close, the driver sets STATE = CLOSED; the firmware
//! drops the port's receive buffers and queued sends and sets FW_STATE =
//! CLOSED. Peers' later sends to a closed port complete with
//! TargetPortClosed. The host keeps the port's event queue and buffers
//! until FW_STATE reads CLOSED (or FW_GENERATION moved on): until then the
//! firmware may still write into them. EVQ_PRODUCED restarts at 0 at each
//! open.

/// Driver: `STATE_CLOSED` or `STATE_OPEN`.
pub const STATE: u32 = 0x00; // u32 host
/// Driver: incremented at each open.
pub const GENERATION: u32 = 0x04; // u32 host
/// Driver: bumped after entries of the port's page table in host memory
/// (`page_table`) were cleared or changed: the firmware then forgets the
/// port's cached translations before it translates again.
pub const PT_GEN: u32 = 0x08; // u32 host
/// Firmware: the last `PT_GEN` it has seen and acted on. Once it reads
/// back what the driver wrote, no translation cached before is used; a
/// deregistering driver waits for it.
pub const PT_ACK: u32 = 0x0C; // u32 fw
/// Driver: bumped after entries were only added (a registration): the
/// firmware forgets what it read of entries that were not valid, and
/// keeps its cached translations.
pub const PT_ADDED: u32 = 0x10; // u32 host
/// Host: events consumed, free-running.
pub const EVQ_CONSUMED: u32 = 0x14; // u32 host
/// Host: descriptors posted in the send ring, free-running.
pub const SEND_PROD: u32 = 0x18; // u32 host
/// Firmware: descriptors taken from the send ring, free-running.
pub const SEND_CONS: u32 = 0x1C; // u32 fw
/// Firmware: its view of the port (`STATE_*`).
pub const FW_STATE: u32 = 0x20; // u32 fw
/// Firmware: the generation it serves.
pub const FW_GENERATION: u32 = 0x24; // u32 fw
/// Firmware: events written, free-running.
pub const EVQ_PRODUCED: u32 = 0x28; // u32 fw
/// Device: advanced every `HEARTBEAT_PERIOD_MS` while the NIC's device
/// model (on the real-time backends: the device process and, under qemu,
/// the node's guest) is alive; 0 and still where nothing beats (the sim).
pub const HEARTBEAT: u32 = 0x2C; // u32 device
/// Host: the port's doorbell, added to after posting or changing STATE
/// (`regs::HOST_DOORBELL`'s contract, in the one page of SRAM a host
/// process may write). The firmware polls and never needs it; it only
/// wakes an idle device.
pub const DOORBELL: u32 = 0x30; // u32 host
/// Device: a copy of the register `FW_STATUS`, written with each
/// `HEARTBEAT` (and when a NIC halts), so that a host process, which maps
/// no register, sees a halted NIC; 0 where nothing beats (the sim).
pub const NIC_STATUS: u32 = 0x34; // u32 device
/// Driver: the first virtual page of the last registration (u64), written
/// before `PT_ADDED`: the firmware reads the translations of its first
/// pages ahead of any descriptor that names them (a hint: any value is
/// harmless, it reads only the port's own table).
pub const PT_HINT: u32 = 0x38; // u64 host
/// Driver: how many pages that registration has (u32).
pub const PT_HINT_PAGES: u32 = 0x40; // u32 host

/// Driver: aliases of the port's page table, for memory the program
/// knows at addresses outside the table's virtual range (GM registered a
/// process's own pages, malloc'd or on its stack, where the process has
/// them). `WINDOW_COUNT` entries of `WINDOW_SIZE` bytes: the first virtual
/// page (u64), then the table index it translates through (u32) and how
/// many pages (u32; 0: the entry is unused). Page `first + k` translates
/// as the table's entry `index + k` does, when that entry is valid. An
/// alias reaches nothing the port's own table does not map, and the
/// table's own range comes first. The driver bumps `PT_ADDED` after
/// adding an alias and `PT_GEN` after removing one, as for the table.
pub const WINDOWS: u32 = 0x400; // host
/// Aliases a port has.
pub const WINDOW_COUNT: usize = 8;
/// Bytes of one alias.
pub const WINDOW_SIZE: u32 = 16;

/// Window offset of alias `w`.
pub const fn window(w: usize) -> u32 {
    WINDOWS + w as u32 * WINDOW_SIZE
}

/// An alias's second word: its table index and its pages.
pub const fn window_word(index: u32, pages: u32) -> u64 {
    index as u64 | (pages as u64) << 32
}

/// The table index of virtual page `vpn` through the alias whose words
/// are `first` and `word`, if the alias covers it.
pub const fn window_index(first: u64, word: u64, vpn: u64) -> Option<u64> {
    let (index, pages) = (word & 0xffff_ffff, word >> 32);
    match vpn.checked_sub(first) {
        Some(k) if k < pages => Some(index + k),
        _ => None,
    }
}

/// Device: moved after each change the device made to `NODE_TABLE` (the
/// table is written first), so that a driver reads the table only when
/// this word moved; 0 and still where nothing publishes (the sim).
pub const NODE_NEWS: u32 = 0x44; // u32 device
/// Device: every node's state as the device process sees it (the one
/// process that runs every NIC of a real-time cluster, and sees a NIC
/// reset or its QEMU exit): one `u16` entry per node ([`node_entry`]),
/// two to a word (node `2k` in the low half of word `k`). An entry holds
/// the node's resets so far (modulo 4096, `NODE_RESETS`) and its state
/// (`NODE_*`, above `NODE_STATE_SHIFT`). Written into every port window
/// of every node when an entry changes; all zero where nothing
/// publishes (the sim). A driver remembers the entries of the nodes its
/// port talked with and reports a change (a reset, a NIC gone).
pub const NODE_TABLE: u32 = 0x800; // MAX_NODES x u16, device

/// The bits of a `NODE_TABLE` entry that count the node's resets.
pub const NODE_RESETS: u16 = 0x0FFF;
/// Where a `NODE_TABLE` entry's state starts.
pub const NODE_STATE_SHIFT: u32 = 12;
/// Node state: its NIC runs (or boots).
pub const NODE_UP: u16 = 0;
/// Node state: its firmware halted (a panic, a boot that timed out, or
/// the device process stopped it).
pub const NODE_HALTED: u16 = 1;
/// Node state: its NIC's processor is gone: its QEMU exited or was killed.
pub const NODE_GONE: u16 = 2;

/// Window offset of the `NODE_TABLE` word holding `node`'s entry.
pub const fn node_word(node: usize) -> u32 {
    NODE_TABLE + (node as u32 / 2) * 4
}

/// `node`'s entry out of the word at `node_word(node)`.
pub const fn node_entry(word: u32, node: usize) -> u16 {
    (word >> (16 * (node as u32 & 1))) as u16
}

/// The word at `node_word(node)` with `node`'s entry set to `entry`.
pub const fn with_node_entry(word: u32, node: usize, entry: u16) -> u32 {
    let shift = 16 * (node as u32 & 1);
    (word & !(0xFFFF << shift)) | ((entry as u32) << shift)
}

/// An entry: `resets` (kept modulo 4096) and `state` (`NODE_*`).
pub const fn node_entry_value(resets: u64, state: u16) -> u16 {
    (resets as u16 & NODE_RESETS) | (state << NODE_STATE_SHIFT)
}

/// An entry's state (`NODE_*`).
pub const fn node_state(entry: u16) -> u16 {
    entry >> NODE_STATE_SHIFT
}

/// How often the device advances `HEARTBEAT`.
pub const HEARTBEAT_PERIOD_MS: u64 = 10;
/// A heartbeat that has not moved for this long: the driver checks that
/// the device process is still there (a busy machine may only delay it).
pub const HEARTBEAT_DEAD_MS: u64 = 40;

pub const STATE_CLOSED: u32 = 0;
pub const STATE_OPEN: u32 = 1;
/// FW_STATE only: the firmware refused to serve the port (its registered
/// event queue, `regs::port_evq_bus`/`port_evq_len`, is not a power of two of entries inside the
/// port's slice of host memory). Nothing is written for it until the
/// driver opens it again.
pub const STATE_REFUSED: u32 = 2;

/// Does the SRAM range `[off, off + len)` touch a port's `STATE` or
/// `GENERATION` word (the first 8 bytes of every window)? The privileged
/// side moves `regs::PORT_NEWS` after such a write.
pub const fn touches_state(off: u32, len: u32) -> bool {
    let start = crate::map::PORTS as u64;
    let end = start + crate::NUM_PORTS as u64 * crate::map::PORT_WINDOW as u64;
    let (a, b) = (off as u64, off as u64 + len as u64);
    if len == 0 || b <= start || a >= end {
        return false;
    }
    if a < start {
        return true; // it covers window 0's first bytes
    }
    // A range that reaches into a further window covers its first bytes.
    let w = crate::map::PORT_WINDOW as u64;
    let first = (a - start) / w;
    let last = (b - 1 - start) / w;
    let last = if last >= crate::NUM_PORTS as u64 { crate::NUM_PORTS as u64 - 1 } else { last };
    first != last || (a - start) % w < 8
}

/// Move `regs::PORT_NEWS`: what the privileged side does after a write
/// that may have changed a port's `STATE` or `GENERATION` (see
/// [`touches_state`]), so that the firmware looks at the windows again.
pub fn move_news<S: crate::sram::Sram + ?Sized>(sram: &mut S) {
    let news = sram.reg(crate::regs::PORT_NEWS);
    sram.set_reg(crate::regs::PORT_NEWS, news.wrapping_add(1));
}

pub const fn port_reg(port: usize, off: u32) -> u32 {
    crate::map::port_window(port) + off
}

/// Absolute SRAM offset of send-ring slot for descriptor number `idx`.
pub const fn send_slot(port: usize, idx: u32) -> u32 {
    crate::map::port_window(port)
        + crate::map::PORT_SEND_RING
        + (idx & (crate::map::SEND_RING_LEN - 1)) * crate::desc::DESC_SIZE
}

const _: () = {
    // `touches_state` takes STATE and GENERATION to be the window's first
    // 8 bytes.
    assert!(STATE == 0 && GENERATION == 4);
    // The control block, then the node table, then the send ring.
    assert!(PT_HINT_PAGES + 4 <= NODE_NEWS);
    assert!(NODE_NEWS + 4 <= WINDOWS);
    assert!(WINDOWS + WINDOW_COUNT as u32 * WINDOW_SIZE <= NODE_TABLE);
    assert!(NODE_TABLE + crate::MAX_NODES as u32 * 2 <= crate::map::PORT_SEND_RING);
    assert!(NODE_TABLE.is_multiple_of(4));
    // Every state fits above the resets.
    assert!((NODE_GONE << NODE_STATE_SHIFT) >> NODE_STATE_SHIFT == NODE_GONE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_state_finds_the_first_two_words_of_each_window() {
        for p in 0..crate::NUM_PORTS {
            assert!(touches_state(port_reg(p, STATE), 4));
            assert!(touches_state(port_reg(p, GENERATION), 4));
            assert!(touches_state(port_reg(p, GENERATION) + 3, 1));
            assert!(!touches_state(port_reg(p, PT_GEN), 4));
            assert!(!touches_state(port_reg(p, SEND_PROD), 4));
            assert!(!touches_state(send_slot(p, 3), 32));
            // Across the end of one window into the next one's STATE.
            if p + 1 < crate::NUM_PORTS {
                assert!(touches_state(port_reg(p + 1, STATE) - 4, 5));
                assert!(!touches_state(port_reg(p + 1, STATE) - 4, 4));
            }
        }
        assert!(!touches_state(crate::map::PORTS - 4, 4));
        assert!(touches_state(crate::map::PORTS - 4, 5));
        let end = crate::map::port_window(crate::NUM_PORTS);
        assert!(!touches_state(end, 8));
        assert!(!touches_state(end - 4, 100));
        assert!(touches_state(0, u32::MAX));
        assert!(!touches_state(port_reg(0, STATE), 0));
        assert!(!touches_state(u32::MAX, u32::MAX));
    }

    #[test]
    fn node_entries_pack_two_to_a_word_and_keep_their_neighbour() {
        let e = node_entry_value(4097, NODE_GONE);
        assert_eq!((e & NODE_RESETS, node_state(e)), (1, NODE_GONE));
        let w = with_node_entry(0, 6, node_entry_value(3, NODE_UP));
        let w = with_node_entry(w, 7, e);
        assert_eq!((node_entry(w, 6), node_entry(w, 7)), (3, e));
        assert_eq!(node_entry(with_node_entry(w, 6, 0), 7), e);
        assert_eq!(node_word(6), node_word(7));
        assert_eq!(node_word(8), node_word(6) + 4);
        assert!(node_word(crate::MAX_NODES - 1) + 4 <= crate::map::PORT_SEND_RING);
    }
}
