//! Baselines the live backend is measured against: a UDP
//! ping-pong over loopback between two processes (this example starts a
//! copy of itself as the echo side), and a single-thread memcpy of the
//! bytes a stream moves.
//!
//! ```text
//! cargo run --release -p nic-emu --example rt_baselines -- [--size 8] [--count 10000] [--stream-size 65536] [--stream-count 5000]
//! ```
//!
//! Prints one-way UDP latency (half the round trip: min / median / p99)
//! and memcpy bandwidth in MB/s (10^6 B/s), as JSON with `--json`.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

/// Baselines the live backend is measured against: a UDP ping-pong over
/// loopback between two processes (this one and a copy of itself as the
/// echo side), and a single-thread memcpy of the bytes a stream moves.
/// Prints one-way UDP latency (half the round trip: min / median / p99)
/// and memcpy bandwidth in MB/s (10^6 B/s).
#[derive(Parser)]
#[command(name = "rt_baselines")]
struct Args {
    /// Bytes per UDP datagram.
    #[arg(long, default_value_t = 8)]
    size: u64,
    /// Round trips measured (after 100 of warm-up).
    #[arg(long, default_value_t = 10000)]
    count: u64,
    /// Bytes per message of the memcpy stream.
    #[arg(long, default_value_t = 65536)]
    stream_size: u64,
    /// Messages of the memcpy stream (at most 1 GiB in all).
    #[arg(long, default_value_t = 5000)]
    stream_count: u64,
    /// One JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Be the echo side on this UDP port (how the example starts its copy).
    #[arg(long, value_name = "PORT", hide = true)]
    echo: Option<u16>,
}

fn echo(port: u16, size: usize) {
    let s = UdpSocket::bind(("127.0.0.1", port)).expect("bind echo");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; size.max(1)];
    println!("ready");
    while let Ok((n, from)) = s.recv_from(&mut buf) {
        if n == 1 && buf[0] == 0xFF && size != 1 {
            break;
        }
        s.send_to(&buf[..n], from).unwrap();
    }
}

/// The median of `n` runs of `f`.
fn median_of(n: usize, mut f: impl FnMut() -> f64) -> f64 {
    let mut v: Vec<f64> = (0..n).map(|_| f()).collect();
    v.sort_by(f64::total_cmp);
    v[n / 2]
}

fn pct(v: &[u64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

fn main() {
    let args = Args::parse();
    let size = args.size as usize;
    let count = args.count;
    let ssize = args.stream_size.max(1) as usize;
    let scount = args.stream_count.clamp(1, (1u64 << 30) / ssize as u64);
    let json = args.json;
    if let Some(p) = args.echo {
        echo(p, size);
        return;
    }
    // UDP ping-pong between this process and a child.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--echo", &port.to_string(), "--size", &size.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut l = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut l).unwrap();
    }
    sock.connect(("127.0.0.1", port)).unwrap();
    let msg = vec![0x5Au8; size];
    let mut buf = vec![0u8; size.max(1)];
    let mut samples = Vec::with_capacity(count as usize);
    for i in 0..count + 100 {
        let t = Instant::now();
        sock.send(&msg).unwrap();
        let n = sock.recv(&mut buf).unwrap();
        assert_eq!(n, size);
        if i >= 100 {
            samples.push(t.elapsed().as_nanos() as u64 / 2);
        }
    }
    sock.send(&[0xFF]).unwrap();
    let _ = child.wait();
    samples.sort_unstable();

    // memcpy of the bytes a stream moves: `scount` messages of `ssize`
    // bytes, each from and to a place of its own, as the stream's
    // messages are all different (these come from memory); and, for
    // reference, one buffer copied again and again (cache-hot). Medians
    // of five runs.
    let src = vec![0xA5u8; ssize];
    let mut dst = vec![0u8; ssize];
    let reps = (256u64 << 20) / ssize as u64;
    let mbps = median_of(5, || {
        let t = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        (reps * ssize as u64) as f64 / t.elapsed().as_secs_f64() / 1e6
    });
    let big = ssize * scount as usize;
    let bsrc = vec![0x5Au8; big];
    let mut bdst = vec![0u8; big];
    bdst.copy_from_slice(&bsrc);
    let same = median_of(5, || {
        let t = Instant::now();
        for k in 0..scount as usize {
            let r = k * ssize..(k + 1) * ssize;
            bdst[r.clone()].copy_from_slice(std::hint::black_box(&bsrc[r]));
        }
        std::hint::black_box(&mut bdst);
        big as f64 / t.elapsed().as_secs_f64() / 1e6
    });
    if json {
        println!(
            "{{\"udp_one_way_us\":{{\"min\":{:.2},\"median\":{:.2},\"p99\":{:.2}}},\"size\":{size},\"count\":{count},\"memcpy_mb_s\":{mbps:.0},\"memcpy_stream_mb_s\":{same:.0},\"memcpy_size\":{ssize},\"memcpy_count\":{scount}}}",
            pct(&samples, 0.0),
            pct(&samples, 0.5),
            pct(&samples, 0.99)
        );
    } else {
        println!(
            "UDP loopback ping-pong, {size} B x {count}: one-way min {:.2} us, median {:.2} us, p99 {:.2} us",
            pct(&samples, 0.0),
            pct(&samples, 0.5),
            pct(&samples, 0.99)
        );
        println!(
            "memcpy, {scount} x {ssize} B messages, single thread: {same:.0} MB/s (each message \
             from and to its own place), {mbps:.0} MB/s cache-hot (one buffer again and again)"
        );
    }
}
