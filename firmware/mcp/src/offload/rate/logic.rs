//! Rate control by inter-packet dispatch time (docs/rate-control.md).
//! A flow (one sending stream) has an IDT, the least time between two of
//! its packets entering the network, and an NDT, the time before which its
//! next packet may not leave. When flows have rates, SDMA picks among the
//! flows with a sendable packet the one with the smallest NDT (ties: the
//! flow set up first), dispatches only if NDT <= RTC, then adds IDT to NDT.
//! With no regulated flow SDMA keeps GM's rotation and pays nothing here.
//!
//! This module is the pure part, so the spec's worked example and the
//! proportionality property are tested on it directly.

/// A flow's pacing clock, in RTC ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pace {
    /// Ticks between packets (the flow table's u32; 0: unregulated).
    pub idt: u32,
    pub ndt: u64,
}

impl Pace {
    /// A send token became the first sendable one of the flow.
    pub fn wake(&mut self, now: u64) {
        self.ndt = self.ndt.max(now);
    }

    /// One packet of the flow was dispatched.
    pub fn dispatched(&mut self) {
        self.ndt = self.ndt.saturating_add(self.idt as u64);
    }
}

/// What the scheduler decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice<K> {
    /// Dispatch one packet of this flow now.
    Dispatch(K),
    /// Nothing may leave before this time.
    WaitUntil(u64),
    /// No flow has a sendable packet.
    Idle,
}

/// Choose among `(flow, ndt, setup order)` of the flows with a sendable
/// packet: smallest NDT, ties to the flow set up first.
pub fn choose<K: Copy>(now: u64, flows: impl Iterator<Item = (K, u64, u32)>) -> Choice<K> {
    let mut best: Option<(K, u64, u32)> = None;
    for f in flows {
        let better = match best {
            None => true,
            Some((_, ndt, order)) => (f.1, f.2) < (ndt, order),
        };
        if better {
            best = Some(f);
        }
    }
    match best {
        None => Choice::Idle,
        Some((k, ndt, _)) if ndt <= now => Choice::Dispatch(k),
        Some((_, ndt, _)) => Choice::WaitUntil(ndt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// Run backlogged flows with these IDTs, one dispatch opportunity per
    /// tick, for `ticks`; returns what was sent at each tick.
    fn run(idts: &[u64], ticks: u64) -> Vec<Option<usize>> {
        let mut flows: Vec<Pace> =
            idts.iter().map(|&idt| Pace { idt: idt as u32, ndt: 0 }).collect();
        for f in flows.iter_mut() {
            f.wake(0);
        }
        let mut out = Vec::new();
        for t in 0..ticks {
            let c = choose(t, flows.iter().enumerate().map(|(i, f)| (i, f.ndt, i as u32)));
            match c {
                Choice::Dispatch(i) => {
                    flows[i].dispatched();
                    out.push(Some(i));
                }
                _ => out.push(None),
            }
        }
        out
    }

    #[test]
    fn the_specs_worked_example_dispatch_for_dispatch() {
        // Flows A and B with IDT 2 and 3 (units of T), both backlogged.
        let got = run(&[2, 3], 12);
        let want = [
            Some(0),
            Some(1),
            Some(0),
            Some(1),
            Some(0),
            None,
            Some(0),
            Some(1),
            Some(0),
            Some(1),
            Some(0),
            None,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn ndt_values_follow_the_worked_example() {
        let mut a = Pace { idt: 2, ndt: 0 };
        let mut b = Pace { idt: 3, ndt: 0 };
        let want_a = [0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12];
        let want_b = [0, 0, 3, 3, 6, 6, 6, 6, 9, 9, 12, 12];
        for t in 0..12u64 {
            assert_eq!((a.ndt, b.ndt), (want_a[t as usize], want_b[t as usize]), "t = {t}");
            match choose(t, [(0, a.ndt, 0), (1, b.ndt, 1)].into_iter()) {
                Choice::Dispatch(0) => a.dispatched(),
                Choice::Dispatch(_) => b.dispatched(),
                _ => {}
            }
        }
    }

    #[test]
    fn unregulated_flows_are_always_ready() {
        let got = run(&[0], 5);
        assert!(got.iter().all(|x| *x == Some(0)));
        assert_eq!(choose::<u8>(0, core::iter::empty()), Choice::Idle);
        assert_eq!(choose(5, [(1u8, 9, 0)].into_iter()), Choice::WaitUntil(9));
    }

    #[test]
    fn a_flow_that_was_idle_does_not_bank_credit() {
        let mut f = Pace { idt: 10, ndt: 0 };
        f.dispatched();
        // Idle until t = 100: waking does not let it burst.
        f.wake(100);
        assert_eq!(f.ndt, 100);
        f.dispatched();
        assert_eq!(f.ndt, 110);
    }

    proptest! {
        /// With every IDT >= T (one dispatch per tick here) and all flows
        /// backlogged, dispatch counts over a long window are in the ratio
        /// 1/idt_i: none ahead of its NDTs, and none behind by more than
        /// one packet and the ticks the other flows take first. (All start
        /// at NDT 0; the last of them in the tie-break waits a tick for
        /// each of the others, and with the rates summing to nearly one
        /// packet a tick it never makes that up.)
        #[test]
        fn dispatches_are_proportional_to_one_over_idt(
            idts in proptest::collection::vec(1u64..40, 1..6),
            ticks in 500u64..3000,
        ) {
            // The sum of rates must not exceed one packet per tick for the
            // shares to be exact; scale the IDTs up if it does.
            let load: f64 = idts.iter().map(|&i| 1.0 / i as f64).sum();
            let idts: Vec<u64> = if load > 1.0 {
                idts.iter().map(|&i| (i as f64 * load).ceil() as u64).collect()
            } else {
                idts
            };
            let got = run(&idts, ticks);
            for (k, &idt) in idts.iter().enumerate() {
                // Packet j of the flow is due at j * idt: by `ticks` it may
                // send ceil(ticks / idt); smallest-NDT-first serves every
                // packet at most a tick per other flow after its NDT.
                let n = got.iter().filter(|x| **x == Some(k)).count() as u64;
                let most = ticks.div_ceil(idt);
                let others = idts.len() as u64 - 1;
                let behind = 1 + others.div_ceil(idt);
                prop_assert!(n <= most && n + behind >= ticks / idt, "flow {} idt {} sent {} of {}", k, idt, n, most);
            }
        }
    }
}
