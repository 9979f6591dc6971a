//! A hostile host process, for the isolation tests (tests/isolation.rs):
//! it holds one port through the public API, then uses the raw cluster
//! files (the node's `sram`, which it can open) to aim its port at
//! another port's memory and event queue. Each attempt must be refused by
//! the NIC; it prints one line per attempt and exits non-zero if any got
//! through.
//!
//! attacker CLUSTER NODE PORT VICTIM_PORT

use std::process::ExitCode;
use std::time::Duration;

use host_driver::nic_abi::desc::{DescKind, Descriptor};
use host_driver::nic_abi::page_table::{self, Pte, PteState};
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::{map, size_class_for, Priority, PAGE_SIZE};
use host_driver::{
    ClusterDir, DriverError, ErrorCause, Event, LiveBackend, MappedFile, Nic, PortOptions,
};

/// Where the forged mappings start in the attacker's virtual space.
const FORGED: u64 = 0x0F00_0000_0000;
/// Pages it maps onto the victim's memory (1 MiB).
const PAGES: u64 = 256;

fn main() -> ExitCode {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        eprintln!("usage: attacker CLUSTER NODE PORT VICTIM_PORT");
        return ExitCode::from(2);
    }
    let (node, port, victim): (u32, u8, u8) =
        (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap());
    match attack(&a[1], node, port, victim) {
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

/// The next event that is not a PortOpened.
fn next_event(p: &mut host_driver::Port<LiveBackend>) -> Result<Event, DriverError> {
    loop {
        match p.wait(Duration::from_secs(10))? {
            Event::PortOpened { .. } => continue,
            e => return Ok(e),
        }
    }
}

fn attack(cluster: &str, node: u32, port: u8, victim: u8) -> Result<(), String> {
    let be = LiveBackend::attach(cluster, node, port).map_err(|e| e.to_string())?;
    let nic = Nic::open(be).map_err(|e| e.to_string())?;
    let mut p = nic.open_port(port, PortOptions::default()).map_err(|e| e.to_string())?;
    let dir = ClusterDir::open(cluster).map_err(|e| e.to_string())?;
    let sram = MappedFile::open(&dir.sram_path(node)).map_err(|e| e.to_string())?;
    let (vbase, vlen) = dir.port_slice(victim);

    // 1. Its own page table, written raw: 256 pages of the victim's slice.
    let pt = map::page_table(port as usize) as u64;
    let read = |i: u32| {
        let mut b = [0u8; page_table::PTE_SIZE as usize];
        sram.read(pt + (i * page_table::PTE_SIZE) as u64, &mut b);
        Pte::decode(&b)
    };
    for k in 0..PAGES.min(vlen / PAGE_SIZE) {
        let vpn = FORGED / PAGE_SIZE + k;
        let i = page_table::insert_slot(read, vpn).ok_or("own page table full")?;
        let mut b = [0u8; page_table::PTE_SIZE as usize];
        Pte { state: PteState::Valid, vpn, bus_page: vbase / PAGE_SIZE + k }.encode(&mut b);
        sram.write(pt + (i * page_table::PTE_SIZE) as u64, &b);
    }
    println!("mapped {PAGES} pages of port {victim}'s memory into port {port}'s page table");

    // 2. A 1 MiB receive buffer there, and a send out of it.
    let len = (PAGES * PAGE_SIZE) as u32;
    let class = size_class_for(len as u64);
    let forged = |kind, tag, target_port| Descriptor {
        kind,
        priority: Priority::Low,
        size_class: class,
        target_port,
        target_node: 0,
        local: FORGED,
        len,
        remote: 0,
        tag,
    };
    for (what, d) in [
        ("receive buffer in the victim's memory", forged(DescKind::Provide, 1, 0)),
        ("send out of the victim's memory", forged(DescKind::Send, 2, port)),
    ] {
        p.post_raw(d).map_err(|e| format!("{what}: post: {e}"))?;
        match next_event(&mut p).map_err(|e| format!("{what}: {e}"))? {
            Event::Error { cause: ErrorCause::NotRegistered, tag, .. } if tag == d.tag => {
                println!("{what}: refused (NotRegistered)")
            }
            e => return Err(format!("{what}: not refused: {e:?}")),
        }
    }

    // 3. Its event queue set to the victim's, and re-opened raw: the NIC
    // must refuse the port rather than write events there.
    let w = |off| port_reg(port as usize, off) as u64;
    let vq = sram.load_u64(port_reg(victim as usize, pcb::EVQ_BUS) as u64).unwrap_or(0);
    let vql = sram.load_u32(port_reg(victim as usize, pcb::EVQ_LEN) as u64).unwrap_or(0);
    for (what, bus, n) in [
        ("event queue on the victim's", vq, vql.max(1)),
        ("event queue at the end of the bus", u64::MAX - 10, 64),
    ] {
        sram.store_u64(w(pcb::EVQ_BUS), bus);
        sram.store_u32(w(pcb::EVQ_LEN), n);
        let gen = sram.load_u32(w(pcb::GENERATION)).unwrap_or(0).wrapping_add(1);
        sram.store_u32(w(pcb::GENERATION), gen);
        sram.store_u32(w(pcb::STATE), pcb::STATE_OPEN);
        sram.fetch_add_u32(reg(regs::HOST_DOORBELL) as u64, 1);
        let t = std::time::Instant::now();
        while sram.load_u32(w(pcb::FW_GENERATION)) != Some(gen) {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("{what}: the NIC never took generation {gen}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        match sram.load_u32(w(pcb::FW_STATE)) {
            Some(pcb::STATE_REFUSED) => {}
            s => return Err(format!("{what}: port not refused (FW_STATE {s:?})")),
        }
        match p.wait(Duration::from_secs(1)) {
            Err(DriverError::PortRefused(n)) if n == port => {
                println!("{what}: refused (port {port} not served)")
            }
            r => return Err(format!("{what}: the driver said {r:?}")),
        }
    }
    Ok(())
}
