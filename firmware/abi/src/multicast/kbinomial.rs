//! The k-binomial tree: a binomial tree whose fan-out is bounded for
//! pipelined (packet-level) forwarding, and the choice of its k.
//!
//! A NIC that forwards a multicast packet by packet, without waiting for
//! the whole message, sends every packet once per child: with j children
//! its packets leave one per j send times, and its j-th child waits about
//! j packet times for the first one. The binomial tree is the fastest for
//! one packet but gives the root ceil(log2 G) children; NIC-based
//! multicast with packet-level forwarding over Myrinet therefore uses the
//! k-binomial tree, in which no node has more than k-1 children. The
//! construction below is this project's precise version of it.
//!
//! Count time in steps: a sender sends one message per step, and a child
//! sends from the step after the one it received in. Let
//!
//! - F(t) = 1 + sum_{j=1..min(k-1, t)} F(t-j): the most nodes a subtree
//!   head (k-1 children allowed) covers in t steps (2^t while t <= k-1);
//! - C(s, b) = 1 + sum_{j=1..min(b, s)} F(s-j): the same for a sender with
//!   b children left, so C(s, k-1) = F(s) and C(s, b) = F(s-1) + C(s-1, b-1).
//!
//! A sender holding the ranks [h, h+n), n >= 2, itself first, with b >= 1
//! children left, takes s = the least step count with C(s, b) >= n and
//! gives its next child the last x ranks, where
//!
//! x = clamp(floor(n/2), n - C(s-1, b-1), F(s-1)):
//!
//! the binomial half, unless the child could not finish in s-1 steps (the
//! upper bound) or the sender could not cover the rest with b-1 children in
//! s-1 steps (the lower bound). It goes on with the first n-x ranks and
//! b-1 children. So: no node has more than k-1 children; the group is done
//! in the fewest steps any tree with that bound takes (the least s with
//! F(s) >= G); a sender's children come deepest (largest) first; k = 2
//! forces x = n-1, the chain; and k-1 >= ceil(log2 G) keeps C(s, b) = 2^s
//! throughout, so x = floor(n/2), exactly the binomial tree.
//!
//! Worked example, G = 8, k = 3 (F = 1, 2, 4, 7, 12): the root holds
//! [0,8) with 2 children left, s = 4, x = clamp(4, 8-C(3,1) = 3, 7) = 4:
//! child 4 heads [4,8). The root keeps [0,4) with 1 left, s = 3,
//! x = clamp(2, 4-C(2,0) = 3, 4) = 3: child 1 heads [1,4). Node 4: s = 2,
//! x = clamp(2, 4-C(1,1) = 2, 2) = 2: child 6 heads [6,8), then child 5;
//! node 6 sends to 7; node 1 to 3, then 2. Four steps where the binomial
//! tree takes three, and no node has more than two children.

use super::trees::{walk, Rule};
use super::{ceil_log2, MAX_GROUP};

/// Step counts a table covers. With k >= 3 a group of MAX_GROUP is done
/// in at most 14 steps (k = 3), so the tables never run out.
const MAX_STEPS: usize = 32;
/// F is kept below this; anything at or above it exceeds every group.
const CAP: u32 = 1 << 20;

/// Prefix sums of F for one k >= 3: P(t) = F(0) + ... + F(t-1), each F
/// capped at CAP (which leaves every C below CAP exact and every other one
/// at least CAP). 132 bytes, built in O(MAX_STEPS).
#[derive(Debug, Clone, Copy)]
pub(super) struct KTable {
    fan_out: u8,
    p: [u32; MAX_STEPS + 1],
}

impl KTable {
    pub(super) fn new(k: u8) -> Self {
        let fan_out = k.max(2) - 1;
        let mut p = [0u32; MAX_STEPS + 1];
        for t in 0..MAX_STEPS {
            let w = (fan_out as usize).min(t);
            p[t + 1] = p[t] + (1 + p[t] - p[t - w]).min(CAP);
        }
        KTable { fan_out, p }
    }

    /// k - 1: the most children of one node.
    pub(super) fn fan_out(&self) -> u8 {
        self.fan_out
    }

    /// F(t), t < MAX_STEPS.
    fn full(&self, t: usize) -> u32 {
        self.p[t + 1] - self.p[t]
    }

    /// C(s, b), s <= MAX_STEPS.
    fn reach(&self, s: usize, b: u8) -> u32 {
        1 + self.p[s] - self.p[s - (b as usize).min(s)]
    }

    /// The least s with C(s, b) >= n.
    pub(super) fn steps_for(&self, n: u16, b: u8) -> usize {
        let n = n as u32;
        // C(s, b) <= 2^s: start at ceil(log2 n).
        let first = ceil_log2(n.min(MAX_GROUP as u32) as u16) as usize;
        (first..MAX_STEPS).find(|&s| self.reach(s, b) >= n).unwrap_or(MAX_STEPS)
    }

    /// The next child's subtree size for a sender holding n >= 2 ranks
    /// with b >= 1 children left.
    pub(super) fn split(&self, n: u16, b: u8) -> u16 {
        let s = self.steps_for(n, b).max(1);
        let lo = (n as u32).saturating_sub(self.reach(s - 1, b - 1));
        let hi = self.full(s - 1);
        (n as u32 / 2).min(hi).max(lo) as u16
    }
}

/// The k for a k-binomial multicast of `packets` packets to a group of g
/// that minimises this pipelined completion-time estimate:
///
/// - the first packet: the j-th child of a node that has it at time t gets
///   it at t + forward_cost + j * send_cost (no forward_cost at the root,
///   which has the message already);
/// - the busiest sender, with f children, sends every packet f times, so
///   the later packets follow one another f * send_cost apart;
/// - completion = the latest first arrival + (packets - 1) * f * send_cost.
///
/// k runs from 2 (the chain) to ceil(log2 g) + 1, the least k that gives
/// the binomial tree; ties go to the larger k. One packet gets the binomial
/// tree (the fewest steps); many packets a small k. For g <= 2 every k
/// gives the same tree and the answer is 2. O(G log G) work per k tried, no
/// heap: a host or setup-time computation, not a per-packet one.
pub fn best_k(g: u16, packets: u32, send_cost: u64, forward_cost: u64) -> u8 {
    let g = g.min(MAX_GROUP as u16);
    let last = (ceil_log2(g) + 1).max(2) as u8;
    let trail = packets.saturating_sub(1) as u64;
    let mut best = (u64::MAX, 2u8);
    for k in 2..=last {
        let (first, fan_out) = if k == 2 {
            let hops = g.saturating_sub(1) as u64;
            let fwd = hops.saturating_sub(1).saturating_mul(forward_cost);
            (hops.saturating_mul(send_cost).saturating_add(fwd), 1)
        } else {
            let w = walk(Rule::Bounded(KTable::new(k)), g.max(1), send_cost, forward_cost);
            (w.last_arrival, w.max_fan_out as u64)
        };
        let t = first.saturating_add(trail.saturating_mul(fan_out).saturating_mul(send_cost));
        if t <= best.0 {
            best = (t, k);
        }
    }
    best.1
}
