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
    /// The entry the last hit or insert found, as (port, vpn, index): a
    /// lookup of the same page (a buffer used again, as a ping-pong's
    /// message after message) takes it without searching its set. Any other write of an entry
    /// goes through `insert` (which makes its own entry the last) or the
    /// invalidations (which forget it), so it always holds what it says.
    last: Option<(u8, u64, u32)>,
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
            last: None,
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
            for i in 0..self.entries() {
                let mut e = store.get(i);
                e.stamp = 0;
                store.set(i, e);
            }
            self.clock = 1;
        }
        self.clock
    }

    /// The bus page of (port, vpn) if cached (a hit), else None (a miss:
    /// the caller fetches the page-table entry and `insert`s it).
    pub fn lookup(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) -> Option<u64> {
        let found = match self.last {
            Some((p, v, i)) if p == port && v == vpn => Some(i),
            _ => self.find(store, port, vpn),
        };
        match found {
            Some(i) => {
                self.last = Some((port, vpn, i));
                self.hits += 1;
                let stamp = self.touch(store);
                store.set_stamp(i, stamp);
                Some(store.bus_page(i))
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Cache (port, vpn) -> bus_page: over its old entry if it has one,
    /// else in a free way, else over the set's least recently used entry
    /// (an eviction).
    pub fn insert(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64, bus_page: u64) {
        let i = match self.find(store, port, vpn) {
            Some(i) => i,
            None => {
                let base = self.set_of(port, vpn) * self.ways;
                let free = (base..base + self.ways).find(|&i| !store.get(i).valid);
                let i = free.unwrap_or_else(|| {
                    self.evictions += 1;
                    (base..base + self.ways).min_by_key(|&i| store.get(i).stamp).unwrap_or(base)
                });
                let old = store.get(i);
                if old.valid {
                    self.count(old.port, false);
                }
                self.count(port, true);
                i
            }
        };
        let stamp = self.touch(store);
        store.set(i, TlbEntry { valid: true, port, vpn, bus_page, stamp });
        self.last = Some((port, vpn, i));
    }

    /// Forget (port, vpn) (its page was deregistered). True if cached.
    pub fn invalidate(&mut self, store: &mut impl TlbStore, port: u8, vpn: u64) -> bool {
        let Some(i) = self.find(store, port, vpn) else { return false };
        self.last = None;
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
        self.last = None;
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::vec;
    use std::vec::Vec;

    struct Mem(Vec<TlbEntry>);

    impl TlbStore for Mem {
        fn get(&self, i: u32) -> TlbEntry {
            self.0[i as usize]
        }
        fn set(&mut self, i: u32, e: TlbEntry) {
            self.0[i as usize] = e;
        }
    }

    fn cache(sets: u32, ways: u32) -> (Tlb, Mem) {
        let t = Tlb::new(sets, ways);
        let m = Mem(vec![TlbEntry::default(); t.entries() as usize]);
        (t, m)
    }

    #[test]
    fn a_miss_then_an_insert_then_hits() {
        let (mut t, mut m) = cache(4, 2);
        assert_eq!(t.lookup(&mut m, 1, 42), None);
        t.insert(&mut m, 1, 42, 0x777);
        assert_eq!(t.lookup(&mut m, 1, 42), Some(0x777));
        assert_eq!(t.lookup(&mut m, 1, 42), Some(0x777));
        assert_eq!(t.counts(), TlbCounts { hits: 2, misses: 1, evictions: 0 });
    }

    #[test]
    fn ports_do_not_share_translations() {
        let (mut t, mut m) = cache(4, 2);
        t.insert(&mut m, 1, 42, 0x100);
        assert_eq!(t.lookup(&mut m, 2, 42), None);
        t.insert(&mut m, 2, 42, 0x200);
        assert_eq!(t.lookup(&mut m, 1, 42), Some(0x100));
        assert_eq!(t.lookup(&mut m, 2, 42), Some(0x200));
    }

    #[test]
    fn a_full_set_evicts_its_least_recently_used_entry() {
        // One set of two ways: every page maps to it.
        let (mut t, mut m) = cache(1, 2);
        t.insert(&mut m, 0, 1, 10);
        t.insert(&mut m, 0, 2, 20);
        assert_eq!(t.lookup(&mut m, 0, 1), Some(10)); // 2 is now the older
        t.insert(&mut m, 0, 3, 30);
        assert_eq!(t.evictions, 1);
        assert_eq!(t.lookup(&mut m, 0, 2), None);
        assert_eq!(t.lookup(&mut m, 0, 1), Some(10));
        assert_eq!(t.lookup(&mut m, 0, 3), Some(30));
    }

    #[test]
    fn an_insert_over_a_cached_page_replaces_it_without_evicting() {
        let (mut t, mut m) = cache(1, 2);
        t.insert(&mut m, 0, 1, 10);
        t.insert(&mut m, 0, 1, 11);
        t.insert(&mut m, 0, 2, 20);
        assert_eq!((t.evictions, t.lookup(&mut m, 0, 1)), (0, Some(11)));
    }

    #[test]
    fn invalidated_pages_and_closed_ports_are_gone() {
        let (mut t, mut m) = cache(8, 2);
        for v in 0..6 {
            t.insert(&mut m, 3, v, 100 + v);
            t.insert(&mut m, 4, v, 200 + v);
        }
        assert!(t.invalidate(&mut m, 3, 2));
        assert!(!t.invalidate(&mut m, 3, 2));
        assert_eq!(t.lookup(&mut m, 3, 2), None);
        assert_eq!(t.invalidate_port(&mut m, 4), 6);
        assert!((0..6).all(|v| t.lookup(&mut m, 4, v).is_none()));
        assert_eq!(t.lookup(&mut m, 3, 5), Some(105));
    }

    #[test]
    fn the_use_clock_wrapping_keeps_every_translation() {
        let (mut t, mut m) = cache(1, 2);
        t.clock = u32::MAX - 1;
        t.insert(&mut m, 0, 1, 10);
        t.insert(&mut m, 0, 2, 20); // the clock wraps here
        assert_eq!(t.lookup(&mut m, 0, 1), Some(10));
        assert_eq!(t.lookup(&mut m, 0, 2), Some(20));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Lookup(u8, u64),
        Map(u8, u64, u64),
        Unmap(u8, u64),
        Close(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let port = 0u8..3;
        let vpn = 0u64..24;
        prop_oneof![
            4 => (port.clone(), vpn.clone()).prop_map(|(p, v)| Op::Lookup(p, v)),
            3 => (port.clone(), vpn.clone(), any::<u32>()).prop_map(|(p, v, b)| Op::Map(p, v, b as u64)),
            1 => (port.clone(), vpn).prop_map(|(p, v)| Op::Unmap(p, v)),
            1 => port.prop_map(Op::Close),
        ]
    }

    proptest! {
        /// Against the page tables themselves (a map the privileged side
        /// writes, invalidating the cache as it goes): a hit is always the
        /// current translation, a miss is filled from the table, and every
        /// lookup is a hit or a miss.
        #[test]
        fn a_hit_is_never_a_stale_translation(
            sets in prop_oneof![Just(1u32), Just(2), Just(8)],
            ways in 1u32..4,
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let (mut t, mut m) = cache(sets, ways);
            let mut table: HashMap<(u8, u64), u64> = HashMap::new();
            let mut lookups = 0;
            for o in ops {
                match o {
                    Op::Lookup(p, v) => {
                        lookups += 1;
                        match t.lookup(&mut m, p, v) {
                            Some(b) => prop_assert_eq!(Some(&b), table.get(&(p, v))),
                            None => {
                                if let Some(&b) = table.get(&(p, v)) {
                                    t.insert(&mut m, p, v, b);
                                }
                            }
                        }
                    }
                    Op::Map(p, v, b) => {
                        table.insert((p, v), b);
                        t.invalidate(&mut m, p, v);
                    }
                    Op::Unmap(p, v) => {
                        table.remove(&(p, v));
                        t.invalidate(&mut m, p, v);
                    }
                    Op::Close(p) => {
                        table.retain(|&(q, _), _| q != p);
                        t.invalidate_port(&mut m, p);
                    }
                }
                // The last entry found still holds its page.
                if let Some((p, v, i)) = t.last {
                    prop_assert!(m.holds(i, p, v), "the last entry found went stale");
                }
                let cached = (0..t.entries()).filter(|&i| m.get(i).valid).count() as u32;
                prop_assert!(cached <= t.entries());
                // Each port's count of valid entries is the store's.
                for q in 0..3u8 {
                    let n = (0..t.entries())
                        .filter(|&i| m.get(i).valid && m.get(i).port == q)
                        .count() as u32;
                    prop_assert_eq!(t.live[q as usize], n);
                }
            }
            prop_assert_eq!(t.hits + t.misses, lookups);
        }
    }
}
