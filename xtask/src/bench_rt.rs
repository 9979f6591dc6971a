//! The real-time section of `cargo xtask bench` (`--realtime`, and part of
//! a plain `bench`): live-backend ping-pong next to UDP over loopback and
//! live streaming next to memcpy (nic-emu's `rt_baselines` example), each
//! as the OS schedules it and with the NIC's device thread on a core of its
//! own, then qemu ping-pong and an idle qemu NIC's CPU use. The sim's
//! curves are bench.rs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use host_driver::affinity;
use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, RtConfig};

use crate::bench::num_cpus;
use crate::fw;
use crate::rt;

/// What the real-time figures mean and what bounds them (printed after them).
const BENCH_NOTES: &str = "\
(Live figures: the median of 5 runs. Every message is content-checked. memcpy: the stream's
 bytes, 5000 messages of 64 KiB, each from and to a place of its own; the hot copy is for
 reference. Host processes wait adaptively: on 2 cores or fewer they yield at once, else spin
 20 us first. qemu latency is bound by TCG (about 9 us per busy MCP pass, three on a one-way's
 path) and by waking a waiting guest (its interrupt: two thread hand-offs in QEMU, 16-31 us);
 a polling guest does not yield its core, hence the layout with the NIC CPUs on a core of
 their own (the median of 5 runs each; an idle qemu NIC waits for its interrupt).
 Streaming is bound by the one device thread ({cores} cores here; with the NIC on its own core
 that core is fully busy, the hosts' partly idle). Per 4 KiB packet it copies host memory to
 SRAM, the sender's SRAM to the receiver's (straight from the transmit buffer) and SRAM to host
 memory (about a third of its busy perf samples; the last copy takes back lines the receiving
 process on the other core has read) and runs both MCPs (about 45%; polled only when something
 they read changed), the engines' rings and the fabric (without a lock). The CRC is computed
 only where a fault may corrupt a packet or something checks or records it (not here).
 The cross-core hand-off before each stream run is how long one cache line takes between
 the NIC's CPU and a host CPU: on a 2-core VM it is about 30 ns most of the time and 150 ns
 or more in spells, and a stream run in such a spell goes at about half speed. More device
 threads are slower on 2 cores. docs/design/performance.md has more.)";

/// Runs of each live measurement; the median run is printed.
const RUNS: usize = 5;

/// How long the cross-core hand-off is probed before each stream run.
const PROBE: Duration = Duration::from_millis(50);

/// Messages of 64 KiB in the bench's live stream.
const STREAM_COUNT: u64 = 5000;

/// Where a qemu cluster's threads run: the guests, the device thread,
/// the host programs' `--cpus` (empty: wherever the OS puts them).
#[derive(Default)]
struct QemuLayout {
    label: String,
    guest_cpus: Vec<usize>,
    device_cpus: Vec<usize>,
    host_args: Vec<String>,
}

/// `[0, 1, 3]` as `0,1,3` (a `--cpus` argument).
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// The `--realtime` figures of `cargo xtask bench`.
pub fn run(
    root: &Path,
    count: u64,
    with_live: bool,
    with_qemu: bool,
    quiet: bool,
) -> crate::Result<()> {
    println!("\n== real-time backends (live and qemu), this machine ({} cores)", num_cpus());
    let elf = fw::build_image(root, false)?;
    let bins = fw::build_host_programs(root)?;
    // Baselines: UDP ping-pong over loopback between two processes, memcpy.
    let base = rt_baselines(&bins, 8, count, 65536, STREAM_COUNT)?;
    let udp = base["udp_one_way_us"]["median"].as_f64().unwrap_or(f64::NAN);
    let memcpy_hot = base["memcpy_mb_s"].as_f64().unwrap_or(f64::NAN);
    let memcpy = base["memcpy_stream_mb_s"].as_f64().unwrap_or(f64::NAN);

    // The live backend as the OS schedules it, then with the device
    // thread on a core of its own and the host programs on the others
    // (a NIC has its own processor).
    let cores = affinity::current()?;
    let layouts: Vec<(String, Vec<usize>, Vec<String>)> = match cores.split_last() {
        _ if !with_live => vec![],
        Some((&nic, rest)) if !rest.is_empty() => vec![
            ("".to_string(), vec![], vec![]),
            (format!(", NIC on cpu {nic}"), vec![nic], vec!["--cpus".to_string(), cpu_list(rest)]),
        ],
        _ => vec![("".to_string(), vec![], vec![])],
    };
    // The probe's two CPUs: the NIC's and a host program's.
    let probe = cores.split_last().and_then(|(&nic, rest)| rest.first().map(|&h| (nic, h)));
    let have_qemu = with_qemu && qemu::find_program(qemu::QEMU_PROGRAM).is_some();
    // A step per live run, one per qemu layout.
    let steps = (layouts.len() * RUNS) as u64 + if have_qemu { layouts.len() as u64 } else { 0 };
    let pb = crate::progress::bar(steps, "bench (real time)", quiet);
    let mut live = Vec::new();
    for (label, nic_cpus, host_args) in &layouts {
        let mut cfg =
            RtConfig::new(&format!("bench-live-{}", std::process::id()), ClusterBackend::Live, 2);
        cfg.cpus = nic_cpus.clone();
        let c = rt::start(cfg)?;
        let extra: Vec<&str> = host_args.iter().map(String::as_str).collect();
        // RUNS runs each, the median run kept: one run of a few hundred
        // milliseconds on a 2-core machine is at the scheduler's mercy.
        let mut lats = Vec::new();
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            lats.push(rt::pingpong(&bins, c.path(), 1, 8, count, &extra)?);
            // The cross-core hand-off just before, to tell this VM's slow
            // spells from the emulator's own variation.
            let handoff = probe.map(|(a, b)| affinity::handoff_ns(a, b, PROBE)).transpose()?;
            let bw = rt::stream(&bins, c.path(), 2, 2, 65536, STREAM_COUNT, &extra)?;
            runs.push((bw, handoff));
            pb.inc(1);
        }
        c.stop().map_err(|e| e.to_string())?;
        lats.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
        let mut bws: Vec<f64> = runs.iter().map(|r| r.0).collect();
        bws.sort_by(f64::total_cmp);
        let (lat, bw) = (lats.swap_remove(RUNS / 2), bws[RUNS / 2]);
        live.push((label.clone(), lat, bw, runs));
    }

    // qemu: as the OS schedules it, then with the NIC CPUs (the QEMU
    // guests) on a core of their own, the device thread beside the host
    // programs on the others; RUNS runs each, the median run kept; then
    // what an idle NIC's QEMU costs.
    let qlayouts: Vec<QemuLayout> = match cores.split_last() {
        Some((&nic, rest)) if !rest.is_empty() => vec![
            QemuLayout::default(),
            QemuLayout {
                label: format!(", NIC CPUs on cpu {nic}"),
                guest_cpus: vec![nic],
                device_cpus: rest.to_vec(),
                host_args: vec!["--cpus".to_string(), cpu_list(rest)],
            },
        ],
        _ => vec![QemuLayout::default()],
    };
    let mut q = Vec::new();
    let mut idle = None;
    if have_qemu {
        for QemuLayout { label, guest_cpus, device_cpus, host_args } in &qlayouts {
            let mut cfg = RtConfig::new(
                &format!("bench-qemu-{}", std::process::id()),
                ClusterBackend::Qemu,
                2,
            );
            cfg.image = Some(elf.clone());
            cfg.guest_cpus = guest_cpus.clone();
            cfg.cpus = device_cpus.clone();
            let c = rt::start(cfg)?;
            let extra: Vec<&str> = host_args.iter().map(String::as_str).collect();
            let mut lats = Vec::new();
            for _ in 0..RUNS {
                lats.push(rt::pingpong(&bins, c.path(), 1, 8, count.min(2000), &extra)?);
            }
            lats.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
            if idle.is_none() {
                idle = Some(rt::idle_cpu(&c, 0)?);
            }
            c.stop().map_err(|e| e.to_string())?;
            q.push((label.clone(), lats.swap_remove(RUNS / 2)));
            pb.inc(1);
        }
    }
    pb.finish_and_clear();

    let mark = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("{:<54} {:>12} {:>12} {:>8}  target", "", "measured", "baseline", "ratio");
    for (label, lat, _, _) in &live {
        println!(
            "{:<54} {:>9.2} us {:>9.2} us {:>8.2}  <= 0.5 x UDP: {}",
            format!("live ping-pong one-way, 8 B x {count}{label} vs UDP"),
            lat.median_us,
            udp,
            lat.median_us / udp,
            mark(lat.median_us <= 0.5 * udp)
        );
    }
    for (label, _, bw, _) in &live {
        // With the NIC on a core of its own (as hardware has), half of
        // memcpy; as scheduled, the NIC shares the cores with the hosts.
        let want = if label.is_empty() { 0.35 } else { 0.5 };
        println!(
            "{:<54} {:>7.0} MB/s {:>7.0} MB/s {:>8.2}  >= {want} x memcpy: {}",
            format!("live stream, 64 KiB x {STREAM_COUNT}{label} vs memcpy"),
            bw,
            memcpy,
            bw / memcpy,
            mark(*bw >= want * memcpy)
        );
    }
    let best = live.iter().map(|l| l.2).fold(0.0, f64::max);
    if !live.is_empty() {
        println!(
            "{:<54} {:>12} {:>7.0} MB/s {:>8.2}",
            "  (memcpy of one 64 KiB buffer again and again, hot)",
            "",
            memcpy_hot,
            best / memcpy_hot
        );
    }
    for (label, ql) in &q {
        println!(
            "{:<54} {:>9.2} us {:>9.2} us {:>8.2}  <= 40 us: {}",
            format!("qemu ping-pong one-way, 8 B x {}{label} vs UDP", count.min(2000)),
            ql.median_us,
            udp,
            ql.median_us / udp,
            mark(ql.median_us <= 40.0)
        );
    }
    match idle {
        Some(idle) => println!(
            "{:<54} {:>9.1} ms {:>12} {:>8}  <= 20 ms: {}",
            "idle qemu NIC: CPU time per wall second",
            idle * 1000.0,
            "",
            "",
            mark(idle <= 0.020)
        ),
        None if !with_qemu => {}
        None => println!("qemu: {} not installed; no qemu figures", qemu::QEMU_PROGRAM),
    }
    for (label, lat, _, runs) in &live {
        println!(
            "(live latency{label}: min {:.2} / median {:.2} / p99 {:.2} us)",
            lat.min_us, lat.median_us, lat.p99_us
        );
        let each: Vec<String> = runs
            .iter()
            .map(|(bw, h)| match h {
                Some(ns) => format!("{bw:.0} ({ns:.0} ns)"),
                None => format!("{bw:.0}"),
            })
            .collect();
        println!(
            "(live stream{label}, each run in MB/s (cross-core hand-off): {})",
            each.join(", ")
        );
    }
    println!("{}", BENCH_NOTES.replace("{cores}", &num_cpus().to_string()));
    Ok(())
}

/// The largest UDP datagram the curve's latency reference sends.
const UDP_MAX: u64 = 64_000;

/// The live curve's stream: sends outstanding at the sender and receive
/// buffers kept posted at the receiver (the `stream` program's defaults,
/// given explicitly: the cluster's host memory is sized for them).
const CURVE_WINDOW: u64 = 8;
const CURVE_RECV_BUFFERS: u64 = 16;

/// Room in a port's slice besides the message buffers: the port's event
/// queue and the allocator's rounding.
const SLICE_SPARE: u64 = 1 << 20;

/// The most host memory one port of the live curve allocates at message
/// size `size`: the stream receiver's buffers (each as large as the
/// size's class holds: the next power of two) or the
/// sender's window, whichever is more (a ping-pong end holds two of each),
/// and the spare room.
pub fn curve_port_bytes(size: u64) -> u64 {
    use host_driver::nic_abi::{class_max_len, size_class_for};
    let recv_buf = class_max_len(size_class_for(size));
    let most = (CURVE_RECV_BUFFERS * recv_buf).max(CURVE_WINDOW * size).max(2 * (size + recv_buf));
    most + SLICE_SPARE
}

/// Host memory per node for the live curve: the default, doubled until
/// each port's slice holds what the largest size needs (a port's slice
/// is an eighth of it, less the page tables: `cluster::port_slice`). At
/// 1 MiB the receiver posts 16 MiB of buffers, twice what the default's
/// slices (just under 8 MiB) hold. The file is sparse: only what the
/// programs touch costs memory.
pub fn curve_host_size(largest: u64) -> u64 {
    let need = curve_port_bytes(largest);
    let mut host = host_driver::cluster::DEFAULT_HOST_SIZE;
    while host_driver::cluster::port_slice(host, 0).1 < need {
        host *= 2;
    }
    host
}

/// nic-emu's `rt_baselines` example's JSON: a UDP ping-pong of
/// `udp_size`-byte datagrams, `count` round trips, and a memcpy stream of
/// `messages` messages of `size` bytes.
fn rt_baselines(
    bins: &Path,
    udp_size: u64,
    count: u64,
    size: u64,
    messages: u64,
) -> crate::Result<serde_json::Value> {
    let o = Command::new(bins.join("examples").join("rt_baselines"))
        .args(["--size", &udp_size.to_string(), "--count", &count.to_string(), "--json"])
        .args(["--stream-size", &size.to_string(), "--stream-count", &messages.to_string()])
        .output()
        .map_err(|e| format!("rt_baselines: {e}"))?;
    if !o.status.success() {
        return Err(format!("rt_baselines failed: {}", rt::text(&o)));
    }
    rt::json_line(&o)
}

/// `rt_baselines` at one size: (UDP one-way median us; memcpy MB/s of the
/// messages, each from and to a place of its own).
fn baselines(
    bins: &Path,
    udp_size: u64,
    count: u64,
    size: u64,
    messages: u64,
) -> crate::Result<(f64, f64)> {
    let base = rt_baselines(bins, udp_size, count, size, messages)?;
    Ok((
        base["udp_one_way_us"]["median"].as_f64().unwrap_or(f64::NAN),
        base["memcpy_stream_mb_s"].as_f64().unwrap_or(f64::NAN),
    ))
}

/// The live curve for the plots: a 2-node live cluster as fast as its
/// device thread goes (the real-time section's setting; the profile's
/// timing does not apply), ping-pong one-way latency (median) and stream
/// bandwidth (the receiver's) for every size of `bench::sizes`, printed
/// as a table with each figure's ratio to its reference measured in the
/// same run at the same size: a UDP ping-pong over loopback (up to 64,000
/// B, a datagram's limit) and a memcpy stream of the same messages.
pub fn live_curve(
    root: &Path,
    quick: bool,
    quiet: bool,
) -> crate::Result<Vec<crate::bench::Point>> {
    use nic_emu::scenario::report::fmt_bytes;
    let bins = fw::build_host_programs(root)?;
    let sizes = crate::bench::sizes();
    let pb = crate::progress::bar(sizes.len() as u64, "bench (live curve)", quiet);
    let scale = if quick { 4 } else { 1 };
    let mut cfg =
        RtConfig::new(&format!("bench-curve-{}", std::process::id()), ClusterBackend::Live, 2);
    cfg.host_size = curve_host_size(sizes.iter().copied().max().unwrap_or(1));
    let c = rt::start(cfg)?;
    let stream_args = [
        "--window".to_string(),
        CURVE_WINDOW.to_string(),
        "--recv-buffers".to_string(),
        CURVE_RECV_BUFFERS.to_string(),
    ];
    let stream_args: Vec<&str> = stream_args.iter().map(String::as_str).collect();
    crate::progress::println(
        &pb,
        &format!(
            "\nlive, as fast as it goes: 2 nodes, one switch (for the plots); {} core(s)\n\
             {:>9}  {:>16} {:>8}  {:>16} {:>10}",
            num_cpus(),
            "size",
            "one-way latency",
            "vs UDP",
            "stream MB/s",
            "vs memcpy"
        ),
    );
    let mut pts = Vec::new();
    for &size in &sizes {
        let rounds = ((64 << 20) / size).clamp(200, 2000) / scale;
        let messages = ((64 << 20) / size).clamp(64, 4000) / scale;
        let lat = rt::pingpong(&bins, c.path(), 1, size as u32, rounds, &[]);
        let bw = rt::stream(&bins, c.path(), 2, 2, size as u32, messages, &stream_args);
        let base = baselines(&bins, size.min(UDP_MAX), rounds.min(2000), size, messages);
        let (lat, bw, (udp, memcpy)) = match (lat, bw, base) {
            (Ok(l), Ok(b), Ok(r)) => (l, b, r),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                let _ = c.stop();
                return Err(format!("live curve, {}: {e}", fmt_bytes(size)));
            }
        };
        let p = crate::bench::Point {
            size,
            latency_ns: (lat.median_us * 1e3).round() as u64,
            bandwidth_mb_s: bw,
        };
        crate::progress::println(
            &pb,
            &format!(
                "{:>9}  {:>13.2} us {:>8}  {:>16.2} {:>10.2}",
                fmt_bytes(size),
                lat.median_us,
                if size <= UDP_MAX { format!("{:.2}", lat.median_us / udp) } else { "-".into() },
                bw,
                bw / memcpy
            ),
        );
        pb.inc(1);
        pts.push(p);
    }
    c.stop().map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    Ok(pts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use host_driver::cluster::{port_slice, DEFAULT_HOST_SIZE};

    #[test]
    fn the_live_curves_host_memory_holds_the_largest_sizes_buffers_in_every_port_slice() {
        let largest = crate::bench::sizes().into_iter().max().unwrap();
        assert_eq!(largest, 1 << 20);
        let host = curve_host_size(largest);
        let slice = port_slice(host, 0).1;
        // The receiver's 16 buffers of 1 MiB and its event queue.
        assert!(slice >= 16 * largest + SLICE_SPARE, "slice {slice} of host {host}");
        assert!(port_slice(DEFAULT_HOST_SIZE, 0).1 < 16 * largest, "the default was enough");
        // No more than it needs: half of it would not do.
        assert!(port_slice(host / 2, 0).1 < curve_port_bytes(largest));
        assert!(host.is_multiple_of(DEFAULT_HOST_SIZE));
    }

    #[test]
    fn small_sizes_keep_the_default_host_memory() {
        assert_eq!(curve_host_size(4), DEFAULT_HOST_SIZE);
        assert_eq!(curve_host_size(64 << 10), DEFAULT_HOST_SIZE);
    }

    #[test]
    fn a_sizes_receive_buffers_are_as_large_as_its_class() {
        // 3 KiB is in the 4 KiB class: the receiver's buffers are 4 KiB.
        assert_eq!(curve_port_bytes(3072), 16 * 4096 + SLICE_SPARE);
        assert_eq!(curve_port_bytes(1 << 20), 16 * (1 << 20) + SLICE_SPARE);
    }
}
