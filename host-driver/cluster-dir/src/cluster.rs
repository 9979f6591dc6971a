//! The on-disk contract of a running real-time cluster (live or qemu):
//! one directory per cluster holding `cluster.toml` and, per node, the
//! files the device process, QEMU and host processes share. The full
//! contract is `docs/design/cluster-dir.md`; this module is its one
//! implementation.
//!
//! ```text
//! <base>/<name>/cluster.toml         ClusterManifest (written last, by rename)
//! <base>/<name>/node<N>/sram         NIC SRAM, sram_size bytes (QEMU guest RAM)
//! <base>/<name>/node<N>/host         host memory, host_size bytes, bus address = offset
//! <base>/<name>/node<N>/port<P>.lock flock'ed by the process holding port P
//! <base>/<name>/node<N>/flash        firmware image (qemu; written by `xtask flash`)
//! ```
//!
//! `<base>` is `$NIC_CLUSTER_DIR` if set, else `/dev/shm/nic-clusters` (the system temp
//! dir where there is no /dev/shm).
//! Owns nothing but paths and the manifest; it maps nothing (see
//! `mapped.rs`).

use std::fmt;
use std::fs::{self, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nic_abi::map::{port_window, PORT_WINDOW, REGS, REGS_SIZE, SRAM_MIN};

use crate::identity;
use crate::mapped::MappedFile;
use crate::place;
// Where a cluster may live and whose its device process is: part of the
// contract, so reachable from here (`host_driver::cluster`) too.
pub use crate::identity::DeviceState;
pub use crate::place::{
    check_marked, check_name, check_uid, claim_dir, describe_uid, open_in_cluster,
    remove_cluster_dir, ClusterLocation, MARKER_FILE, NAME_MAX,
};
use nic_abi::{MAX_NODES, NUM_PORTS, PAGE_SIZE};
use serde::{Deserialize, Serialize};

/// Name of the manifest inside a cluster directory.
pub const MANIFEST_FILE: &str = "cluster.toml";
/// The output of a device process started in the background
/// (`nic-cluster run --detach`), inside its cluster directory.
pub const DETACHED_LOG: &str = "nic-cluster.log";
/// Environment variable naming the base directory of named clusters.
pub const CLUSTER_DIR_ENV: &str = "NIC_CLUSTER_DIR";
/// Version of this contract, the manifest's `format` field.
pub const CLUSTER_FORMAT: u32 = 1;
/// A sensible host memory size per node: 64 MiB (8 MiB per port; the file
/// is sparse, so unused memory costs nothing).
pub const DEFAULT_HOST_SIZE: u64 = 64 << 20;

/// The BRM master's socket, in the cluster directory.
pub const BRM_SOCKET: &str = "brm.sock";
/// A node's BRM agent socket, in `node<N>/`.
pub const BRM_AGENT_SOCKET: &str = "brm-agent.sock";
/// The calibration the BRM master was started with, in the cluster
/// directory.
pub const BRM_CALIBRATION: &str = "brm.calibration.toml";

/// Which real-time backend runs the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterBackend {
    /// The device model with the MCP as native threads.
    Live,
    /// The device model with the MCP image under qemu-system-riscv64.
    Qemu,
}

impl ClusterBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterBackend::Live => "live",
            ClusterBackend::Qemu => "qemu",
        }
    }
}

impl fmt::Display for ClusterBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ClusterBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "live" => Ok(ClusterBackend::Live),
            "qemu" => Ok(ClusterBackend::Qemu),
            _ => Err(format!("unknown backend `{s}` (live or qemu)")),
        }
    }
}

/// The content of `cluster.toml`. Unknown fields are ignored when reading,
/// so a newer device process may add some.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterManifest {
    /// Contract version (`CLUSTER_FORMAT`).
    pub format: u32,
    /// The cluster's name (the directory's name when it lives under the base).
    pub name: String,
    pub backend: ClusterBackend,
    /// Number of nodes: `node0` .. `node<nodes-1>`.
    pub nodes: u32,
    /// Timing profile name (informative for host processes).
    pub profile: String,
    /// Bytes of each node's `sram` file (= the NIC's SRAM_SIZE register).
    pub sram_size: u64,
    /// Bytes of each node's `host` file, a multiple of NUM_PORTS * PAGE_SIZE.
    pub host_size: u64,
    /// Process id of the device process (never 0).
    pub pid: u32,
    /// The device process's start time: `/proc/<pid>/stat` field 22
    /// (clock ticks since boot). With `pid_exe`, what tells the device
    /// process from another that got its pid later (`identity`). None in
    /// manifests written before it was recorded: such a pid is never
    /// signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// The device process's executable (`/proc/<pid>/exe`), when it could
    /// be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_exe: Option<String>,
    /// When the cluster was created, seconds since the Unix epoch.
    pub created: u64,
    /// Users (uids) besides the cluster's owner and root whose host
    /// programs may use the cluster, through its control sockets only.
    /// Non-empty: the directories are reachable but not listable by
    /// others (rwx--x--x) and cluster.toml readable (rw-r--r--); every
    /// node file stays the owner's alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<u32>,
    /// qemu: the TCP port (on 127.0.0.1) of each node's QEMU gdbstub,
    /// node 0 first (`target remote 127.0.0.1:PORT`). Empty for live
    /// clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gdb_ports: Vec<u16>,
}

impl ClusterManifest {
    /// A manifest for a cluster created now by this process.
    pub fn new(
        name: &str,
        backend: ClusterBackend,
        nodes: u32,
        profile: &str,
        sram_size: u64,
        host_size: u64,
    ) -> ClusterManifest {
        let mut m = ClusterManifest {
            format: CLUSTER_FORMAT,
            name: name.to_string(),
            backend,
            nodes,
            profile: profile.to_string(),
            sram_size,
            host_size,
            pid: std::process::id(),
            pid_start: None,
            pid_exe: None,
            created: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            users: Vec::new(),
            gdb_ports: Vec::new(),
        };
        m.set_device(std::process::id());
        m
    }

    /// Name process `pid` the device process: its pid, start time and
    /// executable (a launcher that starts the device process after making
    /// the files calls this through `ClusterDir::update`).
    pub fn set_device(&mut self, pid: u32) {
        self.pid = pid;
        self.pid_start = identity::process_start(pid);
        self.pid_exe = identity::process_exe(pid).map(|p| p.to_string_lossy().into_owned());
    }

    /// Whether the device process the manifest names runs (`identity`).
    pub fn device_state(&self) -> DeviceState {
        identity::device_state(self.pid, self.pid_start, self.pid_exe.as_deref())
    }

    /// Check every field's domain; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != CLUSTER_FORMAT {
            return Err(format!(
                "format {} (this driver reads format {CLUSTER_FORMAT})",
                self.format
            ));
        }
        if let Err(why) = place::check_name(&self.name) {
            return Err(format!("name {:?}: {why}", self.name));
        }
        if self.pid == 0 {
            return Err("pid = 0: the device process's pid is required (0 is no process)".into());
        }
        if let Some(uid) = self.users.iter().find(|u| place::check_uid(**u).is_err()) {
            return Err(format!("users: {}", place::check_uid(*uid).unwrap_err()));
        }
        if self.nodes == 0 || self.nodes as usize > MAX_NODES {
            return Err(format!("nodes = {} (1..={MAX_NODES})", self.nodes));
        }
        if self.sram_size < SRAM_MIN as u64 || self.sram_size > u32::MAX as u64 {
            return Err(format!("sram_size = {} ({SRAM_MIN}..={})", self.sram_size, u32::MAX));
        }
        let unit = NUM_PORTS as u64 * PAGE_SIZE;
        if self.host_size == 0 || !self.host_size.is_multiple_of(unit) {
            return Err(format!(
                "host_size = {} (a non-zero multiple of {unit}: {NUM_PORTS} ports x {PAGE_SIZE}-byte pages)",
                self.host_size
            ));
        }
        if !self.gdb_ports.is_empty() {
            if self.gdb_ports.len() != self.nodes as usize {
                return Err(format!(
                    "gdb_ports: {} ports for {} nodes (one per node, or none)",
                    self.gdb_ports.len(),
                    self.nodes
                ));
            }
            if self.gdb_ports.contains(&0) {
                return Err("gdb_ports: port 0 is not a port".into());
            }
        }
        Ok(())
    }

    /// The TCP port of node `node`'s gdbstub (127.0.0.1), if it has one.
    pub fn gdb_port(&self, node: u32) -> Option<u16> {
        self.gdb_ports.get(node as usize).copied()
    }

    /// Bytes of host memory each port owns.
    pub fn port_slice_len(&self) -> u64 {
        port_slice(self.host_size, 0).1
    }
}

/// Port `port`'s slice of a node's host memory of `host_size` bytes:
/// `(first bus address, length)`. NUM_PORTS equal slices, page aligned;
/// port P's DMA allocations live only in slice P.
pub const fn port_slice(host_size: u64, port: u8) -> (u64, u64) {
    nic_abi::regs::port_slice(host_size, port)
}

/// A node file of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFile {
    Sram,
    Host,
    PortLock,
    Flash,
    /// The control socket (`control.sock`).
    Control,
    /// A port's window or a port's slice of host memory, as the control
    /// socket hands them out.
    Window,
    Slice,
}

impl NodeFile {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeFile::Sram => "sram",
            NodeFile::Host => "host",
            NodeFile::PortLock => "port lock",
            NodeFile::Flash => "flash",
            NodeFile::Control => "control socket",
            NodeFile::Window => "port window",
            NodeFile::Slice => "host-memory slice",
        }
    }
}

/// Why a cluster directory could not be used.
#[derive(Debug)]
pub enum ClusterError {
    /// No `cluster.toml` there: no cluster of that name, or it is not up.
    NotFound { path: PathBuf },
    /// A cluster whose device process is alive already lives there.
    Exists { path: PathBuf, pid: u32 },
    /// `cluster.toml` does not parse, or a field is out of its domain.
    BadManifest { path: PathBuf, why: String },
    /// A node number the cluster does not have.
    NoSuchNode { node: u32, nodes: u32 },
    /// A node file is missing or has the wrong size.
    BadFile { file: NodeFile, path: PathBuf, why: String },
    /// Any other I/O failure, with the path it concerned.
    Io { path: PathBuf, err: io::Error },
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::NotFound { path } => write!(
                f,
                "no cluster at {} (no {MANIFEST_FILE}; is the cluster running?)",
                path.display()
            ),
            ClusterError::Exists { path, pid } => write!(
                f,
                "a running cluster already lives at {} (device process {pid})",
                path.display()
            ),
            ClusterError::BadManifest { path, why } => {
                write!(f, "{}: {why}", path.display())
            }
            ClusterError::NoSuchNode { node, nodes } => {
                write!(
                    f,
                    "node {node} does not exist (the cluster has nodes 0 to {})",
                    nodes.saturating_sub(1)
                )
            }
            ClusterError::BadFile { file, path, why } => {
                write!(f, "{} file {}: {why}", file.as_str(), path.display())
            }
            ClusterError::Io { path, err } => write!(f, "{}: {err}", path.display()),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ClusterError + '_ {
    move |err| ClusterError::Io { path: path.to_path_buf(), err }
}

/// Where named clusters live: `$NIC_CLUSTER_DIR`, else
/// `<memory temp dir>/nic-clusters` (`memory_temp_dir`).
pub fn base_dir() -> PathBuf {
    match std::env::var_os(CLUSTER_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => default_base_dir(),
    }
}

/// The base directory when `$NIC_CLUSTER_DIR` is not set:
/// `<memory temp dir>/nic-clusters`, the tools' own.
pub fn default_base_dir() -> PathBuf {
    memory_temp_dir().join("nic-clusters")
}

/// A temporary directory in memory: `/dev/shm` where it is a writable
/// directory (Linux's tmpfs), else the system temp dir. SRAM and host
/// memory are shared file mappings written at memory speed; on a disk
/// file system the kernel writes their dirty pages back and write-protects
/// them again, which stalls the device and host processes at random (a
/// live 64 KiB stream on an ext4 /tmp ran anywhere from 1.4 to 3.8 GB/s;
/// on /dev/shm 3.0 to 3.4 unpinned, steadily).
pub fn memory_temp_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let writable = fs::metadata(shm).is_ok_and(|m| m.is_dir() && !m.permissions().readonly());
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The directory a cluster name or path stands for: something with a `/`
/// is a path; anything else a name under `base_dir()` (whether it is a
/// valid name or not: `ClusterLocation::parse` checks that).
pub fn resolve(name_or_path: &str) -> PathBuf {
    if name_or_path.contains('/') {
        PathBuf::from(name_or_path)
    } else {
        base_dir().join(name_or_path)
    }
}

/// Is a process with this pid alive? (Linux: /proc; elsewhere: assume so.)
/// Any process: whether it is a cluster's device process is
/// `ClusterDir::device_alive`'s question.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if cfg!(target_os = "linux") {
        // A zombie (dead, not yet reaped by its parent) is not alive: the
        // state is the field after the parenthesised command name.
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => {
                s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            }
            Err(_) => false,
        }
    } else {
        true
    }
}

/// Cluster files are the cluster user's alone (rw-------): another user's
/// process cannot map a NIC's memory or a host's.
pub const PRIVATE: u32 = 0o600;

/// Create the node directory `path` in a cluster directory if missing
/// (never through a symbolic link), and make it the owner's alone
/// (rwx------), or, when `reachable`, let others pass through it to a
/// name they know (rwx--x--x: no listing).
fn private_dir(path: &Path, reachable: bool) -> Result<(), ClusterError> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(path)(e)),
    }
    let fd = place::open_dir_nofollow(path)?;
    let mode = if reachable { 0o711 } else { 0o700 };
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))
        .map_err(|e| io_err(path)(e.into()))
}

/// An opened (or freshly created) cluster directory: its path and manifest.
#[derive(Debug, Clone)]
pub struct ClusterDir {
    path: PathBuf,
    manifest: ClusterManifest,
}

impl ClusterDir {
    /// Create a cluster at `path` (the device process does this): the
    /// directory, every node's `sram` and `host` files sized with
    /// `set_len` (sparse, zero), every `port<P>.lock`, then `cluster.toml`
    /// (written to a temporary file and renamed, so a reader sees either
    /// no manifest or a whole one, and only once the files exist).
    ///
    /// An existing cluster there is replaced if its device process is gone
    /// (its node files and locks are unlinked, so stale mappings and lock
    /// holders keep the old ones); if it is alive, `Exists`.
    ///
    /// The device process must write each NIC's register block (at least
    /// MAGIC and FW_STATUS = FW_BOOTING) before calling `publish` if it
    /// uses `create_unpublished`; `create` publishes at once.
    pub fn create(path: &Path, manifest: &ClusterManifest) -> Result<ClusterDir, ClusterError> {
        let dir = ClusterDir::create_unpublished(path, manifest)?;
        dir.publish()?;
        Ok(dir)
    }

    /// As `create`, but without writing `cluster.toml`: host processes
    /// cannot find the cluster until `publish`. Lets the device process
    /// initialise SRAM before anyone attaches.
    pub fn create_unpublished(
        path: &Path,
        manifest: &ClusterManifest,
    ) -> Result<ClusterDir, ClusterError> {
        let mpath = path.join(MANIFEST_FILE);
        manifest
            .validate()
            .map_err(|why| ClusterError::BadManifest { path: mpath.clone(), why })?;
        // Nothing is changed before every check passed: the directory is
        // new, or this user's cluster directory (a link, another's
        // directory or one without the marker is refused untouched) ...
        let reachable = !manifest.users.is_empty();
        if fs::symlink_metadata(path).is_ok() {
            place::check_marked(path)?;
        }
        // ... and no live device process serves it.
        if let Ok(old) = ClusterDir::open_path(path) {
            if old.manifest.pid != std::process::id() && old.device_alive() {
                return Err(ClusterError::Exists {
                    path: path.to_path_buf(),
                    pid: old.manifest.pid,
                });
            }
        }
        place::claim_dir(path, reachable)?;
        // A stale manifest goes first: nobody may find a half-made cluster.
        match fs::remove_file(&mpath) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&mpath)(e)),
        }
        let dir = ClusterDir { path: path.to_path_buf(), manifest: manifest.clone() };
        for node in 0..manifest.nodes {
            let nd = dir.node_dir(node);
            private_dir(&nd, reachable)?;
            let files = [
                (dir.sram_path(node), manifest.sram_size),
                (dir.host_path(node), manifest.host_size),
                (dir.regs_path(node), REGS_SIZE as u64),
            ];
            let locks = (0..NUM_PORTS as u8).map(|p| (dir.port_lock_path(node, p), 0));
            let windows =
                (0..NUM_PORTS as u8).map(|p| (dir.window_path(node, p), PORT_WINDOW as u64));
            let slices =
                (0..NUM_PORTS as u8).map(|p| (dir.slice_path(node, p), manifest.port_slice_len()));
            // Fresh inodes: whoever still maps or locks a stale cluster's
            // files keeps the old ones and cannot disturb the new cluster.
            for (file, len) in files.into_iter().chain(locks).chain(windows).chain(slices) {
                match fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&file)(e)),
                }
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(PRIVATE)
                    .open(&file)
                    .map_err(io_err(&file))?;
                f.set_len(len).map_err(io_err(&file))?;
            }
        }
        Ok(dir)
    }

    /// Write `cluster.toml` (again): temporary file, then rename.
    pub fn publish(&self) -> Result<(), ClusterError> {
        let mpath = self.manifest_path();
        let tmp = self.path.join(format!(".{MANIFEST_FILE}.{}.tmp", std::process::id()));
        let text = toml::to_string(&self.manifest)
            .map_err(|e| ClusterError::BadManifest { path: mpath.clone(), why: e.to_string() })?;
        let mode = if self.manifest.users.is_empty() { PRIVATE } else { 0o644 };
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &mpath).map_err(io_err(&mpath))
    }

    /// Change the manifest (e.g. the pid of a device process started after
    /// the files were made) and publish it.
    pub fn update(&mut self, f: impl FnOnce(&mut ClusterManifest)) -> Result<(), ClusterError> {
        let mut m = self.manifest.clone();
        f(&mut m);
        m.validate()
            .map_err(|why| ClusterError::BadManifest { path: self.manifest_path(), why })?;
        self.manifest = m;
        self.publish()
    }

    /// Open a cluster by name (under `base_dir()`) or by path (a `/` in
    /// it; `ClusterLocation::parse`): a bad name is refused, saying why.
    pub fn open(name_or_path: &str) -> Result<ClusterDir, ClusterError> {
        ClusterDir::open_path(&ClusterLocation::parse(name_or_path)?.path())
    }

    /// Open the cluster at `path`: read and check `cluster.toml`.
    pub fn open_path(path: &Path) -> Result<ClusterDir, ClusterError> {
        let mpath = path.join(MANIFEST_FILE);
        let text = match read_manifest(&mpath) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ClusterError::NotFound { path: path.to_path_buf() })
            }
            Err(e) => return Err(io_err(&mpath)(e)),
        };
        let manifest: ClusterManifest = toml::from_str(&text)
            .map_err(|e| ClusterError::BadManifest { path: mpath.clone(), why: e.to_string() })?;
        manifest.validate().map_err(|why| ClusterError::BadManifest { path: mpath, why })?;
        Ok(ClusterDir { path: path.to_path_buf(), manifest })
    }

    /// Every cluster under `base_dir()` whose manifest reads, by name.
    pub fn list() -> Vec<ClusterDir> {
        let mut out: Vec<ClusterDir> =
            ClusterDir::list_all().into_iter().filter_map(|(_, d)| d.ok()).collect();
        out.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
        out
    }

    /// Every entry under `base_dir()` that is or looks like a cluster, by
    /// path: a directory holding a manifest or the marker, opened (or why
    /// it could not be: a manifest that does not parse, none yet), and a
    /// symbolic link, refused. Other entries are left out.
    pub fn list_all() -> Vec<(PathBuf, Result<ClusterDir, ClusterError>)> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(base_dir()) else { return out };
        for e in rd.flatten() {
            let path = e.path();
            let Ok(md) = fs::symlink_metadata(&path) else { continue };
            if md.file_type().is_symlink() {
                let e = place::open_dir_nofollow(&path).err().unwrap_or_else(|| {
                    place::refused(&path, io::ErrorKind::PermissionDenied, "a symbolic link")
                });
                out.push((path, Err(e)));
                continue;
            }
            if !md.is_dir() {
                continue;
            }
            let has_manifest = fs::symlink_metadata(path.join(MANIFEST_FILE)).is_ok();
            let marked = fs::symlink_metadata(path.join(place::MARKER_FILE)).is_ok();
            if has_manifest || marked {
                out.push((path.clone(), ClusterDir::open_path(&path)));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn manifest(&self) -> &ClusterManifest {
        &self.manifest
    }

    pub fn manifest_path(&self) -> PathBuf {
        self.path.join(MANIFEST_FILE)
    }

    pub fn nodes(&self) -> u32 {
        self.manifest.nodes
    }

    /// Is the device process named in the manifest alive: does the
    /// process that has its pid have its start time and executable too
    /// (`identity`)? A manifest that records no start time (an older one)
    /// counts the pid alone.
    pub fn device_alive(&self) -> bool {
        matches!(self.manifest.device_state(), DeviceState::Alive | DeviceState::Unverified)
    }

    /// Ask the device process to stop (SIGTERM), once it is checked to be
    /// the one the manifest names (`signal_device`).
    pub fn terminate_device(&self) -> Result<(), ClusterError> {
        self.signal_device(rustix::process::Signal::TERM)
    }

    /// Send `sig` to the device process, once it is checked to be the one
    /// the manifest names (pid, start time and executable; through a
    /// pidfd, so the pid cannot change hands between the check and the
    /// signal). A process that is not the device process, or a manifest
    /// that cannot tell, is refused and never signalled; a gone one is
    /// `NotFound`-kind.
    pub fn signal_device(&self, sig: rustix::process::Signal) -> Result<(), ClusterError> {
        let m = &self.manifest;
        let mpath = self.manifest_path();
        let refuse = |kind, why: String| place::refused(&mpath, kind, why);
        let pid = i32::try_from(m.pid).ok().and_then(rustix::process::Pid::from_raw).ok_or_else(
            || refuse(io::ErrorKind::InvalidData, format!("pid {} is no pid", m.pid)),
        )?;
        let gone =
            || refuse(io::ErrorKind::NotFound, format!("device process {} is not running", m.pid));
        let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Err(gone()),
            Err(e) => return Err(io_err(&mpath)(e.into())),
        };
        match m.device_state() {
            DeviceState::Alive => {}
            DeviceState::Gone => return Err(gone()),
            DeviceState::Other(why) => {
                return Err(refuse(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "pid {} is not this cluster's device process ({why}: the pid was reused \
                         or the manifest edited); not signalled",
                        m.pid
                    ),
                ))
            }
            DeviceState::Unverified => {
                return Err(refuse(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "the manifest records no start time for pid {} (written by an older \
                         nic-cluster), so whether that process is the device process cannot be \
                         told; not signalled (check it and stop it yourself)",
                        m.pid
                    ),
                ))
            }
        }
        rustix::process::pidfd_send_signal(&fd, sig).map_err(|e| io_err(&mpath)(e.into()))
    }

    /// `Ok(())` if the cluster has node `node`.
    pub fn check_node(&self, node: u32) -> Result<(), ClusterError> {
        if node < self.manifest.nodes {
            Ok(())
        } else {
            Err(ClusterError::NoSuchNode { node, nodes: self.manifest.nodes })
        }
    }

    pub fn node_dir(&self, node: u32) -> PathBuf {
        self.path.join(format!("node{node}"))
    }

    /// The NIC's SRAM (QEMU's guest RAM in the qemu backend).
    pub fn sram_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join("sram")
    }

    /// The NIC's register block (`map::REGS`, one page): a file of its
    /// own, laid over its place in `sram` (`map_sram`); under qemu the
    /// guest sees it as a shared-memory PCI device. No host process is
    /// given it (registers are read through the control socket).
    pub fn regs_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join("regs")
    }

    /// Port `port`'s window (`map::port_window`: control block + send
    /// ring): a file of its own, the only part of SRAM the port's host
    /// process maps. Placed over `sram` like `regs_path`.
    pub fn window_path(&self, node: u32, port: u8) -> PathBuf {
        self.node_dir(node).join(format!("port{port}.win"))
    }

    /// The node's control socket (`control`): the device process listens
    /// there; host processes attach to a port through it.
    pub fn control_socket_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join(crate::control::CONTROL_SOCKET)
    }

    /// Port `port`'s slice of the node's host memory (`port_slice`): a
    /// file of its own, the only host memory the port's host process
    /// maps. Placed over `host` like `window_path` over `sram`.
    pub fn slice_path(&self, node: u32, port: u8) -> PathBuf {
        self.node_dir(node).join(format!("port{port}.mem"))
    }

    /// Map node `node`'s SRAM for the cluster owner's tools: the `sram`
    /// file with the register page (`regs_path`) over its place; the port
    /// windows are left out (their bytes read as zeros here). A port
    /// changes hands only once no process but the device process has its
    /// window mapped, so a tool that mapped the windows would hold every
    /// port of the node. Never for a host program.
    pub fn map_sram(&self, node: u32) -> io::Result<MappedFile> {
        MappedFile::open_overlaid(&self.sram_path(node), &[(REGS as u64, self.regs_path(node))])
    }

    /// As `map_sram`, with every port window (`window_path`) over its
    /// place too, as the device process sees the SRAM. While this mapping
    /// lives, no port of the node can change hands: for tests that
    /// look into the windows of a cluster they own.
    pub fn map_sram_with_windows(&self, node: u32) -> io::Result<MappedFile> {
        let mut parts = vec![(REGS as u64, self.regs_path(node))];
        parts.extend(
            (0..NUM_PORTS as u8)
                .map(|p| (port_window(p as usize) as u64, self.window_path(node, p))),
        );
        MappedFile::open_overlaid(&self.sram_path(node), &parts)
    }

    /// Map node `node`'s whole host memory (bus address = offset): the
    /// `host` file with every port's slice file over its place. For the
    /// device process (its DMA engines) and the owner's tools.
    pub fn map_host(&self, node: u32) -> io::Result<MappedFile> {
        let parts: Vec<_> = (0..NUM_PORTS as u8)
            .map(|p| (self.port_slice(p).0, self.slice_path(node, p)))
            .collect();
        MappedFile::open_overlaid(&self.host_path(node), &parts)
    }

    /// The node's host memory (bus address = file offset).
    pub fn host_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join("host")
    }

    /// The lock a process holding port `port` keeps (flock, exclusive).
    pub fn port_lock_path(&self, node: u32, port: u8) -> PathBuf {
        self.node_dir(node).join(format!("port{port}.lock"))
    }

    /// The firmware image the NIC loads at reset (qemu).
    pub fn flash_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join("flash")
    }

    /// The bandwidth resource manager's socket (the BRM master process
    /// listens there when the cluster runs one; `brm_socket`).
    pub fn brm_socket_path(&self) -> PathBuf {
        self.path.join(BRM_SOCKET)
    }

    /// Node `node`'s BRM agent socket (the device process listens there;
    /// only the master talks to it).
    pub fn brm_agent_socket_path(&self, node: u32) -> PathBuf {
        self.node_dir(node).join(BRM_AGENT_SOCKET)
    }

    /// Port `port`'s slice of host memory: (first bus address, length).
    pub fn port_slice(&self, port: u8) -> (u64, u64) {
        port_slice(self.manifest.host_size, port)
    }

    /// How each node's host memory is shared out: the ports' slices and
    /// their page tables.
    pub fn host_layout(&self) -> nic_abi::page_table::HostLayout {
        nic_abi::page_table::HostLayout::new(self.manifest.host_size, false)
    }

    /// Does some process hold port `port` of `node` (its lock is taken)?
    /// The device process asks this about ports whose STATE is open to
    /// notice a dead holder. The probe takes the lock shared for an
    /// instant, so an attach racing with it may need its retry.
    pub fn port_held(&self, node: u32, port: u8) -> Result<bool, ClusterError> {
        let lp = self.port_lock_path(node, port);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lp)
            .map_err(io_err(&lp))?;
        match f.try_lock_shared() {
            Ok(()) => {
                let _ = f.unlock();
                Ok(false)
            }
            Err(TryLockError::WouldBlock) => Ok(true),
            Err(TryLockError::Error(e)) => Err(io_err(&lp)(e)),
        }
    }

    /// Delete the cluster directory and everything in it (the device
    /// process does this when the cluster stops). The manifest goes first.
    /// Only one of this user's cluster directories (`place::check_marked`:
    /// not a link, this user's, holding the marker) is removed; anything
    /// else is refused untouched. Links inside are removed, never followed.
    pub fn remove(self) -> Result<(), ClusterError> {
        place::check_marked(&self.path)?;
        let mpath = self.manifest_path();
        match fs::remove_file(&mpath) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&mpath)(e)),
        }
        fs::remove_dir_all(&self.path).map_err(io_err(&self.path))
    }
}

/// Largest manifest read: a cluster of the most nodes writes a few KiB.
const MANIFEST_MAX: u64 = 1 << 20;

/// The manifest's text, read to at most [`MANIFEST_MAX`] bytes (a file
/// swapped for a device or a huge file is refused, not read to the end).
fn read_manifest(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    // Not through a link, and not waiting on a FIFO: only a regular file.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(io::ErrorKind::InvalidData, "a symbolic link, not the manifest")
            } else {
                e
            }
        })?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    f.take(MANIFEST_MAX + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MANIFEST_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MANIFEST_MAX} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_ports_are_one_per_node_or_none_and_round_trip_through_toml() {
        let mut m =
            ClusterManifest::new("g", ClusterBackend::Qemu, 2, "p", SRAM_MIN as u64, 8 << 20);
        assert_eq!(m.validate(), Ok(()));
        assert!(!toml::to_string(&m).unwrap().contains("gdb_ports"), "empty: not written");
        assert_eq!(m.gdb_port(0), None);
        m.gdb_ports = vec![4000, 4001];
        assert_eq!(m.validate(), Ok(()));
        let text = toml::to_string(&m).unwrap();
        assert!(text.contains("gdb_ports = [4000, 4001]"), "{text}");
        let back: ClusterManifest = toml::from_str(&text).unwrap();
        assert_eq!(
            (back.gdb_port(0), back.gdb_port(1), back.gdb_port(2)),
            (Some(4000), Some(4001), None)
        );
        m.gdb_ports = vec![4000];
        assert_eq!(
            m.validate(),
            Err("gdb_ports: 1 ports for 2 nodes (one per node, or none)".into())
        );
        m.gdb_ports = vec![4000, 0];
        assert_eq!(m.validate(), Err("gdb_ports: port 0 is not a port".into()));
    }

    #[test]
    fn a_manifest_that_is_a_link_a_fifo_or_too_large_is_refused_unread() {
        let path = std::env::temp_dir().join(format!("nic-manifest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", path.join(MANIFEST_FILE)).unwrap();
        let e = ClusterDir::open_path(&path).unwrap_err().to_string();
        assert!(e.ends_with("cluster.toml: a symbolic link, not the manifest"), "{e}");
        fs::remove_file(path.join(MANIFEST_FILE)).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path.join(MANIFEST_FILE),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = ClusterDir::open_path(&path).unwrap_err().to_string();
        assert!(e.ends_with("cluster.toml: not a regular file"), "{e}");
        fs::remove_file(path.join(MANIFEST_FILE)).unwrap();
        fs::write(path.join(MANIFEST_FILE), vec![b'#'; (MANIFEST_MAX + 1) as usize]).unwrap();
        let e = ClusterDir::open_path(&path).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn remove_takes_only_a_marked_directory_of_this_users() {
        let base = std::env::temp_dir().join(format!("nic-remove-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        let m = ClusterManifest::new("rm", ClusterBackend::Live, 1, "p", 1 << 20, 1 << 20);
        let d = ClusterDir::create(&base.join("rm"), &m).unwrap();
        // Someone's directory with a manifest in it, but no marker.
        let theirs = base.join("theirs");
        fs::create_dir(&theirs).unwrap();
        fs::copy(d.manifest_path(), theirs.join(MANIFEST_FILE)).unwrap();
        fs::write(theirs.join("notes"), "keep").unwrap();
        let e = ClusterDir::open_path(&theirs).unwrap().remove().unwrap_err().to_string();
        assert!(e.contains("is not a cluster directory (no marker file"), "{e}");
        assert_eq!(fs::read_to_string(theirs.join("notes")).unwrap(), "keep");
        assert!(theirs.join(MANIFEST_FILE).exists(), "nothing removed");
        // A link to a cluster directory is not one.
        let link = base.join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        let e = ClusterDir::open_path(&link).unwrap().remove().unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(d.manifest_path().exists());
        // A new cluster is not made over the unmarked directory either.
        let e = ClusterDir::create(&theirs, &m).unwrap_err().to_string();
        assert!(e.contains("is not a cluster directory"), "{e}");
        assert_eq!(fs::read_to_string(theirs.join("notes")).unwrap(), "keep");
        d.remove().unwrap();
        assert!(!base.join("rm").exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_manifest_records_the_device_process_and_a_pid_of_0_is_refused() {
        let mut m = ClusterManifest::new("id", ClusterBackend::Live, 1, "p", 1 << 20, 1 << 20);
        assert_eq!(m.pid, std::process::id());
        assert_eq!(m.pid_start, identity::process_start(std::process::id()));
        assert!(m.pid_exe.is_some());
        assert_eq!(m.device_state(), DeviceState::Alive);
        let text = toml::to_string(&m).unwrap();
        assert!(text.contains("pid_start = "), "{text}");
        // An older manifest without the start time still reads.
        let old: String =
            text.lines().filter(|l| !l.starts_with("pid_")).collect::<Vec<_>>().join("\n");
        let back: ClusterManifest = toml::from_str(&old).unwrap();
        assert_eq!((back.pid_start, back.validate()), (None, Ok(())));
        assert_eq!(back.device_state(), DeviceState::Unverified);
        m.pid = 0;
        assert_eq!(
            m.validate(),
            Err("pid = 0: the device process's pid is required (0 is no process)".into())
        );
        m.set_device(u32::MAX - 1);
        assert_eq!((m.pid_start, m.device_state()), (None, DeviceState::Gone));
        m.users = vec![1001, u32::MAX];
        assert!(m.validate().unwrap_err().starts_with("users: 4294967295 is not a user id"));
    }

    #[test]
    fn a_device_that_is_not_the_manifests_is_never_signalled() {
        let path = std::env::temp_dir().join(format!("nic-signal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        let m = ClusterManifest::new("sig", ClusterBackend::Live, 1, "p", 1 << 20, 1 << 20);
        let mut d = ClusterDir::create(&path, &m).unwrap();
        let mut sleep = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        // The sleep's pid, with this process's start time: not the sleep.
        let start = d.manifest().pid_start;
        d.update(|m| {
            m.pid = sleep.id();
            m.pid_start = start;
        })
        .unwrap();
        let e = d.signal_device(rustix::process::Signal::TERM).unwrap_err().to_string();
        assert!(
            e.contains(&format!("pid {} is not this cluster's device process", sleep.id())),
            "{e}"
        );
        // Without a start time: cannot tell, not signalled either.
        d.update(|m| m.pid_start = None).unwrap();
        let e = d.signal_device(rustix::process::Signal::TERM).unwrap_err().to_string();
        assert!(e.contains("records no start time"), "{e}");
        assert_eq!(sleep.try_wait().unwrap(), None, "the sleep was signalled");
        // Its own identity: signalled.
        let id = sleep.id();
        d.update(|m| m.set_device(id)).unwrap();
        d.signal_device(rustix::process::Signal::TERM).unwrap();
        let st = sleep.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(15));
        d.remove().unwrap();
    }

    #[test]
    fn cluster_files_and_directories_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("nic-perm-{}", std::process::id()));
        let m = ClusterManifest::new("perm", ClusterBackend::Live, 2, "p", 1 << 20, 1 << 20);
        let d = ClusterDir::create(&path, &m).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(d.path()), 0o700);
        assert_eq!(mode(&d.manifest_path()), 0o600);
        for node in 0..2 {
            assert_eq!(mode(&d.node_dir(node)), 0o700);
            assert_eq!(mode(&d.sram_path(node)), 0o600);
            assert_eq!(mode(&d.host_path(node)), 0o600);
            assert_eq!(mode(&d.port_lock_path(node, 3)), 0o600);
        }
        d.remove().unwrap();
    }

    #[test]
    fn port_slices_are_equal_page_aligned_and_disjoint() {
        let host = 64 << 20;
        let (s0, l0) = port_slice(host, 0);
        // An eighth, less the page tables' share (an entry of 8 bytes per
        // page of 4 KiB).
        assert_eq!((s0, l0), (0, 2043 * PAGE_SIZE));
        for p in 1..NUM_PORTS as u8 {
            let (s, l) = port_slice(host, p);
            assert_eq!(l, l0);
            assert_eq!(s, p as u64 * l0);
            assert_eq!(s % PAGE_SIZE, 0);
        }
        let (last, l) = port_slice(host, NUM_PORTS as u8 - 1);
        assert!(last + l <= host);
    }

    #[test]
    fn manifest_validation_names_the_bad_field() {
        let good = ClusterManifest::new("c", ClusterBackend::Live, 2, "p", 1 << 20, 1 << 20);
        assert_eq!(good.validate(), Ok(()));
        type Edit = fn(&mut ClusterManifest);
        let cases: [(Edit, &str); 6] = [
            (|m| m.nodes = 0, "nodes"),
            (|m| m.sram_size = 4096, "sram_size"),
            (|m| m.host_size = 4096, "host_size"),
            (|m| m.name = "a/b".into(), "name"),
            (|m| m.format = 99, "format"),
            (|m| m.sram_size = 1 << 33, "sram_size"),
        ];
        for (edit, field) in cases {
            let mut m = good.clone();
            edit(&mut m);
            let e = m.validate().unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn names_resolve_under_the_base_and_paths_stay_paths() {
        assert_eq!(resolve("./x"), PathBuf::from("./x"));
        assert_eq!(resolve("/a/b"), PathBuf::from("/a/b"));
        assert!(resolve("no-such-cluster-name-xyz").ends_with("no-such-cluster-name-xyz"));
        let e = ClusterDir::open("x\nb").unwrap_err().to_string();
        assert!(e.starts_with("cluster name \"x\\nb\": it holds '\\n'"), "{e}");
    }

    #[test]
    fn backend_names_round_trip() {
        for b in [ClusterBackend::Live, ClusterBackend::Qemu] {
            assert_eq!(b.as_str().parse::<ClusterBackend>(), Ok(b));
        }
        assert!("sim".parse::<ClusterBackend>().is_err());
    }
}
