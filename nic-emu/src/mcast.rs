//! Multicast measurements on the simulator: one multicast after another
//! from a group's root, timed exactly (virtual time), with the figures the
//! published study used: completion latency (the root's call to the last
//! member's Received event), the root host's CPU busy time, the time the
//! tree took to build. `cargo xtask model multicast` and `report
//! multicast` are built on it; the scenario runner's multicast flows
//! measure the same way with content checks on every backend.
//!
//! Every member runs `Member`, an ordinary host-driver program: it
//! installs the group, keeps receive buffers posted, relays (host and
//! assisted schemes) and stamps each Received event with its host clock.

use std::cell::RefCell;
use std::rc::Rc;

use host_driver::NicBackend;
use host_driver::{
    Algorithm, DmaBuf, Event, Group, Multicast, Nic, Port, PortOptions, Priority, RelayPlan,
    RootPlan, Scheme, SendStatus,
};
use nic_abi::map;
use nic_abi::regs::{self, reg};
use nic_abi::stats::Stat;
use nic_abi::trace::{TraceRecord, TRACE_RECORD_SIZE};
use nic_device::faults::Faults;
use nic_device::profile::{Clock, Profile};
use nic_fabric::topology::Topology;
use nic_sim::sim::{ClusterConfig, RunLimit, SimCluster};
use nic_sim::{HostApp, HostCx, SimBackend};

const PORT: u8 = 1;
const GROUP_ID: u16 = 0;
/// Receive buffers each member keeps posted.
const BUFS: usize = 4;
/// A root waiting for its last multicast to reach every member looks
/// again this often.
const DELIVERY_POLL_NS: u64 = 1_000;
/// Tag of the root's multicast completions (relay sends carry the mseq).
const ROOT_TAG: u64 = 1 << 40;

/// One measurement's set-up.
#[derive(Debug, Clone)]
pub struct McastRun {
    pub profile: Profile,
    pub scheme: Scheme,
    pub algorithm: Algorithm,
    /// G: the root and G-1 destinations, nodes 0..G on one switch.
    pub group_size: u16,
    pub bytes: u32,
    /// Multicasts, one after another (the first is a warm-up, not counted).
    pub count: u32,
    /// Record the four machines' transitions (`McastResult::traces`).
    pub trace: bool,
    /// Fault injection on every link, and its seed.
    pub faults: Faults,
    pub seed: u64,
}

impl McastRun {
    /// `count` multicasts of `bytes` to G members with `scheme` and
    /// `algorithm` on `profile`, no faults, no trace.
    pub fn new(
        profile: &Profile,
        scheme: Scheme,
        algorithm: Algorithm,
        group_size: u16,
        bytes: u32,
        count: u32,
    ) -> McastRun {
        McastRun {
            profile: profile.clone(),
            scheme,
            algorithm,
            group_size,
            bytes,
            count,
            trace: false,
            faults: Faults::NONE,
            seed: 0,
        }
    }
}

/// What one measurement found (times in ns; one entry per multicast
/// after the warm-up).
#[derive(Debug, Clone, Default)]
pub struct McastResult {
    pub latency_ns: Vec<u64>,
    /// The root host's CPU busy time from its call to the completion.
    pub root_cpu_ns: Vec<u64>,
    /// Building the tree: the root host's tree work (host, assisted), or
    /// the root NIC's (nic; a cached tree costs nothing per message).
    pub tree_ns: u64,
    /// Every member received every multicast exactly once, intact, in
    /// order, and the root heard back each time.
    pub ok: bool,
    pub problems: Vec<String>,
    /// NIC counters summed over the group.
    pub forwarded: u64,
    pub reports: u64,
    /// Idle streams the NICs let go of for want of stream records.
    pub streams_evicted: u64,
    /// With `trace`: each member NIC's transitions during the last
    /// multicast (rank order), and the RTC tick it was posted at.
    pub traces: Vec<Vec<TraceRecord>>,
    pub last_post_tick: u64,
    /// Host relay steps each member's program took (rank order): the
    /// host's share of the work (host and assisted schemes).
    pub host_steps: Vec<u32>,
    /// Each member's Received event after the root's call, for the last
    /// multicast (rank order; the root's is 0).
    pub last_arrivals_ns: Vec<u64>,
}

/// What the members share: the root's post times, each member's arrival
/// times, problems seen.
#[derive(Default)]
struct Book {
    posted: Vec<(u64, u64)>,
    /// When the root's program woke to post the last multicast (the trace
    /// window opens there: a NIC may take a descriptor before the host
    /// clock's time of the post, which runs ahead within a wake).
    last_wake: u64,
    done: Vec<(u64, u64)>,
    arrived: Vec<Vec<u64>>,
    problems: Vec<String>,
    host_steps: Vec<u32>,
}

fn payload(mseq: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(mseq as u8)).collect()
}

/// The root's request for multicast `mseq` of `run` from `src`.
fn request<'a>(
    run: &McastRun,
    group: &'a Group,
    src: &'a DmaBuf,
    class: u8,
    mseq: u32,
) -> Multicast<'a> {
    Multicast {
        buf: src,
        offset: 0,
        len: run.bytes,
        size_class: class,
        priority: Priority::Low,
        group,
        scheme: run.scheme,
        algorithm: run.algorithm,
        mseq,
        tag: ROOT_TAG + mseq as u64,
    }
}

/// A member's program.
struct Member {
    rank: usize,
    run: Rc<McastRun>,
    group: Group,
    book: Rc<RefCell<Book>>,
    port: Option<Port<SimBackend>>,
    bufs: Vec<DmaBuf>,
    src: Option<DmaBuf>,
    class: u8,
    /// Relay sends out of a buffer still out: (mseq, buffer index, count).
    lent: Vec<(u32, usize, u32)>,
    /// Relays worked out and posted once the host's time for them has
    /// passed: (due, plan, buffer index).
    relays: Vec<(u64, RelayPlan, usize)>,
    next: u32,
    waiting: u32,
    received: u32,
    /// Host scheme at the root: children posted of the current multicast.
    host_posted: usize,
    /// The root's multicast started and not posted yet: when its host's
    /// work is done, and what it worked out.
    root_plan: Option<(u64, RootPlan)>,
}

impl Member {
    fn setup(&mut self, be: &SimBackend) -> Result<(), String> {
        let nic = Nic::open(be.clone()).map_err(|e| e.to_string())?;
        nic.create_group(&self.group, self.run.algorithm).map_err(|e| e.to_string())?;
        if self.run.trace {
            be.sram_store_u32(reg(regs::TRACE_ENABLE), 1);
        }
        let mut port = nic.open_port(PORT, PortOptions::default()).map_err(|e| e.to_string())?;
        let size = 1u64 << self.class.max(6);
        for i in 0..BUFS {
            let b = port.alloc(size).map_err(|e| e.to_string())?;
            port.provide_receive_buffer(&b, self.class, Priority::Low, i as u64)
                .map_err(|e| e.to_string())?;
            self.bufs.push(b);
        }
        if self.rank == 0 {
            let b = port.alloc(self.run.bytes.max(1) as u64).map_err(|e| e.to_string())?;
            self.src = Some(b);
        }
        self.port = Some(port);
        Ok(())
    }

    /// The root starts its next multicast: its host's work before the
    /// post is charged now (children computed, separate addressing's
    /// steps), and the descriptors go once that time has passed
    /// (`post_root`): its NIC must not see them earlier.
    fn post_next(&mut self, be: &SimBackend, began: u64) {
        self.book.borrow_mut().last_wake = began;
        let (Some(port), Some(src)) = (self.port.as_mut(), self.src.as_ref()) else { return };
        let mseq = self.next;
        let _ = port.write(src, 0, &payload(mseq, self.run.bytes));
        let start = (be.now_ns(), be.host_busy_ns());
        let m = request(&self.run, &self.group, src, self.class, mseq);
        match port.multicast_prepare(&m) {
            Ok(plan) => {
                self.root_plan = Some((be.now_ns(), plan));
                self.host_posted = 0;
                self.waiting = if self.run.scheme == Scheme::Host {
                    self.group.children(self.run.algorithm, 0).len() as u32
                } else {
                    1
                };
                self.book.borrow_mut().posted.push(start);
                self.next += 1;
            }
            Err(e) => self.book.borrow_mut().problems.push(format!("root: {e}")),
        }
    }

    /// Post the root's started multicast once its host work is done by
    /// `began`; else be called again then.
    fn post_root(&mut self, cx: &mut HostCx<'_>, began: u64) {
        let Some((due, _)) = self.root_plan else { return };
        if due > began {
            cx.wake_at(due);
            return;
        }
        let Some((_, plan)) = self.root_plan.take() else { return };
        let (Some(port), Some(src)) = (self.port.as_mut(), self.src.as_ref()) else { return };
        let m = request(&self.run, &self.group, src, self.class, self.next - 1);
        match port.multicast_post(&m, &plan) {
            Ok(n) => self.host_posted += n as usize,
            Err(e) => self.book.borrow_mut().problems.push(format!("root: {e}")),
        }
    }

    /// Post the relays whose host time had passed when this wake began
    /// (`began`); be called again for the others.
    fn post_relays(&mut self, cx: &mut HostCx<'_>, began: u64) {
        let port = self.port.as_mut().expect("set up");
        let mut k = 0;
        while k < self.relays.len() {
            if self.relays[k].0 > began {
                cx.wake_at(self.relays[k].0);
                k += 1;
                continue;
            }
            let (_, plan, i) = self.relays.remove(k);
            match port.relay_post(&plan, &self.group, &self.bufs[i], self.class, plan.mseq as u64) {
                Ok(n) => self.lent.push((plan.mseq, i, n)),
                Err(e) => self.book.borrow_mut().problems.push(format!("relay: {e}")),
            }
        }
    }

    /// When the root's last multicast reached its last member (each on
    /// its host's clock); 0 before the first, None while a member has not
    /// got it yet (or a problem stopped the run: then at once).
    fn last_arrival(&self) -> Option<u64> {
        if self.next == 0 {
            return Some(0);
        }
        let book = self.book.borrow();
        if !book.problems.is_empty() {
            return Some(0);
        }
        let i = self.next as usize - 1;
        let mut last = 0;
        for arrived in &book.arrived[1..] {
            last = last.max(*arrived.get(i)?);
        }
        Some(last)
    }

    /// Host scheme: the root's children its send tokens did not cover yet.
    /// The host's work for them is charged now; they go once that time
    /// has passed (`post_root`).
    fn more_children(&mut self, be: &SimBackend) {
        if self.root_plan.is_some() {
            return;
        }
        let (Some(port), Some(src)) = (self.port.as_mut(), self.src.as_ref()) else { return };
        let m = request(&self.run, &self.group, src, self.class, self.next - 1);
        match port.multicast_more_prepare(&m, self.host_posted) {
            Ok(plan) if plan.batch() > 0 => self.root_plan = Some((be.now_ns(), plan)),
            Ok(_) => {}
            Err(e) => self.book.borrow_mut().problems.push(format!("root: {e}")),
        }
    }

    fn take(&mut self, be: &SimBackend, ev: Event) {
        let port = self.port.as_mut().expect("set up");
        match ev {
            Event::Received { buffer, len, mcast: Some(info), .. } => {
                let i = self.bufs.iter().position(|b| b.vaddr == buffer).expect("our buffer");
                let mut data = vec![0u8; len as usize];
                let _ = port.read(&self.bufs[i], 0, &mut data);
                let mut book = self.book.borrow_mut();
                if info.mseq != self.received || data != payload(info.mseq, self.run.bytes) {
                    book.problems.push(format!(
                        "rank {}: got mseq {} ({} B), expected {} intact",
                        self.rank, info.mseq, len, self.received
                    ));
                }
                self.received += 1;
                book.arrived[self.rank].push(be.now_ns());
                drop(book);
                // The host works out its children (its CPU time passes),
                // then posts them (`relays`, at the next wake).
                match port.relay_prepare(&ev, &self.group) {
                    Ok(Some(plan)) => {
                        self.book.borrow_mut().host_steps[self.rank] += 1;
                        self.relays.push((be.now_ns(), plan, i));
                    }
                    Ok(None) => {
                        let _ = port.provide_receive_buffer(
                            &self.bufs[i],
                            self.class,
                            Priority::Low,
                            0,
                        );
                    }
                    Err(e) => self.book.borrow_mut().problems.push(format!("relay: {e}")),
                }
            }
            Event::Sent { tag, status, mcast, .. } if tag >= ROOT_TAG => {
                let unreached = mcast.map_or(0, |m| m.unreached);
                if status != SendStatus::Ok || unreached != 0 {
                    self.book
                        .borrow_mut()
                        .problems
                        .push(format!("root: {status:?}, {unreached} not reached"));
                }
                self.waiting = self.waiting.saturating_sub(1);
                if self.waiting == 0 {
                    self.book.borrow_mut().done.push((be.now_ns(), be.host_busy_ns()));
                } else if self.run.scheme == Scheme::Host {
                    self.more_children(be);
                }
            }
            Event::Sent { tag, .. } => {
                if let Some(k) = self.lent.iter().position(|l| l.0 as u64 == tag) {
                    self.lent[k].2 -= 1;
                    if self.lent[k].2 == 0 {
                        let (_, i, _) = self.lent.remove(k);
                        let _ = port.provide_receive_buffer(
                            &self.bufs[i],
                            self.class,
                            Priority::Low,
                            0,
                        );
                    }
                }
            }
            Event::PortOpened { .. } => {}
            other => self.book.borrow_mut().problems.push(format!("rank {}: {other:?}", self.rank)),
        }
    }
}

impl HostApp for Member {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        let be = cx.backend().clone();
        let began = cx.now_ns();
        if self.port.is_none() {
            if let Err(e) = self.setup(&be) {
                self.book.borrow_mut().problems.push(format!("rank {}: {e}", self.rank));
                self.next = u32::MAX;
                return;
            }
            // Everyone installs the group before the root starts.
            if self.rank == 0 {
                cx.wake_in(50_000);
            }
            return;
        }
        while let Some(ev) = self.port.as_mut().and_then(|p| p.poll()) {
            self.take(&be, ev);
        }
        self.post_relays(cx, began);
        self.post_root(cx, began);
        if self.rank == 0 && self.run.scheme == Scheme::Host && self.waiting > 0 {
            // Children the send tokens did not cover, as tokens came back.
            self.more_children(&be);
            self.post_root(cx, began);
        }
        if self.rank == 0 && self.waiting == 0 && self.next < self.run.count {
            // One multicast after another: the next starts once the last
            // one has reached every member (the root's own completion
            // comes earlier under the host scheme), on their hosts'
            // clocks. The members are other programs: look again soon.
            match self.last_arrival() {
                Some(t) if t <= began => {
                    self.post_next(&be, began);
                    self.post_root(cx, began);
                }
                Some(t) => cx.wake_at(t),
                None => cx.wake_in(DELIVERY_POLL_NS),
            }
        }
        if let Some(p) = self.port.as_mut() {
            p.report_consumed();
        }
    }

    fn done(&self) -> bool {
        if self.rank == 0 {
            self.next >= self.run.count && self.waiting == 0
        } else {
            self.received >= self.run.count && self.relays.is_empty() && self.lent.is_empty()
        }
    }
}

/// Run `run` on a fresh simulated cluster of G nodes on one switch.
pub fn measure(run: &McastRun) -> McastResult {
    let g = run.group_size.max(2);
    let mut profile = run.profile.clone();
    // One switch with a port per member (the study's large-switch runs);
    // a route byte names at most 128 ports, so beyond that a two-level
    // Clos of 32-port switches, non-blocking, stands in for it.
    let topology = if g <= 128 {
        profile.switch.ports = profile.switch.ports.max(g as u32);
        Topology::Star
    } else {
        profile.switch.ports = 32;
        Topology::Clos
    };
    let mut cfg = ClusterConfig::new(profile.clone(), g as usize, topology);
    cfg.faults = run.faults;
    cfg.seed = run.seed;
    let mut c = match SimCluster::new(cfg) {
        Ok(c) => c,
        Err(e) => return McastResult { problems: vec![e.to_string()], ..McastResult::default() },
    };
    let shared = Rc::new(run.clone());
    let group = Group::new(GROUP_ID, PORT, (0..g).collect()).expect("a valid group");
    let class = nic_abi::size_class_for(run.bytes as u64);
    let book = Rc::new(RefCell::new(Book {
        arrived: vec![Vec::new(); g as usize],
        host_steps: vec![0; g as usize],
        ..Book::default()
    }));
    for rank in 0..g as usize {
        c.spawn(
            rank,
            Box::new(Member {
                rank,
                run: shared.clone(),
                group: group.clone(),
                book: book.clone(),
                port: None,
                bufs: Vec::new(),
                src: None,
                class,
                lent: Vec::new(),
                relays: Vec::new(),
                next: 0,
                waiting: 0,
                received: 0,
                host_posted: 0,
                root_plan: None,
            }),
        );
    }
    c.run(RunLimit::Unlimited);
    let b = book.borrow();
    let mut r = McastResult {
        problems: b.problems.clone(),
        host_steps: b.host_steps.clone(),
        ..McastResult::default()
    };
    for m in 1..b.posted.len().min(b.done.len()) {
        let (t0, busy0) = b.posted[m];
        let last = (1..g as usize).filter_map(|k| b.arrived[k].get(m).copied()).max();
        if let Some(t) = last {
            r.latency_ns.push(t.saturating_sub(t0));
        }
        r.root_cpu_ns.push(b.done[m].1.saturating_sub(busy0));
    }
    let complete = (1..g as usize).all(|k| b.arrived[k].len() == run.count as usize)
        && b.done.len() == run.count as usize;
    if !complete {
        r.problems.push(format!(
            "incomplete: {} of {} completions, arrivals per member {:?}",
            b.done.len(),
            run.count,
            b.arrived.iter().map(|a| a.len()).collect::<Vec<_>>()
        ));
    }
    if let Some(&(t0, _)) = b.posted.last() {
        // The root receives nothing: its entry stays 0.
        let m = b.posted.len() - 1;
        r.last_arrivals_ns =
            b.arrived.iter().map(|a| a.get(m).map_or(0, |t| t.saturating_sub(t0))).collect();
    }
    r.ok = r.problems.is_empty();
    if run.trace {
        let rtc = Clock::new(profile.nic.rtc_hz);
        let from = rtc.ticks_at(b.last_wake).saturating_sub(1);
        r.last_post_tick = from;
        r.traces = (0..g as usize).map(|n| read_trace(&c.backend(n), from)).collect();
    }
    r.tree_ns = tree_ns(&profile, run, g);
    let stat = |s| (0..g as usize).map(|n| c.nic_stats(n).stat(s)).sum::<u64>();
    r.forwarded = stat(Stat::McastForwarded);
    r.reports = stat(Stat::McastReports);
    r.streams_evicted = stat(Stat::StreamsEvicted);
    r
}

/// Node `be`'s trace records from RTC tick `from` on.
fn read_trace(be: &SimBackend, from: u64) -> Vec<TraceRecord> {
    let prod = be.sram_load_u32(reg(regs::TRACE_PROD));
    let n = prod.min(map::TRACE_LEN);
    (prod - n..prod)
        .filter_map(|i| {
            let mut b = [0u8; TRACE_RECORD_SIZE as usize];
            be.sram_read(map::TRACE + (i % map::TRACE_LEN) * TRACE_RECORD_SIZE, &mut b);
            TraceRecord::decode(&b)
        })
        .filter(|r| r.rtc >= from)
        .collect()
}

/// Time to build the tree at the root, at the profile's prices.
fn tree_ns(p: &Profile, run: &McastRun, g: u16) -> u64 {
    let kids = nic_abi::multicast::children(run.algorithm, g, 0).count() as u64;
    match run.scheme {
        Scheme::Host | Scheme::Assisted => p.host.tree_child_ns * kids,
        Scheme::Nic => {
            let cpu = Clock::new(p.nic.cpu_hz);
            let steps = if run.algorithm == Algorithm::Separate { kids } else { 1 };
            let step = p.nic_cpu.relay_step.by_code(run.algorithm.code());
            cpu.cycles_ns(steps * step + kids * p.nic_cpu.tree_op)
        }
        Scheme::NicCached => 0,
    }
}

/// The median of `v` (0 for none).
pub fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}
