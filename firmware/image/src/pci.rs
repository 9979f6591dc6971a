//! The register page and the port windows as PCI devices, and the NIC
//! CPU's interrupt. Under the qemu backend the page and the windows are
//! files of their own (`node<N>/regs`, `node<N>/port<P>.win`), so that a
//! host process can be given only its part of SRAM; QEMU shows each file
//! to the guest as an ivshmem device (nic-emu/realtime/src/qemu.rs,
//! `QemuSpec::command`): the register page at PCI slot 1, port P's window
//! at slot 2 + P, on bus 0 of the `virt` board's PCIe host bridge. Nobody
//! enumerates PCI on this bare-metal board, so [`map_files`] assigns the
//! devices' shared-memory BARs itself, at `MMIO_BASE + SRAM offset` in
//! the bridge's 32-bit MMIO window: the page at 0x4004_0000, the windows
//! one 64 KiB range from 0x4005_0000. The bytes of `sram` in those ranges
//! are no longer used.
//!
//! The register page's device is an `ivshmem-doorbell`, whose shared
//! memory the device process hands QEMU (the ivshmem server protocol)
//! together with an eventfd: the device process's doorbell to this CPU.
//! Its one MSI-X vector is aimed at the CLINT's software-interrupt
//! register of hart 0 ([`clint::MSIP`]): a message sets MIP.MSIP, which
//! ends a WFI ([`enable_doorbell`]).

use crate::clint;
use core::ptr::NonNull;
use nic_abi::{map, NUM_PORTS};
use volatile::VolatilePtr;

/// QEMU virt's PCIe configuration space (ECAM), bus 0 at its start.
const ECAM: usize = 0x3000_0000;
/// Guest address of SRAM offset 0 for the register page and the port
/// windows once mapped: the start of the 32-bit MMIO window (0x4000_0000,
/// 1 GiB). Every BAR lands aligned to its size (REGS and PORTS are).
pub const MMIO_BASE: usize = 0x4000_0000;
/// Where the register device's MSI-X table BAR goes: the start of the
/// window (SRAM offset 0 is the image, never a file), 4 KiB.
const MSIX_BAR: usize = MMIO_BASE;
/// Device ID << 16 | vendor ID of ivshmem (Red Hat, 0x1af4:0x1110).
const IVSHMEM: u32 = 0x1110_1af4;
/// The register page's slot; port P's window is at `REGS_SLOT + 1 + P`.
const REGS_SLOT: usize = 1;
/// PCI capability ID of MSI-X.
const CAP_MSIX: u32 = 0x11;

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

/// Aim the register device's MSI-X vector 0 at the CLINT's MSIP of hart
/// 0 and enable it (with bus mastering, which lets the device write).
/// False when the device has no MSI-X (an `ivshmem-plain` register page:
/// nothing will interrupt this CPU; it then naps on its timer).
pub fn enable_doorbell() -> bool {
    let slot = REGS_SLOT;
    // The capability list (status bit 4), from its pointer at 0x34.
    if cfg(slot, 0x04).read() & (1 << 20) == 0 {
        return false;
    }
    let mut at = cfg(slot, 0x34).read() as usize & 0xFC;
    let mut hops = 0;
    while at != 0 && cfg(slot, at).read() & 0xFF != CAP_MSIX {
        at = (cfg(slot, at).read() >> 8) as usize & 0xFC;
        hops += 1;
        if hops > 48 {
            return false;
        }
    }
    if at == 0 {
        return false;
    }
    // The table: BIR (a 32-bit memory BAR) and offset.
    let table = cfg(slot, at + 4).read();
    let bar = cfg(slot, 0x10 + 4 * (table & 7) as usize);
    bar.write(!0);
    let size = (bar.read() & !0xF).wrapping_neg() as usize;
    if table & 7 > 5 || !(4096..=1 << 20).contains(&size) {
        return false;
    }
    bar.write(MSIX_BAR as u32);
    let entry = MSIX_BAR + (table & !7) as usize;
    let word = |i: usize| {
        // SAFETY: entry 0 of the MSI-X table (16 bytes) in the BAR just
        // mapped at MSIX_BAR (table offset inside it, checked by QEMU):
        // device memory, 4-aligned words.
        unsafe { VolatilePtr::new(NonNull::new_unchecked((entry + 4 * i) as *mut u32)) }
    };
    // Memory decoding and bus mastering, then the entry: address, data,
    // unmasked; then MSI-X on (message control bit 15, function unmasked).
    cfg(slot, 0x04).write(6);
    word(0).write(clint::MSIP as u32);
    word(1).write(0);
    word(2).write(1);
    word(3).write(0);
    let ctl = cfg(slot, at);
    ctl.write(ctl.read() & !(1 << 30) | 1 << 31);
    true
}
