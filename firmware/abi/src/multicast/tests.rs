//! Worked examples of every tree, and the invariants every tree keeps,
//! checked by walking it from the root.

use super::*;
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

/// Every algorithm the invariants are checked on.
fn algorithms() -> Vec<Algorithm> {
    let mut all = Algorithm::FIXED.to_vec();
    all.extend((2..=6).map(|k| Algorithm::KBinomial { k }));
    all
}

/// Each rank with the ranks it sends to, in send order (senders only).
fn sends(alg: Algorithm, g: u16) -> Vec<(u16, Vec<u16>)> {
    (0..g)
        .map(|r| (r, children(alg, g, r).map(|c| c.rank).collect::<Vec<_>>()))
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

/// The depth formula of every algorithm but the walked k-binomial trees.
fn depth_formula(alg: Algorithm, g: u16) -> Option<u16> {
    if g <= 1 {
        return Some(0);
    }
    let log = 15 - g.leading_zeros() as u16;
    match alg {
        Algorithm::Separate => Some(1),
        Algorithm::Serial | Algorithm::KBinomial { k: 2 } => Some(g - 1),
        Algorithm::Binomial | Algorithm::Binary => Some(log),
        Algorithm::KBinomial { .. } => None,
    }
}

/// Walks the whole tree of (alg, g) from the root and checks every
/// invariant; `ranks` picks the ranks whose subtree_ranks are checked.
fn check_tree(alg: Algorithm, g: u16, ranks: impl Iterator<Item = u16>) {
    let n = g as usize;
    let mut parent_of: Vec<Option<u16>> = vec![None; n];
    let mut depth_of = vec![0u16; n];
    let mut arrival = vec![0u16; n];
    let mut size = vec![1u16; n];
    let mut order = vec![0u16];
    let mut i = 0;
    let mut total_sends = 0;
    while i < order.len() {
        let r = order[i];
        i += 1;
        let cs: Vec<Child> = children(alg, g, r).collect();
        assert_eq!(children_computed(alg, g, r) as usize, cs.len());
        for w in cs.windows(2) {
            assert!(w[0].subtree >= w[1].subtree, "{alg} G={g}: {r} not deepest first: {cs:?}");
        }
        let sum: u16 = cs.iter().map(|c| c.subtree).sum();
        assert_eq!(1 + sum, subtree_size(alg, g, r), "{alg} G={g} rank {r}");
        if let Algorithm::KBinomial { k } = alg {
            assert!(cs.len() < k as usize, "{alg} G={g}: {r} has {} children", cs.len());
        }
        for (j, c) in cs.iter().enumerate() {
            assert!(c.rank != 0 && c.rank < g, "{alg} G={g}: {r} sends to {}", c.rank);
            let p = &mut parent_of[c.rank as usize];
            assert!(p.is_none(), "{alg} G={g}: {} receives twice", c.rank);
            *p = Some(r);
            depth_of[c.rank as usize] = depth_of[r as usize] + 1;
            arrival[c.rank as usize] = arrival[r as usize] + j as u16 + 1;
            total_sends += 1;
            order.push(c.rank);
        }
    }
    assert_eq!(total_sends, n.saturating_sub(1), "{alg} G={g}");
    assert_eq!(order.len(), n, "{alg} G={g}");
    for r in 0..g {
        assert_eq!(parent(alg, g, r), parent_of[r as usize], "{alg} G={g} rank {r}");
    }
    // Subtree sizes from the walk, leaves up.
    for &r in order.iter().rev().take(n.saturating_sub(1)) {
        let p = parent_of[r as usize].unwrap() as usize;
        size[p] += size[r as usize];
    }
    for c in (0..g).flat_map(|r| children(alg, g, r)) {
        assert_eq!(c.subtree, size[c.rank as usize], "{alg} G={g} rank {}", c.rank);
    }
    // subtree_ranks: the head first, no repeats, closed under parent, and
    // as many as the subtree holds, hence exactly the subtree.
    for r in ranks.filter(|&r| r < g) {
        let got: Vec<u16> = subtree_ranks(alg, g, r).collect();
        assert_eq!(got.first(), Some(&r));
        assert_eq!(got.len(), size[r as usize] as usize, "{alg} G={g} rank {r}");
        let mut member = vec![false; n];
        for &v in &got {
            assert!(!member[v as usize], "{alg} G={g}: {v} twice under {r}");
            member[v as usize] = true;
        }
        for &v in &got[1..] {
            assert!(member[parent_of[v as usize].unwrap() as usize]);
        }
    }
    let deepest = depth_of.iter().copied().max().unwrap_or(0);
    assert_eq!(depth(alg, g), deepest, "{alg} G={g}");
    if let Some(d) = depth_formula(alg, g) {
        assert_eq!(deepest, d, "{alg} G={g}");
    }
    assert_eq!(relays_on_deepest_path(alg, g), deepest.saturating_sub(1));
    let last = arrival.iter().copied().max().unwrap_or(0);
    assert_eq!(steps(alg, g), last, "{alg} G={g}");
}

#[test]
fn binomial_8_worked_example() {
    let want = vec![(0, vec![4, 2, 1]), (2, vec![3]), (4, vec![6, 5]), (6, vec![7])];
    assert_eq!(sends(Algorithm::Binomial, 8), want);
    assert_eq!(depth(Algorithm::Binomial, 8), 3);
    assert_eq!(relays_on_deepest_path(Algorithm::Binomial, 8), 2);
    assert_eq!(steps(Algorithm::Binomial, 8), 3);
    let sizes: Vec<u16> = children(Algorithm::Binomial, 8, 0).map(|c| c.subtree).collect();
    assert_eq!(sizes, [4, 2, 1]);
    // Not a power of two: 0->3->4 is the longest path, three root sends.
    let want = vec![(0, vec![3, 2, 1]), (3, vec![4])];
    assert_eq!(sends(Algorithm::Binomial, 5), want);
    assert_eq!((depth(Algorithm::Binomial, 5), steps(Algorithm::Binomial, 5)), (2, 3));
}

#[test]
fn binary_8_worked_example() {
    let want = vec![(0, vec![1, 2]), (1, vec![3, 4]), (2, vec![5, 6]), (3, vec![7])];
    assert_eq!(sends(Algorithm::Binary, 8), want);
    let sizes: Vec<u16> = children(Algorithm::Binary, 8, 0).map(|c| c.subtree).collect();
    assert_eq!(sizes, [4, 3]);
    let sub: Vec<u16> = subtree_ranks(Algorithm::Binary, 8, 1).collect();
    assert_eq!(sub, [1, 3, 4, 7]);
    assert_eq!(depth(Algorithm::Binary, 8), 3);
    // Node 6 (0 -> 2 second, 2 -> 6 second) receives at step 4.
    assert_eq!(steps(Algorithm::Binary, 8), 4);
}

#[test]
fn serial_and_separate_5_worked_examples() {
    let want = vec![(0, vec![1]), (1, vec![2]), (2, vec![3]), (3, vec![4])];
    assert_eq!(sends(Algorithm::Serial, 5), want);
    let c: Vec<Child> = children(Algorithm::Serial, 5, 1).collect();
    assert_eq!(c, [Child { rank: 2, subtree: 3 }]);
    assert_eq!((depth(Algorithm::Serial, 5), relays_on_deepest_path(Algorithm::Serial, 5)), (4, 3));
    assert_eq!(sends(Algorithm::Separate, 5), vec![(0, vec![1, 2, 3, 4])]);
    assert!(children(Algorithm::Separate, 5, 0).all(|c| c.subtree == 1));
    assert_eq!(
        (depth(Algorithm::Separate, 5), relays_on_deepest_path(Algorithm::Separate, 5)),
        (1, 0)
    );
    assert_eq!(steps(Algorithm::Separate, 5), 4);
}

#[test]
fn k_binomial_8_k3_worked_example() {
    let alg = Algorithm::KBinomial { k: 3 };
    let want = vec![(0, vec![4, 1]), (1, vec![3, 2]), (4, vec![6, 5]), (6, vec![7])];
    assert_eq!(sends(alg, 8), want);
    let sizes: Vec<u16> = children(alg, 8, 0).map(|c| c.subtree).collect();
    assert_eq!(sizes, [4, 3]);
    assert_eq!((depth(alg, 8), relays_on_deepest_path(alg, 8), steps(alg, 8)), (3, 2, 4));
    assert_eq!(subtree_ranks(alg, 8, 1).collect::<Vec<_>>(), [1, 2, 3]);
}

#[test]
fn k_binomial_k2_is_the_chain_and_large_k_the_binomial_tree() {
    for g in 1..=300u16 {
        assert_eq!(sends(Algorithm::KBinomial { k: 2 }, g), sends(Algorithm::Serial, g));
        let binomial = sends(Algorithm::Binomial, g);
        let least = ceil_log2(g) as u8 + 1;
        for k in [least.max(3), least + 1, 40, 255] {
            assert_eq!(sends(Algorithm::KBinomial { k }, g), binomial, "G={g} k={k}");
        }
        if least > 3 {
            let k = least - 1;
            assert_ne!(sends(Algorithm::KBinomial { k }, g), binomial, "G={g} k={k}");
        }
    }
}

/// Least step count of any tree with at most k-1 children per node,
/// straight from the recurrence: F(t) = 1 + sum_{j=1..min(k-1,t)} F(t-j).
fn least_steps(g: u16, k: u8) -> u16 {
    let mut f: Vec<u64> = Vec::new();
    loop {
        let t = f.len();
        let v = 1 + (1..=(k as usize - 1).min(t)).map(|j| f[t - j]).sum::<u64>();
        if v >= g as u64 {
            return t as u16;
        }
        f.push(v);
    }
}

#[test]
fn k_binomial_trees_take_the_fewest_steps_their_fan_out_allows() {
    for k in 2..=12u8 {
        for g in 1..=1024u16 {
            assert_eq!(steps(Algorithm::KBinomial { k }, g), least_steps(g, k), "G={g} k={k}");
        }
    }
}

#[test]
fn every_tree_up_to_64_and_some_large_ones_keeps_the_invariants() {
    for alg in algorithms() {
        for g in (1..=64).chain([256, 1000, 1024]) {
            check_tree(alg, g, 0..g);
        }
    }
}

#[test]
fn the_walk_stack_covers_every_group() {
    // A k-binomial tree's height is at most its step count; k = 3 is the
    // deepest walked one.
    for g in 1..=MAX_GROUP as u16 {
        assert!(steps(Algorithm::KBinomial { k: 3 }, g) <= 14);
        assert!(steps(Algorithm::Binomial, g) <= 10);
        for k in 3..=12 {
            assert!(depth(Algorithm::KBinomial { k }, g) <= steps(Algorithm::KBinomial { k }, g));
        }
    }
}

#[test]
fn out_of_range_gives_nothing() {
    for alg in algorithms() {
        assert_eq!(children(alg, 0, 0).count(), 0);
        assert_eq!(children(alg, 5, 5).count(), 0);
        assert_eq!(children(alg, MAX_GROUP as u16 + 1, 0).count(), 0);
        assert_eq!(subtree_ranks(alg, 5, 9).count(), 0);
        assert_eq!(subtree_ranks(alg, 0, 0).count(), 0);
        assert_eq!(parent(alg, 5, 0), None);
        assert_eq!(parent(alg, 5, 7), None);
        assert_eq!((depth(alg, 0), depth(alg, 1), depth(alg, 2000)), (0, 0, 0));
        assert_eq!((steps(alg, 1), relays_on_deepest_path(alg, 1)), (0, 0));
        assert_eq!(subtree_ranks(alg, 1, 0).collect::<Vec<_>>(), [0]);
    }
    assert_eq!(children(Algorithm::KBinomial { k: 0 }, 4, 0).count(), 1);
}

#[test]
fn codes_and_names_round_trip() {
    for alg in algorithms().into_iter().chain([Algorithm::KBinomial { k: 200 }]) {
        assert_eq!(Algorithm::from_code(alg.code(), alg.k()), Some(alg));
        assert_eq!(Algorithm::parse(alg.name(), alg.k()), Some(alg));
    }
    let codes: Vec<u8> = Algorithm::FIXED.iter().map(|a| a.code()).collect();
    assert_eq!(codes, [0, 1, 2, 3]);
    assert_eq!(Algorithm::KBinomial { k: 3 }.code(), 4);
    assert_eq!(Algorithm::from_code(4, 1), None);
    assert_eq!(Algorithm::from_code(5, 3), None);
    assert_eq!(Algorithm::parse("k-binomial", 0), None);
    assert_eq!(Algorithm::parse("tree", 3), None);
    assert_eq!(Algorithm::Binary.to_string(), "binary");
    assert_eq!(Algorithm::KBinomial { k: 4 }.to_string(), "k-binomial(4)");
}

#[test]
fn best_k_is_binomial_for_one_packet_and_small_for_many() {
    for g in (3..=64).chain([100, 256, 1000, 1024]) {
        let binomial = ceil_log2(g) as u8 + 1;
        for (send, forward) in [(1, 0), (10, 0), (10, 3), (5, 20)] {
            let k = best_k(g, 1, send, forward);
            assert_eq!(k, binomial, "G={g} send {send} forward {forward}");
            let tree = sends(Algorithm::KBinomial { k }, g);
            assert_eq!(tree, sends(Algorithm::Binomial, g));
        }
        assert!(best_k(g, 10_000, 10, 3) <= 3, "G={g}");
    }
    // The chain (f = 1) wins once the pipeline is long enough to hide its depth.
    assert_eq!(best_k(16, 1000, 10, 3), 2);
    assert_eq!(best_k(1, 5, 10, 3), 2);
    assert_eq!(best_k(2, 5, 10, 3), 2);
    // In between, k falls as the message grows.
    let ks: Vec<u8> = [1, 2, 4, 8, 16, 64, 1024].iter().map(|&p| best_k(256, p, 10, 3)).collect();
    assert!(ks.windows(2).all(|w| w[0] >= w[1]), "{ks:?}");
}

proptest! {
    /// Any group up to MAX_GROUP, any algorithm: the same invariants, with
    /// subtree_ranks checked on a sample of ranks.
    #[test]
    fn random_trees_keep_the_invariants(
        g in 1u16..=MAX_GROUP as u16,
        which in 0usize..5,
        k in 2u8..=12,
        sample in proptest::collection::vec(any::<u16>(), 4),
    ) {
        let alg = match Algorithm::FIXED.get(which) {
            Some(&a) => a,
            None => Algorithm::KBinomial { k },
        };
        let ranks = [0].into_iter().chain(sample.into_iter().map(|r| r % g));
        check_tree(alg, g, ranks);
    }
}
