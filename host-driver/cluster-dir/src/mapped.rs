//! `MappedFile`: a whole file mapped shared and writable, the only place
//! that touches mapped memory (the crate denies `unsafe` everywhere else;
//! `lib.rs` allows it for this module). The live and qemu backends' SRAM
//! and host-memory files are reached through it, by host processes
//! (host-driver's `LiveBackend`) and by the device process (nic-emu).
//!
//! Owns the mapping; touches nothing outside it. Every access is
//! bounds-checked; words are atomics with Acquire/Release, byte ranges
//! relaxed atomic copies. It implements `nic_abi::sram::Sram` with its
//! atomics for the word accessors.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use nic_abi::sram::Sram;

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
/// legitimate pair through a Release/Acquire counter.)
///
/// Node files keep their size for the cluster's life, but a process of
/// the cluster's user can truncate one. Touching a mapped page past the
/// new end raises SIGBUS, which would kill the process. Every mapping is
/// therefore guarded (`guard`): a SIGBUS inside it sets the file back to
/// its mapped length (the cut bytes read as zeros from then on) and the
/// access is retried; `truncations_repaired()` counts them, and
/// `check_size` finds and repairs a changed size before anyone faults.
///
/// The files are sparse: a page gets its memory when first touched. When
/// the file system cannot provide it (full, or an I/O error) the access
/// raises SIGBUS too, though the file kept its size. The guard tells the
/// two apart by the size, and a page that cannot be backed is never
/// retried as it is: the process's [`FaultPolicy`] says what happens
/// (by default a message naming the file and the cause, and exit status
/// [`EXIT_UNBACKED`]; the device process isolates the page and stops the
/// node, [`MappedFile::fault`]).
pub struct MappedFile {
    map: MmapRaw,
    len: usize,
    path: PathBuf,
    /// False: mapped read-only; every store is refused (returns false).
    writable: bool,
    /// The file, and every file laid over a part of it (`open_overlaid`).
    parts: Vec<Part>,
}

/// One file of a mapping: held open for the guard, which restores the
/// size through it.
struct Part {
    file: std::fs::File,
    /// (The guard's slot points at its bytes, for the message of
    /// `FaultPolicy::Exit`: never changed while the slot is held.)
    path: PathBuf,
    /// Its length (it lies whole in the mapping).
    len: usize,
    /// The guard's slot (None: all slots taken; unguarded).
    slot: Option<usize>,
    /// The file's inode: the guard counts repairs per file.
    ino: u64,
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        for p in &self.parts {
            if let Some(s) = p.slot {
                guard::unregister(s);
            }
        }
    }
}

/// Raise this process's soft limit of open files to its hard limit and
/// return the new soft limit. Each `MappedFile` holds its file open (the
/// SIGBUS guard needs it), and a device process maps two files per node,
/// twice: a large cluster needs more than the common default of 1024.
pub fn raise_open_file_limit() -> io::Result<u64> {
    // SAFETY: getrlimit and setrlimit with a valid, owned struct.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return Err(io::Error::last_os_error());
        }
        if l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(l.rlim_cur as u64)
    }
}

/// SIGBUS raised by a truncated mapped file, repaired so far in this
/// process (the file set back to its mapped length).
pub fn truncations_repaired() -> u64 {
    guard::REPAIRED.load(Ordering::Relaxed)
}

/// The exit status of a process whose mapped file could not back a page
/// under [`FaultPolicy::Exit`] (sysexits' EX_IOERR).
pub const EXIT_UNBACKED: i32 = 74;

/// What this process does when a page of a mapped file cannot be backed
/// (a SIGBUS on a file that kept its size: its file system is full, or
/// failed to read or allocate the page). The access cannot simply be
/// retried: it would fault again, for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPolicy {
    /// Write one line on stderr naming the file and the cause, and exit
    /// at once with status [`EXIT_UNBACKED`]. The default: a host
    /// program cannot go on with memory the device does not see.
    Exit,
    /// Put a private zero page in this mapping's place for that page, so
    /// the access completes (its bytes reach no other process), and
    /// record it: [`pages_isolated`], [`MappedFile::fault`]. The device
    /// process's choice: it stops the node that owns the file and goes on
    /// with the others.
    Isolate,
}

/// Set this process's [`FaultPolicy`] (for every mapping, now and later).
pub fn set_fault_policy(p: FaultPolicy) {
    guard::POLICY.store(p == FaultPolicy::Isolate, Ordering::Relaxed);
}

/// Pages replaced by private ones so far in this process
/// ([`FaultPolicy::Isolate`]): a cheap look for whether any mapping
/// needs a closer one ([`MappedFile::fault`]).
pub fn pages_isolated() -> u64 {
    guard::ISOLATED.load(Ordering::Relaxed)
}

/// Why a page of a mapped file could not be backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCause {
    /// Its file system had no free block left.
    NoSpace,
    /// Its file system had room but did not provide the page (an I/O
    /// error, a quota).
    Io,
}

impl std::fmt::Display for FaultCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultCause::NoSpace => "no space left on the file system",
            FaultCause::Io => "the file system did not provide a page (an I/O error or a quota)",
        })
    }
}

/// A mapped file that could not back a page ([`FaultPolicy::Isolate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFault {
    pub path: PathBuf,
    pub cause: FaultCause,
    /// Its pages replaced by private ones, in every mapping of this
    /// process.
    pages: u64,
}

impl FileFault {
    /// Its pages replaced by private ones so far, in every mapping of
    /// this process.
    pub fn pages(&self) -> u64 {
        self.pages
    }
}

/// Room on a file system (`statvfs`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    /// Free for an unprivileged user.
    pub free: u64,
    pub total: u64,
}

impl std::fmt::Display for FsSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} free of {}", bytes(self.free), bytes(self.total))
    }
}

/// Bytes in words: "512 B", "12.0 KiB", "20.0 MiB", "3.5 GiB".
pub fn bytes(b: u64) -> String {
    let f = b as f64;
    match b {
        0..1024 => format!("{b} B"),
        1024..0x10_0000 => format!("{:.1} KiB", f / 1024.0),
        0x10_0000..0x4000_0000 => format!("{:.1} MiB", f / (1u64 << 20) as f64),
        _ => format!("{:.1} GiB", f / (1u64 << 30) as f64),
    }
}

/// The room on the file system that holds `path`.
pub fn fs_space(path: &Path) -> io::Result<FsSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: statvfs with a NUL-terminated path and a zeroed struct of
    // our own that it fills.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        st
    };
    let unit = st.f_frsize as u64;
    Ok(FsSpace {
        free: (st.f_bavail as u64).saturating_mul(unit),
        total: (st.f_blocks as u64).saturating_mul(unit),
    })
}

/// The SIGBUS guard: a table of live mappings that the signal handler
/// reads (atomics only: it may run at any instruction), and the handler.
mod guard {
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    use super::{FaultCause, EXIT_UNBACKED};

    /// Files guarded at once: a device process maps a node's SRAM as
    /// ten files (`sram`, `regs`, eight port windows) and its host memory
    /// as nine, twice each.
    const SLOTS: usize = 16384;

    /// `si_code`s of a SIGBUS for a hardware memory error: never ours.
    const BUS_MCEERR_AR: i32 = 4;
    const BUS_MCEERR_AO: i32 = 5;

    struct Slot {
        /// -1: free; -2: being filled; else the file's descriptor.
        fd: AtomicI32,
        start: AtomicUsize,
        len: AtomicUsize,
        /// The file (inode) and the faults repaired through this mapping.
        ino: AtomicU64,
        repairs: AtomicU64,
        /// Pages of this mapping that could not be backed and were
        /// replaced by private ones, and why (a `cause_code`).
        isolated: AtomicU64,
        cause: AtomicU8,
        /// The page last retried because its file was whole by the time
        /// the handler looked (set back meanwhile: `on_sigbus`).
        retried: AtomicUsize,
        /// The file's path (bytes owned by the mapping's `Part`).
        path: AtomicUsize,
        path_len: AtomicUsize,
    }

    static TABLE: [Slot; SLOTS] = [const {
        Slot {
            fd: AtomicI32::new(-1),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            ino: AtomicU64::new(0),
            repairs: AtomicU64::new(0),
            isolated: AtomicU64::new(0),
            cause: AtomicU8::new(0),
            retried: AtomicUsize::new(usize::MAX),
            path: AtomicUsize::new(0),
            path_len: AtomicUsize::new(0),
        }
    }; SLOTS];
    pub(super) static REPAIRED: AtomicU64 = AtomicU64::new(0);
    pub(super) static ISOLATED: AtomicU64 = AtomicU64::new(0);
    /// True: `FaultPolicy::Isolate`; false: `Exit`.
    pub(super) static POLICY: AtomicBool = AtomicBool::new(false);
    /// The disposition before ours, to pass on faults that are not ours.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    const NO_SPACE: u8 = 1;
    const IO: u8 = 2;

    /// Guard `[start, start + len)`, backed by `fd`, the file `path`
    /// (whose bytes must stay put until `unregister`). None when the
    /// table is full.
    pub(super) fn register(
        start: usize,
        len: usize,
        fd: i32,
        ino: u64,
        path: &[u8],
    ) -> Option<usize> {
        install();
        let i = (0..SLOTS).find(|&i| {
            TABLE[i].fd.compare_exchange(-1, -2, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        })?;
        TABLE[i].start.store(start, Ordering::Relaxed);
        TABLE[i].len.store(len, Ordering::Relaxed);
        TABLE[i].ino.store(ino, Ordering::Relaxed);
        TABLE[i].repairs.store(0, Ordering::Relaxed);
        TABLE[i].isolated.store(0, Ordering::Relaxed);
        TABLE[i].cause.store(0, Ordering::Relaxed);
        TABLE[i].retried.store(usize::MAX, Ordering::Relaxed);
        TABLE[i].path.store(path.as_ptr() as usize, Ordering::Relaxed);
        TABLE[i].path_len.store(path.len(), Ordering::Relaxed);
        TABLE[i].fd.store(fd, Ordering::Release);
        Some(i)
    }

    fn live_of(ino: u64) -> impl Iterator<Item = &'static Slot> {
        TABLE.iter().filter(move |s| {
            s.fd.load(Ordering::Acquire) >= 0 && s.ino.load(Ordering::Relaxed) == ino
        })
    }

    /// Faults repaired through any live mapping of file `ino` in this
    /// process.
    pub(super) fn repairs_of(ino: u64) -> u64 {
        live_of(ino).map(|s| s.repairs.load(Ordering::Relaxed)).sum()
    }

    /// Pages of file `ino` isolated in any live mapping of this process,
    /// and why (the first cause recorded).
    pub(super) fn isolated_of(ino: u64) -> Option<(u64, FaultCause)> {
        let (mut n, mut cause) = (0, None);
        for s in live_of(ino) {
            let k = s.isolated.load(Ordering::Acquire);
            if k > 0 {
                n += k;
                cause = cause.or(match s.cause.load(Ordering::Relaxed) {
                    NO_SPACE => Some(FaultCause::NoSpace),
                    _ => Some(FaultCause::Io),
                });
            }
        }
        cause.map(|c| (n, c))
    }

    pub(super) fn unregister(i: usize) {
        TABLE[i].fd.store(-1, Ordering::Release);
    }

    fn install() {
        PREVIOUS.get_or_init(|| {
            // SAFETY: sigaction with a zeroed struct (a valid empty mask,
            // no flags) filled with our handler; the old disposition is
            // written into `old`, which we keep.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigbus as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGBUS, &new, &mut old);
                old
            }
        });
    }

    /// Why the file system of `fd` did not back a page: no free block
    /// left (less than a page free for an unprivileged user, as
    /// `fs_space` counts), or something else. Async-signal-safe: one
    /// fstatfs.
    fn cause_of(fd: i32) -> u8 {
        // SAFETY: fstatfs fills a zeroed struct of our own.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above; fd is a descriptor we hold open.
        if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
            return IO;
        }
        let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
        if free < super::PAGE {
            NO_SPACE
        } else {
            IO
        }
    }

    /// Write `parts` to stderr (async-signal-safe: write(2) only).
    fn say(parts: &[&[u8]]) {
        for p in parts {
            let mut b = *p;
            while !b.is_empty() {
                // SAFETY: write from a valid byte slice.
                let n = unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
                if n <= 0 {
                    return;
                }
                b = &b[n as usize..];
            }
        }
    }

    /// A page of `s` (a SIGBUS at `addr`) that its file kept but cannot
    /// back. Isolate: a private zero page in its place, recorded; the
    /// access is then retried. Exit (or no private page to be had): the
    /// message, and `_exit`.
    fn unbacked(s: &Slot, fd: i32, addr: usize) {
        let cause = cause_of(fd);
        if POLICY.load(Ordering::Relaxed) {
            let page = addr & !(super::PAGE as usize - 1);
            // SAFETY: `page` lies inside a live mapping of ours (the slot
            // covers it); MAP_FIXED replaces that one page of it with
            // private anonymous memory, which the mapping's owner unmaps
            // with the rest. Every access to it goes through atomics made
            // per access, so no reference into the page is invalidated
            // (the one slice `with_bytes` lends sees its bytes become
            // zeros, as another process's stores could change them).
            let at = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    super::PAGE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if at != libc::MAP_FAILED {
                s.cause.store(cause, Ordering::Relaxed);
                s.isolated.fetch_add(1, Ordering::Release);
                ISOLATED.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let (p, n) = (s.path.load(Ordering::Relaxed), s.path_len.load(Ordering::Relaxed));
        // SAFETY: the slot is live, and its path bytes belong to the
        // mapping's `Part`, which unregisters the slot before they go.
        let path = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
        let why: &[u8] = if cause == NO_SPACE {
            b"no space left on the file system"
        } else {
            b"the file system did not provide a page (an I/O error or a quota)"
        };
        say(&[b"mapped file ", path, b": a page cannot be backed: ", why, b"; exiting\n"]);
        // SAFETY: _exit ends the process at once; async-signal-safe.
        unsafe { libc::_exit(EXIT_UNBACKED) }
    }

    /// Async-signal-safe: atomic loads, fstat, fstatfs, ftruncate, mmap,
    /// write, _exit, sigaction.
    extern "C" fn on_sigbus(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO
        // handler; si_addr is the faulting address for SIGBUS.
        let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
        // The narrowest guarded range holding the address: a file laid
        // over part of another mapping is the one that faulted there.
        let mut best: Option<(&Slot, i32, usize)> = None;
        if code != BUS_MCEERR_AR && code != BUS_MCEERR_AO {
            for s in TABLE.iter() {
                let fd = s.fd.load(Ordering::Acquire);
                if fd < 0 {
                    continue;
                }
                let (start, len) = (s.start.load(Ordering::Relaxed), s.len.load(Ordering::Relaxed));
                if addr >= start && addr - start < len && best.is_none_or(|(_, _, l)| len < l) {
                    best = Some((s, fd, len));
                }
            }
        }
        if let Some((s, fd, len)) = best {
            // SAFETY: fstat on a descriptor we hold open, into a zeroed
            // struct of our own.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let size = (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_size as u64);
            if size.is_some_and(|sz| sz >= len as u64) {
                // The file is whole: it was set back after the fault (by
                // another thread's fault, or the supervisor) and the
                // access is retried once; a page that faults again with
                // its file whole cannot be had.
                let page = addr & !(super::PAGE as usize - 1);
                if s.retried.swap(page, Ordering::AcqRel) != page {
                    return;
                }
                unbacked(s, fd, addr);
                return;
            }
            // SAFETY: ftruncate on a descriptor we hold open; growing
            // the file back makes the faulting page exist again.
            if unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0 {
                REPAIRED.fetch_add(1, Ordering::Relaxed);
                s.repairs.fetch_add(1, Ordering::Relaxed);
                // Retried; if the page still cannot be had, the file has
                // its size then, and the next fault says so.
                return;
            }
        }
        // Not one of ours: what was there before.
        let Some(prev) = PREVIOUS.get() else { return };
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // SAFETY: restore the old disposition; returning re-executes
            // the faulting access, which then takes the default action.
            unsafe { libc::sigaction(libc::SIGBUS, prev, std::ptr::null_mut()) };
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous handler was installed as a three-
            // argument handler; called as the kernel would.
            let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: a one-argument handler, called as the kernel would.
            let f: extern "C" fn(i32) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}

/// The page size overlays are aligned to.
const PAGE: u64 = nic_abi::PAGE_SIZE;

fn file_len(f: &std::fs::File) -> io::Result<usize> {
    usize::try_from(f.metadata()?.len())
        .ok()
        .filter(|&l| l > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "empty or huge file"))
}

impl Part {
    /// A file mapped at `start`, `len` bytes,
    /// entered in the SIGBUS guard.
    fn guarded(file: std::fs::File, path: &Path, start: usize, len: usize) -> io::Result<Part> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let ino = file.metadata()?.ino();
        // The slot points at the PathBuf's bytes, which moving the
        // PathBuf (into the Part) does not move.
        let path = path.to_path_buf();
        let slot = guard::register(start, len, file.as_raw_fd(), ino, path.as_os_str().as_bytes());
        Ok(Part { file, path, len, slot, ino })
    }
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
        MappedFile::from_file(f, path, true)
    }

    /// Map all of the open file `f` (non-empty), shared; read-only unless
    /// `writable` (then `f` must be open for writing). `name` is only
    /// for messages. A file handed over by another process (a port's
    /// window, its memory) is mapped this way.
    pub fn from_file(f: std::fs::File, name: &Path, writable: bool) -> io::Result<MappedFile> {
        let len = file_len(&f)?;
        let map = if writable {
            MmapOptions::new().len(len).map_raw(&f)?
        } else {
            MmapOptions::new().len(len).map_raw_read_only(&f)?
        };
        if map.len() != len || !(map.as_ptr() as usize).is_multiple_of(8) {
            return Err(io::Error::other("mapping has an unexpected length or alignment"));
        }
        let part = Part::guarded(f, name, map.as_ptr() as usize, len)?;
        Ok(MappedFile { map, len, path: name.to_path_buf(), writable, parts: vec![part] })
    }

    /// Map all of `base` read-write, shared, with each `(offset, file)` of
    /// `overlays` mapped over its place: the bytes of the mapping at
    /// `[offset, offset + file length)` are that file's, not `base`'s.
    /// Offsets and lengths must be page-aligned and inside `base`. How a
    /// node's SRAM is seen whole while its register page and each port's
    /// window are files of their own, which another process can map
    /// alone.
    pub fn open_overlaid(base: &Path, overlays: &[(u64, PathBuf)]) -> io::Result<MappedFile> {
        MappedFile::open_overlaid_with(base, overlays, |path| {
            OpenOptions::new().read(true).write(true).open(path)
        })
    }

    /// As `open_overlaid`, but each file (`base` too) is what `open`
    /// gives for its path: the device process hands in duplicates of
    /// descriptors it holds, so that every mapping it makes of a port's
    /// window or slice shares one open file description (which is how it
    /// can tell whether any other process still has the file;
    /// nic-realtime's `files` module).
    pub fn open_overlaid_with(
        base: &Path,
        overlays: &[(u64, PathBuf)],
        open: impl Fn(&Path) -> io::Result<std::fs::File>,
    ) -> io::Result<MappedFile> {
        let mut m = MappedFile::from_file(open(base)?, base, true)?;
        for (off, path) in overlays {
            let f = open(path)?;
            let len = file_len(&f)?;
            let page = PAGE as usize;
            let off = usize::try_from(*off)
                .ok()
                .filter(|&o| o % page == 0 && len % page == 0)
                .filter(|&o| o.checked_add(len).is_some_and(|e| e <= m.len))
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} does not fit at {off:#x} of {}",
                            path.display(),
                            base.display()
                        ),
                    )
                })?;
            use std::os::fd::AsRawFd;
            // SAFETY: [off, off + len) lies inside our own mapping (checked
            // above, page aligned); MAP_FIXED replaces those pages of it
            // with the file's, shared and read-write like the rest. No
            // reference into the mapping exists (all access goes through
            // atomics made per access), and `m.map` unmaps the whole range,
            // overlays too, when dropped.
            let at = unsafe {
                libc::mmap(
                    m.map.as_mut_ptr().add(off).cast(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    f.as_raw_fd(),
                    0,
                )
            };
            if at == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let start = m.map.as_ptr() as usize + off;
            m.parts.push(Part::guarded(f, path, start, len)?);
        }
        Ok(m)
    }

    /// SIGBUS faults on this mapping's files (through any of this
    /// process's mappings of them) repaired so far: each one means a file
    /// was cut while mapped, and the bytes past the cut are zeros now.
    pub fn repairs(&self) -> u64 {
        // None in this process at all (the usual case): no table walk.
        if truncations_repaired() == 0 {
            return 0;
        }
        self.parts.iter().map(|p| guard::repairs_of(p.ino)).sum()
    }

    /// A page of one of its files that could not be backed
    /// ([`FaultPolicy::Isolate`]; through any of this process's mappings
    /// of the file): the first such file, why, and how many pages so far.
    /// None (the usual case, no table walk) while no page of any file was
    /// isolated in this process.
    pub fn fault(&self) -> Option<FileFault> {
        if pages_isolated() == 0 {
            return None;
        }
        self.parts.iter().find_map(|p| {
            let (pages, cause) = guard::isolated_of(p.ino)?;
            Some(FileFault { path: p.path.clone(), cause, pages })
        })
    }

    /// Has the size of one of its files changed since it was mapped
    /// (truncated, or grown)? Then set it back and return that file and
    /// the size found. (A shrunken file's cut bytes read as zeros
    /// afterwards.)
    pub fn check_size(&self) -> io::Result<Option<(PathBuf, u64)>> {
        for p in &self.parts {
            let now = p.file.metadata()?.len();
            if now != p.len as u64 {
                p.file.set_len(p.len as u64)?;
                return Ok(Some((p.path.clone(), now)));
            }
        }
        Ok(None)
    }

    /// Is this mapping writable?
    pub fn writable(&self) -> bool {
        self.writable
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

    /// A second handle on the mapped file (the first of an overlaid
    /// mapping): for a caller that maps it again elsewhere, as the GM
    /// library maps a port's slice at the addresses the NIC translates.
    pub fn try_clone_file(&self) -> io::Result<std::fs::File> {
        self.parts[0].file.try_clone()
    }

    /// Start of `[off, off + n)` as an index, if it lies inside the file.
    #[inline]
    fn span(&self, off: u64, n: usize) -> Option<usize> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(n)?;
        (end <= self.len).then_some(start)
    }

    /// As `span`, for a store: None also when mapped read-only.
    #[inline]
    fn wspan(&self, off: u64, n: usize) -> Option<usize> {
        if self.writable {
            self.span(off, n)
        } else {
            None
        }
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
    #[inline(always)]
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
    #[inline(always)]
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

    /// Hand `f` the bytes `[off, off + len)` in place, as a slice, without
    /// copying them: the send-DMA engine's CRC over a packet in SRAM. None
    /// (`f` not called) if the range leaves the file.
    ///
    /// # Safety
    /// No thread of this process may store into these bytes (through this
    /// mapping or another of the same file) while `f` runs: the caller
    /// owns them by the ABI's hand-off (a transmit buffer the firmware
    /// gave the send-DMA engine). Another process's stores are outside
    /// this program, as for every access here, and can only garble what
    /// `f` reads.
    #[inline]
    pub unsafe fn with_bytes<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let start = self.span(off, len)?;
        // SAFETY: [start, start + len) lies in the mapping (span checked),
        // which lives as long as &self and is readable; no thread of this
        // process writes it while the slice lives (the caller's promise),
        // so the shared borrow aliases no in-process store.
        let bytes = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) };
        Some(f(bytes))
    }

    /// Copy `data` to `off` (relaxed; publish with a Release store after).
    /// Out of range: nothing is written, false returned.
    #[inline(always)]
    pub fn write(&self, off: u64, data: &[u8]) -> bool {
        let Some(start) = self.wspan(off, data.len()) else {
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
        let (Some(d), Some(s)) = (self.wspan(off, len), src.span(src_off, len)) else {
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
    #[inline(always)]
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
        if self.wspan(off, n).is_none() {
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
        let Some(i) = self.wspan(off, 4) else { return false };
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
        let Some(i) = self.wspan(off, 8) else { return false };
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
        let i = self.wspan(off, 4)?;
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

/// SRAM through the mapping: out of range reads zero, writes are dropped.
/// Words are single atomic accesses (Acquire loads, Release stores).
impl Sram for MappedFile {
    #[inline(always)]
    fn read(&self, off: u32, buf: &mut [u8]) {
        MappedFile::read(self, off as u64, buf);
    }

    #[inline(always)]
    fn write(&mut self, off: u32, data: &[u8]) {
        MappedFile::write(self, off as u64, data);
    }

    #[inline]
    fn load_u32(&self, off: u32) -> u32 {
        MappedFile::load_u32(self, off as u64).unwrap_or(0)
    }

    #[inline]
    fn store_u32(&mut self, off: u32, v: u32) {
        MappedFile::store_u32(self, off as u64, v);
    }

    #[inline]
    fn load_u64(&self, off: u32) -> u64 {
        MappedFile::load_u64(self, off as u64).unwrap_or(0)
    }

    #[inline]
    fn store_u64(&mut self, off: u32, v: u64) {
        MappedFile::store_u64(self, off as u64, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        let soft = raise_open_file_limit().unwrap();
        // SAFETY: getrlimit with a valid, owned struct.
        let hard = unsafe {
            let mut l: libc::rlimit = std::mem::zeroed();
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
            l.rlim_max as u64
        };
        assert_eq!(soft, hard);
    }

    #[test]
    fn a_file_truncated_under_its_mapping_is_set_back_not_a_sigbus() {
        let path = std::env::temp_dir().join(format!("hd-trunc-{}", std::process::id()));
        let f = File::create(&path).unwrap();
        f.set_len(64 * 1024).unwrap();
        let m = MappedFile::open(&path).unwrap();
        assert!(m.store_u32(40 * 1024, 7));
        // Someone cuts the file to one page: the next touch past it would
        // raise SIGBUS and kill this process.
        let before = truncations_repaired();
        File::options().write(true).open(&path).unwrap().set_len(4096).unwrap();
        assert_eq!(m.load_u32(40 * 1024), Some(0), "the cut bytes read as zeros");
        assert!(m.store_u32(60 * 1024, 9));
        assert_eq!(m.load_u32(60 * 1024), Some(9));
        assert!(truncations_repaired() > before);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024, "set back");
        // A size change found before anyone faults, and set back.
        File::options().write(true).open(&path).unwrap().set_len(8192).unwrap();
        assert_eq!(m.check_size().unwrap(), Some((path.clone(), 8192)));
        assert_eq!(m.check_size().unwrap(), None);
        File::options().write(true).open(&path).unwrap().set_len(1 << 20).unwrap();
        assert_eq!(m.check_size().unwrap(), Some((path.clone(), 1 << 20)));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024);
        drop(m);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn overlays_take_the_place_of_the_base_file_and_read_only_maps_refuse_stores() {
        let dir = std::env::temp_dir().join(format!("mapped-overlay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (base, a, b) = (dir.join("base"), dir.join("a"), dir.join("b"));
        File::create(&base).unwrap().set_len(16 * 4096).unwrap();
        File::create(&a).unwrap().set_len(4096).unwrap();
        File::create(&b).unwrap().set_len(2 * 4096).unwrap();
        let m =
            MappedFile::open_overlaid(&base, &[(4096, a.clone()), (8 * 4096, b.clone())]).unwrap();
        // One store per part, a byte range across the seam of a and base.
        assert!(m.store_u32(0, 1) && m.store_u32(4096 + 8, 2) && m.store_u64(9 * 4096, 3));
        assert!(m.write(2 * 4096 - 2, &[5, 6, 7, 8]));
        let word = |p: &Path, off: usize| {
            let v = std::fs::read(p).unwrap();
            u32::from_le_bytes(v[off..off + 4].try_into().unwrap())
        };
        assert_eq!((word(&base, 0), word(&a, 8), word(&b, 4096)), (1, 2, 3));
        assert_eq!(std::fs::read(&a).unwrap()[4094..], [5, 6]);
        assert_eq!(std::fs::read(&base).unwrap()[2 * 4096..2 * 4096 + 2], [7, 8]);
        assert_eq!(word(&base, 4096 + 8), 0, "the base file's bytes under a are not used");
        // A part that does not fit, or is not page-aligned, is refused.
        assert!(MappedFile::open_overlaid(&base, &[(15 * 4096, b.clone())]).is_err());
        assert!(MappedFile::open_overlaid(&base, &[(100, a.clone())]).is_err());
        // A part's size change is found and named.
        File::options().write(true).open(&b).unwrap().set_len(4096).unwrap();
        assert_eq!(m.check_size().unwrap(), Some((b.clone(), 4096)));
        assert_eq!(m.load_u64(9 * 4096), Some(0), "the cut page is back, as zeros");
        // Read-only: loads work, every store is refused.
        let ro = MappedFile::from_file(File::open(&a).unwrap(), &a, false).unwrap();
        assert_eq!(ro.load_u32(8), Some(2));
        assert!(!ro.writable());
        assert!(!ro.store_u32(8, 9) && !ro.write(0, &[1]) && !ro.fill(0, 4, 1));
        assert!(!ro.store_u64(0, 1) && ro.fetch_add_u32(0, 1).is_none());
        assert!(!ro.copy_from(0, &m, 0, 4));
        assert_eq!(ro.load_u32(8), Some(2));
        drop((m, ro));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
}
