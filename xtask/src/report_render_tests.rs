//! Each simulator report rendered whole (the reliability report in its
//! quick plan), then read as a reader of the paper would: every plot the
//! Markdown shows exists, says what its axes are and in which unit, and
//! lists each of its series once in its legend. (The collectives report
//! has its own such test, with a tiny plan: coll_report/tests.rs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::plot::svg_texts;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-render-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every SVG of `dir` with its texts; each must be shown by `report.md`,
/// and each one `report.md` shows must exist.
fn plots(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "svg") {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            assert!(md.contains(&format!("]({name})")), "{name} is not in the report");
            out.insert(name, svg_texts(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    for shown in md.split("](").skip(1).filter_map(|s| s.split(')').next()) {
        if shown.ends_with(".svg") {
            assert!(out.contains_key(shown), "the report shows {shown}, which was not written");
        }
    }
    out
}

/// What every plot must hold: no text twice but tick values (one legend
/// entry per series), each of `labels` once, and no "us" for µs.
fn check(file: &str, texts: &[String], labels: &[&str]) {
    let mut seen = BTreeMap::new();
    for t in texts.iter().filter(|t| t.parse::<f64>().is_err() && !t.is_empty()) {
        *seen.entry(t.as_str()).or_insert(0) += 1;
    }
    for (t, n) in &seen {
        assert_eq!(*n, 1, "{file}: `{t}` appears {n} times: {texts:?}");
    }
    for l in labels {
        assert!(seen.contains_key(l), "{file}: no `{l}` in {texts:?}");
    }
    for t in texts {
        assert!(!t.contains("(us") && !t.contains(" us)"), "{file}: `{t}` says us for µs");
    }
}

/// Where (x, in pixels) the text `label` of an SVG starts.
fn text_x(svg: &str, label: &str) -> Option<f64> {
    let at = svg.find(&format!(">\n{label}\n</text>"))?;
    let open = svg[..at].rfind("<text x=\"")? + "<text x=\"".len();
    svg[open..].split('"').next()?.parse().ok()
}

/// The smallest tick value of `file`'s axis whose ticks lie in `range`.
fn least_tick(texts: &[String], range: std::ops::Range<f64>) -> f64 {
    texts
        .iter()
        .filter_map(|t| t.parse::<f64>().ok())
        .filter(|v| range.contains(v))
        .fold(f64::MAX, f64::min)
}

#[test]
fn the_rate_control_report_renders_with_labelled_plots_and_legends_beside() {
    let dir = out_dir("rate-control");
    let md = crate::report::rate_control("lanai4-gm", &dir, true).unwrap();
    std::fs::write(dir.join("report.md"), &md).unwrap();
    let plots = plots(&dir);
    let names: Vec<&str> = plots.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["best-effort.svg", "idt-sweep.svg", "node-capacity.svg", "shares.svg"]);
    let t = &plots["idt-sweep.svg"];
    check("idt-sweep.svg", t, &["measured", "IDT (RTC ticks)", "bandwidth (MB/s)", "T"]);
    assert!(t.iter().any(|l| l.starts_with("Bmax = ") && l.ends_with(" ticks (model)")), "{t:?}");
    // The bandwidth axis starts near the slowest point (about 10 MB/s at
    // IDT 8T), not at 0.
    assert!(least_tick(t, 1.0..1000.0) >= 5.0, "{t:?}");
    check(
        "node-capacity.svg",
        &plots["node-capacity.svg"],
        &[
            "measured",
            "capacity the bandwidth manager uses (model)",
            "B receives (MB/s)",
            "B sends at most (MB/s)",
        ],
    );
    check(
        "shares.svg",
        &plots["shares.svg"],
        &["requested / expected", "achieved", "bandwidth (MB/s)", "experiment and flow"],
    );
    check(
        "best-effort.svg",
        &plots["best-effort.svg"],
        &[
            "be (best effort)",
            "p40 (premium)",
            "p20 (premium)",
            "simulated time (ms)",
            "dispatched (MB/s, 2 ms bins)",
            "phase 2",
            "phase 4",
        ],
    );
    // Every legend is beside its plot, right of its 750 pixels.
    for (file, entries) in [
        ("best-effort.svg", &["be (best effort)", "p40 (premium)", "p20 (premium)"][..]),
        ("idt-sweep.svg", &["measured"]),
        ("node-capacity.svg", &["measured", "capacity the bandwidth manager uses (model)"]),
        ("shares.svg", &["requested / expected", "achieved"]),
    ] {
        let svg = std::fs::read_to_string(dir.join(file)).unwrap();
        for e in entries {
            let x = text_x(&svg, e).unwrap_or_else(|| panic!("{file}: no {e}"));
            assert!(x >= 750.0, "{file}: legend entry {e} at x = {x}, over the plot");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_multicast_report_renders_each_scheme_with_its_models_and_spread() {
    let dir = out_dir("multicast");
    crate::mcast::report(Some(dir.clone()), None, true).unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!md.contains("**Deliveries that failed:**"), "{md}");
    let plots = plots(&dir);
    assert_eq!(plots.len(), 10, "{:?}", plots.keys());
    let algs = ["separate", "serial", "binomial", "binary", "k-binomial"];
    for scheme in ["host", "nic", "assisted", "nic-cached"] {
        for size in ["2B", "64KiB"] {
            let file = format!("latency-{size}-{scheme}.svg");
            let t = &plots[&file];
            let mut labels = vec!["G (members)", "latency (µs)"];
            labels.extend(algs);
            check(&file, t, &labels);
            let models: Vec<&String> = t.iter().filter(|l| l.ends_with(" (model)")).collect();
            // The model is the small-message one: 2 B only.
            assert_eq!(models.len(), if size == "2B" { 5 } else { 0 }, "{file}: {t:?}");
            // G runs 4 to 16: the axis starts near 4.
            let x_from = least_tick(t, 0.0..20.0);
            assert!((3.0..=4.0).contains(&x_from), "{file}: x from {x_from}: {t:?}");
        }
    }
    let schemes = ["host binomial", "nic binomial", "assisted binomial", "nic-cached binomial"];
    let mut labels = vec!["G (members)", "root CPU busy / completion time (fraction)"];
    labels.extend(schemes);
    check("root-cpu.svg", &plots["root-cpu.svg"], &labels);
    // Data under 0.1 on an axis that does not run to 1.
    let top = plots["root-cpu.svg"]
        .iter()
        .filter_map(|t| t.parse::<f64>().ok())
        .filter(|v| *v < 1.0)
        .fold(0.0, f64::max);
    assert!(top < 0.5, "root CPU axis to {top}");
    labels[1] = "tree creation time (µs)";
    check("tree-time.svg", &plots["tree-time.svg"], &labels);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_reliability_report_renders_both_modes_with_error_bars() {
    let dir = out_dir("reliability");
    let failed = crate::reliability::write(&dir, &crate::reliability::Plan::quick(), true).unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let plots = plots(&dir);
    assert_eq!(plots.len(), 12, "{:?}", plots.keys());
    for (file, t) in &plots {
        let y = if file.starts_with("goodput") {
            "goodput (MB/s, 10^6 B/s)"
        } else if file.starts_with("p99") {
            "p99 latency (µs)"
        } else {
            "retransmitted (bytes)"
        };
        check(file, t, &["go-back-n", "selective", "link loss (%)", y]);
    }
    // Two seeds a point: the goodput plots carry error bars (a capped
    // line per point and mode beside the two curves).
    let svg = std::fs::read_to_string(dir.join("goodput-all-to-all-modern.svg")).unwrap();
    assert!(svg.matches("<polyline").count() >= 2 + 3 * 2 * 3, "no error bars");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("(quick plan), seeds [1, 2]"), "{md}");
    assert!(md.contains("## Heavy loss: 500 x 64 B on one stream"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}
