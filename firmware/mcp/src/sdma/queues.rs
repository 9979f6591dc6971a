//! SDMA's queues: sending streams and the connections they belong to
//! (GM: a circular queue of connections, each a circular queue of
//! streams; one packet per turn, then rotate, so long messages do not
//! starve short ones), and the rotation that picks the next stream, unless
//! the scheduler policy compiled in chooses (`offload::policy::Scheduler`).

use super::Sdma;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Pacing, Sched, Scheduler};
use crate::pool::NIL;
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
    pub(crate) fn stream_of(&self, key: u32) -> Option<u16> {
        let s = self.last_stream;
        if self.txs.is_live(s) && self.txs[s].key == key {
            return Some(s);
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
    ) -> Option<u16> {
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
    ) -> Option<u16> {
        if let Some(s) = self.stream_of(key) {
            self.last_stream = s;
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
        st.conn = c;
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
            self.free_conn_if_unused(c);
            return None;
        };
        if self.tx_index.insert(key, s).is_err() {
            self.txs.free(s);
            self.free_conn_if_unused(c);
            return None;
        }
        self.streams_made = self.streams_made.wrapping_add(1);
        self.sched.stream_made();
        self.last_stream = s;
        Some(s)
    }

    /// An idle sending stream that may be let go of: nothing queued,
    /// sent or waiting (no token, every packet acknowledged, no buffer,
    /// poll, hold or suspension), and no pace of its own. The one idle
    /// longest. Its peer keeps the receiving half; a stream made again for
    /// the key starts with a SYNC that names its new incarnation, so
    /// nothing the peer holds is taken for it (docs/firmware.md).
    fn tx_victim(&self, cx: &Shared) -> Option<u16> {
        let idle = |s: u16| {
            let st = &self.txs[s];
            st.head == NIL
                && st.cursor == NIL
                && st.outstanding() == 0
                && !st.suspended
                && st.pace.unpaced()
                && st.nobuf_since == 0
                && st.hold_until <= cx.now
                && !cx.txbufs.refers_to(s)
                && !cx.controls.iter().any(|c| c.is_poll() && c.rx_stream == s)
        };
        self.txs
            .live_indices()
            .filter(|&s| idle(s))
            .min_by_key(|&s| self.txs[s].acked_at.max(self.txs[s].last_progress))
    }

    /// Let idle stream `s` go (and its connection, if it was the last).
    fn evict_tx(&mut self, cx: &mut Shared, s: u16) {
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

    fn free_conn_if_unused(&mut self, c: u16) {
        if c == NIL || !self.conns.is_live(c) || self.conns[c].in_queue {
            return;
        }
        if self.txs.live_indices().any(|s| self.txs[s].conn == c) {
            return;
        }
        self.conn_index.remove(&self.conns[c].node);
        self.conns.free(c);
    }

    pub(crate) fn append_token(&mut self, cx: &mut Shared, s: u16, t: u16) {
        cx.tokens[t].stream = s;
        cx.tokens[t].next = NIL;
        let st = &mut self.txs[s];
        if st.tail == NIL {
            st.head = t;
            st.base = st.win.next();
        } else {
            let tail = st.tail;
            cx.tokens[tail].next = t;
        }
        let st = &mut self.txs[s];
        st.tail = t;
        if st.cursor == NIL {
            // The first sendable token of the stream (its pace may start
            // now).
            st.cursor = t;
            st.pace.wake(cx.now);
        }
        self.ring_insert(s);
    }

    /// Put stream `s` on its connection's ring, and the connection on the
    /// connection queue.
    pub(crate) fn ring_insert(&mut self, s: u16) {
        if self.txs[s].in_ring {
            return;
        }
        let c = self.txs[s].conn;
        let head = self.conns[c].ring;
        if head == NIL {
            self.txs[s].ring_next = s;
            self.txs[s].ring_prev = s;
            self.conns[c].ring = s;
        } else {
            let tail = self.txs[head].ring_prev;
            self.txs[s].ring_next = head;
            self.txs[s].ring_prev = tail;
            self.txs[tail].ring_next = s;
            self.txs[head].ring_prev = s;
        }
        self.txs[s].in_ring = true;
        self.conns[c].ring_len += 1;
        if !self.conns[c].in_queue {
            if self.conn_cur == NIL {
                self.conns[c].next = c;
                self.conns[c].prev = c;
                self.conn_cur = c;
            } else {
                let head = self.conn_cur;
                let tail = self.conns[head].prev;
                self.conns[c].next = head;
                self.conns[c].prev = tail;
                self.conns[tail].next = c;
                self.conns[head].prev = c;
            }
            self.conns[c].in_queue = true;
            self.conn_queue_len += 1;
        }
    }

    pub(crate) fn ring_remove(&mut self, s: u16) {
        if !self.txs[s].in_ring {
            return;
        }
        let c = self.txs[s].conn;
        let (n, p) = (self.txs[s].ring_next, self.txs[s].ring_prev);
        if n == s {
            self.conns[c].ring = NIL;
        } else {
            self.txs[p].ring_next = n;
            self.txs[n].ring_prev = p;
            if self.conns[c].ring == s {
                self.conns[c].ring = n;
            }
        }
        self.txs[s].in_ring = false;
        self.conns[c].ring_len -= 1;
        if self.conns[c].ring == NIL && self.conns[c].in_queue {
            let (n, p) = (self.conns[c].next, self.conns[c].prev);
            if n == c {
                self.conn_cur = NIL;
            } else {
                self.conns[p].next = n;
                self.conns[n].prev = p;
                if self.conn_cur == c {
                    self.conn_cur = n;
                }
            }
            self.conns[c].in_queue = false;
            self.conn_queue_len -= 1;
        }
    }

    pub(crate) fn sendable(&self, cx: &Shared, s: u16) -> bool {
        let st = &self.txs[s];
        st.cursor != NIL
            && !st.suspended
            && st.win.has_room(cx.cfg.window)
            && st.hold_until <= cx.now
            && Fan::packet_here(cx, st.cursor, self.relay_built)
    }

    /// GM rotation: the first sendable stream, starting at the current
    /// connection's current stream; afterwards both queues move on one, so
    /// each connection, and each stream within it, gets one packet a turn.
    pub(crate) fn pick_stream(&mut self, cx: &Shared, w: &mut Work) -> Option<u16> {
        if let Some(choice) = Sched::pick(self, cx, w) {
            return choice;
        }
        let mut c = self.conn_cur;
        let mut conns_left = self.conn_queue_len;
        while conns_left > 0 && c != NIL {
            conns_left -= 1;
            let next_c = self.conns[c].next;
            let mut s = self.conns[c].ring;
            let mut left = self.conns[c].ring_len;
            while left > 0 && s != NIL {
                left -= 1;
                let next_s = self.txs[s].ring_next;
                if self.txs[s].cursor == NIL || self.txs[s].suspended {
                    // Nothing to send: off the ring until a token or a rewind.
                    self.ring_remove(s);
                } else if self.sendable(cx, s) {
                    if self.txs[s].in_ring && self.conns[c].ring != NIL {
                        self.conns[c].ring = self.txs[s].ring_next;
                    }
                    if self.conns[c].in_queue {
                        self.conn_cur = self.conns[c].next;
                    }
                    return Some(s);
                }
                s = next_s;
            }
            c = if self.conns[c].in_queue { self.conns[c].next } else { next_c };
        }
        None
    }
}
