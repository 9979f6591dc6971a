//! The bare-metal MCP image: the portable MCP library (`mcp`) on the
//! emulated NIC CPU (riscv64imac, QEMU `virt`, RAM = NIC SRAM). This crate
//! is only the entry, the hardware interface over the CPU's own RAM, the
//! idle policy and logging; every state machine lives in `mcp`.
#![no_std]
#![no_main]

mod clint;
mod guard;
mod hw;
#[cfg(feature = "defmt")]
mod log;
mod pci;
#[cfg(feature = "selftest")]
mod selftest;

use core::panic::PanicInfo;
use mcp::Mcp;

/// The whole firmware state, in .bss (inside the IMAGE region of SRAM, as
/// on a LANai). A debugger reads `mcp_image::MCP.sdma.state` and friends.
#[no_mangle]
pub static mut MCP: Mcp = Mcp::new();

/// For this long after the last work (CLINT ticks, 10 MHz: 10 ms) the CPU
/// naps only `MIN_SLEEP` at a time, so a busy NIC answers within a nap;
/// after that the naps grow to `MAX_SLEEP`. Napping (WFI) instead of
/// spinning lets QEMU give the host core back: on a small machine a
/// spinning guest starves the device model and the host programs.
const SHORT_NAPS: u64 = 100_000;
/// Longest sleep while idle, in CLINT ticks (10 MHz): 1 ms.
const MAX_SLEEP: u64 = 10_000;
/// Shortest nap: 20 us.
const MIN_SLEEP: u64 = 200;

#[riscv_rt::entry]
fn main() -> ! {
    #[cfg(feature = "selftest")]
    selftest::run();

    guard::paint();
    let mut hw = hw::SramHw::new();
    // SAFETY: one hart, no interrupt handlers: this is the only reference
    // to MCP for the life of the program.
    let mcp = unsafe { &mut *core::ptr::addr_of_mut!(MCP) };
    if let Err(_e) = mcp.init(&mut hw) {
        // A plain string, not Debug formatting: core::fmt's machinery
        // would cost the image about 4 KiB of code for this one line.
        #[cfg(feature = "defmt")]
        defmt::error!("MCP init failed: {=str}", _e.reason());
        loop {
            clint::sleep(MAX_SLEEP);
        }
    }
    #[cfg(feature = "defmt")]
    defmt::info!("MCP running: node {} of {}", mcp.config().node, mcp.config().nodes);
    let mut last_work = clint::mtime();
    let mut sleep = MIN_SLEEP;
    loop {
        let w = mcp.poll(&mut hw);
        if !w.is_idle() {
            last_work = clint::mtime();
            sleep = MIN_SLEEP;
            continue;
        }
        if clint::mtime().wrapping_sub(last_work) < SHORT_NAPS {
            sleep = MIN_SLEEP;
        }
        if !guard::intact() {
            stack_overflow(&mut hw);
        }
        // Idle: sleep until the next timer or a bounded while, so an idle
        // NIC does not burn a host core. A doorbell is seen at the next wake.
        let mut ticks = sleep;
        if let Some(d) = mcp.next_deadline() {
            let now = hw.rtc_now();
            ticks = ticks.min(hw.rtc_to_clint(d.saturating_sub(now)).max(1));
        }
        clint::sleep(ticks);
        sleep = (sleep * 2).min(MAX_SLEEP);
    }
}

/// The stack reached its guard: the MCP's state below it may be
/// overwritten. Halt, saying so (the device process shows the halt).
fn stack_overflow(hw: &mut hw::SramHw) -> ! {
    use mcp::hw::Sram;
    hw.set_reg(nic_abi::regs::FW_STATUS, nic_abi::regs::FW_HALTED);
    #[cfg(feature = "defmt")]
    defmt::error!("stack overflow: the stack reached the guard above the MCP's data");
    qemu_exit_failure()
}

/// A panic: its message when it is a plain string (formatting one would
/// pull `core::fmt` into the image) and the words at the top of the stack.
/// The panic's location is not kept in the image (a location record per
/// panic site cost 8 KB): among those words are the return addresses of
/// the frames that led here, and `cargo xtask logs` maps them to function,
/// file and line with the image's DWARF.
#[panic_handler]
fn panic(_info: &PanicInfo) -> ! {
    #[cfg(feature = "defmt")]
    {
        defmt::error!("panic [stack {=[?]:#x}]", &log::stack_words()[..]);
    }
    qemu_exit_failure()
}

pub fn qemu_exit_failure() -> ! {
    use qemu_exit::QEMUExit;
    qemu_exit::RISCV64::new(clint::SIFIVE_TEST).exit_failure()
}

pub fn qemu_exit_success() -> ! {
    use qemu_exit::QEMUExit;
    qemu_exit::RISCV64::new(clint::SIFIVE_TEST).exit_success()
}
