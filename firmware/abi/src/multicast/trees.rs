//! The tree shapes behind [`Algorithm`], the lazy iterators over a node's
//! children and subtree, and a heap-free walk of a whole splitting tree.
//!
//! The binomial and k-binomial trees are splitting trees: a sender holding
//! the contiguous ranks [head, head + n) gives its next child the last x of
//! them, the child's own subtree, and keeps the rest. Every subtree is thus
//! a contiguous rank range starting at its head, and a rank is found by
//! descending from the root through the one child whose range holds it.

use super::kbinomial::KTable;
use super::{Algorithm, Child};

/// How a tree is laid out, decided once per call.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    Separate,
    Serial,
    /// Binary, in heap order.
    Heap,
    Split(Rule),
}

/// How a splitting tree sizes a sender's next child.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rule {
    /// Binomial: the child takes floor(n/2).
    Halving,
    /// k-binomial: at most k-1 children each, fewest steps.
    Bounded(KTable),
}

impl Rule {
    /// How many more children a fresh subtree head may have.
    fn budget(&self) -> u8 {
        match self {
            Rule::Halving => u8::MAX,
            Rule::Bounded(t) => t.fan_out(),
        }
    }

    /// The next child's subtree size for a sender holding n ranks (itself
    /// included, n >= 2) that may have b >= 1 more children.
    fn split(&self, n: u16, b: u8) -> u16 {
        match self {
            Rule::Halving => n / 2,
            Rule::Bounded(t) => t.split(n, b),
        }
    }
}

pub(super) fn shape(alg: Algorithm) -> Shape {
    match alg {
        Algorithm::Separate => Shape::Separate,
        Algorithm::Serial => Shape::Serial,
        Algorithm::Binary => Shape::Heap,
        Algorithm::Binomial => Shape::Split(Rule::Halving),
        // At most one child each: the chain, with its O(1) answers.
        Algorithm::KBinomial { k } if k <= 2 => Shape::Serial,
        Algorithm::KBinomial { k } => Shape::Split(Rule::Bounded(KTable::new(k))),
    }
}

/// A sender of a splitting tree part-way through its children.
#[derive(Debug, Clone, Copy)]
struct Splitter {
    head: u16,
    /// Ranks still held, the head's own included.
    n: u16,
    /// Children it may still have.
    b: u8,
    rule: Rule,
}

impl Splitter {
    fn next(&mut self) -> Option<Child> {
        if self.n <= 1 || self.b == 0 {
            return None;
        }
        let x = self.rule.split(self.n, self.b);
        self.n -= x;
        self.b -= 1;
        Some(Child { rank: self.head + self.n, subtree: x })
    }
}

/// (parent, subtree size) of `rank` in a splitting tree of g (rank < g):
/// a descent from the root, O(depth x fan-out) splits.
pub(super) fn locate(rule: Rule, g: u16, rank: u16) -> Option<(Option<u16>, u16)> {
    let (mut head, mut size, mut parent) = (0u16, g, None);
    'descend: loop {
        if rank == head {
            return Some((parent, size));
        }
        let mut s = Splitter { head, n: size, b: rule.budget(), rule };
        // Children take the tail first, so the first one starting at or
        // below `rank` holds it.
        while let Some(c) = s.next() {
            if rank >= c.rank {
                (parent, head, size) = (Some(head), c.rank, c.subtree);
                continue 'descend;
            }
        }
        return None;
    }
}

/// The children of one node, in send order (deepest subtree first),
/// computed one at a time.
#[derive(Debug, Clone)]
pub struct Children(Inner);

#[derive(Debug, Clone)]
enum Inner {
    Empty,
    /// Serial: the next rank, heading the rest.
    One(Option<Child>),
    /// The separate root: next..end, one leaf each.
    Star {
        next: u16,
        end: u16,
    },
    /// Binary: next..end of the heap children 2i+1, 2i+2 within g.
    Heap {
        next: u16,
        end: u16,
        g: u16,
    },
    Split(Splitter),
}

impl Children {
    pub(super) fn empty() -> Self {
        Children(Inner::Empty)
    }

    /// `rank` < g <= MAX_GROUP.
    pub(super) fn new(shape: Shape, g: u16, rank: u16) -> Self {
        Children(match shape {
            Shape::Separate if rank == 0 => Inner::Star { next: 1, end: g },
            Shape::Separate => Inner::Empty,
            Shape::Serial if rank + 1 < g => {
                Inner::One(Some(Child { rank: rank + 1, subtree: g - rank - 1 }))
            }
            Shape::Serial => Inner::Empty,
            Shape::Heap => {
                let first = 2 * rank + 1;
                Inner::Heap { next: first.min(g), end: (first + 2).min(g), g }
            }
            Shape::Split(rule) => match locate(rule, g, rank) {
                Some((_, n)) => Inner::Split(Splitter { head: rank, n, b: rule.budget(), rule }),
                None => Inner::Empty,
            },
        })
    }
}

impl Iterator for Children {
    type Item = Child;

    fn next(&mut self) -> Option<Child> {
        match &mut self.0 {
            Inner::Empty => None,
            Inner::Star { next, end } => (*next < *end).then(|| {
                *next += 1;
                Child { rank: *next - 1, subtree: 1 }
            }),
            Inner::Heap { next, end, g } => (*next < *end).then(|| {
                *next += 1;
                Child { rank: *next - 1, subtree: heap_subtree(*g, *next - 1) }
            }),
            Inner::One(c) => c.take(),
            Inner::Split(s) => s.next(),
        }
    }
}

/// Size of heap node v's subtree in a heap of g: level by level, the
/// ranks (v+1)2^d - 1 .. (v+2)2^d - 1 that exist. O(log g).
pub(super) fn heap_subtree(g: u16, v: u16) -> u16 {
    let (g, mut start, mut width, mut n) = (g as u32, v as u32, 1u32, 0u32);
    while start < g {
        n += width.min(g - start);
        start = 2 * start + 1;
        width *= 2;
    }
    n as u16
}

/// Steps of a binary tree of g >= 2: heap node v = x - 1 receives at step
/// (level + right turns) = (bits(x) - 1) + (ones(x) - 1), each left child
/// being sent first. The largest over x in 1..=g is at x = g or at g with
/// one set bit cleared and every bit below it set.
pub(super) fn heap_steps(g: u16) -> u16 {
    let cost = |x: u32| (32 - x.leading_zeros()) + x.count_ones() - 2;
    let g = g as u32;
    let mut best = cost(g);
    for i in 0..16 {
        if g & (1 << i) != 0 {
            let x = (g & !((2u32 << i) - 1)) | ((1 << i) - 1);
            if x >= 1 {
                best = best.max(cost(x));
            }
        }
    }
    best as u16
}

/// The ranks of one subtree, its head first: a contiguous range, or for
/// the binary tree one range per heap level.
#[derive(Debug, Clone)]
pub struct SubtreeRanks {
    next: u32,
    end: u32,
    /// Binary only: the current heap level's first rank and width.
    level: u32,
    width: u32,
    g: u32,
    heap: bool,
}

impl SubtreeRanks {
    /// `size` = 0 gives nothing.
    pub(super) fn new(g: u16, rank: u16, size: u16, heap: bool) -> Self {
        let (g, rank) = (g as u32, rank as u32);
        let end = if heap { (rank + 1).min(g) } else { rank + size as u32 };
        let end = if size == 0 { rank } else { end };
        SubtreeRanks { next: rank, end, level: rank, width: 1, g, heap: heap && size > 0 }
    }
}

impl Iterator for SubtreeRanks {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if self.next >= self.end {
            if !self.heap {
                return None;
            }
            self.level = 2 * self.level + 1;
            self.width *= 2;
            if self.level >= self.g {
                self.heap = false;
                return None;
            }
            self.next = self.level;
            self.end = (self.level + self.width).min(self.g);
        }
        self.next += 1;
        Some(self.next as u16 - 1)
    }
}

/// What a walk of a whole splitting tree found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Walk {
    /// Sends on the longest root-to-leaf path.
    pub height: u16,
    /// The most children of one node.
    pub max_fan_out: u16,
    /// The latest time a node receives: the j-th child of a node that
    /// received at t gets it at t + forward + j * send (no forward cost at
    /// the root).
    pub last_arrival: u64,
}

/// Enough for every splitting tree of up to MAX_GROUP: its height is at
/// most its step count, ceil(log2 G) <= 10 for the binomial tree and at
/// most 14 for a k-binomial tree with k >= 3 (k = 3 is the deepest; k = 2
/// is the chain and is never walked). A test checks this for every G.
pub(super) const WALK_STACK: usize = 32;

/// Depth-first walk of the splitting tree of g >= 1 with a fixed stack of
/// one frame per node on the current path. O(G) splits.
pub(super) fn walk(rule: Rule, g: u16, send: u64, forward: u64) -> Walk {
    #[derive(Clone, Copy, Default)]
    struct Frame {
        n: u16,
        b: u8,
        sent: u16,
        /// Time from which this node's sends count.
        base: u64,
    }
    let mut w = Walk::default();
    let mut stack = [Frame::default(); WALK_STACK];
    stack[0] = Frame { n: g, b: rule.budget(), sent: 0, base: 0 };
    let mut sp = 1;
    while sp > 0 {
        let f = &mut stack[sp - 1];
        if f.n <= 1 || f.b == 0 {
            w.height = w.height.max(sp as u16 - 1);
            w.max_fan_out = w.max_fan_out.max(f.sent);
            sp -= 1;
            continue;
        }
        let x = rule.split(f.n, f.b);
        f.n -= x;
        f.b -= 1;
        f.sent += 1;
        let t = f.base.saturating_add((f.sent as u64).saturating_mul(send));
        w.last_arrival = w.last_arrival.max(t);
        let base = t.saturating_add(forward);
        stack[sp] = Frame { n: x, b: rule.budget(), sent: 0, base };
        sp += 1;
    }
    w
}
