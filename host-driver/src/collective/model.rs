//! A LogP-style model of each collective algorithm's time, from a
//! fabric's costs: what `auto` compares when the costs are known (a
//! scenario's `algorithm = "auto"` passes its profile's).
//!
//! A collective is cut into C chunks of c bytes (one chunk for a
//! barrier; the host-based scheme sends the whole vector per step, a
//! ring's segment under the ring). Per chunk, each algorithm has a
//! depth D (messages one after another on the longest path), of which
//! Dc are followed by a combine, and at its busiest member S sends, R
//! receives and K combines. The NIC-based scheme pipelines chunks:
//!
//! ```text
//! time = D (tx + wire(c) + hop + rx) + Dc comb(c) + 2 dma(c)
//!      + (C - 1) (S (tx + rx) + R (rx + tx) + K comb(c) + 2 dma_cmd)
//! ```
//!
//! (every message is acknowledged: a send costs its sender a transmit
//! and the ack's receive, a receive its receiver the reverse). The
//! host-based scheme does not: each of its D steps is a message of the
//! step's bytes m from host to host, then Dc combines at the host's
//! memory speed:
//!
//! ```text
//! time = D (2 msg + 2 dma(m) + tx + rx + wire(m) + hop) + Dc m / touch
//! ```
//!
//! The assisted scheme is the NIC-based one with the host in each step's
//! loop: every step on the longest path adds a host event (the step
//! done) and a descriptor post (the next released), `msg` each, so
//!
//! ```text
//! time = nic time + D msg
//! ```
//!
//! (the ring cannot run assisted: its steps depend on the chunk).
//!
//! The model counts no queueing, loss or contention; it ranks the
//! algorithms, it does not predict the simulator to the microsecond.

use nic_abi::collective::{chunk_bytes, chunks, unit, Alg, Dtype, Kind};

/// What the model needs of a fabric, in nanoseconds and bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Link bandwidth, and one hop's fixed latency (switch and cables).
    pub link_bytes_per_s: f64,
    pub hop_ns: f64,
    /// NIC CPU per packet sent and per packet received, per host-DMA
    /// command, and per element combined (integer, floating point).
    pub nic_tx_ns: f64,
    pub nic_rx_ns: f64,
    pub nic_dma_ns: f64,
    pub nic_int_ns: f64,
    pub nic_float_ns: f64,
    /// Host-DMA: a command's setup and the bus's bandwidth.
    pub dma_setup_ns: f64,
    pub dma_bytes_per_s: f64,
    /// Host CPU per message sent or received (post, event), and the
    /// speed it combines vectors at.
    pub host_msg_ns: f64,
    pub host_touch_bytes_per_s: f64,
}

/// Which side runs the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Nic,
    Host,
    /// The host releases each step, the NIC does the rest of it.
    Assisted,
}

impl Scheme {
    /// Does the scheme run `alg` (the ring cannot run assisted)?
    pub fn runs(self, alg: Alg) -> bool {
        !(self == Scheme::Assisted && alg == Alg::Ring)
    }
}

/// One collective to estimate: `len` bytes of `dtype` per member, `n`
/// members, on a fabric of MTU `mtu` whose NICs have `sram` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    pub kind: Kind,
    pub scheme: Scheme,
    pub dtype: Dtype,
    pub len: u32,
    pub n: u16,
    pub mtu: u32,
    pub sram: u32,
}

/// Per chunk: depth, combines on the path, and the busiest member's
/// sends, receives and combines.
struct Counts {
    d: f64,
    dc: f64,
    s: f64,
    r: f64,
    k: f64,
}

fn log2_ceil(n: u16) -> f64 {
    (16 - (n.max(1) - 1).leading_zeros() as u16) as f64
}

fn counts(kind: Kind, alg: Alg, n: u16) -> Counts {
    let l = log2_ceil(n);
    let comb = if kind.combines() { 1.0 } else { 0.0 };
    match alg {
        Alg::Dissemination => Counts { d: l, dc: 0.0, s: l, r: l, k: 0.0 },
        Alg::Pairwise => {
            let p = 1u32 << (15 - n.max(1).leading_zeros());
            let rounds = p.trailing_zeros() as f64;
            let extra = if (p as u16) < n { 1.0 } else { 0.0 };
            let (d, e) = (rounds + 2.0 * extra, rounds + extra);
            Counts { d, dc: comb * e, s: e, r: e, k: comb * e }
        }
        Alg::Tree => Counts { d: 2.0 * l, dc: 0.0, s: l, r: l, k: 0.0 },
        Alg::Binomial => match kind {
            Kind::Reduce => Counts { d: l, dc: l, s: 1.0, r: l, k: l },
            Kind::Broadcast => Counts { d: l, dc: 0.0, s: l, r: 1.0, k: 0.0 },
            _ => Counts { d: 2.0 * l, dc: comb * l, s: l, r: l, k: comb * l },
        },
        Alg::Ring => {
            let n = n.max(2) as f64;
            Counts { d: 2.0 * (n - 1.0), dc: n - 1.0, s: 2.0, r: 2.0, k: 1.0 }
        }
    }
}

/// The model's time for `case` under `alg`, in nanoseconds.
pub fn estimate(case: &Case, alg: Alg, c: &Costs) -> f64 {
    let k = counts(case.kind, alg, case.n);
    let wire = |b: f64| b * 1e9 / c.link_bytes_per_s.max(1.0);
    let dma = |b: f64| c.dma_setup_ns + b * 1e9 / c.dma_bytes_per_s.max(1.0);
    let elem = unit(case.kind, case.dtype).max(1) as f64;
    let per_elem = if case.dtype.is_float() { c.nic_float_ns } else { c.nic_int_ns };
    let data = case.kind.has_data() && case.len > 0;
    let (tx, rx, hop) = (c.nic_tx_ns, c.nic_rx_ns, c.hop_ns);
    match case.scheme {
        Scheme::Assisted => {
            let nic = estimate(&Case { scheme: Scheme::Nic, ..*case }, alg, c);
            nic + k.d * c.host_msg_ns
        }
        Scheme::Nic => {
            let cb = chunk_bytes(case.mtu, case.sram, unit(case.kind, case.dtype));
            let (cc, nchunks) = match data {
                true => (cb.min(case.len) as f64, chunks(case.len, cb) as f64),
                false => (0.0, 1.0),
            };
            let comb = cc / elem * per_elem;
            let io = if data { 2.0 * dma(cc) } else { 0.0 };
            let first = k.d * (tx + wire(cc) + hop + rx) + k.dc * comb + io;
            let io_cmds = if data { 2.0 * c.nic_dma_ns } else { 0.0 };
            let busy = (k.s + k.r) * (tx + rx) + k.k * comb + io_cmds;
            first + (nchunks - 1.0) * busy
        }
        Scheme::Host => {
            let len = if data { case.len as f64 } else { 0.0 };
            let m = if alg == Alg::Ring { len / case.n.max(1) as f64 } else { len };
            let step = 2.0 * c.host_msg_ns + 2.0 * dma(m) + tx + rx + wire(m) + hop;
            k.d * step + k.dc * m * 1e9 / c.host_touch_bytes_per_s.max(1.0)
        }
    }
}

/// The algorithm of `case.kind` the model finds fastest (the first of
/// `Alg::ALL` on a tie).
pub fn pick(case: &Case, c: &Costs) -> Alg {
    let mut best: Option<(f64, Alg)> = None;
    for alg in Alg::ALL.into_iter().filter(|&a| a.serves(case.kind) && case.scheme.runs(a)) {
        let t = estimate(case, alg, c);
        if best.is_none_or(|(b, _)| t < b) {
            best = Some((t, alg));
        }
    }
    best.map_or(Alg::Binomial, |(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modern profile's figures.
    const MODERN: Costs = Costs {
        link_bytes_per_s: 12.5e9,
        hop_ns: 320.0,
        nic_tx_ns: 120.0,
        nic_rx_ns: 150.0,
        nic_dma_ns: 50.0,
        nic_int_ns: 2.0,
        nic_float_ns: 2.0,
        dma_setup_ns: 400.0,
        dma_bytes_per_s: 25e9,
        host_msg_ns: 90.0,
        host_touch_bytes_per_s: 10e9,
    };

    fn case(kind: Kind, scheme: Scheme, len: u32, n: u16) -> Case {
        Case { kind, scheme, dtype: Dtype::F64, len, n, mtu: 4096, sram: 8 << 20 }
    }

    #[test]
    fn short_vectors_take_few_rounds_and_long_ones_the_ring() {
        let nic = |len, n| pick(&case(Kind::Allreduce, Scheme::Nic, len, n), &MODERN);
        assert_eq!(nic(8, 16), Alg::Pairwise);
        assert_eq!(nic(256, 256), Alg::Pairwise);
        assert_eq!(nic(1 << 20, 16), Alg::Ring);
        assert_eq!(nic(1 << 20, 8), Alg::Ring);
        let host = |len, n| pick(&case(Kind::Allreduce, Scheme::Host, len, n), &MODERN);
        assert_eq!(host(8, 16), Alg::Pairwise);
        assert_eq!(host(1 << 20, 16), Alg::Ring);
        let barrier = pick(&case(Kind::Barrier, Scheme::Nic, 0, 16), &MODERN);
        assert_eq!(barrier, Alg::Dissemination);
        assert_eq!(pick(&case(Kind::Reduce, Scheme::Nic, 64, 16), &MODERN), Alg::Binomial);
    }

    #[test]
    fn assisted_costs_a_host_round_per_step_and_never_picks_the_ring() {
        for alg in [Alg::Pairwise, Alg::Binomial] {
            let t = |scheme| estimate(&case(Kind::Allreduce, scheme, 64, 16), alg, &MODERN);
            let d = if alg == Alg::Pairwise { 4.0 } else { 8.0 };
            let extra = t(Scheme::Assisted) - t(Scheme::Nic);
            assert!((extra - d * MODERN.host_msg_ns).abs() < 1e-6, "{alg:?}: {extra}");
        }
        let assisted = |len, n| pick(&case(Kind::Allreduce, Scheme::Assisted, len, n), &MODERN);
        assert_eq!(assisted(8, 16), Alg::Pairwise);
        assert_ne!(assisted(1 << 20, 16), Alg::Ring);
    }

    #[test]
    fn the_estimate_grows_with_the_vector_and_the_group() {
        for alg in [Alg::Pairwise, Alg::Binomial, Alg::Ring] {
            for scheme in [Scheme::Nic, Scheme::Host] {
                let t = |len, n| estimate(&case(Kind::Allreduce, scheme, len, n), alg, &MODERN);
                assert!(t(8, 16) < t(1 << 16, 16), "{alg:?} {scheme:?}");
                assert!(t(1 << 16, 4) < t(1 << 16, 64), "{alg:?} {scheme:?}");
            }
        }
    }
}
