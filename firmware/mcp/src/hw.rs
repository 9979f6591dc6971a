//! The one hardware interface the MCP is written against: typed,
//! bounds-checked access to NIC SRAM (which holds the register block) and
//! the RTC. Only its backing differs between the backends: a heap buffer in
//! sim, a shared file mapping in live, the CPU's own RAM under QEMU.
//!
//! Out-of-range accesses never panic: reads yield zero, writes are dropped,
//! and the backing counts them (`faults`) so a test can assert on them.
//! Words the device model or the host also use are accessed with
//! `load_*`/`store_*`, which a concurrent backing implements with
//! Acquire/Release ordering.

use nic_abi::regs;

pub trait Hw {
    /// Copy `buf.len()` bytes of SRAM at `off` into `buf`.
    fn read(&self, off: u32, buf: &mut [u8]);
    /// Copy `data` into SRAM at `off`.
    fn write(&mut self, off: u32, data: &[u8]);
    /// Load a shared u32 word (Acquire).
    fn load_u32(&self, off: u32) -> u32;
    /// Store a shared u32 word (Release).
    fn store_u32(&mut self, off: u32, v: u32);
    /// Load a u64 word (Acquire).
    fn load_u64(&self, off: u32) -> u64;
    /// Store a u64 word (Release).
    fn store_u64(&mut self, off: u32, v: u64);

    /// The NIC's real-time clock in ticks.
    fn rtc(&self) -> u64 {
        self.load_u64(regs::reg(regs::RTC))
    }

    /// Read a register (offset relative to the register block).
    fn reg32(&self, r: u32) -> u32 {
        self.load_u32(regs::reg(r))
    }

    fn set_reg32(&mut self, r: u32, v: u32) {
        self.store_u32(regs::reg(r), v)
    }

    fn reg64(&self, r: u32) -> u64 {
        self.load_u64(regs::reg(r))
    }
}

/// A plain heap-free SRAM image for tests and the sim backend: a byte slice
/// with the RTC held beside it.
pub struct SliceHw<'a> {
    pub sram: &'a mut [u8],
    /// Out-of-range accesses seen.
    pub faults: u32,
}

impl<'a> SliceHw<'a> {
    pub fn new(sram: &'a mut [u8]) -> SliceHw<'a> {
        SliceHw { sram, faults: 0 }
    }

    fn range(&self, off: u32, len: usize) -> Option<core::ops::Range<usize>> {
        let start = off as usize;
        let end = start.checked_add(len)?;
        if end <= self.sram.len() {
            Some(start..end)
        } else {
            None
        }
    }
}

impl Hw for SliceHw<'_> {
    fn read(&self, off: u32, buf: &mut [u8]) {
        match self.range(off, buf.len()) {
            Some(r) => buf.copy_from_slice(&self.sram[r]),
            None => buf.fill(0),
        }
    }

    fn write(&mut self, off: u32, data: &[u8]) {
        match self.range(off, data.len()) {
            Some(r) => self.sram[r].copy_from_slice(data),
            None => self.faults += 1,
        }
    }

    fn load_u32(&self, off: u32) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn store_u32(&mut self, off: u32, v: u32) {
        self.write(off, &v.to_le_bytes())
    }

    fn load_u64(&self, off: u32) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    fn store_u64(&mut self, off: u32, v: u64) {
        self.write(off, &v.to_le_bytes())
    }
}
