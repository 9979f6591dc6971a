//! `cargo xtask bench --firmware`: the MCP image's instructions counted
//! exactly under QEMU, per workload.
//!
//! The image is built with its instruction counter (feature `poll-stats`:
//! `minstret` around each pass and the sum of the passes' `mcp::Work`,
//! `image`), each workload runs on a qemu cluster with `-icount shift=0`
//! (`workloads`), the counters are read from the guests' RAM files before
//! and after the measured window (`counters`), and the figures are
//! printed (`table`) and saved as the document of `report`.

pub mod counters;
pub mod image;
pub mod profile;
#[allow(dead_code)] // its readers: the pricing side, the tests
pub mod report;
pub mod table;
pub mod workloads;

use std::path::Path;
use std::process::ExitCode;

use crate::fw::{self, Offloads};
use image::Image;
use report::{FirmwareReport, ImageInfo, Micros, Workload};
use workloads::Window;

/// What `bench --firmware` was asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub quick: bool,
    pub json: bool,
    pub functions: bool,
    /// Also the top source lines (`--lines`).
    pub lines: bool,
    /// How many functions and source lines to list (`--top`; default
    /// [`TOP_FUNCTIONS`] and [`TOP_LINES`]).
    pub top: Option<usize>,
    pub no_offloads: bool,
    pub quiet: bool,
    /// Only these workloads (all when empty).
    pub only: Vec<String>,
    /// Measure this image (built with `poll-stats`) instead of building one.
    pub image: Option<std::path::PathBuf>,
    /// Attribute only this NIC's instructions (`--nic`): the functions,
    /// lines and split by machine of one side of a workload.
    pub nic: Option<usize>,
}

/// A profile's NIC clock: its name, cycles a second and cycles per
/// instruction (`nic_cpu.cycles_per_instruction` where the profile has
/// it, else 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Clock {
    pub profile: String,
    pub hz: f64,
    pub cpi: f64,
    pub cpi_given: bool,
}

/// Every built-in profile's clock.
pub fn clocks(root: &Path) -> crate::Result<Vec<Clock>> {
    use nic_emu::profile::Profile;
    Profile::names()
        .iter()
        .map(|name| {
            let p = Profile::load(name).map_err(|e| e.to_string())?;
            let text = std::fs::read_to_string(root.join(format!("nic-emu/profiles/{name}.toml")))
                .unwrap_or_default();
            let cpi = cpi_of(&text);
            Ok(Clock {
                profile: name.to_string(),
                hz: p.nic.cpu_hz as f64,
                cpi: cpi.unwrap_or(1.0),
                cpi_given: cpi.is_some(),
            })
        })
        .collect()
}

/// `cycles_per_instruction = X` in a profile's `[nic_cpu]` table.
pub fn cpi_of(toml: &str) -> Option<f64> {
    let mut in_cpu = false;
    for line in toml.lines() {
        let l = line.split('#').next().unwrap_or("").trim();
        if l.starts_with('[') {
            in_cpu = l == "[nic_cpu]";
        } else if in_cpu {
            if let Some(v) = l.strip_prefix("cycles_per_instruction") {
                return v.trim_start().strip_prefix('=')?.trim().parse().ok();
            }
        }
    }
    None
}

/// A workload's quiet pass that read the summary and nothing more (no
/// completions taken or left), instructions (0 when the image does not
/// count passes by cause): the same code every time, so the schedule
/// does not move it.
fn quiet(w: &Workload) -> f64 {
    w.pass_causes.iter().find(|c| c.cause == "quiet").map_or(0.0, |c| c.instructions_per_pass)
}

/// Functions listed per workload.
pub const TOP_FUNCTIONS: usize = 15;
/// Source lines in `--lines`.
pub const TOP_LINES: usize = 40;

/// The `n` entries of `counts` that ran the most instructions, per
/// message (of `messages`), most first (ties by name).
fn ranked(
    counts: &std::collections::BTreeMap<String, u64>,
    messages: u64,
    n: usize,
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> =
        counts.iter().map(|(f, &x)| (f.clone(), counters::per(x, messages))).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// A workload's entry of the document from its window (the split by
/// machine through `sym`, when the plugin counted).
pub fn workload(
    w: &Window,
    clocks: &[Clock],
    sym: Option<(&profile::Symbolizer, usize)>,
    top: Option<usize>,
) -> Workload {
    let (busy, all, per_packet, idle) = counters::figures(&w.nics, w.messages);
    let us = clocks
        .iter()
        .map(|c| {
            let m = |x: f64| counters::micros(x, c.cpi, c.hz);
            (
                c.profile.clone(),
                Micros {
                    busy_per_message: m(busy),
                    per_packet: per_packet.iter().map(|&p| m(p)).collect(),
                },
            )
        })
        .collect();
    let split = sym
        .filter(|_| !w.pcs.is_empty())
        .map(|(s, slots)| s.split(&w.pcs, slots))
        .unwrap_or_default();
    let per = |x: u64| counters::per(x, w.messages);
    let functions = ranked(&split.functions, w.messages, top.unwrap_or(TOP_FUNCTIONS));
    let lines = ranked(&split.lines, w.messages, top.unwrap_or(TOP_LINES));
    Workload {
        messages: w.messages,
        busy_per_message: busy,
        all_per_message: all,
        per_packet,
        idle_pass: idle,
        acks_per_message: per(w.nics.iter().map(|n| n.acks_sent).sum()),
        pass_kinds: counters::kinds(&w.nics, w.messages),
        pass_causes: counters::causes(&w.nics, w.messages),
        by_machine: split.by_machine(w.messages),
        by_offload: split.offloads.iter().map(|(k, &v)| (k.clone(), per(v))).collect(),
        attributed_per_message: per(split.in_passes()),
        functions,
        lines,
        nics: w.nics.clone(),
        us,
    }
}

/// Build the measuring image and run every workload (or `opts.only`):
/// the document.
pub fn measure(root: &Path, opts: &Options, offloads: Offloads) -> crate::Result<FirmwareReport> {
    if !crate::rt::ensure_qemu()? {
        return Err(format!(
            "QEMU ({}) is not installed: the firmware bench runs the image under it",
            nic_emu::realtime::qemu::QEMU_PROGRAM
        ));
    }
    let elf = match &opts.image {
        Some(p) if offloads == Offloads::All => p.clone(),
        _ => fw::build_measuring_image(root, offloads)?,
    };
    let img = Image::load(&elf)?;
    let clocks = clocks(root)?;
    let mut qemu_args: Vec<String> = workloads::ICOUNT.iter().map(|s| s.to_string()).collect();
    let lib = profile::build_plugin(root)?;
    let code = img.code_end - image::RAM_BASE;
    let sym = profile::Symbolizer::load(&elf)?;
    // Each run's own table: another bench (a test's) may be measuring
    // another image meanwhile.
    let ctx = lib.with_file_name(format!(
        "contexts-{}-{}.bin",
        std::process::id(),
        if offloads == Offloads::All { "all" } else { "none" }
    ));
    sym.write_contexts(code / 2, &ctx)?;
    qemu_args.extend(profile::qemu_args(&lib, code, &ctx));
    let setup = workloads::Setup { qemu_args, plugin: true, nic: opts.nic };
    let slots = (code / 2) as usize;
    // With no offloads, only what the comparison shows (`table::compared`).
    let wanted = |n: &str| {
        (opts.only.is_empty() || opts.only.iter().any(|o| o == n))
            && (offloads == Offloads::All || table::compared(n) || n == "idle")
    };
    let specs: Vec<_> =
        workloads::specs(opts.quick).into_iter().filter(|s| wanted(s.name)).collect();
    let closes = wanted("port-close");
    let many = opts.only.is_empty() || wanted("idle");
    let steps = specs.len() as u64 + u64::from(closes) + u64::from(many);
    let what = match offloads {
        Offloads::All => "bench (firmware)",
        Offloads::None => "bench (firmware, no offloads)",
    };
    let pb = crate::progress::bar(steps, what, opts.quiet);
    let mut doc = FirmwareReport {
        image: ImageInfo {
            elf: elf.display().to_string(),
            features: match offloads {
                Offloads::All => vec!["poll-stats".into(), "defmt".into()],
                Offloads::None => {
                    vec!["poll-stats".into(), "defmt".into(), "--cfg mcast_off".into()]
                }
            },
            commit: commit(root),
            size_bytes: fw::file_sections(&elf).map(|s| fw::size_report(&s).total()).unwrap_or(0),
            icount: workloads::ICOUNT.join(" "),
            quick: opts.quick,
        },
        ..Default::default()
    };
    for spec in &specs {
        pb.set_message(spec.name);
        let w = workloads::run(spec, &img, &setup)?;
        progress_line(
            &pb,
            opts.quiet,
            &format!(
                "  {:<15} {:>6} messages in the window ({:.1} s)",
                spec.name, w.messages, w.wall_s
            ),
        );
        doc.workloads
            .insert(spec.name.to_string(), workload(&w, &clocks, Some((&sym, slots)), opts.top));
        pb.inc(1);
    }
    if closes {
        pb.set_message("port-close");
        let w = workloads::port_close(&img, &setup, if opts.quick { 3 } else { 10 })?;
        progress_line(
            &pb,
            opts.quiet,
            &format!("  {:<15} {:>6} closes ({:.1} s)", "port-close", w.messages, w.wall_s),
        );
        doc.workloads
            .insert("port-close".into(), workload(&w, &clocks, Some((&sym, slots)), opts.top));
        pb.inc(1);
    }
    if let Some(pp) = doc.workloads.get("pingpong-8b") {
        doc.idle.one_port = pp.idle_pass;
        doc.idle.quiet_one_port = quiet(pp);
    }
    if many {
        pb.set_message("idle, 8 ports and 128 streams");
        let w = workloads::run(&workloads::many_streams(opts.quick), &img, &setup)?;
        progress_line(
            &pb,
            opts.quiet,
            &format!(
                "  {:<15} {:>6} messages in the window ({:.1} s)",
                "idle, 8 ports", w.messages, w.wall_s
            ),
        );
        let many = workload(&w, &clocks, None, opts.top);
        doc.idle.eight_ports_128_streams = many.idle_pass;
        doc.idle.quiet_eight_ports_128_streams = quiet(&many);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let _ = std::fs::remove_file(&ctx);
    Ok(doc)
}

/// A workload's line of progress: on stderr (stdout carries the table or
/// the JSON document), none with `--quiet`.
fn progress_line(pb: &indicatif::ProgressBar, quiet: bool, line: &str) {
    if !quiet {
        pb.suspend(|| eprintln!("{line}"));
    }
}

/// `git describe --always --dirty` of the source, or empty.
fn commit(root: &Path) -> String {
    std::process::Command::new("git")
        .current_dir(root)
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// `cargo xtask bench --firmware`.
pub fn run(root: &Path, opts: &Options) -> crate::Result<ExitCode> {
    let doc = measure(root, opts, Offloads::All)?;
    let path = report::default_path(root);
    doc.save(&path)?;
    let without = if opts.no_offloads { Some(measure(root, opts, Offloads::None)?) } else { None };
    if opts.json {
        println!("{}", doc.to_json());
        return Ok(ExitCode::SUCCESS);
    }
    let clocks = clocks(root)?;
    print!("{}", table::render(&doc, &clocks, opts.functions));
    if let (Some(n), true) = (opts.nic, opts.functions || opts.lines) {
        println!(
            "(the functions, lines and split by machine and offload are NIC {n}'s only: --nic)"
        );
    }
    if opts.lines {
        print!("{}", lines_table(&doc));
    }
    if let Some(w) = &without {
        print!("{}", table::compare(&doc, w));
    }
    let svg = crate::bench::out_dir().join("firmware.svg");
    match table::plot(&doc, &svg) {
        Ok(()) => println!("plot: {}", svg.display()),
        Err(e) => println!("(no plot: {e})"),
    }
    println!("document: {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// The top source lines per workload (`--lines`): instructions per
/// message at each line of the innermost frame (the code written there,
/// whichever function it was inlined into), with that frame's function.
pub fn lines_table(doc: &FirmwareReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for name in report::WORKLOADS {
        let Some(w) = doc.workloads.get(name) else { continue };
        let _ = writeln!(
            s,
            "\n{name}: the top {} source lines, instructions per message ({:.0} in the passes)",
            w.lines.len(),
            w.attributed_per_message
        );
        for (l, v) in &w.lines {
            let share = 100.0 * v / w.attributed_per_message.max(1.0);
            let _ = writeln!(s, "  {v:>10.0} {share:>5.1}%  {l}");
        }
    }
    s
}

/// The top functions per workload (`--functions`): instructions per
/// message, inlined code included (a function and the one inlined into
/// it both count an address), and each one's share of the passes'.
pub fn functions_table(doc: &FirmwareReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for name in report::WORKLOADS {
        let Some(w) = doc.workloads.get(name) else { continue };
        let _ = writeln!(
            s,
            "\n{name}: the top {} functions, instructions per message (inlined code included; {:.0} in the passes)",
            w.functions.len(),
            w.attributed_per_message
        );
        for (f, v) in &w.functions {
            let share = 100.0 * v / w.attributed_per_message.max(1.0);
            let _ = writeln!(s, "  {v:>10.0} {share:>5.1}%  {f}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_cycles_per_instruction_is_read_from_its_nic_cpu_table() {
        let t = "[nic]\ncycles_per_instruction = 9\n[nic_cpu]\npoll = 47\ncycles_per_instruction = 1.5 # measured\n[x]\n";
        assert_eq!(cpi_of(t), Some(1.5));
        assert_eq!(cpi_of("[nic_cpu]\npoll = 47\n"), None);
        assert_eq!(cpi_of("[nic]\ncycles_per_instruction = 2\n"), None, "only [nic_cpu]'s");
    }

    /// Under QEMU: a quick 8-byte ping-pong twice. The counts are exact
    /// (the same deterministic workload, the same instructions per
    /// message within a small tolerance: a window's edges fall between
    /// passes at wall-clock moments), non-zero, busy within all, and the
    /// plugin's per-address count of the passes within a few percent of
    /// the image's own. FAILS, naming what is missing, without QEMU.
    #[test]
    fn a_quick_pingpong_counts_the_same_instructions_twice_under_qemu() {
        use nic_emu::realtime::qemu;
        assert!(
            qemu::find_program(qemu::QEMU_PROGRAM).is_some(),
            "{} is not installed (not found on PATH): the firmware bench runs the image under it \
             (Debian/Ubuntu: apt-get install qemu-system-misc; `cargo xtask test` installs it as root)",
            qemu::QEMU_PROGRAM
        );
        let root = crate::workspace_root();
        let opts = Options {
            quick: true,
            quiet: true,
            only: vec!["pingpong-8b".into()],
            ..Default::default()
        };
        let run = || {
            let d = measure(&root, &opts, Offloads::All).unwrap_or_else(|e| panic!("{e}"));
            d.workloads["pingpong-8b"].clone()
        };
        let (a, b) = (run(), run());
        for w in [&a, &b] {
            assert!(w.messages >= 100, "{} messages in the window", w.messages);
            assert!(w.busy_per_message > 1000.0, "{w:?}");
            assert!(w.busy_per_message <= w.all_per_message, "{w:?}");
            assert!(w.idle_pass > 0.0 && w.per_packet.iter().all(|&p| p > 0.0), "{w:?}");
            for n in &w.nics {
                assert!(n.work_total("descriptors") > 0, "node {}: {n:?}", n.node);
                assert!(n.instructions_busy <= n.instructions_all && n.busy_passes <= n.passes);
            }
            let d = (w.attributed_per_message - w.all_per_message).abs() / w.all_per_message;
            assert!(
                d < 0.05,
                "the plugin counted {} a message, the image {}",
                w.attributed_per_message,
                w.all_per_message
            );
            assert!(w.by_machine.sdma > 0.0 && w.by_machine.recv > 0.0 && w.by_machine.rdma > 0.0);
        }
        // A quick run's busy figure moves with how arrivals batch into
        // passes (19,106 and 20,815 in one clean-clone run, 9% apart);
        // a change of the code the ping-pong runs moves it further.
        let d = (a.busy_per_message - b.busy_per_message).abs() / a.busy_per_message;
        assert!(
            d < 0.15,
            "two runs: {} and {} busy instructions a message",
            a.busy_per_message,
            b.busy_per_message
        );
    }

    #[test]
    fn every_builtin_profile_has_a_clock() {
        let root = crate::workspace_root();
        let c = clocks(&root).unwrap();
        assert!(c.iter().any(|c| c.profile == "lanai9-gm" && c.hz == 133e6), "{c:?}");
        assert!(c.iter().all(|c| c.cpi > 0.0));
    }
}
