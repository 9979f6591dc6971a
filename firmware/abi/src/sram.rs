//! Access to a NIC's SRAM, one trait for every view of it: the MCP's
//! hardware interface (`mcp::hw::Hw` builds on it), the device model's DMA
//! engines and register reset, and the host driver's programmed I/O.
//!
//! A backing implements only raw byte access ([`Sram::read`],
//! [`Sram::write`]); the word accessors are written once here, as
//! little-endian loads and stores through those two. A backing shared
//! with another thread or process (a file mapping, the NIC CPU's own RAM)
//! overrides the word methods with single atomic accesses, Acquire for
//! loads and Release for stores, as the hardware manual's ownership rules
//! want: a record is written with `write`, then published with a
//! `store_*` of its producer counter.
//!
//! Out-of-range accesses never panic: reads yield zero, writes are
//! dropped. A backing may count them (`SliceHw::faults`, with word
//! accesses off their alignment). One backing trades the check for speed:
//! the NIC CPU's image wraps a word access into the first
//! `map::SRAM_MIN` bytes, aligned down (one AND: it stays inside SRAM
//! whatever the offset), which gives the same result for every offset in
//! range and aligned, the only kind the MCP makes.
//!
//! Owns nothing; touches only the memory of the backing it is implemented
//! for. `[u8]` is the plain backing: the sim's SRAM, a test's buffer.

use crate::regs::{Reg, Width};

/// Byte-addressed SRAM with little-endian word accessors, and typed
/// register access.
pub trait Sram {
    /// Copy `buf.len()` bytes of SRAM at `off` into `buf` (zeros where
    /// the range leaves SRAM).
    fn read(&self, off: u32, buf: &mut [u8]);
    /// Copy `data` into SRAM at `off` (dropped if the range leaves SRAM).
    fn write(&mut self, off: u32, data: &[u8]);

    /// Load a u32 word (Acquire where the backing is shared).
    #[inline]
    fn load_u32(&self, off: u32) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    /// Store a u32 word (Release where the backing is shared).
    #[inline]
    fn store_u32(&mut self, off: u32, v: u32) {
        self.write(off, &v.to_le_bytes())
    }

    /// Load a u64 word (Acquire where the backing is shared).
    #[inline]
    fn load_u64(&self, off: u32) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Store a u64 word (Release where the backing is shared).
    #[inline]
    fn store_u64(&mut self, off: u32, v: u64) {
        self.write(off, &v.to_le_bytes())
    }

    /// Load a u64 word of RAM: a word outside the register page and the
    /// port windows (`map::REGS`, `map::PORTS`), which publish. A backing
    /// that keeps those apart from the rest (the NIC CPU's image, where
    /// they are PCI BARs) need not tell them apart here: a plain load. The
    /// plain backings load as `load_u64` (and count a fault on a register
    /// or port window word, where they count faults).
    #[inline]
    fn load_ram_u64(&self, off: u32) -> u64 {
        self.load_u64(off)
    }

    /// Store a u64 word of RAM (as [`Sram::load_ram_u64`]).
    #[inline]
    fn store_ram_u64(&mut self, off: u32, v: u64) {
        self.store_u64(off, v)
    }

    /// Read register `r`, as wide as it is.
    #[inline]
    fn reg<W: Width>(&self, r: Reg<W>) -> W {
        W::load(self, r.addr())
    }

    /// Write register `r`.
    #[inline]
    fn set_reg<W: Width>(&mut self, r: Reg<W>, v: W) {
        W::store(self, r.addr(), v)
    }

    /// Read the 32-bit registers `rs` together, each as [`Sram::reg`]
    /// would. What they publish is seen once all of them were read: a
    /// backing may load them plainly and order them with one Acquire
    /// fence after the last.
    #[inline]
    fn regs<const N: usize>(&self, rs: [Reg<u32>; N]) -> [u32; N] {
        rs.map(|r| self.reg(r))
    }
}

/// The byte range `[off, off + len)` of a backing of `size` bytes, if it
/// lies inside it.
#[inline]
pub fn span(size: usize, off: u32, len: usize) -> Option<core::ops::Range<usize>> {
    let start = off as usize;
    let end = start.checked_add(len)?;
    (end <= size).then_some(start..end)
}

/// A plain byte buffer: not shared, so plain loads and stores.
impl Sram for [u8] {
    #[inline]
    fn read(&self, off: u32, buf: &mut [u8]) {
        match span(self.len(), off, buf.len()) {
            Some(r) => buf.copy_from_slice(&self[r]),
            None => buf.fill(0),
        }
    }

    #[inline]
    fn write(&mut self, off: u32, data: &[u8]) {
        if let Some(r) = span(self.len(), off, data.len()) {
            self[r].copy_from_slice(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_little_endian_over_the_byte_methods() {
        let mut m = [0u8; 16];
        let s: &mut [u8] = &mut m;
        s.store_u32(4, 0x0403_0201);
        s.store_u64(8, 0x0807_0605_0403_0201);
        assert_eq!(&s[4..8], &[1, 2, 3, 4]);
        assert_eq!(&s[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s.load_u32(4), 0x0403_0201);
        assert_eq!(s.load_u64(8), 0x0807_0605_0403_0201);
    }

    #[test]
    fn out_of_range_reads_zero_and_writes_are_dropped() {
        let mut m = [7u8; 8];
        let s: &mut [u8] = &mut m;
        s.store_u32(6, 0xFFFF_FFFF);
        s.store_u64(u32::MAX, 1);
        assert_eq!(s, &[7u8; 8]);
        assert_eq!(s.load_u32(5), 0);
        assert_eq!(s.load_u64(u32::MAX - 2), 0);
        let mut b = [9u8; 3];
        s.read(7, &mut b);
        assert_eq!(b, [0; 3]);
    }
}
