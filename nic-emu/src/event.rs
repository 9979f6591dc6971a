//! The event queue of the discrete-event core: a binary heap of compact
//! events ordered by (virtual time, sequence number). The sequence number
//! breaks ties in the order events were scheduled, so a run is a pure
//! function of its inputs. Owns nothing but the queue.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens. Payloads are small indices; handlers check staleness
/// (generation numbers, or the state they find) rather than cancelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ev {
    /// Run node's NIC CPU (doorbell, engine completion, arrival, timer).
    NicWake { node: u32, gen: u32 },
    /// Call node's host programs.
    AppWake { node: u32, gen: u32 },
    /// Node's host-DMA engine finished its current command.
    HdmaDone { node: u32 },
    /// A link's entry side may have become free.
    LinkFree { link: u32 },
    /// The oldest packet waiting for a link may have waited too long.
    LinkTimeout { link: u32 },
    /// A packet's head reached the far end of its current link.
    HeadArrive { flight: u32 },
    /// A packet's tail was written into a receive buffer.
    RxDone { flight: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Scheduled {
    time: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    // Reversed: BinaryHeap is a max-heap, we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl EventQueue {
    #[inline]
    pub fn push(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled { time, seq: self.seq, ev });
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        self.heap.pop().map(|s| (s.time, s.ev))
    }

    #[inline]
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|s| s.time)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
