//! Transition trace records, written by the firmware into the TRACE ring
//! when `TRACE_ENABLE` is set and decoded on the host.
//!
//! Record (16 bytes): `rtc u64 | machine u8 | from u8 | to u8 | pad u8 | arg u32`.

use crate::le::*;

pub const TRACE_RECORD_SIZE: u32 = 16;

/// Which state machine made the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    Sdma = 0,
    Send = 1,
    Recv = 2,
    Rdma = 3,
}

impl Machine {
    pub const fn from_u8(v: u8) -> Option<Machine> {
        Some(match v {
            0 => Machine::Sdma,
            1 => Machine::Send,
            2 => Machine::Recv,
            3 => Machine::Rdma,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    pub rtc: u64,
    pub machine: Machine,
    /// State before, as the machine's state enum discriminant.
    pub from: u8,
    /// State after.
    pub to: u8,
    /// Machine-specific argument (sequence number, buffer index, ...).
    pub arg: u32,
}

impl TraceRecord {
    pub fn encode(&self, b: &mut [u8]) {
        put_u64(b, 0, self.rtc);
        put_u8(b, 8, self.machine as u8);
        put_u8(b, 9, self.from);
        put_u8(b, 10, self.to);
        put_u8(b, 11, 0);
        put_u32(b, 12, self.arg);
    }

    pub fn decode(b: &[u8]) -> Option<TraceRecord> {
        if b.len() < TRACE_RECORD_SIZE as usize {
            return None;
        }
        Some(TraceRecord {
            rtc: get_u64(b, 0),
            machine: Machine::from_u8(get_u8(b, 8))?,
            from: get_u8(b, 9),
            to: get_u8(b, 10),
            arg: get_u32(b, 12),
        })
    }
}
