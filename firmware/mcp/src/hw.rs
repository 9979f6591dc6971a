//! The one hardware interface the MCP is written against: typed,
//! bounds-checked access to NIC SRAM (which holds the register block) and
//! the RTC. Only its backing differs between the backends: a heap buffer in
//! sim, a shared file mapping in live, the CPU's own RAM under QEMU.
//!
//! SRAM access is `nic_abi::sram::Sram`, the trait every side shares: a
//! backing implements raw byte access and gets the word accessors
//! (`load_*`/`store_*`, which a concurrent backing overrides with
//! Acquire/Release atomics) and typed registers (`reg`, `set_reg`: the
//! width is in the register's type). `Hw` adds the RTC.
//!
//! Out-of-range accesses never panic: reads yield zero, writes are dropped,
//! and the backing counts them (`faults`) so a test can assert on them.

use nic_abi::regs;
pub use nic_abi::sram::Sram;

pub trait Hw: Sram {
    /// The NIC's real-time clock in ticks.
    #[inline]
    fn rtc(&self) -> u64 {
        self.reg(regs::RTC)
    }
}

/// A plain heap-free SRAM image for tests and the sim backend: a byte
/// slice; the RTC is its register.
pub struct SliceHw<'a> {
    pub sram: &'a mut [u8],
    /// Out-of-range writes seen.
    pub faults: u32,
}

impl<'a> SliceHw<'a> {
    pub fn new(sram: &'a mut [u8]) -> SliceHw<'a> {
        SliceHw { sram, faults: 0 }
    }
}

impl Sram for SliceHw<'_> {
    #[inline]
    fn read(&self, off: u32, buf: &mut [u8]) {
        self.sram.read(off, buf)
    }

    #[inline]
    fn write(&mut self, off: u32, data: &[u8]) {
        match nic_abi::sram::span(self.sram.len(), off, data.len()) {
            Some(r) => self.sram[r].copy_from_slice(data),
            None => self.faults += 1,
        }
    }
}

impl Hw for SliceHw<'_> {}
