//! The collective offload's timers: chunks sent again, peers that stopped
//! answering given up, peers waited for probed, and an abort told to
//! every member.

use super::records::{ones, Sent};
use super::wire::{addr, member, missing_list, PROBES_PER_TIMEOUT};
use super::Collective;
use crate::hw::Hw;
use crate::offload::Services;
use nic_abi::collective::{CollRepr, CtlCode};
use nic_abi::stats::Stat;

impl Collective {
    /// Retransmissions due, peers that stopped answering, probes.
    #[inline(never)]
    pub(super) fn timers<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let now = sv.now();
        let (rto, limit) = (self.rto, self.limit);
        for i in ones(self.sent) {
            let s = Sent::load(sv.hw, self.lay.sent_rec(i));
            if now.saturating_sub(s.life) >= limit {
                sv.timer_handled();
                sv.count(Stat::Timeouts, 1);
                self.sent &= !(1 << i);
                self.unsent &= !(1 << i);
                self.gone(sv, &s);
                continue;
            }
            let unsent = self.unsent & 1 << i != 0;
            if unsent || now >= s.last_tx.saturating_add(rto) {
                sv.timer_handled();
                // (The cause: its retransmission interval ran out, after
                // a loss or a Busy answer.)
                sv.count(Stat::Retransmits, !unsent as u64);
                sv.count(Stat::RetxTimeout, !unsent as u64);
                let me = super::super::multicast::group_head(sv.hw, s.group).map_or(0, |g| g.rank);
                self.transmit(sv, i, me);
            }
        }
        for ri in ones(self.live as u32).map(|i| i as usize) {
            self.probe(sv, ri);
        }
    }

    /// Run `ri` waits for a peer: probe it now and then, and give it up
    /// once it has shown no life for the send timeout.
    fn probe<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize) {
        let (now, limit) = (sv.now(), self.limit);
        let Some(mut r) = self.run(sv.hw, ri) else { return };
        let Some((peer, life, probed)) = r.waiting else { return };
        if now.saturating_sub(life) >= limit {
            sv.timer_handled();
            return self.missing_node(sv, ri, member(sv.hw, r.f.group, peer));
        }
        if now >= probed.saturating_add(limit / PROBES_PER_TIMEOUT) {
            sv.timer_handled();
            let q = CollRepr {
                addr: addr(sv.config().node, member(sv.hw, r.f.group, peer), r.f.port),
                ctl: Some(CtlCode::Probe),
                group: r.f.group,
                cseq: r.f.cseq,
                tag: 0,
                chunk: 0,
                from_rank: r.shape.rank,
                len: r.f.len,
            };
            if sv.send(&q.emit(), &[]) {
                r.waiting = Some((peer, life, now));
                self.put(sv.hw, ri, &r);
            } else {
                self.again = true;
            }
        }
    }

    /// Work out again when the sent chunks next need a look (a
    /// retransmission, or the end of the send timeout).
    pub(super) fn refresh_due(&mut self, hw: &impl Hw) {
        let mut due = u64::MAX;
        for i in ones(self.sent) {
            let s = Sent::load(hw, self.lay.sent_rec(i));
            due =
                due.min(s.last_tx.saturating_add(self.rto)).min(s.life.saturating_add(self.limit));
        }
        self.due = due;
    }

    /// When the next retransmission or probe is due (the earliest of
    /// the sent chunks' times, kept as `due` when they change).
    pub(super) fn next_timer(&self) -> Option<u64> {
        let limit = self.limit;
        let mut t = (self.sent != 0).then_some(self.due);
        let _ = limit;
        for (i, &w) in self.wait_due.iter().enumerate() {
            if self.live & 1 << i != 0 && w != u64::MAX {
                t = Some(t.map_or(w, |x| x.min(w)));
            }
        }
        t
    }

    /// Tell the other members of a group that its collective is over with
    /// members missing (as transmit buffers allow).
    #[inline(never)]
    pub(super) fn tell<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let Some(mut t) = self.telling else { return };
        let Some(g) = super::super::multicast::group_head(sv.hw, t.group) else {
            self.telling = None;
            return;
        };
        let (at, len) = missing_list(sv.hw, t.group);
        while t.next < t.n {
            if t.next != g.rank {
                let q = CollRepr {
                    addr: addr(sv.config().node, member(sv.hw, t.group, t.next), t.port),
                    ctl: Some(CtlCode::Abort),
                    group: t.group,
                    cseq: t.cseq,
                    tag: 0,
                    chunk: 0,
                    from_rank: g.rank,
                    len: 0,
                };
                if !sv.send_from(&q.emit(), at, len) {
                    self.telling = Some(t);
                    return;
                }
            }
            t.next += 1;
        }
        self.telling = None;
    }
}
