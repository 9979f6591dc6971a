//! The collectives report's LogP-style model of the barrier: a round's
//! cost, measured on the simulator, times the algorithm's rounds.

use std::fmt::Write as _;

use super::md::{e_pct, us};
use super::run::{Kind, Results};
use super::{Plan, BARRIER_ALGS, MODEL_EXTRA_NODES, PROFILES, SCHEMES};

/// The rounds of a barrier algorithm at `n` members: dissemination
/// ceil(log2 n); pairwise log2 p, plus 2 when n is not a power of two (p
/// the largest power of two up to n); tree 2 ceil(log2 n).
pub fn rounds(alg: &str, n: u16) -> u32 {
    let n = n.max(2) as u32;
    let ceil = n.next_power_of_two().trailing_zeros();
    let p = 1u32 << (31 - n.leading_zeros());
    match alg {
        "dissemination" => ceil,
        "pairwise" => p.trailing_zeros() + if n == p { 0 } else { 2 },
        "tree" => 2 * ceil,
        _ => 0,
    }
}

/// The model's cost of a round of `scheme` on `profile`: the time of a
/// 2-member dissemination barrier (one round: each member sends one
/// message and waits for the other's).
fn round_us(r: &Results, profile: &str, scheme: &str) -> Option<f64> {
    r.us(profile, Kind::Barrier, scheme, "dissemination", 2, 0)
}

fn model_us(r: &Results, profile: &str, scheme: &str, alg: &str, n: u16) -> Option<f64> {
    round_us(r, profile, scheme).map(|t| t * rounds(alg, n) as f64)
}

/// The model section: the rounds, and per profile model against simulation.
pub fn section(md: &mut String, plan: &Plan, r: &Results) {
    let mut sizes = plan.barrier_sizes.clone();
    sizes.push(MODEL_EXTRA_NODES);
    sizes.sort_unstable();
    sizes.dedup();
    let _ = writeln!(md, "## A LogP-style model of the barrier\n");
    let _ = writeln!(
        md,
        "The model: **time per barrier = R(scheme) x rounds(algorithm, n)**. R is one \
         round's cost, measured on the simulator itself: the time per barrier of a 2-member \
         dissemination barrier of the scheme on the profile (one round: each member sends \
         one message and waits for the other's). The rounds: dissemination ceil(log2 n); \
         pairwise exchange log2 p, plus 2 when n is not a power of two (p the largest power \
         of two up to n: the pre and post steps); tree 2 ceil(log2 n) (gather up the \
         binomial tree, release down it). Nothing else: a round costs the same at every n \
         and in every algorithm, with no term for the clos's extra hops, for a member \
         handling several messages in a round, for a one-way step (the tree's, the pairwise \
         pre and post steps) costing less than an exchange, or for the loop's overlap of one \
         barrier with the next. The tree's formula counts ceil(log2 n) levels, but a \
         binomial tree of n members is floor(log2 n) deep (n = 12: 3 levels, not 4), so \
         where n is not a power of two the model counts two rounds too many. \
         n = {MODEL_EXTRA_NODES} (not a power of two) is run for the model alone. Each \
         cell is simulated / model (us) and the difference (simulated / model - 1).\n"
    );
    let _ = write!(md, "| algorithm |");
    for n in &sizes {
        let _ = write!(md, " n={n} |");
    }
    let _ = writeln!(md, "\n|---|{}", "---:|".repeat(sizes.len()));
    for alg in BARRIER_ALGS {
        let _ = write!(md, "| rounds, {alg} |");
        for &n in &sizes {
            let _ = write!(md, " {} |", rounds(alg, n));
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
    for profile in PROFILES {
        let _ = writeln!(md, "### `{profile}`\n");
        let _ = write!(md, "Round cost R:");
        for scheme in SCHEMES {
            let _ = write!(md, " {scheme} {} us;", us(round_us(r, profile, scheme)));
        }
        let _ = writeln!(md, "\n");
        let _ = write!(md, "| scheme | algorithm |");
        for n in &sizes {
            let _ = write!(md, " n={n} |");
        }
        let _ = writeln!(md, "\n|---|---|{}", "---:|".repeat(sizes.len()));
        let mut worst: (f64, String) = (0.0, String::new());
        for scheme in SCHEMES {
            for alg in BARRIER_ALGS {
                let _ = write!(md, "| {scheme} | {alg} |");
                for &n in &sizes {
                    let sim = r.us(profile, Kind::Barrier, scheme, alg, n, 0);
                    let m = model_us(r, profile, scheme, alg, n);
                    match (sim, m) {
                        (Some(s), Some(m)) => {
                            let d = e_pct(s, m);
                            if d.abs() > worst.0.abs() {
                                worst = (d, format!("{scheme} {alg} at n={n}"));
                            }
                            let _ = write!(md, " {s:.1} / {m:.1} ({d:+.1}%) |");
                        }
                        _ => {
                            let _ = write!(md, " - |");
                        }
                    }
                }
                let _ = writeln!(md);
            }
        }
        let _ =
            writeln!(md, "\nLargest difference from the model: {:+.1}% ({}).\n", worst.0, worst.1);
    }
}
