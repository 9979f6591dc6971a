//! [`Ring`]: the bounded first-in first-out queue the machines hand work
//! over with (RECV to SDMA, SDMA to SEND, RECV to RDMA, ...), and the
//! queues inside a machine.
//!
//! A pass asks most of these queues whether they are empty, several
//! times, and most passes find them so: that question is one halfword
//! load here (the count of items), where a general-purpose deque with a
//! front index, a back index and a full flag needs three loads and two
//! compares. The items are plain `Copy` records in an array; a slot not
//! holding an item holds its type's [`Vacant`] value, so the ring is
//! built in a `const fn` with no uninitialised memory.

/// The value an unused slot of a [`Ring`] holds.
pub trait Vacant: Copy {
    const VACANT: Self;
}

impl Vacant for u8 {
    const VACANT: u8 = 0;
}

impl Vacant for u16 {
    const VACANT: u16 = 0;
}

impl Vacant for (u16, u16) {
    const VACANT: (u16, u16) = (0, 0);
}

impl<T> Vacant for crate::pool::Id<T> {
    const VACANT: Self = crate::pool::Id::new(0);
}

impl<T> Vacant for (crate::pool::Id<T>, u16) {
    const VACANT: Self = (crate::pool::Id::new(0), 0);
}

/// At most `N` items (`N` below 65,536), oldest first. (`repr(C)`, the
/// count and head first: where a ring's items run to kilobytes, the word
/// a pass tests most, its count, stays at a short offset from what holds
/// the ring, one load in the image.)
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Ring<T: Vacant, const N: usize> {
    /// Where the oldest item is.
    head: u16,
    /// How many items there are.
    len: u16,
    items: [T; N],
}

impl<T: Vacant, const N: usize> Ring<T, N> {
    const FITS: () = assert!(N > 0 && N < u16::MAX as usize, "a ring holds 1 to 65,534 items");

    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Ring { items: [T::VACANT; N], head: 0, len: 0 }
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.len as usize >= N
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// The slot of the `k`th item from the oldest (`k` at most `N`). With
    /// `N` a power of two, a mask: no branch, and no bounds check where
    /// the slot indexes the items.
    #[inline(always)]
    fn slot(&self, k: usize) -> usize {
        let i = self.head as usize + k;
        if N.is_power_of_two() {
            i & (N - 1)
        } else if i >= N {
            i - N
        } else {
            i
        }
    }

    /// Add `v` as the newest item; `Err(v)` when the ring is full.
    #[inline]
    pub fn push_back(&mut self, v: T) -> Result<(), T> {
        if self.is_full() {
            return Err(v);
        }
        let i = self.slot(self.len as usize);
        self.items[i] = v;
        self.len += 1;
        Ok(())
    }

    /// Take the oldest item.
    #[inline]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.items[self.slot(0)];
        self.head = self.slot(1) as u16;
        self.len -= 1;
        Some(v)
    }

    #[inline]
    pub fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.items.get(self.slot(0))
    }

    #[inline]
    pub fn front_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        let i = self.slot(0);
        self.items.get_mut(i)
    }

    /// The newest item.
    #[inline]
    pub fn back(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.items.get(self.slot(self.len as usize - 1))
    }

    /// Drop every item.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The items, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len as usize).map(move |k| &self.items[self.slot(k)])
    }

    /// The items, oldest first, to change in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        let (head, len) = (self.head as usize, self.len as usize);
        // The live slots: from the head to the end of the array, then
        // from the start (when the items wrap round).
        let (wrapped, from_head) = self.items.split_at_mut(head);
        let first = len.min(N - head);
        from_head[..first].iter_mut().chain(wrapped[..len - first].iter_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn a_full_ring_refuses_and_gives_the_item_back() {
        let mut r: Ring<u16, 3> = Ring::new();
        for v in 1..=3 {
            assert_eq!(r.push_back(v), Ok(()));
        }
        assert!(r.is_full());
        assert_eq!(r.push_back(4), Err(4));
        assert_eq!(r.pop_front(), Some(1));
        assert_eq!(r.push_back(4), Ok(()));
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!((r.front(), r.back()), (Some(&2), Some(&4)));
        r.clear();
        assert!(r.is_empty() && r.pop_front().is_none() && r.front().is_none());
    }

    proptest! {
        /// Any sequence of pushes, pops and in-place changes leaves the
        /// ring holding what a deque would, in the same order.
        #[test]
        fn a_ring_behaves_as_a_bounded_deque(ops in prop::collection::vec(0u8..4, 0..200)) {
            let mut r: Ring<u16, 5> = Ring::new();
            let mut d: VecDeque<u16> = VecDeque::new();
            for (k, op) in ops.into_iter().enumerate() {
                let v = k as u16;
                match op {
                    0 | 1 => {
                        let full = d.len() == 5;
                        prop_assert_eq!(r.push_back(v).is_err(), full);
                        if !full {
                            d.push_back(v);
                        }
                    }
                    2 => prop_assert_eq!(r.pop_front(), d.pop_front()),
                    _ => {
                        for x in r.iter_mut() {
                            *x = x.wrapping_add(1);
                        }
                        for x in d.iter_mut() {
                            *x = x.wrapping_add(1);
                        }
                    }
                }
                prop_assert_eq!(r.len(), d.len());
                prop_assert_eq!(r.is_empty(), d.is_empty());
                prop_assert_eq!(r.front(), d.front());
                prop_assert_eq!(r.back(), d.back());
                prop_assert!(r.iter().eq(d.iter()));
            }
        }
    }
}
