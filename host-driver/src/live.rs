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
//! window, its port's page table, the multicast group table (the driver
//! installs groups there, `Nic::create_group`) and the host-owned
//! registers (HOST_DOORBELL, TRACE_ENABLE); host memory only inside its port's
//! slice. Anything else reads as zero or is dropped, and is counted
//! (`refused_accesses`): never UB, never a panic.
//!
//! The data path makes no system call: posting is atomic stores into the
//! mapping plus a doorbell increment; polling is loads from the mapping;
//! `charge` touches a thread-local. Only `idle_wait` (yield or sleep after
//! a spin), `now_ns` (vDSO clock) and attach/alloc go further.
//!
//! The mappings are `MappedFile`s (`mapped.rs`, the only module with
//! `unsafe`); this module has none.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nic_abi::map::{
    page_table, port_window, GROUPS, GROUP_ENTRIES, GROUP_ENTRY_SIZE, PAGE_TABLE_SIZE, PORT_WINDOW,
};
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::{NUM_PORTS, PAGE_SIZE};

use crate::backend::{HostOp, NicBackend};
use crate::cluster::{ClusterDir, NodeFile};
use crate::error::ClusterFault;
use crate::mapped::MappedFile;
use crate::DriverError;

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
    /// The device process serving the cluster.
    device_pid: u32,
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
                device_pid: m.pid,
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
    /// its page table, the multicast group table, and the host-owned
    /// registers.
    fn sram_writable(&self, off: u32, len: usize) -> bool {
        let p = self.inner.port as usize;
        let (off, end) = (off as u64, off as u64 + len as u64);
        let inside =
            |start: u32, size: u32| off >= start as u64 && end <= start as u64 + size as u64;
        inside(port_window(p), PORT_WINDOW)
            || inside(page_table(p), PAGE_TABLE_SIZE)
            || inside(GROUPS, GROUP_ENTRIES * GROUP_ENTRY_SIZE)
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

    fn has_heartbeat(&self) -> bool {
        // A cluster without a device process (files set up by hand) beats
        // nothing.
        self.inner.device_pid != 0
    }

    fn device_alive(&self) -> bool {
        crate::cluster::pid_alive(self.inner.device_pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
