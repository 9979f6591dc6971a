//! The event queue of the discrete-event core: compact events (a time and
//! 64 bits of event) taken in virtual-time order, events of one time in the order they
//! were scheduled, so a run is a pure function of its inputs. Owns
//! nothing but the queue.
//!
//! (It is a radix heap: 12 bits at level 0, bytes above. std's
//! `BinaryHeap` of 24-byte (time, sequence number, event) entries cost
//! about 200 instructions a pop on 16 nodes, and a 1,024-node cluster
//! keeps some 60,000 events pending, mostly wakes superseded by earlier
//! ones, in a heap far larger than the caches. A radix heap of single
//! bits moved each event about ten times on its way down.)

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
    /// The oldest packet blocked at node's input (no receive buffer) may
    /// have waited too long.
    RxTimeout { node: u32 },
    /// A packet's head reached the far end of its current link.
    HeadArrive { flight: u32 },
    /// A packet's tail was written into a receive buffer.
    RxDone { flight: u32 },
    /// Node's firmware pass ended: its send-DMA and host-DMA engines may
    /// take the commands the pass posted.
    Kick { node: u32 },
}

/// One scheduled event, a node of its bucket's list: its time, the
/// packed event, and the next node of the bucket (or of the free list).
#[derive(Debug, Clone, Copy)]
struct Node {
    time: u64,
    ev: u64,
    next: u32,
}

/// No node: the end of a list.
const NIL: u32 = u32::MAX;

/// A bucket: the first and last node of its list (`head == NIL`: empty;
/// `tail` is then stale).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    head: u32,
    tail: u32,
}

const EMPTY: Bucket = Bucket { head: NIL, tail: NIL };

impl Ev {
    /// Pack into 64 bits: kind (3 bits) | index (29 bits) | generation
    /// (32 bits). Indices (nodes, links, flights in flight) stay far below
    /// 2^29. The two timeouts share a kind, told apart by the low word.
    #[inline]
    fn pack(self) -> u64 {
        let (k, a, b) = match self {
            Ev::NicWake { node, gen } => (0u64, node, gen),
            Ev::AppWake { node, gen } => (1, node, gen),
            Ev::HdmaDone { node, gen } => (2, node, gen),
            Ev::LinkFree { link } => (3, link, 0),
            Ev::LinkTimeout { link } => (4, link, 0),
            Ev::RxTimeout { node } => (4, node, 1),
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
            4 if b == 0 => Ev::LinkTimeout { link: a },
            4 => Ev::RxTimeout { node: a },
            5 => Ev::HeadArrive { flight: a },
            6 => Ev::RxDone { flight: a },
            _ => Ev::Kick { node: a },
        }
    }
}

/// What `EventQueue::pop_until` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The next event (taken off the queue).
    Event(u64, Ev),
    /// The next event falls after the limit, at this time (still queued).
    Later(u64),
    /// Nothing is queued.
    Empty,
}

/// Digits of an event time: 12 bits at level 0, bytes above (levels 1
/// to 7 cover bits 12 to 67).
const LEVELS: usize = 8;
const BITS_0: u32 = 12;
const DIGITS_0: usize = 1 << BITS_0;
const WORDS_0: usize = DIGITS_0 / 64;
const DIGITS: usize = 256;
const WORDS: usize = DIGITS / 64;
const _: () = assert!(WORDS * LEVELS <= 32, "a bit per level word in `words`");
const _: () = assert!(WORDS_0 <= 64, "a bit per level-0 word in `words_0`");

/// The level and digit of `time` against `last` (`time >= last`).
#[inline(always)]
fn place(time: u64, last: u64) -> (usize, usize) {
    let x = time ^ last;
    if x < DIGITS_0 as u64 {
        return (0, time as usize & (DIGITS_0 - 1));
    }
    let high = 63 - x.leading_zeros();
    let level = (1 + (high - BITS_0) / 8) as usize & (LEVELS - 1);
    let shift = BITS_0 + 8 * (level as u32 - 1);
    (level, (time >> shift) as usize & (DIGITS - 1))
}

/// The queue: a radix heap over event times. Every push is at or after
/// the time of the last event popped (the core never schedules into the
/// past). An event is kept at the level of the highest digit in which its
/// time differs from that time, in the bucket of its own digit there:
/// level 0 (the low 12 bits) holds, per bucket, the events of one exact
/// time; each level above is a byte. A pop takes the front of the lowest
/// bucket of level 0; when level 0 is empty, the lowest bucket of the
/// lowest level is spread over the levels below (an event moves down once
/// or twice in all). A bucket keeps scheduling order: it receives spread
/// events only while every level below it is empty, so they go before
/// anything pushed after. Pushes are appends and pops take from a front:
/// no sifting through a heap that, on a large cluster, holds tens of
/// thousands of (mostly superseded) wakes.
///
/// Level 0 spans 4,096 ns: most events are scheduled less than that
/// ahead (a packet's hop, a DMA, a firmware pass), and land there at
/// once; with a byte at level 0 nearly every event went to level 1 first
/// and was spread down when its time came.
///
/// A bucket is a list of nodes in one array, linked by index: a bucket
/// is two indices, a spread relinks nodes without copying them, and a pop
/// frees its node to the front of a free list, which the next push takes
/// again while it is still in the cache. (With a vector per bucket, most
/// pushes and pops touched a bucket header and an allocation of their
/// own, cold by the next use.)
#[derive(Debug)]
pub struct EventQueue {
    /// The time the levels are relative to: the last event popped was
    /// at it (or 0).
    last: u64,
    nodes: Vec<Node>,
    /// The first free node (NIL: none; a push then adds one).
    free: u32,
    /// Level 0's buckets, one per exact time of its span.
    buckets_0: Box<[Bucket; DIGITS_0]>,
    /// Level 0: a bit per bucket that holds events.
    full_0: Box<[u64; WORDS_0]>,
    /// Bit w: word w of `full_0` is not zero.
    words_0: u64,
    /// Levels 1 and up (`[0]` unused): `DIGITS` buckets each.
    buckets: Box<[[Bucket; DIGITS]; LEVELS]>,
    /// Levels 1 and up: each bucket's earliest time (u64::MAX: empty).
    mins: Box<[[u64; DIGITS]; LEVELS]>,
    /// Levels 1 and up: a bit per bucket that holds events.
    full: [[u64; WORDS]; LEVELS],
    /// Bit `WORDS * l + w`: word w of `full[l]` is not zero (so the
    /// lowest set bit names the lowest level above 0 with events and the
    /// word of its lowest bucket).
    words: u32,
    len: usize,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue {
            last: 0,
            nodes: Vec::new(),
            free: NIL,
            buckets_0: Box::new([EMPTY; DIGITS_0]),
            full_0: Box::new([0; WORDS_0]),
            words_0: 0,
            buckets: Box::new([[EMPTY; DIGITS]; LEVELS]),
            mins: Box::new([[u64::MAX; DIGITS]; LEVELS]),
            full: [[0; WORDS]; LEVELS],
            words: 0,
            len: 0,
        }
    }
}

impl EventQueue {
    /// Schedule `ev` at `time`, which must not be before the last event
    /// popped. (Inlined so that packing the event folds at each call site;
    /// the rest is out of line.)
    #[inline(always)]
    pub fn push(&mut self, time: u64, ev: Ev) {
        self.push_packed(time, ev.pack());
    }

    #[inline(never)]
    fn push_packed(&mut self, time: u64, ev: u64) {
        debug_assert!(time >= self.last, "an event in the past: {time} < {}", self.last);
        self.len += 1;
        let node = Node { time, ev, next: NIL };
        let n = match self.free {
            NIL => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
            n => {
                let slot = &mut self.nodes[n as usize];
                self.free = slot.next;
                *slot = node;
                n
            }
        };
        self.append(n, time);
    }

    /// Append node `n` (at `time`, not before `last`; its `next` NIL) to
    /// its bucket.
    #[inline(always)]
    fn append(&mut self, n: u32, time: u64) {
        let (level, digit) = place(time, self.last);
        let b =
            if level == 0 { &mut self.buckets_0[digit] } else { &mut self.buckets[level][digit] };
        let tail = std::mem::replace(&mut b.tail, n);
        if b.head == NIL {
            b.head = n;
            if level == 0 {
                self.full_0[digit / 64] |= 1 << (digit % 64);
                self.words_0 |= 1 << (digit / 64);
            } else {
                self.full[level][digit / 64] |= 1 << (digit % 64);
                self.words |= 1 << (WORDS * level + digit / 64);
            }
        } else {
            self.nodes[tail as usize].next = n;
        }
        if level > 0 {
            let m = &mut self.mins[level][digit];
            *m = (*m).min(time);
        }
    }

    /// Bucket `d` of `level` is empty now.
    #[inline]
    fn emptied(&mut self, level: usize, d: usize) {
        if level == 0 {
            let word = &mut self.full_0[d / 64];
            *word &= !(1 << (d % 64));
            if *word == 0 {
                self.words_0 &= !(1 << (d / 64));
            }
        } else {
            let word = &mut self.full[level][d / 64];
            *word &= !(1 << (d % 64));
            if *word == 0 {
                self.words &= !(1 << (WORDS * level + d / 64));
            }
        }
    }

    /// Node `n` is popped: onto the free list.
    #[inline]
    fn release(&mut self, n: u32) -> (u64, Ev) {
        let node = &mut self.nodes[n as usize];
        let out = (node.time, Ev::unpack(node.ev));
        node.next = self.free;
        self.free = n;
        self.len -= 1;
        out
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        match self.pop_until(u64::MAX) {
            Next::Event(t, ev) => Some((t, ev)),
            Next::Later(_) | Next::Empty => None,
        }
    }

    /// The next event if it falls at or before `limit` (`pop`), else
    /// when it falls (nothing moves, as `peek_time`).
    #[inline]
    pub fn pop_until(&mut self, limit: u64) -> Next {
        let Some((level, d, t)) = self.next_bucket() else { return Next::Empty };
        if t > limit {
            return Next::Later(t);
        }
        if level == 0 {
            let n = self.buckets_0[d].head;
            let next = self.nodes[n as usize].next;
            self.buckets_0[d].head = next;
            if next == NIL {
                self.emptied(0, d);
            }
            let (t, ev) = self.release(n);
            self.last = t;
            return Next::Event(t, ev);
        }
        // Level 0 is empty: the lowest bucket of the lowest level with
        // events holds the next one, the first at its earliest time
        // (the bucket is in scheduling order); the others are spread
        // over the levels below, from that time on, in their order.
        self.last = t;
        self.mins[level][d] = u64::MAX;
        self.emptied(level, d);
        let mut n = std::mem::replace(&mut self.buckets[level][d].head, NIL);
        let mut first = NIL;
        while n != NIL {
            let Node { time, next, .. } = self.nodes[n as usize];
            if first == NIL && time == t {
                first = n;
            } else {
                self.nodes[n as usize].next = NIL;
                self.append(n, time);
            }
            n = next;
        }
        debug_assert!(first != NIL, "the bucket's earliest");
        let (t, ev) = self.release(first);
        Next::Event(t, ev)
    }

    /// The time of the next event (nothing moves: events may still be
    /// scheduled before it, from the last event popped on).
    #[inline]
    pub fn peek_time(&self) -> Option<u64> {
        self.next_bucket().map(|(_, _, t)| t)
    }

    /// Where the next event is: the lowest level with events, its lowest
    /// bucket, and the event's time (at level 0 the bucket's own time,
    /// above it the bucket's earliest).
    #[inline]
    fn next_bucket(&self) -> Option<(usize, usize, u64)> {
        if self.words_0 != 0 {
            let w = self.words_0.trailing_zeros() as usize;
            let d = w * 64 + self.full_0[w].trailing_zeros() as usize;
            return Some((0, d, self.last & !(DIGITS_0 as u64 - 1) | d as u64));
        }
        if self.words == 0 {
            return None;
        }
        let b = self.words.trailing_zeros() as usize;
        let (level, w) = (b / WORDS, b % WORDS);
        let d = w * 64 + self.full[level][w].trailing_zeros() as usize;
        Some((level, d, self.mins[level][d]))
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
            Ev::RxTimeout { node: 0 },
            Ev::RxTimeout { node: (1 << 29) - 1 },
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
                    let t = now + [0, 1, 2, 3, 64, 4_095, 4_096, 1 << 20][rng.below(8) as usize];
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
