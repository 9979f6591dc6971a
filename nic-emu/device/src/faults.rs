//! Seeded fault injection on links, after smoltcp's `FaultInjector`: a
//! wrapper the fabric consults each time a packet's head enters a link. It
//! decides, from the link's own random stream, whether the link loses the
//! packet, flips one of its bits (after the send-DMA engine computed the
//! CRC, so the receive-DMA engine's check catches it), or delivers it
//! twice. Every decision is counted on the link.
//!
//! Owns only the probabilities and the per-link random streams; the fabric
//! carries out what it decides.

use crate::rng::Rng;

/// Per-packet, per-link fault probabilities (each in [0, 1)).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// The link loses the packet.
    pub drop: f64,
    /// The link flips one bit of the packet (header or payload).
    pub corrupt: f64,
    /// The link delivers the packet twice (applied on links into a NIC).
    pub duplicate: f64,
}

impl Faults {
    pub const NONE: Faults = Faults { drop: 0.0, corrupt: 0.0, duplicate: 0.0 };

    pub fn is_none(&self) -> bool {
        self.drop <= 0.0 && self.corrupt <= 0.0 && self.duplicate <= 0.0
    }

    pub fn validate(&self) -> Result<(), String> {
        for (k, p) in
            [("drop", self.drop), ("corrupt", self.corrupt), ("duplicate", self.duplicate)]
        {
            if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                return Err(format!("faults.{k}: {p} is not a probability in [0, 1)"));
            }
        }
        Ok(())
    }
}

/// What the injector decided for one packet on one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    pub drop: bool,
    /// Flip bit `bit % 8` of byte `byte % len` of the packet proper.
    pub corrupt: Option<(u64, u8)>,
    pub duplicate: bool,
}

/// Apply a corruption verdict (`Verdict::corrupt`) to a packet whose
/// packet proper (header + payload) starts at `start` of `buf`: flip bit
/// `bit` of byte `byte % len` of it. False (nothing flipped) when the
/// packet proper is empty.
#[inline]
pub fn flip_bit(buf: &mut [u8], start: usize, (byte, bit): (u64, u8)) -> bool {
    let plen = buf.len().saturating_sub(start);
    if plen == 0 {
        return false;
    }
    buf[start + (byte % plen as u64) as usize] ^= 1 << bit;
    true
}

/// One link's injector.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    rng: Rng,
}

impl FaultInjector {
    pub fn new(seed: u64, link: u64) -> FaultInjector {
        FaultInjector { rng: Rng::stream(seed, link) }
    }

    /// Decide for one packet. `into_nic`: the link ends at a NIC (only
    /// such links duplicate). Draws a fixed number of values per call so
    /// that changing one probability does not shift the other decisions.
    pub fn judge(&mut self, f: &Faults, into_nic: bool) -> Verdict {
        let d = self.rng.unit();
        let c = self.rng.unit();
        let u = self.rng.unit();
        let pos = self.rng.next_u64();
        Verdict {
            drop: d < f.drop,
            corrupt: (c < f.corrupt).then_some((pos >> 3, (pos & 7) as u8)),
            duplicate: into_nic && u < f.duplicate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_the_same_verdicts() {
        let f = Faults { drop: 0.1, corrupt: 0.1, duplicate: 0.1 };
        let run = |seed| {
            let mut inj = FaultInjector::new(seed, 3);
            (0..1000).map(|_| inj.judge(&f, true)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn probabilities_are_checked() {
        assert!(Faults { drop: 1.0, ..Faults::NONE }.validate().is_err());
        assert!(Faults { corrupt: -0.1, ..Faults::NONE }.validate().is_err());
        assert!(Faults { duplicate: 0.5, ..Faults::NONE }.validate().is_ok());
        assert!(Faults::NONE.is_none());
    }
}
