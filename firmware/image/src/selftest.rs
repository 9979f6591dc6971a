//! The self-test build (`--features selftest`): checks run on the NIC CPU
//! itself, then QEMU exits with pass or fail through qemu-exit.

use crate::hw::SramHw;
use mcp::hw::Sram;
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::packet::{Flags, Header, PacketType, HEADER_LEN};
use nic_abi::{map, regs, Priority};

fn check(ok: bool, _what: &str) {
    if !ok {
        #[cfg(feature = "defmt")]
        defmt::error!("selftest FAILED: {=str}", _what);
        crate::qemu_exit_failure();
    }
}

pub fn run() -> ! {
    let mut hw = SramHw::new();
    // SRAM round trip through the hardware interface.
    let probe = map::TX_BUFS;
    hw.write(probe, &[1, 2, 3, 4, 5]);
    let mut back = [0u8; 5];
    hw.read(probe, &mut back);
    check(back == [1, 2, 3, 4, 5], "sram bytes");
    hw.store_u32(probe, 0xdead_beef);
    check(hw.load_u32(probe) == 0xdead_beef, "sram word");
    // Bytes across the end of the port windows: the last ones in the
    // window file (its BAR, when QEMU has the files), the next in RAM.
    let edge = map::PORTS + nic_abi::NUM_PORTS as u32 * map::PORT_WINDOW;
    hw.write(edge - 4, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let at = |a: usize| {
        // SAFETY: a 4-aligned word of RAM or of a BAR `pci::map_files`
        // mapped: always mapped; only read.
        unsafe { core::ptr::read_volatile(a as *const u32) }
    };
    let (win, ram) = (at(hw.files_base() + edge as usize - 4), at(0x8000_0000 + edge as usize));
    check(win == 0x0403_0201 && ram == 0x0807_0605, "bytes across a file's edge");
    hw.write(edge - 4, &[0; 8]);
    // Out of bounds never faults: zero and ignored.
    check(hw.load_u32(u32::MAX - 3) == 0, "bounds");
    // The clock runs.
    let a = hw.rtc_now();
    for _ in 0..10_000 {
        core::hint::spin_loop();
    }
    check(hw.rtc_now() > a, "rtc advances");
    // Parsers on the target: good and truncated input.
    let d = Descriptor {
        kind: DescKind::Send,
        priority: Priority::High,
        size_class: 12,
        target_port: 2,
        target_node: 1,
        local: 0x1000,
        len: 4096,
        remote: 0,
        tag: 7,
    };
    let mut b = [0u8; 64];
    d.encode(&mut b);
    check(Descriptor::decode(&b) == Ok(d), "descriptor");
    check(Descriptor::decode(&b[..10]).is_err(), "short descriptor");
    let h = Header {
        ptype: PacketType::Ack,
        flags: Flags::ACK_VALID,
        priority: Priority::Low,
        nack_code: 0,
        src_node: 0,
        dst_node: 1,
        src_port: 0,
        dst_port: 1,
        size_class: 0,
        seq: 0,
        ack: 9,
        msg_len: 0,
        offset: 0,
        payload_len: 0,
        remote: 0,
        cookie: 0,
        sync_boot: 0,
        sync_gen: 0,
        crc: 0,
    };
    let mut hb = [0u8; HEADER_LEN];
    h.encode(&mut hb);
    check(Header::parse(&hb) == Ok(h), "header");
    check(Header::parse(&hb[..20]).is_err(), "short header");
    // The MCP refuses a NIC with no configuration (magic cleared).
    let magic = hw.load_u32(regs::reg(regs::MAGIC));
    hw.store_u32(regs::reg(regs::MAGIC), 0);
    // SAFETY: nothing else uses MCP in the self-test build.
    let mcp = unsafe { &mut *core::ptr::addr_of_mut!(crate::MCP) };
    check(mcp.init(&mut hw).is_err(), "init without magic");
    hw.store_u32(regs::reg(regs::MAGIC), magic);
    #[cfg(feature = "defmt")]
    defmt::info!("selftest passed");
    #[cfg(feature = "panic-test")]
    check(index_past_the_end(7) == 0, "the panic test did not panic");
    crate::qemu_exit_success()
}

/// An index past the end of an array the compiler cannot see coming.
#[cfg(feature = "panic-test")]
#[inline(never)]
fn index_past_the_end(i: usize) -> u8 {
    let a = [1u8, 2, 3];
    a[core::hint::black_box(i)]
}
