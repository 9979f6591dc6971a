//! What a node's program does with its ports' events: a port opened, a
//! message received (read, checked into the ledger, its buffer posted
//! again; a ping-pong's next message queued), a send completed (its slot
//! freed, a failure accounted for), a descriptor refused.

use host_brm::BrmTransport;
use host_driver::{DriverError, Event, SendStatus};

use super::super::format::StreamKey;
use super::super::ledger::Verdict;
use super::super::plan::{Dir, RoleKind};
use super::bcast::is_bcast_tag;
use super::coll::COLL_TAG;
use super::tags::{decode_recv_tag, decode_relay_tag, decode_send_tag, recv_tag, RECV_TAG};
use super::{NodeApp, NodeHost};

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Take every event of every port.
    pub(super) fn drain_events(&mut self) -> u64 {
        let mut n = 0;
        for pi in 0..self.ports.len() {
            while let Some(ev) = self.ports[pi].port.poll() {
                n += 1;
                let now = self.host.trace_ns();
                self.log_call("event", self.ports[pi].num, now, || event_words(&ev));
                self.on_event(pi, &ev);
            }
        }
        self.events += n;
        n
    }

    /// (By reference: an event is large, most of it a multicast's
    /// lost-heads bitmap that a unicast event leaves empty.)
    fn on_event(&mut self, pi: usize, ev: &Event) {
        match *ev {
            Event::PortOpened { .. } => self.ports[pi].opened = true,
            Event::Received { mcast: Some(info), .. }
                if self.bcast_of(pi, info.group).is_some() =>
            {
                self.on_bcast_received(pi, ev, info)
            }
            Event::Received { mcast: Some(info), .. } => self.on_mcast_received(pi, ev, info),
            Event::Sent { tag, status, .. } if is_bcast_tag(tag) => self.on_bcast_sent(tag, status),
            Event::Received { node, port, priority, len, tag, .. } => {
                self.on_received(pi, node, port, priority, len, tag)
            }
            Event::Sent { tag, status, .. } if tag & COLL_TAG == COLL_TAG => {
                self.host_sent(tag, status)
            }
            Event::Sent { tag, status, ref mcast, .. } => {
                self.on_send_done(pi, tag, status, mcast.as_ref())
            }
            Event::Collective { group, cseq, status, .. } => {
                self.on_collective(pi, group, cseq, status)
            }
            Event::CollStep { group, cseq, step, .. } => self.on_coll_step(pi, group, cseq, step),
            Event::Error { cause, tag, .. } if is_bcast_tag(tag) => {
                self.problem(format!("a broadcast's multicast refused: {cause:?}"));
                self.on_bcast_sent(tag, SendStatus::Dropped)
            }
            Event::Error { cause, tag, .. } if tag & COLL_TAG == COLL_TAG => {
                self.problem(format!("a collective message refused: {cause:?}"));
                self.host_sent(tag, SendStatus::Dropped)
            }
            Event::Error { cause, tag, desc_kind, .. } => {
                self.problem(format!(
                    "port {}: the NIC refused a {:?} descriptor (tag {tag:#x}): {cause:?}",
                    self.ports[pi].num, desc_kind
                ));
                if tag & RECV_TAG == 0 && desc_kind.is_some_and(|k| k.uses_send_token()) {
                    self.on_send_done(pi, tag, SendStatus::Dropped, None);
                }
            }
            other => {
                self.problem(format!("port {}: unexpected event {other:?}", self.ports[pi].num))
            }
        }
    }

    fn on_received(
        &mut self,
        pi: usize,
        node: u16,
        port: u8,
        priority: host_driver::Priority,
        len: u32,
        tag: u64,
    ) {
        let Some((pool, idx)) = self.buffer_of(pi, tag) else { return };
        let buf = self.ports[pi].pools[pool].bufs[idx];
        if let Some(ci) = self.host_coll_of(pi, node) {
            let mut msg = vec![0u8; (len as u64).min(buf.len) as usize];
            let _ = self.ports[pi].port.read(&buf, 0, &mut msg);
            self.repost(pi, pool, idx);
            return self.host_received(ci, node, &msg);
        }
        let key = StreamKey {
            src_node: node,
            src_port: port,
            dst_node: self.node,
            dst_port: self.ports[pi].num,
            priority,
        };
        let now = self.host.now_ns();
        let len = len as usize;
        let found = self
            .my_streams
            .binary_search_by_key(&key.packed(), |&(k, _)| k)
            .ok()
            .map(|i| self.my_streams[i].1);
        match found {
            Some((flow, dir)) if len as u64 <= buf.len => {
                // Checked where it lies when the host lets the program
                // reach its memory (the sim), else copied out first.
                let mut verdict = None;
                let mut check = |data: &[u8]| {
                    let mut l = self.ledger.borrow_mut();
                    l.resolved += 1;
                    verdict = Some(l.flows[flow].receive(dir, data, now));
                };
                if !self.host.in_place(buf.bus, len, &mut check) {
                    if self.scratch.len() < len {
                        self.scratch.resize(len, 0);
                    }
                    let _ = self.ports[pi].port.read(&buf, 0, &mut self.scratch[..len]);
                    check(&self.scratch[..len]);
                }
                let verdict = verdict.expect("the message was checked");
                self.after_receive(flow, dir, verdict);
            }
            Some((flow, dir)) => {
                // Longer than its buffer: the NIC should never do this.
                self.problem(format!("{key}: a {len}-byte message in a {}-byte buffer", buf.len));
                let v = self.ledger.borrow_mut().flows[flow].receive(dir, &[], now);
                self.after_receive(flow, dir, v);
            }
            None => self.problem(format!("a message from no flow: {key}, {len} bytes")),
        }
        self.repost(pi, pool, idx);
    }

    /// The (pool, index) of port `pi`'s receive buffer a Received event's
    /// tag names; None (a problem noted) if it names none.
    pub(super) fn buffer_of(&self, pi: usize, tag: u64) -> Option<(usize, usize)> {
        match decode_recv_tag(tag) {
            Some((p, i))
                if p < self.ports[pi].pools.len() && i < self.ports[pi].pools[p].bufs.len() =>
            {
                Some((p, i))
            }
            _ => {
                self.problem(format!("received into an unknown buffer (tag {tag:#x})"));
                None
            }
        }
    }

    /// Ping-pong: a request asks for its reply; a reply lets the next
    /// request go.
    fn after_receive(&mut self, flow: usize, dir: Dir, v: Verdict) {
        if !self.ping_roles {
            return;
        }
        let next = match v {
            Verdict::Good(i) | Verdict::Ahead(i) | Verdict::Corrupted(i) => i,
            Verdict::Duplicate(_) | Verdict::Late(_) => return,
        };
        let want = match dir {
            Dir::Forward => RoleKind::PingResponder,
            Dir::Reply => RoleKind::PingInitiator,
        };
        if let Some(ri) = self.roles.iter().position(|r| r.flow == flow && r.kind == want) {
            let r = &mut self.roles[ri];
            let m = if dir == Dir::Forward { next } else { next + 1 };
            if m < r.messages {
                r.queue.push_back(m);
                self.role_may_send(ri);
            }
        }
    }

    pub(super) fn repost(&mut self, pi: usize, pool: usize, idx: usize) {
        let began = self.host.trace_ns();
        let pc = &mut self.ports[pi];
        let q = &pc.pools[pool];
        match pc.port.provide_receive_buffer(&q.bufs[idx], q.class, q.priority, recv_tag(pool, idx))
        {
            Ok(()) => {
                let (num, class, len) = (pc.num, q.class, q.bufs[idx].len);
                self.log_call("provide", num, began, || {
                    format!("a {len} B buffer, size class {class}")
                });
            }
            Err(DriverError::RingFull | DriverError::NoRecvToken) => {
                pc.repost.push_back((pool, idx))
            }
            Err(e) => {
                let n = pc.num;
                self.problem(format!("port {n}: posting a receive buffer again: {e}"));
            }
        }
    }

    pub(super) fn repost_pending(&mut self) {
        for pi in 0..self.ports.len() {
            let n = self.ports[pi].repost.len();
            for _ in 0..n {
                if let Some((pool, idx)) = self.ports[pi].repost.pop_front() {
                    self.repost(pi, pool, idx);
                }
            }
        }
    }

    /// A send of port `pi` completed (or its descriptor was refused): a
    /// relay's, a multicast root's, or a unicast role's.
    fn on_send_done(
        &mut self,
        pi: usize,
        tag: u64,
        status: SendStatus,
        mcast: Option<&nic_abi::event::McastInfo>,
    ) {
        if let Some((pool, idx)) = decode_relay_tag(tag) {
            return self.on_relay_sent(pi, pool, idx, status);
        }
        let (ri, _, msg) = decode_send_tag(tag);
        if self.roles.get(ri).is_some_and(|r| r.kind == RoleKind::McastRoot) {
            return self.on_mcast_root_sent(ri, msg, status, mcast.copied());
        }
        self.on_sent(tag, status == SendStatus::Ok, status)
    }

    fn on_sent(&mut self, tag: u64, ok: bool, status: SendStatus) {
        let (ri, slot, msg) = decode_send_tag(tag);
        let Some(r) = self.roles.get_mut(ri) else {
            self.problem(format!("a completion with an unknown tag {tag:#x}"));
            return;
        };
        if slot < r.slots.len() && !r.free.contains(&slot) {
            r.free.push(slot);
        }
        self.role_may_send(ri);
        let r = &mut self.roles[ri];
        let dir = r.sends();
        let (flow, kind, port, peer_node, peer_port, prio) =
            (r.flow, r.kind, r.port, r.peer_node, r.peer_port, r.priority);
        if !ok {
            // The request will get no reply: go on with the next one.
            if kind == RoleKind::PingInitiator && msg + 1 < r.messages {
                r.queue.push_back(msg + 1);
            }
            // After a NIC reset its peers' sends to it fail: counted, not
            // a problem.
            if !self.cut_now(flow) {
                let name = self.ledger.borrow().flows[flow].spec.name.clone();
                self.problem(format!(
                    "flow {name}: message {msg} ({dir:?}) completed with {status:?}"
                ));
            }
            if status == SendStatus::TimedOut {
                // Later sends to that target are dropped until resumed.
                let _ = self.ports[port].port.resume(peer_node, peer_port, prio);
            }
        }
        let mut l = self.ledger.borrow_mut();
        l.flows[flow].send_done(dir, msg, ok);
        if !ok {
            l.resolved += 1;
            *l.flows[flow].send_error_statuses.entry(format!("{status:?}")).or_default() += 1;
        }
    }
}

/// An event in a few words, for the host track of a trace.
fn event_words(ev: &Event) -> String {
    match ev {
        Event::PortOpened { .. } => "port opened".into(),
        Event::Received { node, port, len, mcast, .. } => format!(
            "received {len} B from {node}:{port}{}",
            if mcast.is_some() { " (multicast)" } else { "" }
        ),
        Event::Sent { status, .. } => format!("send completed: {status:?}"),
        Event::Error { cause, .. } => format!("descriptor refused: {cause:?}"),
        other => format!("{other:?}"),
    }
}
