//! Multicast trees: who sends one message to whom, and in what order, when
//! a group of nodes multicasts. The MCP uses it to forward a multicast
//! packet to its children without asking the host; the host driver uses it
//! to do the same in software; experiments use it, with the latency model
//! in [`model`], to price one scheme against another.
//!
//! A group has G members ranked 0..G-1 relative to the root, rank 0 (the
//! caller maps ranks to node ids). Five algorithms lay the group out as a
//! tree ([`Algorithm`]); in every one a sender serves its deepest subtree
//! first, so that the longest branch starts as early as it can.
//!
//! Everything is computed on demand from (algorithm, G, rank), with no heap
//! and no table sized by the group: [`children`] yields a node's children
//! lazily, each in O(log G) work or less (the separate root's in O(1)), so
//! a slow NIC CPU never runs anything quadratic in G. Groups have at most
//! [`MAX_GROUP`] members; a larger G, G = 0, or a rank outside 0..G gives
//! no children, no parent and zero depth.
//!
//! This module is the pure part, so the trees' worked examples and their
//! invariants (everyone but the root receives exactly once, subtree sizes
//! add up, deepest subtree first) are tested on it directly.

mod kbinomial;
pub mod model;
mod trees;

pub use kbinomial::best_k;
pub use model::{model_latency_us, ModelParams, ProcTimes, Scheme};
pub use trees::{Children, SubtreeRanks};

use trees::{Rule, Shape};

/// The largest group.
pub const MAX_GROUP: usize = 1024;

/// How a group is laid out as a tree. The byte encoding ([`code`](Self::code),
/// with k carried in its own byte) is stable: descriptors and scenario
/// files hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// The root sends to 1, 2, ..., G-1 in that order; everyone else is a
    /// leaf.
    Separate,
    /// A chain: 0 -> 1 -> ... -> G-1.
    Serial,
    /// Recursive halving. For a list L (root first): if |L| <= 1 stop;
    /// c = ceil(|L|/2); `L[0]` sends to `L[c]`, which carries `L[c..]`;
    /// recurse on `L[..c]` and `L[c..]`. G = 8: 0->4, 0->2, 0->1, 4->6, 4->5, 2->3,
    /// 6->7. The root sends ceil(log2 G) times; the longest path has
    /// floor(log2 G) sends.
    Binomial,
    /// Heap order: node i sends to 2i+1, then 2i+2.
    Binary,
    /// The binomial tree with at most k-1 children per node, for pipelined
    /// (packet-level) forwarding, done in the fewest steps that bound
    /// allows: a sender holding n ranks, itself first, with b children
    /// left gives its next child the last
    /// x = clamp(floor(n/2), n - C(s-1, b-1), F(s-1)) of them, F and C
    /// counting the nodes a subtree can cover in a number of steps (their
    /// definitions and a worked example are in the `kbinomial` source
    /// file). k = 2 is the chain, k - 1 >= ceil(log2 G) the binomial tree.
    /// A k below 2 is taken as 2.
    KBinomial { k: u8 },
}

impl Algorithm {
    /// The four algorithms without a parameter, in code order.
    pub const FIXED: [Algorithm; 4] =
        [Algorithm::Separate, Algorithm::Serial, Algorithm::Binomial, Algorithm::Binary];

    /// Stable byte code: separate 0, serial 1, binomial 2, binary 3,
    /// k-binomial 4 (its k is carried separately, see [`k`](Self::k)).
    pub const fn code(self) -> u8 {
        match self {
            Algorithm::Separate => 0,
            Algorithm::Serial => 1,
            Algorithm::Binomial => 2,
            Algorithm::Binary => 3,
            Algorithm::KBinomial { .. } => 4,
        }
    }

    /// The k of a k-binomial tree; 0 for the other algorithms.
    pub const fn k(self) -> u8 {
        match self {
            Algorithm::KBinomial { k } => k,
            _ => 0,
        }
    }

    /// The algorithm of `code` (k is read only for code 4, and must be at
    /// least 2 there).
    pub const fn from_code(code: u8, k: u8) -> Option<Self> {
        match code {
            0 => Some(Algorithm::Separate),
            1 => Some(Algorithm::Serial),
            2 => Some(Algorithm::Binomial),
            3 => Some(Algorithm::Binary),
            4 if k >= 2 => Some(Algorithm::KBinomial { k }),
            _ => None,
        }
    }

    /// "separate", "serial", "binomial", "binary" or "k-binomial".
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Separate => "separate",
            Algorithm::Serial => "serial",
            Algorithm::Binomial => "binomial",
            Algorithm::Binary => "binary",
            Algorithm::KBinomial { .. } => "k-binomial",
        }
    }

    /// The algorithm named `name` (as [`name`](Self::name) spells it); k
    /// is read only for "k-binomial", and must be at least 2 there.
    pub fn parse(name: &str, k: u8) -> Option<Self> {
        match name {
            "separate" => Some(Algorithm::Separate),
            "serial" => Some(Algorithm::Serial),
            "binomial" => Some(Algorithm::Binomial),
            "binary" => Some(Algorithm::Binary),
            "k-binomial" => Algorithm::from_code(4, k),
            _ => None,
        }
    }
}

impl core::fmt::Display for Algorithm {
    /// The name; a k-binomial tree adds its k: "k-binomial(3)".
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Algorithm::KBinomial { k } => write!(f, "k-binomial({k})"),
            a => f.write_str(a.name()),
        }
    }
}

/// One child of a sender: its rank and the size of the subtree it heads
/// (itself included), which is what the sender tells it to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Child {
    pub rank: u16,
    pub subtree: u16,
}

fn valid(g: u16, rank: u16) -> bool {
    g as usize <= MAX_GROUP && rank < g
}

/// The children of `rank` in send order (deepest subtree first).
pub fn children(alg: Algorithm, g: u16, rank: u16) -> Children {
    if !valid(g, rank) {
        return Children::empty();
    }
    Children::new(trees::shape(alg), g, rank)
}

/// How many children `rank` computes and sends to: the work a forwarding
/// node does per message, for pricing NIC or host CPU time.
pub fn children_computed(alg: Algorithm, g: u16, rank: u16) -> u32 {
    children(alg, g, rank).count() as u32
}

/// The rank that sends to `rank`; None for the root and out of range.
pub fn parent(alg: Algorithm, g: u16, rank: u16) -> Option<u16> {
    if !valid(g, rank) || rank == 0 {
        return None;
    }
    match trees::shape(alg) {
        Shape::Separate => Some(0),
        Shape::Serial => Some(rank - 1),
        Shape::Heap => Some((rank - 1) / 2),
        Shape::Split(rule) => trees::locate(rule, g, rank).and_then(|(p, _)| p),
    }
}

/// The size of the subtree `rank` heads, itself included; 0 out of range.
pub fn subtree_size(alg: Algorithm, g: u16, rank: u16) -> u16 {
    if !valid(g, rank) {
        return 0;
    }
    match trees::shape(alg) {
        Shape::Separate if rank == 0 => g,
        Shape::Separate => 1,
        Shape::Serial => g - rank,
        Shape::Heap => trees::heap_subtree(g, rank),
        Shape::Split(rule) => trees::locate(rule, g, rank).map_or(0, |(_, n)| n),
    }
}

/// The ranks of `rank`'s subtree, itself first, lazily.
pub fn subtree_ranks(alg: Algorithm, g: u16, rank: u16) -> SubtreeRanks {
    let heap = matches!(trees::shape(alg), Shape::Heap);
    SubtreeRanks::new(g, rank, subtree_size(alg, g, rank), heap)
}

/// Sends on the longest root-to-leaf path: separate 1, serial G-1,
/// binomial and binary floor(log2 G); 0 for G <= 1. The k-binomial tree is
/// walked (O(G) work, no heap).
pub fn depth(alg: Algorithm, g: u16) -> u16 {
    if !valid(g, 0) || g == 1 {
        return 0;
    }
    match trees::shape(alg) {
        Shape::Separate => 1,
        Shape::Serial => g - 1,
        Shape::Heap | Shape::Split(Rule::Halving) => floor_log2(g),
        Shape::Split(rule) => trees::walk(rule, g, 1, 0).height,
    }
}

/// Nodes that both receive and forward on the longest root-to-leaf path:
/// depth - 1 for G >= 2 (separate 0, serial G-2, binomial and binary
/// floor(log2 G) - 1), 0 for G <= 1. The latency model charges each one a
/// receive, a processing step and a send.
pub fn relays_on_deepest_path(alg: Algorithm, g: u16) -> u16 {
    depth(alg, g).saturating_sub(1)
}

/// Levels below a member heading `subtree` members, bounded from above
/// without walking the tree: a chain (and a k-binomial tree, which may be
/// one) is as deep as it is long; halving and heap trees are at most log2
/// deep; separate addressing has one. A member waits for its children's
/// reports a send timeout for each, and one more. `None`: an unknown
/// tree, bounded as a chain.
pub fn levels_below(alg: Option<Algorithm>, subtree: u16) -> u64 {
    match alg {
        Some(Algorithm::Separate) => 1,
        Some(Algorithm::Binomial | Algorithm::Binary) => 16 - subtree.leading_zeros() as u64,
        _ => subtree as u64,
    }
}

/// How long a member heading `subtree` members waits for its children's
/// reports: `send_timeout` for each level below it ([`levels_below`]),
/// and one more.
pub fn report_wait(alg: Option<Algorithm>, subtree: u16, send_timeout: u64) -> u64 {
    send_timeout.saturating_mul(levels_below(alg, subtree) + 1)
}

/// Send steps until the last member has the message, when every sender
/// sends one message per step and a child starts sending in the step after
/// it received: separate and serial G-1, binomial ceil(log2 G), binary the
/// largest (level + right turns) of a node; 0 for G <= 1. This is what the
/// k-binomial tree minimises under its fan-out bound.
pub fn steps(alg: Algorithm, g: u16) -> u16 {
    if !valid(g, 0) || g == 1 {
        return 0;
    }
    match trees::shape(alg) {
        Shape::Separate | Shape::Serial => g - 1,
        Shape::Heap => trees::heap_steps(g),
        Shape::Split(Rule::Halving) => ceil_log2(g),
        Shape::Split(Rule::Bounded(t)) => t.steps_for(g, t.fan_out()) as u16,
    }
}

/// floor(log2 n) for n >= 1.
pub(crate) const fn floor_log2(n: u16) -> u16 {
    15 - n.leading_zeros() as u16
}

/// ceil(log2 n) for n >= 1.
pub(crate) const fn ceil_log2(n: u16) -> u16 {
    if n <= 1 {
        0
    } else {
        floor_log2(n - 1) + 1
    }
}

#[cfg(test)]
mod tests;
