//! `cargo xtask bench --scale`: how the simulator's cost per packet grows
//! with the number of nodes.
//!
//! Every point is the same traffic per node on more nodes: each node
//! streams 64 B messages to the nodes 1, N/4, N/2 and 3N/4 places after
//! it (`[[alltoall]]` with `offsets`), on one switch of N ports (`star`)
//! and on a full two-level clos of 2 sqrt(N)-port switches (sqrt(N)
//! leaves of sqrt(N) nodes, sqrt(N) spines). The bundled
//! `scenarios/scale-*.toml` are this text at 64, 256 and 1,024 nodes.
//!
//! The figure is wall time per simulated packet (the NICs' packets,
//! acks included) over the whole run, the median of a few runs, with its
//! ratio to the 16-node run of the same topology measured in the same
//! bench.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::plot::{self, Axis, Curve};
use crate::progress;

/// Node counts of the bench.
pub const NODES: [u64; 4] = [16, 64, 256, 1024];

/// Node counts of the bundled scale scenarios.
#[cfg(test)]
pub const FILE_NODES: [u64; 3] = [64, 256, 1024];

/// Messages per flow of the bundled files (each node sends 4 flows).
#[cfg(test)]
pub const FILE_MESSAGES: u64 = 20;

/// Messages per flow of the bench's runs: the same work per node at
/// every size.
pub const BENCH_MESSAGES: u64 = 50;

/// The two fabrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// One crossbar of N ports.
    Star,
    /// A full two-level clos: 2 sqrt(N)-port switches.
    Clos,
}

impl Fabric {
    pub const ALL: [Fabric; 2] = [Fabric::Star, Fabric::Clos];

    pub fn name(self) -> &'static str {
        match self {
            Fabric::Star => "star",
            Fabric::Clos => "clos",
        }
    }

    /// Ports per switch for `nodes` nodes.
    pub fn switch_ports(self, nodes: u64) -> u64 {
        match self {
            Fabric::Star => nodes,
            // sqrt(N) leaves of sqrt(N) nodes and sqrt(N) uplinks each.
            Fabric::Clos => 2 * (nodes as f64).sqrt().round() as u64,
        }
    }
}

/// The scale scenario: `nodes` nodes on `fabric`, each streaming
/// `messages` 64 B messages to each of the nodes 1, N/4, N/2 and 3N/4
/// places after it.
pub fn scale_toml(fabric: Fabric, nodes: u64, messages: u64) -> String {
    let ports = fabric.switch_ports(nodes);
    let shape = match fabric {
        Fabric::Star => format!("one {ports}-port switch"),
        Fabric::Clos => {
            let half = ports / 2;
            format!(
                "a two-level clos of {ports}-port switches\n# ({} leaves of {half} nodes, {half} \
                 spines)",
                nodes.div_ceil(half)
            )
        }
    };
    let offsets = [1, nodes / 4, nodes / 2, 3 * nodes / 4];
    format!(
        "# Scale: {nodes} hosts on {shape}.\n\
         # Every node streams {messages} messages of 64 B to each of the nodes 1, N/4,\n\
         # N/2 and 3N/4 places after it: the same traffic per node at every size\n\
         # (`cargo xtask bench --scale` runs this shape at 16 to 1,024 nodes and\n\
         # prints the wall time per simulated packet).\n\
         # Every message is checked byte by byte and for its place in its stream.\n\
         profile = \"modern\"\n\
         seed = 1\n\
         \n\
         [fabric]\n\
         nodes = {nodes}\n\
         topology = \"{}\"\n\
         switch_ports = {ports}\n\
         \n\
         [[alltoall]]\n\
         name = \"s\"\n\
         port = 2\n\
         offsets = [{}, {}, {}, {}]\n\
         bytes = 64\n\
         messages = {messages}\n\
         window = 4\n",
        fabric.name(),
        offsets[0],
        offsets[1],
        offsets[2],
        offsets[3],
    )
}

/// Where the bundled scale scenario of `nodes` on `fabric` lives.
#[cfg(test)]
pub fn file_name(fabric: Fabric, nodes: u64) -> String {
    format!("scale-{nodes}-{}.toml", fabric.name())
}

/// One point: the median run of `nodes` nodes on `fabric`.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub fabric: Fabric,
    pub nodes: u64,
    pub packets: u64,
    pub events: u64,
    /// Wall time per packet, ns: the median of the runs.
    pub ns_per_packet: f64,
    /// The fastest run's.
    pub best_ns_per_packet: f64,
    pub runs: usize,
}

/// Runs of a point: more for the small (short) ones.
fn runs_for(nodes: u64) -> usize {
    match nodes {
        0..=16 => 9,
        17..=64 => 7,
        65..=256 => 5,
        _ => 3,
    }
}

/// Measure every point, printing rows as they come.
pub fn measure(quick: bool, quiet: bool) -> crate::Result<(Vec<Point>, Vec<String>)> {
    let messages = if quick { BENCH_MESSAGES / 5 } else { BENCH_MESSAGES };
    let total: u64 = Fabric::ALL.len() as u64
        * NODES.iter().map(|&n| runs_for(n) as u64 * if quick { 1 } else { n }).sum::<u64>();
    let pb = progress::bar(total, "bench --scale", quiet);
    let mut points = Vec::new();
    let mut unclean = Vec::new();
    for fabric in Fabric::ALL {
        for &nodes in &NODES {
            let text = scale_toml(fabric, nodes, messages);
            let runs = if quick { 1 } else { runs_for(nodes) };
            let mut per = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let (r, bad) = crate::bench::run_toml(&text)?;
                if let Some(b) = bad {
                    unclean.push(format!("{} {nodes} nodes: {b}", fabric.name()));
                }
                per.push(r.sim.wall_ms * 1e6 / r.sim.packets.max(1) as f64);
                pb.inc(if quick { 1 } else { nodes });
                last = Some(r);
            }
            let r = last.expect("at least one run");
            let best = per.iter().copied().fold(f64::MAX, f64::min);
            let p = Point {
                fabric,
                nodes,
                packets: r.sim.packets,
                events: r.sim.events,
                ns_per_packet: crate::bench::median(&per),
                best_ns_per_packet: best,
                runs,
            };
            progress::println(
                &pb,
                &format!(
                    "  {:<4} {:>5} nodes: {:>8} packets, {:>5.2} events/packet, {:>7.0} ns wall \
                     per packet (median of {runs}; best {:.0})",
                    fabric.name(),
                    nodes,
                    p.packets,
                    p.events as f64 / p.packets.max(1) as f64,
                    p.ns_per_packet,
                    p.best_ns_per_packet
                ),
            );
            points.push(p);
        }
    }
    pb.finish_and_clear();
    Ok((points, unclean))
}

/// The cost of `p` over the 16-node (smallest) point of its fabric.
pub fn ratio(points: &[Point], p: &Point) -> f64 {
    let base = points
        .iter()
        .filter(|q| q.fabric == p.fabric)
        .min_by_key(|q| q.nodes)
        .map_or(f64::NAN, |q| q.ns_per_packet);
    p.ns_per_packet / base
}

/// The table: per node count, each fabric's ns per packet, packets per
/// wall second and ratio to its 16-node point.
pub fn table(points: &[Point]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6}  {:>11} {:>9} {:>7}  {:>11} {:>9} {:>7}",
        "nodes", "star ns/pkt", "M pkt/s", "vs 16", "clos ns/pkt", "M pkt/s", "vs 16"
    );
    for &nodes in &NODES {
        let _ = write!(s, "{nodes:>6}");
        for fabric in Fabric::ALL {
            match points.iter().find(|p| p.fabric == fabric && p.nodes == nodes) {
                Some(p) => {
                    let _ = write!(
                        s,
                        "  {:>11.0} {:>9.3} {:>6.2}x",
                        p.ns_per_packet,
                        1e3 / p.ns_per_packet,
                        ratio(points, p)
                    );
                }
                None => {
                    let _ = write!(s, "  {:>11} {:>9} {:>7}", "-", "-", "-");
                }
            }
        }
        let _ = writeln!(s);
    }
    s
}

/// The plot (ns per packet against nodes, both fabrics, with dashed lines
/// at twice each fabric's 16-node cost) and the points as CSV, in `dir`.
pub fn write_outputs(dir: &Path, points: &[Point]) -> crate::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let curve = |fabric: Fabric, f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().filter(|p| p.fabric == fabric).map(|p| (p.nodes as f64, f(p))).collect()
    };
    let solid: Vec<Curve> = Fabric::ALL
        .iter()
        .map(|&f| (format!("{} (median)", f.name()), curve(f, &|p| p.ns_per_packet)))
        .collect();
    let dashed: Vec<Curve> = Fabric::ALL
        .iter()
        .filter_map(|&f| {
            let c = curve(f, &|p| 2.0 * p.ns_per_packet / ratio(points, p));
            (!c.is_empty()).then(|| (format!("{}: 2x its 16-node cost", f.name()), c))
        })
        .collect();
    let svg = dir.join("scale.svg");
    plot::curves(
        &svg,
        "simulator: wall time per simulated packet vs nodes",
        Axis::log("nodes", |v| format!("{}", v.round() as u64)),
        Axis::log("wall time per packet (ns)", |v| format!("{v:.0}")),
        &solid,
        &dashed,
    )?;
    let mut csv = String::from(
        "fabric,nodes,packets,events,ns_per_packet_median,ns_per_packet_best,runs,ratio_to_16\n",
    );
    for p in points {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.1},{:.1},{},{:.3}",
            p.fabric.name(),
            p.nodes,
            p.packets,
            p.events,
            p.ns_per_packet,
            p.best_ns_per_packet,
            p.runs,
            ratio(points, p)
        );
    }
    let csv_path = dir.join("scale.csv");
    std::fs::write(&csv_path, csv).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    Ok((svg, csv_path))
}

/// `cargo xtask bench --scale`.
pub fn run(quick: bool, quiet: bool) -> crate::Result<ExitCode> {
    crate::prereq::require_now()?;
    let cores = crate::bench::num_cpus();
    println!(
        "simulator scale: every node streams {} x 64 B to 4 others (offsets 1, N/4, N/2, 3N/4), \
         modern profile; one N-port switch (star) and a two-level clos of 2 sqrt(N)-port \
         switches; wall time per simulated packet (acks included){}",
        if quick { BENCH_MESSAGES / 5 } else { BENCH_MESSAGES },
        if cfg!(debug_assertions) { " (DEBUG build: use `cargo xtask`)" } else { "" }
    );
    println!(
        "machine: {cores} core(s) available (the simulator runs on one); load average {}",
        crate::bench::load_average()
    );
    let (points, unclean) = measure(quick, quiet)?;
    println!();
    print!("{}", table(&points));
    let most = NODES[NODES.len() - 1];
    for fabric in Fabric::ALL {
        if let Some(p) = points.iter().find(|p| p.fabric == fabric && p.nodes == most) {
            let r = ratio(&points, p);
            println!(
                "{}: a packet at {most} nodes costs {r:.2}x one at 16 (asked: within 2x): {}",
                fabric.name(),
                if quick {
                    "not judged (--quick: one short run a point)"
                } else if r <= 2.0 {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    let (svg, csv) = write_outputs(&crate::bench::out_dir(), &points)?;
    println!("plot: {}\ndata: {}", svg.display(), csv.display());
    for u in &unclean {
        println!("NOT CLEAN: {u}");
    }
    Ok(if unclean.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_emu::scenario::Scenario;

    #[test]
    fn the_bundled_scale_scenarios_are_the_bench_s_text() {
        let dir = crate::workspace_root().join("scenarios");
        for fabric in Fabric::ALL {
            for nodes in FILE_NODES {
                let path = dir.join(file_name(fabric, nodes));
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(text, scale_toml(fabric, nodes, FILE_MESSAGES), "{}", path.display());
                let v = Scenario::parse_validated(&text).unwrap();
                assert_eq!((v.nodes as u64, v.flows.len() as u64), (nodes, 4 * nodes));
            }
        }
    }

    #[test]
    fn every_point_s_shape_fits_its_fabric() {
        for fabric in Fabric::ALL {
            for nodes in NODES {
                let v = Scenario::parse_validated(&scale_toml(fabric, nodes, 1)).unwrap();
                let ports = fabric.switch_ports(nodes);
                assert_eq!(v.switch_ports, Some(ports as u32));
                let topo: nic_emu::Topology = v.topology.parse().unwrap();
                let layout = topo.layout(nodes as usize, ports as usize).unwrap();
                // A clos is a real one: sqrt(N) leaves and sqrt(N) spines.
                let want = if fabric == Fabric::Star { 1 } else { ports as usize };
                assert_eq!(layout.switches, want, "{} {nodes}", fabric.name());
                // Each node sends to 4 distinct others and hears from 4.
                let mut into = vec![0; nodes as usize];
                for f in &v.flows {
                    assert_ne!(f.src_node, f.dst_node);
                    into[f.dst_node as usize] += 1;
                }
                assert!(into.iter().all(|&n| n == 4), "{} {nodes}", fabric.name());
            }
        }
    }

    fn point(fabric: Fabric, nodes: u64, ns: f64) -> Point {
        Point {
            fabric,
            nodes,
            packets: 1000,
            events: 9000,
            ns_per_packet: ns,
            best_ns_per_packet: ns * 0.9,
            runs: 3,
        }
    }

    #[test]
    fn the_table_gives_each_point_its_ratio_to_the_16_node_run_of_its_fabric() {
        let pts = vec![
            point(Fabric::Star, 16, 1000.0),
            point(Fabric::Star, 1024, 1500.0),
            point(Fabric::Clos, 16, 2000.0),
            point(Fabric::Clos, 1024, 5000.0),
        ];
        assert_eq!(ratio(&pts, &pts[1]), 1.5);
        assert_eq!(ratio(&pts, &pts[3]), 2.5);
        let t = table(&pts);
        assert!(
            t.contains("    16         1000     1.000   1.00x         2000     0.500   1.00x"),
            "{t}"
        );
        assert!(
            t.contains("  1024         1500     0.667   1.50x         5000     0.200   2.50x"),
            "{t}"
        );
        assert!(t.contains("    64            -"), "{t}");
        let dir = std::env::temp_dir().join(format!("xtask-scale-{}", std::process::id()));
        let (svg, csv) = write_outputs(&dir, &pts).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("star (median)"), "{svg:.80}");
        assert!(svg.contains("clos: 2x its 16-node cost"));
        let csv = std::fs::read_to_string(csv).unwrap();
        assert!(csv.contains("\nclos,1024,1000,9000,5000.0,4500.0,3,2.500\n"), "{csv}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
