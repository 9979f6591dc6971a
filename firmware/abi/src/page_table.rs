//! Per-port page tables (after GM's page hash table). Port p's table is an
//! open-addressing hash table of `map::PAGE_TABLE_ENTRIES` entries at
//! `map::page_table(p)`, written only by the driver (registration) and read
//! only by the firmware (translation of virtual addresses to bus addresses).
//! A port can reach only what it registered.
//!
//! Entry (16 bytes): `word0 u64 = vpn << 2 | state`, `word1 u64 = bus page`.
//! State 0 = empty (ends a probe), 1 = valid, 2 = deleted (a tombstone:
//! probing continues). Probing is linear from [`home_slot`], at most
//! `PAGE_TABLE_ENTRIES` steps, so every lookup is bounded.

use crate::le::*;
use crate::map::PAGE_TABLE_ENTRIES;
use crate::PAGE_SIZE;

pub const PTE_SIZE: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PteState {
    Empty,
    Valid,
    Deleted,
}

/// One page-table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pte {
    pub state: PteState,
    /// Virtual page number.
    pub vpn: u64,
    /// Bus page number (bus address >> 12).
    pub bus_page: u64,
}

impl Pte {
    pub const EMPTY: Pte = Pte { state: PteState::Empty, vpn: 0, bus_page: 0 };

    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        let st = match self.state {
            PteState::Empty => 0,
            PteState::Valid => 1,
            PteState::Deleted => 2,
        };
        put_u64(b, 0, (self.vpn << 2) | st);
        put_u64(b, 8, self.bus_page);
    }

    /// Decode an entry; an unknown state reads as empty (stops probing).
    #[inline]
    pub fn decode(b: &[u8]) -> Pte {
        let w0 = get_u64(b, 0);
        let state = match w0 & 3 {
            1 => PteState::Valid,
            2 => PteState::Deleted,
            _ => PteState::Empty,
        };
        Pte { state, vpn: w0 >> 2, bus_page: get_u64(b, 8) }
    }
}

/// Where probing for `vpn` starts.
#[inline]
pub fn home_slot(vpn: u64) -> u32 {
    let h = vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 40) as u32 & (PAGE_TABLE_ENTRIES - 1)
}

/// Find the bus page of `vpn`. `read(i)` returns entry i.
pub fn lookup(mut read: impl FnMut(u32) -> Pte, vpn: u64) -> Option<u64> {
    let mut i = home_slot(vpn);
    for _ in 0..PAGE_TABLE_ENTRIES {
        let e = read(i);
        match e.state {
            PteState::Empty => return None,
            PteState::Valid if e.vpn == vpn => return Some(e.bus_page),
            _ => {}
        }
        i = (i + 1) & (PAGE_TABLE_ENTRIES - 1);
    }
    None
}

/// The slot where `vpn` should be written: its current slot if present,
/// else the first deleted or empty slot on its probe path. None: full.
pub fn insert_slot(mut read: impl FnMut(u32) -> Pte, vpn: u64) -> Option<u32> {
    let mut i = home_slot(vpn);
    let mut free = None;
    for _ in 0..PAGE_TABLE_ENTRIES {
        let e = read(i);
        match e.state {
            PteState::Valid if e.vpn == vpn => return Some(i),
            PteState::Valid => {}
            PteState::Deleted => {
                if free.is_none() {
                    free = Some(i);
                }
            }
            PteState::Empty => return Some(free.unwrap_or(i)),
        }
        i = (i + 1) & (PAGE_TABLE_ENTRIES - 1);
    }
    free
}

/// The slot holding `vpn`, to be overwritten with a tombstone.
pub fn find_slot(mut read: impl FnMut(u32) -> Pte, vpn: u64) -> Option<u32> {
    let mut i = home_slot(vpn);
    for _ in 0..PAGE_TABLE_ENTRIES {
        let e = read(i);
        match e.state {
            PteState::Empty => return None,
            PteState::Valid if e.vpn == vpn => return Some(i),
            _ => {}
        }
        i = (i + 1) & (PAGE_TABLE_ENTRIES - 1);
    }
    None
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

    struct Table(std::vec::Vec<Pte>);

    impl Table {
        fn new() -> Table {
            Table(std::vec![Pte::EMPTY; PAGE_TABLE_ENTRIES as usize])
        }
        fn insert(&mut self, vpn: u64, bus: u64) -> bool {
            match insert_slot(|i| self.0[i as usize], vpn) {
                Some(i) => {
                    self.0[i as usize] = Pte { state: PteState::Valid, vpn, bus_page: bus };
                    true
                }
                None => false,
            }
        }
        fn remove(&mut self, vpn: u64) -> bool {
            match find_slot(|i| self.0[i as usize], vpn) {
                Some(i) => {
                    self.0[i as usize].state = PteState::Deleted;
                    true
                }
                None => false,
            }
        }
        fn get(&self, vpn: u64) -> Option<u64> {
            lookup(|i| self.0[i as usize], vpn)
        }
    }

    #[test]
    fn entries_round_trip() {
        let e = Pte { state: PteState::Valid, vpn: 0x7_0000_0001, bus_page: 99 };
        let mut b = [0u8; 16];
        e.encode(&mut b);
        assert_eq!(Pte::decode(&b), e);
        assert_eq!(Pte::decode(&[]), Pte::EMPTY);
    }

    #[test]
    fn insert_lookup_remove() {
        let mut t = Table::new();
        for v in 0..500u64 {
            assert!(t.insert(0x1000 + v * 7, v));
        }
        for v in 0..500u64 {
            assert_eq!(t.get(0x1000 + v * 7), Some(v));
        }
        assert_eq!(t.get(5), None);
        // Removing leaves tombstones; entries behind them stay reachable.
        for v in (0..500u64).step_by(2) {
            assert!(t.remove(0x1000 + v * 7));
        }
        for v in 0..500u64 {
            let want = if v % 2 == 0 { None } else { Some(v) };
            assert_eq!(t.get(0x1000 + v * 7), want);
        }
        assert!(!t.remove(0x1000));
    }

    #[test]
    fn full_table_refuses_and_lookup_terminates() {
        let mut t = Table::new();
        for v in 0..PAGE_TABLE_ENTRIES as u64 {
            assert!(t.insert(v, v));
        }
        assert!(!t.insert(1 << 30, 1));
        assert_eq!(t.get(1 << 30), None);
        // Reinserting an existing page updates it in place.
        assert!(t.insert(3, 33));
        assert_eq!(t.get(3), Some(33));
    }

    #[test]
    fn page_pieces_split_at_page_boundaries() {
        let v: std::vec::Vec<_> = page_pieces(4000, 5000).collect();
        assert_eq!(v, [(4000, 96), (4096, 4096), (8192, 808)]);
        assert_eq!(page_pieces(0, 0).count(), 0);
        assert_eq!(page_pieces(u64::MAX - 1, 10).count(), 1);
    }
}
