//! A hostile host process, for the isolation tests (tests/isolation.rs).
//! Run as a user other than the cluster's (the test runs it as `nobody`,
//! a user the cluster allows), it holds one port through the public API
//! and then tries, each attempt on its own line:
//!
//! - to map another port's memory into its own page table, to write the
//!   victim's page table and window, to read the victim's window, page
//!   table and the NIC's packet buffers (through the node's control
//!   socket, the only way to SRAM outside its window);
//! - to post a receive buffer and a send in memory it never registered;
//! - to register its event queue in the victim's slice and at the end of
//!   the bus, and to register the victim's;
//! - to take the victim's port, a port that does not exist, and to send
//!   the control socket garbage;
//! - to open every file of the cluster and the device process's memory;
//! - then, with `--flood SECS`, random writes to everything it can write
//!   (its window, its slice, SRAM through the control socket) and random
//!   bytes to the control socket, until its standard input closes or
//!   SECS seconds pass (it prints `flooding` when it starts).
//!
//! Each attempt must be refused (the reason is printed) and nothing may
//! reach the victim; it exits non-zero if any got through.
//!
//! attacker CLUSTER NODE PORT VICTIM_PORT [--flood SECS]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use host_driver::control::{self, Reply, Request};
use host_driver::nic_abi::desc::{DescKind, Descriptor, DESC_SIZE};
use host_driver::nic_abi::page_table::pte;
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::nic_abi::regs::{port_evq_bus, port_evq_len, reg};
use host_driver::nic_abi::{map, size_class_for, Priority, NUM_PORTS, PAGE_SIZE};
use host_driver::{
    ClusterDir, DriverError, ErrorCause, Event, LiveBackend, Nic, NicBackend, Port, PortOptions,
};

/// Where the forged mappings start in the attacker's virtual space.
const FORGED: u64 = 0x0F00_0000_0000;

fn main() -> ExitCode {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 && a.len() != 7 {
        eprintln!("usage: attacker CLUSTER NODE PORT VICTIM_PORT [--flood SECS]");
        return ExitCode::from(2);
    }
    let (node, port, victim): (u32, u8, u8) =
        (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap());
    let flood = (a.len() == 7 && a[5] == "--flood").then(|| a[6].parse::<f64>().unwrap());
    match attack(&a[1], node, port, victim, flood) {
        Ok(()) => {
            println!("every attempt refused");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("attacker: {e}");
            ExitCode::FAILURE
        }
    }
}

type P = Port<LiveBackend>;

/// The next event that is not a PortOpened.
fn next_event(p: &mut P) -> Result<Event, DriverError> {
    loop {
        match p.wait(Duration::from_secs(10))? {
            Event::PortOpened { .. } => continue,
            e => return Ok(e),
        }
    }
}

/// Run `f`; it must add one refusal (or more) to the backend's count.
fn refused(be: &LiveBackend, what: &str, f: impl FnOnce()) -> Result<(), String> {
    let before = be.refused_accesses();
    f();
    let _ = be.flush();
    if be.refused_accesses() > before {
        println!("{what}: refused ({})", be.last_refusal().unwrap_or_default());
        Ok(())
    } else {
        Err(format!("{what}: not refused"))
    }
}

fn attack(
    cluster: &str,
    node: u32,
    port: u8,
    victim: u8,
    flood: Option<f64>,
) -> Result<(), String> {
    let dir = ClusterDir::open(cluster).map_err(|e| format!("open the cluster: {e}"))?;
    let node16 = u16::try_from(node).map_err(|_| format!("no node {node}"))?;
    let be = LiveBackend::attach_with(&dir, node16, port, &Default::default())
        .map_err(|e| format!("attach: {e} ({:?})", host_driver::last_attach_refusal()))?;
    let nic = Nic::open(be.clone()).map_err(|e| e.to_string())?;
    let mut p = nic.open_port(port, PortOptions::default()).map_err(|e| e.to_string())?;
    let (vbase, _) = dir.port_slice(victim);

    // 1. Page tables (in host memory, outside every slice) and SRAM
    // outside its window, through the control socket.
    let layout = dir.host_layout();
    refused(&be, "a page-table entry onto the victim's memory", || {
        be.pt_write(port, 7, &[pte(vbase / PAGE_SIZE)])
    })?;
    refused(&be, "a write into the victim's page table", || {
        be.host_write(layout.table(victim), &pte(vbase / PAGE_SIZE).to_le_bytes())
    })?;
    refused(&be, "a write into its own page table in host memory", || {
        be.host_write(layout.table(port), &pte(vbase / PAGE_SIZE).to_le_bytes())
    })?;
    refused(&be, "closing the victim's port", || {
        be.sram_store_u32(port_reg(victim as usize, pcb::STATE), pcb::STATE_CLOSED)
    })?;
    refused(&be, "a descriptor into the victim's send ring", || {
        be.sram_write(pcb::send_slot(victim as usize, 0), &[0xEE; DESC_SIZE as usize])
    })?;
    let mut b = vec![0u8; 4096];
    for (what, off) in [
        ("reading the victim's window", map::port_window(victim as usize)),
        ("reading the translation cache", map::TLB),
        ("reading the receive buffers", map::RX_BUFS),
        ("reading the transmit buffers", map::TX_BUFS),
        ("reading the host-DMA ring", map::HDMA_RING),
    ] {
        refused(&be, what, || be.sram_read(off, &mut b))?;
        if b.iter().any(|&x| x != 0) {
            return Err(format!("{what}: bytes came back"));
        }
    }
    refused(&be, "reading the victim's host memory", || be.host_read(vbase, &mut b))?;
    refused(&be, "reading the victim's page table", || be.host_read(layout.table(victim), &mut b))?;

    // 2. Descriptors naming memory it never registered.
    let len = (256 * PAGE_SIZE) as u32;
    let forged = |kind, tag, target_port| Descriptor {
        kind,
        priority: Priority::Low,
        size_class: size_class_for(len as u64),
        target_port,
        target_node: 0,
        local: FORGED,
        len,
        remote: 0,
        tag,
    };
    for (what, d) in [
        ("a receive buffer in unregistered memory", forged(DescKind::Provide, 1, 0)),
        ("a send out of unregistered memory", forged(DescKind::Send, 2, port)),
    ] {
        p.post_raw(d).map_err(|e| format!("{what}: post: {e}"))?;
        match next_event(&mut p).map_err(|e| format!("{what}: {e}"))? {
            Event::Error { cause: ErrorCause::NotRegistered, tag, .. } if tag == d.tag => {
                println!("{what}: refused (NotRegistered)")
            }
            e => return Err(format!("{what}: not refused: {e:?}")),
        }
    }

    // 3. Its event queue registered elsewhere: the privileged side refuses
    // (the NIC would refuse to serve the port too).
    for (what, bus) in [
        ("an event queue in the victim's slice", vbase + PAGE_SIZE),
        ("an event queue at the end of the bus", u64::MAX - 10),
    ] {
        refused(&be, what, || be.sram_store_u64(reg(port_evq_bus(port as usize)), bus))?;
    }
    refused(&be, "registering the victim's event queue", || {
        be.sram_store_u32(reg(port_evq_len(victim as usize)), 64)
    })?;

    // 4. The control socket itself.
    let sock = dir.control_socket_path(node);
    let ask = |req: &Request| -> Result<Reply, String> {
        let s = UnixStream::connect(&sock).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        control::call(&s, req).map(|(r, _)| r).map_err(|e| e.to_string())
    };
    for (what, req) in [
        ("taking the victim's port", Request::Attach { port: victim }),
        ("taking port 200", Request::Attach { port: 200 }),
        ("reading SRAM without a port", Request::Read { off: map::RX_BUFS, len: 64 }),
    ] {
        match ask(&req)? {
            Reply::Refused { why } => println!("{what}: refused ({why})"),
            Reply::Busy { port, by } => {
                println!("{what}: refused (port {port} is held by another process: {by})")
            }
            r => return Err(format!("{what}: answered {r:?}")),
        }
    }
    {
        let mut s = UnixStream::connect(&sock).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        s.write_all(&[5, 0, 0, 0, 0xFF, 0xFE, 0xFD, 0xFC, 0xFB]).map_err(|e| e.to_string())?;
        match control::recv::<Reply>(&s) {
            Ok((Reply::Refused { why }, _)) => {
                println!("garbage on the control socket: refused ({why})")
            }
            r => return Err(format!("garbage on the control socket: answered {r:?}")),
        }
    }

    // 5. The cluster's files and the device process's memory.
    let mut files = vec![dir.sram_path(node), dir.host_path(node), dir.regs_path(node)];
    files.push(dir.flash_path(node));
    for q in 0..NUM_PORTS as u8 {
        files.extend([
            dir.window_path(node, q),
            dir.slice_path(node, q),
            dir.port_lock_path(node, q),
        ]);
    }
    let pid = dir.manifest().pid;
    files.push(format!("/proc/{pid}/mem").into());
    files.push(format!("/proc/{pid}/fd/0").into());
    for f in &files {
        for write in [false, true] {
            let r = std::fs::OpenOptions::new().read(!write).write(write).open(f);
            if r.is_ok() {
                return Err(format!(
                    "raw access: opened {} ({})",
                    f.display(),
                    if write { "write" } else { "read" }
                ));
            }
        }
    }
    match std::fs::read_dir(dir.path()) {
        Err(_) => println!("listing the cluster directory: refused"),
        Ok(_) => return Err("raw access: listed the cluster directory".into()),
    }
    println!("opening the cluster's {} files and the device's memory: refused", files.len());

    if let Some(secs) = flood {
        flood_for(&be, &dir, node, port, secs)?;
    }
    Ok(())
}

/// A small xorshift generator: the flood needs no more.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Random writes to everything this process can write, for `secs`.
fn flood_for(
    be: &LiveBackend,
    dir: &ClusterDir,
    node: u32,
    port: u8,
    secs: f64,
) -> Result<(), String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64);
    let (start, len) = be.slice();
    let win = map::port_window(port as usize);
    let sram = dir.manifest().sram_size;
    // The test closes our standard input to end the flood.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        d.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    println!("flooding");
    let _ = std::io::stdout().flush();
    let t = Instant::now();
    let (mut window, mut host, mut remote, mut garbage) = (0u64, 0u64, 0u64, 0u64);
    let refused0 = be.refused_accesses();
    let mut bytes = [0u8; 64];
    while t.elapsed().as_secs_f64() < secs && !done.load(std::sync::atomic::Ordering::Relaxed) {
        for b in bytes.iter_mut() {
            *b = rng.next() as u8;
        }
        let n = 1 + rng.below(63) as usize;
        match rng.below(10) {
            // Its own window: control block, send ring, anything.
            0..=4 => {
                let off = win + rng.below(map::PORT_WINDOW as u64 - n as u64) as u32;
                be.sram_write(off, &bytes[..n]);
                be.doorbell();
                window += 1;
            }
            // Its own slice of host memory.
            5 | 6 => {
                be.host_write(start + rng.below(len - n as u64), &bytes[..n]);
                host += 1;
            }
            // Anywhere in SRAM, through the control socket.
            7 | 8 => {
                let off = rng.below(sram) as u32;
                if rng.below(2) == 0 {
                    be.sram_write(off, &bytes[..n]);
                } else {
                    let mut b = [0u8; 64];
                    be.sram_read(off, &mut b[..n]);
                }
                remote += 1;
            }
            // Random bytes on a fresh control connection.
            _ => {
                if let Ok(mut s) = UnixStream::connect(dir.control_socket_path(node)) {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    let _ = s.write_all(&bytes[..n]);
                    let _ = control::recv::<Reply>(&s);
                }
                garbage += 1;
            }
        }
    }
    let _ = be.flush();
    println!(
        "flood: {window} window writes, {host} host-memory writes, {remote} SRAM accesses \
         through the control socket ({} refused), {garbage} garbage connections in {:.1} s",
        be.refused_accesses() - refused0,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
