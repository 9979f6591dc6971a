//! `cargo xtask bench --api`: the host driver's everyday calls against
//! the stream program, on one live cluster of 2 nodes, 4 KiB messages.
//! Six transfers, each run `runs` times, interleaved:
//!
//! - the stream program (`host-programs`' `stream` binary, built in
//!   release), a receiving and a sending process: raw sends with a window
//!   of 8, `wait`, 16 receive buffers, every byte checked. The ratios are
//!   to its median;
//! - the same loop (`host_programs::bench::stream`) run by two threads of
//!   this process, as the rest are;
//! - `host-driver/examples/stream.rs` (`send_to` with `notify`, a window
//!   of 8, `recv_timeout`, `read_message`, 16 receive buffers);
//! - the transfer as the rustdoc shows it (`Port::send_to`,
//!   `Port::provide`): a sender port opened with 8 send tokens, `send_to`
//!   with the default options (no completion asked for) and at
//!   `NoSendToken` a `recv_timeout(100 ms)` on the sending port; the
//!   receiver provides 16 buffers and loops on `recv_timeout(100 ms)`,
//!   `read_message` and `provide`;
//! - the same from one thread that polls both ports: it sends until
//!   `NoSendToken`, then waits on the receiving port for a message and,
//!   while it has no token, on the sending port for a completion;
//! - the same as the third with every token: 32 sends in flight, a
//!   buffer per receive token (32), so a receiver that falls behind
//!   turns messages away.
//!
//! Each but the first runs as two threads of this process (sender,
//! receiver; the fifth as one), all on ports of their own; the cluster's device threads run here too. The figure
//! is the stream program's: bytes of every message after the first over
//! the time from the first arrival to the last. A wait that ended empty
//! (a whole 100 ms slice with nothing) is counted: one is a stall.

#[path = "../../host-driver/examples/stream.rs"]
#[allow(dead_code)]
mod example;

use std::path::Path;
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use host_driver::nic_abi::stats::Stat;
use host_driver::{
    AttachOptions, Dest, DmaBuf, DriverError, Event, IdlePolicy, LiveBackend, Port, PortOptions,
    RecvOpts, SendOpts, SendStatus,
};
use host_programs::bench::{self as progs, StreamConfig, StreamRole};

/// Bytes per message: the size the driver's API was found slow at.
pub const SIZE: u32 = 4096;

/// Messages per run.
pub const COUNT: u64 = 50_000;

/// The rustdoc's wait: one `recv_timeout` slice.
const SLICE: Duration = Duration::from_millis(100);

/// Empty slices a side may wait in one run before it gives up (a minute:
/// enough for a driver that stalls a slice at every token).
const QUIET_SLICES: u64 = 600;

/// Ratio the rustdoc-style transfer should reach against the stream
/// program.
const TARGET: f64 = 0.8;

/// The transfers measured (see the module notes).
const ROWS: usize = 6;

/// One run's figures: MB/s, and the waits that ended empty (sender,
/// receiver).
#[derive(Debug, Clone, Copy)]
struct Figure {
    mb_per_s: f64,
    empty_waits: (u64, u64),
    /// Packets refused for want of a receive buffer.
    refused: u64,
}

pub fn run(root: &Path, runs: usize, quiet: bool) -> crate::Result<()> {
    crate::fw::cargo_build(
        root,
        &["-p", "host-programs", "--bin", "stream"],
        "the stream program",
    )?;
    let bins = crate::fw::release_dir(root);
    let cfg = nic_emu::realtime::RtConfig::new(
        &format!("bench-api-{}", std::process::id()),
        ClusterBackend::Live,
        2,
    );
    let c = crate::rt::start(cfg)?;
    let cluster = c.path().to_string_lossy().into_owned();
    let pb = crate::progress::bar(runs as u64, "bench (the driver's API against stream)", quiet);
    let mut rows: [Vec<Figure>; ROWS] = Default::default();
    // Packets the receiving NIC turned away for want of a buffer (its
    // sender waits, backing off, before it sends them again).
    let refused = || c.nic_stats(1).fw[Stat::NoBuffer as usize];
    for _ in 0..runs {
        for (k, row) in rows.iter_mut().enumerate() {
            let before = refused();
            let mut f = match k {
                0 => Figure {
                    mb_per_s: crate::rt::stream(&bins, c.path(), 2, 5, SIZE, COUNT, &[])?,
                    empty_waits: (0, 0),
                    refused: 0,
                },
                1 => stream_loop(&cluster)?,
                2 => example_stream(&cluster)?,
                3 => rustdoc_style(&cluster, COUNT, Some(8), 16)?,
                4 => one_thread(&cluster, COUNT)?,
                _ => rustdoc_style(&cluster, COUNT, None, u32::MAX)?,
            };
            f.refused = refused() - before;
            row.push(f);
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    c.stop().map_err(|e| e.to_string())?;
    println!("{}", table(&rows, runs));
    Ok(())
}

/// The table: each transfer's median MB/s, its ratio to the stream
/// program's median, and its empty waits over every run.
fn table(rows: &[Vec<Figure>; ROWS], runs: usize) -> String {
    let median =
        |v: &[Figure]| crate::bench::median(&v.iter().map(|f| f.mb_per_s).collect::<Vec<_>>());
    let base = median(&rows[0]);
    let names = [
        "stream program (window 8)",
        "its loop, in this process",
        "examples/stream.rs (window 8, recv_timeout)",
        "rustdoc style (8 tokens, recv_timeout 100 ms)",
        "rustdoc style, one thread polling both ports",
        "rustdoc style, every token (32 in flight)",
    ];
    let mut out = format!(
        "\n== the host driver's API against the stream program, live cluster of 2 nodes, {} cores: \
         {COUNT} x {} KiB, medians of {runs} runs (interleaved)\n{:<48} {:>10} {:>10} {:>16} {:>9}\n",
        crate::bench::num_cpus(),
        SIZE / 1024,
        "",
        "MB/s",
        "vs stream",
        "empty waits",
        "no buffer"
    );
    for (name, row) in names.iter().zip(rows) {
        let m = median(row);
        let (tx, rx): (u64, u64) =
            row.iter().fold((0, 0), |(a, b), f| (a + f.empty_waits.0, b + f.empty_waits.1));
        let raw = name.starts_with("stream") || name.starts_with("its loop");
        let waits = if row.iter().all(|f| f.empty_waits == (0, 0)) && raw {
            "-".to_string()
        } else {
            format!("{tx} tx, {rx} rx")
        };
        let refused: u64 = row.iter().map(|f| f.refused).sum();
        out.push_str(&format!(
            "{name:<48} {m:>10.1} {:>10.3} {waits:>16} {refused:>9}\n",
            m / base
        ));
    }
    out.push_str(&format!(
        "(MB/s: 10^6 B/s, bytes of every message after the first over the first arrival to the \
         last; every message checked: the stream program's and the example's sender write each \
         message's own bytes, the rustdoc style sends one unchanged buffer. Empty waits: recv_timeout slices \
         of 100 ms that ended with nothing, over all runs (each a stall). No buffer: packets the \
         receiving NIC turned away for want of a receive buffer, over all runs (each holds its \
         sender back 100 us or more). Target: the rustdoc style at least {TARGET:.2} of the stream \
         program's.)"
    ));
    out
}

/// The stream program's loop: receiver and sender on port 2 of nodes 1
/// and 0, as the `stream` binary runs them (default window and buffers),
/// in two threads of this process.
fn stream_loop(cluster: &str) -> crate::Result<Figure> {
    let open = |node: u32| {
        progs::open_live_port(cluster, node, 2, Duration::from_secs(10), IdlePolicy::default())
    };
    let (rnic, mut rport) = open(1)?;
    let (snic, mut sport) = open(0)?;
    let recv = std::thread::spawn(move || {
        let cfg = StreamConfig::new(StreamRole::Recv, 0, 2, SIZE, COUNT);
        progs::stream(&rnic, &mut rport, &cfg).map_err(|e| format!("stream receiver: {e}"))
    });
    let cfg = StreamConfig::new(StreamRole::Send, 1, 2, SIZE, COUNT);
    progs::stream(&snic, &mut sport, &cfg).map_err(|e| format!("stream sender: {e}"))?;
    let r = recv.join().map_err(|_| "the stream receiver panicked".to_string())??;
    let mb_per_s = r.mb_per_s.ok_or("the stream receiver timed nothing")?;
    Ok(Figure { mb_per_s, empty_waits: (0, 0), refused: 0 })
}

/// `host-driver/examples/stream.rs` between port 1 of nodes 0 and 1.
fn example_stream(cluster: &str) -> crate::Result<Figure> {
    let cfg = example::Config { count: COUNT, size: SIZE, ..example::Config::default() };
    let r = example::stream(cluster, &cfg).map_err(|e| format!("examples/stream.rs: {e}"))?;
    Ok(Figure { mb_per_s: r.mb_per_s(), empty_waits: (0, 0), refused: 0 })
}

/// The rustdoc-style ends on port `port` of nodes 0 (sender, with
/// `send_tokens`; None: all it may have) and 1 (receiver, `recv_buffers`
/// provided, at most its tokens, taken by the NIC before any send).
struct Rustdoc {
    tx: Port<LiveBackend>,
    rx: Port<LiveBackend>,
    to: Dest,
    inbox: Vec<DmaBuf>,
    /// What every message holds (one buffer, sent again and again).
    payload: Vec<u8>,
    provided: u64,
}

/// A rustdoc-style run's failure.
fn oops(what: &str, e: DriverError) -> String {
    format!("rustdoc style, {what}: {e}")
}

impl Rustdoc {
    fn open(
        cluster: &str,
        port: u8,
        send_tokens: Option<u32>,
        recv_buffers: u32,
    ) -> crate::Result<Rustdoc> {
        let mut rx = Port::attach(cluster, 1, port).map_err(|e| oops("receiver", e))?;
        let opts = PortOptions { send_tokens, ..PortOptions::default() };
        let tx = Port::attach_with(cluster, 0, port, &AttachOptions::default(), opts)
            .map_err(|e| oops("sender", e))?;
        let mut inbox = Vec::new();
        for tag in 0..u64::from(recv_buffers.min(rx.recv_tokens_free())) {
            let b = rx.alloc(SIZE as u64).map_err(|e| oops("receiver", e))?;
            rx.provide(&b, RecvOpts { tag, ..RecvOpts::default() })
                .map_err(|e| oops("provide", e))?;
            inbox.push(b);
        }
        let start = Instant::now();
        while rx.ring_pending() > 0 {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("rustdoc style: the NIC took no receive buffer in 10 s".into());
            }
            std::thread::yield_now();
        }
        let payload = (0..SIZE).map(|i| (i % 251) as u8).collect();
        let provided = inbox.len() as u64;
        Ok(Rustdoc { tx, rx, to: Dest { node: 1, port }, inbox, payload, provided })
    }
}

/// At `NoSendToken`: wait for the completion that frees a token. False
/// if the slice ended empty.
fn wait_token(tx: &mut Port<LiveBackend>, at: u64) -> crate::Result<bool> {
    match tx.recv_timeout(SLICE) {
        Ok(Event::Sent { status: SendStatus::Ok, .. }) => Ok(true),
        Ok(e) => Err(format!("rustdoc style: the sender got {e:?} at message {at}")),
        Err(DriverError::Timeout) => Ok(false),
        Err(e) => Err(oops(&format!("sender at message {at}"), e)),
    }
}

/// The receiver's wait: a message, checked and its buffer provided again
/// while more are due (Some(arrival)), or None if the slice ended empty.
fn take(
    rx: &mut Port<LiveBackend>,
    inbox: &[DmaBuf],
    payload: &[u8],
    provided: &mut u64,
    count: u64,
) -> crate::Result<Option<Instant>> {
    let e = match rx.recv_timeout(SLICE) {
        Ok(e) => e,
        Err(DriverError::Timeout) => return Ok(None),
        Err(e) => return Err(oops("receiver", e)),
    };
    let now = Instant::now();
    let Event::Received { tag, .. } = e else {
        return Err(format!("rustdoc style: the receiver got {e:?}"));
    };
    let bytes = rx.read_message(&e).map_err(|e| oops("read_message", e))?;
    if bytes != payload {
        return Err(format!(
            "rustdoc style: a message of {} bytes is not the one sent",
            bytes.len()
        ));
    }
    if *provided < count {
        let b = inbox.get(tag as usize).ok_or(format!("rustdoc style: a buffer tagged {tag}"))?;
        rx.provide(b, RecvOpts { tag, ..RecvOpts::default() }).map_err(|e| oops("provide", e))?;
        *provided += 1;
    }
    Ok(Some(now))
}

/// MB/s of `count` messages whose first and last arrived at `first` and
/// `last` (the bytes of every message after the first).
fn rate(count: u64, first: Option<Instant>, last: Instant) -> f64 {
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    let bytes = count.saturating_sub(1) * SIZE as u64;
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// The transfer written from the rustdoc, on port 3: a sender thread
/// sends one buffer `count` times with `SendOpts::default()` and at
/// `NoSendToken` waits with `recv_timeout(100 ms)`; the receiver (this
/// thread) loops on `recv_timeout(100 ms)`, checks each message's bytes
/// and provides its buffer again.
fn rustdoc_style(
    cluster: &str,
    count: u64,
    send_tokens: Option<u32>,
    recv_buffers: u32,
) -> crate::Result<Figure> {
    let Rustdoc { mut tx, mut rx, to, inbox, payload, mut provided } =
        Rustdoc::open(cluster, 3, send_tokens, recv_buffers)?;
    let sender = std::thread::spawn({
        let payload = payload.clone();
        move || -> crate::Result<(u64, Port<LiveBackend>)> {
            let msg = tx.alloc_from(&payload).map_err(|e| oops("sender", e))?;
            let mut empty = 0;
            for i in 0..count {
                loop {
                    match tx.send_to(&msg, to, SendOpts::default()) {
                        Ok(()) => break,
                        Err(DriverError::NoSendToken) => {
                            if !wait_token(&mut tx, i)? {
                                empty += 1;
                                if empty > QUIET_SLICES {
                                    return Err(format!(
                                        "rustdoc style: no send completed in {QUIET_SLICES} slices"
                                    ));
                                }
                            }
                        }
                        Err(e) => return Err(oops(&format!("send {i}"), e)),
                    }
                }
            }
            // The port stays open (in the caller's hands) until the
            // receiver has every message.
            Ok((empty, tx))
        }
    });
    let (mut empty, mut got) = (0u64, 0);
    let (mut first, mut last) = (None, Instant::now());
    let received = loop {
        if got == count {
            break Ok(());
        }
        match take(&mut rx, &inbox, &payload, &mut provided, count) {
            Ok(Some(t)) => {
                first.get_or_insert(t);
                last = t;
                got += 1;
            }
            Ok(None) if empty < QUIET_SLICES => empty += 1,
            Ok(None) => {
                break Err(format!("rustdoc style: nothing came for {QUIET_SLICES} slices"))
            }
            Err(e) => break Err(e),
        }
    };
    let sent = sender.join().map_err(|_| "rustdoc style: the sender panicked".to_string())?;
    received?;
    let (tx_empty, _tx) = sent?;
    Ok(Figure { mb_per_s: rate(count, first, last), empty_waits: (tx_empty, empty), refused: 0 })
}

/// The same transfer from one thread that polls both ports, on port 4:
/// it sends until `NoSendToken`, then waits for a message on the
/// receiving port and, while the sender has no token, for a completion on
/// the sending port, each with `recv_timeout(100 ms)`.
fn one_thread(cluster: &str, count: u64) -> crate::Result<Figure> {
    let Rustdoc { mut tx, mut rx, to, inbox, payload, mut provided } =
        Rustdoc::open(cluster, 4, Some(8), 16)?;
    let msg = tx.alloc_from(&payload).map_err(|e| oops("sender", e))?;
    let (mut sent, mut got) = (0, 0);
    let (mut empty_tx, mut empty_rx) = (0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    while got < count {
        while sent < count {
            match tx.send_to(&msg, to, SendOpts::default()) {
                Ok(()) => sent += 1,
                Err(DriverError::NoSendToken) => break,
                Err(e) => return Err(oops(&format!("send {sent}"), e)),
            }
        }
        match take(&mut rx, &inbox, &payload, &mut provided, count)? {
            Some(t) => {
                first.get_or_insert(t);
                last = t;
                got += 1;
            }
            None => empty_rx += 1,
        }
        if sent < count && tx.send_tokens_free() == 0 && !wait_token(&mut tx, sent)? {
            empty_tx += 1;
        }
        if empty_tx + empty_rx > QUIET_SLICES {
            return Err(format!("rustdoc style, one thread: {QUIET_SLICES} slices ended empty"));
        }
    }
    Ok(Figure { mb_per_s: rate(count, first, last), empty_waits: (empty_tx, empty_rx), refused: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_each_median_its_ratio_to_the_stream_programs_and_the_stalls() {
        let f = |mb_per_s, tx, rx, refused| Figure { mb_per_s, empty_waits: (tx, rx), refused };
        let rows = [
            vec![f(1000.0, 0, 0, 1), f(1200.0, 0, 0, 0), f(800.0, 0, 0, 2)],
            vec![f(1100.0, 0, 0, 0), f(1150.0, 0, 0, 0), f(1050.0, 0, 0, 0)],
            vec![f(900.0, 0, 0, 0), f(950.0, 0, 0, 0), f(1000.0, 0, 0, 0)],
            vec![f(6.8, 31, 11, 5), f(850.0, 0, 0, 0), f(880.0, 0, 0, 0)],
            vec![f(820.0, 0, 1, 0), f(810.0, 0, 0, 0), f(900.0, 0, 0, 0)],
            vec![f(700.0, 0, 0, 900), f(600.0, 0, 0, 700), f(2000.0, 0, 0, 10)],
        ];
        let t = table(&rows, 3);
        let lines: Vec<&str> = t.lines().skip(2).take(7).collect();
        let words: Vec<String> =
            lines.iter().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        assert_eq!(
            words,
            [
                "MB/s vs stream empty waits no buffer",
                "stream program (window 8) 1000.0 1.000 - 3",
                "its loop, in this process 1100.0 1.100 - 0",
                "examples/stream.rs (window 8, recv_timeout) 950.0 0.950 0 tx, 0 rx 0",
                "rustdoc style (8 tokens, recv_timeout 100 ms) 850.0 0.850 31 tx, 11 rx 5",
                "rustdoc style, one thread polling both ports 820.0 0.820 0 tx, 1 rx 0",
                "rustdoc style, every token (32 in flight) 700.0 0.700 0 tx, 0 rx 1610",
            ],
            "{t}"
        );
        // Columns line up: every line is as long as the header.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");
        assert!(t.contains("50000 x 4 KiB, medians of 3 runs (interleaved)"), "{t}");
    }
}
