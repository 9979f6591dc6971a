//! The flow table (rate control, docs/rate-control.md). A
//! flow is (source port, target node, target port, priority): exactly one
//! sending stream of the MCP. The host (driver or bandwidth-manager agent)
//! installs a flow's IDT in an entry; the firmware paces the flow by it and
//! reports the flow's NDT and what it dispatched.
//!
//! Entry (32 bytes) at `map::flow_entry(i)`:
//! ```text
//!  0 key u32   bit 31 = valid; `flow_key(..)` in the low bits   (host)
//!  4 idt u32   inter-packet dispatch time in RTC ticks; 0 = unregulated (host)
//!  8 ndt u64   next dispatch time (fw)
//! 16 packets u64   packets dispatched (fw)
//! 24 bytes u64     payload bytes dispatched (fw)
//! ```
//! After editing entries the host bumps `regs::FLOW_GEN`; the firmware then
//! re-reads the table. Counters of an entry restart when its key changes.
//!
//! Dispatch trace record (16 bytes) at `map::DISPATCH_TRACE`:
//! `rtc u64 | flow key u32 | payload bytes u32`, written for every packet
//! dispatch while `regs::DISPATCH_TRACE_ENABLE` is set.

use crate::le::*;
use crate::Priority;

pub const FLOW_ENTRY_SIZE: u32 = 32;
pub const DISPATCH_RECORD_SIZE: u32 = 16;
/// The valid bit of an entry's key word.
pub const FLOW_VALID: u32 = 1 << 31;

/// Offsets inside an entry.
pub const KEY: u32 = 0;
pub const IDT: u32 = 4;
pub const NDT: u32 = 8;
pub const PACKETS: u32 = 16;
pub const BYTES: u32 = 24;

/// The key of flow (src_port -> target_node:target_port, priority).
pub const fn flow_key(src_port: u8, target_node: u16, target_port: u8, prio: Priority) -> u32 {
    ((target_node as u32) << 7)
        | ((src_port as u32 & 7) << 4)
        | ((target_port as u32 & 7) << 1)
        | prio as u32
}

/// A flow-table entry as a plain struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowEntry {
    pub valid: bool,
    pub key: u32,
    pub idt: u32,
    pub ndt: u64,
    pub packets: u64,
    pub bytes: u64,
}

impl FlowEntry {
    pub fn encode(&self, b: &mut [u8]) {
        let k = if self.valid { self.key | FLOW_VALID } else { self.key & !FLOW_VALID };
        put_u32(b, 0, k);
        put_u32(b, 4, self.idt);
        put_u64(b, 8, self.ndt);
        put_u64(b, 16, self.packets);
        put_u64(b, 24, self.bytes);
    }

    pub fn decode(b: &[u8]) -> FlowEntry {
        let k = get_u32(b, 0);
        FlowEntry {
            valid: k & FLOW_VALID != 0,
            key: k & !FLOW_VALID,
            idt: get_u32(b, 4),
            ndt: get_u64(b, 8),
            packets: get_u64(b, 16),
            bytes: get_u64(b, 24),
        }
    }
}

/// A dispatch trace record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchRecord {
    pub rtc: u64,
    pub key: u32,
    pub bytes: u32,
}

impl DispatchRecord {
    pub fn encode(&self, b: &mut [u8]) {
        put_u64(b, 0, self.rtc);
        put_u32(b, 8, self.key);
        put_u32(b, 12, self.bytes);
    }

    pub fn decode(b: &[u8]) -> Option<DispatchRecord> {
        if b.len() < DISPATCH_RECORD_SIZE as usize {
            return None;
        }
        Some(DispatchRecord { rtc: get_u64(b, 0), key: get_u32(b, 8), bytes: get_u32(b, 12) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_records_round_trip() {
        let e = FlowEntry {
            valid: true,
            key: flow_key(3, 15, 2, Priority::High),
            idt: 192,
            ndt: 1 << 40,
            packets: 7,
            bytes: 7 * 4096,
        };
        let mut b = [0u8; 32];
        e.encode(&mut b);
        assert_eq!(FlowEntry::decode(&b), e);
        let r = DispatchRecord { rtc: 99, key: e.key, bytes: 4096 };
        let mut b = [0u8; 16];
        r.encode(&mut b);
        assert_eq!(DispatchRecord::decode(&b), Some(r));
        assert_eq!(DispatchRecord::decode(&b[..15]), None);
    }

    #[test]
    fn keys_of_different_flows_differ() {
        let a = flow_key(1, 2, 3, Priority::Low);
        assert_ne!(a, flow_key(1, 2, 3, Priority::High));
        assert_ne!(a, flow_key(2, 2, 3, Priority::Low));
        assert_ne!(a, flow_key(1, 3, 3, Priority::Low));
        assert_ne!(a, flow_key(1, 2, 4, Priority::Low));
        assert_eq!(a & FLOW_VALID, 0);
    }
}
