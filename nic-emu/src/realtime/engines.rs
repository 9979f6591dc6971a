//! One NIC's three DMA engines in real time, over the node's mapped
//! `sram` and `host` files: the same protocol as the sim's device model
//! (`device.rs`, docs/hardware.md section 5), without its cost model.
//!
//! - Host-DMA: takes every posted `HDMA_RING` command in order and copies
//!   at once. A `SramToHost` copy writes its last word last (Release), so
//!   an event's `seq` is seen after the rest of it. Out-of-range or
//!   undecodable commands move nothing, count `HDMA_ERRORS`, and complete.
//! - Send-DMA: takes `TXDMA_RING` commands in order, one packet at a time:
//!   reads the packet, computes its CRC-32 into the header (in SRAM and on
//!   the wire) and launches it into the fabric. `TXDMA_DONE` counts it
//!   when its tail has left: at once, or when the fabric releases it
//!   (backpressure), or at link speed when paced. Malformed commands count
//!   `TXDMA_ERRORS` and complete.
//! - Receive-DMA: takes the packets of this NIC's inbox in order, each
//!   into the next free buffer of `RXFREE_RING` (with none free the
//!   packet waits: backpressure), checks the CRC of corrupted ones, writes
//!   an `RxDone` and bumps `RXDONE_PROD`. Packets still carrying route
//!   bytes are dropped and counted in `RX_DROPS`.
//!
//! Owns the engines' counters (the `dev` registers it writes); touches
//! SRAM and host memory only through `MappedFile` (bounds-checked atomics).

use std::sync::atomic::{fence, Ordering};

use host_driver::MappedFile;
use nic_abi::map::{self, RX_BUF_COUNT};
use nic_abi::packet::{field, ROUTE_FLAG};
use nic_abi::regs::{self, reg};
use nic_abi::rings::{self, DmaDir, HostDmaCmd, TxDmaCmd};

use super::fabric::{Launch, RtFabric, RtPacket};
use super::hw::MappedIo;
use crate::device::{crc_ok, rx_deliver, rx_store, take_free_buffer, tx_span, DeviceCounters};

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

pub(crate) struct Engines {
    pub node: usize,
    pub sram: MappedFile,
    pub host: MappedFile,
    hdma_done: u32,
    hdma_errors: u32,
    tx_cons: u32,
    tx_done: u32,
    tx_errors: u32,
    tx_wait: Option<TxWait>,
    /// Packets of ours that held us in the fabric.
    holds: u64,
    rx_free_cons: u32,
    rx_done_prod: u32,
    rx_drops: u32,
    /// Last scan of the inbox for packets blocked too long (ns).
    last_stale_scan: u64,
    pub c: DeviceCounters,
}

fn ld32(f: &MappedFile, off: u32) -> u32 {
    f.load_u32(off as u64).unwrap_or(0)
}

fn st32(f: &MappedFile, off: u32, v: u32) {
    f.store_u32(off as u64, v);
}

impl Engines {
    /// The engines of `node` over its files, adopting the counters the
    /// registers hold (zero on a fresh cluster).
    pub fn new(node: usize, sram: MappedFile, host: MappedFile) -> Engines {
        let mut e = Engines {
            node,
            sram,
            host,
            hdma_done: 0,
            hdma_errors: 0,
            tx_cons: 0,
            tx_done: 0,
            tx_errors: 0,
            tx_wait: None,
            holds: 0,
            rx_free_cons: 0,
            rx_done_prod: 0,
            rx_drops: 0,
            last_stale_scan: 0,
            c: DeviceCounters::default(),
        };
        e.adopt_registers();
        e
    }

    fn adopt_registers(&mut self) {
        let s = &self.sram;
        self.hdma_done = ld32(s, reg(regs::HDMA_DONE));
        self.hdma_errors = ld32(s, reg(regs::HDMA_ERRORS));
        self.tx_done = ld32(s, reg(regs::TXDMA_DONE));
        self.tx_cons = self.tx_done;
        self.tx_errors = ld32(s, reg(regs::TXDMA_ERRORS));
        self.rx_free_cons = ld32(s, reg(regs::RXFREE_CONS));
        self.rx_done_prod = ld32(s, reg(regs::RXDONE_PROD));
        self.rx_drops = ld32(s, reg(regs::RX_DROPS));
    }

    /// Hardware reset of the engines (the NIC is being reset; its
    /// firmware is gone): a packet on the wire finishes leaving, and
    /// commands the old firmware posted but the engines did not start are
    /// discarded (the producer registers are wound back to the engines'
    /// positions; the next firmware adopts them at init).
    pub fn reset(&mut self) {
        if self.tx_wait.take().is_some() {
            self.tx_done = self.tx_done.wrapping_add(1);
        }
        self.tx_cons = self.tx_done;
        st32(&self.sram, reg(regs::TXDMA_DONE), self.tx_done);
        st32(&self.sram, reg(regs::TXDMA_PROD), self.tx_cons);
        st32(&self.sram, reg(regs::HDMA_DONE), self.hdma_done);
        st32(&self.sram, reg(regs::HDMA_PROD), self.hdma_done);
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
            if ld32(&self.sram, reg(regs::HDMA_PROD)) == self.hdma_done {
                break;
            }
            let slot = rings::slot(
                map::HDMA_RING,
                map::HDMA_RING_LEN,
                rings::HDMA_CMD_SIZE,
                self.hdma_done,
            );
            let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
            self.sram.read(slot as u64, &mut b);
            let ok = HostDmaCmd::decode(&b).ok().is_some_and(|c| self.hdma_copy(&c));
            self.c.hdma_cmds += 1;
            if !ok {
                self.c.hdma_errors += 1;
                self.hdma_errors = self.hdma_errors.wrapping_add(1);
                st32(&self.sram, reg(regs::HDMA_ERRORS), self.hdma_errors);
            }
            self.hdma_done = self.hdma_done.wrapping_add(1);
            st32(&self.sram, reg(regs::HDMA_DONE), self.hdma_done);
            did = true;
        }
        did
    }

    fn hdma_copy(&mut self, c: &HostDmaCmd) -> bool {
        let len = c.len as usize;
        let sram_ok = (c.sram as u64).checked_add(len as u64).is_some_and(|e| e <= self.sram.len());
        let host_ok = c.host.checked_add(len as u64).is_some_and(|e| e <= self.host.len());
        if !(sram_ok && host_ok) {
            return false;
        }
        let ok = match c.dir {
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
        };
        if ok {
            self.c.hdma_bytes += len as u64;
        }
        ok
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
                self.tx_done = self.tx_done.wrapping_add(1);
                st32(&self.sram, reg(regs::TXDMA_DONE), self.tx_done);
                s.progress = true;
            }
            if ld32(&self.sram, reg(regs::TXDMA_PROD)) == self.tx_cons {
                break;
            }
            self.tx_start(fab, now, pool);
            s.progress = true;
        }
        s
    }

    fn tx_start(&mut self, fab: &RtFabric, now: u64, pool: &mut Vec<Vec<u8>>) {
        let slot =
            rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, self.tx_cons);
        let mut b = [0u8; rings::TXDMA_CMD_SIZE as usize];
        self.sram.read(slot as u64, &mut b);
        self.tx_cons = self.tx_cons.wrapping_add(1);
        let Some((s, len, rl)) = tx_span(TxDmaCmd::decode(&b), self.sram.len() as usize) else {
            self.c.txdma_errors += 1;
            self.tx_errors = self.tx_errors.wrapping_add(1);
            self.tx_done = self.tx_done.wrapping_add(1);
            st32(&self.sram, reg(regs::TXDMA_ERRORS), self.tx_errors);
            st32(&self.sram, reg(regs::TXDMA_DONE), self.tx_done);
            return;
        };
        let mut buf = pool.pop().unwrap_or_default();
        // A recycled buffer is overwritten below: no need to zero it.
        if buf.len() >= len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        self.sram.read(s as u64, &mut buf);
        // Hardware CRC over header + payload with the crc field zero.
        let at = rl + field::CRC;
        buf[at..at + 4].fill(0);
        let crc = crc32fast::hash(&buf[rl..]);
        buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        self.sram.write((s + at) as u64, &crc.to_le_bytes());
        self.c.tx_packets += 1;
        self.c.tx_bytes += len as u64;
        let tail_out = match fab.launch(self.node, buf, rl, now) {
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
    }

    // ---- receive-DMA ----

    /// Take arrived packets into free receive buffers.
    pub fn rx_service(&mut self, fab: &RtFabric, now: u64, pool: &mut Vec<Vec<u8>>) -> Service {
        let mut s = Service::default();
        if fab.inbox_len(self.node) == 0 {
            return s;
        }
        for _ in 0..2 * RX_BUF_COUNT {
            let Engines { sram, rx_free_cons, rx_done_prod, c, .. } = self;
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
                let mut io = MappedIo(sram);
                match take_free_buffer(&mut io, rx_free_cons, *rx_done_prod, 0, &mut c.rx_bad_free)
                {
                    Some(buf) => q.pop_front().map(|p| (p, Some(buf))),
                    None => {
                        if p.waited_since.is_none() {
                            p.waited_since = Some(now);
                            c.rx_backpressure_waits += 1;
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
                    self.c.rx_misrouted += 1;
                    self.rx_drops = self.rx_drops.wrapping_add(1);
                    st32(&self.sram, reg(regs::RX_DROPS), self.rx_drops);
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
            self.c.rx_backpressure_ns += ns;
            fab.count_wait(&p, ns);
        }
        let data = p.wire();
        // Only a corrupted packet can fail its CRC (its sender computed it
        // over exactly these bytes).
        let stored = rx_store(data.len(), || p.corrupted && !crc_ok(data));
        let mut io = MappedIo(&self.sram);
        rx_deliver(&mut io, &mut self.c, &mut self.rx_done_prod, buf, data, stored);
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
