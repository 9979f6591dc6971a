//! The transition trace (a ring in SRAM, when tracing is on) and the
//! counters (in SRAM, bumped in place).

use crate::hw::Hw;
use nic_abi::map;
use nic_abi::regs;
use nic_abi::stats::{stat_offset, Stat, ALL_STATS, STAT_COUNT};
use nic_abi::trace::{Cause, Machine, TraceRecord, TRACE_RECORD_SIZE};
use nic_abi::NUM_PORTS;

/// A machine's state enum, as the trace ring records it.
pub trait MachineState: Copy + PartialEq {
    const MACHINE: Machine;
    /// The state's code in trace records.
    fn code(&self) -> u8;
    /// The operand a trace record carries.
    fn arg(&self) -> u32;
}

/// The transition trace ring in SRAM (when TRACE_ENABLE is set).
pub struct Trace {
    pub on: bool,
    pub(super) prod: u32,
}

impl Trace {
    /// One record: `machine` went from state `from` to `to` because of
    /// `cause`; `arg` is the new state's main operand.
    pub fn record(
        &mut self,
        hw: &mut impl Hw,
        now: u64,
        machine: Machine,
        (from, to): (u8, u8),
        cause: Cause,
        arg: u32,
    ) {
        if !self.on {
            return;
        }
        let rec = TraceRecord { rtc: now, machine, from, to, cause, arg };
        let mut b = [0u8; TRACE_RECORD_SIZE as usize];
        rec.encode(&mut b);
        let off = map::TRACE + (self.prod % map::TRACE_LEN) * TRACE_RECORD_SIZE;
        hw.write(off, &b);
        self.prod = self.prod.wrapping_add(1);
        hw.set_reg(regs::TRACE_PROD, self.prod);
    }
}

/// The NIC's counters. They live in SRAM (`map::STATS`, which the host
/// reads) and are bumped there in place: no copy to keep and write back
/// at the end of a pass.
pub struct Stats;

/// Counts kept for [`Stats::flush`].
pub struct Deferred {
    counts: [u64; STAT_COUNT],
    /// A bit per counter with a count kept.
    dirty: u64,
}

impl Deferred {
    pub const fn new() -> Deferred {
        Deferred { counts: [0; STAT_COUNT], dirty: 0 }
    }
}

const _: () = assert!(STAT_COUNT <= 64, "a dirty bit per counter");
const _: () = assert!(NUM_PORTS <= 8, "an owed-events bit per port");

impl Stats {
    #[inline(always)]
    pub fn bump(hw: &mut impl Hw, s: Stat, n: u64) {
        Self::add(hw, stat_offset(s), n);
    }

    /// Add `n` to the counter at SRAM offset `at`.
    #[inline(always)]
    fn add(hw: &mut impl Hw, at: u32, n: u64) {
        let v = hw.load_u64(at);
        hw.store_u64(at, v.wrapping_add(n));
    }

    /// Counted where no `Hw` is at hand (rare paths: drops, errors,
    /// evictions, timeouts): added to SRAM at the end of the pass.
    pub fn later(d: &mut Deferred, s: Stat, n: u64) {
        d.counts[s as usize] += n;
        d.dirty |= 1 << s as u32;
    }

    /// Add what was counted for later to SRAM.
    #[inline(always)]
    pub fn flush(hw: &mut impl Hw, d: &mut Deferred) {
        if d.dirty != 0 {
            Self::flush_all(hw, d);
        }
    }

    #[inline(never)]
    fn flush_all(hw: &mut impl Hw, d: &mut Deferred) {
        let mut bits = core::mem::take(&mut d.dirty);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            // (Counter i's offset, as `stat_offset` works it out.)
            Self::add(hw, map::STATS + i as u32 * 8, core::mem::take(&mut d.counts[i]));
        }
    }

    pub fn clear(hw: &mut impl Hw) {
        for s in ALL_STATS {
            hw.store_u64(stat_offset(s), 0);
        }
    }
}
