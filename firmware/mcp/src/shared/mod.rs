//! What the four machines hand to each other, and the NIC resources more
//! than one of them uses. No machine's own state lives here: a machine's
//! records are fields of its struct, written only by its module.
//!
//! - Record pools addressed by id (`pool::Id`), whose records change
//!   owner as they move on: send tokens (SDMA while queued; the event
//!   queue once complete), receive slots (RECV while posted; the event
//!   queue once filled).
//! - Transmit buffers, each with a visible owner: free, Filling (SDMA),
//!   Filled and queued for SEND, Sending (SEND, until the send-DMA engine
//!   is done).
//! - The bounded queues between machines, whose producer and consumer
//!   halves the machines at their ends hold (`crate::queue`):
//!   `from_recv` (RECV -> SDMA: [`FromRecv`]: acks, nacks, get answers to
//!   send), `provided` (SDMA -> RECV: receive buffers posted by the host),
//!   `controls` (RECV and SDMA -> SEND: acks, nacks and polls to send),
//!   `rdma_jobs` (RECV -> RDMA: accepted payloads), `tx_ready` (SDMA ->
//!   SEND: filled transmit buffers); and the owed events per port (any
//!   machine -> RDMA).
//! - Rings shared with the hardware that more than one machine writes: the
//!   host-DMA command ring (SDMA fills, RDMA copies and events), the
//!   receive-buffer free ring (RECV drops, RDMA copies).
//! - The counters, the trace ring, the ports' open state and the tokens a
//!   port holds (SDMA takes, RDMA gives back when the event is written).

mod bufs;
mod trace;

pub use bufs::{HostDmaRing, RxFreeRing, TxBufs};
pub use trace::{Deferred, MachineState, Stats, Trace};

use crate::hw::Hw;
use crate::pool::Pool;
use crate::queue::{self, Producer, Queue};
use crate::records::*;
use crate::Config;
use nic_abi::map;
use nic_abi::packet::NackCode;
use nic_abi::rings;
use nic_abi::stats::Stat;
use nic_abi::trace::Cause;
use nic_abi::NUM_PORTS;

/// RECV -> SDMA: what arriving packets say to the sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromRecv {
    /// A cumulative ack for the sending stream `key`.
    Ack { key: u32, ack: u32 },
    /// A nack for the sending stream `key`: `seq` was refused for `code`.
    Nack { key: u32, code: NackCode, seq: u32, round: u8 },
    /// A peer's get was accepted: send the answer that `token` (GetResp)
    /// describes.
    Answer { token: TokenId },
    /// A fan-out's message arrived that this NIC relays out of its
    /// receive buffers: make its children's send tokens (record `rec`;
    /// `Fanout::start`).
    FanStart { rec: McastId },
    /// Selective repeat: a STAT (or, `ustat`, a USTAT) for the sending
    /// stream `key`, in receive buffer `buf` (its payload); SDMA gives
    /// the buffer back.
    Stat { key: u32, buf: u8, ustat: bool },
}

impl crate::ring::Vacant for FromRecv {
    const VACANT: FromRecv = FromRecv::Answer { token: TokenId::new(0) };
}

/// Entries of the RECV -> SDMA queue: two per packet RECV takes in a pass
/// (a piggybacked ack and a nack or answer), drained every pass.
pub const FROM_RECV_LEN: usize = 2 * crate::recv::RECV_BUDGET as usize;
/// Receive buffers SDMA may pass to RECV in a pass (RECV takes them all at
/// its next step).
pub const PROVIDED_LEN: usize = 2 * crate::sdma::INTAKE_BUDGET as usize;

/// The open state of a port as the handshake with the driver left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortOpen {
    pub open: bool,
    pub generation: u32,
    /// Opened, and refused (its event queue is not in its slice of host
    /// memory): not served until the driver opens it again.
    pub refused: bool,
}

/// Tokens a port holds: SDMA counts what it takes, RDMA what it gives back
/// (the event was written); in use = taken - returned.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credits {
    pub send_taken: u32,
    pub send_returned: u32,
    pub recv_taken: u32,
    pub recv_returned: u32,
}

impl Credits {
    pub fn send_in_use(&self) -> u32 {
        self.send_taken.wrapping_sub(self.send_returned)
    }
    pub fn recv_in_use(&self) -> u32 {
        self.recv_taken.wrapping_sub(self.recv_returned)
    }
}

const EMPTY_EVENTS: crate::ring::Ring<EvRef, 128> = crate::ring::Ring::new();

/// Everything the machines share or hand over (see the module doc).
///
/// `repr(C)`, in this order: the time, the configuration and the
/// counters and queue heads a pass tests first, within the 2 KiB of the
/// struct's start that the image reaches with one load; the large
/// tables (tokens, receive slots) last. (The multicast records' count is
/// tested every pass: their pool comes early.)
#[repr(C)]
pub struct Shared {
    /// The RTC at the start of this pass: the only time the machines see.
    pub now: u64,
    pub cfg: Config,
    /// A bit per port whose `events` may hold something (set at every
    /// push; RDMA clears it when it finds the queue empty): a pass looks
    /// only at those queues, not at every port's.
    pub events_owed: u8,
    /// An offload may hold state that the core's per-pass hooks look at
    /// (a multicast record, a leaf report, a fan-out's lead send, a paced
    /// or regulated stream, an offload's timer or packet). Set where such
    /// state is made; cleared at the end of a pass that finds none
    /// (`Mcp::settle`). While it is clear a pass asks no offload anything:
    /// unicast pays one load for the offloads compiled in.
    pub offloads_live: bool,
    /// Differs between boots of this NIC: SYNC packets carry it.
    pub boot: u16,
    pub trace: Trace,
    pub hdma: HostDmaRing,
    pub rxfree: RxFreeRing,
    pub tx_ready: Queue<u8, { map::TX_BUF_COUNT as usize }, queue::ToSend>,
    pub provided: Queue<SlotId, PROVIDED_LEN, queue::Posted>,
    pub from_recv: Queue<FromRecv, FROM_RECV_LEN, queue::ToSdma>,
    pub txbufs: TxBufs,
    pub ports: [PortOpen; NUM_PORTS],
    pub credits: [Credits; NUM_PORTS],
    /// What the core keeps for the offloads (their packets for SEND, their
    /// events for RDMA).
    pub offload: crate::offload::CoreSide,
    pub leaf_reports: crate::ring::Ring<ReportTo, LEAF_REPORTS>,
    /// Multicasts this NIC serves (module `mcast`); record i's child list
    /// is `map::mcast_list(i)`.
    pub mcasts: Pool<McastRec, { map::MCAST_LISTS_LEN as usize }>,
    /// The translation cache and the page-table lines being read.
    pub xlat: crate::translate::Translator,
    /// Counts for SRAM at the end of the pass ([`Shared::count_later`]).
    pub later: Deferred,
    pub controls: Queue<Control, 64, queue::Controls>,
    pub rdma_jobs: Queue<RdmaJob, { map::RX_BUF_COUNT as usize }, queue::Jobs>,
    pub lost_pending: crate::ring::Ring<(McastId, u16), 16>,
    /// Extra owners of each receive buffer besides RDMA's copy (a relay's
    /// forwarding): the buffer goes back to the engine when the last
    /// owner lets go ([`Shared::rx_release`]).
    pub rx_holds: [u8; map::RX_BUF_COUNT as usize],
    /// Who holds each lost-heads list, and children whose sends failed
    /// still to be named in their record's list (record, node).
    pub lost_owner: [LostOwner; map::MCAST_LOST_LISTS as usize],
    pub events: [crate::ring::Ring<EvRef, 128>; NUM_PORTS],
    pub tokens: Pool<SendToken, MAX_TOKENS>,
    /// Which receive slots are taken; their records are in SRAM
    /// (`map::rx_slot`, [`Shared::slot`]).
    pub slots: Pool<(), MAX_SLOTS, RecvSlot>,
}

impl Shared {
    /// Queue control packet `c` for SEND; false when the queue is full
    /// (the loss is counted: its stream's timers cover for it).
    pub fn push_control(&mut self, half: &Producer<queue::Controls>, c: Control) -> bool {
        if self.controls.push_back(half, c).is_err() {
            self.count_later(Stat::ControlDrops, 1);
            return false;
        }
        true
    }

    /// Filled buffer `b` needs no host-DMA: to SEND, unless an earlier
    /// packet of its stream is still filling (then it is held until that
    /// one is filled: a stream's packets leave in sequence order, which
    /// the receiver's gap nacks and a poll's answer rely on).
    pub fn ready(&mut self, half: &Producer<queue::ToSend>, b: u8) {
        let seq = self.txbufs.get(b).seq;
        if self.txbufs.first_of(b, TxBufState::Filling, Some(seq)).is_some() {
            self.txbufs.bufs[b as usize].state = TxBufState::Held;
            self.txbufs.note(b);
        } else {
            let _ = self.tx_ready.push_back(half, b);
        }
    }

    /// Buffer `b`'s host-DMA completed: it goes to SEND, and after it the
    /// held packets of its stream that no earlier fill holds back.
    pub fn filled(&mut self, half: &Producer<queue::ToSend>, b: u8) {
        if !self.txbufs.filled(b) {
            return;
        }
        let _ = self.tx_ready.push_back(half, b);
        if self.txbufs.waiting == 0 {
            return;
        }
        while let Some(h) = self.txbufs.first_of(b, TxBufState::Held, None) {
            let seq = self.txbufs.get(h).seq;
            if self.txbufs.first_of(b, TxBufState::Filling, Some(seq)).is_some() {
                break;
            }
            self.txbufs.bufs[h as usize].state = TxBufState::Filled;
            self.txbufs.note(h);
            let _ = self.tx_ready.push_back(half, h);
        }
    }

    pub const fn new() -> Shared {
        Shared {
            cfg: Config::EMPTY,
            now: 0,
            boot: 0,
            ports: [PortOpen { open: false, generation: 0, refused: false }; NUM_PORTS],
            credits: [Credits { send_taken: 0, send_returned: 0, recv_taken: 0, recv_returned: 0 };
                NUM_PORTS],
            tokens: Pool::new(SendToken::EMPTY),
            slots: Pool::new(()),
            mcasts: Pool::new(McastRec::EMPTY),
            rx_holds: [0; map::RX_BUF_COUNT as usize],
            leaf_reports: crate::ring::Ring::new(),
            lost_owner: [LostOwner::Free; map::MCAST_LOST_LISTS as usize],
            lost_pending: crate::ring::Ring::new(),
            txbufs: TxBufs::new(),
            hdma: HostDmaRing::new(),
            rxfree: RxFreeRing::new(),
            from_recv: Queue::new(),
            provided: Queue::new(),
            controls: Queue::new(),
            rdma_jobs: Queue::new(),
            tx_ready: Queue::new(),
            events: [EMPTY_EVENTS; NUM_PORTS],
            events_owed: 0,
            offloads_live: true,
            later: Deferred::new(),
            trace: Trace { on: false, prod: 0 },
            xlat: crate::translate::Translator::new(),
            offload: crate::offload::CoreSide::new(),
        }
    }

    /// Receive slot `s`'s record: six aligned words (`RecvSlot::encode`'s
    /// layout, read a word at a time rather than copied and decoded byte
    /// by byte).
    pub fn slot(&self, hw: &impl Hw, s: SlotId) -> RecvSlot {
        let Some(at) = slot_at(s) else {
            return RecvSlot::decode(&[0; map::RX_SLOT_SIZE as usize]);
        };
        let w: [u64; 6] = core::array::from_fn(|i| hw.load_ram_u64(at + 8 * i as u32));
        RecvSlot {
            port: w[0] as u8,
            prio: nic_abi::Priority::from_u8((w[0] >> 8) as u8).unwrap_or(nic_abi::Priority::Low),
            size_class: (w[0] >> 16) as u8,
            error: (w[0] >> 24) as u8,
            len: (w[0] >> 32) as u32,
            vaddr: w[1],
            tag: w[2],
            mcast: w[3],
            src_port: w[4] as u8,
            inline_len: (w[4] >> 8) as u8,
            src_node: (w[4] >> 16) as u16,
            mrec: Mrec::from_raw((w[4] >> 32) as u16),
            next: SlotId::from_raw((w[4] >> SLOT_NEXT_SHIFT) as u16),
            msg_len: w[5] as u32,
        }
    }

    /// Write receive slot `s`'s record, as `slot` reads it.
    pub fn set_slot(&self, hw: &mut impl Hw, s: SlotId, v: &RecvSlot) {
        if let Some(at) = slot_at(s) {
            let w0 = v.port as u64
                | (v.prio as u64) << 8
                | (v.size_class as u64) << 16
                | (v.error as u64) << 24
                | (v.len as u64) << 32;
            hw.store_ram_u64(at, w0);
            hw.store_ram_u64(at + 8, v.vaddr);
            hw.store_ram_u64(at + 16, v.tag);
            let [w3, w4, w5] = v.fill().words();
            let link = (SlotId::raw_of(v.next) as u64) << SLOT_NEXT_SHIFT;
            hw.store_ram_u64(at + 24, w3);
            hw.store_ram_u64(at + 32, (w4 & !(0xFFFF << SLOT_NEXT_SHIFT)) | link);
            hw.store_ram_u64(at + 40, w5);
        }
    }

    /// Receive slot `s`'s link in its port's list (`RecvSlot::next`).
    #[inline]
    pub fn slot_link(&self, hw: &impl Hw, s: SlotId) -> Option<SlotId> {
        let at = slot_at(s)?;
        SlotId::from_raw((hw.load_ram_u64(at + 32) >> SLOT_NEXT_SHIFT) as u16)
    }

    /// Posted slot `s` links to `next`: its fifth word (what a message
    /// wrote there means nothing while the slot waits for the next one)
    /// is the link alone.
    #[inline]
    pub fn link_slot(&self, hw: &mut impl Hw, s: SlotId, next: Option<SlotId>) {
        if let Some(at) = slot_at(s) {
            hw.store_ram_u64(at + 32, (SlotId::raw_of(next) as u64) << SLOT_NEXT_SHIFT);
        }
    }

    /// Receive slot `s`'s first word: its port, priority, size class and
    /// length, as the host's Provide gave them.
    #[inline]
    pub fn slot_posted(&self, hw: &impl Hw, s: SlotId) -> (u8, nic_abi::Priority, u8, u32) {
        let w = slot_at(s).map_or(0, |at| hw.load_ram_u64(at));
        let prio = nic_abi::Priority::from_u8((w >> 8) as u8).unwrap_or(nic_abi::Priority::Low);
        (w as u8, prio, (w >> 16) as u8, (w >> 32) as u32)
    }

    /// Receive slot `s`'s buffer address (one word).
    #[inline]
    pub fn slot_vaddr(&self, hw: &impl Hw, s: SlotId) -> u64 {
        slot_at(s).map_or(0, |at| hw.load_ram_u64(at + 8))
    }

    /// Receive slot `s`'s multicast tag word (`RecvSlot::mcast`).
    #[inline]
    pub fn slot_mcast(&self, hw: &impl Hw, s: SlotId) -> u64 {
        slot_at(s).map_or(0, |at| hw.load_ram_u64(at + 24))
    }

    /// Receive slot `s` takes a message: the three words of its record
    /// the message writes (the host's stay as they are).
    #[inline]
    pub fn fill_slot(&self, hw: &mut impl Hw, s: SlotId, f: &SlotFill) {
        if let Some(at) = slot_at(s) {
            let at = at + 24;
            let [a, b, c] = f.words();
            hw.store_ram_u64(at, a);
            hw.store_ram_u64(at + 8, b);
            hw.store_ram_u64(at + 16, c);
        }
    }

    /// Take a free receive slot for `v`; None when all are taken.
    pub fn new_slot(&mut self, hw: &mut impl Hw, v: &RecvSlot) -> Option<SlotId> {
        let s = self.slots.alloc(())?;
        self.set_slot(hw, s, v);
        Some(s)
    }

    /// Add `n` to counter `s` at the end of the pass (where no `Hw` is
    /// at hand: rare paths).
    pub fn count_later(&mut self, s: Stat, n: u64) {
        Stats::later(&mut self.later, s, n);
    }

    /// Add `n` to counter `s` (in SRAM).
    #[inline(always)]
    pub fn bump(&self, hw: &mut impl Hw, s: Stat, n: u64) {
        Stats::bump(hw, s, n);
    }

    /// A machine's transition: `state` becomes `to` because of `cause`,
    /// one trace record (nothing when it is already there).
    #[inline(always)]
    pub fn transition<S: MachineState>(
        &mut self,
        hw: &mut impl Hw,
        state: &mut S,
        to: S,
        cause: Cause,
    ) {
        // Untraced, a transition is a store: only a record needs to know
        // whether the state changed (the compare of two states with their
        // operands is a dozen instructions).
        if !self.trace.on {
            *state = to;
            return;
        }
        if *state != to {
            let from = core::mem::replace(state, to);
            // (The record's operands are worked out out of line.)
            self.trace_transition(hw, from, to, cause);
        }
    }

    #[cold]
    #[inline(never)]
    fn trace_transition<S: MachineState>(
        &mut self,
        hw: &mut impl Hw,
        from: S,
        to: S,
        cause: Cause,
    ) {
        self.trace.record(hw, self.now, S::MACHINE, (from.code(), to.code()), cause, to.arg());
    }

    pub fn is_open(&self, p: usize) -> bool {
        self.ports.get(p).is_some_and(|s| s.open && !s.refused)
    }

    /// The NIC's own get answers alive now.
    pub fn internal_tokens(&self) -> usize {
        self.tokens.live_indices().filter(|&t| self.tokens[t].kind == TokKind::GetResp).count()
    }

    /// May the NIC take `n` more tokens of its multicast reserve?
    pub fn mcast_tokens_free(&self, n: usize, kind: TokKind) -> bool {
        let used =
            self.tokens.live_indices().filter(|&t| self.tokens[t].is_mcast_internal()).count();
        // Sends to children leave some for reports: a report frees records
        // up the tree, sends to children wait for records down it.
        let room = if kind == TokKind::Report { MCAST_TOKENS } else { MCAST_TOKENS - 4 };
        used + n <= room && self.tokens.available() >= n
    }

    /// One owner of receive buffer `b` lets go: the last gives it back to
    /// the rx-DMA engine.
    pub fn rx_release(&mut self, hw: &mut impl Hw, b: u8) {
        match self.rx_holds.get_mut(b as usize) {
            Some(h) if *h > 0 => *h -= 1,
            _ => self.rxfree.give(hw, b),
        }
    }

    /// Receive buffers the multicasts this NIC relays hold now: the
    /// packets each record took and has not let go (whether or not RDMA
    /// has copied them yet: `rx_holds` counts owners besides RDMA's copy,
    /// so a held packet already copied has none left there).
    pub fn relay_held(&self) -> u32 {
        self.mcasts
            .live_indices()
            .map(|r| {
                let m = &self.mcasts[r];
                if m.source == McastSource::RxBufs {
                    m.have.wrapping_sub(m.released)
                } else {
                    0
                }
            })
            .sum()
    }

    /// Owe port `p` the event `ev` (RDMA writes it). Should the queue be
    /// full (it cannot be while tokens bound the events), the record is
    /// freed and the loss counted.
    pub fn owe_event(&mut self, p: usize, ev: EvRef) {
        let pushed = match self.events.get_mut(p) {
            Some(q) => q.push_back(ev).is_ok(),
            None => false,
        };
        if pushed {
            self.events_owed |= 1 << p;
        }
        if !pushed {
            self.count_later(Stat::Errors, 1);
            match ev {
                EvRef::Token(t) => self.tokens.free(t),
                EvRef::Slot(s) => self.slots.free(s),
                EvRef::Offload(i) => self.offload.events.free(i),
                _ => {}
            }
        }
    }
}

/// Where receive slot `s`'s record is in SRAM (`map::rx_slot`); None for
/// an id past the slots. (The bound and the address come from the same
/// index, so the compiler knows the address is in range.)
#[inline(always)]
fn slot_at(s: SlotId) -> Option<u32> {
    let i = s.index();
    (i < MAX_SLOTS).then(|| map::rx_slot(i as u32))
}

/// Write the route to `node` in front of transmit buffer `b`'s header;
/// its length. The entry is one word (`[len, b0..b6]`) and so is what is
/// stored: the word before the header, its last `len` bytes the route
/// (the bytes before them are route room nothing reads).
pub fn write_route(hw: &mut impl Hw, b: u8, node: u16) -> u8 {
    let e = hw.load_u64(map::route_entry(node as usize));
    let len = ((e & 0xff) as usize).min(map::ROUTE_MAX);
    let route = (e >> 8).checked_shl(8 * (8 - len as u32)).unwrap_or(0);
    hw.store_u64(map::tx_buf(b as u32) + map::ROUTE_ROOM - 8, route);
    len as u8
}

// The route entry is one aligned word, and so is the word before each
// transmit buffer's header; a host-DMA command is four aligned words.
const _: () = assert!(map::ROUTE_ENTRY == 8 && map::ROUTES.is_multiple_of(8));
const _: () = assert!(map::ROUTE_MAX <= 7 && map::ROUTE_ROOM >= 8);
const _: () = assert!(map::TX_BUFS.is_multiple_of(8) && map::BUF_STRIDE.is_multiple_of(8));
const _: () = assert!(map::ROUTE_ROOM.is_multiple_of(8));
const _: () = assert!(map::HDMA_RING.is_multiple_of(8) && rings::HDMA_CMD_SIZE == 32);

#[cfg(test)]
mod tests;
