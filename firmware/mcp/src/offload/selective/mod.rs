//! Selective repeat, a window policy beside go-back-N
//! (docs/reliability.md): the receiver holds packets past a gap and names
//! the gap at once (USTAT), answers a poll with what is missing (STAT);
//! the sender resends only what is named missing. In force when the
//! feature `selective` is compiled in and `regs::RELIABILITY` says
//! `RELIABILITY_SELECTIVE`; the machines reach it only through the hooks
//! of [`Window`] (`offload::policy::Win`).
//!
//! - `logic`: the pure part (marks, STAT encoding, the reference sender
//!   and receiver the tests drive).
//! - `sender`: SDMA's side (STATs and USTATs taken, the cursor, stamps).
//! - `receiver`: RECV's side (packets held past gaps, slots taken early,
//!   STAT and USTAT built).
//!
//! Owns: packet types `Stat` and `Ustat`, SRAM `SR_STAMPS`, each sending
//! stream's `marks`, RECV's `held`. May touch: the sending and receiving
//! streams, through the hooks.

mod logic;
mod receiver;
mod reports;
mod sender;

pub use logic::*;
pub use receiver::Held;

use crate::hw::Hw;
use crate::offload::policy::{Marks, Window};
use crate::records::{Control, RxId, TxId, TxStream};
use crate::recv::{Arrived, ControlOut, Recv};
use crate::reliability::SendWindow;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Config;
use nic_abi::packet::{NackCode, PacketType, PollView, SeqView};

/// Selective repeat as the window policy compiled in.
pub struct Selective;

impl Marks for SrMarks {
    const NEW: SrMarks = SrMarks::NEW;

    #[inline(always)]
    fn ps(&self) -> u8 {
        SrMarks::ps(self)
    }

    #[inline(always)]
    fn poll(&mut self) {
        SrMarks::poll(self);
    }

    #[inline(always)]
    fn clear(&mut self) {
        SrMarks::clear(self)
    }

    #[inline(always)]
    fn shift(&mut self, n: u32) {
        SrMarks::shift(self, n)
    }

    #[inline(always)]
    fn rewound(&mut self, una: u32, high: u32, seq: u32) {
        SrMarks::clear(self);
        SrMarks::ustat(self, una, high, seq, high);
    }
}

impl Window for Selective {
    type Marks = SrMarks;
    type Held = Held;
    const HELD: Held = Held::NEW;

    #[inline(always)]
    fn on(cfg: &Config) -> bool {
        cfg.selective
    }

    fn report_in(sdma: &mut Sdma, cx: &mut Shared, hw: &mut impl Hw, key: u32, buf: u8, u: bool) {
        sdma.report_in(cx, hw, key, buf, u)
    }

    #[inline(always)]
    fn acked(sdma: &mut Sdma, cx: &mut Shared, s: TxId) -> bool {
        if !cx.cfg.selective {
            return false;
        }
        sdma.sr_position(cx, s);
        true
    }

    /// Selective repeat keeps timing the packet (go-back-N's otherwise):
    /// measured, timing its polls instead, which come a quarter of the
    /// timeout apart, put the worst flow's p99 in the lanai9-gm
    /// all-to-all from 10 to 140 ms without loss.
    #[inline(always)]
    fn polled(cfg: &Config, st: &mut TxStream, now: u64) {
        if !cfg.selective {
            st.rtt.timed_out(now);
        }
    }

    #[inline(always)]
    fn nack_news(
        sdma: &Sdma,
        cx: &Shared,
        hw: &impl Hw,
        s: TxId,
        seq: u32,
        round: u8,
    ) -> Option<bool> {
        cx.cfg.selective.then(|| sdma.sr_nack_news(hw, s, seq, round))
    }

    #[inline(always)]
    fn refused(sdma: &mut Sdma, cx: &mut Shared, s: TxId, seq: u32, code: NackCode) -> Option<u64> {
        if !cx.cfg.selective {
            return None;
        }
        Some(sdma.sr_refused(cx, s, seq, code))
    }

    /// A packet carries its poll stamp as its round.
    #[inline(always)]
    fn round(cfg: &Config, st: &TxStream) -> u8 {
        if cfg.selective {
            st.marks.ps()
        } else {
            st.epoch as u8
        }
    }

    /// The cursor may stand at a resend, below packets in flight: a poll
    /// asks about everything up to the highest sent.
    #[inline(always)]
    fn poll_view(cfg: &Config, st: &TxStream) -> (u32, u8) {
        if cfg.selective {
            (st.win.high(), st.marks.ps())
        } else {
            (st.win.next(), 0)
        }
    }

    #[inline(always)]
    fn sent(sdma: &mut Sdma, cx: &mut Shared, hw: &mut impl Hw, s: TxId, seq: u32) {
        if cx.cfg.selective {
            sdma.sr_sent(cx, hw, s, seq);
        }
    }

    #[inline(always)]
    fn past_gap(
        recv: &mut Recv,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        s: SeqView<'_>,
    ) -> bool {
        if !cx.cfg.selective {
            return false;
        }
        recv.past_gap(cx, hw, buf, r, s);
        true
    }

    #[inline(always)]
    fn answer_poll(recv: &mut Recv, cx: &mut Shared, r: RxId, q: PollView<'_>) -> bool {
        if !cx.cfg.selective {
            return false;
        }
        recv.answer_poll(cx, r, q);
        true
    }

    #[inline(always)]
    fn refused_in(
        recv: &mut Recv,
        cx: &mut Shared,
        hw: &mut impl Hw,
        r: RxId,
        code: NackCode,
        s: SeqView<'_>,
    ) {
        if cx.cfg.selective {
            recv.sr_refused(cx, hw, r, code, s);
        }
    }

    #[inline(always)]
    fn make_room(recv: &mut Recv, cx: &mut Shared, hw: &mut impl Hw) {
        recv.make_room(cx, hw)
    }

    #[inline(always)]
    fn next_held(recv: &mut Recv, r: RxId) {
        if !recv.held.replay.contains(&r) {
            let _ = recv.held.replay.push(r);
        }
    }

    #[inline(always)]
    fn replay_pending(recv: &Recv) -> bool {
        !recv.held.replay.is_empty()
    }

    #[inline(always)]
    fn replay(recv: &mut Recv, cx: &mut Shared, hw: &mut impl Hw) -> Option<Arrived> {
        if recv.held.replay.is_empty() {
            return None;
        }
        recv.take_replay(cx, hw)
    }

    #[inline(always)]
    fn release(recv: &mut Recv, cx: &mut Shared, hw: &mut impl Hw, r: RxId) {
        recv.release_holds(cx, hw, r)
    }

    fn report_out(
        recv: &mut Recv,
        hw: &mut impl Hw,
        at: u32,
        c: Control,
    ) -> Option<(ControlOut, PacketType, usize)> {
        recv.report_out(hw, at, c)
    }
}
