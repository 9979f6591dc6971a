//! Readings of a NIC's instruction counters from its guest RAM file, and
//! the arithmetic that turns two readings into a window's counts and a
//! workload's figures. Pure functions but `read`.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use host_driver::nic_abi::stats::{stat_offset, Stat};

use super::image::{file_offset, Field, Image};
use super::report::{CauseFigures, KindCounts, KindFigures, NicCounts, WorkSum, WorkValue};

/// One NIC's counters at one moment: `POLL_STATS` (idle passes, then busy
/// ones: count, instruction sum, min, max) and the bytes of `POLL_WORK`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reading {
    pub stats: [[u64; 4]; 2],
    /// `POLL_KINDS`: passes by kind (quiet, completions, whole), idle
    /// then busy: count, instruction sum (zero for an older image).
    pub kinds: [[[u64; 2]; 2]; 3],
    /// `POLL_CAUSES`: passes by kind and cause ([`cause_name`]), idle
    /// then busy: count, instruction sum (empty for an older image).
    pub causes: Vec<[[u64; 2]; 2]>,
    pub work: Vec<u8>,
    /// The NIC's own counters of the control packets it sent (SRAM
    /// `STATS`): acks, nacks, polls, each a packet of its own (an ack a
    /// data packet carries is not one).
    pub controls: [u64; 3],
}

/// The counters [`Reading::controls`] holds, in order.
const CONTROLS: [Stat; 3] = [Stat::AcksSent, Stat::NacksSent, Stat::PollsSent];

/// Entries of `POLL_CAUSES`.
pub const CAUSES: usize = 256;

/// Read node's counters from its RAM file `sram`.
pub fn read(sram: &Path, img: &Image) -> crate::Result<Reading> {
    let f = std::fs::File::open(sram).map_err(|e| format!("{}: {e}", sram.display()))?;
    let mut raw = [0u8; 64];
    f.read_exact_at(&mut raw, file_offset(img.poll_stats)?)
        .map_err(|e| format!("{}: reading POLL_STATS: {e}", sram.display()))?;
    let mut stats = [[0u64; 4]; 2];
    for (i, w) in raw.chunks_exact(8).enumerate() {
        stats[i / 4][i % 4] = u64::from_le_bytes(w.try_into().expect("8 bytes"));
    }
    let mut work = vec![0u8; img.work_size as usize];
    f.read_exact_at(&mut work, file_offset(img.poll_work)?)
        .map_err(|e| format!("{}: reading POLL_WORK: {e}", sram.display()))?;
    let mut kinds = [[[0u64; 2]; 2]; 3];
    if let Some(at) = img.poll_kinds {
        let mut raw = [0u8; 96];
        f.read_exact_at(&mut raw, file_offset(at)?)
            .map_err(|e| format!("{}: reading POLL_KINDS: {e}", sram.display()))?;
        for (i, w) in raw.chunks_exact(8).enumerate() {
            kinds[i / 4][(i / 2) % 2][i % 2] = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        }
    }
    let mut causes = Vec::new();
    if let Some(at) = img.poll_causes {
        let mut raw = vec![0u8; CAUSES * 32];
        f.read_exact_at(&mut raw, file_offset(at)?)
            .map_err(|e| format!("{}: reading POLL_CAUSES: {e}", sram.display()))?;
        let word =
            |i: usize| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        causes = (0..CAUSES)
            .map(|c| {
                let at = 4 * c;
                [[word(at), word(at + 1)], [word(at + 2), word(at + 3)]]
            })
            .collect();
    }
    let mut controls = [0u64; 3];
    for (c, s) in controls.iter_mut().zip(CONTROLS) {
        let mut w = [0u8; 8];
        // (SRAM offset k is offset k of the RAM file.)
        f.read_exact_at(&mut w, u64::from(stat_offset(s)))
            .map_err(|e| format!("{}: reading the NIC's counters: {e}", sram.display()))?;
        *c = u64::from_le_bytes(w);
    }
    Ok(Reading { stats, kinds, causes, work, controls })
}

/// What entry `c` of `POLL_CAUSES` counts: the kind of pass, then the
/// news that ran it (`mcp::Mcp::pass_cause`'s bits: the engines' host-DMA
/// and send-DMA completions, arrivals, host writes, ports opened or
/// closed, a timer due, work the last pass left), e.g. `whole: rx left`.
pub fn cause_name(c: usize) -> String {
    const BITS: [&str; 7] = ["hdma", "txdma", "rx", "host", "ports", "timer", "left"];
    // Below 128, bit 6 (work left, which only a whole pass has) marks a
    // quiet pass that took or left completions.
    let (kind, c) = match (c >= 128, c & 127) {
        (true, _) => ("whole", c),
        (false, 0) => return "quiet".into(),
        (false, b) if b & 64 != 0 => ("quiet", b & 63),
        (false, b) => ("completions", b),
    };
    let bits: Vec<&str> =
        BITS.iter().enumerate().filter(|(i, _)| c & (1 << i) != 0).map(|(_, b)| *b).collect();
    if bits.is_empty() {
        format!("{kind}: nothing")
    } else {
        format!("{kind}: {}", bits.join(" "))
    }
}

/// A little-endian unsigned integer of `width` bytes at `at` (0 past the end).
fn uint(bytes: &[u8], at: u64, width: u64) -> u64 {
    let (at, width) = (at as usize, width.min(8) as usize);
    bytes
        .get(at..at + width)
        .map_or(0, |b| b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

/// `after - before` in an integer of `width` bytes (a field that wrapped
/// once in between still counts right).
pub fn wrapping_delta(before: u64, after: u64, width: u64) -> u64 {
    let d = after.wrapping_sub(before);
    if width >= 8 {
        d
    } else {
        d & ((1u64 << (8 * width)) - 1)
    }
}

/// Each `mcp::Work` field's growth from `before` to `after`.
pub fn work_delta(fields: &[Field], before: &[u8], after: &[u8]) -> WorkSum {
    let mut out = BTreeMap::new();
    for f in fields {
        let one = |i: u64| {
            let at = f.offset + i * f.width;
            wrapping_delta(uint(before, at, f.width), uint(after, at, f.width), f.width)
        };
        let v = match f.count {
            None => WorkValue::Count(one(0)),
            Some(n) => WorkValue::Counts((0..n).map(one).collect()),
        };
        out.insert(f.name.clone(), v);
    }
    out
}

/// One NIC's counts over a window (`packets`: the data packets it sent
/// or received in it, from the workload's definition).
pub fn window(node: u16, fields: &[Field], a: &Reading, b: &Reading, packets: u64) -> NicCounts {
    let d = |k: usize, j: usize| b.stats[k][j].wrapping_sub(a.stats[k][j]);
    let (idle_passes, idle_insns, busy_passes, busy_insns) = (d(0, 0), d(0, 1), d(1, 0), d(1, 1));
    NicCounts {
        node,
        passes: idle_passes + busy_passes,
        busy_passes,
        instructions_busy: busy_insns,
        instructions_all: busy_insns + idle_insns,
        packets,
        kinds: PASS_KINDS
            .iter()
            .enumerate()
            .map(|(k, name)| (name.to_string(), KindCounts::between(&a.kinds[k], &b.kinds[k])))
            .collect(),
        causes: a
            .causes
            .iter()
            .zip(&b.causes)
            .enumerate()
            .filter_map(|(c, (x, y))| {
                let k = KindCounts::between(x, y);
                (k.idle_passes + k.busy_passes > 0).then(|| (cause_name(c), k))
            })
            .collect(),
        work: work_delta(fields, &a.work, &b.work),
        acks_sent: b.controls[0].wrapping_sub(a.controls[0]),
        nacks_sent: b.controls[1].wrapping_sub(a.controls[1]),
        polls_sent: b.controls[2].wrapping_sub(a.controls[2]),
    }
}

/// Passes by kind and cause over all NICs, the costliest (instructions
/// per message) first. Empty when the image does not count causes.
pub fn causes(nics: &[NicCounts], messages: u64) -> Vec<CauseFigures> {
    let mut sum: BTreeMap<&str, KindCounts> = BTreeMap::new();
    for n in nics {
        for (name, x) in &n.causes {
            sum.entry(name).or_default().add(x);
        }
    }
    let mut out: Vec<CauseFigures> = sum
        .into_iter()
        .map(|(name, c)| {
            let passes = c.idle_passes + c.busy_passes;
            let insns = c.idle_instructions + c.busy_instructions;
            CauseFigures {
                cause: name.to_string(),
                passes_per_message: per(passes, messages),
                instructions_per_pass: per(insns, passes),
                instructions_per_message: per(insns, messages),
                idle_passes_per_message: per(c.idle_passes, messages),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.instructions_per_message
            .total_cmp(&a.instructions_per_message)
            .then(a.cause.cmp(&b.cause))
    });
    out
}

/// The kinds of pass (`mcp::PassKind`, in its order).
pub const PASS_KINDS: [&str; 3] = ["quiet", "completions", "whole"];

/// Each kind of pass over all NICs: (kind, passes per message, mean
/// instructions of a pass, of which idle: passes per message, mean
/// instructions). Empty when the image does not count kinds.
pub fn kinds(nics: &[NicCounts], messages: u64) -> Vec<KindFigures> {
    PASS_KINDS
        .iter()
        .filter_map(|&k| {
            let mut c = KindCounts::default();
            for n in nics {
                c.add(n.kinds.get(k)?);
            }
            let passes = c.idle_passes + c.busy_passes;
            Some(KindFigures {
                kind: k.to_string(),
                passes_per_message: per(passes, messages),
                instructions_per_pass: per(c.idle_instructions + c.busy_instructions, passes),
                idle_passes_per_message: per(c.idle_passes, messages),
                instructions_per_idle_pass: per(c.idle_instructions, c.idle_passes),
            })
        })
        .collect()
}

/// `x / n`, 0 when n is 0.
pub fn per(x: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        x as f64 / n as f64
    }
}

/// Instructions at a NIC clock: microseconds for `insns` instructions at
/// `cpi` cycles each and `hz` cycles a second.
pub fn micros(insns: f64, cpi: f64, hz: f64) -> f64 {
    insns * cpi / hz * 1e6
}

/// The figures of a window over all NICs: (busy per message, all per
/// message, busy per packet per NIC, idle pass).
pub fn figures(nics: &[NicCounts], messages: u64) -> (f64, f64, Vec<f64>, f64) {
    let busy: u64 = nics.iter().map(|n| n.instructions_busy).sum();
    let all: u64 = nics.iter().map(|n| n.instructions_all).sum();
    let idle_passes: u64 = nics.iter().map(|n| n.passes - n.busy_passes).sum();
    let per_packet = nics.iter().map(|n| per(n.instructions_busy, n.packets)).collect();
    (per(busy, messages), per(all, messages), per_packet, per(all - busy, idle_passes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, offset: u64, width: u64, count: Option<u64>) -> Field {
        Field { name: name.into(), offset, width, count }
    }

    fn reading(stats: [[u64; 4]; 2], work: Vec<u8>) -> Reading {
        Reading { stats, kinds: [[[0; 2]; 2]; 3], causes: Vec::new(), work, controls: [0; 3] }
    }

    #[test]
    fn passes_are_counted_by_kind_over_all_nics() {
        let a = reading([[0; 4]; 2], vec![]);
        let mut b = a.clone();
        // Node 0: 20 quiet passes of 90; 10 completions passes, 4 of them
        // idle (400 each) and 6 busy (600 each); 5 whole busy passes.
        b.kinds[0][0] = [20, 1800];
        b.kinds[1] = [[4, 1600], [6, 3600]];
        b.kinds[2][1] = [5, 10_000];
        let mut c = a.clone();
        c.kinds[0][0] = [30, 3000];
        let nics = [window(0, &[], &a, &b, 0), window(1, &[], &a, &c, 0)];
        assert_eq!(nics[0].kinds["completions"].busy_instructions, 3600);
        let k = kinds(&nics, 10);
        let names: Vec<&str> = k.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(names, ["quiet", "completions", "whole"]);
        assert_eq!((k[0].passes_per_message, k[0].instructions_per_pass), (5.0, 96.0));
        assert_eq!((k[1].passes_per_message, k[1].instructions_per_pass), (1.0, 520.0));
        assert_eq!((k[1].idle_passes_per_message, k[1].instructions_per_idle_pass), (0.4, 400.0));
        assert_eq!((k[2].idle_passes_per_message, k[2].instructions_per_idle_pass), (0.0, 0.0));
    }

    #[test]
    fn causes_are_named_by_kind_and_news() {
        assert_eq!(cause_name(0), "quiet");
        assert_eq!(cause_name(1), "completions: hdma");
        assert_eq!(cause_name(3), "completions: hdma txdma");
        assert_eq!(cause_name(128 | 4 | 64), "whole: rx left");
        assert_eq!(cause_name(128 | 8 | 32), "whole: host timer");
        assert_eq!(cause_name(128), "whole: nothing");
        assert_eq!(cause_name(0), "quiet");
        assert_eq!(cause_name(64 | 1 | 2), "quiet: hdma txdma");
        assert_eq!(cause_name(2), "completions: txdma");
    }

    #[test]
    fn passes_are_counted_by_cause_over_all_nics_costliest_first() {
        let mut a = reading([[0; 4]; 2], vec![]);
        a.causes = vec![[[0; 2]; 2]; CAUSES];
        a.causes[128 | 4] = [[1, 500], [2, 4000]];
        let mut b = a.clone();
        // Node 0: 10 more busy whole passes on arrivals (2000 each), 4
        // idle whole passes on work left (600 each).
        b.causes[128 | 4][1] = [12, 24_000];
        b.causes[128 | 64][0] = [4, 2400];
        // Node 1: 10 completions passes (500 each), 5 of them idle.
        let mut c = a.clone();
        c.causes[1] = [[5, 2500], [5, 2500]];
        let nics = [window(0, &[], &a, &b, 0), window(1, &[], &a, &c, 0)];
        assert_eq!(nics[0].causes.len(), 2, "only the causes seen in the window");
        assert_eq!(nics[0].causes["whole: rx"].busy_instructions, 20_000);
        let k = causes(&nics, 10);
        let names: Vec<&str> = k.iter().map(|f| f.cause.as_str()).collect();
        assert_eq!(names, ["whole: rx", "completions: hdma", "whole: left"]);
        assert_eq!((k[0].passes_per_message, k[0].instructions_per_pass), (1.0, 2000.0));
        assert_eq!(k[0].instructions_per_message, 2000.0);
        assert_eq!((k[1].passes_per_message, k[1].idle_passes_per_message), (1.0, 0.5));
        assert_eq!((k[2].instructions_per_pass, k[2].idle_passes_per_message), (600.0, 0.4));
        // An older image counts no causes: none.
        assert!(causes(&[window(0, &[], &reading([[0; 4]; 2], vec![]), &b, 0)], 10).is_empty());
    }

    #[test]
    fn a_window_is_the_later_reading_less_the_earlier() {
        let a = reading([[10, 1000, 90, 110], [5, 50_000, 9000, 11_000]], vec![]);
        let b = reading([[30, 3000, 90, 110], [15, 150_000, 9000, 11_000]], vec![]);
        let w = window(1, &[], &a, &b, 10);
        assert_eq!(w.node, 1);
        assert_eq!((w.passes, w.busy_passes), (30, 10));
        assert_eq!((w.instructions_busy, w.instructions_all), (100_000, 102_000));
        assert_eq!(w.packets, 10);
    }

    #[test]
    fn work_fields_are_subtracted_in_their_own_width() {
        // u32 `a` at 0, [u16; 2] `b` at 4, u8 `c` at 8.
        let fields = [field("a", 0, 4, None), field("b", 4, 2, Some(2)), field("c", 8, 1, None)];
        let before = [5, 0, 0, 0, 0xfe, 0xff, 1, 0, 250];
        let after = [7, 1, 0, 0, 3, 0, 4, 0, 4];
        let d = work_delta(&fields, &before, &after);
        assert_eq!(d["a"], WorkValue::Count(256 + 2));
        // 0xfffe -> 3 wrapped: 5 more; 1 -> 4: 3 more.
        assert_eq!(d["b"], WorkValue::Counts(vec![5, 3]));
        assert_eq!(d["c"], WorkValue::Count(10));
    }

    #[test]
    fn per_message_and_per_packet_divide_the_window() {
        let mut a = window(0, &[], &Reading::default(), &Reading::default(), 0);
        a.instructions_busy = 3000;
        a.instructions_all = 4000;
        a.passes = 30;
        a.busy_passes = 20;
        a.packets = 100;
        let mut b = a.clone();
        b.packets = 0;
        let (busy, all, pp, idle) = figures(&[a, b], 100);
        assert_eq!((busy, all), (60.0, 80.0));
        assert_eq!(pp, vec![30.0, 0.0], "a NIC with no packets has no per-packet figure");
        assert_eq!(idle, 100.0, "2000 idle instructions over 20 idle passes");
        assert_eq!(figures(&[], 0).0, 0.0);
    }

    #[test]
    fn instructions_convert_to_microseconds_at_the_clock_and_cpi() {
        // 1,330 instructions at 133 MHz and 1 cycle each: 10 us.
        assert!((micros(1330.0, 1.0, 133e6) - 10.0).abs() < 1e-9);
        assert!((micros(1330.0, 1.5, 133e6) - 15.0).abs() < 1e-9);
    }
}
