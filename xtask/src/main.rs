//! `cargo xtask`: the project's one build-and-run tool (after Hubris).
//!
//! Subcommands: `build-fw` builds the bare-metal MCP image and prints its
//! size, `flash` writes an image into a running cluster's NIC, `run`
//! serves a live or qemu cluster until Ctrl-C (`cluster list|stop`: the
//! running ones), `logs` decodes a qemu NIC's defmt log,
//! `gdb` puts qemu NICs (of a running cluster or a new one) under gdb-multiarch, `sim` runs a scenario file (sim, live or qemu), `bench` prints the latency and
//! bandwidth curves next to the calibration targets and the simulator's
//! speed, and plots them (`--rate`: the cost of rate control), `calibrate` measures a
//! profile's rate-control calibration, `report rate-control` writes the
//! rate-control experiments as Markdown with SVG plots (`report
//! multicast`, `report reliability`, `report collectives`: the multicast
//! study, go-back-N against selective repeat under loss, NIC-based
//! against host-based collectives), `test` runs the whole test suite and the example scenarios,
//! `demo` runs a 4-node cluster (qemu, else live) with host programs, `doctor` checks prerequisites. The alias in
//! .cargo/config.toml builds this crate in release, so runs here are fast.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nic_emu::cli::at_least_one;

mod bench;
mod bench_api;
mod bench_rt;
mod calibrate;
mod cluster;
mod coll_report;
mod demo;
mod fat;
mod flash;
mod fuzz_scenarios;
mod fw;
mod fwbench;
mod fwcal;
mod gdb;
mod gm;
mod logs;
mod mcast;
mod plot;
mod prereq;
mod progress;
mod reliability;
mod reliability_heavy;
mod report;
mod report_live;
mod rt;
mod run;
mod scale;
mod sim;
mod soak;
mod testing;
mod trace;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, run, test and measure the emulated NIC cluster",
    long_about = "Build, run, test and measure the emulated NIC cluster.\n\n\
        On a fresh machine: `cargo xtask demo` shows a cluster at work, \
        `cargo xtask test` runs everything CI runs.",
    version
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario file on the deterministic simulator, or on a live or
    /// qemu cluster (--backend).
    ///
    /// Prints a human summary, or with --json the JSON document described
    /// in docs/scenarios.md. The sim runs in virtual time, deterministic;
    /// live (the MCP as native threads) and qemu (the riscv64 image under
    /// qemu-system-riscv64; built, and QEMU installed as root, when
    /// missing) start a cluster in this process and run the same host
    /// programs and checks in wall-clock time. Rate control (`idt`,
    /// `idt_t`, `rate_mb_s`, `best_effort`, with the bandwidth manager
    /// started when a flow asks for it) and the dispatch trace run on every
    /// backend. Exit status: 0 when every message was delivered exactly once,
    /// intact and in order; 1 when the scenario is refused (or the cluster
    /// cannot start); 2 when the run ended with problems (lost, corrupted,
    /// duplicated or reordered messages, failed sends, or the time limit).
    Sim {
        /// The scenario (TOML), e.g. scenarios/stream-2node.toml.
        file: PathBuf,
        /// Print the JSON document on stdout instead of the summary.
        #[arg(long)]
        json: bool,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// No progress lines on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// Where to run it: sim (virtual time), live or qemu (wall-clock time).
        #[arg(long, value_enum, default_value = "sim")]
        backend: rt::Backend,
        /// live/qemu: stop after this many seconds of running the host
        /// programs (default: the scenario's run.limit_ms, read as
        /// wall-clock time).
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        /// live/qemu: `fast` (as fast as the device threads go) or `link`
        /// (links at the profile's bandwidth, hops at its latency).
        #[arg(long, default_value = "fast")]
        pacing: nic_emu::realtime::Pacing,
        /// Write every packet the fabric carries (at each link it enters;
        /// virtual time on the sim, the cluster's wall clock on live and
        /// qemu) to this pcapng file, one interface per link, in time order;
        /// open it in Wireshark with
        /// tools/wireshark/nic_emu.lua (docs/capture.md).
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        /// Record every NIC's state-machine transitions and the host
        /// programs' calls into this Chrome trace-event JSON file, for
        /// ui.perfetto.dev or chrome://tracing (docs/trace.md); on the sim
        /// also each data packet's path as arrows between the NICs. On the
        /// sim the run's results are the same as without it. A directory,
        /// or no FILE at all (the current directory): the file is
        /// `<scenario name>.trace.json` in it.
        #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = ".")]
        trace: Option<PathBuf>,
        /// Override the scenario's and the profile's `[firmware]
        /// reliability`: go-back-n or selective.
        #[arg(long, value_name = "MODE")]
        reliability: Option<nic_emu::profile::Reliability>,
        /// Override the scenario's and the profile's `[nic_cpu] pricing`
        /// (sim): published (the profile's cycle prices) or firmware (the
        /// MCP image's measured instructions, docs/profiles.md).
        #[arg(long, value_name = "PRICING")]
        pricing: Option<nic_emu::profile::Pricing>,
    },
    /// Record the state-machine transitions of a running live or qemu
    /// cluster's NICs for a while, as a Chrome trace-event JSON timeline.
    ///
    /// Turns each NIC's transition and dispatch traces on, reads both rings
    /// every millisecond (counting what the firmware overwrote before it
    /// was read), puts the trace registers back as they were, and writes
    /// one process per NIC with a track per state machine (SDMA, SEND,
    /// RECV, RDMA). Open the file in ui.perfetto.dev ("Open trace file")
    /// or chrome://tracing; docs/trace.md explains what you see. To trace
    /// a scenario (sim, live or qemu) use `cargo xtask sim FILE --trace OUT`.
    Trace(trace::TraceArgs),
    /// Latency and bandwidth curves against the calibration targets, and
    /// the simulator's speed.
    ///
    /// For each profile: 2-node ping-pong one-way latency and 2-node stream
    /// bandwidth for messages of 4 B to 1 MiB in powers of 4. Then
    /// simulated packets per wall-clock second for a 16-node all-to-all
    /// stream of 64 B (lanai4-gm) and of 16 KiB messages (modern), the
    /// median of 5 runs each (`--scale`: against the number of nodes).
    Bench {
        /// Profiles to measure (default: lanai4-gm and lanai9-gm).
        #[arg(long = "profile", value_name = "NAME")]
        profiles: Vec<String>,
        /// Fewer messages per point: a rough curve in a few seconds.
        #[arg(long)]
        quick: bool,
        /// Skip the simulator-speed run.
        #[arg(long)]
        no_speed: bool,
        /// Only the real-time section: live-backend ping-pong (8 B) next to
        /// UDP over loopback, live streaming (64 KiB) next to memcpy, qemu
        /// ping-pong and an idle qemu NIC's CPU use. (Included in a plain
        /// `bench` unless --no-realtime.)
        #[arg(long, conflicts_with = "rate")]
        realtime: bool,
        /// Leave the real-time section out.
        #[arg(long)]
        no_realtime: bool,
        /// With --realtime: only the live figures (no qemu ping-pong, no
        /// idle qemu NIC).
        #[arg(long, requires = "realtime")]
        no_qemu: bool,
        /// With --realtime: only the qemu figures (no live ping-pong or
        /// stream; the UDP and memcpy baselines still run).
        #[arg(long, requires = "realtime", conflicts_with = "no_qemu")]
        no_live: bool,
        /// Round trips of the real-time ping-pongs.
        #[arg(long, default_value_t = 10000, value_parser = at_least_one::<u64>)]
        rt_count: u64,
        /// Only the rate-control overhead comparison: ping-pong latency
        /// and stream bandwidth (4 B .. 64 KiB) with every flow at IDT 0
        /// vs without flows, side by side (default profile lanai4-gm).
        #[arg(long)]
        rate: bool,
        /// Only what multicast costs unicast: ping-pong latency and
        /// stream bandwidth with the MCP's multicast paths compiled in (as
        /// shipped, unused) and compiled out, side by side, on the sim and
        /// on a live cluster (builds the programs a second time).
        #[arg(long, conflicts_with_all = ["rate", "realtime"])]
        multicast_cost: bool,
        /// --multicast-cost: live runs of each build (interleaved); --gm,
        /// --api: runs of each measurement (interleaved).
        #[arg(long, default_value_t = 3, value_parser = at_least_one::<usize>)]
        runs: usize,
        /// Only the simulator's scaling: wall time per simulated packet
        /// against the number of nodes (16, 64, 256, 1,024; one switch and
        /// a clos), as a table with each point's ratio to the 16-node run,
        /// and plotted (out/reports/bench/scale.svg). --quick: one short
        /// run per point.
        #[arg(long, conflicts_with_all = ["rate", "realtime", "multicast_cost"])]
        scale: bool,
        /// Only the firmware's cost: builds the image with its instruction
        /// counter (feature poll-stats), runs each workload (8 B ping-pong,
        /// the same with its acks carried by the replies (ack delay 500
        /// us), 4 KiB and 64 KiB streams, a 64 KiB stream under 2% loss with
        /// go-back-N and with selective repeat, a rate-controlled stream,
        /// a multicast relay of each scheme, port close) on a qemu cluster
        /// under `-icount shift=0` and prints the MCP's instructions per
        /// message and per packet at each NIC, the idle pass (1 port and 1
        /// stream; 8 ports and 128 streams), the split by machine and by
        /// offload, and the same in microseconds at each profile's NIC
        /// clock. Saves target/bench/firmware.json and
        /// out/reports/bench/firmware.svg. --quick: a short run (figures
        /// less settled).
        #[arg(long, conflicts_with_all = ["rate", "realtime", "multicast_cost", "scale"])]
        firmware: bool,
        /// --firmware: print the JSON document instead of the table.
        #[arg(long, requires = "firmware")]
        json: bool,
        /// --firmware: also the 15 functions (inlined code included) that
        /// run most instructions in each workload.
        #[arg(long, requires = "firmware")]
        functions: bool,
        /// --firmware: also the 40 source lines (the innermost frame's file
        /// and line, with its function) that run most instructions in
        /// each workload: where inside a function the cost is.
        #[arg(long, requires = "firmware")]
        lines: bool,
        /// --firmware --functions/--lines: list N functions and N source
        /// lines (default 15 and 40).
        #[arg(long, value_name = "N", requires = "firmware")]
        top: Option<usize>,
        /// --firmware: the functions, lines and split by machine and
        /// offload count only NIC N's instructions (0 sends a stream, 1
        /// receives it; a ping-pong's NICs do both). The per-message and
        /// per-packet figures stay both NICs'.
        #[arg(long, value_name = "N", requires = "firmware")]
        nic: Option<usize>,
        /// --firmware: also measure the image with no offloads compiled in
        /// and print the unicast workloads side by side with the ratio.
        #[arg(long, requires = "firmware")]
        no_offloads: bool,
        /// --firmware: only these workloads (pingpong-8b, stream-4k, ...,
        /// port-close; `idle` for the 8-port, 128-stream idle pass).
        #[arg(long = "workload", value_name = "NAME", requires = "firmware")]
        workloads: Vec<String>,
        /// --firmware: measure this image (an ELF built with the poll-stats
        /// feature, e.g. of another commit) instead of building one.
        #[arg(long, value_name = "ELF", requires = "firmware")]
        image: Option<PathBuf>,
        /// Only GM's interface against the host driver's, on a live cluster:
        /// 8 B one-way latency and 64 KiB stream bandwidth through libgm
        /// (the gm_bench program) and through the host driver (pingpong and
        /// stream), --runs runs of each interleaved, medians side by side
        /// with their ratio. --rt-count round trips of each ping-pong.
        #[arg(long, conflicts_with_all = ["rate", "realtime", "multicast_cost", "scale", "firmware"])]
        gm: bool,
        /// Only the host driver's everyday calls against the stream
        /// program, on a live cluster: 4 KiB messages streamed by the
        /// stream program (and its loop in-process), by
        /// host-driver/examples/stream.rs (a window of sends with notify)
        /// and as the rustdoc shows it (no completion asked for,
        /// recv_timeout of 100 ms; two threads, one thread, every token),
        /// --runs runs of each interleaved, medians side by side with
        /// their ratio to the stream program's, the waits that ended empty
        /// and the packets turned away for want of a buffer.
        #[arg(long, conflicts_with_all = ["rate", "realtime", "multicast_cost", "scale", "firmware", "gm"])]
        api: bool,
        /// No progress bars on stderr (they show only on a terminal).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run the whole test suite: `cargo test --workspace --release` (or
    /// nextest when installed), then every scenario under scenarios/ with
    /// its checks. Exits non-zero on any failure. Installs what the suite
    /// needs first, as demo does: the firmware's Rust target (rustup) and,
    /// as root, QEMU and gdb-multiarch (apt-get); as another user it stops
    /// naming the command that installs them.
    Test {
        /// Only the scenarios, not the cargo test suite.
        #[arg(long)]
        scenarios_only: bool,
        /// Use `cargo test` even when cargo-nextest is installed.
        #[arg(long)]
        no_nextest: bool,
    },
    /// Hostile input for the MCP in a debug build (overflow checks on):
    /// random writes to an attacker's port windows, send rings and page
    /// tables, and random packets with good CRCs on the wire; no panic,
    /// no access outside SRAM, and afterwards a send between two other
    /// ports completes intact. Then every nic-abi decoder and the
    /// scenario parser fed random input (proptest, --cases each): no panic.
    /// `cargo xtask test` runs a short one of each.
    ///
    /// With --scenarios N, instead: N random scenarios on the simulator
    /// (2 to 16 nodes, every flow kind, collectives included, profile
    /// and topology, drops, corruption, duplication, cables down, NIC
    /// resets (not beside a collective), both reliability modes; case i
    /// drawn from seed --seed + i), on every core; each must
    /// end with every flow no reset cut delivered exactly once, intact
    /// and in order. Then --realtime of the small cases that passed on a
    /// live cluster and as many on a qemu one. Each failure is listed
    /// with its file (out/fuzz/case-SEED.toml) and the commands that run
    /// it again.
    Fuzz {
        /// Random actions (a round of every NIC after each).
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one::<u64>)]
        steps: u64,
        /// Seed of the random actions, or with --scenarios of the first case.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Random inputs for each decoder and for the scenario parser.
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one::<u64>)]
        cases: u64,
        /// Run N random scenarios instead (see above).
        #[arg(long, value_name = "N", value_parser = at_least_one::<u64>, conflicts_with_all = ["steps", "cases"])]
        scenarios: Option<u64>,
        /// With --scenarios: how many of the cases that passed to run again
        /// on each real-time backend (live, then qemu); 0: none.
        #[arg(long, value_name = "K", default_value_t = 3, requires = "scenarios")]
        realtime: usize,
        /// With --scenarios: no progress bar.
        #[arg(long, short, requires = "scenarios")]
        quiet: bool,
    },
    /// A long run on the simulator: 16 nodes on one switch, every node
    /// streaming to every other under drop 2%, corrupt 0.2% and duplicate
    /// 0.2% (profile modern). Passes when every message arrived exactly
    /// once, in order and intact; prints the peak resident memory next to
    /// the memory a tenth into the run. `cargo xtask test` runs a short one.
    Soak {
        /// Messages in all (spread over the 240 ordered pairs).
        #[arg(long, default_value_t = 1_000_000)]
        messages: u64,
        /// Seed of the fault injection.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// No progress on stderr (a bar on a terminal, else a line every 2 s).
        #[arg(long, short)]
        quiet: bool,
    },
    /// A 4-node cluster at work: builds and flashes the firmware, starts 4
    /// NICs on qemu (installing QEMU with apt-get as root when missing;
    /// else live), runs the host programs `pingpong` and `stream` and
    /// prints latency and bandwidth.
    Demo {
        /// sim, live or qemu (default: qemu when QEMU is there, else live).
        #[arg(long, value_enum)]
        backend: Option<rt::Backend>,
        /// The sim demo's JSON document instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Build the bare-metal MCP image (riscv64imac-unknown-none-elf;
    /// installs the Rust target when missing) and print its size.
    ///
    /// The ELF lands in `<target>/fw/riscv64imac-unknown-none-elf/release/
    /// mcp-image` (`<target>/fw-selftest/...` with --selftest). Fails when
    /// text + data + bss reach `fw::IMAGE_BUDGET` (212 KiB).
    BuildFw {
        /// The self-test image: checks run on the NIC CPU, QEMU exits 0 on pass.
        #[arg(long)]
        selftest: bool,
        /// The firmware's log level: the lines of this level and above are
        /// compiled in (the others cost nothing). `cargo xtask logs`
        /// decodes them.
        #[arg(long, value_enum, default_value_t = fw::LogLevel::Info)]
        log: fw::LogLevel,
    },
    /// Write a firmware image into a node's flash file. A running cluster's
    /// device process notices and resets that NIC (its ports close).
    Flash {
        #[arg(long)]
        node: u32,
        /// The image (ELF); default: build the firmware image.
        image: Option<PathBuf>,
        /// The cluster (name or directory).
        #[arg(long, default_value = "nic")]
        cluster: String,
    },
    /// Start a cluster and keep it up until Ctrl-C, printing where its
    /// files are. Host programs open it by name (`--cluster NAME`).
    ///
    /// sim is not a long-running service (it runs a scenario in virtual
    /// time): `run --backend sim` runs the demo scenario and says so.
    /// Live and qemu clusters run as a `nic-cluster run` device process
    /// in the foreground, given the cluster options below as they are.
    Run(run::RunArgs),
    /// The clusters on this machine: `list` them, `stop NAME` one
    /// (`nic-cluster list` and `nic-cluster stop`).
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// Decode NIC N's defmt log (qemu clusters): one line per frame with
    /// level, timestamp and message, from `<cluster>/node<N>/console.log`.
    ///
    /// The format strings come from the image the node runs (its flash
    /// file; else the built image) unless --image names one.
    Logs {
        /// The NIC whose console log to decode (`<cluster>/node<N>/console.log`).
        #[arg(long, required_unless_present = "file")]
        node: Option<u32>,
        /// Decode this saved log instead (raw defmt frames, as the NIC
        /// wrote them), with --image or the built image.
        #[arg(long, conflicts_with_all = ["node", "follow"])]
        file: Option<PathBuf>,
        /// The cluster (name or directory).
        #[arg(long, default_value = "nic")]
        cluster: String,
        /// The image (ELF) whose defmt table decodes the log.
        #[arg(long)]
        image: Option<PathBuf>,
        /// Keep reading as the NIC logs more (until Ctrl-C).
        #[arg(long, short)]
        follow: bool,
    },
    /// gdb-multiarch on qemu NICs, one gdb inferior per NIC: attached to
    /// a running cluster's NICs (--cluster), or to a new cluster's, the
    /// first NIC halted at its first instruction (stopped when gdb exits).
    /// With the image's symbols, breakpoints on the state machines' step
    /// functions, the `mcp` command (machines, queues, counters) and
    /// core's source (rust-src).
    Gdb {
        /// The NICs to debug (repeat, or a list: --node 0,1).
        #[arg(long, required = true, value_delimiter = ',')]
        node: Vec<usize>,
        /// Attach to this running qemu cluster (name or directory); without
        /// it a new cluster is started.
        #[arg(long)]
        cluster: Option<String>,
        /// A new cluster's name (without --cluster).
        #[arg(long, default_value = "gdb", conflicts_with = "cluster")]
        name: String,
        /// A new cluster's nodes (at least the highest --node + 1).
        #[arg(long, default_value_t = 2, conflicts_with = "cluster")]
        nodes: usize,
        /// Symbols from this ELF (default: each node's flash file when
        /// attaching, the built image for a new cluster).
        #[arg(long)]
        image: Option<PathBuf>,
        /// Run gdb in batch mode with this command file (after the
        /// breakpoints are set) and exit; a missing or failing script
        /// fails the command.
        #[arg(long)]
        batch: Option<PathBuf>,
        /// With --batch: the script's time limit in seconds (more than 0,
        /// at most a day); past it gdb is stopped. Either way the NICs are
        /// detached and run on when gdb ends.
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = gdb::parse_timeout, requires = "batch")]
        timeout: std::time::Duration,
        /// Read no gdbinit file (gdb -nx); by default the user's is read.
        #[arg(long)]
        nx: bool,
        /// Break on the SDMA intake step only.
        #[arg(long)]
        sdma_only: bool,
    },
    /// Rate-control calibration: T and Bmax from an IDT sweep, and the
    /// node-capacity curve; written beside the profile for the bandwidth
    /// manager.
    ///
    /// Sweeps the IDT of one flow of 64 KiB messages (sim) and prints the
    /// table: bandwidth stays at Bmax while IDT <= T and falls as
    /// T / IDT * Bmax beyond. Then three nodes A -> B -> C: the most B
    /// sends to C while A sends to B at several rates. Writes
    /// `nic-emu/profiles/<profile>.calibration.toml` (built-in profiles) or
    /// `<dir>/<name>.calibration.toml` beside a profile file.
    Calibrate {
        /// `firmware`: the firmware cost table instead (instructions per
        /// unit of work, measured on the MCP image under QEMU; written to
        /// nic-emu/profiles/firmware-costs.toml, docs/profiles.md).
        #[arg(value_name = "WHAT")]
        what: Option<String>,
        /// firmware: fit a saved `cargo xtask bench --firmware --json`
        /// document instead of running the bench.
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// Profiles to calibrate (default: every built-in one).
        #[arg(long = "profile", value_name = "NAME")]
        profiles: Vec<String>,
        /// Fewer messages per point: rougher, faster.
        #[arg(long)]
        quick: bool,
        /// Print only; do not write the calibration file.
        #[arg(long)]
        no_save: bool,
    },
    /// Run a set of experiments and write a Markdown report with SVG
    /// plots.
    ///
    /// `multicast`: the published study's experiments (2 B and 64 KiB
    /// for G = 4, 6, ..., 16; G = 64 and 256 on one large switch) for
    /// every scheme x algorithm, model vs simulation, root CPU
    /// utilisation, tree creation time, and cached pipelined trees on the
    /// modern profile (default profile lanai9-gm).
    ///
    /// `rate-control`: calibration (bandwidth vs IDT, node capacity),
    /// proportional shares, admission by the three criteria, best effort
    /// (dispatch frequency over time), and the cost of rate control with
    /// every IDT 0. Writes report.md, the plots and each experiment's
    /// scenario into the output directory.
    ///
    /// `collectives`: the NIC-offloaded collectives against host-based
    /// ones on lanai4-gm, lanai9-gm and modern: time per barrier against
    /// group size (2 to 1,024 members) and per allreduce against vector
    /// size (8 B to 1 MiB of f64, 16 nodes) for every scheme x
    /// algorithm, the 1 MiB allreduce on modern (best NIC against best
    /// host, target 1.5x), the published NIC-based barrier (IPDPS 2001)
    /// beside the simulated one, a LogP-style model of each barrier
    /// algorithm, and a summary on modern (exit status 2 when a point did
    /// not run clean). About six minutes on 2 cores; --quick (vectors up
    /// to 128 KiB, and 1 MiB on modern) about thirty seconds.
    ///
    /// `reliability`: go-back-N against selective repeat under link loss
    /// 0 to 5 %: streams between pairs of nodes and an 8-node all-to-all
    /// on lanai9-gm (16 KiB messages) and modern (64 KiB), three seeds,
    /// goodput, retransmitted packets and bytes, the worst flow's p99
    /// latency and the control packets' share, both modes side by side;
    /// then one stream at 10% loss on every profile, its slowest message
    /// against its bound (exit status 2 when a run did not deliver every
    /// message exactly once, or passed the bound). About a minute on 2
    /// cores; --quick (loss 0, 1 and 5%, two seeds) a few seconds.
    Report {
        /// Which report: rate-control, multicast, reliability or collectives.
        which: String,
        /// Output directory (default: `out/reports/<which>/` under the
        /// workspace).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Timing profile (default lanai4-gm; it must be calibrated).
        #[arg(long)]
        profile: Option<String>,
        /// rate-control: sim (report.md), live (a live cluster with its
        /// bandwidth manager process: live.md, printed), qemu (the same
        /// on a qemu cluster, the riscv64 image under QEMU: qemu.md,
        /// printed), or all (sim and live). Other reports: sim only.
        #[arg(long, value_enum, default_value = "sim")]
        backend: report::ReportBackend,
        /// Live and qemu: decide with the profile's stored calibration,
        /// or with T and Bmax measured on the cluster first. Default:
        /// stored on live, measured on qemu (the guest firmware is slower
        /// than the stored Bmax, so rates from it would not pace there).
        #[arg(long, value_enum)]
        live_calibration: Option<report::LiveCal>,
        /// No progress bar on stderr (it shows only on a terminal).
        #[arg(long, short)]
        quiet: bool,
        /// collectives: fewer sizes and shorter loops (under a minute);
        /// reliability: loss 0, 1 and 5%, two seeds, shorter streams (a
        /// few seconds).
        #[arg(long)]
        quick: bool,
    },
    /// A published model next to the simulator.
    ///
    /// `multicast`: the small-message multicast latency model (the
    /// profile's parameters; lanai9-gm carries the published ones) next
    /// to simulated completion latency for every scheme (host, nic,
    /// assisted, nic-cached) x algorithm (separate, serial, binomial,
    /// binary, k-binomial), with the difference in percent. Exit status 2
    /// when a multicast was not delivered intact to every member.
    Model {
        /// Which model: multicast.
        which: String,
        /// Timing profile.
        #[arg(long, default_value = "lanai9-gm")]
        profile: String,
        /// Message size (bytes).
        #[arg(long, default_value_t = 2)]
        bytes: u32,
        /// Group sizes: a..b (step 2), a..b/step, or a list a,b,c.
        #[arg(long, default_value = "4..16")]
        groups: String,
    },
    /// Check the prerequisites of every command and print how to install
    /// what is missing.
    Doctor,
    /// GM programs: `build` libgm (GM's C interface, gm.h, over the host
    /// driver) and the bundled GM programs, for C programs written for
    /// Myricom's GM to run on the emulated NIC (docs/gm-api.md).
    #[command(subcommand)]
    Gm(gm::GmCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let fat = match &cli.cmd {
        Cmd::Bench { firmware: false, .. } => fat::rerun_if_thin(&root, "`bench`"),
        Cmd::Report { backend, .. } if *backend != report::ReportBackend::Sim => {
            fat::rerun_if_thin(&root, "a live or qemu report")
        }
        _ => None,
    };
    if let Some(r) = fat {
        return match r {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = match cli.cmd {
        Cmd::Sim {
            file,
            json,
            seed,
            quiet,
            backend,
            timeout,
            pacing,
            pcap,
            trace,
            reliability,
            pricing,
        } => {
            let trace = trace.map(|t| sim::trace_path(t, &file));
            sim::run(
                &root,
                &file,
                &sim::SimArgs {
                    json,
                    seed,
                    quiet,
                    backend,
                    timeout,
                    pacing,
                    pcap,
                    trace,
                    reliability,
                    pricing,
                },
            )
        }
        Cmd::Trace(a) => trace::run(&a),
        Cmd::Bench {
            firmware: true,
            quick,
            json,
            functions,
            lines,
            top,
            nic,
            no_offloads,
            workloads,
            image,
            quiet,
            ..
        } => fwbench::run(
            &root,
            &fwbench::Options {
                quick,
                json,
                functions,
                lines,
                top,
                no_offloads,
                quiet,
                only: workloads,
                image,
                nic,
            },
        ),
        Cmd::Bench { api: true, runs, quiet, .. } => {
            bench_api::run(&root, runs, quiet).map(|_| ExitCode::SUCCESS)
        }
        Cmd::Bench { gm: true, rt_count, runs, quiet, .. } => {
            gm::bench(&root, rt_count, runs, quiet).map(|_| ExitCode::SUCCESS)
        }
        Cmd::Bench { profiles, quick, rate: true, .. } => bench::run_rate(&profiles, quick),
        Cmd::Bench { quick, scale: true, quiet, .. } => scale::run(quick, quiet),
        Cmd::Bench { multicast_cost: true, rt_count, runs, .. } => {
            mcast::bench_cost(&root, rt_count, runs)
        }
        Cmd::Bench { rt_count, realtime: true, no_qemu, no_live, quiet, .. } => {
            bench_rt::run(&root, rt_count, !no_live, !no_qemu, quiet).map(|_| ExitCode::SUCCESS)
        }
        Cmd::Bench { profiles, quick, no_speed, no_realtime, rt_count, quiet, .. } => {
            bench::run_all(&root, &profiles, quick, !no_speed, !no_realtime, rt_count, quiet)
        }
        Cmd::BuildFw { selftest, log } => fw::build_fw(&root, selftest, log),
        Cmd::Flash { node, image, cluster } => flash::run(&root, node, image, &cluster),
        Cmd::Run(a) => run::run(&root, &a),
        Cmd::Cluster(c) => cluster::run(&root, &c),
        Cmd::Gm(c) => gm::run(&root, &c),
        Cmd::Logs { node, file, cluster, image, follow } => match (file, node) {
            (Some(f), _) => logs::decode_file(&root, &f, image),
            (None, Some(n)) => logs::run(&root, n, &cluster, image, follow),
            (None, None) => Err("say which log: --node N (of --cluster) or --file PATH".into()),
        },
        Cmd::Gdb { node, cluster, name, nodes, image, batch, timeout, nx, sdma_only } => {
            let o = gdb::Opts {
                nodes: node,
                cluster,
                name,
                cluster_nodes: nodes,
                image,
                batch,
                timeout,
                sdma_only,
                nx,
            };
            gdb::run(&root, &o)
        }
        Cmd::Test { scenarios_only, no_nextest } => {
            testing::run(&root, scenarios_only, !no_nextest)
        }
        Cmd::Fuzz { scenarios: Some(n), seed, realtime, quiet, .. } => {
            fuzz_scenarios::run(&root, &fuzz_scenarios::Opts { cases: n, seed, realtime, quiet })
        }
        Cmd::Fuzz { steps, seed, cases, .. } => testing::fuzz_command(&root, steps, seed, cases),
        Cmd::Soak { messages, seed, quiet } => soak::run(messages, seed, quiet),
        Cmd::Demo { backend, json } => demo::run(&root, backend, json),
        Cmd::Calibrate { what: Some(w), from, quick, no_save, .. } if w == "firmware" => {
            fwcal::run(&root, from, quick, !no_save)
        }
        Cmd::Calibrate { what: Some(w), .. } => Err(format!(
            "calibrate {w}: no such calibration (`firmware`, or none for the rate-control one)"
        )),
        Cmd::Calibrate { from: Some(_), .. } => {
            Err("--from applies to `calibrate firmware` only".to_string())
        }
        Cmd::Calibrate { profiles, quick, no_save, .. } => {
            calibrate::run(&profiles, quick, !no_save)
        }
        Cmd::Report { which, out, profile, backend, quick, quiet, .. }
            if which == "collectives" =>
        {
            coll_report::report(out, profile, backend, quick, quiet)
        }
        Cmd::Report { which, out, profile, backend, quick, quiet, .. }
            if which == "reliability" =>
        {
            reliability::report(out, profile, backend, quick, quiet)
        }
        Cmd::Report { which, quick: true, .. } => Err(format!(
            "report {which}: --quick applies to `report collectives` and `report reliability` only"
        )),
        Cmd::Report { which, out, profile, quiet, .. } if which == "multicast" => {
            mcast::report(out, profile, quiet)
        }
        Cmd::Report { which, out, profile, backend, live_calibration, quiet, .. } => {
            report::run(&which, out, profile, backend, live_calibration, quiet)
        }
        Cmd::Model { which, profile, bytes, groups } => {
            mcast::model(&which, &profile, bytes, &groups)
        }
        Cmd::Doctor => prereq::doctor(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The workspace root: xtask lives one level below it.
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// Write to stdout, ignoring a closed pipe (`cargo xtask sim F --json | head`).
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// Errors of xtask itself: a message for the user.
pub type Result<T> = std::result::Result<T, String>;

#[cfg(test)]
mod report_render_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> String {
        let argv = std::iter::once("xtask").chain(args.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn counts_of_zero_are_refused_with_the_option_named() {
        for (args, opt) in [
            (&["bench", "--realtime", "--rt-count", "0"][..], "--rt-count"),
            (&["bench", "--multicast-cost", "--runs", "0"], "--runs"),
            (&["fuzz", "--steps", "0"], "--steps"),
            (&["fuzz", "--cases", "0"], "--cases"),
            (&["fuzz", "--scenarios", "0"], "--scenarios"),
        ] {
            let e = refused(args);
            assert!(e.contains(opt) && e.contains("must be at least 1"), "{args:?}: {e}");
        }
        assert!(refused(&["bench", "--runs", "x"]).contains("invalid digit"));
        // The scenario sweep takes none of the MCP fuzz's counts, and its
        // own options need it.
        assert!(refused(&["fuzz", "--scenarios", "5", "--steps", "3"]).contains("--steps"));
        assert!(refused(&["fuzz", "--realtime", "2"]).contains("--scenarios"));
        assert!(Cli::try_parse_from(["xtask", "fuzz", "--scenarios", "5", "--seed", "9"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "bench", "--realtime", "--rt-count", "1"]).is_ok());
    }

    #[test]
    fn a_gdb_batch_has_a_minute_unless_timeout_says_otherwise() {
        let timeout = |args: &[&str]| {
            let argv = ["xtask", "gdb", "--node", "0", "--cluster", "c"].into_iter();
            match Cli::try_parse_from(argv.chain(args.iter().copied())).unwrap().cmd {
                Cmd::Gdb { timeout, .. } => timeout,
                _ => unreachable!("parsed as gdb"),
            }
        };
        assert_eq!(timeout(&["--batch", "s.gdb"]), std::time::Duration::from_secs(60));
        assert_eq!(
            timeout(&["--batch", "s.gdb", "--timeout", "3"]),
            std::time::Duration::from_secs(3)
        );
        let e = refused(&["gdb", "--node", "0", "--batch", "s", "--timeout", "nan"]);
        assert!(e.contains("--timeout") && e.contains("more than 0 s"), "{e}");
        let e = refused(&["gdb", "--node", "0", "--timeout", "5"]);
        assert!(e.contains("--batch"), "a time limit without a batch script: {e}");
    }
}
