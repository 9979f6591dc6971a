//! A defmt global logger writing frames to the host over RISC-V
//! semihosting (QEMU `-semihosting`): `cargo xtask` decodes them with the
//! image's symbols. One hart and no interrupt handlers, so a flag is lock
//! enough.

use core::sync::atomic::{AtomicBool, Ordering};

#[defmt::global_logger]
struct Logger;

static TAKEN: AtomicBool = AtomicBool::new(false);
static mut ENCODER: defmt::Encoder = defmt::Encoder::new();

fn out(bytes: &[u8]) {
    if let Ok(mut s) = riscv_semihosting::hio::hstdout() {
        let _ = s.write_all(bytes);
    }
}

// SAFETY: acquire/release bracket every use of ENCODER, and TAKEN makes the
// bracket exclusive on this single hart without interrupt handlers.
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        if TAKEN.swap(true, Ordering::Acquire) {
            return;
        }
        // SAFETY: exclusive while TAKEN is held.
        unsafe { (*core::ptr::addr_of_mut!(ENCODER)).start_frame(out) }
    }

    unsafe fn flush() {}

    unsafe fn release() {
        // SAFETY: exclusive while TAKEN is held.
        unsafe { (*core::ptr::addr_of_mut!(ENCODER)).end_frame(out) }
        TAKEN.store(false, Ordering::Release);
    }

    unsafe fn write(bytes: &[u8]) {
        // SAFETY: exclusive while TAKEN is held.
        unsafe { (*core::ptr::addr_of_mut!(ENCODER)).write(bytes, out) }
    }
}

defmt::timestamp!("{=u64:us}", crate::clint::mtime() / 10);

/// Words a panic logs from the top of its stack.
const STACK_WORDS: usize = 32;

/// The `STACK_WORDS` words of the stack above this array (which the
/// caller, the panic handler, keeps in its own frame): the handler's
/// saved registers, then the frames of the functions that led to it.
/// Fewer near the top of the stack: those are zero.
#[inline(always)]
pub fn stack_words() -> [u64; STACK_WORDS] {
    extern "C" {
        static _stack_start: u8;
    }
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut w = [0u64; STACK_WORDS];
    let above = w.as_ptr() as usize + core::mem::size_of_val(&w);
    for (i, x) in w.iter_mut().enumerate() {
        let at = above + 8 * i;
        if at + 8 > top {
            break;
        }
        // SAFETY: `at` is 8-aligned (as the array is) and below the top of
        // the stack, which is mapped SRAM of this image.
        *x = unsafe { core::ptr::read_volatile(at as *const u64) };
    }
    w
}
