//! Opening the NIC and ports, the handshake, closing.

mod common;

use std::time::Duration;

use common::*;
use host_driver::nic_abi::map;
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::*;

#[test]
fn open_reads_the_configuration_registers() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    assert_eq!(nic.node_id(), 2);
    assert_eq!(nic.num_nodes(), 4);
    assert_eq!(nic.rtc_hz(), 500_000_000);
    assert_eq!(nic.mtu(), 4096);
    assert_eq!(nic.send_tokens(), 6);
    assert_eq!(nic.recv_tokens(), 5);
    assert_eq!(nic.info().sram_size, map::SRAM_MIN);
    be.sram_store_u64(reg(regs::RTC), 12_345);
    assert_eq!(nic.clock(), 12_345);
    assert_eq!(nic.ticks_to_ns(500), 1000);
    assert_eq!(nic.ns_to_ticks(1000), 500);
}

#[test]
fn open_refuses_a_wrong_magic_abi_or_firmware_state() {
    let be = backend(Config::default());
    be.set_u32(reg(regs::MAGIC), 0x1234);
    assert_eq!(Nic::open(be.clone()).err(), Some(DriverError::BadMagic { found: 0x1234 }));

    let be = backend(Config::default());
    be.set_u32(reg(regs::ABI_VERSION), 99);
    assert_eq!(
        Nic::open(be.clone()).err(),
        Some(DriverError::AbiMismatch { nic: 99, driver: regs::ABI_VERSION_VALUE })
    );

    for st in [regs::FW_BOOTING, regs::FW_HALTED] {
        let be = backend(Config::default());
        be.set_u32(reg(regs::FW_STATUS), st);
        let err = Nic::open(be).err().unwrap();
        assert_eq!(err, DriverError::NicNotReady { fw_status: st });
        assert!(err.to_string().contains("firmware"), "{err}");
    }
}

#[test]
fn open_refuses_unusable_configuration() {
    type Edit = fn(&mut Config);
    let cases: [(Edit, &str); 4] = [
        (|c| c.node = 4, "NODE_ID"),
        (|c| c.mtu = 5000, "MTU"),
        (|c| c.send_tokens = 0, "SEND_TOKENS"),
        (|c| c.rtc_hz = 0, "RTC_HZ"),
    ];
    for (edit, name) in cases {
        let mut cfg = Config::default();
        edit(&mut cfg);
        assert_eq!(Nic::open(backend(cfg)).err(), Some(DriverError::BadConfig(name)));
    }
}

#[test]
fn open_timeout_waits_for_booting_firmware_where_it_can_block() {
    let be = backend(Config::default());
    be.set_u32(reg(regs::FW_STATUS), regs::FW_BOOTING);
    // The sim cannot block: NicNotReady at once.
    assert!(matches!(
        Nic::open_timeout(be.clone(), Duration::from_secs(1)),
        Err(DriverError::NicNotReady { .. })
    ));
    // Real time: the firmware comes up after a few idle waits.
    be.0.borrow_mut().blocking = true;
    let b2 = be.clone();
    be.set_idle_hook(move || {
        if b2.0.borrow().idle_waits >= 3 {
            b2.set_u32(reg(regs::FW_STATUS), regs::FW_RUNNING);
        }
    });
    assert!(Nic::open_timeout(be.clone(), Duration::from_secs(1)).is_ok());
    // And gives up after the timeout.
    be.set_u32(reg(regs::FW_STATUS), regs::FW_BOOTING);
    be.set_idle_hook(|| {});
    assert!(matches!(
        Nic::open_timeout(be, Duration::from_micros(50)),
        Err(DriverError::NicNotReady { .. })
    ));
}

#[test]
fn open_port_writes_the_control_block_then_state_open() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    be.set_u32(port_reg(3, pcb::GENERATION), 41);
    be.set_u32(port_reg(3, pcb::EVQ_CONSUMED), 7);
    be.set_u32(port_reg(3, pcb::SEND_PROD), 9);
    be.set_u32(port_reg(3, pcb::SEND_CONS), 8);
    let bells = be.0.borrow().doorbells;
    let port = nic.open_port(3, PortOptions::default()).unwrap();
    let w = |off| be.u32_at(port_reg(3, off));
    assert_eq!(w(pcb::STATE), pcb::STATE_OPEN);
    assert_eq!(w(pcb::GENERATION), 42);
    assert_eq!(port.generation(), 42);
    assert_eq!(w(pcb::EVQ_CONSUMED), 0);
    assert_eq!(w(pcb::SEND_PROD), 0);
    assert_eq!(w(pcb::SEND_CONS), 0);
    // 6 + 5 + 8 = 19 -> 32, doubled.
    assert_eq!(w(pcb::EVQ_LEN), 64);
    assert_eq!(port.event_queue_len(), 64);
    assert_eq!(be.u64_at(port_reg(3, pcb::EVQ_BUS)), port.event_queue_bus());
    assert_eq!(be.0.borrow().doorbells, bells + 1);
    // The event queue is zeroed (fresh memory is 0xA5 in this backend).
    let mut q = vec![0xFFu8; 64 * 64];
    be.host_read(port.event_queue_bus(), &mut q);
    assert!(q.iter().all(|&b| b == 0));
    assert!(!port.nic_serving());
}

#[test]
fn event_queue_is_a_doubled_power_of_two_above_the_tokens() {
    assert_eq!(default_event_queue_len(6, 5), 64);
    assert_eq!(default_event_queue_len(4, 4), 32);
    assert_eq!(default_event_queue_len(100, 20), 256);
    let be = backend(Config::default());
    let nic = Nic::open(be).unwrap();
    let opts = PortOptions { send_tokens: Some(2), recv_tokens: Some(2), event_queue_len: None };
    let port = nic.open_port(0, opts).unwrap();
    assert_eq!(port.event_queue_len(), 32);
    assert_eq!(port.send_tokens(), 2);
    assert_eq!(port.recv_tokens_free(), 2);
}

#[test]
fn port_options_out_of_range_are_refused() {
    let nic = Nic::open(backend(Config::default())).unwrap();
    let bad = [
        (PortOptions { send_tokens: Some(7), ..Default::default() }, "send_tokens"),
        (PortOptions { recv_tokens: Some(0), ..Default::default() }, "recv_tokens"),
        (PortOptions { event_queue_len: Some(32), ..Default::default() }, "event_queue_len"),
        (PortOptions { event_queue_len: Some(100), ..Default::default() }, "event_queue_len"),
    ];
    for (o, name) in bad {
        assert_eq!(nic.open_port(1, o).err(), Some(DriverError::InvalidOption(name)));
    }
    let o = PortOptions { event_queue_len: Some(256), ..Default::default() };
    assert_eq!(nic.open_port(1, o).unwrap().event_queue_len(), 256);
}

#[test]
fn open_port_refuses_a_bad_number_and_an_open_port() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    assert_eq!(nic.open_port(8, PortOptions::default()).err(), Some(DriverError::BadPort(8)));
    let _p = nic.open_port(1, PortOptions::default()).unwrap();
    assert_eq!(nic.open_port(1, PortOptions::default()).err(), Some(DriverError::PortBusy(1)));
    // Another process (another Nic on the same SRAM) is refused too.
    let other = Nic::open(be).unwrap();
    assert_eq!(other.open_port(1, PortOptions::default()).err(), Some(DriverError::PortBusy(1)));
    assert!(other.open_port(2, PortOptions::default()).is_ok());
}

#[test]
fn first_event_is_port_opened_and_nic_serves_the_port() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    let mut fake = FakeNic::new(&be);
    let mut port = nic.open_port(4, PortOptions::default()).unwrap();
    assert_eq!(port.poll(), None);
    fake.step();
    assert!(port.nic_serving());
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    assert_eq!(port.poll(), None);
}

#[test]
fn close_sets_state_closed_clears_the_page_table_and_allows_reopening() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    let mut fake = FakeNic::new(&be);
    let mut port = nic.open_port(5, PortOptions::default()).unwrap();
    let buf = port.alloc(3 * 4096).unwrap();
    assert_eq!(be.pte_counts(5), (3, 0));
    fake.step();
    let bells = be.0.borrow().doorbells;
    port.close();
    assert_eq!(be.u32_at(port_reg(5, pcb::STATE)), pcb::STATE_CLOSED);
    assert_eq!(be.0.borrow().doorbells, bells + 1);
    assert_eq!(be.pte_counts(5), (0, 0));
    assert_eq!(be.lookup(5, buf.vaddr / 4096), None);
    fake.step();
    assert_eq!(be.u32_at(port_reg(5, pcb::FW_STATE)), pcb::STATE_CLOSED);

    let port = nic.open_port(5, PortOptions::default()).unwrap();
    assert_eq!(port.generation(), 2);
    fake.step();
    assert!(port.nic_serving());
}

#[test]
fn dropping_a_port_closes_it() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    {
        let mut port = nic.open_port(6, PortOptions::default()).unwrap();
        port.alloc(4096).unwrap();
    }
    assert_eq!(be.u32_at(port_reg(6, pcb::STATE)), pcb::STATE_CLOSED);
    assert_eq!(be.pte_counts(6), (0, 0));
    assert!(nic.open_port(6, PortOptions::default()).is_ok());
}

#[test]
fn memory_of_a_closed_port_is_freed_only_once_the_firmware_lets_go() {
    let be = backend(Config::default());
    let nic = Nic::open(be.clone()).unwrap();
    let mut fake = FakeNic::new(&be);
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(8192).unwrap();
    let evq = port.event_queue_bus();
    fake.step();
    fake.ignore_close = true;
    port.close();
    fake.step();
    // The firmware still serves generation 1: nothing freed.
    assert!(be.0.borrow().freed.is_empty());
    let _other = nic.open_port(1, PortOptions::default()).unwrap();
    assert!(be.0.borrow().freed.is_empty());
    // Once it acknowledges, the next open (or close, or alloc) frees it.
    fake.ignore_close = false;
    fake.step();
    let _third = nic.open_port(2, PortOptions::default()).unwrap();
    let freed = be.0.borrow().freed.clone();
    assert!(freed.contains(&(buf.bus, 8192)), "{freed:?}");
    assert!(freed.contains(&(evq, 64 * 64)), "{freed:?}");
}

#[test]
fn errors_have_clear_messages() {
    let msgs = [
        (DriverError::NoSendToken, "no send token"),
        (DriverError::NoRecvToken, "no receive token"),
        (DriverError::RingFull, "send ring is full"),
        (DriverError::PortBusy(3), "port 3 is already open"),
        (DriverError::BadPort(9), "port 9 does not exist"),
        (DriverError::PageTableFull, "page table is full"),
        (DriverError::WouldBlock, "cannot block"),
    ];
    for (e, want) in msgs {
        let s = e.to_string();
        assert!(s.contains(want), "{s}");
        let _: &dyn std::error::Error = &e;
    }
}
