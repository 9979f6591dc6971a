//! Multicast: groups, the root's call and the relay step host programs
//! run in their poll loops.
//!
//! A [`Group`] is a root and its destinations in rank order (the root at
//! rank 0), all on one port. Every member knows it: each member's program
//! builds the same `Group` and calls [`Nic::create_group`], which installs
//! it in its own NIC's group table (the group's id is the table slot) with
//! this NIC's rank and its children in the tree cached for
//! `nic-cached`. A multicast then names only the group and a number.
//!
//! Who serves the tree is the [`Scheme`]:
//! - `Host`: the root's host computes its children and posts one send per
//!   child; each relay's host does the same when the message arrives
//!   ([`Port::relay`]).
//! - `Nic`: the root posts one descriptor; every NIC computes its children
//!   and relays the packets itself.
//! - `NicCached`: the same, the children read from the group table.
//! - `Assisted`: the root's host computes its children and posts one
//!   descriptor listing them; a relay's host hands its NIC its child list
//!   with one descriptor when the message arrives ([`Port::relay`]).
//!
//! The root's completion: one `Sent` event (with `mcast`) when the whole
//! group has the message (`Nic`, `NicCached`, `Assisted`; its
//! `unreached` counts members that could not be reached), or one `Sent`
//! per child when that child has it (`Host`).

use nic_abi::desc::{self, DescKind, Descriptor, ListedChild, McastFields, DESC_SIZE};
use nic_abi::event::McastInfo;
use nic_abi::group::{self, GroupHead, GROUP_VALID};
use nic_abi::map;
use nic_abi::multicast::{children, Child};
pub use nic_abi::multicast::{Algorithm, Scheme, MAX_GROUP};
use nic_abi::Priority;

use crate::backend::{HostOp, NicBackend};
use crate::memory::DmaBuf;
use crate::nic::Nic;
use crate::port::Port;
use crate::{DriverError, Event};

/// A multicast group: its id (a slot of the NIC's group table), the port
/// every member uses, and its members in rank order (the root first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    id: u16,
    port: u8,
    members: Vec<u16>,
}

impl Group {
    /// A group of `members` (root first, no node twice, at most
    /// `MAX_GROUP`), with id `id` (below `map::GROUP_ENTRIES`).
    pub fn new(id: u16, port: u8, members: Vec<u16>) -> Result<Group, DriverError> {
        if id as u32 >= map::GROUP_ENTRIES {
            return Err(DriverError::BadGroup("id beyond the group table"));
        }
        if port as usize >= nic_abi::NUM_PORTS {
            return Err(DriverError::BadPort(port));
        }
        if members.len() < 2 || members.len() > MAX_GROUP {
            return Err(DriverError::BadGroup(
                "a group has 2 to 1024 members: the root and at least one other node",
            ));
        }
        let mut seen = members.clone();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(DriverError::BadGroup("a node appears twice"));
        }
        Ok(Group { id, port, members })
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn port(&self) -> u8 {
        self.port
    }

    /// G: members, the root included.
    pub fn size(&self) -> u16 {
        self.members.len() as u16
    }

    pub fn root(&self) -> u16 {
        self.members[0]
    }

    pub fn members(&self) -> &[u16] {
        &self.members
    }

    pub fn rank_of(&self, node: u16) -> Option<u16> {
        self.members.iter().position(|&m| m == node).map(|r| r as u16)
    }

    /// The children of `rank` under `alg`, in send order: (node, subtree).
    pub fn children(&self, alg: Algorithm, rank: u16) -> Vec<ListedChild> {
        children(alg, self.size(), rank)
            .map(|Child { rank, subtree }| ListedChild {
                node: self.members[rank as usize],
                subtree,
            })
            .collect()
    }

    /// The members a multicast of this group did not reach, from the
    /// root's completion `info`: every member of each subtree whose head
    /// it names (the tree is `info`'s algorithm, so the subtree a node
    /// heads is known here), in rank order. `complete` says whether that
    /// is all of them: false when the root could only count some (members
    /// that did not answer in time, or NICs with no room left to list
    /// them), and then `count` is how many there are in all.
    pub fn not_reached(&self, info: &McastInfo) -> NotReached {
        let mut ranks = Vec::new();
        if let Some(alg) = Algorithm::from_code(info.alg, info.k) {
            for node in info.lost.iter() {
                let Some(head) = self.rank_of(node) else { continue };
                ranks.extend(nic_abi::multicast::subtree_ranks(alg, self.size(), head));
            }
        }
        ranks.sort_unstable();
        ranks.dedup();
        let members: Vec<u16> = ranks.iter().map(|&r| self.members[r as usize]).collect();
        let complete = members.len() == info.unreached as usize;
        NotReached { members, complete, count: info.unreached }
    }
}

/// Which members a multicast did not reach ([`Group::not_reached`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReached {
    /// Node ids, in rank order.
    pub members: Vec<u16>,
    /// `members` is every member not reached.
    pub complete: bool,
    /// Members not reached in all (the root's count).
    pub count: u16,
}

/// One multicast to post at the root (or, from [`Port::relay`], at a
/// relay): the data, the group, how.
#[derive(Debug, Clone, Copy)]
pub struct Multicast<'a> {
    pub buf: &'a DmaBuf,
    pub offset: u64,
    pub len: u32,
    /// Receive buffers of this class and priority take it at every member.
    pub size_class: u8,
    pub priority: Priority,
    pub group: &'a Group,
    pub scheme: Scheme,
    pub algorithm: Algorithm,
    /// The multicast's number in its group (members see it in their
    /// events; one number per multicast of the group).
    pub mseq: u32,
    /// Returned in the completion event(s).
    pub tag: u64,
}

impl<B: NicBackend> Nic<B> {
    /// Install `group` in this NIC's group table: this NIC's rank, the
    /// members, and its children in the `cached` tree (for `NicCached`).
    /// Every member calls it on its own NIC before the first multicast.
    pub fn create_group(&self, group: &Group, cached: Algorithm) -> Result<(), DriverError> {
        let me = self.node_id();
        let rank = group.rank_of(me).ok_or(DriverError::BadGroup("this node is not a member"))?;
        if group.members.iter().any(|&m| m as u32 >= self.num_nodes()) {
            return Err(DriverError::BadGroup("a member is beyond the cluster"));
        }
        let kids: Vec<Child> = children(cached, group.size(), rank).collect();
        self.backend().charge(HostOp::TreeWork(kids.len() as u32));
        let be = self.backend();
        let id = group.id as u32;
        let entry = map::group_entry(id);
        be.sram_store_u32(entry + group::VALID, 0);
        let head = GroupHead {
            size: group.size(),
            rank,
            port: group.port,
            alg: cached.code(),
            k: cached.k(),
            nchildren: kids.len() as u16,
        };
        let mut b = [0u8; GroupHead::LEN];
        head.encode(&mut b);
        be.sram_write(entry, &b);
        let members: Vec<u8> = group.members.iter().flat_map(|m| m.to_le_bytes()).collect();
        be.sram_write(entry + group::MEMBERS, &members);
        let list: Vec<u8> = kids
            .iter()
            .flat_map(|c| c.rank.to_le_bytes().into_iter().chain(c.subtree.to_le_bytes()))
            .collect();
        be.sram_write(entry + group::CHILDREN, &list);
        be.sram_store_u32(entry + group::VALID, GROUP_VALID);
        // A live backend's device process may refuse the entry (the group
        // id is another process's).
        be.commit().map_err(|_| DriverError::BadGroup("the NIC's privileged side refused it"))
    }
}

/// A relay's children for one received multicast ([`Port::relay_prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayPlan {
    pub scheme: Scheme,
    pub algorithm: Algorithm,
    pub mseq: u32,
    pub len: u32,
    pub priority: Priority,
    pub children: Vec<ListedChild>,
}

/// What a root's host worked out for one multicast before posting it
/// ([`Port::multicast_prepare`]), for [`Port::multicast_post`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootPlan {
    scheme: Scheme,
    mseq: u32,
    /// The root's children in send order (host and assisted schemes).
    children: Vec<ListedChild>,
    /// Host scheme: the first child this post covers.
    from: usize,
    /// Host scheme: the children the first post covers (their separate
    /// addressing steps charged); assisted: all of them; NIC schemes: 0.
    batch: usize,
}

impl RootPlan {
    /// Host scheme: the children the post covers (the rest go with
    /// [`Port::multicast_more`]); assisted: the children listed; else 0.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Host scheme: the part of the plan a [`Port::multicast_post`] that
    /// posted `posted` descriptors left (other sends took the tokens or
    /// ring room meanwhile), its host work already done: post it with
    /// [`Port::multicast_post`] as tokens come back. None when the post
    /// covered the plan, and for the other schemes (they post whole or
    /// not at all).
    pub fn rest(&self, posted: u32) -> Option<RootPlan> {
        let posted = posted as usize;
        (self.scheme == Scheme::Host && posted < self.batch).then(|| RootPlan {
            children: self.children.clone(),
            from: self.from + posted,
            batch: self.batch - posted,
            ..*self
        })
    }
}

/// What [`Port::relay`] did with a received event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relayed {
    /// Not a multicast, or one this host has nothing to do for (a leaf, or
    /// the NIC serves the tree): nothing posted.
    Nothing,
    /// Posted `descriptors` descriptors to this node's children (each
    /// takes a send token and completes with a `Sent` event; the receive
    /// buffer must stay as it is until they have).
    Posted { descriptors: u32 },
}

/// Send ring slots a multicast descriptor listing `n` children takes.
const fn listed_slots(n: usize) -> usize {
    1 + desc::child_slots(n)
}

/// Ring slots a host-scheme root's send to one child takes.
const PER_CHILD: u32 = listed_slots(1) as u32;

impl<B: NicBackend> Port<B> {
    /// Post a multicast (see the module doc for what each scheme posts).
    /// Returns the number of descriptors posted (each one send token and
    /// one `Sent` event). The host scheme posts one per child of the root
    /// as far as send tokens go: when that is fewer than the root's
    /// children ([`Group::children`] of rank 0), post the rest with
    /// [`Port::multicast_more`] as `Sent` events bring tokens back. The
    /// same as [`Port::multicast_prepare`] then [`Port::multicast_post`].
    pub fn multicast(&mut self, m: &Multicast<'_>) -> Result<u32, DriverError> {
        let plan = self.multicast_prepare(m)?;
        self.multicast_post(m, &plan)
    }

    /// The first half of [`Port::multicast`]: check the request and do the
    /// root host's work before its first post, charged to its CPU: its
    /// children computed (host and assisted schemes), and under the host
    /// scheme separate addressing's step per destination (for each child
    /// its send tokens and ring room cover now). Nothing is posted. A program that models its host's
    /// time (the simulator's) posts the plan once that time has passed,
    /// with [`Port::multicast_post`]: a NIC must not see a descriptor
    /// before the host work that precedes it is done.
    pub fn multicast_prepare(&mut self, m: &Multicast<'_>) -> Result<RootPlan, DriverError> {
        let g = m.group;
        if g.port != self.number() {
            return Err(DriverError::BadGroup("the group is on another port"));
        }
        let me = self.backend_node();
        if g.root() != me {
            return Err(DriverError::BadGroup("only the group's root starts a multicast"));
        }
        // The multicast reaches every member (through relays): a reset
        // or a NIC gone among them ends a wait for its completion.
        for &member in &g.members {
            self.watch(member);
        }
        let kids = g.children(m.algorithm, 0);
        if matches!(m.scheme, Scheme::Host | Scheme::Assisted) {
            self.be.charge(HostOp::TreeWork(kids.len() as u32));
        }
        let batch = match m.scheme {
            Scheme::Host => {
                let batch = self.host_batch(kids.len(), 0);
                if m.algorithm == Algorithm::Separate {
                    for _ in 0..batch {
                        self.be.charge(HostOp::RelayStep(m.algorithm.code()));
                    }
                }
                batch
            }
            // The assisted root computes its list (its tree work, above)
            // and hands it to its NIC in one descriptor: no relay step,
            // for separate addressing as for the trees (the latency model
            // charges the root's host nothing before its post).
            Scheme::Assisted => kids.len(),
            Scheme::Nic | Scheme::NicCached => 0,
        };
        Ok(RootPlan { scheme: m.scheme, mseq: m.mseq, children: kids, from: 0, batch })
    }

    /// The second half of [`Port::multicast`]: post what
    /// [`Port::multicast_prepare`] worked out for `m`. Returns the
    /// descriptors posted. Under the host scheme these are the sends to the
    /// children the plan covers, as far as send tokens and ring room go
    /// now: fewer, even none, when other sends took some meanwhile; then
    /// post [`RootPlan::rest`] as `Sent` events bring tokens back (its
    /// host work is done). Children beyond the plan go with
    /// [`Port::multicast_more`].
    pub fn multicast_post(
        &mut self,
        m: &Multicast<'_>,
        plan: &RootPlan,
    ) -> Result<u32, DriverError> {
        if plan.scheme != m.scheme || plan.mseq != m.mseq {
            return Err(DriverError::BadGroup("the plan is another multicast's"));
        }
        match m.scheme {
            Scheme::Host => {
                let end = plan.from.saturating_add(plan.batch).min(plan.children.len());
                let room = self.host_batch(end, plan.from);
                self.post_mcast(m, &plan.children[plan.from..plan.from + room])
            }
            _ => self.post_mcast(m, &plan.children),
        }
    }

    /// Host scheme at the root: how many of `n` children from the `from`-th
    /// on the send tokens and send ring slots free now cover.
    fn host_batch(&mut self, n: usize, from: usize) -> usize {
        let left = n.saturating_sub(from) as u32;
        let slots = self.ring_free(left.saturating_mul(PER_CHILD)) / PER_CHILD;
        self.send_tokens_free().min(slots).min(left) as usize
    }

    /// Host scheme at the root: post the sends to its children from the
    /// `from`-th on, as far as send tokens and send ring slots go
    /// (separate addressing: the host's step per destination first).
    /// Returns how many were posted.
    pub fn multicast_more(&mut self, m: &Multicast<'_>, from: usize) -> Result<u32, DriverError> {
        let plan = self.multicast_more_prepare(m, from)?;
        self.multicast_post(m, &plan)
    }

    /// The first half of [`Port::multicast_more`]: the host's work for the
    /// children from the `from`-th on that send tokens and ring room cover
    /// now (separate addressing's step for each), charged; post them with
    /// [`Port::multicast_post`] once that time has passed.
    pub fn multicast_more_prepare(
        &mut self,
        m: &Multicast<'_>,
        from: usize,
    ) -> Result<RootPlan, DriverError> {
        if m.scheme != Scheme::Host {
            return Err(DriverError::BadGroup("only the host scheme posts per child"));
        }
        let kids = m.group.children(m.algorithm, 0);
        let from = from.min(kids.len());
        let batch = self.host_batch(kids.len(), from);
        if m.algorithm == Algorithm::Separate {
            for _ in 0..batch {
                self.be.charge(HostOp::RelayStep(m.algorithm.code()));
            }
        }
        Ok(RootPlan { scheme: m.scheme, mseq: m.mseq, children: kids, from, batch })
    }

    /// A relay's part (host and assisted schemes) for a received event:
    /// post this node's sends to its children from the receive buffer
    /// `buf` the message landed in (`size_class` as the root sent it);
    /// their completions carry `tag`. Nothing for other events. The same
    /// as [`Port::relay_prepare`] then [`Port::relay_post`].
    pub fn relay(
        &mut self,
        ev: &Event,
        group: &Group,
        buf: &DmaBuf,
        size_class: u8,
        tag: u64,
    ) -> Result<Relayed, DriverError> {
        match self.relay_prepare(ev, group)? {
            None => Ok(Relayed::Nothing),
            Some(plan) => {
                let descriptors = self.relay_post(&plan, group, buf, size_class, tag)?;
                Ok(Relayed::Posted { descriptors })
            }
        }
    }

    /// The first half of a relay: work out this node's children for a
    /// received multicast (the host's processing, charged to its CPU).
    /// None when there is nothing to relay. A program that models its
    /// host's time (the simulator's) posts the plan once that time has
    /// passed, with [`Port::relay_post`].
    pub fn relay_prepare(
        &mut self,
        ev: &Event,
        group: &Group,
    ) -> Result<Option<RelayPlan>, DriverError> {
        let Event::Received { len, priority, mcast: Some(info), .. } = *ev else {
            return Ok(None);
        };
        let scheme = Scheme::from_code(info.scheme).ok_or(DriverError::BadGroup("scheme"))?;
        if !matches!(scheme, Scheme::Host | Scheme::Assisted) || info.group != group.id {
            return Ok(None);
        }
        let algorithm =
            Algorithm::from_code(info.alg, info.k).ok_or(DriverError::BadGroup("algorithm"))?;
        let rank =
            group.rank_of(self.backend_node()).ok_or(DriverError::BadGroup("not a member"))?;
        let children = group.children(algorithm, rank);
        if children.is_empty() {
            return Ok(None);
        }
        self.be.charge(HostOp::RelayStep(algorithm.code()));
        self.be.charge(HostOp::TreeWork(children.len() as u32));
        Ok(Some(RelayPlan { scheme, algorithm, mseq: info.mseq, len, priority, children }))
    }

    /// The second half of a relay: post the plan's sends from `buf`.
    /// Returns the descriptors posted (each completes with a `Sent`
    /// carrying `tag`; `buf` must stay as it is until they have).
    pub fn relay_post(
        &mut self,
        plan: &RelayPlan,
        group: &Group,
        buf: &DmaBuf,
        size_class: u8,
        tag: u64,
    ) -> Result<u32, DriverError> {
        let m = Multicast {
            buf,
            offset: 0,
            len: plan.len,
            size_class,
            priority: plan.priority,
            group,
            scheme: plan.scheme,
            algorithm: plan.algorithm,
            mseq: plan.mseq,
            tag,
        };
        self.post_mcast(&m, &plan.children)
    }

    fn backend_node(&self) -> u16 {
        self.node
    }

    /// Post multicast `m` to `kids` (used by the host and assisted
    /// schemes; the NIC finds its own children in the others).
    fn post_mcast(&mut self, m: &Multicast<'_>, kids: &[ListedChild]) -> Result<u32, DriverError> {
        let local = m.buf.vaddr_at(m.offset, m.len as u64)?;
        let d = Descriptor {
            kind: DescKind::Multicast,
            priority: m.priority,
            size_class: m.size_class,
            target_port: m.group.port,
            target_node: m.group.id,
            local,
            len: m.len,
            remote: 0,
            tag: m.tag,
        };
        let fields = |n: usize| McastFields {
            mseq: m.mseq,
            scheme: m.scheme.code(),
            alg: m.algorithm.code(),
            k: m.algorithm.k(),
            nchildren: n as u16,
        };
        match m.scheme {
            Scheme::Nic | Scheme::NicCached => {
                self.post_listed(&d, &fields(0), &[])?;
                Ok(1)
            }
            Scheme::Assisted => {
                if kids.len() > desc::MAX_LISTED_CHILDREN {
                    return Err(DriverError::BadGroup("more children than a descriptor lists"));
                }
                self.post_listed(&d, &fields(kids.len()), kids)?;
                Ok(1)
            }
            Scheme::Host => {
                if kids.len() as u32 > self.send_tokens_free() {
                    return Err(self.no_send_token());
                }
                let want = (kids.len() as u32).saturating_mul(PER_CHILD);
                if self.ring_free(want) < want {
                    return Err(DriverError::RingFull);
                }
                for c in kids {
                    self.post_listed(&d, &fields(1), std::slice::from_ref(c))?;
                }
                Ok(kids.len() as u32)
            }
        }
    }

    /// Post a multicast descriptor and its continuation slots (all or
    /// nothing: ring room for all is checked first).
    fn post_listed(
        &mut self,
        d: &Descriptor,
        f: &McastFields,
        kids: &[ListedChild],
    ) -> Result<(), DriverError> {
        let slots = listed_slots(kids.len());
        let mut bytes = vec![[0u8; DESC_SIZE as usize]; slots];
        d.encode(&mut bytes[0]);
        f.encode(&mut bytes[0]);
        for (i, c) in kids.iter().enumerate() {
            let (slot, at) = desc::child_at(i);
            c.encode(&mut bytes[slot], at);
        }
        self.post_slots(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(alg: Algorithm, unreached: u16, heads: &[u16]) -> McastInfo {
        let mut i = McastInfo {
            alg: alg.code(),
            k: match alg {
                Algorithm::KBinomial { k } => k,
                _ => 0,
            },
            unreached,
            ..McastInfo::default()
        };
        for &node in heads {
            i.lost.insert(node);
        }
        i
    }

    #[test]
    fn a_group_is_the_root_and_at_least_one_other_distinct_node() {
        let bad = |m: Vec<u16>| Group::new(1, 2, m).err();
        let short = Some(DriverError::BadGroup(
            "a group has 2 to 1024 members: the root and at least one other node",
        ));
        assert_eq!(bad(vec![]), short);
        assert_eq!(bad(vec![3]), short, "the root alone");
        assert_eq!(bad(vec![3, 3]), Some(DriverError::BadGroup("a node appears twice")));
        assert_eq!(bad((0..1025).collect()), short);
        assert_eq!(Group::new(1, 2, vec![3, 4]).map(|g| g.size()), Ok(2));
    }

    #[test]
    fn a_named_subtree_expands_into_its_members_by_node_id() {
        // Binary tree over 16 ranks; rank r is node 100 + 3r. Rank 1
        // heads ranks 1, 3, 4, 7, 8, 9, 10 and 15; rank 12 is a leaf.
        let members: Vec<u16> = (0..16).map(|r| 100 + 3 * r).collect();
        let g = Group::new(1, 2, members).unwrap();
        let n = g.not_reached(&info(Algorithm::Binary, 9, &[103, 136]));
        let want: Vec<u16> = [1, 3, 4, 7, 8, 9, 10, 12, 15].iter().map(|r| 100 + 3 * r).collect();
        assert_eq!(n, NotReached { members: want, complete: true, count: 9 });
    }

    #[test]
    fn members_only_counted_leave_the_answer_incomplete() {
        let g = Group::new(1, 2, (0..12).collect()).unwrap();
        // Separate addressing, three leaves lost: two named, one counted.
        let n = g.not_reached(&info(Algorithm::Separate, 3, &[4, 9]));
        assert_eq!(n, NotReached { members: vec![4, 9], complete: false, count: 3 });
        // Everything reached: nothing to name, and that is all.
        let n = g.not_reached(&info(Algorithm::Separate, 0, &[]));
        assert_eq!(n, NotReached { members: vec![], complete: true, count: 0 });
    }

    #[test]
    fn the_rest_of_a_host_plan_is_what_its_post_left() {
        let g = Group::new(1, 2, (0..8).collect()).unwrap();
        let children = g.children(Algorithm::Separate, 0);
        let plan = RootPlan { scheme: Scheme::Host, mseq: 4, children, from: 2, batch: 5 };
        assert_eq!(plan.rest(5), None, "all posted");
        let rest = plan.rest(0).expect("none posted: the whole plan");
        assert_eq!((rest.from, rest.batch()), (2, 5));
        let rest = plan.rest(3).expect("three posted");
        assert_eq!((rest.from, rest.batch(), rest.mseq), (5, 2, 4));
        assert_eq!(rest.rest(2), None);
        // The other schemes post whole or not at all.
        let nic = RootPlan { scheme: Scheme::Nic, batch: 0, ..plan.clone() };
        assert_eq!(nic.rest(0), None);
        let assisted = RootPlan { scheme: Scheme::Assisted, ..plan };
        assert_eq!(assisted.rest(0), None);
    }
}
