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
use mcp::hw::Sram;
use mcp::Mcp;

/// The whole firmware state, in .bss (inside the IMAGE region of SRAM, as
/// on a LANai). A debugger reads `mcp_image::MCP.sdma.state` and friends.
#[no_mangle]
pub static mut MCP: Mcp = Mcp::new();

/// How long the CPU goes on polling after the last work before it waits
/// for an interrupt, in CLINT ticks (10 MHz): adapted between these
/// bounds, as a guest's halt-polling is. A wait that ended sooner than
/// `POLL_MAX` would have been caught by polling longer: the window
/// doubles (from `POLL_START`); a longer wait halves it. Polling catches a
/// DMA completion or a host's quick answer without the interrupt's two
/// thread hand-offs in QEMU (about 25 us); a longer window costs more than
/// it saves on a small machine, where a polling guest keeps the other
/// NICs' guests and the device thread off its core (windows up to 100 or
/// 200 us: 1.6 and 2.9 times the one-way latency; docs/design/performance.md).
const POLL_START: u64 = 50; // 5 us
const POLL_MAX: u64 = 300; // 30 us
/// A wait for rate control's next dispatch time ends this early, and the
/// rest is polled: a timer interrupt wakes the CPU about as late as a
/// doorbell (two thread hand-offs in QEMU), and a paced stream, which
/// waits on the timer between its packets, would be that much slower
/// than its IDT. (Other timers are waited for plainly: polling towards
/// them keeps the other NICs' guests off a shared core, and the 8-byte
/// one-way time went from 80 to 87 us when every timer was.)
const DISPATCH_LEAD: u64 = 300; // 30 us
/// Without the doorbell (an `ivshmem-plain` register page): naps on the
/// timer instead, of 20 us for `SHORT_NAPS` (10 ms) after the last work,
/// then doubling up to 1 ms, so a doorbell is seen at the next wake.
const SHORT_NAPS: u64 = 100_000;
const MAX_SLEEP: u64 = 10_000;
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
    let doorbell = hw.mapped() && pci::enable_doorbell();
    let mut last_work = clint::mtime();
    let mut window = POLL_START;
    let mut sleep = MIN_SLEEP;
    let mut wait = 0u32;
    // What a pass did: zero at the start of each (a pass that did nothing
    // left it zero).
    let mut work = mcp::Work::default();
    // After an idle pass (with the doorbell): the device's counters as
    // they were before it, and the mtime of the MCP's next timer. Until
    // one of them moves or the timer falls due, a pass would be idle too:
    // the CPU watches those four words instead of running one.
    let mut quiet: Option<([u32; 4], u64)> = None;
    // With `quiet`: the mtime of rate control's next dispatch.
    let mut pace = u64::MAX;
    loop {
        let now = clint::mtime();
        match quiet {
            Some((seen, due)) if news(&hw) == seen && now < due => {}
            _ => {
                let seen = news(&hw);
                if poll(mcp, &mut hw, &mut work) {
                    last_work = now;
                    sleep = MIN_SLEEP;
                    quiet = None;
                    continue;
                }
                let due = until(mcp, &hw, now).map_or(u64::MAX, |t| now + t);
                pace = mcp.next_dispatch().map_or(u64::MAX, |d| now + to_clint(&hw, d, now));
                quiet = doorbell.then_some((seen, due));
            }
        }
        let idle = now.wrapping_sub(last_work);
        if doorbell && idle < window {
            continue;
        }
        if quiet.is_some() && pace.saturating_sub(now) <= DISPATCH_LEAD {
            // The dispatch time comes before a wait's wake-up would.
            continue;
        }
        if !guard::intact() {
            stack_overflow(&mut hw);
        }
        let Some((seen, due)) = quiet else {
            // No doorbell: timer naps; news is seen at the next wake.
            if idle < SHORT_NAPS {
                sleep = MIN_SLEEP;
            }
            let due = until(mcp, &hw, now).unwrap_or(u64::MAX);
            clint::wait(false, Some(now + sleep.min(due)));
            sleep = (sleep * 2).min(MAX_SLEEP);
            continue;
        };
        // Tell the device we are about to wait (odd), then look once
        // more: whatever it does or sees from now on raises the doorbell,
        // and what it did before, the counters show.
        clint::clear_doorbell();
        wait = wait.wrapping_add(1);
        hw.set_reg(nic_abi::regs::IRQ_WAIT, wait);
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        let from = clint::mtime();
        let again = news(&hw) != seen;
        if !again {
            let wake = due.min(pace.saturating_sub(DISPATCH_LEAD));
            clint::wait(true, (wake != u64::MAX).then_some(wake));
        }
        wait = wait.wrapping_add(1);
        hw.set_reg(nic_abi::regs::IRQ_WAIT, wait);
        last_work = clint::mtime();
        // Halt-polling's rule: a short wait asks for a longer window.
        window = if again {
            window
        } else if last_work.wrapping_sub(from) < POLL_MAX {
            (window * 2).min(POLL_MAX)
        } else {
            (window / 2).max(POLL_START)
        };
    }
}

/// What the device did and saw: the engines' completion counters and its
/// count of host writes (`regs::HOST_WRITES`). A pass after which none of
/// them moved, and no timer fell due, finds nothing new.
fn news(hw: &hw::SramHw) -> [u32; 4] {
    use nic_abi::regs::*;
    [HDMA_DONE, TXDMA_DONE, RXDONE_PROD, HOST_WRITES].map(|r| hw.reg(r))
}

/// One pass of the MCP; true if it did something (`work`: zero before,
/// zero after).
#[cfg_attr(not(feature = "poll-stats"), inline(always))]
#[cfg_attr(feature = "poll-stats", inline(never))]
fn poll(mcp: &mut Mcp, hw: &mut hw::SramHw, work: &mut mcp::Work) -> bool {
    #[cfg(feature = "poll-stats")]
    let t = riscv::register::minstret::read64();
    mcp.poll_into(hw, work);
    let busy = mcp.busy();
    #[cfg(feature = "poll-stats")]
    {
        // (The count first: what the record reads is not the pass's.)
        let n = riscv::register::minstret::read64().wrapping_sub(t);
        poll_stats::record(busy, mcp.pass_kind(), mcp.pass_cause(), n, work);
    }
    if busy {
        *work = mcp::Work::default();
    }
    busy
}

/// The cost of each pass of the MCP (`--features poll-stats`, for
/// measuring, not for flashing): `minstret` before and after, which
/// QEMU counts in guest instructions under `-icount shift=0` (else in
/// host cycles), and the sum of the work they did. gdb: `print
/// mcp_image::poll_stats::POLL_STATS`; `cargo xtask bench --firmware`
/// reads these statics from the guest's RAM (the symbols' addresses, the
/// layout of `mcp::Work` from the image's debug information).
#[cfg(feature = "poll-stats")]
pub mod poll_stats {
    /// Idle passes, then passes that did work: count, sum, min, max.
    #[no_mangle]
    pub static mut POLL_STATS: [[u64; 4]; 2] = [[0, 0, u64::MAX, 0]; 2];
    /// Idle, then busy passes by cost: bin i counts the passes of
    /// 256 i to 256 i + 255 (the last: all above).
    #[no_mangle]
    pub static mut POLL_HIST: [[u32; 128]; 2] = [[0; 128]; 2];

    /// Passes by what they ran (`mcp::PassKind`: quiet, completions,
    /// whole), then by whether they did work: count, instruction sum.
    #[no_mangle]
    pub static mut POLL_KINDS: [[[u64; 2]; 2]; 3] = [[[0; 2]; 2]; 3];

    /// Passes by why they ran, then by whether they did work: count,
    /// instruction sum. Entry 0 is a quiet pass that read the summary and
    /// nothing more, entry `c` (1 to 3) a completions pass of cause `c`,
    /// 64 + `c` a quiet pass that took or left completions `c`, 128 + `c`
    /// a whole pass of cause `c` (`mcp::Mcp::pass_cause`: the news bits,
    /// the timer, work left).
    #[no_mangle]
    pub static mut POLL_CAUSES: [[[u64; 2]; 2]; 256] = [[[0; 2]; 2]; 256];

    /// Waits ended by: the software interrupt (the doorbell), the
    /// timer, both, neither.
    #[no_mangle]
    pub static mut WAKES: [u64; 4] = [0; 4];

    pub fn woke(mip: usize) {
        let i = match (mip & 1 << 3 != 0, mip & 1 << 7 != 0) {
            (true, false) => 0,
            (false, true) => 1,
            (true, true) => 2,
            _ => 3,
        };
        // SAFETY: one hart, no interrupt handlers: the only access.
        unsafe { (*core::ptr::addr_of_mut!(WAKES))[i] += 1 };
    }

    /// The sum of the `mcp::Work` every pass returned (each field wraps at
    /// its width: a reader subtracts two readings in that width).
    #[no_mangle]
    // SAFETY: `Work` is plain integers, for which all zero bytes are valid.
    pub static mut POLL_WORK: mcp::Work = unsafe { core::mem::zeroed() };

    #[inline(never)]
    pub fn record(busy: bool, kind: mcp::PassKind, cause: u32, n: u64, work: &mcp::Work) {
        // SAFETY: one hart, no interrupt handlers: the only access.
        let w = unsafe { &mut *core::ptr::addr_of_mut!(POLL_WORK) };
        // (Release builds wrap on overflow: a reader subtracts readings.)
        if busy {
            w.add(work);
        }
        // SAFETY: one hart, no interrupt handlers: the only access.
        let s = unsafe { &mut (*core::ptr::addr_of_mut!(POLL_STATS))[busy as usize] };
        s[0] += 1;
        s[1] += n;
        s[2] = s[2].min(n);
        s[3] = s[3].max(n);
        // SAFETY: as above.
        let h = unsafe { &mut (*core::ptr::addr_of_mut!(POLL_HIST))[busy as usize] };
        h[((n / 256) as usize).min(127)] += 1;
        // SAFETY: as above.
        let k = unsafe { &mut (*core::ptr::addr_of_mut!(POLL_KINDS))[kind as usize][busy as usize] };
        k[0] += 1;
        k[1] += n;
        // Whole passes from 128, quiet passes that took completions from
        // 64 (no pass short of a whole one has work left: bit 6 is free).
        let at = (cause & 63) as usize
            | match kind {
                mcp::PassKind::Whole => 128 | (cause & 64) as usize,
                mcp::PassKind::Quiet if cause != 0 => 64,
                _ => 0,
            };
        // SAFETY: as above.
        let c = unsafe { &mut (*core::ptr::addr_of_mut!(POLL_CAUSES))[at][busy as usize] };
        c[0] += 1;
        c[1] += n;
    }
}

/// CLINT ticks from `now` to the MCP's next timer (at least 1), if any.
fn until(mcp: &Mcp, hw: &hw::SramHw, now: u64) -> Option<u64> {
    Some(to_clint(hw, mcp.next_deadline()?, now))
}

/// CLINT ticks from `now` to RTC tick `d` (at least 1).
fn to_clint(hw: &hw::SramHw, d: u64, now: u64) -> u64 {
    let rtc = hw.rtc_at(now);
    hw.rtc_to_clint(d.saturating_sub(rtc)).max(1)
}

/// The stack reached its guard: the MCP's state below it may be
/// overwritten. Halt, saying so (the device process shows the halt).
fn stack_overflow(hw: &mut hw::SramHw) -> ! {
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
