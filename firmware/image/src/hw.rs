//! `mcp::hw::Hw` (SRAM access, `nic_abi::sram::Sram`, and the RTC) over
//! the NIC CPU's own RAM: SRAM is guest RAM at
//! `SRAM_BASE`, shared (a file mapping) with the device model in nic-emu,
//! except the register page and the port windows: files of their own,
//! seen as PCI devices at `pci::MMIO_BASE + offset` when QEMU has them
//! (`pci.rs`; RAM too otherwise).
//! Words the device or the host also touch are accessed as atomics with
//! Acquire/Release; bulk bytes with volatile accesses. Every access is
//! bounds-checked against the SRAM size the device model configured.

use crate::{clint, pci};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use mcp::hw::{Hw, Sram};
use nic_abi::{map, regs, NUM_PORTS};
use volatile::VolatilePtr;

const SRAM_BASE: usize = 0x8000_0000;

pub struct SramHw {
    size: u32,
    rtc_hz: u64,
    /// Guest address of SRAM offset 0 for the register page and the port
    /// windows: `pci::MMIO_BASE` once their BARs are mapped, else SRAM_BASE.
    files: usize,
}

impl SramHw {
    /// Maps the register page and port windows first (`pci::map_files`):
    /// the SRAM size and the clock rate are registers.
    pub fn new() -> SramHw {
        let files = if pci::map_files() { pci::MMIO_BASE } else { SRAM_BASE };
        let mut hw = SramHw { size: map::SRAM_MIN, rtc_hz: clint::MTIME_HZ, files };
        let size = hw.load_u32(regs::reg(regs::SRAM_SIZE));
        if size >= map::SRAM_MIN {
            hw.size = size;
        }
        let hz = hw.load_u64(regs::reg(regs::RTC_HZ));
        if hz != 0 {
            hw.rtc_hz = hz;
        }
        hw
    }

    /// Guest address of SRAM offset 0 for the register page and the port
    /// windows (the self-test looks there behind the interface's back).
    #[cfg(feature = "selftest")]
    pub fn files_base(&self) -> usize {
        self.files
    }

    /// Guest address of SRAM offset `off`. REGS and PORTS are 4 KiB
    /// aligned, so an aligned word never straddles a region's edge.
    fn addr(&self, off: usize) -> usize {
        let page = off.wrapping_sub(map::REGS as usize) < map::REGS_SIZE as usize;
        let window = off.wrapping_sub(map::PORTS as usize) < NUM_PORTS * map::PORT_WINDOW as usize;
        (if page || window { self.files } else { SRAM_BASE }) + off
    }

    /// A byte of SRAM, for volatile access (others write SRAM concurrently).
    /// The caller checked `off` against the SRAM size.
    fn byte(&self, off: usize) -> VolatilePtr<'static, u8> {
        // SAFETY: `addr(off)` is inside SRAM (off checked by the caller),
        // this CPU's RAM, or inside a BAR `pci::map_files` mapped (RAM
        // backed): always mapped and never null.
        unsafe { VolatilePtr::new(NonNull::new_unchecked(self.addr(off) as *mut u8)) }
    }

    fn ok(&self, off: u32, len: usize) -> bool {
        (off as usize).checked_add(len).is_some_and(|e| e <= self.size as usize)
    }

    /// The RTC in ticks of RTC_HZ, from the CLINT's mtime.
    pub fn rtc_now(&self) -> u64 {
        scale(clint::mtime(), self.rtc_hz, clint::MTIME_HZ)
    }

    pub fn rtc_to_clint(&self, ticks: u64) -> u64 {
        scale(ticks, clint::MTIME_HZ, self.rtc_hz)
    }
}

/// `x * num / den` rounded down, in 64-bit arithmetic (no 128-bit
/// division routine in the image): exact while `(den - 1) * num` fits
/// 64 bits, which holds for any clock rate below 1.8 THz.
fn scale(x: u64, num: u64, den: u64) -> u64 {
    let (q, r) = (x / den, x % den);
    q.wrapping_mul(num).wrapping_add(r.saturating_mul(num) / den)
}

impl Sram for SramHw {
    fn read(&self, off: u32, buf: &mut [u8]) {
        if !self.ok(off, buf.len()) {
            buf.fill(0);
            return;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.byte(off as usize + i).read();
        }
    }

    fn write(&mut self, off: u32, data: &[u8]) {
        if !self.ok(off, data.len()) {
            return;
        }
        for (i, b) in data.iter().enumerate() {
            self.byte(off as usize + i).write(*b);
        }
    }

    fn load_u32(&self, off: u32) -> u32 {
        if !self.ok(off, 4) || !off.is_multiple_of(4) {
            return 0;
        }
        // SAFETY: in bounds and 4-aligned, in RAM or a mapped BAR as in
        // `byte`; SRAM words shared with the device model are accessed
        // only atomically.
        unsafe { (*(self.addr(off as usize) as *const AtomicU32)).load(Ordering::Acquire) }
    }

    fn store_u32(&mut self, off: u32, v: u32) {
        if !self.ok(off, 4) || !off.is_multiple_of(4) {
            return;
        }
        // SAFETY: as in `load_u32`.
        unsafe { (*(self.addr(off as usize) as *const AtomicU32)).store(v, Ordering::Release) }
    }

    fn load_u64(&self, off: u32) -> u64 {
        if !self.ok(off, 8) || !off.is_multiple_of(8) {
            return 0;
        }
        // SAFETY: in bounds and 8-aligned, as in `load_u32`.
        unsafe { (*(self.addr(off as usize) as *const AtomicU64)).load(Ordering::Acquire) }
    }

    fn store_u64(&mut self, off: u32, v: u64) {
        if !self.ok(off, 8) || !off.is_multiple_of(8) {
            return;
        }
        // SAFETY: as in `load_u64`.
        unsafe { (*(self.addr(off as usize) as *const AtomicU64)).store(v, Ordering::Release) }
    }
}

impl Hw for SramHw {
    fn rtc(&self) -> u64 {
        self.rtc_now()
    }
}
