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
