//! Collective flows in a node's program: each member runs the flow's
//! `count` collectives one after another.
//!
//! - NIC scheme: one `Port::collective` per collective; the NIC runs the
//!   algorithm; its `Event::Collective` ends the member's part.
//! - Assisted scheme (assist.rs): as the NIC scheme, but the program
//!   releases each step; the NIC's `Event::CollStep` asks for the next.
//! - A broadcast run as a multicast (bcast.rs): the root multicasts its
//!   vector, the others take it from their receive buffers.
//! - Host scheme: the program runs the same schedule itself
//!   (`nic_abi::collective::schedule`) with unicast messages (a header
//!   naming the collective, chunk and step, then the chunk), combines on
//!   the host (charged to its CPU as touching the bytes), and holds
//!   messages that come before their step.
//!
//! Each member's result is checked against the reference; entries and
//! completions go to the flow's ledger (coll.rs).

use std::collections::BTreeMap;

use host_brm::BrmTransport;
use host_driver::{Algorithm, Dest, DmaBuf, Group, HostOp, Nic, NicBackend, SendOpts, SendStatus};
use nic_abi::collective::{combine, Alg, How, Shape, Step};

use super::super::coll::{host_chunk, host_message_len, CollScheme, CollSpec, HOST_HEADER};
use super::bcast::BcastRun;
use super::{NodeApp, NodeHost};

/// The top bits of a host-scheme send's tag (with the flow's index and
/// the send buffer's).
pub(super) const COLL_TAG: u64 = 0b11 << 62;

/// How many host-scheme messages a member may have in flight.
const HOST_SENDS: usize = 8;

/// A collective flow this node is a member of.
pub(super) struct CollCtx {
    pub(super) flow: usize,
    /// Index of its port in `ports`.
    pub(super) port: usize,
    /// The group (a broadcast run as a multicast: in the multicast's rank
    /// order, the root first).
    pub(super) group: Group,
    pub(super) rank: u16,
    pub(super) spec: CollSpec,
    pub(super) alg: Alg,
    /// The NICs' MTU and SRAM size (they fix the chunks).
    fabric: (u32, u32),
    start_ns: u64,
    /// The vector (NIC scheme: the NIC reads and writes it; a broadcast
    /// run as a multicast: the root multicasts it).
    pub(super) data: DmaBuf,
    /// The next collective to start (1, 2, ...).
    pub(super) next: u64,
    /// The one running: its number, and the busy clocks at entry.
    pub(super) running: Option<(u64, Busy)>,
    /// Host scheme.
    host: HostRun,
    /// A broadcast run as a multicast (bcast.rs).
    pub(super) bcast: Option<BcastRun>,
    /// Assisted: the step to release, not yet posted (assist.rs).
    pub(super) release: Option<u16>,
}

/// A node's busy clocks, host CPU and NIC CPU (ns so far; None where the
/// backend keeps none: the sim keeps both). A member's collective is
/// charged what they moved from its entry to its completion, other flows'
/// work on the node meanwhile included.
#[derive(Clone, Copy)]
pub(super) struct Busy {
    host: Option<u64>,
    nic: Option<u64>,
}

impl Busy {
    fn now(h: &impl NodeHost) -> Busy {
        Busy { host: h.busy_ns(), nic: h.nic_busy_ns() }
    }

    /// What each clock moved from `then` to `self` (None where one is
    /// missing).
    fn since(self, then: Busy) -> (Option<u64>, Option<u64>) {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        (d(self.host, then.host), d(self.nic, then.nic))
    }
}

/// The host scheme's state of the collective running.
#[derive(Default)]
struct HostRun {
    /// The vector as the program holds it.
    value: Vec<u8>,
    /// Each chunk's next step.
    at: Vec<usize>,
    /// Messages that came before their step: (collective, chunk, tag,
    /// from) -> chunk bytes.
    held: BTreeMap<(u64, u32, u8, u16), Vec<u8>>,
    /// Send buffers, and those free.
    bufs: Vec<DmaBuf>,
    free: Vec<usize>,
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Install every collective flow's group this node is in, and make
    /// its buffers.
    pub(super) fn create_colls(&mut self, nic: &Nic<H::B>) -> Result<(), String> {
        let flows: Vec<(usize, CollSpec, u64)> = {
            let l = self.ledger.borrow();
            l.flows
                .iter()
                .filter_map(|f| f.spec.coll.clone().map(|c| (f.spec.index, c, f.spec.start_ns)))
                .collect()
        };
        for (flow, spec, start_ns) in flows {
            let Some(rank) = spec.rank_of(self.node) else { continue };
            let port = self
                .ports
                .iter()
                .position(|p| p.num == spec.port)
                .ok_or_else(|| format!("flow {flow}: the group's port is not open"))?;
            // A broadcast run as a multicast: the multicast's group (the
            // root first) and its tree, cached for `nic-cached`.
            let (members, tree) = match &spec.mcast {
                Some(m) => (spec.mcast_members(), m.alg()),
                None => (spec.members.clone(), Algorithm::Binomial),
            };
            let group = Group::new(spec.group_id, spec.port, members)
                .map_err(|e| format!("flow {flow}: group: {e}"))?;
            nic.create_group(&group, tree)
                .map_err(|e| format!("flow {flow}: creating group {}: {e}", spec.group_id))?;
            let fabric = (nic.mtu(), nic.info().sram_size);
            let alg = spec.alg(fabric);
            let p = &mut self.ports[port].port;
            let data = p
                .alloc(spec.bytes().max(8) as u64)
                .map_err(|e| format!("flow {flow}: the vector: {e}"))?;
            let mut host = HostRun::default();
            if spec.scheme == CollScheme::Host {
                let len = HOST_HEADER + spec.bytes() as u64;
                for _ in 0..HOST_SENDS {
                    host.bufs.push(p.alloc(len).map_err(|e| format!("flow {flow}: sends: {e}"))?);
                }
                host.free = (0..HOST_SENDS).rev().collect();
            }
            let bcast = spec.mcast.as_ref().map(|m| {
                let priority = self.ledger.borrow().flows[flow].spec.priority;
                BcastRun::new(m, group.rank_of(self.node).unwrap_or(u16::MAX), priority)
            });
            if let Some(c) = self.ledger.borrow_mut().flows[flow].coll.as_mut() {
                c.alg = Some(alg);
            }
            self.colls.push(CollCtx {
                flow,
                port,
                group,
                rank,
                spec,
                alg,
                fabric,
                start_ns,
                data,
                next: 1,
                running: None,
                host,
                bcast,
                release: None,
            });
        }
        Ok(())
    }

    /// Start the next collective of every flow that may: the earliest
    /// time one waits for.
    pub(super) fn coll_pump(&mut self, now: u64) -> Option<u64> {
        let mut later: Option<u64> = None;
        for ci in 0..self.colls.len() {
            let c = &self.colls[ci];
            if c.running.is_some() {
                if c.bcast.is_some() {
                    self.bcast_post_more(ci);
                } else if c.spec.scheme == CollScheme::Host {
                    self.host_progress(ci);
                } else if c.release.is_some() {
                    self.assist_release(ci);
                }
                continue;
            }
            if c.next > c.spec.count {
                continue;
            }
            if now < c.start_ns {
                later = Some(later.map_or(c.start_ns, |t: u64| t.min(c.start_ns)));
                continue;
            }
            self.coll_start(ci, now);
        }
        later
    }

    /// Enter collective `next` of flow context `ci`.
    fn coll_start(&mut self, ci: usize, now: u64) {
        let c = &mut self.colls[ci];
        let k = c.next;
        let input = c.spec.input(c.rank, k);
        let busy = Busy::now(&self.host);
        if c.bcast.is_some() {
            // The root posts its multicast (not yet: again later); a
            // member waits for it.
            if !self.bcast_start(ci, k, &input) {
                return;
            }
            return self.coll_entered(ci, k, busy, now);
        }
        match c.spec.scheme {
            CollScheme::Host => {
                let chunks = self.host_chunks(ci);
                let c = &mut self.colls[ci];
                c.host.value = input;
                c.host.at = vec![0; chunks];
            }
            _ => {
                let p = &mut self.ports[c.port].port;
                if !input.is_empty() && p.write(&c.data, 0, &input).is_err() {
                    return;
                }
                let data = c.data.sub(0, input.len() as u64).unwrap_or(c.data);
                let req = super::assist::request(c, &data, k);
                match p.collective(&req) {
                    Ok(cseq) if cseq as u64 == k => {}
                    Ok(cseq) => {
                        let m = format!("collective {k} of flow {} posted as {cseq}", c.flow);
                        self.problem(m);
                    }
                    // The ring is full: again at the next step.
                    Err(host_driver::DriverError::RingFull) => return,
                    Err(e) => {
                        c.next = c.spec.count + 1;
                        let m = format!("flow {}: collective {k}: {e}", c.flow);
                        self.problem(m);
                        return;
                    }
                }
            }
        }
        self.coll_entered(ci, k, busy, now);
    }

    /// The member entered collective `k` of `ci` at `now` (`busy` its
    /// clocks then): into the ledger, and as far as it goes at once.
    fn coll_entered(&mut self, ci: usize, k: u64, busy: Busy, now: u64) {
        let c = &mut self.colls[ci];
        c.running = Some((k, busy));
        let flow = c.flow;
        if let Some(l) = self.ledger.borrow_mut().flows[flow].coll.as_mut() {
            l.entered(k, now);
        }
        let c = &self.colls[ci];
        if c.bcast.is_some() {
            self.bcast_take(ci);
        } else if c.spec.scheme == CollScheme::Host {
            self.host_progress(ci);
        }
    }

    /// The member's part of the running collective of `ci` ended
    /// (`ok`: every member took part): check its result, account for it.
    pub(super) fn coll_finish(&mut self, ci: usize, ok: bool, result: Option<Vec<u8>>) {
        let now = self.host.now_ns();
        let busy_now = Busy::now(&self.host);
        let c = &mut self.colls[ci];
        let Some((k, busy)) = c.running.take() else { return };
        c.next = k + 1;
        let (rank, n, flow) = (c.rank, c.spec.size(), c.flow);
        let mut l = self.ledger.borrow_mut();
        let Some(cl) = l.flows[flow].coll.as_mut() else { return };
        let mut problems = Vec::new();
        if let (Some(v), true) = (result, ok && c.spec.has_result(rank)) {
            let want = cl.expected.entry(k).or_insert_with(|| c.spec.expected(k, c.fabric));
            cl.checked += 1;
            if want.get(c.spec.expected_at(rank)).is_none_or(|w| *w != v) {
                cl.wrong += 1;
                problems
                    .push(format!("flow {flow}: collective {k}: rank {rank}'s result is wrong"));
            }
        }
        if !ok {
            problems.push(format!("flow {flow}: collective {k} ended with members missing"));
        }
        let (host_ns, nic_ns) = busy_now.since(busy);
        cl.host_cpu_ns.extend(host_ns);
        cl.nic_cpu_ns.extend(nic_ns);
        if !cl.finished(rank, n, k, now, ok) {
            problems.push(format!("flow {flow}: collective {k} ended twice at rank {rank}"));
        }
        drop(l);
        for m in problems {
            self.problem(m);
        }
    }

    /// A NIC-scheme collective's event.
    pub(super) fn on_collective(&mut self, pi: usize, group: u16, cseq: u32, status: SendStatus) {
        let Some(ci) = self
            .colls
            .iter()
            .position(|c| c.port == pi && c.group.id() == group && c.running.is_some())
        else {
            self.problem(format!("a collective event of group {group} ({cseq}) of no flow"));
            return;
        };
        let c = &self.colls[ci];
        if c.running.map(|r| r.0) != Some(cseq as u64) {
            self.problem(format!("group {group}: collective {cseq} ended, not the one running"));
            return;
        }
        let ok = status == SendStatus::Ok;
        let result = (ok && c.spec.has_result(c.rank)).then(|| {
            let mut v = vec![0u8; c.spec.bytes() as usize];
            let _ = self.ports[pi].port.read(&c.data, 0, &mut v);
            v
        });
        self.coll_finish(ci, ok, result);
        self.coll_next(ci);
    }

    /// The member's part of `ci`'s last collective ended: enter the next
    /// at once, if there is one and its flow has started.
    pub(super) fn coll_next(&mut self, ci: usize) {
        let now = self.host.now_ns();
        let c = &self.colls[ci];
        if c.next <= c.spec.count && now >= c.start_ns {
            self.coll_start(ci, now);
        }
    }

    /// Every collective flow of this node is through.
    pub(super) fn colls_done(&self) -> bool {
        self.colls.iter().all(|c| c.running.is_none() && c.next > c.spec.count)
    }

    // ---- the host scheme

    fn host_chunks(&self, ci: usize) -> usize {
        let c = &self.colls[ci];
        let chunk = host_chunk(&c.spec, c.alg);
        nic_abi::collective::chunks(c.spec.bytes(), chunk.max(1)) as usize
    }

    /// Is `(node, port)` a member of a host-scheme collective flow on
    /// port `pi`? Its context.
    pub(super) fn host_coll_of(&self, pi: usize, node: u16) -> Option<usize> {
        self.colls.iter().position(|c| {
            c.port == pi && c.spec.scheme == CollScheme::Host && c.spec.rank_of(node).is_some()
        })
    }

    /// A host-scheme message `msg` from `node` for context `ci`.
    pub(super) fn host_received(&mut self, ci: usize, node: u16, msg: &[u8]) {
        let c = &mut self.colls[ci];
        let (Some(from), true) = (c.spec.rank_of(node), msg.len() >= HOST_HEADER as usize) else {
            self.problem(format!("a collective message from node {node} of no member"));
            return;
        };
        let k = u64::from_le_bytes(msg[0..8].try_into().unwrap_or_default());
        let chunk = u32::from_le_bytes(msg[8..12].try_into().unwrap_or_default());
        let tag = msg[12];
        c.host.held.insert((k, chunk, tag, from), msg[HOST_HEADER as usize..].to_vec());
        self.host_progress(ci);
    }

    /// Take the running host-scheme collective of `ci` as far as it goes.
    fn host_progress(&mut self, ci: usize) {
        let Some((k, _)) = self.colls[ci].running else { return };
        let chunks = self.colls[ci].host.at.len().max(1);
        let mut all = true;
        for ch in 0..chunks as u32 {
            all &= self.host_step_chunk(ci, k, ch);
        }
        let c = &self.colls[ci];
        if all && c.host.free.len() == c.host.bufs.len() {
            let v = c.host.value.clone();
            self.coll_finish(ci, true, Some(v));
            self.coll_next(ci);
        }
    }

    /// Chunk `ch` of collective `k` as far as it goes: true when its steps
    /// are all done.
    fn host_step_chunk(&mut self, ci: usize, k: u64, ch: u32) -> bool {
        let c = &self.colls[ci];
        let shape = Shape {
            kind: c.spec.kind,
            alg: c.alg,
            n: c.spec.size(),
            rank: c.rank,
            root: c.spec.root,
        };
        let steps = shape.steps(ch);
        let chunk = host_chunk(&c.spec, c.alg) as usize;
        let range = (ch as usize * chunk).min(c.host.value.len())
            ..((ch as usize + 1) * chunk).min(c.host.value.len());
        loop {
            let c = &mut self.colls[ci];
            let at = c.host.at.get(ch as usize).copied().unwrap_or(0);
            let Some(step) = steps.get(at) else { return true };
            match step {
                Step::Send { to, tag } => {
                    let Some(b) = c.host.free.pop() else { return false };
                    let buf = c.host.bufs[b];
                    let mut msg = Vec::with_capacity(HOST_HEADER as usize + range.len());
                    msg.extend(k.to_le_bytes());
                    msg.extend(ch.to_le_bytes());
                    msg.extend([tag, 0, 0, 0]);
                    msg.extend(&c.host.value[range.clone()]);
                    let p = &mut self.ports[c.port].port;
                    let part = buf.sub(0, msg.len() as u64).unwrap_or(buf);
                    let node = c.spec.members[to as usize];
                    // For the members' receive buffers, all of one class.
                    let class = nic_abi::size_class_for(host_message_len(&c.spec));
                    let opts = SendOpts {
                        tag: COLL_TAG | (c.flow as u64) << 16 | b as u64,
                        notify: true,
                        size_class: Some(class),
                        ..SendOpts::default()
                    };
                    let sent = p.write(&part, 0, &msg).is_ok()
                        && p.send_to(&part, Dest { node, port: c.spec.port }, opts).is_ok();
                    if !sent {
                        c.host.free.push(b);
                        return false;
                    }
                }
                Step::Recv { from, tag, how } => {
                    let Some(v) = c.host.held.remove(&(k, ch, tag, from)) else { return false };
                    let dst = &mut c.host.value[range.clone()];
                    if v.len() != dst.len() {
                        let m =
                            format!("flow {}: a {}-byte chunk for {}", c.flow, v.len(), dst.len());
                        self.problem(m);
                        return false;
                    }
                    match how {
                        How::Copy => dst.copy_from_slice(&v),
                        How::Combine(side) => {
                            combine(c.spec.op, c.spec.dtype, dst, &v, side);
                            let bytes = 2 * v.len() as u64;
                            self.ports[c.port].port.backend().charge(HostOp::Touch(bytes));
                        }
                    }
                }
            }
            let c = &mut self.colls[ci];
            c.host.at[ch as usize] = at + 1;
        }
    }

    /// A host-scheme send completed (its tag's buffer is free again).
    pub(super) fn host_sent(&mut self, tag: u64, status: SendStatus) {
        let flow = ((tag >> 16) & 0xFFFF) as usize;
        let b = (tag & 0xFFFF) as usize;
        let Some(ci) = self.colls.iter().position(|c| c.flow == flow) else { return };
        if status != SendStatus::Ok {
            self.problem(format!("flow {flow}: a collective message failed: {status:?}"));
        }
        let c = &mut self.colls[ci];
        if b < c.host.bufs.len() && !c.host.free.contains(&b) {
            c.host.free.push(b);
        }
        self.host_progress(ci);
    }
}
