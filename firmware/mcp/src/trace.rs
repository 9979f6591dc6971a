//! The four machines' state enums and the transition trace. Each machine's
//! state says what it is doing in the current pass (what a debugger shows
//! when stopped in a step function); every change is recorded in the SRAM
//! trace ring when TRACE_ENABLE is set.

use crate::hw::Hw;
use crate::Mcp;
use nic_abi::map;
use nic_abi::regs;
use nic_abi::trace::{Machine, TraceRecord, TRACE_RECORD_SIZE};

/// SDMA: host descriptors -> send tokens -> transmit buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdmaState {
    Idle = 0,
    /// Taking a descriptor from a port's send ring.
    Intake = 1,
    /// Choosing the next packet (rotation over connections and streams).
    Schedule = 2,
    /// Host-DMA of a packet's payload into a transmit buffer.
    Fill = 3,
    /// Handling a retransmission, ack or alarm timer.
    Timer = 4,
}

/// SEND: filled transmit buffers -> send-DMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    Idle = 0,
    /// Writing the header and starting send-DMA of a data packet.
    Data = 1,
    /// Building and starting an ack or nack.
    Control = 2,
}

/// RECV: receive-DMA completions -> accepted packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvState {
    Idle = 0,
    /// Checking CRC status and header.
    Check = 1,
    /// Handling an ack or nack.
    Ack = 2,
    /// Sequence check and buffer matching of a data-bearing packet.
    Accept = 3,
}

/// RDMA: accepted payloads -> host memory; events -> host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaState {
    Idle = 0,
    /// Host-DMA of a payload into host memory.
    Copy = 1,
    /// Writing an event into a port's event queue.
    Event = 2,
}

impl Mcp {
    pub(crate) fn record(&mut self, hw: &mut impl Hw, m: Machine, from: u8, to: u8, arg: u32) {
        if !self.trace_on || from == to {
            return;
        }
        let rec = TraceRecord { rtc: self.now, machine: m, from, to, arg };
        let mut b = [0u8; TRACE_RECORD_SIZE as usize];
        rec.encode(&mut b);
        let off = map::TRACE + (self.trace_prod % map::TRACE_LEN) * TRACE_RECORD_SIZE;
        hw.write(off, &b);
        self.trace_prod = self.trace_prod.wrapping_add(1);
        hw.set_reg32(regs::TRACE_PROD, self.trace_prod);
    }

    pub(crate) fn set_sdma(&mut self, hw: &mut impl Hw, s: SdmaState, arg: u32) {
        let from = core::mem::replace(&mut self.sdma_state, s) as u8;
        self.record(hw, Machine::Sdma, from, s as u8, arg);
    }

    pub(crate) fn set_send(&mut self, hw: &mut impl Hw, s: SendState, arg: u32) {
        let from = core::mem::replace(&mut self.send_state, s) as u8;
        self.record(hw, Machine::Send, from, s as u8, arg);
    }

    pub(crate) fn set_recv(&mut self, hw: &mut impl Hw, s: RecvState, arg: u32) {
        let from = core::mem::replace(&mut self.recv_state, s) as u8;
        self.record(hw, Machine::Recv, from, s as u8, arg);
    }

    pub(crate) fn set_rdma(&mut self, hw: &mut impl Hw, s: RdmaState, arg: u32) {
        let from = core::mem::replace(&mut self.rdma_state, s) as u8;
        self.record(hw, Machine::Rdma, from, s as u8, arg);
    }
}
