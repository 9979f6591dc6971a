//! Random scenarios for the simulator, and the checks each must pass:
//! 2 to 16 nodes, streams (some paced by an IDT, a bandwidth request or
//! best effort, some stopping early), ping-pongs, multicasts of every
//! scheme and algorithm, collectives (barrier, allreduce, reduce and
//! broadcast, on the NICs, the hosts or assisted, a broadcast also as a
//! multicast) and all-to-alls, on every bundled profile and
//! topology, under drops, corruption, duplication, cables going down (a
//! node's, or one between switches) and NIC resets, with either
//! reliability mode.
//!
//! Every run must end (not at its time limit), with no problem on any
//! host, and every flow no reset cut must deliver each message exactly
//! once, intact and in order (a cut flow may lose messages, never
//! duplicate, corrupt or reorder one).
//!
//! Two users: the suite's property test (tests/fuzz_runs.rs, which
//! shrinks a failing case through [`scenario`]) and `cargo xtask fuzz
//! --scenarios N`, which draws case `i` of a sweep from seed `S + i`
//! ([`case`]) so that any one case is drawn again alone from its seed.

use crate::{run, Scenario};
use nic_device::profile::Profile;
use nic_fabric::topology::Topology;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};

const PROFILES: [&str; 3] = ["lanai4-gm", "lanai9-gm", "modern"];
const SCHEMES: [&str; 4] = ["host", "nic", "assisted", "nic-cached"];
const ALGORITHMS: [&str; 5] = ["separate", "serial", "binomial", "binary", "k-binomial"];
const SIZES: [u32; 8] = [0, 1, 8, 64, 4096, 9000, 65536, 70000];
const TIMES_US: [u32; 7] = [0, 1, 24, 100, 500, 2000, 10000];
/// Rate-control keys a stream may carry, each with four values.
const RATES: [(&str, [&str; 4]); 4] = [
    ("", ["", "", "", ""]),
    ("idt", ["0", "50", "500", "5000"]),
    ("rate_mb_s", ["1", "10", "40", "100"]),
    ("best_effort", ["true", "true", "true", "true"]),
];

/// Collective kinds, each with the algorithms it takes.
const COLLECTIVES: [(&str, &[&str]); 4] = [
    ("barrier", &["auto", "dissemination", "pairwise", "tree"]),
    ("allreduce", &["auto", "pairwise", "binomial", "ring"]),
    ("reduce", &["auto", "binomial"]),
    ("broadcast", &["auto", "binomial", "separate", "binary", "k-binomial", "multicast-auto"]),
];
const COLL_SCHEMES: [&str; 4] = ["nic", "host", "assisted", "nic-cached"];
/// Element types and counts: at most 8,000 bytes a vector, which the
/// assisted scheme's eight chunks hold on every profile.
const DTYPES: [&str; 4] = ["u32", "f64", "i64", "f32"];
const ELEMENTS: [u32; 4] = [1, 7, 300, 1000];

/// What a random flow is.
#[derive(Debug, Clone)]
pub enum Kind {
    Stream {
        window: u8,
    },
    Pingpong,
    Multicast {
        group: u16,
        scheme: usize,
        algorithm: usize,
        window: u8,
    },
    /// A collective flow: its kind, scheme and algorithm (indices into
    /// the tables above, the latter two taken modulo what the kind
    /// takes), group size, root, element type and count, collectives.
    Collective {
        kind: usize,
        scheme: usize,
        algorithm: usize,
        group: u16,
        root: u16,
        dtype: usize,
        elements: usize,
        count: u8,
    },
}

/// A random flow: indices into the tables above, taken modulo the
/// fabric where they name nodes.
#[derive(Debug, Clone)]
pub struct Flow {
    kind: Kind,
    /// Node and port picks, taken modulo the fabric's size.
    src: (u16, u8),
    dst: (u16, u8),
    high: bool,
    /// One size, or two used in turn (indices into `SIZES`).
    sizes: (usize, Option<usize>),
    messages: u8,
    start: usize,
    /// Streams: no rate control, an IDT, a bandwidth request or best
    /// effort (indices into `RATES`), and whether the flow stops early.
    rate: (usize, usize),
    stop: bool,
}

/// A random scenario, as proptest draws (and shrinks) it; [`Gen::text`]
/// is its scenario file.
#[derive(Debug, Clone)]
pub struct Gen {
    profile: usize,
    seed: u32,
    nodes: u16,
    topology: u8,
    flows: Vec<Flow>,
    alltoall: Option<(u8, usize, u8, u8)>,
    faults: (u8, u8, u8),
    link_down: Vec<(u16, usize, u32)>,
    /// Cables between switches going down (two-switch and clos): which
    /// one (taken modulo the fabric's), when and for how long.
    trunk_down: Vec<(u16, usize, u32)>,
    resets: Vec<(u16, usize)>,
    selective: bool,
}

/// A random flow.
pub fn flow() -> impl Strategy<Value = Flow> {
    let kind = prop_oneof![
        2 => (1u8..=12).prop_map(|window| Kind::Stream { window }),
        1 => Just(Kind::Pingpong),
        1 => (0u16..64, 0..SCHEMES.len(), 0..ALGORITHMS.len(), 1u8..=3).prop_map(
            |(group, scheme, algorithm, window)| Kind::Multicast { group, scheme, algorithm, window }
        ),
        1 => (
            (0..COLLECTIVES.len(), 0..COLL_SCHEMES.len(), 0..8usize),
            (0u16..64, any::<u16>(), 0..DTYPES.len(), 0..ELEMENTS.len(), 1u8..=6)
        )
            .prop_map(|((kind, scheme, algorithm), (group, root, dtype, elements, count))| {
                Kind::Collective { kind, scheme, algorithm, group, root, dtype, elements, count }
            }),
    ];
    (
        kind,
        (any::<u16>(), 1u8..=4),
        (any::<u16>(), 1u8..=4),
        any::<bool>(),
        (0..SIZES.len(), proptest::option::of(0..SIZES.len())),
        1u8..=25,
        0..4usize,
        ((0..RATES.len()), 0..4usize),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(kind, src, dst, high, sizes, messages, start, rate, stop)| Flow {
            kind,
            src,
            dst,
            high,
            sizes,
            messages,
            start,
            rate,
            stop,
        })
}

/// A random scenario.
pub fn scenario() -> impl Strategy<Value = Gen> {
    (
        (0..PROFILES.len(), any::<u32>(), 2u16..=16, 0u8..4),
        proptest::collection::vec(flow(), 1..=3),
        proptest::option::of((1u8..=4, 0..4usize, 1u8..=10, 1u8..=4)),
        (0u8..3, 0u8..2, 0u8..2),
        proptest::collection::vec((any::<u16>(), 0..TIMES_US.len(), 0u32..4), 0..=2),
        proptest::collection::vec((any::<u16>(), 0..TIMES_US.len(), 0u32..4), 0..=1),
        proptest::collection::vec((any::<u16>(), 0..TIMES_US.len()), 0..=2),
        any::<bool>(),
    )
        .prop_map(
            |(
                (profile, seed, nodes, topology),
                flows,
                alltoall,
                faults,
                link_down,
                trunk_down,
                resets,
                selective,
            )| Gen {
                profile,
                seed,
                nodes,
                topology,
                flows,
                alltoall,
                faults,
                link_down,
                trunk_down,
                resets,
                selective,
            },
        )
}

impl Gen {
    /// Nodes in the fabric.
    pub fn nodes(&self) -> u16 {
        self.nodes
    }

    /// The scenario file.
    pub fn text(&self) -> String {
        let n = self.nodes;
        let mut t = format!(
            "profile = \"{}\"\nseed = {}\n[fabric]\nnodes = {n}\n",
            PROFILES[self.profile], self.seed
        );
        // The cables between switches, for outages.
        let trunks = match self.topology {
            // A clos of 4-port switches holds 8 nodes; of 8-port ones, 32.
            1 => {
                let ports = if n <= 8 { 4 } else { 8 };
                t += &format!("topology = \"clos\"\nswitch_ports = {ports}\n");
                Topology::Clos.layout(n as usize, ports).unwrap().trunks
            }
            2 => {
                t += "topology = \"two-switch\"\n";
                let ports = Profile::load(PROFILES[self.profile]).unwrap().switch.ports as usize;
                Topology::TwoSwitch.layout(n as usize, ports).unwrap().trunks
            }
            _ => Vec::new(),
        };
        let collectives = self.flows.iter().any(|f| matches!(f.kind, Kind::Collective { .. }));
        for (i, f) in self.flows.iter().enumerate() {
            let src = f.src.0 % n;
            let dst = (src + 1 + f.dst.0 % (n - 1)) % n;
            if let Kind::Collective {
                kind,
                scheme,
                algorithm,
                group,
                root,
                dtype,
                elements,
                count,
            } = f.kind
            {
                let (name, algs) = COLLECTIVES[kind];
                // A broadcast takes every scheme; the others all but nic-cached.
                let scheme = COLL_SCHEMES[scheme % if name == "broadcast" { 4 } else { 3 }];
                // Not the ring under the assisted scheme; a broadcast
                // assisted or NIC-cached runs as a multicast (its trees).
                let algs: Vec<&str> = algs
                    .iter()
                    .copied()
                    .filter(|&a| !(scheme == "assisted" && a == "ring"))
                    .filter(|&a| {
                        !(matches!(scheme, "assisted" | "nic-cached") && a == "multicast-auto")
                    })
                    .collect();
                let size = 2 + group % (n - 1);
                t += &format!(
                    "[[flows]]\nname = \"f{i}\"\nkind = \"{name}\"\nport = {}\n\
                     group_size = {size}\nscheme = \"{scheme}\"\nalgorithm = \"{}\"\n\
                     count = {count}\nstart_us = {}\n",
                    f.src.1,
                    algs[algorithm % algs.len()],
                    [0, 0, 100, 5000][f.start]
                );
                if name != "barrier" {
                    t += &format!(
                        "datatype = \"{}\"\nelements = {}\n",
                        DTYPES[dtype], ELEMENTS[elements]
                    );
                }
                if matches!(name, "reduce" | "broadcast") {
                    t += &format!("root = {}\n", root % size);
                }
                continue;
            }
            t += &format!("[[flows]]\nname = \"f{i}\"\nsrc = [{src}, {}]\n", f.src.1);
            match f.kind {
                Kind::Stream { window } => {
                    t += &format!(
                        "kind = \"stream\"\ndst = [{dst}, {}]\nwindow = {window}\n",
                        f.dst.1
                    )
                }
                Kind::Pingpong => {
                    t += &format!("kind = \"pingpong\"\ndst = [{dst}, {}]\n", f.dst.1)
                }
                Kind::Multicast { group, scheme, algorithm, window } => {
                    t += &format!(
                    "kind = \"multicast\"\ngroup_size = {}\nscheme = \"{}\"\nalgorithm = \"{}\"\n\
                         window = {window}\n",
                    2 + group % (n - 1),
                    SCHEMES[scheme],
                    ALGORITHMS[algorithm]
                )
                }
                Kind::Collective { .. } => unreachable!("written above"),
            }
            if !matches!(f.kind, Kind::Multicast { .. }) {
                t += &format!("priority = \"{}\"\n", if f.high { "high" } else { "low" });
            }
            match f.sizes {
                (a, Some(b)) => t += &format!("sizes = [{}, {}]\n", SIZES[a], SIZES[b]),
                (a, None) => t += &format!("bytes = {}\n", SIZES[a]),
            }
            let start_us = [0, 0, 100, 5000][f.start];
            t += &format!("messages = {}\nstart_us = {start_us}\n", f.messages);
            if let Kind::Stream { .. } = f.kind {
                let (key, values) = RATES[f.rate.0];
                if !key.is_empty() {
                    t += &format!("{key} = {}\n", values[f.rate.1]);
                }
                if f.stop {
                    t += &format!("stop_us = {}\n", start_us + 2000);
                }
            }
        }
        if let Some((port, size, messages, window)) = self.alltoall {
            t += &format!(
                "[[alltoall]]\nname = \"a\"\nport = {port}\nbytes = {}\nmessages = {messages}\nwindow = {window}\n",
                [1, 64, 4096, 20000][size]
            );
        }
        let (drop, corrupt, dup) = self.faults;
        t += &format!(
            "[faults]\ndrop = {}\ncorrupt = {}\nduplicate = {}\n",
            [0.0, 0.01, 0.03][drop as usize],
            [0.0, 0.01][corrupt as usize],
            [0.0, 0.01][dup as usize]
        );
        for &(node, at, len) in &self.link_down {
            t += &format!(
                "[[faults.link_down]]\nlink = \"node{}\"\nat_us = {}\nfor_us = {}\n",
                node % n,
                TIMES_US[at],
                [10, 1000, 5000, 30000][len as usize]
            );
        }
        for &(k, at, len) in self.trunk_down.iter().filter(|_| !trunks.is_empty()) {
            let ((switch, port), _) = trunks[k as usize % trunks.len()];
            t += &format!(
                "[[faults.link_down]]\nlink = \"sw{switch}.p{port}\"\nat_us = {}\nfor_us = {}\n",
                TIMES_US[at],
                [10, 1000, 5000, 30000][len as usize]
            );
        }
        // (Collectives are not drawn beside NIC resets: the runner does
        // not take a collective a reset cut short as cut; the NIC
        // scheme's end Incomplete, the host scheme's wait for the reset
        // member to the time limit.)
        for &(node, at) in self.resets.iter().filter(|_| !collectives) {
            t += &format!("[[faults.nic_reset]]\nnode = {}\nat_us = {}\n", node % n, TIMES_US[at]);
        }
        // A NIC-served multicast whose relay a reset took completes when
        // its parent gives up on the relay: after the send timeout, for
        // each level below. Two seconds instead of the profiles' minute
        // keeps such runs short (and is still past what the longest
        // outage here and the retransmissions' backoff need); the limit
        // leaves time for ten levels.
        t += &format!(
            "[firmware]\nreliability = \"{}\"\nsend_timeout_us = 2000000\n[run]\nlimit_ms = 60000\n",
            if self.selective { "selective" } else { "go-back-n" }
        );
        t
    }
}

/// The random scenario drawn from `seed`: the same for the same seed,
/// on any machine.
pub fn case(seed: u64) -> Gen {
    let mut runner =
        TestRunner::new(Config { rng_seed: RngSeed::Fixed(seed), ..Config::default() });
    scenario().new_tree(&mut runner).expect("the scenario strategy never rejects").current()
}

/// What one random scenario came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It ended (at `end_ns` of simulated time) and every flow no reset
    /// cut delivered each message exactly once, intact and in order.
    Passed { end_ns: u64 },
    /// Not a case: the scenario is refused by design ([`refused_by_design`]).
    NotACase,
    /// It failed: why, with the report's summary.
    Failed(String),
}

/// Whether a scenario the parser refuses is refused by design (two flows
/// on one stream: same source port, target port and priority; or a
/// stream or a second host-scheme collective into a host-scheme
/// collective's port between its members), not a fault of the case.
pub fn refused_by_design(e: &str) -> bool {
    e.contains("is also used by") || e.contains("host-scheme collective")
}

/// Every collective of every collective flow complete at every member,
/// once, with the reference's result.
pub fn collectives_right(r: &crate::Report) -> bool {
    r.flows.iter().filter_map(|f| f.collective.as_ref()).all(|c| {
        c.completed == c.count
            && c.incomplete == 0
            && c.results_wrong == 0
            && c.results_ok != Some(false)
    })
}

/// Run the scenario file `text` on the simulator and check it.
pub fn check(text: &str) -> Verdict {
    let v = match Scenario::parse_validated(text) {
        Ok(v) => v,
        Err(e) if refused_by_design(&e.to_string()) => return Verdict::NotACase,
        Err(e) => return Verdict::Failed(format!("refused: {e}")),
    };
    match run(&v) {
        Err(e) => Verdict::Failed(format!("did not run: {e}")),
        Ok(r) if r.sim.stopped == "done" && r.all_delivered_intact() && collectives_right(&r) => {
            Verdict::Passed { end_ns: r.sim.end_ns }
        }
        Ok(r) => Verdict::Failed(format!("{}\nproblems: {:?}", r.summary(), r.problems)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_drawn_again_from_its_seed_and_seeds_differ() {
        assert_eq!(case(418).text(), case(418).text());
        let texts: std::collections::HashSet<String> = (0..20).map(|s| case(s).text()).collect();
        assert_eq!(texts.len(), 20, "20 seeds, 20 different scenarios");
    }

    #[test]
    fn every_drawn_case_parses_or_is_refused_by_design() {
        for seed in 0..200 {
            let text = case(seed).text();
            if let Err(e) = Scenario::parse_validated(&text) {
                assert!(refused_by_design(&e.to_string()), "seed {seed}: {e}\n{text}");
            }
        }
    }

    #[test]
    fn a_case_that_cannot_end_fails_with_the_summary() {
        // A run that ends at its limit: the receiver's cable is down for
        // the whole run.
        let text = "profile = \"modern\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"s\"\n\
                    src = [0, 2]\ndst = [1, 2]\nkind = \"stream\"\nbytes = 64\nmessages = 3\n\
                    [[faults.link_down]]\nlink = \"node1\"\nat_us = 0\nfor_us = 3600000000\n\
                    [run]\nlimit_ms = 5\n";
        match check(text) {
            Verdict::Failed(why) => assert!(why.contains("problems"), "{why}"),
            v => panic!("{v:?}"),
        }
        // A file the parser refuses for another reason is a failure too.
        match check("profile = \"nope\"") {
            Verdict::Failed(why) => assert!(why.starts_with("refused: "), "{why}"),
            v => panic!("{v:?}"),
        }
    }
}
