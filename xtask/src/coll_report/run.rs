//! One point of the collectives report: its scenario, its run on the
//! simulator, and what the report takes from it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nic_emu::scenario::{self, Report, Scenario};

/// The collectives the report measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Barrier,
    Allreduce,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Barrier => "barrier",
            Kind::Allreduce => "allreduce",
        }
    }
}

/// A point: one collective flow, on its own fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Spec {
    pub profile: &'static str,
    pub kind: Kind,
    pub scheme: &'static str,
    pub alg: &'static str,
    /// Members: nodes 0 to n-1, every node of the fabric.
    pub n: u16,
    /// f64 elements per member (0 for a barrier).
    pub elements: u32,
}

impl Spec {
    pub fn bytes(&self) -> u64 {
        8 * self.elements as u64
    }

    pub fn label(&self) -> String {
        let size = match self.kind {
            Kind::Barrier => String::new(),
            Kind::Allreduce => format!(" {}", fmt_bytes(self.bytes())),
        };
        format!(
            "{} {}{size} {} {} n={}",
            self.profile,
            self.kind.name(),
            self.scheme,
            self.alg,
            self.n
        )
    }

    pub fn file_name(&self) -> String {
        let size = match self.kind {
            Kind::Barrier => String::new(),
            Kind::Allreduce => format!("-{}B", self.bytes()),
        };
        format!(
            "{}-{}-{}-{}-n{}{size}.toml",
            self.kind.name(),
            self.profile,
            self.scheme,
            self.alg,
            self.n
        )
    }
}

/// The fabric of `n` nodes, as the multicast report builds its large
/// groups (`nic_emu::mcast::measure`): up to 16 the profile's own switch
/// (16 or 32 ports), up to 128 one switch of n ports, beyond that a
/// two-level clos of P-port switches (leaves of P/2 nodes, P/2 spines),
/// P = 32 while it holds them (512 nodes), else the next power of two
/// that does (64 for 1,024). Returns (topology, switch_ports).
pub fn fabric(n: u16) -> Option<(&'static str, u32)> {
    let n = n as u32;
    if n <= 16 {
        None
    } else if n <= 128 {
        Some(("star", n))
    } else {
        let mut p = 32;
        while p / 2 * p < n {
            p *= 2;
        }
        Some(("clos", p))
    }
}

/// The fabric of `n` nodes in words.
pub fn fabric_words(n: u16) -> String {
    match fabric(n) {
        None => "one switch of the profile's".to_string(),
        Some(("star", p)) => format!("one {p}-port switch"),
        Some((_, p)) => format!(
            "a two-level clos of {p}-port switches ({} leaves of {} nodes, {} spines)",
            (n as u32).div_ceil(p / 2),
            p / 2,
            p / 2
        ),
    }
}

/// The scenario of point `s`, `count` collectives in its loop.
pub fn scenario_toml(s: &Spec, count: u64) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# cargo xtask report collectives: {}, {} collectives one after another.\n\
         # Its figure is the flow's collective.interval_ns (`cargo xtask sim FILE --json`).",
        s.label(),
        count
    );
    let _ = writeln!(t, "profile = \"{}\"\nseed = 1\n\n[fabric]\nnodes = {}", s.profile, s.n);
    if let Some((topology, ports)) = fabric(s.n) {
        let _ = writeln!(t, "topology = \"{topology}\"\nswitch_ports = {ports}");
    }
    let _ = writeln!(
        t,
        "\n[[flows]]\nname = \"{}\"\nkind = \"{}\"\nport = 1\ngroup_size = {}\n\
         scheme = \"{}\"\nalgorithm = \"{}\"",
        s.kind.name(),
        s.kind.name(),
        s.n,
        s.scheme,
        s.alg
    );
    if s.kind == Kind::Allreduce {
        let _ = writeln!(t, "op = \"sum\"\ndatatype = \"f64\"\nelements = {}", s.elements);
    }
    let _ = writeln!(t, "count = {count}");
    let _ = writeln!(t, "\n[run]\nlimit_ms = {}", limit_ms(s, count));
    t
}

/// The simulated time point `s` may take for `count` collectives (ms):
/// 100 ms a collective, and per element of the vector 5 us (the host's
/// combining, the wire) and 20 times what the profile's NIC CPU takes to
/// combine a floating-point element (4.5 us on `lanai4-gm`: 12.7 s for
/// a 1 MiB allreduce there, about three times what its slowest
/// algorithm takes). A loop whose collectives stop making progress
/// (chunks answered Busy and sent again for ever) thus costs seconds of
/// wall time, not the default limit's minutes, and is reported as not
/// clean (`INCOMPLETE: ... (time-limit)`).
pub fn limit_ms(s: &Spec, count: u64) -> u64 {
    let float_ns = nic_emu::Profile::load(s.profile)
        .map(|p| p.nic_cpu.coll_float_element as f64 * 1e9 / p.nic.cpu_hz as f64)
        .unwrap_or(1000.0);
    let per_ms = 100.0 + s.elements as f64 * (5_000.0 + 20.0 * float_ns) / 1e6;
    (count.max(1) as f64 * per_ms).ceil().max(1000.0) as u64
}

/// What one point gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Collectives in the loop.
    pub count: u64,
    /// The time per collective as the loop ran them (us).
    pub interval_us: f64,
    /// The median collective's latency, first entry to last completion
    /// (us).
    pub p50_us: f64,
    /// The slowest collective's latency (us).
    pub max_us: f64,
    /// Packets sent again, Busy (or Gone) answers and sends given up
    /// on, all NICs (none on a fabric without faults, normally).
    pub retransmits: u64,
    pub nacks: u64,
    pub timeouts: u64,
    /// Every member's result equal to the reference's, to the bit, in
    /// every collective of the loop (the flow's `collective.results_ok`;
    /// None for a barrier), and the results that differed.
    pub results_ok: Option<bool>,
    pub results_wrong: u64,
    /// Each member's NIC CPU busy per collective, the median member
    /// (us; the sim's `collective.nic_cpu_ns`, None where not kept).
    pub nic_cpu_us: Option<f64>,
    /// Wall time of the run (s).
    pub wall_s: f64,
    /// Why the point is not to be trusted (None: clean).
    pub problem: Option<String>,
}

/// How many times the median a loop's slowest collective may take
/// before the loop is called stalled.
pub const STALL_FACTOR: f64 = 4.0;

impl Point {
    /// One collective of the loop took over `STALL_FACTOR` times the
    /// median: the time per collective is mostly that one's.
    pub fn stalled(&self) -> bool {
        self.max_us > STALL_FACTOR * self.p50_us
    }

    /// Some member's result differed from the reference's (or none was
    /// checked).
    pub fn results_bad(&self) -> bool {
        self.results_ok == Some(false) || self.results_wrong > 0
    }
}

/// Run one point's scenario (`count` collectives).
pub fn measure(text: &str, count: u64) -> crate::Result<Point> {
    let sc = Scenario::parse_validated(text).map_err(|e| e.to_string())?;
    let t = std::time::Instant::now();
    let r = scenario::run(&sc).map_err(|e| e.to_string())?;
    let mut p = point_of(&r, count);
    p.wall_s = t.elapsed().as_secs_f64();
    Ok(p)
}

/// What the report takes from a run of one collective flow.
pub fn point_of(r: &Report, count: u64) -> Point {
    let f = r.flows.first();
    let c = f.and_then(|f| f.collective.as_ref());
    let mut problems = Vec::new();
    if !r.all_delivered_intact() {
        problems.push(r.summary().lines().last().unwrap_or("run not clean").to_string());
    }
    match c {
        None => problems.push("no collective flow in the report".into()),
        Some(c) => {
            if c.completed != count
                || c.results_wrong > 0
                || c.results_ok == Some(false)
                || c.incomplete > 0
            {
                problems.push(format!(
                    "{} of {count} collectives complete at every member, {} results wrong, {} \
                     ended with members missing",
                    c.completed, c.results_wrong, c.incomplete
                ));
            }
            if c.requested != c.algorithm {
                problems.push(format!("asked for {}, ran {}", c.requested, c.algorithm));
            }
        }
    }
    let sum = |g: fn(&scenario::NicReport) -> u64| r.nics.iter().map(g).sum::<u64>();
    Point {
        count,
        interval_us: c.map_or(f64::NAN, |c| c.interval_ns / 1e3),
        p50_us: f.map_or(f64::NAN, |f| f.latency_ns.p50 as f64 / 1e3),
        max_us: f.map_or(f64::NAN, |f| f.latency_ns.max as f64 / 1e3),
        retransmits: sum(|n| n.retransmits),
        nacks: sum(|n| n.nacks_sent),
        timeouts: sum(|n| n.timeouts),
        results_ok: c.and_then(|c| c.results_ok),
        results_wrong: c.map_or(0, |c| c.results_wrong),
        nic_cpu_us: c.and_then(|c| c.nic_cpu_ns).map(|n| n.p50 as f64 / 1e3),
        wall_s: 0.0,
        problem: (!problems.is_empty()).then(|| problems.join("; ")),
    }
}

/// Every point run, by its spec.
#[derive(Debug, Default)]
pub struct Results {
    map: BTreeMap<Spec, Point>,
}

impl Results {
    pub fn insert(&mut self, s: Spec, p: Point) {
        self.map.insert(s, p);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Spec, &Point)> {
        self.map.iter()
    }

    /// The point, clean or not.
    pub fn get(
        &self,
        profile: &str,
        kind: Kind,
        scheme: &str,
        alg: &str,
        n: u16,
        elements: u32,
    ) -> Option<&Point> {
        self.map
            .iter()
            .find(|(s, _)| {
                s.profile == profile
                    && s.kind == kind
                    && s.scheme == scheme
                    && s.alg == alg
                    && s.n == n
                    && s.elements == elements
            })
            .map(|(_, p)| p)
    }

    /// The time per collective of a clean point (us).
    pub fn us(
        &self,
        profile: &str,
        kind: Kind,
        scheme: &str,
        alg: &str,
        n: u16,
        elements: u32,
    ) -> Option<f64> {
        self.get(profile, kind, scheme, alg, n, elements)
            .filter(|p| p.problem.is_none() && p.interval_us.is_finite())
            .map(|p| p.interval_us)
    }

    /// The fastest clean algorithm of `scheme` at a point: (algorithm, us).
    pub fn best(
        &self,
        profile: &str,
        kind: Kind,
        scheme: &str,
        n: u16,
        elements: u32,
    ) -> Option<(&'static str, f64)> {
        let algs: &[&'static str] =
            if kind == Kind::Barrier { &super::BARRIER_ALGS } else { &super::ALLREDUCE_ALGS };
        algs.iter()
            .filter_map(|&a| self.us(profile, kind, scheme, a, n, elements).map(|t| (a, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The points that did not run clean, as lines.
    pub fn failed(&self) -> Vec<String> {
        self.map
            .iter()
            .filter_map(|(s, p)| p.problem.as_ref().map(|w| format!("{}: {w}", s.label())))
            .collect()
    }

    /// Every point as CSV.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "profile,kind,scheme,algorithm,nodes,bytes,count,interval_us,latency_p50_us,\
             latency_max_us,retransmits,nacks,timeouts,results_ok,wall_s,clean\n",
        );
        for (s, p) in &self.map {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{:.3},{}",
                s.profile,
                s.kind.name(),
                s.scheme,
                s.alg,
                s.n,
                s.bytes(),
                p.count,
                p.interval_us,
                p.p50_us,
                p.max_us,
                p.retransmits,
                p.nacks,
                p.timeouts,
                p.results_ok.map_or("", |ok| if ok { "true" } else { "false" }),
                p.wall_s,
                p.problem.is_none()
            );
        }
        out
    }
}

pub fn fmt_bytes(b: u64) -> String {
    nic_emu::scenario::report::fmt_bytes(b)
}
