//! Acknowledgements gathered: a chunk taken in the middle of a long
//! vector is not acknowledged at once. Its ack waits in a batch with
//! the acks of the chunks that follow it from the same peer and step
//! tag, and one `Ack` answer covers them all: its `len` field is a mask
//! of chunks from the one it names (bit i: chunk `chunk + i`; 0 reads as
//! 1, a single chunk). A batch goes when it holds a quarter of the run's
//! window, when a chunk past its 32 comes, when the vector's last chunk
//! comes, or an eighth of the retransmission interval (at least the
//! profile's ack delay) after its first chunk. A pipelined allreduce of 1 MiB on 16 members sends about 60
//! acks a member instead of 480.

use super::Collective;
use crate::hw::Hw;
use crate::offload::Services;
use nic_abi::collective::{CollRepr, CtlCode};
use nic_abi::stats::Stat;

/// Batches kept at once (one per peer and tag a member takes chunks from
/// at the same time: a ring's one, a tree's few).
pub(super) const BATCHES: usize = 4;

/// Acks waiting to go as one answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batch {
    /// The answer (to the first chunk's sender, naming it).
    a: CollRepr,
    /// Bit i: chunk `a.chunk + i` taken (0: the batch is empty).
    mask: u32,
    /// When it goes at the latest.
    due: u64,
}

impl Batch {
    pub(super) const EMPTY: Batch = Batch {
        a: CollRepr {
            addr: nic_abi::packet::Addr {
                src_node: 0,
                src_port: 0,
                dst_node: 0,
                dst_port: 0,
                priority: nic_abi::Priority::Low,
            },
            ctl: None,
            group: 0,
            cseq: 0,
            tag: 0,
            chunk: 0,
            from_rank: 0,
            len: 0,
        },
        mask: 0,
        due: u64::MAX,
    };

    /// Does answer `a` (for one chunk) go to the same peer, about the
    /// same collective and step tag?
    fn same(&self, a: &CollRepr) -> bool {
        self.mask != 0
            && self.a.addr.dst_node == a.addr.dst_node
            && self.a.addr.dst_port == a.addr.dst_port
            && self.a.group == a.group
            && self.a.cseq == a.cseq
            && self.a.tag == a.tag
    }
}

/// The chunks an `Ack` answer `q` acknowledges, as a mask from `q.chunk`.
pub(super) fn acked(q: &CollRepr) -> u32 {
    if q.len == 0 {
        1
    } else {
        q.len
    }
}

impl Collective {
    /// Acknowledge chunk `a.chunk` (the ack `a`, ready to go) in a batch;
    /// `batch` chunks make a full one, and `last` sends it at once
    /// (with the batch it joins).
    pub(super) fn ack_later<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        a: CollRepr,
        batch: u32,
        last: bool,
    ) {
        let now = sv.now();
        let i = match self.acks.iter().position(|b| b.same(&a)) {
            Some(i) if a.chunk >= self.acks[i].a.chunk && a.chunk - self.acks[i].a.chunk < 32 => i,
            Some(i) => {
                self.send_batch(sv, i);
                self.new_batch(sv, i, a, now)
            }
            None => {
                let i = self.free_batch(sv);
                self.new_batch(sv, i, a, now)
            }
        };
        let b = &mut self.acks[i];
        b.mask |= 1 << (a.chunk - b.a.chunk);
        if last || b.mask.count_ones() >= batch {
            self.send_batch(sv, i);
        }
    }

    /// Start batch `i` (empty) with ack `a`.
    fn new_batch<H: Hw>(&mut self, sv: &Services<'_, H>, i: usize, a: CollRepr, now: u64) -> usize {
        let delay = sv.config().ack_delay.max(1);
        self.acks[i] = Batch { a, mask: 0, due: now.saturating_add(delay) };
        i
    }

    /// An empty batch (sending the one due first when none is).
    fn free_batch<H: Hw>(&mut self, sv: &mut Services<'_, H>) -> usize {
        if let Some(i) = self.acks.iter().position(|b| b.mask == 0) {
            return i;
        }
        let i = (0..BATCHES).min_by_key(|&i| self.acks[i].due).unwrap_or(0);
        self.send_batch(sv, i);
        i
    }

    /// Send batch `i` now (kept as an answer if no transmit buffer is
    /// free) and empty it.
    pub(super) fn send_batch<H: Hw>(&mut self, sv: &mut Services<'_, H>, i: usize) {
        let b = self.acks[i];
        self.acks[i] = Batch::EMPTY;
        if b.mask == 0 {
            return;
        }
        let a = CollRepr { ctl: Some(CtlCode::Ack), len: b.mask, ..b.a };
        sv.count(Stat::AcksSent, 1);
        if !sv.send(&a.emit(), &[]) {
            self.keep_answer(sv, &a);
        }
    }

    /// Send the batches whose delay has passed.
    pub(super) fn acks_due<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let now = sv.now();
        for i in 0..BATCHES {
            if self.acks[i].mask != 0 && self.acks[i].due <= now {
                self.send_batch(sv, i);
            }
        }
    }

    /// When the next batch is due.
    pub(super) fn acks_deadline(&self) -> Option<u64> {
        self.acks.iter().filter(|b| b.mask != 0).map(|b| b.due).min()
    }
}
