//! The queues between machines, each with its two halves. A queue's
//! items live in [`Shared`](crate::shared::Shared) (a [`Queue`]); the
//! right to put work on it is its [`Producer`] half, the right to take
//! work off it its [`Consumer`] half, and each half is a field of the
//! machine at that end (made once, when the MCP is built, and never
//! copied). Any machine may look at a queue (is it empty, how long, what
//! is queued); only the holder of a half may change it:
//!
//! | queue | producer | consumer |
//! |---|---|---|
//! | `tx_ready` ([`ToSend`]): filled transmit buffers | SDMA | SEND |
//! | `provided` ([`Posted`]): receive buffers the host posted | SDMA | RECV |
//! | `from_recv` ([`ToSdma`]): acks, nacks, answers for SDMA | RECV | SDMA |
//! | `rdma_jobs` ([`Jobs`]): payloads to copy to the host | RECV | RDMA |
//! | `controls` ([`Controls`]): acks, nacks, polls for SEND | RECV and SDMA | SEND |
//!
//! `controls` has two producers, each with a half of its own. A producer
//! may change or withdraw what it queued and SEND has not taken yet
//! (RECV folds a newer ack into a queued one, the window policy replaces
//! a queued answer to a poll). The halves are zero-sized: holding one
//! costs nothing, and a push or a pop is the ring's own.

use crate::ring::{Ring, Vacant};
use core::marker::PhantomData;

/// A queue of at most `N` items from one machine to another, named by
/// `K` (one of the kinds below): a [`Ring`] whose changes need a half.
pub struct Queue<T: Vacant, const N: usize, K> {
    ring: Ring<T, N>,
    kind: PhantomData<K>,
}

/// The right to put items on the queues of kind `K`.
pub struct Producer<K>(PhantomData<K>);

/// The right to take items off the queues of kind `K`.
pub struct Consumer<K>(PhantomData<K>);

/// The halves of kind `K`, made by the MCP's constructor for the
/// machines at the queue's ends (and by tests that play one).
pub(crate) const fn producer<K>() -> Producer<K> {
    Producer(PhantomData)
}

/// See [`producer`].
pub(crate) const fn consumer<K>() -> Consumer<K> {
    Consumer(PhantomData)
}

/// Filled transmit buffers, SDMA to SEND.
pub struct ToSend;
/// Receive buffers the host posted, SDMA's intake to RECV.
pub struct Posted;
/// What RECV hands SDMA (acks, nacks, answers to gets, a fan-out's starts).
pub struct ToSdma;
/// Payloads RECV accepted, for RDMA to copy to host memory.
pub struct Jobs;
/// Control packets for SEND: RECV's acks and nacks, SDMA's polls.
pub struct Controls;

impl<T: Vacant, const N: usize, K> Queue<T, N, K> {
    pub const fn new() -> Self {
        Queue { ring: Ring::new(), kind: PhantomData }
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.ring.is_full()
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// The items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.ring.iter()
    }

    /// The oldest item.
    #[inline]
    pub fn front(&self) -> Option<&T> {
        self.ring.front()
    }

    /// Add `v` as the newest item; `Err(v)` when the queue is full.
    #[inline]
    pub fn push_back(&mut self, _: &Producer<K>, v: T) -> Result<(), T> {
        self.ring.push_back(v)
    }

    /// The items queued and not taken yet, to change in place.
    pub fn iter_mut(&mut self, _: &Producer<K>) -> impl Iterator<Item = &mut T> + '_ {
        self.ring.iter_mut()
    }

    /// Withdraw the items `keep` refuses; the others stay in order.
    pub fn retain(&mut self, _: &Producer<K>, mut keep: impl FnMut(&T) -> bool) {
        for _ in 0..self.ring.len() {
            if let Some(v) = self.ring.pop_front() {
                if keep(&v) {
                    // (A slot was just freed: it fits.)
                    let _ = self.ring.push_back(v);
                }
            }
        }
    }

    /// Take the oldest item.
    #[inline]
    pub fn pop_front(&mut self, _: &Consumer<K>) -> Option<T> {
        self.ring.pop_front()
    }

    /// The oldest item, to change in place before it is taken.
    #[inline]
    pub fn front_mut(&mut self, _: &Consumer<K>) -> Option<&mut T> {
        self.ring.front_mut()
    }
}

impl<T: Vacant, const N: usize, K> Default for Queue<T, N, K> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_withdraws_what_it_queued_and_the_rest_keeps_its_order() {
        let (tx, rx) = (producer::<Jobs>(), consumer::<Jobs>());
        let mut q: Queue<u16, 4, Jobs> = Queue::new();
        for v in [1, 2, 3, 4] {
            assert_eq!(q.push_back(&tx, v), Ok(()));
        }
        assert_eq!(q.push_back(&tx, 5), Err(5));
        assert_eq!(q.pop_front(&rx), Some(1));
        q.retain(&tx, |&v| v != 3);
        assert_eq!(q.iter().copied().collect::<std::vec::Vec<_>>(), [2, 4]);
        for v in q.iter_mut(&tx) {
            *v *= 10;
        }
        assert_eq!((q.front(), q.len()), (Some(&20), 2));
        assert_eq!(
            (q.pop_front(&rx), q.pop_front(&rx), q.pop_front(&rx)),
            (Some(20), Some(40), None)
        );
        assert!(q.is_empty());
    }
}
