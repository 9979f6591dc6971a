//! A broadcast collective flow run as a multicast: its scheme and tree.
//!
//! A broadcast flow takes the multicast schemes and trees besides the
//! collective ones. Which runs:
//!
//! - `scheme = "assisted"` or `"nic-cached"`: always a multicast, the tree
//!   being `algorithm` (`separate`, `serial`, `binomial`, `binary`,
//!   `k-binomial`, or `auto`: the tree `nic_device::mcast::pick` prices
//!   lowest for the scheme, the group and the vector). (A barrier, reduce
//!   or allreduce under `assisted` runs the collective offload's assisted
//!   scheme instead: coll/assist.rs.)
//! - `scheme = "nic"` or `"host"` with a tree only multicast has
//!   (`separate`, `serial`, `binary`, `k-binomial`): a multicast of that
//!   scheme.
//! - `scheme = "nic"` or `"host"` with `binomial` or `auto`: the
//!   collective's own binomial broadcast, as before (the collective
//!   offload, or the hosts' schedule). The multicast's binomial tree (a
//!   different tree: recursive halving) and the multicast's `auto` are
//!   `multicast-binomial` and `multicast-auto`; the prefix `multicast-`
//!   may be put before any tree under any of the four schemes.
//!
//! The root member multicasts its vector (collective k's input) as
//! multicast number k over the group rotated so that the root is rank 0;
//! every other member takes it from its receive buffers.

use nic_abi::collective::Kind;
use nic_abi::multicast::{children_computed, Algorithm, Scheme};

use super::CollScheme;
use crate::format::{AlgorithmChoice, Flow, ScenarioError};

/// How a broadcast flow run as a multicast multicasts.
#[derive(Debug, Clone, PartialEq)]
pub struct BcastMcast {
    pub scheme: Scheme,
    pub choice: AlgorithmChoice,
    /// The tree used: the given one, or (`auto`, a k-binomial tree without
    /// `k`) what the runner chose for the profile (`mcast::resolve`).
    pub algorithm: Option<Algorithm>,
    /// `algorithm` as the file spelled it (or `auto`).
    pub requested: String,
}

impl BcastMcast {
    /// The tree in use (the given one until the runner resolved it).
    pub fn alg(&self) -> Algorithm {
        match (self.algorithm, self.choice) {
            (Some(a), _) | (None, AlgorithmChoice::Given(a)) => a,
            _ => Algorithm::Binomial,
        }
    }

    /// What ran, for the report: "multicast binomial", "multicast
    /// k-binomial(3)".
    pub fn name(&self) -> String {
        format!("multicast {}", self.alg())
    }
}

/// Trees only multicast has: under `nic` and `host` they make a broadcast
/// a multicast.
const MCAST_ONLY: [&str; 4] = ["separate", "serial", "binary", "k-binomial"];

/// The scheme of a collective flow, and for a broadcast run as a
/// multicast its tree; None for the collective's own algorithms.
pub(super) fn scheme_of(
    label: &str,
    f: &Flow,
    kind: Kind,
    members: usize,
) -> Result<(CollScheme, Option<BcastMcast>), ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let scheme = match f.scheme.as_deref().unwrap_or("nic") {
        "nic" => CollScheme::Nic,
        "host" => CollScheme::Host,
        "assisted" => CollScheme::Assisted,
        "nic-cached" => CollScheme::NicCached,
        s => {
            return err(format!(
                "{label}.scheme: \"{s}\" is not a collective scheme (host, nic, assisted; a \
                 broadcast also nic-cached)"
            ))
        }
    };
    let asked = f.algorithm.as_deref().unwrap_or("auto");
    let (prefixed, tree) = match asked.strip_prefix("multicast-") {
        Some(t) => (true, t),
        None => (false, asked),
    };
    let broadcast = kind == Kind::Broadcast;
    let mcast = prefixed || (broadcast && scheme.multicast_only()) || MCAST_ONLY.contains(&tree);
    if kind != Kind::Broadcast {
        if f.k.is_some() {
            return err(format!("{label}.k: does not apply to a {} flow", kind.name()));
        }
        if scheme == CollScheme::NicCached {
            return err(format!(
                "{label}.scheme: \"nic-cached\" runs a broadcast as a multicast; a {} takes \
                 host, nic or assisted",
                kind.name()
            ));
        }
        if mcast {
            return err(format!(
                "{label}.algorithm: \"{asked}\" is a multicast tree: only a broadcast runs as a \
                 multicast ({} takes {}, auto)",
                kind.name(),
                super::algorithm_names(kind).join(", ")
            ));
        }
    }
    if !mcast {
        if f.k.is_some() {
            return err(format!(
                "{label}.k: applies to algorithm = \"k-binomial\" only (algorithm is \"{asked}\")"
            ));
        }
        return Ok((scheme, None));
    }
    let choice = tree_choice(label, tree, asked, f.k)?;
    let m = BcastMcast {
        scheme: scheme.multicast().unwrap_or(Scheme::Nic),
        choice,
        algorithm: None,
        requested: asked.to_string(),
    };
    check_listed(label, &m, members)?;
    Ok((scheme, Some(m)))
}

/// The tree `tree` (`asked` as the file spelled it) with `k`.
fn tree_choice(
    label: &str,
    tree: &str,
    asked: &str,
    k: Option<u64>,
) -> Result<AlgorithmChoice, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    Ok(match (tree, k) {
        ("k-binomial", None) => AlgorithmChoice::KBinomialBestK,
        ("k-binomial", Some(k)) if !(2..=u8::MAX as u64).contains(&k) => {
            return err(format!("{label}.k: {k} out of range (2..={})", u8::MAX));
        }
        ("k-binomial", Some(k)) => AlgorithmChoice::Given(Algorithm::KBinomial { k: k as u8 }),
        (_, Some(_)) => {
            return err(format!(
                "{label}.k: applies to algorithm = \"k-binomial\" only (algorithm is \"{asked}\")"
            ));
        }
        ("auto", None) => AlgorithmChoice::Auto,
        (t, None) => match Algorithm::parse(t, 0) {
            Some(a) => AlgorithmChoice::Given(a),
            None => {
                return err(format!(
                    "{label}.algorithm: \"{asked}\" is not a multicast tree (separate, serial, \
                     binomial, binary, k-binomial, auto; under nic and host binomial and auto \
                     are the collective's, multicast-binomial and multicast-auto the \
                     multicast's)"
                ));
            }
        },
    })
}

/// A multicast moves the vector as one message: at most the largest.
pub(super) fn check_message(label: &str, bytes: u64) -> Result<(), ScenarioError> {
    let max = nic_abi::class_max_len(nic_abi::MAX_SIZE_CLASS);
    if bytes > max {
        return Err(ScenarioError::new(format!(
            "{label}.elements: {bytes} bytes, more than a multicast carries in one message \
             ({max} bytes; the collective's binomial broadcast takes more)"
        )));
    }
    Ok(())
}

/// The assisted root lists its children in its one descriptor.
pub(crate) fn check_listed(
    label: &str,
    m: &BcastMcast,
    members: usize,
) -> Result<(), ScenarioError> {
    let alg = match (m.algorithm, m.choice) {
        (Some(a), _) | (None, AlgorithmChoice::Given(a)) => a,
        _ => return Ok(()),
    };
    let n = children_computed(alg, members as u16, 0) as usize;
    if m.scheme == Scheme::Assisted && n > nic_abi::desc::MAX_LISTED_CHILDREN {
        return Err(ScenarioError::new(format!(
            "{label}: the assisted root of a {} tree over {members} members lists {n} \
             children, more than a descriptor holds ({})",
            alg.name(),
            nic_abi::desc::MAX_LISTED_CHILDREN
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::format::Scenario;

    fn flow(keys: &str) -> String {
        format!("profile = \"lanai9-gm\"\n[fabric]\nnodes = 6\n[[flows]]\nport = 2\n{keys}\n")
    }

    fn bcast(keys: &str) -> super::BcastMcast {
        let v = Scenario::parse_validated(&flow(&format!("kind = \"broadcast\"\n{keys}")))
            .unwrap_or_else(|e| panic!("{keys}: {e}"));
        v.flows[0].coll.clone().unwrap().mcast.unwrap_or_else(|| panic!("{keys}: no multicast"))
    }

    #[test]
    fn multicast_schemes_and_trees_make_a_broadcast_a_multicast() {
        use nic_abi::multicast::{Algorithm, Scheme};
        let cases = [
            ("scheme = \"assisted\"\nalgorithm = \"binomial\"", Scheme::Assisted, "binomial"),
            ("scheme = \"nic-cached\"", Scheme::NicCached, "auto"),
            ("scheme = \"nic\"\nalgorithm = \"binary\"", Scheme::Nic, "binary"),
            ("scheme = \"host\"\nalgorithm = \"serial\"", Scheme::Host, "serial"),
            ("scheme = \"nic\"\nalgorithm = \"multicast-binomial\"", Scheme::Nic, "binomial"),
            ("algorithm = \"k-binomial\"\nk = 3", Scheme::Nic, "k-binomial"),
        ];
        for (keys, scheme, tree) in cases {
            let m = bcast(&format!("group_size = 6\n{keys}"));
            assert_eq!(m.scheme, scheme, "{keys}");
            assert_eq!(m.choice.as_str(), tree, "{keys}");
        }
        let m = bcast("group_size = 6\nalgorithm = \"k-binomial\"\nk = 3");
        assert_eq!(m.alg(), Algorithm::KBinomial { k: 3 });
        assert_eq!(m.name(), "multicast k-binomial(3)");
    }

    #[test]
    fn nic_and_host_binomial_and_auto_stay_the_collective_broadcast() {
        for keys in ["", "scheme = \"host\"", "algorithm = \"binomial\"", "algorithm = \"auto\""] {
            let text = flow(&format!("kind = \"broadcast\"\ngroup_size = 6\n{keys}"));
            let v = Scenario::parse_validated(&text).unwrap();
            assert_eq!(v.flows[0].coll.as_ref().unwrap().mcast, None, "{keys}");
        }
    }

    #[test]
    fn multicast_trees_and_schemes_for_other_kinds_and_bad_keys_are_refused() {
        for (keys, want) in [
            (
                "kind = \"reduce\"\ngroup_size = 4\nalgorithm = \"binary\"",
                "flows[0].algorithm: \"binary\" is a multicast tree: only a broadcast runs as \
                 a multicast (reduce takes binomial, auto)",
            ),
            (
                "kind = \"allreduce\"\ngroup_size = 4\nalgorithm = \"multicast-binomial\"",
                "flows[0].algorithm: \"multicast-binomial\" is a multicast tree: only a \
                 broadcast runs as a multicast (allreduce takes pairwise, binomial, ring, \
                 auto)",
            ),
            (
                "kind = \"barrier\"\ngroup_size = 4\nscheme = \"nic-cached\"",
                "flows[0].scheme: \"nic-cached\" runs a broadcast as a multicast; a barrier \
                 takes host, nic or assisted",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nscheme = \"assisted\"\nalgorithm = \"ring\"",
                "flows[0].algorithm: \"ring\" is not a multicast tree (separate, serial, \
                 binomial, binary, k-binomial, auto;",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nscheme = \"gossip\"",
                "flows[0].scheme: \"gossip\" is not a collective scheme (host, nic, \
                 assisted; a broadcast also nic-cached)",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nalgorithm = \"binary\"\nk = 3",
                "flows[0].k: applies to algorithm = \"k-binomial\" only (algorithm is \"binary\")",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nk = 3",
                "flows[0].k: applies to algorithm = \"k-binomial\" only (algorithm is \"auto\")",
            ),
            (
                "kind = \"barrier\"\ngroup_size = 4\nk = 3",
                "flows[0].k: does not apply to a barrier flow",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nscheme = \"nic-cached\"\n\
                 datatype = \"u64\"\nelements = 600000",
                "flows[0].elements: 4800000 bytes, more than a multicast carries in one message \
                 (4194304 bytes;",
            ),
            (
                "kind = \"broadcast\"\ngroup_size = 4\nalgorithm = \"k-binomial\"\nk = 1",
                "flows[0].k: 1 out of range (2..=255)",
            ),
        ] {
            let e = Scenario::parse_validated(&flow(keys)).unwrap_err().to_string();
            assert!(e.starts_with(want), "{keys}\ngot: {e}\nwant: {want}");
        }
    }

    #[test]
    fn an_assisted_root_listing_more_children_than_a_descriptor_holds_is_refused() {
        let text = "profile = \"modern\"\n[fabric]\nnodes = 300\n[[flows]]\nport = 2\n\
                    kind = \"broadcast\"\ngroup_size = 300\nscheme = \"assisted\"\n\
                    algorithm = \"separate\"\n";
        let e = Scenario::parse_validated(text).unwrap_err().to_string();
        assert!(e.contains("lists 299 children, more than a descriptor holds (255)"), "{e}");
    }
}
