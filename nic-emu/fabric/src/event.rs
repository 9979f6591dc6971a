//! The event queue of the discrete-event core: compact events (24 bytes)
//! taken in (virtual time, sequence number) order. The sequence number
//! breaks ties in the order events were scheduled, so a run is a pure
//! function of its inputs. Owns nothing but the queue.
//!
//! (It is a radix heap. std's `BinaryHeap` of the same entries was as
//! fast on 16 nodes, where a few hundred events are pending, but a
//! 1,024-node cluster keeps some 60,000 pending, mostly wakes superseded
//! by earlier ones, and every pop then sifted through a heap far larger
//! than the caches.)

/// What happens. Payloads are small indices; handlers check staleness
/// (generation numbers, or the state they find) rather than cancelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// Run node's NIC CPU (doorbell, engine completion, arrival, timer).
    NicWake { node: u32, gen: u32 },
    /// Call node's host programs.
    AppWake { node: u32, gen: u32 },
    /// Node's host-DMA engine finished its current command (`gen`: the
    /// engine's generation when it started, so that a command a NIC reset
    /// completed early is not completed twice).
    HdmaDone { node: u32, gen: u32 },
    /// A link's entry side may have become free.
    LinkFree { link: u32 },
    /// The oldest packet waiting for a link may have waited too long.
    LinkTimeout { link: u32 },
    /// A packet's head reached the far end of its current link.
    HeadArrive { flight: u32 },
    /// A packet's tail was written into a receive buffer.
    RxDone { flight: u32 },
    /// Node's firmware pass ended: its send-DMA and host-DMA engines may
    /// take the commands the pass posted.
    Kick { node: u32 },
}

/// One scheduled event: 24 bytes.
#[derive(Debug, Clone, Copy)]
struct Scheduled {
    time: u64,
    seq: u64,
    ev: u64,
}

impl Ev {
    /// Pack into 64 bits: kind (3 bits) | index (29 bits) | generation
    /// (32 bits). Indices (nodes, links, flights in flight) stay far below
    /// 2^29.
    #[inline]
    fn pack(self) -> u64 {
        let (k, a, b) = match self {
            Ev::NicWake { node, gen } => (0u64, node, gen),
            Ev::AppWake { node, gen } => (1, node, gen),
            Ev::HdmaDone { node, gen } => (2, node, gen),
            Ev::LinkFree { link } => (3, link, 0),
            Ev::LinkTimeout { link } => (4, link, 0),
            Ev::HeadArrive { flight } => (5, flight, 0),
            Ev::RxDone { flight } => (6, flight, 0),
            Ev::Kick { node } => (7, node, 0),
        };
        debug_assert!(a < 1 << 29);
        k << 61 | (a as u64) << 32 | b as u64
    }

    #[inline]
    fn unpack(v: u64) -> Ev {
        let a = ((v >> 32) as u32) & ((1 << 29) - 1);
        let b = v as u32;
        match v >> 61 {
            0 => Ev::NicWake { node: a, gen: b },
            1 => Ev::AppWake { node: a, gen: b },
            2 => Ev::HdmaDone { node: a, gen: b },
            3 => Ev::LinkFree { link: a },
            4 => Ev::LinkTimeout { link: a },
            5 => Ev::HeadArrive { flight: a },
            6 => Ev::RxDone { flight: a },
            _ => Ev::Kick { node: a },
        }
    }
}

/// The queue: a radix heap over event times. Every push is at or after
/// the time of the last event popped (the core never schedules into the
/// past), so an event is kept in the bucket of the highest bit in which
/// its time differs from that time: bucket 0 holds the events at exactly
/// that time, in scheduling order; a pop that finds bucket 0 empty moves
/// the time on to the earliest event of the lowest non-empty bucket and
/// spreads that bucket over the lower ones (each event moves down a few
/// times in all). Pushes are appends, pops take from the front of bucket
/// 0: no sifting through a heap that, on a large cluster, holds tens of
/// thousands of (mostly superseded) wakes.
#[derive(Debug)]
pub struct EventQueue {
    seq: u64,
    /// The time bucket 0 stands at (the last event popped was at it or
    /// before it).
    last: u64,
    /// The events at `last`, by sequence number, the next at `head`.
    b0: Vec<Scheduled>,
    head: usize,
    /// Bucket k + 1: events whose time first differs from `last` in bit
    /// k (so later than `last`), in no order; `mins[k]` their earliest
    /// time (u64::MAX when empty).
    buckets: [Vec<Scheduled>; 64],
    mins: [u64; 64],
    /// Bit k set: `buckets[k]` is not empty.
    full: u64,
    len: usize,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue {
            seq: 0,
            last: 0,
            b0: Vec::new(),
            head: 0,
            buckets: std::array::from_fn(|_| Vec::new()),
            mins: [u64::MAX; 64],
            full: 0,
            len: 0,
        }
    }
}

impl EventQueue {
    /// Schedule `ev` at `time`, which must not be before the last event
    /// popped (nor before a time `peek_time` returned and `pop` then took).
    #[inline]
    pub fn push(&mut self, time: u64, ev: Ev) {
        debug_assert!(time >= self.last, "an event in the past: {time} < {}", self.last);
        self.seq += 1;
        self.len += 1;
        self.place(Scheduled { time, seq: self.seq, ev: ev.pack() });
    }

    /// Put `s` (not before `last`) into its bucket.
    #[inline]
    fn place(&mut self, s: Scheduled) {
        let x = s.time ^ self.last;
        if x == 0 {
            self.b0.push(s);
        } else {
            let k = 63 - x.leading_zeros() as usize;
            self.buckets[k].push(s);
            self.mins[k] = self.mins[k].min(s.time);
            self.full |= 1 << k;
        }
    }

    /// Make bucket 0 hold the earliest events, if there are any.
    #[inline]
    fn refill(&mut self) {
        if self.head < self.b0.len() || self.full == 0 {
            return;
        }
        self.b0.clear();
        self.head = 0;
        let k = self.full.trailing_zeros() as usize;
        self.last = self.mins[k];
        let mut spread = std::mem::take(&mut self.buckets[k]);
        self.mins[k] = u64::MAX;
        self.full &= !(1 << k);
        for &s in &spread {
            self.place(s);
        }
        spread.clear();
        self.buckets[k] = spread;
        // Events that waited in higher buckets came in out of order.
        if self.b0.len() > 1 {
            self.b0.sort_unstable_by_key(|s| s.seq);
        }
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        self.refill();
        let s = *self.b0.get(self.head)?;
        self.head += 1;
        self.len -= 1;
        Some((s.time, Ev::unpack(s.ev)))
    }

    /// The time of the next event (nothing moves: events may still be
    /// scheduled before it, from the last event popped on).
    #[inline]
    pub fn peek_time(&mut self) -> Option<u64> {
        if self.head < self.b0.len() {
            Some(self.last)
        } else if self.full != 0 {
            Some(self.mins[self.full.trailing_zeros() as usize])
        } else {
            None
        }
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_packs_and_unpacks() {
        let all = [
            Ev::NicWake { node: 5, gen: u32::MAX },
            Ev::AppWake { node: (1 << 29) - 1, gen: 7 },
            Ev::HdmaDone { node: 3, gen: 9 },
            Ev::LinkFree { link: 9 },
            Ev::LinkTimeout { link: 0 },
            Ev::HeadArrive { flight: 123_456 },
            Ev::RxDone { flight: 42 },
            Ev::Kick { node: 11 },
        ];
        for e in all {
            assert_eq!(Ev::unpack(e.pack()), e);
        }
    }

    #[test]
    fn events_come_out_by_time_then_in_scheduling_order() {
        let mut q = EventQueue::default();
        q.push(5, Ev::LinkFree { link: 1 });
        q.push(3, Ev::LinkFree { link: 2 });
        q.push(5, Ev::LinkFree { link: 3 });
        q.push(3, Ev::LinkFree { link: 4 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let links: Vec<u32> = order
            .iter()
            .map(|(_, e)| match e {
                Ev::LinkFree { link } => *link,
                _ => 0,
            })
            .collect();
        assert_eq!(links, vec![2, 4, 1, 3]);
        assert_eq!(order[0].0, 3);
    }

    #[test]
    fn ties_keep_scheduling_order_across_buckets_and_peeks_move_nothing() {
        // Times from a few values: many events share one, and they reach
        // bucket 0 from different buckets, pushed before and after peeks.
        let mut rng = nic_device::rng::Rng::new(9);
        let mut q = EventQueue::default();
        let mut reference = std::collections::BinaryHeap::new();
        let (mut now, mut id) = (0u64, 0u32);
        for _ in 0..50_000 {
            match rng.below(4) {
                0 if !reference.is_empty() => {
                    let std::cmp::Reverse((t, want)) = reference.pop().unwrap();
                    assert_eq!(q.pop(), Some((t, Ev::LinkFree { link: want })));
                    now = t;
                }
                1 => {
                    let peeked = reference.peek().map(|r: &std::cmp::Reverse<(u64, u32)>| r.0 .0);
                    assert_eq!(q.peek_time(), peeked);
                }
                _ => {
                    let t = now + [0, 1, 2, 3, 64, 1 << 20][rng.below(6) as usize];
                    q.push(t, Ev::LinkFree { link: id });
                    reference.push(std::cmp::Reverse((t, id)));
                    id += 1;
                }
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(std::cmp::Reverse((t, want))) = reference.pop() {
            assert_eq!(q.pop(), Some((t, Ev::LinkFree { link: want })));
        }
        assert!(q.is_empty() && q.pop().is_none() && q.peek_time().is_none());
    }

    #[test]
    fn the_queue_matches_a_reference_heap_under_random_monotone_use() {
        let mut rng = nic_device::rng::Rng::new(5);
        let mut q = EventQueue::default();
        let mut reference = std::collections::BinaryHeap::new(); // Reverse((time, id))
        let mut now = 0u64;
        let mut id = 0u32;
        for _ in 0..20_000 {
            if rng.below(3) > 0 || reference.is_empty() {
                let span = 1u64 << rng.below(40);
                let t = now + rng.below(span);
                q.push(t, Ev::LinkFree { link: id });
                reference.push(std::cmp::Reverse((t, id)));
                id += 1;
            } else {
                let std::cmp::Reverse((t, want)) = reference.pop().unwrap();
                assert_eq!(q.peek_time(), Some(t));
                let (got_t, ev) = q.pop().unwrap();
                assert_eq!((got_t, ev), (t, Ev::LinkFree { link: want }));
                now = t;
            }
            assert_eq!(q.len(), reference.len());
        }
    }
}
