//! The QEMU `virt` board's core-local interruptor (timer) and test device.
//! The MCP's RTC is derived from the CLINT's `mtime` (10 MHz).

use core::ptr::NonNull;
use volatile::access::ReadOnly;
use volatile::VolatilePtr;

/// `mtime`, free-running at `MTIME_HZ`.
const MTIME: usize = 0x0200_BFF8;
/// `mtimecmp` of hart 0.
const MTIMECMP: usize = 0x0200_4000;
pub const MTIME_HZ: u64 = 10_000_000;
/// The sifive_test device qemu-exit writes to.
pub const SIFIVE_TEST: u64 = 0x10_0000;

fn mtime_reg() -> VolatilePtr<'static, u64, ReadOnly> {
    // SAFETY: MTIME is the CLINT's memory-mapped timer register on QEMU
    // virt: always mapped, 8-aligned, only read here.
    unsafe { VolatilePtr::new_read_only(NonNull::new_unchecked(MTIME as *mut u64)) }
}

fn mtimecmp_reg() -> VolatilePtr<'static, u64> {
    // SAFETY: MTIMECMP is hart 0's CLINT compare register: always mapped,
    // 8-aligned; this one hart is its only user.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(MTIMECMP as *mut u64)) }
}

pub fn mtime() -> u64 {
    mtime_reg().read()
}

/// Sleep (wait for interrupt) for about `ticks` mtime ticks. Interrupts
/// stay globally disabled: the timer only ends the WFI, no trap is taken.
pub fn sleep(ticks: u64) {
    let at = mtime().wrapping_add(ticks);
    // Writing the compare register only schedules the timer interrupt
    // that ends the WFI below.
    mtimecmp_reg().write(at);
    // SAFETY: enabling the machine timer interrupt source; interrupts stay
    // globally disabled, so no trap is taken (the WFI just ends).
    unsafe { riscv::register::mie::set_mtimer() };
    riscv::asm::wfi();
    // Push the compare far away and mask the timer again.
    mtimecmp_reg().write(u64::MAX);
    // SAFETY: as above.
    unsafe { riscv::register::mie::clear_mtimer() };
}
