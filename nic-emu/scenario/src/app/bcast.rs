//! A broadcast collective flow run as a multicast (coll/bcast.rs) in a
//! member's program.
//!
//! Collective k is multicast number k of the flow's group (installed in
//! the multicast's rank order, the root first, with its tree cached for
//! `nic-cached`). The root member writes its input for k into its vector
//! and multicasts it (`Port::multicast`; under the host scheme one send
//! per child, as far as send tokens go, the rest as completions bring
//! them back); its part of k is complete when the multicast is (the one
//! `Sent`, or under the host scheme every child's). Every other member
//! keeps receive buffers of the vector's size class posted on the port;
//! a multicast of the group that lands there is read, handed on to the
//! member's children by its host under the host and assisted schemes
//! (mcast.rs, `queue_relay`), and kept by its number until the member
//! enters that collective, whose part it completes (its result: the
//! vector, checked against the root's input). A number already taken, or
//! one at or below the last completed, is counted as a duplicate. The
//! root starts k + 1 only once k is complete, so a member never mistakes
//! one broadcast's vector for another's.

use std::collections::BTreeMap;

use host_brm::BrmTransport;
use host_driver::{DriverError, Event, Multicast, Priority, SendStatus};
use nic_abi::event::McastInfo;
use nic_abi::multicast::{children_computed, Algorithm, Scheme};

use super::super::coll::BcastMcast;
use super::coll::COLL_TAG;
use super::{NodeApp, NodeHost};

/// A root's send tags: `BCAST_TAG | flow << 32 | k` (k's low 32 bits).
const BCAST_TAG: u64 = COLL_TAG | 1 << 61;

/// Is `tag` a broadcast root's send?
pub(super) fn is_bcast_tag(tag: u64) -> bool {
    tag & BCAST_TAG == BCAST_TAG
}

fn bcast_tag(flow: usize, k: u64) -> u64 {
    BCAST_TAG | (flow as u64 & 0xFFFF) << 32 | (k & 0xFFFF_FFFF)
}

/// A member's state of a broadcast run as a multicast.
pub(super) struct BcastRun {
    scheme: Scheme,
    alg: Algorithm,
    priority: Priority,
    /// This member's rank in the multicast (the root's is 0).
    mrank: u16,
    /// The root: the multicast of the collective running, once posted.
    post: Option<RootPost>,
    /// The others: vectors received before their collective began here
    /// (by number).
    held: BTreeMap<u64, Vec<u8>>,
}

/// The root's multicast of the collective running.
#[derive(Clone, Copy)]
struct RootPost {
    /// Completions still to come (one per descriptor posted so far).
    left: u32,
    /// Descriptors posted so far, and (host scheme) the root's children
    /// to post in all (0 for the other schemes: one descriptor).
    posted: u32,
    children: u32,
    ok: bool,
}

impl BcastRun {
    /// Member `mrank` of the multicast (the root: 0).
    pub(super) fn new(m: &BcastMcast, mrank: u16, priority: Priority) -> BcastRun {
        BcastRun {
            scheme: m.scheme,
            alg: m.alg(),
            priority,
            mrank,
            post: None,
            held: BTreeMap::new(),
        }
    }
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// The broadcast-as-multicast context of group `group` on port `pi`.
    pub(super) fn bcast_of(&self, pi: usize, group: u16) -> Option<usize> {
        self.colls.iter().position(|c| c.port == pi && c.bcast.is_some() && c.group.id() == group)
    }

    /// Enter collective `k` of `ci`: the root writes `input` and posts its
    /// multicast (false: not possible yet, again at a later step); a
    /// member has nothing to do until the vector comes.
    pub(super) fn bcast_start(&mut self, ci: usize, k: u64, input: &[u8]) -> bool {
        let c = &self.colls[ci];
        let Some(b) = c.bcast.as_ref() else { return false };
        if b.mrank != 0 {
            return true;
        }
        let (scheme, alg, priority, flow) = (b.scheme, b.alg, b.priority, c.flow);
        let p = &mut self.ports[c.port].port;
        if !input.is_empty() && p.write(&c.data, 0, input).is_err() {
            return false;
        }
        let m = Multicast {
            buf: &c.data,
            offset: 0,
            len: input.len() as u32,
            size_class: nic_abi::size_class_for(input.len() as u64),
            priority,
            group: &c.group,
            scheme,
            algorithm: alg,
            mseq: k as u32,
            tag: bcast_tag(flow, k),
        };
        match p.multicast(&m) {
            Ok(posted) => {
                let children = match scheme {
                    Scheme::Host => children_computed(alg, c.group.size(), 0),
                    _ => 0,
                };
                let post = RootPost { left: posted, posted, children, ok: true };
                if let Some(b) = self.colls[ci].bcast.as_mut() {
                    b.post = Some(post);
                }
                true
            }
            Err(DriverError::NoSendToken | DriverError::RingFull) => false,
            Err(e) => {
                let c = &mut self.colls[ci];
                c.next = c.spec.count + 1;
                self.problem(format!("flow {flow}: broadcast {k}: multicast: {e}"));
                false
            }
        }
    }

    /// Host scheme: the root posts the next children of its multicast, as
    /// far as send tokens and ring slots go.
    pub(super) fn bcast_post_more(&mut self, ci: usize) {
        let c = &self.colls[ci];
        let (Some(b), Some((k, _))) = (c.bcast.as_ref(), c.running) else { return };
        let Some(post) = b.post.filter(|p| p.posted < p.children) else { return };
        let m = Multicast {
            buf: &c.data,
            offset: 0,
            len: c.spec.bytes(),
            size_class: nic_abi::size_class_for(c.spec.bytes() as u64),
            priority: b.priority,
            group: &c.group,
            scheme: b.scheme,
            algorithm: b.alg,
            mseq: k as u32,
            tag: bcast_tag(c.flow, k),
        };
        let flow = c.flow;
        match self.ports[c.port].port.multicast_more(&m, post.posted as usize) {
            Ok(n) => {
                if let Some(p) = self.colls[ci].bcast.as_mut().and_then(|b| b.post.as_mut()) {
                    p.left += n;
                    p.posted += n;
                }
            }
            Err(DriverError::NoSendToken | DriverError::RingFull) => {}
            Err(e) => {
                self.problem(format!("flow {flow}: broadcast {k}: multicast: {e}"));
                if let Some(p) = self.colls[ci].bcast.as_mut().and_then(|b| b.post.as_mut()) {
                    p.children = p.posted;
                    p.ok = false;
                }
                self.bcast_settle(ci);
            }
        }
    }

    /// A completion of a broadcast root's multicast (its one `Sent`, or
    /// one per child under the host scheme; a refused descriptor too).
    pub(super) fn on_bcast_sent(&mut self, tag: u64, status: SendStatus) {
        let flow = ((tag >> 32) & 0xFFFF) as usize;
        let k = tag & 0xFFFF_FFFF;
        let Some(ci) = self.colls.iter().position(|c| c.flow == flow && c.bcast.is_some()) else {
            self.problem(format!("a broadcast completion (tag {tag:#x}) of no flow"));
            return;
        };
        let c = &mut self.colls[ci];
        let running = c.running.map(|r| r.0 & 0xFFFF_FFFF);
        let post = c.bcast.as_mut().and_then(|b| b.post.as_mut());
        let (Some(p), true) = (post, running == Some(k)) else {
            self.problem(format!("flow {flow}: a completion of broadcast {k}, not in flight"));
            return;
        };
        p.left = p.left.saturating_sub(1);
        p.ok &= status == SendStatus::Ok;
        if status != SendStatus::Ok {
            self.problem(format!("flow {flow}: broadcast {k}: a multicast send ended {status:?}"));
        }
        self.bcast_post_more(ci);
        self.bcast_settle(ci);
    }

    /// The root's part of the running broadcast ends once every child is
    /// posted and every completion came.
    fn bcast_settle(&mut self, ci: usize) {
        let Some(b) = self.colls[ci].bcast.as_mut() else { return };
        let Some(p) = b.post else { return };
        if p.left > 0 || p.posted < p.children {
            return;
        }
        b.post = None;
        self.coll_finish(ci, p.ok, None);
        self.coll_next(ci);
    }

    /// A multicast of a broadcast flow's group landed in one of port
    /// `pi`'s receive buffers: read it, hand it on (host and assisted
    /// relays) or post the buffer again, and keep it for its collective.
    pub(super) fn on_bcast_received(&mut self, pi: usize, ev: &Event, info: McastInfo) {
        let Event::Received { len, tag, .. } = *ev else { return };
        let Some((pool, idx)) = self.buffer_of(pi, tag) else { return };
        let Some(ci) = self.bcast_of(pi, info.group) else { return };
        let buf = self.ports[pi].pools[pool].bufs[idx];
        let mut v = vec![0u8; (len as u64).min(buf.len) as usize];
        let _ = self.ports[pi].port.read(&buf, 0, &mut v);
        let c = &self.colls[ci];
        let flow = c.flow;
        let relays = c.bcast.as_ref().is_some_and(|b| {
            matches!(b.scheme, Scheme::Host | Scheme::Assisted)
                && children_computed(b.alg, c.group.size(), b.mrank) > 0
        });
        if relays {
            let group = c.group.clone();
            self.queue_relay(pi, ev, (pool, idx), flow, group);
        } else {
            self.repost(pi, pool, idx);
        }
        let k = info.mseq as u64;
        let c = &mut self.colls[ci];
        let done_upto = c.running.map_or(c.next, |r| r.0) - 1;
        let Some(b) = c.bcast.as_mut() else { return };
        if k <= done_upto || b.held.insert(k, v).is_some() {
            self.ledger.borrow_mut().flows[flow].duplicates += 1;
            self.problem(format!("flow {flow}: broadcast {k} received twice"));
            return;
        }
        self.bcast_take(ci);
    }

    /// A member (not the root) completes the collective running when its
    /// vector has come.
    pub(super) fn bcast_take(&mut self, ci: usize) {
        let c = &mut self.colls[ci];
        let Some((k, _)) = c.running else { return };
        let Some(v) = c.bcast.as_mut().and_then(|b| b.held.remove(&k)) else { return };
        self.coll_finish(ci, true, Some(v));
        self.coll_next(ci);
    }
}
