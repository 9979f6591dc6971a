//! SDMA fill: the scheduler's next packet gets a transmit buffer, its route
//! and header, and host-DMA commands that copy its payload from host
//! memory (translated through the sending port's page table). When the
//! last command completes the buffer is Filled and goes to SEND.

use super::{Sdma, SdmaState};
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Sched, Scheduler};
use crate::records::*;
use crate::reliability::SendWindow;
use crate::shared::{write_route, Shared};
use crate::translate::{Piece, Xlat, MAX_PIECES};
use crate::{Work, CONTROL_RESERVE};
use nic_abi::event::SendStatus;
use nic_abi::map;
use nic_abi::packet::HEADER_LEN;
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::trace::Cause;

/// Why the fill loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// No transmit buffer or host-DMA ring room.
    NoRoom,
    /// The scheduler had nothing to dispatch now.
    NothingDue,
    /// A packet a fan-out builds for one receiver of several was set up
    /// (`Fanout::yields`): it goes out before the next one's (each
    /// receiver's packet is its own pass of work).
    Yield,
    /// The next packet's payload waits for a translation into `port`'s
    /// memory.
    Translate { port: u8 },
}

/// A transmit buffer for the next fill, if the data packets may take one
/// and the host-DMA ring has room for its commands.
#[inline(always)]
fn room(cx: &Shared) -> Option<u8> {
    if cx.txbufs.data_busy() >= map::TX_BUF_COUNT - CONTROL_RESERVE || cx.hdma.space() < 2 {
        return None;
    }
    cx.txbufs.free_one()
}

impl Sdma {
    /// Fills: with no stream queued to send (and no scheduler policy or flow
    /// table to look at), the scheduler would pick nothing, so the fill
    /// loop is not entered; only what the machine waits for is settled,
    /// and only when something it depends on may have changed since it
    /// last was (a stream or the timer list written, a transition, the
    /// scheduler's wait). A step of the machine, kept out of line (a
    /// debugger breaks here) and short.
    #[inline(never)]
    pub fn fill(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        if self.fills_nothing(cx) {
            // (Clears a wait the scheduler kept from an earlier pass.)
            if cx.offloads_live {
                Sched::fill_start(self, cx, hw, w);
            }
            self.relay_built = false;
            // (Out of buffers or not, the stop says the same then.)
            // (A fill that yielded left `Ready`: it settles now.)
            if self.txs.unsettled
                || self.sched.wait() != self.settled_wait
                || self.state == SdmaState::Ready
            {
                self.settle(cx, hw, Stop::NothingDue);
            } else {
                // (What `settle` would note of this stop.)
                self.stopped = Stop::NothingDue;
                self.held_at_stop = cx.txbufs.held();
                #[cfg(any(test, feature = "check-timers"))]
                {
                    let next = self.next_state(cx, Stop::NothingDue);
                    assert!(
                        next.is_none_or(|(s, _)| s == self.state),
                        "SDMA settled in {:?} but would go to {next:?}",
                        self.state
                    );
                }
            }
            return;
        }
        self.fill_streams(cx, hw, w);
    }

    /// The fill loop (kept out of line: its frame is large).
    #[inline(never)]
    fn fill_streams(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        if cx.offloads_live {
            Sched::fill_start(self, cx, hw, w);
        }
        self.relay_built = false;
        let stop = loop {
            // Acks and nacks may hold buffers too: look before choosing.
            let Some(b) = room(cx) else { break Stop::NoRoom };
            let pick = match self.sole_stream(cx) {
                Some(pick) => pick,
                None => self.pick_stream(cx, w),
            };
            let Some(s) = pick else {
                // A relayed packet's next first copy waits for the next pass.
                break if self.relay_built { Stop::Yield } else { Stop::NothingDue };
            };
            if let Err(port) = self.fill_packet(cx, hw, s, b, w) {
                break Stop::Translate { port };
            }
            // (A packet of neither offload: no question asked.)
            if cx.offloads_live {
                self.filled_for_offloads(cx, hw, s, b, w);
            }
        };
        self.settle(cx, hw, stop);
    }

    /// What the offloads make of stream `s`'s packet in buffer `b`: after
    /// a packet a fan-out builds for one receiver of several, only its
    /// copies for the others are filled this pass; the scheduler policy
    /// counts the dispatch. (Out of line: the fill loop keeps the frame
    /// it has with no offload compiled in.)
    #[inline(never)]
    fn filled_for_offloads(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        s: TxId,
        b: u8,
        w: &mut Work,
    ) {
        let buf = cx.txbufs.get(b);
        self.relay_built |= Fan::yields(&buf);
        // (The policy looks whether the stream is still there: the fill
        // may have let it go.)
        let bytes = buf.len.saturating_sub(HEADER_LEN as u32);
        Sched::dispatched(self, cx, hw, s, bytes, w);
    }

    /// Might the scheduler policy pick a stream none queued (asked only
    /// while an offload holds state: `Shared::offloads_live`)?
    #[inline(always)]
    pub(super) fn policy_may_pick(&self, cx: &Shared) -> bool {
        cx.offloads_live && self.sched.may_pick()
    }

    /// Would the fill find no stream to fill (none queued, and the
    /// scheduler policy would pick none)? Then it only settles what the
    /// machine waits for.
    pub(crate) fn fills_nothing(&self, cx: &Shared) -> bool {
        self.conn_queue_len == 0 && !self.policy_may_pick(cx)
    }

    /// Has the fill work it would do at the next pass whatever the news?
    /// It yielded to it; or it stopped for room that is there now (SEND
    /// may free a transmit buffer later in the pass); or for a
    /// translation (looked for again at each pass); or a fan-out's lead
    /// held its next descriptor back (it may be ready to go now); or it
    /// found nothing due, a scheduler policy paces streams, and the
    /// transmit buffers changed hands since (SEND took or freed one later
    /// in the pass: the policy's next wait may differ). Without a policy
    /// that picks, what the rotation finds due does not depend on the
    /// buffers (it stopped for want of one: `NoRoom`).
    pub(crate) fn fill_left(&self, cx: &Shared) -> bool {
        match self.stopped {
            Stop::Yield | Stop::Translate { .. } => true,
            Stop::NoRoom => self.conn_queue_len > 0 && room(cx).is_some(),
            Stop::NothingDue => {
                cx.offloads_live
                    && (Fan::lead_left(self)
                        || (self.policy_may_pick(cx) && cx.txbufs.held() != self.held_at_stop))
            }
        }
    }

    /// After the fill loop: what the machine waits for now.
    fn settle(&mut self, cx: &mut Shared, hw: &mut impl Hw, stop: Stop) {
        self.stopped = stop;
        self.held_at_stop = cx.txbufs.held();
        if let Some((next, cause)) = self.next_state(cx, stop) {
            self.go(cx, hw, next, cause);
        }
        self.txs.unsettled = false;
        self.settled_wait = self.sched.wait();
    }

    /// What the machine waits for after the fill loop stopped at `stop`,
    /// and why; None: what it waits for now (a fill in flight).
    fn next_state(&self, cx: &Shared, stop: Stop) -> Option<(SdmaState, Cause)> {
        let next = match (self.state, stop, self.sched.wait()) {
            // The last fill is still in flight: that is what it waits for.
            (SdmaState::FillWait { buf, .. }, _, _)
                if cx.txbufs.get(buf).state == TxBufState::Filling =>
            {
                return None;
            }
            (_, Stop::Yield, _) => SdmaState::Ready,
            (_, Stop::Translate { port }, _) => SdmaState::TranslateWait { port },
            (_, Stop::NoRoom, _) if self.conn_queue_len > 0 => SdmaState::BufferWait,
            (_, Stop::NothingDue, Some(until)) => SdmaState::Paced { until },
            _ => self.waiting_for_acks(),
        };
        let cause = match next {
            SdmaState::BufferWait | SdmaState::TranslateWait { .. } => Cause::NoRoom,
            SdmaState::Paced { .. } => Cause::Paced,
            SdmaState::AckWait { .. } => Cause::Window,
            _ => Cause::Drained,
        };
        Some((next, cause))
    }

    /// AckWait for the next stream of the rotation, or for any stream with
    /// packets unacknowledged; Idle when there is none.
    fn waiting_for_acks(&self) -> SdmaState {
        let queued = self.conn_cur.and_then(|c| self.conns[c].ring);
        let s = queued
            .or_else(|| self.active_tx.iter().copied().find(|&s| self.txs[s].outstanding() != 0));
        match s {
            Some(s) => SdmaState::AckWait { stream: s.raw(), una: self.txs[s].win.una() },
            None => SdmaState::Idle,
        }
    }

    /// The host-DMA of transmit buffer `b` completed: it goes to SEND.
    /// (Out of line: inlined, it made every pass that takes a
    /// completion save a dozen registers.)
    #[inline(never)]
    pub fn filled(&mut self, cx: &mut Shared, hw: &mut impl Hw, b: u8) {
        cx.filled(&self.to_send, b);
        Fan::buffer_filled(self, b);
        if matches!(self.state, SdmaState::FillWait { buf, .. } if buf == b) {
            self.go(cx, hw, SdmaState::Ready, Cause::DmaDone);
        }
    }

    /// Fill buffer `b` with stream `s`'s next packet. Err(port): its
    /// payload's translation is being read (nothing was changed).
    ///
    /// The token's and the stream's fields are read where they are used
    /// (no copy of either record), the header is stored as six words. (A
    /// stream with no token at its cursor, which neither the rotation nor
    /// the scheduler policy picks, is only taken off the ring.)
    fn fill_packet(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        s: TxId,
        b: u8,
        w: &mut Work,
    ) -> Result<(), u8> {
        let Some(t) = self.txs[s].cursor else {
            self.ring_remove(s);
            return Ok(());
        };
        let mtu = cx.cfg.mtu;
        let (kind, port, len, local, pkt) = {
            let tok = &cx.tokens[t];
            (tok.kind, tok.port, tok.len, tok.local, tok.next_pkt)
        };
        // The payload's pieces first: a translation still being read
        // leaves everything as it was. (A report's payload is in the
        // buffer already, a relayed packet's in a receive buffer, a get
        // has none: no host memory.)
        let off = pkt * mtu;
        let host_len = match kind {
            TokKind::Report | TokKind::Get => 0,
            _ if Fan::payload_in_sram(cx, t, kind) => 0,
            _ => len.saturating_sub(off).min(mtu),
        };
        let host_at = local.wrapping_add(off as u64);
        let mut pieces = [Piece { bus: 0, len: 0, at: 0 }; MAX_PIECES];
        let (n, xlat) = cx.pieces_into(hw, port, host_at, host_len, &mut pieces);
        if xlat == Xlat::Wait {
            return Err(port);
        }
        let seq = self.number(cx, s, t, pkt);
        let tok = &cx.tokens[t];
        let (target_node, npkts) = (tok.target_node, tok.npkts);
        // A report's payload is the fan-out's.
        let plen = match kind {
            TokKind::Report => Fan::report_len(hw, tok),
            TokKind::Get => 0,
            _ => len.saturating_sub(off).min(mtu),
        };
        let off = if matches!(kind, TokKind::Report | TokKind::Get) { 0 } else { off };
        let route_len = write_route(hw, b, target_node);
        let mut buf = TxBuf {
            state: TxBufState::Filling,
            stream: Some(s),
            epoch: self.txs[s].epoch,
            route_len,
            len: (HEADER_LEN as u32) + plen,
            seq,
            // (Not a control packet; its payload is its own.)
            ..TxBuf::EMPTY
        };
        // What a fan-out sets for its packet: the price of its send, and
        // the receive buffer a relayed payload stays in (`gathered`).
        let Some(gathered) = Fan::fill(cx, t, kind, pkt, &mut buf) else {
            // Its record finished without it (out of time): this message
            // goes no further, the others to that port do.
            self.cut_message(cx, s, t);
            return Ok(());
        };
        let hdr_at = map::tx_buf(b as u32) + map::ROUTE_ROOM;
        self.write_header(cx, hw, (s, t), hdr_at, (seq, off, plen, pkt + 1 >= npkts));
        if kind == TokKind::Report {
            Fan::write_report(hw, &cx.tokens[t], hdr_at + HEADER_LEN as u32, plen);
        }
        if gathered {
            // Its payload is in SRAM already: SEND gathers it.
            cx.txbufs.take(b, TxBuf { state: TxBufState::Filled, ..buf });
            cx.ready(&self.to_send, b);
            self.go(cx, hw, SdmaState::Ready, Cause::Scheduled);
        } else if !self.fill_from_host(cx, hw, (s, t, pkt, b), buf, (xlat, &pieces[..n]), w) {
            return Ok(());
        }
        self.advance_stream(cx, hw, s, t, plen);
        Ok(())
    }

    /// Packet `pkt` of token `t` of stream `s` goes into buffer `b`
    /// (`buf`, its header written) with its payload fetched from the host
    /// memory `pieces` (`xlat`: how its translation went). False: that
    /// memory is gone, and the stream with it.
    #[inline(always)]
    fn fill_from_host(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        (s, t, pkt, b): (TxId, TokenId, u32, u8),
        buf: TxBuf,
        (xlat, pieces): (Xlat, &[Piece]),
        w: &mut Work,
    ) -> bool {
        // Payload: one host-DMA command per page piece.
        if xlat == Xlat::Fault {
            // The memory was deregistered under a queued send.
            cx.bump(hw, Stat::Errors, 1);
            self.abandon_stream(cx, s, Some(SendStatus::Dropped));
            return false;
        }
        cx.txbufs.take(b, buf);
        Fan::lead_filling(self, t, pkt, pieces.len(), b);
        let hdr_at = map::tx_buf(b as u32) + map::ROUTE_ROOM;
        self.fetch_payload(cx, hw, (t, pkt, b), hdr_at, pieces, w);
        true
    }

    /// Packet `pkt` of token `t` took buffer `b` (its header at
    /// `hdr_at`): its payload comes by one host-DMA command per page
    /// piece; with none it is ready to go now.
    #[inline(always)]
    fn fetch_payload(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        (t, pkt, b): (TokenId, u32, u8),
        hdr_at: u32,
        pieces: &[Piece],
        w: &mut Work,
    ) {
        let n = pieces.len();
        if n == 0 {
            cx.txbufs.filled(b);
            cx.ready(&self.to_send, b);
            self.go(cx, hw, SdmaState::Ready, Cause::Scheduled);
        } else {
            self.go(
                cx,
                hw,
                SdmaState::FillWait { token: t.raw(), packet: pkt, buf: b },
                Cause::Scheduled,
            );
        }
        for (k, piece) in pieces.iter().enumerate() {
            let action = if k + 1 == n { HdmaAction::TxFilled(b) } else { HdmaAction::Nothing };
            let cmd = HostDmaCmd {
                dir: DmaDir::HostToSram,
                len: piece.len,
                sram: hdr_at + HEADER_LEN as u32 + piece.at,
                host: piece.bus,
                cookie: b as u64,
            };
            cx.hdma.post(hw, cmd, action);
            w.dma_cmds += 1;
        }
    }
}
