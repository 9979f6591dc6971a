//! Policies: offloads that change a decision of the core instead of owning
//! traffic of their own. The machine that makes the decision asks the
//! policy compiled in through the type alias here; with the offload
//! compiled out the alias names the core's own policy, whose hooks are
//! the trait's defaults (constants and empty bodies), and the calls fold
//! away: unicast pays nothing for a policy it does not use.
//!
//! - [`Window`]: the window, ack and retransmit policy of a stream:
//!   go-back-N ([`GoBack`], the core's), or selective repeat
//!   (`offload::selective`, feature `selective`), chosen at start by
//!   `regs::RELIABILITY`.
//! - [`Scheduler`]: SDMA's choice of the next stream to send from: GM's
//!   rotation ([`Rotation`], the core's), or IDT rate control's smallest
//!   next dispatch time (`offload::rate`, feature `rate`) while a stream
//!   has a rate in the flow table.
//!
//! Owns: nothing but the traits and the default policies. A policy's
//! hooks take the machine whose decision they make and may touch that
//! machine's records (they stand in for code of the machine).

use crate::hw::Hw;
use crate::records::{Control, RxId, TxId, TxStream};
use crate::recv::{Arrived, ControlOut, Recv};
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::{Config, Work};
use nic_abi::packet::{NackCode, PacketType, PollView, SeqView};
use nic_abi::stats::Stat;

/// What a window policy keeps beside each sending stream's window (in
/// its record, `TxStream::marks`). Go-back-N keeps [`Nothing`].
pub trait Marks: Copy {
    const NEW: Self;
    /// The number a transmission now is stamped with (its round).
    fn ps(&self) -> u8 {
        0
    }
    /// A poll goes out, or the stream starts a new round.
    fn poll(&mut self) {}
    /// Forget what was marked (the stream starts over).
    fn clear(&mut self) {}
    /// The window's front moved on by `n` packets.
    fn shift(&mut self, _n: u32) {}
    /// The stream went back to `seq`: everything from it to `high` is to
    /// go again.
    fn rewound(&mut self, _una: u32, _high: u32, _seq: u32) {}
}

/// What go-back-N keeps beside a stream's window, or in RECV: nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Nothing;

impl Marks for Nothing {
    const NEW: Nothing = Nothing;
}

/// A stream's window, ack and retransmit policy: the hooks SDMA (the
/// sender's side) and RECV (the receiver's) call where the policy decides.
/// Each default is go-back-N's decision.
pub trait Window {
    /// What it keeps beside each sending stream.
    type Marks: Marks;
    /// What it keeps in RECV (packets held past gaps).
    type Held;
    const HELD: Self::Held;

    /// Is it in force under configuration `cfg`? (Go-back-N's hooks are
    /// the defaults, so a policy that is not in force calls those.)
    #[inline(always)]
    fn on(_cfg: &Config) -> bool {
        false
    }

    // The sender's side (SDMA).

    /// A status report from the receiver of stream `key` in receive
    /// buffer `buf` (`ustat`: unsolicited), passed on by RECV. Go-back-N
    /// sends none and takes none: the buffer goes back, counted dropped.
    fn report_in(
        _sdma: &mut Sdma,
        cx: &mut Shared,
        hw: &mut impl Hw,
        _key: u32,
        buf: u8,
        _u: bool,
    ) {
        cx.rxfree.give(hw, buf);
        cx.bump(hw, Stat::BadHeaders, 1);
        cx.bump(hw, Stat::Drops, 1);
    }

    /// Stream `s`'s cumulative ack moved its window on: true when the
    /// policy placed the send cursor (go-back-N: false, the core moves it
    /// up to the ack).
    #[inline(always)]
    fn acked(_sdma: &mut Sdma, _cx: &mut Shared, _s: TxId) -> bool {
        false
    }

    /// Stream `st` timed out at `now` and polls its receiver. Go-back-N
    /// times the poll instead of the packet it was timing (`Rtt::
    /// timed_out`): the ack that ends the wait would otherwise measure the
    /// timeout itself, and lost acks would feed it back into the timeout.
    #[inline(always)]
    fn polled(_cfg: &Config, st: &mut TxStream, now: u64) {
        st.rtt.timed_out(now);
    }

    /// Is a nack of `seq` drawn by a packet of round `round` news? None:
    /// the core's answer (the round is the stream's epoch).
    #[inline(always)]
    fn nack_news(
        _sdma: &Sdma,
        _cx: &Shared,
        _hw: &impl Hw,
        _s: TxId,
        _seq: u32,
        _round: u8,
    ) -> Option<bool> {
        None
    }

    /// The receiver refused `seq` for want of a buffer (`code` NoBuffer
    /// or Busy): what goes again, and the wait before it. None: the
    /// core's answer (the whole window goes again).
    #[inline(always)]
    fn refused(
        _sdma: &mut Sdma,
        _cx: &mut Shared,
        _s: TxId,
        _seq: u32,
        _code: NackCode,
    ) -> Option<u64> {
        None
    }

    /// The round a data packet of stream `st` carries (in `nack_code`).
    #[inline(always)]
    fn round(_cfg: &Config, st: &TxStream) -> u8 {
        st.epoch as u8
    }

    /// A poll of stream `st`: the sequence number sent up to (nothing to
    /// ask about when it is `una`) and the poll number it carries.
    #[inline(always)]
    fn poll_view(_cfg: &Config, st: &TxStream) -> (u32, u8) {
        use crate::reliability::SendWindow;
        (st.win.next(), 0)
    }

    /// Packet `seq` of stream `s` was handed to SEND.
    #[inline(always)]
    fn sent(_sdma: &mut Sdma, _cx: &mut Shared, _hw: &mut impl Hw, _s: TxId, _seq: u32) {}

    // The receiver's side (RECV).

    /// Packet `s` in `buf` of stream `r` came past a gap: true when the
    /// policy took it (go-back-N: false, the core nacks the gap).
    #[inline(always)]
    fn past_gap(
        _recv: &mut Recv,
        _cx: &mut Shared,
        _hw: &mut impl Hw,
        _buf: u8,
        _r: RxId,
        _s: SeqView<'_>,
    ) -> bool {
        false
    }

    /// A poll `q` for synchronised stream `r`: true when the policy
    /// answered it (go-back-N: false, an ack or nack answers).
    #[inline(always)]
    fn answer_poll(_recv: &mut Recv, _cx: &mut Shared, _r: RxId, _q: PollView<'_>) -> bool {
        false
    }

    /// Stream `r`'s packet `s` was refused with a nack of `code`.
    #[inline(always)]
    fn refused_in(
        _recv: &mut Recv,
        _cx: &mut Shared,
        _hw: &mut impl Hw,
        _r: RxId,
        _code: NackCode,
        _s: SeqView<'_>,
    ) {
    }

    /// An in-order packet needs a receive buffer kept: the policy lets
    /// go of what it holds past gaps until the buffers held stay under
    /// its share.
    #[inline(always)]
    fn make_room(_recv: &mut Recv, _cx: &mut Shared, _hw: &mut impl Hw) {}

    /// Stream `r` advanced and the packet it expects next is held.
    #[inline(always)]
    fn next_held(_recv: &mut Recv, _r: RxId) {}

    /// Is a held packet waiting to be taken?
    #[inline(always)]
    fn replay_pending(_recv: &Recv) -> bool {
        false
    }

    /// The next held packet to take, as if it had just arrived.
    #[inline(always)]
    fn replay(_recv: &mut Recv, _cx: &mut Shared, _hw: &mut impl Hw) -> Option<Arrived> {
        None
    }

    /// Let go of everything stream `r` holds past gaps.
    #[inline(always)]
    fn release(_recv: &mut Recv, _cx: &mut Shared, _hw: &mut impl Hw, _r: RxId) {}

    /// SEND is about to send control `c`, a status report the policy
    /// queued: its payload written at `at`; what it carries as an ack
    /// does, its type and payload length; None when it went stale.
    #[inline(always)]
    fn report_out(
        _recv: &mut Recv,
        _hw: &mut impl Hw,
        _at: u32,
        _c: Control,
    ) -> Option<(ControlOut, PacketType, usize)> {
        None
    }
}

/// Go-back-N, the core's window policy: every hook its default.
pub struct GoBack;

impl Window for GoBack {
    type Marks = Nothing;
    type Held = Nothing;
    const HELD: Nothing = Nothing;
}

/// The window policy compiled in.
#[cfg(feature = "selective")]
pub type Win = super::selective::Selective;
#[cfg(not(feature = "selective"))]
pub type Win = GoBack;

/// What the window policy compiled in keeps beside each sending stream.
pub type StreamMarks = <Win as Window>::Marks;
/// What it keeps in RECV.
pub type Held = <Win as Window>::Held;

/// What a scheduler policy keeps beside each sending stream (in its
/// record, `TxStream::pace`). The rotation keeps [`Nothing`].
pub trait Pacing: Copy {
    const NEW: Self;
    /// A token became the first sendable one of the stream.
    #[inline(always)]
    fn wake(&mut self, _now: u64) {}
    /// Has the stream no pace of its own to keep (so that it may be let
    /// go of when idle)?
    #[inline(always)]
    fn unpaced(&self) -> bool {
        true
    }
}

impl Pacing for Nothing {
    const NEW: Nothing = Nothing;
}

/// SDMA's choice of the next stream to send from. Its state is SDMA's
/// field `sched`; each default is the rotation's (nothing to do).
pub trait Scheduler: Sized {
    /// What it keeps beside each sending stream.
    type Pace: Pacing;
    const NEW: Self;

    /// The MCP (re)started: read what the host left for it.
    #[inline(always)]
    fn init(_sdma: &mut Sdma, _cx: &Shared, _hw: &mut impl Hw) {}

    /// The start of a pass.
    #[inline(always)]
    fn begin_pass(_sdma: &mut Sdma, _cx: &Shared, _hw: &mut impl Hw, _w: &mut Work) {}

    /// A sending stream was set up.
    #[inline(always)]
    fn stream_made(&mut self) {}

    /// Might it pick a stream when none is queued in the rotation
    /// (streams of its own to pace, a table to reload)? When not, and no
    /// stream is queued, the fill loop is not entered.
    #[inline(always)]
    fn may_pick(&self) -> bool {
        false
    }

    /// The fill loop starts.
    #[inline(always)]
    fn fill_start(_sdma: &mut Sdma, _cx: &Shared, _hw: &mut impl Hw, _w: &mut Work) {}

    /// The next stream to send from, when the policy chooses (Some): the
    /// stream, or None when none may send now. None: the rotation
    /// chooses.
    #[inline(always)]
    fn pick(_sdma: &mut Sdma, _cx: &Shared, _w: &mut Work) -> Option<Option<TxId>> {
        None
    }

    /// A packet of `bytes` payload of stream `s` was filled (`s` may have
    /// been let go of by the fill: `sdma.txs.is_live(s)` says).
    #[inline(always)]
    fn dispatched(
        _sdma: &mut Sdma,
        _cx: &Shared,
        _hw: &mut impl Hw,
        _s: TxId,
        _bytes: u32,
        _w: &mut Work,
    ) {
    }

    /// When the next stream may send, if one waits for its time.
    #[inline(always)]
    fn wait(&self) -> Option<u64> {
        None
    }

    /// Does it hold state the per-pass hooks look at (streams to pace or
    /// a table to read: `Shared::offloads_live` stays set while it does)?
    #[inline(always)]
    fn live(&self) -> bool {
        self.may_pick() || self.wait().is_some()
    }
}

/// GM's rotation, the core's scheduler: every hook its default.
pub struct Rotation;

impl Scheduler for Rotation {
    type Pace = Nothing;
    const NEW: Rotation = Rotation;
}

/// The scheduler policy compiled in.
#[cfg(feature = "rate")]
pub type Sched = super::rate::Rate;
#[cfg(not(feature = "rate"))]
pub type Sched = Rotation;

/// What it keeps beside each sending stream.
pub type StreamPace = <Sched as Scheduler>::Pace;
