//! A translation cache as pure logic: recently used translations of
//! (port, virtual page) to bus pages, set-associative with least recently
//! used replacement in each set, and the hit, miss and eviction counts the
//! NIC reports. Where the entries live is the caller's ([`TlbStore`]: an
//! array in tests, a region of SRAM in the firmware), so is what a miss
//! costs (fetching the page-table entry from the port's table in host
//! memory). Invalidation is exact: a page a port deregisters, or every
//! page of a port that closes, is gone from the cache at once, so a
//! translation is never used after the privileged side took it back.
//!
//! Beside the sets, a few runs of pages found at consecutive bus pages (a
//! buffer as the driver mapped it): a lookup inside a run, or a whole
//! range in one (`Tlb::span`), needs no search of a set and writes
//! nothing to the store; the uses it notes are written to the entries'
//! stamps before an eviction compares them, so the cache evicts exactly
//! as one that stamps every use (a test holds it to one).
//!
//! The firmware's cache is this over `map::TLB` (`translate/`).

/// One cached translation. `stamp` orders the ways of a set by last use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlbEntry {
    pub valid: bool,
    pub port: u8,
    pub vpn: u64,
    pub bus_page: u64,
    pub stamp: u32,
}

/// Where the entries are kept: `sets * ways` of them, entry `i` of set
/// `s` at index `s * ways + i`.
pub trait TlbStore {
    fn get(&self, i: u32) -> TlbEntry;
    fn set(&mut self, i: u32, e: TlbEntry);

    /// Is entry `i` a valid translation of (port, vpn)? (A store whose
    /// entries are words in memory reads only what it needs to answer.)
    #[inline]
    fn holds(&self, i: u32, port: u8, vpn: u64) -> bool {
        let e = self.get(i);
        e.valid && e.port == port && e.vpn == vpn
    }

    /// Entry `i`'s bus page.
    #[inline]
    fn bus_page(&self, i: u32) -> u64 {
        self.get(i).bus_page
    }

    /// Entry `i` was used: its stamp is now `stamp`.
    #[inline]
    fn set_stamp(&mut self, i: u32, stamp: u32) {
        let mut e = self.get(i);
        e.stamp = stamp;
        self.set(i, e);
    }
}

/// The cache's shape and counters (the entries are in a [`TlbStore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlb {
    sets: u32,
    ways: u32,
    /// Use clock for the stamps (wraps; see `touch`).
    clock: u32,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Valid entries of each port (ports below `LIVE_PORTS`): a port
    /// with none is forgotten without a look at the store, one with some
    /// by a walk that stops at its last.
    live: [u32; LIVE_PORTS],
    /// Runs of pages found cached at consecutive bus pages (a buffer's
    /// pages as the driver mapped them): a lookup inside one is answered
    /// without searching a set or touching the store, as a packet of a
    /// stream whose pages were all found once (by the descriptor's
    /// range check) is. Every page of a run is cached at the bus page
    /// the run says: a run only grows by a page found cached there, and
    /// whatever removes or changes a cached page (`insert` over it or
    /// evicting it, the invalidations) cuts the runs that hold it.
    runs: [Run; RUNS],
    /// The run the next new one replaces (round robin).
    next_run: u8,
}

/// Runs a [`Tlb`] remembers: a sender's buffer and a receiver's several
/// (a stream's receive buffers are used in turn).
const RUNS: usize = 4;

/// The most pages a run holds (a 64 KiB message's pages, and more).
const RUN_PAGES: usize = 32;

/// `pages` pages of `port` from `vpn` on, at bus pages from `bus` on
/// (`pages` 0: none), page `d`'s entry at index `entry[d]` of the store.
/// A page's use through the run is stamped in `used[d]` (0: none since
/// the last settling) and written to its entry only when an eviction
/// compares stamps, or the run goes (`Tlb::settle_stamps`): the order of
/// use is the same as stamping each use in the store, for a store write
/// less a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    port: u8,
    pages: u32,
    vpn: u64,
    bus: u64,
    entry: [u16; RUN_PAGES],
    used: [u32; RUN_PAGES],
}

impl Run {
    const NONE: Run =
        Run { port: 0, pages: 0, vpn: 0, bus: 0, entry: [0; RUN_PAGES], used: [0; RUN_PAGES] };

    /// The stamps of the pages used through the run, into their entries.
    /// (Out of line: only an eviction or a run's end asks for them.)
    #[inline(never)]
    fn settle(&mut self, store: &mut impl TlbStore) {
        for j in 0..(self.pages as usize).min(RUN_PAGES) {
            if self.used[j] != 0 {
                store.set_stamp(self.entry[j] as u32, self.used[j]);
                self.used[j] = 0;
            }
        }
    }

    /// How far into the run (port, vpn) is, if in it.
    #[inline(always)]
    fn offset(&self, port: u8, vpn: u64) -> Option<u64> {
        let d = vpn.wrapping_sub(self.vpn);
        (self.port == port && d < self.pages as u64).then_some(d)
    }
}

/// Ports whose valid entries a [`Tlb`] counts (the NIC's ports); a
/// higher port's are looked for in the whole store.
const LIVE_PORTS: usize = nic_abi::NUM_PORTS;

/// Counts of a [`Tlb`] (what the NIC counters show).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlbCounts {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl Tlb {
    /// A cache of `sets` sets (a power of two) of `ways` ways each.
    pub const fn new(sets: u32, ways: u32) -> Tlb {
        assert!(sets.is_power_of_two() && ways > 0);
        Tlb {
            sets,
            ways,
            clock: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
            live: [0; LIVE_PORTS],
            runs: [Run::NONE; RUNS],
            next_run: 0,
        }
    }

    /// One more (`up`) or one fewer valid entry of `port`.
    fn count(&mut self, port: u8, up: bool) {
        if let Some(n) = self.live.get_mut(port as usize) {
            *n = if up { n.wrapping_add(1) } else { n.saturating_sub(1) };
        }
    }

    /// Entries the store must hold.
    pub const fn entries(&self) -> u32 {
        self.sets * self.ways
    }

    /// Sets of the cache.
    pub const fn sets(&self) -> u32 {
        self.sets
    }

    pub fn counts(&self) -> TlbCounts {
        TlbCounts { hits: self.hits, misses: self.misses, evictions: self.evictions }
    }

    /// The set (port, vpn) maps to.
    fn set_of(&self, port: u8, vpn: u64) -> u32 {
        let h = (vpn ^ (port as u64) << 56).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as u32 & (self.sets - 1)
    }

    /// The index of (port, vpn)'s entry, if cached.
    fn find(&self, store: &impl TlbStore, port: u8, vpn: u64) -> Option<u32> {
        let base = self.set_of(port, vpn) * self.ways;
        (base..base + self.ways).find(|&i| store.holds(i, port, vpn))
    }

    /// Is (port, vpn) cached? (Counts nothing, touches nothing.)
    pub fn contains(&self, store: &impl TlbStore, port: u8, vpn: u64) -> bool {
        self.find(store, port, vpn).is_some()
    }

    /// The next use stamp. When the clock wraps, every stamp restarts at 0
    /// (the order within a set is lost once in 2^32 uses, never the
    /// translations).
    fn touch(&mut self, store: &mut impl TlbStore) -> u32 {
        self.clock = self.clock.wrapping_add(1);
        if self.clock == 0 {
            self.restart_clock(store);
        }
        self.clock
    }

    /// The clock wrapped: every stamp, in the store and in the runs,
    /// starts again (cold: once in 2^32 uses).
    #[cold]
    fn restart_clock(&mut self, store: &mut impl TlbStore) {
        for i in 0..self.entries() {
            let mut e = store.get(i);
            e.stamp = 0;
            store.set(i, e);
        }
        for r in self.runs.iter_mut() {
            r.used = [0; RUN_PAGES];
        }
        self.clock = 1;
    }

    /// Every run's uses into the store's stamps (before stamps are
    /// compared).
    fn settle_stamps(&mut self, store: &mut impl TlbStore) {
        for r in self.runs.iter_mut() {
            r.settle(store);
        }
    }

    /// The bus page of (port, vpn) if cached (a hit), else None (a miss:
    /// the caller fetches the page-table entry and `insert`s it). A page
    /// in a run is a hit with no search of its set and no write to the
    /// store: its use is noted in the run.
    pub fn lookup(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) -> Option<u64> {
        match self.span(store, (port, vpn, 1), |_| true) {
            Some(page) => Some(page),
            None => self.lookup_set(store, port, vpn),
        }
    }

    /// The bus page of (port, vpn) when it and the `pages - 1` pages
    /// after it are all in one run (so at consecutive bus pages) and
    /// `ok` takes that bus page: a hit for each page, each noted as used
    /// (in the run, `Run::used`). None: not known that way, or not `ok`
    /// (nothing counted: `lookup` each page).
    #[inline]
    pub fn span(
        &mut self,
        store: &mut impl TlbStore,
        (port, vpn, pages): (u8, u64, u64),
        ok: impl FnOnce(u64) -> bool,
    ) -> Option<u64> {
        for k in 0..RUNS {
            let r = &self.runs[k];
            let Some(d) = r.offset(port, vpn) else { continue };
            if d.saturating_add(pages) > r.pages as u64 || !ok(r.bus.wrapping_add(d)) {
                return None;
            }
            self.hits += pages;
            for j in d..d + pages {
                let stamp = self.touch(store);
                self.runs[k].used[j as usize] = stamp;
            }
            return Some(self.runs[k].bus.wrapping_add(d));
        }
        None
    }

    /// `lookup` past the runs: the page's set searched (out of line: a
    /// stream's packets find their pages in a run).
    #[inline(never)]
    fn lookup_set(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) -> Option<u64> {
        match self.find(store, port, vpn) {
            Some(i) => {
                self.hits += 1;
                let stamp = self.touch(store);
                store.set_stamp(i, stamp);
                let page = store.bus_page(i);
                self.grow(store, (port, vpn, page), i);
                Some(page)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// (port, vpn) is cached at `page` in entry `i`: the run it continues
    /// grows by it, else it starts a run of its own in place of the
    /// oldest.
    fn grow(&mut self, store: &mut impl TlbStore, (port, vpn, page): (u8, u64, u64), i: u32) {
        let Ok(i) = u16::try_from(i) else { return };
        for r in self.runs.iter_mut() {
            let n = r.pages as u64;
            if r.port == port
                && n != 0
                && (n as usize) < RUN_PAGES
                && vpn == r.vpn.wrapping_add(n)
                && page == r.bus.wrapping_add(n)
            {
                r.entry[n as usize] = i;
                r.pages += 1;
                return;
            }
        }
        let k = self.next_run as usize % RUNS;
        self.runs[k].settle(store);
        let mut entry = [0; RUN_PAGES];
        entry[0] = i;
        self.runs[k] = Run { port, pages: 1, vpn, bus: page, entry, used: [0; RUN_PAGES] };
        self.next_run = ((k + 1) % RUNS) as u8;
    }

    /// (port, vpn)'s cached translation is going or changing: no run
    /// holds it any more (a run that did is forgotten whole).
    fn cut(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) {
        for r in self.runs.iter_mut() {
            if r.offset(port, vpn).is_some() {
                r.settle(store);
                *r = Run::NONE;
            }
        }
    }

    /// Cache (port, vpn) -> bus_page: over its old entry if it has one,
    /// else in a free way, else over the set's least recently used entry
    /// (an eviction).
    pub fn insert(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64, bus_page: u64) {
        let i = match self.find(store, port, vpn) {
            Some(i) => {
                self.cut(store, port, vpn);
                i
            }
            None => {
                let base = self.set_of(port, vpn) * self.ways;
                let free = (base..base + self.ways).find(|&i| !store.get(i).valid);
                let i = free.unwrap_or_else(|| {
                    self.evictions += 1;
                    self.settle_stamps(store);
                    (base..base + self.ways).min_by_key(|&i| store.get(i).stamp).unwrap_or(base)
                });
                let old = store.get(i);
                if old.valid {
                    self.count(old.port, false);
                    self.cut(store, old.port, old.vpn);
                }
                self.count(port, true);
                i
            }
        };
        let stamp = self.touch(store);
        store.set(i, TlbEntry { valid: true, port, vpn, bus_page, stamp });
        self.grow(store, (port, vpn, bus_page), i);
    }

    /// Forget (port, vpn) (its page was deregistered). True if cached.
    pub fn invalidate(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) -> bool {
        let Some(i) = self.find(store, port, vpn) else { return false };
        self.cut(store, port, vpn);
        store.set(i, TlbEntry::default());
        self.count(port, false);
        true
    }

    /// Forget every page of `port` (it closed). Returns how many.
    /// A port with no valid entry costs no look at the store (a port
    /// close used to walk every entry, several times).
    pub fn invalidate_port(&mut self, store: &mut impl TlbStore, port: u8) -> u32 {
        let known = self.live.get(port as usize).copied();
        if known == Some(0) {
            return 0;
        }
        for r in self.runs.iter_mut() {
            if r.port == port {
                *r = Run::NONE;
            }
        }
        let mut n = 0;
        for i in 0..self.entries() {
            if known.is_some_and(|k| n >= k) {
                break;
            }
            let e = store.get(i);
            if e.valid && e.port == port {
                store.set(i, TlbEntry::default());
                n += 1;
            }
        }
        if let Some(k) = self.live.get_mut(port as usize) {
            *k = 0;
        }
        n
    }
}

#[cfg(test)]
mod tests;
