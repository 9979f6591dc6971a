//! The QEMU `virt` board's core-local interruptor (timer) and test device.
//! The MCP's RTC is derived from the CLINT's `mtime` (10 MHz).

/// `mtime`, free-running at `MTIME_HZ`.
const MTIME: usize = 0x0200_BFF8;
/// `mtimecmp` of hart 0.
const MTIMECMP: usize = 0x0200_4000;
pub const MTIME_HZ: u64 = 10_000_000;
/// The sifive_test device qemu-exit writes to.
pub const SIFIVE_TEST: u64 = 0x10_0000;

pub fn mtime() -> u64 {
    // SAFETY: MTIME is the CLINT's memory-mapped timer register on QEMU
    // virt, always mapped and readable.
    unsafe { core::ptr::read_volatile(MTIME as *const u64) }
}

/// Sleep (wait for interrupt) for about `ticks` mtime ticks. Interrupts
/// stay globally disabled: the timer only ends the WFI, no trap is taken.
pub fn sleep(ticks: u64) {
    let at = mtime().wrapping_add(ticks);
    // SAFETY: MTIMECMP is hart 0's CLINT compare register; writing it only
    // schedules the timer interrupt that ends the WFI below.
    unsafe {
        core::ptr::write_volatile(MTIMECMP as *mut u64, at);
        riscv::register::mie::set_mtimer();
    }
    riscv::asm::wfi();
    // SAFETY: as above; push the compare far away and mask the timer again.
    unsafe {
        core::ptr::write_volatile(MTIMECMP as *mut u64, u64::MAX);
        riscv::register::mie::clear_mtimer();
    }
}
