//! The real-time backend for host processes: a `NicBackend` over one
//! port of one node of a live or qemu cluster (`cluster.rs`,
//! `docs/design/cluster-dir.md`). Used the same way for both backends.
//!
//! At attach it asks the node's control socket (`control.rs`: the device
//! process, the privileged side) for the port, and maps the two files it
//! is handed: the port's window (read-write) and the port's slice of host
//! memory (read-write). It maps nothing else of the node.
//!
//! What it owns: those mappings, the control connection (which holds the
//! port until the last clone is dropped or the process dies), the flock
//! on `port<P>.lock` where this user may open it, writes waiting to go
//! through the socket, and a first-fit allocator over the slice.
//!
//! What it touches: SRAM in its window directly; any other SRAM (the
//! registers too, read once at open) through the socket: reads of the
//! public parts, writes to its page table, its event-queue registration,
//! the group table and TRACE_ENABLE, each checked by the device process
//! (the writes batched and sent before the next window store, doorbell
//! or read). Host memory only inside its slice. A refused access reads as zero or is dropped,
//! counted (`refused_accesses`) and explained (`last_refusal`): never UB,
//! never a panic.
//!
//! The data path makes no system call: posting is atomic stores into the
//! window plus a doorbell increment; polling is loads from the slice;
//! `charge` touches a thread-local. Only `idle_wait` (yield or sleep after
//! a spin), `now_ns` (vDSO clock), attach, port open and registration (a
//! socket round trip each) go further.
//!
//! The mappings are `MappedFile`s (`mapped.rs`, the only module with
//! `unsafe`); this module has none.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use std::os::unix::net::UnixStream;

use nic_abi::map::{port_window, PORT_WINDOW};
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::{NUM_PORTS, PAGE_SIZE};

use crate::backend::{HostOp, NicBackend};
use crate::cluster::{ClusterDir, NodeFile};
use crate::control::{self, Reply, Request, SramWrite};
use crate::error::ClusterFault;
use crate::mapped::MappedFile;
use crate::{DriverError, Nic, Port, PortOptions};

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
    /// Only for a waiter with a core of its own: where waiters and the
    /// NICs' device threads share cores (the default cluster on a small
    /// machine), a spinning waiter takes the core the NIC needs to make
    /// the event it waits for (a stream then runs several times slower).
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
    /// The port's window (read-write) and the port's slice of host memory
    /// (read-write): all this process maps of the node, handed over by
    /// the device process.
    window: MappedFile,
    slice: MappedFile,
    /// The node's control socket, and writes waiting to go through it.
    ctl: Mutex<Ctl>,
    /// Some writes wait in `ctl` (so a window store or doorbell, on the
    /// data path, need not take the lock to find none).
    pending: AtomicBool,
    cluster: PathBuf,
    /// The device process serving the cluster.
    device_pid: u32,
    /// Its start time and executable, as the manifest records them: a
    /// process that got its pid later is not the device process.
    device_start: Option<u64>,
    device_exe: Option<String>,
    node: u16,
    port: u8,
    /// Port's slice of host memory: [slice_start, slice_end).
    slice_start: u64,
    slice_end: u64,
    alloc: Mutex<FirstFit>,
    idle: IdlePolicy,
    refused: AtomicU64,
    last_refusal: Mutex<Option<String>>,
    /// A page-table write was refused since the last commit.
    pt_refused: AtomicBool,
    bad_frees: AtomicU64,
    /// The flock on port<P>.lock, if this user may open it; released when
    /// this closes.
    _lock: Option<File>,
}

/// The control connection: it holds the port while it lasts.
struct Ctl {
    s: UnixStream,
    /// Writes to SRAM outside the window (page table, group table),
    /// sent in one request before the next access that could depend on
    /// them (a store into the window, a doorbell, a read through the
    /// socket).
    pending: Vec<SramWrite>,
    pending_bytes: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// How long a request on the control socket may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// Pending privileged writes beyond this many bytes go at once.
const PENDING_MAX: usize = 256 * 1024;
/// Page-table entries per `Request::PageTable`.
const PT_WRITE_MAX: usize = 16 * 1024;

/// Where an SRAM access lands for this process.
enum Place {
    /// In the port's window, at this offset of it.
    Window(u64),
    /// Elsewhere: through the control socket.
    Remote,
}

/// A host process's view of one port of one NIC of a running cluster.
/// Cheap to clone (an `Arc`); the port is held until the last clone is
/// dropped. `Send + Sync`.
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

/// A node file of the cluster at `path` that could not be used.
fn fault(path: &Path, file: NodeFile, e: &io::Error) -> DriverError {
    DriverError::cluster(path, ClusterFault::BadFile { file, io: Some(e.kind()) })
}

/// How long `Port::attach` waits for a NIC whose firmware is still booting,
/// and then for the NIC to serve the port.
pub const ATTACH_WAIT: Duration = Duration::from_secs(10);

impl Port<LiveBackend> {
    /// Open port `port` of node `node` of the running cluster named (or at
    /// the path) `cluster`, in one call: attach to it (`LiveBackend`),
    /// open the NIC (waiting up to `ATTACH_WAIT` for its firmware to
    /// boot), open the port and wait until the NIC serves it. Fails with
    /// `Cluster { path, .. }` naming the directory when there is no
    /// cluster there (or no such node), and otherwise with `Attach`
    /// naming the cluster, node and port, around the cause (`PortBusy` if
    /// another process, or another `Port` here, holds the port).
    ///
    /// ```no_run
    /// use host_driver::Port;
    /// # fn main() -> Result<(), host_driver::DriverError> {
    /// // `cargo xtask run` serves a cluster named "nic" of two nodes.
    /// let port = Port::attach("nic", 1, 0)?;
    /// assert_eq!((port.address().node, port.address().port), (1, 0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn attach(cluster: &str, node: u16, port: u8) -> Result<Port<LiveBackend>, DriverError> {
        Port::attach_with(cluster, node, port, &AttachOptions::default(), PortOptions::default())
    }

    /// `attach` with chosen attach and port options.
    pub fn attach_with(
        cluster: &str,
        node: u16,
        port: u8,
        attach: &AttachOptions,
        opts: PortOptions,
    ) -> Result<Port<LiveBackend>, DriverError> {
        let dir = open_dir(cluster)?;
        let open = || {
            let be = LiveBackend::attach_with(&dir, node, port, attach)?;
            let nic = Nic::open_timeout(be, ATTACH_WAIT)?;
            let mut p = nic.open_port(port, opts)?;
            p.wait_served(ATTACH_WAIT)?;
            Ok(p)
        };
        open().map_err(|e| match e {
            e @ DriverError::Cluster { .. } => e,
            cause => DriverError::Attach {
                path: dir.path().to_path_buf(),
                node,
                port,
                cause: Box::new(cause),
            },
        })
    }
}

/// Open the cluster directory named (or at the path) `cluster`; an error
/// names the directory it looked in.
pub(crate) fn open_dir(cluster: &str) -> Result<ClusterDir, DriverError> {
    ClusterDir::open(cluster)
        .map_err(|e| DriverError::from_cluster_error(&crate::cluster::resolve(cluster), &e))
}

/// Why the last attach in this process was refused by a control socket.
static ATTACH_REFUSAL: Mutex<Option<String>> = Mutex::new(None);

/// The reason the device process gave for the last refused attach in
/// this process (`ClusterFault::Refused`), if any.
pub fn last_attach_refusal() -> Option<String> {
    ATTACH_REFUSAL.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

impl LiveBackend {
    /// Attach to port `port` of node `node` of the cluster named (or at the
    /// path) `cluster`, with default options. Fails with `PortBusy` if
    /// another process (or another attach in this one) holds the port.
    /// (`Port::attach` does this, opens the NIC and the port in one call.)
    pub fn attach(cluster: &str, node: u16, port: u8) -> Result<LiveBackend, DriverError> {
        let dir = open_dir(cluster)?;
        LiveBackend::attach_with(&dir, node, port, &AttachOptions::default())
    }

    /// Attach to an opened cluster directory: take the port's lock (where
    /// this user may), ask the node's control socket for the port, and
    /// map the two descriptors it hands over.
    pub fn attach_with(
        dir: &ClusterDir,
        node: u16,
        port: u8,
        opts: &AttachOptions,
    ) -> Result<LiveBackend, DriverError> {
        if port as usize >= NUM_PORTS {
            return Err(DriverError::BadPort(port));
        }
        let here = dir.path();
        let node32 = u32::from(node);
        dir.check_node(node32).map_err(|e| DriverError::from_cluster_error(here, &e))?;
        let m = dir.manifest();
        if opts.require_device && !dir.device_alive() {
            return Err(DriverError::cluster(here, ClusterFault::DeviceGone { pid: m.pid }));
        }

        let lock = match take_lock(here, &dir.port_lock_path(node32, port), port, opts.lock_retry) {
            Ok(l) => Some(l),
            // Another user's process: the control socket alone holds the
            // port for it.
            Err(DriverError::Cluster {
                fault: ClusterFault::BadFile { io: Some(io::ErrorKind::PermissionDenied), .. },
                ..
            }) => None,
            Err(e) => return Err(e),
        };

        let ctl_err = |e: &io::Error| fault(here, NodeFile::Control, e);
        let s = UnixStream::connect(dir.control_socket_path(node32)).map_err(|e| ctl_err(&e))?;
        s.set_read_timeout(Some(CONTROL_TIMEOUT)).map_err(|e| ctl_err(&e))?;
        s.set_write_timeout(Some(CONTROL_TIMEOUT)).map_err(|e| ctl_err(&e))?;
        // Holding the lock means no live process holds the port; a
        // connection the device process still sees as its holder is one
        // whose process let go an instant ago: ask again for a while.
        let patience = if lock.is_some() { opts.takeover_timeout } else { opts.lock_retry };
        let asked = Instant::now();
        let (reply, fds) = loop {
            let (reply, fds) =
                control::call(&s, &Request::Attach { port }).map_err(|e| ctl_err(&e))?;
            match reply {
                Reply::Busy { .. } if asked.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => break (reply, fds),
            }
        };
        let (slice_start, slice_len) = match reply {
            Reply::Attached { slice_start, slice_len } => (slice_start, slice_len),
            Reply::Busy { by, .. } => return Err(DriverError::PortHeld { port, by }),
            Reply::Refused { why } => {
                *ATTACH_REFUSAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                return Err(DriverError::AttachRefused { path: here.to_path_buf(), why });
            }
            _ => return Err(DriverError::cluster(here, ClusterFault::Refused)),
        };
        let [window, slice]: [std::os::fd::OwnedFd; 2] = fds.try_into().map_err(|_| {
            DriverError::cluster(here, ClusterFault::BadFile { file: NodeFile::Control, io: None })
        })?;
        let map = |fd: std::os::fd::OwnedFd, file: NodeFile, path: PathBuf, w: bool| {
            MappedFile::from_file(File::from(fd), &path, w).map_err(|e| fault(here, file, &e))
        };
        let window = map(window, NodeFile::Window, dir.window_path(node32, port), true)?;
        let slice = map(slice, NodeFile::Slice, dir.slice_path(node32, port), true)?;
        for (m, len, file) in
            [(&window, PORT_WINDOW as u64, NodeFile::Window), (&slice, slice_len, NodeFile::Slice)]
        {
            if m.len() != len {
                return Err(DriverError::cluster(here, ClusterFault::BadFile { file, io: None }));
            }
        }
        // Bus address 0 is never handed out (it reads as "no buffer").
        let alloc = FirstFit::new(slice_start.max(PAGE_SIZE), slice_start + slice_len);
        let be = LiveBackend {
            inner: Arc::new(Inner {
                window,
                slice,
                ctl: Mutex::new(Ctl { s, pending: Vec::new(), pending_bytes: 0 }),
                pending: AtomicBool::new(false),
                cluster: dir.path().to_path_buf(),
                device_pid: m.pid,
                device_start: m.pid_start,
                device_exe: m.pid_exe.clone(),
                node,
                port,
                slice_start,
                slice_end: slice_start + slice_len,
                alloc: Mutex::new(alloc),
                idle: opts.idle,
                refused: AtomicU64::new(0),
                last_refusal: Mutex::new(None),
                pt_refused: AtomicBool::new(false),
                bad_frees: AtomicU64::new(0),
                _lock: lock,
            }),
        };
        be.take_over(opts.takeover_timeout)?;
        Ok(be)
    }

    /// We hold the port, so no live process does. If its STATE still says
    /// open, its holder died: close it. Then wait until the firmware stops
    /// serving any earlier generation, since it may still write into
    /// memory of the slice we are about to hand out again.
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

    pub fn node(&self) -> u16 {
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

    /// A handle on this port's slice of host memory (the file the device
    /// process handed over, `slice()` bytes from its first bus address):
    /// for a program that maps the slice itself, say at the virtual
    /// addresses the NIC translates (`vaddr_of`), so that its pointers
    /// are the addresses descriptors carry (the GM library does).
    pub fn slice_file(&self) -> std::io::Result<File> {
        self.inner.slice.try_clone_file()
    }

    /// Bytes of DMA memory allocated now (page rounded).
    pub fn dma_in_use(&self) -> u64 {
        self.lock_alloc().in_use()
    }

    /// Bytes of the slice still free for DMA allocations.
    pub fn dma_free(&self) -> u64 {
        self.lock_alloc().free_bytes()
    }

    /// Accesses refused so far: outside what this process maps and
    /// refused by the control socket, or outside the file (they read
    /// zero, writes were dropped).
    pub fn refused_accesses(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Why the last refused access was refused.
    pub fn last_refusal(&self) -> Option<String> {
        self.inner.last_refusal.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `free_dma` calls that matched no allocation (ignored).
    pub fn bad_frees(&self) -> u64 {
        self.inner.bad_frees.load(Ordering::Relaxed)
    }

    /// Send the privileged writes made so far (page-table entries, group
    /// entries) to the device process and wait until they are applied.
    /// Done by itself before any access that could depend on them. `Err`
    /// if the device process refused any (`last_refusal` says why).
    pub fn flush(&self) -> Result<(), DriverError> {
        self.inner.flush()
    }

    fn lock_alloc(&self) -> std::sync::MutexGuard<'_, FirstFit> {
        self.inner.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse(&self, why: impl FnOnce() -> String) {
        self.inner.refuse(why)
    }

    /// Where `[off, off + len)` of SRAM is for this process.
    fn place(&self, off: u32, len: usize) -> Place {
        let (off, end) = (off as u64, off as u64 + len as u64);
        let win = port_window(self.inner.port as usize) as u64;
        if off >= win && end <= win + PORT_WINDOW as u64 {
            Place::Window(off - win)
        } else {
            Place::Remote
        }
    }

    /// Is `[bus, bus + len)` inside this port's slice? Its offset there.
    fn host_off(&self, bus: u64, len: usize) -> Option<u64> {
        let end = bus.checked_add(len as u64)?;
        (bus >= self.inner.slice_start && end <= self.inner.slice_end)
            .then(|| bus - self.inner.slice_start)
    }

    /// Read SRAM outside the window, through the control socket.
    /// Refused: zeros.
    fn remote_read(&self, off: u32, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let n = (buf.len() - done).min(control::MAX_READ as usize);
            let at = off.wrapping_add(done as u32);
            let why = match self.inner.request(&Request::Read { off: at, len: n as u32 }) {
                Ok(Reply::Data { bytes }) if bytes.len() == n => {
                    buf[done..done + n].copy_from_slice(&bytes);
                    done += n;
                    continue;
                }
                Ok(Reply::Refused { why }) => why,
                Ok(other) => format!("control socket: unexpected reply {other:?}"),
                Err(e) => format!("control socket: {e}"),
            };
            buf[done..].fill(0);
            self.refuse(|| why);
            return;
        }
    }

    /// Queue a write outside the window for the control socket (sent at
    /// the next flush).
    fn remote_write(&self, off: u32, data: &[u8]) {
        if data.is_empty() {
            // Nothing to write (a leaf's empty child list): the device
            // process refuses a write of no bytes.
            return;
        }
        let full = {
            let mut c = self.inner.lock_ctl();
            c.pending.push(SramWrite { off, data: data.to_vec() });
            c.pending_bytes += data.len() + 16;
            self.inner.pending.store(true, Ordering::Release);
            c.pending_bytes >= PENDING_MAX || c.pending.len() >= control::MAX_WRITES
        };
        if full {
            let _ = self.flush();
        }
    }
}

impl Inner {
    fn lock_ctl(&self) -> std::sync::MutexGuard<'_, Ctl> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse(&self, why: impl FnOnce() -> String) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        *self.last_refusal.lock().unwrap_or_else(|e| e.into_inner()) = Some(why());
    }

    /// Send the pending writes; count each the device refused.
    fn flush(&self) -> Result<(), DriverError> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut c = self.lock_ctl();
        if c.pending.is_empty() {
            return Ok(());
        }
        let writes = std::mem::take(&mut c.pending);
        c.pending_bytes = 0;
        self.pending.store(false, Ordering::Release);
        let r = control::call(&c.s, &Request::Write { writes });
        drop(c);
        match r {
            Ok((Reply::Written { refused, more }, _)) => {
                let any = !refused.is_empty();
                self.refused.fetch_add(u64::from(more), Ordering::Relaxed);
                for (_, why) in refused {
                    self.refuse(|| why);
                }
                if any {
                    Err(DriverError::cluster(&self.cluster, ClusterFault::Refused))
                } else {
                    Ok(())
                }
            }
            Ok((Reply::Refused { why }, _)) => {
                self.refuse(|| why);
                Err(DriverError::cluster(&self.cluster, ClusterFault::Refused))
            }
            Ok((other, _)) => {
                self.refuse(|| format!("control socket: unexpected reply {other:?}"));
                Err(DriverError::cluster(&self.cluster, ClusterFault::Refused))
            }
            Err(e) => {
                self.refuse(|| format!("control socket: {e}"));
                Err(fault(&self.cluster, NodeFile::Control, &e))
            }
        }
    }

    /// One request after the pending writes.
    fn request(&self, req: &Request) -> io::Result<Reply> {
        let _ = self.flush();
        let c = self.lock_ctl();
        control::call(&c.s, req).map(|(r, _)| r)
    }
}

/// Open `port<P>.lock` and take it exclusively without blocking, retrying
/// for `retry` (a prober holds it shared for an instant).
/// (`cluster`: the cluster directory, for errors.)
fn take_lock(cluster: &Path, path: &Path, port: u8, retry: Duration) -> Result<File, DriverError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| fault(cluster, NodeFile::PortLock, &e))?;
    let start = Instant::now();
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(TryLockError::WouldBlock) if start.elapsed() < retry => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => return Err(DriverError::PortBusy(port)),
            Err(TryLockError::Error(e)) => return Err(fault(cluster, NodeFile::PortLock, &e)),
        }
    }
}

impl NicBackend for LiveBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        let ok = match self.place(off, buf.len()) {
            Place::Window(o) => self.inner.window.read(o, buf),
            Place::Remote => {
                self.remote_read(off, buf);
                true
            }
        };
        if !ok {
            self.refuse(|| format!("SRAM {off:#x}+{} is outside the NIC's memory", buf.len()));
        }
    }

    fn sram_write(&self, off: u32, data: &[u8]) {
        match self.place(off, data.len()) {
            Place::Window(o) => {
                let _ = self.inner.flush();
                if !self.inner.window.write(o, data) {
                    self.refuse(|| format!("SRAM {off:#x}+{}: outside the window", data.len()));
                }
            }
            Place::Remote => self.remote_write(off, data),
        }
    }

    fn sram_load_u32(&self, off: u32) -> u32 {
        let v = match self.place(off, 4) {
            Place::Window(o) => self.inner.window.load_u32(o),
            Place::Remote => {
                let mut b = [0u8; 4];
                self.remote_read(off, &mut b);
                Some(u32::from_le_bytes(b))
            }
        };
        v.unwrap_or_else(|| {
            self.refuse(|| format!("SRAM {off:#x}: outside the NIC's memory"));
            0
        })
    }

    fn sram_store_u32(&self, off: u32, v: u32) {
        match self.place(off, 4) {
            Place::Window(o) => {
                let _ = self.inner.flush();
                if !self.inner.window.store_u32(o, v) {
                    self.refuse(|| format!("SRAM {off:#x}: outside the window"));
                }
            }
            _ => self.sram_write(off, &v.to_le_bytes()),
        }
    }

    fn sram_load_u64(&self, off: u32) -> u64 {
        let v = match self.place(off, 8) {
            Place::Window(o) => self.inner.window.load_u64(o),
            Place::Remote => {
                let mut b = [0u8; 8];
                self.remote_read(off, &mut b);
                Some(u64::from_le_bytes(b))
            }
        };
        v.unwrap_or_else(|| {
            self.refuse(|| format!("SRAM {off:#x}: outside the NIC's memory"));
            0
        })
    }

    fn sram_store_u64(&self, off: u32, v: u64) {
        match self.place(off, 8) {
            Place::Window(o) => {
                let _ = self.inner.flush();
                if !self.inner.window.store_u64(o, v) {
                    self.refuse(|| format!("SRAM {off:#x}: outside the window"));
                }
            }
            _ => self.sram_write(off, &v.to_le_bytes()),
        }
    }

    fn host_read(&self, bus: u64, buf: &mut [u8]) {
        let ok = self.host_off(bus, buf.len()).is_some_and(|o| self.inner.slice.read(o, buf));
        if !ok {
            buf.fill(0);
            self.refuse(|| format!("host memory {bus:#x}+{}: outside the port's slice", buf.len()));
        }
    }

    fn host_write(&self, bus: u64, data: &[u8]) {
        let ok = self.host_off(bus, data.len()).is_some_and(|o| self.inner.slice.write(o, data));
        if !ok {
            self.refuse(|| {
                format!("host memory {bus:#x}+{}: outside the port's slice", data.len())
            });
        }
    }

    fn host_load_u32(&self, bus: u64) -> u32 {
        match self.host_off(bus, 4).and_then(|o| self.inner.slice.load_u32(o)) {
            Some(v) => v,
            None => {
                self.refuse(|| format!("host memory {bus:#x}+4: outside the port's slice"));
                0
            }
        }
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

    /// The window's `DOORBELL += 1`, one atomic add in the mapping
    /// (after the pending privileged writes).
    fn doorbell(&self) {
        let _ = self.inner.flush();
        let off = port_reg(0, pcb::DOORBELL) - port_window(0);
        if self.inner.window.fetch_add_u32(off as u64, 1).is_none() {
            self.refuse(|| "the window's doorbell is out of reach".into());
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

    fn commit(&self) -> Result<(), DriverError> {
        let r = self.inner.flush();
        if self.inner.pt_refused.swap(false, Ordering::AcqRel) {
            return Err(DriverError::cluster(&self.inner.cluster, ClusterFault::Refused));
        }
        r
    }

    fn pt_write(&self, _port: u8, first: u64, entries: &[u64]) {
        // A table of a 4 GiB slice is 8 MiB: sent in pieces.
        for (k, part) in entries.chunks(PT_WRITE_MAX).enumerate() {
            let req = Request::PageTable {
                first: first + (k * PT_WRITE_MAX) as u64,
                entries: part.to_vec(),
            };
            let why = match self.inner.request(&req) {
                Ok(Reply::Written { refused, .. }) if refused.is_empty() => continue,
                Ok(Reply::Written { refused, .. }) => {
                    refused.into_iter().map(|(_, w)| w).collect::<Vec<_>>().join("; ")
                }
                Ok(Reply::Refused { why }) => why,
                Ok(other) => format!("control socket: unexpected reply {other:?}"),
                Err(e) => format!("control socket: {e}"),
            };
            self.inner.refuse(|| why);
            self.inner.pt_refused.store(true, Ordering::Release);
            return;
        }
    }

    fn has_heartbeat(&self) -> bool {
        // A cluster without a device process (files set up by hand) beats
        // nothing.
        self.inner.device_pid != 0
    }

    fn device_alive(&self) -> bool {
        use nic_cluster_dir::identity::{device_state, DeviceState};
        let i = &self.inner;
        matches!(
            device_state(i.device_pid, i.device_start, i.device_exe.as_deref()),
            DeviceState::Alive | DeviceState::Unverified
        )
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
