//! Stream messages from port 1 of node 0 to port 1 of node 1 with a
//! window of sends in flight, check every message and print the
//! bandwidth. Start a cluster first, then run this against it:
//!
//! ```sh
//! cargo xtask run                                          # a 2-node live cluster named `nic`
//! cargo run --release -p host-driver --example stream      # in another terminal
//! cargo run --release -p host-driver --example stream -- c1 --size 65536 --count 2000 --window 16
//! ```
//!
//! How it keeps the NIC busy:
//!
//! - The sender owns `window` send buffers (at most its send tokens: a
//!   send holds one token until its completion is read). It fills a free
//!   buffer, sends it with `notify` (so its `Event::Sent` comes back
//!   through `recv`, tagged with the buffer's number), and only when every
//!   buffer is in flight does it wait, with `recv_timeout`, for a
//!   completion: the buffer it names is free to fill again.
//! - The receiver provides `recv_buffers` buffers before the sender
//!   starts and provides each one again as soon as it has read the
//!   message in it.
//! - Both wait with `recv_timeout`: it returns as soon as the event is
//!   there; the timeout only bounds a wait for a peer that went quiet.
//!
//! The bandwidth is the stream program's (`host-programs`' `stream`):
//! the bytes of every message after the first, over the time from the
//! first message's arrival to the last's (MB/s: 10^6 bytes a second).

use std::time::{Duration, Instant};

use host_driver::{Dest, DriverError, Event, Port, RecvOpts, SendOpts, SendStatus};

/// How long a wait for a peer that sends or answers nothing may last.
pub const QUIET_LIMIT: Duration = Duration::from_secs(10);

/// One `recv_timeout` slice: the wait returns as soon as an event is
/// there, so this only sets how often a long wait looks at the clock.
const SLICE: Duration = Duration::from_millis(100);

/// What to stream, from where to where.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub from: Dest,
    pub to: Dest,
    /// Bytes per message (at least 8: each carries its number).
    pub size: u32,
    pub count: u64,
    /// Sends in flight at most (also bounded by the port's send tokens).
    pub window: u32,
    /// Receive buffers kept provided (also bounded by receive tokens).
    pub recv_buffers: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            from: Dest::new(0, 1),
            to: Dest::new(1, 1),
            size: 4096,
            count: 1000,
            window: 8,
            recv_buffers: 16,
        }
    }
}

/// What the receiver measured.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// Sends the sender kept in flight at most.
    pub window: u32,
    /// Bytes of every message after the first.
    pub bytes: u64,
    /// From the first message's arrival to the last's.
    pub elapsed: Duration,
}

impl Report {
    /// 10^6 bytes a second (0 when nothing was timed).
    pub fn mb_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s / 1e6
        } else {
            0.0
        }
    }
}

/// Message `n`'s bytes: its number in the first 8, then words that
/// depend on both the number and the place (a message in the wrong order
/// or a stale buffer shows). Word by word: a byte loop here would cost
/// more than the NIC's work on the message.
pub fn fill(buf: &mut [u8], n: u64) {
    let mut words = buf.chunks_exact_mut(8);
    let mut j = 0;
    for w in &mut words {
        w.copy_from_slice(&word(n, j).to_le_bytes());
        j += 1;
    }
    let tail = words.into_remainder();
    let len = tail.len();
    tail.copy_from_slice(&word(n, j).to_le_bytes()[..len]);
}

/// Is `buf` message `n`, every byte?
pub fn is_message(buf: &[u8], n: u64) -> bool {
    let mut words = buf.chunks_exact(8);
    let mut diff = 0;
    let mut j = 0;
    for w in &mut words {
        diff |= u64::from_le_bytes(w.try_into().unwrap_or([0; 8])) ^ word(n, j);
        j += 1;
    }
    let tail = words.remainder();
    diff == 0 && *tail == word(n, j).to_le_bytes()[..tail.len()]
}

/// Word `j` of message `n`.
fn word(n: u64, j: u64) -> u64 {
    if j == 0 {
        n
    } else {
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ j.wrapping_mul(0xD6E8_FEB8_6659_FD93)
    }
}

/// Stream `cfg.count` messages over `cluster` (a name or a directory) and
/// return what the receiver measured. Every message is checked: its
/// sender, length, number (in order) and content.
pub fn stream(cluster: &str, cfg: &Config) -> Result<Report, String> {
    if cfg.size < 8 || cfg.count == 0 {
        return Err("the size must be at least 8 bytes and the count at least 1".into());
    }
    let mut rx = Port::attach(cluster, cfg.to.node, cfg.to.port).map_err(|e| e.to_string())?;
    let mut tx = Port::attach(cluster, cfg.from.node, cfg.from.port).map_err(|e| e.to_string())?;
    let inbox = provide_all(&mut rx, cfg).map_err(|e| format!("receiver: {e}"))?;
    let sender = std::thread::spawn({
        let cfg = *cfg;
        move || send_all(&mut tx, &cfg).map(|window| (window, tx))
    });
    let got = receive_all(&mut rx, &inbox, cfg).map_err(|e| format!("receiver: {e}"));
    // The sender's port stays open until its last send completed.
    let sent = sender.join().map_err(|_| "the sender panicked".to_string())?;
    let (window, _tx) = sent.map_err(|e| format!("sender: {e}"))?;
    let (bytes, elapsed) = got?;
    Ok(Report { window, bytes, elapsed })
}

/// Provide the receive buffers and wait until the NIC has taken them
/// (a message that comes before its buffer is turned away and sent
/// again later).
fn provide_all(
    rx: &mut Port<host_driver::LiveBackend>,
    cfg: &Config,
) -> Result<Vec<host_driver::DmaBuf>, DriverError> {
    let n = cfg.recv_buffers.min(rx.recv_tokens_free()).max(1) as u64;
    let mut inbox = Vec::new();
    for tag in 0..n.min(cfg.count) {
        let b = rx.alloc(cfg.size as u64)?;
        // The buffer's class is the message's (the smallest that holds
        // it), as the sender's default is.
        let class = host_driver::nic_abi::size_class_for(cfg.size as u64);
        rx.provide(&b, RecvOpts { tag, size_class: Some(class), ..RecvOpts::default() })?;
        inbox.push(b);
    }
    let start = Instant::now();
    while rx.ring_pending() > 0 {
        if start.elapsed() > QUIET_LIMIT {
            return Err(DriverError::Timeout);
        }
        std::thread::yield_now();
    }
    Ok(inbox)
}

/// Send every message, keeping up to `cfg.window` in flight; returns
/// the window used once the last send completed.
fn send_all(tx: &mut Port<host_driver::LiveBackend>, cfg: &Config) -> Result<u32, String> {
    let window = cfg.window.min(tx.send_tokens_free()).max(1);
    let mut bufs = Vec::new();
    for _ in 0..window {
        bufs.push(tx.alloc(cfg.size as u64).map_err(|e| e.to_string())?);
    }
    let mut free: Vec<usize> = (0..bufs.len()).rev().collect();
    let mut msg = vec![0u8; cfg.size as usize];
    let (mut next, mut done) = (0u64, 0u64);
    let mut quiet_since = Instant::now();
    while done < cfg.count {
        // Every free buffer gets the next message and goes.
        while next < cfg.count {
            let Some(slot) = free.pop() else { break };
            fill(&mut msg, next);
            tx.write(&bufs[slot], 0, &msg).map_err(|e| e.to_string())?;
            let opts = SendOpts { tag: slot as u64, notify: true, ..SendOpts::default() };
            tx.send_to(&bufs[slot], cfg.to, opts).map_err(|e| format!("message {next}: {e}"))?;
            next += 1;
        }
        // All in flight (or all sent): the next completion frees a buffer.
        match tx.recv_timeout(SLICE) {
            Ok(Event::Sent { tag, status: SendStatus::Ok, .. }) => {
                free.push(tag as usize);
                done += 1;
                quiet_since = Instant::now();
            }
            Ok(Event::Sent { tag, status, .. }) => {
                return Err(format!("the send from buffer {tag} failed: {status:?}"))
            }
            Ok(other) => return Err(format!("unexpected event at the sender: {other:?}")),
            Err(DriverError::Timeout) if quiet_since.elapsed() < QUIET_LIMIT => {}
            Err(e) => return Err(format!("waiting for send completions ({done} done): {e}")),
        }
    }
    Ok(window)
}

/// Receive and check every message, providing each buffer again; returns
/// (bytes after the first message, first arrival to last).
fn receive_all(
    rx: &mut Port<host_driver::LiveBackend>,
    inbox: &[host_driver::DmaBuf],
    cfg: &Config,
) -> Result<(u64, Duration), String> {
    let mut provided = inbox.len() as u64;
    let (mut first, mut last) = (None, Instant::now());
    let mut quiet_since = Instant::now();
    let mut n = 0u64;
    while n < cfg.count {
        let e = match rx.recv_timeout(SLICE) {
            Ok(e) => e,
            Err(DriverError::Timeout) if quiet_since.elapsed() < QUIET_LIMIT => continue,
            Err(e) => return Err(format!("waiting for message {n}: {e}")),
        };
        let Event::Received { node, port, tag, .. } = e else {
            return Err(format!("unexpected event at the receiver: {e:?}"));
        };
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        quiet_since = now;
        if Dest::new(node, port) != cfg.from {
            return Err(format!("message {n} came from node {node} port {port}"));
        }
        let got = rx.read_message(&e).map_err(|e| e.to_string())?;
        if got.len() != cfg.size as usize || !is_message(&got, n) {
            let number = got.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            return Err(format!(
                "message {n}: {} bytes, number {number:?}, not the bytes sent",
                got.len()
            ));
        }
        n += 1;
        if provided < cfg.count {
            let buf = inbox.get(tag as usize).ok_or(format!("a buffer tagged {tag}"))?;
            let class = host_driver::nic_abi::size_class_for(cfg.size as u64);
            rx.provide(buf, RecvOpts { tag, size_class: Some(class), ..RecvOpts::default() })
                .map_err(|e| e.to_string())?;
            provided += 1;
        }
    }
    let elapsed = first.map_or(Duration::ZERO, |f| last - f);
    Ok(((cfg.count - 1) * cfg.size as u64, elapsed))
}

/// `stream [CLUSTER] [--size BYTES] [--count N] [--window W] [--recv-buffers R]`
#[allow(dead_code)] // used by `main` only
fn parse(args: &[String]) -> Result<(String, Config), String> {
    let mut cluster = "nic".to_string();
    let mut cfg = Config::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} takes a number"))?;
            v.parse().map_err(|_| format!("{name}: `{v}` is not a number"))
        };
        match a.as_str() {
            "--size" => cfg.size = u32::try_from(value(a)?).map_err(|_| "--size: too large")?,
            "--count" => cfg.count = value(a)?,
            "--window" => {
                cfg.window = u32::try_from(value(a)?).map_err(|_| "--window: too large")?
            }
            "--recv-buffers" => {
                cfg.recv_buffers =
                    u32::try_from(value(a)?).map_err(|_| "--recv-buffers: too large")?
            }
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => cluster = s.to_string(),
        }
    }
    Ok((cluster, cfg))
}

#[allow(dead_code)] // xtask's `bench --api` includes this file for `stream`
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cluster, cfg) = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("stream: {e}");
            }
            eprintln!(
                "usage: stream [CLUSTER] [--size BYTES] [--count N] [--window W] [--recv-buffers R]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    match stream(&cluster, &cfg) {
        Ok(r) => {
            println!(
                "{} x {} B, node {} port {} -> node {} port {}, window {}, every message checked: \
                 {:.1} MB/s ({} bytes after the first message in {:?})",
                cfg.count,
                cfg.size,
                cfg.from.node,
                cfg.from.port,
                cfg.to.node,
                cfg.to.port,
                r.window,
                r.mb_per_s(),
                r.bytes,
                r.elapsed
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stream: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
