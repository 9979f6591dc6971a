//! The stream example (host-driver/examples/stream.rs) against a live
//! cluster: its code called here, and the example program built with
//! cargo and run as a separate process. Every message arrives once,
//! intact and in order (the example checks each), and the NICs count
//! exactly the messages sent.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

#[path = "../../host-driver/examples/stream.rs"]
mod stream;

use std::process::Command;
use std::time::Duration;

use host_driver::nic_abi::stats::Stat;
use host_driver::Dest;

#[test]
fn the_stream_code_delivers_every_message_checked_with_its_window() {
    let c = rt::live("stream-fn", 2);
    let cfg = stream::Config { count: 2000, size: 4096, window: 8, ..stream::Config::default() };
    let r = stream::stream(&c.path().to_string_lossy(), &cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((r.window, r.bytes), (8, 1999 * 4096));
    assert!(r.elapsed > Duration::ZERO && r.mb_per_s() > 0.0, "{r:?}");
    let received = |n: usize| c.nic_stats(n).fw[Stat::MessagesReceived as usize];
    assert_eq!((received(0), received(1)), (0, 2000));
    // A window wider than the port's send tokens is cut to them.
    let wide = stream::Config { count: 100, window: 1000, ..cfg };
    let r = stream::stream(&c.path().to_string_lossy(), &wide).unwrap_or_else(|e| panic!("{e}"));
    let tokens =
        host_driver::Port::attach(&c.path().to_string_lossy(), 0, 1).unwrap().send_tokens();
    assert_eq!(r.window, tokens);
    assert_eq!(received(1), 2100);
}

#[test]
fn the_stream_code_refuses_what_it_cannot_check_and_names_a_missing_cluster() {
    let c = rt::live("stream-bad", 2);
    let path = c.path().to_string_lossy().into_owned();
    let tiny = stream::Config { size: 4, ..stream::Config::default() };
    assert_eq!(
        stream::stream(&path, &tiny).unwrap_err(),
        "the size must be at least 8 bytes and the count at least 1"
    );
    let none = stream::Config { count: 0, ..stream::Config::default() };
    assert!(stream::stream(&path, &none).is_err());
    let missing = rt::cluster_path("stream-none");
    let e = stream::stream(&missing, &stream::Config::default()).unwrap_err();
    assert!(e.contains(&missing) && e.contains("not found"), "{e}");
}

#[test]
fn every_message_has_its_own_bytes() {
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    stream::fill(&mut a, 7);
    stream::fill(&mut b, 8);
    assert_eq!(&a[..8], &7u64.to_le_bytes());
    assert_ne!(a[8..], b[8..]);
    // Each byte depends on its place too: a shifted copy does not match.
    assert_ne!(a[8..4000], a[9..4001]);
    assert!(stream::is_message(&a, 7) && stream::is_message(&b, 8));
    assert!(!stream::is_message(&a, 8) && !stream::is_message(&b, 7));
    // One flipped bit anywhere is caught; a length that is no multiple of
    // 8 is filled and checked to its last byte.
    for at in [0, 8, 2049, 4095] {
        let mut bad = a.clone();
        bad[at] ^= 0x10;
        assert!(!stream::is_message(&bad, 7), "byte {at}");
    }
    let mut odd = vec![0u8; 13];
    stream::fill(&mut odd, 7);
    assert_eq!(odd[..], a[..13]);
    assert!(stream::is_message(&odd, 7));
    odd[12] ^= 1;
    assert!(!stream::is_message(&odd, 7));
}

#[test]
fn the_stream_program_prints_its_bandwidth_and_usage() {
    let c = rt::live("stream-bin", 2);
    let bin = rt::example_bin("host-driver", "stream");
    let child = Command::new(&bin)
        .arg(c.path())
        .args(["--count", "500", "--size", "8192", "--window", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let out = rt::finish(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", rt::text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(
            "500 x 8192 B, node 0 port 1 -> node 1 port 1, window 4, every message checked: "
        ) && stdout.contains(" MB/s (4087808 bytes after the first message in "),
        "{stdout}"
    );
    assert_eq!(c.nic_stats(1).fw[Stat::MessagesReceived as usize], 500);
    // The ports are free again.
    let port = host_driver::Port::attach(&c.path().to_string_lossy(), 1, 1).unwrap();
    assert_eq!(port.address(), Dest::new(1, 1));
    drop(port);
    // A bad option: the usage, exit status 2.
    let out = Command::new(&bin).args(["--window", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", rt::text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "stream: --window: `x` is not a number\nusage: stream [CLUSTER] [--size BYTES] [--count N] \
         [--window W] [--recv-buffers R]\n"
    );
}
