//! The transmit buffers (each with a visible owner) and the rings shared
//! with the hardware that more than one machine writes: the host-DMA
//! command ring and the receive-buffer free ring.

use crate::hw::Hw;
use crate::records::*;
use nic_abi::map;
use nic_abi::regs;
use nic_abi::rings::{self, HostDmaCmd};

/// The transmit buffers and who holds each. (`repr(C)`, the counts and
/// sets first: a pass tests them most.)
#[repr(C)]
pub struct TxBufs {
    /// Data buffers not free (control packets may take the rest).
    data_busy: u32,
    /// Bit `b`: buffer `b` is not free (`free_one` is one look, not a
    /// scan of the records).
    held: u32,
    /// Bit `b`: buffer `b` is `Held` (a completed fill looks for the
    /// packets it held back only when there are some).
    pub(super) waiting: u32,
    pub(super) bufs: [TxBuf; map::TX_BUF_COUNT as usize],
}

const _: () = assert!(map::TX_BUF_COUNT <= 32);

impl TxBufs {
    pub(super) const fn new() -> TxBufs {
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
    pub(super) fn note(&mut self, b: u8) {
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
    pub fn unsent_from(&self, stream: TxId, epoch: u16) -> Option<u32> {
        let waiting = |s| matches!(s, TxBufState::Filling | TxBufState::Filled | TxBufState::Held);
        self.lowest(Some(stream), epoch, waiting, None).map(|(_, seq)| seq)
    }

    /// The buffer of `b`'s stream and epoch in `state` with the lowest
    /// sequence number below `before` (any, when None).
    pub(super) fn first_of(&self, b: u8, state: TxBufState, before: Option<u32>) -> Option<u8> {
        let me = self.bufs[b as usize];
        self.lowest(me.stream, me.epoch, |s| s == state, before).map(|(i, _)| i)
    }

    /// The data buffer of `stream` at `epoch` in a state `wanted` accepts
    /// with the lowest sequence number below `before` (any, when None):
    /// its index and sequence number.
    fn lowest(
        &self,
        stream: Option<TxId>,
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
    pub fn refers_to(&self, s: TxId) -> bool {
        self.bufs.iter().any(|x| x.state != TxBufState::Free && !x.control && x.stream == Some(s))
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
    /// `prod` just after the last command posted whose completion a
    /// machine waits for ([`HdmaAction::waited`]): once `done` is at or
    /// past it, the engine's completions give no machine work.
    waited: u32,
    /// `prod` just after the last command posted with an action (one
    /// that is `Nothing` needs none when it completes).
    acted: u32,
    actions: [HdmaAction; map::HDMA_RING_LEN as usize],
}

impl HostDmaRing {
    pub(super) const fn new() -> HostDmaRing {
        HostDmaRing {
            prod: 0,
            done: 0,
            waited: 0,
            acted: 0,
            actions: [HdmaAction::Nothing; map::HDMA_RING_LEN as usize],
        }
    }

    /// Take over the engine's counters as they are (a warm restart).
    pub fn init(&mut self, hw: &mut impl Hw) {
        self.prod = hw.reg(regs::HDMA_DONE);
        hw.set_reg(regs::HDMA_PROD, self.prod);
        self.done = self.prod;
        self.waited = self.prod;
        self.acted = self.prod;
    }

    pub fn space(&self) -> u32 {
        map::HDMA_RING_LEN - self.prod.wrapping_sub(self.done)
    }

    /// Completions taken so far (HDMA_DONE as they left it).
    pub fn done(&self) -> u32 {
        self.done
    }

    /// Post `cmd`: four word stores of `HostDmaCmd::encode`'s layout (no
    /// record built and copied), then the producer index.
    pub fn post(&mut self, hw: &mut impl Hw, cmd: HostDmaCmd, action: HdmaAction) {
        let slot = rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, self.prod);
        hw.store_u64(slot, cmd.dir as u64 | (cmd.len as u64) << 32);
        hw.store_u64(slot + 8, cmd.sram as u64);
        hw.store_u64(slot + 16, cmd.host);
        hw.store_u64(slot + 24, cmd.cookie);
        self.actions[self.next_slot() as usize] = action;
        self.prod = self.prod.wrapping_add(1);
        if action != HdmaAction::Nothing {
            self.acted = self.prod;
        }
        if action.waited() {
            self.waited = self.prod;
        }
        hw.set_reg(regs::HDMA_PROD, self.prod);
    }

    /// The ring slot the next command takes. (An event is staged in the
    /// staging slot of the same number: free whenever the ring has room,
    /// as the command that last used it has completed.)
    #[inline(always)]
    pub fn next_slot(&self) -> u32 {
        self.prod & (map::HDMA_RING_LEN - 1)
    }

    /// Is no machine waiting for a command the engine has not completed,
    /// or whose completion was not taken yet?
    #[inline(always)]
    pub fn none_waited(&self) -> bool {
        self.waited.wrapping_sub(self.done) as i32 <= 0
    }

    /// Has no command the engine has not completed (or whose completion
    /// was not taken yet) an action?
    #[inline(always)]
    pub fn none_acted(&self) -> bool {
        self.acted.wrapping_sub(self.done) as i32 <= 0
    }

    /// The engine's finished commands taken without looking at their
    /// actions: for when none has one ([`HostDmaRing::none_acted`]).
    #[inline(always)]
    pub fn take_inactive(&mut self, hw: &impl Hw) {
        debug_assert!(self.none_acted());
        self.done = self.done.wrapping_add(self.finished(hw));
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
