//! The collectives report's allreduce section: time per allreduce
//! against the vector size at 16 nodes, how each scheme cuts a vector,
//! and under `modern`'s table the acceptance figure (the 1 MiB
//! allreduce, best NIC-based against best host-based algorithm).

use std::fmt::Write as _;
use std::path::Path;

use host_driver::nic_abi::collective::{self as coll, Dtype, Kind as CollKind};
use nic_emu::Profile;

use super::md::table;
use super::run::{fmt_bytes, Kind, Results};
use super::svg::{self, Axes};
use super::{
    Plan, ACCEPT_ELEMENTS, ACCEPT_SPEEDUP, ALLREDUCE_ALGS, ALLREDUCE_NODES, PROFILES, SCHEMES,
    SUMMARY_PROFILE,
};

fn bytes_label(v: f64) -> String {
    fmt_bytes(v.round() as u64)
}

fn us_label(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn size(elements: u32) -> String {
    fmt_bytes(8 * elements as u64)
}

/// The allreduce section.
pub fn section(md: &mut String, plan: &Plan, r: &Results, dir: &Path) -> crate::Result<()> {
    let elems = &plan.allreduce_elements;
    let _ = writeln!(md, "## Allreduce time against vector size ({ALLREDUCE_NODES} nodes)\n");
    let _ = writeln!(
        md,
        "Time per allreduce (us) in a loop: a sum of f64 vectors of {} per member, \
         {ALLREDUCE_NODES} members on one switch, for each scheme x algorithm. {}\n",
        elems.iter().map(|&e| size(e)).collect::<Vec<_>>().join(", "),
        loops(plan)
    );
    chunking(md)?;
    let cols: Vec<(String, u16, u32)> =
        elems.iter().map(|&e| (size(e), ALLREDUCE_NODES, e)).collect();
    let pts: Vec<(u16, u32)> = elems.iter().map(|&e| (ALLREDUCE_NODES, e)).collect();
    for profile in PROFILES {
        let file = format!("allreduce-{profile}.svg");
        let axes = Axes {
            title: format!(
                "{profile}: time per allreduce vs vector size, {ALLREDUCE_NODES} nodes (solid: nic, \
                 dashed: host, dotted: assisted)"
            ),
            x_desc: "vector size per member, f64 sum (log scale)",
            x_fmt: bytes_label,
            y_desc: "time per allreduce (µs, log scale)",
            y_log: Some(us_label),
        };
        svg::schemes(&dir.join(&file), &axes, r, profile, Kind::Allreduce, &pts, |_, e| {
            8.0 * e as f64
        })?;
        let _ = writeln!(md, "### `{profile}`\n\n![{profile}: allreduce]({file})\n");
        table(md, r, profile, Kind::Allreduce, &ALLREDUCE_ALGS, &cols);
        if profile == SUMMARY_PROFILE {
            let _ = writeln!(md, "{}\n", acceptance(r));
        }
        wins(md, r, profile, elems);
    }
    Ok(())
}

/// The loop lengths of the sweep, in words.
fn loops(plan: &Plan) -> String {
    let count = |e: u32| plan.count(Kind::Allreduce, ALLREDUCE_NODES, e);
    let mut shorter: Vec<(u64, Vec<u32>)> = Vec::new();
    for &e in plan.allreduce_elements.iter().filter(|&&e| count(e) < plan.allreduce_count) {
        match shorter.last_mut() {
            Some((c, v)) if *c == count(e) => v.push(e),
            _ => shorter.push((count(e), vec![e])),
        }
    }
    let mut s = format!("Loops of {} allreduces", plan.allreduce_count);
    if !shorter.is_empty() {
        let parts: Vec<String> = shorter
            .iter()
            .map(|(c, v)| {
                let v: Vec<String> = v.iter().map(|&e| size(e)).collect();
                format!("{c} of {}", v.join(", "))
            })
            .collect();
        let _ = write!(
            s,
            ", shorter for large vectors so that the report runs in minutes (a loop of {} per \
             member, at least {} allreduces): {}",
            fmt_bytes(plan.allreduce_loop_bytes),
            plan.min_allreduce_count,
            parts.join("; ")
        );
    }
    s.push('.');
    if !plan.allreduce_elements.contains(&ACCEPT_ELEMENTS) {
        let _ = write!(
            s,
            " The acceptance figure's {} allreduces on `{SUMMARY_PROFILE}` (below its table), \
             beyond this plan's sweep, run {} a loop.",
            size(ACCEPT_ELEMENTS),
            count(ACCEPT_ELEMENTS)
        );
    }
    s
}

/// `n` with a comma between thousands (4,095).
fn thousands(n: u32) -> String {
    let d = n.to_string();
    let mut s = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// How the NICs and the hosts cut a vector, per profile.
fn chunking(md: &mut String) -> crate::Result<()> {
    let mut per = Vec::new();
    for profile in PROFILES {
        let p = Profile::load(profile).map_err(|e| e.to_string())?;
        let (mtu, sram) = (p.nic.mtu, p.nic.sram_bytes);
        let chunk = coll::chunk_bytes(mtu, sram, 8);
        let max = coll::max_len(CollKind::Allreduce, Dtype::F64, mtu, sram);
        per.push(format!(
            "`{profile}` ({} of SRAM) {} chunks, {} of them in 1 MiB, vectors of up to {}",
            fmt_bytes(sram as u64),
            fmt_bytes(chunk as u64),
            thousands(coll::chunks(1 << 20, chunk)),
            fmt_bytes(max as u64)
        ));
    }
    let window = (2 * ALLREDUCE_NODES as u32).min(host_driver::nic_abi::map::COLL_CHUNKS);
    let _ = writeln!(
        md,
        "How the schemes cut a vector. The NICs cut it into chunks of one packet's payload \
         (`collective::chunk_bytes`): the MTU's whole elements, at most {} on a NIC with no \
         SRAM past the 1 MiB SRAM map and at most {} on one with SRAM past it (at least \
         512 KiB, where the offload then keeps its chunk slots and vectors: \
         `map::coll_ext_len`). A vector has at \
         most {} chunks (`collective::max_len`). Here: {}. Each member works through a window \
         of its vector's chunks, at most 2n of them for n members and never more than {} \
         ({window} at {ALLREDUCE_NODES} members): it reads a chunk from host memory, steps it \
         and writes its result back while the chunks behind it are still being read or \
         stepped, and the window slides on as its first chunks finish, so the chunks of a \
         long vector are pipelined. The host scheme sends the whole vector in one message \
         per step (under the ring, a ring's segment of it: 1/{ALLREDUCE_NODES} of the \
         vector), and combines on the host.\n",
        fmt_bytes(coll::CHUNK_SMALL as u64),
        fmt_bytes(coll::CHUNK_MAX as u64),
        thousands(coll::MAX_VECTOR_CHUNKS),
        per.join("; "),
        host_driver::nic_abi::map::COLL_CHUNKS
    );
    Ok(())
}

/// The acceptance figure, one line: the 1 MiB allreduce on `modern`,
/// best NIC-based against best host-based algorithm, the most the NIC
/// scheme could gain (no schedule of a member's NIC work ends before
/// that work is done: best host / NIC CPU per member), and whether every
/// member's result was the reference's in every loop of that size.
pub fn acceptance(r: &Results) -> String {
    let (p, n, e) = (SUMMARY_PROFILE, ALLREDUCE_NODES, ACCEPT_ELEMENTS);
    let nic = r.best(p, Kind::Allreduce, "nic", n, e);
    let host = r.best(p, Kind::Allreduce, "host", n, e);
    let best = |b: Option<(&str, f64)>| {
        b.map_or("none ran clean".into(), |(a, t)| format!("{t:.1} us ({a})"))
    };
    let speed = match (nic, host) {
        (Some((_, a)), Some((_, b))) => format!(
            "speed-up {:.2}x (best host / best NIC; target at least {ACCEPT_SPEEDUP}x: {})",
            b / a,
            if b / a >= ACCEPT_SPEEDUP { "met" } else { "not met" }
        ),
        _ => format!("no speed-up (target at least {ACCEPT_SPEEDUP}x: not measured)"),
    };
    let (mut loops, mut bad, mut missing) = (0, Vec::new(), 0);
    for scheme in SCHEMES {
        for alg in
            ALLREDUCE_ALGS.into_iter().filter(|a| super::runs(scheme, a, Kind::Allreduce, n, e))
        {
            match r.get(p, Kind::Allreduce, scheme, alg, n, e) {
                Some(pt) if pt.results_ok == Some(true) && pt.results_wrong == 0 => loops += 1,
                Some(pt) => bad.push(format!("{scheme} {alg}: {} wrong", pt.results_wrong)),
                None => missing += 1,
            }
        }
    }
    let results = if bad.is_empty() && missing == 0 {
        format!(
            "every member's result bit-identical to the reference in all {loops} loops of this \
             size (`results_ok` true, `results_wrong` 0)"
        )
    } else if bad.is_empty() {
        format!("every member's result bit-identical to the reference in the {loops} loops run")
    } else {
        format!("results NOT all the reference's: {}", bad.join(", "))
    };
    let bound = match (nic, host) {
        (Some((a, _)), Some((_, h))) => {
            r.get(p, Kind::Allreduce, "nic", a, n, e).and_then(|pt| pt.nic_cpu_us).map(|cpu| {
                format!(
                    "; the NIC-based {a} keeps each member's NIC CPU busy {cpu:.1} us per \
                     allreduce (median member), so it cannot end sooner: a speed-up of at most \
                     {:.2}x on this profile's prices",
                    h / cpu
                )
            })
        }
        _ => None,
    };
    format!(
        "**Acceptance: {} f64 allreduce, {n} members, `{p}`:** best NIC-based {}, best \
         host-based {}: {speed}{}; {results}.",
        size(e),
        best(nic),
        best(host),
        bound.unwrap_or_default()
    )
}

/// Where the NICs win and where the hosts do, one line.
fn wins(md: &mut String, r: &Results, profile: &str, elems: &[u32]) {
    let (mut nic_wins, mut host_wins) = (Vec::new(), Vec::new());
    for &e in elems {
        let nic = r.best(profile, Kind::Allreduce, "nic", ALLREDUCE_NODES, e);
        let host = r.best(profile, Kind::Allreduce, "host", ALLREDUCE_NODES, e);
        if let (Some((_, a)), Some((_, b))) = (nic, host) {
            let cell = format!("{} ({:.2}x)", size(e), b / a);
            if a < b {
                nic_wins.push(cell)
            } else {
                host_wins.push(cell)
            }
        }
    }
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    let _ = writeln!(
        md,
        "Best NIC-based against best host-based (speed-up: best host / best NIC): the NICs \
         are faster at {}; the hosts at {}.\n",
        list(&nic_wins),
        list(&host_wins)
    );
}
