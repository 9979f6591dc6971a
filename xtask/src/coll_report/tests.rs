use super::model::rounds;
use super::run::{fabric, scenario_toml};
use super::*;

#[test]
fn the_rounds_are_the_algorithms() {
    let r = |alg, ns: &[u16]| ns.iter().map(|&n| rounds(alg, n)).collect::<Vec<_>>();
    assert_eq!(r("dissemination", &[2, 4, 12, 16, 1024]), [1, 2, 4, 4, 10]);
    assert_eq!(r("pairwise", &[2, 4, 12, 16, 1024]), [1, 2, 5, 4, 10]);
    assert_eq!(r("tree", &[2, 4, 12, 16, 1024]), [2, 4, 8, 8, 20]);
}

#[test]
fn large_groups_take_the_multicast_reports_fabrics() {
    assert_eq!(fabric(16), None);
    assert_eq!(fabric(64), Some(("star", 64)));
    assert_eq!(fabric(256), Some(("clos", 32)));
    assert_eq!(fabric(1024), Some(("clos", 64)));
}

#[test]
fn every_point_is_a_valid_scenario() {
    let plan = Plan::full();
    let specs = plan.specs();
    // 3 profiles x 2 schemes x 3 algorithms: 8 barrier sizes (the sweep's 7
    // and 12), 13 vector sizes; the summary's 256-node allreduces.
    assert_eq!(specs.len(), 18 * (8 + 13) + 2 * 6);
    for s in &specs {
        let text = scenario_toml(s, plan.count(s.kind, s.n, s.elements));
        let v = nic_emu::scenario::Scenario::parse_validated(&text)
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", s.label()));
        assert_eq!(v.flows.len(), 1, "{text}");
    }
    assert_eq!(plan.count(Kind::Barrier, 1024, 0), 100);
    assert_eq!(plan.count(Kind::Allreduce, 16, 4096), 50);
    let quick = Plan::quick();
    assert_eq!(quick.count(Kind::Barrier, 256, 0), 50);
    assert_eq!(quick.count(Kind::Allreduce, 16, 512), 20);
    assert_eq!(quick.count(Kind::Allreduce, 16, 4096), 10);
    assert_eq!(quick.count(Kind::Allreduce, 256, 1), 10);
}

/// A report of the fewest points: the sweeps at 2 and 4 members and of
/// 8 B and 32 B, with what the published comparison, the summary and the
/// model need besides.
fn tiny() -> Plan {
    Plan {
        name: "test",
        barrier_sizes: vec![2, 4],
        allreduce_elements: vec![1, 4],
        barrier_count: 3,
        large_barrier_count: 3,
        allreduce_count: 3,
        large_allreduce_count: 2,
    }
}

#[test]
fn a_tiny_report_has_its_tables_and_labelled_plots() {
    let dir = std::env::temp_dir().join(format!("xtask-coll-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (printed, failed) = write(&dir, &tiny(), true).unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert_eq!(failed, 0, "{md}");
    for text in [&md, &printed] {
        assert!(text.contains("## The published NIC-based barrier"), "{text}");
        assert!(
            text.contains("| published testbed | profile simulated | nodes | published NIC (us)")
        );
        assert!(text.contains("| LANai 4.3 | `lanai4-gm` | 16 | 102.14 | 1.78 |"), "{text}");
        assert!(text.contains("| LANai 7.2 | `lanai9-gm` (the closest profile"), "{text}");
        assert!(text.contains("Fast NIC-Based Barrier over Myrinet/GM"));
        assert!(text.contains("## Summary: `modern`"));
        for row in ["| 16 | barrier |", "| 256 | allreduce 8 B |", "| 256 | allreduce 256 B |"] {
            assert!(text.contains(row), "{row}: {text}");
        }
    }
    assert!(md.contains("## A LogP-style model of the barrier"));
    assert!(md.contains("1,024 members are left out"));
    assert!(md.contains("larger vectors are not supported yet"));
    for profile in PROFILES {
        for (kind, algs, x, y) in [
            ("barrier", BARRIER_ALGS, "group size (members", "time per barrier (µs)"),
            ("allreduce", ALLREDUCE_ALGS, "vector size per member", "time per allreduce (µs"),
        ] {
            let file = format!("{kind}-{profile}.svg");
            assert!(md.contains(&format!("]({file})")), "{file} not in the report");
            let svg = std::fs::read_to_string(dir.join(&file)).unwrap();
            for label in [x, y] {
                assert!(svg.contains(label), "{file}: no axis label {label}");
            }
            for scheme in SCHEMES {
                for alg in algs {
                    let label = format!(">\n{scheme} {alg}\n<");
                    assert_eq!(svg.matches(&label).count(), 1, "{file}: legend {scheme} {alg}");
                }
            }
        }
    }
    let csv = std::fs::read_to_string(dir.join("points.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + tiny().specs().len());
    assert!(dir.join("scenarios/barrier-lanai4-gm-nic-pairwise-n16.toml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quick_applies_to_the_collectives_report_only() {
    use clap::Parser;
    let parse = |args: &[&str]| crate::Cli::try_parse_from(args.iter().copied());
    assert!(parse(&["xtask", "report", "collectives", "--quick"]).is_ok());
    let e = report(None, Some("modern".into()), crate::report::ReportBackend::Sim, true, true);
    assert!(e.unwrap_err().contains("--profile does not apply"));
    let e = report(None, None, crate::report::ReportBackend::Live, true, true);
    assert!(e.unwrap_err().contains("simulator only"));
}

#[test]
fn a_loop_cut_short_is_a_problem_and_a_slow_collective_a_stall() {
    let s = Spec {
        profile: "modern",
        kind: Kind::Barrier,
        scheme: "nic",
        alg: "tree",
        n: 4,
        elements: 0,
    };
    let text = scenario_toml(&s, 5);
    let p = run::measure(&text, 5).unwrap();
    assert_eq!(p.problem, None, "{p:?}");
    assert!(p.interval_us > 0.0 && p.p50_us > 0.0 && !p.stalled(), "{p:?}");
    let cut = run::measure(&format!("{text}\n[run]\nlimit_ms = 0.001\n"), 5).unwrap();
    let why = cut.problem.unwrap_or_default();
    assert!(why.contains("of 5 collectives complete at every member"), "{why}");
    let slow = run::Point { max_us: 4.1 * p.p50_us, ..p };
    assert!(slow.stalled());
}
