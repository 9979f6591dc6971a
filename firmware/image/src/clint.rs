//! The QEMU `virt` board's core-local interruptor (timer, software
//! interrupt) and test device. The MCP's RTC is derived from the CLINT's
//! `mtime` (10 MHz).

use core::ptr::NonNull;
use volatile::VolatilePtr;

/// `msip` of hart 0: writing 1 raises its machine software interrupt,
/// 0 clears it. The register device's MSI-X message writes 1 here
/// (`pci::enable_doorbell`).
pub const MSIP: usize = 0x0200_0000;
/// `mtimecmp` of hart 0.
const MTIMECMP: usize = 0x0200_4000;
pub const MTIME_HZ: u64 = 10_000_000;
/// The sifive_test device qemu-exit writes to.
pub const SIFIVE_TEST: u64 = 0x10_0000;

fn mtimecmp_reg() -> VolatilePtr<'static, u64> {
    // SAFETY: MTIMECMP is hart 0's CLINT compare register: always mapped,
    // 8-aligned; this one hart is its only user.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(MTIMECMP as *mut u64)) }
}

fn msip_reg() -> VolatilePtr<'static, u32> {
    // SAFETY: MSIP is hart 0's CLINT software-interrupt register: always
    // mapped, 4-aligned.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(MSIP as *mut u32)) }
}

/// `mtime`, through the `time` CSR: QEMU answers it from the CLINT's
/// clock in the CPU's own thread, where a load of the register is an
/// access to a device, under QEMU's global lock.
pub fn mtime() -> u64 {
    riscv::register::time::read64()
}

/// Clear a software interrupt left pending by the last doorbell. Before
/// the CPU says it waits (`regs::IRQ_WAIT`): a doorbell after that must
/// stay pending and end the WFI. Done then rather than at the wake, where
/// it would delay the pass that follows: a CLINT store takes QEMU's
/// global lock.
pub fn clear_doorbell() {
    if riscv::register::mip::read().msoft() {
        msip_reg().write(0);
    }
}

/// Wait for an interrupt: the software interrupt (the device's doorbell)
/// if `doorbell`, the timer at mtime `until` if given. Interrupts stay
/// globally disabled: a pending source only ends the WFI, no trap is
/// taken. Returns with both sources masked; a doorbell stays pending
/// (`clear_doorbell`), and so may the timer, masked until the next wait
/// with a deadline writes the compare register again.
pub fn wait(doorbell: bool, until: Option<u64>) {
    use riscv::register::mie;
    if let Some(at) = until {
        // Writing the compare register only schedules the timer
        // interrupt that ends the WFI below.
        mtimecmp_reg().write(at);
        // SAFETY: enabling an interrupt source while interrupts are
        // globally disabled: no trap is taken (the WFI just ends).
        unsafe { mie::set_mtimer() };
    }
    if doorbell {
        // SAFETY: as above.
        unsafe { mie::set_msoft() };
    }
    riscv::asm::wfi();
    #[cfg(feature = "poll-stats")]
    crate::poll_stats::woke(riscv::register::mip::read().bits());
    // SAFETY: masking the sources again.
    unsafe {
        mie::clear_mtimer();
        mie::clear_msoft();
    }
}

/// Sleep (wait for interrupt) for about `ticks` mtime ticks.
pub fn sleep(ticks: u64) {
    wait(false, Some(mtime().wrapping_add(ticks)));
}
