//! Opening the NIC and ports, the handshake, closing: the driver against
//! a node of a simulated cluster running the MCP (and, where memory must
//! come dirty or the driver must block, a live cluster).

mod live_rig;
mod sim_rig;

use std::time::Duration;

use host_driver::nic_abi::event as abi_event;
use host_driver::nic_abi::map;
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::PAGE_SIZE;
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

#[test]
fn open_reads_the_configuration_registers() {
    let mut rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    assert_eq!(nic.node_id(), 2);
    assert_eq!(nic.num_nodes(), 4);
    assert_eq!(nic.rtc_hz(), 500_000_000);
    assert_eq!(nic.mtu(), 4096);
    assert_eq!(nic.send_tokens(), 6);
    assert_eq!(nic.recv_tokens(), 5);
    assert_eq!(nic.info().sram_size, map::SRAM_MIN);
    // The RTC register, as the host sees it at its clock (2 ns a tick).
    rig.run_for(24_690);
    assert_eq!(be.now_ns(), 24_690);
    assert_eq!(nic.clock(), 12_345);
    assert_eq!(nic.ticks_to_ns(500), 1000);
    assert_eq!(nic.ns_to_ticks(1000), 500);
}

#[test]
fn open_refuses_a_wrong_magic_abi_or_firmware_state() {
    let rig = Rig::new(Config::default());
    let be = rig.backend();
    be.sram_store_u32(reg(regs::MAGIC), 0x1234);
    assert_eq!(Nic::open(be.clone()).err(), Some(DriverError::BadMagic { found: 0x1234 }));

    let rig = Rig::new(Config::default());
    let be = rig.backend();
    be.sram_store_u32(reg(regs::ABI_VERSION), 99);
    assert_eq!(
        Nic::open(be.clone()).err(),
        Some(DriverError::AbiMismatch { nic: 99, driver: regs::ABI_VERSION_VALUE })
    );

    for st in [regs::FW_BOOTING, regs::FW_HALTED] {
        let rig = Rig::new(Config::default());
        let be = rig.backend();
        be.sram_store_u32(reg(regs::FW_STATUS), st);
        let err = Nic::open(be).err().unwrap();
        assert_eq!(err, DriverError::NicNotReady { fw_status: st });
        assert!(err.to_string().contains("firmware"), "{err}");
    }
}

#[test]
fn open_refuses_unusable_configuration() {
    // Register values no profile makes, written over a booted NIC's.
    type Spoil = fn(&SimBackend);
    let cases: [(Spoil, &str); 4] = [
        (|be| be.sram_store_u32(reg(regs::NODE_ID), 4), "NODE_ID"),
        (|be| be.sram_store_u32(reg(regs::MTU), 5000), "MTU"),
        (|be| be.sram_store_u32(reg(regs::SEND_TOKENS), 0), "SEND_TOKENS"),
        (|be| be.sram_store_u64(reg(regs::RTC_HZ), 0), "RTC_HZ"),
    ];
    for (spoil, name) in cases {
        let rig = Rig::new(Config::default());
        let be = rig.backend();
        spoil(&be);
        assert_eq!(Nic::open(be).err(), Some(DriverError::BadConfig(name)));
    }
}

#[test]
fn open_timeout_waits_for_booting_firmware_where_it_can_block() {
    let rig = Rig::new(Config::default());
    let be = rig.backend();
    be.sram_store_u32(reg(regs::FW_STATUS), regs::FW_BOOTING);
    // The sim cannot block: NicNotReady at once.
    assert!(matches!(
        Nic::open_timeout(be.clone(), Duration::from_secs(1)),
        Err(DriverError::NicNotReady { .. })
    ));
    // Real time: the firmware comes up while the driver waits.
    let c = live_rig::cluster("open-boot", 1, live_rig::Regs::default());
    let sram = live_rig::sram(&c, 0);
    let be = LiveBackend::attach(&live_rig::path_str(&c), 0, 0).unwrap();
    sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_BOOTING);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_RUNNING);
        });
        assert!(Nic::open_timeout(be.clone(), Duration::from_secs(10)).is_ok());
    });
    // And gives up after the timeout.
    sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_BOOTING);
    assert!(matches!(
        Nic::open_timeout(be, Duration::from_micros(50)),
        Err(DriverError::NicNotReady { .. })
    ));
    sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_RUNNING);
}

#[test]
fn open_port_writes_the_control_block_then_state_open() {
    let rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    be.sram_store_u32(port_reg(3, pcb::GENERATION), 41);
    be.sram_store_u32(port_reg(3, pcb::EVQ_CONSUMED), 7);
    be.sram_store_u32(port_reg(3, pcb::SEND_PROD), 9);
    be.sram_store_u32(port_reg(3, pcb::SEND_CONS), 8);
    let bells = doorbells(&be);
    let port = nic.open_port(3, PortOptions::default()).unwrap();
    let w = |off| be.sram_load_u32(port_reg(3, off));
    assert_eq!(w(pcb::STATE), pcb::STATE_OPEN);
    assert_eq!(w(pcb::GENERATION), 42);
    assert_eq!(port.generation(), 42);
    assert_eq!(w(pcb::EVQ_CONSUMED), 0);
    assert_eq!(w(pcb::SEND_PROD), 0);
    assert_eq!(w(pcb::SEND_CONS), 0);
    // 6 + 5 + 8 = 19 -> 32, doubled.
    assert_eq!(be.sram_load_u32(nic_abi::regs::reg(nic_abi::regs::port_evq_len(3))), 64);
    assert_eq!(port.event_queue_len(), 64);
    assert_eq!(
        be.sram_load_u64(nic_abi::regs::reg(nic_abi::regs::port_evq_bus(3))),
        port.event_queue_bus()
    );
    assert_eq!(doorbells(&be), bells + 1);
    assert!(!port.nic_serving());

    // The event queue is zeroed: on a live node, whose host memory is
    // not cleared by its allocator, over memory a program left dirty.
    let c = live_rig::cluster("open-zeroed", 1, live_rig::Regs::default());
    let be = LiveBackend::attach(&live_rig::path_str(&c), 0, 3).unwrap();
    let dirty = be.alloc_dma(64 * 64).unwrap();
    be.host_write(dirty, &[0xA5; 64 * 64]);
    be.free_dma(dirty, 64 * 64);
    let nic = Nic::open(be.clone()).unwrap();
    let port = nic.open_port(3, PortOptions::default()).unwrap();
    assert_eq!(port.event_queue_bus(), dirty);
    let mut q = vec![0xFFu8; 64 * 64];
    be.host_read(port.event_queue_bus(), &mut q);
    // The NIC may have written its PortOpened (seq 1) into slot 0 since.
    let opened = q[0] == abi_event::EventKind::PortOpened as u8
        && q[abi_event::EVENT_SEQ_OFFSET as usize..64] == 1u32.to_le_bytes();
    assert!(opened || q[..64].iter().all(|&b| b == 0), "{:?}", &q[..64]);
    assert!(q[64..].iter().all(|&b| b == 0));
}

#[test]
fn event_queue_is_a_doubled_power_of_two_above_the_tokens() {
    assert_eq!(default_event_queue_len(6, 5), 64);
    assert_eq!(default_event_queue_len(4, 4), 32);
    assert_eq!(default_event_queue_len(100, 20), 256);
    let rig = Rig::new(Config::default());
    let nic = rig.nic();
    let opts = PortOptions { send_tokens: Some(2), recv_tokens: Some(2), event_queue_len: None };
    let port = nic.open_port(0, opts).unwrap();
    assert_eq!(port.event_queue_len(), 32);
    assert_eq!(port.send_tokens(), 2);
    assert_eq!(port.recv_tokens_free(), 2);
}

#[test]
fn port_options_out_of_range_are_refused() {
    let rig = Rig::new(Config::default());
    let nic = rig.nic();
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
    let rig = Rig::new(Config::default());
    let be = rig.backend();
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
    let mut rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    let mut port = nic.open_port(4, PortOptions::default()).unwrap();
    assert_eq!(port.poll(), None);
    rig.step();
    assert!(port.nic_serving());
    assert!(matches!(port.poll(), Some(Event::PortOpened { .. })));
    assert_eq!(port.poll(), None);
}

#[test]
fn close_sets_state_closed_clears_the_page_table_and_allows_reopening() {
    let mut rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    let mut port = nic.open_port(5, PortOptions::default()).unwrap();
    let buf = port.alloc(3 * 4096).unwrap();
    assert_eq!(pte_count(&be, 5), 3);
    rig.step();
    let bells = doorbells(&be);
    port.close();
    assert_eq!(be.sram_load_u32(port_reg(5, pcb::STATE)), pcb::STATE_CLOSED);
    assert_eq!(doorbells(&be), bells + 1);
    assert_eq!(pte_count(&be, 5), 0);
    assert_eq!(lookup(&be, 5, buf.vaddr / 4096), None);
    rig.step();
    assert_eq!(be.sram_load_u32(port_reg(5, pcb::FW_STATE)), pcb::STATE_CLOSED);

    let port = nic.open_port(5, PortOptions::default()).unwrap();
    assert_eq!(port.generation(), 2);
    rig.step();
    assert!(port.nic_serving());
}

#[test]
fn dropping_a_port_closes_it() {
    let rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    {
        let mut port = nic.open_port(6, PortOptions::default()).unwrap();
        port.alloc(4096).unwrap();
    }
    assert_eq!(be.sram_load_u32(port_reg(6, pcb::STATE)), pcb::STATE_CLOSED);
    assert_eq!(pte_count(&be, 6), 0);
    assert!(nic.open_port(6, PortOptions::default()).is_ok());
}

#[test]
fn memory_of_a_closed_port_is_freed_only_once_the_firmware_lets_go() {
    let mut rig = Rig::new(Config::default());
    let be = rig.backend();
    let nic = Nic::open(be.clone()).unwrap();
    let mut port = nic.open_port(0, PortOptions::default()).unwrap();
    let buf = port.alloc(8192).unwrap();
    let evq = port.event_queue_bus();
    rig.step();
    port.close();
    // The NIC has not run since: the firmware still serves generation 1,
    // and neither the buffer nor the event queue is free.
    let unfreed = |be: &nic_emu::SimBackend| {
        !first_fit_is(be, evq, PAGE_SIZE) && !first_fit_is(be, buf.bus, 8192)
    };
    assert!(unfreed(&be));
    let _other = nic.open_port(1, PortOptions::default()).unwrap();
    assert!(unfreed(&be));
    assert_eq!(be.sram_load_u32(port_reg(0, pcb::FW_STATE)), pcb::STATE_OPEN);
    // Once it acknowledges, the next open (or close, or alloc) frees it.
    rig.step();
    assert_eq!(be.sram_load_u32(port_reg(0, pcb::FW_STATE)), pcb::STATE_CLOSED);
    let third = nic.open_port(2, PortOptions::default()).unwrap();
    assert_eq!(third.event_queue_bus(), evq, "the old event queue's page was free again");
    assert!(first_fit_is(&be, buf.bus, 8192), "the buffer is free again");
}

#[test]
fn errors_have_clear_messages() {
    let msgs = [
        (DriverError::NoSendToken, "no send token"),
        (DriverError::NoSendToken, "holds one until the driver reads its completion"),
        (DriverError::NoSendToken, "recv or recv_timeout returns as soon as one is free"),
        (DriverError::NoRecvToken, "no receive token"),
        (DriverError::NoRecvToken, "until the driver reads the Received event"),
        (DriverError::RingFull, "send ring is full"),
        (DriverError::PortBusy(3), "port 3 is already open"),
        (DriverError::BadPort(9), "port 9 does not exist"),
        (DriverError::PageTableFull, "page table has no entry for this memory"),
        (DriverError::WouldBlock, "cannot block"),
    ];
    for (e, want) in msgs {
        let s = e.to_string();
        assert!(s.contains(want), "{s}");
        let _: &dyn std::error::Error = &e;
    }
}
