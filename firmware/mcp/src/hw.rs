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
//! Out-of-range accesses never panic: here reads yield zero and writes
//! are dropped, and the backing counts them (`faults`), with word
//! accesses off their alignment, so a test can assert there are none.
//! The bare-metal image does not check: a word access there is one AND
//! and a load or store, which keeps it inside SRAM whatever the offset
//! (firmware/image/src/hw.rs). Every offset the MCP makes is in range and
//! aligned; the simulator's runs check that it stays so.

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
    /// Accesses out of range, and word accesses off their alignment.
    pub faults: core::cell::Cell<u32>,
}

impl<'a> SliceHw<'a> {
    pub fn new(sram: &'a mut [u8]) -> SliceHw<'a> {
        SliceHw { sram, faults: core::cell::Cell::new(0) }
    }

    /// Count a fault when `off` is a word of the register page or a port
    /// window (a RAM accessor's offset must not be).
    #[inline]
    fn check_ram(&self, off: u32) {
        use nic_abi::map;
        let files = |lo: u32, len: u32| off >= lo && off < lo + len;
        if files(map::REGS, map::REGS_SIZE)
            || files(map::PORTS, map::PORT_WINDOW * nic_abi::NUM_PORTS as u32)
        {
            self.faults.set(self.faults.get() + 1);
        }
    }

    /// The `N`-byte word at `off` (zeros out of range), counted as
    /// [`SliceHw::check`] says.
    #[inline]
    fn load_word<const N: usize>(&self, off: u32) -> [u8; N] {
        self.check(off, N, true);
        let mut b = [0u8; N];
        self.sram.read(off, &mut b);
        b
    }

    /// Store the word `b` at `off` (dropped out of range), counted as
    /// [`SliceHw::check`] says.
    #[inline]
    fn store_word(&mut self, off: u32, b: &[u8]) {
        self.check(off, b.len(), true);
        self.sram.write(off, b)
    }

    /// Count a fault when `off..off + len` leaves SRAM or, for a word
    /// (`len` 4 or 8), `off` is not a multiple of `len`.
    #[inline]
    fn check(&self, off: u32, len: usize, word: bool) {
        let misaligned = word && !(off as usize).is_multiple_of(len);
        if misaligned || nic_abi::sram::span(self.sram.len(), off, len).is_none() {
            self.faults.set(self.faults.get() + 1);
        }
    }
}

impl Sram for SliceHw<'_> {
    #[inline]
    fn read(&self, off: u32, buf: &mut [u8]) {
        self.check(off, buf.len(), false);
        self.sram.read(off, buf)
    }

    #[inline]
    fn write(&mut self, off: u32, data: &[u8]) {
        self.check(off, data.len(), false);
        self.sram.write(off, data)
    }

    #[inline]
    fn load_u32(&self, off: u32) -> u32 {
        u32::from_le_bytes(self.load_word(off))
    }

    #[inline]
    fn store_u32(&mut self, off: u32, v: u32) {
        self.store_word(off, &v.to_le_bytes())
    }

    #[inline]
    fn load_u64(&self, off: u32) -> u64 {
        u64::from_le_bytes(self.load_word(off))
    }

    #[inline]
    fn store_u64(&mut self, off: u32, v: u64) {
        self.store_word(off, &v.to_le_bytes())
    }

    #[inline]
    fn load_ram_u64(&self, off: u32) -> u64 {
        self.check_ram(off);
        self.load_u64(off)
    }

    #[inline]
    fn store_ram_u64(&mut self, off: u32, v: u64) {
        self.check_ram(off);
        self.store_u64(off, v)
    }
}

impl Hw for SliceHw<'_> {}
