//! Ranges over pages: whether a whole range is registered (a
//! descriptor's buffer, checked once and resumed after a wait), and a
//! packet's payload as host-DMA pieces, one per page.

use super::{LineState, SramTlb, Xlat};
use crate::hw::Hw;
use crate::shared::Shared;
use nic_abi::page_table::{page_pieces, LINE_PTES};
use nic_abi::stats::Stat;
use nic_abi::{NUM_PORTS, PAGE_SIZE};

/// The most page pieces a packet's payload takes (an MTU over pages).
pub const MAX_PIECES: usize = 4;

/// One page's part of a transfer: `len` bytes at bus address `bus`, `at`
/// bytes into the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub bus: u64,
    pub len: u32,
    pub at: u32,
}

impl Shared {
    /// Is every byte of `[vaddr, vaddr + len)` registered by `port`?
    /// `from` bytes at the start are known to be (a check resumed after a
    /// wait); on `Wait`, it says how far the check got.
    pub fn registered(
        &mut self,
        hw: &mut impl Hw,
        port: u8,
        vaddr: u64,
        len: u64,
        from: &mut u64,
    ) -> Xlat {
        let Some(end) = vaddr.checked_add(len) else { return Xlat::Fault };
        // The table as the driver left it, once for the whole range.
        if (port as usize) < NUM_PORTS {
            self.sync_port(hw, port as usize);
        }
        let start = vaddr.saturating_add(*from).min(end);
        if self.span(hw, port, start, end - start).is_some() {
            *from = len;
            return Xlat::Bus(0);
        }
        for (v, n) in page_pieces(start, end - start) {
            match self.translate_synced(hw, port, v) {
                Xlat::Bus(_) => *from += n,
                Xlat::Wait => {
                    self.read_range_ahead(hw, port, v, end);
                    return Xlat::Wait;
                }
                Xlat::Fault => return Xlat::Fault,
            }
        }
        Xlat::Bus(0)
    }

    /// The bus address of `[vaddr, vaddr + len)` of `port` when all its
    /// pages are known at consecutive bus pages (one of the cache's runs:
    /// a buffer whose pages were looked up before), inside the port's
    /// slice: a hit per page, with no search. None: look page by page
    /// (nothing counted), as also while a retried miss is owed its count.
    #[inline]
    fn span(&mut self, hw: &mut impl Hw, port: u8, vaddr: u64, len: u64) -> Option<u64> {
        let x = &mut self.xlat;
        if len == 0 || x.missed_live != 0 {
            return None;
        }
        let vpn = vaddr / PAGE_SIZE;
        let pages = (vaddr % PAGE_SIZE + len).div_ceil(PAGE_SIZE);
        // A page is cached as its table entry says, inside the slice or
        // not: the range is used only inside the port's slice, as each
        // page looked up is (`bus_in_slice`).
        let (tlb, slices) = (&mut x.tlb, &x.slices);
        let inside = |page: u64| {
            let (Some(start), Some(bytes)) =
                (page.checked_mul(PAGE_SIZE), pages.checked_mul(PAGE_SIZE))
            else {
                return false;
            };
            super::slices::within(slices, port, start, bytes)
        };
        let page = tlb.span(&mut SramTlb(hw), (port, vpn, pages), inside)?;
        crate::shared::Stats::bump(hw, Stat::TlbHits, pages);
        Some(page * PAGE_SIZE + vaddr % PAGE_SIZE)
    }

    /// A range check waits at `vaddr`: read the lines of the pages after
    /// it (up to `end`) into the line slots that are free, so the check
    /// does not wait once per line.
    fn read_range_ahead(&mut self, hw: &mut impl Hw, port: u8, vaddr: u64, end: u64) {
        let mut v = (vaddr / PAGE_SIZE + LINE_PTES as u64) * PAGE_SIZE;
        while v < end && self.xlat.lines.iter().any(|l| l.state == LineState::Free) {
            let cached = self.xlat.tlb.contains(&SramTlb(hw), port, v / PAGE_SIZE);
            if !cached && self.line_of(hw, port, v) == Xlat::Fault {
                return;
            }
            v = v.saturating_add(LINE_PTES as u64 * PAGE_SIZE);
        }
    }

    /// A packet's payload (at most an MTU: it spans at most a few pages)
    /// as host-DMA pieces: `Bus` when every page is registered, `Wait`
    /// while a translation is being read, `Fault` when a page is not.
    pub fn pieces(
        &mut self,
        hw: &mut impl Hw,
        port: u8,
        vaddr: u64,
        len: u32,
    ) -> (heapless::Vec<Piece, MAX_PIECES>, Xlat) {
        let mut out = [Piece { bus: 0, len: 0, at: 0 }; MAX_PIECES];
        let (n, x) = self.pieces_into(hw, port, vaddr, len, &mut out);
        (out[..n].iter().copied().collect(), x)
    }

    /// `pieces` into `out`: how many pieces, and the answer. (No vector
    /// returned by value: the fill path's pieces stay in its frame.)
    #[inline]
    pub fn pieces_into(
        &mut self,
        hw: &mut impl Hw,
        port: u8,
        vaddr: u64,
        len: u32,
        out: &mut [Piece; MAX_PIECES],
    ) -> (usize, Xlat) {
        let mut n = 0;
        let mut at = 0u32;
        if let Some(bus) = self.span(hw, port, vaddr, len as u64) {
            // The same pieces, one per page, from the run's pages (and
            // the same answer for more than a packet's).
            for (v, k) in page_pieces(vaddr, len as u64) {
                if n == MAX_PIECES {
                    return (n, Xlat::Fault);
                }
                out[n] = Piece { bus: bus + (v - vaddr), len: k as u32, at };
                n += 1;
                at += k as u32;
            }
            return (n, Xlat::Bus(0));
        }
        let mut wait = false;
        for (v, k) in page_pieces(vaddr, len as u64) {
            match self.translate_synced(hw, port, v) {
                Xlat::Bus(bus) if n < MAX_PIECES => {
                    out[n] = Piece { bus, len: k as u32, at };
                    n += 1;
                }
                Xlat::Wait => wait = true,
                _ => return (n, Xlat::Fault),
            }
            at += k as u32;
        }
        (n, if wait { Xlat::Wait } else { Xlat::Bus(0) })
    }
}
