//! Rate control's part of SDMA: the flow table read again (at start,
//! when the host bumps `FLOW_GEN`, when a stream is set up), the choice
//! among the sendable streams of the rings by smallest NDT, and each
//! dispatched packet's accounting (NDT, the flow's counters, the dispatch
//! trace).
//!
//! Owns: SRAM `FLOWS` (the firmware's words of each entry) and
//! `DISPATCH_TRACE`. May touch: SDMA's sending streams and rings, through
//! the hooks of [`Scheduler`](crate::offload::policy::Scheduler).

use crate::hw::Hw;
use crate::offload::policy::Pacing;
use crate::records::*;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::map;

impl Sdma {
    /// Rate control: the sendable stream with the smallest NDT, if it is
    /// due; otherwise remember when it will be. The streams compared are
    /// charged (`Work::flow_ops`) only when one is dispatched: a pass that
    /// sends nothing is idle, so the NIC sleeps until the next dispatch
    /// time or whatever else comes first, rather than polling again at
    /// once for as long as a regulated stream waits (for its NDT, for acks
    /// or a retransmission timer).
    pub(super) fn pick_by_ndt(&mut self, cx: &Shared, w: &mut Work) -> Option<TxId> {
        let mut dead: heapless::Vec<TxId, MAX_STREAMS> = heapless::Vec::new();
        let mut cands: heapless::Vec<(TxId, u64, u32), MAX_STREAMS> = heapless::Vec::new();
        let mut compared = 0;
        let mut next_c = self.conn_cur;
        for _ in 0..self.conn_queue_len {
            let Some(c) = next_c else { break };
            let mut next_s = self.conns[c].ring;
            for _ in 0..self.conns[c].ring_len {
                let Some(s) = next_s else { break };
                let st = &self.txs[s];
                if st.cursor.is_none() || st.suspended {
                    let _ = dead.push(s);
                } else if self.sendable(cx, s) {
                    let _ = cands.push((s, st.pace.ndt, st.order));
                }
                compared += 1;
                next_s = st.ring.map(|l| l.next);
            }
            next_c = self.conns[c].queue.map(|l| l.next);
        }
        for s in dead {
            self.ring_remove(s);
        }
        match super::choose(cx.now, cands.into_iter()) {
            super::Choice::Dispatch(s) => {
                w.flow_ops += compared;
                Some(s)
            }
            super::Choice::WaitUntil(t) => {
                self.sched.wait = Some(t);
                None
            }
            super::Choice::Idle => None,
        }
    }

    /// Read the IDT of every stream's flow from the flow table (at start,
    /// for new streams, and when the host bumps FLOW_GEN). Out of line
    /// and cold: rare, and inlined it made every pass's frame larger.
    #[cold]
    #[inline(never)]
    pub(super) fn reload_flows(&mut self, cx: &Shared, hw: &impl Hw, w: &mut Work) {
        self.sched.pending = false;
        w.flow_ops += map::FLOW_ENTRIES;
        let mut keys: [u32; map::FLOW_ENTRIES as usize] = [0; map::FLOW_ENTRIES as usize];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = hw.load_u32(map::flow_entry(i as u32) + nic_abi::flows::KEY);
        }
        self.sched.entries =
            keys.iter().filter(|&&k| k & nic_abi::flows::FLOW_VALID != 0).count() as u16;
        log_info!("flow table changed: {=u16} flows", self.sched.entries);
        let mut regulated = 0;
        let live: heapless::Vec<TxId, MAX_STREAMS> = self.txs.live_indices().collect();
        for s in live {
            let want = self.txs[s].key | nic_abi::flows::FLOW_VALID;
            let flow = keys.iter().position(|&k| k == want);
            let idt = match flow {
                Some(i) => {
                    w.flow_ops += 1;
                    hw.load_u32(map::flow_entry(i as u32) + nic_abi::flows::IDT)
                }
                None => 0,
            };
            let now = cx.now;
            let st = &mut self.txs[s];
            st.pace.flow = flow.map(|i| i as u16);
            if idt != st.pace.idt {
                // A new rate starts now: an NDT left behind while the flow
                // ran at its old rate (or unregulated) gives no credit.
                st.pace.idt = idt;
                st.pace.wake(now);
            }
            if st.pace.idt > 0 {
                regulated += 1;
            }
        }
        self.sched.regulated = regulated;
    }

    /// Account one dispatched packet of stream `s` (NDT, flow counters,
    /// dispatch trace).
    pub(super) fn account(
        &mut self,
        cx: &Shared,
        hw: &mut impl Hw,
        s: TxId,
        bytes: u32,
        w: &mut Work,
    ) {
        let st = &mut self.txs[s];
        st.pace.dispatched();
        if let Some(flow) = st.pace.flow {
            // NDT, and the packet and byte counters (read, add, write).
            w.flow_ops += 5;
            let e = map::flow_entry(flow as u32);
            hw.store_u64(e + nic_abi::flows::NDT, st.pace.ndt);
            let p = hw.load_u64(e + nic_abi::flows::PACKETS);
            hw.store_u64(e + nic_abi::flows::PACKETS, p.wrapping_add(1));
            let b = hw.load_u64(e + nic_abi::flows::BYTES);
            hw.store_u64(e + nic_abi::flows::BYTES, b.wrapping_add(bytes as u64));
        }
        if self.sched.trace {
            let rec = nic_abi::flows::DispatchRecord { rtc: cx.now, key: self.txs[s].key, bytes };
            let mut b = [0u8; nic_abi::flows::DISPATCH_RECORD_SIZE as usize];
            rec.encode(&mut b);
            let off = map::DISPATCH_TRACE
                + (self.sched.trace_prod % map::DISPATCH_TRACE_LEN)
                    * nic_abi::flows::DISPATCH_RECORD_SIZE;
            hw.write(off, &b);
            self.sched.trace_prod = self.sched.trace_prod.wrapping_add(1);
            hw.set_reg(nic_abi::regs::DISPATCH_TRACE_PROD, self.sched.trace_prod);
        }
    }
}
