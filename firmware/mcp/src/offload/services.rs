//! What the core offers an offload ([`Services`]) and the little it keeps
//! for the offloads between machines ([`CoreSide`]: packets they built for
//! SEND to put on the wire, events they owe ports for RDMA to write).
//!
//! Owns: `CoreSide`. May touch: the shared records through the calls
//! below only (a transmit buffer taken as a control buffer, an event
//! queued for a port, a host-DMA command, a receive buffer given back, a
//! counter).

use crate::hw::Hw;
use crate::pool::{Id, Pool};
use crate::records::{EvRef, HdmaAction, McastCost, TxBuf, TxBufState};
use crate::shared::{write_route, Shared};
use crate::translate::{Piece, Xlat, MAX_PIECES};
use crate::{Config, Work};
use nic_abi::event::Event;
use nic_abi::map;
use nic_abi::packet::{Header, HEADER_LEN};
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;

/// Events offloads owe ports, waiting in their ports' queues (each in
/// SRAM, `map::offload_event`).
pub const OFFLOAD_EVENTS: usize = map::OFFLOAD_EVENTS_LEN as usize;
/// Packets offloads built that SEND has not yet taken.
pub const OFFLOAD_TX: usize = 16;

/// An event an offload composed, kept in SRAM (`map::offload_event`):
/// what an [`OffloadEventId`] names.
pub enum OffloadEvent {}

/// An entry of `CoreSide::events`.
pub type OffloadEventId = Id<OffloadEvent>;

/// The core's records for the offloads: kept in `Shared`, read by SEND
/// (`tx`) and RDMA (`events`).
pub struct CoreSide {
    /// Transmit buffers holding an offload's packet, in the order built.
    pub tx: crate::ring::Ring<u8, OFFLOAD_TX>,
    /// Events an offload composed (`EvRef::Offload(i)` names entry `i`,
    /// whose record is at `map::offload_event(i)`).
    pub events: Pool<(), OFFLOAD_EVENTS, OffloadEvent>,
}

impl CoreSide {
    /// Offload event `i` as composed (RDMA fills in `seq` and `rtc`).
    pub fn event(hw: &impl Hw, i: OffloadEventId) -> Event {
        let mut b = [0u8; nic_abi::event::EVENT_SIZE as usize];
        hw.read(map::offload_event(i.raw() as u32), &mut b);
        Event::decode(&b).unwrap_or(Event::empty(nic_abi::event::EventKind::Error))
    }

    pub const fn new() -> CoreSide {
        CoreSide { tx: crate::ring::Ring::new(), events: Pool::new(()) }
    }
}

impl Default for CoreSide {
    fn default() -> Self {
        Self::new()
    }
}

/// The core's services, lent to an offload for one call.
pub struct Services<'a, H: Hw> {
    pub(crate) cx: &'a mut Shared,
    /// SRAM and registers: an offload reads and writes its own regions
    /// (`Offload::SRAM`) and the packet it was handed.
    pub hw: &'a mut H,
    pub(crate) w: &'a mut Work,
}

impl<'a, H: Hw> Services<'a, H> {
    pub(crate) fn new(cx: &'a mut Shared, hw: &'a mut H, w: &'a mut Work) -> Self {
        Services { cx, hw, w }
    }

    /// RTC at the start of this pass.
    #[inline]
    pub fn now(&self) -> u64 {
        self.cx.now
    }

    pub fn config(&self) -> &Config {
        &self.cx.cfg
    }

    /// This NIC's boot number (changes at each start).
    pub fn boot(&self) -> u16 {
        self.cx.boot
    }

    pub fn is_open(&self, port: u8) -> bool {
        self.cx.is_open(port as usize)
    }

    /// Count `n` of NIC counter `s`.
    pub fn count(&mut self, s: Stat, n: u64) {
        self.cx.bump(self.hw, s, n);
    }

    /// `n` elements combined (`Work::coll_elements`, or
    /// `coll_float_elements` for floating point).
    pub fn combined(&mut self, n: u32, float: bool) {
        if float {
            self.w.coll_float_elements += n;
        } else {
            self.w.coll_elements += n;
        }
    }

    /// One timer handled (`Work::timers`).
    pub fn timer_handled(&mut self) {
        self.w.timers += 1;
    }

    /// Can a packet be sent now (a transmit buffer free, room in the
    /// queue to SEND)?
    pub fn can_send(&self) -> bool {
        !self.cx.offload.tx.is_full() && self.cx.txbufs.free_one().is_some()
    }

    /// Send a packet of the offload's own: header `h` (to `h.dst_node`;
    /// its `payload_len` is set from `payload`) and `payload`, not
    /// sequenced, not retransmitted. False when no transmit buffer is
    /// free (nothing was sent).
    pub fn send(&mut self, h: &Header, payload: &[u8]) -> bool {
        let Some(at) = self.take_tx(h, payload.len() as u32) else { return false };
        self.hw.write(at, payload);
        true
    }

    /// `send` with a payload of `len` bytes of SRAM at `from` (the
    /// offload's own region, or the packet it was handed).
    pub fn send_from(&mut self, h: &Header, from: u32, len: u32) -> bool {
        let Some(at) = self.take_tx(h, len) else { return false };
        copy_sram(self.hw, from, at, len);
        true
    }

    /// A free transmit buffer with header `h` (payload `len` bytes)
    /// written and queued for SEND: where its payload goes. None when no
    /// buffer is free or the payload is too long.
    fn take_tx(&mut self, h: &Header, len: u32) -> Option<u32> {
        if self.cx.offload.tx.is_full()
            || len as usize > (map::BUF_STRIDE - map::ROUTE_ROOM) as usize - HEADER_LEN
        {
            return None;
        }
        let b = self.cx.txbufs.free_one()?;
        let route_len = write_route(self.hw, b, h.dst_node);
        let mut h = *h;
        h.payload_len = len as u16;
        h.crc = 0;
        let mut hb = [0u8; HEADER_LEN];
        h.encode(&mut hb);
        let at = map::tx_buf(b as u32) + map::ROUTE_ROOM;
        self.hw.write(at, &hb);
        self.cx.txbufs.take(
            b,
            TxBuf {
                state: TxBufState::Filled,
                stream: None,
                epoch: 0,
                route_len,
                len: HEADER_LEN as u32 + len,
                control: true,
                seq: 0,
                gather: None,
                mcast: McastCost::None,
            },
        );
        let _ = self.cx.offload.tx.push_back(b);
        self.cx.offloads_live = true;
        Some(at + HEADER_LEN as u32)
    }

    /// Where packet `p`'s payload is in SRAM.
    pub fn payload_at(&self, p: &super::Packet) -> u32 {
        map::rx_buf(p.buf as u32) + HEADER_LEN as u32
    }

    /// Is every byte of `[vaddr, vaddr + len)` registered by port `port`?
    /// `Bus`: yes; `Wait`: not known yet (a page-table line is being
    /// read: ask again at a later pass); `Fault`: no.
    pub fn registered(&mut self, port: u8, vaddr: u64, len: u64) -> Xlat {
        let mut from = 0;
        self.cx.registered(self.hw, port, vaddr, len, &mut from)
    }

    /// Host-DMA between `len` bytes of SRAM at `sram` and port `port`'s
    /// virtual address `vaddr` (at most a packet's worth: a few pages),
    /// one command per page, each checked against what the port
    /// registered; each comes back to offload `id` as `completion(tag)`.
    /// Ok: how many commands went. Err(`Wait`): a translation is being
    /// read, or the ring has no room: nothing went, try again later.
    /// Err(`Fault`): not registered.
    pub fn host_dma_at(
        &mut self,
        id: u8,
        (port, vaddr): (u8, u64),
        sram: u32,
        len: u32,
        dir: DmaDir,
        tag: u16,
    ) -> Result<u32, Xlat> {
        let mut out = [Piece { bus: 0, len: 0, at: 0 }; MAX_PIECES];
        let (n, x) = self.cx.pieces_into(self.hw, port, vaddr, len, &mut out);
        match x {
            Xlat::Bus(_) => {}
            other => return Err(other),
        }
        if self.cx.hdma.space() < n as u32 {
            return Err(Xlat::Wait);
        }
        for p in &out[..n] {
            let cmd = HostDmaCmd { dir, len: p.len, sram: sram + p.at, host: p.bus, cookie: 0 };
            self.cx.hdma.post(self.hw, cmd, HdmaAction::Offload(id, tag));
            self.w.dma_cmds += 1;
        }
        Ok(n as u32)
    }

    /// Read up to `out.len()` payload bytes of packet `p`; how many.
    pub fn payload(&self, p: &super::Packet, out: &mut [u8]) -> usize {
        let n = (p.header.payload_len as usize).min(out.len());
        self.hw.read(map::rx_buf(p.buf as u32) + HEADER_LEN as u32, &mut out[..n]);
        n
    }

    /// Give a receive buffer an offload kept (`Received::Kept`) back.
    pub fn release(&mut self, buf: u8) {
        self.cx.rx_release(self.hw, buf);
    }

    /// Owe port `port` event `e` (RDMA writes it to the port's event queue,
    /// in order with the port's other events, with its `seq` and `rtc`).
    /// False when no room is left for it (try again later).
    pub fn event(&mut self, port: u8, e: &Event) -> bool {
        let p = port as usize;
        if !self.cx.is_open(p) || self.cx.events.get(p).is_none_or(|q| q.is_full()) {
            return false;
        }
        let Some(i) = self.cx.offload.events.alloc(()) else { return false };
        let mut b = [0u8; nic_abi::event::EVENT_SIZE as usize];
        e.encode(&mut b);
        self.hw.write(map::offload_event(i.raw() as u32), &b);
        self.cx.owe_event(p, EvRef::Offload(i));
        true
    }

    /// Post a host-DMA command; `tag` comes back in `Offload::completion`
    /// of offload `id` (its place in the list, `Offloads::id_of`). False
    /// when the ring is full.
    pub fn host_dma(&mut self, id: u8, cmd: HostDmaCmd, tag: u16) -> bool {
        if self.cx.hdma.space() == 0 {
            return false;
        }
        self.cx.hdma.post(self.hw, cmd, HdmaAction::Offload(id, tag));
        self.w.dma_cmds += 1;
        true
    }
}

/// Copy `len` bytes of SRAM from `from` to `to` (regions apart), through
/// a small buffer.
pub fn copy_sram(hw: &mut impl Hw, from: u32, to: u32, len: u32) {
    let mut buf = [0u8; 256];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u32);
        hw.read(from + done, &mut buf[..n as usize]);
        hw.write(to + done, &buf[..n as usize]);
        done += n;
    }
}
