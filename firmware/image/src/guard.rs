//! A guard at the bottom of the stack: the stack grows down from the top
//! of the IMAGE region towards the firmware's data (`_estack` is its
//! lowest address, right above .bss). Nothing checks a bare-metal stack;
//! an overflow would write over the MCP's own state and leave a NIC that
//! runs on garbage. So the lowest `WORDS` words hold a known pattern from
//! boot on, and the main loop looks at them when it naps: a word changed
//! means the stack reached there, and the NIC halts saying so instead.

use core::ptr::addr_of;

/// Words of the guard (512 bytes).
const WORDS: usize = 64;
const PATTERN: u64 = 0x5AFE_57AC_0B0B_CAFE;

extern "C" {
    /// The lowest address of the stack (riscv-rt's linker script).
    static _estack: u64;
}

fn base() -> *mut u64 {
    // Only the symbol's address is taken, never its value.
    addr_of!(_estack) as *mut u64
}

/// Write the pattern (at boot, while the stack is near its top).
pub fn paint() {
    for i in 0..WORDS {
        // SAFETY: the guard is the lowest `WORDS` words of the stack
        // region, RAM this CPU owns and nothing else uses while the stack
        // is shallow (riscv-rt sizes the region; it is 138 KiB).
        unsafe { base().add(i).write_volatile(PATTERN) };
    }
}

/// Is the guard as painted (the stack never reached it)?
pub fn intact() -> bool {
    // SAFETY: as in `paint`: reads of the stack region's lowest words.
    (0..WORDS).all(|i| unsafe { base().add(i).read_volatile() } == PATTERN)
}
