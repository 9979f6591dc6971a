//! The switch fabric: directed links, crossbar switches with source
//! routing, and the packets in flight through them, with cut-through
//! (wormhole) timing and backpressure.
//!
//! Timing model. A link has a bandwidth B and a head delay (cable, plus
//! the switch latency when it ends at a switch). A packet of L bytes whose
//! head enters link i at h_i holds the link's entry until its tail has
//! entered, h_i + L/B, and its head is at the far end at h_i + head delay.
//! A switch consumes the first route byte (`0x80 | output port`) and moves
//! the head on at once if that output is free; otherwise the head waits
//! (FIFO per output) and the whole worm stops: every link whose tail had
//! not yet passed when the head stopped stays held until the head moves
//! again, and then for as long again as it still needed (all its tail
//! times shift by the stall). The same stall happens at a NIC that has no
//! free receive buffer: backpressure, never a drop. A head waiting at a
//! switch longer than the profile's blocked-packet timeout is dropped, and
//! so is a packet whose route byte names no connected port. Every drop is
//! counted on the link and for the sending node.
//!
//! Owns links, switches and flights (packets in the fabric, with pooled
//! byte buffers). It schedules its own events (head arrivals, link frees,
//! timeouts) and tells the caller when a packet reaches a NIC or when a
//! NIC's transmit link frees; the receive side is `sim_nic`'s.
//!
//! Shared with the real-time fabric (`realtime::fabric`), which moves the
//! same packets over the same links in wall-clock time: the wiring
//! ([`Wiring`]: links with their timing, switch ports, source routing by
//! `switch_out`) and what happens to a packet entering a link
//! (`enter_link`: the link's counters and fault injection, charged to the
//! sender's [`SourceDrops`]).

use std::collections::VecDeque;

use nic_abi::le::get_u64;
use nic_abi::map::ROUTE_MAX;
use nic_abi::packet::{Flags, McastTag, PacketType, HEADER_LEN, ROUTE_FLAG};

use crate::event::{Ev, EventQueue};
use crate::linklog::{LinkEvent, LinkWhat, PacketSummary};
use crate::topology::Layout;
use nic_device::faults::{flip_bit, FaultInjector, Faults};
use nic_device::profile::{Profile, Rate};

/// "Not known yet": a link held by a stalled packet, or no event pending.
pub const NEVER: u64 = u64::MAX;
pub const NO_LINK: u32 = u32::MAX;
/// Most links one packet crosses: one per route byte, plus the first.
pub const MAX_HOPS: usize = ROUTE_MAX + 1;

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEnd {
    Nic(usize),
    Switch { switch: usize, port: usize },
}

/// Counters of one directed link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStats {
    pub from: LinkEnd,
    pub to: LinkEnd,
    /// Packets whose head entered the link.
    pub packets: u64,
    pub bytes: u64,
    /// Heads that had to wait for this link (busy output port).
    pub waits: u64,
    /// Total time heads waited for it (ns).
    pub wait_ns: u64,
    /// Packets dropped while waiting for it longer than the timeout.
    pub blocked_drops: u64,
    /// Packets dropped at this link's far switch for a bad route byte.
    pub bad_routes: u64,
    /// Injected faults.
    pub fault_drops: u64,
    pub fault_corrupts: u64,
    pub fault_dups: u64,
}

/// Fabric drops and faults charged to the node that sent the packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceDrops {
    pub fault_drops: u64,
    pub fault_corrupts: u64,
    pub fault_dups: u64,
    pub blocked_drops: u64,
    pub bad_routes: u64,
}

impl LinkStats {
    /// A link's counters before any packet.
    pub fn new(from: LinkEnd, to: LinkEnd) -> LinkStats {
        LinkStats {
            from,
            to,
            packets: 0,
            bytes: 0,
            waits: 0,
            wait_ns: 0,
            blocked_drops: 0,
            bad_routes: 0,
            fault_drops: 0,
            fault_corrupts: 0,
            fault_dups: 0,
        }
    }
}

/// One directed link as wired: its ends and its timing.
#[derive(Debug, Clone, Copy)]
pub struct LinkSpec {
    pub from: LinkEnd,
    pub to: LinkEnd,
    /// From the head entering to the head being ready at the far end
    /// (cable, plus the switch latency when it ends at a switch).
    pub head_delay: u64,
    pub rate: Rate,
}

impl LinkSpec {
    /// The NIC whose transmit link this is, if it starts at one.
    #[inline]
    pub fn tx_of(&self) -> Option<usize> {
        match self.from {
            LinkEnd::Nic(n) => Some(n),
            LinkEnd::Switch { .. } => None,
        }
    }

    /// Does it end at a NIC?
    #[inline]
    pub fn ends_at_nic(&self) -> bool {
        matches!(self.to, LinkEnd::Nic(_))
    }
}

/// The wiring both fabrics build from a layout and a profile: every
/// directed link in `Layout::links` order, each switch's output port ->
/// link (NO_LINK where nothing is cabled), each NIC's link out.
pub struct Wiring {
    pub links: Vec<LinkSpec>,
    pub switches: Vec<Vec<u32>>,
    pub nic_out: Vec<u32>,
}

impl Wiring {
    pub fn new(layout: &Layout, profile: &Profile) -> Wiring {
        let rate = Rate::new(profile.link.bandwidth_bytes_per_s);
        let cable = profile.cable_delay_ns();
        let sw_lat = profile.switch.latency_ns;
        let mut w = Wiring {
            links: Vec::new(),
            switches: vec![vec![NO_LINK; layout.ports]; layout.switches],
            nic_out: Vec::with_capacity(layout.nodes()),
        };
        for (id, (from, to)) in layout.links().into_iter().enumerate() {
            let head_delay = cable + if matches!(to, LinkEnd::Switch { .. }) { sw_lat } else { 0 };
            match from {
                LinkEnd::Switch { switch, port } => w.switches[switch][port] = id as u32,
                LinkEnd::Nic(_) => w.nic_out.push(id as u32),
            }
            w.links.push(LinkSpec { from, to, head_delay, rate });
        }
        w
    }

    /// Link `id`'s fault injector (seeded per link), if faults are on.
    pub fn injector(seed: u64, faults: &Faults, id: usize) -> Option<FaultInjector> {
        (!faults.is_none()).then(|| FaultInjector::new(seed, id as u64))
    }
}

/// What fault injection did to a packet entering one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hit {
    pub drop: bool,
    /// A bit of it was flipped.
    pub corrupt: bool,
    pub duplicate: bool,
    /// The link was down (`Outage::index` of the outage): dropped.
    pub outage: Option<usize>,
}

/// A link's down times: [from, until) in ns, and the `Outage::index` each
/// came from.
pub type DownTimes = Vec<(u64, u64, usize)>;

impl Hit {
    pub fn any(&self) -> bool {
        self.drop || self.corrupt || self.duplicate
    }

    /// Charge it to the packet's sender.
    pub fn charge(&self, s: &mut SourceDrops) {
        s.fault_drops += self.drop as u64;
        s.fault_corrupts += self.corrupt as u64;
        s.fault_dups += self.duplicate as u64;
    }
}

/// A packet's head enters a link at time `t`: the link counts it (`len`
/// bytes on it) and its fault injector, if any, judges it: a drop, a bit
/// flipped in `buf` (its wire bytes) past its `route_len` route bytes, a
/// duplicate. A link that is down at `t` (`down`) drops it besides. The
/// caller charges the hit to the sender.
#[inline]
pub fn enter_link(
    stats: &mut LinkStats,
    fault: Option<&mut FaultInjector>,
    faults: &Faults,
    into_nic: bool,
    (buf, route_len): (&mut [u8], usize),
    len: u64,
    down: (&[(u64, u64, usize)], u64),
) -> Hit {
    let flip = |at| flip_bit(buf, route_len, at);
    enter_link_with(stats, fault, faults, into_nic, flip, len, down)
}

/// `enter_link` for a packet whose bytes the caller fetches only when a
/// bit is to be flipped: `flip(at)` flips bit `at` as `faults::flip_bit`
/// does (the real-time fabric's packets lent from the sender's SRAM).
#[inline]
pub fn enter_link_with(
    stats: &mut LinkStats,
    fault: Option<&mut FaultInjector>,
    faults: &Faults,
    into_nic: bool,
    flip: impl FnOnce((u64, u8)) -> bool,
    len: u64,
    (down, t): (&[(u64, u64, usize)], u64),
) -> Hit {
    stats.packets += 1;
    stats.bytes += len;
    if fault.is_none() && down.is_empty() {
        // No fault injector and never down: nothing more to judge or count.
        return Hit::default();
    }
    let mut hit = match fault {
        Some(inj) => {
            let v = inj.judge(faults, into_nic);
            Hit {
                drop: v.drop,
                corrupt: v.corrupt.is_some_and(flip),
                duplicate: v.duplicate,
                outage: None,
            }
        }
        None => Hit::default(),
    };
    hit.outage = down.iter().find(|&&(from, until, _)| from <= t && t < until).map(|d| d.2);
    hit.drop |= hit.outage.is_some();
    stats.fault_drops += hit.drop as u64;
    stats.fault_corrupts += hit.corrupt as u64;
    stats.fault_dups += hit.duplicate as u64;
    hit
}

pub struct Link {
    pub spec: LinkSpec,
    /// The entry is free from this time on (NEVER while a stalled packet
    /// holds it).
    busy_until: u64,
    /// Time of the latest LinkFree event scheduled (NEVER: none).
    free_event_at: u64,
    /// Heads waiting for this link, oldest first.
    waiters: VecDeque<u32>,
    timeout_pending: bool,
    fault: Option<FaultInjector>,
    pub stats: LinkStats,
}

/// A packet in the fabric.
pub struct Flight {
    /// The wire bytes as sent: route, header, payload.
    pub buf: Vec<u8>,
    /// Route bytes at launch (not corrupted by fault injection).
    pub route_len: u32,
    /// Route bytes consumed by switches so far.
    pub pos: u32,
    pub src: u32,
    /// The NIC its head reached (valid once it did).
    pub dst: u32,
    path: [u32; MAX_HOPS],
    /// When the tail enters path[i] (if the worm does not stop again).
    tails: [u64; MAX_HOPS],
    hops: u8,
    /// path[..released] are behind the tail.
    released: u8,
    blocked: bool,
    pub blocked_since: u64,
    doomed: bool,
    pub corrupted: bool,
    pub duplicate: bool,
    /// Receive buffer index, once a NIC accepted it.
    pub rx_buf: u32,
    live: bool,
}

impl Flight {
    fn empty() -> Flight {
        Flight {
            buf: Vec::new(),
            route_len: 0,
            pos: 0,
            src: 0,
            dst: 0,
            path: [NO_LINK; MAX_HOPS],
            tails: [0; MAX_HOPS],
            hops: 0,
            released: 0,
            blocked: false,
            blocked_since: 0,
            doomed: false,
            corrupted: false,
            duplicate: false,
            rx_buf: 0,
            live: false,
        }
    }

    /// A recycled record for a packet just filled into `buf`: everything
    /// else as `empty` has it, but for the path and its tail times, which
    /// are written hop by hop before they are read (`hops` is 0).
    #[inline]
    fn start(&mut self, route_len: u32, src: u32) {
        self.route_len = route_len;
        self.pos = 0;
        self.src = src;
        self.dst = 0;
        self.hops = 0;
        self.released = 0;
        self.blocked = false;
        self.blocked_since = 0;
        self.doomed = false;
        self.corrupted = false;
        self.duplicate = false;
        self.rx_buf = 0;
        self.live = true;
    }

    /// The packet as it is now (route bytes consumed so far removed).
    pub fn wire(&self) -> &[u8] {
        &self.buf[self.pos as usize..]
    }
}

/// What a head found at the far end of its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// It moved on, or waits in a switch.
    Switched,
    /// It was dropped.
    Gone,
    /// It is at this NIC's receive side.
    AtNic(usize),
}

/// What a LinkFree event found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    Stale,
    /// The transmit link of this NIC is free: its current packet's tail left.
    Tx(usize),
    Switched,
}

/// One multicast data packet's time in the fabric, from its head entering
/// the first link to its tail at the receiving NIC (or its drop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McastSpan {
    pub group: u16,
    pub mseq: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Multicast data packets in flight (by flight id) and those done.
#[derive(Debug, Default)]
struct McastLog {
    open: Vec<Option<(u16, u32, u64)>>,
    done: Vec<McastSpan>,
}

pub struct Fabric {
    links: Vec<Link>,
    /// Per switch: output port -> link.
    switches: Vec<Vec<u32>>,
    flights: Vec<Flight>,
    free_flights: Vec<u32>,
    live: usize,
    nic_out: Vec<u32>,
    /// The switches take two route bytes a hop (`Layout::wide`).
    wide: bool,
    faults: Faults,
    block_timeout: u64,
    pub by_src: Vec<SourceDrops>,
    /// Heads that entered links into NICs, for the NICs to handle.
    nic_entries: Vec<(u32, u64)>,
    /// With `log_mcast_packets`: multicast data packets' spans.
    mcast_log: Option<McastLog>,
    /// Per link: the times it is down, [from, until) in ns, with the index
    /// of the outage (`set_outages`) each came from.
    down: Vec<DownTimes>,
    /// Per outage: packets the link lost while down.
    pub outage_drops: Vec<u64>,
    /// With `capture_to`: every packet at every link it enters.
    capture: Option<crate::capture::Capture>,
    /// With `log_links`: what happened at each link.
    link_log: Option<Vec<LinkEvent>>,
}

/// A time a link is down: everything entering it is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// Directed link ids (`Layout::links` order): a cable is two.
    pub link: usize,
    pub from_ns: u64,
    pub until_ns: u64,
    /// Which outage of the caller's list this is (for `outage_drops`).
    pub index: usize,
}

impl Fabric {
    pub fn new(layout: &Layout, profile: &Profile, seed: u64, faults: Faults) -> Fabric {
        let Wiring { links, switches, nic_out } = Wiring::new(layout, profile);
        let links = links
            .into_iter()
            .enumerate()
            .map(|(id, spec)| Link {
                spec,
                busy_until: 0,
                free_event_at: NEVER,
                waiters: VecDeque::new(),
                timeout_pending: false,
                fault: Wiring::injector(seed, &faults, id),
                stats: LinkStats::new(spec.from, spec.to),
            })
            .collect();
        Fabric {
            links,
            switches,
            flights: Vec::new(),
            free_flights: Vec::new(),
            live: 0,
            nic_out,
            wide: layout.wide(),
            faults,
            block_timeout: profile.switch.blocked_drop_timeout_ns,
            by_src: vec![SourceDrops::default(); layout.nodes()],
            nic_entries: Vec::new(),
            mcast_log: None,
            down: vec![Vec::new(); layout.links().len()],
            outage_drops: Vec::new(),
            capture: None,
            link_log: None,
        }
    }

    /// Write every packet the fabric carries from now on to a pcapng file at
    /// `path` (`capture` module), each time it enters a link.
    pub fn capture_to(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        let specs: Vec<LinkSpec> = self.links.iter().map(|l| l.spec).collect();
        self.capture = Some(crate::capture::Capture::create(path, &specs)?);
        Ok(())
    }

    /// The caller's clock reached `now`: no packet will enter a link
    /// before it any more (a NIC launches at or after the time it is run
    /// at, a switch forwards at the event's time), so the capture writes
    /// what it held up to `now`, in time order.
    #[inline]
    pub fn capture_release(&mut self, now: u64) {
        if let Some(c) = self.capture.as_mut() {
            c.release(now);
        }
    }

    /// Stop capturing: the records written, or the first write error.
    pub fn finish_capture(&mut self) -> std::io::Result<u64> {
        self.capture.take().map_or(Ok(0), |c| c.finish())
    }

    /// Take links down: a packet whose head enters a link while it is
    /// down is lost (counted in `outage_drops[index]` and as the link's
    /// and its sender's fault drop). Links out of range are refused.
    pub fn set_outages(&mut self, outages: &[Outage]) -> Result<(), String> {
        for o in outages {
            let Some(d) = self.down.get_mut(o.link) else {
                return Err(format!("link {} does not exist", o.link));
            };
            d.push((o.from_ns, o.until_ns, o.index));
            let n = self.outage_drops.len().max(o.index + 1);
            self.outage_drops.resize(n, 0);
        }
        Ok(())
    }

    /// Record, from now on, what happens at each link (`linklog`): every
    /// packet entering one, packets a switch drops, heads waiting. Changes
    /// nothing of what the fabric does.
    pub fn log_links(&mut self) {
        self.link_log.get_or_insert_with(Vec::new);
    }

    /// What happened at the links since the last call, in the order the
    /// fabric saw it (none unless `log_links` was called).
    pub fn take_link_log(&mut self) -> Vec<LinkEvent> {
        self.link_log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every directed link's two ends, in link order.
    pub fn link_specs(&self) -> Vec<LinkSpec> {
        self.links.iter().map(|l| l.spec).collect()
    }

    #[inline(never)]
    fn log_link(&mut self, t_ns: u64, link: u32, what: LinkWhat) {
        if let Some(log) = self.link_log.as_mut() {
            log.push(LinkEvent { t_ns, link, what });
        }
    }

    /// A switch dropped `id` at `link` at `now` (for the link log).
    fn log_switch_drop(&mut self, now: u64, link: u32, id: u32, blocked: bool) {
        if self.link_log.is_some() {
            let packet = PacketSummary::of(self.flights[id as usize].wire());
            self.log_link(now, link, LinkWhat::SwitchDrop { blocked, packet });
        }
    }

    /// Heads waiting for `link` changed (for the link log).
    #[inline]
    fn log_waiting(&mut self, now: u64, link: u32) {
        if self.link_log.is_some() {
            let n = self.links[link as usize].waiters.len() as u32;
            self.log_link(now, link, LinkWhat::Waiting(n));
        }
    }

    /// Record, from now on, when each multicast data packet (a Data packet
    /// with `Flags::MCAST`) enters the fabric and leaves it. Changes
    /// nothing of what the fabric does.
    pub fn log_mcast_packets(&mut self) {
        self.mcast_log.get_or_insert_with(McastLog::default);
    }

    /// The spans of the multicast packets that left the fabric since the
    /// last call (none unless `log_mcast_packets` was called).
    pub fn take_mcast_spans(&mut self) -> Vec<McastSpan> {
        self.mcast_log.as_mut().map(|l| std::mem::take(&mut l.done)).unwrap_or_default()
    }

    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.links.iter().map(|l| l.stats.clone()).collect()
    }

    /// Link traversals so far.
    pub fn hops(&self) -> u64 {
        self.links.iter().map(|l| l.stats.packets).sum()
    }

    /// Packets in the fabric (including those a NIC is receiving).
    pub fn in_flight(&self) -> usize {
        self.live
    }

    pub fn flight(&self, id: u32) -> &Flight {
        &self.flights[id as usize]
    }

    pub fn flight_mut(&mut self, id: u32) -> &mut Flight {
        &mut self.flights[id as usize]
    }

    /// Put a packet on NIC `src`'s link, head entering at `t`. `fill`
    /// writes the wire bytes into a recycled buffer, and sets its length
    /// (it holds the bytes of an earlier packet: not cleared, so that a
    /// buffer of the right length is not zeroed before it is overwritten).
    pub fn launch(
        &mut self,
        q: &mut EventQueue,
        src: usize,
        t: u64,
        route_len: u32,
        fill: impl FnOnce(&mut Vec<u8>),
    ) -> u32 {
        let id = match self.free_flights.pop() {
            Some(id) => id,
            None => {
                self.flights.push(Flight::empty());
                (self.flights.len() - 1) as u32
            }
        };
        self.live += 1;
        let f = &mut self.flights[id as usize];
        fill(&mut f.buf);
        f.start(route_len, src as u32);
        if let Some(log) = self.mcast_log.as_mut() {
            let h = &f.buf[(route_len as usize).min(f.buf.len())..];
            let mcast = h.len() >= HEADER_LEN
                && h[0] == PacketType::Data as u8
                && h[1] & Flags::MCAST.bits() != 0;
            if log.open.len() <= id as usize {
                log.open.resize(id as usize + 1, None);
            }
            log.open[id as usize] = mcast.then(|| {
                let tag = McastTag::from_header(get_u64(h, 32), 0);
                (tag.group, tag.mseq, t)
            });
        }
        let link = self.nic_out[src];
        self.enter(q, id, link, t);
        id
    }

    /// The head of `id` enters `link` at `t`.
    fn enter(&mut self, q: &mut EventQueue, id: u32, link: u32, t: u64) {
        let f = &mut self.flights[id as usize];
        let l = &mut self.links[link as usize];
        let len = (f.buf.len() - f.pos as usize) as u64;
        let into_nic = l.spec.ends_at_nic();
        let wire = (&mut f.buf[..], f.route_len as usize);
        let down = (&self.down[link as usize][..], t);
        let hit =
            enter_link(&mut l.stats, l.fault.as_mut(), &self.faults, into_nic, wire, len, down);
        if let Some(c) = self.capture.as_mut() {
            c.record(t, link, &hit, &f.buf[f.pos as usize..]);
        }
        if let Some(log) = self.link_log.as_mut() {
            let packet = PacketSummary::of(&f.buf[f.pos as usize..]);
            let tail_ns = t + l.spec.rate.ns(len);
            log.push(LinkEvent { t_ns: t, link, what: LinkWhat::Packet { tail_ns, hit, packet } });
        }
        if let Some(k) = hit.outage {
            self.outage_drops[k] += 1;
        }
        if hit.any() {
            hit.charge(&mut self.by_src[f.src as usize]);
            f.doomed |= hit.drop;
            f.corrupted |= hit.corrupt;
            f.duplicate |= hit.duplicate;
        }
        let tail = t + l.spec.rate.ns(len);
        let h = f.hops as usize;
        f.path[h] = link;
        f.tails[h] = tail;
        f.hops += 1;
        l.busy_until = tail;
        if l.spec.tx_of().is_some() || !l.waiters.is_empty() {
            schedule_free(q, l, link);
        }
        match l.spec.to {
            // The receiving NIC decides (`take_nic_entries`): it may take
            // the packet at once, or wait for the head to arrive.
            LinkEnd::Nic(n) if !f.doomed => {
                f.dst = n as u32;
                self.nic_entries.push((id, t + l.spec.head_delay));
            }
            _ => q.push(t + l.spec.head_delay, Ev::HeadArrive { flight: id }),
        }
    }

    /// Packets whose heads entered a link into a NIC since the last call:
    /// (flight, when the head reaches the NIC). The caller must hand each
    /// to its NIC (`NicDevice::head_due`).
    #[inline]
    pub fn has_nic_entries(&self) -> bool {
        !self.nic_entries.is_empty()
    }

    pub fn take_nic_entries(&mut self, out: &mut Vec<(u32, u64)>) {
        // The two buffers change places (no copy); both keep their room.
        out.clear();
        std::mem::swap(out, &mut self.nic_entries);
    }

    /// The head of `id` reached the far end of its current link.
    pub fn head_arrive(&mut self, q: &mut EventQueue, now: u64, id: u32) -> Arrival {
        let f = &self.flights[id as usize];
        let last = f.path[f.hops as usize - 1];
        if f.doomed {
            self.swallow(q, id, now);
            return Arrival::Gone;
        }
        let ports = match self.links[last as usize].spec.to {
            LinkEnd::Nic(n) => {
                self.flights[id as usize].dst = n as u32;
                return Arrival::AtNic(n);
            }
            LinkEnd::Switch { switch, .. } => &self.switches[switch],
        };
        let pos = f.pos as usize;
        let (out, used) = if self.wide {
            let (hi, lo) = (f.buf.get(pos).copied(), f.buf.get(pos + 1).copied());
            (switch_out_wide(ports, hi, lo, f.hops as usize), 2)
        } else {
            (switch_out(ports, f.buf.get(pos).copied(), f.hops as usize), 1)
        };
        if out == NO_LINK {
            self.links[last as usize].stats.bad_routes += 1;
            self.by_src[f.src as usize].bad_routes += 1;
            self.log_switch_drop(now, last, id, false);
            self.swallow(q, id, now);
            return Arrival::Gone;
        }
        self.flights[id as usize].pos += used;
        let ol = &self.links[out as usize];
        if ol.waiters.is_empty() && ol.busy_until <= now {
            self.enter(q, id, out, now);
        } else {
            self.block(id, now);
            let timeout = self.block_timeout;
            let ol = &mut self.links[out as usize];
            ol.waiters.push_back(id);
            ol.stats.waits += 1;
            schedule_free(q, ol, out);
            if !ol.timeout_pending {
                ol.timeout_pending = true;
                q.push(now.saturating_add(timeout), Ev::LinkTimeout { link: out });
            }
            self.log_waiting(now, out);
        }
        Arrival::Switched
    }

    /// The head of `id` stops at `now`: links its tail has not passed stay
    /// held until it moves again.
    pub fn block(&mut self, id: u32, now: u64) {
        let f = &mut self.flights[id as usize];
        debug_assert!(!f.blocked);
        f.blocked = true;
        f.blocked_since = now;
        for i in f.released as usize..f.hops as usize {
            if f.tails[i] <= now {
                f.released = i as u8 + 1;
            } else {
                self.links[f.path[i] as usize].busy_until = NEVER;
            }
        }
    }

    /// The head of `id` moves again at `g` (>= when it stopped), if it
    /// had stopped.
    #[inline]
    fn unblock(&mut self, q: &mut EventQueue, id: u32, g: u64) {
        if self.flights[id as usize].blocked {
            self.restart(q, id, g);
        }
    }

    /// `unblock` of a stopped head.
    #[inline(never)]
    fn restart(&mut self, q: &mut EventQueue, id: u32, g: u64) {
        let f = &mut self.flights[id as usize];
        f.blocked = false;
        let stall = g.saturating_sub(f.blocked_since);
        for i in f.released as usize..f.hops as usize {
            f.tails[i] += stall;
            let link = f.path[i];
            let l = &mut self.links[link as usize];
            l.busy_until = f.tails[i];
            if l.spec.tx_of().is_some() || !l.waiters.is_empty() {
                schedule_free(q, l, link);
            }
        }
    }

    /// A NIC takes `id` at `g`: the worm streams in. Returns when its tail
    /// has arrived.
    pub fn accept(&mut self, q: &mut EventQueue, id: u32, g: u64) -> u64 {
        self.unblock(q, id, g);
        let f = &self.flights[id as usize];
        let last = f.path[f.hops as usize - 1];
        g + self.links[last as usize].spec.rate.ns(f.wire().len() as u64)
    }

    /// The switches' blocked-packet timeout.
    pub fn block_timeout(&self) -> u64 {
        self.block_timeout
    }

    /// `id`, its head blocked at a NIC's input since `blocked_since`, has
    /// waited the blocked-packet timeout at `now`: the switch feeding that
    /// NIC drops it (counted on its last link and against its sender), and
    /// the links it held go free.
    pub fn drop_blocked_at_nic(&mut self, q: &mut EventQueue, id: u32, now: u64) {
        let f = &self.flights[id as usize];
        let last = f.path[f.hops as usize - 1];
        self.drop_blocked(q, last, id, now);
    }

    /// A switch drops `id`, blocked too long waiting for `link` (or, the
    /// last link, for the NIC at its end): counted on the link and against
    /// its sender.
    fn drop_blocked(&mut self, q: &mut EventQueue, link: u32, id: u32, now: u64) {
        self.log_switch_drop(now, link, id, true);
        self.links[link as usize].stats.blocked_drops += 1;
        self.by_src[self.flights[id as usize].src as usize].blocked_drops += 1;
        self.swallow(q, id, now);
    }

    /// Drop `id` where its head is, at `now`.
    pub fn swallow(&mut self, q: &mut EventQueue, id: u32, now: u64) {
        self.unblock(q, id, now);
        self.finish(id, now);
    }

    /// `id` is out of the fabric (received or dropped) at `now`: recycle it.
    pub fn finish(&mut self, id: u32, now: u64) {
        let f = &mut self.flights[id as usize];
        debug_assert!(f.live && !f.blocked);
        f.live = false;
        self.live -= 1;
        self.free_flights.push(id);
        if let Some(log) = self.mcast_log.as_mut() {
            if let Some((group, mseq, start_ns)) =
                log.open.get_mut(id as usize).and_then(|o| o.take())
            {
                log.done.push(McastSpan { group, mseq, start_ns, end_ns: now });
            }
        }
    }

    /// A LinkFree event for `link` at `now`.
    pub fn link_free(&mut self, q: &mut EventQueue, now: u64, link: u32) -> Freed {
        let l = &mut self.links[link as usize];
        if l.free_event_at <= now {
            l.free_event_at = NEVER;
        }
        if l.busy_until > now {
            return Freed::Stale;
        }
        if let Some(n) = l.spec.tx_of() {
            return Freed::Tx(n);
        }
        let Some(id) = l.waiters.pop_front() else { return Freed::Stale };
        l.stats.wait_ns += now - self.flights[id as usize].blocked_since;
        self.log_waiting(now, link);
        self.unblock(q, id, now);
        self.enter(q, id, link, now);
        Freed::Switched
    }

    /// A LinkTimeout event: drop the heads that waited too long for `link`.
    pub fn link_timeout(&mut self, q: &mut EventQueue, now: u64, link: u32) {
        self.links[link as usize].timeout_pending = false;
        while let Some(&id) = self.links[link as usize].waiters.front() {
            let due = self.flights[id as usize].blocked_since.saturating_add(self.block_timeout);
            let l = &mut self.links[link as usize];
            if due > now {
                l.timeout_pending = true;
                q.push(due, Ev::LinkTimeout { link });
                break;
            }
            l.waiters.pop_front();
            self.log_waiting(now, link);
            self.drop_blocked(q, link, id, now);
        }
    }
}

#[inline]
fn schedule_free(q: &mut EventQueue, l: &mut Link, link: u32) {
    if l.busy_until != NEVER && l.free_event_at != l.busy_until {
        l.free_event_at = l.busy_until;
        q.push(l.busy_until, Ev::LinkFree { link });
    }
}

/// The link a switch with output links `ports` (NO_LINK where nothing is
/// cabled) sends a head on whose next wire byte is `next`, after `hops`
/// links: NO_LINK when the byte is no route byte, names no cabled port,
/// or the packet crossed too many switches. Shared with `realtime`.
#[inline]
pub fn switch_out(ports: &[u32], next: Option<u8>, hops: usize) -> u32 {
    match next {
        Some(b) if b & ROUTE_FLAG != 0 && hops < MAX_HOPS => {
            ports.get((b & !ROUTE_FLAG) as usize).copied().unwrap_or(NO_LINK)
        }
        _ => NO_LINK,
    }
}

/// `switch_out` for a switch of more than `topology::NARROW_PORTS` ports,
/// whose hop takes two route bytes (`topology::hop_bytes`): the port's
/// high bits in `hi`, its low 7 bits in `lo`. NO_LINK unless both are
/// route bytes naming a cabled port. The sim's fabric only.
#[inline]
pub fn switch_out_wide(ports: &[u32], hi: Option<u8>, lo: Option<u8>, hops: usize) -> u32 {
    match (hi, lo) {
        (Some(h), Some(l)) if h & l & ROUTE_FLAG != 0 && hops < MAX_HOPS => {
            let port = ((h & !ROUTE_FLAG) as usize) << 7 | (l & !ROUTE_FLAG) as usize;
            ports.get(port).copied().unwrap_or(NO_LINK)
        }
        _ => NO_LINK,
    }
}
