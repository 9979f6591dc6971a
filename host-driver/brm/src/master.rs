//! The BRM master: admission control and best-effort shares, after
//! docs/rate-control.md.
//!
//! Resources: every node (its sending and receiving share one capacity,
//! the calibrated node-capacity curve) and every switch output port (one
//! link each). A flow uses its source node, the output ports of every
//! switch on its route (from the topology's deterministic source routes),
//! and its destination node. A request for B MB/s is admitted only if,
//! with it, (1) the source node, (2) every switch output port on the
//! route, (3) the destination node stays within capacity; checked in that
//! order, the first that fails is named. Admitted: IDT = T * Bmax / B.
//!
//! Best effort: at each resource the surplus (capacity less reservations)
//! is split evenly among the best-effort flows through it; each gets the
//! minimum over its path, IDT = T * Bmax / share. A best-effort flow alone
//! on every resource of its path, with no reservation there either, runs
//! unregulated (IDT 0). Every change of the reservations recomputes every
//! managed flow's IDT and sends the changed ones to the source nodes'
//! agents.
//!
//! Owns the reservations; talks to NICs only through [`AgentLinks`]
//! (postcard bytes), so the same master runs in the sim and in the BRM
//! process of a live or qemu cluster (`server`).

use std::collections::BTreeMap;

use crate::protocol::{
    encode, Admitted, AgentCommand, AgentReply, Criterion, FlowId, Refused, Reply, Request,
};

use crate::calibration::{Calibration, EPS, MAX_IDT};
use nic_fabric::topology::Layout;

/// What carries the master's commands to the node agents (bytes in,
/// bytes out, blocking).
pub trait AgentLinks {
    fn send(&mut self, node: u16, command: &[u8]) -> Vec<u8>;
}

/// A resource a flow uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    Node(u16),
    /// A switch output port (switch, port).
    Port(u16, u8),
}

/// How the master manages a flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Managed {
    Reserved(f64),
    BestEffort,
}

/// Reserved (incoming, outgoing) MB/s per node, and reserved MB/s per
/// switch output port.
type Loads = (BTreeMap<u16, (f64, f64)>, BTreeMap<(u16, u8), f64>);

/// One IDT change the master sent: (virtual ns, flow, IDT; None = the
/// entry was removed).
pub type Change = (u64, FlowId, Option<u32>);

pub struct Master {
    cal: Calibration,
    layout: Layout,
    flows: BTreeMap<FlowId, Managed>,
    /// IDTs installed at the source NICs.
    pushed: BTreeMap<FlowId, u32>,
    history: Vec<Change>,
    /// Agent failures (commands a NIC did not take).
    pub failures: Vec<String>,
    now_ns: u64,
}

impl Master {
    pub fn new(cal: Calibration, layout: Layout) -> Master {
        Master {
            cal,
            layout,
            flows: BTreeMap::new(),
            pushed: BTreeMap::new(),
            history: Vec::new(),
            failures: Vec::new(),
            now_ns: 0,
        }
    }

    pub fn calibration(&self) -> &Calibration {
        &self.cal
    }

    /// The virtual time the next request is handled at (history stamps).
    pub fn set_now(&mut self, ns: u64) {
        self.now_ns = ns;
    }

    /// Every IDT change sent so far.
    pub fn history(&self) -> &[Change] {
        &self.history
    }

    /// The flows managed now.
    pub fn managed(&self) -> &BTreeMap<FlowId, Managed> {
        &self.flows
    }

    /// The switch output ports on `src`'s route to `dst`, in order.
    pub fn ports_on_route(&self, src: u16, dst: u16) -> Result<Vec<(u16, u8)>, String> {
        ports_on_route(&self.layout, src as usize, dst as usize)
    }

    fn path(&self, f: &FlowId) -> Result<Vec<Resource>, String> {
        let mut p = vec![Resource::Node(f.src_node)];
        for (s, o) in self.ports_on_route(f.src_node, f.dst_node)? {
            p.push(Resource::Port(s, o));
        }
        p.push(Resource::Node(f.dst_node));
        Ok(p)
    }

    fn check_flow(&self, f: &FlowId) -> Result<(), Refused> {
        let n = self.layout.nodes();
        if f.src_node as usize >= n || f.dst_node as usize >= n {
            return Err(Refused::BadRequest(format!(
                "flow {f}: node out of range (nodes 0 to {})",
                n.saturating_sub(1)
            )));
        }
        if f.src_node == f.dst_node {
            return Err(Refused::BadRequest(format!("flow {f}: source and target are one node")));
        }
        if f.src_port as usize >= nic_abi::NUM_PORTS
            || f.dst_port as usize >= nic_abi::NUM_PORTS
            || f.prio > 1
        {
            return Err(Refused::BadRequest(format!("flow {f}: port or priority out of range")));
        }
        Ok(())
    }

    /// Reserved (in, out) at each node and reserved load at each port, of
    /// every reservation but `except`'s.
    fn reserved_loads(&self, except: Option<FlowId>) -> Loads {
        let mut nodes: BTreeMap<u16, (f64, f64)> = BTreeMap::new();
        let mut ports: BTreeMap<(u16, u8), f64> = BTreeMap::new();
        for (f, m) in &self.flows {
            let Managed::Reserved(b) = *m else { continue };
            if Some(*f) == except {
                continue;
            }
            nodes.entry(f.src_node).or_default().1 += b;
            nodes.entry(f.dst_node).or_default().0 += b;
            for p in self.ports_on_route(f.src_node, f.dst_node).unwrap_or_default() {
                *ports.entry(p).or_default() += b;
            }
        }
        (nodes, ports)
    }

    /// Would a reservation of `mb_s` on `flow` (replacing its own) keep
    /// every resource within capacity? Err names the first that would not.
    pub fn admit(&self, flow: FlowId, mb_s: f64) -> Result<u32, Refused> {
        self.check_flow(&flow)?;
        if !(mb_s.is_finite() && mb_s > 0.0) {
            return Err(Refused::BadRequest(format!("{mb_s} MB/s is not a positive rate")));
        }
        let path =
            self.ports_on_route(flow.src_node, flow.dst_node).map_err(Refused::BadRequest)?;
        let (nodes, ports) = self.reserved_loads(Some(flow));
        let c = &self.cal;
        let refuse = |criterion, available: f64| Refused::Capacity {
            criterion,
            requested_mb_s: mb_s,
            available_mb_s: available.max(0.0),
        };
        // 1: the source node sends B more.
        let (si, so) = nodes.get(&flow.src_node).copied().unwrap_or_default();
        if !c.node_admits(si, so + mb_s) {
            let left = if si <= c.in_capacity() + EPS { c.out_capacity(si) - so } else { 0.0 };
            return Err(refuse(Criterion::SourceNode { node: flow.src_node }, left));
        }
        // 2: every switch output port on the route.
        for p in &path {
            let load = ports.get(p).copied().unwrap_or(0.0);
            if load + mb_s > c.link_mb_s + EPS {
                return Err(refuse(
                    Criterion::SwitchPort { switch: p.0, port: p.1 },
                    c.link_mb_s - load,
                ));
            }
        }
        // 3: the destination node receives B more.
        let (di, dout) = nodes.get(&flow.dst_node).copied().unwrap_or_default();
        if !c.node_admits(di + mb_s, dout) {
            let left = most_in(c, di, dout) - di;
            return Err(refuse(Criterion::DestinationNode { node: flow.dst_node }, left));
        }
        Ok(c.idt_for(mb_s))
    }

    /// The IDT of every managed flow under the current reservations.
    pub fn allocate(&self) -> BTreeMap<FlowId, u32> {
        let c = &self.cal;
        let (nodes, ports) = self.reserved_loads(None);
        let mut out = BTreeMap::new();
        // Best-effort flows through each resource, and every flow's path.
        let mut be_in: BTreeMap<u16, u32> = BTreeMap::new();
        let mut be_out: BTreeMap<u16, u32> = BTreeMap::new();
        let mut be_port: BTreeMap<(u16, u8), u32> = BTreeMap::new();
        let mut paths: BTreeMap<FlowId, Vec<(u16, u8)>> = BTreeMap::new();
        for (f, m) in &self.flows {
            let route = self.ports_on_route(f.src_node, f.dst_node).unwrap_or_default();
            if *m == Managed::BestEffort {
                *be_out.entry(f.src_node).or_default() += 1;
                *be_in.entry(f.dst_node).or_default() += 1;
                for p in &route {
                    *be_port.entry(*p).or_default() += 1;
                }
            }
            paths.insert(*f, route);
        }
        // Each node's even share for its best-effort flows: the largest s
        // with (in + k_in s, out + k_out s) inside the node's capacity.
        let node_share = |n: u16| -> f64 {
            let (i, o) = nodes.get(&n).copied().unwrap_or_default();
            let ki = *be_in.get(&n).unwrap_or(&0) as f64;
            let ko = *be_out.get(&n).unwrap_or(&0) as f64;
            let (mut lo, mut hi) = (0.0f64, c.in_capacity().max(c.bmax_mb_s) * 2.0);
            if !c.node_admits(i, o) {
                return 0.0;
            }
            for _ in 0..60 {
                let mid = (lo + hi) / 2.0;
                if c.node_admits(i + ki * mid, o + ko * mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        for (f, m) in &self.flows {
            match *m {
                Managed::Reserved(b) => {
                    out.insert(*f, c.idt_for(b));
                }
                Managed::BestEffort => {
                    let route = &paths[f];
                    let alone = |n: u16| {
                        nodes.get(&n).is_none_or(|&(i, o)| i == 0.0 && o == 0.0)
                            && be_in.get(&n).copied().unwrap_or(0)
                                + be_out.get(&n).copied().unwrap_or(0)
                                == 1
                    };
                    let uncontended = alone(f.src_node)
                        && alone(f.dst_node)
                        && route.iter().all(|p| {
                            ports.get(p).copied().unwrap_or(0.0) == 0.0 && be_port[p] == 1
                        });
                    if uncontended {
                        out.insert(*f, 0);
                        continue;
                    }
                    let mut share = node_share(f.src_node).min(node_share(f.dst_node));
                    for p in route {
                        let left = c.link_mb_s - ports.get(p).copied().unwrap_or(0.0);
                        share = share.min(left.max(0.0) / be_port[p] as f64);
                    }
                    let idt = if share >= c.bmax_mb_s {
                        0
                    } else if share <= 0.0 {
                        MAX_IDT
                    } else {
                        c.idt_for(share)
                    };
                    out.insert(*f, idt);
                }
            }
        }
        out
    }

    /// Send every changed IDT to the source nodes' agents. A command an
    /// agent did not carry out is recorded in `failures` and not taken as
    /// installed, so the next change sends it again.
    fn push(&mut self, links: &mut dyn AgentLinks) {
        let want = self.allocate();
        let gone: Vec<FlowId> =
            self.pushed.keys().filter(|f| !want.contains_key(f)).copied().collect();
        for f in gone {
            if self.command(links, f.src_node, AgentCommand::Clear { flow: f.key() }) {
                self.pushed.remove(&f);
                self.history.push((self.now_ns, f, None));
            }
        }
        for (f, idt) in want {
            if self.pushed.get(&f) == Some(&idt) {
                continue;
            }
            if self.command(links, f.src_node, AgentCommand::SetIdt { flow: f.key(), idt }) {
                self.pushed.insert(f, idt);
                self.history.push((self.now_ns, f, Some(idt)));
            }
        }
    }

    /// Did the agent carry `cmd` out?
    fn command(&mut self, links: &mut dyn AgentLinks, node: u16, cmd: AgentCommand) -> bool {
        let reply = links.send(node, &encode(&cmd));
        match crate::protocol::decode::<AgentReply>(&reply) {
            Ok(AgentReply::Done) => true,
            Ok(AgentReply::Failed(e)) => {
                self.failures.push(format!("node {node}: {cmd:?}: {e}"));
                false
            }
            Err(e) => {
                self.failures.push(format!("node {node}: {cmd:?}: {e}"));
                false
            }
        }
    }

    /// NIC `node` was reset (its flow table is empty): install again the
    /// IDT of every managed flow it sources. Returns how many it installed
    /// (a NIC that refuses one is counted in `failures`).
    pub fn nic_reset(&mut self, node: u16, links: &mut dyn AgentLinks) -> usize {
        let mine: Vec<(FlowId, u32)> =
            self.pushed.iter().filter(|(f, _)| f.src_node == node).map(|(f, i)| (*f, *i)).collect();
        mine.into_iter()
            .filter(|&(f, idt)| {
                self.command(links, node, AgentCommand::SetIdt { flow: f.key(), idt })
            })
            .count()
    }

    /// The IDT last installed at `flow`'s source NIC, if any.
    pub fn installed(&self, flow: &FlowId) -> Option<u32> {
        self.pushed.get(flow).copied()
    }

    /// Handle one request.
    pub fn handle(&mut self, req: Request, links: &mut dyn AgentLinks) -> Reply {
        match req {
            Request::Reserve { flow, mb_s } => match self.admit(flow, mb_s) {
                Ok(idt) => {
                    self.flows.insert(flow, Managed::Reserved(mb_s));
                    self.push(links);
                    Reply::Admitted(Admitted { idt })
                }
                Err(r) => Reply::Refused(r),
            },
            Request::BestEffort { flow } => {
                if let Err(r) = self.check_flow(&flow) {
                    return Reply::Refused(r);
                }
                if let Err(e) = self.path(&flow) {
                    return Reply::Refused(Refused::BadRequest(e));
                }
                self.flows.insert(flow, Managed::BestEffort);
                self.push(links);
                Reply::Registered { idt: self.pushed.get(&flow).copied().unwrap_or(0) }
            }
            Request::Release { flow } => {
                let had = self.flows.remove(&flow).is_some();
                if had {
                    self.push(links);
                }
                Reply::Released { had }
            }
            Request::Status => Reply::Status(
                self.flows
                    .iter()
                    .map(|(f, m)| {
                        let r = match m {
                            Managed::Reserved(b) => Some(*b),
                            Managed::BestEffort => None,
                        };
                        (*f, r, self.pushed.get(f).copied().unwrap_or(0))
                    })
                    .collect(),
            ),
        }
    }
}

/// The most a node receiving `i` and sending `o` could receive.
fn most_in(c: &Calibration, i: f64, o: f64) -> f64 {
    let (mut lo, mut hi) = (i, c.in_capacity() + 1.0);
    if !c.node_admits(i, o) {
        return i;
    }
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if c.node_admits(mid, o) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The switch output ports (switch, port) a packet from `src` to `dst`
/// leaves by, in order: the route bytes walked through the wiring plan.
pub fn ports_on_route(l: &Layout, src: usize, dst: usize) -> Result<Vec<(u16, u8)>, String> {
    if src >= l.nodes() || dst >= l.nodes() {
        return Err(format!("no route {src} -> {dst}: node out of range"));
    }
    let route = l.route(src, dst);
    let mut sw = l.attach[src].0;
    let mut out = Vec::with_capacity(route.len());
    for (k, b) in route.iter().enumerate() {
        let port = (b & 0x7F) as usize;
        out.push((sw as u16, port as u8));
        if k + 1 == route.len() {
            if l.attach[dst] != (sw, port) {
                return Err(format!("route {src} -> {dst} does not end at node {dst}"));
            }
            break;
        }
        let next = l.trunks.iter().find_map(|&(a, b)| {
            if a == (sw, port) {
                Some(b.0)
            } else if b == (sw, port) {
                Some(a.0)
            } else {
                None
            }
        });
        sw = next.ok_or_else(|| {
            format!("route {src} -> {dst}: switch {sw} port {port} leads nowhere")
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::CurvePoint;
    use crate::protocol::decode;
    use nic_fabric::topology::Topology;

    /// The shared test calibration with a straight node curve (in + out =
    /// Bmax).
    fn cal() -> Calibration {
        Calibration {
            node_curve: vec![
                CurvePoint { in_mb_s: 0.0, out_mb_s: 82.0 },
                CurvePoint { in_mb_s: 82.0, out_mb_s: 0.0 },
            ],
            ..crate::calibration::tests::sample()
        }
    }

    /// Agents that just remember what they were told.
    #[derive(Default)]
    struct Recorder(Vec<(u16, AgentCommand)>);

    impl AgentLinks for Recorder {
        fn send(&mut self, node: u16, command: &[u8]) -> Vec<u8> {
            self.0.push((node, decode(command).unwrap()));
            encode(&AgentReply::Done)
        }
    }

    fn flow(s: u16, d: u16) -> FlowId {
        FlowId::new(s, 1, d, 1, nic_abi::Priority::Low)
    }

    fn reserve(m: &mut Master, l: &mut Recorder, f: FlowId, b: f64) -> Reply {
        m.handle(Request::Reserve { flow: f, mb_s: b }, l)
    }

    /// Agents whose node `dead` answers nothing (undecodable bytes).
    struct Flaky {
        dead: Option<u16>,
        seen: Vec<(u16, AgentCommand)>,
    }

    impl AgentLinks for Flaky {
        fn send(&mut self, node: u16, command: &[u8]) -> Vec<u8> {
            if Some(node) == self.dead {
                return Vec::new();
            }
            self.seen.push((node, decode(command).unwrap()));
            encode(&AgentReply::Done)
        }
    }

    #[test]
    fn a_command_an_agent_did_not_take_is_a_failure_and_is_sent_again_later() {
        let mut m = Master::new(cal(), Topology::Star.layout(4, 16).unwrap());
        let mut a = Flaky { dead: Some(0), seen: vec![] };
        let f = flow(0, 1);
        let r = m.handle(Request::Reserve { flow: f, mb_s: 41.0 }, &mut a);
        assert_eq!(r, Reply::Admitted(Admitted { idt: 200 }));
        assert_eq!(m.failures.len(), 1, "{:?}", m.failures);
        assert!(m.failures[0].starts_with("node 0:"), "{:?}", m.failures);
        assert_eq!(m.installed(&f), None);
        assert!(m.history().is_empty());
        // The agent is back: the next change installs it too.
        a.dead = None;
        m.handle(Request::Reserve { flow: flow(2, 3), mb_s: 10.0 }, &mut a);
        assert_eq!(m.installed(&f), Some(200));
        assert!(a.seen.contains(&(0, AgentCommand::SetIdt { flow: f.key(), idt: 200 })));
    }

    #[test]
    fn routes_name_every_switch_output_port() {
        let l = Topology::TwoSwitch.layout(6, 16).unwrap();
        assert_eq!(ports_on_route(&l, 0, 1).unwrap(), vec![(0, 1)]);
        assert_eq!(ports_on_route(&l, 0, 4).unwrap(), vec![(0, 15), (1, 1)]);
        assert_eq!(ports_on_route(&l, 4, 0).unwrap(), vec![(1, 15), (0, 0)]);
        let c = Topology::Clos.layout(20, 8).unwrap();
        assert_eq!(ports_on_route(&c, 0, 13).unwrap(), vec![(0, 5), (6, 3), (3, 1)]);
    }

    #[test]
    fn each_criterion_refuses_and_is_named() {
        // Nodes 0..5 on switch 0, 5..10 on switch 1 (trunk: port 15).
        let l = Topology::TwoSwitch.layout(10, 16).unwrap();
        let mut m = Master::new(cal(), l);
        let mut a = Recorder::default();
        // 1: node 0 already sends 60.
        assert!(matches!(reserve(&mut m, &mut a, flow(0, 1), 60.0), Reply::Admitted(_)));
        let Reply::Refused(r) = reserve(&mut m, &mut a, flow(0, 2), 30.0) else { panic!() };
        assert_eq!(r.criterion(), Some(Criterion::SourceNode { node: 0 }));
        // 3: node 1 already receives 60.
        let Reply::Refused(r) = reserve(&mut m, &mut a, flow(2, 1), 30.0) else { panic!() };
        assert_eq!(r.criterion(), Some(Criterion::DestinationNode { node: 1 }));
        // 2: the trunk (switch 0 port 15) carries 3 x 55 > 158.
        for (s, d) in [(2, 6), (3, 7)] {
            assert!(matches!(reserve(&mut m, &mut a, flow(s, d), 55.0), Reply::Admitted(_)));
        }
        let Reply::Refused(r) = reserve(&mut m, &mut a, flow(4, 8), 55.0) else { panic!() };
        assert_eq!(r.criterion(), Some(Criterion::SwitchPort { switch: 0, port: 15 }));
        // Releasing lets it in.
        let rel = m.handle(Request::Release { flow: flow(2, 6) }, &mut a);
        assert_eq!(rel, Reply::Released { had: true });
        assert!(matches!(reserve(&mut m, &mut a, flow(4, 8), 55.0), Reply::Admitted(_)));
    }

    #[test]
    fn admitted_flows_get_t_bmax_over_b_and_agents_hear_of_it() {
        let mut m = Master::new(cal(), Topology::Star.layout(4, 16).unwrap());
        let mut a = Recorder::default();
        assert_eq!(
            reserve(&mut m, &mut a, flow(0, 1), 41.0),
            Reply::Admitted(Admitted { idt: 200 })
        );
        assert_eq!(a.0, vec![(0, AgentCommand::SetIdt { flow: flow(0, 1).key(), idt: 200 })]);
        m.handle(Request::Release { flow: flow(0, 1) }, &mut a);
        assert_eq!(a.0[1], (0, AgentCommand::Clear { flow: flow(0, 1).key() }));
    }

    #[test]
    fn best_effort_uses_what_reservations_leave() {
        let mut m = Master::new(cal(), Topology::Star.layout(4, 16).unwrap());
        let mut a = Recorder::default();
        let be = flow(0, 1);
        // Alone: unregulated.
        assert_eq!(
            m.handle(Request::BestEffort { flow: be }, &mut a),
            Reply::Registered { idt: 0 }
        );
        // A 40 MB/s premium flow from the same node: 42 left.
        reserve(&mut m, &mut a, flow(0, 2), 40.0);
        assert_eq!(m.allocate()[&be], cal().idt_for(42.0));
        // Another 20: 22 left.
        reserve(&mut m, &mut a, flow(0, 3), 20.0);
        assert_eq!(m.allocate()[&be], cal().idt_for(22.0));
        // Both stop: unregulated again.
        m.handle(Request::Release { flow: flow(0, 2) }, &mut a);
        m.handle(Request::Release { flow: flow(0, 3) }, &mut a);
        assert_eq!(m.allocate()[&be], 0);
        let last = a.0.last().unwrap();
        assert_eq!(*last, (0, AgentCommand::SetIdt { flow: be.key(), idt: 0 }));
    }

    #[test]
    fn best_effort_flows_split_the_surplus_evenly_and_take_their_path_minimum() {
        let mut m = Master::new(cal(), Topology::Star.layout(4, 16).unwrap());
        let mut a = Recorder::default();
        // Two best-effort flows from node 0: 41 each.
        m.handle(Request::BestEffort { flow: flow(0, 1) }, &mut a);
        m.handle(Request::BestEffort { flow: flow(0, 2) }, &mut a);
        let al = m.allocate();
        assert_eq!(al[&flow(0, 1)], cal().idt_for(41.0));
        // Node 2 also receives 60 reserved from node 3: flow 0->2 gets
        // min(41 at node 0, 22 at node 2).
        reserve(&mut m, &mut a, flow(3, 2), 60.0);
        let al = m.allocate();
        assert_eq!(al[&flow(0, 2)], cal().idt_for(22.0));
        assert_eq!(al[&flow(0, 1)], cal().idt_for(41.0));
    }
}
