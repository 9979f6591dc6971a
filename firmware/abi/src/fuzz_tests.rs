//! Every decoder of this crate fed arbitrary bytes: it returns a value or
//! an error, never panics, for inputs of any length around its record
//! size (shorter ones included where it takes a slice of any length).
//! The suite runs proptest's default number of cases; `cargo xtask fuzz`
//! runs them with 10^6 (PROPTEST_CASES).

use crate::desc::{Descriptor, ListedChild, McastFields, DESC_SIZE};
use crate::event::{Event, EVENT_SIZE};
use crate::flows::{DispatchRecord, FlowEntry, DISPATCH_RECORD_SIZE, FLOW_ENTRY_SIZE};
use crate::group::GroupHead;
use crate::packet::{Header, PacketRepr, HEADER_LEN};
use crate::page_table::{pte, pte_bus_page};
use crate::rings::{HostDmaCmd, RxDone, TxDmaCmd, HDMA_CMD_SIZE, RXDONE_SIZE, TXDMA_CMD_SIZE};
use crate::trace::{TraceRecord, TRACE_RECORD_SIZE};
use proptest::collection::vec;
use proptest::prelude::*;
use std::vec::Vec;

/// Arbitrary bytes, 0 to `size + 64` long.
fn bytes(size: u32) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=size as usize + 64)
}

/// Arbitrary bytes at least `size` long (decoders that read a fixed record).
fn record(size: u32) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), size as usize..=size as usize + 64)
}

proptest! {
    #[test]
    fn fuzz_descriptors(b in bytes(DESC_SIZE)) {
        let _ = Descriptor::decode(&b);
        let _ = Descriptor::raw_kind(&b);
        let _ = McastFields::decode(&b);
    }

    #[test]
    fn fuzz_listed_children(b in record(4), at in 0usize..64) {
        if at + 4 <= b.len() {
            let _ = ListedChild::decode(&b, at);
        }
    }

    #[test]
    fn fuzz_events(b in bytes(EVENT_SIZE)) {
        let _ = Event::decode(&b);
    }

    #[test]
    fn fuzz_packet_headers(b in bytes(HEADER_LEN as u32), total in 0usize..10_000) {
        // A header the wire takes has a repr (or a named bad field).
        if let Ok(h) = Header::parse(&b) {
            let _ = PacketRepr::parse(&h);
        }
        let _ = Header::parse_prefix(&b, total);
    }

    #[test]
    fn fuzz_ring_records(h in bytes(HDMA_CMD_SIZE), t in bytes(TXDMA_CMD_SIZE), r in bytes(RXDONE_SIZE)) {
        let _ = HostDmaCmd::decode(&h);
        let _ = TxDmaCmd::decode(&t);
        let _ = RxDone::decode(&r);
    }

    #[test]
    fn fuzz_tables(f in record(FLOW_ENTRY_SIZE), d in bytes(DISPATCH_RECORD_SIZE),
                   p in any::<u64>(), g in bytes(GroupHead::LEN as u32)) {
        let _ = FlowEntry::decode(&f);
        let _ = DispatchRecord::decode(&d);
        // Every entry either maps a page or not, and one that maps reads
        // back as written.
        if let Some(page) = pte_bus_page(p) {
            prop_assert_eq!(pte_bus_page(pte(page)), Some(page));
        }
        let _ = GroupHead::decode(&g);
    }

    #[test]
    fn fuzz_trace_records(b in bytes(TRACE_RECORD_SIZE)) {
        let _ = TraceRecord::decode(&b);
    }
}
