//! GM's utility modules that programs use beside communication: hash
//! tables, lookaside lists, mutexes and mark sets. GM exposed these from
//! its internals; here each is a small structure of the library's own,
//! behind the same calls.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_long, c_ulong, c_void};

use super::util::gm_crc_str;
use crate::status::{GmStatus, GM_INVALID_PARAMETER, GM_OUT_OF_MEMORY, GM_SUCCESS};

// ----- hash tables -----

type Compare = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_long;
type Hash = unsafe extern "C" fn(*mut c_void) -> c_ulong;

/// A key or datum: the client's pointer (length 0: the client keeps the
/// storage), or a copy the table keeps (a fixed length).
enum Stored {
    Client(*mut c_void),
    Copy(Box<[u64]>),
}

impl Stored {
    /// Store what `p` points to: the pointer itself, or `len` bytes of it.
    ///
    /// # Safety
    /// With `len` > 0, `p` is valid for `len` bytes.
    unsafe fn new(p: *mut c_void, len: usize) -> Stored {
        if len == 0 {
            return Stored::Client(p);
        }
        // (Words: the copy is aligned for any key or datum type.)
        let mut b = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        // SAFETY: the caller's promise; `b` holds at least `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr().cast::<u8>(), len) };
        Stored::Copy(b)
    }

    /// The pointer the client is given.
    fn ptr(&mut self) -> *mut c_void {
        match self {
            Stored::Client(p) => *p,
            Stored::Copy(b) => b.as_mut_ptr().cast(),
        }
    }
}

/// `struct gm_hash`: entries by the client's hash of their key, each
/// bucket searched with the client's comparison.
pub struct GmHash {
    compare: Compare,
    hash: Hash,
    key_len: usize,
    data_len: usize,
    buckets: HashMap<c_ulong, Vec<(Stored, Stored)>>,
    /// The datum the last gm_hash_remove returned, kept until the next
    /// (a copy the table kept would otherwise be gone before the client
    /// reads it).
    removed: Option<Stored>,
}

impl GmHash {
    /// The bucket of `key` and the index in it of its entry, if any.
    ///
    /// # Safety
    /// `key` is a key as the table's functions take it.
    unsafe fn find(&mut self, key: *mut c_void) -> Option<(c_ulong, usize)> {
        // SAFETY: the client's functions, on the client's key.
        let h = unsafe { (self.hash)(key) };
        let bucket = self.buckets.get_mut(&h)?;
        let compare = self.compare;
        // SAFETY: as above, against the table's own keys.
        let i = bucket.iter_mut().position(|(k, _)| unsafe { compare(key, k.ptr()) } == 0)?;
        Some((h, i))
    }
}

/// A hash table. `key_len` and `data_len` 0: the client keeps keys and
/// data, and the table their pointers; otherwise the table keeps copies
/// of that many bytes. `min_cnt` and `flags` ask nothing more here (the
/// table grows as needed).
///
/// # Safety
/// The functions compare and hash keys as the table passes them.
#[no_mangle]
pub unsafe extern "C" fn gm_create_hash(
    compare: Option<Compare>,
    hash: Option<Hash>,
    key_len: usize,
    data_len: usize,
    _min_cnt: usize,
    _flags: c_int,
) -> *mut GmHash {
    let (Some(compare), Some(hash)) = (compare, hash) else {
        eprintln!("libgm: gm_create_hash: the comparison and the hash function are both needed");
        return std::ptr::null_mut();
    };
    let h = GmHash { compare, hash, key_len, data_len, buckets: HashMap::new(), removed: None };
    Box::into_raw(Box::new(h))
}

/// # Safety
/// `h` is null or a table gm_create_hash made, not used again.
#[no_mangle]
pub unsafe extern "C" fn gm_destroy_hash(h: *mut GmHash) {
    if !h.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(h) });
    }
}

/// Insert `key` with `datum` (copied if the table keeps copies).
///
/// # Safety
/// `h` is a table; `key` and `datum` as the table stores them.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_insert(
    h: *mut GmHash,
    key: *mut c_void,
    datum: *mut c_void,
) -> GmStatus {
    // SAFETY: the caller's promise.
    let Some(t) = (unsafe { h.as_mut() }) else { return GM_INVALID_PARAMETER };
    // SAFETY: as above.
    let mut entry = unsafe { (Stored::new(key, t.key_len), Stored::new(datum, t.data_len)) };
    // The table's own key is the one hashed, as a find hashes a key.
    // SAFETY: the client's hash function on the table's key.
    let hv = unsafe { (t.hash)(entry.0.ptr()) };
    let bucket = t.buckets.entry(hv).or_default();
    if bucket.try_reserve(1).is_err() {
        return GM_OUT_OF_MEMORY;
    }
    bucket.push(entry);
    GM_SUCCESS
}

/// The datum of `key`, or NULL.
///
/// # Safety
/// `h` is a table; `key` as the table's functions take it.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_find(h: *mut GmHash, key: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's promise.
    let Some(t) = (unsafe { h.as_mut() }) else { return std::ptr::null_mut() };
    // SAFETY: as above.
    match unsafe { t.find(key) } {
        Some((hv, i)) => t.buckets.get_mut(&hv).map_or(std::ptr::null_mut(), |b| b[i].1.ptr()),
        None => std::ptr::null_mut(),
    }
}

/// Remove `key`; its datum (a copy the table kept stays readable until
/// the next remove), or NULL.
///
/// # Safety
/// As gm_hash_find.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_remove(h: *mut GmHash, key: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's promise.
    let Some(t) = (unsafe { h.as_mut() }) else { return std::ptr::null_mut() };
    // SAFETY: as above.
    let Some((hv, i)) = (unsafe { t.find(key) }) else { return std::ptr::null_mut() };
    let bucket = t.buckets.get_mut(&hv).expect("the bucket find found");
    let (_, mut d) = bucket.swap_remove(i);
    if bucket.is_empty() {
        t.buckets.remove(&hv);
    }
    let p = d.ptr();
    t.removed = Some(d);
    p
}

/// Give the entry of `old_key` the key `new_key`.
///
/// # Safety
/// As gm_hash_find, for both keys.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_rekey(h: *mut GmHash, old_key: *mut c_void, new_key: *mut c_void) {
    // SAFETY: the caller's promise.
    let Some(t) = (unsafe { h.as_mut() }) else { return };
    // SAFETY: as above.
    let Some((hv, i)) = (unsafe { t.find(old_key) }) else { return };
    let bucket = t.buckets.get_mut(&hv).expect("the bucket find found");
    let (_, d) = bucket.swap_remove(i);
    if bucket.is_empty() {
        t.buckets.remove(&hv);
    }
    // SAFETY: as above.
    let mut k = unsafe { Stored::new(new_key, t.key_len) };
    // SAFETY: the client's hash function on the table's key.
    let nh = unsafe { (t.hash)(k.ptr()) };
    t.buckets.entry(nh).or_default().push((k, d));
}

/// # Safety
/// Both are C strings.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_compare_strings(a: *mut c_void, b: *mut c_void) -> c_long {
    // SAFETY: the caller's promise.
    unsafe { libc::strcmp(a.cast(), b.cast()) as c_long }
}

/// # Safety
/// `key` is a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_hash_string(key: *mut c_void) -> c_ulong {
    // SAFETY: the caller's promise.
    unsafe { gm_crc_str(key.cast::<c_char>()) }
}

/// # Safety
/// Both point to longs.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_compare_longs(a: *mut c_void, b: *mut c_void) -> c_long {
    // SAFETY: the caller's promise.
    unsafe { (*a.cast::<c_long>() != *b.cast::<c_long>()) as c_long }
}

/// # Safety
/// `key` points to a long.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_hash_long(key: *mut c_void) -> c_ulong {
    // SAFETY: the caller's promise.
    unsafe { *key.cast::<c_long>() as c_ulong }
}

/// # Safety
/// Both point to ints.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_compare_ints(a: *mut c_void, b: *mut c_void) -> c_long {
    // SAFETY: the caller's promise.
    unsafe { (*a.cast::<c_int>() != *b.cast::<c_int>()) as c_long }
}

/// # Safety
/// `key` points to an int.
#[no_mangle]
pub unsafe extern "C" fn gm_hash_hash_int(key: *mut c_void) -> c_ulong {
    // SAFETY: the caller's promise.
    unsafe { *key.cast::<c_int>() as c_ulong }
}

/// Keys that are the pointers themselves.
#[no_mangle]
pub extern "C" fn gm_hash_compare_ptrs(a: *mut c_void, b: *mut c_void) -> c_long {
    (a != b) as c_long
}

#[no_mangle]
pub extern "C" fn gm_hash_hash_ptr(key: *mut c_void) -> c_ulong {
    key as c_ulong
}

// ----- lookaside lists -----

/// `struct gm_lookaside`: blocks of one length.
pub struct Lookaside {
    entry_len: usize,
}

/// Lookaside blocks are aligned to a cache line.
const LINE: usize = 64;

#[no_mangle]
pub extern "C" fn gm_create_lookaside(entry_len: usize, _min_entry_cnt: usize) -> *mut Lookaside {
    Box::into_raw(Box::new(Lookaside { entry_len: entry_len.max(1) }))
}

/// # Safety
/// `l` is null or a list gm_create_lookaside made, not used again.
#[no_mangle]
pub unsafe extern "C" fn gm_destroy_lookaside(l: *mut Lookaside) {
    if !l.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(l) });
    }
}

/// A block of the list's length, cache-line aligned, or NULL.
///
/// # Safety
/// `l` is a list.
#[no_mangle]
pub unsafe extern "C" fn gm_lookaside_alloc(l: *mut Lookaside) -> *mut c_void {
    // SAFETY: the caller's promise.
    let Some(l) = (unsafe { l.as_ref() }) else { return std::ptr::null_mut() };
    let mut p = std::ptr::null_mut();
    // SAFETY: posix_memalign writes `p` only on success.
    match unsafe { libc::posix_memalign(&mut p, LINE, l.entry_len) } {
        0 => p,
        _ => std::ptr::null_mut(),
    }
}

/// As gm_lookaside_alloc, zeroed.
///
/// # Safety
/// `l` is a list.
#[no_mangle]
pub unsafe extern "C" fn gm_lookaside_zalloc(l: *mut Lookaside) -> *mut c_void {
    // SAFETY: the caller's promise.
    let p = unsafe { gm_lookaside_alloc(l) };
    if !p.is_null() {
        // SAFETY: a block of the list's length, just allocated.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, (*l).entry_len) };
    }
    p
}

/// # Safety
/// `ptr` is null or a block of a lookaside list.
#[no_mangle]
pub unsafe extern "C" fn gm_lookaside_free(ptr: *mut c_void) {
    // SAFETY: the caller's promise: posix_memalign's, so free's.
    unsafe { libc::free(ptr) }
}

// ----- mutexes -----

/// `struct gm_mutex`.
pub struct GmMutex(Box<libc::pthread_mutex_t>);

#[no_mangle]
pub extern "C" fn gm_create_mutex() -> *mut GmMutex {
    let mut m = Box::new(libc::PTHREAD_MUTEX_INITIALIZER);
    // SAFETY: a mutex of our own, initialised in place with defaults.
    if unsafe { libc::pthread_mutex_init(&mut *m, std::ptr::null()) } != 0 {
        return std::ptr::null_mut();
    }
    Box::into_raw(Box::new(GmMutex(m)))
}

/// # Safety
/// `mu` is null or a mutex gm_create_mutex made, unlocked, not used again.
#[no_mangle]
pub unsafe extern "C" fn gm_destroy_mutex(mu: *mut GmMutex) {
    if mu.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    let mut m = unsafe { Box::from_raw(mu) };
    // SAFETY: our own mutex, unlocked (the caller's promise).
    unsafe { libc::pthread_mutex_destroy(&mut *m.0) };
}

/// # Safety
/// `mu` is a mutex.
#[no_mangle]
pub unsafe extern "C" fn gm_mutex_enter(mu: *mut GmMutex) {
    // SAFETY: the caller's promise; the mutex stays at its place (boxed).
    unsafe { libc::pthread_mutex_lock(&mut *(*mu).0) };
}

/// # Safety
/// `mu` is a mutex this thread holds.
#[no_mangle]
pub unsafe extern "C" fn gm_mutex_exit(mu: *mut GmMutex) {
    // SAFETY: as gm_mutex_enter.
    unsafe { libc::pthread_mutex_unlock(&mut *(*mu).0) };
}

// ----- mark sets -----

/// `struct gm_mark_set`: the marks now valid.
pub struct MarkSet {
    valid: HashSet<usize>,
    next: usize,
}

/// # Safety
/// `set` is a valid place for the set's pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_create_mark_set(
    set: *mut *mut MarkSet,
    init_count: c_ulong,
) -> GmStatus {
    if set.is_null() {
        return GM_INVALID_PARAMETER;
    }
    let s = MarkSet { valid: HashSet::with_capacity(init_count as usize), next: 1 };
    // SAFETY: the caller's promise.
    unsafe { *set = Box::into_raw(Box::new(s)) };
    GM_SUCCESS
}

/// # Safety
/// `set` is null or a mark set, not used again.
#[no_mangle]
pub unsafe extern "C" fn gm_destroy_mark_set(set: *mut MarkSet) {
    if !set.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(set) });
    }
}

/// Make `*m` a mark valid in `set` (a value no other mark of the set has
/// had).
///
/// # Safety
/// `set` is a mark set, `m` a `gm_mark_t`.
#[no_mangle]
pub unsafe extern "C" fn gm_mark(set: *mut MarkSet, m: *mut usize) -> GmStatus {
    // SAFETY: the caller's promise.
    let (Some(s), false) = (unsafe { set.as_mut() }, m.is_null()) else {
        return GM_INVALID_PARAMETER;
    };
    let v = s.next;
    s.next += 1;
    s.valid.insert(v);
    // SAFETY: as above.
    unsafe { *m = v };
    GM_SUCCESS
}

/// # Safety
/// As gm_mark.
#[no_mangle]
pub unsafe extern "C" fn gm_mark_is_valid(set: *mut MarkSet, m: *mut usize) -> c_int {
    // SAFETY: the caller's promise.
    match (unsafe { set.as_ref() }, m.is_null()) {
        // SAFETY: as above.
        (Some(s), false) => s.valid.contains(&unsafe { *m }) as c_int,
        _ => 0,
    }
}

/// # Safety
/// As gm_mark.
#[no_mangle]
pub unsafe extern "C" fn gm_unmark(set: *mut MarkSet, m: *mut usize) {
    // SAFETY: the caller's promise.
    if let (Some(s), false) = (unsafe { set.as_mut() }, m.is_null()) {
        // SAFETY: as above.
        s.valid.remove(&unsafe { *m });
    }
}

/// # Safety
/// `set` is a mark set.
#[no_mangle]
pub unsafe extern "C" fn gm_unmark_all(set: *mut MarkSet) {
    // SAFETY: the caller's promise.
    if let Some(s) = unsafe { set.as_mut() } {
        s.valid.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_that_copies_int_keys_and_structs_finds_removes_and_rekeys() {
        // SAFETY: GM's own int functions, keys and data of the lengths given.
        unsafe {
            let h =
                gm_create_hash(Some(gm_hash_compare_ints), Some(gm_hash_hash_int), 4, 16, 10, 0);
            for k in 0..100i32 {
                let (mut key, mut datum) = (k, [k as u64, 2 * k as u64]);
                let s = gm_hash_insert(h, (&mut key as *mut i32).cast(), datum.as_mut_ptr().cast());
                assert_eq!(s, GM_SUCCESS);
            }
            let mut k = 42i32;
            let d = gm_hash_find(h, (&mut k as *mut i32).cast()).cast::<u64>();
            assert_eq!((*d, *d.add(1)), (42, 84));
            let mut new = 1000i32;
            gm_hash_rekey(h, (&mut k as *mut i32).cast(), (&mut new as *mut i32).cast());
            assert!(gm_hash_find(h, (&mut k as *mut i32).cast()).is_null());
            let d = gm_hash_remove(h, (&mut new as *mut i32).cast()).cast::<u64>();
            assert_eq!(*d.add(1), 84);
            assert!(gm_hash_find(h, (&mut new as *mut i32).cast()).is_null());
            let mut missing = 5000i32;
            assert!(gm_hash_remove(h, (&mut missing as *mut i32).cast()).is_null());
            gm_destroy_hash(h);
        }
    }

    #[test]
    fn a_table_of_client_strings_returns_the_clients_pointers() {
        let (a, b) = (c"alpha".as_ptr().cast_mut(), c"beta".as_ptr().cast_mut());
        let (mut da, mut db) = (1u8, 2u8);
        // SAFETY: C strings the test keeps, data pointers the table stores.
        unsafe {
            let h = gm_create_hash(
                Some(gm_hash_compare_strings),
                Some(gm_hash_hash_string),
                0,
                0,
                0,
                0,
            );
            gm_hash_insert(h, a.cast(), (&mut da as *mut u8).cast());
            gm_hash_insert(h, b.cast(), (&mut db as *mut u8).cast());
            // Another pointer to equal text finds the entry.
            let other = std::ffi::CString::new("beta").unwrap();
            let found = gm_hash_find(h, other.as_ptr().cast_mut().cast());
            assert_eq!(found, (&mut db as *mut u8).cast());
            gm_destroy_hash(h);
        }
    }

    #[test]
    fn marks_are_valid_until_unmarked_and_never_reused() {
        let mut set = std::ptr::null_mut();
        let (mut m1, mut m2) = (0usize, 0usize);
        // SAFETY: a set made here, marks on the stack.
        unsafe {
            assert_eq!(gm_create_mark_set(&mut set, 4), GM_SUCCESS);
            gm_mark(set, &mut m1);
            gm_mark(set, &mut m2);
            assert_ne!(m1, m2);
            assert_eq!((gm_mark_is_valid(set, &mut m1), gm_mark_is_valid(set, &mut m2)), (1, 1));
            gm_unmark(set, &mut m1);
            assert_eq!(gm_mark_is_valid(set, &mut m1), 0);
            gm_mark(set, &mut m1);
            assert_ne!(m1, m2);
            gm_unmark_all(set);
            assert_eq!((gm_mark_is_valid(set, &mut m1), gm_mark_is_valid(set, &mut m2)), (0, 0));
            gm_destroy_mark_set(set);
        }
    }

    #[test]
    fn lookaside_blocks_are_aligned_zeroed_and_mutexes_lock() {
        // SAFETY: a list and a mutex made and destroyed here.
        unsafe {
            let l = gm_create_lookaside(100, 4);
            let p = gm_lookaside_zalloc(l);
            assert_eq!(p as usize % LINE, 0);
            assert!(std::slice::from_raw_parts(p.cast::<u8>(), 100).iter().all(|&b| b == 0));
            gm_lookaside_free(p);
            gm_destroy_lookaside(l);
            let m = gm_create_mutex();
            gm_mutex_enter(m);
            gm_mutex_exit(m);
            gm_destroy_mutex(m);
        }
    }
}
