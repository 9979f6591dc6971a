//! Transition trace records, written by the firmware into the TRACE ring
//! when `TRACE_ENABLE` is set and decoded on the host.
//!
//! Record (16 bytes): `rtc u64 | machine u8 | from u8 | to u8 | cause u8 | arg u32`.
//!
//! `from` and `to` are state codes of the machine's state enum (the MCP's
//! `SdmaState::code()` and friends); `arg` is the new state's main operand
//! (a token, a buffer, a sequence number, a port).

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

/// Why a machine changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cause {
    /// A descriptor was taken from a port's send ring.
    Descriptor = 0,
    /// A packet was chosen and its fill started.
    Scheduled = 1,
    /// The host-DMA engine finished a fill or a copy.
    DmaDone = 2,
    /// No transmit buffer or host-DMA ring room.
    NoRoom = 3,
    /// Every stream with packets is waiting for acks (window full, held
    /// after a refusal).
    Window = 4,
    /// Rate control: the next packet's dispatch time is ahead.
    Paced = 5,
    /// Nothing left to do.
    Drained = 6,
    /// A retransmission timer expired.
    Timeout = 7,
    /// A packet came from the receive-DMA engine.
    Packet = 8,
    /// An ack or nack arrived.
    AckIn = 9,
    /// A data-bearing packet passed the sequence check.
    Accepted = 10,
    /// The RDMA queue is full: packets wait in the receive ring.
    RdmaFull = 11,
    /// The per-pass budget ran out with work left.
    Budget = 12,
    /// An event was owed to a port.
    EventOwed = 13,
    /// A port's event queue in host memory is full (the host is behind).
    HostBehind = 14,
    /// An ack or nack went to the send-DMA engine.
    ControlOut = 15,
    /// A data packet went to the send-DMA engine.
    DataOut = 16,
    /// The send-DMA engine finished packets.
    WireDone = 17,
    /// A port closed (its work was dropped).
    PortClosed = 18,
}

impl Cause {
    pub const fn from_u8(v: u8) -> Option<Cause> {
        use Cause::*;
        const ALL: [Cause; 19] = [
            Descriptor, Scheduled, DmaDone, NoRoom, Window, Paced, Drained, Timeout, Packet, AckIn,
            Accepted, RdmaFull, Budget, EventOwed, HostBehind, ControlOut, DataOut, WireDone,
            PortClosed,
        ];
        if (v as usize) < ALL.len() {
            Some(ALL[v as usize])
        } else {
            None
        }
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
    pub cause: Cause,
    /// Machine-specific argument (sequence number, buffer index, ...).
    pub arg: u32,
}

impl TraceRecord {
    pub fn encode(&self, b: &mut [u8]) {
        put_u64(b, 0, self.rtc);
        put_u8(b, 8, self.machine as u8);
        put_u8(b, 9, self.from);
        put_u8(b, 10, self.to);
        put_u8(b, 11, self.cause as u8);
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
            cause: Cause::from_u8(get_u8(b, 11))?,
            arg: get_u32(b, 12),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_refuses_unknown_codes() {
        let r = TraceRecord {
            rtc: 1 << 40,
            machine: Machine::Rdma,
            from: 1,
            to: 3,
            cause: Cause::HostBehind,
            arg: 0xdead_beef,
        };
        let mut b = [0u8; TRACE_RECORD_SIZE as usize];
        r.encode(&mut b);
        assert_eq!(TraceRecord::decode(&b), Some(r));
        for c in 0..=255u8 {
            if let Some(k) = Cause::from_u8(c) {
                assert_eq!(k as u8, c);
            }
        }
        b[11] = 200;
        assert_eq!(TraceRecord::decode(&b), None, "unknown cause");
        assert_eq!(TraceRecord::decode(&b[..15]), None, "short");
    }
}
