//! The bandwidth resource manager between processes: how the postcard
//! messages of [`crate::protocol`] cross Unix sockets in a live or qemu cluster
//! (docs/design/cluster-dir.md, docs/rate-control.md).
//!
//! ```text
//! host program ── BrmClient<SocketTransport> ──▶ <dir>/brm.sock             the master process
//! master       ── Request/Reply frames                                       (nic-cluster brm)
//! master       ── AgentCommand/AgentReply ──▶ <dir>/node<N>/brm-agent.sock  the device process
//! ```
//!
//! A frame is a little-endian u32 length, then that many bytes of one
//! postcard message ([`write_frame`], [`read_frame`]); frames longer than
//! [`MAX_FRAME`] are refused. A connection carries any number of
//! request/reply pairs, one at a time. Every socket has read and write
//! timeouts, so a dead or silent peer is an error, never a hang.
//!
//! Servers use [`serve_connection`]: an undecodable message is answered
//! (the handler's error reply) and counted; a bad length, a timeout in
//! the middle of a frame or an I/O error ends that connection, counted.
//! Nothing a peer sends panics the server.
//!
//! Owns no BRM state: the master ([`crate::master`]) and the agents
//! (the device process, `nic-realtime`) decide; this only moves bytes.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant};

use crate::protocol::{BrmClient, BrmTransport};
use host_driver::cluster::ClusterDir;

/// Largest frame accepted (bytes of one message).
pub const MAX_FRAME: u32 = host_driver::control::MAX_FRAME;

/// How long a client waits for the master's reply by default. A request
/// may make the master talk to several agents ([`AGENT_TIMEOUT`] each).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the master waits for one agent.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a server waits for the rest of a frame once its first byte
/// came (a peer that stops mid-frame is dropped after this).
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a frame could not be read: the same as on a node's control socket
/// (whose frames these are too).
pub use host_driver::control::FrameError;

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Write one frame.
pub fn write_frame(w: &mut impl Write, msg: &[u8]) -> io::Result<()> {
    w.write_all(&host_driver::control::frame(msg)?)?;
    w.flush()
}

/// Read one frame from `s`. A timeout before its first byte is
/// [`FrameError::Idle`]; once a frame has begun, the rest must come
/// within `frame_timeout`.
pub fn read_frame(s: &mut UnixStream, frame_timeout: Duration) -> Result<Vec<u8>, FrameError> {
    let mut first = [0u8; 1];
    loop {
        match s.read(&mut first) {
            Ok(0) => return Err(FrameError::Closed),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if timed_out(&e) => return Err(FrameError::Idle),
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let deadline = Instant::now() + frame_timeout;
    let mut len = [first[0], 0, 0, 0];
    read_until(s, &mut len[1..], deadline)?;
    let n = u32::from_le_bytes(len);
    if n > MAX_FRAME {
        return Err(FrameError::TooLong(n));
    }
    let mut buf = vec![0u8; n as usize];
    read_until(s, &mut buf, deadline)?;
    Ok(buf)
}

/// Fill `buf`, giving up at `deadline` (the socket's own read timeout
/// bounds each wait).
fn read_until(s: &mut UnixStream, buf: &mut [u8], deadline: Instant) -> Result<(), FrameError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside a frame",
                )))
            }
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) && Instant::now() < deadline => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(())
}

/// What a server counts over its connections.
#[derive(Debug, Default)]
pub struct ServeCounters {
    /// Frames handled (answered).
    pub frames: AtomicU64,
    /// Frames the handler could not decode (answered with an error).
    pub malformed: AtomicU64,
    /// Connections ended by a bad length, a stalled or broken frame, or a
    /// failed reply.
    pub broken: AtomicU64,
}

impl ServeCounters {
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
    pub fn broken(&self) -> u64 {
        self.broken.load(Ordering::Relaxed)
    }
}

/// What a handler made of one frame.
pub enum Handled {
    /// The reply to send.
    Reply(Vec<u8>),
    /// The frame did not decode: this error reply is sent, and counted.
    Malformed(Vec<u8>),
}

/// Serve one connection until the peer closes it, it breaks, or `stop`
/// is set (checked at every `poll` of idleness). Each frame is given to
/// `handle` and its answer written back. Returns why it ended (None: the
/// peer closed it or `stop`).
pub fn serve_connection(
    mut s: UnixStream,
    stop: &AtomicBool,
    poll: Duration,
    counters: &ServeCounters,
    mut handle: impl FnMut(&[u8]) -> Handled,
) -> Option<String> {
    if let Err(e) =
        s.set_read_timeout(Some(poll)).and_then(|()| s.set_write_timeout(Some(FRAME_TIMEOUT)))
    {
        counters.broken.fetch_add(1, Ordering::Relaxed);
        return Some(format!("socket options: {e}"));
    }
    while !stop.load(Ordering::Relaxed) {
        let frame = match read_frame(&mut s, FRAME_TIMEOUT) {
            Ok(f) => f,
            Err(FrameError::Idle) => continue,
            Err(FrameError::Closed) => return None,
            Err(e) => {
                counters.broken.fetch_add(1, Ordering::Relaxed);
                return Some(e.to_string());
            }
        };
        counters.frames.fetch_add(1, Ordering::Relaxed);
        let reply = match handle(&frame) {
            Handled::Reply(r) => r,
            Handled::Malformed(r) => {
                counters.malformed.fetch_add(1, Ordering::Relaxed);
                r
            }
        };
        if let Err(e) = write_frame(&mut s, &reply) {
            counters.broken.fetch_add(1, Ordering::Relaxed);
            return Some(format!("writing the reply: {e}"));
        }
    }
    None
}

/// One request/reply exchange over a (possibly reused) connection to
/// `path`. On any error the connection is dropped (the next call
/// reconnects).
#[derive(Debug)]
pub struct FrameCaller {
    path: PathBuf,
    timeout: Duration,
    conn: Option<UnixStream>,
}

impl FrameCaller {
    pub fn new(path: &Path, timeout: Duration) -> FrameCaller {
        FrameCaller { path: path.to_path_buf(), timeout, conn: None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(&self) -> io::Result<UnixStream> {
        let s = UnixStream::connect(&self.path)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        Ok(s)
    }

    /// Send `msg`, wait for the reply (at most the timeout).
    pub fn call(&mut self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let mut s = match self.conn.take() {
            Some(s) => s,
            None => self.connect().map_err(|e| format!("{}: {e}", self.path.display()))?,
        };
        let r = write_frame(&mut s, msg)
            .map_err(FrameError::Io)
            .and_then(|()| read_frame(&mut s, self.timeout));
        match r {
            Ok(reply) => {
                self.conn = Some(s);
                Ok(reply)
            }
            Err(FrameError::Idle) => {
                Err(format!("{}: no reply within {:?}", self.path.display(), self.timeout))
            }
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        }
    }
}

/// Carries a program's BRM requests to the master process of a live or
/// qemu cluster over `<dir>/brm.sock`.
#[derive(Debug)]
pub struct SocketTransport {
    caller: FrameCaller,
}

impl SocketTransport {
    /// To the master of the cluster at `dir`, waiting at most `timeout`
    /// for each reply. Connects at the first call.
    pub fn new(dir: &ClusterDir, timeout: Duration) -> SocketTransport {
        SocketTransport { caller: FrameCaller::new(&dir.brm_socket_path(), timeout) }
    }

    /// To a master listening at `path`.
    pub fn at(path: &Path, timeout: Duration) -> SocketTransport {
        SocketTransport { caller: FrameCaller::new(path, timeout) }
    }
}

impl BrmTransport for SocketTransport {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        self.caller.call(request)
    }
}

/// A transport whose calls run on a thread of its own: `send` returns at
/// once and `reply` brings the answer once it came, so a program with
/// other work (flows already sending beside the one that asks, which a
/// request made to wait on a loaded machine for tens of milliseconds)
/// goes on with it meanwhile. The thread ends when this is dropped (after
/// the call it is in, if any: at most the inner transport's timeout).
pub struct Background {
    to: mpsc::Sender<Vec<u8>>,
    from: mpsc::Receiver<Result<Vec<u8>, String>>,
    /// Requests sent whose replies were not taken.
    out: usize,
}

impl Background {
    pub fn new<T: BrmTransport + Send + 'static>(mut inner: T) -> Result<Background, String> {
        let (to, requests) = mpsc::channel::<Vec<u8>>();
        let (replies, from) = mpsc::channel();
        std::thread::Builder::new()
            .name("brm-client".into())
            .spawn(move || {
                for r in requests {
                    if replies.send(inner.call(&r)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("starting the BRM client's thread: {e}"))?;
        Ok(Background { to, from, out: 0 })
    }
}

const BACKGROUND_GONE: &str = "the BRM client's thread is gone";

impl BrmTransport for Background {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        if self.out > 0 {
            return Err("a request is still waiting for its reply".into());
        }
        self.send(request)?;
        self.out -= 1;
        self.from.recv().map_err(|_| BACKGROUND_GONE.to_string())?
    }

    fn send(&mut self, request: &[u8]) -> Result<bool, String> {
        self.to.send(request.to_vec()).map_err(|_| BACKGROUND_GONE.to_string())?;
        self.out += 1;
        Ok(true)
    }

    fn reply(&mut self) -> Option<Result<Vec<u8>, String>> {
        if self.out == 0 {
            return None;
        }
        let got = match self.from.try_recv() {
            Ok(r) => r,
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => Err(BACKGROUND_GONE.to_string()),
        };
        self.out -= 1;
        Some(got)
    }
}

impl BrmClient<Background> {
    /// As [`BrmClient::connect`], with the requests carried by a thread
    /// of the client's own ([`Background`]): [`BrmClient::begin`] returns
    /// at once. (The blocking calls still block.)
    pub fn connect_background(cluster: &str) -> Result<BrmClient<Background>, String> {
        let c = BrmClient::connect(cluster)?;
        Ok(BrmClient::new(Background::new(c.into_transport())?))
    }
}

impl BrmClient<SocketTransport> {
    /// A client of the BRM of the running cluster `cluster` (name or
    /// path). Err: no such cluster, or it runs no BRM (no `brm.sock`).
    /// Requests block until the master answers (at most
    /// [`CLIENT_TIMEOUT`]; then `Refused::Unavailable`).
    pub fn connect(cluster: &str) -> Result<BrmClient<SocketTransport>, String> {
        let dir = ClusterDir::open(cluster).map_err(|e| format!("cluster `{cluster}`: {e}"))?;
        let sock = dir.brm_socket_path();
        if !sock.exists() {
            return Err(format!(
                "cluster `{cluster}` runs no bandwidth manager ({} is missing: start the cluster \
                 with a BRM, e.g. `nic-cluster run --brm`)",
                sock.display()
            ));
        }
        Ok(BrmClient::new(SocketTransport::new(&dir, CLIENT_TIMEOUT)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::sync::Arc;

    /// A socket path in a directory of its own, removed with it when the
    /// test ends.
    struct Sock(PathBuf);

    impl Drop for Sock {
        fn drop(&mut self) {
            if let Some(d) = self.0.parent() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }

    impl AsRef<Path> for Sock {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl std::ops::Deref for Sock {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn sock(tag: &str) -> Sock {
        let d = std::env::temp_dir().join(format!("brm-sock-{tag}-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&d);
        let p = d.join("s.sock");
        let _ = std::fs::remove_file(&p);
        Sock(p)
    }

    /// An echo server that answers "bad" to frames starting with 0xFF.
    fn echo(path: &Path) -> (Arc<AtomicBool>, Arc<ServeCounters>, std::thread::JoinHandle<()>) {
        let l = UnixListener::bind(path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let c = Arc::new(ServeCounters::default());
        let (st, cc) = (stop.clone(), c.clone());
        let h = std::thread::spawn(move || {
            for s in l.incoming().take(3) {
                let s = s.unwrap();
                serve_connection(s, &st, Duration::from_millis(20), &cc, |f| {
                    if f.first() == Some(&0xFF) {
                        Handled::Malformed(b"bad".to_vec())
                    } else {
                        Handled::Reply(f.to_vec())
                    }
                });
            }
        });
        (stop, c, h)
    }

    /// Answers after a while, echoing the request.
    struct Slow(Duration);

    impl BrmTransport for Slow {
        fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
            std::thread::sleep(self.0);
            Ok(request.to_vec())
        }
    }

    #[test]
    fn a_background_transport_sends_at_once_and_replies_later() {
        let mut t = Background::new(Slow(Duration::from_millis(50))).unwrap();
        assert!(t.reply().is_none(), "nothing sent");
        let start = Instant::now();
        assert_eq!(t.send(b"ask"), Ok(true));
        assert!(start.elapsed() < Duration::from_millis(40), "send waited for the reply");
        assert!(t.reply().is_none(), "not answered yet");
        assert!(t.call(b"again").is_err(), "one request at a time");
        let got = loop {
            if let Some(r) = t.reply() {
                break r;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no reply");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, Ok(b"ask".to_vec()));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(t.reply().is_none());
        // A blocking call through it still answers.
        assert_eq!(t.call(b"now"), Ok(b"now".to_vec()));
    }

    #[test]
    fn frames_cross_a_connection_and_malformed_ones_are_answered_and_counted() {
        let p = sock("echo");
        let (stop, c, h) = echo(&p);
        let mut t = FrameCaller::new(&p, Duration::from_secs(5));
        assert_eq!(t.call(b"hello").unwrap(), b"hello");
        assert_eq!(t.call(&[0xFF, 1]).unwrap(), b"bad");
        assert_eq!(t.call(b"").unwrap(), b"");
        assert_eq!((c.frames(), c.malformed(), c.broken()), (3, 1, 0));
        drop(t);
        // A bogus length ends that connection, counted; the server goes on.
        let mut raw = UnixStream::connect(&p).unwrap();
        raw.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut b = [0u8; 1];
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(raw.read(&mut b).unwrap(), 0, "the server closes it");
        assert_eq!(c.broken(), 1);
        // A frame cut short: the server gives up after FRAME_TIMEOUT.
        let mut raw = UnixStream::connect(&p).unwrap();
        raw.write_all(&[10, 0, 0, 0, 1, 2]).unwrap();
        raw.set_read_timeout(Some(FRAME_TIMEOUT * 3)).unwrap();
        assert_eq!(raw.read(&mut b).unwrap(), 0, "the server drops a stalled frame");
        assert_eq!(c.broken(), 2);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn a_silent_or_missing_peer_is_an_error_not_a_hang() {
        let p = sock("silent");
        let missing = FrameCaller::new(&p, Duration::from_millis(200)).call(b"x");
        assert!(missing.unwrap_err().contains("s.sock"));
        let _l = UnixListener::bind(&p).unwrap();
        let t = Instant::now();
        // Connects (the backlog accepts it) but nobody answers.
        let e = FrameCaller::new(&p, Duration::from_millis(200)).call(b"x").unwrap_err();
        assert!(e.contains("no reply"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
