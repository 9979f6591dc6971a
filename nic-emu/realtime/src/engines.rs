//! One NIC's three DMA engines in real time: the device model's engines
//! (`device::Engines`, the one implementation the sim runs too) over the
//! node's mapped `sram` and `host` files, stepped as fast as the device
//! thread goes, without the sim's cost model.
//!
//! - Host-DMA: runs every posted command at once. A `SramToHost` copy
//!   writes its last word last (Release), so an event's `seq` is seen
//!   after the rest of it ([`MappedMem`]).
//! - Send-DMA: one packet at a time, read into a pooled buffer and
//!   launched into the fabric. `TXDMA_DONE` counts it when its tail has
//!   left: at once, or when the fabric releases it (backpressure), or at
//!   link speed when paced.
//! - Receive-DMA: takes the packets of this NIC's inbox in order, each
//!   into the next free receive buffer (with none free the packet waits:
//!   backpressure); packets blocked behind it too long are dropped as the
//!   switch would.
//!
//! Owns the engines and the node's two mappings; touches SRAM and host
//! memory only through `MappedFile` (bounds-checked atomics).

use std::sync::atomic::{fence, Ordering};

use nic_abi::map::{self, RX_BUF_COUNT};
use nic_abi::packet::ROUTE_FLAG;
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_cluster_dir::MappedFile;

use super::fabric::{Launch, RtFabric, RtPacket};
use nic_device::device::{Engines, NicMem};

/// The send-DMA engine's packet whose tail has not left yet.
#[derive(Debug, Clone, Copy)]
struct TxWait {
    /// Not before this (ns): paced tail.
    not_before: u64,
    /// Until the fabric has released this many packets of ours.
    released: u64,
}

/// What one service pass found.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Service {
    /// Something moved.
    pub progress: bool,
    /// Something waits for a time to pass (paced fabric).
    pub timed: bool,
}

/// A node's memories as shared file mappings: the device model's
/// `NicMem` in real time.
pub(crate) struct MappedMem {
    pub sram: MappedFile,
    pub host: MappedFile,
}

impl NicMem for MappedMem {
    type Sram = MappedFile;

    #[inline]
    fn sram(&self) -> &MappedFile {
        &self.sram
    }

    #[inline]
    fn sram_mut(&mut self) -> &mut MappedFile {
        &mut self.sram
    }

    #[inline]
    fn sram_len(&self) -> usize {
        self.sram.len() as usize
    }

    #[inline]
    fn dma(&mut self, c: &HostDmaCmd) -> bool {
        let len = c.len as usize;
        let sram_ok = (c.sram as u64).checked_add(len as u64).is_some_and(|e| e <= self.sram.len());
        let host_ok = c.host.checked_add(len as u64).is_some_and(|e| e <= self.host.len());
        if !(sram_ok && host_ok) {
            return false;
        }
        match c.dir {
            DmaDir::HostToSram => self.sram.copy_from(c.sram as u64, &self.host, c.host, len),
            DmaDir::SramToHost => {
                // The last word goes last (Release): a host polling it sees
                // the whole block once it sees that word.
                let body = len.saturating_sub(4);
                let last = (len >= 4).then(|| self.sram.load_u32(c.sram as u64 + body as u64));
                self.host.copy_from(c.host, &self.sram, c.sram as u64, body)
                    && match last {
                        Some(Some(w)) => self.host.store_u32(c.host + body as u64, w),
                        Some(None) => false,
                        None => {
                            fence(Ordering::Release);
                            self.host.copy_from(c.host, &self.sram, c.sram as u64, len)
                        }
                    }
            }
        }
    }
}

pub(crate) struct RtEngines {
    pub node: usize,
    pub mem: MappedMem,
    dev: Engines,
    tx_wait: Option<TxWait>,
    /// Packets of ours that held us in the fabric.
    holds: u64,
    /// Last scan of the inbox for packets blocked too long (ns).
    last_stale_scan: u64,
}

impl RtEngines {
    /// The engines of `node` over its files, adopting the counters the
    /// registers hold (zero on a fresh cluster).
    pub fn new(node: usize, sram: MappedFile, host: MappedFile) -> RtEngines {
        let mem = MappedMem { sram, host };
        RtEngines {
            node,
            dev: Engines::adopt(&mem),
            mem,
            tx_wait: None,
            holds: 0,
            last_stale_scan: 0,
        }
    }

    /// The device counters.
    pub fn counters(&self) -> nic_fabric::stats::DeviceCounters {
        self.dev.c
    }

    /// Hardware reset of the engines (the NIC is being reset; its
    /// firmware is gone): `device::Engines::reset`; a packet waiting for
    /// its tail is forgotten.
    pub fn reset(&mut self) {
        self.tx_wait = None;
        self.dev.reset(&mut self.mem);
    }

    /// The NIC is down (being reset, firmware not running): its link
    /// loses whatever arrives, so that senders are not held.
    pub fn rx_discard(&mut self, fab: &RtFabric, pool: &mut Vec<Vec<u8>>) -> u64 {
        if fab.inbox_len(self.node) == 0 {
            return 0;
        }
        let gone: Vec<RtPacket> = fab.with_inbox(self.node, |q| q.drain(..).collect());
        let n = gone.len() as u64;
        for p in gone {
            fab.release(&p);
            pool.push(p.buf);
        }
        n
    }

    // ---- host-DMA ----

    /// Run every posted host-DMA command. True if any ran.
    pub fn hdma_service(&mut self) -> bool {
        let mut did = false;
        for _ in 0..map::HDMA_RING_LEN {
            if self.dev.hdma_start(&self.mem).is_none() {
                break;
            }
            self.dev.hdma_finish(&mut self.mem);
            did = true;
        }
        did
    }

    // ---- send-DMA ----

    /// Finish the packet on the wire if its tail left, then start posted
    /// commands (one packet on the wire at a time).
    pub fn tx_service(&mut self, fab: &RtFabric, now: u64, pool: &mut Vec<Vec<u8>>) -> Service {
        let mut s = Service::default();
        for _ in 0..=map::TXDMA_RING_LEN {
            if let Some(w) = self.tx_wait {
                if now < w.not_before || fab.released(self.node) < w.released {
                    s.timed |= now < w.not_before;
                    break;
                }
                self.tx_wait = None;
                self.dev.tx_finish(&mut self.mem);
                s.progress = true;
            }
            let (next, completed) = self.dev.tx_next(&mut self.mem);
            s.progress |= completed;
            let Some(p) = next else { break };
            let mut buf = pool.pop().unwrap_or_default();
            self.dev.tx_fill(&mut self.mem, p, &mut buf);
            let tail_out = match fab.launch(self.node, buf, p.route_len, now) {
                Launch::Gone { buf, tail_out } => {
                    pool.push(buf);
                    tail_out
                }
                Launch::Queued { holds, tail_out } => {
                    if holds {
                        self.holds += 1;
                    }
                    tail_out
                }
            };
            self.tx_wait = Some(TxWait { not_before: tail_out, released: self.holds });
            s.progress = true;
        }
        s
    }

    // ---- receive-DMA ----

    /// Take arrived packets into free receive buffers.
    pub fn rx_service(&mut self, fab: &RtFabric, now: u64, pool: &mut Vec<Vec<u8>>) -> Service {
        let mut s = Service::default();
        if fab.inbox_len(self.node) == 0 {
            return s;
        }
        for _ in 0..2 * RX_BUF_COUNT {
            let RtEngines { mem, dev, .. } = self;
            let mut stale: Vec<RtPacket> = Vec::new();
            let scan = now.saturating_sub(self.last_stale_scan) >= 1_000_000;
            let taken = fab.with_inbox(self.node, |q| {
                let p = q.front_mut()?;
                if p.due > now {
                    s.timed = true;
                    return None;
                }
                if p.wire().first().is_none_or(|b| b & ROUTE_FLAG != 0) {
                    return q.pop_front().map(|p| (p, None));
                }
                match dev.rx_take(mem, 0) {
                    Some(buf) => q.pop_front().map(|p| (p, Some(buf))),
                    None => {
                        if p.waited_since.is_none() {
                            p.waited_since = Some(now);
                            dev.c.rx_backpressure_waits += 1;
                        }
                        if scan {
                            // Packets queued behind it at the switch are
                            // dropped after the blocked-packet timeout.
                            let limit = fab.block_timeout();
                            let mut i = 1;
                            while i < q.len() {
                                if now.saturating_sub(q[i].since) >= limit {
                                    stale.extend(q.remove(i));
                                } else {
                                    i += 1;
                                }
                            }
                        }
                        None
                    }
                }
            });
            if scan {
                self.last_stale_scan = now;
            }
            for p in stale {
                fab.count_blocked_drop(&p);
                fab.release(&p);
                pool.push(p.buf);
            }
            let Some((p, buf)) = taken else { break };
            s.progress = true;
            match buf {
                None => {
                    self.dev.rx_misrouted(&mut self.mem);
                    fab.release(&p);
                    pool.push(p.buf);
                }
                Some(i) => self.rx_accept(fab, p, i, now, pool),
            }
        }
        s
    }

    fn rx_accept(
        &mut self,
        fab: &RtFabric,
        mut p: RtPacket,
        buf: u32,
        now: u64,
        pool: &mut Vec<Vec<u8>>,
    ) {
        if let Some(t) = p.waited_since.take() {
            let ns = now.saturating_sub(t);
            self.dev.c.rx_backpressure_ns += ns;
            fab.count_wait(&p, ns);
        }
        self.dev.rx_deliver(&mut self.mem, buf, p.wire(), p.corrupted);
        if p.duplicate {
            // The link delivers it a second time, right behind itself.
            p.duplicate = false;
            fab.with_inbox(self.node, |q| q.push_front(p));
        } else {
            fab.release(&p);
            pool.push(p.buf);
        }
    }
}
