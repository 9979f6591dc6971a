//! nic-realtime (`nic_emu::realtime`): the real-time device process of
//! the `live` and `qemu` backends: a
//! cluster directory (`nic_cluster_dir::cluster`, docs/design/cluster-dir.md)
//! whose NICs run in wall-clock time, driven by ordinary host processes
//! that map the same files (`host_driver::LiveBackend`).
//!
//! ```text
//! RtCluster::start(RtConfig)   create the files, reset every NIC (the
//!                              sim's register/route setup), boot the
//!                              firmware, start the threads, publish
//!   .wait_running(timeout)     every NIC's FW_STATUS = RUNNING
//!   .nic_stats(n) / .log()     counters, what the supervisor did
//!   .reset_node(n)             as a reflash would
//!   .stop()                    (or drop) threads and guests stopped,
//!                              the directory removed
//! ```
//!
//! - Threads: by default ONE worker thread runs every NIC (its MCP in the
//!   live backend, its DMA engines, the fabric): no hand-off inside the
//!   cluster on a ping-pong. `RtConfig::threads` spreads NICs over more.
//!   Idle workers back off ([`Backoff`]). A supervisor thread watches port
//!   holders, flash files and QEMU guests (`supervise`).
//! - live: the MCP (`mcp` crate) runs natively over the mapped SRAM.
//! - qemu: one `qemu-system-riscv64` per NIC runs the image in the node's
//!   `flash` file with the `sram` file as its RAM (`qemu`); the workers
//!   run only the engines and the fabric for those NICs.
//!
//! Files: `hw.rs` (the native MCP's `Hw` over `MappedFile`), `engines.rs`
//! (the device model's DMA engines in wall-clock time, `device::Engines`), `fabric.rs` (links, switches, inboxes, pacing,
//! faults), `node.rs` (one NIC: RTC, reset, MCP), `worker.rs` (the loop
//! and its backoff), `supervise.rs`, `qemu.rs`, `process.rs` (running the
//! `nic-cluster` binary as a child process), `brm.rs` (the bandwidth
//! manager: per-node agents over the flow tables, the master process).
//! Mapped memory is touched only through `nic_cluster_dir::MappedFile`;
//! the one `unsafe` block is the send-DMA engine's CRC over a packet in
//! place (`MappedFile::with_bytes`, `engines`).
//!
//! Owns the device process's threads, guests and the BRM agents' sockets
//! (the only privileged writers of the flow tables). May touch the device
//! model and the fabric (one implementation with the sim's), the cluster
//! directory, the host driver (its `NicBackend` seam, `LiveBackend` to
//! wait for a NIC, thread pinning) and the BRM's messages; never the sim
//! or the scenario runner.

mod brm;
mod control;
mod elfpack;
mod engines;
mod fabric;
mod files;
mod hw;
mod irq;
mod node;
pub mod process;
pub mod qemu;
mod supervise;
pub use supervise::{reset_note, RESET_ASKED};
mod worker;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nic_abi::map;
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::stats::{stat_offset, ALL_STATS, STAT_COUNT};
use nic_abi::NUM_PORTS;
use nic_cluster_dir::cluster::{self, ClusterBackend, ClusterDir, ClusterError, ClusterManifest};
use nic_cluster_dir::{ClusterLocation, MappedFile};

pub use brm::{BrmSetup, FlowTableBackend, MASTER_READY};
pub use fabric::Pacing;
pub use irq::IrqCounters;
pub use nic_fabric::fabric::SourceDrops;
pub use node::NodeCounters;
pub use worker::Backoff;

use host_brm::Calibration;
use nic_device::faults::Faults;
use nic_device::profile::Profile;
use nic_fabric::plan::{plan, EmuError, Plan};
use nic_fabric::stats::LinkStats;
use nic_fabric::topology::Topology;

use engines::RtEngines;
use fabric::RtFabric;
use node::{NodeRt, NodeShared, ResetParams};

/// How to start a real-time cluster.
#[derive(Debug, Clone)]
pub struct RtConfig {
    /// Cluster name (one path component of letters, digits, `-`, `_` and
    /// `.`, under `cluster::base_dir()`) or directory path (it holds a
    /// `/`: a new directory, or a cluster directory of this user's;
    /// `ClusterLocation::parse`).
    pub cluster: String,
    pub backend: ClusterBackend,
    pub nodes: usize,
    pub profile: Profile,
    pub topology: Topology,
    /// The firmware image (ELF) written into every node's flash (qemu;
    /// required there). Ignored by live clusters, which run the MCP
    /// natively.
    pub image: Option<PathBuf>,
    /// SRAM bytes per NIC. Default: the profile's; under QEMU at least
    /// `qemu::QEMU_SRAM_MIN` (8 MiB).
    pub sram_size: Option<u64>,
    /// Host memory bytes per node (`cluster::DEFAULT_HOST_SIZE`).
    pub host_size: u64,
    pub pacing: Pacing,
    /// Seeded fault injection on the links (none by default).
    pub faults: Faults,
    pub seed: u64,
    /// Override of the profile's send timeout (us).
    pub send_timeout_us: Option<f64>,
    /// Worker threads the NICs are spread over (1: one thread runs all).
    pub threads: usize,
    /// CPUs the worker threads run on (empty: wherever the OS puts them).
    /// One core for the device threads and the rest for the host
    /// programs (their `--cpus`) is the real thing's layout: the NIC has
    /// a processor of its own.
    pub cpus: Vec<usize>,
    /// qemu: CPUs the guests run on, through util-linux's taskset (empty:
    /// wherever the OS puts them). Under QEMU the NIC's processor is its
    /// guest: on a small machine a core of the guests' own, the device
    /// threads beside the host programs, answers fastest
    /// (docs/design/performance.md).
    pub guest_cpus: Vec<usize>,
    pub backoff: Backoff,
    /// qemu: start this node's guest halted (`-S`) with a gdbstub on
    /// 127.0.0.1:`gdb_port` (0: a port the OS picks; the manifest names it).
    pub halted_node: Option<(usize, u16)>,
    /// qemu: a guest whose firmware has not reported RUNNING this long
    /// after it started (at cluster start, or after a reset or reflash) is
    /// stopped and its NIC marked halted, said in the log (30 s; not for
    /// the node halted under gdb).
    pub boot_timeout: Duration,
    /// The QEMU program (name on PATH or path).
    pub qemu_program: String,
    /// More QEMU arguments.
    pub qemu_args: Vec<String>,
    /// Echo the supervisor's notes on stderr.
    pub log_to_stderr: bool,
    /// Run a bandwidth resource manager: an agent per node in this
    /// process (`node<N>/brm-agent.sock`) and the master as a child
    /// process (`nic-cluster brm`, on `brm.sock`). None: no BRM.
    pub brm: Option<BrmSetup>,
    /// Users (uids) besides this process's and root's whose programs may
    /// attach to the cluster's ports through the control sockets.
    pub allow_uids: Vec<u32>,
    /// How many ports of each node one allowed user's processes may hold
    /// at once (the cluster's owner and root: all of them), so that no
    /// allowed user can take every port of a node.
    pub ports_per_user: u8,
    /// The receive-DMA engines check every packet's CRC, as debug builds
    /// do, not only a corrupted one's (release builds skip the redundant
    /// check): a test's way to see that every packet arrived as its
    /// sender's engine sealed it (a lent transmit buffer refilled before
    /// its bytes were taken fails it).
    pub check_crc: bool,
}

impl RtConfig {
    /// `nodes` NICs of `backend`, lanai9-gm profile, star topology, as
    /// fast as possible, no faults, one worker thread.
    pub fn new(cluster: &str, backend: ClusterBackend, nodes: usize) -> RtConfig {
        RtConfig {
            cluster: cluster.to_string(),
            backend,
            nodes,
            profile: Profile::load("lanai9-gm").expect("built-in profile"),
            topology: Topology::Star,
            image: None,
            sram_size: None,
            host_size: cluster::DEFAULT_HOST_SIZE,
            pacing: Pacing::AsFastAsPossible,
            faults: Faults::NONE,
            seed: 0,
            send_timeout_us: None,
            threads: 1,
            cpus: Vec::new(),
            guest_cpus: Vec::new(),
            backoff: Backoff::default(),
            halted_node: None,
            boot_timeout: Duration::from_secs(30),
            qemu_program: qemu::QEMU_PROGRAM.to_string(),
            qemu_args: Vec::new(),
            log_to_stderr: false,
            brm: None,
            allow_uids: Vec::new(),
            ports_per_user: DEFAULT_PORTS_PER_USER,
            check_crc: false,
        }
    }

    /// The SRAM size this configuration gives each NIC.
    pub fn effective_sram_size(&self) -> u64 {
        let base = self.sram_size.unwrap_or(self.profile.nic.sram_bytes as u64);
        match (self.backend, self.sram_size) {
            (ClusterBackend::Qemu, None) => base.max(qemu::QEMU_SRAM_MIN).next_multiple_of(2 << 20),
            _ => base,
        }
    }
}

/// Why a real-time cluster could not start (or stop).
#[derive(Debug)]
pub enum RtError {
    /// The configuration is inconsistent (the message names the field).
    Config(String),
    Emu(EmuError),
    Cluster(ClusterError),
    /// A program the backend needs is not installed.
    MissingProgram {
        program: String,
        needed_for: String,
    },
    Io {
        what: String,
        err: io::Error,
    },
    /// The firmware did not start on a node.
    Firmware {
        node: usize,
        message: String,
    },
    Timeout(String),
}

impl fmt::Display for RtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RtError::Config(m) => f.write_str(m),
            RtError::Emu(e) => e.fmt(f),
            RtError::Cluster(e) => e.fmt(f),
            RtError::MissingProgram { program, needed_for } => write!(
                f,
                "`{program}` is not installed (not found on PATH); it is needed for {needed_for} \
                 (Debian/Ubuntu: apt-get install qemu-system-misc)"
            ),
            RtError::Io { what, err } => write!(f, "{what}: {err}"),
            RtError::Firmware { node, message } => write!(f, "node {node}: {message}"),
            RtError::Timeout(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RtError {}

impl From<EmuError> for RtError {
    fn from(e: EmuError) -> RtError {
        RtError::Emu(e)
    }
}

impl From<ClusterError> for RtError {
    fn from(e: ClusterError) -> RtError {
        RtError::Cluster(e)
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RtError {
    let what = what.into();
    move |err| RtError::Io { what, err }
}

/// A warning when the file system holding `dir` has less room than
/// `nodes` nodes' files could take once every page is touched (`sram` and
/// `host` memory each; they are sparse, so a cluster usually needs far
/// less): the node whose file first finds no room stops then.
fn room_warning(dir: &ClusterDir, nodes: u64, sram: u64, host: u64) -> Option<String> {
    use nic_cluster_dir::mapped::{bytes, fs_space};
    let need = nodes.saturating_mul(sram.saturating_add(host));
    let space = fs_space(dir.path()).ok()?;
    (space.free < need).then(|| {
        format!(
            "the file system holding {} has {space}, and the cluster's files may take up to {} \
             ({nodes} x ({} of SRAM + {} of host memory)): a node whose files need a page that \
             the file system cannot give will stop",
            dir.path().display(),
            bytes(need),
            bytes(sram),
            bytes(host)
        )
    })
}

/// Notes a device process keeps in memory at most (`RtCluster::notes`).
pub const MAX_NOTES: usize = 4096;

/// What the threads share.
pub(crate) struct Ctx {
    pub fabric: RtFabric,
    pub stop: AtomicBool,
    origin: Instant,
    pub backoff: Backoff,
    pub params: ResetParams,
    pub nodes: Vec<NodeShared>,
    /// The running guest of each node (0: none).
    pub qemu_pids: Vec<AtomicU32>,
    notes: Mutex<Vec<String>>,
    log_to_stderr: bool,
}

impl Ctx {
    /// The cluster clock: ns since the cluster started.
    #[inline]
    pub fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Record something the device process did or saw. The notes kept in
    /// memory are bounded ([`MAX_NOTES`]: the oldest quarter goes when
    /// full); whoever may cause one note per request notes the first few
    /// and counts the rest.
    pub fn note(&self, msg: String) {
        if self.log_to_stderr {
            // Not eprintln, which panics when stderr fails (a log file on
            // a full file system).
            use std::io::Write;
            let _ = writeln!(io::stderr(), "nic-cluster: {msg}");
        }
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if notes.len() >= MAX_NOTES {
            notes.drain(..MAX_NOTES / 4);
        }
        notes.push(msg);
    }
}

/// One NIC's counters: the firmware's STATS block (read from SRAM) and
/// the device process's own.
#[derive(Debug, Clone, PartialEq)]
pub struct RtNicStats {
    pub node: usize,
    /// The firmware's STATS block, by `nic_abi::stats::Stat as usize`.
    pub fw: [u64; STAT_COUNT],
    pub fw_status: u32,
    /// Engines, MCP polls, resets (a snapshot: a few ms old while busy).
    pub counters: NodeCounters,
    /// Fabric drops of packets this NIC sent.
    pub drops: SourceDrops,
}

/// Ports of a node an allowed user (`RtConfig::allow_uids`) may hold at
/// once, unless told otherwise: half of them.
pub const DEFAULT_PORTS_PER_USER: u8 = (NUM_PORTS / 2) as u8;

/// A running real-time cluster. Dropping it stops it.
pub struct RtCluster {
    ctx: Arc<Ctx>,
    dir: ClusterDir,
    srams: Vec<Arc<MappedFile>>,
    workers: Vec<JoinHandle<()>>,
    supervisor: Option<JoinHandle<()>>,
    halted_node: Option<usize>,
    stopped: bool,
    /// This cluster's entry in `serving()`.
    key: Option<PathBuf>,
    /// The BRM agents (RtConfig::brm).
    agents: Option<brm::Agents>,
    /// The BRM master process.
    master: Option<brm::MasterProcess>,
    /// The control sockets (the privileged side of every port).
    control: Option<control::Control>,
    /// qemu: the guests' interrupt sockets.
    irq: Option<irq::IrqServer>,
}

/// The calibration the BRM master of `cfg` decides with: the file named,
/// or the profile's stored one; it must match the profile's clock and MTU.
fn brm_calibration(cfg: &RtConfig, b: &BrmSetup) -> Result<Calibration, RtError> {
    let p = &cfg.profile;
    let c = match &b.calibration {
        Some(f) => {
            let c = Calibration::read_file(f)
                .map_err(|e| RtError::Config(format!("brm: calibration {e}")))?;
            if c.rtc_hz != p.nic.rtc_hz || c.mtu != p.nic.mtu {
                return Err(RtError::Config(format!(
                    "brm: calibration {} was measured with rtc_hz {} and mtu {}; profile `{}` \
                     has {} and {}",
                    f.display(),
                    c.rtc_hz,
                    c.mtu,
                    p.name,
                    p.nic.rtc_hz,
                    p.nic.mtu
                )));
            }
            c
        }
        None => {
            Calibration::for_profile(&p.name, p).map_err(RtError::Config)?.ok_or_else(|| {
                RtError::Config(format!(
                "brm: profile `{}` has no rate-control calibration (run `cargo xtask calibrate \
                 --profile {}`, or give one: BrmSetup::calibration, --brm-calibration)",
                p.name, p.name
            ))
            })?
        }
    };
    Ok(c)
}

/// Cluster directories served by this process (a second start at the same
/// place would replace the files of a running cluster).
fn serving() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<PathBuf>> {
    static S: Mutex<std::collections::BTreeSet<PathBuf>> =
        Mutex::new(std::collections::BTreeSet::new());
    // A poisoned lock only means a panic elsewhere; the set is still valid.
    S.lock().unwrap_or_else(|e| e.into_inner())
}

impl RtCluster {
    /// Create the cluster directory, reset every NIC, boot the firmware
    /// (native MCPs, or QEMU guests), start the threads, and publish the
    /// manifest. Returns once host processes can find the cluster; live
    /// NICs are running by then, QEMU guests are still booting
    /// (`wait_running`).
    pub fn start(cfg: RtConfig) -> Result<RtCluster, RtError> {
        if cfg.nodes == 0 {
            return Err(RtError::Config("nodes: a cluster needs at least one node".into()));
        }
        let Plan { layout, send_timeout_ns, routes } =
            plan(&cfg.profile, cfg.nodes, cfg.topology, &cfg.faults, cfg.send_timeout_us)?;
        let qemu = cfg.backend == ClusterBackend::Qemu;
        host_driver::affinity::check_available(&cfg.cpus)
            .map_err(|e| RtError::Config(format!("cpus: {e}")))?;
        host_driver::affinity::check_available(&cfg.guest_cpus)
            .map_err(|e| RtError::Config(format!("guest_cpus: {e}")))?;
        if !qemu && !cfg.guest_cpus.is_empty() {
            return Err(RtError::Config("guest_cpus: only a qemu cluster has guests".into()));
        }
        let sram_size = cfg.effective_sram_size();
        if sram_size < map::SRAM_MIN as u64 || sram_size > u32::MAX as u64 {
            return Err(RtError::Config(format!(
                "sram_size: {sram_size} out of range ({}..={})",
                map::SRAM_MIN,
                u32::MAX
            )));
        }
        if qemu && (sram_size < qemu::QEMU_SRAM_MIN || !sram_size.is_multiple_of(2 << 20)) {
            return Err(RtError::Config(format!(
                "sram_size: {sram_size}: under QEMU it must be a multiple of 2 MiB and at least \
                 {} so that QEMU's device tree (at {:#x}) lands above the SRAM map (ends {:#x})",
                qemu::QEMU_SRAM_MIN,
                qemu::fdt_offset(sram_size),
                map::MAP_END
            )));
        }
        if let Some((node, _)) = cfg.halted_node {
            if !qemu {
                return Err(RtError::Config(
                    "halted_node: only a QEMU guest can start halted for a debugger".into(),
                ));
            }
            if node >= cfg.nodes {
                return Err(RtError::Config(format!(
                    "halted_node: node {node} does not exist (nodes 0 to {})",
                    cfg.nodes.saturating_sub(1)
                )));
            }
        }
        let qemu_spec = if qemu {
            let program =
                qemu::find_program(&cfg.qemu_program).ok_or_else(|| RtError::MissingProgram {
                    program: cfg.qemu_program.clone(),
                    needed_for: "the qemu backend (one guest per NIC)".into(),
                })?;
            let image = cfg.image.as_ref().ok_or_else(|| {
                RtError::Config("image: the qemu backend needs a firmware image (ELF)".into())
            })?;
            qemu::check_riscv_elf(image).map_err(RtError::Config)?;
            let pin = match (cfg.guest_cpus.is_empty(), qemu::find_program("taskset")) {
                (true, _) => None,
                (false, Some(ts)) => Some((ts, cfg.guest_cpus.clone())),
                (false, None) => {
                    return Err(RtError::MissingProgram {
                        program: "taskset".into(),
                        needed_for: "pinning the QEMU guests (guest_cpus)".into(),
                    })
                }
            };
            // Every guest gets a gdbstub (running, not halted, unless it is
            // the halted node), its port published for `xtask gdb --cluster`.
            let gdb = qemu::gdb_listeners(cfg.nodes, cfg.halted_node)
                .map_err(io_err("listening for the gdbstubs"))?;
            Some(qemu::QemuSpec {
                program,
                setpriv: qemu::find_program("setpriv"),
                pin,
                sram_size,
                extra_args: cfg.qemu_args.clone(),
                gdb,
            })
        } else {
            None
        };

        let brm = match &cfg.brm {
            Some(b) => Some((brm::master_program(b.program.as_ref())?, brm_calibration(&cfg, b)?)),
            None => None,
        };

        // A name (one component, under the base directory) or a path: a
        // new directory, or one of this user's cluster directories
        // (`ClusterDir::create_unpublished` checks before it changes
        // anything).
        let location = ClusterLocation::parse(&cfg.cluster)?;
        let path = location.path();
        let name = location.cluster_name();
        let mut manifest = ClusterManifest::new(
            &name,
            cfg.backend,
            cfg.nodes as u32,
            &cfg.profile.name,
            sram_size,
            cfg.host_size,
        );
        manifest.users = cfg.allow_uids.clone();
        if let Some(spec) = &qemu_spec {
            manifest.gdb_ports = spec
                .gdb
                .iter()
                .map(|l| l.local_addr().map(|a| a.port()))
                .collect::<io::Result<_>>()
                .map_err(io_err("reading the gdbstubs' ports"))?;
        }
        let key = std::fs::canonicalize(path.parent().unwrap_or(Path::new(".")))
            .map(|p| p.join(&name))
            .unwrap_or_else(|_| path.clone());
        if !serving().insert(key.clone()) {
            return Err(RtError::Cluster(ClusterError::Exists {
                path: path.clone(),
                pid: std::process::id(),
            }));
        }
        let result = ClusterDir::create_unpublished(&path, &manifest)
            .map_err(RtError::from)
            .and_then(|dir| {
                let r = RtCluster::boot(
                    cfg,
                    dir.clone(),
                    layout,
                    send_timeout_ns,
                    routes,
                    qemu_spec,
                    brm,
                );
                if r.is_err() {
                    let _ = dir.remove();
                }
                r
            });
        match result {
            Ok(mut c) => {
                c.key = Some(key);
                Ok(c)
            }
            Err(e) => {
                serving().remove(&key);
                Err(e)
            }
        }
    }

    fn boot(
        cfg: RtConfig,
        dir: ClusterDir,
        layout: nic_fabric::topology::Layout,
        send_timeout_ns: u64,
        routes: Vec<Vec<Vec<u8>>>,
        qemu_spec: Option<qemu::QemuSpec>,
        brm: Option<(PathBuf, Calibration)>,
    ) -> Result<RtCluster, RtError> {
        let n = cfg.nodes;
        // Every mapping holds its files open: a node's SRAM is ten files,
        // its host memory nine, and each is mapped twice.
        if let Err(e) = nic_cluster_dir::mapped::raise_open_file_limit() {
            eprintln!("nic-cluster: cannot raise the open-file limit: {e}");
        }
        // A page of a node file that cannot be backed (a full file
        // system) stops that node, not this process (`worker`).
        nic_cluster_dir::mapped::set_fault_policy(nic_cluster_dir::mapped::FaultPolicy::Isolate);
        let room = room_warning(&dir, n as u64, cfg.effective_sram_size(), cfg.host_size);
        // Each port's window and slice is opened once, and every mapping
        // of it here (and QEMU's window) shares that open: how the control
        // sockets tell whether an earlier holder still maps a port.
        let files = (0..n as u32)
            .map(|node| files::NodeFiles::open(&dir, node).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io_err("opening the ports' files"))?;
        let map_sram = |node: u32| {
            files[node as usize]
                .map_sram(&dir, node)
                .map_err(io_err(format!("mapping {}", dir.sram_path(node).display())))
        };
        let map_host = |node: u32| {
            files[node as usize]
                .map_host(&dir, node)
                .map_err(io_err(format!("mapping {}", dir.host_path(node).display())))
        };
        if let (Some(image), Some(_)) = (&cfg.image, &qemu_spec) {
            for node in 0..n as u32 {
                qemu::write_flash(image, &dir.flash_path(node))
                    .map_err(io_err(format!("writing {}", dir.flash_path(node).display())))?;
            }
        }
        let params = ResetParams {
            profile: cfg.profile.clone(),
            nodes: n,
            send_timeout_ns,
            routes,
            host_size: cfg.host_size,
        };
        // The shared view of every SRAM: the supervisor's, the control
        // sockets', and the fabric's (it reads lent packets there).
        let srams = (0..n)
            .map(|node| map_sram(node as u32).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let mut fabric =
            RtFabric::new(&layout, &cfg.profile, cfg.seed, cfg.faults, cfg.pacing, srams.clone());
        fabric.check_crc = cfg.check_crc;
        let ctx = Arc::new(Ctx {
            fabric,
            stop: AtomicBool::new(false),
            origin: Instant::now(),
            backoff: cfg.backoff,
            params,
            nodes: (0..n).map(|_| NodeShared::default()).collect(),
            qemu_pids: (0..n).map(|_| AtomicU32::new(0)).collect(),
            notes: Mutex::new(Vec::new()),
            log_to_stderr: cfg.log_to_stderr,
        });
        if let Some(w) = room {
            ctx.note(w);
        }
        // Reset every NIC (and boot the native MCPs) before anyone can
        // find the cluster.
        let mut nics = Vec::with_capacity(n);
        let mut hosts = Vec::with_capacity(n);
        let lines: Vec<Arc<irq::IrqLine>> = match qemu_spec {
            Some(_) => (0..n).map(|_| Arc::default()).collect(),
            None => Vec::new(),
        };
        for node in 0..n {
            let sram = map_sram(node as u32)?;
            let host = map_host(node as u32)?;
            hosts.push(Arc::new(map_host(node as u32)?));
            let mcp = (qemu_spec.is_none()).then(Box::<mcp::Mcp>::default);
            let eng = RtEngines::new(node, sram, host);
            let line = lines.get(node).cloned();
            let mut nic = NodeRt::new(node, eng, mcp, line, cfg.profile.nic.rtc_hz);
            nic.reset(&ctx.fabric, &mut fabric::Held::none(), &ctx.params, ctx.now(), true)
                .map_err(|message| RtError::Firmware { node, message })?;
            if let Some(f) = nic.file_fault() {
                return Err(RtError::Io {
                    what: format!("node {node}: {} file {}", f.what, f.fault.path.display()),
                    err: io::Error::new(
                        match f.fault.cause {
                            nic_cluster_dir::mapped::FaultCause::NoSpace => {
                                io::ErrorKind::StorageFull
                            }
                            nic_cluster_dir::mapped::FaultCause::Io => io::ErrorKind::Other,
                        },
                        match nic_cluster_dir::mapped::fs_space(&f.fault.path) {
                            Ok(s) => format!("{} ({s})", f.fault.cause),
                            Err(_) => f.fault.cause.to_string(),
                        },
                    ),
                });
            }
            nics.push(nic);
        }
        let threads = cfg.threads.clamp(1, n);
        let mut per: Vec<Vec<NodeRt>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, nic) in nics.into_iter().enumerate() {
            per[i % threads].push(nic);
        }
        let mut c = RtCluster {
            ctx: ctx.clone(),
            dir: dir.clone(),
            srams,
            workers: Vec::new(),
            supervisor: None,
            halted_node: cfg.halted_node.map(|h| h.0),
            stopped: false,
            key: None,
            agents: None,
            master: None,
            control: None,
            irq: None,
        };
        if !lines.is_empty() {
            // Listening before any guest starts: QEMU connects at once and
            // waits for the set-up.
            c.irq = Some(irq::IrqServer::start(ctx.clone(), &dir, &lines, &files)?);
        }
        for (i, nodes) in per.into_iter().enumerate() {
            let ctx = ctx.clone();
            let cpus = cfg.cpus.clone();
            let h = std::thread::Builder::new()
                .name(format!("nic-rt-{i}"))
                .spawn(move || {
                    if let Err(e) = host_driver::affinity::pin_current_thread(&cpus) {
                        ctx.note(format!("device thread {i}: {e}"));
                    }
                    worker::run(nodes, ctx)
                })
                .map_err(io_err("starting a device thread"))?;
            c.workers.push(h);
        }
        let sup = supervise::Supervisor {
            ctx: ctx.clone(),
            dir: dir.clone(),
            srams: c.srams.clone(),
            hosts: hosts.clone(),
            qemu: qemu_spec,
            halted: cfg.halted_node,
            boot_timeout: cfg.boot_timeout,
        };
        let (tx, rx) = mpsc::channel();
        c.supervisor = Some(
            std::thread::Builder::new()
                .name("nic-rt-supervisor".into())
                .spawn(move || sup.run(tx))
                .map_err(io_err("starting the supervisor thread"))?,
        );
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(RtError::Config("the supervisor thread died".into())),
        }
        if brm.is_some() {
            c.agents = Some(brm::Agents::start(ctx.clone(), &dir, &c.srams)?);
        }
        c.control = Some(control::Control::start(
            ctx.clone(),
            &dir,
            &c.srams,
            &hosts,
            &files,
            control::Allowed { uids: cfg.allow_uids.clone(), ports: cfg.ports_per_user },
        )?);
        dir.publish()?;
        if let Some((program, cal)) = brm {
            let cal_path = dir.path().join(cluster::BRM_CALIBRATION);
            std::fs::write(&cal_path, cal.to_toml())
                .map_err(io_err(format!("writing {}", cal_path.display())))?;
            let args: Vec<String> = vec![
                "brm".into(),
                "--cluster".into(),
                dir.path().display().to_string(),
                "--topology".into(),
                cfg.topology.name().into(),
                "--switch-ports".into(),
                cfg.profile.switch.ports.to_string(),
                "--calibration".into(),
                cal_path.display().to_string(),
            ];
            c.master = Some(brm::MasterProcess::spawn(&program, &args, Duration::from_secs(20))?);
        }
        Ok(c)
    }

    /// The cluster directory.
    pub fn dir(&self) -> &ClusterDir {
        &self.dir
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn manifest(&self) -> &ClusterManifest {
        self.dir.manifest()
    }

    pub fn nodes(&self) -> usize {
        self.srams.len()
    }

    /// `FW_STATUS` of every NIC.
    pub fn fw_status(&self) -> Vec<u32> {
        self.srams.iter().map(|s| s.load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0)).collect()
    }

    /// Wait until every NIC's firmware runs (a node started halted for a
    /// debugger excepted). Err names the nodes still not running, and a
    /// halted firmware fails at once.
    pub fn wait_running(&self, timeout: Duration) -> Result<(), RtError> {
        self.wait_running_or_stop(timeout, &AtomicBool::new(false)).map(|_| ())
    }

    /// As [`RtCluster::wait_running`], but `stop` becoming true (a
    /// signal) ends the wait at once: Ok(false).
    pub fn wait_running_or_stop(
        &self,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<bool, RtError> {
        let t = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let st = self.fw_status();
            let pending: Vec<usize> = (0..st.len())
                .filter(|&n| Some(n) != self.halted_node && st[n] != regs::FW_RUNNING)
                .collect();
            if pending.is_empty() {
                return Ok(true);
            }
            let qemu = self.manifest().backend == ClusterBackend::Qemu;
            let dead = |n: usize| qemu && self.qemu_pid(n).is_none();
            if let Some(n) = (0..st.len()).find(|&n| st[n] == regs::FW_HALTED || dead(n)) {
                return Err(RtError::Firmware { node: n, message: self.why_down(n) });
            }
            if t.elapsed() >= timeout {
                return Err(RtError::Timeout(format!(
                    "firmware not running after {timeout:?} on node(s) {pending:?} (see the \
                     console.log and qemu.log files under {})",
                    self.dir.path().display()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Why node `n` is not running: its firmware halted, or its guest
    /// exited (with the end of its qemu.log).
    fn why_down(&self, n: usize) -> String {
        let nd = self.dir.node_dir(n as u32);
        if self.manifest().backend != ClusterBackend::Qemu {
            return "firmware halted".into();
        }
        let log = std::fs::read_to_string(nd.join("qemu.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{} (see {} and {}){}",
            if self.qemu_pid(n).is_none() { "QEMU exited" } else { "firmware halted" },
            nd.join("qemu.log").display(),
            nd.join("console.log").display(),
            if tail.is_empty() { String::new() } else { format!(":\n{}", tail.join("\n")) }
        )
    }

    /// Reset NIC `node` as a reflash would (asynchronous: the supervisor
    /// carries it out within a few ms).
    pub fn reset_node(&self, node: usize) {
        if let Some(s) = self.ctx.nodes.get(node) {
            s.reset_wanted.store(true, Ordering::Release);
        }
    }

    /// The pid of node `node`'s QEMU guest, if one runs.
    pub fn qemu_pid(&self, node: usize) -> Option<u32> {
        let p = self.ctx.qemu_pids.get(node)?.load(Ordering::Relaxed);
        (p != 0).then_some(p)
    }

    /// Node `node`'s counters.
    pub fn nic_stats(&self, node: usize) -> RtNicStats {
        let s = &self.srams[node];
        let mut fw = [0u64; STAT_COUNT];
        for st in ALL_STATS {
            fw[st as usize] = s.load_u64(stat_offset(st) as u64).unwrap_or(0);
        }
        RtNicStats {
            node,
            fw,
            fw_status: s.load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0),
            counters: *self.ctx.nodes[node].snapshot.lock().unwrap_or_else(|e| e.into_inner()),
            drops: self.ctx.fabric.source_drops(node),
        }
    }

    /// Every link's counters (link order as in the sim).
    pub fn link_stats(&self) -> Vec<LinkStats> {
        self.ctx.fabric.link_stats()
    }

    /// The cluster clock: ns since the cluster started.
    pub fn now_ns(&self) -> u64 {
        self.ctx.now()
    }

    /// Take cables down for a while, on the cluster clock
    /// (`nic_fabric::fabric::Outage`; everything entering them then is lost).
    pub fn set_link_outages(&self, outages: &[nic_fabric::fabric::Outage]) -> Result<(), String> {
        self.ctx.fabric.set_outages(outages)
    }

    /// Capture every packet the fabric carries from now on into a pcapng
    /// file (`nic_fabric::capture`; timestamps on the cluster clock).
    pub fn capture_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.ctx.fabric.capture_to(path)
    }

    /// Stop capturing and flush the file: the records it holds.
    pub fn finish_capture(&self) -> std::io::Result<u64> {
        self.ctx.fabric.finish_capture()
    }

    /// Packets lost to each outage of `set_link_outages`, by its index.
    pub fn outage_drops(&self) -> Vec<u64> {
        self.ctx.fabric.outage_drops()
    }

    /// Is port `port` of `node` open as the host sees it (STATE)?
    pub fn port_open(&self, node: usize, port: u8) -> bool {
        (port as usize) < NUM_PORTS
            && self.srams[node].load_u32(port_reg(port as usize, pcb::STATE) as u64)
                == Some(pcb::STATE_OPEN)
    }

    /// What the device process did or saw so far (closed ports of dead
    /// holders, resets, guests that exited).
    pub fn notes(&self) -> Vec<String> {
        self.ctx.notes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The BRM master's pid, while it runs (RtConfig::brm).
    pub fn brm_pid(&mut self) -> Option<u32> {
        let m = self.master.as_mut()?;
        if m.exited() {
            return None;
        }
        m.pid()
    }

    /// What the BRM agents saw: (commands answered, malformed commands,
    /// connections dropped for a broken frame, refused SRAM accesses).
    /// None without a BRM.
    pub fn brm_agent_counters(&self) -> Option<(u64, u64, u64, u64)> {
        let a = self.agents.as_ref()?;
        let c = &a.counters;
        Some((c.frames(), c.malformed(), c.broken(), a.refused_accesses()))
    }

    /// What the control sockets saw: (ports handed out, requests or
    /// writes refused, peers refused for their uid, connections dropped
    /// for a broken frame, ports closed for a holder gone).
    pub fn control_counters(&self) -> (u64, u64, u64, u64, u64) {
        let Some(c) = self.control.as_ref() else { return (0, 0, 0, 0, 0) };
        let c = &c.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (l(&c.attaches), l(&c.refused), l(&c.peers_refused), l(&c.broken), l(&c.closed_for_holder))
    }

    /// More of what the control sockets saw: (attaches answered `Busy`
    /// because an earlier holder's process, or one it forked, still
    /// mapped the port; connections refused past the per-node limit or
    /// failed accepts for want of descriptors).
    pub fn control_limits(&self) -> (u64, u64) {
        let Some(c) = self.control.as_ref() else { return (0, 0) };
        let c = &c.counters;
        (c.still_mapped.load(Ordering::Relaxed), c.over_limit.load(Ordering::Relaxed))
    }

    /// What the interrupt sockets saw (qemu): guests given their
    /// doorbell, connections refused, connections dropped. None on live.
    pub fn irq_counters(&self) -> Option<&IrqCounters> {
        self.irq.as_ref().map(|i| &*i.counters)
    }

    /// Serve until `stop` becomes true (e.g. set by a signal handler).
    pub fn serve_until(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) && !self.ctx.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop the threads and the guests, and remove the cluster directory
    /// (the manifest first, so nobody attaches to a dying cluster).
    pub fn stop(mut self) -> Result<(), RtError> {
        self.stop_inner()
    }

    /// Stop every thread and guest of the cluster but keep its files: the
    /// counters read after this ([`RtCluster::nic_stats`]) are final, the
    /// workers having carried out whatever was asked of them (a reset
    /// announced just before). [`RtCluster::stop`] then removes the files.
    ///
    /// Bounded: the threads are joined by a thread of its own, and a
    /// thread not ended within [`HALT_WAIT`] is left behind (said in the
    /// notes) so that a stop always completes; it ends with the process.
    pub fn halt(&mut self) {
        let master = self.master.take();
        let supervisor = self.supervisor.take();
        let workers: Vec<JoinHandle<()>> = self.workers.drain(..).collect();
        let (mut agents, mut control, mut irq) =
            (self.agents.take(), self.control.take(), self.irq.take());
        if master.is_none() && supervisor.is_none() && workers.is_empty() {
            // Halted before (or never started): only what is left.
            self.ctx.stop.store(true, Ordering::Relaxed);
        }
        let ctx = self.ctx.clone();
        let (tx, rx) = mpsc::channel::<Halting>();
        let joiner = move || {
            let at = |stage: &'static str| {
                let _ = tx.send(Halting::At(stage));
            };
            // The master first: it talks to the agents.
            if let Some(mut m) = master {
                at("the bandwidth manager's master process");
                m.stop();
            }
            ctx.stop.store(true, Ordering::Relaxed);
            at("the supervisor thread");
            if let Some(h) = supervisor {
                let _ = h.join();
            }
            at("the device threads");
            for h in workers {
                let _ = h.join();
            }
            at("the bandwidth manager's agents");
            if let Some(a) = agents.as_mut() {
                a.join();
            }
            at("the control sockets' threads");
            if let Some(c) = control.as_mut() {
                c.join();
            }
            at("the interrupt sockets' thread");
            if let Some(i) = irq.as_mut() {
                i.join();
            }
            let _ = tx.send(Halting::Done(Box::new((agents, control, irq))));
        };
        if let Err(e) = std::thread::Builder::new().name("nic-rt-halt".into()).spawn(joiner) {
            // (The closure is gone with the error: its threads end with
            // the process.)
            self.ctx.stop.store(true, Ordering::Relaxed);
            self.ctx.note(format!("cannot start a thread to stop the cluster's threads: {e}"));
            return;
        }
        let t = Instant::now();
        let mut stage = "the cluster's threads";
        loop {
            match rx.recv_timeout(HALT_WAIT.saturating_sub(t.elapsed())) {
                Ok(Halting::At(s)) => stage = s,
                Ok(Halting::Done(parts)) => {
                    (self.agents, self.control, self.irq) = *parts;
                    return;
                }
                Err(_) => {
                    self.ctx.stop.store(true, Ordering::Relaxed);
                    self.ctx.note(format!(
                        "{stage} did not end within {HALT_WAIT:?} of the stop; stopping without \
                         waiting for them"
                    ));
                    return;
                }
            }
        }
    }

    fn stop_inner(&mut self) -> Result<(), RtError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.halt();
        let r = self.dir.clone().remove();
        if let Some(k) = self.key.take() {
            serving().remove(&k);
        }
        r.map_err(RtError::from)
    }
}

/// Longest wait for the cluster's threads to end when it stops
/// (`RtCluster::halt`).
pub const HALT_WAIT: Duration = Duration::from_secs(3);

/// What the thread that stops a cluster's threads reports.
enum Halting {
    /// Now waiting for this.
    At(&'static str),
    /// All ended: the parts to keep (their counters stay readable).
    Done(Box<HaltedParts>),
}

type HaltedParts = (Option<brm::Agents>, Option<control::Control>, Option<irq::IrqServer>);

impl Drop for RtCluster {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}
