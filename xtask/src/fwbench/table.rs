//! The firmware bench's printed table, its comparison without offloads
//! and its SVG (a bar per workload, split by machine).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::report::{FirmwareReport, Workload, WORKLOADS};
use super::Clock;

/// Causes of pass the table shows per workload.
const TOP_CAUSES: usize = 6;

/// The workloads of `doc` in the report's order.
fn ordered(doc: &FirmwareReport) -> Vec<(&'static str, &Workload)> {
    WORKLOADS.iter().filter_map(|&n| doc.workloads.get(n).map(|w| (n, w))).collect()
}

fn k(x: f64) -> String {
    if x >= 100_000.0 {
        format!("{:.0}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

/// The table of `doc` (with the functions when `functions`).
pub fn render(doc: &FirmwareReport, clocks: &[Clock], functions: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n== the MCP's instructions, counted on the image under QEMU ({}){}",
        doc.image.icount,
        if doc.image.quick { ", --quick" } else { "" }
    );
    let _ = writeln!(
        s,
        "image {} ({} B, features {}), commit {}",
        doc.image.elf,
        doc.image.size_bytes,
        doc.image.features.join(", "),
        doc.image.commit
    );
    let _ = writeln!(
        s,
        "per message over all NICs: busy = passes that did work, all = every pass; per packet: a NIC's busy\n\
         instructions over the data packets it sent or received (a ping-pong's message: one way)\n"
    );
    let _ = writeln!(
        s,
        "{:<19} {:>7} {:>9} {:>9} {:>19} {:>7} {:>9}",
        "workload", "msgs", "busy/msg", "all/msg", "per packet per NIC", "idle", "acks/msg"
    );
    for (name, w) in ordered(doc) {
        let pp: Vec<String> = w.per_packet.iter().map(|&p| k(p)).collect();
        let _ = writeln!(
            s,
            "{:<19} {:>7} {:>9} {:>9} {:>19} {:>7.0} {:>9.2}",
            name,
            w.messages,
            k(w.busy_per_message),
            k(w.all_per_message),
            pp.join(" "),
            w.idle_pass,
            w.acks_per_message
        );
    }
    // (The many-ports run is left out when `--workload` names others.)
    let many = |x: f64| match x {
        x if x > 0.0 => format!("{x:.0}"),
        _ => "not measured".to_string(),
    };
    let _ = writeln!(
        s,
        "\nidle pass (the mean of the passes that did no work): {:.0} instructions with 1 port and 1 stream; {} \
         with 8 ports and 128 streams",
        doc.idle.one_port,
        many(doc.idle.eight_ports_128_streams)
    );
    if doc.idle.quiet_one_port > 0.0 {
        let _ = writeln!(
            s,
            "quiet pass (no news: the summary read and nothing more): {:.0} with 1 port and 1 stream; {} with 8 ports \
             and 128 streams",
            doc.idle.quiet_one_port,
            many(doc.idle.quiet_eight_ports_128_streams)
        );
    }
    // Passes by kind, when the image counts them.
    if ordered(doc).iter().any(|(_, w)| !w.pass_kinds.is_empty()) {
        let _ = writeln!(
            s,
            "\npasses by kind, per message over all NICs (x mean instructions a pass); quiet: no news that gives\n\
             work (none, or completions no machine waits for), the summary read; completions: only the engines'\n\
             completions; whole: the machines stepped; idle: the passes of any kind that did no work\n\
             {:<19} {:>16} {:>16} {:>16} {:>16}",
            "workload", "quiet", "completions", "whole", "of them idle"
        );
        for (name, w) in ordered(doc) {
            let cell = |n: f64, i: f64| format!("{n:.2} x {i:.0}");
            let mut cells: Vec<String> = w
                .pass_kinds
                .iter()
                .map(|f| cell(f.passes_per_message, f.instructions_per_pass))
                .collect();
            // (Their mean is the idle pass's.)
            let idle: f64 = w.pass_kinds.iter().map(|f| f.idle_passes_per_message).sum();
            cells.push(cell(idle, w.idle_pass));
            let _ = writeln!(
                s,
                "{:<19} {}",
                name,
                cells.iter().map(|c| format!("{c:>16}")).collect::<Vec<_>>().join(" ")
            );
        }
    }
    // Passes by cause, when the image counts them.
    if ordered(doc).iter().any(|(_, w)| !w.pass_causes.is_empty()) {
        let _ = writeln!(
            s,
            "\npasses by cause, over all NICs, the {TOP_CAUSES} that cost most a message: the kind of pass, then what ran\n\
             it (hdma, txdma: the engines' completions; rx: arrivals; host: host writes; ports: a port opened\n\
             or closed; timer: a timer due; left: work the pass before left); passes per message x mean\n\
             instructions = instructions per message (idle: passes per message that did no work)"
        );
        for (name, w) in ordered(doc) {
            for (i, c) in w.pass_causes.iter().take(TOP_CAUSES).enumerate() {
                let _ = writeln!(
                    s,
                    "{:<19} {:<32} {:>6.2} x {:>6.0} = {:>7.0}   (idle {:.2})",
                    if i == 0 { name } else { "" },
                    c.cause,
                    c.passes_per_message,
                    c.instructions_per_pass,
                    c.instructions_per_message,
                    c.idle_passes_per_message
                );
            }
        }
    }
    // By machine, when attributed.
    let attributed = ordered(doc).iter().any(|(_, w)| w.by_machine.total() > 0.0);
    if attributed {
        let _ = writeln!(
            s,
            "\nby machine and offload, instructions per message of all passes (core: the scheduler itself; an\nout-of-line helper such as memcpy is charged to the machine that called it). Counted by the QEMU\nplugin: `plugin` is their sum, beside `all/msg` as the image counted it.\n{:<19} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}   by offload",
            "workload", "sdma", "send", "recv", "rdma", "core", "plugin", "all/msg"
        );
        for (name, w) in ordered(doc) {
            let m = &w.by_machine;
            let off: Vec<String> = w
                .by_offload
                .iter()
                .filter(|(_, &v)| v > 0.0)
                .map(|(n, &v)| format!("{n} {}", k(v)))
                .collect();
            let _ = writeln!(
                s,
                "{:<19} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}   {}",
                name,
                k(m.sdma),
                k(m.send),
                k(m.recv),
                k(m.rdma),
                k(m.core),
                k(w.attributed_per_message),
                k(w.all_per_message),
                if off.is_empty() { "-".to_string() } else { off.join(", ") }
            );
        }
    }
    // Microseconds at each profile's clock.
    let _ = write!(
        s,
        "\nbusy us per message (per packet, first NIC) at each profile's NIC clock\n{:<19}",
        "workload"
    );
    for c in clocks {
        let _ = write!(s, " {:>22}", c.profile);
    }
    let _ = writeln!(s);
    for (name, w) in ordered(doc) {
        let _ = write!(s, "{name:<19}");
        for c in clocks {
            match w.us.get(&c.profile) {
                Some(u) => {
                    let pp = u.per_packet.first().copied().unwrap_or(0.0);
                    let _ = write!(s, " {:>12.1} ({:>7.1})", u.busy_per_message, pp);
                }
                None => {
                    let _ = write!(s, " {:>22}", "-");
                }
            }
        }
        let _ = writeln!(s);
    }
    let notes: Vec<String> = clocks
        .iter()
        .map(|c| {
            format!(
                "{} {:.0} MHz, {} cycle(s) per instruction{}",
                c.profile,
                c.hz / 1e6,
                c.cpi,
                if c.cpi_given { "" } else { " (the profile names none: 1 assumed)" }
            )
        })
        .collect();
    let _ = writeln!(s, "({})", notes.join("; "));
    if functions {
        s += &super::functions_table(doc);
    }
    s
}

/// Is workload `name` measured with no offloads compiled in, beside the
/// same with all of them? The unicast ones: not the multicasts (a
/// multicast descriptor is an unknown kind to an MCP without the
/// multicast offload) nor `rate` (its flow asks for a rate); selective
/// repeat falls back to go-back-N without its offload, as the stream
/// would.
pub fn compared(name: &str) -> bool {
    WORKLOADS.contains(&name) && !name.starts_with("mcast-") && name != "rate"
}

/// The unicast workloads with and without offloads, side by side.
pub fn compare(with: &FirmwareReport, without: &FirmwareReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n== offloads compiled in against none (unicast; busy instructions per message)\n{:<19} {:>10} {:>10} {:>8}",
        "workload", "offloads", "none", "ratio"
    );
    for name in WORKLOADS.into_iter().filter(|n| compared(n)) {
        if let (Some(a), Some(b)) = (with.workloads.get(name), without.workloads.get(name)) {
            let _ = writeln!(
                s,
                "{:<19} {:>10.0} {:>10.0} {:>8.3}",
                name,
                a.busy_per_message,
                b.busy_per_message,
                a.busy_per_message / b.busy_per_message
            );
        }
    }
    // (Not measured when `--workload` named others.)
    if with.idle.one_port > 0.0 && without.idle.one_port > 0.0 {
        let _ = writeln!(
            s,
            "{:<19} {:>10.0} {:>10.0} {:>8.3}",
            "idle pass",
            with.idle.one_port,
            without.idle.one_port,
            with.idle.one_port / without.idle.one_port
        );
    }
    s
}

const MACHINES: [&str; 5] = ["sdma", "send", "recv", "rdma", "core"];

/// A bar per workload (port close left out: its scale is another's),
/// instructions per message of all passes split by machine (the busy
/// passes' instructions, in one bar, where nothing was attributed).
pub fn plot(doc: &FirmwareReport, path: &Path) -> crate::Result<()> {
    let e = |err: &dyn std::fmt::Display| format!("plot {}: {err}", path.display());
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|x| e(&x))?;
    }
    let bars: Vec<(&str, [f64; 5], f64)> = ordered(doc)
        .into_iter()
        .filter(|(n, _)| *n != "port-close")
        .map(|(n, w)| {
            let m = &w.by_machine;
            (n, [m.sdma, m.send, m.recv, m.rdma, m.core], w.busy_per_message)
        })
        .collect();
    let top = bars.iter().map(|b| b.2.max(b.1.iter().sum())).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let n = bars.len().max(1) as f64;
    let names: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "MCP instructions per message of all passes, by machine (QEMU -icount)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..top)
        .map_err(|x| e(&x))?;
    let label = |v: &f64| {
        let i = v.floor() as usize;
        if (v - v.floor() - 0.5).abs() < 1e-6 {
            names.get(i).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    ch.configure_mesh()
        .x_labels(2 * bars.len() + 1)
        .x_label_formatter(&label)
        .y_desc("instructions per message")
        .disable_x_mesh()
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (_, parts, busy)) in bars.iter().enumerate() {
        let x0 = i as f64 + 0.15;
        let x1 = i as f64 + 0.85;
        if parts.iter().sum::<f64>() <= 0.0 {
            ch.draw_series([Rectangle::new([(x0, 0.0), (x1, *busy)], BLUE.mix(0.6).filled())])
                .map_err(|x| e(&x))?;
            continue;
        }
        let mut y = 0.0;
        for (j, &v) in parts.iter().enumerate() {
            let c = Palette99::pick(j).to_rgba();
            ch.draw_series([Rectangle::new([(x0, y), (x1, y + v)], c.filled())])
                .map_err(|x| e(&x))?;
            y += v;
        }
    }
    for (j, m) in MACHINES.iter().enumerate() {
        let c = Palette99::pick(j).to_rgba();
        ch.draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(|x| e(&x))?
            .label(*m)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}
