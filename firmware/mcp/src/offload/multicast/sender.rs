//! SDMA's part of multicast (the module above says how a multicast
//! goes): the multicast descriptor at a root (or an assisted relay's
//! child list), the send tokens to children, the reports children send
//! back, and finishing a record: its report to the parent, or at the root
//! the one completion event.

use super::{self as mcast, child};
use crate::hw::Hw;
use crate::pool::NIL;
use crate::records::*;
use crate::sdma::intake::{complete_token, packets_for, refuse};
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::{self, DescKind, Descriptor, ListedChild, McastFields};
use nic_abi::event::{ErrorCause, SendStatus};
use nic_abi::multicast::{Algorithm, Scheme};
use nic_abi::packet::McastTag;
use nic_abi::port::{port_reg, send_slot, SEND_CONS};
use nic_abi::stats::Stat;
use nic_abi::trace::Cause;

/// The send token of multicast descriptor `d` on port `p` (its event
/// names the multicast `tag`).
fn descriptor_token(kind: TokKind, p: usize, d: &Descriptor, tag: &McastTag) -> SendToken {
    let mut t = SendToken::EMPTY;
    t.kind = kind;
    t.port = p as u8;
    t.prio = d.priority;
    t.target_port = p as u8;
    t.size_class = d.size_class;
    t.local = d.local;
    t.len = d.len;
    t.remote = tag.remote();
    t.tag = d.tag;
    t.desc_kind = DescKind::Multicast as u8;
    t
}

/// The ring slots after multicast descriptor `b` that hold its child
/// list (0 for a list too long to take: it is refused alone); None when
/// its fields do not decode.
pub(crate) fn continuation_slots(b: &[u8]) -> Option<u32> {
    Some(list_slots(McastFields::decode(b).ok()?.nchildren))
}

/// The slots a child list of `n` takes after its descriptor (0 for one
/// too long to take).
fn list_slots(n: u16) -> u32 {
    let n = n as usize;
    if n <= desc::MAX_LISTED_CHILDREN {
        desc::child_slots(n) as u32
    } else {
        0
    }
}

impl Sdma {
    /// Whether the host scheme's last multicast send still has its first
    /// packet to get ready (`mcast_lead`); forgets a lead that went.
    pub(crate) fn mcast_lead_pending(&mut self, cx: &Shared) -> bool {
        let Some((t, buf)) = self.mcast_lead else { return false };
        let tok = &cx.tokens[t];
        let pending = cx.tokens.is_live(t)
            && tok.kind == TokKind::McastSend
            && tok.state == TokState::Active
            && (buf.is_some() || tok.next_pkt == 0);
        if !pending {
            self.mcast_lead = None;
        }
        pending
    }
    /// Take the multicast descriptor at `cons` of port `p`'s ring with its
    /// continuation slots. False: not all of it is posted yet, or no
    /// multicast record is free (it waits in the ring).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn intake_mcast(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        (prod, cons): (u32, u32),
        b: &[u8],
        reg_ok: bool,
        w: &mut Work,
    ) -> bool {
        let fields = McastFields::decode(b);
        let extra = fields.map_or(0, |f| list_slots(f.nchildren)) as usize;
        if prod.wrapping_sub(cons) < 1 + extra as u32 {
            return false;
        }
        // A root's descriptor waits in the ring for a free record. A
        // host-scheme send takes none, and an assisted relay's child list
        // fills the record waiting for it: neither may wait behind roots.
        let desc = Descriptor::decode(b);
        let needs_record = fields.is_ok_and(|f| {
            f.scheme != Scheme::Host as u8
                && desc.is_ok_and(|d| mcast::find(cx, d.target_node, f.mseq).is_none())
        });
        if needs_record && cx.mcasts.available() == 0 {
            return false;
        }
        self.go(cx, hw, crate::SdmaState::Intake { port: p as u8 }, Cause::Descriptor);
        w.descriptors += 1 + extra as u32;
        let parsed = desc.and_then(|d| {
            self.validate(cx, p as u8, &d, reg_ok)?;
            Ok((d, fields?))
        });
        let result = parsed.and_then(|(d, f)| self.accept_mcast(cx, hw, p, cons, &d, &f, w));
        self.cons[p] = cons.wrapping_add(1 + extra as u32);
        // (What was taken ahead of it lies past its continuation slots.)
        self.ahead[p] = self.ahead[p].checked_shr(1 + extra as u32).unwrap_or(0);
        self.checked[p] = 0;
        hw.store_u32(port_reg(p, SEND_CONS), self.cons[p]);
        if let Err(cause) = result {
            refuse(cx, hw, p, crate::sdma::intake::RawDesc::of(b), cause, true);
        }
        true
    }

    /// Child `i` of the list that follows the descriptor at `cons`.
    fn listed_child(hw: &impl Hw, p: usize, cons: u32, i: usize) -> ListedChild {
        let (slot, at) = desc::child_at(i);
        let mut e = [0u8; 4];
        hw.read(send_slot(p, cons.wrapping_add(slot as u32)) + at as u32, &mut e);
        ListedChild::decode(&e, 0)
    }

    #[allow(clippy::too_many_arguments)]
    fn accept_mcast(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        cons: u32,
        d: &Descriptor,
        f: &McastFields,
        w: &mut Work,
    ) -> Result<(), ErrorCause> {
        let scheme = Scheme::from_code(f.scheme).ok_or(ErrorCause::BadMulticast)?;
        let alg = Algorithm::from_code(f.alg, f.k).ok_or(ErrorCause::BadMulticast)?;
        let mut tag = McastTag {
            group: d.target_node,
            mseq: f.mseq,
            scheme: f.scheme,
            alg: f.alg,
            k: f.k,
            subtree: 0,
        };
        let n = f.nchildren as usize;
        let listed = |hw: &_, i| Self::listed_child(hw, p, cons, i);
        let (nodes, me) = (cx.cfg.nodes, cx.cfg.node);
        let check_list = |hw: &_| -> Result<u16, ErrorCause> {
            if n == 0 || n > desc::MAX_LISTED_CHILDREN {
                return Err(ErrorCause::BadMulticast);
            }
            let mut members = 1u16;
            for i in 0..n {
                let c: ListedChild = listed(hw, i);
                if c.node >= nodes || c.node == me || c.subtree == 0 {
                    return Err(ErrorCause::BadMulticast);
                }
                members = members.saturating_add(c.subtree);
            }
            Ok(members)
        };
        if scheme == Scheme::Host {
            // The host serves the tree: one child, one tagged send.
            if n != 1 {
                return Err(ErrorCause::BadMulticast);
            }
            check_list(hw)?;
            let c = listed(hw, 0);
            let key = stream_key(c.node, p as u8, p as u8, d.priority);
            if !self.stream_room(cx, key, c.node) {
                return Err(ErrorCause::TooManyStreams);
            }
            tag.subtree = c.subtree;
            let mut t = descriptor_token(TokKind::McastSend, p, d, &tag);
            t.target_node = c.node;
            t.cookie = tag.cookie();
            t.npkts = packets_for(cx, TokKind::Send, d.len);
            let s = self.find_or_make_tx(cx, c.node, p as u8, p as u8, d.priority);
            let (Some(s), Some(i)) = (s, cx.tokens.alloc(t)) else {
                return Err(ErrorCause::TooManyStreams);
            };
            cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
            if self.txs[s].suspended {
                complete_token(cx, i, SendStatus::Dropped);
            } else {
                self.append_token(cx, s, i);
                self.mcast_lead = Some((i, None));
            }
            return Ok(());
        }

        // An assisted relay handing over the child list of a multicast
        // its NIC holds a record for.
        let waiting = mcast::find(cx, tag.group, tag.mseq)
            .filter(|&r| cx.mcasts[r].list == ChildList::Awaiting && cx.mcasts[r].port == p as u8);
        let r = match waiting {
            Some(r) => {
                if scheme != Scheme::Assisted {
                    return Err(ErrorCause::BadMulticast);
                }
                if d.len != cx.mcasts[r].len {
                    return Err(ErrorCause::BadLength);
                }
                r
            }
            None => {
                let mut rec = McastRec::EMPTY;
                rec.tag = tag;
                rec.port = p as u8;
                rec.prio = d.priority;
                rec.size_class = d.size_class;
                rec.len = d.len;
                rec.npkts = packets_for(cx, TokKind::Send, d.len);
                rec.delivered = true;
                mcast::new_record(cx, hw, rec).ok_or(ErrorCause::NoToken)?
            }
        };
        let built = match scheme {
            Scheme::Assisted => check_list(hw).map(|members| {
                for i in 0..n {
                    let c = listed(hw, i);
                    mcast::set_child(hw, r, i as u16, c.node, c.subtree);
                }
                (ChildList::Scratch, n as u16, members)
            }),
            _ => match mcast::group_head(hw, tag.group) {
                Some(g) if g.port as usize == p && g.rank == 0 => {
                    if scheme == Scheme::NicCached {
                        if g.alg != f.alg || g.k != f.k {
                            Err(ErrorCause::BadMulticast)
                        } else {
                            Ok((ChildList::Cached, g.nchildren, g.size))
                        }
                    } else {
                        match mcast::compute_children(hw, cx, r, tag.group, &g, alg) {
                            Some(k) => {
                                mcast::count_steps(w, alg, k);
                                Ok((ChildList::Scratch, k, g.size))
                            }
                            None => Err(ErrorCause::BadMulticast),
                        }
                    }
                }
                _ => Err(ErrorCause::BadGroup),
            },
        };
        let (list, nchildren, members) = match built {
            Ok(b) => b,
            Err(e) => {
                if waiting.is_none() {
                    cx.mcasts.free(r);
                }
                return Err(e);
            }
        };
        w.mcast_descs += 1;
        let mut t = descriptor_token(TokKind::McastRoot, p, d, &tag);
        t.target_node = tag.group;
        t.cookie = r as u32;
        let Some(i) = cx.tokens.alloc(t) else {
            if waiting.is_none() {
                cx.mcasts.free(r);
            }
            return Err(ErrorCause::NoToken);
        };
        cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
        let rec = &mut cx.mcasts[r];
        rec.local = d.local;
        rec.source = McastSource::Host;
        rec.list = list;
        rec.nchildren = nchildren;
        if waiting.is_none() {
            rec.subtree = members;
        }
        rec.token = i;
        let wait = mcast::wait_for(cx, &cx.mcasts[r].tag, cx.mcasts[r].subtree);
        cx.mcasts[r].deadline = cx.now.saturating_add(wait);
        Ok(())
    }

    /// A send token to child `i` of record `r`, on its stream; false if
    /// no token or stream is free now.
    fn start_child(&mut self, cx: &mut Shared, hw: &impl Hw, r: u16, i: u16) -> bool {
        let rec = cx.mcasts[r];
        let (node, subtree) = child(hw, cx, r, i);
        let key = stream_key(node, rec.port, rec.port, rec.prio);
        if !cx.mcast_tokens_free(1, TokKind::McastFwd) || !self.stream_room(cx, key, node) {
            return false;
        }
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::McastFwd;
        t.port = rec.port;
        t.prio = rec.prio;
        t.target_node = node;
        t.target_port = rec.port;
        t.size_class = rec.size_class;
        t.local = rec.local;
        t.len = rec.len;
        t.npkts = rec.npkts;
        t.remote = rec.tag.remote();
        t.cookie = r as u32;
        t.tag = subtree as u64;
        t.further = i > 0;
        let s = self.find_or_make_tx(cx, node, rec.port, rec.port, rec.prio);
        let (Some(s), Some(k)) = (s, cx.tokens.alloc(t)) else { return false };
        // Relays track each child; a send from host memory only its last.
        let slot = if rec.source == McastSource::RxBufs { i as usize } else { 0 };
        if slot < RELAY_CHILDREN {
            cx.mcasts[r].kids[slot] = k;
        }
        cx.mcasts[r].started += 1;
        if self.txs[s].suspended {
            complete_token(cx, k, SendStatus::Dropped);
        } else {
            self.append_token(cx, s, k);
        }
        true
    }

    /// Has record `r`'s last started child (from host memory) sent all
    /// its packets (or ended)?
    fn last_child_sent(&self, cx: &Shared, r: u16) -> bool {
        let rec = &cx.mcasts[r];
        if rec.started == 0 {
            return true;
        }
        let t = rec.kids[0];
        !cx.tokens.is_live(t)
            || cx.tokens[t].kind != TokKind::McastFwd
            || cx.tokens[t].cookie != r as u32
            || cx.tokens[t].next_pkt >= cx.tokens[t].npkts
    }

    /// RECV took the first packet of a message this NIC relays out of its
    /// receive buffers: every child's send token now (RECV made sure
    /// there are enough).
    pub(crate) fn mcast_start(&mut self, cx: &mut Shared, hw: &impl Hw, r: u16) {
        if !cx.mcasts.is_live(r) {
            return;
        }
        for i in 0..cx.mcasts[r].nchildren {
            if !self.start_child(cx, hw, r, i) {
                // Counted as not reached: the record finishes without it.
                cx.mcasts[r].done += 1;
                cx.mcasts[r].started += 1;
                if (i as usize) < RELAY_CHILDREN {
                    cx.mcasts[r].kid_acked[i as usize] = mcast::KID_DONE;
                }
            }
        }
    }

    /// The multicast records' step: children to start, buffers to give
    /// back, records to finish. Records are taken group by group in mseq
    /// order, not in slot order: a slot freed late is taken early, so two
    /// multicasts of a group taken from the ring in one pass may sit in
    /// their slots in reverse order, and the children of each must get
    /// them on their streams in the order they were posted.
    pub(crate) fn mcast_step(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        let mut live: heapless::Vec<u16, { nic_abi::map::MCAST_LISTS_LEN as usize }> =
            cx.mcasts.live_indices().collect();
        let before = |a: u16, b: u16| {
            let (x, y) = (cx.mcasts[a].tag, cx.mcasts[b].tag);
            x.group < y.group || (x.group == y.group && (y.mseq.wrapping_sub(x.mseq) as i32) > 0)
        };
        for i in 1..live.len() {
            let mut j = i;
            while j > 0 && before(live[j], live[j - 1]) {
                live.swap(j, j - 1);
                j -= 1;
            }
        }
        mcast::name_failed(cx, hw);
        // Leaves' reports, in delivery order.
        while let Some(to) = cx.leaf_reports.front().copied() {
            if !self.report(cx, &to, (1, 0), None) {
                break;
            }
            cx.leaf_reports.pop_front();
        }
        for r in live {
            let rec = cx.mcasts[r];
            // From host memory, children go one after another, deepest
            // subtree first: the next starts once the last has sent every
            // packet (relays' packets, from receive buffers, interleave).
            if rec.source == McastSource::Host
                && rec.list != ChildList::Awaiting
                && rec.started < rec.nchildren
                && self.last_child_sent(cx, r)
            {
                self.start_child(cx, hw, r, rec.started);
            }
            mcast::release_acked(cx, hw, r);
            let rec = cx.mcasts[r];
            let complete =
                rec.list != ChildList::Awaiting && rec.done >= rec.nchildren && rec.delivered;
            if complete || cx.now >= mcast::ends_at(cx, r) {
                w.timers += (!complete) as u32;
                self.mcast_finish(cx, hw, r);
            }
        }
    }

    /// Send a report to `to.parent` on the report stream: a subtree of
    /// `subtree` members has the multicast but for `unreached`, and the
    /// lost-heads list of record `rec` (if any) names their heads. False
    /// when no token or stream is free now.
    fn report(
        &mut self,
        cx: &mut Shared,
        to: &ReportTo,
        (subtree, unreached): (u16, u16),
        rec: Option<u16>,
    ) -> bool {
        let key = stream_key(to.parent, to.port, to.port, to.prio) | REPORT_STREAM;
        if !cx.mcast_tokens_free(1, TokKind::Report) || !self.stream_room(cx, key, to.parent) {
            return false;
        }
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::Report;
        t.port = to.port;
        t.prio = to.prio;
        t.target_node = to.parent;
        t.target_port = to.port;
        t.remote = to.remote;
        t.cookie = unreached as u32;
        t.tag = subtree as u64;
        t.local = NO_LIST as u64;
        t.npkts = 1;
        let s = self.find_or_make_stream(cx, key, to.parent, to.port, to.port, to.prio);
        let (Some(s), Some(k)) = (s, cx.tokens.alloc(t)) else { return false };
        if let Some(r) = rec {
            cx.tokens[k].local = mcast::hand_list(cx, r, k) as u64;
        }
        let st = &mut self.txs[s];
        if st.head == NIL && st.outstanding() == 0 && !st.sync_next {
            // Every earlier report was acknowledged: this one (re)starts
            // the stream. A root with more children than its stream table
            // holds lets report streams go (RECV's `evict_rx`); with the
            // SYNC it takes the report at once instead of asking for it
            // again (Unsynced).
            st.sync_next = true;
            st.sync_gen = st.sync_gen.wrapping_add(1);
        }
        cx.bump(Stat::McastReports, 1);
        if self.txs[s].suspended {
            mcast::drop_list(cx, k);
            cx.tokens.free(k);
        } else {
            self.append_token(cx, s, k);
        }
        true
    }

    /// Record `r` is done (or out of time): report to the parent, or at
    /// the root complete the descriptor; the record goes.
    fn mcast_finish(&mut self, cx: &mut Shared, hw: &mut impl Hw, r: u16) {
        mcast::name_failed(cx, hw);
        mcast::name_silent(cx, hw, r);
        let rec = cx.mcasts[r];
        let below = rec.subtree.saturating_sub(1);
        let unreached = below - rec.reached.min(below);
        if let Some(parent) = rec.parent {
            let to = ReportTo { remote: rec.tag.remote(), parent, port: rec.port, prio: rec.prio };
            if !self.report(cx, &to, (rec.subtree, unreached), Some(r)) {
                return; // try again next pass
            }
        }
        if rec.token != NIL && cx.tokens.is_live(rec.token) {
            let t = rec.token;
            cx.tokens[t].cookie = unreached as u32;
            // The root names the heads lost in McastLost events before
            // its Sent (a relay's went with its report).
            let list = mcast::hand_list(cx, r, t);
            cx.tokens[t].first_seq = list as u32;
            if list != NO_LIST {
                let bytes = mcast::read_list(hw, list);
                for (k, part) in bytes.chunks(nic_abi::event::INLINE_MAX).enumerate() {
                    if part.iter().any(|&b| b != 0) {
                        cx.owe_event(cx.tokens[t].port as usize, EvRef::Lost(t, k as u8));
                    }
                }
            }
            let status = if unreached == 0 { SendStatus::Ok } else { SendStatus::Incomplete };
            if rec.parent.is_none() {
                cx.bump(Stat::McastCompleted, 1);
            }
            complete_token(cx, t, status);
        }
        // Buffers still held go back (children that did not answer).
        let mut k = rec.released;
        while rec.source == McastSource::RxBufs && k < rec.have {
            cx.rx_release(hw, rec.bufs[k as usize % RELAY_WINDOW]);
            k += 1;
        }
        cx.mcasts.free(r);
    }
}
