//! The collective in progress: its vector read in, each chunk stepped
//! through its schedule, its result written out, its end reported.

use super::records::{ones, Held};
use super::{Collective, Run, MAX_CHUNKS};
use crate::hw::Hw;
use crate::offload::services::copy_sram;
use crate::offload::{Offloads, Services};
use nic_abi::collective::{combine, How, Kind, Step};
use nic_abi::event::{Event, EventKind, SendStatus, LOST_BYTES};
use nic_abi::map;
use nic_abi::rings::DmaDir;
use nic_abi::stats::Stat;

/// Host-DMA tags: the chunk (low bits), the run, and whether it is the
/// result's write.
const WRITE: u16 = 0x8000;
const RUN_SHIFT: u16 = 12;

/// Event `kind` of collective `f` (`addr` as given, status Ok).
pub(super) fn event_of(kind: EventKind, f: &nic_abi::collective::CollFields, addr: u64) -> Event {
    let mut e = Event::empty(kind);
    e.node = f.group;
    e.len = f.cseq;
    e.addr = addr;
    e.tag = f.tag;
    e.size_class = f.kind as u8;
    e.port = f.alg as u8;
    e
}

fn id() -> u8 {
    Offloads::id_of(<Collective as crate::offload::Offload>::NAME).unwrap_or(0)
}

impl Collective {
    /// Begin run `r` in slot `ri` (the descriptor was taken).
    pub(super) fn start<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize, r: Run) {
        let g = r.f.group;
        if Self::aborted(sv.hw, g) == r.f.cseq {
            // Members went missing before it began here.
            Self::set_done(sv.hw, g, r.f.cseq);
            self.put(sv.hw, ri, &Run { failed: true, ..r });
            self.live &= !(1 << ri);
            self.owed |= 1 << ri;
            return self.report(sv);
        }
        sv.hw.write(map::coll_missing(g as u32), &[0u8; LOST_BYTES]);
        for c in 0..MAX_CHUNKS as u32 {
            sv.hw.store_u32(super::ahead_at(ri, c), 0);
        }
        self.put(sv.hw, ri, &r);
        self.progress(sv);
    }

    /// Do what can be done now for every run: reads to post, steps to
    /// take, writes to post, the end.
    #[inline(never)]
    pub(super) fn progress<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        for ri in ones(self.live as u32).map(|i| i as usize) {
            self.progress_run(sv, ri);
        }
    }

    fn progress_run<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize) {
        let Some(mut r) = self.run(sv.hw, ri) else { return };
        loop {
            for i in 0..r.window_len() {
                let (c, bit) = (r.lo + i, 1u64 << i);
                if r.loaded & bit == 0 {
                    if r.reading & bit == 0 {
                        self.post_dma(sv, (&mut r, ri), c, DmaDir::HostToSram);
                    }
                    continue;
                }
                if r.stepped & bit == 0 {
                    self.step_chunk(sv, (&mut r, ri), c);
                }
                if r.stepped & bit != 0 && r.written & bit == 0 && r.writing & bit == 0 {
                    self.post_dma(sv, (&mut r, ri), c, DmaDir::SramToHost);
                }
            }
            if !Self::retire(sv.hw, &mut r, ri) {
                break;
            }
        }
        self.step_done(sv, &mut r);
        self.put(sv.hw, ri, &r);
        self.finish_if_done(sv, ri);
    }

    /// Move run `ri`'s window past its first chunks that are done
    /// (stepped and written): their slots take the next chunks. True if
    /// it moved.
    fn retire(hw: &mut impl Hw, r: &mut Run, ri: usize) -> bool {
        let (reads, writes) = super::io(&r.shape);
        let top = 1u64 << 63;
        let mut moved = false;
        while r.lo < r.nchunks && r.stepped & r.written & 1 != 0 {
            hw.store_u32(super::ahead_at(ri, r.lo), 0);
            r.lo += 1;
            r.loaded = r.loaded >> 1 | if reads { 0 } else { top };
            r.written = r.written >> 1 | if writes { 0 } else { top };
            r.reading >>= 1;
            r.writing >>= 1;
            r.stepped >>= 1;
            r.two >>= 1;
            r.at.copy_within(1.., 0);
            r.at[MAX_CHUNKS - 1] = 0;
            moved = true;
        }
        moved
    }

    /// Post chunk `c`'s read or write for run `ri`. (Not inlined: its two
    /// calls would each take a copy.)
    #[inline(never)]
    fn post_dma<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        (r, ri): (&mut Run, usize),
        c: u32,
        dir: DmaDir,
    ) {
        let run = (ri as u16) << RUN_SHIFT;
        let (vaddr, tag) = match dir {
            DmaDir::HostToSram => (r.f.local, c as u16 | run),
            DmaDir::SramToHost => (r.f.remote, c as u16 | run | WRITE),
        };
        let at = vaddr + c as u64 * r.chunk as u64;
        let len = Self::chunk_len(r, c);
        let bit = 1u64 << (c - r.lo);
        let posted = match sv.host_dma_at(id(), (r.f.port, at), Self::chunk_at(r, c), len, dir, tag)
        {
            Ok(n) => {
                if n > 1 {
                    r.two |= bit;
                }
                true
            }
            // Checked at the descriptor: a page unregistered since ends
            // the run as a missing member would.
            Err(crate::translate::Xlat::Fault) => {
                sv.count(Stat::Drops, 1);
                r.failed = true;
                match dir {
                    DmaDir::HostToSram => r.loaded |= bit,
                    DmaDir::SramToHost => r.written |= bit,
                }
                true
            }
            Err(_) => {
                self.again = true;
                false
            }
        };
        if posted {
            match dir {
                DmaDir::HostToSram => r.reading |= bit,
                DmaDir::SramToHost => r.writing |= bit,
            }
        }
    }

    /// A host-DMA command of chunk `tag` finished.
    pub(super) fn dma_done<H: Hw>(&mut self, sv: &mut Services<'_, H>, tag: u16) {
        let ri = ((tag & !WRITE) >> RUN_SHIFT) as usize;
        let Some(mut r) = self.run(sv.hw, ri) else { return };
        let c = (tag & ((1 << RUN_SHIFT) - 1)) as u32;
        let Some(i) = c.checked_sub(r.lo).filter(|&i| i < r.window_len()) else { return };
        let bit = 1u64 << i;
        if r.two & bit != 0 {
            r.two &= !bit; // one of two
        } else if tag & WRITE != 0 {
            r.written |= bit;
        } else {
            r.loaded |= bit;
        }
        self.put(sv.hw, ri, &r);
        self.progress(sv);
    }

    /// Take chunk `c` of run `ri`'s steps as far as they go now.
    fn step_chunk<H: Hw>(&mut self, sv: &mut Services<'_, H>, (r, ri): (&mut Run, usize), c: u32) {
        let steps = r.shape.steps(c);
        let w = (c - r.lo) as usize;
        let ahead_at = super::ahead_at(ri, c);
        while let Some(step) = steps.get(r.at[w] as usize) {
            if r.f.assisted && r.at[w] > r.f.step {
                return; // not released yet
            }
            let bit = 1u32 << r.at[w];
            let ahead = sv.hw.load_u32(ahead_at);
            let went = match step {
                Step::Recv { .. } if ahead & bit != 0 => {
                    sv.hw.store_u32(ahead_at, ahead & !bit); // taken already
                    true
                }
                Step::Send { to, tag } => self.send_chunk(sv, r, c, to, tag),
                Step::Recv { from, tag, how } => self.take_held(sv, r, c, (from, tag, how)),
            };
            if !went {
                return;
            }
            r.at[w] += 1;
        }
        r.stepped |= 1 << w;
    }

    /// Chunk `c` is waiting for `(from, tag)` and it is held: take it.
    fn take_held<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        r: &mut Run,
        c: u32,
        (from, tag, how): (u16, u8, How),
    ) -> bool {
        let (g, cseq) = (r.f.group, r.f.cseq);
        let Some(i) = self.find_held(sv.hw, |h| {
            h.group == g && h.cseq == cseq && h.chunk as u32 == c && h.tag == tag && h.from == from
        }) else {
            if r.waiting.is_none() {
                r.waiting = Some((from, sv.now(), sv.now()));
            }
            return false;
        };
        self.held &= !(1 << i);
        let len = Held::load(sv.hw, self.lay.held_rec(i)).len as u32;
        self.apply(sv, r, c, (self.lay.held_at(i), len), how)
    }

    /// Take `len` bytes at `at` into chunk `c` as `how` says. False (and
    /// counted) when the length is not the chunk's.
    pub(super) fn apply<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        r: &mut Run,
        c: u32,
        (at, len): (u32, u32),
        how: How,
    ) -> bool {
        if len != Self::chunk_len(r, c) {
            sv.count(Stat::BadHeaders, 1);
            return false;
        }
        r.waiting = None;
        let dst = Self::chunk_at(r, c);
        match how {
            How::Copy => copy_sram(sv.hw, at, dst, len),
            How::Combine(side) => {
                let mut a = [0u8; 256];
                let mut b = [0u8; 256];
                let mut done = 0;
                while done < len {
                    let n = (len - done).min(256) as usize;
                    sv.hw.read(dst + done, &mut a[..n]);
                    sv.hw.read(at + done, &mut b[..n]);
                    let k = combine(r.f.op, r.f.dtype, &mut a[..n], &b[..n], side);
                    sv.combined(k as u32, r.f.dtype.is_float());
                    sv.hw.write(dst + done, &a[..n]);
                    done += n as u32;
                }
            }
        }
        true
    }

    /// Is run `ri` over (every chunk stepped and written, or members
    /// missing)? Then its end is owed.
    fn finish_if_done<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize) {
        let Some(r) = self.run(sv.hw, ri) else { return };
        // A barrier's or an allreduce's end here means every member
        // entered it: its chunks not yet acknowledged are sent again until
        // they are, without holding up the end. A reduce's or a
        // broadcast's member may end long before the others: it waits
        // for its acks, so that it never runs collectives ahead of what
        // its peers can hold.
        let in_flight = (r.writing & !r.written) | (r.reading & !r.loaded);
        let waits = matches!(r.f.kind, Kind::Reduce | Kind::Broadcast)
            && self.sent_of(sv.hw, r.f.group, r.f.cseq);
        if !r.failed && (r.lo < r.nchunks || waits) {
            return;
        }
        if r.failed && in_flight != 0 {
            return; // let the host-DMA in flight land first
        }
        let g = r.f.group;
        Self::set_done(sv.hw, g, r.f.cseq);
        if r.failed {
            Self::set_aborted(sv.hw, g, r.f.cseq);
            self.let_go_sent(sv.hw, |s| s.group == r.f.group && s.cseq == r.f.cseq);
            self.telling = Some(super::Telling {
                group: r.f.group,
                cseq: r.f.cseq,
                port: r.f.port,
                next: 0,
                n: r.shape.n,
            });
        }
        // Chunks of this one held past its end (duplicates) go.
        self.let_go_held(sv.hw, |h| h.group == r.f.group && h.cseq <= r.f.cseq);
        self.live &= !(1 << ri);
        self.owed |= 1 << ri;
        self.wait_due[ri] = u64::MAX;
        self.report(sv);
    }

    /// Post the finished collectives' events.
    #[inline(never)]
    pub(super) fn report<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        for i in ones(self.owed as u32).map(|i| i as usize) {
            self.report_one(sv, i);
        }
    }

    /// Post finished collective `i`'s events: the pieces of its missing
    /// list, then its Collective event.
    fn report_one<H: Hw>(&mut self, sv: &mut Services<'_, H>, i: usize) {
        let Some(mut o) = Run::load(sv.hw, i) else { return self.free_run(i) };
        if !sv.is_open(o.f.port) {
            return self.free_run(i);
        }
        let at = map::coll_missing(o.f.group as u32);
        while o.failed && (o.piece as usize) < LOST_BYTES / 16 {
            let mut b = [0u8; 16];
            sv.hw.read(at + 16 * o.piece as u32, &mut b);
            if b != [0; 16] {
                let mut e = Event::empty(EventKind::McastLost);
                e.tag = o.f.tag;
                e.len = 16 * o.piece as u32;
                e.inline = b;
                e.inline_len = 16;
                if !sv.event(o.f.port, &e) {
                    return o.store(sv.hw, i);
                }
            }
            o.piece += 1;
        }
        let mut e = event_of(EventKind::Collective, &o.f, o.f.remote);
        e.status = if o.failed { SendStatus::Incomplete } else { SendStatus::Ok } as u8;
        if !sv.event(o.f.port, &e) {
            return o.store(sv.hw, i);
        }
        self.free_run(i);
    }

    /// Node `node` is missing from run `ri`: list it, end the run.
    pub(super) fn missing_node<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize, node: u16) {
        let at = (node as usize / 8).min(LOST_BYTES - 1);
        let mut b = [0u8; LOST_BYTES];
        b[at] = 1 << (node % 8);
        self.missing(sv, ri, &b[..=at]);
    }

    /// Members missing from run `ri`: add `bits` (the first bytes of a
    /// `LostHeads` bitmap) to its list, end the run.
    pub(super) fn missing<H: Hw>(&mut self, sv: &mut Services<'_, H>, ri: usize, bits: &[u8]) {
        let Some(mut r) = self.run(sv.hw, ri) else { return };
        let at = map::coll_missing(r.f.group as u32);
        let mut b = [0u8; LOST_BYTES];
        sv.hw.read(at, &mut b);
        for (x, y) in b.iter_mut().zip(bits) {
            *x |= y;
        }
        sv.hw.write(at, &b);
        r.failed = true;
        self.put(sv.hw, ri, &r);
        self.finish_if_done(sv, ri);
    }
}
