//! SDMA's queues: sending streams and the connections they belong to
//! (GM: a circular queue of connections, each a circular queue of
//! streams; one packet per turn, then rotate, so long messages do not
//! starve short ones), and the rotation that picks the next stream, unless
//! the scheduler policy compiled in chooses (`offload::policy::Scheduler`).

use super::Sdma;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Pacing, Sched, Scheduler};
use crate::records::*;
use crate::reliability::SendWindow;
use crate::shared::Shared;
use crate::Work;
use nic_abi::Priority;

impl Sdma {
    /// The sending stream with `key`, if there is one: the one found
    /// last when it is live and has that key (keys are unique among live
    /// streams), else the index's.
    #[inline]
    pub(crate) fn stream_of(&self, key: u32) -> Option<TxId> {
        if let Some(s) = self.last_stream {
            if self.txs.is_live(s) && self.txs[s].key == key {
                return Some(s);
            }
        }
        self.tx_index.get(&key).copied()
    }

    /// Is there a stream for `key` (to `node`), or room for one (a free
    /// record, or an idle stream to let go of)?
    pub fn stream_room(&self, cx: &Shared, key: u32, node: u16) -> bool {
        self.stream_of(key).is_some()
            || (self.txs.available() > 0
                && self.tx_index.len() < self.tx_index.capacity()
                && (self.conn_index.contains_key(&node) || self.conns.available() > 0))
            || self.tx_victim(cx).is_some()
    }

    pub(crate) fn find_or_make_tx(
        &mut self,
        cx: &mut Shared,
        node: u16,
        lport: u8,
        rport: u8,
        prio: Priority,
    ) -> Option<TxId> {
        self.find_or_make_stream(cx, stream_key(node, lport, rport, prio), node, lport, rport, prio)
    }

    /// The sending stream with `key` (a data stream's, or with
    /// `REPORT_STREAM`), made if new; when the table is full, an idle
    /// stream is let go of first ([`Sdma::tx_victim`]).
    pub(crate) fn find_or_make_stream(
        &mut self,
        cx: &mut Shared,
        key: u32,
        node: u16,
        lport: u8,
        rport: u8,
        prio: Priority,
    ) -> Option<TxId> {
        if let Some(s) = self.stream_of(key) {
            self.last_stream = Some(s);
            return Some(s);
        }
        let full = self.txs.available() == 0
            || self.tx_index.len() == self.tx_index.capacity()
            || (!self.conn_index.contains_key(&node) && self.conns.available() == 0);
        if full {
            let v = self.tx_victim(cx)?;
            self.evict_tx(cx, v);
        }
        let c = match self.conn_index.get(&node) {
            Some(&c) => c,
            None => {
                let mut c = Conn::EMPTY;
                c.node = node;
                let i = self.conns.alloc(c)?;
                if self.conn_index.insert(node, i).is_err() {
                    self.conns.free(i);
                    return None;
                }
                i
            }
        };
        let mut st = TxStream::EMPTY;
        st.key = key;
        st.remote_node = node;
        st.local_port = lport;
        st.remote_port = rport;
        st.prio = prio;
        st.conn = Some(c);
        st.order = self.streams_made;
        if self.evicted > 0 {
            // This NIC has let streams go: the peer may still hold this
            // key's stream from an earlier incarnation. The SYNC says which
            // incarnation this is (`order`), and the sequence space starts
            // far from where an earlier one was, so a late ack or nack of
            // that one falls outside this window.
            st.reborn = true;
            st.win = crate::reliability::GoBackN::starting_at(self.streams_made << 20);
        }
        let Some(s) = self.txs.alloc(st) else {
            self.free_conn_if_unused(Some(c));
            return None;
        };
        if self.tx_index.insert(key, s).is_err() {
            self.txs.free(s);
            self.free_conn_if_unused(Some(c));
            return None;
        }
        self.streams_made = self.streams_made.wrapping_add(1);
        self.sched.stream_made();
        cx.offloads_live |= self.sched.live();
        self.last_stream = Some(s);
        Some(s)
    }

    /// An idle sending stream that may be let go of: nothing queued,
    /// sent or waiting (no token, every packet acknowledged, no buffer,
    /// poll, hold or suspension), and no pace of its own. The one idle
    /// longest. Its peer keeps the receiving half; a stream made again for
    /// the key starts with a SYNC that names its new incarnation, so
    /// nothing the peer holds is taken for it (docs/firmware.md).
    fn tx_victim(&self, cx: &Shared) -> Option<TxId> {
        let idle = |s: TxId| {
            let st = &self.txs[s];
            st.head.is_none()
                && st.cursor.is_none()
                && st.outstanding() == 0
                && !st.suspended
                && st.pace.unpaced()
                && st.nobuf_since == 0
                && st.hold_until <= cx.now
                && !cx.txbufs.refers_to(s)
                && !cx.controls.iter().any(|c| c.tx_stream() == Some(s))
        };
        self.txs
            .live_indices()
            .filter(|&s| idle(s))
            .min_by_key(|&s| self.txs[s].acked_at.max(self.txs[s].last_progress))
    }

    /// Let idle stream `s` go (and its connection, if it was the last).
    fn evict_tx(&mut self, cx: &mut Shared, s: TxId) {
        // Off the rotation and the timer list (both let idle streams go
        // lazily).
        self.ring_remove(s);
        if let Some(i) = self.active_tx.iter().position(|&x| x == s) {
            self.active_tx.swap_remove(i);
            self.txs.list_changed();
        }
        let st = self.txs[s];
        self.tx_index.remove(&st.key);
        self.txs.free(s);
        self.free_conn_if_unused(st.conn);
        self.evicted = self.evicted.wrapping_add(1);
        cx.count_later(nic_abi::stats::Stat::StreamsEvicted, 1);
        log_trace!("stream to node {=u16} let go", st.remote_node);
    }

    fn free_conn_if_unused(&mut self, c: Option<ConnId>) {
        let Some(c) = c else { return };
        if !self.conns.is_live(c) || self.conns[c].queue.is_some() {
            return;
        }
        if self.txs.live_indices().any(|s| self.txs[s].conn == Some(c)) {
            return;
        }
        self.conn_index.remove(&self.conns[c].node);
        self.conns.free(c);
    }

    pub(crate) fn append_token(&mut self, cx: &mut Shared, s: TxId, t: TokenId) {
        cx.tokens[t].stream = Some(s);
        cx.tokens[t].next = None;
        let st = &mut self.txs[s];
        match st.tail {
            None => {
                st.head = Some(t);
                st.base = st.win.next();
            }
            Some(tail) => cx.tokens[tail].next = Some(t),
        }
        let st = &mut self.txs[s];
        st.tail = Some(t);
        if st.cursor.is_none() {
            // The first sendable token of the stream (its pace may start
            // now).
            st.cursor = Some(t);
            st.pace.wake(cx.now);
        }
        self.ring_insert(s);
    }

    /// Put stream `s` on its connection's ring, and the connection on the
    /// connection queue.
    pub(crate) fn ring_insert(&mut self, s: TxId) {
        let Some(c) = self.txs[s].conn else { return };
        if self.txs[s].ring.is_some() {
            return;
        }
        // The ring's current stream and the one before it (the ring's
        // last), if the ring has any.
        let ends = self.conns[c].ring.and_then(|h| Some((h, self.txs[h].ring?.prev)));
        match ends {
            None => {
                self.txs[s].ring = Some(Links { next: s, prev: s });
                self.conns[c].ring = Some(s);
            }
            Some((head, tail)) => {
                self.txs[s].ring = Some(Links { next: head, prev: tail });
                self.set_ring_next(tail, s);
                self.set_ring_prev(head, s);
            }
        }
        self.conns[c].ring_len += 1;
        if self.conns[c].queue.is_none() {
            let ends = self.conn_cur.and_then(|h| Some((h, self.conns[h].queue?.prev)));
            match ends {
                None => {
                    self.conns[c].queue = Some(Links { next: c, prev: c });
                    self.conn_cur = Some(c);
                }
                Some((head, tail)) => {
                    self.conns[c].queue = Some(Links { next: head, prev: tail });
                    if let Some(l) = &mut self.conns[tail].queue {
                        l.next = c;
                    }
                    if let Some(l) = &mut self.conns[head].queue {
                        l.prev = c;
                    }
                }
            }
            self.conn_queue_len += 1;
        }
    }

    /// Stream `s`, on its ring, is followed by `next`.
    #[inline(always)]
    fn set_ring_next(&mut self, s: TxId, next: TxId) {
        if let Some(l) = &mut self.txs[s].ring {
            l.next = next;
        }
    }

    /// Stream `s`, on its ring, follows `prev`.
    #[inline(always)]
    fn set_ring_prev(&mut self, s: TxId, prev: TxId) {
        if let Some(l) = &mut self.txs[s].ring {
            l.prev = prev;
        }
    }

    pub(crate) fn ring_remove(&mut self, s: TxId) {
        let Some(Links { next: n, prev: p }) = self.txs[s].ring else { return };
        let Some(c) = self.txs[s].conn else { return };
        if n == s {
            self.conns[c].ring = None;
        } else {
            self.set_ring_next(p, n);
            self.set_ring_prev(n, p);
            if self.conns[c].ring == Some(s) {
                self.conns[c].ring = Some(n);
            }
        }
        self.txs[s].ring = None;
        self.conns[c].ring_len -= 1;
        if self.conns[c].ring.is_some() {
            return;
        }
        if let Some(Links { next: n, prev: p }) = self.conns[c].queue {
            if n == c {
                self.conn_cur = None;
            } else {
                if let Some(l) = &mut self.conns[p].queue {
                    l.next = n;
                }
                if let Some(l) = &mut self.conns[n].queue {
                    l.prev = p;
                }
                if self.conn_cur == Some(c) {
                    self.conn_cur = Some(n);
                }
            }
            self.conns[c].queue = None;
            self.conn_queue_len -= 1;
        }
    }

    pub(crate) fn sendable(&self, cx: &Shared, s: TxId) -> bool {
        let st = &self.txs[s];
        let Some(cursor) = st.cursor else { return false };
        !st.suspended
            && st.win.has_room(cx.cfg.window)
            && st.hold_until <= cx.now
            && Fan::packet_here(cx, cursor, self.relay_built)
    }

    /// When the rotation holds one connection with one stream, and no
    /// scheduler policy may pick: what `pick_stream` would answer, with
    /// no walk (it moves nothing then), `Some(None)` when that stream may
    /// not send now. None: ask `pick_stream` (also when the stream has
    /// nothing to send: it takes it off the ring).
    #[inline(always)]
    pub(crate) fn sole_stream(&self, cx: &Shared) -> Option<Option<TxId>> {
        if self.conn_queue_len != 1 || cx.offloads_live {
            return None;
        }
        let conn = &self.conns[self.conn_cur?];
        let s = conn.ring.filter(|_| conn.ring_len == 1)?;
        let st = &self.txs[s];
        if st.cursor.is_none() || st.suspended {
            return None;
        }
        Some(self.sendable(cx, s).then_some(s))
    }

    /// GM rotation: the first sendable stream, starting at the current
    /// connection's current stream; afterwards both queues move on one, so
    /// each connection, and each stream within it, gets one packet a turn.
    pub(crate) fn pick_stream(&mut self, cx: &Shared, w: &mut Work) -> Option<TxId> {
        if cx.offloads_live {
            if let Some(choice) = Sched::pick(self, cx, w) {
                return choice;
            }
        }
        let mut c = self.conn_cur;
        let mut conns_left = self.conn_queue_len;
        while let (true, Some(ci)) = (conns_left > 0, c) {
            conns_left -= 1;
            let next_c = self.conns[ci].queue.map(|l| l.next);
            let mut s = self.conns[ci].ring;
            let mut left = self.conns[ci].ring_len;
            while let (true, Some(si)) = (left > 0, s) {
                left -= 1;
                let next_s = self.txs[si].ring.map(|l| l.next);
                if self.txs[si].cursor.is_none() || self.txs[si].suspended {
                    // Nothing to send: off the ring until a token or a rewind.
                    self.ring_remove(si);
                } else if self.sendable(cx, si) {
                    if let (Some(l), Some(_)) = (self.txs[si].ring, self.conns[ci].ring) {
                        self.conns[ci].ring = Some(l.next);
                    }
                    if let Some(l) = self.conns[ci].queue {
                        self.conn_cur = Some(l.next);
                    }
                    return Some(si);
                }
                s = next_s;
            }
            c = match self.conns[ci].queue {
                Some(l) => Some(l.next),
                None => next_c,
            };
        }
        None
    }
}
