//! DMA memory: allocation, registration in the port's page table,
//! deregistration, host-side reads and writes, on a node of a simulated
//! cluster running the MCP.

mod sim_rig;

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
    assert_eq!(pte_count(&be, 3), 6);
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
fn deregistration_clears_the_entries_and_tells_the_nic() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(1, PortOptions::default()).unwrap();
    let a = port.alloc(2 * PAGE_SIZE).unwrap();
    let b = port.alloc(PAGE_SIZE).unwrap();
    let gen = |be: &SimBackend| {
        be.sram_load_u32(host_driver::nic_abi::port::port_reg(
            1,
            host_driver::nic_abi::port::PT_GEN,
        ))
    };
    let before = gen(&be);
    port.deregister(&a).unwrap();
    assert!(gen(&be) != before, "the table's generation moved: the NIC forgets its cache");
    for k in 0..2 {
        assert_eq!(lookup(&be, 1, a.vaddr / PAGE_SIZE + k), None);
    }
    assert_eq!(pte_count(&be, 1), 1);
    assert_eq!(lookup(&be, 1, b.vaddr / PAGE_SIZE), Some(b.bus / PAGE_SIZE));
    assert!(!port.is_registered(&a));
    // Host access to the memory stays possible.
    port.write(&a, 0, b"still mine").unwrap();
    // Deregistering again is refused and changes nothing.
    let g = gen(&be);
    assert_eq!(port.deregister(&a), Err(DriverError::NotRegistered));
    assert_eq!((pte_count(&be, 1), gen(&be)), (1, g));
    // Registering again, and twice: one registration.
    port.register(&a).unwrap();
    port.register(&a).unwrap();
    assert_eq!(pte_count(&be, 1), 3);
    assert_eq!(lookup(&be, 1, a.vaddr / PAGE_SIZE + 1), Some(a.bus / PAGE_SIZE + 1));
}

#[test]
fn a_port_registers_its_whole_slice_of_host_memory() {
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let (_, _, entries) = table_of(&be, 0);
    // The table has an entry for every page of the slice: everything the
    // allocator can hand out registers, in one buffer.
    let mut bufs = Vec::new();
    let mut len = (entries - 64) * PAGE_SIZE;
    while len >= PAGE_SIZE {
        match port.alloc(len) {
            Ok(b) => bufs.push(b),
            Err(DriverError::OutOfMemory { .. }) => len /= 2,
            Err(e) => panic!("{e}"),
        }
    }
    let pages: u64 = bufs.iter().map(|b| b.len.div_ceil(PAGE_SIZE)).sum();
    assert!(pages * 100 >= entries * 95, "{pages} of {entries} pages registered");
    assert_eq!(pte_count(&be, 0), pages);
    for b in bufs {
        port.free(b).unwrap();
    }
    assert_eq!(pte_count(&be, 0), 0);
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

#[test]
fn an_alias_names_registered_memory_elsewhere_and_its_errors_are_typed() {
    use host_driver::nic_abi::port::{port_reg, window, window_word, WINDOW_COUNT};
    use host_driver::nic_abi::regs::{port_pt_vbase, reg};
    let (be, nic, _rig) = setup();
    let mut port = nic.open_port(2, PortOptions::default()).unwrap();
    let buf = port.alloc(3 * PAGE_SIZE).unwrap();
    let at = 0x7ffd_1234_0000;
    let w = port.alias(&buf, at).unwrap();
    // The control block says it: the first page, the table index, 3 pages.
    let first = be.sram_load_u64(port_reg(2, window(w)));
    let word = be.sram_load_u64(port_reg(2, window(w)) + 8);
    let index = (buf.vaddr - be.sram_load_u64(reg(port_pt_vbase(2)))) / PAGE_SIZE;
    assert_eq!((first, word), (at / PAGE_SIZE, window_word(index as u32, 3)));
    // Another offset in the page, a page named already, memory not
    // registered: refused, typed.
    assert_eq!(port.alias(&buf, at + 8), Err(DriverError::BadSize));
    assert_eq!(port.alias(&buf, at + PAGE_SIZE), Err(DriverError::BadSize));
    let other = port.alloc_unregistered(PAGE_SIZE).unwrap();
    assert_eq!(port.alias(&other, 0x5000_0000_0000), Err(DriverError::NotRegistered));
    // As many as the control block has, then PageTableFull.
    for k in 1..WINDOW_COUNT as u64 {
        port.alias(&buf, at + (k << 32)).unwrap();
    }
    assert_eq!(port.alias(&buf, at + (99 << 32)), Err(DriverError::PageTableFull));
    port.unalias(w).unwrap();
    assert_eq!(be.sram_load_u64(port_reg(2, window(w)) + 8), 0, "cleared");
    assert_eq!(port.unalias(w), Err(DriverError::NotRegistered));
    port.alias(&buf, at).unwrap();
}
