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
    // and 12), 18 vector sizes (8 B to 1 MiB, the acceptance figure's
    // among them); the summary's 256-node allreduces. Assisted, 3
    // profiles: 3 barrier algorithms at the 7 sizes up to 256, 2
    // allreduce algorithms (no ring) at the 11 sizes up to 8 KiB, and the
    // summary's 256-node allreduces (8 B, 256 B).
    assert_eq!(specs.len(), 18 * (8 + 18) + 2 * 6 + 9 * 7 + 6 * 11 + 2 * 2);
    assert!(specs.iter().all(|s| runs(s.scheme, s.alg, s.kind, s.n, s.elements)));
    assert_eq!(plan.allreduce_elements.last(), Some(&ACCEPT_ELEMENTS));
    assert_eq!(8 * ACCEPT_ELEMENTS, 1 << 20);
    for s in &specs {
        let text = scenario_toml(s, plan.count(s.kind, s.n, s.elements));
        let v = nic_emu::scenario::Scenario::parse_validated(&text)
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", s.label()));
        assert_eq!(v.flows.len(), 1, "{text}");
    }
    assert_eq!(plan.count(Kind::Barrier, 1024, 0), 100);
    let counts = |p: &Plan, es: &[u32]| {
        es.iter().map(|&e| p.count(Kind::Allreduce, 16, e)).collect::<Vec<_>>()
    };
    // 8 B, 32 KiB, 64 KiB, 128 KiB, 256 KiB, 512 KiB, 1 MiB.
    let sizes = [1, 4096, 8192, 16384, 32768, 65536, ACCEPT_ELEMENTS];
    assert_eq!(counts(&plan, &sizes), [50, 50, 25, 12, 6, 5, 5]);
    assert_eq!(plan.count(Kind::Allreduce, 256, 32), 50);
    // The time limits: 1 s at least, 100 ms a barrier; 1 MiB on
    // lanai4-gm (the NIC CPU's 150 cycles at 33 MHz per floating-point
    // element) about 12.7 s an allreduce, on modern 0.76 s.
    let mib = |profile| Spec {
        profile,
        kind: Kind::Allreduce,
        scheme: "nic",
        alg: "pairwise",
        n: 16,
        elements: ACCEPT_ELEMENTS,
    };
    assert_eq!(run::limit_ms(&mib("lanai4-gm"), 3), 38013);
    assert_eq!(run::limit_ms(&mib("modern"), 5), 3804);
    assert_eq!(run::limit_ms(&specs[0], 100), 10_000);
    assert_eq!(run::limit_ms(&specs[0], 3), 1000);
    let quick = Plan::quick();
    assert_eq!(quick.count(Kind::Barrier, 256, 0), 50);
    assert_eq!(counts(&quick, &[1, 512, 1024, 4096, ACCEPT_ELEMENTS]), [20, 20, 10, 3, 3]);
    assert_eq!(quick.count(Kind::Allreduce, 256, 1), 10);
    // The quick plan stops its sweep below 1 MiB, but runs the acceptance
    // figure's points on modern.
    let q = quick.specs();
    assert!(!quick.allreduce_elements.contains(&ACCEPT_ELEMENTS));
    let accept = |s: &&Spec| s.kind == Kind::Allreduce && s.elements == ACCEPT_ELEMENTS;
    assert_eq!(q.iter().filter(accept).count(), 6);
    assert!(q.iter().filter(accept).all(|s| s.profile == SUMMARY_PROFILE && s.n == 16));
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
        allreduce_loop_bytes: 24,
        min_allreduce_count: 2,
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
    assert!(!md.contains("COLL_VECTOR") && !md.contains("not supported yet"), "{md}");
    for words in [
        "`lanai4-gm` (1 MiB of SRAM) 1 KiB chunks, 1,024 of them in 1 MiB",
        "`lanai9-gm` (2 MiB of SRAM) 4 KiB chunks, 256 of them in 1 MiB",
        "`modern` (8 MiB of SRAM) 4 KiB chunks",
        "The host scheme sends the whole vector in one message per step",
        "A vector has at most 4,095 chunks",
        "Loops of 3 allreduces, shorter for large vectors",
        "at least 2 allreduces): 2 of 32 B. The acceptance figure's 1 MiB allreduces on \
         `modern` (below its table), beyond this plan's sweep, run 2 a loop.",
    ] {
        assert!(md.contains(words), "{words}: {md}");
    }
    let accept = "**Acceptance: 1 MiB f64 allreduce, 16 members, `modern`:** best NIC-based ";
    assert_eq!(md.matches(accept).count(), 1, "{md}");
    assert!(printed.contains(accept), "{printed}");
    let line = md.lines().find(|l| l.starts_with(accept)).unwrap();
    assert!(line.contains("speed-up ") && line.contains("target at least 1.5x: "), "{line}");
    assert!(line.contains("bit-identical to the reference in all 6 loops"), "{line}");
    let modern = &md[md.find("### `modern`\n\n![modern: allreduce]").unwrap()..];
    assert!(modern.find(accept).unwrap() < modern.find("Best NIC-based against").unwrap());
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
                for alg in algs.iter().filter(|&&a| !(scheme == "assisted" && a == "ring")) {
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
fn quick_applies_to_the_collectives_and_reliability_reports_only() {
    use clap::Parser;
    let parse = |args: &[&str]| crate::Cli::try_parse_from(args.iter().copied());
    assert!(parse(&["xtask", "report", "collectives", "--quick"]).is_ok());
    assert!(parse(&["xtask", "report", "reliability", "--quick"]).is_ok());
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
    assert!(text.ends_with("\n[run]\nlimit_ms = 1000\n"), "{text}");
    let cut = run::measure(&text.replace("limit_ms = 1000", "limit_ms = 0.001"), 5).unwrap();
    let why = cut.problem.unwrap_or_default();
    assert!(why.contains("of 5 collectives complete at every member"), "{why}");
    let slow = run::Point { max_us: 4.1 * p.p50_us, ..p };
    assert!(slow.stalled());
}

#[test]
fn the_tables_mark_wrong_results_and_loops_not_clean() {
    let spec = |scheme, alg| Spec {
        profile: "modern",
        kind: Kind::Allreduce,
        scheme,
        alg,
        n: 16,
        elements: ACCEPT_ELEMENTS,
    };
    let clean = run::Point {
        count: 3,
        interval_us: 700.0,
        p50_us: 700.0,
        max_us: 710.0,
        retransmits: 0,
        nacks: 0,
        timeouts: 0,
        results_ok: Some(true),
        results_wrong: 0,
        nic_cpu_us: Some(560.0),
        wall_s: 0.0,
        problem: None,
    };
    let mut r = Results::default();
    r.insert(spec("nic", "ring"), clean.clone());
    let wrong = run::Point { results_ok: Some(false), results_wrong: 2, ..clean.clone() };
    r.insert(spec("nic", "pairwise"), run::Point { problem: Some("wrong".into()), ..wrong });
    let cut = run::Point { interval_us: 900.0, problem: Some("cut".into()), ..clean.clone() };
    r.insert(spec("host", "ring"), cut);
    r.insert(spec("host", "pairwise"), run::Point { interval_us: 1400.0, ..clean });
    let mut md = String::new();
    let cols = [("1 MiB".to_string(), 16, ACCEPT_ELEMENTS)];
    super::md::table(&mut md, &r, "modern", Kind::Allreduce, &ALLREDUCE_ALGS, &cols);
    assert!(md.contains("| nic | ring | 700.0 |"), "{md}");
    assert!(md.contains("| nic | pairwise | 700.0† |"), "{md}");
    assert!(md.contains("| host | ring | -‡ |"), "{md}");
    assert!(md.contains("| nic | binomial | - |"), "{md}");
    assert!(md.contains("† Some member's result differed from the reference's"), "{md}");
    assert!(md.contains("‡ The loop did not run clean"), "{md}");
    let line = super::allreduce::acceptance(&r);
    assert!(line.contains("best NIC-based 700.0 us (ring), best host-based 1400.0 us"), "{line}");
    assert!(line.contains("speed-up 2.00x (best host / best NIC; target at least 1.5x: met)"));
    assert!(line.contains("results NOT all the reference's: nic pairwise: 2 wrong"), "{line}");
    // The bound the NIC's own work sets: 1400 / 560.
    assert!(line.contains("keeps each member's NIC CPU busy 560.0 us"), "{line}");
    assert!(line.contains("at most 2.50x on this profile's prices"), "{line}");
}
