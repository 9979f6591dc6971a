//! Fixed-capacity pools of records, each record named by a typed id
//! ([`Id`]): the MCP's only allocator (no heap). `new` is const so the
//! whole MCP can live in a static on the bare-metal target.
//!
//! A link between records is an `Id` of the record it names, and "none"
//! is `None` of an `Option<Id<_>>` (two bytes, as the id: the id keeps
//! its index plus one in a `NonZeroU16`, whose zero is `None`). A pool is
//! indexed by its own records' ids only: a stream's id where a token's is
//! expected does not compile.

use core::marker::PhantomData;
use core::num::NonZeroU16;

/// The name of a record of kind `T` (`Pool<_, N, T>`): its index in the
/// pool. Made by [`Pool::alloc`] and, where a raw number crosses in (a
/// record in SRAM, a wire field, a const), by [`Id::new`] or
/// [`Id::from_raw`]. It prints (`Debug`) as `Id(index)`; a debugger
/// shows the field inside, the index plus one (`raw`, a `NonZeroU16`; an
/// `Option` of it is 0 for `None`).
pub struct Id<T> {
    raw: NonZeroU16,
    kind: PhantomData<fn() -> T>,
}

/// The raw number of "none" where an optional id crosses into a raw
/// `u16` ([`Id::raw_of`], [`Id::from_raw`]): SRAM layouts, wire fields.
pub const RAW_NONE: u16 = u16::MAX;

impl<T> Id<T> {
    /// Record `i`'s id. `i` must be below [`RAW_NONE`] (a const, or an
    /// index a pool handed out); a raw number from SRAM or the wire goes
    /// through [`Id::from_raw`] and the pool's liveness check instead.
    pub const fn new(i: u16) -> Id<T> {
        match Id::from_raw(i) {
            Some(id) => id,
            None => panic!("u16::MAX names no record"),
        }
    }

    /// The id of index `i`; `None` for [`RAW_NONE`]. (Whether a record
    /// has that index is the pool's to say: [`Pool::is_live`].)
    #[inline(always)]
    pub const fn from_raw(i: u16) -> Option<Id<T>> {
        match NonZeroU16::new(i.wrapping_add(1)) {
            Some(raw) => Some(Id { raw, kind: PhantomData }),
            None => None,
        }
    }

    /// The index as a raw number (for SRAM layouts, wire fields, the
    /// state enums a debugger shows, log lines).
    #[inline(always)]
    pub const fn raw(self) -> u16 {
        self.raw.get() - 1
    }

    /// The index into the pool's arrays. (Less one in `usize`: the raw
    /// number is at least one, and no 16-bit wrap is to be kept.)
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.raw.get() as usize - 1
    }

    /// An optional id as a raw number: its index, [`RAW_NONE`] for none.
    /// (The index plus one, less one: no branch.)
    #[inline(always)]
    pub const fn raw_of(id: Option<Id<T>>) -> u16 {
        match id {
            Some(i) => i.raw.get(),
            None => 0,
        }
        .wrapping_sub(1)
    }
}

// `Option<Id<_>>` takes no more room than a `u16`: the links in the
// records cost what the bare indices did.
const _: () = assert!(size_of::<Option<Id<()>>>() == 2);
const _: () = assert!(size_of::<Id<()>>() == 2);

// (Written out: derived, each would ask `T` for the trait.)
impl<T> Clone for Id<T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Id<T> {}

impl<T> PartialEq for Id<T> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T> Eq for Id<T> {}

impl<T> PartialOrd for Id<T> {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Id<T> {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.raw.cmp(&other.raw)
    }
}

impl<T> core::hash::Hash for Id<T> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}

impl<T> core::fmt::Debug for Id<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Id({})", self.raw())
    }
}

/// `N` records of type `T`, named by `Id<K>`: `K` is `T` unless the
/// records are elsewhere (receive slots and offload events are in SRAM;
/// their pools keep `()` and only say which are taken).
///
/// (`repr(C)`, the counts first: `is_empty` is one load at a short
/// offset however large the records.)
#[repr(C)]
pub struct Pool<T: Copy, const N: usize, K = T> {
    /// Indices below this have been handed out at least once.
    high: u16,
    /// Where the search for a free record starts: the lowest index freed
    /// since the last allocation, or `high` (no free list: it would cost
    /// two bytes a record, and the image has no room to spare).
    hint: u16,
    live: u16,
    kind: PhantomData<fn() -> K>,
    used: [bool; N],
    items: [T; N],
}

impl<T: Copy, const N: usize, K> Pool<T, N, K> {
    pub const fn new(empty: T) -> Self {
        // Every index has an id (`RAW_NONE` is none).
        assert!(N < RAW_NONE as usize);
        Pool { items: [empty; N], used: [false; N], high: 0, hint: 0, live: 0, kind: PhantomData }
    }

    /// Take a free record, set it to `v`; None when full. The lowest free
    /// index is taken.
    pub fn alloc(&mut self, v: T) -> Option<Id<K>> {
        let i = match (self.hint..self.high).find(|&i| !self.used[i as usize]) {
            Some(i) => i,
            None if (self.high as usize) < N => {
                self.high += 1;
                self.high - 1
            }
            None => return None,
        };
        self.items[i as usize] = v;
        self.used[i as usize] = true;
        self.live += 1;
        self.hint = i + 1;
        // (`i` < N < `RAW_NONE`: never none.)
        Id::from_raw(i)
    }

    pub fn free(&mut self, id: Id<K>) {
        if let Some(u) = self.used.get_mut(id.index()) {
            if *u {
                *u = false;
                self.live -= 1;
                self.hint = self.hint.min(id.raw());
            }
        }
    }

    /// Is `id` a record of this pool, taken? (False for an index beyond
    /// it: an id made from a raw number is checked here before use.)
    pub fn is_live(&self, id: Id<K>) -> bool {
        self.used.get(id.index()).copied().unwrap_or(false)
    }

    pub fn available(&self) -> usize {
        N - self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Ids of live records, in index order.
    pub fn live_indices(&self) -> impl Iterator<Item = Id<K>> + '_ {
        (0..self.high).filter(move |i| self.used[*i as usize]).filter_map(Id::from_raw)
    }
}

impl<T: Copy, const N: usize, K> core::ops::Index<Id<K>> for Pool<T, N, K> {
    type Output = T;
    #[inline(always)]
    fn index(&self, id: Id<K>) -> &T {
        &self.items[id.index()]
    }
}

impl<T: Copy, const N: usize, K> core::ops::IndexMut<Id<K>> for Pool<T, N, K> {
    #[inline(always)]
    fn index_mut(&mut self, id: Id<K>) -> &mut T {
        &mut self.items[id.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_reuses_and_refuses_when_full() {
        let mut p: Pool<u32, 3> = Pool::new(0);
        let a = p.alloc(10).unwrap();
        let b = p.alloc(20).unwrap();
        let c = p.alloc(30).unwrap();
        assert_eq!(p.alloc(40), None);
        assert_eq!((p[a], p[b], p[c]), (10, 20, 30));
        p.free(b);
        p.free(b); // double free is ignored
        assert_eq!(p.available(), 1);
        let d = p.alloc(50).unwrap();
        assert_eq!(d, b);
        assert_eq!(p.live_indices().count(), 3);
        assert!(!p.is_live(Id::new(7)));
    }

    #[test]
    fn ids_cross_to_raw_numbers_and_back() {
        assert_eq!(size_of::<Option<Id<u32>>>(), 2);
        let i: Id<u32> = Id::new(5);
        assert_eq!((i.raw(), i.index()), (5, 5));
        assert_eq!(Id::<u32>::from_raw(5), Some(i));
        assert_eq!(Id::<u32>::from_raw(RAW_NONE), None);
        assert_eq!(Id::raw_of(Some(i)), 5);
        assert_eq!(Id::<u32>::raw_of(None), RAW_NONE);
        assert_eq!(Id::<u32>::from_raw(Id::raw_of(Some(Id::<u32>::new(0)))), Some(Id::new(0)));
        assert_eq!(format!("{:?}", Some(i)), "Some(Id(5))");
    }
}
