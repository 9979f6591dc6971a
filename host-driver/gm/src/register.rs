//! Registering a process's own memory (malloc'd, static, on its stack)
//! as GM did: the NIC must reach the pages where the program has them,
//! and a remote process names them by the program's own addresses.
//!
//! The emulated NIC reaches only the port's slice of host memory. So the
//! pages of the range are laid over with pages of the slice holding their
//! content (the slice's file mapped at the program's addresses: the
//! program and the NIC then share them), and the port names those slice
//! pages at the program's addresses too (an alias of its page table,
//! `Port::alias`). Deregistering undoes both: the NIC forgets the alias,
//! and the range becomes private memory again with the content it has
//! then. A range inside gm_dma_malloc's memory is registered already.

use std::ffi::c_void;
use std::os::fd::AsRawFd;

use host_driver::{DmaBuf, DriverError};

use crate::port::GmPort;
use crate::status::*;

/// The host page.
const PAGE: u64 = host_driver::nic_abi::PAGE_SIZE;

/// One registration: the program's pages `[start, start + len)`, laid
/// over with slice memory `buf`, named by alias `alias`. Ranges
/// registered over each other are one registration of their union; each
/// page counts the registrations that cover it (GM counted them too).
pub struct Registration {
    start: u64,
    len: u64,
    buf: DmaBuf,
    alias: usize,
    counts: Vec<u32>,
}

impl Registration {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// The pages covering `[ptr, ptr + len)`.
fn pages_of(ptr: u64, len: u64) -> Option<(u64, u64)> {
    let start = ptr & !(PAGE - 1);
    let end = ptr.checked_add(len)?.checked_add(PAGE - 1)? & !(PAGE - 1);
    Some((start, end - start))
}

impl GmPort {
    /// Register `[ptr, ptr + len)` of this process.
    pub fn register(&mut self, ptr: u64, len: u64) -> Result<(), (GmStatus, String)> {
        if len == 0 || self.in_dma(ptr, len) {
            return Ok(());
        }
        let Some((start, n)) = pages_of(ptr, len) else {
            return Err((GM_INVALID_PARAMETER, "the range wraps around".into()));
        };
        if self.in_slice(start, n) {
            return Err((GM_INVALID_PARAMETER, "the range is the port's own memory".into()));
        }
        // The registrations it overlaps become one with it: their union.
        let overlaps = |r: &Registration| start < r.end() && r.start < start + n;
        let (mut old, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.registrations).into_iter().partition(overlaps);
        self.registrations = keep;
        let first = old.iter().map(|r| r.start).chain([start]).min().unwrap_or(start);
        let end = old.iter().map(Registration::end).chain([start + n]).max().unwrap_or(start + n);
        let mut counts = vec![0u32; ((end - first) / PAGE) as usize];
        for r in &old {
            let at = ((r.start - first) / PAGE) as usize;
            for (k, c) in r.counts.iter().enumerate() {
                counts[at + k] += c;
            }
        }
        for c in &mut counts[((start - first) / PAGE) as usize..][..(n / PAGE) as usize] {
            *c += 1;
        }
        // The old ones undone first (their content back in private
        // pages), then the union laid over as one.
        for r in old.drain(..) {
            self.undo(r).map_err(|e| (GM_FAILURE, e))?;
        }
        self.lay_over(first, end - first, counts)
    }

    /// Lay slice memory over `[start, start + n)` with its content and
    /// name it there: a registration with page counts `counts`.
    fn lay_over(&mut self, start: u64, n: u64, counts: Vec<u32>) -> Result<(), (GmStatus, String)> {
        let buf = self.port.alloc(n).map_err(|e| (GM_OUT_OF_MEMORY, e.to_string()))?;
        // (`overlay` copies the content, then maps the slice's pages.)
        if let Err(e) = self.overlay(start, n, &buf) {
            let _ = self.port.free(buf);
            return Err((GM_FAILURE, format!("mapping the port's memory over the range: {e}")));
        }
        match self.port.alias(&buf, start) {
            Ok(alias) => {
                self.registrations.push(Registration { start, len: n, buf, alias, counts });
                Ok(())
            }
            Err(e) => {
                let _ = self.restore(start, n);
                let _ = self.port.free(buf);
                let s = if matches!(e, DriverError::PageTableFull) {
                    GM_PAGE_TABLE_FULL
                } else {
                    GM_FAILURE
                };
                Err((s, e.to_string()))
            }
        }
    }

    /// Deregister `[ptr, ptr + len)`, registered by `register`. A
    /// registration is undone when none of its pages is registered any
    /// more; until then its pages stay reachable.
    pub fn deregister(&mut self, ptr: u64, len: u64) -> Result<(), (GmStatus, String)> {
        if len == 0 || self.in_dma(ptr, len) {
            return Ok(());
        }
        let Some((start, n)) = pages_of(ptr, len) else {
            return Err((GM_INVALID_PARAMETER, "the range wraps around".into()));
        };
        let inside = |r: &Registration| start >= r.start && start + n <= r.end();
        let Some(i) = self.registrations.iter().position(inside) else {
            return Err((GM_INVALID_PARAMETER, "it was not registered".into()));
        };
        let r = &mut self.registrations[i];
        let at = ((start - r.start) / PAGE) as usize;
        let pages = &mut r.counts[at..at + (n / PAGE) as usize];
        if pages.contains(&0) {
            return Err((GM_INVALID_PARAMETER, "part of it was not registered".into()));
        }
        for c in pages {
            *c -= 1;
        }
        if r.counts.iter().all(|&c| c == 0) {
            let r = self.registrations.swap_remove(i);
            self.undo(r).map_err(|e| (GM_FAILURE, e))?;
        }
        Ok(())
    }

    /// Undo every registration (the port closes: its slice may serve
    /// another process next).
    pub fn deregister_all(&mut self) {
        for r in std::mem::take(&mut self.registrations) {
            if let Err(e) = self.undo(r) {
                eprintln!("libgm: gm_close: {e}");
            }
        }
    }

    /// The NIC forgets `r`, the range is private memory again with its
    /// content, and its slice memory is freed.
    fn undo(&mut self, r: Registration) -> Result<(), String> {
        let _ = self.port.unalias(r.alias);
        self.restore(r.start, r.len).map_err(|e| format!("restoring the range's memory: {e}"))?;
        self.port.free(r.buf).map_err(|e| e.to_string())
    }

    /// Copy `[start, start + n)` into `buf` and map the slice's pages of
    /// `buf` over the range, with this thread stopped ([`aside`]): the
    /// range may hold this thread's stack (a registered buffer on the
    /// stack, and the frames of this very call beside it), which must not
    /// change between the copy and the mapping.
    fn overlay(&self, start: u64, n: u64, buf: &DmaBuf) -> std::io::Result<()> {
        let (fd, off, to) = (self.slice_file.as_raw_fd(), buf.bus - self.slice_start, buf.vaddr);
        aside(move || {
            // SAFETY: the range is the program's memory (its promise to
            // gm_register_memory), whole pages; `buf` is as long, in the
            // mapped slice.
            unsafe { std::ptr::copy_nonoverlapping(start as *const u8, to as *mut u8, n as usize) };
            // SAFETY: as above; the new mapping shows the content just
            // copied, and the thread that owns the range is stopped.
            let p = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    n as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    off as libc::off_t,
                )
            };
            p != libc::MAP_FAILED
        })
    }

    /// Make `[start, start + n)` private memory again with the content it
    /// has now (this thread stopped, as for `overlay`).
    fn restore(&self, start: u64, n: u64) -> std::io::Result<()> {
        // Room for the content while the range is remapped: a mapping of
        // its own (from the heap it could lie in the range's edge pages;
        // and the task that remaps takes no lock).
        let keep = anonymous(n as usize, 0)?;
        let keep_at = keep as u64;
        let done = aside(move || {
            // SAFETY: the range is mapped (the slice's pages, `overlay`);
            // `keep` is as long.
            unsafe {
                std::ptr::copy_nonoverlapping(start as *const u8, keep_at as *mut u8, n as usize)
            };
            // SAFETY: replaces the range's mapping with fresh private
            // pages; the content is copied back right after, before the
            // stopped thread runs again.
            let p = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    n as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            // SAFETY: the range is mapped again, writable.
            unsafe {
                std::ptr::copy_nonoverlapping(keep_at as *const u8, start as *mut u8, n as usize)
            };
            true
        });
        // SAFETY: the mapping made above, no longer in use.
        unsafe { libc::munmap(keep, n as usize) };
        done
    }
}

/// A fresh private anonymous mapping of `len` bytes (with `flags` too),
/// outside the heap; the caller unmaps it.
fn anonymous(len: usize, flags: libc::c_int) -> std::io::Result<*mut c_void> {
    // SAFETY: maps new memory at an address the kernel picks: nothing of
    // the process's is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(p)
    }
}

/// The stack of the task [`aside`] runs its work on.
const ASIDE_STACK: usize = 64 << 10;

/// What [`aside`] hands its task: the work, and how it went (true: done;
/// false: failed with `errno`).
struct AsideJob<F> {
    work: Option<F>,
    done: bool,
    errno: i32,
}

extern "C" fn aside_task<F: FnOnce() -> bool>(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `AsideJob<F>` that `aside` passed, alive while
    // the thread that called it is stopped, which it is until this task
    // exits.
    let job = unsafe { &mut *(arg as *mut AsideJob<F>) };
    if let Some(work) = job.work.take() {
        job.done = work();
        if !job.done {
            job.errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        }
    }
    0
}

/// Run `work` while the calling thread is stopped in the kernel: in a
/// task of its own that shares this process's memory, on a stack of its
/// own (`clone` with `CLONE_VM | CLONE_VFORK`: the caller waits in the
/// kernel until the task exits). A thread that merely waited for another
/// (a join) still writes its stack between starting the other and
/// blocking, which a copy and remapping of its stack's pages would lose
/// (measured: 2 registrations of 150 crashed). `work` must neither
/// allocate nor take a lock, and returns false with `errno` set on
/// failure.
fn aside<F: FnOnce() -> bool>(work: F) -> std::io::Result<()> {
    let stack = anonymous(ASIDE_STACK, libc::MAP_STACK)?;
    let mut job = AsideJob { work: Some(work), done: false, errno: 0 };
    // SAFETY: the task runs `aside_task` on the top of `stack` (it grows
    // down; the mapping is page aligned) with `job`, both alive until it
    // exits, which CLONE_VFORK waits for before clone returns here.
    let pid = unsafe {
        libc::clone(
            aside_task::<F>,
            (stack as *mut u8).add(ASIDE_STACK) as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK,
            &mut job as *mut AsideJob<F> as *mut c_void,
        )
    };
    let started = if pid == -1 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
    if pid != -1 {
        // Reap it (it sends no signal at exit: __WALL finds it).
        let mut status = 0;
        // SAFETY: waits for our own child task, which has exited.
        unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    }
    // SAFETY: the mapping made above, no longer in use.
    unsafe { libc::munmap(stack, ASIDE_STACK) };
    started?;
    if job.done {
        Ok(())
    } else if job.work.is_some() {
        Err(std::io::Error::other("the remapping task did not run"))
    } else {
        Err(std::io::Error::from_raw_os_error(job.errno))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_registers_the_whole_pages_it_touches() {
        assert_eq!(pages_of(0x1234, 1), Some((0x1000, 0x1000)));
        assert_eq!(pages_of(0x1fff, 2), Some((0x1000, 0x2000)));
        assert_eq!(pages_of(0x2000, 0x1000), Some((0x2000, 0x1000)));
        assert_eq!(pages_of(u64::MAX - 10, 100), None);
    }
}
