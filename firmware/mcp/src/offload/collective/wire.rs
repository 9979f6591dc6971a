//! The collective offload's packets: chunks sent and kept until
//! acknowledged, chunks and answers taken in, retransmissions, probes of
//! a peer waited for, and the abort told to every member.

use super::records::{ones, Held, Sent};
use super::{Collective, Run};
use crate::hw::Hw;
use crate::offload::services::copy_sram;
use crate::offload::{Packet, Services};
use nic_abi::collective::{CollRepr, CtlCode, How, Step};
use nic_abi::event::LOST_BYTES;
use nic_abi::group::{self, GroupHead};
use nic_abi::map::{self, GROUP_ENTRIES};
use nic_abi::packet::{Addr, Header, HEADER_LEN};
use nic_abi::stats::Stat;
use nic_abi::Priority;

/// How often a member probes the peer it waits for (a part of the send
/// timeout).
pub(super) const PROBES_PER_TIMEOUT: u64 = 4;

pub(super) fn member(hw: &impl Hw, group: u16, rank: u16) -> u16 {
    let mut b = [0u8; 2];
    hw.read(group::member(group as u32, rank), &mut b);
    u16::from_le_bytes(b)
}

/// A packet of this offload from this NIC (`me`) to node `to`, port `port`.
pub(super) fn addr(me: u16, to: u16, port: u8) -> Addr {
    Addr { src_node: me, src_port: port, dst_node: to, dst_port: port, priority: Priority::Low }
}

/// The answer `code` from this NIC (node `node`, rank `me`) to packet `q`.
fn answer_to(node: u16, q: &CollRepr, me: u16, code: CtlCode) -> CollRepr {
    CollRepr {
        addr: addr(node, q.addr.src_node, q.addr.dst_port),
        ctl: Some(code),
        from_rank: me,
        ..*q
    }
}

impl Collective {
    /// Send chunk `c` of run `r` to rank `to` (step tag `tag`), keeping
    /// its bytes until it is acknowledged. False when no slot is free, or
    /// when `c` is a window or more past the run's oldest chunk not yet
    /// acknowledged: a member whose peers are slow to take its chunks
    /// (a reduce's leaves are never held back by their parents) would
    /// otherwise fill their held slots with chunks far past their windows
    /// and be refused as Busy, over and over. And the last free slots
    /// (one a run) are kept for the run's lowest chunk not yet through
    /// its steps: the step the group waits for first is always one of
    /// those, and its receiver takes it at once (it needs no held slot),
    /// so that chunks sent ahead and refused as Busy never stop it.
    pub(super) fn send_chunk<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        r: &Run,
        c: u32,
        to: u16,
        tag: u8,
    ) -> bool {
        let free = !self.sent & self.lay.all_sent();
        let lowest = r.lo + (!r.stepped).trailing_zeros();
        let kept = if c == lowest { 0 } else { self.live.count_ones() };
        if free.count_ones() <= kept
            || self.oldest_unacked(sv.hw, r).is_some_and(|o| c >= o + r.win)
        {
            return false;
        }
        let i = free.trailing_zeros();
        let len = Self::chunk_len(r, c);
        copy_sram(sv.hw, Self::chunk_at(r, c), self.lay.sent_at(i), len);
        let node = member(sv.hw, r.f.group, to);
        let now = sv.now();
        let s = Sent {
            group: r.f.group,
            cseq: r.f.cseq,
            port: r.f.port,
            to,
            node,
            chunk: c as u16,
            tag,
            len: len as u16,
            last_tx: now,
            life: now,
        };
        s.store(sv.hw, self.lay.sent_rec(i));
        self.sent |= 1 << i;
        self.transmit(sv, i, r.shape.rank);
        true
    }

    /// Put sent chunk `i` on the wire (again), from rank `me`.
    pub(super) fn transmit<H: Hw>(&mut self, sv: &mut Services<'_, H>, i: u32, me: u16) {
        let mut s = Sent::load(sv.hw, self.lay.sent_rec(i));
        let h = CollRepr {
            addr: addr(sv.config().node, s.node, s.port),
            ctl: None,
            group: s.group,
            cseq: s.cseq,
            tag: s.tag,
            chunk: s.chunk as u32,
            from_rank: me,
            len: 0,
        }
        .emit();
        if sv.send_from(&h, self.lay.sent_at(i), s.len as u32) {
            self.unsent &= !(1 << i);
            s.last_tx = sv.now();
            s.store(sv.hw, self.lay.sent_rec(i));
        } else {
            self.unsent |= 1 << i;
            self.again = true;
        }
    }

    /// Answer packet `q` (from rank `me` of its group) with `code`; an
    /// abort carries the group's missing list.
    fn answer<H: Hw>(&mut self, sv: &mut Services<'_, H>, q: &CollRepr, me: u16, code: CtlCode) {
        let a = answer_to(sv.config().node, q, me, code);
        let (at, len) = match code {
            CtlCode::Abort => missing_list(sv.hw, q.group),
            _ => (0, 0),
        };
        match code {
            CtlCode::Ack => sv.count(Stat::AcksSent, 1),
            CtlCode::Busy | CtlCode::Gone => sv.count(Stat::NacksSent, 1),
            _ => {}
        }
        if !sv.send_from(&a.emit(), at, len) {
            self.keep_answer(sv, &a);
        }
    }

    /// An answer found no transmit buffer: keep it for the next pass (or,
    /// with no room left, drop it: the asker asks again).
    pub(super) fn keep_answer<H: Hw>(&mut self, sv: &mut Services<'_, H>, a: &CollRepr) {
        let free = !self.answers & self.lay.all_answers();
        if free == 0 {
            sv.count(Stat::Drops, 1);
            return;
        }
        let i = free.trailing_zeros();
        let mut b = [0u8; HEADER_LEN];
        a.emit().encode(&mut b);
        sv.hw.write(self.lay.answer_at(i), &b);
        self.answers |= 1 << i;
        self.again = true;
    }

    /// Send the answers kept, as transmit buffers allow.
    pub(super) fn flush_answers<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        for i in ones(self.answers) {
            let mut b = [0u8; HEADER_LEN];
            sv.hw.read(self.lay.answer_at(i), &mut b);
            let Some(a) = Header::parse(&b).ok().and_then(|h| CollRepr::parse(&h)) else {
                self.answers &= !(1 << i);
                continue;
            };
            let (at, len) = match a.ctl {
                Some(CtlCode::Abort) => missing_list(sv.hw, a.group),
                _ => (0, 0),
            };
            if !sv.send_from(&a.emit(), at, len) {
                self.again = true;
                return;
            }
            self.answers &= !(1 << i);
        }
    }

    /// A packet of this offload.
    pub(super) fn arrived<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet) {
        let Some(q) = CollRepr::parse(&p.header) else {
            sv.count(Stat::BadHeaders, 1);
            return;
        };
        let open = q.group < GROUP_ENTRIES as u16 && sv.is_open(q.addr.dst_port);
        let head = super::super::multicast::group_head(sv.hw, q.group)
            .filter(|g| open && g.port == q.addr.dst_port);
        let Some(g) = head else {
            if matches!(q.ctl, None | Some(CtlCode::Probe)) {
                self.answer(sv, &q, 0, CtlCode::Gone);
            }
            return;
        };
        if q.ctl == Some(CtlCode::Gone) {
            // (A NIC whose port is closed knows no rank of its own: the
            // answer is taken by its node.)
            self.gone_from(sv, &q);
            return self.progress(sv);
        }
        if q.from_rank >= g.size || member(sv.hw, q.group, q.from_rank) != q.addr.src_node {
            sv.count(Stat::BadHeaders, 1);
            return;
        }
        match q.ctl {
            None => self.chunk_in(sv, p, &q, &g),
            Some(CtlCode::Probe) => {
                let ended =
                    Self::aborted(sv.hw, q.group) == q.cseq && Self::done(sv.hw, q.group) >= q.cseq;
                let failed = self.run_of(q.group, q.cseq).and_then(|i| self.run(sv.hw, i));
                let over = ended || failed.is_some_and(|r| r.failed);
                let code = if over { CtlCode::Abort } else { CtlCode::Alive };
                self.answer(sv, &q, g.rank, code);
            }
            Some(CtlCode::Abort) => self.abort_in(sv, p, &q),
            Some(code) => self.reply_in(sv, &q, code),
        }
        self.progress(sv);
    }

    /// A chunk from a peer.
    fn chunk_in<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        p: &Packet,
        q: &CollRepr,
        g: &GroupHead,
    ) {
        if q.cseq <= Self::done(sv.hw, q.group) {
            return self.answer(sv, q, g.rank, CtlCode::Ack); // again: it was taken
        }
        let len = p.header.payload_len as u32;
        let ri = self.run_of(q.group, q.cseq);
        if let Some((ri, mut r)) = ri.and_then(|i| self.run(sv.hw, i).map(|r| (i, r))) {
            let c = q.chunk;
            let steps = r.shape.steps(c);
            let j = steps.as_slice().iter().position(
                |s| matches!(*s, Step::Recv { from, tag, .. } if from == q.from_rank && tag == q.tag),
            );
            let (Some(j), true) = (j, c < r.nchunks) else {
                sv.count(Stat::BadHeaders, 1);
                return;
            };
            if c < r.lo {
                // Done here: its receives were all taken.
                return self.answer(sv, q, g.rank, CtlCode::Ack);
            }
            let w = c - r.lo;
            if w < r.window_len() {
                let at = r.at[w as usize] as usize;
                let ahead_at = super::ahead_at(ri, c);
                let ahead = sv.hw.load_u32(ahead_at);
                if at > j || ahead & (1 << j) != 0 {
                    return self.answer(sv, q, g.rank, CtlCode::Ack);
                }
                let loaded = r.loaded & (1 << w) != 0;
                let free = at < j && order_free(&r, &steps.as_slice()[at..=j]);
                // (Assisted: not at a step the host has not released.)
                let released = !r.f.assisted || j <= r.f.step as usize;
                if loaded && released && (at == j || free) {
                    // (Combined ahead of its turn when the order does not
                    // change the result.)
                    let Some(Step::Recv { how, .. }) = steps.get(j) else { return };
                    if !self.apply(sv, &mut r, c, (sv.payload_at(p), len), how) {
                        return;
                    }
                    match at == j {
                        true => r.at[w as usize] += 1,
                        false => sv.hw.store_u32(ahead_at, ahead | 1 << j),
                    }
                    self.put(sv.hw, ri, &r);
                    let a = answer_to(sv.config().node, q, g.rank, CtlCode::Ack);
                    let batch = (r.win / 4).clamp(1, 16);
                    return self.ack_later(sv, a, batch, c + 1 >= r.nchunks);
                }
            }
        }
        self.hold(sv, p, q, g);
    }

    /// Keep a chunk that came before its step (or refuse it for now).
    fn hold<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet, q: &CollRepr, g: &GroupHead) {
        let len = p.header.payload_len as u32;
        if len > self.lay.slot || q.chunk > u16::MAX as u32 {
            sv.count(Stat::BadHeaders, 1);
            return;
        }
        let h = Held {
            group: q.group,
            cseq: q.cseq,
            chunk: q.chunk as u16,
            tag: q.tag,
            from: q.from_rank,
            len: len as u16,
        };
        if self.find_held(sv.hw, |x| Held { len: x.len, ..h } == *x).is_some() {
            return self.answer(sv, q, g.rank, CtlCode::Ack);
        }
        let near = q.cseq <= Self::done(sv.hw, q.group).saturating_add(2);
        let free = !self.held & self.lay.all_held();
        if !near || free == 0 {
            return self.answer(sv, q, g.rank, CtlCode::Busy);
        }
        let i = free.trailing_zeros();
        copy_sram(sv.hw, sv.payload_at(p), self.lay.held_at(i), len);
        h.store(sv.hw, self.lay.held_rec(i));
        self.held |= 1 << i;
        self.answer(sv, q, g.rank, CtlCode::Ack);
    }

    /// An ack, a Busy, a Gone, or an answer to a probe.
    fn reply_in<H: Hw>(&mut self, sv: &mut Services<'_, H>, q: &CollRepr, code: CtlCode) {
        let now = sv.now();
        if code == CtlCode::Alive {
            let Some(ri) = self.run_of(q.group, q.cseq) else { return };
            let Some(mut r) = self.run(sv.hw, ri) else { return };
            if let Some(w) = r.waiting.as_mut().filter(|w| w.0 == q.from_rank) {
                w.1 = now;
                self.put(sv.hw, ri, &r);
            }
            return;
        }
        for i in ones(self.sent) {
            let mut s = Sent::load(sv.hw, self.lay.sent_rec(i));
            let same = s.group == q.group && s.cseq == q.cseq && s.to == q.from_rank;
            let d = (s.chunk as u32).wrapping_sub(q.chunk);
            let named = match code {
                CtlCode::Ack => d < 32 && super::acks::acked(q) & 1 << d != 0,
                _ => d == 0,
            };
            if !same || !named || s.tag != q.tag {
                continue;
            }
            match code {
                CtlCode::Ack => {
                    self.sent &= !(1 << i);
                    self.unsent &= !(1 << i);
                    continue; // (an ack may name more chunks: `acks::acked`)
                }
                CtlCode::Busy => {
                    // There, but with no room for it yet: again after the
                    // no-buffer retry interval (sooner than a loss's).
                    s.life = now;
                    let wait = sv.config().nobuf_retry.min(self.rto);
                    s.last_tx = now.saturating_sub(self.rto - wait);
                    s.store(sv.hw, self.lay.sent_rec(i));
                }
                _ => {}
            }
            return;
        }
    }

    /// Another member says collective `q.cseq` is over with members missing.
    fn abort_in<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet, q: &CollRepr) {
        let mut b = [0u8; LOST_BYTES];
        let n = sv.payload(p, &mut b);
        let g = q.group;
        if let Some(ri) = self.run_of(g, q.cseq) {
            return self.missing(sv, ri, &b[..n]);
        }
        match (0..super::MAX_RUNS).any(|i| self.live & 1 << i != 0 && self.heads[i].0 == g) {
            true => {} // a later one's: not this one's to keep
            _ if q.cseq > Self::done(sv.hw, g) && q.cseq > Self::aborted(sv.hw, g) => {
                Self::set_aborted(sv.hw, g, q.cseq);
                let at = map::coll_missing(q.group as u32);
                sv.hw.write(at, &[0u8; LOST_BYTES]);
                sv.hw.write(at, &b[..n]);
            }
            _ => {}
        }
    }

    /// Node `q`'s sender has no port open for collective `q`'s group (its
    /// NIC was reset, or its port closed): the chunks sent there are
    /// given up and, if the collective runs here, it ends with the node
    /// missing.
    fn gone_from<H: Hw>(&mut self, sv: &mut Services<'_, H>, q: &CollRepr) {
        let node = q.addr.src_node;
        self.let_go_sent(sv.hw, |s| s.group == q.group && s.cseq == q.cseq && s.node == node);
        if let Some(ri) = self.run_of(q.group, q.cseq) {
            self.missing_node(sv, ri, node);
        }
    }

    /// The oldest chunk of run `r` sent and not yet acknowledged.
    fn oldest_unacked(&self, hw: &impl Hw, r: &Run) -> Option<u32> {
        ones(self.sent)
            .map(|i| Sent::load(hw, self.lay.sent_rec(i)))
            .filter(|s| s.group == r.f.group && s.cseq == r.f.cseq)
            .map(|s| s.chunk as u32)
            .min()
    }

    /// Has collective (`group`, `cseq`) chunks sent and not acknowledged?
    pub(super) fn sent_of(&self, hw: &impl Hw, group: u16, cseq: u32) -> bool {
        ones(self.sent)
            .map(|i| Sent::load(hw, self.lay.sent_rec(i)))
            .any(|s| s.group == group && s.cseq == cseq)
    }

    /// Give up the sent chunks `pick` chooses.
    pub(super) fn let_go_sent(&mut self, hw: &impl Hw, pick: impl Fn(&Sent) -> bool) {
        for i in ones(self.sent) {
            if pick(&Sent::load(hw, self.lay.sent_rec(i))) {
                self.sent &= !(1 << i);
                self.unsent &= !(1 << i);
            }
        }
    }

    /// A sent chunk's receiver is gone (answered so, or silent for the
    /// send timeout): if its collective is the one running, it ends with
    /// that member missing; the chunk is given up.
    pub(super) fn gone<H: Hw>(&mut self, sv: &mut Services<'_, H>, s: &Sent) {
        if let Some(ri) = self.run_of(s.group, s.cseq) {
            self.missing_node(sv, ri, s.node);
        }
    }
}

/// May the receive steps `steps` of run `r` be taken in any order (each
/// combines, with nothing sent between them, by an operation whose result
/// does not depend on the order: any of integers)?
fn order_free(r: &Run, steps: &[Step]) -> bool {
    !r.f.dtype.is_float()
        && r.f.kind.combines()
        && steps.iter().all(|s| matches!(s, Step::Recv { how: How::Combine(_), .. }))
}

/// Group `g`'s missing list in SRAM, up to its last byte with a bit set.
pub(super) fn missing_list(hw: &impl Hw, g: u16) -> (u32, u32) {
    let at = map::coll_missing(g as u32);
    let mut b = [0u8; LOST_BYTES];
    hw.read(at, &mut b);
    let len = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    (at, len as u32)
}
