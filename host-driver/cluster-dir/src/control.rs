//! The per-node control socket: the privileged side of a port, as GM's
//! kernel driver is. The device process listens on `node<N>/control.sock`
//! ([`crate::ClusterDir::control_socket_path`]); a host process sends
//! [`Request`]s and gets one [`Reply`] each.
//!
//! ```text
//! host process ── Attach{port} ──▶ device process: checks the peer's uid,
//!              ◀── Attached + 2 descriptors (window rw, slice rw)
//!              ── Read{off,len} ──▶ a public part of SRAM (counters, traces...)
//!              ── Write{writes} ──▶ the port's page table, the group table,
//!                                  TRACE_ENABLE; each entry checked
//! ```
//!
//! A host process is given only descriptors of its port's window and its
//! slice of host memory: it maps nothing else of the node. Whatever else of SRAM it needs goes through
//! this socket, where the device process decides.
//!
//! A frame is a little-endian u32 length, then that many bytes of one
//! postcard message; at most [`MAX_FRAME`] bytes. Descriptors ride with
//! the first byte of a reply's frame (`SCM_RIGHTS`). Every socket has
//! timeouts: a silent peer is an error, never a hang.
//!
//! Owns no state: the server (nic-realtime's `control` module) and the
//! client (host-driver's `LiveBackend`) decide; this moves bytes and
//! descriptors.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// The socket's file name in a node's directory.
pub const CONTROL_SOCKET: &str = "control.sock";

/// Largest frame accepted (bytes of one message).
pub const MAX_FRAME: u32 = 1 << 20;

/// Largest `Read` served (bytes).
pub const MAX_READ: u32 = 64 * 1024;

/// Writes one `Request::Write` may carry (the device refuses more).
pub const MAX_WRITES: usize = 4096;

/// Descriptors a reply carries at most.
pub const MAX_FDS: usize = 2;

/// What a host process asks of the privileged side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Hold port `port` for as long as this connection lasts; answered by
    /// `Attached` with the port's descriptors.
    Attach { port: u8 },
    /// Bytes `[off, off + len)` of SRAM, from a part a port may read.
    Read { off: u32, len: u32 },
    /// Writes to SRAM, applied in order, each checked on its own.
    Write { writes: Vec<SramWrite> },
    /// Entries `first..` of the port's page table in host memory
    /// (`nic_abi::page_table`): each 0 or a valid entry naming a page of
    /// the port's slice; answered by `Written` (all or nothing: one bad
    /// entry refuses the request, named by its index).
    PageTable { first: u64, entries: Vec<u64> },
}

/// One write of a `Request::Write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SramWrite {
    pub off: u32,
    pub data: Vec<u8>,
}

/// The privileged side's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The port is this connection's. Two descriptors come with it: the
    /// port's window (read-write) and the port's slice of host memory
    /// (read-write), which starts at bus address `slice_start` and is
    /// `slice_len` bytes long.
    Attached { slice_start: u64, slice_len: u64 },
    /// The port of an `Attach` cannot be had now: another connection
    /// holds it, or an earlier holder's process (or one it forked) still
    /// maps its memory; `by` says which (the driver's `PortHeld`). An
    /// answer, not a refusal: it may be had later.
    Busy { port: u8, by: String },
    /// The bytes of a `Read`.
    Data { bytes: Vec<u8> },
    /// The writes of a `Write` were applied, but for those named here
    /// (index into the request, and why), which were refused, and `more`
    /// refused beyond those (a reply names a few refusals, not all).
    Written { refused: Vec<(u32, String)>, more: u32 },
    /// The request was refused as a whole (why).
    Refused { why: String },
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// Nothing arrived in time (between frames: the caller may go on).
    Idle,
    /// The length prefix is over [`MAX_FRAME`].
    TooLong(u32),
    /// The message is not one of ours.
    Garbled(String),
    /// Timeout or EOF inside a frame, or another I/O error.
    Io(io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => f.write_str("connection closed"),
            FrameError::Idle => f.write_str("no frame in time"),
            FrameError::TooLong(n) => write!(f, "frame of {n} bytes (at most {MAX_FRAME})"),
            FrameError::Garbled(why) => write!(f, "not a control message: {why}"),
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        match e {
            FrameError::Io(e) => e,
            FrameError::Idle => io::Error::new(io::ErrorKind::TimedOut, e.to_string()),
            FrameError::Closed => io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()),
            e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// `body` as a frame: its length (little-endian u32), then itself.
/// Refused past [`MAX_FRAME`].
pub fn frame(body: &[u8]) -> io::Result<Vec<u8>> {
    let n = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "message too long"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&n.to_le_bytes());
    frame.extend_from_slice(body);
    Ok(frame)
}

/// Send `msg` as one frame, with `fds` attached to its first byte.
pub fn send<T: Serialize>(s: &UnixStream, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let body = postcard::to_allocvec(msg).map_err(|e| io::Error::other(e.to_string()))?;
    let frame = frame(&body)?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"));
    }
    let mut sent = sendmsg(s.as_fd(), &[IoSlice::new(&frame)], &mut anc, SendFlags::NOSIGNAL)?;
    // The descriptors went with the first bytes; the rest as plain data.
    while sent < frame.len() {
        let k = sendmsg(
            s.as_fd(),
            &[IoSlice::new(&frame[sent..])],
            &mut SendAncillaryBuffer::default(),
            SendFlags::NOSIGNAL,
        )?;
        if k == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "control socket closed"));
        }
        sent += k;
    }
    Ok(())
}

/// Read one frame and the descriptors that came with it. A timeout
/// before its first byte is [`FrameError::Idle`]; once a frame has
/// begun, the rest must come within the socket's read timeout.
pub fn recv<T: for<'de> Deserialize<'de>>(s: &UnixStream) -> Result<(T, Vec<OwnedFd>), FrameError> {
    let mut head = [0u8; 4];
    let mut fds = Vec::new();
    let mut got = 0;
    while got < head.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(
            s.as_fd(),
            &mut [IoSliceMut::new(&mut head[got..])],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        );
        match r {
            Ok(m) if m.bytes == 0 && got == 0 => return Err(FrameError::Closed),
            Ok(m) if m.bytes == 0 => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "control socket closed inside a frame",
                )))
            }
            Ok(m) => got += m.bytes,
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(e) => {
                let e = io::Error::from(e);
                return Err(if got == 0 && timed_out(&e) {
                    FrameError::Idle
                } else {
                    FrameError::Io(e)
                });
            }
        }
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
    }
    let n = u32::from_le_bytes(head);
    if n > MAX_FRAME {
        return Err(FrameError::TooLong(n));
    }
    let mut body = vec![0u8; n as usize];
    let mut r: &UnixStream = s;
    r.read_exact(&mut body).map_err(FrameError::Io)?;
    let msg = postcard::from_bytes(&body).map_err(|e| FrameError::Garbled(e.to_string()))?;
    Ok((msg, fds))
}

/// Send a request and wait for its reply (and descriptors).
pub fn call(s: &UnixStream, req: &Request) -> io::Result<(Reply, Vec<OwnedFd>)> {
    if let Err(e) = send(s, req, &[]) {
        // A server that refuses a peer at the door answers and closes
        // before reading: its answer may be waiting.
        return match recv(s) {
            Ok(r) => Ok(r),
            Err(_) => Err(e),
        };
    }
    Ok(recv(s)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn frames_carry_messages_and_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = tempfile_with(b"hello");
        let req = Request::Write { writes: vec![SramWrite { off: 8, data: vec![1, 2, 3] }] };
        send(&a, &req, &[f.as_fd()]).unwrap();
        let (got, fds): (Request, _) = recv(&b).unwrap();
        assert_eq!(got, req);
        assert_eq!(fds.len(), 1);
        let mut text = String::new();
        let mut file = std::fs::File::from(fds.into_iter().next().unwrap());
        use std::io::Seek;
        file.seek(io::SeekFrom::Start(0)).unwrap();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "hello");
        assert_ne!(file.as_raw_fd(), f.as_raw_fd());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let (mut a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
        assert!(matches!(recv::<Request>(&b), Err(FrameError::Idle)));
        a.write_all(&(MAX_FRAME + 1).to_le_bytes()).unwrap();
        assert!(matches!(recv::<Request>(&b), Err(FrameError::TooLong(_))));
        let (mut a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
        a.write_all(&3u32.to_le_bytes()).unwrap();
        a.write_all(&[0xFF, 0xFF, 0xFF]).unwrap();
        assert!(matches!(recv::<Request>(&b), Err(FrameError::Garbled(_))));
        a.write_all(&9u32.to_le_bytes()).unwrap();
        a.write_all(&[0]).unwrap();
        assert!(matches!(recv::<Request>(&b), Err(FrameError::Io(_))), "cut inside a frame");
        drop(a);
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(matches!(recv::<Request>(&b), Err(FrameError::Closed)));
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let p = std::env::temp_dir().join(format!("control-fd-{}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }
}
