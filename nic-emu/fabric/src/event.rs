//! The event queue of the discrete-event core: compact events (24 bytes)
//! in a binary heap ordered by (virtual time, sequence number). The
//! sequence number breaks ties in the order events were scheduled, so a
//! run is a pure function of its inputs. Owns nothing but the queue.
//!
//! (A radix heap and hand-sifted 2- and 4-ary heaps were tried: none was
//! faster on the 16-node benchmark than std's `BinaryHeap` of small
//! entries, which stays in L1 at the few hundred events a cluster keeps
//! pending.)

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

/// One scheduled event: 24 bytes, ordered by (time, seq) reversed so
/// that `BinaryHeap` (a max-heap) pops the earliest first.
#[derive(Debug, Clone, Copy)]
struct Scheduled {
    time: u64,
    seq: u64,
    ev: u64,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    #[inline]
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
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

/// The queue: a binary heap of 24-byte entries.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: std::collections::BinaryHeap<Scheduled>,
    seq: u64,
}

impl EventQueue {
    #[inline]
    pub fn push(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled { time, seq: self.seq, ev: ev.pack() });
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        self.heap.pop().map(|s| (s.time, Ev::unpack(s.ev)))
    }

    #[inline]
    pub fn peek_time(&mut self) -> Option<u64> {
        self.heap.peek().map(|s| s.time)
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
