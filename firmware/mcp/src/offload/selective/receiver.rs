//! Selective repeat's part of RECV: packets held past a gap in their
//! receive buffers (or placed in host memory at once when their place is
//! known, `place_early`), the gap named to the sender (USTAT), a poll
//! answered with a STAT, held packets taken in order once the gap fills
//! (`take_replay`), and let go of when the stream restarts, when a
//! message is refused or when an in-order packet needs the room. The
//! reports' packets are written in `reports.rs`.
//!
//! Owns: RECV's `held` ([`Held`]). May touch: RECV's receiving streams
//! and posted receive slots, through the hooks of
//! [`Window`](crate::offload::policy::Window) it stands behind.

use crate::hw::Hw;
use crate::records::*;
use crate::recv::accept::{fill_slot, fits_slot};
use crate::recv::{Arrived, Recv};
use crate::shared::Shared;
use nic_abi::map;
use nic_abi::packet::{
    DataKind, DataView, Header, NackCode, PacketView, PollView, SeqHeader, SeqView, HEADER_LEN,
};
use nic_abi::stats::Stat;

/// A receive slot taken early (selective repeat): the stream, the
/// sequence number of its message's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Early {
    stream: RxId,
    seq: u32,
    slot: SlotId,
}

/// Messages taken early at most, all streams together.
const EARLY_MAX: usize = 16;

/// A packet held past a gap (selective repeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    stream: RxId,
    seq: u32,
    buf: u8,
}

/// Receive buffers held past gaps at most, all streams together (with
/// those a multicast relay holds, at most three quarters of the buffers:
/// measured on 8-node all-to-alls under loss, half kept too few and
/// seven eighths left the engine too few): the receive-DMA engine keeps
/// the rest. A packet that finds no room is dropped, and a STAT names it
/// missing.
pub(crate) const SR_HOLDS: usize = map::RX_BUF_COUNT as usize * 3 / 4;

/// What selective repeat keeps in RECV.
pub struct Held {
    /// Packets held past a gap (stream, sequence number, receive buffer),
    /// and the streams whose next packet is one of them (taken before new
    /// packets from the ring).
    holds: heapless::Vec<Hold, SR_HOLDS>,
    pub(super) replay: heapless::Vec<RxId, SR_HOLDS>,
    /// Receive slots taken early, for messages that follow the one being
    /// placed in their stream (or one taken early), so that their packets
    /// past a gap go straight to host memory too.
    early: heapless::Vec<Early, EARLY_MAX>,
}

impl Held {
    pub const NEW: Held = Held {
        holds: heapless::Vec::new(),
        replay: heapless::Vec::new(),
        early: heapless::Vec::new(),
    };
}

impl Recv {
    /// Receive buffers kept past gaps now (selective repeat).
    #[cfg(test)]
    pub(crate) fn held_buffers(&self) -> usize {
        self.held.holds.len()
    }

    /// Selective repeat: a packet past a gap. Held in its receive buffer
    /// while there is room (within the stream's hold span, and buffers to
    /// spare for the engine); a gap it is the first to show is named to
    /// the sender at once (USTAT). With no room the stream is cut there:
    /// it is dropped, the sender is told at once to send everything from
    /// it again (a USTAT from it on), and what follows it is dropped
    /// until it comes again.
    pub(super) fn past_gap(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        s: SeqView<'_>,
    ) {
        let rx = self.rxs[r];
        let seq = s.seq();
        // After a refused message its sender numbers what follows again
        // and sends it with a later stamp: what comes with the stamp of
        // the refused packet or an earlier one is stale.
        let stale = rx.nacked.is_some() && !super::ps_lt(rx.nack_round, s.round());
        // Past the cut: sent before the sender heard of it, and it sends
        // it again.
        let past_cut = rx.win.cut().is_some_and(|c| crate::reliability::seq_lt(c, seq));
        if stale || past_cut {
            self.drop_packet(cx, hw, buf, Stat::OutOfOrder);
            return;
        }
        self.rxs[r].win.uncut(seq);
        if self.place_early(cx, hw, buf, r, s) {
            return;
        }
        let room = !self.held.holds.is_full()
            && cx.relay_held() + (self.held.holds.len() as u32) < SR_HOLDS as u32
            && rx.win.can_hold(seq);
        if !room {
            // Cut: the USTAT names everything from it (and a gap just
            // before it no packet showed yet) to the end of the span the
            // sender's window can reach. (Measured: dropping it silently
            // for the next poll's STAT to name leaves the stream's window
            // full for a poll interval, and an all-to-all under 3-5 % loss
            // fell to 0.6 of go-back-N's goodput.)
            self.drop_packet(cx, hw, buf, Stat::OutOfOrder);
            let from = self.rxs[r].win.cut_at(seq);
            let end = self.rxs[r].win.expected().wrapping_add(crate::reliability::HOLD_SPAN);
            self.name_missing(cx, r, from, end);
            return;
        }
        cx.bump(hw, Stat::OutOfOrder, 1);
        let _ = self.held.holds.push(Hold { stream: r, seq, buf });
        cx.bump(hw, Stat::Held, 1);
        if let Some((lo, hi)) = self.rxs[r].win.hold(seq) {
            self.name_missing(cx, r, lo, hi);
        }
    }

    /// Selective repeat: a packet past a gap of the message (or put)
    /// being placed, whose place in host memory is known:
    /// the rest of the message is in the packets before it, full-sized.
    /// Its payload goes there now, and its buffer back to the engine once
    /// copied: only its place in the window is kept (the gap's packet,
    /// when it comes, takes it in order, [`Recv::take_placed`]). False
    /// (nothing done) when it is not such a packet.
    fn place_early(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        s: SeqView<'_>,
    ) -> bool {
        // (A get's request or a report is one packet: never early.)
        let PacketView::Data(d) = s.packet() else { return false };
        let rx = self.rxs[r];
        let mtu = cx.cfg.mtu as u64;
        let (port, seq) = (s.addr().dst_port(), s.seq());
        let simple = rx.win.can_hold(seq)
            && d.mcast().is_none()
            && !s.sync()
            && cx.is_open(port as usize)
            && rx.local_port == port
            && !cx.rdma_jobs.is_full();
        if !simple {
            return false;
        }
        // Where its message starts (sequence number, offset placed by
        // then) and its base address.
        let (from, placed, base) = if s.first() {
            let Some(vaddr) = self.early_slot(cx, hw, buf, r, d) else { return false };
            (seq, 0, vaddr)
        } else if let Some(e) = self.early_of(cx, hw, r, seq) {
            (e.seq, 0, cx.slot_vaddr(hw, e.slot))
        } else {
            let base = match (d.kind(), rx.assembly) {
                (DataKind::Data { .. }, Assembly::Message { slot }) => cx.slot_vaddr(hw, slot),
                (DataKind::Put { .. }, Assembly::Put { base }) => base,
                // (A get's answer waits in a hold: it is the rarer case,
                // and the image has little room.)
                _ => return false,
            };
            if rx.mrec != Mrec::NONE || d.msg_len() != rx.msg_len {
                return false;
            }
            (rx.win.expected(), rx.offset as u64, base)
        };
        // The packets from `from` on are full-sized, so it lies here.
        let (msg_len, plen) = (d.msg_len() as u64, d.payload_len() as u64);
        let at = placed + seq.wrapping_sub(from) as u64 * mtu;
        if d.offset() as u64 != at || at >= msg_len.max(1) || plen != (msg_len - at).min(mtu) {
            // (Only a message taken early can get here from its first
            // packet, whose offset is 0: it is placed below.)
            return false;
        }
        let _ = cx.rdma_jobs.push_back(
            &self.to_rdma,
            RdmaJob {
                rx_buf: NonMaxU8::new(buf),
                port,
                vaddr: base.wrapping_add(at),
                len: plen as u32,
                then: None,
                relayed: false,
            },
        );
        cx.bump(hw, Stat::OutOfOrder, 1);
        cx.bump(hw, Stat::Held, 1);
        if let Some((lo, hi)) = self.rxs[r].win.hold(seq) {
            self.name_missing(cx, r, lo, hi);
        }
        true
    }

    /// A first packet ahead of the expected one: the message that
    /// follows, in the stream, one with a slot may take its slot now
    /// (slots go in the stream's order). Its base address, if it did.
    fn early_slot(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        d: DataView<'_>,
    ) -> Option<u64> {
        let st = d.stream();
        let port = st.addr().dst_port() as usize;
        if !matches!(d.kind(), DataKind::Data { .. })
            || self.held.early.is_full()
            || self.msg_end(cx, hw, r) != Some(st.seq())
        {
            return None;
        }
        let (s, len) = self.claim_slot(cx, hw, port, st.size_class(), st.addr().priority())?;
        if !fits_slot(len, d) {
            self.unclaim_slot(cx, hw, s);
            return None;
        }
        let vaddr = cx.slot_vaddr(hw, s);
        fill_slot(cx, hw, s, buf, d, 0, Mrec::NONE);
        let _ = self.held.early.push(Early { stream: r, seq: st.seq(), slot: s });
        Some(vaddr)
    }

    /// One past the last packet of the last message of stream `r` with a
    /// receive slot (the one being placed, or one taken early), if known.
    fn msg_end(&self, cx: &Shared, hw: &mut impl Hw, r: RxId) -> Option<u32> {
        let mtu = cx.cfg.mtu;
        let rx = &self.rxs[r];
        let mut end = match rx.assembly {
            Assembly::Message { .. } if rx.mrec == Mrec::NONE => Some(
                rx.win.expected().wrapping_add(rx.msg_len.saturating_sub(rx.offset).div_ceil(mtu)),
            ),
            _ => None,
        };
        for e in self.held.early.iter().filter(|e| e.stream == r) {
            let n = cx.slot(hw, e.slot).msg_len.div_ceil(mtu).max(1);
            end = Some(e.seq.wrapping_add(n));
        }
        end
    }

    /// The message taken early in stream `r` that `seq` belongs to.
    fn early_of(&self, cx: &Shared, hw: &mut impl Hw, r: RxId, seq: u32) -> Option<Early> {
        self.held.early.iter().copied().find(|e| {
            let n = cx.slot(hw, e.slot).msg_len.div_ceil(cx.cfg.mtu).max(1);
            e.stream == r && seq.wrapping_sub(e.seq) < n
        })
    }

    /// Selective repeat: the packet stream `r` expects next was placed
    /// early ([`Recv::place_early`]): take it in order, and when it ends
    /// its message, owe the message's event after every copy queued.
    pub(super) fn take_placed(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: RxId) {
        let seq = self.rxs[r].win.expected();
        if let Some(i) = self.held.early.iter().position(|e| e.stream == r && e.seq == seq) {
            // The first packet of a message taken early: it starts now.
            let e = self.held.early.remove(i);
            let rx = &mut self.rxs[r];
            rx.assembly = Assembly::Message { slot: e.slot };
            rx.offset = 0;
            rx.msg_len = cx.slot(hw, e.slot).msg_len;
            rx.mrec = Mrec::NONE;
        }
        let rx = &mut self.rxs[r];
        rx.win.unhold(rx.win.expected());
        let plen = rx.msg_len.saturating_sub(rx.offset).min(cx.cfg.mtu);
        rx.offset = rx.offset.wrapping_add(plen);
        if rx.offset >= rx.msg_len {
            let then = match rx.assembly {
                Assembly::Message { slot } => Some(EvRef::Slot(slot)),
                _ => None,
            };
            rx.assembly = Assembly::Idle;
            if let Some(then) = then {
                // `Recv::take_replay` takes nothing while RDMA's queue is
                // full: there is room.
                let _ = cx.rdma_jobs.push_back(
                    &self.to_rdma,
                    RdmaJob {
                        rx_buf: None,
                        port: rx.local_port,
                        vaddr: 0,
                        len: 0,
                        then: Some(then),
                        relayed: false,
                    },
                );
            }
        }
        self.advance(cx, r);
    }

    /// Queue a USTAT naming `lo..hi` of stream `r` missing. A STAT still
    /// queued for the stream lists what is missing below its poll's next
    /// sequence number when it leaves: the USTAT names only the rest
    /// (naming a packet twice has it resent twice).
    fn name_missing(&mut self, cx: &mut Shared, r: RxId, lo: u32, hi: u32) {
        let listed = cx.controls.iter().find_map(|c| match c.stat_of() {
            Some((ns, _)) if c.is_for(r) => Some(ns),
            _ => None,
        });
        let lo = match listed {
            Some(ns) if crate::reliability::seq_lt(lo, ns) => ns,
            _ => lo,
        };
        if crate::reliability::seq_lt(lo, hi) {
            cx.push_control(&self.controls, Control::ustat(r, lo, hi));
        }
    }

    /// A poll for synchronised stream `r` (`q`): answered with a STAT:
    /// what is missing up to the poll's next new packet, with its poll
    /// number. One queued STAT a stream: a later poll's
    /// replaces an earlier one's, at the back of the queue (behind the
    /// USTATs queued before it: what they name goes again before the STAT
    /// comes, which then sees it resent since its poll).
    pub(super) fn answer_poll(&mut self, cx: &mut Shared, r: RxId, q: PollView<'_>) {
        cx.controls.retain(&self.controls, |c| !c.is_for(r) || c.stat_of().is_none());
        cx.push_control(&self.controls, Control::stat(r, q.next(), q.poll()));
    }

    /// Packet `s` of stream `r` was refused with a nack of `code`.
    pub(super) fn sr_refused(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        r: RxId,
        code: NackCode,
        s: SeqView<'_>,
    ) {
        // Named already: a USTAT for a gap behind it leaves it out.
        self.rxs[r].win.refused(s.seq());
        if matches!(code, NackCode::PortClosed | NackCode::RemoteAccess) {
            // The sender numbers the messages after the refused one
            // again: what this side holds of that round is stale, and so
            // is what still comes of it.
            self.release_holds(cx, hw, r);
            self.rxs[r].nacked = Some(s.seq());
            self.rxs[r].nack_round = s.round();
        }
    }

    /// An in-order packet needs a receive buffer kept (a multicast
    /// relay's): with the packets held past gaps, at most three quarters
    /// (`SR_HOLDS`) of the buffers are kept: the engine keeps the rest,
    /// for the acks and the packets that let held ones go (were every
    /// buffer held, it would take nothing, the packets waiting for it
    /// would hold the links behind them, and the fabric would stop).
    pub(super) fn make_room(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        while cx.relay_held() + self.held.holds.len() as u32 >= SR_HOLDS as u32
            && self.evict_hold(cx, hw)
        {}
    }

    /// Let go of the packet held past a gap that is furthest ahead of what
    /// its stream expects (its sender sends it again once a STAT names it
    /// missing). False when none is held.
    fn evict_hold(&mut self, cx: &mut Shared, hw: &mut impl Hw) -> bool {
        let ahead = |h: &Hold| match self.rxs.is_live(h.stream) {
            true => h.seq.wrapping_sub(self.rxs[h.stream].win.expected()),
            false => u32::MAX,
        };
        let Some(i) = (0..self.held.holds.len()).max_by_key(|&i| ahead(&self.held.holds[i])) else {
            return false;
        };
        let h = self.held.holds.swap_remove(i);
        if self.rxs.is_live(h.stream) {
            self.rxs[h.stream].win.unhold(h.seq);
        }
        cx.bump(hw, Stat::Drops, 1);
        cx.rxfree.give(hw, h.buf);
        true
    }

    /// Selective repeat: the next packet a stream expects is held: take
    /// it now, as if it had just arrived (its ack was passed on when it
    /// did). Nothing is taken while RDMA's queue is full: a held packet's
    /// copy needs a place in it, and so does the event of a message whose
    /// last packet was placed early (`take_placed`); pushed without room,
    /// either would be lost, and the message with it.
    pub(super) fn take_replay(&mut self, cx: &mut Shared, hw: &mut impl Hw) -> Option<Arrived> {
        while !cx.rdma_jobs.is_full() {
            let Some(r) = self.held.replay.pop() else { break };
            if !self.rxs.is_live(r) {
                continue;
            }
            let seq = self.rxs[r].win.expected();
            let Some(i) = self.held.holds.iter().position(|h| h.stream == r && h.seq == seq) else {
                if self.rxs[r].win.is_held(seq) {
                    // Placed when it came: nothing to copy now.
                    self.take_placed(cx, hw, r);
                }
                continue;
            };
            let hold = self.held.holds.swap_remove(i);
            self.rxs[r].win.unhold(seq);
            let mut hb = [0u8; HEADER_LEN];
            hw.read(map::rx_buf(hold.buf as u32), &mut hb);
            // It parsed when it arrived, and the buffer was ours since.
            let at = nic_abi::packet::field::PAYLOAD_LEN;
            let plen = u16::from_le_bytes([hb[at], hb[at + 1]]) as usize;
            let parsed = Header::parse_prefix(&hb, HEADER_LEN + plen);
            let Some(header) = parsed.ok().and_then(SeqHeader::new) else {
                self.drop_packet(cx, hw, hold.buf, Stat::BadHeaders);
                continue;
            };
            // (Examined when it arrived: its placement is this pass's
            // work, RDMA's copy and the ack, not a packet's again.)
            return Some(Arrived { buf: hold.buf, header, key: self.rxs[r].key });
        }
        None
    }

    /// Let go of every packet stream `r` holds past a gap (its sender
    /// starts again, or renumbers what follows): the buffers go back to
    /// the engine.
    pub(crate) fn release_holds(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: RxId) {
        if self.rxs.is_live(r) {
            self.rxs[r].win.release_all();
        }
        let mut i = 0;
        while i < self.held.holds.len() {
            if self.held.holds[i].stream == r {
                let h = self.held.holds.swap_remove(i);
                cx.rxfree.give(hw, h.buf);
            } else {
                i += 1;
            }
        }
        self.held.replay.retain(|&s| s != r);
        // Slots taken early go back to the front of their port's list,
        // the latest first, so the list keeps its order.
        while let Some(i) = self.held.early.iter().rposition(|e| e.stream == r) {
            let e = self.held.early.remove(i);
            self.unclaim_slot(cx, hw, e.slot);
        }
    }
}
