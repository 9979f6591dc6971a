//! The NIC's SRAM as a shared file mapping (`host_driver::MappedFile`),
//! seen through the two interfaces the rest of the crate is written
//! against: `mcp::hw::Hw` for the native MCP of the live backend
//! ([`MappedHw`]), and `device::SramIo` for the register reset and the
//! receive engine's ring logic shared with the sim ([`MappedIo`]).
//!
//! Owns nothing but borrows. Every access is bounds-checked by
//! `MappedFile`; an access outside the file reads zero or is dropped and
//! is counted (`MappedHw::faults`), never a panic. Words go through
//! Acquire loads and Release stores, as the hardware manual's ownership
//! rules want (docs/hardware.md section 2).

use std::cell::Cell;

use host_driver::MappedFile;
use mcp::hw::Hw;

use crate::device::SramIo;

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

    fn fault(&self) {
        self.faults.set(self.faults.get() + 1);
    }
}

impl Hw for MappedHw<'_> {
    fn read(&self, off: u32, buf: &mut [u8]) {
        if !self.sram.read(off as u64, buf) {
            self.fault();
        }
    }

    fn write(&mut self, off: u32, data: &[u8]) {
        if !self.sram.write(off as u64, data) {
            self.fault();
        }
    }

    fn load_u32(&self, off: u32) -> u32 {
        self.sram.load_u32(off as u64).unwrap_or_else(|| {
            self.fault();
            0
        })
    }

    fn store_u32(&mut self, off: u32, v: u32) {
        if !self.sram.store_u32(off as u64, v) {
            self.fault();
        }
    }

    fn load_u64(&self, off: u32) -> u64 {
        self.sram.load_u64(off as u64).unwrap_or_else(|| {
            self.fault();
            0
        })
    }

    fn store_u64(&mut self, off: u32, v: u64) {
        if !self.sram.store_u64(off as u64, v) {
            self.fault();
        }
    }

    fn rtc(&self) -> u64 {
        self.rtc
    }
}

/// `device::SramIo` over a mapped `sram` file (Acquire loads, Release
/// stores). Out-of-range accesses read zero and are dropped: the offsets
/// used come from the ABI map, which `RtConfig` checks fits the file.
pub(crate) struct MappedIo<'a>(pub &'a MappedFile);

impl SramIo for MappedIo<'_> {
    fn sram_len(&self) -> usize {
        self.0.len() as usize
    }

    fn get32(&self, off: u32) -> u32 {
        self.0.load_u32(off as u64).unwrap_or(0)
    }

    fn put32(&mut self, off: u32, v: u32) {
        self.0.store_u32(off as u64, v);
    }

    fn put64(&mut self, off: u32, v: u64) {
        self.0.store_u64(off as u64, v);
    }

    fn put_bytes(&mut self, off: u32, b: &[u8]) {
        self.0.write(off as u64, b);
    }
}
