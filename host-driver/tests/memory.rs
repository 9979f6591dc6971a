//! DMA memory: allocation, registration in the port's page table,
//! deregistration, host-side reads and writes, on a node of a simulated
//! cluster running the MCP.

mod sim_rig;

use host_driver::nic_abi::map::PAGE_TABLE_ENTRIES;
use host_driver::nic_abi::page_table::{home_slot, PteState};
use host_driver::nic_abi::PAGE_SIZE;
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

fn setup() -> (SimBackend, Nic<SimBackend>, Rig) {
    let rig = Rig::new(Config::default());
    (rig.backend(), rig.nic(), rig)
}

#[test]
fn alloc_registers_every_page_with_the_ports_virtual_address() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(3, PortOptions::default()).unwrap();
    let buf = port.alloc(5 * PAGE_SIZE + 100).unwrap();
    assert_eq!(buf.bus % PAGE_SIZE, 0);
    assert_eq!(buf.len, 5 * PAGE_SIZE + 100);
    assert_eq!(buf.vaddr, VIRT_BASE + (3 << VIRT_PORT_SHIFT) + buf.bus);
    assert_ne!(buf.vaddr, buf.bus);
    for k in 0..6 {
        assert_eq!(
            lookup(&be, 3, buf.vaddr / PAGE_SIZE + k),
            Some(buf.bus / PAGE_SIZE + k),
            "page {k}"
        );
    }
    assert_eq!(lookup(&be, 3, buf.vaddr / PAGE_SIZE + 6), None);
    // Bus addresses and other ports' addresses do not translate.
    assert_eq!(lookup(&be, 3, buf.bus / PAGE_SIZE), None);
    assert_eq!(lookup(&be, 2, buf.vaddr / PAGE_SIZE), None);
    assert_eq!(pte_counts(&be, 3), (6, 0));
    assert!(port.is_registered(&buf));
}

#[test]
fn each_port_has_its_own_virtual_range() {
    let (be, nic, _rig) = setup();
    let mut a = nic.open_port(0, PortOptions::default()).unwrap();
    let mut b = nic.open_port(7, PortOptions::default()).unwrap();
    let x = a.alloc(PAGE_SIZE).unwrap();
    let y = b.alloc(PAGE_SIZE).unwrap();
    assert_eq!(x.vaddr - x.bus, VIRT_BASE);
    assert_eq!(y.vaddr - y.bus, VIRT_BASE + (7 << 40));
    assert_eq!(lookup(&be, 7, y.vaddr / PAGE_SIZE), Some(y.bus / PAGE_SIZE));
    // A's buffer is foreign to B.
    assert_eq!(b.write(&x, 0, b"hi"), Err(DriverError::NotRegistered));
    assert!(!b.is_registered(&x));
}

#[test]
fn deregistration_writes_tombstones() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(1, PortOptions::default()).unwrap();
    let a = port.alloc(2 * PAGE_SIZE).unwrap();
    let b = port.alloc(PAGE_SIZE).unwrap();
    let slots: Vec<u32> = (0..2)
        .map(|k| {
            let vpn = a.vaddr / PAGE_SIZE + k;
            (0..PAGE_TABLE_ENTRIES)
                .map(|i| (home_slot(vpn) + i) % PAGE_TABLE_ENTRIES)
                .find(|&i| pte(&be, 1, i).vpn == vpn && pte(&be, 1, i).state == PteState::Valid)
                .unwrap()
        })
        .collect();
    port.deregister(&a).unwrap();
    for (k, &i) in slots.iter().enumerate() {
        let e = pte(&be, 1, i);
        assert_eq!(e.state, PteState::Deleted);
        assert_eq!(e.vpn, a.vaddr / PAGE_SIZE + k as u64);
        assert_eq!(lookup(&be, 1, e.vpn), None);
    }
    assert_eq!(pte_counts(&be, 1), (1, 2));
    assert_eq!(lookup(&be, 1, b.vaddr / PAGE_SIZE), Some(b.bus / PAGE_SIZE));
    assert!(!port.is_registered(&a));
    // Host access to the memory stays possible.
    port.write(&a, 0, b"still mine").unwrap();
    // Deregistering again is refused and changes nothing.
    assert_eq!(port.deregister(&a), Err(DriverError::NotRegistered));
    assert_eq!(pte_counts(&be, 1), (1, 2));
    // Registering again reuses the tombstones.
    port.register(&a).unwrap();
    assert_eq!(pte_counts(&be, 1), (3, 0));
    assert_eq!(lookup(&be, 1, a.vaddr / PAGE_SIZE + 1), Some(a.bus / PAGE_SIZE + 1));
}

#[test]
fn entries_behind_a_tombstone_stay_reachable() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(2, PortOptions::default()).unwrap();
    // Enough pages that some probe paths collide.
    let bufs: Vec<DmaBuf> = (0..300).map(|_| port.alloc(PAGE_SIZE).unwrap()).collect();
    for b in bufs.iter().step_by(3) {
        port.deregister(b).unwrap();
    }
    for (i, b) in bufs.iter().enumerate() {
        let want = if i % 3 == 0 { None } else { Some(b.bus / PAGE_SIZE) };
        assert_eq!(lookup(&be, 2, b.vaddr / PAGE_SIZE), want);
    }
}

#[test]
fn a_full_page_table_refuses_and_leaves_no_new_entry() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let big = port.alloc((PAGE_TABLE_ENTRIES as u64 - 2) * PAGE_SIZE).unwrap();
    assert_eq!(pte_counts(&be, 0), (PAGE_TABLE_ENTRIES - 2, 0));
    // Where the next three pages would go.
    let next = be.alloc_dma(3 * PAGE_SIZE).unwrap();
    be.free_dma(next, 3 * PAGE_SIZE);
    assert_eq!(port.alloc(3 * PAGE_SIZE).err(), Some(DriverError::PageTableFull));
    // The two pages that fitted were taken back (tombstones).
    assert_eq!(pte_counts(&be, 0), (PAGE_TABLE_ENTRIES - 2, 2));
    assert!(first_fit_is(&be, next, 3 * PAGE_SIZE), "refused allocation is given back");
    // An unregistered buffer can't be registered either, and stays usable.
    let loose = port.alloc_unregistered(3 * PAGE_SIZE).unwrap();
    assert_eq!(port.register(&loose), Err(DriverError::PageTableFull));
    assert_eq!(pte_counts(&be, 0).0, PAGE_TABLE_ENTRIES - 2);
    port.register(&loose.sub(0, 2 * PAGE_SIZE).unwrap()).unwrap();
    assert_eq!(pte_counts(&be, 0), (PAGE_TABLE_ENTRIES, 0));
    port.free(big).unwrap();
    port.register(&loose).unwrap();
}

#[test]
fn an_idle_table_full_of_tombstones_is_rewritten_empty() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(400 * PAGE_SIZE).unwrap();
    port.deregister(&buf).unwrap();
    assert_eq!(pte_counts(&be, 0), (0, 0));
    let small = port.alloc(PAGE_SIZE).unwrap();
    port.deregister(&small).unwrap();
    assert_eq!(pte_counts(&be, 0), (0, 1), "few tombstones are kept");
}

#[test]
fn free_removes_the_entries_and_gives_the_memory_back() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(2 * PAGE_SIZE).unwrap();
    port.free(buf).unwrap();
    assert_eq!(lookup(&be, 0, buf.vaddr / PAGE_SIZE), None);
    assert!(first_fit_is(&be, buf.bus, buf.len), "the memory is free again");
    assert_eq!(port.free(buf), Err(DriverError::NotRegistered));
    assert_eq!(port.write(&buf, 0, b"x"), Err(DriverError::NotRegistered));
}

#[test]
fn read_and_write_check_the_buffer() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(100).unwrap();
    port.write(&buf, 90, b"0123456789").unwrap();
    let mut out = [0u8; 10];
    port.read(&buf, 90, &mut out).unwrap();
    assert_eq!(&out, b"0123456789");
    let mut raw = [0u8; 10];
    be.host_read(buf.bus + 90, &mut raw);
    assert_eq!(&raw, b"0123456789");
    assert_eq!(port.write(&buf, 91, b"0123456789"), Err(DriverError::BadSize));
    assert_eq!(port.read(&buf, u64::MAX, &mut out), Err(DriverError::BadSize));
    // A sub-buffer works; a forged one does not.
    let sub = buf.sub(10, 20).unwrap();
    port.write(&sub, 0, b"abc").unwrap();
    port.read(&buf, 10, &mut out[..3]).unwrap();
    assert_eq!(&out[..3], b"abc");
    assert_eq!(buf.sub(90, 11), None);
    let forged = DmaBuf { vaddr: 0x5000, bus: buf.bus, len: 10 };
    assert_eq!(port.write(&forged, 0, b"x"), Err(DriverError::NotRegistered));
    let past = DmaBuf { len: 2 * PAGE_SIZE, ..buf };
    assert_eq!(port.read(&past, 0, &mut out), Err(DriverError::NotRegistered));
}

#[test]
fn zero_length_and_exhausted_memory_are_refused() {
    let (_be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    assert_eq!(port.alloc(0).err(), Some(DriverError::BadSize));
    let huge = 1 << 30;
    assert_eq!(port.alloc(huge).err(), Some(DriverError::OutOfMemory { len: huge }));
}
