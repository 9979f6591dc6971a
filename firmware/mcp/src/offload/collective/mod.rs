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
//! One collective runs at a time on a NIC; a second descriptor waits in
//! the ring until the first is done. Chunks of the next collective of a
//! group may arrive before its descriptor: they are held.
//!
//! Owns: descriptor kind `Collective`, packet types `Coll` and `CollCtl`,
//! SRAM `map::COLL` (the vector, held and sent chunks, each group's
//! missing members), timers (retransmissions, probes), its host-DMA.

mod records;
mod run;
mod wire;

#[cfg(test)]
mod tests;

use super::{Intake, Offload, Packet, Received, Region, Services};
use crate::hw::Hw;
use crate::translate::Xlat;
use nic_abi::collective::{chunk_bytes, chunks, Alg, CollFields, Kind, Shape};
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::ErrorCause;
use nic_abi::map::{self, COLL, COLL_END, COLL_HELD, COLL_SENT, GROUP_ENTRIES};
use nic_abi::packet::PacketType;
use records::Held;

/// Most chunks of one collective's vector.
pub const MAX_CHUNKS: usize = 64;

/// The collective in progress.
#[derive(Debug, Clone, Copy)]
struct Run {
    f: CollFields,
    shape: Shape,
    chunk: u32,
    nchunks: u32,
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
}

/// A finished collective whose events are still to post.
#[derive(Debug, Clone, Copy)]
struct Owed {
    port: u8,
    kind: Kind,
    alg: Alg,
    group: u16,
    cseq: u32,
    remote: u64,
    tag: u64,
    failed: bool,
    /// The next 16-byte piece of the missing list to report.
    piece: u8,
}

impl Owed {
    fn of(f: &CollFields, failed: bool) -> Owed {
        Owed {
            port: f.port,
            kind: f.kind,
            alg: f.alg,
            group: f.group,
            cseq: f.cseq,
            remote: f.remote,
            tag: f.tag,
            failed,
            piece: 0,
        }
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
    run: Option<Run>,
    /// Held chunks (bit i: record `map::coll_held_rec(i)` in use).
    held: u8,
    /// Sent chunks not yet acknowledged (bit i: `map::coll_sent_rec(i)`),
    /// and those of them not yet on the wire.
    sent: u16,
    unsent: u16,
    /// Each group's last collective done here (its number; 0: none yet).
    done: [u32; GROUP_ENTRIES as usize],
    /// Each group's collective that ended with members missing (when its
    /// number is above `done`, it has not begun here yet).
    aborted: [u32; GROUP_ENTRIES as usize],
    owed: Option<Owed>,
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
}

const _: () = assert!(COLL_HELD <= 8 && COLL_SENT <= 16);

impl Collective {
    /// The first held chunk `pick` chooses.
    fn find_held(&self, hw: &impl Hw, pick: impl Fn(&Held) -> bool) -> Option<u32> {
        let mut bits = self.held;
        while bits != 0 {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            if pick(&Held::load(hw, i)) {
                return Some(i);
            }
        }
        None
    }

    /// Let go of the held chunks `pick` chooses.
    fn let_go_held(&mut self, hw: &impl Hw, pick: impl Fn(&Held) -> bool) {
        let mut bits = self.held;
        while bits != 0 {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            if pick(&Held::load(hw, i)) {
                self.held &= !(1 << i);
            }
        }
    }

    /// The chunk bytes of chunk `c` of a vector of `len` bytes.
    fn chunk_len(r: &Run, c: u32) -> u32 {
        if r.f.len == 0 {
            0
        } else {
            r.chunk.min(r.f.len - c * r.chunk)
        }
    }

    /// Where chunk `c`'s value is.
    fn chunk_at(r: &Run, c: u32) -> u32 {
        COLL + c * r.chunk
    }

    /// Check descriptor `f` from port `port` against the group and this
    /// NIC's limits, and make its run.
    fn new_run<H: Hw>(sv: &mut Services<'_, H>, port: u8, f: CollFields) -> Result<Run, Intake> {
        let bad = |c| Err(Intake::Refused(c));
        let Some(g) = super::multicast::group_head(sv.hw, f.group) else {
            return bad(ErrorCause::BadGroup);
        };
        if g.port != port || f.port != port || f.root >= g.size {
            return bad(ErrorCause::BadGroup);
        }
        let chunk = chunk_bytes(sv.config().mtu, f.elem_size());
        let nchunks = chunks(f.len, chunk);
        if f.len > map::COLL_VECTOR || nchunks as usize > MAX_CHUNKS {
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
        let all = if nchunks as usize == MAX_CHUNKS { u64::MAX } else { (1 << nchunks) - 1 };
        Ok(Run {
            f,
            shape,
            chunk,
            nchunks,
            at: [0; MAX_CHUNKS],
            two: 0,
            loaded: if reads && f.len > 0 { 0 } else { all },
            reading: 0,
            stepped: 0,
            written: if writes && f.len > 0 { 0 } else { all },
            writing: 0,
            waiting: None,
            failed: false,
        })
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
    const SRAM: &'static [Region] = &[Region { start: COLL, len: COLL_END - COLL }];
    const NEW: Collective = Collective {
        run: None,
        held: 0,
        sent: 0,
        unsent: 0,
        done: [0; GROUP_ENTRIES as usize],
        aborted: [0; GROUP_ENTRIES as usize],
        owed: None,
        telling: None,
        again: false,
        rto: 0,
        limit: 0,
        due: u64::MAX,
    };

    fn init<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        *self = Collective { rto: sv.config().rto, limit: sv.config().send_timeout, ..Self::NEW };
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
        if f.cseq <= self.done[f.group as usize] {
            return Intake::Refused(ErrorCause::BadDescriptor);
        }
        if self.run.is_some() || self.owed.is_some() {
            return Intake::Wait;
        }
        let run = match Self::new_run(sv, port, f) {
            Ok(r) => r,
            Err(i) => return i,
        };
        self.start(sv, run);
        self.refresh_due(sv.hw);
        Intake::Taken
    }

    fn packet<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet) -> Received {
        self.arrived(sv, p);
        self.refresh_due(sv.hw);
        Received::Done
    }

    fn deadline(&self) -> Option<u64> {
        if self.again || self.owed.is_some() || self.telling.is_some() {
            return Some(0);
        }
        self.next_timer()
    }

    fn expire<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        self.again = false;
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
        if self.run.is_some_and(|r| r.f.port == port) {
            self.run = None;
            self.sent = 0;
            self.unsent = 0;
        }
        if self.owed.is_some_and(|o| o.port == port) {
            self.owed = None;
        }
        if self.telling.is_some_and(|t| t.port == port) {
            self.telling = None;
        }
        // The port's groups start their numbering again.
        for g in 0..GROUP_ENTRIES as u16 {
            if super::multicast::group_head(sv.hw, g).is_none_or(|h| h.port == port) {
                self.done[g as usize] = 0;
                self.aborted[g as usize] = 0;
                self.let_go_held(sv.hw, |h| h.group == g);
            }
        }
    }
}
