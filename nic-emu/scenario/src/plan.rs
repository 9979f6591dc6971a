//! From a validated scenario to what each simulated host does: which ports
//! it opens, which receive buffers it keeps posted on each (size class,
//! priority, how many), and which roles it plays (stream sender, ping-pong
//! initiator or responder) with how many send buffers.
//!
//! Planning happens before the cluster is built, so resource problems (a
//! port that needs more receive-buffer kinds than it has receive tokens,
//! more registered memory than its page table maps, more host memory than
//! the profile gives a host) are refused as scenario errors naming the
//! node and port, not discovered halfway through a run.

use std::collections::BTreeMap;

use nic_abi::desc::MAX_LISTED_CHILDREN;
use nic_abi::multicast::{children_computed, Scheme};
use nic_abi::{class_max_len, size_class_for, Priority, PAGE_SIZE};

use super::format::{FlowKind, FlowSpec, ScenarioError, StreamKey, Validated};

/// Which way a message goes: a flow's requests (or stream messages), or a
/// ping-pong flow's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    Forward = 0,
    Reply = 1,
}

/// What a host does for one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// Keep up to `slots` messages outstanding until all are sent.
    StreamSender,
    /// Send request i, wait for reply i, send request i + 1.
    PingInitiator,
    /// Answer each request with a reply of the same size.
    PingResponder,
    /// The root of a multicast flow: keep up to `slots` multicasts
    /// outstanding until all are posted.
    McastRoot,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RolePlan {
    pub flow: usize,
    pub kind: RoleKind,
    /// Local port it sends from.
    pub port: u8,
    pub peer_node: u16,
    pub peer_port: u8,
    pub priority: Priority,
    /// Send buffers (each `slot_len` bytes).
    pub slots: u32,
    pub slot_len: u64,
    pub start_ns: u64,
}

impl RolePlan {
    /// The direction of what this role sends.
    pub fn sends(&self) -> Dir {
        match self.kind {
            RoleKind::PingResponder => Dir::Reply,
            _ => Dir::Forward,
        }
    }
}

/// Receive buffers of one (size class, priority) on one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolPlan {
    pub class: u8,
    pub priority: Priority,
    pub count: u32,
    /// Bytes of each buffer: the class's largest message.
    pub buf_len: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PortPlan {
    pub port: u8,
    pub pools: Vec<PoolPlan>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodePlan {
    pub node: u16,
    pub ports: Vec<PortPlan>,
    pub roles: Vec<RolePlan>,
}

/// The resources of a port, from the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub host_memory: u64,
}

/// The whole plan, plus the tables that tell a received message's flow:
/// by its stream (unicast), or by its group (multicast).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub nodes: Vec<NodePlan>,
    pub streams: BTreeMap<StreamKey, (usize, Dir)>,
    pub groups: BTreeMap<u16, usize>,
}

/// Sub-buffers inside one allocation are this aligned.
pub const SUB_ALIGN: u64 = 64;

pub fn align(n: u64) -> u64 {
    n.max(1).div_ceil(SUB_ALIGN) * SUB_ALIGN
}

/// Host memory port `p` of node `n` allocates: each receive pool and each
/// role's send buffers one allocation (page aligned), the event queue and
/// some slack.
fn port_bytes(n: &NodePlan, p: &PortPlan) -> u64 {
    port_buffer_bytes(n, p) + (1 << 20)
}

/// The message buffers of port `p` of node `n` (receive pools and send
/// buffers, page aligned): what a run writes of its host memory.
fn port_buffer_bytes(n: &NodePlan, p: &PortPlan) -> u64 {
    let pages = p
        .pools
        .iter()
        .map(|q| (q.count as u64 * align(q.buf_len)).div_ceil(PAGE_SIZE))
        .chain(
            n.roles
                .iter()
                .filter(|r| r.port == p.port)
                .map(|r| (r.slots as u64 * align(r.slot_len)).div_ceil(PAGE_SIZE)),
        )
        .sum::<u64>();
    pages * PAGE_SIZE
}

/// What a run costs in memory beyond its message buffers, per flow: its
/// spec, plan, streams, ledger and report, measured at about 7.5 KB a
/// flow on the simulator (a full all-to-all of 64 to 256 nodes, one
/// message a flow).
pub const FLOW_BYTES: u64 = 8 << 10;
/// The same per node: the part of the NIC's memory the firmware writes,
/// its engines and its host program, measured at about 2.2 MB a node (a
/// shift of 64 to 512 nodes, `modern`).
pub const NODE_BYTES: u64 = 5 << 19;
/// Latency samples kept one by one, per message of a flow (8 bytes in a
/// growing vector: up to twice that), up to `Samples::EXACT` of them.
pub const SAMPLE_BYTES: u64 = 16;

/// A run's expected memory, from its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub flows: u64,
    pub nodes: u64,
    /// Message buffers: every port's receive pools and send buffers.
    pub buffer_bytes: u64,
    /// Latency samples of every flow.
    pub sample_bytes: u64,
}

impl Footprint {
    /// The whole estimate (bytes).
    pub fn total(&self) -> u64 {
        self.flows
            .saturating_mul(FLOW_BYTES)
            .saturating_add(self.nodes.saturating_mul(NODE_BYTES))
            .saturating_add(self.buffer_bytes)
            .saturating_add(self.sample_bytes)
    }

    /// Refused, with the estimate, the memory there is and how to lower
    /// the estimate, when the estimate is more than `available` bytes.
    pub fn check(&self, available: Option<u64>) -> Result<(), ScenarioError> {
        let Some(avail) = available else { return Ok(()) };
        let total = self.total();
        if total <= avail {
            return Ok(());
        }
        Err(ScenarioError::new(format!(
            "flows: a run would take about {} of memory ({} flows x {} KiB, {} nodes x {} MiB, \
             {} of message buffers, {} of latency samples), more than this machine has \
             available ({}, MemAvailable in /proc/meminfo); lower it with fewer flows \
             ([[alltoall]] `offsets`, fewer `nodes`), smaller `bytes` or `sizes`, a smaller \
             `window`, or fewer `messages`",
            human_bytes(total),
            self.flows,
            FLOW_BYTES >> 10,
            self.nodes,
            NODE_BYTES as f64 / (1 << 20) as f64,
            human_bytes(self.buffer_bytes),
            human_bytes(self.sample_bytes),
            human_bytes(avail)
        )))
    }
}

/// Bytes as `3.2 GB`, `850 MB` or `12 kB` (powers of ten).
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}

/// The machine's available memory (`MemAvailable` in /proc/meminfo), or
/// None where there is no such file.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

impl Plan {
    /// The memory a run of `v` (whose plan this is) is expected to take.
    pub fn footprint(&self, v: &Validated) -> Footprint {
        let buffer_bytes = self
            .nodes
            .iter()
            .flat_map(|n| n.ports.iter().map(move |p| port_buffer_bytes(n, p)))
            .sum();
        let exact = crate::report::Samples::EXACT as u64;
        let sample_bytes =
            v.flows.iter().map(|f| f.messages.min(exact) * SAMPLE_BYTES).sum::<u64>();
        Footprint { flows: v.flows.len() as u64, nodes: v.nodes as u64, buffer_bytes, sample_bytes }
    }

    /// The most host memory one port allocates (a real-time cluster gives
    /// each port a slice of its own at least this large).
    pub fn largest_port_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .flat_map(|n| n.ports.iter().map(move |p| port_bytes(n, p)))
            .max()
            .unwrap_or(0)
    }
}

/// Ping-pong send buffers: two (the next request may go before the last
/// one's completion arrives), one for messages above 64 KiB (page table).
fn pingpong_slots(max: u64) -> u32 {
    if max <= 65536 {
        2
    } else {
        1
    }
}

/// Receive buffers a flow wants per size class on its receiving port.
fn recv_want(f: &FlowSpec) -> u32 {
    match f.kind {
        FlowKind::Stream | FlowKind::Multicast => f.window,
        _ => 1,
    }
}

/// Receive buffers a multicast member wants per size class: the window,
/// twice over for a relay whose host sends out of its receive buffers
/// (host and assisted schemes), which keeps each one until its children
/// have the message.
fn mcast_recv_want(f: &FlowSpec, rank: u16) -> u32 {
    match &f.mcast {
        Some(m) if rank > 0 && m.host_posts(rank) => 2 * f.window,
        _ => f.window,
    }
}

pub fn plan(v: &Validated, lim: Limits) -> Result<Plan, ScenarioError> {
    let mut nodes: Vec<NodePlan> = (0..v.nodes)
        .map(|n| NodePlan { node: n as u16, ports: Vec::new(), roles: Vec::new() })
        .collect();
    let mut streams = BTreeMap::new();
    let mut groups = BTreeMap::new();
    let mut coll_want = Vec::new();
    // (node, port) -> (class, priority) -> buffers wanted
    let mut want: BTreeMap<(u16, u8), BTreeMap<(u8, Priority), u32>> = BTreeMap::new();
    let mut add_recv = |node: u16, port: u8, f: &FlowSpec, n: u32| {
        let m = want.entry((node, port)).or_default();
        for c in f.size_classes() {
            *m.entry((c, f.priority)).or_default() += n;
        }
    };
    for f in &v.flows {
        if let Some(c) = &f.coll {
            groups.insert(c.group_id, f.index);
            for (rank, &node) in c.members.iter().enumerate() {
                // Every member's port is open; the host scheme's messages,
                // and a broadcast's multicast at every member but the
                // root, need receive buffers there.
                let (class, n) = super::coll::recv_buffers(c, rank as u16);
                coll_want.push(((node, c.port), (class, f.priority), n));
            }
            continue;
        }
        if let Some(m) = &f.mcast {
            groups.insert(m.group_id, f.index);
            check_mcast_sends(f)?;
            for (rank, &node) in m.members.iter().enumerate().skip(1) {
                add_recv(node, f.src_port, f, mcast_recv_want(f, rank as u16));
            }
            nodes[f.src_node as usize].roles.push(RolePlan {
                flow: f.index,
                kind: RoleKind::McastRoot,
                port: f.src_port,
                peer_node: f.src_node,
                peer_port: f.src_port,
                priority: f.priority,
                slots: f.window,
                slot_len: f.max_size(),
                start_ns: f.start_ns,
            });
            continue;
        }
        streams.insert(f.forward_key(), (f.index, Dir::Forward));
        add_recv(f.dst_node, f.dst_port, f, recv_want(f));
        match f.kind {
            FlowKind::Stream => {
                nodes[f.src_node as usize].roles.push(RolePlan {
                    flow: f.index,
                    kind: RoleKind::StreamSender,
                    port: f.src_port,
                    peer_node: f.dst_node,
                    peer_port: f.dst_port,
                    priority: f.priority,
                    slots: f.window,
                    slot_len: f.max_size(),
                    start_ns: f.start_ns,
                });
                // The receiving port must be open even if it sends nothing.
            }
            FlowKind::Pingpong => {
                streams.insert(f.reply_key(), (f.index, Dir::Reply));
                add_recv(f.src_node, f.src_port, f, recv_want(f));
                let slots = pingpong_slots(f.max_size());
                nodes[f.src_node as usize].roles.push(RolePlan {
                    flow: f.index,
                    kind: RoleKind::PingInitiator,
                    port: f.src_port,
                    peer_node: f.dst_node,
                    peer_port: f.dst_port,
                    priority: f.priority,
                    slots,
                    slot_len: f.max_size(),
                    start_ns: f.start_ns,
                });
                nodes[f.dst_node as usize].roles.push(RolePlan {
                    flow: f.index,
                    kind: RoleKind::PingResponder,
                    port: f.dst_port,
                    peer_node: f.src_node,
                    peer_port: f.src_port,
                    priority: f.priority,
                    slots,
                    slot_len: f.max_size(),
                    start_ns: 0,
                });
            }
            _ => {}
        }
    }

    for (at, pool, n) in coll_want {
        let m = want.entry(at).or_default();
        if n > 0 {
            *m.entry(pool).or_default() += n;
        }
    }

    // Ports each node opens: every port a role sends from or a flow
    // receives on.
    let mut opened: BTreeMap<(u16, u8), ()> = BTreeMap::new();
    for n in &nodes {
        for r in &n.roles {
            opened.insert((n.node, r.port), ());
        }
    }
    for &k in want.keys() {
        opened.insert(k, ());
    }

    for &(node, port) in opened.keys() {
        let demand = want.get(&(node, port)).cloned().unwrap_or_default();
        let pools = share_tokens(node, port, &demand, lim.recv_tokens)?;
        nodes[node as usize].ports.push(PortPlan { port, pools });
    }

    // Memory: bytes per node (host memory; a port registers as much of it
    // as it needs: its page table has an entry for every page).
    for n in &nodes {
        let mut node_bytes = 0u64;
        for p in &n.ports {
            node_bytes += port_bytes(n, p);
        }
        if node_bytes > lim.host_memory {
            return Err(ScenarioError::new(format!(
                "node {}: its flows need {} MiB of DMA-able host memory, the profile gives a \
                 host {} MiB",
                n.node,
                node_bytes >> 20,
                lim.host_memory >> 20
            )));
        }
    }
    let plan = Plan { nodes, streams, groups };
    // The whole run's memory, against what the machine has.
    plan.footprint(v).check(mem_available())?;
    Ok(plan)
}

/// The assisted scheme lists every child of a node in one descriptor.
/// (A host-scheme root posts its children as send tokens come back, so a
/// separate tree may have more than a port's send tokens; a relay has at
/// most log2 of the group's size.)
fn check_mcast_sends(f: &FlowSpec) -> Result<(), ScenarioError> {
    let Some(m) = &f.mcast else { return Ok(()) };
    let (alg, g) = (m.alg(), m.size());
    let most = (0..g).map(|r| children_computed(alg, g, r)).max().unwrap_or(0);
    let fail = |what: String| {
        Err(ScenarioError::new(format!(
            "{}: a {} multicast over a {} tree of {g} members {what}",
            f.label, m.scheme, alg
        )))
    };
    match m.scheme {
        Scheme::Assisted if most as usize > MAX_LISTED_CHILDREN => fail(format!(
            "lists {most} children in one descriptor, more than it holds \
             ({MAX_LISTED_CHILDREN})"
        )),
        _ => Ok(()),
    }
}

/// Share a port's receive tokens among the (class, priority) kinds its
/// incoming flows need: all they want if that fits, else in proportion,
/// at least one each.
fn share_tokens(
    node: u16,
    port: u8,
    demand: &BTreeMap<(u8, Priority), u32>,
    tokens: u32,
) -> Result<Vec<PoolPlan>, ScenarioError> {
    if demand.len() as u64 > tokens as u64 {
        return Err(ScenarioError::new(format!(
            "node {node} port {port}: its incoming flows use {} different (size class, priority) \
             kinds of receive buffer, but a port has only {tokens} receive tokens",
            demand.len()
        )));
    }
    let total: u64 = demand.values().map(|&w| w as u64).sum();
    let mut pools: Vec<PoolPlan> = demand
        .iter()
        .map(|(&(class, priority), &w)| {
            let count = if total <= tokens as u64 {
                w
            } else {
                ((w as u64 * tokens as u64 / total) as u32).max(1)
            };
            PoolPlan { class, priority, count, buf_len: class_max_len(class) }
        })
        .collect();
    // Rounding up to one each may overshoot: take back from the largest.
    while pools.iter().map(|p| p.count as u64).sum::<u64>() > tokens as u64 {
        if let Some(p) = pools.iter_mut().filter(|p| p.count > 1).max_by_key(|p| p.count) {
            p.count -= 1;
        } else {
            break;
        }
    }
    Ok(pools)
}

/// The size class a message of `len` bytes travels in.
pub fn class_of(len: u64) -> u8 {
    size_class_for(len)
}

#[cfg(test)]
mod tests {
    use super::super::format::Scenario;
    use super::*;

    const LIM: Limits = Limits { send_tokens: 32, recv_tokens: 32, host_memory: 256 << 20 };

    fn plan_of(text: &str) -> Result<Plan, ScenarioError> {
        plan(&Scenario::parse_validated(text).unwrap(), LIM)
    }

    #[test]
    fn the_footprint_counts_flows_nodes_buffers_and_samples_and_is_refused_past_what_is_there() {
        let text = "profile = \"x\"\n[fabric]\nnodes = 4\n[[alltoall]]\nname = \"a\"\n\
                    port = 2\nbytes = 65536\nmessages = 10\nwindow = 2\n";
        let v = Scenario::parse_validated(text).unwrap();
        let fp = plan(&v, LIM).unwrap().footprint(&v);
        // Each of the 12 senders: 2 x 64 KiB; each port receives from 3
        // flows, 2 buffers each: 6 x 64 KiB.
        let buffers = 12 * 2 * 65536 + 4 * 6 * 65536;
        assert_eq!(
            fp,
            Footprint { flows: 12, nodes: 4, buffer_bytes: buffers, sample_bytes: 12 * 10 * 16 }
        );
        assert_eq!(fp.total(), 12 * FLOW_BYTES + 4 * NODE_BYTES + buffers + 12 * 10 * 16);
        assert_eq!(fp.check(None), Ok(()));
        assert_eq!(fp.check(Some(fp.total())), Ok(()));
        let e = fp.check(Some(fp.total() - 1)).unwrap_err().message;
        assert!(
            e.starts_with(
                "flows: a run would take about 14 MB of memory (12 flows x 8 KiB, 4 nodes x 2.5 \
                 MiB, 3 MB of message buffers, 2 kB of latency samples), more than this machine \
                 has available (14 MB, MemAvailable in /proc/meminfo); lower it with fewer flows"
            ),
            "{e}"
        );
        assert!(mem_available().is_some_and(|b| b > 0), "/proc/meminfo has MemAvailable");
    }

    #[test]
    fn a_pingpong_gives_both_ends_a_role_and_a_buffer() {
        let p = plan_of(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 3]\n\
             kind = \"pingpong\"\nbytes = 100\nmessages = 3\n",
        )
        .unwrap();
        assert_eq!(p.nodes[0].roles[0].kind, RoleKind::PingInitiator);
        assert_eq!(p.nodes[1].roles[0].kind, RoleKind::PingResponder);
        assert_eq!(p.nodes[1].roles[0].port, 3);
        assert_eq!(p.nodes[0].ports[0].pools[0].class, 7);
        assert_eq!(p.nodes[1].ports[0].pools[0].count, 1);
        assert_eq!(p.streams.len(), 2);
    }

    #[test]
    fn receive_tokens_are_shared_when_flows_want_more() {
        // 15 senders x window 4 x 4 classes into one port with 32 tokens.
        let p = plan_of(
            "profile = \"x\"\n[fabric]\nnodes = 16\n[[alltoall]]\nname = \"a\"\nport = 2\n\
             sizes = [8, 1500, 4096, 20000]\nmessages = 2\nwindow = 4\n",
        )
        .unwrap();
        let pools = &p.nodes[5].ports[0].pools;
        assert_eq!(pools.len(), 4);
        assert_eq!(pools.iter().map(|q| q.count).sum::<u32>(), 32);
        assert!(pools.iter().all(|q| q.count == 8));
    }

    const MC: &str = "profile = \"x\"\n[fabric]\nnodes = 8\n[[flows]]\nsrc = [0, 2]\n\
        kind = \"multicast\"\ngroup_size = 8\nscheme = \"host\"\nalgorithm = \"binomial\"\n\
        sizes = [8, 5000]\nmessages = 3\nwindow = 2\n";

    #[test]
    fn a_multicast_root_gets_its_role_and_members_their_buffers() {
        let p = plan_of(MC).unwrap();
        assert_eq!(p.nodes[0].roles[0].kind, RoleKind::McastRoot);
        assert_eq!((p.nodes[0].roles[0].slots, p.nodes[0].roles[0].slot_len), (2, 5000));
        assert_eq!(p.groups.get(&0), Some(&0));
        assert!(p.streams.is_empty());
        // Binomial over 8: rank 4 relays (its host sends out of its
        // receive buffers: twice the window), rank 7 is a leaf.
        let count =
            |n: usize| p.nodes[n].ports[0].pools.iter().map(|q| q.count).collect::<Vec<_>>();
        assert_eq!(count(4), vec![4, 4]);
        assert_eq!(count(7), vec![2, 2]);
        assert!(p.nodes[0].ports[0].pools.is_empty(), "the root receives nothing");
        // The NIC schemes keep relayed packets in NIC memory.
        let p = plan_of(&MC.replace("\"host\"", "\"nic\"")).unwrap();
        assert_eq!(p.nodes[4].ports[0].pools[0].count, 2);
    }

    #[test]
    fn a_host_scheme_root_with_more_children_than_send_tokens_is_planned() {
        // Its root posts the 39 sends as tokens come back.
        let text = MC
            .replace("nodes = 8", "nodes = 40")
            .replace("group_size = 8", "group_size = 40")
            .replace("\"binomial\"", "\"separate\"")
            .replace("[fabric]", "[fabric]\ntopology = \"clos\"");
        assert!(plan_of(&text).is_ok());
    }

    #[test]
    fn buffers_the_page_table_once_could_not_map_are_planned() {
        // 8 MiB of send buffers and 8 MiB of receive buffers a port: a
        // port registers as much as its slice holds.
        let p = plan_of(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
             kind = \"stream\"\nbytes = 1048576\nmessages = 3\nwindow = 8\n",
        )
        .unwrap();
        assert_eq!(p.largest_port_bytes(), (8 << 20) + (1 << 20));
    }

    #[test]
    fn a_node_short_of_host_memory_is_refused_by_name() {
        let e = plan_of(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
             kind = \"stream\"\nbytes = 4194304\nmessages = 3\nwindow = 100\n",
        )
        .unwrap_err();
        assert!(e.message.starts_with("node 0: its flows need"), "{e}");
    }
}
