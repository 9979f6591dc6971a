//! The bench's workloads: each a scenario (the scenario runner's format,
//! run on the qemu backend with the measuring image) and what one of its
//! messages is, or (port close) a loop of its own on a qemu cluster; and
//! the measured window of each: the NICs' counters read at the runner's
//! progress reports, the first after the warm-up and the last before
//! the end, so the ports' set-up and tear-down stay outside it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_emu::scenario::{self, RtScenarioOptions, Scenario};

use super::counters::{self, Reading};
use super::image::Image;
use super::report::NicCounts;

/// QEMU's exact counting: one instruction, one ns of virtual time, and
/// `minstret` counts guest instructions.
pub const ICOUNT: [&str; 2] = ["-icount", "shift=0"];

/// One workload.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: &'static str,
    pub nodes: usize,
    /// The scenario (TOML).
    pub scenario: String,
    /// Runner messages (receptions) per counted message: 1, or a
    /// multicast's receivers.
    pub receptions: u64,
    /// Data packets each NIC sends or receives per counted message.
    pub packets: Vec<u64>,
    /// Runner messages resolved before the window opens.
    pub warm: u64,
}

/// Messages per workload: a full run, or `--quick`.
fn n(quick: bool, full: u64, short: u64) -> u64 {
    if quick {
        short
    } else {
        full
    }
}

fn header(nodes: usize, extra: &str) -> String {
    format!(
        "profile = \"lanai9-gm\"\nseed = 1\n{extra}\n[fabric]\nnodes = {nodes}\ntopology = \"star\"\n\n[run]\nlimit_ms = 600000\n"
    )
}

fn stream(name: &str, bytes: u64, messages: u64, extra: &str) -> String {
    format!(
        "\n[[flows]]\nname = \"{name}\"\nsrc = [0, 2]\ndst = [1, 2]\nkind = \"stream\"\nbytes = {bytes}\nmessages = {messages}\nwindow = 8\n{extra}"
    )
}

fn unicast(name: &'static str, body: String, messages: u64, packets: u64, head: &str) -> Spec {
    Spec {
        name,
        nodes: 2,
        scenario: header(2, head) + &body,
        receptions: 1,
        packets: vec![packets; 2],
        warm: messages / 10,
    }
}

fn mcast(name: &'static str, scheme: &str, multicasts: u64) -> Spec {
    let body = format!(
        "\n[[flows]]\nname = \"m\"\nsrc = [0, 2]\nkind = \"multicast\"\ngroup = [1, 2, 3]\nscheme = \"{scheme}\"\nalgorithm = \"serial\"\nbytes = 1024\nmessages = {multicasts}\nwindow = 4\n"
    );
    Spec {
        name,
        nodes: 4,
        scenario: header(4, "") + &body,
        receptions: 3,
        // A chain 0 -> 1 -> 2 -> 3, one packet a message.
        packets: vec![1, 2, 2, 1],
        warm: 3 * multicasts / 10,
    }
}

/// Every scenario workload, in the report's order (port close is
/// measured by `port_close`).
pub fn specs(quick: bool) -> Vec<Spec> {
    let pp = n(quick, 1000, 150);
    // A quick run still spans a few of the runner's progress reports
    // (every 50 ms), between which the window lies.
    let s4 = n(quick, 3000, 600);
    let s64 = n(quick, 300, 100);
    let loss = n(quick, 200, 80);
    let m = n(quick, 300, 80);
    let lossy =
        |mode: &str| format!("\n[faults]\ndrop = 0.02\n\n[firmware]\nreliability = \"{mode}\"\n");
    let pingpong = |name, firmware: &str| {
        Spec {
        warm: 2 * pp / 10,
        ..unicast(
            name,
            format!(
                "\n[[flows]]\nname = \"pp\"\nsrc = [0, 2]\ndst = [1, 2]\nkind = \"pingpong\"\nbytes = 8\nmessages = {pp}\n{firmware}"
            ),
            2 * pp,
            1,
            "",
        )
    }
    };
    vec![
        pingpong("pingpong-8b", ""),
        // The same with the acks held 500 us (the profile's: 10 us) for
        // the replies to carry, as on the hardware, where the hosts
        // answer within the delay; under QEMU they take about 100 us.
        pingpong("pingpong-8b-carried", "\n[firmware]\nack_delay_us = 500\n"),
        unicast("stream-4k", stream("s", 4096, s4, ""), s4, 1, ""),
        unicast("stream-64k", stream("s", 65536, s64, ""), s64, 16, ""),
        unicast("loss-gbn", stream("s", 65536, loss, "") + &lossy("go-back-n"), loss, 16, ""),
        unicast("loss-sr", stream("s", 65536, loss, "") + &lossy("selective"), loss, 16, ""),
        unicast("rate", stream("s", 4096, s4, "rate_mb_s = 40\n"), s4, 1, ""),
        mcast("mcast-host", "host", m),
        mcast("mcast-nic", "nic", m),
        mcast("mcast-assisted", "assisted", m),
        mcast("mcast-cached", "nic-cached", m),
    ]
}

/// The idle pass with every port open and 128 streams live on a 2-node
/// cluster: a stream is (remote node, local port, remote port,
/// priority), so node 0's 8 ports sending once to each of node 1's 8
/// ports at both priorities make 128 each way (the last of them the
/// 8-byte ping-pong's, which starts after the others), and the idle
/// passes in the ping-pong's window are counted.
pub fn many_streams(quick: bool) -> Spec {
    let pp = n(quick, 600, 150);
    let mut body = String::new();
    for from in 0..8 {
        for to in 0..8 {
            for prio in ["low", "high"] {
                if (from, to, prio) == (0, 0, "low") {
                    continue; // the ping-pong's stream
                }
                body += &format!(
                    "\n[[flows]]\nname = \"s{from}{to}{prio}\"\nsrc = [0, {from}]\ndst = [1, {to}]\nkind = \"stream\"\nbytes = 8\nmessages = 1\npriority = \"{prio}\"\n"
                );
            }
        }
    }
    body += &format!(
        "\n[[flows]]\nname = \"pp\"\nsrc = [0, 0]\ndst = [1, 0]\nkind = \"pingpong\"\nbytes = 8\nmessages = {pp}\nstart_us = 300000\n"
    );
    Spec {
        name: "idle-many",
        nodes: 2,
        scenario: header(2, "") + &body,
        receptions: 1,
        packets: vec![1, 1],
        warm: 128 + 2 * pp / 10,
    }
}

/// A measured window: each NIC's counts and the counted messages.
#[derive(Debug, Clone)]
pub struct Window {
    pub messages: u64,
    pub nics: Vec<NicCounts>,
    /// Instructions at each code address over all NICs (the plugin's
    /// counters, `profile`; empty without it).
    pub pcs: Vec<u64>,
    /// Wall time of the whole run, s.
    pub wall_s: f64,
}

/// How the guests run: QEMU's arguments (exact counting, the plugin).
#[derive(Debug, Clone)]
pub struct Setup {
    pub qemu_args: Vec<String>,
    /// The plugin's counters are read too.
    pub plugin: bool,
    /// Only this NIC's addresses are counted (`--nic`; all when None).
    pub nic: Option<usize>,
}

/// Every node's readings at one moment.
struct Snap {
    done: u64,
    readings: Vec<Reading>,
    pcs: Vec<Vec<u64>>,
}

fn snap(dir: &Path, nodes: usize, img: &Image, setup: &Setup, done: u64) -> crate::Result<Snap> {
    let readings = read_all(dir, nodes, img)?;
    let pcs = if setup.plugin {
        (0..nodes)
            .map(|n| super::profile::read(&dir.join(format!("node{n}"))))
            .collect::<crate::Result<_>>()?
    } else {
        Vec::new()
    };
    Ok(Snap { done, readings, pcs })
}

/// The window between two snaps: each NIC's counts (`packets[i]` data
/// packets at NIC i), the address counts summed over the NICs.
fn between(
    a: &Snap,
    b: &Snap,
    img: &Image,
    packets: &dyn Fn(usize) -> u64,
    (pcs, nic): (&mut Vec<u64>, Option<usize>),
) -> Vec<NicCounts> {
    super::profile::add_deltas(pcs, &a.pcs, &b.pcs, nic);
    (0..a.readings.len())
        .map(|i| {
            counters::window(i as u16, &img.work_fields, &a.readings[i], &b.readings[i], packets(i))
        })
        .collect()
}

fn cluster_path(tag: &str) -> PathBuf {
    host_driver::cluster::memory_temp_dir()
        .join("nic-fwbench")
        .join(format!("{tag}-{}", std::process::id()))
}

/// Each node's readings, in node order.
fn read_all(dir: &Path, nodes: usize, img: &Image) -> crate::Result<Vec<Reading>> {
    (0..nodes).map(|n| counters::read(&dir.join(format!("node{n}")).join("sram"), img)).collect()
}

/// Run `spec` on a qemu cluster of the image `img` and measure its window.
pub fn run(spec: &Spec, img: &Image, setup: &Setup) -> crate::Result<Window> {
    let v = Scenario::parse_validated(&spec.scenario)
        .map_err(|e| format!("{}: the bench's scenario is refused: {}", spec.name, e.message))?;
    let dir = cluster_path(spec.name);
    let mut opts = RtScenarioOptions::new(ClusterBackend::Qemu);
    opts.image = Some(img.elf.clone());
    opts.cluster = Some(dir.to_string_lossy().into_owned());
    opts.qemu_args = setup.qemu_args.clone();
    let started = Instant::now();
    let (mut first, mut last): (Option<Snap>, Option<Snap>) = (None, None);
    let mut fault = None;
    let report = scenario::run_realtime_with_progress(&v, &opts, &mut |p| {
        if p.messages_done < spec.warm || fault.is_some() {
            return;
        }
        match snap(&dir, spec.nodes, img, setup, p.messages_done) {
            Ok(s) if first.is_none() => first = Some(s),
            Ok(s) => last = Some(s),
            Err(e) => fault = Some(e),
        }
    })
    .map_err(|e| format!("{}: {}", spec.name, e.message))?;
    if let Some(e) = fault {
        return Err(format!("{}: {e}", spec.name));
    }
    if !report.complete || !report.problems.is_empty() {
        return Err(format!(
            "{}: the run did not deliver every message exactly once: {:?}",
            spec.name, report.problems
        ));
    }
    let (Some(first), Some(last)) = (first, last) else {
        return Err(format!(
            "{}: fewer than two readings after the warm-up (too few messages)",
            spec.name
        ));
    };
    let messages = (last.done - first.done) / spec.receptions;
    if messages == 0 {
        return Err(format!("{}: no message in the measured window (too few messages)", spec.name));
    }
    let mut pcs = Vec::new();
    let packets = |i: usize| messages * spec.packets.get(i).copied().unwrap_or(0);
    let nics = between(&first, &last, img, &packets, (&mut pcs, setup.nic));
    Ok(Window { messages, nics, pcs, wall_s: started.elapsed().as_secs_f64() })
}

/// Until the NICs' busy passes have stopped growing for 100 ms (and, with
/// `moved_from`, have grown past it first: the work asked for has
/// started), at most 5 s; the readings then.
fn settle(
    dir: &Path,
    nodes: usize,
    img: &Image,
    moved_from: Option<u64>,
) -> crate::Result<Vec<Reading>> {
    let busy = |r: &[Reading]| r.iter().map(|x| x.stats[1][0]).sum::<u64>();
    let end = Instant::now() + Duration::from_secs(5);
    let mut last = read_all(dir, nodes, img)?;
    let mut quiet = 0;
    loop {
        std::thread::sleep(Duration::from_millis(25));
        let now = read_all(dir, nodes, img)?;
        let started = moved_from.is_none_or(|b| busy(&now) > b);
        quiet = if busy(&now) == busy(&last) && started { quiet + 1 } else { 0 };
        if quiet >= 4 || Instant::now() > end {
            return Ok(now);
        }
        last = now;
    }
}

/// Port close: on a 2-node qemu cluster, `closes` times: open node 0's
/// port 2 (a host program's `Port::attach`), wait until the NIC is
/// quiet, read, close it, wait until quiet, read; the windows summed.
pub fn port_close(img: &Image, setup: &Setup, closes: u64) -> crate::Result<Window> {
    let started = Instant::now();
    let dir = cluster_path("port-close");
    let mut cfg = nic_emu::realtime::RtConfig::new(&dir.to_string_lossy(), ClusterBackend::Qemu, 2);
    cfg.image = Some(img.elf.clone());
    cfg.qemu_args = setup.qemu_args.clone();
    let c = crate::rt::start(cfg)?;
    let name = c.path().to_string_lossy().into_owned();
    let mut sums: Vec<NicCounts> = Vec::new();
    let mut pcs = Vec::new();
    let result = (|| -> crate::Result<()> {
        for _ in 0..closes {
            let port = host_driver::Port::attach(&name, 0, 2)
                .map_err(|e| format!("port-close: opening node 0's port 2: {e}"))?;
            let quiet = settle(c.path(), 2, img, None)?;
            let before = snap(c.path(), 2, img, setup, 0)?;
            drop(port);
            let busy = quiet.iter().map(|x| x.stats[1][0]).sum::<u64>();
            settle(c.path(), 2, img, Some(busy))?;
            let after = snap(c.path(), 2, img, setup, 1)?;
            for (i, w) in
                between(&before, &after, img, &|_| 0, (&mut pcs, setup.nic)).into_iter().enumerate()
            {
                match sums.get_mut(i) {
                    Some(s) => add(s, &w),
                    None => sums.push(w),
                }
            }
        }
        Ok(())
    })();
    let stop = c.stop().map_err(|e| e.to_string());
    result?;
    stop?;
    Ok(Window { messages: closes, nics: sums, pcs, wall_s: started.elapsed().as_secs_f64() })
}

/// `s += w` (counts and work).
fn add(s: &mut NicCounts, w: &NicCounts) {
    use super::report::WorkValue;
    s.passes += w.passes;
    s.busy_passes += w.busy_passes;
    s.instructions_busy += w.instructions_busy;
    s.instructions_all += w.instructions_all;
    s.packets += w.packets;
    for (k, v) in &w.work {
        let Some(e) = s.work.get_mut(k) else {
            s.work.insert(k.clone(), v.clone());
            continue;
        };
        match (e, v) {
            (WorkValue::Count(a), WorkValue::Count(b)) => *a += b,
            (WorkValue::Counts(a), WorkValue::Counts(b)) => {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y)
            }
            _ => {}
        }
    }
}
