//! What the four machines hand to each other, and the NIC resources more
//! than one of them uses. No machine's own state lives here: a machine's
//! records are fields of its struct, written only by its module.
//!
//! - Record pools addressed by index, whose records change owner as they
//!   move on: send tokens (SDMA while queued; the event queue once
//!   complete), receive slots (RECV while posted; the event queue once
//!   filled).
//! - Transmit buffers, each with a visible owner: free, Filling (SDMA),
//!   Filled and queued for SEND, Sending (SEND, until the send-DMA engine
//!   is done).
//! - The bounded queues between machines: [`FromRecv`] (RECV -> SDMA: acks,
//!   nacks, get answers to send), `provided` (SDMA -> RECV: receive buffers
//!   posted by the host), `controls` (RECV -> SEND: acks and nacks to send),
//!   `rdma_jobs` (RECV -> RDMA: accepted payloads), `tx_ready` (SDMA ->
//!   SEND: filled transmit buffers) and the owed events per port (any
//!   machine -> RDMA).
//! - Rings shared with the hardware that more than one machine writes: the
//!   host-DMA command ring (SDMA fills, RDMA copies and events), the
//!   receive-buffer free ring (RECV drops, RDMA copies).
//! - The counters, the trace ring, the ports' open state and the tokens a
//!   port holds (SDMA takes, RDMA gives back when the event is written).

use crate::hw::Hw;
use crate::pool::Pool;
use crate::records::*;
use crate::Config;
use nic_abi::map;
use nic_abi::packet::NackCode;
use nic_abi::regs;
use nic_abi::rings::{self, HostDmaCmd};
use nic_abi::stats::{stat_offset, Stat, ALL_STATS, STAT_COUNT};
use nic_abi::trace::{Cause, Machine, TraceRecord, TRACE_RECORD_SIZE};
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
    Answer { token: u16 },
    /// A fan-out's message arrived that this NIC relays out of its
    /// receive buffers: make its children's send tokens (record `rec`;
    /// `Fanout::start`).
    FanStart { rec: u16 },
    /// Selective repeat: a STAT (or, `ustat`, a USTAT) for the sending
    /// stream `key`, in receive buffer `buf` (its payload); SDMA gives
    /// the buffer back.
    Stat { key: u32, buf: u8, ustat: bool },
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

/// The transmit buffers and who holds each.
pub struct TxBufs {
    bufs: [TxBuf; map::TX_BUF_COUNT as usize],
    /// Data buffers not free (control packets may take the rest).
    data_busy: u32,
    /// Bit `b`: buffer `b` is not free (`free_one` is one look, not a
    /// scan of the records).
    held: u32,
    /// Bit `b`: buffer `b` is `Held` (a completed fill looks for the
    /// packets it held back only when there are some).
    waiting: u32,
}

const _: () = assert!(map::TX_BUF_COUNT <= 32);

impl TxBufs {
    const fn new() -> TxBufs {
        TxBufs {
            bufs: [TxBuf::EMPTY; map::TX_BUF_COUNT as usize],
            data_busy: 0,
            held: 0,
            waiting: 0,
        }
    }

    /// The lowest-numbered free buffer.
    #[inline]
    pub fn free_one(&self) -> Option<u8> {
        let free = !self.held & (u32::MAX >> (32 - map::TX_BUF_COUNT));
        (free != 0).then(|| free.trailing_zeros() as u8)
    }

    /// Buffer `b`'s bit in `held` as its state now is.
    #[inline]
    fn note(&mut self, b: u8) {
        let bit = 1u32 << (b as u32 % 32);
        match self.bufs[b as usize].state {
            TxBufState::Free => self.held &= !bit,
            _ => self.held |= bit,
        }
        match self.bufs[b as usize].state {
            TxBufState::Held => self.waiting |= bit,
            _ => self.waiting &= !bit,
        }
    }

    /// Bit `b`: buffer `b` is not free.
    pub fn held(&self) -> u32 {
        self.held
    }

    pub fn data_busy(&self) -> u32 {
        self.data_busy
    }

    pub fn get(&self, b: u8) -> TxBuf {
        self.bufs[b as usize]
    }

    /// Take free buffer `b` for `buf` (a data packet's fill, or a control
    /// packet ready at once).
    pub fn take(&mut self, b: u8, buf: TxBuf) {
        if !buf.control {
            self.data_busy += 1;
        }
        self.bufs[b as usize] = buf;
        self.note(b);
    }

    /// Filling -> Filled. False when `b` was not filling.
    pub fn filled(&mut self, b: u8) -> bool {
        match self.bufs.get_mut(b as usize) {
            Some(buf) if buf.state == TxBufState::Filling => {
                buf.state = TxBufState::Filled;
                true
            }
            _ => false,
        }
    }

    /// The first sequence number of stream `stream` (at `epoch`) not yet
    /// handed to the send-DMA engine: the lowest one still filling or
    /// waiting in a buffer; None when it has none.
    pub fn unsent_from(&self, stream: u16, epoch: u16) -> Option<u32> {
        let waiting = |s| matches!(s, TxBufState::Filling | TxBufState::Filled | TxBufState::Held);
        self.lowest(stream, epoch, waiting, None).map(|(_, seq)| seq)
    }

    /// The buffer of `b`'s stream and epoch in `state` with the lowest
    /// sequence number below `before` (any, when None).
    fn first_of(&self, b: u8, state: TxBufState, before: Option<u32>) -> Option<u8> {
        let me = self.bufs[b as usize];
        self.lowest(me.stream, me.epoch, |s| s == state, before).map(|(i, _)| i)
    }

    /// The data buffer of `stream` at `epoch` in a state `wanted` accepts
    /// with the lowest sequence number below `before` (any, when None):
    /// its index and sequence number.
    fn lowest(
        &self,
        stream: u16,
        epoch: u16,
        wanted: impl Fn(TxBufState) -> bool,
        before: Option<u32>,
    ) -> Option<(u8, u32)> {
        let mut first: Option<(u8, u32)> = None;
        for (i, x) in self.bufs.iter().enumerate() {
            let mine = wanted(x.state) && !x.control && x.stream == stream && x.epoch == epoch;
            let lower = |s: u32| crate::reliability::seq_lt(x.seq, s);
            if mine && before.is_none_or(lower) && first.is_none_or(|(_, s)| lower(s)) {
                first = Some((i as u8, x.seq));
            }
        }
        first
    }

    /// Does a buffer hold a data packet of sending stream `s`?
    pub fn refers_to(&self, s: u16) -> bool {
        self.bufs.iter().any(|x| x.state != TxBufState::Free && !x.control && x.stream == s)
    }

    pub fn sending(&mut self, b: u8) {
        self.bufs[b as usize].state = TxBufState::Sending;
        self.note(b);
    }

    pub fn release(&mut self, b: u8) {
        let buf = &mut self.bufs[b as usize];
        if !buf.control && buf.state != TxBufState::Free {
            self.data_busy = self.data_busy.saturating_sub(1);
        }
        *buf = TxBuf::EMPTY;
        self.note(b);
    }
}

/// The host-DMA command ring: SDMA and RDMA post, the engine completes in
/// order, and each completion names what to do (`HdmaAction`).
pub struct HostDmaRing {
    prod: u32,
    done: u32,
    actions: [HdmaAction; map::HDMA_RING_LEN as usize],
}

impl HostDmaRing {
    const fn new() -> HostDmaRing {
        HostDmaRing {
            prod: 0,
            done: 0,
            actions: [HdmaAction::Nothing; map::HDMA_RING_LEN as usize],
        }
    }

    /// Take over the engine's counters as they are (a warm restart).
    pub fn init(&mut self, hw: &mut impl Hw) {
        self.prod = hw.reg(regs::HDMA_DONE);
        hw.set_reg(regs::HDMA_PROD, self.prod);
        self.done = self.prod;
    }

    pub fn space(&self) -> u32 {
        map::HDMA_RING_LEN - self.prod.wrapping_sub(self.done)
    }

    /// Post `cmd`: four word stores of `HostDmaCmd::encode`'s layout (no
    /// record built and copied), then the producer index.
    pub fn post(&mut self, hw: &mut impl Hw, cmd: HostDmaCmd, action: HdmaAction) {
        let slot = rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, self.prod);
        hw.store_u64(slot, cmd.dir as u64 | (cmd.len as u64) << 32);
        hw.store_u64(slot + 8, cmd.sram as u64);
        hw.store_u64(slot + 16, cmd.host);
        hw.store_u64(slot + 24, cmd.cookie);
        self.actions[(self.prod & (map::HDMA_RING_LEN - 1)) as usize] = action;
        self.prod = self.prod.wrapping_add(1);
        hw.set_reg(regs::HDMA_PROD, self.prod);
    }

    /// Commands the engine finished since the last call (never more than
    /// were posted, whatever the engine says).
    pub fn finished(&self, hw: &impl Hw) -> u32 {
        let done = hw.reg(regs::HDMA_DONE);
        done.wrapping_sub(self.done).min(self.prod.wrapping_sub(self.done))
    }

    /// The oldest unfinished command is done: its action.
    pub fn complete_one(&mut self) -> HdmaAction {
        let i = (self.done & (map::HDMA_RING_LEN - 1)) as usize;
        self.done = self.done.wrapping_add(1);
        core::mem::replace(&mut self.actions[i], HdmaAction::Nothing)
    }
}

/// The receive-buffer free ring: buffers given back to the rx-DMA engine.
pub struct RxFreeRing {
    prod: u32,
    /// Buffers with the engine (given, no completion back yet): bit i is
    /// receive buffer i.
    out: u32,
    /// What this firmware wrote in each slot of the ring.
    wrote: [u8; map::RXFREE_RING_LEN as usize],
}

const _: () = assert!(map::RX_BUF_COUNT <= u32::BITS, "one bit per receive buffer");

/// Receive buffer `i`'s bit in a set of buffers (none when out of range).
fn buf_bit(i: u32) -> u32 {
    1u32.checked_shl(i).unwrap_or(0)
}

impl RxFreeRing {
    pub const fn new() -> RxFreeRing {
        RxFreeRing { prod: 0, out: 0, wrote: [0; map::RXFREE_RING_LEN as usize] }
    }

    /// A completion names buffer `i`: was it with the engine? If not, the
    /// record is not one of ours (the engine followed a ring entry that
    /// something other than this firmware wrote, or reported a buffer
    /// twice): it must be ignored, nothing given back.
    pub fn back(&mut self, i: u32) -> bool {
        let bit = buf_bit(i);
        let ours = bit != 0 && self.out & bit != 0;
        self.out &= !bit;
        ours
    }

    /// Buffers with the engine.
    pub fn out(&self) -> u32 {
        self.out
    }

    /// Look over the entries the engine has not taken yet: put back what
    /// this firmware wrote where something else overwrote it. Returns how
    /// many were, and the buffers with the engine that are in none of
    /// those entries (being filled, or lost).
    pub fn audit(&mut self, hw: &mut impl Hw) -> (u32, u32) {
        let cons = hw.reg(regs::RXFREE_CONS);
        let pending = self.prod.wrapping_sub(cons).min(map::RXFREE_RING_LEN);
        let (mut fixed, mut waiting) = (0, 0u32);
        let mut k = 0;
        while k < pending {
            let n = cons.wrapping_add(k);
            let i = (n % map::RXFREE_RING_LEN) as usize;
            let slot = rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, n);
            // Two pending entries that share an aligned word: one load
            // (each looked at alone only when the word is not as written).
            let pair = i.is_multiple_of(2) && k + 1 < pending;
            let (a, b) = (self.wrote[i] as u32, self.wrote[(i + 1) % self.wrote.len()] as u32);
            let entries = if pair && hw.load_u64(slot) == (a as u64 | (b as u64) << 32) {
                0
            } else if pair {
                2
            } else {
                1
            };
            for (j, want) in [a, b].into_iter().enumerate().take(entries) {
                let at = slot + 4 * j as u32;
                if hw.load_u32(at) != want {
                    hw.store_u32(at, want);
                    fixed += 1;
                }
            }
            waiting |= buf_bit(a) | if pair { buf_bit(b) } else { 0 };
            k += if pair { 2 } else { 1 };
        }
        (fixed, self.out & !waiting)
    }

    pub fn init(&mut self, hw: &mut impl Hw) {
        self.prod = hw.reg(regs::RXFREE_CONS);
        self.out = 0;
        for i in 0..map::RX_BUF_COUNT {
            self.give(hw, i as u8);
        }
    }

    /// Give receive buffer `i` back to the rx-DMA engine.
    pub fn give(&mut self, hw: &mut impl Hw, i: u8) {
        let slot =
            rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, self.prod);
        hw.store_u32(slot, i as u32);
        self.wrote[(self.prod % map::RXFREE_RING_LEN) as usize] = i;
        self.out |= buf_bit(i as u32);
        self.prod = self.prod.wrapping_add(1);
        hw.set_reg(regs::RXFREE_PROD, self.prod);
    }
}

/// A machine's state enum, as the trace ring records it.
pub trait MachineState: Copy + PartialEq {
    const MACHINE: Machine;
    /// The state's code in trace records.
    fn code(&self) -> u8;
    /// The operand a trace record carries.
    fn arg(&self) -> u32;
}

/// The transition trace ring in SRAM (when TRACE_ENABLE is set).
pub struct Trace {
    pub on: bool,
    prod: u32,
}

impl Trace {
    /// One record: `machine` went from state `from` to `to` because of
    /// `cause`; `arg` is the new state's main operand.
    pub fn record(
        &mut self,
        hw: &mut impl Hw,
        now: u64,
        machine: Machine,
        (from, to): (u8, u8),
        cause: Cause,
        arg: u32,
    ) {
        if !self.on {
            return;
        }
        let rec = TraceRecord { rtc: now, machine, from, to, cause, arg };
        let mut b = [0u8; TRACE_RECORD_SIZE as usize];
        rec.encode(&mut b);
        let off = map::TRACE + (self.prod % map::TRACE_LEN) * TRACE_RECORD_SIZE;
        hw.write(off, &b);
        self.prod = self.prod.wrapping_add(1);
        hw.set_reg(regs::TRACE_PROD, self.prod);
    }
}

/// The NIC's counters, mirrored into SRAM at the end of a pass.
pub struct Stats {
    counts: [u64; STAT_COUNT],
    /// A bit per counter bumped since the SRAM copy was last written
    /// (the pass counter's is not kept: it goes out with any other).
    dirty: u64,
}

const _: () = assert!(STAT_COUNT <= 64, "a dirty bit per counter");
const _: () = assert!(NUM_PORTS <= 8, "an owed-events bit per port");

impl Stats {
    pub fn bump(&mut self, s: Stat, n: u64) {
        self.counts[s as usize] += n;
        self.dirty |= 1 << s as u32;
    }

    /// Counted without marking the SRAM copy stale (the pass counter).
    pub fn count_quietly(&mut self, s: Stat) {
        self.counts[s as usize] += 1;
    }

    pub fn get(&self, s: Stat) -> u64 {
        self.counts[s as usize]
    }

    pub fn clear(&mut self, hw: &mut impl Hw) {
        for s in ALL_STATS {
            hw.store_u64(stat_offset(s), 0);
        }
    }

    /// Bring the SRAM copy up to date: the counters bumped since the
    /// last write, and the pass counter with them (only the firmware
    /// writes the block: the others hold what was written last).
    pub fn write(&mut self, hw: &mut impl Hw) {
        if self.dirty == 0 {
            return;
        }
        let mut bits = self.dirty | 1 << Stat::Polls as u32;
        self.dirty = 0;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            hw.store_u64(nic_abi::map::STATS + i as u32 * 8, self.counts[i]);
        }
    }
}

const EMPTY_EVENTS: heapless::Deque<EvRef, 128> = heapless::Deque::new();

/// Everything the machines share or hand over (see the module doc).
pub struct Shared {
    pub cfg: Config,
    /// The RTC at the start of this pass: the only time the machines see.
    pub now: u64,
    /// Differs between boots of this NIC: SYNC packets carry it.
    pub boot: u16,
    pub ports: [PortOpen; NUM_PORTS],
    pub credits: [Credits; NUM_PORTS],
    pub tokens: Pool<SendToken, MAX_TOKENS>,
    /// Which receive slots are taken; their records are in SRAM
    /// (`map::rx_slot`, [`Shared::slot`]).
    pub slots: Pool<(), MAX_SLOTS>,
    /// Multicasts this NIC serves (module `mcast`); record i's child list
    /// is `map::mcast_list(i)`.
    pub mcasts: Pool<McastRec, { map::MCAST_LISTS_LEN as usize }>,
    /// Extra owners of each receive buffer besides RDMA's copy (a relay's
    /// forwarding): the buffer goes back to the engine when the last
    /// owner lets go ([`Shared::rx_release`]).
    pub rx_holds: [u8; map::RX_BUF_COUNT as usize],
    pub leaf_reports: heapless::Deque<ReportTo, LEAF_REPORTS>,
    /// Who holds each lost-heads list, and children whose sends failed
    /// still to be named in their record's list (record, node).
    pub lost_owner: [LostOwner; map::MCAST_LOST_LISTS as usize],
    pub lost_pending: heapless::Deque<(u16, u16), 16>,
    pub txbufs: TxBufs,
    pub hdma: HostDmaRing,
    pub rxfree: RxFreeRing,
    pub from_recv: heapless::Deque<FromRecv, FROM_RECV_LEN>,
    pub provided: heapless::Deque<u16, PROVIDED_LEN>,
    pub controls: heapless::Deque<Control, 64>,
    pub rdma_jobs: heapless::Deque<RdmaJob, { map::RX_BUF_COUNT as usize }>,
    pub tx_ready: heapless::Deque<u8, { map::TX_BUF_COUNT as usize }>,
    pub events: [heapless::Deque<EvRef, 128>; NUM_PORTS],
    /// A bit per port whose `events` may hold something (set at every
    /// push; RDMA clears it when it finds the queue empty): a pass looks
    /// only at those queues, not at every port's.
    pub events_owed: u8,
    /// A machine changed state since the core last looked (set by every
    /// [`Shared::transition`] that moves): a pass that moved one is
    /// followed by a full pass whatever the news.
    pub moved: bool,
    pub stats: Stats,
    pub trace: Trace,
    /// The translation cache and the page-table lines being read.
    pub xlat: crate::translate::Translator,
    /// What the core keeps for the offloads (their packets for SEND, their
    /// events for RDMA).
    pub offload: crate::offload::CoreSide,
}

impl Shared {
    /// Queue control packet `c` for SEND; false when the queue is full
    /// (the loss is counted: its stream's timers cover for it).
    pub fn push_control(&mut self, c: Control) -> bool {
        if self.controls.push_back(c).is_err() {
            self.bump(Stat::ControlDrops, 1);
            return false;
        }
        true
    }

    /// Filled buffer `b` needs no host-DMA: to SEND, unless an earlier
    /// packet of its stream is still filling (then it is held until that
    /// one is filled: a stream's packets leave in sequence order, which
    /// the receiver's gap nacks and a poll's answer rely on).
    pub fn ready(&mut self, b: u8) {
        let seq = self.txbufs.get(b).seq;
        if self.txbufs.first_of(b, TxBufState::Filling, Some(seq)).is_some() {
            self.txbufs.bufs[b as usize].state = TxBufState::Held;
            self.txbufs.note(b);
        } else {
            let _ = self.tx_ready.push_back(b);
        }
    }

    /// Buffer `b`'s host-DMA completed: it goes to SEND, and after it the
    /// held packets of its stream that no earlier fill holds back.
    pub fn filled(&mut self, b: u8) {
        if !self.txbufs.filled(b) {
            return;
        }
        let _ = self.tx_ready.push_back(b);
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
            let _ = self.tx_ready.push_back(h);
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
            leaf_reports: heapless::Deque::new(),
            lost_owner: [LostOwner::Free; map::MCAST_LOST_LISTS as usize],
            lost_pending: heapless::Deque::new(),
            txbufs: TxBufs::new(),
            hdma: HostDmaRing::new(),
            rxfree: RxFreeRing::new(),
            from_recv: heapless::Deque::new(),
            provided: heapless::Deque::new(),
            controls: heapless::Deque::new(),
            rdma_jobs: heapless::Deque::new(),
            tx_ready: heapless::Deque::new(),
            events: [EMPTY_EVENTS; NUM_PORTS],
            events_owed: 0,
            moved: false,
            stats: Stats { counts: [0; STAT_COUNT], dirty: 0 },
            trace: Trace { on: false, prod: 0 },
            xlat: crate::translate::Translator::new(),
            offload: crate::offload::CoreSide::new(),
        }
    }

    /// Receive slot `s`'s record: six aligned words (`RecvSlot::encode`'s
    /// layout, read a word at a time rather than copied and decoded byte
    /// by byte).
    pub fn slot(&self, hw: &impl Hw, s: u16) -> RecvSlot {
        if s as usize >= MAX_SLOTS {
            return RecvSlot::decode(&[0; map::RX_SLOT_SIZE as usize]);
        }
        let at = map::rx_slot(s as u32);
        let w: [u64; 6] = core::array::from_fn(|i| hw.load_u64(at + 8 * i as u32));
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
            mrec: (w[4] >> 32) as u16,
            next: (w[4] >> SLOT_NEXT_SHIFT) as u16,
            msg_len: w[5] as u32,
        }
    }

    /// Write receive slot `s`'s record, as `slot` reads it.
    pub fn set_slot(&self, hw: &mut impl Hw, s: u16, v: &RecvSlot) {
        if (s as usize) < MAX_SLOTS {
            let at = map::rx_slot(s as u32);
            let w0 = v.port as u64
                | (v.prio as u64) << 8
                | (v.size_class as u64) << 16
                | (v.error as u64) << 24
                | (v.len as u64) << 32;
            hw.store_u64(at, w0);
            hw.store_u64(at + 8, v.vaddr);
            hw.store_u64(at + 16, v.tag);
            let [w3, w4, w5] = v.fill().words();
            let link = (v.next as u64) << SLOT_NEXT_SHIFT;
            hw.store_u64(at + 24, w3);
            hw.store_u64(at + 32, (w4 & !(0xFFFF << SLOT_NEXT_SHIFT)) | link);
            hw.store_u64(at + 40, w5);
        }
    }

    /// Receive slot `s`'s link in its port's list (`RecvSlot::next`).
    #[inline]
    pub fn slot_link(&self, hw: &impl Hw, s: u16) -> u16 {
        if s as usize >= MAX_SLOTS {
            return crate::pool::NIL;
        }
        (hw.load_u64(map::rx_slot(s as u32) + 32) >> SLOT_NEXT_SHIFT) as u16
    }

    /// Posted slot `s` links to `next`: its fifth word (what a message
    /// wrote there means nothing while the slot waits for the next one)
    /// is the link alone.
    #[inline]
    pub fn link_slot(&self, hw: &mut impl Hw, s: u16, next: u16) {
        if (s as usize) < MAX_SLOTS {
            hw.store_u64(map::rx_slot(s as u32) + 32, (next as u64) << SLOT_NEXT_SHIFT);
        }
    }

    /// Receive slot `s`'s first word: its port, priority, size class and
    /// length, as the host's Provide gave them.
    #[inline]
    pub fn slot_posted(&self, hw: &impl Hw, s: u16) -> (u8, nic_abi::Priority, u8, u32) {
        let w = if (s as usize) < MAX_SLOTS { hw.load_u64(map::rx_slot(s as u32)) } else { 0 };
        let prio = nic_abi::Priority::from_u8((w >> 8) as u8).unwrap_or(nic_abi::Priority::Low);
        (w as u8, prio, (w >> 16) as u8, (w >> 32) as u32)
    }

    /// Receive slot `s`'s buffer address (one word).
    #[inline]
    pub fn slot_vaddr(&self, hw: &impl Hw, s: u16) -> u64 {
        if s as usize >= MAX_SLOTS {
            return 0;
        }
        hw.load_u64(map::rx_slot(s as u32) + 8)
    }

    /// Receive slot `s`'s multicast tag word (`RecvSlot::mcast`).
    #[inline]
    pub fn slot_mcast(&self, hw: &impl Hw, s: u16) -> u64 {
        if s as usize >= MAX_SLOTS {
            return 0;
        }
        hw.load_u64(map::rx_slot(s as u32) + 24)
    }

    /// Receive slot `s` takes a message: the three words of its record
    /// the message writes (the host's stay as they are).
    #[inline]
    pub fn fill_slot(&self, hw: &mut impl Hw, s: u16, f: &SlotFill) {
        if (s as usize) < MAX_SLOTS {
            let at = map::rx_slot(s as u32) + 24;
            let [a, b, c] = f.words();
            hw.store_u64(at, a);
            hw.store_u64(at + 8, b);
            hw.store_u64(at + 16, c);
        }
    }

    /// Take a free receive slot for `v`; None when all are taken.
    pub fn new_slot(&mut self, hw: &mut impl Hw, v: &RecvSlot) -> Option<u16> {
        let s = self.slots.alloc(())?;
        self.set_slot(hw, s, v);
        Some(s)
    }

    pub fn bump(&mut self, s: Stat, n: u64) {
        self.stats.bump(s, n);
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
        if *state == to {
            return;
        }
        let from = core::mem::replace(state, to);
        self.moved = true;
        // (The record's operands are worked out only when tracing is on,
        // out of line: a transition is a compare and two stores.)
        if self.trace.on {
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
            self.bump(Stat::Errors, 1);
            match ev {
                EvRef::Token(t) => self.tokens.free(t),
                EvRef::Slot(s) => self.slots.free(s),
                EvRef::Offload(i) => self.offload.events.free(i as u16),
                _ => {}
            }
        }
    }
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
mod tests {
    use super::*;

    #[test]
    fn a_receive_slot_read_by_words_is_the_record_encode_wrote() {
        let mut sram = std::vec![0u8; map::SRAM_MIN as usize];
        let mut hw = crate::hw::SliceHw::new(&mut sram);
        let cx = Shared::new();
        let v = RecvSlot {
            port: 5,
            prio: nic_abi::Priority::High,
            size_class: 12,
            vaddr: 0x1234_5678_9abc_def0,
            len: 4096,
            tag: u64::MAX - 3,
            msg_len: 3000,
            src_node: 0xBEEF,
            src_port: 7,
            inline_len: 64,
            error: 9,
            mcast: MCAST_PRESENT | 77,
            mrec: 0x1234,
            next: 0x0042,
        };
        // Written by words, it is the byte layout `encode` gives...
        cx.set_slot(&mut hw, 3, &v);
        let mut b = [0u8; map::RX_SLOT_SIZE as usize];
        v.encode(&mut b);
        let at = map::rx_slot(3) as usize;
        assert_eq!(&hw.sram[at..at + b.len()], &b[..]);
        // ...and read back by words, the same record.
        let mut again = [0u8; map::RX_SLOT_SIZE as usize];
        cx.slot(&hw, 3).encode(&mut again);
        assert_eq!(again, b);
    }

    #[test]
    fn a_posted_host_dma_command_reads_back_as_the_command_and_a_route_ends_at_the_header() {
        let mut sram = std::vec![0u8; map::SRAM_MIN as usize];
        let mut hw = crate::hw::SliceHw::new(&mut sram);
        let mut ring = HostDmaRing::new();
        let cmd = HostDmaCmd {
            dir: rings::DmaDir::SramToHost,
            len: 4096,
            sram: 0x8_1234,
            host: 0xdead_beef_0000_1000,
            cookie: u64::MAX - 5,
        };
        ring.post(&mut hw, cmd, HdmaAction::Nothing);
        let at = map::HDMA_RING as usize;
        let got = HostDmaCmd::decode(&hw.sram[at..at + rings::HDMA_CMD_SIZE as usize]);
        assert_eq!(got, Ok(cmd));
        let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
        cmd.encode(&mut b);
        assert_eq!(&hw.sram[at..at + b.len()], &b[..]);
        // A route of 3 bytes: the 3 bytes before buffer 2's header.
        let e = map::route_entry(9) as usize;
        hw.sram[e..e + 8].copy_from_slice(&[3, 0xa1, 0xa2, 0xa3, 0x77, 0x77, 0x77, 0x77]);
        assert_eq!(write_route(&mut hw, 2, 9), 3);
        let hdr = (map::tx_buf(2) + map::ROUTE_ROOM) as usize;
        assert_eq!(&hw.sram[hdr - 3..hdr], &[0xa1, 0xa2, 0xa3]);
        // The longest route fills the word.
        hw.sram[e..e + 8].copy_from_slice(&[7, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(write_route(&mut hw, 2, 9), 7);
        assert_eq!(&hw.sram[hdr - 7..hdr], &[1, 2, 3, 4, 5, 6, 7]);
    }

    fn take(cx: &mut Shared, b: u8, stream: u16, seq: u32, state: TxBufState) {
        cx.txbufs.take(b, TxBuf { state, stream, seq, ..TxBuf::EMPTY });
    }

    fn ready(cx: &mut Shared) -> std::vec::Vec<u32> {
        let mut v = std::vec::Vec::new();
        while let Some(b) = cx.tx_ready.pop_front() {
            v.push(cx.txbufs.get(b).seq);
        }
        v
    }

    #[test]
    fn a_packet_ready_without_host_dma_waits_for_the_earlier_fills_of_its_stream() {
        let mut cx = Shared::new();
        // Stream 1: seq 4 and 6 filling by host-DMA; seq 5 (a relayed
        // packet, ready at once) must not overtake 4. Stream 2's packet
        // has nothing before it.
        take(&mut cx, 0, 1, 4, TxBufState::Filling);
        take(&mut cx, 1, 1, 5, TxBufState::Filled);
        cx.ready(1);
        take(&mut cx, 2, 1, 6, TxBufState::Filling);
        take(&mut cx, 3, 2, 9, TxBufState::Filled);
        cx.ready(3);
        assert_eq!(cx.txbufs.get(1).state, TxBufState::Held);
        assert_eq!(ready(&mut cx), [9]);
        // Host-DMA completes in order: 4, then the held 5 (6 is after it).
        cx.filled(0);
        assert_eq!(ready(&mut cx), [4, 5]);
        cx.filled(2);
        assert_eq!(ready(&mut cx), [6]);
        // The buffers it names are no longer waiting: nothing unsent.
        for b in 0..3 {
            cx.txbufs.sending(b);
        }
        assert_eq!(cx.txbufs.unsent_from(1, 0), None);
    }

    #[test]
    fn the_first_unsent_packet_of_a_stream_is_the_lowest_still_in_a_buffer() {
        let mut cx = Shared::new();
        take(&mut cx, 0, 1, u32::MAX, TxBufState::Filled);
        take(&mut cx, 1, 1, 0, TxBufState::Filling);
        take(&mut cx, 2, 1, 7, TxBufState::Sending);
        // Across the wrap, u32::MAX comes before 0; a buffer with the
        // engine is sent.
        assert_eq!(cx.txbufs.unsent_from(1, 0), Some(u32::MAX));
        // Another epoch's buffers are stale: they do not count.
        assert_eq!(cx.txbufs.unsent_from(1, 1), None);
    }
}
