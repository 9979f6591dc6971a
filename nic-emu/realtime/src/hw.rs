//! The NIC's SRAM as a shared file mapping (`nic_cluster_dir::MappedFile`),
//! seen by the native MCP of the live backend: `mcp::hw::Hw` (over
//! `nic_abi::sram::Sram`) that counts the firmware's out-of-range
//! accesses ([`MappedHw`]). The device model reaches the same mapping
//! through `MappedFile`'s own `Sram` (`engines::MappedMem`).
//!
//! Owns nothing but borrows. Every access is bounds-checked by
//! `MappedFile`; an access outside the file reads zero or is dropped and
//! is counted (`MappedHw::faults`), never a panic. Words go through
//! Acquire loads and Release stores, as the hardware manual's ownership
//! rules want (docs/hardware.md section 2).

use std::cell::Cell;

use mcp::hw::{Hw, Sram};
use nic_cluster_dir::MappedFile;

/// `mcp::hw::Hw` over a mapped `sram` file, with the RTC value of the
/// current pass (the device loop writes the RTC register and hands the
/// same value to the MCP, so both agree and `rtc()` costs nothing).
pub(crate) struct MappedHw<'a> {
    pub sram: &'a MappedFile,
    pub rtc: u64,
    /// Out-of-range accesses by the firmware.
    pub faults: Cell<u64>,
}

impl<'a> MappedHw<'a> {
    pub fn new(sram: &'a MappedFile, rtc: u64) -> MappedHw<'a> {
        MappedHw { sram, rtc, faults: Cell::new(0) }
    }

    /// Count an access that did not land (`ok` false).
    #[inline]
    fn check(&self, ok: bool) {
        if !ok {
            self.faults.set(self.faults.get() + 1);
        }
    }

    /// A loaded word, or zero and a fault.
    #[inline]
    fn word<T: Default>(&self, v: Option<T>) -> T {
        self.check(v.is_some());
        v.unwrap_or_default()
    }
}

impl Sram for MappedHw<'_> {
    #[inline(always)]
    fn read(&self, off: u32, buf: &mut [u8]) {
        self.check(self.sram.read(off as u64, buf));
    }

    #[inline(always)]
    fn write(&mut self, off: u32, data: &[u8]) {
        self.check(self.sram.write(off as u64, data));
    }

    #[inline]
    fn load_u32(&self, off: u32) -> u32 {
        self.word(self.sram.load_u32(off as u64))
    }

    #[inline]
    fn store_u32(&mut self, off: u32, v: u32) {
        self.check(self.sram.store_u32(off as u64, v));
    }

    #[inline]
    fn load_u64(&self, off: u32) -> u64 {
        self.word(self.sram.load_u64(off as u64))
    }

    #[inline]
    fn store_u64(&mut self, off: u32, v: u64) {
        self.check(self.sram.store_u64(off as u64, v));
    }
}

impl Hw for MappedHw<'_> {
    #[inline]
    fn rtc(&self) -> u64 {
        self.rtc
    }
}
