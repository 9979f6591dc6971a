//! Rate control from the host: the NIC's flow table and its packet
//! dispatch trace (`nic_abi::flows`, docs/rate-control.md).
//!
//! A flow is one sending stream of the NIC: (source port, target node,
//! target port, priority), named here by [`FlowKey`]. The host installs a
//! flow's IDT (inter-packet dispatch time, RTC ticks; 0 = unregulated) in
//! a flow-table entry and bumps `FLOW_GEN`; the firmware paces the flow by
//! it and writes back its NDT and what it dispatched. With
//! `DISPATCH_TRACE_ENABLE` set it also records the RTC of every packet
//! dispatch in a ring the host reads with a cursor.
//!
//! Owns the flow table and the dispatch-trace registers of one NIC (the
//! privileged part of the driver, like the page tables: a BRM agent or an
//! experiment drives it). Entry writes follow the ABI's rule: counters and
//! IDT first, the key word (with the valid bit) last, then `FLOW_GEN`.

use nic_abi::flows::{
    self as abi, DispatchRecord, FlowEntry, DISPATCH_RECORD_SIZE, FLOW_ENTRY_SIZE,
};
use nic_abi::map::{self, DISPATCH_TRACE_LEN, FLOW_ENTRIES};
use nic_abi::regs::{self, reg};
use nic_abi::{Priority, NUM_PORTS};
use serde::{Deserialize, Serialize};

use crate::backend::NicBackend;
use crate::nic::Nic;
use crate::DriverError;

/// A flow as seen from its source NIC: (source port, target node, target
/// port, priority).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FlowKey {
    pub src_port: u8,
    pub node: u16,
    pub port: u8,
    /// 0 low, 1 high (`Priority as u8`).
    pub prio: u8,
}

impl FlowKey {
    pub fn new(src_port: u8, node: u16, port: u8, prio: Priority) -> FlowKey {
        FlowKey { src_port, node, port, prio: prio as u8 }
    }

    pub fn priority(&self) -> Priority {
        Priority::from_u8(self.prio).unwrap_or(Priority::Low)
    }

    /// The key word the firmware matches (`nic_abi::flows::flow_key`).
    pub fn abi_key(&self) -> u32 {
        abi::flow_key(self.src_port, self.node, self.port, self.priority())
    }

    /// The flow whose ABI key word is `key`.
    pub fn from_abi_key(key: u32) -> FlowKey {
        let key = key & !abi::FLOW_VALID;
        FlowKey {
            src_port: ((key >> 4) & 7) as u8,
            node: (key >> 7) as u16,
            port: ((key >> 1) & 7) as u8,
            prio: (key & 1) as u8,
        }
    }

    fn check(&self, num_nodes: u32) -> Result<(), DriverError> {
        if self.src_port as usize >= NUM_PORTS {
            return Err(DriverError::BadPort(self.src_port));
        }
        if self.port as usize >= NUM_PORTS {
            return Err(DriverError::BadPort(self.port));
        }
        if self.node as u32 >= num_nodes {
            return Err(DriverError::BadFlow("target node out of range"));
        }
        if self.prio > 1 {
            return Err(DriverError::BadFlow("priority"));
        }
        Ok(())
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "port {} -> {}:{} {}",
            self.src_port,
            self.node,
            self.port,
            if self.prio == 0 { "low" } else { "high" }
        )
    }
}

/// A flow-table entry as read back, with the RTC at the time of reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowInfo {
    pub flow: FlowKey,
    /// Index of its entry in the flow table.
    pub entry: u32,
    /// Inter-packet dispatch time, RTC ticks (0: unregulated).
    pub idt: u32,
    /// Next dispatch time (fw), RTC ticks.
    pub ndt: u64,
    /// Packets and payload bytes dispatched since the entry was made.
    pub packets: u64,
    pub bytes: u64,
    /// The NIC clock when this was read.
    pub rtc: u64,
}

impl FlowInfo {
    /// What entry `entry` (`e`, read at NIC time `rtc`) says of `flow`.
    fn from_entry(flow: FlowKey, entry: u32, e: &FlowEntry, rtc: u64) -> FlowInfo {
        FlowInfo { flow, entry, idt: e.idt, ndt: e.ndt, packets: e.packets, bytes: e.bytes, rtc }
    }

    /// Payload rate dispatched between `earlier` and this reading, in MB/s
    /// (10^6 B/s), for a NIC clock of `rtc_hz`. 0 if no time passed.
    pub fn mb_s_since(&self, earlier: &FlowInfo, rtc_hz: u64) -> f64 {
        let dt = self.rtc.saturating_sub(earlier.rtc);
        if dt == 0 || rtc_hz == 0 {
            return 0.0;
        }
        let bytes = self.bytes.saturating_sub(earlier.bytes) as f64;
        bytes * rtc_hz as f64 / dt as f64 / 1e6
    }

    /// Packets per second dispatched between `earlier` and this reading.
    pub fn packets_per_s_since(&self, earlier: &FlowInfo, rtc_hz: u64) -> f64 {
        let dt = self.rtc.saturating_sub(earlier.rtc);
        if dt == 0 {
            return 0.0;
        }
        self.packets.saturating_sub(earlier.packets) as f64 * rtc_hz as f64 / dt as f64
    }
}

/// Dispatch records read from the trace ring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceRead {
    pub records: Vec<DispatchRecord>,
    /// Pass this back as the next cursor.
    pub cursor: u32,
    /// Records overwritten before they were read (the ring holds
    /// `DISPATCH_TRACE_LEN`).
    pub lost: u32,
}

fn entry_off(i: u32) -> u32 {
    map::flow_entry(i)
}

impl<B: NicBackend> Nic<B> {
    fn read_entry(&self, i: u32) -> FlowEntry {
        let mut b = [0u8; FLOW_ENTRY_SIZE as usize];
        self.backend().sram_read(entry_off(i), &mut b);
        FlowEntry::decode(&b)
    }

    fn find_entry(&self, key: u32) -> Option<u32> {
        (0..FLOW_ENTRIES).find(|&i| {
            self.backend().sram_load_u32(entry_off(i) + abi::KEY) == key | abi::FLOW_VALID
        })
    }

    fn bump_flow_gen(&self) {
        let be = self.backend();
        let g = be.sram_load_u32(reg(regs::FLOW_GEN));
        be.sram_store_u32(reg(regs::FLOW_GEN), g.wrapping_add(1));
        be.doorbell();
    }

    /// Give `flow` an IDT of `idt_ticks` (0: unregulated): updates its
    /// flow-table entry, or makes one (counters from zero), then bumps
    /// `FLOW_GEN`. Returns the entry index.
    pub fn set_flow_idt(&self, flow: FlowKey, idt_ticks: u32) -> Result<u32, DriverError> {
        flow.check(self.num_nodes())?;
        let be = self.backend();
        let key = flow.abi_key();
        let i = match self.find_entry(key) {
            Some(i) => {
                be.sram_store_u32(entry_off(i) + abi::IDT, idt_ticks);
                i
            }
            None => {
                let i = (0..FLOW_ENTRIES)
                    .find(|&i| be.sram_load_u32(entry_off(i) + abi::KEY) & abi::FLOW_VALID == 0)
                    .ok_or(DriverError::FlowTableFull)?;
                let e = FlowEntry { valid: false, key, idt: idt_ticks, ..Default::default() };
                let mut b = [0u8; FLOW_ENTRY_SIZE as usize];
                e.encode(&mut b);
                be.sram_write(entry_off(i), &b);
                be.sram_store_u32(entry_off(i) + abi::KEY, key | abi::FLOW_VALID);
                i
            }
        };
        self.bump_flow_gen();
        Ok(i)
    }

    /// The same with the flow spelled out.
    pub fn set_flow_idt_of(
        &self,
        src_port: u8,
        node: u16,
        port: u8,
        prio: Priority,
        idt_ticks: u32,
    ) -> Result<u32, DriverError> {
        self.set_flow_idt(FlowKey::new(src_port, node, port, prio), idt_ticks)
    }

    /// `flow`'s entry, if it has one.
    pub fn flow(&self, flow: FlowKey) -> Option<FlowInfo> {
        let i = self.find_entry(flow.abi_key())?;
        let rtc = self.clock();
        Some(FlowInfo::from_entry(flow, i, &self.read_entry(i), rtc))
    }

    /// Every valid entry of the flow table.
    pub fn flows(&self) -> Vec<FlowInfo> {
        let rtc = self.clock();
        (0..FLOW_ENTRIES)
            .map(|i| (i, self.read_entry(i)))
            .filter(|(_, e)| e.valid)
            .map(|(i, e)| FlowInfo::from_entry(FlowKey::from_abi_key(e.key), i, &e, rtc))
            .collect()
    }

    /// Achieved dispatch rate of `flow` since `earlier` (MB/s), with a
    /// fresh reading to pass as the next `earlier`.
    pub fn flow_rate_since(&self, earlier: &FlowInfo) -> Option<(f64, FlowInfo)> {
        let now = self.flow(earlier.flow)?;
        if now.entry != earlier.entry {
            return None;
        }
        Some((now.mb_s_since(earlier, self.rtc_hz()), now))
    }

    /// Remove `flow`'s entry (it runs unregulated again). Returns whether
    /// it had one.
    pub fn clear_flow(&self, flow: FlowKey) -> bool {
        match self.find_entry(flow.abi_key()) {
            Some(i) => {
                self.backend().sram_store_u32(entry_off(i) + abi::KEY, flow.abi_key());
                self.bump_flow_gen();
                true
            }
            None => false,
        }
    }

    /// Switch the dispatch trace on or off. Returns the cursor to read
    /// from (records written from now on).
    pub fn set_dispatch_trace(&self, on: bool) -> u32 {
        let be = self.backend();
        be.sram_store_u32(reg(regs::DISPATCH_TRACE_ENABLE), on as u32);
        be.doorbell();
        self.dispatch_trace_cursor()
    }

    /// Records written so far (a cursor that reads nothing yet).
    pub fn dispatch_trace_cursor(&self) -> u32 {
        self.backend().sram_load_u32(reg(regs::DISPATCH_TRACE_PROD))
    }

    /// Dispatch records written since `cursor`, oldest first.
    pub fn dispatch_trace_since(&self, cursor: u32) -> TraceRead {
        let be = self.backend();
        let prod = be.sram_load_u32(reg(regs::DISPATCH_TRACE_PROD));
        let avail = prod.wrapping_sub(cursor);
        let (from, lost) = if avail > DISPATCH_TRACE_LEN {
            (prod.wrapping_sub(DISPATCH_TRACE_LEN), avail - DISPATCH_TRACE_LEN)
        } else {
            (cursor, 0)
        };
        let n = prod.wrapping_sub(from);
        // The records in one read, or two where the ring wraps: on a live
        // NIC the trace is read through the device process, a request
        // each, and a host program that polls it as it sends must not pay
        // a round trip per packet.
        let mut bytes = vec![0u8; (n * DISPATCH_RECORD_SIZE) as usize];
        let start = from % DISPATCH_TRACE_LEN;
        let first = n.min(DISPATCH_TRACE_LEN - start);
        let (a, b) = bytes.split_at_mut((first * DISPATCH_RECORD_SIZE) as usize);
        if !a.is_empty() {
            be.sram_read(map::DISPATCH_TRACE + start * DISPATCH_RECORD_SIZE, a);
        }
        if !b.is_empty() {
            be.sram_read(map::DISPATCH_TRACE, b);
        }
        let records = bytes
            .chunks_exact(DISPATCH_RECORD_SIZE as usize)
            .filter_map(DispatchRecord::decode)
            .collect();
        TraceRead { records, cursor: prod, lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_keys_round_trip_through_the_abi_word() {
        for k in [
            FlowKey::new(0, 0, 0, Priority::Low),
            FlowKey::new(7, 1023, 5, Priority::High),
            FlowKey::new(3, 17, 2, Priority::Low),
        ] {
            assert_eq!(FlowKey::from_abi_key(k.abi_key()), k);
            assert_eq!(FlowKey::from_abi_key(k.abi_key() | abi::FLOW_VALID), k);
        }
    }

    #[test]
    fn rates_are_in_decimal_megabytes_per_second() {
        let f = FlowKey::new(0, 1, 0, Priority::Low);
        let a = FlowInfo { flow: f, entry: 0, idt: 0, ndt: 0, packets: 0, bytes: 0, rtc: 0 };
        // 4 MB in 2 * 10^6 ticks at 2 MHz = 1 s: 4 MB/s.
        let b = FlowInfo { packets: 1000, bytes: 4_000_000, rtc: 2_000_000, ..a };
        assert_eq!(b.mb_s_since(&a, 2_000_000), 4.0);
        assert_eq!(b.packets_per_s_since(&a, 2_000_000), 1000.0);
        assert_eq!(a.mb_s_since(&a, 2_000_000), 0.0);
    }
}
