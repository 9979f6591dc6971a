//! The records of the collectives running here, kept in the offload's
//! SRAM (`map::coll_run`, one per slot): a run is loaded, changed and
//! stored back by the call that works on it. `Collective` keeps of each
//! only what finding one and the timers need (its group and number, when
//! its probe is due) and which slots are running or ended with their
//! events still owed.
//!
//! ```text
//!   0 the descriptor (64 bytes, `CollFields`)
//!  64 n u16   66 rank u16   68 base u32   72 chunk u32   76 nchunks u32
//!  80 loaded u64   88 reading u64   96 stepped u64   104 written u64
//! 112 writing u64  120 two u64
//! 128 peer u16  130 waiting u8  131 failed u8  132 piece u8  133 told u8
//! 136 life u64   144 probed u64   152 lo u32   156 win u32
//! 160 at[64] (the next step of each chunk of the window)
//! ```

use super::{Collective, Run, MAX_CHUNKS, MAX_RUNS};
use crate::hw::Hw;
use nic_abi::collective::{Alg, CollFields, Shape, FLAG_ASSISTED};
use nic_abi::map;

const AT: u32 = 160;

impl Run {
    pub(super) fn load(hw: &impl Hw, i: usize) -> Option<Run> {
        let at = map::coll_run(i as u32);
        let mut d = [0u8; 64];
        hw.read(at, &mut d);
        let f = CollFields::decode(&d).ok()?;
        let w = |o: u32| hw.load_u64(at + o);
        let (a, b) = (w(64), w(72));
        let (n, rank) = (a as u16, (a >> 16) as u16);
        let mut run = Run {
            f,
            shape: Shape { kind: f.kind, alg: f.alg, n, rank, root: f.root },
            base: (a >> 32) as u32,
            chunk: b as u32,
            nchunks: (b >> 32) as u32,
            lo: hw.load_u32(at + 152),
            win: hw.load_u32(at + 156),
            at: [0; MAX_CHUNKS],
            loaded: w(80),
            reading: w(88),
            stepped: w(96),
            written: w(104),
            writing: w(112),
            two: w(120),
            waiting: None,
            failed: false,
            piece: 0,
            told: false,
        };
        let c = w(128);
        if (c >> 16) as u8 != 0 {
            run.waiting = Some((c as u16, w(136), w(144)));
        }
        run.failed = (c >> 24) as u8 != 0;
        run.piece = (c >> 32) as u8;
        run.told = (c >> 40) as u8 != 0;
        let n = run.win.min(MAX_CHUNKS as u32) as usize;
        hw.read(at + AT, &mut run.at[..n]);
        Some(run)
    }

    pub(super) fn store(&self, hw: &mut impl Hw, i: usize) {
        let at = map::coll_run(i as u32);
        let mut d = [0u8; 64];
        self.f.encode(&mut d);
        hw.write(at, &d);
        let s = &self.shape;
        hw.store_u64(at + 64, s.n as u64 | (s.rank as u64) << 16 | (self.base as u64) << 32);
        hw.store_u64(at + 72, self.chunk as u64 | (self.nchunks as u64) << 32);
        for (o, v) in [
            (80, self.loaded),
            (88, self.reading),
            (96, self.stepped),
            (104, self.written),
            (112, self.writing),
            (120, self.two),
        ] {
            hw.store_u64(at + o, v);
        }
        let (peer, life, probed) = self.waiting.unwrap_or((0, 0, 0));
        let c = peer as u64
            | (self.waiting.is_some() as u64) << 16
            | (self.failed as u64) << 24
            | (self.piece as u64) << 32
            | (self.told as u64) << 40;
        hw.store_u64(at + 128, c);
        hw.store_u64(at + 136, life);
        hw.store_u64(at + 144, probed);
        hw.store_u64(at + 152, self.lo as u64 | (self.win as u64) << 32);
        hw.write(at + AT, &self.at[..self.win.min(MAX_CHUNKS as u32) as usize]);
    }
}

impl Run {
    /// Release step `step` of run `i` (with tag `tag`), if it is an
    /// assisted run of port `port` whose last step released is the one
    /// before (in place: the descriptor's step and tag, `told` cleared).
    pub(super) fn release(hw: &mut impl Hw, i: usize, (port, step, tag): (u8, u8, u64)) -> bool {
        let at = map::coll_run(i as u32);
        let head = hw.load_u32(at); // kind, priority, coll, port
        let assisted = hw.load_u32(at + 44) >> 16 & FLAG_ASSISTED as u32 != 0; // 46: mode
        let ops = hw.load_u32(at + 40); // op, dtype, alg, step
        if head >> 24 != port as u32 || !assisted || ((ops >> 24) as u8).wrapping_add(1) != step {
            return false;
        }
        hw.store_u32(at + 40, ops & 0x00FF_FFFF | (step as u32) << 24);
        hw.store_u64(at + 32, tag);
        let c = hw.load_u64(at + 128);
        hw.store_u64(at + 128, c & !(0xFF << 40));
        true
    }
}

impl Collective {
    /// Run `i`, if one is running there.
    pub(super) fn run(&self, hw: &impl Hw, i: usize) -> Option<Run> {
        if self.live & 1 << i == 0 {
            return None;
        }
        Run::load(hw, i)
    }

    /// Keep run `i` as `r` now is.
    pub(super) fn put(&mut self, hw: &mut impl Hw, i: usize, r: &Run) {
        r.store(hw, i);
        self.live |= 1 << i;
        self.heads[i] = (r.f.group, r.f.cseq);
        self.wait_due[i] = r.waiting.map_or(u64::MAX, |(_, life, probed)| {
            probed
                .saturating_add(self.limit / super::wire::PROBES_PER_TIMEOUT)
                .min(life.saturating_add(self.limit))
        });
    }

    /// The run of collective (`group`, `cseq`), if it is running here.
    pub(super) fn run_of(&self, group: u16, cseq: u32) -> Option<usize> {
        (0..MAX_RUNS).find(|&i| self.live & 1 << i != 0 && self.heads[i] == (group, cseq))
    }

    /// Is a collective of `group` running here, or ended with its events
    /// still owed?
    pub(super) fn group_busy(&self, group: u16) -> bool {
        (0..MAX_RUNS).any(|i| (self.live | self.owed) & 1 << i != 0 && self.heads[i].0 == group)
    }

    /// A free slot for run `r`, and room for its window in the vector
    /// area (whole blocks, enough for its whole vector or for
    /// [`window_for`] chunks of it, whichever is less, or, when that much
    /// is not free, the most free blocks in a row, at least a chunk):
    /// sets its base and window, and gives the blocks it takes.
    pub(super) fn slot_for(&self, r: &mut Run) -> Option<(usize, u32)> {
        let i = (0..MAX_RUNS).find(|&i| (self.live | self.owed) & 1 << i == 0)?;
        if r.f.len == 0 {
            (r.base, r.win) = (self.lay.vector, 1);
            return Some((i, 0));
        }
        let block = self.lay.block;
        // (An assisted run's whole vector is in its window, or it waits.)
        let cap = if r.f.assisted { MAX_CHUNKS as u32 } else { window_for(&r.shape) };
        let want = r.nchunks.min(cap) * r.chunk;
        let mut need = want.div_ceil(block).min(32);
        let least = if r.f.assisted { need } else { r.chunk.div_ceil(block) };
        while need >= least {
            let mask = if need >= 32 { u32::MAX } else { (1u32 << need) - 1 };
            if let Some(b) = (0..=32 - need).find(|&b| self.blocks & mask << b == 0) {
                r.base = self.lay.vector + b * block;
                r.win = (need * block / r.chunk).min(r.nchunks).min(cap);
                return Some((i, mask << b));
            }
            need -= 1;
        }
        None
    }
}

/// The most chunks of a vector a member of shape `s` (of n members)
/// works on at once. A ring's chunk goes through about 2n members'
/// hands before it leaves the window of the member that began it, and
/// the window moves on only as its first chunk ends: the window bounds
/// how many chunks are on their way round at once (chunks a window over
/// a chunk's trip time). On the simulator a 1 MiB ring allreduce of 16
/// members on `modern` ran in 741 us with a window of 2n chunks and
/// acks one per chunk, 721 us with acks gathered (acks.rs), and 628 us
/// with acks gathered and 4n (8 members: 657 and 570 us; 256 KiB on 8
/// members, 172 and 142 us); past 4n it gained little. The other
/// algorithms keep 2n: their members exchange every chunk with a few
/// peers each, and a wider window only lets them run ahead of each
/// other into their peers' held slots (a 1 MiB pairwise allreduce of 16
/// members on `modern` crawled through Busy answers with 4n, where it
/// ran in 2.5 ms with 2n).
pub(super) fn window_for(s: &Shape) -> u32 {
    let per = if s.alg == Alg::Ring { 4 } else { 2 };
    (per * s.n as u32).clamp(8, MAX_CHUNKS as u32)
}
