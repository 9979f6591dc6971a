//! The collective offload: barrier, reduce, allreduce and broadcast run
//! by the NICs of a group's members. The host posts one Collective
//! descriptor per member and hears one Collective event when its part is
//! done; in between, the MCP runs the algorithm itself: it reads the
//! member's vector by host-DMA, sends and receives the chunks each step
//! of `nic_abi::collective::schedule` names, combines them
//! (`nic_abi::collective::arith`, in software on this CPU), and writes
//! the result by host-DMA as each chunk finishes.
//!
//! Reliability is its own: its packets (`Coll`, `CollCtl`) are not
//! sequenced. Each chunk sent is kept in a slot until the receiver
//! acknowledges it, and sent again every retransmission interval; a
//! chunk that comes twice is acknowledged again and taken once, and one
//! that comes before its step is held (or refused as Busy when no slot is
//! free, and sent again later). A chunk is named by the collective's
//! number in its group, so a late chunk of collective k never counts for
//! k + 1. A member that waits long for a peer probes it. A peer whose NIC
//! does not answer for the send timeout, or answers that its port is
//! closed, is missing: the collective ends at once with the members
//! missing named (and this NIC tells every other member, which also
//! learn it from the answers to their probes).
//!
//! Up to eight collectives of different groups run at once on a NIC (their
//! records in SRAM, runs.rs). Each works on a window of its vector's
//! chunks (at most `runs::window_for` of them), cut from the vector area
//! in blocks; the window moves on as its first chunks end, so a vector
//! may be much longer than the area (up to 4,095 chunks). On a NIC with
//! SRAM past the map the chunks are 4 KiB and the slots and the area are
//! there (layout.rs); otherwise 1 KiB, in `map::COLL`. A ninth
//! collective, or the next of a group whose last has not ended here,
//! waits in its ring until one is done. Chunks of a collective that has
//! not begun here may arrive before its descriptor: they are held.
//!
//! Owns: descriptor kind `Collective`, packet types `Coll` and `CollCtl`,
//! SRAM `map::COLL` (the vector windows, held and sent chunks, each
//! group's missing members) and `map::COLL_EXT` where the NIC has it,
//! timers (retransmissions, probes), its host-DMA.

mod acks;
mod assist;
mod layout;
mod records;
mod run;
mod runs;
mod timers;
mod wire;

#[cfg(test)]
mod assist_tests;
#[cfg(test)]
mod tests;

use super::{Intake, Offload, Packet, Received, Region, Services};
use crate::hw::Hw;
use crate::translate::Xlat;
use layout::Layout;
use nic_abi::collective::{chunk_bytes, chunks, CollFields, Kind, Shape};
use nic_abi::collective::{MAX_ASSISTED_CHUNKS, MAX_VECTOR_CHUNKS};
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::ErrorCause;
use nic_abi::map::{self, COLL, COLL_END, GROUP_ENTRIES};
use nic_abi::packet::PacketType;
use records::{ones, Held};

/// Most chunks of one collective's vector.
pub const MAX_CHUNKS: usize = map::COLL_CHUNKS as usize;
/// Collectives running at once (or ended, their events still to post).
pub const MAX_RUNS: usize = map::COLL_RUNS as usize;

/// A collective in progress (or ended, its events still owed), as its
/// record in SRAM holds it (runs.rs).
#[derive(Debug, Clone, Copy)]
struct Run {
    f: CollFields,
    shape: Shape,
    /// Where its window of the vector is in SRAM: `win` chunk slots,
    /// chunk c in slot c mod `win`.
    base: u32,
    chunk: u32,
    nchunks: u32,
    /// The window: the chunks from `lo` (those below are done), at most
    /// `win` of them. Bit i of each chunk set below, and `at[i]`, is
    /// chunk `lo + i`'s.
    lo: u32,
    win: u32,
    /// Each chunk's next step.
    at: [u8; MAX_CHUNKS],
    /// Chunks whose input is in (or that need none).
    loaded: u64,
    /// Chunks whose input read is posted.
    reading: u64,
    /// Chunks whose steps are all done.
    stepped: u64,
    /// Chunks whose result is written (or that write none).
    written: u64,
    /// Chunks whose result write is posted.
    writing: u64,
    /// Chunks whose host-DMA is two commands (a page boundary), one of
    /// which is still to complete.
    two: u64,
    /// The peer waited for, since when it last showed life, and when it
    /// was last probed.
    waiting: Option<(u16, u64, u64)>,
    /// Ended with members missing (listed at `map::coll_missing`).
    failed: bool,
    /// Ended: the next 16-byte piece of the missing list to report.
    piece: u8,
    /// Assisted: the `CollStep` event of the step released (`f.step`)
    /// is posted.
    told: bool,
}

/// Where run `ri` keeps the receive steps of chunk `c` taken ahead of
/// their turn (a window never holds two chunks `MAX_CHUNKS` apart).
fn ahead_at(ri: usize, c: u32) -> u32 {
    map::coll_ahead(ri as u32, c % MAX_CHUNKS as u32)
}

impl Run {
    /// Chunks in the window now (from `lo`).
    fn window_len(&self) -> u32 {
        self.win.min(self.nchunks.saturating_sub(self.lo))
    }
}

/// An abort being told to a group's members.
#[derive(Debug, Clone, Copy)]
struct Telling {
    group: u16,
    cseq: u32,
    port: u8,
    next: u16,
    n: u16,
}

pub struct Collective {
    /// Runs in progress (bit i: record `map::coll_run(i)`), and runs
    /// ended whose events are still to post.
    live: u8,
    owed: u8,
    /// Each run's group and number, when its probe is next due, and the
    /// blocks of the vector area it holds.
    heads: [(u16, u32); MAX_RUNS],
    wait_due: [u64; MAX_RUNS],
    run_blocks: [u32; MAX_RUNS],
    /// Blocks of the vector area in use (bit b: `lay.block` bytes at
    /// `lay.vector + b * lay.block`).
    blocks: u32,
    /// Where the slots and the vector area are on this NIC.
    lay: Layout,
    /// Held chunks (bit i: record `lay.held_rec(i)` in use).
    held: u32,
    /// Sent chunks not yet acknowledged (bit i: `lay.sent_rec(i)`), and
    /// those of them not yet on the wire.
    sent: u32,
    unsent: u32,
    /// Answers kept for want of a transmit buffer (bit i:
    /// `lay.answer_at(i)`).
    answers: u32,
    telling: Option<Telling>,
    /// Something could not be done for want of a resource: try again at
    /// the next pass.
    again: bool,
    /// The retransmission interval and the send timeout (the
    /// configuration's, kept for `deadline`).
    rto: u64,
    limit: u64,
    /// When a sent chunk next needs a look (`refresh_due`).
    due: u64,
    /// Acks gathered to go as one (acks.rs).
    acks: [acks::Batch; acks::BATCHES],
}

impl Collective {
    /// The first held chunk `pick` chooses.
    fn find_held(&self, hw: &impl Hw, pick: impl Fn(&Held) -> bool) -> Option<u32> {
        ones(self.held).find(|&i| pick(&Held::load(hw, self.lay.held_rec(i))))
    }

    /// Let go of the held chunks `pick` chooses.
    fn let_go_held(&mut self, hw: &impl Hw, pick: impl Fn(&Held) -> bool) {
        for i in ones(self.held) {
            if pick(&Held::load(hw, self.lay.held_rec(i))) {
                self.held &= !(1 << i);
            }
        }
    }

    /// Group `g`'s last collective done here (0: none yet), and its last
    /// that ended with members missing (when above `done`, it has not
    /// begun here yet).
    fn done(hw: &impl Hw, g: u16) -> u32 {
        hw.load_u32(map::coll_group(g as u32 % GROUP_ENTRIES))
    }

    fn aborted(hw: &impl Hw, g: u16) -> u32 {
        hw.load_u32(map::coll_group(g as u32 % GROUP_ENTRIES) + 4)
    }

    fn set_done(hw: &mut impl Hw, g: u16, cseq: u32) {
        hw.store_u32(map::coll_group(g as u32 % GROUP_ENTRIES), cseq);
    }

    fn set_aborted(hw: &mut impl Hw, g: u16, cseq: u32) {
        hw.store_u32(map::coll_group(g as u32 % GROUP_ENTRIES) + 4, cseq);
    }

    /// The chunk bytes of chunk `c` of a vector of `len` bytes.
    fn chunk_len(r: &Run, c: u32) -> u32 {
        if r.f.len == 0 {
            0
        } else {
            r.chunk.min(r.f.len - c * r.chunk)
        }
    }

    /// Where chunk `c`'s value is (its slot of the run's window).
    #[inline]
    fn chunk_at(r: &Run, c: u32) -> u32 {
        r.base + c % r.win.max(1) * r.chunk
    }

    /// Check descriptor `f` from port `port` against the group and this
    /// NIC's limits, and make its run.
    fn new_run<H: Hw>(
        &self,
        sv: &mut Services<'_, H>,
        port: u8,
        f: CollFields,
    ) -> Result<Run, Intake> {
        let bad = |c| Err(Intake::Refused(c));
        let Some(g) = super::multicast::group_head(sv.hw, f.group) else {
            return bad(ErrorCause::BadGroup);
        };
        if g.port != port || f.port != port || f.root >= g.size {
            return bad(ErrorCause::BadGroup);
        }
        let chunk = chunk_bytes(sv.config().mtu, self.lay.sram, f.elem_size());
        let nchunks = chunks(f.len, chunk);
        if nchunks > MAX_VECTOR_CHUNKS || (f.assisted && nchunks > MAX_ASSISTED_CHUNKS) {
            return bad(ErrorCause::BadLength);
        }
        let shape = Shape { kind: f.kind, alg: f.alg, n: g.size, rank: g.rank, root: f.root };
        let (reads, writes) = io(&shape);
        for (needed, at) in [(reads, f.local), (writes, f.remote)] {
            match needed && f.len > 0 {
                false => {}
                true => match sv.registered(port, at, f.len as u64) {
                    Xlat::Bus(_) => {}
                    Xlat::Wait => return Err(Intake::Wait),
                    Xlat::Fault => return bad(ErrorCause::NotRegistered),
                },
            }
        }
        let (reads, writes) = (reads && f.len > 0, writes && f.len > 0);
        Ok(Run {
            f,
            shape,
            base: 0,
            chunk,
            nchunks,
            lo: 0,
            win: 0,
            at: [0; MAX_CHUNKS],
            two: 0,
            loaded: if reads { 0 } else { u64::MAX },
            reading: 0,
            stepped: 0,
            written: if writes { 0 } else { u64::MAX },
            writing: 0,
            waiting: None,
            failed: false,
            piece: 0,
            told: false,
        })
    }

    /// Slot `i` is free again (its vector's blocks too).
    pub(super) fn free_run(&mut self, i: usize) {
        self.live &= !(1 << i);
        self.owed &= !(1 << i);
        self.blocks &= !self.run_blocks[i];
        self.run_blocks[i] = 0;
        self.wait_due[i] = u64::MAX;
    }
}

/// Does a member of shape `s` read its vector from the host, and write a
/// result to it?
fn io(s: &Shape) -> (bool, bool) {
    let root = s.rank == s.root;
    match s.kind {
        Kind::Barrier => (false, false),
        Kind::Reduce => (true, root),
        Kind::Allreduce => (true, true),
        Kind::Broadcast => (root, !root),
    }
}

impl Offload for Collective {
    const NAME: &'static str = "collective";
    const DESC_KINDS: &'static [u8] = &[DescKind::Collective as u8];
    const PACKET_TYPES: &'static [u8] = &[PacketType::Coll as u8, PacketType::CollCtl as u8];
    const SRAM: &'static [Region] = &[
        Region { start: COLL, len: COLL_END - COLL },
        // (Past the map: as much of it as the NIC has, `map::coll_ext_len`.)
        Region { start: map::COLL_EXT, len: map::COLL_EXT_MAX },
    ];
    const NEW: Collective = Collective {
        live: 0,
        owed: 0,
        heads: [(0, 0); MAX_RUNS],
        wait_due: [u64::MAX; MAX_RUNS],
        run_blocks: [0; MAX_RUNS],
        blocks: 0,
        lay: Layout::SMALL,
        held: 0,
        sent: 0,
        unsent: 0,
        answers: 0,
        telling: None,
        again: false,
        rto: 0,
        limit: 0,
        due: u64::MAX,
        acks: [acks::Batch::EMPTY; acks::BATCHES],
    };

    fn init<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let lay = Layout::of(sv.hw.reg(nic_abi::regs::SRAM_SIZE));
        *self =
            Collective { rto: sv.config().rto, limit: sv.config().send_timeout, lay, ..Self::NEW };
        for g in 0..GROUP_ENTRIES as u16 {
            Self::set_done(sv.hw, g, 0);
            Self::set_aborted(sv.hw, g, 0);
        }
    }

    fn descriptor<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        port: u8,
        _d: &Descriptor,
        raw: &[u8],
    ) -> Intake {
        let f = match CollFields::decode(raw) {
            Ok(f) => f,
            Err(c) => return Intake::Refused(c),
        };
        if f.group as u32 >= GROUP_ENTRIES {
            return Intake::Refused(ErrorCause::BadGroup);
        }
        if f.assisted && f.step > 0 {
            return self.release(sv, port, f);
        }
        if f.cseq <= Self::done(sv.hw, f.group) {
            return Intake::Refused(ErrorCause::BadDescriptor);
        }
        if self.group_busy(f.group) {
            return Intake::Wait; // the group's last is still running here
        }
        let mut run = match self.new_run(sv, port, f) {
            Ok(r) => r,
            Err(i) => return i,
        };
        let Some((ri, blocks)) = self.slot_for(&mut run) else { return Intake::Wait };
        self.blocks |= blocks;
        self.run_blocks[ri] = blocks;
        self.start(sv, ri, run);
        self.refresh_due(sv.hw);
        Intake::Taken
    }

    fn packet<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet) -> Received {
        self.arrived(sv, p);
        self.refresh_due(sv.hw);
        Received::Done
    }

    fn deadline(&self) -> Option<u64> {
        if self.again || self.owed != 0 || self.telling.is_some() {
            return Some(0);
        }
        match (self.next_timer(), self.acks_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expire<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        self.again = false;
        self.acks_due(sv);
        self.flush_answers(sv);
        self.timers(sv);
        self.progress(sv);
        self.tell(sv);
        self.report(sv);
        self.refresh_due(sv.hw);
    }

    fn completion<H: Hw>(&mut self, sv: &mut Services<'_, H>, tag: u16) {
        self.dma_done(sv, tag);
        self.refresh_due(sv.hw);
    }

    fn port_closed<H: Hw>(&mut self, sv: &mut Services<'_, H>, port: u8) {
        for i in 0..MAX_RUNS {
            if (self.live | self.owed) & 1 << i != 0
                && Run::load(sv.hw, i).is_none_or(|r| r.f.port == port)
            {
                self.free_run(i);
            }
        }
        self.let_go_sent(sv.hw, |s| s.port == port);
        if self.telling.is_some_and(|t| t.port == port) {
            self.telling = None;
        }
        // The port's groups start their numbering again.
        for g in 0..GROUP_ENTRIES as u16 {
            if super::multicast::group_head(sv.hw, g).is_none_or(|h| h.port == port) {
                Self::set_done(sv.hw, g, 0);
                Self::set_aborted(sv.hw, g, 0);
                self.let_go_held(sv.hw, |h| h.group == g);
            }
        }
    }
}
