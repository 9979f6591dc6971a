//! The real-time fabric: the same links, crossbar switches and source
//! routes as the sim's (`fabric::Wiring`, `fabric::switch_out`), and the
//! same link entry (`fabric::enter_link`: counters, fault injection),
//! moving whole packets between NICs in wall-clock time.
//!
//! A packet launched by a NIC's send-DMA engine walks its route at once:
//! every switch consumes one route byte and picks its output link, fault
//! injection (seeded, per link, as in the sim) may drop, corrupt or
//! duplicate it on each link, and it lands in the inbox of the NIC at the
//! end (a FIFO standing for the last link and the switch output into that
//! NIC). The receiving NIC's receive-DMA engine takes it from there when
//! a receive buffer is free (`engines`).
//!
//! Backpressure. An inbox holds up to `INBOX_SLACK` packets for free (the
//! links' and the switch's buffering); a packet arriving at a fuller
//! inbox "holds its sender": that NIC's send-DMA engine does not finish
//! the command (TXDMA_DONE) until the packet has been taken or dropped, as
//! a blocked worm holds its sender's link. A packet that waited in an
//! inbox longer than the switch's blocked-packet timeout (the first, for
//! want of a receive buffer, or one behind it) is dropped, as the switch
//! would.
//!
//! Lending. Unpaced, a packet's bytes stay in its sender's SRAM: the
//! send-DMA engine lends them (`Body::Lent`), and the receiving NIC's
//! receive-DMA engine copies them straight from the sender's transmit
//! buffer into its receive buffer, one copy where the wire buffer took
//! two. The sender's `TXDMA_DONE` waits until the bytes are taken (or the
//! packet left the fabric otherwise: `release`), so the firmware cannot
//! reuse the buffer before. A packet not taken by the sender's next step
//! is reclaimed (`reclaim`): its bytes are copied out into a wire buffer
//! (`Body::Owned`) and the sender completes as it would have. A packet
//! also becomes owned where something needs its bytes on the way: a
//! fault flipping a bit of it, a capture recording it. Paced packets are
//! owned from the start (their sender completes before they arrive).
//!
//! Timing. By default packets move as fast as the threads move them. With
//! `Pacing::LinkBandwidth` each directed link is busy for len / bandwidth
//! per packet (packets wait for a busy link), each hop adds the cable and
//! switch latency, and a packet is only taken by the receiver once its
//! tail would be in; the sender's command completes when its tail has
//! left. This is a store-free approximation of the sim's wormhole model.
//!
//! One device thread. When one thread runs every NIC (the default), it
//! holds every inbox locked for its life (`Held`) and counts plain link
//! crossings in counters only it writes (`RtLink::packets`, `bytes`): a
//! packet then crosses the fabric without a lock or an atomic
//! read-modify-write. Each of those waits for the stores before it (the
//! packet's copies) to leave the store buffer: with a lock per link and
//! per inbox (eight such instructions a packet) they took about a tenth
//! of the device thread's time.
//!
//! Owns the links, switches, inboxes and counters; shared by every worker
//! thread (`Sync`: each link's state, each inbox and each sender's drop
//! counters behind a mutex of its own).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nic_abi::packet::field;
use nic_cluster_dir::MappedFile;
use nic_device::device::TxSpan;
use nic_device::faults::flip_bit;

use nic_device::faults::{FaultInjector, Faults};
use nic_device::profile::Profile;
use nic_fabric::fabric::{
    enter_link_with, switch_out, DownTimes, Hit, LinkEnd, LinkSpec, LinkStats, Outage, SourceDrops,
    Wiring, NO_LINK,
};
use nic_fabric::topology::Layout;

/// Packets an inbox takes before a new arrival holds its sender.
pub(crate) const INBOX_SLACK: usize = 8;

/// Lent packets a sender may have out at once (its lend numbers modulo
/// this name their `returned` flags).
pub(crate) const LEND_MAX: usize = 32;

/// How the real-time fabric spends time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pacing {
    /// As fast as the device threads can move packets.
    #[default]
    AsFastAsPossible,
    /// Links carry the profile's bandwidth; hops add cable and switch
    /// latency.
    LinkBandwidth,
}

impl std::str::FromStr for Pacing {
    type Err = String;
    fn from_str(s: &str) -> Result<Pacing, String> {
        match s {
            "fast" | "none" => Ok(Pacing::AsFastAsPossible),
            "link" | "bandwidth" => Ok(Pacing::LinkBandwidth),
            _ => Err(format!("unknown pacing `{s}` (fast or link)")),
        }
    }
}

/// What `RtFabric::reclaim` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// The packet's bytes had been taken (or it left the fabric).
    Free,
    /// It still waited in the inbox: its bytes were copied out.
    Copied,
    /// A receiving engine on another thread is copying it right now.
    Busy,
}

/// A packet's bytes.
pub(crate) enum Body {
    /// Wire bytes as sent: route, header, payload.
    Owned(Vec<u8>),
    /// Still in the sender's SRAM, lent by its send-DMA engine.
    Lent(Lend),
}

/// A packet lent from its sender's SRAM.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lend {
    /// Where its wire bytes are (route, header, payload).
    pub span: TxSpan,
    /// The sender's lend number (`RtFabric::returned`).
    pub seq: u32,
    /// Its CRC is in its header. Else the field is zero: nothing on this
    /// fabric could check it when it was sent (`RtFabric::crc_matters`),
    /// and `own` puts it in should a fault or a capture need the bytes
    /// after all.
    pub crc: bool,
}

impl Body {
    /// Wire bytes as sent.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Body::Owned(b) => b.len(),
            Body::Lent(l) => l.span.len,
        }
    }

    /// A wire buffer back to the pool.
    #[inline]
    pub fn recycle(self, pool: &mut Vec<Vec<u8>>) {
        if let Body::Owned(b) = self {
            pool.push(b);
        }
    }
}

/// Copy `n` wire bytes of `span` (in `src`), from wire byte `from` on,
/// to `dst` at `at`: the head, then the gathered tail. False if a range
/// lies outside its file.
pub(crate) fn copy_wire(
    dst: &MappedFile,
    at: u64,
    src: &MappedFile,
    span: &TxSpan,
    from: usize,
    n: usize,
) -> bool {
    let head = span.head_len();
    let end = (from + n).min(span.len);
    let mut ok = true;
    let mut to = at;
    if from < head {
        let k = end.min(head) - from;
        ok &= dst.copy_from(to, src, (span.sram + from) as u64, k);
        to += k as u64;
    }
    if end > head {
        let t0 = from.max(head) - head;
        ok &= dst.copy_from(to, src, (span.tail_sram + t0) as u64, end - head - t0);
    }
    ok
}

/// Put the CRC-32 of `wire`'s header and payload (after `route_len` route
/// bytes; crc field as zero) into its header, as the send-DMA engine
/// does.
fn put_crc(wire: &mut [u8], route_len: usize) {
    let at = route_len + field::CRC;
    let Some(f) = wire.get_mut(at..at + 4) else { return };
    f.fill(0);
    let crc = crc32fast::hash(&wire[route_len..]);
    wire[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A packet in the real-time fabric.
pub(crate) struct RtPacket {
    pub body: Body,
    /// Route bytes consumed by switches.
    pub pos: usize,
    pub src: usize,
    /// The link into the receiving NIC.
    pub link_in: u32,
    pub corrupted: bool,
    /// Deliver it once more after this delivery (fault injection).
    pub duplicate: bool,
    /// Its sender's send-DMA engine waits for it to be taken or dropped.
    pub holds_sender: bool,
    /// Not to be taken before this (ns; 0 = at once).
    pub due: u64,
    /// When it entered the inbox (ns).
    pub since: u64,
    /// When it first found no receive buffer (ns), if it did.
    pub waited_since: Option<u64>,
}

impl RtPacket {
    /// Bytes the NIC sees (consumed route bytes removed).
    #[inline]
    pub fn wire_len(&self) -> usize {
        self.body.len().saturating_sub(self.pos)
    }
}

/// What became of a launched packet.
pub(crate) enum Launch {
    /// Dropped in the fabric (fault, bad route): the body comes back.
    Gone { body: Body, tail_out: u64 },
    /// In NIC `dst`'s inbox. `holds`: the sender must wait for its
    /// release. `lent`: still lent (not made owned on the way).
    Queued { holds: bool, tail_out: u64, dst: usize, lent: bool },
}

/// What a real-time link changes as packets cross it.
struct LinkState {
    stats: LinkStats,
    fault: Option<FaultInjector>,
    /// Paced: the link is busy until then (ns).
    busy_until: u64,
    /// When the link is down, [from, until) on the cluster clock, and the
    /// outage's index (`RtFabric::set_outages`).
    down: DownTimes,
}

struct RtLink {
    spec: LinkSpec,
    st: Mutex<LinkState>,
    /// No fault injection on this link.
    plain: bool,
    /// Crossings counted without the lock (`RtFabric::launch`'s plain
    /// path, one device thread only: a load and a store, no
    /// read-modify-write), added to `st`'s counters when read.
    packets: AtomicU64,
    bytes: AtomicU64,
}

/// The inboxes a device thread holds locked while it runs: every one of
/// them when it runs every NIC (no other thread touches an inbox then),
/// else none (each access locks).
pub(crate) struct Held<'a> {
    q: Vec<MutexGuard<'a, VecDeque<RtPacket>>>,
}

impl Held<'_> {
    /// Nothing held: every access locks.
    pub fn none() -> Held<'static> {
        Held { q: Vec::new() }
    }

    /// Does this thread hold every inbox (the only device thread)?
    #[inline]
    fn all(&self) -> bool {
        !self.q.is_empty()
    }
}

struct Inbox {
    q: Mutex<VecDeque<RtPacket>>,
    /// Mirror of q.len(), read without the lock.
    len: AtomicUsize,
}

pub(crate) struct RtFabric {
    links: Vec<RtLink>,
    switches: Vec<Vec<u32>>,
    nic_out: Vec<u32>,
    inboxes: Vec<Inbox>,
    /// Per sender: packets that held it and were taken or dropped.
    released: Vec<AtomicU64>,
    by_src: Vec<Mutex<SourceDrops>>,
    faults: Faults,
    paced: bool,
    block_timeout: u64,
    /// Per outage: packets lost to it.
    outage_drops: Mutex<Vec<u64>>,
    /// With `capture_to`: every packet at every link it enters.
    capture: Mutex<Option<nic_fabric::capture::Capture>>,
    capturing: AtomicBool,
    /// Some link has outages (`set_outages`): no link crossing skips its
    /// lock.
    outages: AtomicBool,
    /// Every NIC's SRAM (lent packets are read from there).
    srams: Vec<Arc<MappedFile>>,
    /// Per sender, per lend number modulo `LEND_MAX`: the lent packet's
    /// bytes have been taken (or it left the fabric, or was reclaimed).
    returned: Vec<Vec<AtomicBool>>,
    /// Receivers check every packet's CRC (`RtConfig::check_crc`).
    pub check_crc: bool,
}

/// How far behind a launch's time the capture writes out what it holds
/// (`Capture::release`): device threads read the clock before they take
/// the capture's lock, so a record may arrive a little behind another
/// thread's; one more than this behind is put in its place when the
/// capture is finished. Paced packets' later hops are stamped ahead of
/// the launch and are held until the window passes them.
pub const CAPTURE_WINDOW_NS: u64 = 20_000_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RtFabric {
    /// The fabric between `layout`'s NICs, whose SRAMs are `srams` (in
    /// node order).
    pub fn new(
        layout: &Layout,
        profile: &Profile,
        seed: u64,
        faults: Faults,
        pacing: Pacing,
        srams: Vec<Arc<MappedFile>>,
    ) -> RtFabric {
        let Wiring { links, switches, nic_out } = Wiring::new(layout, profile);
        let n = layout.nodes();
        let links = links
            .into_iter()
            .enumerate()
            .map(|(id, spec)| {
                let fault = Wiring::injector(seed, &faults, id);
                RtLink {
                    spec,
                    plain: fault.is_none(),
                    st: Mutex::new(LinkState {
                        stats: LinkStats::new(spec.from, spec.to),
                        fault,
                        busy_until: 0,
                        down: Vec::new(),
                    }),
                    packets: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                }
            })
            .collect();
        RtFabric {
            links,
            switches,
            nic_out,
            inboxes: (0..n)
                .map(|_| Inbox { q: Mutex::new(VecDeque::new()), len: AtomicUsize::new(0) })
                .collect(),
            released: (0..n).map(|_| AtomicU64::new(0)).collect(),
            by_src: (0..n).map(|_| Mutex::new(SourceDrops::default())).collect(),
            faults,
            paced: pacing == Pacing::LinkBandwidth,
            block_timeout: profile.switch.blocked_drop_timeout_ns,
            outage_drops: Mutex::new(Vec::new()),
            capture: Mutex::new(None),
            capturing: AtomicBool::new(false),
            outages: AtomicBool::new(false),
            returned: (0..n)
                .map(|_| (0..LEND_MAX).map(|_| AtomicBool::new(true)).collect())
                .collect(),
            srams,
            check_crc: false,
        }
    }

    /// May a send-DMA engine lend its packets (`Body::Lent`)? Not when
    /// paced: the sender completes when its tail has left, before the
    /// packet may be taken.
    #[inline]
    pub fn lends(&self) -> bool {
        !self.paced
    }

    /// NIC `n`'s SRAM.
    #[inline]
    pub fn sram(&self, n: usize) -> &MappedFile {
        &self.srams[n]
    }

    /// Can a packet's CRC matter on this fabric? Only a receiving engine
    /// checks it, and only for a packet a fault corrupted on the way or
    /// with `check_crc` (and in debug builds, every packet); a capture
    /// records it. Without corrupting faults, `check_crc` or a capture, no
    /// packet is corrupted and none is checked, so the send-DMA engine may
    /// lend a packet without computing it (`Lend::crc`).
    #[inline]
    pub fn crc_matters(&self) -> bool {
        cfg!(debug_assertions)
            || self.faults.corrupt > 0.0
            || self.check_crc
            || self.capturing.load(Ordering::Acquire)
    }

    /// `src` lends packet `seq`: not taken yet.
    #[inline]
    pub fn lend_out(&self, src: usize, seq: u32) {
        self.returned[src][seq as usize % LEND_MAX].store(false, Ordering::Relaxed);
    }

    /// Has `src`'s lent packet `seq` been taken (or left the fabric)?
    /// Acquire: the taker's copy is complete.
    #[inline]
    pub fn is_returned(&self, src: usize, seq: u32) -> bool {
        self.returned[src][seq as usize % LEND_MAX].load(Ordering::Acquire)
    }

    /// Copy a lent body's bytes out of its sender's SRAM into a wire
    /// buffer of its own. Returns the lend it was, if it was one.
    pub fn materialize(&self, body: &mut Body, src: usize) -> Option<Lend> {
        let Body::Lent(l) = *body else { return None };
        let mut buf = vec![0u8; l.span.len];
        let head = l.span.head_len();
        let sram = self.sram(src);
        sram.read(l.span.sram as u64, &mut buf[..head]);
        sram.read(l.span.tail_sram as u64, &mut buf[head..]);
        *body = Body::Owned(buf);
        Some(l)
    }

    /// Make a lent body owned (`materialize`) because its bytes are
    /// needed on the way (a bit to flip, a capture), with its CRC put in
    /// if it was lent without one. `route_len`: its route bytes.
    fn own(&self, body: &mut Body, src: usize, route_len: usize) {
        if let (Some(l), Body::Owned(b)) = (self.materialize(body, src), &mut *body) {
            if !l.crc {
                put_crc(b, route_len);
            }
        }
    }

    /// `src` wants lent packet `seq`, sent to `dst`, back (its send-DMA
    /// engine is about to complete it, or its NIC resets): if the packet
    /// still waits in `dst`'s inbox its bytes are copied out there
    /// (`materialize`).
    pub fn reclaim(&self, held: &mut Held, src: usize, dst: usize, seq: u32) -> Reclaim {
        if self.is_returned(src, seq) {
            return Reclaim::Free;
        }
        let found = self.with_inbox(held, dst, |q| {
            let p = q
                .iter_mut()
                .find(|p| p.src == src && matches!(p.body, Body::Lent(l) if l.seq == seq))?;
            self.materialize(&mut p.body, src)
        });
        if found.is_some() {
            self.returned[src][seq as usize % LEND_MAX].store(true, Ordering::Release);
            return Reclaim::Copied;
        }
        if self.is_returned(src, seq) {
            Reclaim::Free
        } else {
            Reclaim::Busy
        }
    }

    /// Write every packet from now on to a pcapng file at `path`
    /// (`nic_fabric::capture`; times on the cluster clock).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let specs: Vec<LinkSpec> = self.links.iter().map(|l| l.spec).collect();
        *lock(&self.capture) = Some(nic_fabric::capture::Capture::create(path, &specs)?);
        self.capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// Stop capturing: the records written, or the first write error.
    pub fn finish_capture(&self) -> std::io::Result<u64> {
        self.capturing.store(false, Ordering::Release);
        lock(&self.capture).take().map_or(Ok(0), |c| c.finish())
    }

    /// Take links down (times on the cluster clock): a packet entering a
    /// link while it is down is lost, as in the sim (`Fabric::set_outages`).
    pub fn set_outages(&self, outages: &[Outage]) -> Result<(), String> {
        let mut drops = lock(&self.outage_drops);
        for o in outages {
            let Some(l) = self.links.get(o.link) else {
                return Err(format!("link {} does not exist", o.link));
            };
            lock(&l.st).down.push((o.from_ns, o.until_ns, o.index));
            self.outages.store(true, Ordering::Release);
            let n = drops.len().max(o.index + 1);
            drops.resize(n, 0);
        }
        Ok(())
    }

    /// Packets lost to each outage, by its index.
    pub fn outage_drops(&self) -> Vec<u64> {
        lock(&self.outage_drops).clone()
    }

    /// The wire byte `i` of `body` (sent by `src`), if it has one.
    #[inline]
    fn wire_byte(&self, body: &Body, src: usize, i: usize) -> Option<u8> {
        match body {
            Body::Owned(b) => b.get(i).copied(),
            Body::Lent(l) => {
                let head = l.span.head_len();
                let at = match i {
                    i if i < head => l.span.sram + i,
                    i if i < l.span.len => l.span.tail_sram + (i - head),
                    _ => return None,
                };
                let mut b = [0u8];
                self.sram(src).read(at as u64, &mut b).then_some(b[0])
            }
        }
    }

    /// Put NIC `src`'s packet (route + header + payload, `route_len`
    /// route bytes) on its link at `now` (ns) and carry it to its
    /// destination's inbox.
    pub fn launch(
        &self,
        held: &mut Held,
        src: usize,
        mut body: Body,
        route_len: usize,
        now: u64,
    ) -> Launch {
        // One device thread, no pacing, no outage: a link without fault
        // injection only counts the crossing.
        let plain = held.all() && !self.paced && !self.outages.load(Ordering::Acquire);
        let mut link = self.nic_out[src];
        let (mut pos, mut hops) = (0usize, 1usize);
        let (mut corrupted, mut duplicate) = (false, false);
        let mut head = now;
        let mut tail_out = now;
        loop {
            let l = &self.links[link as usize];
            let len = body.len().saturating_sub(pos) as u64;
            let (hit, entered) = if plain && l.plain {
                // The one writer: a load and a store each.
                let add = |c: &AtomicU64, v: u64| {
                    c.store(c.load(Ordering::Relaxed) + v, Ordering::Relaxed)
                };
                add(&l.packets, 1);
                add(&l.bytes, len);
                (Hit::default(), head)
            } else {
                let st = &mut *lock(&l.st);
                // A bit to flip needs the bytes: a lent packet is copied
                // out first.
                let flip = |at| {
                    self.own(&mut body, src, route_len);
                    match &mut body {
                        Body::Owned(b) => flip_bit(b, route_len, at),
                        Body::Lent(_) => false,
                    }
                };
                let hit = enter_link_with(
                    &mut st.stats,
                    st.fault.as_mut(),
                    &self.faults,
                    l.spec.ends_at_nic(),
                    flip,
                    len,
                    (&st.down, head),
                );
                let mut entered = head;
                if self.paced {
                    let enter = head.max(st.busy_until);
                    entered = enter;
                    st.busy_until = enter + l.spec.rate.ns(len);
                    if hops == 1 {
                        tail_out = st.busy_until;
                    }
                    head = enter + l.spec.head_delay;
                }
                (hit, entered)
            };
            if self.capturing.load(Ordering::Relaxed) {
                if let Some(c) = lock(&self.capture).as_mut() {
                    // The capture records the bytes: the packet is owned
                    // from here on.
                    self.own(&mut body, src, route_len);
                    if let Body::Owned(buf) = &body {
                        c.record(entered, link, &hit, buf.get(pos..).unwrap_or(&[]));
                    }
                    // Other device threads may still capture packets they
                    // launched a little earlier: write what is older
                    // than the window.
                    c.release(now.saturating_sub(CAPTURE_WINDOW_NS));
                }
            }
            if let Some(k) = hit.outage {
                lock(&self.outage_drops)[k] += 1;
            }
            if hit.any() {
                hit.charge(&mut lock(&self.by_src[src]));
                corrupted |= hit.corrupt;
                duplicate |= hit.duplicate;
            }
            if hit.drop {
                return Launch::Gone { body, tail_out };
            }
            match l.spec.to {
                LinkEnd::Nic(n) => {
                    let due = if self.paced {
                        head + l.spec.rate.ns(body.len().saturating_sub(pos) as u64)
                    } else {
                        0
                    };
                    let lent = matches!(body, Body::Lent(_));
                    let p = RtPacket {
                        body,
                        pos,
                        src,
                        link_in: link,
                        corrupted,
                        duplicate,
                        holds_sender: false,
                        due,
                        since: now,
                        waited_since: None,
                    };
                    let holds = self.enqueue(held, n, p);
                    return Launch::Queued { holds, tail_out, dst: n, lent };
                }
                LinkEnd::Switch { switch, .. } => {
                    let route = self.wire_byte(&body, src, pos);
                    let out = switch_out(&self.switches[switch], route, hops);
                    if out == NO_LINK {
                        lock(&l.st).stats.bad_routes += 1;
                        lock(&self.by_src[src]).bad_routes += 1;
                        return Launch::Gone { body, tail_out };
                    }
                    pos += 1;
                    hops += 1;
                    link = out;
                }
            }
        }
    }

    fn enqueue(&self, held: &mut Held, n: usize, mut p: RtPacket) -> bool {
        self.with_inbox(held, n, |q| {
            p.holds_sender = q.len() >= INBOX_SLACK;
            let holds = p.holds_sender;
            q.push_back(p);
            holds
        })
    }

    /// Packets waiting for NIC `n` (without taking the lock).
    #[inline]
    pub fn inbox_len(&self, n: usize) -> usize {
        self.inboxes[n].len.load(Ordering::Acquire)
    }

    /// Work on NIC `n`'s inbox under its lock (held, or taken now).
    #[inline]
    pub fn with_inbox<R>(
        &self,
        held: &mut Held,
        n: usize,
        f: impl FnOnce(&mut VecDeque<RtPacket>) -> R,
    ) -> R {
        let ib = &self.inboxes[n];
        let mut taken;
        let q = match held.q.get_mut(n) {
            Some(q) => &mut **q,
            None => {
                taken = lock(&ib.q);
                &mut *taken
            }
        };
        let r = f(q);
        ib.len.store(q.len(), Ordering::Release);
        r
    }

    /// Hold every inbox locked (the one device thread that runs every
    /// NIC), until the `Held` is dropped.
    pub fn hold_all(&self) -> Held<'_> {
        Held { q: self.inboxes.iter().map(|ib| lock(&ib.q)).collect() }
    }

    /// `p` left the fabric (taken or dropped): free its sender if it held
    /// it, and its transmit buffer if it was lent.
    #[inline]
    pub fn release(&self, p: &RtPacket) {
        if p.holds_sender {
            self.released[p.src].fetch_add(1, Ordering::Release);
        }
        if let Body::Lent(l) = p.body {
            self.returned[p.src][l.seq as usize % LEND_MAX].store(true, Ordering::Release);
        }
    }

    /// The first wire byte NIC-side of `p` (its route flag tells a
    /// misrouted packet).
    #[inline]
    pub fn first_wire_byte(&self, p: &RtPacket) -> Option<u8> {
        self.wire_byte(&p.body, p.src, p.pos)
    }

    /// Packets that held `src` and have been released.
    #[inline]
    pub fn released(&self, src: usize) -> u64 {
        self.released[src].load(Ordering::Acquire)
    }

    /// A packet waited for a receive buffer at its NIC for `ns`.
    pub fn count_wait(&self, p: &RtPacket, ns: u64) {
        let st = &mut *lock(&self.links[p.link_in as usize].st);
        st.stats.waits += 1;
        st.stats.wait_ns += ns;
    }

    /// The switch dropped `p`, blocked too long at a NIC's input.
    pub fn count_blocked_drop(&self, p: &RtPacket) {
        lock(&self.links[p.link_in as usize].st).stats.blocked_drops += 1;
        lock(&self.by_src[p.src]).blocked_drops += 1;
    }

    pub fn block_timeout(&self) -> u64 {
        self.block_timeout
    }

    /// Every link's counters, in link order (as `SimCluster::link_stats`).
    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.links
            .iter()
            .map(|l| {
                let mut s = lock(&l.st).stats.clone();
                s.packets += l.packets.load(Ordering::Relaxed);
                s.bytes += l.bytes.load(Ordering::Relaxed);
                s
            })
            .collect()
    }

    /// Drops charged to sender `src`.
    pub fn source_drops(&self, src: usize) -> SourceDrops {
        *lock(&self.by_src[src])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_device::device::crc_ok;
    use nic_fabric::topology::Topology;

    /// A fresh SRAM file of `len` bytes (its path removed at once).
    fn sram(name: &str, len: u64) -> Arc<MappedFile> {
        let path = std::env::temp_dir().join(format!("rt-fabric-{}-{name}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let m = MappedFile::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        Arc::new(m)
    }

    /// A packet lent without its CRC (nothing could check it when it was
    /// sent) gets it when its bytes are needed on the way after all: a
    /// capture begun meanwhile records a good CRC, and the receiver of a
    /// packet a fault corrupts sees a bad one.
    #[test]
    fn a_packet_lent_without_its_crc_gets_it_where_its_bytes_are_needed() {
        let profile = Profile::load("lanai9-gm").unwrap();
        let layout = Topology::Star.layout(2, 8).unwrap();
        let srams = vec![sram("a", 1 << 16), sram("b", 1 << 16)];
        let fab =
            RtFabric::new(&layout, &profile, 1, Faults::NONE, Pacing::default(), srams.clone());
        assert_eq!(fab.crc_matters(), cfg!(debug_assertions), "no faults, checks or capture");
        let corrupting = Faults { corrupt: 0.01, ..Faults::NONE };
        let lossy = Faults { drop: 0.01, duplicate: 0.01, ..Faults::NONE };
        let with = |f: Faults| RtFabric::new(&layout, &profile, 1, f, Pacing::default(), vec![]);
        assert!(with(corrupting).crc_matters());
        assert_eq!(with(lossy).crc_matters(), cfg!(debug_assertions));
        let mut checking = with(Faults::NONE);
        checking.check_crc = true;
        assert!(checking.crc_matters());
        // One route byte, then a header and payload of arbitrary bytes.
        let (at, route_len, len) = (4096usize, 1usize, 3000usize);
        let wire: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        assert!(srams[0].write(at as u64, &wire));
        let span = TxSpan { sram: at, len, route_len, tail_sram: 0, tail_len: 0 };
        let mut body = Body::Lent(Lend { span, seq: 0, crc: false });
        fab.own(&mut body, 0, route_len);
        let Body::Owned(b) = &body else { panic!("still lent") };
        assert!(crc_ok(&b[route_len..]), "the CRC is put in");
        assert_eq!(b[..route_len + field::CRC], wire[..route_len + field::CRC]);
        assert_eq!(b[route_len + field::CRC + 4..], wire[route_len + field::CRC + 4..]);
        // A lent packet whose CRC is in keeps it as it was.
        let mut sealed = b.clone();
        assert!(srams[0].write(at as u64, &sealed));
        let mut body = Body::Lent(Lend { span, seq: 1, crc: true });
        fab.own(&mut body, 0, route_len);
        let Body::Owned(c) = &body else { panic!("still lent") };
        assert_eq!(c, &sealed);
        // A bit flipped after the CRC is put in fails it.
        sealed[route_len + 100] ^= 4;
        assert!(!crc_ok(&sealed[route_len..]));
    }
}
