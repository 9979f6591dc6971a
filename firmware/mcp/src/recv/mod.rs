//! RECV: packets from the receive-DMA engine. Checks the engine's CRC
//! status and the header; passes acks and nacks to SDMA; checks sequence
//! numbers (duplicates acked and dropped, gaps nacked once); matches Data
//! to a receive buffer; validates puts and gets against the target port's
//! page table; hands accepted payloads to RDMA. Owes acks (after the ack
//! delay, or at once when half a window is unacked) and queues them and
//! nacks for SEND.
//!
//! Owns: the receiving streams (`RxStream`, each with its receive
//! window), the ports' posted receive buffers (in posting order), the
//! receive-done ring's consumer side, the ack timers. Takes from: the
//! receive-done ring, `Shared::provided` (SDMA). Hands on:
//! `Shared::from_recv` (SDMA), `Shared::controls` (SEND),
//! `Shared::rdma_jobs` (RDMA). SEND asks it for the ack to piggyback and
//! for what an ack or nack carries ([`Recv::piggyback_ack`],
//! [`Recv::control_out`]).

pub(crate) mod accept;
mod acks;
mod freering;
mod ghosts;
mod take;

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Held, Win, Window};
use crate::pool::Pool;
use crate::queue::{self, Consumer, Producer};
use crate::records::*;
use crate::shared::{FromRecv, MachineState, Shared};
use crate::Work;
use nic_abi::map;
use nic_abi::packet::{Header, PacketView, SeqHeader, HEADER_WORDS};
use nic_abi::regs;
use nic_abi::rings::{self, RxDone, RxStatus};
use nic_abi::stats::Stat;
use nic_abi::trace::{Cause, Machine};
use nic_abi::{Priority, NUM_PORTS};

/// Packets examined per pass.
pub(crate) const RECV_BUDGET: u32 = 16;

/// What RECV is doing or waiting for (persists between polls).
#[derive(Debug, Clone, Copy, Eq)]
pub enum RecvState {
    /// No packet waiting.
    Idle,
    /// Checking the packet in receive buffer `buf` (CRC status, header).
    Check { buf: u32 },
    /// Passing an ack or nack (`seq`) to SDMA.
    Ack { seq: u32 },
    /// Sequence check and placement of data-bearing packet `seq`.
    Accept { seq: u32 },
    /// Packets wait in the receive ring, but RDMA's queue is full.
    RdmaFull { waiting: u32 },
    /// The pass's budget ran out with `waiting` packets in the ring.
    Backlog { waiting: u32 },
}

impl RecvState {
    pub const IDLE: u8 = 0;
    pub const CHECK: u8 = 1;
    pub const ACK: u8 = 2;
    pub const ACCEPT: u8 = 3;
    pub const RDMA_FULL: u8 = 4;
    pub const BACKLOG: u8 = 5;
}

impl PartialEq for RecvState {
    /// Variant by variant, inlined: the step's check for a change of
    /// state is on every pass.
    #[inline(always)]
    fn eq(&self, other: &RecvState) -> bool {
        use RecvState::*;
        match (*self, *other) {
            (Idle, Idle) => true,
            (Check { buf: a }, Check { buf: b }) => a == b,
            (Ack { seq: a }, Ack { seq: b }) | (Accept { seq: a }, Accept { seq: b }) => a == b,
            (RdmaFull { waiting: a }, RdmaFull { waiting: b })
            | (Backlog { waiting: a }, Backlog { waiting: b }) => a == b,
            _ => false,
        }
    }
}

impl MachineState for RecvState {
    const MACHINE: Machine = Machine::Recv;

    fn code(&self) -> u8 {
        match self {
            RecvState::Idle => Self::IDLE,
            RecvState::Check { .. } => Self::CHECK,
            RecvState::Ack { .. } => Self::ACK,
            RecvState::Accept { .. } => Self::ACCEPT,
            RecvState::RdmaFull { .. } => Self::RDMA_FULL,
            RecvState::Backlog { .. } => Self::BACKLOG,
        }
    }

    fn arg(&self) -> u32 {
        match *self {
            RecvState::Idle => 0,
            RecvState::Check { buf } => buf,
            RecvState::Ack { seq } | RecvState::Accept { seq } => seq,
            RecvState::RdmaFull { waiting } | RecvState::Backlog { waiting } => waiting,
        }
    }
}

/// What an ack or nack carries (RECV's answer to SEND).
#[derive(Debug, Clone, Copy)]
pub struct ControlOut {
    pub remote_node: u16,
    pub local_port: u8,
    pub remote_port: u8,
    pub prio: Priority,
    /// The cumulative ack: the next sequence number expected.
    pub expected: u32,
    /// Of a report stream (`REPORT_STREAM`): flagged as the fan-out says.
    pub report: bool,
    /// A poll of a stream made again after an eviction: its incarnation
    /// (`Flags::INCARNATION`); 0 otherwise.
    pub incarnation: u32,
}

/// What [`Recv::step`] did with the next packet.
pub enum Next {
    /// No packet to take (or RDMA's queue is full).
    Empty,
    /// Taken and done with (an ack, a nack, a drop).
    Handled,
    /// A data-bearing packet to place once SDMA took its ack.
    Accept(Arrived),
    /// A packet of a type that belongs to offloads, for the core to hand
    /// to the one that owns it (`crate::offload`).
    Offload(crate::offload::Packet),
}

/// A data-bearing packet checked and waiting to be placed.
pub struct Arrived {
    pub(crate) buf: u8,
    pub(crate) header: SeqHeader,
    pub(crate) key: u32,
}

/// The RECV machine.
///
/// (`repr(C)`: the machine's state, cursors and timers first, its
/// stream tables last.)
#[repr(C)]
pub struct Recv {
    state: RecvState,
    /// Why the last pass stopped taking packets, if not for want of them.
    stopped: Option<RecvState>,
    /// The stream the last lookup found (its key and id, if any): the
    /// packets of a stream and the acks its reverse stream carries look
    /// it up once, not in the map each time.
    last_rx: (u32, Option<RxId>),
    /// The put or get whose remote range is being checked (its stream,
    /// the range's start, the bytes found registered so far): the check
    /// waits for translations, the sender is told Busy and comes again.
    pub(crate) remote_checked: (Option<RxId>, u64, u64),
    /// Receive-done records taken.
    cons: u32,
    /// RXDONE_PROD as the last step read it.
    seen_prod: u32,
    /// No ack on the list falls due before this RTC tick (u64::MAX: none
    /// owed), and none went out piggybacked since the ack timers last
    /// looked (`ack_next` is then 0: the list is tidied at the next
    /// pass): the ack timers are not looked at before it.
    ack_next: u64,
    /// Per port: posted receive buffers, FIFO (head, tail), linked
    /// through their records (`RecvSlot::next`).
    slots_head: [Option<SlotId>; NUM_PORTS],
    slots_tail: [Option<SlotId>; NUM_PORTS],
    /// Since when the engine has reported everything and holds buffers
    /// that are in no entry it has still to take (`RxFreeRing::audit`), and
    /// which: buffers lost to a ring entry the firmware did not write.
    /// Posted again after a while.
    lost_since: Option<(u64, u32)>,
    /// When to look over the free ring's pending entries next.
    next_repair: u64,
    /// The wait from one audit to the next (see `reclaim`).
    repair_every: u64,
    /// Receiving streams owing an ack.
    ack_list: heapless::Vec<RxId, MAX_STREAMS>,
    /// What the window policy keeps here (packets held past gaps;
    /// nothing under go-back-N).
    // (Not read when the policy keeps nothing.)
    #[allow(dead_code)]
    pub(crate) held: Held,
    /// Its halves of the queues between machines (`crate::queue`): what
    /// it hands SDMA, RDMA and SEND, and the receive buffers SDMA took.
    pub(crate) to_sdma: Producer<queue::ToSdma>,
    pub(crate) to_rdma: Producer<queue::Jobs>,
    pub(crate) controls: Producer<queue::Controls>,
    posted: Consumer<queue::Posted>,
    rx_index: heapless::FnvIndexMap<u32, RxId, MAX_STREAMS>,
    pub(crate) rxs: Pool<RxStream, MAX_STREAMS>,
}

impl Recv {
    pub(crate) const fn new() -> Recv {
        Recv {
            state: RecvState::Idle,
            stopped: None,
            rxs: Pool::new(RxStream::EMPTY),
            rx_index: heapless::FnvIndexMap::new(),
            last_rx: (0, None),
            remote_checked: (None, 0, 0),
            cons: 0,
            seen_prod: 0,
            ack_list: heapless::Vec::new(),
            ack_next: u64::MAX,
            slots_head: [None; NUM_PORTS],
            slots_tail: [None; NUM_PORTS],
            lost_since: None,
            next_repair: 0,
            repair_every: 0,
            held: <Win as Window>::HELD,
            to_sdma: queue::producer(),
            to_rdma: queue::producer(),
            controls: queue::producer(),
            posted: queue::consumer(),
        }
    }

    pub fn state(&self) -> RecvState {
        self.state
    }

    /// A change of state (recorded when tracing); none, no call.
    #[inline(always)]
    fn go(&mut self, cx: &mut Shared, hw: &mut impl Hw, to: RecvState, cause: Cause) {
        if self.state != to {
            cx.transition(hw, &mut self.state, to, cause);
        }
    }

    /// Take over the engine's counters as they are (a warm restart).
    pub fn init(&mut self, hw: &mut impl Hw) {
        self.cons = hw.reg(regs::RXDONE_PROD);
        self.seen_prod = self.cons;
        self.lost_since = None;
        hw.set_reg(regs::RXDONE_CONS, self.cons);
        ghosts::clear(hw);
    }

    /// The start of RECV's part of a pass: receive buffers SDMA took from
    /// the host join their ports' lists. (Inlined: on most passes it is
    /// a check of an empty queue.)
    #[inline(always)]
    pub fn begin_pass(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        if !cx.provided.is_empty() {
            self.take_provided(cx, hw);
        }
        self.stopped = None;
    }

    /// A step of the machine (kept out of line: a debugger breaks here):
    /// take the next packet from the receive-done ring, check it and pass
    /// the ack or nack it carries to SDMA. A data-bearing packet comes
    /// back to be placed ([`Recv::accept`]) once SDMA took that ack (the
    /// answer to a get is placed only once its request counts as acked).
    /// The check for an empty ring is all a step costs when nothing came
    /// (the packet's work is out of line, `Recv::take_packet`).
    #[inline(never)]
    pub fn step(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) -> Next {
        let prod = hw.reg(regs::RXDONE_PROD);
        self.seen_prod = prod;
        // Never wait for the send side here (a full control queue, busy
        // transmit buffers): a receiver that stops taking packets while
        // it waits to send can deadlock the fabric with its peers.
        if prod == self.cons && !Win::replay_pending(self) {
            // Once a retransmission timeout at most, less often while the
            // ring stays as written: it costs a load per entry.
            if cx.now >= self.next_repair {
                self.reclaim(cx, hw);
            }
            return Next::Empty;
        }
        self.take_packet(cx, hw, w, prod)
    }

    /// A packet (or a held one) to take: the step's work when the ring or
    /// the replays have one.
    #[inline(never)]
    fn take_packet(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work, prod: u32) -> Next {
        self.lost_since = None;
        if let Some(a) = Win::replay(self, cx, hw) {
            return Next::Accept(a);
        }
        if cx.rdma_jobs.is_full() {
            // A packet from the ring needs a place in RDMA's queue (as do
            // the replays, which wait in `replay` meanwhile).
            self.stopped = Some(RecvState::RdmaFull { waiting: prod.wrapping_sub(self.cons) });
            return Next::Empty;
        }
        if prod == self.cons {
            // The replays were of packets placed when they came.
            return Next::Handled;
        }
        // The record as two words: buffer and length, then status.
        let slot =
            rings::slot(map::RXDONE_RING, map::RXDONE_RING_LEN, rings::RXDONE_SIZE, self.cons);
        let (first, status) = (hw.load_u64(slot), hw.load_u32(slot + 8));
        self.cons = self.cons.wrapping_add(1);
        hw.set_reg(regs::RXDONE_CONS, self.cons);
        w.rx_packets += 1;
        let Some(status) = RxStatus::from_bits(status) else { return Next::Handled };
        let d = RxDone { buf: first as u32, len: (first >> 32) as u32, status };
        self.go(cx, hw, RecvState::Check { buf: d.buf }, Cause::Packet);
        self.check_packet(cx, hw, d)
    }

    /// The end of RECV's part of a pass: acks that fell due go to SEND,
    /// and the state says what is left waiting.
    pub fn end_pass(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        let quiet = cx.now < self.ack_next && self.stopped.is_none() && self.seen_prod == self.cons;
        if quiet && self.state == RecvState::Idle {
            // No ack due, nothing left waiting: idle it stays.
            return;
        }
        self.ack_timers(cx, w);
        let next = match self.stopped {
            Some(s) => s,
            None => {
                // Packets the last step saw in the ring and left there.
                let waiting = self.seen_prod.wrapping_sub(self.cons);
                if waiting == 0 {
                    RecvState::Idle
                } else {
                    RecvState::Backlog { waiting }
                }
            }
        };
        let cause = match next {
            RecvState::RdmaFull { .. } => Cause::RdmaFull,
            RecvState::Backlog { .. } => Cause::Budget,
            _ => Cause::Drained,
        };
        self.go(cx, hw, next, cause);
    }

    /// Has RECV work it would do at the next pass whatever the news?
    /// Packets left in the ring (the budget ran out, or RDMA's queue was
    /// full), or packets held for replay.
    /// RXDONE_PROD as the last step read it: the packets stored up to
    /// there were taken, or are left (`leftover`).
    pub(crate) fn seen_prod(&self) -> u32 {
        self.seen_prod
    }

    pub fn leftover(&self) -> bool {
        matches!(self.state, RecvState::Backlog { .. } | RecvState::RdmaFull { .. })
            || self.seen_prod != self.cons
            || Win::replay_pending(self)
    }

    /// Receive buffers the host posted (through SDMA's intake) join their
    /// port's list, in posting order.
    pub(crate) fn take_provided(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        // (SDMA wrote each record unlinked: a word read, the port; a word
        // written, the tail's link.)
        while let Some(i) = cx.provided.pop_front(&self.posted) {
            let p = cx.slot_posted(hw, i).0 as usize;
            let Some(&tail) = self.slots_tail.get(p) else {
                cx.slots.free(i);
                continue;
            };
            match tail {
                None => self.slots_head[p] = Some(i),
                Some(t) => cx.link_slot(hw, t, Some(i)),
            }
            self.slots_tail[p] = Some(i);
        }
    }

    /// A packet no offload compiled in owns: counted and dropped.
    pub(crate) fn drop_unowned(&mut self, cx: &mut Shared, hw: &mut impl Hw, buf: u8) {
        self.drop_packet(cx, hw, buf, Stat::BadHeaders);
    }

    pub(crate) fn drop_packet(&mut self, cx: &mut Shared, hw: &mut impl Hw, buf: u8, why: Stat) {
        cx.bump(hw, why, 1);
        cx.bump(hw, Stat::Drops, 1);
        cx.rxfree.give(hw, buf);
    }

    /// The receiving stream of `key`, if there is one.
    #[inline]
    pub(crate) fn rx_of(&mut self, key: u32) -> Option<RxId> {
        if let (k, Some(r)) = self.last_rx {
            if k == key {
                return Some(r);
            }
        }
        let &r = self.rx_index.get(&key)?;
        self.last_rx = (key, Some(r));
        Some(r)
    }

    fn check_packet(&mut self, cx: &mut Shared, hw: &mut impl Hw, d: RxDone) -> Next {
        if !cx.rxfree.back(d.buf) {
            // Not one of ours (out of range, or not with the engine):
            // nothing to give back.
            cx.bump(hw, Stat::BadHeaders, 1);
            cx.bump(hw, Stat::Drops, 1);
            return Next::Handled;
        }
        let buf = d.buf as u8;
        if d.status.intersects(RxStatus::CRC_BAD | RxStatus::TRUNCATED) {
            self.drop_packet(cx, hw, buf, Stat::CrcErrors);
            return Next::Handled;
        }
        // The header as six word loads, parsed in registers.
        let at = map::rx_buf(d.buf);
        let words: [u64; HEADER_WORDS] = core::array::from_fn(|i| hw.load_u64(at + 8 * i as u32));
        let h = match Header::from_words(&words, d.len as usize) {
            Ok(h) => h,
            Err(_) => {
                self.drop_packet(cx, hw, buf, Stat::BadHeaders);
                return Next::Handled;
            }
        };
        if h.dst_node != cx.cfg.node || h.src_node >= cx.cfg.nodes {
            self.drop_packet(cx, hw, buf, Stat::BadHeaders);
            return Next::Handled;
        }
        cx.bump(hw, Stat::PacketsReceived, 1);
        if crate::offload::is_offload_type(h.ptype) {
            return Next::Offload(crate::offload::Packet { buf, header: h });
        }
        // Our sending stream this packet speaks about: us:dst_port -> src.
        let key = stream_key(h.src_node, h.dst_port, h.src_port, h.priority);
        let p = h.view();
        // A fan-out's own streams between the two ports (reports).
        let key = Fan::stream_of(self, cx, p, key);
        if let Some(ack) = p.ack() {
            self.go(cx, hw, RecvState::Ack { seq: ack }, Cause::AckIn);
            self.pass_to_sdma(cx, FromRecv::Ack { key, ack });
        }
        match p {
            PacketView::Ack(_) => {
                cx.rxfree.give(hw, buf);
                Next::Handled
            }
            PacketView::Poll(q) => {
                cx.rxfree.give(hw, buf);
                self.poll_in(cx, hw, q, key);
                Next::Handled
            }
            PacketView::Stat(st) => {
                // SDMA reads the payload and gives the buffer back.
                let m = FromRecv::Stat { key, buf, ustat: st.is_ustat() };
                if cx.from_recv.push_back(&self.to_sdma, m).is_err() {
                    cx.bump(hw, Stat::ControlDrops, 1);
                    cx.rxfree.give(hw, buf);
                }
                Next::Handled
            }
            PacketView::Nack(n) => {
                if let Some(code) = n.code() {
                    let (seq, round) = (n.seq(), n.round());
                    self.go(cx, hw, RecvState::Ack { seq }, Cause::AckIn);
                    self.pass_to_sdma(cx, FromRecv::Nack { key, code, seq, round });
                }
                cx.rxfree.give(hw, buf);
                Next::Handled
            }
            PacketView::Data(d) => self.arrived(cx, hw, buf, d.stream(), key),
            PacketView::GetReq(g) => self.arrived(cx, hw, buf, g.stream(), key),
            PacketView::Report(r) => self.arrived(cx, hw, buf, r.stream(), key),
            // (The offloads' types went to them above.)
            PacketView::Echo(_) | PacketView::Coll(_) => {
                self.drop_unowned(cx, hw, buf);
                Next::Handled
            }
        }
    }

    /// For tests: the highest sequence number expected on any stream.
    #[cfg(test)]
    pub(crate) fn max_expected(&self) -> u32 {
        self.rxs.live_indices().map(|r| self.rxs[r].win.expected()).max().unwrap_or(0)
    }
}
