//! A port's aliases of its page table (`nic_abi::port::WINDOWS`): virtual
//! ranges outside the table's own that translate through its entries,
//! for memory a program knows at addresses of its own. The port writes
//! them; whatever they say, a page reached through one is a page the
//! port's table maps, inside its slice.

use crate::hw::Hw;
use nic_abi::port::{port_reg, window, window_index, WINDOW_COUNT};
use nic_abi::{regs, PAGE_SIZE};

/// The index of `vpn` in port `p`'s table, if the table has one: in the
/// table's own range, else through one of the port's aliases.
pub(super) fn table_index(hw: &impl Hw, p: usize, vpn: u64) -> Option<u64> {
    let first = hw.load_u64(regs::reg(regs::port_pt_vbase(p))) / PAGE_SIZE;
    let entries = hw.load_u64(regs::reg(regs::port_slice_len(p))) / PAGE_SIZE;
    match vpn.checked_sub(first).filter(|&i| i < entries) {
        Some(i) => Some(i),
        None => index(hw, p, vpn, entries),
    }
}

/// The table index `vpn` of port `p` translates through by one of its
/// aliases (the first that covers it), if it is below `entries`.
fn index(hw: &impl Hw, p: usize, vpn: u64, entries: u64) -> Option<u64> {
    (0..WINDOW_COUNT)
        .find_map(|w| {
            let at = port_reg(p, window(w));
            window_index(hw.load_u64(at), hw.load_u64(at + 8), vpn)
        })
        .filter(|&i| i < entries)
}
