//! Multicast in a node's program: the groups it belongs to (installed in
//! its NIC's group table at setup), the root's posts (one multicast per
//! message, at most `window` whose completion it has not seen), each
//! member's checks (every reception judged against that member's copy of
//! the flow's stream: content, length, mseq order, exactly once), and a
//! relay's part under the host and assisted schemes (`Port::relay` out of
//! the receive buffer the message landed in, which stays lent until those
//! sends complete).
//!
//! Tree work is counted per multicast for the report: children the hosts
//! computed (the root's, and each relay's that posts) and what the NICs'
//! `McastTreeOps` counters grew by between this node's multicast events.

use host_brm::BrmTransport;
use host_driver::nic_abi::stats::Stat;
use host_driver::NicBackend;
use host_driver::{DriverError, Event, Group, Multicast, Nic, RelayPlan, RootPlan, SendStatus};
use nic_abi::event::McastInfo;
use nic_abi::map;
use nic_abi::multicast::{children_computed, Algorithm, Scheme};

use super::super::ledger::Verdict;
use super::super::pattern;
use super::super::plan::class_of;
use super::role::{McastPending, Role};
use super::tags::{relay_tag, send_tag};
use super::{NodeApp, NodeHost};

/// A root whose multicast is complete at the root but not yet at every
/// member looks again this often (it cannot be told: the members are
/// other nodes' programs).
const MCAST_DELIVERY_POLL_NS: u64 = 1_000;
/// ... and starts its next multicast after this long anyway.
const MCAST_DELIVERY_WAIT_NS: u64 = 100_000_000;

/// The group of multicast flow `flow` among `mcasts`, if this node is its
/// root.
fn root_of(mcasts: &[McastCtx], flow: usize) -> Option<&McastCtx> {
    mcasts.iter().find(|c| c.flow == flow && c.rank == 0)
}

/// Root role `ri` (`r`, of group `c`)'s multicast `mseq` of `len` bytes
/// from its send slot `slot`.
fn root_multicast<'a>(
    ri: usize,
    r: &'a Role,
    c: &'a McastCtx,
    slot: usize,
    mseq: u64,
    len: u64,
) -> Multicast<'a> {
    Multicast {
        buf: &r.slots[slot],
        offset: 0,
        len: len as u32,
        size_class: class_of(len),
        priority: r.priority,
        group: &c.group,
        scheme: c.scheme,
        algorithm: c.alg,
        mseq: mseq as u32,
        tag: send_tag(ri, slot, mseq),
    }
}

/// A multicast group this node is a member of.
pub(super) struct McastCtx {
    pub(super) flow: usize,
    pub(super) group: Group,
    pub(super) rank: u16,
    pub(super) scheme: Scheme,
    pub(super) alg: Algorithm,
}

/// A reception whose relay is worked out (its host's processing charged)
/// and not posted yet: it posts once that time has passed (`due`), or
/// later when the driver had no send token or ring room.
pub(super) struct PendingRelay {
    port: usize,
    ev: Event,
    pool: usize,
    idx: usize,
    /// The flow (a multicast flow, or a broadcast run as a multicast),
    /// and its group.
    flow: usize,
    group: Group,
    plan: RelayPlan,
    due: u64,
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Install every group this node belongs to in its NIC's group table.
    pub(super) fn create_groups(&mut self, nic: &Nic<H::B>) -> Result<(), String> {
        let l = self.ledger.borrow();
        // The multicast flows, in flow order (every node starts here: on a
        // large cluster the flows without a group are most of them).
        let mut mflows: Vec<usize> = l.groups.values().copied().collect();
        mflows.sort_unstable();
        for f in mflows.iter().map(|&i| &l.flows[i]) {
            let Some(m) = &f.spec.mcast else { continue };
            let Some(rank) = m.rank_of(self.node) else { continue };
            if !self.ports.iter().any(|p| p.num == f.spec.src_port) {
                return Err(format!("flow {}: the group's port is not open", f.spec.name));
            }
            let group = Group::new(m.group_id, f.spec.src_port, m.members.clone())
                .map_err(|e| format!("flow {}: group: {e}", f.spec.name))?;
            let alg = m.alg();
            nic.create_group(&group, alg)
                .map_err(|e| format!("flow {}: creating group {}: {e}", f.spec.name, m.group_id))?;
            // A backend that may not write the table drops the writes.
            let valid = map::group_entry(m.group_id as u32) + nic_abi::group::VALID;
            if nic.backend().sram_load_u32(valid) != nic_abi::group::GROUP_VALID {
                return Err(format!(
                    "flow {}: group {} is not in the NIC's group table after creating it",
                    f.spec.name, m.group_id
                ));
            }
            self.mcasts.push(McastCtx { flow: f.spec.index, group, rank, scheme: m.scheme, alg });
        }
        Ok(())
    }

    /// The NIC tree work to credit to an event of a multicast of
    /// `scheme`: how much this NIC's `McastTreeOps` counter grew since the
    /// last credit. Only the NIC-based scheme makes NICs compute trees, so
    /// growth waits for the node's next event of such a multicast (a node
    /// in two NIC-scheme groups at once cannot tell their work apart).
    fn tree_ops_credit(&mut self, scheme: Scheme) -> u64 {
        if scheme != Scheme::Nic {
            return 0;
        }
        let Some(nic) = self.nic.as_ref() else { return 0 };
        let now = nic.stat(Stat::McastTreeOps);
        let d = now.wrapping_sub(self.tree_ops_seen);
        self.tree_ops_seen = now;
        d
    }

    /// The root starts multicast `mseq` of role `ri` from send slot `slot`:
    /// its host does the work that comes before the first post now (its
    /// CPU time passes: children computed, separate addressing's steps),
    /// and posts once that time has passed (`post_due_roots`), so that its
    /// NIC never sees the descriptors before the host work that precedes
    /// them. The multicast's latency and root CPU run from here.
    pub(super) fn send_mcast(
        &mut self,
        ri: usize,
        slot: usize,
        mseq: u64,
    ) -> Result<(), DriverError> {
        let r = &self.roles[ri];
        let flow = r.flow;
        let Some(c) = root_of(&self.mcasts, flow) else {
            return Err(DriverError::BadGroup("the root is not in its group"));
        };
        let host_children = match c.scheme {
            Scheme::Host | Scheme::Assisted => children_computed(c.alg, c.group.size(), 0) as u64,
            _ => 0,
        };
        let len = self.ledger.borrow().flows[flow].spec.size_of(mseq);
        let n = len as usize;
        if self.scratch.len() < n {
            self.scratch.resize(n, 0);
        }
        pattern::fill(&mut self.scratch[..n], pattern::forward_stream(flow), mseq as u32);
        let pc = &mut self.ports[r.port];
        if n > 0 {
            pc.port.write(&r.slots[slot], 0, &self.scratch[..n])?;
        }
        let now = self.host.now_ns();
        let busy = self.host.busy_ns();
        let m = root_multicast(ri, r, c, slot, mseq, len);
        let plan = pc.port.multicast_prepare(&m)?;
        let due = self.host.now_ns();
        let children = self.host_root_children(flow);
        let r = &mut self.roles[ri];
        r.free.pop();
        r.mcast_pending.insert(
            mseq,
            McastPending {
                left: 0,
                ok: true,
                posted: 0,
                children,
                slot,
                prepared: Some((due, plan)),
            },
        );
        self.ledger.borrow_mut().flows[flow].mcast_posted(mseq, now, busy, host_children);
        Ok(())
    }

    /// Post the root multicasts whose host work (`send_mcast`) was done by
    /// `now`; be woken for the others. A multicast the driver has no ring
    /// room for yet waits for the next look.
    pub(super) fn post_due_roots(&mut self, now: u64, wake_at: &mut dyn FnMut(u64)) {
        // (Called at every step: a node that roots no group has nothing.)
        if !self.mcasts.iter().any(|c| c.rank == 0) {
            return;
        }
        for ri in 0..self.roles.len() {
            if self.roles[ri].mcast_pending.is_empty() {
                continue;
            }
            // Children no plan covers yet (no token was free when the
            // last completion came: other sends hold them): try again.
            let unplanned = |r: &Role| {
                r.mcast_pending
                    .values()
                    .any(|p| p.ok && p.prepared.is_none() && p.posted < p.children)
            };
            if unplanned(&self.roles[ri]) {
                self.post_more_children(ri);
                if unplanned(&self.roles[ri]) {
                    wake_at(now + super::BARRIER_POLL_NS);
                }
            }
            let due: Vec<(u64, u64)> = self.roles[ri]
                .mcast_pending
                .iter()
                .filter_map(|(&mseq, p)| p.prepared.as_ref().map(|(due, _)| (mseq, *due)))
                .collect();
            for (mseq, due) in due {
                if due > now {
                    wake_at(due);
                    continue;
                }
                if !self.post_prepared(ri, mseq) {
                    wake_at(now + super::BARRIER_POLL_NS);
                }
            }
        }
    }

    /// Post root role `ri`'s prepared multicast `mseq`. False when it must
    /// wait (no ring room or send token for its one descriptor).
    fn post_prepared(&mut self, ri: usize, mseq: u64) -> bool {
        let flow = self.roles[ri].flow;
        let Some(p) = self.roles[ri].mcast_pending.get_mut(&mseq) else { return true };
        let Some((due, plan)) = p.prepared.take() else { return true };
        let slot = p.slot;
        let r = &self.roles[ri];
        let Some(c) = root_of(&self.mcasts, flow) else { return true };
        let len = self.ledger.borrow().flows[flow].spec.size_of(mseq);
        let m = root_multicast(ri, r, c, slot, mseq, len);
        let pc = &mut self.ports[r.port];
        let traced_at = self.host.trace_ns();
        let result = pc.port.multicast_post(&m, &plan);
        let port = pc.num;
        let p = self.roles[ri].mcast_pending.get_mut(&mseq).expect("pending");
        match result {
            Ok(n) => {
                p.posted += n;
                p.left += n;
                // Other sends took tokens or ring room between the host's
                // work and this post: the rest of the plan, its work done,
                // posts as they come back.
                let rest = plan.rest(n);
                let whole = rest.is_none();
                p.prepared = rest.map(|rest| (due, rest));
                if n > 0 {
                    self.log_call("multicast", port, traced_at, || {
                        format!("multicast {mseq}, {len} B: {n} descriptors")
                    });
                }
                // Host scheme: the children tokens did not cover go now or
                // as completions bring tokens back.
                if whole {
                    self.post_more_children(ri);
                }
                whole
            }
            Err(DriverError::NoSendToken | DriverError::RingFull) => {
                p.prepared = Some((due, plan));
                false
            }
            Err(e) => {
                p.children = 0;
                p.ok = false;
                let name = self.ledger.borrow().flows[flow].spec.name.clone();
                self.problem(format!("flow {name}: multicast {mseq} refused by the driver: {e}"));
                self.mcast_settle(ri, mseq);
                true
            }
        }
    }

    /// Host scheme: the host's work for root role `ri`'s multicast `mseq`
    /// (its message in send slot `slot`) from its `from`-th child on, as
    /// far as send tokens go: charged now, posted by `post_due_roots` once
    /// that time has passed. None when no token or ring slot is free.
    fn prepare_more(
        &mut self,
        ri: usize,
        slot: usize,
        mseq: u64,
        from: usize,
    ) -> Result<Option<RootPlan>, DriverError> {
        let r = &self.roles[ri];
        let flow = r.flow;
        let Some(c) = root_of(&self.mcasts, flow) else {
            return Err(DriverError::BadGroup("the root is not in its group"));
        };
        let len = self.ledger.borrow().flows[flow].spec.size_of(mseq);
        let m = root_multicast(ri, r, c, slot, mseq, len);
        let plan = self.ports[r.port].port.multicast_more_prepare(&m, from)?;
        Ok((plan.batch() > 0).then_some(plan))
    }

    /// The sends the root of `flow` posts itself, one per child: its
    /// children under the host scheme, else 0.
    fn host_root_children(&self, flow: usize) -> u32 {
        root_of(&self.mcasts, flow)
            .filter(|c| c.scheme == Scheme::Host)
            .map_or(0, |c| children_computed(c.alg, c.group.size(), 0))
    }

    /// Must root role `ri` wait before its next multicast? Under the host
    /// scheme, while an earlier one has children still to post (members
    /// get a group's multicasts in order) or its port has no send token.
    pub(super) fn mcast_root_waits(&self, ri: usize) -> bool {
        let r = &self.roles[ri];
        let total = self.host_root_children(r.flow);
        total > 0
            && (r.mcast_pending.values().any(|p| p.posted < total)
                || self.ports[r.port].port.send_tokens_free() == 0)
    }

    /// One of the root's completions: the multicast's one `Sent`, or (host
    /// scheme) one per child. The last one completes it.
    pub(super) fn on_mcast_root_sent(
        &mut self,
        ri: usize,
        mseq: u64,
        status: SendStatus,
        info: Option<McastInfo>,
    ) {
        let flow = self.roles[ri].flow;
        let name = self.ledger.borrow().flows[flow].spec.name.clone();
        // After a NIC reset of a member (or of the root), sends to it fail:
        // counted, not a problem.
        if status != SendStatus::Ok && !self.cut_now(flow) {
            // Which members it did not reach, as the root's completion says.
            let group = self.mcasts.iter().find(|c| c.flow == flow).map(|c| &c.group);
            let which = match (group, info) {
                (Some(g), Some(i)) if i.unreached > 0 => {
                    let n = g.not_reached(&i);
                    let some = if n.complete { "" } else { ", among them" };
                    format!(": {} members not reached{some} nodes {:?}", n.count, n.members)
                }
                _ => String::new(),
            };
            self.problem(format!("flow {name}: multicast {mseq} completed with {status:?}{which}"));
        }
        let r = &mut self.roles[ri];
        let Some(p) = r.mcast_pending.get_mut(&mseq) else {
            self.problem(format!("flow {name}: a completion of multicast {mseq}, not in flight"));
            return;
        };
        p.left = p.left.saturating_sub(1);
        p.ok &= status == SendStatus::Ok;
        self.post_more_children(ri);
        self.mcast_settle(ri, mseq);
    }

    /// Host scheme: the next children of root role `ri`'s multicast not
    /// wholly posted yet, as far as send tokens and send ring slots go (a
    /// separate tree of more members than a port has tokens, or a ring
    /// other sends filled): their host work now, their posts once it is
    /// done (`post_due_roots`). Called at each completion, each post and
    /// each time the program sends.
    pub(super) fn post_more_children(&mut self, ri: usize) {
        let r = &self.roles[ri];
        let next =
            r.mcast_pending.iter().find(|(_, p)| p.prepared.is_none() && p.posted < p.children);
        let Some((&mseq, &McastPending { slot, posted, .. })) = next else { return };
        match self.prepare_more(ri, slot, mseq, posted as usize) {
            Ok(None) | Err(DriverError::NoSendToken | DriverError::RingFull) => {}
            Ok(Some(plan)) => {
                let due = self.host.now_ns();
                let p = self.roles[ri].mcast_pending.get_mut(&mseq).expect("pending");
                p.prepared = Some((due, plan));
            }
            Err(e) => {
                let name = self.ledger.borrow().flows[self.roles[ri].flow].spec.name.clone();
                self.problem(format!("flow {name}: multicast {mseq}: {e}"));
                let p = self.roles[ri].mcast_pending.get_mut(&mseq).expect("pending");
                p.children = p.posted;
                p.ok = false;
                self.mcast_settle(ri, mseq);
            }
        }
    }

    /// Root role `ri`'s multicast `mseq` is done once every child is
    /// posted and every completion came. Its send slot (the window) comes
    /// back once every member has it too (`release_delivered`).
    fn mcast_settle(&mut self, ri: usize, mseq: u64) {
        let flow = self.roles[ri].flow;
        let r = &mut self.roles[ri];
        let Some(&McastPending { left, ok, posted, children, slot, ref prepared }) =
            r.mcast_pending.get(&mseq)
        else {
            return;
        };
        if left > 0 || posted < children || prepared.is_some() {
            return;
        }
        r.mcast_pending.remove(&mseq);
        let scheme = self.mcasts.iter().find(|c| c.flow == flow).map_or(Scheme::Host, |c| c.scheme);
        let nic_ops = self.tree_ops_credit(scheme);
        let now = self.host.now_ns();
        let busy = self.host.busy_ns();
        let delivered = {
            let mut l = self.ledger.borrow_mut();
            let f = &mut l.flows[flow];
            f.mcast_tree_work(mseq, 0, nic_ops);
            f.mcast_done(mseq, ok, now, busy);
            let delivered =
                f.mcast.as_mut().is_none_or(|m| m.take_retired(mseq, now) == Some(Ok(())));
            if !ok {
                l.resolved += 1;
            }
            delivered
        };
        let r = &mut self.roles[ri];
        if slot < r.slots.len() && !r.free.contains(&slot) {
            if delivered {
                r.free.push(slot);
            } else {
                r.mcast_awaiting.push((mseq, slot, now));
            }
        }
    }

    /// Give root roles back the send slots of multicasts every member now
    /// has: the next multicast starts when the last one has reached the
    /// whole group, so that each is timed alone (under the host scheme the
    /// root's own completion comes when its children have the message,
    /// before the rest of the tree does). The root does not wait for a
    /// multicast a NIC reset cut, one a relay's send failed for, or one
    /// still missing `MCAST_DELIVERY_WAIT_NS` after its completion (a
    /// member that never gets it must not hold the root). Be woken to
    /// look again while one is awaited.
    pub(super) fn release_delivered(&mut self, now: u64, wake_at: &mut dyn FnMut(u64)) {
        if !self.mcasts.iter().any(|c| c.rank == 0) {
            return;
        }
        for ri in 0..self.roles.len() {
            if self.roles[ri].mcast_awaiting.is_empty() {
                continue;
            }
            let flow = self.roles[ri].flow;
            let cut = self.cut_now(flow);
            let mut l = self.ledger.borrow_mut();
            let Some(m) = l.flows[flow].mcast.as_mut() else { continue };
            let r = &mut self.roles[ri];
            let mut k = 0;
            while k < r.mcast_awaiting.len() {
                let (mseq, slot, since) = r.mcast_awaiting[k];
                let go = match m.take_retired(mseq, now) {
                    Some(Ok(())) => true,
                    // Every member has it, a member's host later than now.
                    Some(Err(t)) => {
                        wake_at(t);
                        false
                    }
                    None => false,
                };
                let go = go
                    || cut
                    || m.relay_errors > 0
                    || now.saturating_sub(since) >= MCAST_DELIVERY_WAIT_NS;
                if go {
                    r.mcast_awaiting.swap_remove(k);
                    if !r.free.contains(&slot) {
                        r.free.push(slot);
                    }
                } else {
                    k += 1;
                }
            }
            if !r.mcast_awaiting.is_empty() {
                wake_at(now + MCAST_DELIVERY_POLL_NS);
            }
        }
    }

    /// A multicast landed in one of port `pi`'s receive buffers: check it
    /// into its member's stream, then relay it (host and assisted
    /// schemes) or give the buffer back.
    pub(super) fn on_mcast_received(&mut self, pi: usize, ev: &Event, info: McastInfo) {
        let Event::Received { len, tag, .. } = *ev else { return };
        let Some((pool, idx)) = self.buffer_of(pi, tag) else { return };
        let flow = self.ledger.borrow().groups.get(&info.group).copied();
        let ci = flow.and_then(|f| self.mcasts.iter().position(|c| c.flow == f && c.rank > 0));
        let (Some(flow), Some(ci)) = (flow, ci) else {
            self.problem(format!(
                "port {}: multicast {} of group {}, which this node receives in no flow",
                self.ports[pi].num, info.mseq, info.group
            ));
            return self.repost(pi, pool, idx);
        };
        let buf = self.ports[pi].pools[pool].bufs[idx];
        let n = len as usize;
        let data_ok = len as u64 <= buf.len;
        if data_ok {
            if self.scratch.len() < n {
                self.scratch.resize(n, 0);
            }
            let _ = self.ports[pi].port.read(&buf, 0, &mut self.scratch[..n]);
        } else {
            self.problem(format!(
                "multicast {}: {len} bytes in a {}-byte buffer",
                info.mseq, buf.len
            ));
        }
        let c = &self.mcasts[ci];
        let (rank, scheme) = (c.rank, c.scheme);
        let host_children = match scheme {
            Scheme::Host | Scheme::Assisted => {
                children_computed(c.alg, c.group.size(), rank) as u64
            }
            _ => 0,
        };
        let nic_ops = self.tree_ops_credit(scheme);
        let now = self.host.now_ns();
        let verdict = {
            let mut l = self.ledger.borrow_mut();
            l.resolved += 1;
            let f = &mut l.flows[flow];
            f.mcast_tree_work(info.mseq as u64, host_children, nic_ops);
            let data = if data_ok { &self.scratch[..n] } else { &[] };
            f.mcast_receive(rank, data, now, info.mseq as u64)
        };
        if let Verdict::Good(i) = verdict {
            if i != info.mseq as u64 {
                self.problem(format!(
                    "multicast of group {}: the event says mseq {}, the content is message {i}",
                    info.group, info.mseq
                ));
            }
        }
        if host_children == 0 {
            return self.repost(pi, pool, idx);
        }
        let group = self.mcasts[ci].group.clone();
        self.queue_relay(pi, ev, (pool, idx), flow, group);
    }

    /// A relay's part (host and assisted schemes) for multicast `ev` of
    /// `flow`'s `group`, received into buffer `(pool, idx)` of port `pi`:
    /// the host works out its children now (its CPU time passes) and
    /// posts them when that time has passed (`retry_relays`). Nothing to
    /// relay: the buffer is posted again.
    pub(super) fn queue_relay(
        &mut self,
        pi: usize,
        ev: &Event,
        (pool, idx): (usize, usize),
        flow: usize,
        group: Group,
    ) {
        match self.ports[pi].port.relay_prepare(ev, &group) {
            Ok(Some(plan)) => {
                let due = self.host.now_ns();
                self.pending_relays.push_back(PendingRelay {
                    port: pi,
                    ev: *ev,
                    pool,
                    idx,
                    flow,
                    group,
                    plan,
                    due,
                });
            }
            Ok(None) => self.repost(pi, pool, idx),
            Err(e) => {
                let mseq = match ev {
                    Event::Received { mcast: Some(info), .. } => info.mseq,
                    _ => 0,
                };
                self.problem(format!("relaying multicast {mseq}: {e}"));
                self.repost(pi, pool, idx);
            }
        }
    }

    /// Post a relay's sends out of its receive buffer; the buffer stays
    /// lent until they complete. Not possible yet: queued.
    fn relay(&mut self, p: PendingRelay) {
        let (pi, pool, idx, flow) = (p.port, p.pool, p.idx, p.flow);
        let Event::Received { size_class, .. } = p.ev else { return };
        let buf = self.ports[pi].pools[pool].bufs[idx];
        let pc = &mut self.ports[pi];
        let before = pc.port.stats().posted;
        let tag = relay_tag(pool, idx);
        let r = pc.port.relay_post(&p.plan, &p.group, &buf, size_class, tag);
        let partial = (pc.port.stats().posted - before) as u32;
        match r {
            Ok(descriptors) => {
                self.lent.insert((pi, pool, idx), (descriptors, flow));
            }
            Err(DriverError::NoSendToken | DriverError::RingFull) if partial == 0 => {
                self.pending_relays.push_back(p);
            }
            Err(e) => {
                let name = self.ledger.borrow().flows[flow].spec.name.clone();
                self.problem(format!(
                    "flow {name}: relaying a multicast: the driver posted {partial} \
                     descriptors, then failed: {e}"
                ));
                if partial > 0 {
                    self.lent.insert((pi, pool, idx), (partial, flow));
                } else {
                    self.repost(pi, pool, idx);
                }
            }
        }
    }

    /// Post the relays whose host time had passed when this step began
    /// (`began`), and again those that found no send token or ring room;
    /// be woken for the others.
    pub(super) fn retry_relays(&mut self, began: u64, wake_at: &mut dyn FnMut(u64)) {
        for _ in 0..self.pending_relays.len() {
            let Some(p) = self.pending_relays.pop_front() else { break };
            if p.due > began {
                wake_at(p.due);
                self.pending_relays.push_back(p);
            } else {
                self.relay(p);
            }
        }
    }

    /// A relay's send out of receive buffer (`pool`, `idx`) of port `pi`
    /// completed: the buffer goes back once all of them have.
    pub(super) fn on_relay_sent(&mut self, pi: usize, pool: usize, idx: usize, status: SendStatus) {
        let key = (pi, pool, idx);
        let Some((left, flow)) = self.lent.get_mut(&key) else {
            self.problem(format!("a relay completion for a buffer not lent ({pool}, {idx})"));
            return;
        };
        *left -= 1;
        let (done, flow) = (*left == 0, *flow);
        if status != SendStatus::Ok {
            if !self.cut_now(flow) {
                let name = self.ledger.borrow().flows[flow].spec.name.clone();
                self.problem(format!("flow {name}: a relay's send completed with {status:?}"));
            }
            let mut l = self.ledger.borrow_mut();
            let f = &mut l.flows[flow];
            f.send_errors += 1;
            if let Some(m) = f.mcast.as_mut() {
                m.relay_errors += 1;
            }
        }
        if done {
            self.lent.remove(&key);
            self.repost(pi, pool, idx);
        }
    }
}
