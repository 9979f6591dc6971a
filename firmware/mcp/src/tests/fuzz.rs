//! Hostile input: random writes to the port windows, send rings and page
//! tables of an attacker's ports, and random packets (with good CRCs, so
//! they reach the parser) on the wire. The MCP must not panic (run it in
//! a debug build: overflow checks on), must not touch memory outside
//! SRAM (the bench asserts it every poll), and afterwards a send between
//! two ports the attacker never touched must complete intact.
//!
//! `cargo xtask test` runs `FUZZ_STEPS` steps in a debug build; `cargo
//! xtask fuzz` runs a million (the count and seed from MCP_FUZZ_STEPS and
//! MCP_FUZZ_SEED).

use super::*;

/// Steps in the suite's run (`cargo xtask fuzz` sets MCP_FUZZ_STEPS).
const FUZZ_STEPS: u64 = 30_000;

/// The attacker's ports: (node, port). The victims use node 0 port 1 and
/// node 1 port 2, opened after the storm.
const ATTACKERS: [(usize, usize); 3] = [(0, 5), (1, 6), (2, 5)];
/// Ports a forged packet names (never the victims' 1 and 2; the parser
/// refuses ports out of range, and random bytes try that).
const FORGED_PORTS: [u8; 6] = [0, 3, 5, 6, 7, 5];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Small numbers often (they hit the interesting cases), any number
    /// sometimes.
    fn value(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(4),
            1 => self.below(70_000),
            2 => u64::MAX - self.below(4),
            _ => self.next(),
        }
    }
}

#[derive(Default, Debug)]
struct Tally {
    window_writes: u64,
    descriptors: u64,
    ptes: u64,
    packets: u64,
    /// Over all NICs: descriptors refused, bad headers, packets received.
    refused: u64,
    bad_headers: u64,
    received: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One random write into port `p`'s control block on node `n`; `evq` is
/// the port's own event queue (bus address), which a reopen restores half
/// the time (a refused port takes no descriptors: the storm would reach
/// less of the MCP).
fn poke_window(b: &mut Bench, r: &mut Rng, n: usize, p: usize, evq: u64) {
    let node = &mut b.nodes[n];
    match r.below(6) {
        // Open or close it (a new generation half the time).
        0 => {
            if r.below(2) == 0 {
                node.w64(evq_bus(p), evq);
                node.w32(evq_len(p), EVQ_ENTRIES);
            }
            if r.below(2) == 0 {
                let g = node.r32(port_reg(p, GENERATION));
                node.w32(port_reg(p, GENERATION), g.wrapping_add(1));
            }
            node.w32(port_reg(p, STATE), r.below(3) as u32);
        }
        // An event queue anywhere, of any length. The registration is the
        // privileged side's, which checks it; written here as if that
        // check were fooled, so the MCP's own check is exercised.
        1 => {
            node.w64(evq_bus(p), r.value());
            node.w32(evq_len(p), r.value() as u32);
        }
        2 => node.w32(port_reg(p, EVQ_CONSUMED), r.value() as u32),
        3 => node.w32(port_reg(p, SEND_PROD), r.value() as u32),
        // The firmware's own words: the host can write them too.
        4 => {
            let off = [SEND_CONS, FW_STATE, FW_GENERATION, EVQ_PRODUCED][r.below(4) as usize];
            node.w32(port_reg(p, off), r.value() as u32);
        }
        _ => {
            let off = (r.below(u64::from(map::PORT_SEND_RING) / 4) * 4) as u32;
            node.w32(port_reg(p, off), r.next() as u32);
        }
    }
}

/// A descriptor in the next send-ring slot, posted: random bytes, or a
/// well-formed one with random fields.
fn post_descriptor(b: &mut Bench, r: &mut Rng, n: usize, p: usize) {
    let mut raw = [0u8; DESC_SIZE as usize];
    if r.below(4) == 0 {
        for x in raw.iter_mut() {
            *x = r.next() as u8;
        }
    } else {
        let kinds = [
            DescKind::Send,
            DescKind::Provide,
            DescKind::Put,
            DescKind::Get,
            DescKind::Resume,
            DescKind::Alarm,
            DescKind::Multicast,
        ];
        let d = Descriptor {
            kind: kinds[r.below(kinds.len() as u64) as usize],
            priority: if r.below(2) == 0 { Priority::Low } else { Priority::High },
            size_class: r.below(40) as u8,
            target_port: r.below(10) as u8,
            target_node: r.below(5) as u16,
            local: if r.below(2) == 0 { VBASE + r.below(HOST as u64) } else { r.value() },
            len: r.value() as u32,
            remote: r.value(),
            tag: r.next(),
        };
        d.encode(&mut raw);
        if r.below(8) == 0 {
            raw[r.below(DESC_SIZE as u64) as usize] = r.next() as u8;
        }
    }
    b.post_raw(n, p, &raw);
}

/// A random entry of port `p`'s page table (the privileged side's, but
/// the MCP must survive any content).
fn poke_page_table(b: &mut Bench, r: &mut Rng, n: usize, p: usize) {
    let vpn = VBASE / PAGE_SIZE + r.below(HOST as u64 / PAGE_SIZE);
    let e = match r.below(3) {
        0 => r.next(),
        1 => 0,
        _ => {
            let page = if r.below(2) == 0 { r.below(HOST as u64 / PAGE_SIZE) } else { r.value() };
            nic_abi::page_table::pte(page & ((1 << 52) - 1))
        }
    };
    b.set_pte(n, p, vpn, e);
}

/// A packet onto node `dst`'s wire: random bytes, or a header with
/// random fields; either way with a good CRC.
fn forge_packet(b: &mut Bench, r: &mut Rng, dst: usize) {
    let payload = match r.below(3) {
        0 => 0,
        1 => r.below(64) as usize,
        _ => r.below(MAX_MTU_BYTES + 64) as usize,
    };
    let mut pkt = vec![0u8; HEADER_LEN + payload];
    for x in pkt.iter_mut() {
        *x = r.next() as u8;
    }
    if r.below(8) != 0 {
        // Mostly headers that parse, so the machines behind the parser
        // see them: a known type and flags, ports in range, sequence
        // numbers near the streams', an offset inside the message.
        pkt[0] = if r.below(16) == 0 { r.below(12) } else { 1 + r.below(10) } as u8;
        pkt[1] = r.next() as u8 & nic_abi::packet::Flags::all().bits();
        pkt[2] = r.below(2) as u8;
        pkt[3] = r.below(8) as u8;
        pkt[4..6].copy_from_slice(&(r.below(4) as u16).to_le_bytes());
        pkt[6..8].copy_from_slice(&(dst as u16).to_le_bytes());
        pkt[8] = FORGED_PORTS[r.below(FORGED_PORTS.len() as u64) as usize];
        pkt[9] = FORGED_PORTS[r.below(FORGED_PORTS.len() as u64) as usize];
        pkt[10] = r.below(24) as u8;
        let near = |r: &mut Rng| if r.below(2) == 0 { r.below(8) as u32 } else { r.value() as u32 };
        let (seq, ack) = (near(r), near(r));
        let offset = if r.below(2) == 0 { 0 } else { r.below(70_000) as u32 };
        let msg_len = if r.below(4) != 0 {
            offset + payload as u32 + r.below(5000) as u32
        } else {
            r.value() as u32
        };
        for (f, v) in [(field::SEQ, seq), (field::ACK, ack), (20, msg_len), (field::OFFSET, offset)]
        {
            pkt[f..f + 4].copy_from_slice(&v.to_le_bytes());
        }
        if r.below(8) != 0 {
            pkt[28..30].copy_from_slice(&(payload as u16).to_le_bytes());
        }
        if r.below(2) == 0 {
            pkt[32..40].copy_from_slice(&(VBASE + r.below(HOST as u64)).to_le_bytes());
        }
    }
    pkt[field::CRC..field::CRC + 4].fill(0);
    let crc = crc32fast::hash(&pkt);
    pkt[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    b.nodes[dst].inbox.push_back(pkt);
}

const MAX_MTU_BYTES: u64 = nic_abi::MAX_MTU as u64;

/// `steps` random actions, a round of every NIC after each; then the
/// victims' send. The NICs run go-back-N, or selective repeat. Returns
/// what was done.
fn storm(seed: u64, steps: u64, selective: bool) -> Tally {
    let mode = if selective { regs::RELIABILITY_SELECTIVE } else { regs::RELIABILITY_GO_BACK_N };
    let mut b = Bench::with(3, |node| node.w32(reg(regs::RELIABILITY), mode));
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut t = Tally::default();
    let mut evqs = Vec::new();
    for &(n, p) in &ATTACKERS {
        b.open(n, p);
        evqs.push(b.nodes[n].r64(evq_bus(p)));
        b.alloc(n, p, 64 * 1024);
    }
    for step in 0..steps {
        let a = r.below(ATTACKERS.len() as u64) as usize;
        let (n, p) = ATTACKERS[a];
        match r.below(10) {
            0..=2 => {
                poke_window(&mut b, &mut r, n, p, evqs[a]);
                t.window_writes += 1;
            }
            3..=5 => {
                post_descriptor(&mut b, &mut r, n, p);
                t.descriptors += 1;
            }
            6 => {
                poke_page_table(&mut b, &mut r, n, p);
                t.ptes += 1;
            }
            _ => {
                let dst = r.below(3) as usize;
                // Bounded: the wire holds what the NIC has not taken.
                if b.nodes[dst].inbox.len() < 64 {
                    forge_packet(&mut b, &mut r, dst);
                    t.packets += 1;
                }
            }
        }
        b.round();
        if step % 64 == 0 {
            // The attacker's host reads its events now and then (and so
            // moves EVQ_CONSUMED on, sometimes past what it was given).
            for &(n, p) in &ATTACKERS {
                let _ = b.nodes[n].r32(port_reg(p, EVQ_PRODUCED));
            }
        }
    }
    // The attacker goes away: its ports close.
    for &(n, p) in &ATTACKERS {
        b.nodes[n].w32(port_reg(p, STATE), STATE_CLOSED);
    }
    b.run(200);
    for n in 0..3 {
        t.refused += b.stat(n, Stat::Errors);
        t.bad_headers += b.stat(n, Stat::BadHeaders);
        t.received += b.stat(n, Stat::PacketsReceived);
    }
    // Two ports nobody touched: a good transfer, every byte checked.
    transfer(&mut b, &[1, 100, 5000, 20_000], Priority::Low);
    t
}

#[test]
fn random_port_window_descriptor_and_wire_input_leaves_other_ports_working() {
    let steps = env_u64("MCP_FUZZ_STEPS", FUZZ_STEPS);
    let seed = env_u64("MCP_FUZZ_SEED", 1);
    for selective in [false, true] {
        let start = std::time::Instant::now();
        let t = storm(seed, steps, selective);
        let mode = if selective { "selective repeat" } else { "go-back-N" };
        println!(
        "fuzz ({mode}): seed {seed}, {steps} steps in {:.1} s: {} window writes, {} descriptors, \
         {} page-table entries, {} packets ({} taken by the NICs, {} bad headers), \
         {} refused descriptors; then a good transfer completed",
        start.elapsed().as_secs_f64(),
        t.window_writes,
        t.descriptors,
        t.ptes,
        t.packets,
        t.received,
        t.bad_headers,
        t.refused
    );
        assert!(t.window_writes > 0 && t.descriptors > 0 && t.ptes > 0 && t.packets > 0);
    }
}
