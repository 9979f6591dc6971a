//! What each member does in a collective, step by step: the algorithms as
//! lists of sends and receives per rank, the same on every side (the NIC
//! runs them, the host-based scheme runs them from host programs, the
//! reference evaluates them).
//!
//! A collective's vector is cut into chunks (one packet each); every
//! chunk goes through its own list of steps, so a long vector is
//! pipelined packet by packet: chunk 1 may be a step ahead of chunk 0.
//! A step is a send of the chunk's value as it stands, or a receive that
//! copies the incoming value or combines it with the chunk's own. A pair
//! of members exchanges at most one message per chunk and tag, so a
//! packet is named by (collective, chunk, tag, sender).
//!
//! The order of combination is fixed by the algorithm and is the same at
//! every member, so results are deterministic, floating point included:
//! - binomial tree (relative rank v = rank - root mod n): v combines its
//!   children v + 1, v + 2, v + 4, ... in that order, each on the right:
//!   its value always covers the ranks v .. v + 2^k in rank order;
//! - recursive doubling (pairwise exchange): with p the largest power of
//!   two up to n and r = n - p, ranks 2i and 2i + 1 below 2r first
//!   combine (even on the left), then the p survivors exchange with the
//!   partner whose rank differs in bit k, the lower block on the left;
//!   the even ranks below 2r get the result from their odd neighbour;
//! - ring (reduce-scatter, then all-gather): chunk c belongs to segment
//!   g = c mod n, whose partial sum starts at rank g + 1 and travels the
//!   ring, each member adding its own on the right, to end complete at
//!   rank g, which sends it round again.

use super::arith::Side;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Barrier = 0,
    /// Every member's vector combined; the result at the root only.
    Reduce = 1,
    /// Every member's vector combined; the result at every member.
    Allreduce = 2,
    /// The root's vector to every member.
    Broadcast = 3,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Barrier, Kind::Reduce, Kind::Allreduce, Kind::Broadcast];

    pub const fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Barrier,
            1 => Kind::Reduce,
            2 => Kind::Allreduce,
            3 => Kind::Broadcast,
            _ => return None,
        })
    }

    /// Does it carry data (a vector)?
    pub const fn has_data(self) -> bool {
        !matches!(self, Kind::Barrier)
    }

    /// Does it combine (an operation and an element type)?
    pub const fn combines(self) -> bool {
        matches!(self, Kind::Reduce | Kind::Allreduce)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Kind::Barrier => "barrier",
            Kind::Reduce => "reduce",
            Kind::Allreduce => "allreduce",
            Kind::Broadcast => "broadcast",
        }
    }
}

/// The algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alg {
    /// Barrier: in round k, rank i signals i + 2^k and waits for i - 2^k.
    Dissemination = 0,
    /// Recursive doubling: in round k, rank i exchanges with i xor 2^k.
    Pairwise = 1,
    /// Barrier: gather up a binomial tree to rank 0, then release down it.
    Tree = 2,
    /// A binomial tree: reduce up it, broadcast down it (allreduce: both).
    Binomial = 3,
    /// Allreduce: reduce-scatter and all-gather round a ring, pipelined.
    Ring = 4,
}

impl Alg {
    pub const ALL: [Alg; 5] =
        [Alg::Dissemination, Alg::Pairwise, Alg::Tree, Alg::Binomial, Alg::Ring];

    pub const fn from_u8(v: u8) -> Option<Alg> {
        Some(match v {
            0 => Alg::Dissemination,
            1 => Alg::Pairwise,
            2 => Alg::Tree,
            3 => Alg::Binomial,
            4 => Alg::Ring,
            _ => return None,
        })
    }

    /// Is this algorithm one for collective `k`?
    pub const fn serves(self, k: Kind) -> bool {
        matches!(
            (k, self),
            (Kind::Barrier, Alg::Dissemination | Alg::Pairwise | Alg::Tree)
                | (Kind::Reduce, Alg::Binomial)
                | (Kind::Allreduce, Alg::Pairwise | Alg::Binomial | Alg::Ring)
                | (Kind::Broadcast, Alg::Binomial)
        )
    }

    pub const fn name(self) -> &'static str {
        match self {
            Alg::Dissemination => "dissemination",
            Alg::Pairwise => "pairwise",
            Alg::Tree => "tree",
            Alg::Binomial => "binomial",
            Alg::Ring => "ring",
        }
    }
}

/// What to do with a chunk received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Take it as the chunk's value (or, with no data, just wait for it).
    Copy,
    /// Combine it with the chunk's value, on this side.
    Combine(Side),
}

/// One step of one chunk at one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send the chunk's value as it stands to rank `to`.
    Send { to: u16, tag: u8 },
    /// Wait for the chunk from rank `from`, then take it as `how` says.
    Recv { from: u16, tag: u8, how: How },
}

/// Tags of the pairwise exchange's steps before and after the rounds.
pub const TAG_PRE: u8 = 0xF0;
pub const TAG_POST: u8 = 0xF1;
/// Tags of a tree's way up and way down, and of the ring's two phases.
pub const TAG_UP: u8 = 0;
pub const TAG_DOWN: u8 = 1;

/// Most steps of one chunk at one member (a binomial allreduce of 1,024:
/// 10 receives, a send, a receive and 10 sends).
pub const MAX_STEPS: usize = 32;

/// A collective as one member sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub kind: Kind,
    pub alg: Alg,
    /// Members.
    pub n: u16,
    /// This member's rank.
    pub rank: u16,
    /// The root's rank (reduce, broadcast; 0 otherwise).
    pub root: u16,
}

/// The steps of chunk `chunk` at the member `s` describes, in order.
#[derive(Debug, Clone, Copy)]
pub struct Steps {
    steps: [Step; MAX_STEPS],
    len: u8,
}

impl Steps {
    fn push(&mut self, s: Step) {
        if (self.len as usize) < MAX_STEPS {
            self.steps[self.len as usize] = s;
            self.len += 1;
        }
    }

    pub fn as_slice(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> Option<Step> {
        self.as_slice().get(i).copied()
    }
}

impl Shape {
    /// The steps of chunk `chunk` (only the ring's depend on it).
    #[inline(never)]
    pub fn steps(&self, chunk: u32) -> Steps {
        let mut out = Steps { steps: [Step::Send { to: 0, tag: 0 }; MAX_STEPS], len: 0 };
        if self.n < 2 || self.rank >= self.n {
            return out;
        }
        match (self.kind, self.alg) {
            (Kind::Barrier, Alg::Dissemination) => self.dissemination(&mut out),
            (Kind::Barrier | Kind::Allreduce, Alg::Pairwise) => self.pairwise(&mut out),
            (Kind::Barrier, Alg::Tree) | (Kind::Allreduce, Alg::Binomial) => {
                self.up(&mut out, 0);
                self.down(&mut out, 0);
            }
            (Kind::Reduce, Alg::Binomial) => self.up(&mut out, self.root),
            (Kind::Broadcast, Alg::Binomial) => self.down(&mut out, self.root),
            (Kind::Allreduce, Alg::Ring) => self.ring(&mut out, chunk),
            _ => {}
        }
        out
    }

    fn abs(&self, root: u16, v: u16) -> u16 {
        ((v as u32 + root as u32) % self.n as u32) as u16
    }

    fn rel(&self, root: u16) -> u16 {
        ((self.rank as u32 + self.n as u32 - root as u32) % self.n as u32) as u16
    }

    fn dissemination(&self, out: &mut Steps) {
        let (n, r) = (self.n as u32, self.rank as u32);
        let mut k = 0u8;
        while (1u32 << k) < n {
            let d = 1u32 << k;
            out.push(Step::Send { to: ((r + d) % n) as u16, tag: k });
            let how = How::Copy;
            out.push(Step::Recv { from: ((r + n - d) % n) as u16, tag: k, how });
            k += 1;
        }
    }

    fn pairwise(&self, out: &mut Steps) {
        let n = self.n;
        let r = self.rank;
        let p = 1u16 << (15 - n.leading_zeros());
        let rem = n - p;
        let new = if r < 2 * rem {
            if r.is_multiple_of(2) {
                out.push(Step::Send { to: r + 1, tag: TAG_PRE });
                out.push(Step::Recv { from: r + 1, tag: TAG_POST, how: How::Copy });
                return;
            }
            let how = How::Combine(Side::AccRight);
            out.push(Step::Recv { from: r - 1, tag: TAG_PRE, how });
            r / 2
        } else {
            r - rem
        };
        let old = |v: u16| if v < rem { 2 * v + 1 } else { v + rem };
        let mut k = 0u8;
        while (1u16 << k) < p {
            let partner = new ^ (1 << k);
            let side = if partner < new { Side::AccRight } else { Side::AccLeft };
            out.push(Step::Send { to: old(partner), tag: k });
            out.push(Step::Recv { from: old(partner), tag: k, how: How::Combine(side) });
            k += 1;
        }
        if r < 2 * rem {
            out.push(Step::Send { to: r - 1, tag: TAG_POST });
        }
    }

    /// Up a binomial tree rooted at `root`: the children's values
    /// combined in, then on to the parent.
    fn up(&self, out: &mut Steps, root: u16) {
        let v = self.rel(root);
        let mut mask = 1u16;
        while mask < self.n && v & mask == 0 {
            if let Some(c) = v.checked_add(mask).filter(|&c| c < self.n) {
                let how = How::Combine(Side::AccLeft);
                out.push(Step::Recv { from: self.abs(root, c), tag: TAG_UP, how });
            }
            mask = mask.wrapping_shl(1);
            if mask == 0 {
                break;
            }
        }
        if v != 0 {
            out.push(Step::Send { to: self.abs(root, v - (v & v.wrapping_neg())), tag: TAG_UP });
        }
    }

    /// Down a binomial tree rooted at `root`: from the parent, then to
    /// the children, the largest subtree first.
    fn down(&self, out: &mut Steps, root: u16) {
        let v = self.rel(root);
        if v != 0 {
            let parent = self.abs(root, v - (v & v.wrapping_neg()));
            out.push(Step::Recv { from: parent, tag: TAG_DOWN, how: How::Copy });
        }
        let top = if v == 0 { 1u32 << 16 } else { (v & v.wrapping_neg()) as u32 };
        let mut mask = top >> 1;
        while mask > 0 {
            let c = v as u32 + mask;
            if c < self.n as u32 {
                out.push(Step::Send { to: self.abs(root, c as u16), tag: TAG_DOWN });
            }
            mask >>= 1;
        }
    }

    fn ring(&self, out: &mut Steps, chunk: u32) {
        let n = self.n as u32;
        let r = self.rank as u32;
        let g = chunk % n;
        let d = (r + n - g - 1) % n;
        let next = ((r + 1) % n) as u16;
        let prev = ((r + n - 1) % n) as u16;
        if d == 0 {
            out.push(Step::Send { to: next, tag: TAG_UP });
        } else {
            let how = How::Combine(Side::AccRight);
            out.push(Step::Recv { from: prev, tag: TAG_UP, how });
            if d < n - 1 {
                out.push(Step::Send { to: next, tag: TAG_UP });
            }
        }
        if d == n - 1 {
            out.push(Step::Send { to: next, tag: TAG_DOWN });
        } else {
            out.push(Step::Recv { from: prev, tag: TAG_DOWN, how: How::Copy });
            if d + 2 < n {
                out.push(Step::Send { to: next, tag: TAG_DOWN });
            }
        }
    }
}
