//! One NIC's three DMA engines in real time: the device model's engines
//! (`device::Engines`, the one implementation the sim runs too) over the
//! node's mapped `sram` and `host` files, stepped as fast as the device
//! thread goes, without the sim's cost model.
//!
//! - Host-DMA: runs every posted command at once. A `SramToHost` copy
//!   writes its last word last (Release), so an event's `seq` is seen
//!   after the rest of it ([`MappedMem`]).
//! - Send-DMA: one packet at a time, its CRC computed in SRAM and put
//!   into its header there, and the packet lent to the fabric in place
//!   (paced, or under `LEND_MIN` bytes: read into a pooled buffer with
//!   its CRC, as the sim does). A lent packet's CRC is computed only
//!   where something may check or record it (`RtFabric::crc_matters`:
//!   corrupting faults, `check_crc`, a capture, debug builds); else its
//!   crc field is zero, which nothing reads. Its tail has left at once, or
//!   when the fabric releases it (backpressure), or at link speed when
//!   paced; the engine then starts the next command, but `TXDMA_DONE`
//!   counts a lent packet only once its bytes have been taken (in order:
//!   handed-off packets are owed). One not taken by this NIC's next step
//!   is reclaimed (copied out of SRAM into the fabric's buffer, see
//!   `fabric`), so the firmware gets its buffer back no later than one
//!   step after it would have without lending.
//! - Receive-DMA: takes the packets of this NIC's inbox in order, each
//!   into the next free receive buffer (a lent one straight from its
//!   sender's transmit buffer; with none free the packet waits:
//!   backpressure); packets blocked there too long, the first and those
//!   behind it, are dropped as the switch would.
//!
//! Owns the engines and the node's two mappings; touches SRAM and host
//! memory only through `MappedFile` (bounds-checked atomics, and the
//! in-place view of a lent packet's bytes for its CRC).

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use nic_abi::map::{self, RX_BUF_COUNT};
use nic_abi::packet::{field, ROUTE_FLAG};
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_cluster_dir::MappedFile;

use super::fabric::{copy_wire, Body, Held, Launch, Lend, Reclaim, RtFabric, RtPacket, LEND_MAX};
use nic_device::device::{crc_ok, rx_checks, Engines, NicMem, TxSpan};

/// Shorter packets are not lent but read out: the copy saved is small,
/// and with every packet lent an 8-byte ping-pong took 1.68 us one way
/// instead of 1.55 (in-process, `rt_inproc_latency`).
const LEND_MIN: usize = 1024;

/// A packet lent to the fabric whose bytes may not have been taken yet.
#[derive(Debug, Clone, Copy)]
struct Lent {
    seq: u32,
    /// The NIC it went to.
    dst: usize,
    /// The step (`RtEngines::steps`) it was launched in.
    step: u64,
}

/// The send-DMA engine's packet whose tail has not left yet.
#[derive(Debug, Clone, Copy)]
struct TxWait {
    /// Not before this (ns): paced tail.
    not_before: u64,
    /// Until the fabric has released this many packets of ours.
    released: u64,
    lent: Option<Lent>,
}

/// CRC-32 of `p`'s packet (header and payload, crc field as zero) where
/// it lies in `sram`, read in place; its crc field is zeroed first (the
/// engine fills it in next), so the head is hashed in one pass. None if a
/// range leaves SRAM.
fn sram_crc(sram: &MappedFile, p: &TxSpan) -> Option<u32> {
    let hdr = (p.sram + p.route_len) as u64;
    let head_end = (p.sram + p.head_len()) as u64;
    sram.write(hdr + field::CRC as u64, &[0; 4]).then_some(())?;
    let mut h = crc32fast::Hasher::new();
    // SAFETY: the packet's bytes are the send-DMA engine's: the firmware
    // gave them with the command and does not write them until TXDMA_DONE
    // counts it, which is later (`tx_service`); this NIC's MCP and
    // engines run on this thread only, and other threads only read a
    // transmit buffer (a receiving engine taking a lent packet). A QEMU
    // guest's stores come from another process.
    unsafe {
        sram.with_bytes(hdr, (head_end - hdr) as usize, |b| h.update(b))?;
        if p.tail_len > 0 {
            sram.with_bytes(p.tail_sram as u64, p.tail_len, |b| h.update(b))?;
        }
    }
    Some(h.finalize())
}

/// Make lent packet `l` of NIC `node` the fabric's own: true when its
/// transmit buffer is free now (taken already, or copied out: counted in
/// `reclaimed`), false while another thread's engine is copying it.
fn take_back(fab: &RtFabric, held: &mut Held, node: usize, l: Lent, reclaimed: &mut u64) -> bool {
    match fab.reclaim(held, node, l.dst, l.seq) {
        Reclaim::Free => true,
        Reclaim::Copied => {
            *reclaimed += 1;
            true
        }
        Reclaim::Busy => false,
    }
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
    /// Packets whose tail left but whose `TXDMA_DONE` waits for their
    /// bytes to be taken (None: not lent, only behind one that is), oldest
    /// first (`Engines::tx_hand_off`).
    owed: VecDeque<Option<Lent>>,
    /// Lend numbers given out.
    lends: u32,
    /// Steps of this NIC begun (`begin_step`).
    steps: u64,
    /// Packets lent, and reclaimed (`NodeCounters`).
    lent: u64,
    reclaimed: u64,
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
            owed: VecDeque::new(),
            lends: 0,
            steps: 0,
            lent: 0,
            reclaimed: 0,
            holds: 0,
            last_stale_scan: 0,
        }
    }

    /// The device counters.
    pub fn counters(&self) -> nic_fabric::stats::DeviceCounters {
        self.dev.c
    }

    /// Packets lent to the fabric in place, and those reclaimed.
    pub fn lend_counts(&self) -> (u64, u64) {
        (self.lent, self.reclaimed)
    }

    /// A step of this NIC begins: lent packets launched before may now be
    /// reclaimed (the receivers have had their chance).
    #[inline]
    pub fn begin_step(&mut self) {
        self.steps += 1;
    }

    /// Hardware reset of the engines (the NIC is being reset; its
    /// firmware is gone): `device::Engines::reset`; a packet waiting for
    /// its tail is forgotten, and packets lent from this SRAM are taken
    /// back first (`unlend`), as the next firmware will write it.
    pub fn reset(&mut self, fab: &RtFabric, held: &mut Held) {
        self.unlend(fab, held);
        self.tx_wait = None;
        self.owed.clear();
        self.dev.reset(&mut self.mem);
    }

    /// Make every packet lent from this SRAM the fabric's own (the NIC
    /// goes down or resets): waits while another thread's engine is
    /// copying one.
    pub fn unlend(&mut self, fab: &RtFabric, held: &mut Held) {
        let lent = self.tx_wait.and_then(|w| w.lent).into_iter();
        for l in lent.chain(self.owed.iter().flatten().copied()) {
            while !take_back(fab, held, self.node, l, &mut self.reclaimed) {
                std::thread::yield_now();
            }
        }
    }

    /// The NIC is down (being reset, firmware not running): its link
    /// loses whatever arrives, so that senders are not held.
    pub fn rx_discard(&mut self, fab: &RtFabric, held: &mut Held, pool: &mut Vec<Vec<u8>>) -> u64 {
        if fab.inbox_len(self.node) == 0 {
            return 0;
        }
        let gone: Vec<RtPacket> = fab.with_inbox(held, self.node, |q| q.drain(..).collect());
        let n = gone.len() as u64;
        for p in gone {
            fab.release(&p);
            p.body.recycle(pool);
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

    /// Complete the handed-off packets whose bytes have been taken, in
    /// order; reclaim those launched in an earlier step. True if any
    /// completed; `waits`: one is being copied on another thread.
    fn settle_owed(&mut self, fab: &RtFabric, held: &mut Held, waits: &mut bool) -> bool {
        let mut did = false;
        while let Some(&front) = self.owed.front() {
            if let Some(l) = front {
                let free = fab.is_returned(self.node, l.seq)
                    || (l.step < self.steps
                        && take_back(fab, held, self.node, l, &mut self.reclaimed));
                if !free {
                    *waits |= l.step < self.steps;
                    break;
                }
            }
            self.owed.pop_front();
            self.dev.tx_complete_owed(&mut self.mem);
            did = true;
        }
        did
    }

    /// Finish the packet on the wire if its tail left, then start posted
    /// commands (one packet on the wire at a time).
    pub fn tx_service(
        &mut self,
        fab: &RtFabric,
        held: &mut Held,
        now: u64,
        pool: &mut Vec<Vec<u8>>,
    ) -> Service {
        let mut s = Service::default();
        s.progress |= self.settle_owed(fab, held, &mut s.timed);
        for _ in 0..=map::TXDMA_RING_LEN {
            if let Some(w) = self.tx_wait {
                if now < w.not_before || fab.released(self.node) < w.released {
                    s.timed |= now < w.not_before;
                    break;
                }
                self.tx_wait = None;
                let taken = w.lent.is_none_or(|l| fab.is_returned(self.node, l.seq));
                if taken && self.owed.is_empty() {
                    self.dev.tx_finish(&mut self.mem);
                } else {
                    self.dev.tx_hand_off();
                    self.owed.push_back(w.lent);
                }
                s.progress = true;
            }
            let (next, completed) = self.dev.tx_next(&mut self.mem);
            s.progress |= completed;
            let Some(p) = next else { break };
            // Lend the packet in place (with room for its lend number
            // while owed ones wait), its CRC put in where anything may
            // check it, else the field zeroed; else read it out.
            let lend = p.len >= LEND_MIN && fab.lends() && self.owed.len() + 1 < LEND_MAX;
            let crc = match (lend, fab.crc_matters()) {
                (false, _) => None,
                (true, true) => sram_crc(&self.mem.sram, &p).map(Some),
                (true, false) => Some(None),
            };
            let body = match crc {
                Some(crc) => {
                    self.dev.tx_seal(&mut self.mem, p, crc.unwrap_or(0));
                    let seq = self.lends;
                    self.lends = self.lends.wrapping_add(1);
                    fab.lend_out(self.node, seq);
                    self.lent += 1;
                    Body::Lent(Lend { span: p, seq, crc: crc.is_some() })
                }
                None => {
                    let mut buf = pool.pop().unwrap_or_default();
                    self.dev.tx_fill(&mut self.mem, p, &mut buf);
                    Body::Owned(buf)
                }
            };
            let seq = match &body {
                Body::Lent(l) => Some(l.seq),
                Body::Owned(_) => None,
            };
            let (tail_out, lent) = match fab.launch(held, self.node, body, p.route_len, now) {
                Launch::Gone { body, tail_out } => {
                    body.recycle(pool);
                    (tail_out, None)
                }
                Launch::Queued { holds, tail_out, dst, lent } => {
                    if holds {
                        self.holds += 1;
                    }
                    let l = seq.filter(|_| lent).map(|seq| Lent { seq, dst, step: self.steps });
                    (tail_out, l)
                }
            };
            self.tx_wait = Some(TxWait { not_before: tail_out, released: self.holds, lent });
            s.progress = true;
        }
        s
    }

    // ---- receive-DMA ----

    /// Take arrived packets into free receive buffers.
    pub fn rx_service(
        &mut self,
        fab: &RtFabric,
        held: &mut Held,
        now: u64,
        pool: &mut Vec<Vec<u8>>,
    ) -> Service {
        let mut s = Service::default();
        if fab.inbox_len(self.node) == 0 {
            return s;
        }
        for _ in 0..2 * RX_BUF_COUNT {
            let RtEngines { mem, dev, .. } = self;
            let mut stale: Vec<RtPacket> = Vec::new();
            let scan = now.saturating_sub(self.last_stale_scan) >= 1_000_000;
            let taken = fab.with_inbox(held, self.node, |q| {
                let p = q.front_mut()?;
                if p.due > now {
                    s.timed = true;
                    return None;
                }
                if fab.first_wire_byte(p).is_none_or(|b| b & ROUTE_FLAG != 0) {
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
                            // It and the packets queued behind it at the
                            // switch are dropped after the blocked-packet
                            // timeout, as the switch feeding this NIC
                            // would: a NIC that takes nothing (its
                            // firmware wedged, or stopped in a debugger)
                            // holds up no sender longer than that.
                            let limit = fab.block_timeout();
                            let mut i = 0;
                            while i < q.len() {
                                if now.saturating_sub(q[i].since) >= limit {
                                    // (Only the first has waited for a buffer.)
                                    if let Some(t) = q[i].waited_since {
                                        dev.c.rx_backpressure_ns += now.saturating_sub(t);
                                    }
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
                p.body.recycle(pool);
            }
            let Some((p, buf)) = taken else { break };
            s.progress = true;
            match buf {
                None => {
                    self.dev.rx_misrouted(&mut self.mem);
                    fab.release(&p);
                    p.body.recycle(pool);
                }
                Some(i) => self.rx_accept(fab, held, p, i, now, pool),
            }
        }
        s
    }

    fn rx_accept(
        &mut self,
        fab: &RtFabric,
        held: &mut Held,
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
        match &p.body {
            Body::Owned(b) => {
                let wire = &b[p.pos.min(b.len())..];
                self.dev.rx_deliver(&mut self.mem, buf, wire, p.corrupted || fab.check_crc);
            }
            Body::Lent(l) => {
                // Straight from the sender's transmit buffer (never
                // corrupted: a flipped bit made it owned).
                let len = p.wire_len();
                let n = len.min(map::BUF_STRIDE as usize);
                let at = map::rx_buf(buf) as u64;
                copy_wire(&self.mem.sram, at, fab.sram(p.src), &l.span, p.pos, n);
                let (n, status) = rx_checks(len, p.corrupted || fab.check_crc, || {
                    let mut b = vec![0u8; n];
                    self.mem.sram.read(at, &mut b);
                    crc_ok(&b)
                });
                self.dev.rx_complete(&mut self.mem, buf, n, status);
            }
        }
        if p.duplicate {
            // The link delivers it a second time, right behind itself.
            p.duplicate = false;
            fab.with_inbox(held, self.node, |q| q.push_front(p));
        } else {
            fab.release(&p);
            p.body.recycle(pool);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_device::faults::Faults;
    use nic_device::profile::Profile;
    use nic_fabric::topology::Topology;
    use std::sync::Arc;

    /// A fresh zeroed file of `len` bytes, mapped twice (its path removed
    /// at once): one mapping for the fabric, one for the engines.
    fn file(name: &str, len: u64) -> (MappedFile, MappedFile) {
        let path = std::env::temp_dir().join(format!("rt-engines-{}-{name}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let m = (MappedFile::open(&path).unwrap(), MappedFile::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        m
    }

    /// A NIC that never posts a receive buffer (its firmware wedged, or
    /// stopped in a debugger) keeps the packet sent to it for the
    /// switches' blocked-packet timeout, then the switch feeding it drops
    /// it: counted against its sender, its sender let go.
    #[test]
    fn a_packet_a_nic_never_takes_is_dropped_after_the_blocked_packet_timeout() {
        let profile = Profile::load("lanai9-gm").unwrap();
        let timeout = profile.switch.blocked_drop_timeout_ns;
        let layout = Topology::Star.layout(2, 8).unwrap();
        let sram_len = u64::from(profile.nic.sram_bytes);
        let (s0, _) = file("s0", sram_len);
        let (s1, s1_eng) = file("s1", sram_len);
        let (_, h1) = file("h1", 1 << 20);
        let fab = RtFabric::new(
            &layout,
            &profile,
            1,
            Faults::NONE,
            Default::default(),
            vec![Arc::new(s0), Arc::new(s1)],
        );
        let mut eng = RtEngines::new(1, s1_eng, h1);
        let mut held = Held::none();
        let mut pool = Vec::new();
        // Packets of one route byte to port 1 and a header's worth of
        // bytes, one more than the inbox holds without holding its sender.
        let n = super::super::fabric::INBOX_SLACK + 1;
        for _ in 0..n {
            let mut wire = vec![ROUTE_FLAG | 1];
            wire.extend(std::iter::repeat_n(0u8, 100));
            let _ = fab.launch(&mut held, 0, Body::Owned(wire), 1, 1_000);
        }
        assert_eq!(fab.inbox_len(1), n);
        // No receive buffer: they wait, within the timeout.
        eng.rx_service(&fab, &mut held, 2_000_000, &mut pool);
        eng.rx_service(&fab, &mut held, timeout - 1_000_000, &mut pool);
        assert_eq!(fab.inbox_len(1), n, "dropped before the timeout");
        assert_eq!((fab.source_drops(0).blocked_drops, fab.released(0)), (0, 0));
        assert_eq!(eng.counters().rx_backpressure_waits, 1);
        // Past it: every one dropped (the first too), counted, the sender
        // the last one held let go.
        eng.rx_service(&fab, &mut held, timeout + 2_000_000, &mut pool);
        assert_eq!(fab.inbox_len(1), 0, "still waiting after the timeout");
        assert_eq!(fab.source_drops(0).blocked_drops, n as u64);
        assert_eq!(fab.released(0), 1);
        assert!(eng.counters().rx_backpressure_ns >= timeout - 1_000_000);
    }
}
