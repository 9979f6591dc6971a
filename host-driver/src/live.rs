//! The real-time backend for host processes: a `NicBackend` over shared
//! file mappings of one node's `sram` and `host` files in a cluster
//! directory (`cluster.rs`, `docs/design/cluster-dir.md`). Used the same
//! way for the live and the qemu backends: the device process (and QEMU)
//! map the same files.
//!
//! What it owns: the two mappings, the flock on `port<P>.lock` that says
//! this process holds port P (taken at attach, released when the last
//! clone is dropped or the process dies), and a first-fit allocator over
//! port P's slice of host memory.
//!
//! What it may touch: reads anywhere in SRAM; writes only to its port's
//! window, its port's page table and the host-owned registers
//! (HOST_DOORBELL, TRACE_ENABLE); host memory only inside its port's
//! slice. Anything else reads as zero or is dropped, and is counted
//! (`refused_accesses`): never UB, never a panic.
//!
//! The data path makes no system call: posting is atomic stores into the
//! mapping plus a doorbell increment; polling is loads from the mapping;
//! `charge` touches a thread-local. Only `idle_wait` (yield or sleep after
//! a spin), `now_ns` (vDSO clock) and attach/alloc go further.
//!
//! `unsafe` lives only in `MappedFile`, where the mapping is touched (the
//! crate denies it everywhere else; `lib.rs` allows it for this module).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};
use nic_abi::map::{page_table, port_window, PAGE_TABLE_SIZE, PORT_WINDOW};
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::{NUM_PORTS, PAGE_SIZE};

use crate::backend::{HostOp, NicBackend};
use crate::cluster::{ClusterDir, NodeFile};
use crate::error::ClusterFault;
use crate::DriverError;

// ---------------------------------------------------------------------
// MappedFile: the only place that touches mapped memory.
// ---------------------------------------------------------------------

/// Ranges at least this long may go by `bulk_copy`; shorter ones by the
/// relaxed word loops.
const BULK_MIN: usize = 64;

/// Copy `n` bytes from `src` to `dst` with one `rep movsb`, the
/// fast-string copy (ERMS/FSRM), when that is the fast way: on x86_64,
/// for `BULK_MIN` bytes or more, and not when the destination lies 1 to
/// 63 bytes past the source modulo 4 KiB. There the string copy's loads
/// alias its own recent stores (4K aliasing) and it runs some 20 times
/// slower than the word loop (measured on this project's AMD EPYC
/// machines: 2-3 GB/s against 50 for a hot 4 KiB copy; glibc's memcpy
/// behaves the same). Packets land at any offset (route bytes shift them,
/// pool buffers sit anywhere), so this is checked on every copy. Else
/// copies nothing and returns false: the caller's word loop does it.
///
/// The memory model: the asm block accesses exactly these bytes, each
/// once, as x86 byte loads and stores, which are single-copy atomic, so
/// it is equivalent to a relaxed atomic load and store per byte, the
/// model's reading of a per-byte atomic memcpy. A racing writer can tear
/// the range (as with the word loop), never make the access undefined.
/// Fast-string stores may become visible out of order among themselves
/// but before any later store, so the Release store that publishes the
/// range (the ABI's rule) still comes after every byte of it.
///
/// # Safety
/// `src..src + n` must be readable and `dst..dst + n` writable for the
/// duration of the call (inside live mappings or our own buffers).
#[inline]
unsafe fn bulk_copy(dst: *mut u8, src: *const u8, n: usize) -> bool {
    let aliasing = (1..64).contains(&((dst as usize).wrapping_sub(src as usize) % 4096));
    if !cfg!(target_arch = "x86_64") || n < BULK_MIN || aliasing {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees both ranges; rep movsb moves exactly n
    // bytes forward (DF is clear at every Rust call boundary) and touches
    // no other memory, register or the stack.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
    true
}

/// A whole file mapped shared and writable, accessed only through
/// bounds-checked atomic operations. Other processes (the device model,
/// QEMU, other host processes) map the same file and see every store.
///
/// Words (`load_*`/`store_*`) are single atomic accesses when aligned,
/// Acquire/Release as the ABI's ownership rules want. Byte ranges are
/// copied as relaxed atomic accesses: one fast-string copy on x86_64
/// where it is fast (`bulk_copy`), else relaxed loads and stores of
/// the widest aligned unit (u64, u32, else u8), so a racing writer can
/// tear a range but never make the access undefined. (Accesses of different widths to the same
/// bytes race only when the ABI's ownership rules are broken, e.g. a
/// record read while its writer still writes it; the rules order every
/// legitimate pair through a Release/Acquire counter.) The file must not
/// shrink while mapped (the cluster contract: node files keep their size
/// for the cluster's life); the OS would raise SIGBUS.
pub struct MappedFile {
    map: MmapRaw,
    len: usize,
    path: PathBuf,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile").field("path", &self.path).field("len", &self.len).finish()
    }
}

impl MappedFile {
    /// Map all of `path` (which must exist and be non-empty), read-write, shared.
    pub fn open(path: &Path) -> io::Result<MappedFile> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let len = f.metadata()?.len();
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "empty or huge file"))?;
        let map = MmapOptions::new().len(len).map_raw(&f)?;
        if map.len() != len || !(map.as_ptr() as usize).is_multiple_of(8) {
            return Err(io::Error::other("mapping has an unexpected length or alignment"));
        }
        Ok(MappedFile { map, len, path: path.to_path_buf() })
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Start of `[off, off + n)` as an index, if it lies inside the file.
    #[inline]
    fn span(&self, off: u64, n: usize) -> Option<usize> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(n)?;
        (end <= self.len).then_some(start)
    }

    /// # Safety
    /// `i < self.len`.
    #[inline]
    unsafe fn a8(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i < self.len);
        // SAFETY: the caller guarantees i is inside the mapping, which
        // lives as long as &self (MmapRaw unmaps on drop) and is readable
        // and writable (mapped read-write, shared). All in-process access
        // to it goes through atomics; other processes are outside the Rust
        // abstract machine.
        unsafe { AtomicU8::from_ptr(self.map.as_mut_ptr().add(i)) }
    }

    /// # Safety
    /// `i % 4 == 0` and `i + 4 <= self.len`.
    #[inline]
    unsafe fn a32(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i.is_multiple_of(4) && i + 4 <= self.len);
        // SAFETY: in bounds by the caller's guarantee; aligned because the
        // mapping start is 8-aligned (page aligned; checked in `open`) and i % 4 == 0.
        // Lifetime and access as in `a8`.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(i).cast()) }
    }

    /// # Safety
    /// `i % 8 == 0` and `i + 8 <= self.len`.
    #[inline]
    unsafe fn a64(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i.is_multiple_of(8) && i + 8 <= self.len);
        // SAFETY: in bounds by the caller's guarantee; aligned because the
        // mapping start is 8-aligned (page aligned; checked in `open`) and i % 8 == 0.
        // Lifetime and access as in `a8`.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(i).cast()) }
    }

    /// Copy `buf.len()` bytes at `off` into `buf` (relaxed). Out of range:
    /// `buf` is zeroed and false returned.
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        let Some(start) = self.span(off, buf.len()) else {
            buf.fill(0);
            return false;
        };
        let n = buf.len();
        // SAFETY: [start, start + n) lies in the mapping (span checked
        // above) and buf is n writable bytes of our own, apart from it.
        if unsafe { bulk_copy(buf.as_mut_ptr(), self.map.as_ptr().add(start), n) } {
            return true;
        }
        let head = ((8 - start % 8) % 8).min(n);
        let words = (n - head) / 8;
        let base = start + head;
        self.read_small(start, &mut buf[..head]);
        for (k, chunk) in buf[head..head + words * 8].chunks_exact_mut(8).enumerate() {
            // SAFETY: base % 8 == 0 and base + 8 * k + 8 <= start + n <= len
            // (span checked above).
            let v = unsafe { self.a64(base + 8 * k) }.load(Ordering::Relaxed);
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        self.read_small(base + words * 8, &mut buf[head + words * 8..]);
        true
    }

    /// Bytes of `[start, start + buf.len())`, already bounds-checked, with
    /// u32 accesses where aligned (a head or tail of fewer than 8 bytes).
    #[inline]
    fn read_small(&self, start: usize, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() {
            let a = start + i;
            if a.is_multiple_of(4) && buf.len() - i >= 4 {
                // SAFETY: a + 4 <= start + buf.len() <= len (the caller
                // checked the span), a % 4 == 0.
                let v = unsafe { self.a32(a) }.load(Ordering::Relaxed);
                buf[i..i + 4].copy_from_slice(&v.to_ne_bytes());
                i += 4;
            } else {
                // SAFETY: a < start + buf.len() <= len.
                buf[i] = unsafe { self.a8(a) }.load(Ordering::Relaxed);
                i += 1;
            }
        }
    }

    /// Copy `data` to `off` (relaxed; publish with a Release store after).
    /// Out of range: nothing is written, false returned.
    #[inline]
    pub fn write(&self, off: u64, data: &[u8]) -> bool {
        let Some(start) = self.span(off, data.len()) else {
            return false;
        };
        let n = data.len();
        // SAFETY: [start, start + n) lies in the mapping (span checked
        // above); data is n readable bytes of our own, apart from it.
        if unsafe { bulk_copy(self.map.as_mut_ptr().add(start), data.as_ptr(), n) } {
            return true;
        }
        let head = ((8 - start % 8) % 8).min(n);
        let words = (n - head) / 8;
        let base = start + head;
        self.write_small(start, &data[..head]);
        for (k, chunk) in data[head..head + words * 8].chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            // SAFETY: base % 8 == 0 and base + 8 * k + 8 <= start + n <= len
            // (span checked above).
            unsafe { self.a64(base + 8 * k) }.store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
        self.write_small(base + words * 8, &data[head + words * 8..]);
        true
    }

    /// Copy `len` bytes of `src` at `src_off` to `off` of this file in one
    /// pass (relaxed, word by word where both sides are 8-aligned alike;
    /// publish with a Release store after). The DMA engines' copy between
    /// host memory and SRAM: no bounce buffer. False (nothing copied) if
    /// either range lies outside its file.
    #[inline]
    pub fn copy_from(&self, off: u64, src: &MappedFile, src_off: u64, len: usize) -> bool {
        let (Some(d), Some(s)) = (self.span(off, len), src.span(src_off, len)) else {
            return false;
        };
        // SAFETY: [d, d + len) lies in this mapping and [s, s + len) in
        // src's (spans checked above). Two files are two mappings; one file
        // copied onto itself may overlap, which garbles bytes (as the word
        // loop below would) but touches nothing else.
        if unsafe { bulk_copy(self.map.as_mut_ptr().add(d), src.map.as_ptr().add(s), len) } {
            return true;
        }
        if d % 8 != s % 8 {
            // Misaligned against each other: through a small buffer.
            let mut buf = [0u8; 256];
            let mut done = 0;
            while done < len {
                let n = (len - done).min(buf.len());
                src.read(src_off + done as u64, &mut buf[..n]);
                self.write(off + done as u64, &buf[..n]);
                done += n;
            }
            return true;
        }
        let head = ((8 - d % 8) % 8).min(len);
        let words = (len - head) / 8;
        for i in (0..head).chain(head + words * 8..len) {
            // SAFETY: d + i < d + len <= self.len and s + i < src.len
            // (spans checked above).
            unsafe {
                self.a8(d + i).store(src.a8(s + i).load(Ordering::Relaxed), Ordering::Relaxed)
            };
        }
        let (d, s) = (d + head, s + head);
        for k in 0..words {
            // SAFETY: d % 8 == 0 and s % 8 == 0 (same remainder, moved by
            // head); d + 8k + 8 <= d + len - head <= self.len, likewise s.
            unsafe {
                self.a64(d + 8 * k)
                    .store(src.a64(s + 8 * k).load(Ordering::Relaxed), Ordering::Relaxed)
            };
        }
        true
    }

    /// As `read_small`, for stores.
    #[inline]
    fn write_small(&self, start: usize, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let a = start + i;
            if a.is_multiple_of(4) && data.len() - i >= 4 {
                let mut w = [0u8; 4];
                w.copy_from_slice(&data[i..i + 4]);
                // SAFETY: a + 4 <= start + data.len() <= len (the caller
                // checked the span), a % 4 == 0.
                unsafe { self.a32(a) }.store(u32::from_ne_bytes(w), Ordering::Relaxed);
                i += 4;
            } else {
                // SAFETY: a < start + data.len() <= len.
                unsafe { self.a8(a) }.store(data[i], Ordering::Relaxed);
                i += 1;
            }
        }
    }

    /// Fill `[off, off + len)` with `byte`. False (nothing written) if out of range.
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> bool {
        let Ok(n) = usize::try_from(len) else { return false };
        if self.span(off, n).is_none() {
            return false;
        }
        let chunk = [byte; 4096];
        let mut done = 0usize;
        while done < n {
            let k = (n - done).min(chunk.len());
            self.write(off + done as u64, &chunk[..k]);
            done += k;
        }
        true
    }

    /// Little-endian u32 at `off`, Acquire. None if out of range. An
    /// unaligned word is read byte by byte, then an Acquire fence.
    #[inline]
    pub fn load_u32(&self, off: u64) -> Option<u32> {
        let i = self.span(off, 4)?;
        if i.is_multiple_of(4) {
            // SAFETY: i + 4 <= len (span), i % 4 == 0.
            Some(u32::from_le(unsafe { self.a32(i) }.load(Ordering::Acquire)))
        } else {
            let mut b = [0u8; 4];
            self.read(off, &mut b);
            fence(Ordering::Acquire);
            Some(u32::from_le_bytes(b))
        }
    }

    /// Store a little-endian u32 at `off`, Release. False if out of range.
    #[inline]
    pub fn store_u32(&self, off: u64, v: u32) -> bool {
        let Some(i) = self.span(off, 4) else { return false };
        if i.is_multiple_of(4) {
            // SAFETY: i + 4 <= len (span), i % 4 == 0.
            unsafe { self.a32(i) }.store(v.to_le(), Ordering::Release);
        } else {
            fence(Ordering::Release);
            self.write(off, &v.to_le_bytes());
        }
        true
    }

    /// Little-endian u64 at `off`, Acquire. None if out of range.
    #[inline]
    pub fn load_u64(&self, off: u64) -> Option<u64> {
        let i = self.span(off, 8)?;
        if i.is_multiple_of(8) {
            // SAFETY: i + 8 <= len (span), i % 8 == 0.
            Some(u64::from_le(unsafe { self.a64(i) }.load(Ordering::Acquire)))
        } else {
            let mut b = [0u8; 8];
            self.read(off, &mut b);
            fence(Ordering::Acquire);
            Some(u64::from_le_bytes(b))
        }
    }

    /// Store a little-endian u64 at `off`, Release. False if out of range.
    #[inline]
    pub fn store_u64(&self, off: u64, v: u64) -> bool {
        let Some(i) = self.span(off, 8) else { return false };
        if i.is_multiple_of(8) {
            // SAFETY: i + 8 <= len (span), i % 8 == 0.
            unsafe { self.a64(i) }.store(v.to_le(), Ordering::Release);
        } else {
            fence(Ordering::Release);
            self.write(off, &v.to_le_bytes());
        }
        true
    }

    /// Atomically add `v` to the little-endian u32 at `off` (AcqRel);
    /// returns the old value. None if out of range or unaligned (no
    /// atomic read-modify-write exists for an unaligned word).
    pub fn fetch_add_u32(&self, off: u64, v: u32) -> Option<u32> {
        let i = self.span(off, 4)?;
        if i % 4 != 0 {
            return None;
        }
        // SAFETY: i + 4 <= len (span), i % 4 == 0.
        let a = unsafe { self.a32(i) };
        if cfg!(target_endian = "little") {
            Some(a.fetch_add(v, Ordering::AcqRel))
        } else {
            let old = a
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| {
                    Some(u32::from_le(x).wrapping_add(v).to_le())
                })
                .unwrap_or_else(|x| x);
            Some(u32::from_le(old))
        }
    }
}

// ---------------------------------------------------------------------
// First-fit allocator over one port's slice of host memory.
// ---------------------------------------------------------------------

/// Page-granular first-fit allocator over `[start, end)`. Frees coalesce;
/// a free that does not match an allocation is ignored (and reported).
#[derive(Debug)]
pub(crate) struct FirstFit {
    /// Free blocks (start, len), sorted by start, never adjacent.
    free: Vec<(u64, u64)>,
    /// Live allocations: start -> rounded length.
    used: BTreeMap<u64, u64>,
}

impl FirstFit {
    pub(crate) fn new(start: u64, end: u64) -> FirstFit {
        let start = start.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let end = end / PAGE_SIZE * PAGE_SIZE;
        let free = if end > start { vec![(start, end - start)] } else { Vec::new() };
        FirstFit { free, used: BTreeMap::new() }
    }

    fn round(len: u64) -> Option<u64> {
        len.checked_add(PAGE_SIZE - 1).map(|l| l / PAGE_SIZE * PAGE_SIZE)
    }

    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        let size = FirstFit::round(len).filter(|&s| s > 0)?;
        let i = self.free.iter().position(|&(_, l)| l >= size)?;
        let (bus, l) = self.free[i];
        if l == size {
            self.free.remove(i);
        } else {
            self.free[i] = (bus + size, l - size);
        }
        self.used.insert(bus, size);
        Some(bus)
    }

    /// Give back `[bus, bus + len)`. False if it is not an allocation.
    pub(crate) fn free(&mut self, bus: u64, len: u64) -> bool {
        match (self.used.get(&bus), FirstFit::round(len)) {
            (Some(&size), Some(r)) if r == size => {}
            _ => return false,
        }
        let size = self.used.remove(&bus).unwrap_or(0);
        let i = self.free.partition_point(|&(s, _)| s < bus);
        self.free.insert(i, (bus, size));
        // Merge with the next block, then with the previous one.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
        true
    }

    pub(crate) fn in_use(&self) -> u64 {
        self.used.values().sum()
    }

    pub(crate) fn free_bytes(&self) -> u64 {
        self.free.iter().map(|&(_, l)| l).sum()
    }
}

// ---------------------------------------------------------------------
// Waiting without burning the machine.
// ---------------------------------------------------------------------

/// How `idle_wait` waits during an idle streak (consecutive waits with no
/// event found and nothing posted in between): spin first (lowest
/// latency), then yield the CPU, then sleep. A found event or a post ends
/// the streak (`charge` sees them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdlePolicy {
    /// Spin (with `spin_loop`) while the streak is shorter than this.
    pub spin: Duration,
    /// Then `yield_now` while the streak is shorter than this.
    pub yield_until: Duration,
    /// Then sleep this long per wait.
    pub sleep: Duration,
}

impl Default for IdlePolicy {
    /// Spin 20 us, then yield, then nap. On a machine of two cores or fewer
    /// the waiter yields at once: the device process and the peer need the
    /// core more than a spinning waiter does (on 2 cores this takes a live
    /// ping-pong from ~16 us to a few us one-way).
    fn default() -> IdlePolicy {
        let small = std::thread::available_parallelism().map_or(true, |n| n.get() <= 2);
        IdlePolicy {
            spin: if small { Duration::ZERO } else { Duration::from_micros(20) },
            yield_until: Duration::from_millis(2),
            sleep: Duration::from_micros(50),
        }
    }
}

impl IdlePolicy {
    /// Never sleep nor yield: lowest latency, one busy core per waiter.
    pub fn busy() -> IdlePolicy {
        IdlePolicy { spin: Duration::MAX, yield_until: Duration::MAX, sleep: Duration::ZERO }
    }
}

thread_local! {
    /// Start (now_ns) of this thread's idle streak; u64::MAX: none.
    static IDLE_SINCE: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// Process-wide clock origin, so `now_ns` is comparable across backends.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn clock_ns() -> u64 {
    u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------
// LiveBackend
// ---------------------------------------------------------------------

/// Choices made at attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachOptions {
    pub idle: IdlePolicy,
    /// How long to keep retrying the port lock before `PortBusy` (a device
    /// process probing for a dead holder takes it for an instant).
    pub lock_retry: Duration,
    /// How long to wait, when taking over a port whose previous holder is
    /// gone, for the firmware to stop serving it (it may still write into
    /// that holder's memory, which is now ours) before `PortBusy`.
    pub takeover_timeout: Duration,
    /// Refuse a cluster whose device process (manifest pid) is not alive.
    pub require_device: bool,
}

impl Default for AttachOptions {
    fn default() -> AttachOptions {
        AttachOptions {
            idle: IdlePolicy::default(),
            lock_retry: Duration::from_millis(20),
            takeover_timeout: Duration::from_secs(2),
            require_device: true,
        }
    }
}

struct Inner {
    sram: MappedFile,
    host: MappedFile,
    cluster: PathBuf,
    node: u32,
    port: u8,
    /// Port's slice of host memory: [slice_start, slice_end).
    slice_start: u64,
    slice_end: u64,
    alloc: Mutex<FirstFit>,
    idle: IdlePolicy,
    refused: AtomicU64,
    bad_frees: AtomicU64,
    /// The flock on port<P>.lock; released when this closes.
    _lock: File,
}

/// A host process's view of one port of one NIC of a running cluster.
/// Cheap to clone (an `Arc`); the port lock is held until the last clone
/// is dropped. `Send + Sync`.
#[derive(Clone)]
pub struct LiveBackend {
    inner: Arc<Inner>,
}

// Ports and measuring loops move to other threads with their backend.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<LiveBackend>();
    send_sync::<MappedFile>();
};

impl std::fmt::Debug for LiveBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveBackend")
            .field("cluster", &self.inner.cluster)
            .field("node", &self.inner.node)
            .field("port", &self.inner.port)
            .finish()
    }
}

fn fault(file: NodeFile, e: &io::Error) -> DriverError {
    DriverError::Cluster(ClusterFault::BadFile { file, io: Some(e.kind()) })
}

impl LiveBackend {
    /// Attach to port `port` of node `node` of the cluster named (or at the
    /// path) `cluster`, with default options. Fails with `PortBusy` if
    /// another process (or another attach in this one) holds the port.
    pub fn attach(cluster: &str, node: u32, port: u8) -> Result<LiveBackend, DriverError> {
        let dir = ClusterDir::open(cluster).map_err(|e| DriverError::Cluster((&e).into()))?;
        LiveBackend::attach_with(&dir, node, port, &AttachOptions::default())
    }

    /// Attach to an opened cluster directory.
    pub fn attach_with(
        dir: &ClusterDir,
        node: u32,
        port: u8,
        opts: &AttachOptions,
    ) -> Result<LiveBackend, DriverError> {
        if port as usize >= NUM_PORTS {
            return Err(DriverError::BadPort(port));
        }
        dir.check_node(node).map_err(|e| DriverError::Cluster((&e).into()))?;
        let m = dir.manifest();
        if opts.require_device && m.pid != 0 && !crate::cluster::pid_alive(m.pid) {
            return Err(DriverError::Cluster(ClusterFault::DeviceGone { pid: m.pid }));
        }

        let lock = take_lock(&dir.port_lock_path(node, port), port, opts.lock_retry)?;

        let sram = MappedFile::open(&dir.sram_path(node)).map_err(|e| fault(NodeFile::Sram, &e))?;
        if sram.len() != m.sram_size {
            return Err(DriverError::Cluster(ClusterFault::BadFile {
                file: NodeFile::Sram,
                io: None,
            }));
        }
        let host = MappedFile::open(&dir.host_path(node)).map_err(|e| fault(NodeFile::Host, &e))?;
        if host.len() != m.host_size {
            return Err(DriverError::Cluster(ClusterFault::BadFile {
                file: NodeFile::Host,
                io: None,
            }));
        }
        let (start, len) = dir.port_slice(port);
        // Bus address 0 is never handed out (it reads as "no buffer").
        let alloc = FirstFit::new(start.max(PAGE_SIZE), start + len);
        let be = LiveBackend {
            inner: Arc::new(Inner {
                sram,
                host,
                cluster: dir.path().to_path_buf(),
                node,
                port,
                slice_start: start,
                slice_end: start + len,
                alloc: Mutex::new(alloc),
                idle: opts.idle,
                refused: AtomicU64::new(0),
                bad_frees: AtomicU64::new(0),
                _lock: lock,
            }),
        };
        be.take_over(opts.takeover_timeout)?;
        Ok(be)
    }

    /// We hold the lock, so no live process holds the port. If its STATE
    /// still says open, its holder died: close it. Then wait until the
    /// firmware stops serving any earlier generation, since it may still
    /// write into memory of the slice we are about to hand out again.
    fn take_over(&self, timeout: Duration) -> Result<(), DriverError> {
        let p = self.inner.port as usize;
        if self.sram_load_u32(port_reg(p, pcb::STATE)) == pcb::STATE_OPEN {
            self.sram_store_u32(port_reg(p, pcb::STATE), pcb::STATE_CLOSED);
            self.doorbell();
        }
        let start = clock_ns();
        let limit = duration_ns(timeout);
        while self.sram_load_u32(reg(regs::FW_STATUS)) == regs::FW_RUNNING
            && self.sram_load_u32(port_reg(p, pcb::FW_STATE)) == pcb::STATE_OPEN
        {
            if clock_ns().saturating_sub(start) >= limit {
                return Err(DriverError::PortBusy(self.inner.port));
            }
            self.idle_wait();
        }
        Ok(())
    }

    pub fn node(&self) -> u32 {
        self.inner.node
    }

    pub fn port(&self) -> u8 {
        self.inner.port
    }

    /// The cluster directory this backend is attached to.
    pub fn cluster_path(&self) -> &Path {
        &self.inner.cluster
    }

    /// This port's slice of host memory: (first bus address, length).
    pub fn slice(&self) -> (u64, u64) {
        (self.inner.slice_start, self.inner.slice_end - self.inner.slice_start)
    }

    /// Bytes of DMA memory allocated now (page rounded).
    pub fn dma_in_use(&self) -> u64 {
        self.lock_alloc().in_use()
    }

    /// Bytes of the slice still free for DMA allocations.
    pub fn dma_free(&self) -> u64 {
        self.lock_alloc().free_bytes()
    }

    /// Accesses refused so far: out of the file, or outside what this port
    /// may touch (they read zero, writes were dropped).
    pub fn refused_accesses(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// `free_dma` calls that matched no allocation (ignored).
    pub fn bad_frees(&self) -> u64 {
        self.inner.bad_frees.load(Ordering::Relaxed)
    }

    fn lock_alloc(&self) -> std::sync::MutexGuard<'_, FirstFit> {
        self.inner.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse(&self) {
        self.inner.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// May this process write `[off, off + len)` of SRAM? Its port window,
    /// its page table, and the host-owned registers.
    fn sram_writable(&self, off: u32, len: usize) -> bool {
        let p = self.inner.port as usize;
        let (off, end) = (off as u64, off as u64 + len as u64);
        let inside =
            |start: u32, size: u32| off >= start as u64 && end <= start as u64 + size as u64;
        inside(port_window(p), PORT_WINDOW)
            || inside(page_table(p), PAGE_TABLE_SIZE)
            || inside(reg(regs::HOST_DOORBELL), 4)
            || inside(reg(regs::TRACE_ENABLE), 4)
    }

    /// Is `[bus, bus + len)` inside this port's slice?
    fn host_ok(&self, bus: u64, len: usize) -> bool {
        bus >= self.inner.slice_start
            && bus.checked_add(len as u64).is_some_and(|end| end <= self.inner.slice_end)
    }
}

/// Open `port<P>.lock` and take it exclusively without blocking, retrying
/// for `retry` (a prober holds it shared for an instant).
fn take_lock(path: &Path, port: u8, retry: Duration) -> Result<File, DriverError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| fault(NodeFile::PortLock, &e))?;
    let start = Instant::now();
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(TryLockError::WouldBlock) if start.elapsed() < retry => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => return Err(DriverError::PortBusy(port)),
            Err(TryLockError::Error(e)) => return Err(fault(NodeFile::PortLock, &e)),
        }
    }
}

impl NicBackend for LiveBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        if !self.inner.sram.read(off as u64, buf) {
            self.refuse();
        }
    }

    fn sram_write(&self, off: u32, data: &[u8]) {
        if !self.sram_writable(off, data.len()) || !self.inner.sram.write(off as u64, data) {
            self.refuse();
        }
    }

    fn sram_load_u32(&self, off: u32) -> u32 {
        self.inner.sram.load_u32(off as u64).unwrap_or_else(|| {
            self.refuse();
            0
        })
    }

    fn sram_store_u32(&self, off: u32, v: u32) {
        if !self.sram_writable(off, 4) || !self.inner.sram.store_u32(off as u64, v) {
            self.refuse();
        }
    }

    fn sram_load_u64(&self, off: u32) -> u64 {
        self.inner.sram.load_u64(off as u64).unwrap_or_else(|| {
            self.refuse();
            0
        })
    }

    fn sram_store_u64(&self, off: u32, v: u64) {
        if !self.sram_writable(off, 8) || !self.inner.sram.store_u64(off as u64, v) {
            self.refuse();
        }
    }

    fn host_read(&self, bus: u64, buf: &mut [u8]) {
        if !self.host_ok(bus, buf.len()) || !self.inner.host.read(bus, buf) {
            buf.fill(0);
            self.refuse();
        }
    }

    fn host_write(&self, bus: u64, data: &[u8]) {
        if !self.host_ok(bus, data.len()) || !self.inner.host.write(bus, data) {
            self.refuse();
        }
    }

    fn host_load_u32(&self, bus: u64) -> u32 {
        if !self.host_ok(bus, 4) {
            self.refuse();
            return 0;
        }
        self.inner.host.load_u32(bus).unwrap_or_else(|| {
            self.refuse();
            0
        })
    }

    fn alloc_dma(&self, len: u64) -> Option<u64> {
        self.lock_alloc().alloc(len)
    }

    fn free_dma(&self, bus: u64, len: u64) {
        if !self.lock_alloc().free(bus, len) {
            self.inner.bad_frees.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Monotonic ns since this process's first use of the clock
    /// (`Instant`: the vDSO clock, no system call).
    fn now_ns(&self) -> u64 {
        clock_ns()
    }

    /// Costs nothing in real time; a found event or a post ends this
    /// thread's idle streak (see `IdlePolicy`).
    fn charge(&self, op: HostOp) {
        if op != HostOp::EventEmpty {
            IDLE_SINCE.with(|s| s.set(u64::MAX));
        }
    }

    /// `HOST_DOORBELL += 1`, one atomic add in the mapping.
    fn doorbell(&self) {
        if self.inner.sram.fetch_add_u32(reg(regs::HOST_DOORBELL) as u64, 1).is_none() {
            self.refuse();
        }
    }

    /// Spin, then yield, then sleep, by how long this thread has been idle.
    fn idle_wait(&self) -> bool {
        let now = clock_ns();
        let since = IDLE_SINCE.with(|s| {
            if s.get() == u64::MAX {
                s.set(now);
            }
            s.get()
        });
        let idle = now.saturating_sub(since);
        let pol = &self.inner.idle;
        if idle < duration_ns(pol.spin) {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        } else if idle < duration_ns(pol.yield_until) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pol.sleep);
        }
        true
    }

    fn port_hint(&self) -> Option<u8> {
        Some(self.inner.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, len: u64) -> MappedFile {
        let path = std::env::temp_dir().join(format!("hd-live-{}-{name}", std::process::id()));
        let f = File::create(&path).unwrap();
        f.set_len(len).unwrap();
        let m = MappedFile::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        m
    }

    /// Every relative offset around the bulk copy's 4K-aliasing window
    /// (where it falls back to the word loop), both copy paths, lengths
    /// either side of `BULK_MIN`: exact bytes, nothing around them.
    #[test]
    fn bulk_and_word_copies_agree_at_every_offset() {
        let a = temp_file("bulk-a", 16384);
        let b = temp_file("bulk-b", 16384);
        let data: Vec<u8> = (0..16384u32).map(|i| (i * 13 + i / 251) as u8).collect();
        assert!(a.write(0, &data));
        for delta in 0..80u64 {
            for n in [63usize, 64, 65, 1000, 4096, 4103] {
                let (s, d) = (4096 + 3, 4096 + 3 + delta);
                assert!(b.fill(0, 16384, 0xEE));
                assert!(b.copy_from(d, &a, s, n), "{delta} {n}");
                let mut out = vec![0u8; n + 2];
                assert!(b.read(d - 1, &mut out));
                assert_eq!(out[0], 0xEE, "byte before, {delta} {n}");
                assert_eq!(&out[1..=n], &data[s as usize..s as usize + n], "{delta} {n}");
                assert_eq!(out[n + 1], 0xEE, "byte after, {delta} {n}");
                // Through a buffer of our own at the same relative offset.
                let mut mine = vec![0u8; n + 128];
                let at = (delta as usize) % 64;
                assert!(a.read(s, &mut mine[at..at + n]));
                assert_eq!(&mine[at..at + n], &data[s as usize..s as usize + n]);
                assert!(b.write(d + 8000, &mine[at..at + n]));
                let mut back = vec![0u8; n];
                assert!(b.read(d + 8000, &mut back));
                assert_eq!(back, &data[s as usize..s as usize + n], "{delta} {n}");
            }
        }
    }

    #[test]
    fn copy_from_moves_exact_bytes_at_any_alignment_and_refuses_out_of_range() {
        let a = temp_file("a", 8192);
        let b = temp_file("b", 8192);
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
        assert!(a.write(100, &data));
        // (dst offset, src offset, len): same and different alignment,
        // short copies with only a head or a tail, empty.
        for (d, s, n) in
            [(0u64, 100u64, 3000usize), (5, 101, 2999), (4, 103, 2000), (3, 100, 5), (9, 100, 0)]
        {
            assert!(b.fill(0, 8192, 0xEE));
            assert!(b.copy_from(d, &a, s, n), "{d} {s} {n}");
            let mut want = vec![0u8; n];
            a.read(s, &mut want);
            let mut out = vec![0u8; n];
            b.read(d, &mut out);
            assert_eq!(out, want, "{d} {s} {n}");
            // Nothing around the copy changed.
            assert_eq!(b.load_u64(8184), Some(0xEEEE_EEEE_EEEE_EEEE));
            if d > 0 {
                let mut before = [0u8; 1];
                b.read(d - 1, &mut before);
                assert_eq!(before, [0xEE]);
            }
            let mut after = [0u8; 1];
            b.read(d + n as u64, &mut after);
            assert_eq!(after, [0xEE], "{d} {s} {n}");
        }
        assert!(b.fill(0, 8192, 0xEE));
        assert!(!b.copy_from(8000, &a, 100, 200), "past the end of the destination");
        assert!(!b.copy_from(0, &a, 8100, 200), "past the end of the source");
        assert!(!b.copy_from(0, &a, u64::MAX, 1));
        let mut all = vec![0u8; 8192];
        b.read(0, &mut all);
        assert!(all.iter().all(|&x| x == 0xEE), "a refused copy wrote nothing");
    }

    #[test]
    fn first_fit_takes_the_first_hole_and_coalesces_frees() {
        let mut a = FirstFit::new(0x1000, 0x1000 + 16 * PAGE_SIZE);
        let x = a.alloc(1).unwrap();
        let y = a.alloc(PAGE_SIZE + 1).unwrap();
        let z = a.alloc(PAGE_SIZE).unwrap();
        assert_eq!((x, y, z), (0x1000, 0x2000, 0x4000));
        assert!(a.free(y, PAGE_SIZE + 1));
        // One page fits the first hole (two pages wide).
        assert_eq!(a.alloc(10), Some(0x2000));
        assert!(a.free(0x2000, 10));
        assert!(a.free(x, 1));
        assert!(a.free(z, PAGE_SIZE));
        assert_eq!(a.in_use(), 0);
        assert_eq!(a.free, vec![(0x1000, 16 * PAGE_SIZE)]);
        // Everything again in one piece.
        assert_eq!(a.alloc(16 * PAGE_SIZE), Some(0x1000));
        assert_eq!(a.alloc(1), None);
    }

    #[test]
    fn first_fit_ignores_frees_that_match_no_allocation() {
        let mut a = FirstFit::new(0, 4 * PAGE_SIZE);
        let x = a.alloc(PAGE_SIZE).unwrap();
        assert!(!a.free(x + PAGE_SIZE, PAGE_SIZE));
        assert!(!a.free(x, 3 * PAGE_SIZE));
        assert!(a.free(x, PAGE_SIZE));
        assert!(!a.free(x, PAGE_SIZE), "double free");
        assert_eq!(a.free_bytes(), 4 * PAGE_SIZE);
        assert_eq!(a.alloc(0), None);
        assert_eq!(a.alloc(u64::MAX), None);
    }
}
