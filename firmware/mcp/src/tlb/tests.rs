//! The translation cache against a page table model.

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

/// Counts the searches of a set (`holds`).
struct Counted(Mem, core::cell::Cell<u32>);

impl TlbStore for Counted {
    fn get(&self, i: u32) -> TlbEntry {
        self.0.get(i)
    }
    fn set(&mut self, i: u32, e: TlbEntry) {
        self.0.set(i, e)
    }
    fn holds(&self, i: u32, port: u8, vpn: u64) -> bool {
        self.1.set(self.1.get() + 1);
        let e = self.get(i);
        e.valid && e.port == port && e.vpn == vpn
    }
}

#[test]
fn pages_at_consecutive_bus_pages_are_found_without_a_search_and_keep_their_use_order() {
    let (mut t, m) = cache(4, 2);
    let mut m = Counted(m, Default::default());
    for v in 0..6 {
        t.insert(&mut m, 1, 40 + v, 700 + v);
    }
    let before = m.1.get();
    for v in 0..6 {
        assert_eq!(t.lookup(&mut m, 1, 40 + v), Some(700 + v));
    }
    assert_eq!((t.hits, t.misses, m.1.get() - before), (6, 0, 0));
    // Another page is searched for.
    assert_eq!(t.lookup(&mut m, 1, 39), None);
    assert!(m.1.get() > before);
    // Each page's use was stamped: the set's other page is the older.
    let mut s = Mem(vec![TlbEntry::default(); 2]);
    let mut one = Tlb::new(1, 2);
    one.insert(&mut s, 0, 1, 10);
    one.insert(&mut s, 0, 2, 11); // one run: pages 1 and 2
    assert_eq!(one.lookup(&mut s, 0, 1), Some(10));
    one.insert(&mut s, 0, 9, 50); // evicts page 2, the older: the run is cut
    assert_eq!((one.evictions, one.lookup(&mut s, 0, 2)), (1, None));
    assert_eq!(one.lookup(&mut s, 0, 1), Some(10));
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
    /// Pages from a vpn on, at consecutive bus pages (runs form).
    MapRun(u8, u64, u64, u64),
    Unmap(u8, u64),
    Close(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let port = 0u8..3;
    let vpn = 0u64..24;
    prop_oneof![
        4 => (port.clone(), vpn.clone()).prop_map(|(p, v)| Op::Lookup(p, v)),
        3 => (port.clone(), vpn.clone(), any::<u32>()).prop_map(|(p, v, b)| Op::Map(p, v, b as u64)),
        2 => (port.clone(), vpn.clone(), 0u64..64, 1u64..8).prop_map(|(p, v, b, n)| Op::MapRun(p, v, b, n)),
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
                Op::MapRun(p, v, b, n) => {
                    for k in 0..n {
                        table.insert((p, v + k), b + k);
                        t.invalidate(&mut m, p, v + k);
                    }
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
            // Every page of every run is cached at the run's bus page.
            for r in t.runs.iter() {
                for d in 0..r.pages as u64 {
                    let i = t.find(&m, r.port, r.vpn + d);
                    prop_assert!(
                        i.is_some_and(|i| m.bus_page(i) == r.bus + d && i == r.entry[d as usize] as u32),
                        "a run holds a page not cached there: {:?}", r
                    );
                }
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

    /// Against a plain set-associative LRU cache that stamps every use in
    /// its entry (no runs): the same answers, hits, misses and evictions,
    /// op by op. The runs and their deferred stamps change what a hit
    /// costs, never which entry an insert evicts.
    #[test]
    fn runs_evict_exactly_as_stamping_every_use_does(
        sets in prop_oneof![Just(1u32), Just(2), Just(4)],
        ways in 1u32..4,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let (mut t, mut m) = cache(sets, ways);
        let mut plain = Plain::new(&t);
        let mut table: HashMap<(u8, u64), u64> = HashMap::new();
        for o in ops {
            match o {
                Op::Lookup(p, v) => {
                    let got = t.lookup(&mut m, p, v);
                    prop_assert_eq!(got, plain.lookup(p, v));
                    if got.is_none() {
                        if let Some(&b) = table.get(&(p, v)) {
                            t.insert(&mut m, p, v, b);
                            plain.insert(p, v, b);
                        }
                    }
                }
                Op::Map(p, v, b) => {
                    table.insert((p, v), b);
                    t.invalidate(&mut m, p, v);
                    plain.invalidate(p, v);
                }
                Op::MapRun(p, v, b, n) => {
                    for k in 0..n {
                        table.insert((p, v + k), b + k);
                        t.invalidate(&mut m, p, v + k);
                        plain.invalidate(p, v + k);
                    }
                }
                Op::Unmap(p, v) => {
                    table.remove(&(p, v));
                    t.invalidate(&mut m, p, v);
                    plain.invalidate(p, v);
                }
                Op::Close(p) => {
                    table.retain(|&(q, _), _| q != p);
                    t.invalidate_port(&mut m, p);
                    plain.invalidate_port(p);
                }
            }
            prop_assert_eq!((t.hits, t.misses, t.evictions), (plain.hits, plain.misses, plain.evictions));
        }
    }
}

/// The reference for `runs_evict_exactly_as_stamping_every_use_does`: the
/// same sets (the same hash), each use stamped at once.
struct Plain {
    t: Tlb,
    ways: Vec<Option<(u8, u64, u64, u32)>>,
    clock: u32,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl Plain {
    fn new(t: &Tlb) -> Plain {
        Plain {
            t: *t,
            ways: vec![None; t.entries() as usize],
            clock: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    fn set(&self, port: u8, vpn: u64) -> std::ops::Range<usize> {
        let base = (self.t.set_of(port, vpn) * self.t.ways) as usize;
        base..base + self.t.ways as usize
    }

    fn find(&self, port: u8, vpn: u64) -> Option<usize> {
        self.set(port, vpn)
            .find(|&i| matches!(self.ways[i], Some((p, v, ..)) if p == port && v == vpn))
    }

    fn lookup(&mut self, port: u8, vpn: u64) -> Option<u64> {
        match self.find(port, vpn) {
            Some(i) => {
                self.hits += 1;
                self.clock += 1;
                let e = self.ways[i].as_mut().unwrap();
                e.3 = self.clock;
                Some(e.2)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, port: u8, vpn: u64, bus: u64) {
        let i = match self.find(port, vpn) {
            Some(i) => i,
            None => {
                let set = self.set(port, vpn);
                match set.clone().find(|&i| self.ways[i].is_none()) {
                    Some(i) => i,
                    None => {
                        self.evictions += 1;
                        set.min_by_key(|&i| self.ways[i].unwrap().3).unwrap()
                    }
                }
            }
        };
        self.clock += 1;
        self.ways[i] = Some((port, vpn, bus, self.clock));
    }

    fn invalidate(&mut self, port: u8, vpn: u64) {
        if let Some(i) = self.find(port, vpn) {
            self.ways[i] = None;
        }
    }

    fn invalidate_port(&mut self, port: u8) {
        for w in self.ways.iter_mut() {
            if matches!(w, Some((p, ..)) if *p == port) {
                *w = None;
            }
        }
    }
}
