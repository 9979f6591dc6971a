//! The NIC CPU's interrupt under QEMU: the device process's doorbell to
//! each guest.
//!
//! Each guest's register page is an `ivshmem-doorbell` PCI device
//! (`qemu::QemuSpec::command`) whose chardev connects to the node's
//! `node<N>/irq.sock`. This module is the server at the other end, in
//! the ivshmem server protocol (QEMU's docs/specs/ivshmem-spec.rst):
//! every message is a little-endian i64, some with a file descriptor
//! (`SCM_RIGHTS`). On a connection it sends the protocol version (0), the
//! guest's peer ID (0), the shared memory (-1 with the node's `regs` file)
//! and the guest's one interrupt vector (0 with an eventfd), then keeps
//! the connection open and never reads a request (the protocol has none).
//! Writing to that eventfd ([`IrqLine::raise`]) makes QEMU send the
//! device's MSI-X message, which the image aims at its CLINT's software
//! interrupt: it ends the CPU's WFI (firmware/image/src/pci.rs).
//!
//! Each port window is an `ivshmem-doorbell` of its own too, connected
//! to `node<N>/win<P>.sock`, served the same way but for its shared
//! memory: the device process's own descriptor of the window file
//! (`files`), so that QEMU's mapping shares the device process's open of
//! it and a holder's is the only other one. Its vector's eventfd is
//! never raised.
//!
//! Only the node's QEMU may connect: the peer must be this process's
//! user (or root) and the process the supervisor started for the node
//! (its pid). Anything else, and a peer that sends bytes, is refused or
//! dropped, counted and noted; a guest that goes away leaves its eventfd
//! behind, harmless, until the next guest of the node connects.
//!
//! Owns the listening sockets, their thread and the connections; the
//! workers share each node's [`IrqLine`].

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use nic_cluster_dir::ClusterDir;

use super::{Ctx, RtError};

/// What the server needs of the device process (`Ctx`; a test's own).
pub(crate) trait Host: Send + Sync + 'static {
    /// The cluster is stopping.
    fn stopping(&self) -> bool;
    /// The pid of node `node`'s running QEMU (0: none).
    fn qemu_pid(&self, node: usize) -> u32;
    /// Something for the cluster's log.
    fn note(&self, msg: String);
}

impl Host for Ctx {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn qemu_pid(&self, node: usize) -> u32 {
        self.qemu_pids.get(node).map_or(0, |p| p.load(Ordering::Relaxed))
    }

    fn note(&self, msg: String) {
        Ctx::note(self, msg)
    }
}

/// The node's socket file (in its node directory).
pub const IRQ_SOCKET: &str = "irq.sock";

/// Port `port`'s window socket of node `node` of `dir`.
pub fn window_socket_path(dir: &ClusterDir, node: u32, port: u8) -> PathBuf {
    dir.node_dir(node).join(format!("win{port}.sock"))
}

/// How long the thread waits before it looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// How long a new connection's pid may wait to become the node's guest
/// (the supervisor publishes the pid just after QEMU started).
const PID_GRACE: Duration = Duration::from_secs(2);

/// The ivshmem server protocol's version.
const PROTOCOL_VERSION: i64 = 0;

/// The socket of node `node` of `dir`.
pub fn socket_path(dir: &ClusterDir, node: u32) -> PathBuf {
    dir.node_dir(node).join(IRQ_SOCKET)
}

/// One node's interrupt line: the eventfd of its current guest's vector.
#[derive(Default)]
pub(crate) struct IrqLine {
    efd: Mutex<Option<Arc<OwnedFd>>>,
    /// Interrupts raised, and raises that failed (no guest connected yet
    /// counts as neither).
    pub raised: AtomicU64,
    pub failed: AtomicU64,
}

impl IrqLine {
    /// Interrupt the node's CPU (if a guest is connected).
    pub fn raise(&self) {
        let fd = self.efd.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(fd) = fd else { return };
        match rustix::io::write(&*fd, &1u64.to_ne_bytes()) {
            Ok(8) => self.raised.fetch_add(1, Ordering::Relaxed),
            _ => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn set(&self, fd: Option<Arc<OwnedFd>>) {
        *self.efd.lock().unwrap_or_else(|e| e.into_inner()) = fd;
    }
}

/// What the interrupt sockets saw, over every node.
#[derive(Debug, Default)]
pub struct IrqCounters {
    /// Guests given their doorbell.
    pub connected: AtomicU64,
    /// Connections refused: not the node's guest, or the set-up failed.
    pub refused: AtomicU64,
    /// Connections dropped because the peer sent something or hung up.
    pub dropped: AtomicU64,
}

/// The interrupt sockets of a cluster.
pub(crate) struct IrqServer {
    pub counters: Arc<IrqCounters>,
    thread: Option<JoinHandle<()>>,
}

/// One node's sockets: the register page's (index 0), then each port
/// window's.
struct NodeIrq {
    node: usize,
    line: Arc<IrqLine>,
    ends: Vec<End>,
}

/// One shared-memory device's socket.
struct End {
    listener: UnixListener,
    shm: Shm,
    /// The connection of the node's current guest.
    conn: Option<UnixStream>,
}

/// What a device's shared memory is.
pub(crate) enum Shm {
    /// The file at this path, opened for each guest (the register page).
    Path(PathBuf),
    /// This open file, a duplicate of it for each guest (a port window).
    File(std::fs::File),
}

/// One node's devices as the server is given them: each socket and its
/// shared memory, the register page's first.
pub(crate) struct NodeSpec {
    pub ends: Vec<(PathBuf, Shm)>,
    pub line: Arc<IrqLine>,
}

impl IrqServer {
    /// Listen on every node's socket (a stale file there is replaced) and
    /// serve until `ctx.stop`.
    pub fn start(
        ctx: Arc<Ctx>,
        dir: &ClusterDir,
        lines: &[Arc<IrqLine>],
        files: &[Arc<crate::files::NodeFiles>],
    ) -> Result<IrqServer, RtError> {
        let mut nodes = Vec::with_capacity(lines.len());
        for (n, l) in lines.iter().enumerate() {
            let node = n as u32;
            let mut ends = vec![(socket_path(dir, node), Shm::Path(dir.regs_path(node)))];
            for (p, f) in files[n].windows.iter().enumerate() {
                let f = f.try_clone().map_err(|err| RtError::Io {
                    what: format!("node {node}: port {p}'s window file"),
                    err,
                })?;
                ends.push((window_socket_path(dir, node, p as u8), Shm::File(f)));
            }
            nodes.push(NodeSpec { ends, line: l.clone() });
        }
        IrqServer::serve_at(ctx, nodes)
    }

    /// Serve node i at `nodes[i]`.
    fn serve_at<H: Host>(host: Arc<H>, nodes: Vec<NodeSpec>) -> Result<IrqServer, RtError> {
        let mut served = Vec::with_capacity(nodes.len());
        for (node, spec) in nodes.into_iter().enumerate() {
            let mut ends = Vec::with_capacity(spec.ends.len());
            for (p, shm) in spec.ends {
                let _ = std::fs::remove_file(&p);
                let io =
                    |err| RtError::Io { what: format!("interrupt socket {}", p.display()), err };
                let listener = UnixListener::bind(&p).map_err(io)?;
                listener.set_nonblocking(true).map_err(io)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
                ends.push(End { listener, shm, conn: None });
            }
            served.push(NodeIrq { node, line: spec.line, ends });
        }
        let counters = Arc::new(IrqCounters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("nic-rt-irq".into())
            .spawn(move || serve(&*host, served, &c))
            .map_err(|err| RtError::Io { what: "starting the interrupt thread".into(), err })?;
        Ok(IrqServer { counters, thread: Some(thread) })
    }

    /// Wait for the thread (after `ctx.stop` was set).
    pub fn join(&mut self) {
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

fn serve<H: Host>(ctx: &H, mut nodes: Vec<NodeIrq>, counters: &IrqCounters) {
    let uid = rustix::process::geteuid().as_raw();
    let timeout = Timespec { tv_sec: 0, tv_nsec: POLL.as_nanos() as i64 };
    // Every (node, end), in one order for the poll.
    let all: Vec<(usize, usize)> =
        (0..nodes.len()).flat_map(|n| (0..nodes[n].ends.len()).map(move |e| (n, e))).collect();
    while !ctx.stopping() {
        // Listeners first, then the open connections (a readable one has
        // sent something or hung up).
        let (accept, hangup) = {
            let mut fds: Vec<PollFd> = all
                .iter()
                .map(|&(n, e)| PollFd::new(&nodes[n].ends[e].listener, PollFlags::IN))
                .collect();
            let with_conn: Vec<(usize, usize)> =
                all.iter().copied().filter(|&(n, e)| nodes[n].ends[e].conn.is_some()).collect();
            for &(n, e) in &with_conn {
                if let Some(c) = &nodes[n].ends[e].conn {
                    fds.push(PollFd::new(c, PollFlags::IN));
                }
            }
            if poll(&mut fds, Some(&timeout)).is_err() {
                drop(fds);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            let k = all.len();
            let accept: Vec<(usize, usize)> =
                (0..k).filter(|&i| !fds[i].revents().is_empty()).map(|i| all[i]).collect();
            let hangup: Vec<(usize, usize)> = with_conn
                .iter()
                .enumerate()
                .filter(|&(j, _)| !fds[k + j].revents().is_empty())
                .map(|(_, &ne)| ne)
                .collect();
            (accept, hangup)
        };
        for (n, e) in hangup {
            // The protocol has the client send nothing: bytes are a
            // broken peer, end of file a guest gone. Either way the
            // connection goes; the guest keeps its eventfd.
            nodes[n].ends[e].conn = None;
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        for (n, e) in accept {
            let node = &mut nodes[n];
            let s = match node.ends[e].listener.accept() {
                Ok((s, _)) => s,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(err) => {
                    ctx.note(format!("node {}: interrupt socket: {err}", node.node));
                    continue;
                }
            };
            match welcome(ctx, node.node, &node.ends[e].shm, &s, uid) {
                Ok(fd) => {
                    // The register page's vector is the CPU's interrupt;
                    // a window's is never raised.
                    if e == 0 {
                        node.line.set(Some(fd));
                    }
                    node.ends[e].conn = Some(s);
                    counters.connected.fetch_add(1, Ordering::Relaxed);
                }
                Err(why) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    ctx.note(format!("node {}: interrupt socket: {why}", node.node));
                }
            }
        }
    }
}

/// Check the peer and send it the set-up; the eventfd of its vector.
fn welcome<H: Host>(
    ctx: &H,
    node: usize,
    shm: &Shm,
    s: &UnixStream,
    uid: u32,
) -> Result<Arc<OwnedFd>, String> {
    let cred = rustix::net::sockopt::socket_peercred(s)
        .map_err(|e| format!("cannot tell the peer: {e}"))?;
    let (peer_uid, pid) = (cred.uid.as_raw(), cred.pid.as_raw_nonzero().get() as u32);
    if peer_uid != uid && peer_uid != 0 {
        return Err(format!("refused a process of uid {peer_uid}"));
    }
    let t = Instant::now();
    while ctx.qemu_pid(node) != pid {
        if t.elapsed() > PID_GRACE || ctx.stopping() {
            return Err(format!("refused process {pid}: not the node's QEMU"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let sock = |e: std::io::Error| format!("socket: {e}");
    s.set_nonblocking(false).map_err(sock)?;
    s.set_write_timeout(Some(Duration::from_secs(2))).map_err(sock)?;
    let mem = match shm {
        Shm::Path(p) => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        Shm::File(f) => f.try_clone().map_err(|e| format!("a window's descriptor: {e}"))?,
    };
    let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| format!("eventfd: {e}"))?;
    let send = |v: i64, fd: Option<&OwnedFd>| {
        send_msg(s, v, fd).map_err(|e| format!("sending the set-up to QEMU: {e}"))
    };
    send(PROTOCOL_VERSION, None)?;
    send(0, None)?; // its peer ID
    send(-1, Some(&OwnedFd::from(mem)))?;
    send(0, Some(&efd))?; // peer 0's vector 0
    s.set_nonblocking(true).map_err(sock)?;
    Ok(Arc::new(efd))
}

/// One protocol message: `v` (little-endian i64), with `fd` attached.
fn send_msg(s: &UnixStream, v: i64, fd: Option<&OwnedFd>) -> std::io::Result<()> {
    let bytes = v.to_le_bytes();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = fd.map(|f| [f.as_fd()]);
    if let Some(fds) = &fds {
        if !anc.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(std::io::Error::other("no room for the descriptor"));
        }
    }
    let sent = sendmsg(s.as_fd(), &[IoSlice::new(&bytes)], &mut anc, SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "short write"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    use std::io::{IoSliceMut, Write};
    use std::sync::atomic::{AtomicBool, AtomicU32};

    #[derive(Default)]
    struct TestHost {
        stop: AtomicBool,
        pid: AtomicU32,
        notes: Mutex<Vec<String>>,
    }

    impl Host for TestHost {
        fn stopping(&self) -> bool {
            self.stop.load(Ordering::Relaxed)
        }
        fn qemu_pid(&self, _node: usize) -> u32 {
            self.pid.load(Ordering::Relaxed)
        }
        fn note(&self, msg: String) {
            self.notes.lock().unwrap().push(msg);
        }
    }

    struct Setup {
        dir: PathBuf,
        sock: PathBuf,
        host: Arc<TestHost>,
        line: Arc<IrqLine>,
        server: IrqServer,
    }

    impl Drop for Setup {
        fn drop(&mut self) {
            self.host.stop.store(true, Ordering::Relaxed);
            self.server.join();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn setup(name: &str, pid: u32) -> Setup {
        let dir = std::env::temp_dir().join(format!("irq-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (sock, regs) = (dir.join(IRQ_SOCKET), dir.join("regs"));
        std::fs::write(&regs, vec![0u8; 4096]).unwrap();
        let host = Arc::new(TestHost { pid: AtomicU32::new(pid), ..Default::default() });
        let line = Arc::new(IrqLine::default());
        let spec = NodeSpec { ends: vec![(sock.clone(), Shm::Path(regs))], line: line.clone() };
        let server = IrqServer::serve_at(host.clone(), vec![spec]).unwrap();
        Setup { dir, sock, host, line, server }
    }

    /// One protocol message (a little-endian i64) and its descriptor;
    /// None at the end of the stream.
    fn recv_msg(s: &UnixStream) -> Option<(i64, Option<OwnedFd>)> {
        let mut b = [0u8; 8];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let m = recvmsg(s.as_fd(), &mut [IoSliceMut::new(&mut b)], &mut anc, RecvFlags::empty())
            .unwrap();
        if m.bytes == 0 {
            return None;
        }
        assert_eq!(m.bytes, 8, "one whole message per read");
        let fd = anc.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut it) => it.next(),
            _ => None,
        });
        Some((i64::from_le_bytes(b), fd))
    }

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(5), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Take the set-up as QEMU does; the eventfd of vector 0.
    fn take_setup(s: &UnixStream) -> OwnedFd {
        let (v, fd) = recv_msg(s).unwrap();
        assert_eq!((v, fd.is_none()), (0, true), "the protocol version first, no descriptor");
        let (id, fd) = recv_msg(s).unwrap();
        assert_eq!((id, fd.is_none()), (0, true), "then the peer ID");
        let (m, shm) = recv_msg(s).unwrap();
        assert_eq!(m, -1, "then the shared memory");
        let size = rustix::fs::fstat(shm.expect("the register file")).unwrap().st_size;
        assert_eq!(size, 4096, "the node's register file");
        let (id, efd) = recv_msg(s).unwrap();
        assert_eq!(id, 0, "then vector 0 of peer 0");
        efd.expect("an eventfd")
    }

    #[test]
    fn the_nodes_guest_gets_its_registers_and_an_eventfd_that_raise_signals() {
        let t = setup("guest", std::process::id());
        t.line.raise(); // nobody connected yet: nothing to signal
        assert_eq!(t.line.raised.load(Ordering::Relaxed), 0);
        let s = UnixStream::connect(&t.sock).unwrap();
        let efd = take_setup(&s);
        wait_for("the guest's line", || t.server.counters.connected.load(Ordering::Relaxed) == 1);
        t.line.raise();
        t.line.raise();
        let mut b = [0u8; 8];
        assert_eq!(rustix::io::read(&efd, &mut b).unwrap(), 8);
        assert_eq!(u64::from_ne_bytes(b), 2, "both raises reach the guest's eventfd");
        assert_eq!(t.line.raised.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn another_process_is_refused_and_a_guest_that_talks_is_dropped_without_harm() {
        // Not the node's QEMU (its pid is someone else's): refused after
        // the grace period, nothing sent.
        let t = setup("refuse", 1);
        let s = UnixStream::connect(&t.sock).unwrap();
        assert!(recv_msg(&s).is_none(), "a stranger is sent nothing");
        assert_eq!(t.server.counters.refused.load(Ordering::Relaxed), 1);
        assert!(t.host.notes.lock().unwrap()[0].contains("not the node's QEMU"));
        // The guest: served; then it sends bytes the protocol has none
        // of: its connection goes, the server serves the next guest.
        t.host.pid.store(std::process::id(), Ordering::Relaxed);
        let mut s = UnixStream::connect(&t.sock).unwrap();
        take_setup(&s);
        s.write_all(b"garbage!").unwrap();
        wait_for("the drop", || t.server.counters.dropped.load(Ordering::Relaxed) == 1);
        let s = UnixStream::connect(&t.sock).unwrap();
        let efd = take_setup(&s);
        wait_for("the new guest", || t.server.counters.connected.load(Ordering::Relaxed) == 2);
        t.line.raise();
        let mut b = [0u8; 8];
        assert_eq!(rustix::io::read(&efd, &mut b).unwrap(), 8, "the new guest's line is live");
    }
}
