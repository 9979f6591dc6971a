//! The privileged side of every port: each node's control socket
//! (`node<N>/control.sock`, messages in `nic_cluster_dir::control`).
//!
//! A host process connects, the peer's uid is checked (the cluster's
//! owner, root, or a uid the cluster was started to allow), and it asks
//! for a port. The connection then holds the port until it closes; the
//! process is handed descriptors of the port's window (read-write) and
//! its slice of host memory (read-write), zeroed first (nothing of a last
//! holder's is left), and nothing else of the node. The rest of what a
//! driver does to SRAM comes here:
//!
//! - reads of the public parts (the registers, routes, counters, traces, the
//!   flow and group tables);
//! - writes to its own event-queue registration (a power of two of
//!   entries inside its slice);
//! - writes to its own page table in host memory (`Request::PageTable`),
//!   where every valid entry must name a page of the port's own slice
//!   (the table is outside every slice: no host program maps it);
//! - writes to the multicast group table, where a
//!   valid group must deliver to a port the writing process holds and
//!   another process's valid group is out of reach; to `TRACE_ENABLE`.
//!
//! Anything else is refused, named in the reply, counted, and noted in
//! the cluster's log (the first few of each connection). When a
//! connection ends with its port still open (its process died or never
//! closed it), the port is closed on its behalf.
//!
//! A port changes hands only once no earlier process has its window or
//! slice open or mapped (a holder that forked keeps its mappings in the
//! child): `files` tells. An allowed user's processes hold at most
//! `RtConfig::ports_per_user` ports of a node at once. What a peer can
//! make the device spend is bounded: writes per request, refusals named
//! per reply, connections per node; refused peers and refusals are
//! counted, and only the first few of each are noted.
//!
//! Owns the listening sockets, the acceptor thread and one thread per
//! connection; touches SRAM only through the node's shared mapping.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nic_abi::group;
use nic_abi::map::{self, port_window, PORT_WINDOW};
use nic_abi::page_table::{pte_bus_page, PTE_SIZE};
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg, PORT_EVQ_SIZE};
use nic_abi::{NUM_PORTS, PAGE_SIZE};
use nic_cluster_dir::control::{self, FrameError, Reply, Request, SramWrite, MAX_READ, MAX_WRITES};
use nic_cluster_dir::{ClusterDir, MappedFile};

use super::files::{NodeFiles, Sharing};
use super::{Ctx, RtError};

/// How long a connection's thread waits for a frame before it looks at
/// the stop flag; and the acceptor's poll.
const POLL: Duration = Duration::from_millis(100);

/// How long a new holder waits for the firmware to stop serving the
/// port's last holder.
const TAKEOVER: Duration = Duration::from_secs(2);

/// Refusals noted in the log per connection (all are counted).
const NOTED_PER_CONNECTION: u32 = 8;

/// Refusals of a node's connections noted one by one (then one in
/// every `64 x NODE_NOTES`); all are counted.
const NODE_NOTES: u64 = 256;

/// Refused writes a `Written` reply names (the rest are counted in it).
pub const NAMED_REFUSALS: usize = 16;

/// Connections one node serves at once; more are refused at the door.
pub const MAX_CONNECTIONS: usize = 256;

/// Peers refused at the door (for their uid, or past
/// [`MAX_CONNECTIONS`]) that are noted one by one; after that, one note
/// per [`SUMMARY_EVERY`] says how many more.
const DOOR_NOTES: u64 = 8;
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// How long an attach waits for an earlier holder's files to be let go
/// (a process that exits closes its socket before the kernel has
/// released its mappings) before it answers `Busy`.
const UNMAP_GRACE: Duration = Duration::from_millis(500);

/// Who besides the device process's own user and root may attach, and
/// how many ports of a node each such user may hold at once.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    pub uids: Vec<u32>,
    pub ports: u8,
}

/// What the control sockets saw, over every node.
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// Ports handed out.
    pub attaches: AtomicU64,
    /// Requests (or single writes of a request) refused.
    pub refused: AtomicU64,
    /// Connections refused for their peer's uid.
    pub peers_refused: AtomicU64,
    /// Connections dropped for a broken or garbled frame.
    pub broken: AtomicU64,
    /// Ports closed on behalf of a holder that went away.
    pub closed_for_holder: AtomicU64,
    /// Attaches answered `Busy` because an earlier holder's process (or
    /// one it forked) still had the port's files.
    pub still_mapped: AtomicU64,
    /// Connections refused for being past [`MAX_CONNECTIONS`], and
    /// accepts that failed for want of descriptors (EMFILE, ENFILE).
    pub over_limit: AtomicU64,
}

/// One node as the control socket serves it.
struct NodeControl {
    node: u32,
    sram: Arc<MappedFile>,
    host: Arc<MappedFile>,
    dir: ClusterDir,
    /// The device process's own descriptors of the ports' files.
    files: Arc<NodeFiles>,
    /// Ports held by a connection: (pid, uid) of its process.
    held: Mutex<[Option<(u32, u32)>; NUM_PORTS]>,
    /// Each port's last holder: (pid, uid).
    last: Mutex<[Option<(u32, u32)>; NUM_PORTS]>,
    /// Connections being served.
    conns: std::sync::atomic::AtomicUsize,
    /// Refusals noted for this node so far (`may_note`).
    noted: AtomicU64,
    /// Ports an allowed user may hold at once; the users not limited.
    per_user: u8,
    unlimited: [u32; 2],
}

/// The control sockets of a cluster.
pub(crate) struct Control {
    pub counters: Arc<ControlCounters>,
    acceptor: Option<JoinHandle<()>>,
}

impl Control {
    /// Listen on every node's control socket (a stale file there is
    /// replaced) and serve until `ctx.stop`. `allowed` are the uids
    /// besides the device process's own and root's that may attach.
    pub fn start(
        ctx: Arc<Ctx>,
        dir: &ClusterDir,
        srams: &[Arc<MappedFile>],
        hosts: &[Arc<MappedFile>],
        files: &[Arc<NodeFiles>],
        allowed: Allowed,
    ) -> Result<Control, RtError> {
        let me = rustix::process::geteuid().as_raw();
        let mut listeners = Vec::with_capacity(srams.len());
        let mut nodes = Vec::with_capacity(srams.len());
        for (node, sram) in srams.iter().enumerate() {
            let node = node as u32;
            let p = dir.control_socket_path(node);
            let _ = std::fs::remove_file(&p);
            let io = |err| RtError::Io { what: format!("control socket {}", p.display()), err };
            let l = UnixListener::bind(&p).map_err(io)?;
            l.set_nonblocking(true).map_err(io)?;
            // Who may connect is decided by the peer's uid, below; the
            // file itself lets any user try (the directories above decide
            // whether another user can reach it at all).
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).map_err(io)?;
            listeners.push(l);
            nodes.push(Arc::new(NodeControl {
                node,
                sram: sram.clone(),
                host: hosts[node as usize].clone(),
                dir: dir.clone(),
                files: files[node as usize].clone(),
                held: Mutex::new([None; NUM_PORTS]),
                last: Mutex::new([None; NUM_PORTS]),
                conns: Default::default(),
                noted: AtomicU64::new(0),
                per_user: allowed.ports,
                unlimited: [me, 0],
            }));
        }
        let counters = Arc::new(ControlCounters::default());
        let c = counters.clone();
        let mut uids = vec![me, 0];
        uids.extend(allowed.uids);
        let acceptor = std::thread::Builder::new()
            .name("nic-rt-control".into())
            .spawn(move || accept_loop(ctx, listeners, nodes, c, uids))
            .map_err(|err| RtError::Io { what: "starting the control thread".into(), err })?;
        Ok(Control { counters, acceptor: Some(acceptor) })
    }

    /// Wait for the threads (after `ctx.stop` was set).
    pub fn join(&mut self) {
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(
    ctx: Arc<Ctx>,
    listeners: Vec<UnixListener>,
    nodes: Vec<Arc<NodeControl>>,
    counters: Arc<ControlCounters>,
    uids: Vec<u32>,
) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let timeout = Timespec { tv_sec: 0, tv_nsec: POLL.as_nanos() as i64 };
    let mut door = Door::default();
    // Out of descriptors: wait before trying again, longer each time.
    let mut backoff = Duration::ZERO;
    while !ctx.stop.load(Ordering::Relaxed) {
        if !backoff.is_zero() {
            std::thread::sleep(backoff);
        }
        let mut fds: Vec<PollFd> =
            listeners.iter().map(|l| PollFd::new(l, PollFlags::IN)).collect();
        if poll(&mut fds, Some(&timeout)).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let ready: Vec<usize> = (0..fds.len()).filter(|&i| !fds[i].revents().is_empty()).collect();
        drop(fds);
        for i in ready {
            let s = match listeners[i].accept() {
                Ok((s, _)) => {
                    backoff = Duration::ZERO;
                    s
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                    counters.over_limit.fetch_add(1, Ordering::Relaxed);
                    if backoff.is_zero() {
                        ctx.note(format!(
                            "node {i}: control socket: out of file descriptors ({e}); waiting \
                             before accepting more connections"
                        ));
                    }
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    break;
                }
                Err(e) => {
                    door.note(&ctx, || format!("node {i}: control socket: {e}"));
                    continue;
                }
            };
            let (uid, pid) = match rustix::net::sockopt::socket_peercred(&s) {
                Ok(c) => (c.uid.as_raw(), c.pid.as_raw_nonzero().get() as u32),
                Err(e) => {
                    door.note(&ctx, || {
                        format!("node {i}: control socket: cannot tell the peer: {e}")
                    });
                    continue;
                }
            };
            let nc = &nodes[i];
            let why = if !uids.contains(&uid) {
                counters.peers_refused.fetch_add(1, Ordering::Relaxed);
                door.note(&ctx, || {
                    format!(
                        "node {i}: control socket: refused a process of uid {uid} (not allowed \
                         to use this cluster)"
                    )
                });
                format!("uid {uid} may not use this cluster")
            } else if nc.conns.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                counters.over_limit.fetch_add(1, Ordering::Relaxed);
                door.note(&ctx, || {
                    format!(
                        "node {i}: control socket: refused a connection of uid {uid} (pid \
                         {pid}): {MAX_CONNECTIONS} connections already"
                    )
                });
                format!("node {i} serves {MAX_CONNECTIONS} control connections already")
            } else {
                String::new()
            };
            if !why.is_empty() {
                // A short answer into a fresh socket's buffer: it cannot
                // block, and a peer that never reads costs nothing.
                let _ = s.set_nonblocking(true);
                let _ = control::send(&s, &Reply::Refused { why }, &[]);
                continue;
            }
            nc.conns.fetch_add(1, Ordering::Relaxed);
            let (cx, nc, c) = (ctx.clone(), nc.clone(), counters.clone());
            let spawned =
                std::thread::Builder::new().name(format!("nic-rt-control-{i}")).spawn(move || {
                    serve(cx, &nc, c, s, uid, pid);
                    nc.conns.fetch_sub(1, Ordering::Relaxed);
                });
            match spawned {
                Ok(h) => conns.push(h),
                Err(e) => {
                    nodes[i].conns.fetch_sub(1, Ordering::Relaxed);
                    door.note(&ctx, || format!("node {i}: control thread: {e}"));
                }
            }
        }
        conns.retain(|h| !h.is_finished());
        door.summarize(&ctx);
    }
    for h in conns {
        let _ = h.join();
    }
}

/// What the door noted: the first [`DOOR_NOTES`] one by one, then a
/// count every [`SUMMARY_EVERY`].
#[derive(Default)]
struct Door {
    noted: u64,
    unnoted: u64,
    since: Option<std::time::Instant>,
}

impl Door {
    fn note(&mut self, ctx: &Ctx, msg: impl FnOnce() -> String) {
        if self.noted < DOOR_NOTES {
            self.noted += 1;
            ctx.note(msg());
        } else {
            self.unnoted += 1;
            self.since.get_or_insert_with(std::time::Instant::now);
        }
    }

    fn summarize(&mut self, ctx: &Ctx) {
        if self.unnoted > 0 && self.since.is_some_and(|t| t.elapsed() >= SUMMARY_EVERY) {
            ctx.note(format!(
                "control sockets: {} more connections refused or failed (counted, not noted)",
                self.unnoted
            ));
            self.unnoted = 0;
            self.since = None;
        }
    }
}

/// One connection: its requests, then the port's release.
fn serve(
    ctx: Arc<Ctx>,
    nc: &NodeControl,
    counters: Arc<ControlCounters>,
    s: UnixStream,
    uid: u32,
    pid: u32,
) {
    let node = nc.node;
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(POLL)).is_err()
        || s.set_write_timeout(Some(Duration::from_secs(2))).is_err()
    {
        return;
    }
    let mut conn = Conn { nc, counters: &counters, port: None, pid, uid, noted: 0 };
    // Noted: the first few of each connection, while the node's budget
    // of such notes lasts (a peer may open connection after connection);
    // every one counted.
    let refuse = |conn: &mut Conn, why: &str| {
        counters.refused.fetch_add(1, Ordering::Relaxed);
        conn.noted += 1;
        if conn.noted <= NOTED_PER_CONNECTION && nc.may_note() {
            let who = conn.port.map_or(String::from("(no port)"), |p| format!("port {p}"));
            ctx.note(format!("node {node} {who} (uid {uid}): refused: {why}"));
        }
    };
    loop {
        let req = match control::recv::<Request>(&s) {
            Ok((r, _)) => r,
            Err(FrameError::Idle) if !ctx.stop.load(Ordering::Relaxed) => continue,
            Err(FrameError::Idle) | Err(FrameError::Closed) => break,
            Err(e) => {
                counters.broken.fetch_add(1, Ordering::Relaxed);
                refuse(&mut conn, &format!("connection dropped: {e}"));
                let _ = control::send(&s, &Reply::Refused { why: e.to_string() }, &[]);
                break;
            }
        };
        let (reply, fds) = match conn.handle(req) {
            Ok(r) => r,
            Err(why) => {
                refuse(&mut conn, &why);
                (Reply::Refused { why }, Vec::new())
            }
        };
        if let Reply::Written { refused, more } = &reply {
            for (_, why) in refused {
                refuse(&mut conn, why);
            }
            // Counted, not noted one by one.
            counters.refused.fetch_add(*more as u64, Ordering::Relaxed);
            conn.noted = conn.noted.saturating_add(*more);
        }
        if matches!(reply, Reply::Attached { .. }) {
            counters.attaches.fetch_add(1, Ordering::Relaxed);
        }
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        if control::send(&s, &reply, &borrowed).is_err() {
            break;
        }
    }
    if conn.noted > NOTED_PER_CONNECTION && nc.may_note() {
        ctx.note(format!(
            "node {node}: control connection (uid {uid}): {} refusals in all",
            conn.noted
        ));
    }
    // What this connection's requests made the allocator keep (each
    // connection thread has an arena of its own) goes back to the system.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's
    // arenas to the system; it touches nothing in use.
    unsafe {
        libc::malloc_trim(0);
    }
    if let Some(p) = conn.port.take() {
        if nc.release(p) {
            counters.closed_for_holder.fetch_add(1, Ordering::Relaxed);
            ctx.note(format!(
                "node {node} port {p}: its holder is gone (its control connection closed) with \
                 the port open; port closed on its behalf"
            ));
        }
    }
}

struct Conn<'a> {
    nc: &'a NodeControl,
    counters: &'a ControlCounters,
    port: Option<u8>,
    /// The peer's process and user.
    pid: u32,
    uid: u32,
    noted: u32,
}

impl Conn<'_> {
    fn handle(&mut self, req: Request) -> Result<(Reply, Vec<OwnedFd>), String> {
        match req {
            Request::Attach { port } => self.attach(port),
            Request::Read { off, len } => {
                let p = self.port.ok_or("attach to a port first")?;
                if len > MAX_READ {
                    return Err(format!("a read of {len} bytes (at most {MAX_READ})"));
                }
                if !readable(p, off, len) {
                    return Err(format!(
                        "port {p} may not read SRAM {off:#x}+{len} ({})",
                        region_name(off)
                    ));
                }
                let mut bytes = vec![0u8; len as usize];
                self.nc.sram.read(off as u64, &mut bytes);
                Ok((Reply::Data { bytes }, Vec::new()))
            }
            Request::Write { writes } => {
                let p = self.port.ok_or("attach to a port first")?;
                if writes.len() > MAX_WRITES {
                    return Err(format!(
                        "a request of {} writes (at most {MAX_WRITES})",
                        writes.len()
                    ));
                }
                // The first few refusals are named, the rest counted: a
                // reply stays small whatever the request.
                let (mut refused, mut more) = (Vec::new(), 0u32);
                for (i, w) in writes.iter().enumerate() {
                    if let Err(why) = self.write(p, w) {
                        if refused.len() < NAMED_REFUSALS {
                            refused.push((i as u32, why));
                        } else {
                            more += 1;
                        }
                    }
                }
                Ok((Reply::Written { refused, more }, Vec::new()))
            }
            Request::PageTable { first, entries } => {
                let p = self.port.ok_or("attach to a port first")?;
                let refused = match self.page_table(p, first, &entries) {
                    Ok(()) => Vec::new(),
                    Err((i, why)) => vec![(i, why)],
                };
                Ok((Reply::Written { refused, more: 0 }, Vec::new()))
            }
        }
    }

    /// Write entries `first..` of port `p`'s page table, if every one is
    /// empty or names a page of the port's slice (else none is written:
    /// the index of the first bad one, and why).
    fn page_table(&self, p: u8, first: u64, entries: &[u64]) -> Result<(), (u32, String)> {
        let layout = self.nc.dir.host_layout();
        let end = first.checked_add(entries.len() as u64).filter(|&e| e <= layout.entries());
        if end.is_none() {
            return Err((
                0,
                format!(
                    "entries {first}+{} of port {p}'s page table: it has {}",
                    entries.len(),
                    layout.entries()
                ),
            ));
        }
        for (i, &e) in entries.iter().enumerate() {
            if e == 0 {
                continue;
            }
            let bus = pte_bus_page(e).and_then(|page| page.checked_mul(PAGE_SIZE));
            if !bus.is_some_and(|b| self.nc.in_slice(p, b, PAGE_SIZE)) {
                return Err((
                    i as u32,
                    format!(
                        "page-table entry {} of port {p} would map {e:#x}: not a page of the \
                         port's slice of host memory",
                        first + i as u64
                    ),
                ));
            }
        }
        let at = layout.table(p) + first * PTE_SIZE as u64;
        for (i, &e) in entries.iter().enumerate() {
            self.nc.host.store_u64(at + i as u64 * PTE_SIZE as u64, e);
        }
        Ok(())
    }

    fn attach(&mut self, port: u8) -> Result<(Reply, Vec<OwnedFd>), String> {
        if let Some(p) = self.port {
            return Err(format!("this connection holds port {p} already"));
        }
        if port as usize >= NUM_PORTS {
            return Err(format!("no port {port} (ports 0 to {})", NUM_PORTS - 1));
        }
        let node = self.nc.node;
        {
            let mut held = self.nc.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((pid, uid)) = held[port as usize] {
                // Not counted: a new holder asks again while the last
                // one's connection is being torn down.
                let by = if nic_cluster_dir::cluster::pid_alive(pid) {
                    format!("held by process {pid} (uid {uid})")
                } else {
                    // Its connection outlived it: a process it forked
                    // has the socket.
                    format!("held by a process that process {pid} (uid {uid}, gone) forked")
                };
                return Ok((Reply::Busy { port, by }, Vec::new()));
            }
            if !self.nc.unlimited.contains(&self.uid) {
                let mine: Vec<usize> = (0..NUM_PORTS)
                    .filter(|&p| held[p].is_some_and(|(_, uid)| uid == self.uid))
                    .collect();
                if mine.len() >= self.nc.per_user as usize {
                    return Err(format!(
                        "uid {} holds {} of node {node}'s ports already ({mine:?}), as many as \
                         this cluster lets an allowed user hold at once",
                        self.uid,
                        mine.len()
                    ));
                }
            }
            held[port as usize] = Some((self.pid, self.uid));
        }
        let unhold =
            || self.nc.held.lock().unwrap_or_else(|e| e.into_inner())[port as usize] = None;
        if let Err(by) = self.nc.let_go(port, self.pid) {
            unhold();
            self.counters.still_mapped.fetch_add(1, Ordering::Relaxed);
            return Ok((Reply::Busy { port, by }, Vec::new()));
        }
        self.nc.last.lock().unwrap_or_else(|e| e.into_inner())[port as usize] =
            Some((self.pid, self.uid));
        let dir = &self.nc.dir;
        self.nc.wipe(port);
        // A fresh open of each file for the holder: its own open
        // description, which `files` can tell from ours.
        let open = |path: std::path::PathBuf, write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(&path)
                .map(OwnedFd::from)
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let fds = (|| {
            Ok::<_, String>(vec![
                open(dir.window_path(node, port), true)?,
                open(dir.slice_path(node, port), true)?,
            ])
        })();
        let fds = match fds {
            Ok(f) => f,
            Err(e) => {
                unhold();
                return Err(e);
            }
        };
        self.port = Some(port);
        let (slice_start, slice_len) = dir.port_slice(port);
        Ok((Reply::Attached { slice_start, slice_len }, fds))
    }

    fn write(&self, p: u8, w: &SramWrite) -> Result<(), String> {
        let sram = &self.nc.sram;
        let len = u32::try_from(w.data.len()).map_err(|_| "a write too long".to_string())?;
        if len == 0 {
            return Err(format!("a write of no bytes at SRAM {:#x}", w.off));
        }
        let (off, end) = (w.off as u64, w.off as u64 + len as u64);
        let inside = |start: u32, size: u64| off >= start as u64 && end <= start as u64 + size;
        if inside(map::GROUPS, map::GROUP_ENTRIES as u64 * map::GROUP_ENTRY_SIZE as u64) {
            self.check_group(w)?;
        } else if inside(reg(regs::port_evq_bus(p as usize)), PORT_EVQ_SIZE as u64) {
            self.check_evq(p, w)?;
        } else if !inside(reg(regs::TRACE_ENABLE), 4) {
            return Err(format!(
                "port {p} may not write SRAM {:#x}+{len} ({})",
                w.off,
                region_name(w.off)
            ));
        }
        // A whole aligned word is stored as one (Release), as the driver
        // publishes a page-table entry or a group's VALID word.
        let ok =
            match w.data.len() {
                8 if w.off.is_multiple_of(8) => sram
                    .store_u64(off, u64::from_le_bytes(w.data[..8].try_into().unwrap_or([0; 8]))),
                4 if w.off.is_multiple_of(4) => sram
                    .store_u32(off, u32::from_le_bytes(w.data[..4].try_into().unwrap_or([0; 4]))),
                _ => sram.write(off, &w.data),
            };
        if ok {
            Ok(())
        } else {
            Err(format!("SRAM {:#x}+{len} is outside the NIC's memory", w.off))
        }
    }

    /// A write to port `p`'s event-queue registration, as it would leave
    /// it: none (0 entries), or a power of two of entries inside the
    /// port's slice.
    fn check_evq(&self, p: u8, w: &SramWrite) -> Result<(), String> {
        let b = self.after(w, reg(regs::port_evq_bus(p as usize)), PORT_EVQ_SIZE as usize);
        let bus = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
        let bytes = len as u64 * nic_abi::event::EVENT_SIZE as u64;
        if len == 0 || (len.is_power_of_two() && self.nc.in_slice(p, bus, bytes)) {
            Ok(())
        } else {
            Err(format!(
                "event queue {bus:#x} x {len} entries for port {p}: not a power of two of \
                 entries inside the port's slice of host memory"
            ))
        }
    }

    /// SRAM `[at, at + len)` as write `w` would leave it.
    fn after(&self, w: &SramWrite, at: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.nc.sram.read(at as u64, &mut b);
        for (k, byte) in b.iter_mut().enumerate() {
            let a = at as u64 + k as u64;
            if let Some(i) = a.checked_sub(w.off as u64).filter(|&i| i < w.data.len() as u64) {
                *byte = w.data[i as usize];
            }
        }
        b
    }

    /// A write into the group table: inside one entry, and the entry
    /// this process's: a valid group delivers to its `PORT`, which must be
    /// a port this process holds, before the write (it may not touch
    /// another process's valid group) and after it.
    fn check_group(&self, w: &SramWrite) -> Result<(), String> {
        let id = (w.off - map::GROUPS) / map::GROUP_ENTRY_SIZE;
        let entry = map::group_entry(id);
        let len = w.data.len() as u32;
        if w.off + len > entry + map::GROUP_ENTRY_SIZE {
            return Err(format!("a write across the end of group entry {id}"));
        }
        let sram = &self.nc.sram;
        let valid_at = entry + group::VALID;
        let port_at = entry + group::PORT;
        let now_valid = sram.load_u32(valid_at as u64).unwrap_or(0);
        let mut now_port = [0u8; 1];
        sram.read(port_at as u64, &mut now_port);
        let ours = |q: u8| {
            let held = self.nc.held.lock().unwrap_or_else(|e| e.into_inner());
            held.get(q as usize).copied().flatten().is_some_and(|(pid, _)| pid == self.pid)
        };
        if now_valid != 0 && !ours(now_port[0]) {
            return Err(format!(
                "group {id} delivers to port {}, not held by this process",
                now_port[0]
            ));
        }
        // The two fields as the write leaves them.
        let valid = self.after(w, valid_at, 4);
        let port = self.after(w, port_at, 1);
        if u32::from_le_bytes(valid[..4].try_into().unwrap_or_default()) != 0 && !ours(port[0]) {
            return Err(format!(
                "group {id} would deliver to port {}, not held by this process",
                port[0]
            ));
        }
        Ok(())
    }
}

impl NodeControl {
    /// May one more refusal be noted in the log? The first
    /// [`NODE_NOTES`] of the node's are; after that one in every
    /// [`NODE_NOTES`], saying how many there were, so a flood shows but
    /// costs a bounded log.
    fn may_note(&self) -> bool {
        let n = self.noted.fetch_add(1, Ordering::Relaxed);
        n < NODE_NOTES || n.is_multiple_of(NODE_NOTES * 64)
    }

    /// Wait (at most [`UNMAP_GRACE`]) until no process but this one has
    /// port `port`'s window or slice open or mapped; else who may still
    /// have them. A process taking back the port it held last (`pid`) need
    /// not wait: what it or its children map is its own. Where the kernel
    /// cannot tell, the port passes to another user only once the last
    /// holder's process has exited.
    fn let_go(&self, port: u8, pid: u32) -> Result<(), String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner())[port as usize];
        let Some((last_pid, last_uid)) = last else { return Ok(()) };
        if last_pid == pid {
            return Ok(());
        }
        let t = std::time::Instant::now();
        loop {
            match self.files.port_sharing(port) {
                Sharing::Alone => return Ok(()),
                Sharing::Shared if t.elapsed() < UNMAP_GRACE => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Sharing::Shared => {
                    return Err(format!(
                        "its last holder (process {last_pid}, uid {last_uid}) or a process it \
                         forked still has the port's memory mapped; the port changes hands \
                         once no such process does"
                    ))
                }
                Sharing::Unknown => {
                    return if nic_cluster_dir::cluster::pid_alive(last_pid) {
                        Err(format!(
                            "its last holder (process {last_pid}, uid {last_uid}) still runs \
                             and may still map the port's memory; it changes hands once that \
                             process exits"
                        ))
                    } else {
                        Ok(())
                    }
                }
            }
        }
    }

    /// Is `[bus, bus + len)` inside port `p`'s slice of host memory?
    fn in_slice(&self, p: u8, bus: u64, len: u64) -> bool {
        let (start, slice_len) = self.dir.port_slice(p);
        bus >= start && bus.checked_add(len).is_some_and(|e| e <= start + slice_len)
    }

    /// Make port `port` fit for a new holder: closed, no longer served by
    /// the firmware (it may still write into the last holder's memory
    /// until then; waited for at most `TAKEOVER`), and its slice of host
    /// memory, its page table and its send ring zeroed, so nothing of the
    /// last holder's is left to read.
    fn wipe(&self, port: u8) {
        let p = port as usize;
        let word = |off: u32| self.sram.load_u32(off as u64).unwrap_or(0);
        if word(port_reg(p, pcb::STATE)) == pcb::STATE_OPEN {
            self.sram.store_u32(port_reg(p, pcb::STATE) as u64, pcb::STATE_CLOSED);
            self.sram.fetch_add_u32(port_reg(p, pcb::DOORBELL) as u64, 1);
        }
        let t = std::time::Instant::now();
        while word(reg(regs::FW_STATUS)) == regs::FW_RUNNING
            && word(port_reg(p, pcb::FW_STATE)) == pcb::STATE_OPEN
            && t.elapsed() < TAKEOVER
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        // Nor its descriptors (addresses, lengths, tags) in the send ring:
        // the firmware no longer reads them, and the next holder starts
        // the ring at 0.
        let ring = map::port_window(p) + map::PORT_SEND_RING;
        self.sram.fill(ring as u64, (map::SEND_RING_LEN * nic_abi::desc::DESC_SIZE) as u64, 0);
        // A hole punched through the whole slice file reads as zeros and
        // gives its memory back; where that fails, zeros written.
        let (start, len) = self.dir.port_slice(port);
        let punched = {
            use rustix::fs::{fallocate, FallocateFlags};
            let how = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            fallocate(&self.files.slices[port as usize], how, 0, len)
        };
        if punched.is_err() {
            self.host.fill(start, len, 0);
        }
        // Nor anything of its page table.
        let layout = self.dir.host_layout();
        self.host.fill(layout.table(port), layout.table_bytes, 0);
    }

    /// Let go of `port`; close it if its STATE still says open (true).
    fn release(&self, port: u8) -> bool {
        let p = port as usize;
        let closed = self.sram.load_u32(port_reg(p, pcb::STATE) as u64) == Some(pcb::STATE_OPEN);
        if closed {
            self.sram.store_u32(port_reg(p, pcb::STATE) as u64, pcb::STATE_CLOSED);
            self.sram.fetch_add_u32(port_reg(p, pcb::DOORBELL) as u64, 1);
        }
        self.held.lock().unwrap_or_else(|e| e.into_inner())[p] = None;
        closed
    }
}

/// May port `p` read SRAM `[off, off + len)`? The public parts: the
/// registers, routes, counters, traces, flow and group tables; its own
/// window. Not other ports' windows, the translation cache, the engines'
/// rings, the packet buffers or the firmware image.
fn readable(p: u8, off: u32, len: u32) -> bool {
    let (off, end) = (off as u64, off as u64 + len as u64);
    let inside = |start: u32, size: u64| off >= start as u64 && end <= start as u64 + size;
    let trace = map::TRACE_LEN as u64 * nic_abi::trace::TRACE_RECORD_SIZE as u64;
    let dispatch = map::DISPATCH_TRACE_LEN as u64 * nic_abi::flows::DISPATCH_RECORD_SIZE as u64;
    inside(map::REGS, map::REGS_SIZE as u64)
        || inside(map::ROUTES, nic_abi::MAX_NODES as u64 * map::ROUTE_ENTRY as u64)
        || inside(map::STATS, map::STATS_SIZE as u64)
        || inside(map::TRACE, trace)
        || inside(map::FLOWS, map::FLOW_ENTRIES as u64 * nic_abi::flows::FLOW_ENTRY_SIZE as u64)
        || inside(map::DISPATCH_TRACE, dispatch)
        || inside(map::GROUPS, map::GROUP_ENTRIES as u64 * map::GROUP_ENTRY_SIZE as u64)
        || inside(port_window(p as usize), PORT_WINDOW as u64)
}

/// The region of the SRAM map `off` lies in, for messages.
pub fn region_name(off: u32) -> String {
    let regions: [(u32, &str); 19] = [
        (map::IMAGE, "the firmware image"),
        (map::REGS, "the registers"),
        (map::ROUTES, "the route table"),
        (map::STATS, "the counters"),
        (map::HDMA_RING, "the host-DMA ring"),
        (map::TXDMA_RING, "the send-DMA ring"),
        (map::RXFREE_RING, "the receive-free ring"),
        (map::RXDONE_RING, "the receive-done ring"),
        (map::EVT_STAGING, "the event staging area"),
        (map::TRACE, "the transition trace"),
        (map::FLOWS, "the flow table"),
        (map::PORTS, "the port windows"),
        (map::TLB, "the translation cache"),
        (map::TX_BUFS, "the transmit buffers"),
        (map::RX_BUFS, "the receive buffers"),
        (map::DISPATCH_TRACE, "the dispatch trace"),
        (map::GROUPS, "the group table"),
        (map::MCAST_LISTS, "the multicast child lists"),
        (map::MAP_END, "past the memory map"),
    ];
    let (start, name) = regions.iter().rev().find(|(s, _)| off >= *s).copied().unwrap_or((0, ""));
    if start == map::PORTS {
        format!("port {}'s window", (off - map::PORTS) / PORT_WINDOW)
    } else {
        name.to_string()
    }
}
