//! Collective flows (`kind = "barrier" | "reduce" | "allreduce" |
//! "broadcast"`): their keys, the inputs every member contributes, the
//! ledger of what each member saw, and their part of the report.
//!
//! Every member of the group runs `count` collectives one after another.
//! A collective's latency runs from the first member's entry (its call)
//! to the last member's completion; its skew is the spread of the
//! members' completions. Each member's result is checked against the
//! reference (the same schedule evaluated on the host, so floating point
//! is compared to the bit).

use host_driver::collective::model::{self, Case, Costs, Scheme};
use nic_abi::collective::reference::{self, Spec};
use nic_abi::collective::{Alg, Dtype, Kind, Op};
use nic_abi::size_class_for;

use super::format::{Flow, FlowKind, ScenarioError};

mod assist;
mod bcast;
mod host;
mod ledger;
pub(crate) use bcast::check_listed;
pub use bcast::BcastMcast;
pub use host::{host_chunk, host_message_len, HOST_HEADER, HOST_RECV_BUFFERS};
pub use ledger::{report, CollLedger, CollReport, Pending};

/// Who runs the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollScheme {
    /// The host programs exchange unicast messages and combine (a
    /// broadcast run as a multicast: the host scheme of multicast).
    Host,
    /// The NICs run it (one descriptor and one event per member; a
    /// broadcast run as a multicast: the NIC-based multicast).
    Nic,
    /// The host releases each step, the NIC does the rest of it (a
    /// barrier, reduce or allreduce: coll/assist.rs); a broadcast runs as
    /// a NIC-assisted multicast.
    Assisted,
    /// Broadcast only, as a multicast: the NICs forward along the tree
    /// cached in their group tables.
    NicCached,
}

impl CollScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            CollScheme::Host => "host",
            CollScheme::Nic => "nic",
            CollScheme::Assisted => "assisted",
            CollScheme::NicCached => "nic-cached",
        }
    }

    /// Only a multicast has it (a broadcast run as one).
    pub fn multicast_only(self) -> bool {
        matches!(self, CollScheme::Assisted | CollScheme::NicCached)
    }

    /// The multicast scheme of the same name.
    pub fn multicast(self) -> Option<nic_abi::multicast::Scheme> {
        nic_abi::multicast::Scheme::parse(self.as_str())
    }
}

/// The collective algorithms that do `kind`, by name.
fn algorithm_names(kind: Kind) -> Vec<&'static str> {
    Alg::ALL.iter().filter(|x| x.serves(kind)).map(|x| x.name()).collect()
}

/// A collective flow after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct CollSpec {
    /// The group's slot in every member NIC's group table (shared with
    /// the multicast flows, in file order).
    pub group_id: u16,
    /// Members in rank order.
    pub members: Vec<u16>,
    pub port: u8,
    pub kind: Kind,
    pub scheme: CollScheme,
    /// None: `auto` (resolved by `alg`).
    pub requested: Option<Alg>,
    pub op: Op,
    pub dtype: Dtype,
    /// Elements per member (0 for a barrier).
    pub elements: u32,
    /// Reduce and broadcast: the root's rank.
    pub root: u16,
    pub count: u64,
    /// The profile's costs, for `auto` to pick by (`costs_of`; set once
    /// the profile is known, `mcast::resolve`).
    pub costs: Option<Costs>,
    /// A broadcast run as a multicast (bcast.rs): its scheme and tree.
    /// None: the collective's own algorithm runs.
    pub mcast: Option<BcastMcast>,
}

impl CollSpec {
    pub fn size(&self) -> u16 {
        self.members.len() as u16
    }

    pub fn rank_of(&self, node: u16) -> Option<u16> {
        self.members.iter().position(|&m| m == node).map(|r| r as u16)
    }

    /// Bytes of each member's vector.
    pub fn bytes(&self) -> u32 {
        if self.kind.has_data() {
            self.elements * self.dtype.size() as u32
        } else {
            0
        }
    }

    /// The algorithm run: the one asked for, or under `auto` the one the
    /// model of the profile's costs finds fastest for the scheme, the
    /// kind, the group and the vector (`host_driver::collective::model`;
    /// the driver's fixed rule, `auto_for`, before the profile is known).
    /// `fabric`: the NICs' MTU and SRAM size, which fix the chunks.
    pub fn alg(&self, fabric: (u32, u32)) -> Alg {
        let (mtu, sram) = fabric;
        if let Some(a) = self.requested {
            return a;
        }
        if self.mcast.is_some() {
            // (Unused: the multicast's tree runs.)
            return Alg::Binomial;
        }
        let Some(costs) = &self.costs else {
            if self.scheme == CollScheme::Assisted {
                return host_driver::collective::auto_assisted(self.kind);
            }
            return host_driver::collective::auto_for(
                self.kind,
                self.dtype,
                self.bytes(),
                mtu,
                sram,
            );
        };
        let scheme = match self.scheme {
            CollScheme::Host => Scheme::Host,
            CollScheme::Assisted => Scheme::Assisted,
            _ => Scheme::Nic,
        };
        let case = Case {
            kind: self.kind,
            scheme,
            dtype: self.dtype,
            len: self.bytes(),
            n: self.size(),
            mtu,
            sram,
        };
        model::pick(&case, costs)
    }

    /// The reference evaluation's spec (the chunks as the scheme cuts
    /// them).
    pub fn spec(&self, fabric: (u32, u32)) -> Spec {
        let op = if self.kind.combines() { self.op } else { Op::Sum };
        let alg = self.alg(fabric);
        let mut s = Spec::new(self.kind, alg, self.size(), self.root, op, self.dtype, fabric);
        if self.scheme == CollScheme::Host {
            s.chunk = host_chunk(self, alg).max(1);
        }
        s
    }

    /// Member `rank`'s vector for collective `k` (1, 2, ...).
    pub fn input(&self, rank: u16, k: u64) -> Vec<u8> {
        let n = self.elements as u64;
        let mut out = Vec::with_capacity(self.bytes() as usize);
        for e in 0..n {
            let x =
                (rank as u64).wrapping_mul(1_000_003) ^ k.wrapping_mul(7_919) ^ e.wrapping_mul(31);
            match self.dtype {
                Dtype::F64 => out.extend((1.0 / ((x % 1_000) as f64 + 0.3)).to_le_bytes()),
                Dtype::F32 => out.extend((1.0 / ((x % 1_000) as f32 + 0.3)).to_le_bytes()),
                Dtype::I32 | Dtype::U32 => out.extend((x as u32).to_le_bytes()),
                Dtype::I64 | Dtype::U64 => out.extend(x.wrapping_mul(0x9e37_79b9).to_le_bytes()),
            }
        }
        out
    }

    /// Every member's expected vector at the end of collective `k` (a
    /// broadcast run as a multicast: one, the root's input, for every
    /// member: `expected_at`).
    pub fn expected(&self, k: u64, fabric: (u32, u32)) -> Vec<Vec<u8>> {
        if self.mcast.is_some() {
            return vec![self.input(self.root, k)];
        }
        let inputs: Vec<Vec<u8>> = (0..self.size()).map(|r| self.input(r, k)).collect();
        match reference::run(&self.spec(fabric), &inputs) {
            Ok(o) => o.values,
            Err(_) => inputs,
        }
    }

    /// Member `rank`'s entry in `expected`'s vectors.
    pub fn expected_at(&self, rank: u16) -> usize {
        if self.mcast.is_some() {
            0
        } else {
            rank as usize
        }
    }

    /// The members in the multicast's rank order: the root first, then
    /// the ranks after it, wrapping (a broadcast run as a multicast).
    pub fn mcast_members(&self) -> Vec<u16> {
        let n = self.members.len();
        (0..n).map(|i| self.members[(self.root as usize + i) % n]).collect()
    }

    /// What ran, for the report: the collective's algorithm, or the
    /// multicast's tree ("multicast binomial").
    pub fn algorithm_name(&self, alg: Alg) -> String {
        match &self.mcast {
            Some(m) => m.name(),
            None => alg.name().to_string(),
        }
    }

    /// Does member `rank` get a result to check?
    pub fn has_result(&self, rank: u16) -> bool {
        match self.kind {
            Kind::Barrier => false,
            Kind::Reduce => rank == self.root,
            Kind::Allreduce => true,
            Kind::Broadcast => rank != self.root,
        }
    }
}

fn parse_kind(k: FlowKind) -> Option<Kind> {
    Some(match k {
        FlowKind::Barrier => Kind::Barrier,
        FlowKind::Reduce => Kind::Reduce,
        FlowKind::Allreduce => Kind::Allreduce,
        FlowKind::Broadcast => Kind::Broadcast,
        _ => return None,
    })
}

fn parse_by_name<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str, s: &str) -> Option<T> {
    all.iter().copied().find(|&x| name(x) == s)
}

/// The collective keys of flow `f` (its kind one of the collectives).
pub fn validate(label: &str, f: &Flow, nodes: u64) -> Result<CollSpec, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let Some(kind) = parse_kind(f.kind) else {
        return err(format!("{label}.kind: not a collective"));
    };
    refuse_keys(label, f, kind)?;
    let Some(port) = f.port else {
        return err(format!("{label}: a {} flow needs `port` (every member's)", kind.name()));
    };
    if port >= nic_abi::NUM_PORTS as u64 {
        return err(format!(
            "{label}.port: {port} out of range (ports 0 to {})",
            nic_abi::NUM_PORTS - 1
        ));
    }
    let members = group_of(label, f, kind, nodes)?;
    let (scheme, mcast) = bcast::scheme_of(label, f, kind, members.len())?;
    let requested = requested_alg(label, f, kind, mcast.is_some())?;
    let (op, dtype) = op_and_dtype(label, f, kind)?;
    let elements = match (f.elements, kind.has_data()) {
        (Some(_), false) => return err(format!("{label}.elements: does not apply to a barrier")),
        (None, false) => 0,
        (None, true) => 1,
        (Some(e), true) => e,
    };
    // The most the NICs take on any fabric (chunks of 4 KiB); a NIC with
    // less SRAM or a smaller MTU refuses a longer vector when it runs.
    let mtu = nic_abi::MAX_MTU as u32;
    let max = nic_abi::collective::max_len(kind, dtype, mtu, u32::MAX) as u64 / dtype.size() as u64;
    if kind.has_data() && !(1..=max).contains(&elements) {
        return err(format!(
            "{label}.elements: {elements} out of range (1..={max}: the NICs take at most {} \
             chunks of a vector, of up to {} bytes)",
            nic_abi::collective::MAX_VECTOR_CHUNKS,
            nic_abi::collective::CHUNK_MAX
        ));
    }
    let bytes = elements * dtype.size() as u64;
    if mcast.is_some() {
        bcast::check_message(label, bytes)?;
    } else if scheme == CollScheme::Assisted {
        assist::check(label, kind, requested, bytes)?;
    }
    let root = f.root.unwrap_or(0);
    if f.root.is_some() && !matches!(kind, Kind::Reduce | Kind::Broadcast) {
        return err(format!("{label}.root: applies to reduce and broadcast"));
    }
    if root >= members.len() as u64 {
        return err(format!("{label}.root: rank {root} is not a member's (0..{})", members.len()));
    }
    let count = f.count.unwrap_or(1);
    if count == 0 || count > u32::MAX as u64 {
        return err(format!("{label}.count: {count} out of range (1..={})", u32::MAX));
    }
    Ok(CollSpec {
        costs: None,
        group_id: 0,
        members: members.iter().map(|&m| m as u16).collect(),
        port: port as u8,
        kind,
        scheme,
        requested,
        op,
        dtype,
        elements: elements as u32,
        root: root as u16,
        count,
        mcast,
    })
}

/// The reduction's operation and the vector's element type.
fn op_and_dtype(label: &str, f: &Flow, kind: Kind) -> Result<(Op, Dtype), ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let op = match (&f.op, kind.combines()) {
        (Some(_), false) => return err(format!("{label}.op: applies to reduce and allreduce")),
        (None, _) => Op::Sum,
        (Some(o), true) => match parse_by_name(&Op::ALL, Op::name, o) {
            Some(op) => op,
            None => {
                return err(format!("{label}.op: \"{o}\" is not one of sum, min, max, band, bor"))
            }
        },
    };
    let dtype = match (&f.datatype, kind.has_data()) {
        (Some(_), false) => return err(format!("{label}.datatype: does not apply to a barrier")),
        (None, _) => Dtype::F64,
        (Some(d), true) => match parse_by_name(&Dtype::ALL, Dtype::name, d) {
            Some(t) => t,
            None => {
                return err(format!(
                    "{label}.datatype: \"{d}\" is not one of i32, i64, u32, u64, f32, f64"
                ))
            }
        },
    };
    if !op.applies_to(dtype) {
        return err(format!("{label}.op: {} does not apply to {}", op.name(), dtype.name()));
    }
    Ok((op, dtype))
}

/// Keys that do not apply to a collective flow, refused by name.
fn refuse_keys(label: &str, f: &Flow, kind: Kind) -> Result<(), ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    for (key, given) in [
        ("src", !f.src.is_empty()),
        ("dst", f.dst.is_some()),
        ("bytes", f.bytes.is_some()),
        ("sizes", f.sizes.is_some()),
        ("messages", f.messages.is_some()),
        ("window", f.window.is_some()),
        ("idt", f.idt.is_some()),
        ("idt_t", f.idt_t.is_some()),
        ("rate_mb_s", f.rate_mb_s.is_some()),
        ("best_effort", f.best_effort),
        ("stop_us", f.stop_us.is_some()),
        ("trace", f.trace),
    ] {
        if given {
            let hint = match key {
                "src" | "dst" => " (give `port` and `group` or `group_size`)",
                "messages" => " (give `count`)",
                "bytes" | "sizes" => " (give `elements`)",
                _ => "",
            };
            return err(format!("{label}.{key}: does not apply to a {} flow{hint}", kind.name()));
        }
    }
    Ok(())
}

/// The group's nodes in rank order (`group`, or `group_size`: 0 to G-1).
fn group_of(label: &str, f: &Flow, kind: Kind, nodes: u64) -> Result<Vec<u64>, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let members: Vec<u64> = match (&f.group, f.group_size) {
        (Some(_), Some(_)) => {
            return err(format!("{label}: give `group` or `group_size`, not both"))
        }
        (None, None) => {
            return err(format!("{label}: a {} flow needs `group` or `group_size`", kind.name()))
        }
        (None, Some(n)) if n < 2 || n > nodes => {
            return err(format!("{label}.group_size: {n} out of range (2..={nodes})"));
        }
        (None, Some(n)) => (0..n).collect(),
        (Some(g), None) => {
            if g.len() < 2 {
                return err(format!("{label}.group: a group has at least 2 members"));
            }
            for (i, &n) in g.iter().enumerate() {
                if n >= nodes {
                    return err(format!(
                        "{label}.group[{i}]: node {n} out of range (fabric.nodes = {nodes})"
                    ));
                }
                if g[..i].contains(&n) {
                    return err(format!("{label}.group[{i}]: node {n} is listed twice"));
                }
            }
            g.clone()
        }
    };
    if members.len() > nic_abi::multicast::MAX_GROUP {
        return err(format!(
            "{label}: {} members, more than a group holds ({})",
            members.len(),
            nic_abi::multicast::MAX_GROUP
        ));
    }
    Ok(members)
}

/// The collective algorithm asked for (None: `auto`, or a broadcast run
/// as a multicast, `mcast`).
fn requested_alg(
    label: &str,
    f: &Flow,
    kind: Kind,
    mcast: bool,
) -> Result<Option<Alg>, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let requested = match (mcast, f.algorithm.as_deref().unwrap_or("auto")) {
        (true, _) | (false, "auto") => None,
        (false, a) => match parse_by_name(&Alg::ALL, Alg::name, a) {
            Some(alg) if alg.serves(kind) => Some(alg),
            _ => {
                return err(format!(
                    "{label}.algorithm: \"{a}\" does not do a {} ({}, auto)",
                    kind.name(),
                    algorithm_names(kind).join(", ")
                ));
            }
        },
    };
    Ok(requested)
}

/// Receive buffers a broadcast run as a multicast keeps posted at every
/// member but the root: the one in flight, one a host or assisted relay
/// still sends out of, and room for the next.
pub const MCAST_RECV_BUFFERS: u32 = 4;

/// The receive buffers member `rank` of `c` keeps posted on its port:
/// (size class, how many).
pub fn recv_buffers(c: &CollSpec, rank: u16) -> (u8, u32) {
    match (&c.mcast, c.scheme) {
        (Some(_), _) if rank == c.root => (size_class_for(c.bytes() as u64), 0),
        (Some(_), _) => (size_class_for(c.bytes() as u64), MCAST_RECV_BUFFERS),
        (None, CollScheme::Host) => (size_class_for(host_message_len(c)), HOST_RECV_BUFFERS),
        (None, _) => (size_class_for(host_message_len(c)), 0),
    }
}

/// What the model of the algorithms (`host_driver::collective::model`)
/// needs of `profile`.
pub fn costs_of(profile: &nic_device::profile::Profile) -> Costs {
    let p = profile;
    let ns = |cycles: u64| cycles as f64 * 1e9 / p.nic.cpu_hz.max(1) as f64;
    Costs {
        link_bytes_per_s: p.link.bandwidth_bytes_per_s as f64,
        hop_ns: p.switch.latency_ns as f64 + 2.0 * p.link.cable_ns_per_m * p.link.cable_m,
        nic_tx_ns: ns(p.nic_cpu.tx_packet),
        nic_rx_ns: ns(p.nic_cpu.rx_packet),
        nic_dma_ns: ns(p.nic_cpu.dma_cmd),
        nic_int_ns: ns(p.nic_cpu.coll_element),
        nic_float_ns: ns(p.nic_cpu.coll_float_element),
        dma_setup_ns: p.host_dma.setup_ns as f64,
        dma_bytes_per_s: p.host_dma.bandwidth_bytes_per_s as f64,
        host_msg_ns: (p.host.post_fixed_ns + p.host.event_found_ns) as f64,
        host_touch_bytes_per_s: p.host.touch_bandwidth_bytes_per_s as f64,
    }
}
