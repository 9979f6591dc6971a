//! A hostile holder of ports, for the isolation tests (tests/isolation.rs),
//! run as a user the cluster allows. Two attacks, each reported line by
//! line on standard output:
//!
//! - `fork`: hold PORT of NODE, fill its slice of host memory with 0x11,
//!   fork, and let the parent exit. The child closes every descriptor but
//!   its standard streams (the control connection too: to the device
//!   process the holder is gone) and keeps the port's window and slice
//!   mapped. Until its standard input closes it looks through the slice
//!   for bytes that are not its own (neither 0, 0x11 nor 0xAA: a later
//!   holder's data), then scribbles 0xAA over all of it, and at the end
//!   prints `foreign bytes: N`.
//! - `squat`: take every port of NODE one after another and keep them
//!   (printing `port P: attached` or `port P: refused (why)`, then
//!   `holding`); at a line on standard input let them all go
//!   (`released`) and stay alive until standard input closes.
//! - `connect-flood`: connect to NODE's control socket PORT thousand
//!   times, reading each answer, and print `connections: N answered`.
//! - `write-flood`: hold PORT and send the control socket requests no
//!   driver sends: 20 `Write`s of 4096 empty writes (each reply must
//!   name 16 refusals and count the rest), one of 50,000 writes (refused
//!   whole) and a frame past the size limit (answered, then dropped);
//!   prints `write flood: answered` with what came back.
//! - `hold-conns`: at a line on standard input, open PORT connections to
//!   NODE's control socket and keep them (`holding N`) until standard
//!   input closes.
//!
//! holder CLUSTER NODE PORT fork|squat|connect-flood|write-flood|hold-conns

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use host_driver::nic_abi::NUM_PORTS;
use host_driver::{Event, LiveBackend, Nic, NicBackend, PortOptions};

fn main() -> ExitCode {
    let a: Vec<String> = std::env::args().collect();
    let usage = || {
        eprintln!(
            "usage: holder CLUSTER NODE PORT fork|squat|connect-flood|write-flood|hold-conns"
        );
        ExitCode::from(2)
    };
    if a.len() != 5 {
        return usage();
    }
    let (Ok(node), Ok(port)) = (a[2].parse::<u16>(), a[3].parse::<u8>()) else {
        return usage();
    };
    let r = match a[4].as_str() {
        "fork" => fork_and_keep(&a[1], node, port),
        "squat" => squat(&a[1], node),
        "connect-flood" => connect_flood(&a[1], node, port as u32 * 1000),
        "write-flood" => write_flood(&a[1], node, port),
        "hold-conns" => hold_conns(&a[1], node, port as usize),
        _ => return usage(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holder: {e}");
            ExitCode::FAILURE
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Until standard input closes (or `limit` passes), call `f` every 10 ms.
fn until_stdin_closes(limit: Duration, mut f: impl FnMut()) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
        let _ = tx.send(());
    });
    let t = Instant::now();
    while t.elapsed() < limit && rx.try_recv().is_err() {
        f();
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn fork_and_keep(cluster: &str, node: u16, port: u8) -> Result<(), String> {
    let be = LiveBackend::attach(cluster, node, port).map_err(|e| e.to_string())?;
    let nic = Nic::open(be.clone()).map_err(|e| e.to_string())?;
    let mut p = nic.open_port(port, PortOptions::default()).map_err(|e| e.to_string())?;
    // The NIC's answer to the open (PortOpened, into the event queue in
    // the slice) first: written after the fill, it read as foreign bytes.
    // Taken from the queue, not only seen served: the NIC marks the port
    // served before the event's DMA lands (a qemu NIC by a few
    // microseconds; 3 runs in 40 read it as 5 foreign bytes).
    p.wait_served(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let t = Instant::now();
    loop {
        match p.poll() {
            Some(Event::PortOpened { .. }) => break,
            Some(_) => {}
            None if t.elapsed() > Duration::from_secs(10) => {
                return Err("no PortOpened event within 10 s".into())
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    let (start, len) = be.slice();
    be.host_write(start, &vec![0x11; len as usize]);
    // The port stays open in the NIC; the child keeps what is mapped.
    std::mem::forget(p);
    std::mem::forget(nic);
    // SAFETY: fork in a process whose only other thread (if any) holds no
    // lock the child takes: the child uses its own mappings, writes to
    // its standard streams and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid > 0 {
        say(&format!("parent {} exits; child {pid} keeps the port's memory", std::process::id()));
        // SAFETY: ends this process at once, as a holder that exits does.
        unsafe { libc::_exit(0) };
    }
    // The child: let go of every descriptor but the standard streams (the
    // control connection among them), keep the mappings.
    for fd in 3..4096 {
        // SAFETY: closing descriptors this process owns; the mappings do
        // not depend on them.
        unsafe { libc::close(fd) };
    }
    let mut foreign = 0u64;
    // The first foreign bytes seen: (scan, offset in the slice, value).
    let mut seen: Vec<(u32, usize, u8)> = Vec::new();
    let mut scan = 0u32;
    let mut buf = vec![0u8; len as usize];
    until_stdin_closes(Duration::from_secs(120), || {
        be.host_read(start, &mut buf);
        for (at, &b) in buf.iter().enumerate() {
            if b != 0 && b != 0x11 && b != 0xAA {
                foreign += 1;
                if seen.len() < 16 {
                    seen.push((scan, at, b));
                }
            }
        }
        be.host_write(start, &vec![0xAA; len as usize]);
        scan += 1;
    });
    if !seen.is_empty() {
        let list: Vec<String> =
            seen.iter().map(|(s, at, b)| format!("scan {s} offset {at:#x}: {b:#04x}")).collect();
        say(&format!("first seen: {}", list.join(", ")));
    }
    say(&format!("foreign bytes: {foreign}"));
    // SAFETY: ends the child without running the parent's destructors.
    unsafe { libc::_exit(0) };
}

fn squat(cluster: &str, node: u16) -> Result<(), String> {
    let mut held = Vec::new();
    for p in 0..NUM_PORTS as u8 {
        match LiveBackend::attach(cluster, node, p) {
            Ok(be) => {
                say(&format!("port {p}: attached"));
                held.push(be);
            }
            Err(e) => say(&format!("port {p}: refused ({e})")),
        }
    }
    say("holding");
    // One line on standard input: let go of them all, and stay.
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    drop(held);
    say("released");
    until_stdin_closes(Duration::from_secs(120), || {});
    Ok(())
}

fn connect_flood(cluster: &str, node: u16, n: u32) -> Result<(), String> {
    use host_driver::control::{self, Request};
    let dir = host_driver::ClusterDir::open(cluster).map_err(|e| e.to_string())?;
    let sock = dir.control_socket_path(node as u32);
    let mut answered = 0;
    for _ in 0..n {
        let Ok(s) = std::os::unix::net::UnixStream::connect(&sock) else { continue };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if control::call(&s, &Request::Attach { port: 0 }).is_ok() {
            answered += 1;
        }
    }
    say(&format!("connections: {answered} answered"));
    Ok(())
}

fn write_flood(cluster: &str, node: u16, port: u8) -> Result<(), String> {
    use host_driver::control::{self, Reply, Request, SramWrite};
    use std::os::unix::net::UnixStream;
    let dir = host_driver::ClusterDir::open(cluster).map_err(|e| e.to_string())?;
    let sock = dir.control_socket_path(node as u32);
    let connect = || -> Result<UnixStream, String> {
        let s = UnixStream::connect(&sock).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        Ok(s)
    };
    let s = connect()?;
    match control::call(&s, &Request::Attach { port }).map_err(|e| e.to_string())?.0 {
        Reply::Attached { .. } => {}
        r => return Err(format!("attach: {r:?}")),
    }
    let empty = |n: usize| Request::Write {
        writes: (0..n).map(|i| SramWrite { off: i as u32, data: Vec::new() }).collect(),
    };
    for round in 0..20 {
        match control::call(&s, &empty(control::MAX_WRITES)).map_err(|e| e.to_string())?.0 {
            Reply::Written { refused, more }
                if refused.len() == 16 && refused.len() + more as usize == control::MAX_WRITES => {}
            r => {
                let r = format!("{r:?}");
                return Err(format!("round {round}: {}", &r[..r.len().min(300)]));
            }
        }
    }
    let too_many = match control::call(&s, &empty(50_000)).map_err(|e| e.to_string())?.0 {
        Reply::Refused { why } => why,
        r => return Err(format!("50,000 writes: {:?}", r)),
    };
    // A frame past the limit: a length prefix of 2 MiB.
    let mut s2 = connect()?;
    s2.write_all(&(2u32 << 20).to_le_bytes()).map_err(|e| e.to_string())?;
    let past = match control::recv::<Reply>(&s2) {
        Ok((Reply::Refused { why }, _)) => why,
        r => return Err(format!("an oversized frame: {r:?}")),
    };
    say(&format!("write flood: answered ({too_many}; {past})"));
    Ok(())
}

fn hold_conns(cluster: &str, node: u16, n: usize) -> Result<(), String> {
    let dir = host_driver::ClusterDir::open(cluster).map_err(|e| e.to_string())?;
    let sock = dir.control_socket_path(node as u32);
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let mut held = Vec::new();
    for _ in 0..n {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(s) => held.push(s),
            Err(e) => return Err(format!("connection {}: {e}", held.len())),
        }
    }
    say(&format!("holding {}", held.len()));
    until_stdin_closes(Duration::from_secs(120), || {});
    Ok(())
}
