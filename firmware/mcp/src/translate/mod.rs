//! Address translation: a port's virtual address to a host bus address.
//!
//! Each port's page table is in host memory (`nic_abi::page_table`: one
//! 8-byte entry per page of the port's slice, written by the privileged
//! side only). The firmware keeps recent translations in a cache in SRAM
//! (`map::TLB`, logic in [`crate::tlb`]); a translation not cached is a
//! miss: the firmware reads the line of `LINE_PTES` entries around it by
//! host-DMA into `map::PT_LINES`, and the machine that asked waits
//! ([`Xlat::Wait`]) and asks again once the line is in. What a miss costs
//! is the host-DMA engine's price of a line read (setup + 64 bytes, from
//! the profile); how large the cache is, the profile says too
//! (`regs::TLB_SETS` x `regs::TLB_WAYS`).
//!
//! A read line stays in its slot until the slot is needed again, so an
//! entry that is not valid is answered ([`Xlat::Fault`]) without reading
//! it again. Whoever clears or changes entries of a port's table bumps the
//! port's `PT_GEN`: the next translation for that port (or the next pass,
//! `sync_tables`) forgets the port's cached entries and lines, discards
//! lines still being read, and writes the generation to `PT_ACK`. Whoever
//! only adds entries (a registration) bumps `PT_ADDED`: the port's lines
//! go (they may hold the entries as they were, not valid), its cached
//! translations stay.
//!
//! Every host-DMA the machines post goes through here, so a port reaches
//! only memory it registered, and only inside its slice.

mod aliases;
mod line;
mod ranges;
mod slices;

use aliases::table_index;
use line::{Line, LineState, Version, NO_LINE};
pub use ranges::{Piece, MAX_PIECES};
use slices::bus_in_slice;

use crate::hw::Hw;
use crate::records::HdmaAction;
use crate::shared::Shared;
use crate::tlb::{Tlb, TlbEntry, TlbStore};
use nic_abi::map;
use nic_abi::page_table::{pte_bus_page, LINE_BYTES, LINE_PTES, PTE_SIZE};
use nic_abi::port::{port_reg, PT_ACK, PT_ADDED, PT_GEN, PT_HINT, PT_HINT_PAGES};
use nic_abi::regs;
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::{NUM_PORTS, PAGE_SIZE};

/// The answer to a translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xlat {
    /// The bus address.
    Bus(u64),
    /// Not known yet: its page-table line is being read. Ask again later.
    Wait,
    /// Not registered by the port (or outside its slice).
    Fault,
}

/// The cache's default shape when the profile gives none.
const DEFAULT_SETS: u32 = 256;
const DEFAULT_WAYS: u32 = 4;

/// Lines read ahead of a registration's first descriptor.
const AHEAD_LINES: u64 = 4;

/// Translations that waited for a line: the retry that then hits is the
/// same miss, not a hit.
const MISSED_LEN: usize = 4;

/// The translation cache and the page-table lines being read into it.
/// (`repr(C)`: what a hit reads first, the lines being read last.)
#[repr(C)]
pub struct Translator {
    tlb: Tlb,
    /// The slot the next read takes when none is free (round robin).
    next_line: u8,
    missed_at: u8,
    /// Entries of `missed` in use (none: a hit looks at none of them).
    missed_live: u8,
    /// The version of each port's table the cache holds.
    versions: [Version; NUM_PORTS],
    /// Each port's slice of host memory (base, bytes) as the privileged
    /// side recorded it (`regs::PORT_SLICES`), read at start and again
    /// when the port opens ([`Translator::read_slice`]): the device writes
    /// them when it is made, so a translation checks against these with
    /// no register read.
    slices: [(u64, u64); NUM_PORTS],
    missed: [(u8, u64); MISSED_LEN],
    lines: [Line; map::PT_LINES_LEN as usize],
}

/// The cache's entries in SRAM (`map::TLB`): vpn u64, bus page u64, stamp
/// u32, port u8, valid u8.
struct SramTlb<'a, H: Hw>(&'a mut H);

// An entry is three aligned words (`map::TLB_ENTRY_SIZE` = 24, the array
// 8-aligned): the page number, the bus page, then the stamp (bytes 16-19),
// the port (20) and the valid flag (21). Word loads and stores, not a
// byte copy and a decode: a lookup reads every way of a set.
const _: () = assert!(map::TLB_ENTRY_SIZE == 24 && map::TLB.is_multiple_of(8));

impl<H: Hw> TlbStore for SramTlb<'_, H> {
    #[inline]
    fn get(&self, i: u32) -> TlbEntry {
        let at = map::tlb_entry(i);
        let last = self.0.load_ram_u64(at + 16);
        TlbEntry {
            valid: (last >> 40) as u8 != 0,
            port: (last >> 32) as u8,
            vpn: self.0.load_ram_u64(at),
            bus_page: self.0.load_ram_u64(at + 8),
            stamp: last as u32,
        }
    }

    #[inline]
    fn set(&mut self, i: u32, e: TlbEntry) {
        let at = map::tlb_entry(i);
        self.0.store_ram_u64(at, e.vpn);
        self.0.store_ram_u64(at + 8, e.bus_page);
        let last = e.stamp as u64 | (e.port as u64) << 32 | (e.valid as u64) << 40;
        self.0.store_ram_u64(at + 16, last);
    }

    /// The page number first: a way of another page is one load.
    #[inline]
    fn holds(&self, i: u32, port: u8, vpn: u64) -> bool {
        let at = map::tlb_entry(i);
        if self.0.load_ram_u64(at) != vpn {
            return false;
        }
        let last = self.0.load_ram_u64(at + 16);
        (last >> 40) as u8 != 0 && (last >> 32) as u8 == port
    }

    #[inline]
    fn bus_page(&self, i: u32) -> u64 {
        self.0.load_ram_u64(map::tlb_entry(i) + 8)
    }

    /// The stamp's half of the last word, the rest as it was.
    #[inline]
    fn set_stamp(&mut self, i: u32, stamp: u32) {
        let at = map::tlb_entry(i) + 16;
        let last = self.0.load_ram_u64(at);
        self.0.store_ram_u64(at, (last & !0xffff_ffff) | stamp as u64);
    }
}

impl Translator {
    pub const fn new() -> Translator {
        Translator {
            tlb: Tlb::new(DEFAULT_SETS, DEFAULT_WAYS),
            lines: [NO_LINE; map::PT_LINES_LEN as usize],
            next_line: 0,
            versions: [Version { gen: 0, added: 0 }; NUM_PORTS],
            slices: [(0, 0); NUM_PORTS],
            missed: [(u8::MAX, 0); MISSED_LEN],
            missed_at: 0,
            missed_live: 0,
        }
    }

    /// At boot: the cache's shape from the configuration (capped to what
    /// `map::TLB` holds), every entry empty, every port's generation taken
    /// as it is and acknowledged.
    pub fn init(&mut self, hw: &mut impl Hw) {
        let mut sets = match hw.reg(regs::TLB_SETS) {
            0 => DEFAULT_SETS,
            s => s,
        };
        let ways = match hw.reg(regs::TLB_WAYS) {
            0 => DEFAULT_WAYS,
            w => w.min(map::TLB_MAX),
        };
        // A power of two of sets, no more than the region holds.
        if !sets.is_power_of_two() {
            sets = sets.checked_next_power_of_two().unwrap_or(map::TLB_MAX) / 2;
        }
        while sets > 1 && sets * ways > map::TLB_MAX {
            sets /= 2;
        }
        let ways = ways.min(map::TLB_MAX / sets).max(1);
        *self = Translator::new();
        self.tlb = Tlb::new(sets.max(1), ways);
        for i in 0..self.tlb.entries() {
            SramTlb(hw).set(i, TlbEntry::default());
        }
        for p in 0..NUM_PORTS {
            self.versions[p] = version(hw, p);
            hw.store_u32(port_reg(p, PT_ACK), self.versions[p].gen);
            self.read_slice(hw, p);
        }
    }

    /// Port `p`'s table is at version `v`: forget what it no longer says:
    /// the lines read (they may hold entries not valid then) and, when
    /// `all` (entries were cleared or changed, or the port closed), every
    /// cached translation of the port.
    fn flush(&mut self, hw: &mut impl Hw, p: usize, v: Version, all: bool) {
        if all {
            self.tlb.invalidate_port(&mut SramTlb(hw), p as u8);
        }
        for l in self.lines.iter_mut() {
            if l.port as usize == p && l.state == LineState::Ready {
                *l = NO_LINE;
            }
        }
        self.versions[p] = v;
        hw.store_u32(port_reg(p, PT_ACK), v.gen);
    }

    /// Take port `p`'s current table version (flushing if it moved).
    /// True when entries were added since: the caller may read the lines
    /// the driver's hint names ahead.
    /// (Inline: on nearly every call the table is as it was, two loads
    /// and a compare; the rest is out of line.)
    #[inline(always)]
    fn sync(&mut self, hw: &mut impl Hw, p: usize) -> bool {
        let v = version(hw, p);
        if v == self.versions[p] {
            return false;
        }
        self.moved(hw, p, v)
    }

    /// Port `p`'s table moved to `v`: flush what it invalidates.
    #[inline(never)]
    fn moved(&mut self, hw: &mut impl Hw, p: usize, v: Version) -> bool {
        let (added, cleared) = (v.added != self.versions[p].added, v.gen != self.versions[p].gen);
        self.flush(hw, p, v, cleared);
        added
    }
}

impl Default for Translator {
    fn default() -> Self {
        Translator::new()
    }
}

impl Shared {
    /// Once a pass: acknowledge table changes of open ports nothing
    /// translated for (a deregistering driver waits for the
    /// acknowledgement), and read ahead for new registrations.
    pub fn sync_tables(&mut self, hw: &mut impl Hw) {
        // Open ports only: a closed port translates nothing and its cache
        // was flushed when it closed (its first translation syncs anyway).
        for p in 0..NUM_PORTS {
            if self.ports[p].open {
                self.sync_port(hw, p);
            }
        }
    }

    /// Take port `p`'s table as it is now; after a registration, read
    /// ahead what the driver's hint names.
    fn sync_port(&mut self, hw: &mut impl Hw, p: usize) {
        if self.xlat.sync(hw, p) {
            self.read_ahead(hw, p);
        }
    }

    /// Entries were added to port `p`'s table: read the lines of the
    /// first pages the driver's hint names (at most `AHEAD_LINES`), so a
    /// descriptor naming them finds them cached.
    fn read_ahead(&mut self, hw: &mut impl Hw, p: usize) {
        let vpn = hw.load_u64(port_reg(p, PT_HINT));
        let pages = (hw.load_u32(port_reg(p, PT_HINT_PAGES)) as u64).min(AHEAD_LINES * 8);
        let mut at = 0;
        while at < pages.max(1) {
            let v = vpn.saturating_add(at).saturating_mul(PAGE_SIZE);
            if self.line_of(hw, p as u8, v) == Xlat::Fault {
                return;
            }
            at += LINE_PTES as u64;
        }
    }

    /// Bus address of `port`'s virtual address `vaddr`, with the port's
    /// table as the driver left it (taken again first: `sync_port`).
    pub fn translate(&mut self, hw: &mut impl Hw, port: u8, vaddr: u64) -> Xlat {
        if port as usize >= NUM_PORTS {
            return Xlat::Fault;
        }
        self.sync_port(hw, port as usize);
        self.translate_synced(hw, port, vaddr)
    }

    /// `translate` with the port's table as last taken: at the start of
    /// every pass the host wrote anything (`sync_tables`) and at every
    /// range check (`registered`). A packet's payload was range-checked
    /// when its descriptor was taken, so its pieces need no new look: a
    /// table changed since then is taken at the next pass, before the
    /// change is acknowledged (the driver reuses nothing before that).
    fn translate_synced(&mut self, hw: &mut impl Hw, port: u8, vaddr: u64) -> Xlat {
        let p = port as usize;
        if p >= NUM_PORTS {
            return Xlat::Fault;
        }
        let vpn = vaddr / PAGE_SIZE;
        let x = &mut self.xlat;
        let slot =
            if x.missed_live == 0 { None } else { x.missed.iter().position(|&m| m == (port, vpn)) };
        if let Some(page) = x.tlb.lookup(&mut SramTlb(hw), port, vpn) {
            match slot {
                // The retry of a miss: counted as the miss it was.
                Some(i) => {
                    x.missed[i] = (u8::MAX, 0);
                    x.missed_live -= 1;
                }
                None => crate::shared::Stats::bump(hw, Stat::TlbHits, 1),
            }
            return bus_in_slice(x, p, page, vaddr);
        }
        // Not cached (a page outside the table never is: `line_of`
        // refuses it).
        self.line_of(hw, port, vaddr)
    }

    /// `port`'s virtual address `vaddr` is not cached: its page's entry
    /// from the line read already, else a read of that line started
    /// (`Wait`).
    fn line_of(&mut self, hw: &mut impl Hw, port: u8, vaddr: u64) -> Xlat {
        let p = port as usize;
        let vpn = vaddr / PAGE_SIZE;
        let Some(index) = table_index(hw, p, vpn) else { return Xlat::Fault };
        let x = &mut self.xlat;
        // The line: its first entry's index and virtual page.
        let line_index = index - index % LINE_PTES as u64;
        let first = vpn - index % LINE_PTES as u64;
        let version = x.versions[p];
        let here = |l: &Line| {
            l.port == port
                && l.first_vpn == first
                && l.first_index == line_index
                && l.version == version
        };
        if let Some(i) = x.lines.iter().position(|l| l.state != LineState::Free && here(l)) {
            if x.lines[i].state == LineState::Reading {
                return Xlat::Wait;
            }
            // Read already (its valid entries were cached, and this one
            // since let go of, or it is not valid).
            let e = hw.load_u64(map::pt_line(i as u32) + (vpn - first) as u32 * PTE_SIZE);
            let Some(page) = pte_bus_page(e) else { return Xlat::Fault };
            x.tlb.insert(&mut SramTlb(hw), port, vpn, page);
            return bus_in_slice(x, p, page, vaddr);
        }
        // A miss: read the line, if a slot and the engine have room.
        if self.hdma.space() == 0 {
            return Xlat::Wait;
        }
        let i = match x.lines.iter().position(|l| l.state == LineState::Free) {
            Some(i) => i,
            None => {
                let n = x.lines.len();
                let Some(k) = (0..n)
                    .map(|k| (x.next_line as usize + k) % n)
                    .find(|&k| x.lines[k].state == LineState::Ready)
                else {
                    return Xlat::Wait; // every slot is being read
                };
                x.next_line = ((k + 1) % n) as u8;
                k
            }
        };
        let entries = hw.load_u64(regs::reg(regs::port_slice_len(p))) / PAGE_SIZE;
        let count = (entries - line_index).min(LINE_PTES as u64) as u32;
        let table = hw.load_u64(regs::reg(regs::port_pt_bus(p)));
        let Some(host) = line_index
            .checked_mul(PTE_SIZE as u64)
            .and_then(|o| table.checked_add(o))
            .filter(|h| h.checked_add(LINE_BYTES as u64).is_some())
        else {
            return Xlat::Fault;
        };
        // Entries past the table's end read as not valid.
        hw.write(map::pt_line(i as u32), &[0u8; LINE_BYTES as usize]);
        x.lines[i] = Line {
            state: LineState::Reading,
            port,
            first_vpn: first,
            first_index: line_index,
            version,
        };
        if x.missed[x.missed_at as usize].0 == u8::MAX {
            x.missed_live += 1;
        }
        x.missed[x.missed_at as usize] = (port, vpn);
        x.missed_at = (x.missed_at + 1) % MISSED_LEN as u8;
        let cmd = HostDmaCmd {
            dir: DmaDir::HostToSram,
            len: count * PTE_SIZE,
            sram: map::pt_line(i as u32),
            host,
            cookie: i as u64,
        };
        self.hdma.post(hw, cmd, HdmaAction::PtLine(i as u8));
        crate::shared::Stats::bump(hw, Stat::TlbMisses, 1);
        Xlat::Wait
    }

    /// Page-table line `i` is in SRAM: cache its valid entries, unless the
    /// table changed since it was asked for.
    #[inline(never)]
    pub fn pt_line_read(&mut self, hw: &mut impl Hw, i: u8) {
        let x = &mut self.xlat;
        let Some(l) = x.lines.get(i as usize).copied() else { return };
        if l.state != LineState::Reading {
            return;
        }
        let p = l.port as usize;
        x.sync(hw, p);
        if l.version != x.versions[p] {
            x.lines[i as usize] = NO_LINE;
            return;
        }
        x.lines[i as usize].state = LineState::Ready;
        let before = x.tlb.evictions;
        for k in 0..LINE_PTES {
            let e = hw.load_u64(map::pt_line(i as u32) + k * PTE_SIZE);
            let vpn = l.first_vpn + k as u64;
            // (Only the pages that translate through this entry: a line
            // read for an alias may hold entries its neighbours reach at
            // other pages, or none.)
            let mine = table_index(hw, p, vpn) == Some(l.first_index + k as u64);
            if let (Some(page), true) = (pte_bus_page(e), mine) {
                x.tlb.insert(&mut SramTlb(hw), l.port, vpn, page);
            }
        }
        let evicted = x.tlb.evictions - before;
        crate::shared::Stats::bump(hw, Stat::TlbEvictions, evicted);
    }

    /// Port `p` closed: its cached translations go (a port opened again
    /// later registers its memory again).
    pub fn port_tables_closed(&mut self, hw: &mut impl Hw, p: usize) {
        self.xlat.flush(hw, p, version(hw, p), true);
    }
}

/// Where port `p`'s table stands.
fn version(hw: &impl Hw, p: usize) -> Version {
    Version { gen: hw.load_u32(port_reg(p, PT_GEN)), added: hw.load_u32(port_reg(p, PT_ADDED)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::SliceHw;

    #[test]
    fn the_sram_cache_answers_its_word_reads_as_its_whole_entries_say() {
        let mut sram = std::vec![0u8; map::SRAM_MIN as usize];
        let mut hw = SliceHw::new(&mut sram);
        let mut store = SramTlb(&mut hw);
        let e = TlbEntry { valid: true, port: 3, vpn: 0x1234_5678, bus_page: 0xabcd, stamp: 7 };
        store.set(5, e);
        store.set(6, TlbEntry { valid: false, ..e });
        store.set(7, TlbEntry { port: 4, ..e });
        assert!(store.holds(5, 3, 0x1234_5678));
        assert!(!store.holds(5, 3, 0x1234_5679), "another page");
        assert!(!store.holds(6, 3, 0x1234_5678), "not valid");
        assert!(!store.holds(7, 3, 0x1234_5678), "another port's");
        assert_eq!(store.bus_page(5), 0xabcd);
        store.set_stamp(5, 0xffff_fff0);
        assert_eq!(store.get(5), TlbEntry { stamp: 0xffff_fff0, ..e });
    }
}
