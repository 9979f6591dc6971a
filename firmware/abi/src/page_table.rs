//! Per-port page tables in host memory (after GM's page tables, which lived
//! in host memory with a translation cache on the NIC).
//!
//! Port p's table is a linear array of 8-byte entries at bus address
//! `regs::port_pt_bus(p)`, in host memory that only the privileged side
//! writes (outside every port's slice). Entry i translates the virtual page
//! `vbase / PAGE_SIZE + i`, where `vbase` is `regs::port_pt_vbase(p)`; the
//! table has one entry per page of the port's slice, so a port can register
//! all of its slice. An entry is `bus address of the page | PTE_VALID`, or
//! 0 (not registered).
//!
//! The firmware reads a table only by host-DMA, a line of `LINE_PTES`
//! entries at a time, and keeps what it read in its translation cache.
//! Whoever changes a port's table then bumps the port's `PT_GEN` word
//! (`port::PT_GEN`): the firmware forgets that port's cached translations
//! and answers in `port::PT_ACK` with the generation it has seen.
//!
//! How host memory is laid out between the ports' slices and their page
//! tables is [`HostLayout`].

use crate::{NUM_PORTS, PAGE_SIZE};

/// Bytes of one entry.
pub const PTE_SIZE: u32 = 8;
/// The entry maps a page.
pub const PTE_VALID: u64 = 1;
/// Entries the firmware reads in one host-DMA (one cache line's worth).
pub const LINE_PTES: u32 = 8;
/// Bytes of one such read.
pub const LINE_BYTES: u32 = LINE_PTES * PTE_SIZE;

/// The entry that maps a page to bus page `bus_page`.
#[inline]
pub const fn pte(bus_page: u64) -> u64 {
    (bus_page << 12) | PTE_VALID
}

/// The bus page an entry maps, if it is valid.
#[inline]
pub const fn pte_bus_page(e: u64) -> Option<u64> {
    if e & PTE_VALID != 0 {
        Some(e >> 12)
    } else {
        None
    }
}

/// Where the driver's virtual addresses start.
pub const VIRT_BASE: u64 = 0x1000_0000_0000;
/// Each port's virtual range is `1 << VIRT_PORT_SHIFT` bytes.
pub const VIRT_PORT_SHIFT: u32 = 40;

/// Port `port`'s virtual address of bus address `bus`, as the driver and
/// the privileged side lay virtual addresses out: every port has its own
/// range, distinct from bus addresses and from the other ports', so a
/// port's address means nothing in another port's table.
pub const fn vaddr_of(port: u8, bus: u64) -> u64 {
    VIRT_BASE + ((port as u64) << VIRT_PORT_SHIFT) + bus
}

/// How a node's host memory of `host_size` bytes is shared out: the
/// ports' slices from bus address 0 up, then one page table per port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLayout {
    /// Every port has the same slice (the sim: one memory for all the
    /// node's ports) rather than one slice each.
    pub shared: bool,
    /// Bytes of each slice (page aligned).
    pub slice_len: u64,
    /// Bus address of port 0's page table; port p's follows at
    /// `tables + p * table_bytes`.
    pub tables: u64,
    /// Bytes reserved for each table (page aligned).
    pub table_bytes: u64,
}

impl HostLayout {
    /// The largest slices whose tables fit beside them in `host_size`
    /// bytes: `shared` gives every port the one slice.
    pub const fn new(host_size: u64, shared: bool) -> HostLayout {
        let n = if shared { 1 } else { NUM_PORTS as u64 };
        let ports = NUM_PORTS as u64;
        // n * S + ports * (S / 512 + PAGE) <= host_size.
        let room = host_size.saturating_sub(ports * PAGE_SIZE);
        let per_pte = PAGE_SIZE / PTE_SIZE as u64;
        let s = room / (n * per_pte + ports) * per_pte / PAGE_SIZE * PAGE_SIZE;
        let table_bytes = (s / PAGE_SIZE * PTE_SIZE as u64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        HostLayout { shared, slice_len: s, tables: n * s, table_bytes }
    }

    /// Port `p`'s slice: (first bus address, length).
    pub const fn slice(&self, p: u8) -> (u64, u64) {
        if self.shared {
            (0, self.slice_len)
        } else {
            (p as u64 * self.slice_len, self.slice_len)
        }
    }

    /// Bus address of port `p`'s page table.
    pub const fn table(&self, p: u8) -> u64 {
        self.tables + p as u64 * self.table_bytes
    }

    /// Entries of each table: one per page of a slice.
    pub const fn entries(&self) -> u64 {
        self.slice_len / PAGE_SIZE
    }

    /// End of the tables (bytes of host memory the layout uses).
    pub const fn end(&self) -> u64 {
        self.tables + NUM_PORTS as u64 * self.table_bytes
    }

    /// Bus address of the entry of port `p`'s virtual page `vpn`, if the
    /// table has one (with the driver's virtual addresses, `vaddr_of`).
    pub fn entry_of(&self, p: u8, vpn: u64) -> Option<u64> {
        let first = vaddr_of(p, self.slice(p).0) / PAGE_SIZE;
        let i = vpn.checked_sub(first).filter(|&i| i < self.entries())?;
        Some(self.table(p) + i * PTE_SIZE as u64)
    }
}

/// Split the virtual range `[vaddr, vaddr + len)` at page boundaries:
/// yields `(vaddr, len)` pieces, none crossing a page.
pub fn page_pieces(vaddr: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = vaddr.saturating_add(len);
    let mut at = vaddr;
    core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let page_end = (at / PAGE_SIZE + 1).saturating_mul(PAGE_SIZE);
        let n = page_end.min(end) - at;
        let piece = (at, n);
        at += n;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        assert_eq!(pte_bus_page(pte(99)), Some(99));
        assert_eq!(pte_bus_page(pte((1 << 52) - 1)), Some((1 << 52) - 1));
        assert_eq!(pte_bus_page(0), None);
        assert_eq!(pte_bus_page(99 << 12), None);
    }

    #[test]
    fn layouts_fit_and_tables_cover_their_slices() {
        for host in [1u64 << 20, 8 << 20, 256 << 20, 1 << 30, 4 << 30, 3 * (1 << 30) + 12345] {
            for shared in [false, true] {
                let l = HostLayout::new(host, shared);
                assert!(l.end() <= host, "{host} {shared}: {l:?}");
                assert!(l.slice_len > 0 && l.slice_len.is_multiple_of(PAGE_SIZE));
                assert!(l.table_bytes >= l.entries() * PTE_SIZE as u64);
                assert!(l.tables.is_multiple_of(PAGE_SIZE));
                // Slices end where the tables begin, and use most of it.
                let (last, len) = l.slice(NUM_PORTS as u8 - 1);
                assert!(last + len <= l.tables);
                assert!(l.end() + 2 * NUM_PORTS as u64 * PAGE_SIZE >= host * 99 / 100);
            }
        }
    }

    #[test]
    fn an_entry_exists_for_every_page_of_the_slice_and_no_other() {
        let l = HostLayout::new(8 << 20, false);
        let (base, len) = l.slice(3);
        let first = vaddr_of(3, base) / PAGE_SIZE;
        assert_eq!(l.entry_of(3, first), Some(l.table(3)));
        let last = first + len / PAGE_SIZE - 1;
        assert_eq!(l.entry_of(3, last), Some(l.table(3) + (len / PAGE_SIZE - 1) * 8));
        assert_eq!(l.entry_of(3, last + 1), None);
        assert_eq!(l.entry_of(3, first - 1), None);
        assert!(l.entry_of(3, last).unwrap() + 8 <= l.table(4));
    }

    #[test]
    fn page_pieces_split_at_page_boundaries() {
        let v: std::vec::Vec<_> = page_pieces(4000, 5000).collect();
        assert_eq!(v, [(4000, 96), (4096, 4096), (8192, 808)]);
        assert_eq!(page_pieces(0, 0).count(), 0);
        assert_eq!(page_pieces(u64::MAX - 1, 10).count(), 1);
    }
}
