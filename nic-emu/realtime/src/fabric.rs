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
//! inbox behind a blocked one longer than the switch's blocked-packet
//! timeout is dropped, as the switch would.
//!
//! Timing. By default packets move as fast as the threads move them. With
//! `Pacing::LinkBandwidth` each directed link is busy for len / bandwidth
//! per packet (packets wait for a busy link), each hop adds the cable and
//! switch latency, and a packet is only taken by the receiver once its
//! tail would be in; the sender's command completes when its tail has
//! left. This is a store-free approximation of the sim's wormhole model.
//!
//! Owns the links, switches, inboxes and counters; shared by every worker
//! thread (`Sync`: each link's state, each inbox and each sender's drop
//! counters behind a mutex of its own).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use nic_device::faults::{FaultInjector, Faults};
use nic_device::profile::Profile;
use nic_fabric::fabric::{
    enter_link, switch_out, DownTimes, LinkEnd, LinkSpec, LinkStats, Outage, SourceDrops, Wiring,
    NO_LINK,
};
use nic_fabric::topology::Layout;

/// Packets an inbox takes before a new arrival holds its sender.
pub(crate) const INBOX_SLACK: usize = 8;

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

/// A packet in the real-time fabric.
pub(crate) struct RtPacket {
    /// Wire bytes as sent: route, header, payload.
    pub buf: Vec<u8>,
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
    /// The packet as the NIC sees it (consumed route bytes removed).
    pub fn wire(&self) -> &[u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }
}

/// What became of a launched packet.
pub(crate) enum Launch {
    /// Dropped in the fabric (fault, bad route): the buffer comes back.
    Gone { buf: Vec<u8>, tail_out: u64 },
    /// In an inbox. `holds`: the sender must wait for its release.
    Queued { holds: bool, tail_out: u64 },
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
    capturing: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RtFabric {
    pub fn new(
        layout: &Layout,
        profile: &Profile,
        seed: u64,
        faults: Faults,
        pacing: Pacing,
    ) -> RtFabric {
        let Wiring { links, switches, nic_out } = Wiring::new(layout, profile);
        let n = layout.nodes();
        let links = links
            .into_iter()
            .enumerate()
            .map(|(id, spec)| RtLink {
                spec,
                st: Mutex::new(LinkState {
                    stats: LinkStats::new(spec.from, spec.to),
                    fault: Wiring::injector(seed, &faults, id),
                    busy_until: 0,
                    down: Vec::new(),
                }),
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
            capturing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Write every packet from now on to a pcap file at `path`
    /// (`nic_fabric::capture`; times on the cluster clock).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        *lock(&self.capture) = Some(nic_fabric::capture::Capture::create(path)?);
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
            let n = drops.len().max(o.index + 1);
            drops.resize(n, 0);
        }
        Ok(())
    }

    /// Packets lost to each outage, by its index.
    pub fn outage_drops(&self) -> Vec<u64> {
        lock(&self.outage_drops).clone()
    }

    /// Put NIC `src`'s packet (route + header + payload, `route_len`
    /// route bytes) on its link at `now` (ns) and carry it to its
    /// destination's inbox.
    pub fn launch(&self, src: usize, mut buf: Vec<u8>, route_len: usize, now: u64) -> Launch {
        let mut link = self.nic_out[src];
        let (mut pos, mut hops) = (0usize, 1usize);
        let (mut corrupted, mut duplicate) = (false, false);
        let mut head = now;
        let mut tail_out = now;
        loop {
            let l = &self.links[link as usize];
            let len = buf.len().saturating_sub(pos) as u64;
            let (hit, entered) = {
                let st = &mut *lock(&l.st);
                let wire = (&mut buf[..], route_len);
                let hit = enter_link(
                    &mut st.stats,
                    st.fault.as_mut(),
                    &self.faults,
                    l.spec.ends_at_nic(),
                    wire,
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
                    c.record(entered, link, &l.spec, &hit, buf.get(pos..).unwrap_or(&[]));
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
                return Launch::Gone { buf, tail_out };
            }
            match l.spec.to {
                LinkEnd::Nic(n) => {
                    let due = if self.paced {
                        head + l.spec.rate.ns(buf.len().saturating_sub(pos) as u64)
                    } else {
                        0
                    };
                    let p = RtPacket {
                        buf,
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
                    let holds = self.enqueue(n, p);
                    return Launch::Queued { holds, tail_out };
                }
                LinkEnd::Switch { switch, .. } => {
                    let out = switch_out(&self.switches[switch], buf.get(pos).copied(), hops);
                    if out == NO_LINK {
                        lock(&l.st).stats.bad_routes += 1;
                        lock(&self.by_src[src]).bad_routes += 1;
                        return Launch::Gone { buf, tail_out };
                    }
                    pos += 1;
                    hops += 1;
                    link = out;
                }
            }
        }
    }

    fn enqueue(&self, n: usize, mut p: RtPacket) -> bool {
        let ib = &self.inboxes[n];
        let mut q = lock(&ib.q);
        p.holds_sender = q.len() >= INBOX_SLACK;
        let holds = p.holds_sender;
        q.push_back(p);
        ib.len.store(q.len(), Ordering::Release);
        holds
    }

    /// Packets waiting for NIC `n` (without taking the lock).
    #[inline]
    pub fn inbox_len(&self, n: usize) -> usize {
        self.inboxes[n].len.load(Ordering::Acquire)
    }

    /// Work on NIC `n`'s inbox under its lock.
    pub fn with_inbox<R>(&self, n: usize, f: impl FnOnce(&mut VecDeque<RtPacket>) -> R) -> R {
        let ib = &self.inboxes[n];
        let mut q = lock(&ib.q);
        let r = f(&mut q);
        ib.len.store(q.len(), Ordering::Release);
        r
    }

    /// `p` left the fabric (taken or dropped): free its sender if it held it.
    #[inline]
    pub fn release(&self, p: &RtPacket) {
        if p.holds_sender {
            self.released[p.src].fetch_add(1, Ordering::Release);
        }
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

    /// The switch dropped `p`, blocked too long behind another packet.
    pub fn count_blocked_drop(&self, p: &RtPacket) {
        lock(&self.links[p.link_in as usize].st).stats.blocked_drops += 1;
        lock(&self.by_src[p.src]).blocked_drops += 1;
    }

    pub fn block_timeout(&self) -> u64 {
        self.block_timeout
    }

    /// Every link's counters, in link order (as `SimCluster::link_stats`).
    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.links.iter().map(|l| lock(&l.st).stats.clone()).collect()
    }

    /// Drops charged to sender `src`.
    pub fn source_drops(&self, src: usize) -> SourceDrops {
        *lock(&self.by_src[src])
    }
}
