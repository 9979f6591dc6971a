//! The ledger: what the apps of every node record about every flow, and
//! the checks that feed it. Each received message is judged against its
//! stream (`FlowLedger::receive`: the expected one intact, a duplicate,
//! ahead of its turn, or corrupted), each completed send is counted
//! (`FlowLedger::send_done`), and the report is built from it. One
//! `Ledger` is shared by the apps of a run (`SharedLedger`: the sim is one
//! thread); it knows nothing of ports or backends.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use super::format::{FlowKind, FlowSpec, StreamKey};
use super::pattern;
use super::plan::Dir;
use super::report::Samples;
use super::trace::HostCall;

/// One direction of a flow, as its receiver sees it.
#[derive(Debug, Default)]
pub struct StreamLedger {
    /// The message index expected next.
    pub expected: u64,
    /// Messages whose send failed (the receiver will not see them).
    pub failed: BTreeMap<u64, ()>,
    /// Failed messages the receiver's turn has passed (`skip_failed`): a
    /// multicast that failed for some members may still reach the others,
    /// after its root saw it fail.
    skipped: BTreeMap<u64, ()>,
}

impl StreamLedger {
    /// Has every message up to `expected` been received, none skipped as
    /// failed (a skipped one may still come: `Verdict::Late`)?
    pub fn all_received(&self) -> bool {
        self.skipped.is_empty()
    }

    fn skip_failed(&mut self) {
        while self.failed.remove(&self.expected).is_some() {
            self.skipped.insert(self.expected, ());
            self.expected += 1;
        }
    }
}

/// Send-call times by message index of the messages not yet answered: a
/// window's worth, sent in order and mostly answered in order, so kept in
/// index order (a lookup is at the front, or a binary search).
#[derive(Debug, Default)]
pub struct SendTimes(VecDeque<(u64, u64)>);

impl SendTimes {
    /// Record message `msg`'s send time; returns the one it replaces.
    pub fn insert(&mut self, msg: u64, t: u64) -> Option<u64> {
        if self.0.back().is_none_or(|&(m, _)| m < msg) {
            self.0.push_back((msg, t));
            return None;
        }
        match self.0.binary_search_by_key(&msg, |e| e.0) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, t)),
            Err(i) => {
                self.0.insert(i, (msg, t));
                None
            }
        }
    }

    /// Take message `msg`'s send time.
    pub fn remove(&mut self, msg: &u64) -> Option<u64> {
        if self.0.front().is_some_and(|e| e.0 == *msg) {
            return self.0.pop_front().map(|e| e.1);
        }
        let i = self.0.binary_search_by_key(msg, |e| e.0).ok()?;
        self.0.remove(i).map(|e| e.1)
    }
}

/// What happened to one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The expected message, intact.
    Good(u64),
    /// An intact message whose index was already delivered.
    Duplicate(u64),
    /// An intact multicast whose turn its member's stream skipped (the
    /// root saw it fail: a member a NIC reset took missed it) reaching
    /// this member after all.
    Late(u64),
    /// An intact message ahead of its turn (earlier ones were skipped).
    Ahead(u64),
    /// Wrong content or length: taken as the expected one, mangled.
    Corrupted(u64),
}

/// Everything about one flow the apps of both ends update.
#[derive(Debug)]
pub struct FlowLedger {
    pub spec: FlowSpec,
    pub streams: [StreamLedger; 2],
    /// Send-call times of requests (stream messages) not yet answered.
    pub send_ns: SendTimes,
    pub delivered: u64,
    pub bytes: u64,
    pub corrupted: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub send_errors: u64,
    /// Failed sends by status (its name, e.g. `TargetPortClosed`).
    pub send_error_statuses: BTreeMap<String, u64>,
    pub first_send_ns: Option<u64>,
    pub last_recv_ns: u64,
    pub latencies: Samples,
    /// Sends completed (any status), per direction.
    pub completed: [u64; 2],
    /// Rate control: the IDT installed (raw, admitted or best effort at
    /// its start), whether the bandwidth manager admitted it, and why not.
    pub idt: Option<u32>,
    pub admitted: Option<bool>,
    pub refused_reason: Option<String>,
    /// NIC clock of each packet dispatch (with `trace`).
    pub dispatch_ticks: Vec<u64>,
    /// Multicast flows: what each member and the root saw.
    pub mcast: Option<McastLedger>,
    /// Collective flows: what each member saw.
    pub coll: Option<super::coll::CollLedger>,
}

/// One multicast on its way: posted at the root, not yet at every member
/// or not yet completed at the root.
#[derive(Debug, Default, Clone)]
pub struct InFlight {
    pub post_ns: u64,
    /// The root host's busy clock when it posted (None: not measured).
    pub busy_at_post: Option<u64>,
    /// Members that have it.
    pub got: u32,
    pub root_done: bool,
    /// The latest of the members' receptions and the root's completion so
    /// far (each on its own host's clock).
    pub last_ns: u64,
    /// Tree work for it so far: host children computed, NIC children
    /// computed (the NICs' `McastTreeOps`).
    pub host_children: u64,
    pub nic_children: u64,
    /// Once every member has it: from the root's start to the last
    /// member's reception.
    pub latency_ns: Option<u64>,
    /// The root host's CPU time from its start to its completion (sim).
    pub root_cpu_ns: Option<u64>,
}

/// A multicast flow's ledger: one stream per member (the root's messages
/// in mseq order), the multicasts in flight, and the samples the report
/// sums up.
#[derive(Debug, Default)]
pub struct McastLedger {
    /// Per member, rank 1.. (index rank - 1).
    pub members: Vec<StreamLedger>,
    pub inflight: BTreeMap<u64, InFlight>,
    /// Member receptions judged good, in all.
    pub deliveries: u64,
    /// Completions the root saw (one per multicast).
    pub completed: u64,
    /// Relay sends that failed.
    pub relay_errors: u64,
    /// Per multicast: root host CPU busy between post and completion, and
    /// that over the time between them.
    pub root_cpu_ns: Vec<u64>,
    pub root_cpu_util: Vec<f64>,
    /// Per multicast: tree work (ns at the profile's prices), and children
    /// computed by hosts and NICs.
    pub tree_ns: Vec<u64>,
    pub tree_children: Vec<u64>,
    /// Sim, per multicast: the most of its data packets in the fabric at
    /// once (filled in after the run).
    pub in_flight_most: Vec<u64>,
    /// When a member last received one of the flow's multicasts, or the
    /// root last saw one complete: how long the flow has been quiet.
    pub last_activity_ns: u64,
    /// Multicasts that left `inflight` (every member has it and the root
    /// completed it), and when the last of those happened, on the clock
    /// of the host it happened on: a root that waits for the whole group
    /// starts its next multicast no earlier (`take_retired`).
    pub retired_at: BTreeMap<u64, u64>,
    /// Per multicast retired: its completion latency and the root host's
    /// CPU time for it (sim), in mseq order of retirement.
    pub timed: Vec<(u64, Option<u64>)>,
}

impl McastLedger {
    /// Multicast `mseq` has reached every member and completed at the
    /// root: when that was (on the clock of the host it last happened
    /// on), forgotten once `now` has reached it. None while it has not.
    pub fn take_retired(&mut self, mseq: u64, now: u64) -> Option<Result<(), u64>> {
        if self.inflight.contains_key(&mseq) {
            return None;
        }
        match self.retired_at.get(&mseq) {
            Some(&t) if t > now => Some(Err(t)),
            _ => {
                self.retired_at.remove(&mseq);
                Some(Ok(()))
            }
        }
    }
}

impl FlowLedger {
    pub fn new(spec: FlowSpec) -> FlowLedger {
        FlowLedger {
            streams: Default::default(),
            send_ns: SendTimes::default(),
            delivered: 0,
            bytes: 0,
            corrupted: 0,
            duplicates: 0,
            out_of_order: 0,
            send_errors: 0,
            send_error_statuses: BTreeMap::new(),
            first_send_ns: None,
            last_recv_ns: 0,
            latencies: Samples::default(),
            completed: [0, 0],
            idt: None,
            admitted: None,
            refused_reason: None,
            dispatch_ticks: Vec::new(),
            mcast: spec.mcast.as_ref().map(|m| McastLedger {
                members: (1..m.members.len()).map(|_| StreamLedger::default()).collect(),
                ..McastLedger::default()
            }),
            coll: spec.coll.as_ref().map(|c| super::coll::CollLedger::new(c.members.len())),
            spec,
        }
    }

    fn stream_id(&self, dir: Dir) -> u32 {
        match dir {
            Dir::Forward => pattern::forward_stream(self.spec.index),
            Dir::Reply => pattern::reply_stream(self.spec.index),
        }
    }

    fn is_message(&self, data: &[u8], dir: Dir, idx: u64) -> bool {
        idx < self.spec.messages
            && data.len() as u64 == self.spec.size_of(idx)
            && pattern::matches(data, self.stream_id(dir), idx as u32)
    }

    /// Check a received message of direction `dir` and account for it.
    pub fn receive(&mut self, dir: Dir, data: &[u8], now: u64) -> Verdict {
        let st = &mut self.streams[dir as usize];
        st.skip_failed();
        let e = st.expected;
        let verdict = if self.is_message(data, dir, e) {
            Verdict::Good(e)
        } else {
            match pattern::claimed_index(data).map(u64::from) {
                Some(c) if c != e && self.is_message(data, dir, c) => {
                    if c < e {
                        Verdict::Duplicate(c)
                    } else {
                        Verdict::Ahead(c)
                    }
                }
                _ => Verdict::Corrupted(e),
            }
        };
        let st = &mut self.streams[dir as usize];
        match verdict {
            Verdict::Good(i) => {
                st.expected = i + 1;
                self.bytes += data.len() as u64;
                self.last_recv_ns = self.last_recv_ns.max(now);
                let stream_done = self.spec.kind == FlowKind::Stream || dir == Dir::Reply;
                if stream_done {
                    self.delivered += 1;
                    if let Some(t) = self.send_ns.remove(&i) {
                        let lat = now.saturating_sub(t);
                        self.latencies.push(match self.spec.kind {
                            FlowKind::Pingpong => lat / 2,
                            _ => lat,
                        });
                    }
                }
            }
            Verdict::Duplicate(_) => self.duplicates += 1,
            Verdict::Late(_) => {}
            Verdict::Ahead(i) => {
                st.expected = i + 1;
                self.out_of_order += 1;
            }
            Verdict::Corrupted(i) => {
                st.expected = i + 1;
                self.corrupted += 1;
            }
        }
        verdict
    }

    /// A send of `msg` in direction `dir` completed (or was refused).
    pub fn send_done(&mut self, dir: Dir, msg: u64, ok: bool) {
        self.completed[dir as usize] += 1;
        if !ok {
            self.send_errors += 1;
            self.send_ns.remove(&msg);
            let st = &mut self.streams[dir as usize];
            if msg >= st.expected {
                st.failed.insert(msg, ());
            }
            st.skip_failed();
        }
    }

    /// The root posted multicast `mseq` at `now` (its host busy clock
    /// then: `busy`), having computed `host_children` children itself.
    pub fn mcast_posted(&mut self, mseq: u64, now: u64, busy: Option<u64>, host_children: u64) {
        self.first_send_ns = Some(self.first_send_ns.map_or(now, |t| t.min(now)));
        if let Some(m) = self.mcast.as_mut() {
            let e = m.inflight.entry(mseq).or_default();
            e.post_ns = now;
            e.busy_at_post = busy;
            e.host_children += host_children;
        }
    }

    /// Tree work done for multicast `mseq` away from the root's post: a
    /// relay host's children, or what a NIC's `McastTreeOps` counted.
    pub fn mcast_tree_work(&mut self, mseq: u64, host_children: u64, nic_children: u64) {
        if let Some(m) = self.mcast.as_mut() {
            if let Some(e) = m.inflight.get_mut(&mseq) {
                e.host_children += host_children;
                e.nic_children += nic_children;
            }
        }
    }

    /// A member (`rank` >= 1) received `data`, multicast `mseq` by its
    /// event: judge it against that member's stream as a stream's
    /// receiver would. A multicast whose turn the member's stream skipped
    /// (the root saw it fail) and that arrives after all, intact, is
    /// `Late` (its event's mseq names it: a message of a few bytes cannot
    /// carry its index).
    pub fn mcast_receive(&mut self, rank: u16, data: &[u8], now: u64, mseq: u64) -> Verdict {
        let Some(mut m) = self.mcast.take() else { return Verdict::Corrupted(0) };
        m.last_activity_ns = m.last_activity_ns.max(now);
        let me = &mut m.members[rank as usize - 1];
        // (Failed ones up to its turn are skipped first, as `receive` does.)
        me.skip_failed();
        if self.is_message(data, Dir::Forward, mseq) && me.skipped.remove(&mseq).is_some() {
            self.mcast = Some(m);
            return Verdict::Late(mseq);
        }
        let old = std::mem::take(&mut self.streams[0]);
        self.streams[0] = std::mem::take(&mut m.members[rank as usize - 1]);
        // Judged as the flow's forward stream; delivery is counted here.
        let delivered = self.delivered;
        let bytes = self.bytes;
        let v = self.receive(Dir::Forward, data, now);
        (self.delivered, self.bytes) = (delivered, bytes);
        m.members[rank as usize - 1] = std::mem::replace(&mut self.streams[0], old);
        if let Verdict::Good(i) = v {
            m.deliveries += 1;
            let group = m.members.len() as u32;
            if let Some(e) = m.inflight.get_mut(&i) {
                e.got += 1;
                e.last_ns = e.last_ns.max(now);
                if e.got == group {
                    e.latency_ns = Some(now.saturating_sub(e.post_ns));
                    self.delivered += 1;
                    self.bytes += data.len() as u64;
                    self.latencies.push(now.saturating_sub(e.post_ns));
                }
            }
            self.retire(&mut m, i);
        }
        self.mcast = Some(m);
        v
    }

    /// The root's completion of multicast `mseq` (`ok`: every member has
    /// it), at `now` with its host busy clock at `busy`.
    pub fn mcast_done(&mut self, mseq: u64, ok: bool, now: u64, busy: Option<u64>) {
        self.completed[0] += 1;
        let Some(mut m) = self.mcast.take() else { return };
        m.completed += 1;
        m.last_activity_ns = m.last_activity_ns.max(now);
        if !ok {
            self.send_errors += 1;
            for st in &mut m.members {
                if mseq >= st.expected {
                    st.failed.insert(mseq, ());
                }
                st.skip_failed();
            }
        }
        if let Some(e) = m.inflight.get_mut(&mseq) {
            e.root_done = true;
            e.last_ns = e.last_ns.max(now);
            if let (Some(b0), Some(b1)) = (e.busy_at_post, busy) {
                let cpu = b1.saturating_sub(b0);
                e.root_cpu_ns = Some(cpu);
                m.root_cpu_ns.push(cpu);
                let span = now.saturating_sub(e.post_ns).max(1);
                m.root_cpu_util.push(cpu as f64 / span as f64);
            }
            if !ok {
                e.got = m.members.len() as u32;
            }
        }
        self.retire(&mut m, mseq);
        self.mcast = Some(m);
    }

    /// A multicast every member has and the root completed leaves the
    /// in-flight table; its tree work becomes a sample.
    fn retire(&self, m: &mut McastLedger, mseq: u64) {
        let group = m.members.len() as u32;
        let done = m.inflight.get(&mseq).is_some_and(|e| e.root_done && e.got >= group);
        if !done {
            return;
        }
        if let (Some(e), Some(spec)) = (m.inflight.remove(&mseq), self.spec.mcast.as_ref()) {
            m.retired_at.insert(mseq, e.last_ns);
            if let Some(lat) = e.latency_ns {
                m.timed.push((lat, e.root_cpu_ns));
            }
            let p = spec.prices;
            let nic = if e.nic_children > 0 { p.nic_steps_ns } else { 0.0 };
            let ns = e.host_children * p.host_child_ns
                + (e.nic_children as f64 * p.nic_child_ns + nic).round() as u64;
            m.tree_ns.push(ns);
            m.tree_children.push(e.host_children + e.nic_children);
        }
    }

    /// Every message of the flow has been resolved at its receiver (and
    /// every send has completed).
    pub fn finished(&self) -> bool {
        let m = self.spec.messages;
        if let Some(mc) = &self.mcast {
            return mc.completed >= m && mc.members.iter().all(|s| s.expected >= m);
        }
        match self.spec.kind {
            FlowKind::Stream => self.streams[0].expected >= m && self.completed[0] >= m,
            FlowKind::Pingpong => {
                self.streams[1].expected >= m && self.completed[0] >= m && self.completed[1] >= m
            }
            FlowKind::Multicast => false,
            _ => self.coll.as_ref().is_some_and(|c| c.all_done >= m),
        }
    }
}

/// State every app shares (the sim is one thread).
#[derive(Debug)]
pub struct Ledger {
    pub flows: Vec<FlowLedger>,
    pub streams: BTreeMap<StreamKey, (usize, Dir)>,
    /// Multicast group id -> flow.
    pub groups: BTreeMap<u16, usize>,
    /// Ports every app opens, and how many the firmware has opened so far.
    pub ports_total: usize,
    pub ports_ready: usize,
    /// Things that should not happen (refused descriptors, stray messages,
    /// driver errors), in the order they happened.
    pub problems: Vec<String>,
    /// Messages the apps have resolved so far (for progress output).
    pub resolved: u64,
    /// `[[faults.nic_reset]]`: (node, time in ns) of each reset that
    /// happened so far: virtual time in the sim, the traffic clock (ns
    /// since the scenario's traffic began) on live and qemu.
    pub resets: Vec<(u16, u64)>,
    /// With a trace: every node's program calls (sends, buffers provided,
    /// events taken), in the order they were made.
    pub host_calls: Option<Vec<HostCall>>,
}

impl Ledger {
    /// When flow `f` was cut by a NIC reset (the earliest reset by `now`
    /// of a node it runs between: source, destination or a multicast
    /// member), if one was.
    pub fn cut_at(&self, f: usize, now: u64) -> Option<u64> {
        let s = &self.flows[f].spec;
        let touches = |n: u16| {
            s.src_node == n
                || (s.mcast.is_none() && s.dst_node == n)
                || s.mcast.as_ref().is_some_and(|m| m.members.contains(&n))
        };
        self.resets.iter().filter(|&&(n, t)| t <= now && touches(n)).map(|&(_, t)| t).min()
    }

    /// Has NIC `node` been reset by time `now`?
    pub fn reset_by(&self, node: u16, now: u64) -> bool {
        self.resets.iter().any(|&(n, t)| n == node && t <= now)
    }

    /// When a NIC reset cut flow `f`, if one did during the run.
    pub fn cut(&self, f: usize) -> Option<u64> {
        self.cut_at(f, u64::MAX)
    }

    /// Every flow finished (each message accounted for) or was cut by a
    /// NIC reset.
    pub fn all_accounted_for(&self) -> bool {
        self.flows.iter().enumerate().all(|(i, f)| f.finished() || self.cut(i).is_some())
    }
}

pub type SharedLedger = Rc<RefCell<Ledger>>;

#[cfg(test)]
mod tests {
    use super::super::format::Scenario;
    use super::*;

    fn ledger(kind: &str) -> FlowLedger {
        let v = Scenario::parse_validated(&format!(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
             kind = \"{kind}\"\nsizes = [16, 32]\nmessages = 4\n"
        ))
        .unwrap();
        FlowLedger::new(v.flows[0].clone())
    }

    fn msg(f: &FlowLedger, dir: Dir, i: u64) -> Vec<u8> {
        pattern::make(f.spec.size_of(i) as usize, f.stream_id(dir), i as u32)
    }

    #[test]
    fn in_order_messages_are_delivered_with_their_latency() {
        let mut f = ledger("stream");
        f.send_ns.insert(0, 100);
        let m0 = msg(&f, Dir::Forward, 0);
        assert_eq!(f.receive(Dir::Forward, &m0, 350), Verdict::Good(0));
        assert_eq!(
            (f.delivered, f.bytes, f.latencies.exact().unwrap().to_vec()),
            (1, 16, vec![250])
        );
    }

    #[test]
    fn duplicates_reordering_and_corruption_are_told_apart() {
        let mut f = ledger("stream");
        let m0 = msg(&f, Dir::Forward, 0);
        let m2 = msg(&f, Dir::Forward, 2);
        assert_eq!(f.receive(Dir::Forward, &m0, 1), Verdict::Good(0));
        assert_eq!(f.receive(Dir::Forward, &m0, 2), Verdict::Duplicate(0));
        assert_eq!(f.receive(Dir::Forward, &m2, 3), Verdict::Ahead(2));
        let mut m3 = msg(&f, Dir::Forward, 3);
        m3[9] ^= 1;
        assert_eq!(f.receive(Dir::Forward, &m3, 4), Verdict::Corrupted(3));
        assert_eq!((f.delivered, f.duplicates, f.out_of_order, f.corrupted), (1, 1, 1, 1));
        // A message of the wrong length is corrupted too.
        let mut g = ledger("stream");
        let mut long = msg(&g, Dir::Forward, 0);
        long.push(0);
        assert_eq!(g.receive(Dir::Forward, &long, 1), Verdict::Corrupted(0));
        // An intact message of a later index is ahead of its turn.
        assert_eq!(g.receive(Dir::Forward, &msg(&g, Dir::Forward, 3), 2), Verdict::Ahead(3));
    }

    #[test]
    fn send_times_are_found_by_index_in_any_order() {
        let mut t = SendTimes::default();
        for (m, at) in [(3, 30), (5, 50), (4, 40), (9, 90)] {
            assert_eq!(t.insert(m, at), None);
        }
        assert_eq!(t.insert(5, 55), Some(50));
        assert_eq!(t.remove(&4), Some(40));
        assert_eq!(t.remove(&4), None);
        assert_eq!(t.remove(&3), Some(30));
        assert_eq!(t.remove(&9), Some(90));
        assert_eq!(t.remove(&5), Some(55));
        assert_eq!(t.remove(&5), None);
    }

    #[test]
    fn failed_sends_are_skipped_by_the_receiver() {
        let mut f = ledger("stream");
        f.send_done(Dir::Forward, 0, false);
        assert_eq!(f.receive(Dir::Forward, &msg(&f, Dir::Forward, 1), 1), Verdict::Good(1));
        assert_eq!(f.send_errors, 1);
    }

    fn mcast_ledger() -> FlowLedger {
        let v = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 4\n[[flows]]\nsrc = [0, 1]\n\
             kind = \"multicast\"\ngroup = [1, 2]\nscheme = \"nic\"\nalgorithm = \"serial\"\n\
             bytes = 16\nmessages = 3\n",
        )
        .unwrap();
        FlowLedger::new(v.flows[0].clone())
    }

    #[test]
    fn a_multicast_is_delivered_when_every_member_has_it_and_each_member_is_checked() {
        let mut f = mcast_ledger();
        let m = |i: u64| msg(&f, Dir::Forward, i);
        let (m0, m1, m2) = (m(0), m(1), m(2));
        f.mcast_posted(0, 100, Some(10), 0);
        assert_eq!(f.mcast_receive(1, &m0, 300, 0), Verdict::Good(0));
        assert_eq!(f.delivered, 0, "one member of two");
        assert_eq!(f.mcast_receive(2, &m0, 450, 0), Verdict::Good(0));
        assert_eq!(
            (f.delivered, f.bytes, f.latencies.exact().unwrap().to_vec()),
            (1, 16, vec![350])
        );
        f.mcast_done(0, true, 500, Some(60));
        let l = f.mcast.as_ref().unwrap();
        assert_eq!((l.deliveries, l.completed, l.root_cpu_ns.clone()), (2, 1, vec![50]));
        assert!(l.inflight.is_empty());
        // Each member has its own order: a duplicate and a skip are told
        // apart per member, and a wrong flow's message is corrupted.
        f.mcast_posted(1, 600, None, 0);
        f.mcast_posted(2, 700, None, 0);
        assert_eq!(f.mcast_receive(1, &m0, 800, 0), Verdict::Duplicate(0));
        assert_eq!(f.mcast_receive(1, &m2, 810, 2), Verdict::Ahead(2));
        assert_eq!(f.mcast_receive(2, &m1, 820, 1), Verdict::Good(1));
        let other = pattern::make(16, pattern::forward_stream(5), 2);
        assert_eq!(f.mcast_receive(2, &other, 830, 2), Verdict::Corrupted(2));
        assert_eq!((f.duplicates, f.out_of_order, f.corrupted), (1, 1, 1));
        assert!(!f.finished());
    }

    #[test]
    fn a_multicast_the_root_could_not_complete_is_skipped_by_its_members() {
        let mut f = mcast_ledger();
        let m1 = msg(&f, Dir::Forward, 1);
        f.mcast_posted(0, 0, None, 0);
        f.mcast_done(0, false, 10, None);
        assert_eq!(f.send_errors, 1);
        f.mcast_posted(1, 20, None, 0);
        assert_eq!(f.mcast_receive(1, &m1, 30, 1), Verdict::Good(1));
        // Multicast 0 reaches the other member after all: late, not a
        // duplicate, and only once.
        let m0 = msg(&f, Dir::Forward, 0);
        assert_eq!(f.mcast_receive(2, &m0, 40, 0), Verdict::Late(0));
        assert_eq!(f.mcast_receive(2, &m0, 50, 0), Verdict::Duplicate(0));
        assert_eq!((f.duplicates, f.corrupted), (1, 0));
    }

    #[test]
    fn a_failed_multicast_right_after_a_good_one_is_late_not_a_duplicate() {
        let mut f = mcast_ledger();
        let (m0, m1) = (msg(&f, Dir::Forward, 0), msg(&f, Dir::Forward, 1));
        f.mcast_posted(0, 0, None, 0);
        f.mcast_posted(1, 1, None, 0);
        // Multicast 1 fails before member 1 has taken multicast 0.
        f.mcast_done(1, false, 10, None);
        assert_eq!(f.mcast_receive(1, &m0, 20, 0), Verdict::Good(0));
        assert_eq!(f.mcast_receive(1, &m1, 30, 1), Verdict::Late(1));
        assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0));
    }

    #[test]
    fn pingpong_counts_round_trips_and_halves_them() {
        let mut f = ledger("pingpong");
        f.send_ns.insert(0, 1000);
        assert_eq!(f.receive(Dir::Forward, &msg(&f, Dir::Forward, 0), 1500), Verdict::Good(0));
        assert_eq!(f.delivered, 0);
        assert_eq!(f.receive(Dir::Reply, &msg(&f, Dir::Reply, 0), 2000), Verdict::Good(0));
        assert_eq!(
            (f.delivered, f.bytes, f.latencies.exact().unwrap().to_vec()),
            (1, 32, vec![500])
        );
        // A request's pattern is not a reply's.
        assert_eq!(f.receive(Dir::Reply, &msg(&f, Dir::Forward, 1), 2100), Verdict::Corrupted(1));
    }
}
