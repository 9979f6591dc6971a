//! Reading a NIC's two trace rings in SRAM: the transition trace (`TRACE`,
//! `TRACE_LEN` records of `nic_abi::trace::TraceRecord`, producer count in
//! `TRACE_PROD`) and the dispatch trace (`DISPATCH_TRACE`,
//! `DISPATCH_TRACE_LEN` records of `nic_abi::flows::DispatchRecord`,
//! producer count in `DISPATCH_TRACE_PROD`).
//!
//! The firmware writes record `n` into slot `n % LEN` and then bumps the
//! free-running producer count; it never waits for a reader. A reader
//! keeps its own cursor (the count it has read up to): when the producer
//! is more than `LEN` ahead, the oldest records were overwritten before
//! they were read and are counted as lost. Any backend can use this: the
//! simulator ([`crate::SimCluster::trace_transitions`], which drains after
//! every firmware pass so nothing is lost) and a reader of a running
//! live or qemu NIC's SRAM.

use nic_abi::flows::{DispatchRecord, DISPATCH_RECORD_SIZE};
use nic_abi::map;
use nic_abi::regs::{self, reg};
use nic_abi::trace::{TraceRecord, TRACE_RECORD_SIZE};

/// One of the two rings: where it is, its length, its record size and its
/// producer register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    pub base: u32,
    pub len: u32,
    pub record: u32,
    pub prod_reg: u32,
}

/// The transition trace ring.
pub const TRANSITIONS: Ring = Ring {
    base: map::TRACE,
    len: map::TRACE_LEN,
    record: TRACE_RECORD_SIZE,
    prod_reg: reg(regs::TRACE_PROD),
};

/// The packet dispatch trace ring.
pub const DISPATCHES: Ring = Ring {
    base: map::DISPATCH_TRACE,
    len: map::DISPATCH_TRACE_LEN,
    record: DISPATCH_RECORD_SIZE,
    prod_reg: reg(regs::DISPATCH_TRACE_PROD),
};

impl Ring {
    /// Read the records written since `*cursor`, given the producer count
    /// `prod` and a way to read SRAM; hand each record's bytes to `out`
    /// oldest first, move the cursor to `prod`, and return how many
    /// records were overwritten before they could be read.
    pub fn drain(
        &self,
        prod: u32,
        cursor: &mut u32,
        read: &mut dyn FnMut(u32, &mut [u8]),
        out: &mut dyn FnMut(&[u8]),
    ) -> u64 {
        // A producer behind the cursor: the count went back, as when the
        // NIC was reset and a new boot counts from 0 again. Read the new
        // boot's records from its start.
        if prod.wrapping_sub(*cursor) > u32::MAX / 2 {
            *cursor = 0;
        }
        let avail = prod.wrapping_sub(*cursor);
        let (from, lost) = if avail > self.len {
            (prod.wrapping_sub(self.len), avail - self.len)
        } else {
            (*cursor, 0)
        };
        let mut b = [0u8; 64];
        let b = &mut b[..self.record as usize];
        let mut n = from;
        while n != prod {
            read(self.base + (n % self.len) * self.record, b);
            out(b);
            n = n.wrapping_add(1);
        }
        *cursor = prod;
        lost as u64
    }
}

/// A packet as the sim's engines saw it (its header's fields, read as
/// they are on the wire: a corrupted header is not refused here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WirePacket {
    /// When it entered the wire (sent) or was written into its receive
    /// buffer (delivered), ns of virtual time.
    pub ns: u64,
    pub ptype: u8,
    pub flags: u8,
    pub priority: u8,
    pub src_node: u16,
    pub dst_node: u16,
    pub src_port: u8,
    pub dst_port: u8,
    pub seq: u32,
    /// With `Flags::ACK_VALID`: the cumulative ack of the reverse stream.
    pub ack: u32,
    pub payload_len: u16,
    /// Delivered: the receive buffer it went into.
    pub buf: u32,
}

impl WirePacket {
    /// The packet whose header starts `h` (None: shorter than a header).
    pub fn of(ns: u64, h: &[u8], buf: u32) -> Option<WirePacket> {
        use nic_abi::le::{get_u16, get_u32, get_u8};
        (h.len() >= nic_abi::packet::HEADER_LEN).then(|| WirePacket {
            ns,
            ptype: get_u8(h, 0),
            flags: get_u8(h, 1),
            priority: get_u8(h, 2),
            src_node: get_u16(h, 4),
            dst_node: get_u16(h, 6),
            src_port: get_u8(h, 8),
            dst_port: get_u8(h, 9),
            seq: get_u32(h, 12),
            ack: get_u32(h, 16),
            payload_len: get_u16(h, 28),
            buf,
        })
    }

    /// An ack, a nack or a poll (SEND sends them as `Control`, not `Data`).
    pub fn is_control(&self) -> bool {
        use nic_abi::packet::PacketType;
        [PacketType::Ack, PacketType::Nack, PacketType::Poll, PacketType::Stat, PacketType::Ustat]
            .iter()
            .any(|&t| self.ptype == t as u8)
    }
}

/// What was collected from one NIC's rings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicTrace {
    /// Transition records, oldest first.
    pub transitions: Vec<TraceRecord>,
    /// Dispatch records, oldest first.
    pub dispatches: Vec<DispatchRecord>,
    /// Transition records overwritten before they were read.
    pub lost_transitions: u64,
    /// Dispatch records overwritten before they were read.
    pub lost_dispatches: u64,
    /// Records whose machine or cause code nic-abi does not know (skipped).
    pub undecodable: u64,
    /// The sim only: for each transition record, when (virtual ns) the
    /// firmware pass that wrote it began: finer than the RTC tick the
    /// record carries. Empty elsewhere.
    pub transition_ns: Vec<u64>,
    /// The sim only: packets the NIC put on the wire, and packets it
    /// delivered into receive buffers, each in its engine's order.
    pub sent: Vec<WirePacket>,
    pub delivered: Vec<WirePacket>,
}

/// A reader's cursors into one NIC's two rings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursors {
    pub transitions: u32,
    pub dispatches: u32,
}

impl NicTrace {
    /// Take everything new from a NIC's rings into `self`: `load_u32`
    /// reads an SRAM word, `read` a range.
    pub fn drain(
        &mut self,
        cursors: &mut Cursors,
        load_u32: &dyn Fn(u32) -> u32,
        read: &mut dyn FnMut(u32, &mut [u8]),
    ) {
        let prod = load_u32(TRANSITIONS.prod_reg);
        if prod != cursors.transitions {
            let (recs, bad) = (&mut self.transitions, &mut self.undecodable);
            self.lost_transitions +=
                TRANSITIONS.drain(prod, &mut cursors.transitions, read, &mut |b| {
                    match TraceRecord::decode(b) {
                        Some(r) => recs.push(r),
                        None => *bad += 1,
                    }
                });
        }
        let prod = load_u32(DISPATCHES.prod_reg);
        if prod != cursors.dispatches {
            let recs = &mut self.dispatches;
            self.lost_dispatches +=
                DISPATCHES.drain(prod, &mut cursors.dispatches, read, &mut |b| {
                    if let Some(r) = DispatchRecord::decode(b) {
                        recs.push(r)
                    }
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_abi::trace::{Cause, Machine};

    fn rec(i: u32) -> TraceRecord {
        TraceRecord {
            rtc: i as u64 * 10,
            machine: Machine::Send,
            from: 0,
            to: 2,
            cause: Cause::DataOut,
            arg: i,
        }
    }

    /// A fake SRAM holding records 0..n written the firmware's way.
    fn sram_with(n: u32) -> Vec<u8> {
        let mut m = vec![0u8; (map::TRACE + map::TRACE_LEN * TRACE_RECORD_SIZE) as usize];
        for i in 0..n {
            let off = (map::TRACE + (i % map::TRACE_LEN) * TRACE_RECORD_SIZE) as usize;
            rec(i).encode(&mut m[off..off + 16]);
        }
        m
    }

    fn drain(m: &[u8], prod: u32, cursor: &mut u32) -> (Vec<u32>, u64) {
        let mut got = Vec::new();
        let lost = TRANSITIONS.drain(
            prod,
            cursor,
            &mut |off, b| b.copy_from_slice(&m[off as usize..off as usize + b.len()]),
            &mut |b| got.push(TraceRecord::decode(b).unwrap().arg),
        );
        (got, lost)
    }

    #[test]
    fn reads_what_is_new_and_counts_what_was_overwritten() {
        let m = sram_with(10);
        let mut c = 0;
        assert_eq!(drain(&m, 4, &mut c), (vec![0, 1, 2, 3], 0));
        assert_eq!(c, 4);
        assert_eq!(drain(&m, 10, &mut c), ((4..10).collect(), 0));
        assert_eq!(drain(&m, 10, &mut c), (vec![], 0));
        // 2048 + 100 written since the cursor: the oldest 100 are gone.
        let len = map::TRACE_LEN;
        let m = sram_with(10 + len + 100);
        let (got, lost) = drain(&m, 10 + len + 100, &mut c);
        assert_eq!(lost, 100);
        assert_eq!(got.len(), len as usize);
        assert_eq!(got[0], 110);
        assert_eq!(*got.last().unwrap(), 10 + len + 99);
    }

    #[test]
    fn a_producer_that_went_back_is_read_from_its_new_start() {
        let m = sram_with(3);
        let mut c = 50;
        assert_eq!(drain(&m, 3, &mut c), (vec![0, 1, 2], 0));
        assert_eq!(c, 3);
    }
}
