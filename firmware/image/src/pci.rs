//! The register page and the port windows as PCI devices. Under the qemu
//! backend they are files of their own (`node<N>/regs`,
//! `node<N>/port<P>.win`), so that a host process can be given only its
//! part of SRAM; QEMU shows each file to the guest as an `ivshmem-plain`
//! device (nic-emu/realtime/src/qemu.rs, `QemuSpec::command`): the
//! register page at PCI slot 1, port P's window at slot 2 + P, on bus 0 of
//! the `virt` board's PCIe host bridge. Nobody enumerates PCI on this
//! bare-metal board, so [`map_files`] assigns the devices' shared-memory
//! BARs itself, at `MMIO_BASE + SRAM offset` in the bridge's 32-bit MMIO
//! window: the page at 0x4004_0000, the windows one 64 KiB range from
//! 0x4005_0000. The bytes of `sram` in those ranges are no longer used.

use core::ptr::NonNull;
use nic_abi::{map, NUM_PORTS};
use volatile::VolatilePtr;

/// QEMU virt's PCIe configuration space (ECAM), bus 0 at its start.
const ECAM: usize = 0x3000_0000;
/// Guest address of SRAM offset 0 for the register page and the port
/// windows once mapped: the start of the 32-bit MMIO window (0x4000_0000,
/// 1 GiB). Every BAR lands aligned to its size (REGS and PORTS are).
pub const MMIO_BASE: usize = 0x4000_0000;
/// Device ID << 16 | vendor ID of ivshmem (Red Hat, 0x1af4:0x1110).
const IVSHMEM: u32 = 0x1110_1af4;
/// The register page's slot; port P's window is at `REGS_SLOT + 1 + P`.
const REGS_SLOT: usize = 1;

/// A 32-bit word of the configuration space of `slot` (bus 0, function 0).
fn cfg(slot: usize, reg: usize) -> VolatilePtr<'static, u32> {
    // SAFETY: ECAM is the board's configuration space, always mapped;
    // slot < 32 and reg < 0x100 is 4-aligned, so the word is inside it.
    unsafe { VolatilePtr::new(NonNull::new_unchecked((ECAM + (slot << 15) + reg) as *mut u32)) }
}

/// Find the nine devices and map each one's BAR2 (64-bit memory BAR:
/// low word at 0x18, high at 0x1C) at `MMIO_BASE + ` its SRAM offset,
/// memory decoding on. True if all nine are there with the expected
/// sizes; false (an older command line, a hand-made QEMU): keep
/// everything in RAM.
pub fn map_files() -> bool {
    (0..=NUM_PORTS).all(|i| match i {
        0 => map_bar(REGS_SLOT, map::REGS, map::REGS_SIZE),
        _ => map_bar(REGS_SLOT + i, map::port_window(i - 1), map::PORT_WINDOW),
    })
}

fn map_bar(slot: usize, off: u32, size: u32) -> bool {
    if cfg(slot, 0).read() != IVSHMEM {
        return false;
    }
    let (cmd, lo, hi) = (cfg(slot, 0x04), cfg(slot, 0x18), cfg(slot, 0x1C));
    // Decoding off while the BAR moves; then the usual size probe.
    cmd.write(0);
    lo.write(!0);
    hi.write(!0);
    if lo.read() & !0xF != size.wrapping_neg() || hi.read() != !0 {
        return false;
    }
    lo.write((MMIO_BASE + off as usize) as u32);
    hi.write(0);
    cmd.write(2); // memory space enable
    true
}
