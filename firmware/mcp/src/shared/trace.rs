//! The transition trace (a ring in SRAM, when tracing is on) and the
//! counters (kept here, written to SRAM once a pass when one moved).

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

/// The NIC's counters, mirrored into SRAM at the end of a pass.
pub struct Stats {
    pub(super) counts: [u64; STAT_COUNT],
    /// A bit per counter bumped since the SRAM copy was last written
    /// (the pass counter's is not kept: it goes out with any other).
    pub(super) dirty: u64,
}

const _: () = assert!(STAT_COUNT <= 64, "a dirty bit per counter");
const _: () = assert!(NUM_PORTS <= 8, "an owed-events bit per port");

impl Stats {
    pub fn bump(&mut self, s: Stat, n: u64) {
        self.counts[s as usize] += n;
        self.dirty |= 1 << s as u32;
    }

    /// Counted without marking the SRAM copy stale (the pass counter).
    pub fn count_quietly(&mut self, s: Stat) {
        self.counts[s as usize] += 1;
    }

    pub fn get(&self, s: Stat) -> u64 {
        self.counts[s as usize]
    }

    pub fn clear(&mut self, hw: &mut impl Hw) {
        for s in ALL_STATS {
            hw.store_u64(stat_offset(s), 0);
        }
    }

    /// Bring the SRAM copy up to date: the counters bumped since the
    /// last write, and the pass counter with them (only the firmware
    /// writes the block: the others hold what was written last).
    pub fn write(&mut self, hw: &mut impl Hw) {
        if self.dirty == 0 {
            return;
        }
        let mut bits = self.dirty | 1 << Stat::Polls as u32;
        self.dirty = 0;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            hw.store_u64(nic_abi::map::STATS + i as u32 * 8, self.counts[i]);
        }
    }
}
