//! One NIC of the sim: the device model's engines (`device::Engines`) in
//! virtual time, over the node's heap memories (`memory::NodeMem`).
//!
//! Time is the sim's part: each engine step is an event. A host-DMA
//! command costs setup + len / bandwidth (and waits for the SRAM bus when
//! the profile says the engines share it); its bytes move when it
//! completes (`Ev::HdmaDone`). A send-DMA packet enters the NIC's link
//! after the engine's setup time; the engine is free when the link says
//! its tail has left (`Ev::LinkFree`). A packet whose head reaches the NIC
//! takes a free receive buffer or waits in the link (backpressure); its
//! tail is in, and the engine delivers it, at the link's pace plus the
//! engine's setup (`Ev::RxDone`).
//!
//! Owns the engines' timing state (busy-until of the SRAM bus and of the
//! receive side, the packets waiting at the NIC's input); moves packets
//! through `fabric` and schedules its completions on the event queue. It
//! never runs firmware: the core (`sim`) kicks the engines after each poll.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use nic_abi::packet::ROUTE_FLAG;
use nic_abi::regs::{self, reg};
use nic_abi::sram::Sram;

use crate::trace::WirePacket;

use nic_device::device::Engines;
use nic_device::memory::NodeMem;
use nic_device::profile::{Profile, Rate};
use nic_fabric::event::{Ev, EventQueue};
use nic_fabric::fabric::Fabric;
use nic_fabric::stats::DeviceCounters;

#[derive(Debug, Clone, Copy)]
struct SramBus {
    shared: bool,
    rate: Rate,
    free_at: u64,
}

impl SramBus {
    /// Reserve the bus for `bytes` from `start` on; returns when done.
    #[inline]
    fn reserve(&mut self, start: u64, bytes: u64) -> u64 {
        if !self.shared {
            return start;
        }
        let s = start.max(self.free_at);
        self.free_at = s + self.rate.ns(bytes);
        self.free_at
    }
}

pub(crate) struct NicDevice {
    pub node: u32,
    pub mem: Rc<RefCell<NodeMem>>,
    eng: Engines,
    hdma_setup: u64,
    hdma_rate: Rate,
    tx_setup: u64,
    rx_setup: u64,
    bus: SramBus,
    /// Packets accepted whose RxDone is pending.
    rx_inflight: u32,
    /// When the last accepted packet's tail is in.
    rx_wire_free: u64,
    /// Packets waiting at the NIC's input, oldest first.
    rx_queue: VecDeque<u32>,
    /// An `RxTimeout` event is due for the packets in `rx_queue`.
    rx_timeout_pending: bool,
    /// Heads on the link into this NIC, not yet arrived (HeadArrive due).
    heads_due: u32,
    /// Bumped by a reset: an `HdmaDone` of an older generation is stale.
    hdma_gen: u32,
    /// Packets accepted before a reset whose `RxDone` is still due: the
    /// next this many completions (they come in acceptance order) are
    /// discarded.
    rx_stale: u32,
    /// Packets a reset lost at this NIC's input.
    pub reset_drops: u64,
    /// Resets.
    pub resets: u64,
    /// A firmware pass in progress that the engines may not overtake.
    hold: Option<Hold>,
    /// With a trace: the packets this NIC's send-DMA engine put on the
    /// wire, and those its receive-DMA engine delivered into buffers, in
    /// that order (`crate::trace::WirePacket`).
    pub wire_log: Option<WireLog>,
}

/// Commands posted so far: (send-DMA, host-DMA) producer indices.
pub(crate) type Posted = (u32, u32);

/// Until `until`, the engines see only the commands posted before
/// `before` (see `NicDevice::hold_until`).
#[derive(Debug, Clone, Copy)]
struct Hold {
    before: Posted,
    until: u64,
}

/// Packets sent and delivered by one NIC (see `NicDevice::wire_log`).
#[derive(Debug, Default)]
pub(crate) struct WireLog {
    pub sent: Vec<WirePacket>,
    pub delivered: Vec<WirePacket>,
}

impl NicDevice {
    pub fn new(node: usize, mem: Rc<RefCell<NodeMem>>, p: &Profile) -> NicDevice {
        NicDevice {
            node: node as u32,
            mem,
            eng: Engines::default(),
            hdma_setup: p.host_dma.setup_ns,
            hdma_rate: Rate::new(p.host_dma.bandwidth_bytes_per_s),
            tx_setup: p.send_dma.setup_ns,
            rx_setup: p.recv_dma.setup_ns,
            bus: SramBus {
                shared: p.sram_bus.shared,
                rate: Rate::new(p.sram_bus.bandwidth_bytes_per_s),
                free_at: 0,
            },
            rx_inflight: 0,
            rx_wire_free: 0,
            rx_queue: VecDeque::new(),
            rx_timeout_pending: false,
            heads_due: 0,
            hdma_gen: 0,
            rx_stale: 0,
            reset_drops: 0,
            resets: 0,
            hold: None,
            wire_log: None,
        }
    }

    /// Hardware reset at `now` (the firmware is gone; the caller writes
    /// the cfg registers and boots a new one): a host-DMA command in
    /// progress completes now; a packet on the wire finishes leaving;
    /// posted commands are discarded (`Engines::reset`); packets waiting
    /// at the input and those whose tail is still coming are lost.
    pub fn reset(&mut self, q: &mut EventQueue, fabric: &mut Fabric, now: u64) {
        let mut mem = self.mem.borrow_mut();
        if self.eng.hdma_finish(&mut *mem).is_some() {
            self.hdma_gen = self.hdma_gen.wrapping_add(1);
        }
        self.eng.reset(&mut *mem);
        drop(mem);
        // The posted commands are gone, so is what held them.
        self.hold = None;
        for id in std::mem::take(&mut self.rx_queue) {
            self.reset_drops += 1;
            fabric.swallow(q, id, now);
        }
        self.rx_stale = self.rx_inflight;
        self.resets += 1;
    }

    /// The device counters.
    pub fn counters(&self) -> DeviceCounters {
        self.eng.c
    }

    /// Is every engine idle with nothing posted?
    pub fn quiet(&self) -> bool {
        self.rx_queue.is_empty() && self.rx_inflight == 0 && self.eng.quiet(&*self.mem.borrow())
    }

    // ---- host-DMA ----

    /// Start the next host-DMA command at `t` if the engine is idle.
    pub fn hdma_kick(&mut self, q: &mut EventQueue, t: u64) {
        let mem = self.mem.borrow();
        let posted = mem.sram[..].load_u32(reg(regs::HDMA_PROD));
        let seen = self.seen(t).map_or(posted, |before| before.1);
        let started = self.eng.hdma_start_before(&*mem, seen);
        drop(mem);
        if started.is_none() && seen != posted && !self.eng.hdma_busy() {
            self.kick_at_hold_end(q);
        }
        let Some(len) = started else { return };
        let start = t + self.hdma_setup;
        let end = (start + self.hdma_rate.ns(len)).max(self.bus.reserve(start, len));
        q.push(end, Ev::HdmaDone { node: self.node, gen: self.hdma_gen });
    }

    /// The host-DMA command started in generation `gen` completes (none
    /// if a reset completed it already). Returns true when it wrote host
    /// memory (the host's programs may have something to see).
    pub fn hdma_complete(&mut self, gen: u32) -> bool {
        gen == self.hdma_gen && self.eng.hdma_finish(&mut *self.mem.borrow_mut()).unwrap_or(false)
    }

    // ---- send-DMA ----

    /// Start the next send-DMA command at `t` if the engine is idle.
    /// Returns true if it completed commands at once (malformed ones): the
    /// firmware should be woken.
    pub fn tx_kick(&mut self, q: &mut EventQueue, fabric: &mut Fabric, t: u64) -> bool {
        let mut mem = self.mem.borrow_mut();
        let posted = mem.sram[..].load_u32(reg(regs::TXDMA_PROD));
        let seen = self.seen(t).map_or(posted, |before| before.0);
        let (next, completed) = self.eng.tx_next_before(&mut *mem, seen);
        if next.is_none() && seen != posted && !self.eng.tx_busy() {
            self.kick_at_hold_end(q);
        }
        if let Some(p) = next {
            let start = t + self.tx_setup;
            self.bus.reserve(start, p.len as u64);
            let eng = &mut self.eng;
            let id = fabric.launch(q, self.node as usize, start, p.route_len as u32, |buf| {
                eng.tx_fill(&mut *mem, p, buf)
            });
            if let Some(log) = self.wire_log.as_mut() {
                let w = fabric.flight(id).wire();
                let h = &w[p.route_len.min(w.len())..];
                log.sent.extend(WirePacket::of(start, h, 0));
            }
        }
        completed
    }

    /// The firmware pass that began when `before` had been posted and
    /// ends at `until` did priced multicast work: the engines see the
    /// commands it posted from `until` on, as if written at the pass's
    /// end (the NIC CPU builds a multicast packet, or takes a multicast
    /// descriptor, before what it posts for it can start), whether or not
    /// an engine was busy when the pass began and freed up during it.
    /// Unicast passes' commands are seen at once.
    pub fn hold_until(&mut self, before: Posted, until: u64) {
        self.hold = Some(Hold { before, until });
    }

    /// At `t`, while a hold lasts: the producer indices the engines see.
    fn seen(&self, t: u64) -> Option<Posted> {
        self.hold.filter(|h| t < h.until).map(|h| h.before)
    }

    /// An engine left a held command waiting: kick both when the hold ends.
    fn kick_at_hold_end(&self, q: &mut EventQueue) {
        if let Some(h) = self.hold {
            q.push(h.until, Ev::Kick { node: self.node });
        }
    }

    /// A pass that held commands back ended by `t`: the engines take them
    /// now if idle (before the next pass, which may hold more).
    pub fn release_held(&mut self, q: &mut EventQueue, fabric: &mut Fabric, t: u64) {
        if self.hold.is_some_and(|h| h.until <= t) {
            self.hold = None;
            self.kick(q, fabric, t);
        }
    }

    /// Start both engines at `t` if idle; true if send-DMA commands
    /// completed at once (see `tx_kick`).
    pub fn kick(&mut self, q: &mut EventQueue, fabric: &mut Fabric, t: u64) -> bool {
        self.hdma_kick(q, t);
        self.tx_kick(q, fabric, t)
    }

    /// Commands posted so far (send-DMA, host-DMA).
    pub fn posted(&self) -> Posted {
        let mem = self.mem.borrow();
        let s = &mem.sram[..];
        (s.load_u32(reg(regs::TXDMA_PROD)), s.load_u32(reg(regs::HDMA_PROD)))
    }

    /// The NIC's link is free: the current packet's tail has left.
    /// Returns true if a command completed.
    pub fn tx_complete(&mut self) -> bool {
        self.eng.tx_finish(&mut *self.mem.borrow_mut())
    }

    // ---- receive-DMA ----

    /// Take the next free receive buffer, if any (and the done ring has room).
    fn take_free_buffer(&mut self) -> Option<u32> {
        self.eng.rx_take(&mut *self.mem.borrow_mut(), self.rx_inflight)
    }

    /// A packet's head entered the link into this NIC and reaches it at
    /// `at`. If nothing is ahead of it and a buffer is free now, the
    /// engine takes it at once (its data streams in from `at` on): the
    /// same outcome as deciding at `at`, one event fewer. Otherwise its
    /// head arrives as an event.
    pub fn head_due(&mut self, q: &mut EventQueue, fabric: &mut Fabric, id: u32, at: u64) {
        let clean = fabric.flight(id).wire().first().is_some_and(|b| b & ROUTE_FLAG == 0);
        if clean && self.heads_due == 0 && self.rx_queue.is_empty() {
            if let Some(buf) = self.take_free_buffer() {
                self.accept(q, fabric, id, buf, at);
                return;
            }
        }
        self.heads_due += 1;
        q.push(at, Ev::HeadArrive { flight: id });
    }

    /// A HeadArrive event for this NIC.
    pub fn head_arrived(&mut self, q: &mut EventQueue, fabric: &mut Fabric, now: u64, id: u32) {
        self.heads_due = self.heads_due.saturating_sub(1);
        self.rx_arrive(q, fabric, now, id);
    }

    /// A packet's head reached this NIC at `now`.
    pub fn rx_arrive(&mut self, q: &mut EventQueue, fabric: &mut Fabric, now: u64, id: u32) {
        let f = fabric.flight(id);
        if f.wire().first().is_none_or(|b| b & ROUTE_FLAG != 0) {
            self.eng.rx_misrouted(&mut *self.mem.borrow_mut());
            fabric.swallow(q, id, now);
            return;
        }
        if self.rx_queue.is_empty() {
            if let Some(buf) = self.take_free_buffer() {
                self.accept(q, fabric, id, buf, now);
                return;
            }
        }
        fabric.block(id, now);
        self.rx_queue.push_back(id);
        self.eng.c.rx_backpressure_waits += 1;
        if !self.rx_timeout_pending {
            self.rx_timeout_pending = true;
            q.push(now.saturating_add(fabric.block_timeout()), Ev::RxTimeout { node: self.node });
        }
    }

    /// An `RxTimeout` event at `now`: packets blocked at this NIC's input
    /// (no receive buffer free) for the switches' blocked-packet timeout
    /// are dropped, as the switch that feeds the NIC would drop a worm
    /// that stopped that long. A firmware that stopped taking packets
    /// (wedged, or held at a breakpoint) then holds up only what is sent
    /// to it, not its senders' links and what they send elsewhere.
    #[cold]
    #[inline(never)]
    pub fn rx_timeout(&mut self, q: &mut EventQueue, fabric: &mut Fabric, now: u64) {
        self.rx_timeout_pending = false;
        let limit = fabric.block_timeout();
        // In arrival order, so the oldest is first.
        while let Some(&id) = self.rx_queue.front() {
            let since = fabric.flight(id).blocked_since;
            let due = since.saturating_add(limit);
            if due > now {
                self.rx_timeout_pending = true;
                q.push(due, Ev::RxTimeout { node: self.node });
                break;
            }
            self.rx_queue.pop_front();
            self.eng.c.rx_backpressure_ns += now.saturating_sub(since);
            fabric.drop_blocked_at_nic(q, id, now);
        }
    }

    /// Give waiting packets the buffers the firmware has posted, at `t`.
    pub fn rx_kick(&mut self, q: &mut EventQueue, fabric: &mut Fabric, t: u64) {
        while let Some(&id) = self.rx_queue.front() {
            let Some(buf) = self.take_free_buffer() else { break };
            self.rx_queue.pop_front();
            self.eng.c.rx_backpressure_ns += t.saturating_sub(fabric.flight(id).blocked_since);
            self.accept(q, fabric, id, buf, t);
        }
    }

    fn accept(&mut self, q: &mut EventQueue, fabric: &mut Fabric, id: u32, buf: u32, t: u64) {
        let g = t.max(self.rx_wire_free);
        fabric.flight_mut(id).rx_buf = buf;
        let tail = fabric.accept(q, id, g);
        self.rx_wire_free = tail;
        self.rx_inflight += 1;
        let len = fabric.flight(id).wire().len() as u64;
        self.bus.reserve(g, len);
        q.push(tail + self.rx_setup, Ev::RxDone { flight: id });
    }

    /// The packet's tail is in: write it into its buffer and report it.
    pub fn rx_complete(&mut self, q: &mut EventQueue, fabric: &mut Fabric, now: u64, id: u32) {
        self.rx_inflight -= 1;
        if self.rx_stale > 0 {
            // Accepted before a reset: its buffer belongs to the old boot.
            self.rx_stale -= 1;
            self.reset_drops += 1;
            fabric.finish(id, now);
            return;
        }
        let f = fabric.flight(id);
        self.eng.rx_deliver(&mut *self.mem.borrow_mut(), f.rx_buf, f.wire(), f.corrupted);
        if let Some(log) = self.wire_log.as_mut() {
            log.delivered.push(WirePacket::of(now, f.wire(), f.rx_buf).unwrap_or(WirePacket {
                ns: now,
                buf: f.rx_buf,
                ..WirePacket::default()
            }));
        }
        if f.duplicate {
            // The link delivers it a second time, right behind itself.
            fabric.flight_mut(id).duplicate = false;
            self.rx_arrive(q, fabric, now, id);
        } else {
            fabric.finish(id, now);
        }
    }
}
