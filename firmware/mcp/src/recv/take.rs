//! RECV's in-order packets by type: a SYNC restarting the stream, the
//! window's check, and what each type of packet takes (a receive slot, a
//! put's range, a get's answer, a get response's token) and hands RDMA.

use super::accept::{fill_slot, fits_slot};
use super::Recv;
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Win, Window};
use crate::records::*;
use crate::reliability::{seq_le, Arrival};
use crate::sdma::{packets_for, Sdma};
use crate::shared::{FromRecv, Shared};
use nic_abi::packet::{DataView, GetReqView, NackCode, SeqView};
use nic_abi::stats::Stat;

/// What taking an in-order packet came to.
pub(super) enum Take {
    /// Its payload goes to host memory: RDMA's job.
    Job(RdmaJob),
    /// Taken, nothing to copy: the window moves on.
    Taken,
    /// Refused or dropped (nacked, or dropped with the window moved on
    /// already): nothing more.
    Stopped,
}

/// An in-order packet: its receive buffer, its stream, its port.
type At = (u8, RxId, usize);

impl Recv {
    /// A SYNC on a first packet: the sender (re)starts the stream, unless
    /// it is stale (an earlier incarnation's, or a redundant one of the
    /// same boot that would roll back over what was taken).
    pub(super) fn sync_in(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: RxId, s: SeqView<'_>) {
        let rx = self.rxs[r];
        let inc = s.incarnation().unwrap_or(0);
        let stamp = s.stamp();
        let news = match rx.sync_seen.get() {
            None => true,
            Some((boot, _, _)) if boot != stamp.boot => true,
            // The sender let the stream go and made it again: a later
            // incarnation starts afresh, an earlier one's is stale.
            Some((_, was, _)) if was != inc => crate::reliability::seq_lt(was, inc),
            // A later resync of the same boot may not roll back over
            // what was taken (a redundant SYNC raced an earlier one).
            Some((_, _, gen)) => gen != stamp.gen && seq_le(rx.win.expected(), s.seq()),
        };
        if news {
            // The sender (re)starts the stream here.
            // (Slots taken early go back first: the list keeps its order.)
            Win::release(self, cx, hw, r);
            self.abort_assembly(cx, hw, r);
            let rx = &mut self.rxs[r];
            rx.win.restart(s.seq());
            rx.nacked = None;
            rx.sync_seen = SyncSeen::new(stamp.boot, inc, stamp.gen);
        }
    }

    /// Is the packet the one the window expects? A duplicate is dropped
    /// and acked at once, a gap held or nacked: false.
    pub(super) fn in_order(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        buf: u8,
        r: RxId,
        s: SeqView<'_>,
    ) -> bool {
        match self.rxs[r].win.check(s.seq()) {
            Arrival::InOrder => {
                log_trace!(
                    "from node {=u16} port {=u8}: seq {=u32} in order",
                    s.addr().src_node(),
                    s.addr().src_port(),
                    s.seq()
                );
            }
            Arrival::Duplicate => {
                self.drop_packet(cx, hw, buf, Stat::Duplicates);
                self.owe_ack(cx, r, true);
                return false;
            }
            Arrival::Gap { expected } => {
                if !Win::past_gap(self, cx, hw, buf, r, s) {
                    self.gap(cx, hw, buf, r, expected, s.round());
                }
                return false;
            }
        }
        true
    }

    #[inline(always)]
    pub(super) fn take_data(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        (buf, r, port): At,
        d: DataView<'_>,
        w: &mut crate::Work,
    ) -> Take {
        let st = d.stream();
        let (first, last, plen) = (st.first(), st.last(), d.payload_len() as u32);
        if first {
            self.abort_assembly(cx, hw, r);
            let prio = st.addr().priority();
            let Some((s, len)) = self.claim_slot(cx, hw, port, st.size_class(), prio) else {
                self.nack(cx, hw, buf, r, NackCode::NoBuffer, st);
                return Take::Stopped;
            };
            if !fits_slot(len, d) {
                // A sender that broke the size-class rule: refuse.
                self.unclaim_slot(cx, hw, s);
                return self.bad_packet(cx, hw, buf, r);
            }
            // A fan-out's message: what it keeps for it.
            let (mrec, tag) = match Fan::first_packet(self, cx, sdma, hw, d, w) {
                Ok(m) => m,
                Err(code) => {
                    self.unclaim_slot(cx, hw, s);
                    self.nack(cx, hw, buf, r, code, st);
                    return Take::Stopped;
                }
            };
            self.rxs[r].mrec = mrec;
            fill_slot(cx, hw, s, buf, d, tag, mrec);
            self.begin_assembly(r, Assembly::Message { slot: s }, d.msg_len());
        }
        let Assembly::Message { slot } = self.rxs[r].assembly else {
            return self.bad_packet(cx, hw, buf, r);
        };
        if d.offset() != self.rxs[r].offset || d.msg_len() != self.rxs[r].msg_len {
            self.abort_assembly(cx, hw, r);
            return self.bad_packet(cx, hw, buf, r);
        }
        let Some(relayed) = Fan::data_packet(self, cx, hw, (r, buf, last), d, w) else {
            // A relay that holds all the buffers it may: later.
            self.nack(cx, hw, buf, r, NackCode::Busy, st);
            return Take::Stopped;
        };
        let vaddr = cx.slot_vaddr(hw, slot).wrapping_add(d.offset() as u64);
        Take::Job(RdmaJob {
            rx_buf: NonMaxU8::new(buf),
            port: port as u8,
            vaddr,
            len: plen,
            then: if last { Some(EvRef::Slot(slot)) } else { None },
            relayed,
        })
    }

    /// A put's packet `d`, for the memory from `remote_addr` on.
    pub(super) fn take_put(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        (buf, r, port): At,
        d: DataView<'_>,
        remote_addr: u64,
    ) -> Take {
        let (first, plen) = (d.stream().first(), d.payload_len() as u32);
        if first {
            let range = (remote_addr, d.msg_len());
            if let Some(code) = self.remote_check(cx, hw, r, port as u8, range) {
                self.nack(cx, hw, buf, r, code, d.stream());
                return Take::Stopped;
            }
            self.begin_assembly(r, Assembly::Put { base: remote_addr }, d.msg_len());
        }
        let Assembly::Put { base } = self.rxs[r].assembly else {
            return self.bad_packet(cx, hw, buf, r);
        };
        Take::Job(RdmaJob {
            rx_buf: NonMaxU8::new(buf),
            port: port as u8,
            vaddr: base.wrapping_add(d.offset() as u64),
            len: plen,
            then: None,
            relayed: false,
        })
    }

    pub(super) fn take_get_req(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        (buf, r, port): At,
        key: u32,
        g: GetReqView<'_>,
    ) -> Take {
        let a = g.stream().addr();
        if let Some(code) = self.remote_check(cx, hw, r, port as u8, (g.remote_addr(), g.len())) {
            self.nack(cx, hw, buf, r, code, g.stream());
            return Take::Stopped;
        }
        // The answer needs an internal token and a stream back to
        // the requester: SDMA queues it (FromRecv::Answer).
        let can = cx.internal_tokens() < INTERNAL_TOKENS
            && cx.tokens.available() > 0
            && sdma.stream_room(cx, key, a.src_node());
        if !can {
            self.nack(cx, hw, buf, r, NackCode::Busy, g.stream());
            return Take::Stopped;
        }
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::GetResp;
        t.port = a.dst_port();
        t.prio = a.priority();
        t.target_node = a.src_node();
        t.target_port = a.src_port();
        t.local = g.remote_addr();
        t.len = g.len();
        t.cookie = g.get();
        t.npkts = packets_for(cx, TokKind::GetResp, g.len());
        if let Some(i) = cx.tokens.alloc(t) {
            // Room for one per packet of the pass: it cannot fill.
            if cx.from_recv.push_back(&self.to_sdma, FromRecv::Answer { token: i }).is_err() {
                cx.tokens.free(i);
            }
        }
        cx.rxfree.give(hw, buf);
        Take::Taken
    }

    /// A packet `d` of the answer to the get `get` names.
    pub(super) fn take_get_resp(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        (buf, r, port): At,
        d: DataView<'_>,
        get: u32,
    ) -> Take {
        let st = d.stream();
        let (first, last, plen) = (st.first(), st.last(), d.payload_len() as u32);
        if first {
            // The get's token, which the response names (`Sdma::intake`).
            let ok = |t: TokenId| {
                let tok = cx.tokens[t];
                tok.kind == TokKind::Get
                    && tok.state == TokState::AwaitGet
                    && tok.port as usize == port
                    && tok.target_node == st.addr().src_node()
                    && tok.len == d.msg_len()
            };
            let t = TokenId::from_raw(get as u16).filter(|&t| cx.tokens.is_live(t) && ok(t));
            let Some(t) = t else {
                return self.bad_packet(cx, hw, buf, r);
            };
            self.begin_assembly(r, Assembly::GetResp { token: t }, d.msg_len());
        }
        let Assembly::GetResp { token } = self.rxs[r].assembly else {
            return self.bad_packet(cx, hw, buf, r);
        };
        if last {
            cx.tokens[token].state = TokState::Completing(nic_abi::event::SendStatus::Ok as u8);
        }
        Take::Job(RdmaJob {
            rx_buf: NonMaxU8::new(buf),
            port: port as u8,
            vaddr: cx.tokens[token].local.wrapping_add(d.offset() as u64),
            len: plen,
            then: if last { Some(EvRef::Token(token)) } else { None },
            relayed: false,
        })
    }

    /// A packet that breaks its message's assembly (or the size-class
    /// rule): dropped and counted; the window moves on past it.
    fn bad_packet(&mut self, cx: &mut Shared, hw: &mut impl Hw, buf: u8, r: RxId) -> Take {
        self.drop_packet(cx, hw, buf, Stat::BadHeaders);
        self.advance(cx, r);
        Take::Stopped
    }

    /// Stream `r`'s first packet of a message of `msg_len` bytes: the
    /// message assembles as `a` from offset 0.
    fn begin_assembly(&mut self, r: RxId, a: Assembly, msg_len: u32) {
        let rx = &mut self.rxs[r];
        rx.assembly = a;
        rx.offset = 0;
        rx.msg_len = msg_len;
    }
}
