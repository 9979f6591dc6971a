//! Address translation: a port's virtual address to a host bus address
//! through the port's page table in SRAM (written by the privileged side
//! only). Every host-DMA the machines post goes through here, so a port
//! reaches only memory it registered.

use crate::hw::Hw;
use nic_abi::map;
use nic_abi::page_table::{self, page_pieces, Pte};
use nic_abi::regs;
use nic_abi::PAGE_SIZE;

/// Bus address of `vaddr` in `port`'s page table.
pub fn translate(hw: &impl Hw, port: u8, vaddr: u64) -> Option<u64> {
    let base = map::page_table(port as usize);
    let read = |i: u32| {
        let mut b = [0u8; page_table::PTE_SIZE as usize];
        hw.read(base + i * page_table::PTE_SIZE, &mut b);
        Pte::decode(&b)
    };
    let page = page_table::lookup(read, vaddr / PAGE_SIZE)?;
    // A page whose end does not fit the bus's addresses is no page: every
    // piece of it then stays below 2^64 (no wrap in any engine). Nor is a
    // page outside the port's own slice of host memory (a table written
    // wrongly, or by someone it does not belong to).
    let start = page.checked_mul(PAGE_SIZE)?;
    in_slice(hw, port, start, PAGE_SIZE).then_some(start + vaddr % PAGE_SIZE)
}

/// Is `[bus, bus + len)` inside `port`'s slice of host memory, as the
/// privileged side recorded it (`regs::PORT_SLICES`)? Never wraps.
pub fn in_slice(hw: &impl Hw, port: u8, bus: u64, len: u64) -> bool {
    let base = hw.load_u64(regs::reg(regs::port_slice_base(port as usize)));
    let size = hw.load_u64(regs::reg(regs::port_slice_len(port as usize)));
    bus >= base
        && bus.checked_add(len).zip(base.checked_add(size)).is_some_and(|(end, top)| end <= top)
}

/// Is every byte of `[vaddr, vaddr+len)` registered by `port`?
pub fn registered(hw: &impl Hw, port: u8, vaddr: u64, len: u64) -> bool {
    if vaddr.checked_add(len).is_none() {
        return false;
    }
    page_pieces(vaddr, len).all(|(v, _)| translate(hw, port, v).is_some())
}

/// One page's part of a transfer: `len` bytes at bus address `bus`, `at`
/// bytes into the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub bus: u64,
    pub len: u32,
    pub at: u32,
}

/// A packet's payload (at most an MTU: it spans at most a few pages) as
/// host-DMA pieces, and whether every page of it is registered (the
/// pieces are those of the pages that are).
pub fn pieces(hw: &impl Hw, port: u8, vaddr: u64, len: u32) -> (heapless::Vec<Piece, 4>, bool) {
    let mut out = heapless::Vec::new();
    let mut ok = true;
    let mut at = 0u32;
    for (v, n) in page_pieces(vaddr, len as u64) {
        match translate(hw, port, v) {
            Some(bus) if out.push(Piece { bus, len: n as u32, at }).is_ok() => {}
            _ => ok = false,
        }
        at += n as u32;
    }
    (out, ok)
}
