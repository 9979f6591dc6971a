//! `mcp::hw::Hw` (SRAM access, `nic_abi::sram::Sram`, and the RTC) over
//! the NIC CPU's own RAM: SRAM is guest RAM at
//! `SRAM_BASE`, shared (a file mapping) with the device model in nic-emu,
//! except the register page and the port windows: files of their own,
//! seen as PCI devices at `pci::MMIO_BASE + offset` when QEMU has them
//! (`pci.rs`; RAM too otherwise).
//! The words of the register page and the port windows, which publish
//! (counters, producer indices, switches), are accessed as atomics with
//! Acquire/Release; the other words (RAM: rings, buffers, the firmware's
//! tables) with volatile loads and stores, no fence: what they hold is
//! published by a register; byte ranges with one memcpy per run of one place (a
//! volatile loop ran several instructions a byte, and under QEMU the NIC
//! CPU's time is its instructions). Every access is bounds-checked
//! against the SRAM size the device model configured.

use crate::{clint, pci};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use mcp::hw::{Hw, Sram};
use nic_abi::{map, regs, NUM_PORTS};

const SRAM_BASE: usize = 0x8000_0000;

pub struct SramHw {
    size: u32,
    rtc_hz: u64,
    /// mtime to RTC ticks, worked out once from the two rates
    /// ([`RtcScale::of`]): the RTC is read at the start of every pass.
    rtc_scale: RtcScale,
    /// Guest address of SRAM offset 0 for the register page and the port
    /// windows: `pci::MMIO_BASE` once their BARs are mapped, else SRAM_BASE.
    files: usize,
}

impl SramHw {
    /// Maps the register page and port windows first (`pci::map_files`):
    /// the SRAM size and the clock rate are registers.
    pub fn new() -> SramHw {
        let files = if pci::map_files() { pci::MMIO_BASE } else { SRAM_BASE };
        let mut hw = SramHw {
            size: map::SRAM_MIN,
            rtc_hz: clint::MTIME_HZ,
            rtc_scale: RtcScale::of(clint::MTIME_HZ, clint::MTIME_HZ),
            files,
        };
        let size = hw.load_u32(regs::reg(regs::SRAM_SIZE));
        if size >= map::SRAM_MIN {
            hw.size = size;
        }
        let hz = hw.load_u64(regs::reg(regs::RTC_HZ));
        if hz != 0 {
            hw.rtc_hz = hz;
            hw.rtc_scale = RtcScale::of(hz, clint::MTIME_HZ);
        }
        hw
    }

    /// Guest address of SRAM offset 0 for the register page and the port
    /// windows (the self-test looks there behind the interface's back).
    #[cfg(feature = "selftest")]
    pub fn files_base(&self) -> usize {
        self.files
    }

    /// Guest address of SRAM offset `off`: in RAM ([`SramHw::in_ram`]) at
    /// `SRAM_BASE`, in the register page or a port window at the files'
    /// base. REGS and PORTS are 4 KiB aligned, so an aligned word never
    /// straddles a region's edge. With a constant `off` (a register, a
    /// field of a fixed record) the choice folds away: the address is one
    /// add.
    #[inline(always)]
    fn addr(&self, off: usize) -> usize {
        (if Self::in_ram(off) { SRAM_BASE } else { self.files }) + off
    }

    /// Is SRAM offset `off` in RAM (not the register page or a port
    /// window)? An offset outside `REGS..FILES_END` (the MCP's records,
    /// buffers and rings: nearly every offset not a constant) is RAM
    /// after one compare; the RAM between the page and the windows is
    /// told apart only inside that span. RAM's words are the firmware's,
    /// or the device's published by a register (a ring's entries before
    /// its producer count, a buffer before its completion): they are read
    /// and written with plain loads and stores, and only the registers
    /// and the port windows' words, which publish, with Acquire and
    /// Release. With a constant `off` this folds away.
    #[inline(always)]
    fn in_ram(off: usize) -> bool {
        const REGS_END: usize = (map::REGS + map::REGS_SIZE) as usize;
        off.wrapping_sub(map::REGS as usize) >= FILES_END - map::REGS as usize
            || (off >= REGS_END && off < map::PORTS as usize)
    }

    /// Is `off..off + len` inside SRAM? Every SRAM is at least
    /// `map::SRAM_MIN` long, so a range below that needs no look at the
    /// configured size: with constant operands the check folds away.
    #[inline(always)]
    fn ok(&self, off: u32, len: usize) -> bool {
        match (off as usize).checked_add(len) {
            Some(e) => e <= map::SRAM_MIN as usize || e <= self.size as usize,
            None => false,
        }
    }

    /// The guest address of `off..end` when it lies in one place (all
    /// RAM, or all in the port windows), the usual case: one copy.
    #[inline(always)]
    fn place(&self, off: usize, end: usize) -> Option<usize> {
        const REGS_END: usize = (map::REGS + map::REGS_SIZE) as usize;
        let ram = off >= FILES_END
            || end <= map::REGS as usize
            || (off >= REGS_END && end <= map::PORTS as usize);
        if ram {
            Some(SRAM_BASE + off)
        } else if off >= map::PORTS as usize && end <= FILES_END {
            Some(self.files + off)
        } else {
            None
        }
    }

    /// `read` of a range over more than one place: a copy per run.
    #[inline(never)]
    fn read_runs(&self, off: u32, buf: &mut [u8]) {
        let mut at = 0;
        while at < buf.len() {
            let o = off as usize + at;
            let n = run_end(o, off as usize + buf.len()) - o;
            copy_in(self.addr(o), &mut buf[at..at + n]);
            at += n;
        }
    }

    /// `write` of a range over more than one place: a copy per run.
    #[inline(never)]
    fn write_runs(&mut self, off: u32, data: &[u8]) {
        let mut at = 0;
        while at < data.len() {
            let o = off as usize + at;
            let n = run_end(o, off as usize + data.len()) - o;
            copy_out(self.addr(o), &data[at..at + n]);
            at += n;
        }
    }

    /// Are the register page and the port windows QEMU's PCI devices?
    pub fn mapped(&self) -> bool {
        self.files == pci::MMIO_BASE
    }

    /// The RTC in ticks of RTC_HZ, from the CLINT's mtime.
    pub fn rtc_now(&self) -> u64 {
        self.rtc_at(clint::mtime())
    }

    /// The RTC at mtime `t`.
    #[inline(always)]
    pub fn rtc_at(&self, t: u64) -> u64 {
        match self.rtc_scale {
            RtcScale::Times(k) => t.wrapping_mul(k),
            RtcScale::Over { inverse } => mul_high(t, inverse),
            RtcScale::Ratio => scale(t, self.rtc_hz, clint::MTIME_HZ),
        }
    }

    pub fn rtc_to_clint(&self, ticks: u64) -> u64 {
        scale(ticks, clint::MTIME_HZ, self.rtc_hz)
    }
}

/// Where the register page and the port windows end: everything from
/// here on is RAM (most of what the MCP copies: its caches, records,
/// buffers).
const FILES_END: usize = map::PORTS as usize + NUM_PORTS * map::PORT_WINDOW as usize;

/// The end of the run of SRAM offsets from `off` (below `end`) that lie
/// in one place: RAM, or one of the files (the register page, the port
/// windows), whose edges are the runs' edges.
fn run_end(off: usize, end: usize) -> usize {
    const REGS: usize = map::REGS as usize;
    const EDGES: [usize; 4] =
        [REGS, REGS + map::REGS_SIZE as usize, map::PORTS as usize, FILES_END];
    if off >= FILES_END {
        return end;
    }
    let mut e = end;
    for x in EDGES {
        if x > off && x < e {
            e = x;
        }
    }
    e
}

/// Copy from guest address `src` into `dst`.
#[inline(always)]
fn copy_in(src: usize, dst: &mut [u8]) {
    // SAFETY: `src..src + len` is inside SRAM (the caller checked the
    // range), this CPU's RAM, or inside a BAR `pci::map_files` mapped
    // (RAM-backed): mapped and readable; `dst` is ours, apart from it.
    // Others may write those bytes meanwhile: a range being written may
    // be copied half old, half new, as the device's own copies may; a
    // record is read only after the Acquire load of the counter that
    // published it (a Release store after the record was written). One
    // memcpy: words where it can, a fraction of a volatile byte loop's
    // instructions, which under QEMU are the NIC CPU's time.
    unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) }
}

/// Copy `src` to guest address `dst`, as `copy_in` reads.
#[inline(always)]
fn copy_out(dst: usize, src: &[u8]) {
    // SAFETY: as in `copy_in`, the other way: `dst..dst + len` is mapped
    // SRAM or BAR memory, written before the Release store that
    // publishes it.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) }
}

/// How mtime turns into RTC ticks, from the two clock rates: where one
/// rate is a whole multiple of the other (every profile's is: the RTC at
/// 2 MHz is mtime's 10 MHz over 5, at 100 MHz times 10) one multiply, not
/// the two divisions of the general [`scale`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RtcScale {
    /// The RTC runs `k` times as fast as mtime (1: the same clock).
    Times(u64),
    /// mtime runs `k` times as fast as the RTC (`k` from 2 to 1,000):
    /// `t / k` is the high word of `t * inverse`, `inverse` =
    /// ceil(2^64 / k). The rounded-up inverse adds under one k-th of a
    /// tick while `t` is below 2^64 / k: exact for 58 years of mtime at
    /// 10 MHz with `k` = 1,000, 11,700 years with the profiles' 5.
    Over { inverse: u64 },
    /// Neither: [`scale`].
    Ratio,
}

impl RtcScale {
    /// The scale from mtime at `den` Hz to an RTC at `num` Hz.
    fn of(num: u64, den: u64) -> RtcScale {
        if num.is_multiple_of(den) {
            RtcScale::Times(num / den)
        } else if den.is_multiple_of(num) && den / num <= 1_000 {
            let k = den / num;
            // k >= 2 here: ceil(2^64 / k) fits 64 bits.
            let inverse = ((1u128 << 64).div_ceil(k as u128)) as u64;
            RtcScale::Over { inverse }
        } else {
            RtcScale::Ratio
        }
    }
}

/// The high word of the 128-bit product `a * b` (one `mulhu`).
#[inline(always)]
fn mul_high(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 64) as u64
}

/// `x * num / den` rounded down, in 64-bit arithmetic (no 128-bit
/// division routine in the image): exact while `(den - 1) * num` fits
/// 64 bits, which holds for any clock rate below 1.8 THz.
fn scale(x: u64, num: u64, den: u64) -> u64 {
    let (q, r) = (x / den, x % den);
    q.wrapping_mul(num).wrapping_add(r.saturating_mul(num) / den)
}

/// The SRAM offset a word access of `W` bytes at `off` uses: `off`
/// itself for every word of the MCP's map (all below `map::SRAM_MIN`, a
/// power of two that every SRAM has, and aligned); any other offset,
/// which only a bug in the MCP could make (the simulator and the tests
/// count such accesses as faults, and the scenario runs assert there are
/// none), wraps into that first part of SRAM, aligned down. One AND and
/// no branch, where a bounds and an alignment check cost five to eight
/// instructions on every access; and never outside SRAM.
#[inline(always)]
fn word<const W: u32>(off: u32) -> usize {
    (off & (map::SRAM_MIN - W)) as usize
}

const _: () = assert!(map::SRAM_MIN.is_power_of_two() && map::MAP_END <= map::SRAM_MIN);

// Every accessor is inlined: with a constant offset a word access is one
// load or store (and its fence), a byte range one memcpy.
impl Sram for SramHw {
    #[inline(always)]
    fn read(&self, off: u32, buf: &mut [u8]) {
        if !self.ok(off, buf.len()) {
            buf.fill(0);
            return;
        }
        match self.place(off as usize, off as usize + buf.len()) {
            Some(a) => copy_in(a, buf),
            None => self.read_runs(off, buf),
        }
    }

    #[inline(always)]
    fn write(&mut self, off: u32, data: &[u8]) {
        if !self.ok(off, data.len()) {
            return;
        }
        match self.place(off as usize, off as usize + data.len()) {
            Some(a) => copy_out(a, data),
            None => self.write_runs(off, data),
        }
    }

    #[inline(always)]
    fn load_u32(&self, off: u32) -> u32 {
        let off = word::<4>(off);
        if Self::in_ram(off) {
            // SAFETY: in bounds and aligned, in this CPU's RAM. A volatile
            // load: one load instruction, never merged with another or
            // taken from what this code stored there (the device or the
            // host may have written the word since); what it reads was
            // published by a register read with Acquire before it.
            return unsafe { ((SRAM_BASE + off) as *const u32).read_volatile() };
        }
        // SAFETY: in bounds and 4-aligned, in RAM or a mapped BAR as in
        // `copy_in`; the register page's and the port windows' words, which
        // publish, are accessed only atomically.
        unsafe { (*(self.addr(off) as *const AtomicU32)).load(Ordering::Acquire) }
    }

    #[inline(always)]
    fn store_u32(&mut self, off: u32, v: u32) {
        let off = word::<4>(off);
        if Self::in_ram(off) {
            // SAFETY: in bounds and aligned, in this CPU's RAM; a volatile
            // store (one store instruction, never dropped), published to
            // the device or the host, where they read it, by a Release
            // store of a register after it.
            unsafe { ((SRAM_BASE + off) as *mut u32).write_volatile(v) };
            return;
        }
        // SAFETY: as in `load_u32`.
        unsafe { (*(self.addr(off) as *const AtomicU32)).store(v, Ordering::Release) }
    }

    #[inline(always)]
    fn load_ram_u64(&self, off: u32) -> u64 {
        // SAFETY: `word` keeps the offset inside SRAM, aligned; RAM is this
        // CPU's, read with a volatile load as in `load_u64` (a caller
        // names only RAM here: the sim counts it a fault otherwise).
        unsafe { ((SRAM_BASE + word::<8>(off)) as *const u64).read_volatile() }
    }

    #[inline(always)]
    fn store_ram_u64(&mut self, off: u32, v: u64) {
        // SAFETY: as in `load_ram_u64`, a volatile store as in `store_u64`.
        unsafe { ((SRAM_BASE + word::<8>(off)) as *mut u64).write_volatile(v) }
    }

    /// Relaxed loads, then one Acquire fence: the registers of the page
    /// are at constant offsets, so each is a load at the page's base.
    #[inline(always)]
    fn regs<const N: usize>(&self, rs: [regs::Reg<u32>; N]) -> [u32; N] {
        let v = rs.map(|r| {
            let off = r.addr();
            if !self.ok(off, 4) || !off.is_multiple_of(4) {
                return 0;
            }
            // SAFETY: as in `load_u32`; the fence below orders what the
            // registers publish after all of them.
            unsafe { (*(self.addr(off as usize) as *const AtomicU32)).load(Ordering::Relaxed) }
        });
        core::sync::atomic::fence(Ordering::Acquire);
        v
    }

    #[inline(always)]
    fn load_u64(&self, off: u32) -> u64 {
        let off = word::<8>(off);
        if Self::in_ram(off) {
            // SAFETY: in bounds and aligned, in this CPU's RAM. A volatile
            // load: one load instruction, never merged with another or
            // taken from what this code stored there (the device or the
            // host may have written the word since); what it reads was
            // published by a register read with Acquire before it.
            return unsafe { ((SRAM_BASE + off) as *const u64).read_volatile() };
        }
        // SAFETY: in bounds and 8-aligned, as in `load_u32`.
        unsafe { (*(self.addr(off) as *const AtomicU64)).load(Ordering::Acquire) }
    }

    #[inline(always)]
    fn store_u64(&mut self, off: u32, v: u64) {
        let off = word::<8>(off);
        if Self::in_ram(off) {
            // SAFETY: in bounds and aligned, in this CPU's RAM; a volatile
            // store (one store instruction, never dropped), published to
            // the device or the host, where they read it, by a Release
            // store of a register after it.
            unsafe { ((SRAM_BASE + off) as *mut u64).write_volatile(v) };
            return;
        }
        // SAFETY: as in `load_u64`.
        unsafe { (*(self.addr(off) as *const AtomicU64)).store(v, Ordering::Release) }
    }
}

impl Hw for SramHw {
    #[inline(always)]
    fn rtc(&self) -> u64 {
        self.rtc_now()
    }
}
