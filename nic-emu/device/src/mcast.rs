//! The multicast latency model evaluated with a profile's own costs, and
//! the choice of algorithm it makes (`auto`).
//!
//! A profile may carry the model's parameters as measured on its hardware
//! (`[multicast]`, lanai9-gm carries the published study's); otherwise
//! they are derived from what the profile prices: the host's posting and
//! event costs, the NIC CPU's per-packet work, the DMA engines, the link
//! and the switch. Both give `nic_abi::multicast::model::ModelParams`.
//!
//! The model is one of small messages (one packet). For longer messages
//! the choice adds what pipelining costs: with packet-by-packet forwarding
//! (the NIC schemes) a node with f children sends each later packet f
//! times, so the last packet trails the first by (packets - 1) f packet
//! times; with store-and-forward (host and assisted schemes) every hop
//! carries the whole message, which the model's per-byte terms price.

use nic_abi::multicast::model::{model_latency_us, ModelParams, ProcTimes};
use nic_abi::multicast::{best_k, children, Algorithm, Scheme};
use nic_abi::packet::HEADER_LEN;

use crate::profile::{Clock, Profile, Rate};

/// Children a relay computes, on average, per algorithm (per-relay
/// processing is priced per child computed).
fn typical_children(alg: Algorithm) -> f64 {
    match alg {
        Algorithm::Separate | Algorithm::Serial => 1.0,
        Algorithm::Binary | Algorithm::Binomial | Algorithm::KBinomial { .. } => 2.0,
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The model's parameters for profile `p`: its `[multicast]` figures when
/// it has them, else derived from its prices.
pub fn model_params(p: &Profile) -> ModelParams {
    if let Some(m) = &p.multicast {
        return m.params();
    }
    let cpu = Clock::new(p.nic.cpu_hz);
    let cyc = |c: u64| us(cpu.cycles_ns(c));
    let hdma = Rate::new(p.host_dma.bandwidth_bytes_per_s);
    let link = Rate::new(p.link.bandwidth_bytes_per_s);
    let per_byte = |r: Rate| us(r.ns(1_000_000)) / 1e6;
    let hop = us(p.switch.latency_ns + 2 * p.cable_delay_ns());
    let post = us(p.host.post_fixed_ns)
        + us(Rate::new(p.host.pio_bandwidth_bytes_per_s).ns(p.host.descriptor_bytes));
    let event = cyc(p.nic_cpu.event) + us(p.host_dma.setup_ns + hdma.ns(64));
    let sdma = post + cyc(p.nic_cpu.descriptor + p.nic_cpu.dma_cmd) + us(p.host_dma.setup_ns);
    let rdma = cyc(p.nic_cpu.dma_cmd) + us(p.host_dma.setup_ns) + event + us(p.host.event_found_ns);
    let nic_send = cyc(p.nic_cpu.tx_packet) + us(p.send_dma.setup_ns + link.ns(HEADER_LEN as u64));
    let nic_recv = hop + us(p.recv_dma.setup_ns) + cyc(p.nic_cpu.rx_packet);
    let host = |a| us(p.host.tree_child_ns) * typical_children(a) + post;
    let nic = |a| cyc(p.nic_cpu.tree_op) * typical_children(a);
    ModelParams {
        host_send: sdma + nic_send,
        host_send_per_byte: per_byte(hdma) + per_byte(link),
        host_recv: nic_recv + rdma,
        host_recv_per_byte: per_byte(hdma),
        nic_send,
        nic_send_per_byte: per_byte(link),
        nic_recv,
        nic_recv_per_byte: 0.0,
        sdma,
        rdma,
        switch: us(p.switch.latency_ns),
        cable_per_hop: us(p.cable_delay_ns()),
        host_proc: ProcTimes {
            separate: host(Algorithm::Separate),
            serial: host(Algorithm::Serial),
            binomial: host(Algorithm::Binomial),
            binary: host(Algorithm::Binary),
        },
        nic_proc: ProcTimes {
            separate: nic(Algorithm::Separate),
            serial: nic(Algorithm::Serial),
            binomial: nic(Algorithm::Binomial),
            binary: nic(Algorithm::Binary),
        },
        cached_proc: cyc(p.nic_cpu.tree_op),
    }
}

/// Packets a message of `bytes` takes on profile `p`.
fn packets(p: &Profile, bytes: u64) -> u32 {
    bytes.div_ceil(p.nic.mtu as u64).max(1) as u32
}

/// The most children any node of the tree has.
fn max_fanout(alg: Algorithm, g: u16) -> u32 {
    (0..g).map(|r| children(alg, g, r).count() as u32).max().unwrap_or(0)
}

/// The k-binomial tree's k for a message of `bytes` to g members on `p`.
pub fn k_for(p: &Profile, g: u16, bytes: u64) -> u8 {
    let m = model_params(p);
    let send = (m.nic_send_us(p.nic.mtu.min(bytes as u32)) * 1000.0) as u64;
    let fwd = (m.nic_recv_us(0) * 1000.0) as u64;
    best_k(g, packets(p, bytes), send.max(1), fwd)
}

/// The estimated completion latency (us) of one multicast of `bytes` to
/// g members with `scheme` and `alg` on profile `p`.
pub fn estimate_us(p: &Profile, scheme: Scheme, alg: Algorithm, g: u16, bytes: u64) -> f64 {
    let m = model_params(p);
    let n = packets(p, bytes);
    match scheme {
        Scheme::Nic | Scheme::NicCached => {
            let first = bytes.min(p.nic.mtu as u64) as u32;
            let packet = m.nic_send_us(first);
            model_latency_us(&m, scheme, alg, g, first)
                + (n - 1) as f64 * max_fanout(alg, g) as f64 * packet
        }
        _ => model_latency_us(&m, scheme, alg, g, bytes.min(u32::MAX as u64) as u32),
    }
}

/// The algorithm `auto` picks for (scheme, g, bytes) on `p`: the one of
/// the four, and the k-binomial tree with its best k, whose estimated
/// completion latency is lowest (ties: the earlier in that order).
pub fn pick(p: &Profile, scheme: Scheme, g: u16, bytes: u64) -> Algorithm {
    let mut cands = Algorithm::FIXED.to_vec();
    cands.push(Algorithm::KBinomial { k: k_for(p, g, bytes) });
    let mut best = (f64::INFINITY, Algorithm::Binomial);
    for a in cands {
        let t = estimate_us(p, scheme, a, g, bytes);
        if t < best.0 {
            best = (t, a);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanai9_carries_the_published_parameters() {
        let p = Profile::load("lanai9-gm").unwrap();
        assert_eq!(model_params(&p), ModelParams::LANAI9_GM);
    }

    #[test]
    fn every_profile_gives_a_model_and_a_choice() {
        for name in Profile::names() {
            let p = Profile::load(name).unwrap();
            for s in Scheme::ALL {
                for (g, b) in [(4, 2), (16, 2), (16, 65536), (64, 16384)] {
                    let a = pick(&p, s, g, b);
                    let t = estimate_us(&p, s, a, g, b);
                    assert!(t.is_finite() && t > 0.0, "{name} {s} {g} {b}: {t}");
                    for other in Algorithm::FIXED {
                        assert!(t <= estimate_us(&p, s, other, g, b) + 1e-9, "{name} {s}: {a}");
                    }
                }
            }
        }
    }

    #[test]
    fn pipelined_long_messages_prefer_narrow_trees() {
        let p = Profile::load("modern").unwrap();
        let a = pick(&p, Scheme::NicCached, 16, 65536);
        let fan = max_fanout(a, 16);
        assert!(fan <= 3, "a 64 KiB pipelined multicast picks {a} (fan-out {fan})");
    }
}
