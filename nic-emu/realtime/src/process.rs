//! Running a real-time cluster as a separate device process: the
//! `nic-cluster` binary started as a child ([`ClusterProcess`]), the
//! command line that stands for an [`RtConfig`] ([`run_args`]), waiting
//! for a cluster to be published ([`wait_published`]) and asking a device
//! process to stop ([`request_stop`]).
//!
//! The binary prints `READY_PREFIX <dir>` on stdout once the cluster is
//! published and every NIC runs; [`ClusterProcess::spawn`] waits for that
//! line. Stopping sends SIGTERM (the binary then removes the cluster),
//! and SIGKILL if it does not exit in time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nic_abi::regs::{self, reg};
use nic_cluster_dir::cluster::{self, ClusterDir, ClusterError};

use super::{Pacing, RtConfig, RtError};
use nic_device::profile::Profile;

/// The line `nic-cluster run` prints on stdout when the cluster is up:
/// this, a space, and the cluster directory.
pub const READY_PREFIX: &str = "nic-cluster: ready";

/// The name of the device-process binary.
pub const BINARY: &str = "nic-cluster";
/// Names the device-process binary to run instead of the one found beside
/// the running executable (`bench --multicast-cost` runs two builds).
pub const BINARY_ENV: &str = "NIC_CLUSTER_BIN";

/// The `nic-cluster` binary: the one `$NIC_CLUSTER_BIN` names, else the
/// one next to the running executable (a cargo target directory:
/// `target/<profile>/nic-cluster`, also from `target/<profile>/deps/` or
/// `examples/`), or on PATH.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(BINARY_ENV).map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent();
    for _ in 0..2 {
        let d = dir?;
        let c = d.join(BINARY);
        if c.is_file() {
            return Some(c);
        }
        dir = d.parent();
    }
    super::qemu::find_program(BINARY)
}

/// The `nic-cluster run` arguments for `cfg` (the profile by its name,
/// so a built-in one, and its reliability mode, which a scenario may have
/// set; `--foreground`).
pub fn run_args(cfg: &RtConfig) -> Vec<String> {
    // A path (a `/` in it) is a directory (`--dir`), anything else a name.
    let opt = if cfg.cluster.contains('/') { "--dir" } else { "--name" };
    let mut a: Vec<String> = vec![
        "run".into(),
        opt.into(),
        cfg.cluster.clone(),
        "--nodes".into(),
        cfg.nodes.to_string(),
        "--backend".into(),
        cfg.backend.as_str().into(),
        "--profile".into(),
        cfg.profile.name.clone(),
        "--topology".into(),
        cfg.topology.name().into(),
        format!("--reliability={}", cfg.profile.firmware.reliability),
        "--threads".into(),
        cfg.threads.to_string(),
        "--host-size".into(),
        cfg.host_size.to_string(),
        "--qemu".into(),
        cfg.qemu_program.clone(),
        "--foreground".into(),
    ];
    if let Some(img) = &cfg.image {
        a.push("--image".into());
        a.push(img.display().to_string());
    }
    if let Some(s) = cfg.sram_size {
        a.push("--sram-size".into());
        a.push(s.to_string());
    }
    if cfg.pacing == Pacing::LinkBandwidth {
        a.push("--pacing".into());
        a.push("link".into());
    }
    if !cfg.faults.is_none() {
        a.push(format!("--drop={}", cfg.faults.drop));
        a.push(format!("--corrupt={}", cfg.faults.corrupt));
        a.push(format!("--duplicate={}", cfg.faults.duplicate));
    }
    if cfg.seed != 0 {
        a.push(format!("--seed={}", cfg.seed));
    }
    if let Some(us) = cfg.send_timeout_us {
        a.push(format!("--send-timeout-us={us}"));
    }
    if let Some(b) = &cfg.brm {
        a.push("--brm".into());
        if let Some(f) = &b.calibration {
            a.push("--brm-calibration".into());
            a.push(f.display().to_string());
        }
    }
    if let Some((node, port)) = cfg.halted_node {
        a.push(format!("--halted-node={node}"));
        a.push(format!("--gdb-port={port}"));
    }
    a
}

/// A child that said it is ready (`spawn_until_ready`).
pub(crate) struct Ready {
    pub child: Child,
    /// The ready line after its prefix.
    pub rest: String,
    /// Drains the child's stdout after the ready line.
    pub drain: std::thread::JoinHandle<()>,
}

/// Start `cmd` (stdin null, stdout piped, stderr inherited) and wait up to
/// `timeout` for a stdout line starting with `ready`. Not in time, or its
/// stdout closed first (it exited): killed and reaped, and the error says
/// `what did not report {goal}` with the lines it printed.
pub(crate) fn spawn_until_ready(
    mut cmd: Command,
    what: &str,
    goal: &str,
    ready: &str,
    timeout: Duration,
) -> Result<Ready, RtError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| RtError::Io { what: format!("starting {what}"), err })?;
    let out = child.stdout.take().ok_or_else(|| RtError::Config("no stdout pipe".into()))?;
    let (tx, rx) = mpsc::channel::<String>();
    let drain = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // Once nobody listens any more, keep draining.
            let _ = tx.send(line);
        }
    });
    let t = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = timeout.saturating_sub(t.elapsed());
        match rx.recv_timeout(left.max(Duration::from_millis(1))) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix(ready) {
                    return Ok(Ready { child, rest: rest.to_string(), drain });
                }
                seen.push(line);
            }
            Err(e) => {
                let mut status = child.try_wait().ok().flatten();
                if e == mpsc::RecvTimeoutError::Disconnected {
                    // Its stdout closed: it is exiting. Give it a moment to
                    // be reaped, so the error says how it ended.
                    let since = Instant::now();
                    while status.is_none() && since.elapsed() < Duration::from_millis(500) {
                        std::thread::sleep(Duration::from_millis(5));
                        status = child.try_wait().ok().flatten();
                    }
                }
                if status.is_none() {
                    let _ = child.kill();
                }
                let _ = child.wait();
                return Err(RtError::Timeout(format!(
                    "{what} did not report {goal} within {timeout:?}{}; it printed:\n{}",
                    status.map(|s| format!(" (it exited: {s})")).unwrap_or_default(),
                    seen.join("\n")
                )));
            }
        }
    }
}

/// A device process started from this one.
pub struct ClusterProcess {
    child: Option<Child>,
    path: PathBuf,
    /// stdout lines after the ready line, drained by a thread.
    _drain: Option<std::thread::JoinHandle<()>>,
}

impl ClusterProcess {
    /// Start `exe` (the `nic-cluster` binary) for `cfg` and wait up to
    /// `timeout` for it to say the cluster is up. Its stderr is inherited.
    pub fn spawn(exe: &Path, cfg: &RtConfig, timeout: Duration) -> Result<ClusterProcess, RtError> {
        if Profile::load(&cfg.profile.name).as_ref() != Ok(&cfg.profile) {
            return Err(RtError::Config(format!(
                "profile `{}`: a device process is given its profile by name, and this one is \
                 not the built-in profile of that name (start it with `nic-cluster run --profile FILE`)",
                cfg.profile.name
            )));
        }
        let mut cmd = Command::new(exe);
        cmd.args(run_args(cfg));
        let what = exe.display().to_string();
        let r = spawn_until_ready(cmd, &what, "the cluster up", READY_PREFIX, timeout)?;
        Ok(ClusterProcess {
            child: Some(r.child),
            path: PathBuf::from(r.rest.trim()),
            _drain: Some(r.drain),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The cluster directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SIGTERM, then wait up to 10 s (SIGKILL after that).
    pub fn stop(mut self) -> Result<ExitStatus, RtError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<ExitStatus, RtError> {
        let Some(mut child) = self.child.take() else {
            return Err(RtError::Config("already stopped".into()));
        };
        let _ = request_stop(child.id());
        let t = Instant::now();
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                return Ok(s);
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                return child.wait().map_err(|err| RtError::Io { what: "waiting".into(), err });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ClusterProcess {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop_inner();
        }
    }
}

/// Ask device process `pid` to stop (SIGTERM).
pub fn request_stop(pid: u32) -> std::io::Result<()> {
    let p = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("bad pid {pid}")))?;
    rustix::process::kill_process(p, rustix::process::Signal::TERM).map_err(std::io::Error::from)
}

/// Wait up to `timeout` for the cluster `name_or_path` to be published
/// by a live device process with every NIC's firmware running (`except`
/// a node started halted). Returns its directory.
pub fn wait_published(
    name_or_path: &str,
    except: Option<u32>,
    timeout: Duration,
) -> Result<ClusterDir, RtError> {
    let path = cluster::resolve(name_or_path);
    let t = Instant::now();
    let mut last = String::from("no manifest yet");
    loop {
        match ClusterDir::open_path(&path) {
            Ok(d) if d.device_alive() => match running(&d, except) {
                Ok(()) => return Ok(d),
                Err(why) => last = why,
            },
            Ok(d) => last = format!("device process {} is not alive", d.manifest().pid),
            Err(ClusterError::NotFound { .. }) => {}
            Err(e) => last = e.to_string(),
        }
        if t.elapsed() >= timeout {
            return Err(RtError::Timeout(format!(
                "cluster at {} not up within {timeout:?}: {last}",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn running(d: &ClusterDir, except: Option<u32>) -> Result<(), String> {
    for node in 0..d.nodes() {
        if Some(node) == except {
            continue;
        }
        let s = d.map_sram(node).map_err(|e| e.to_string())?;
        let st = s.load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0);
        if st != regs::FW_RUNNING {
            return Err(format!("node {node}: FW_STATUS {st}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_path_is_handed_on_as_a_directory_and_a_name_as_a_name() {
        use nic_cluster_dir::cluster::ClusterBackend;
        let a = run_args(&RtConfig::new("c1", ClusterBackend::Live, 2));
        assert_eq!(a[..3], ["run", "--name", "c1"]);
        let a = run_args(&RtConfig::new("/tmp/x/c1", ClusterBackend::Live, 2));
        assert_eq!(a[..3], ["run", "--dir", "/tmp/x/c1"]);
    }

    #[test]
    fn the_device_process_gets_the_profiles_reliability_mode() {
        use nic_device::profile::Reliability;
        let mut cfg = RtConfig::new("c", nic_cluster_dir::cluster::ClusterBackend::Live, 2);
        assert!(run_args(&cfg).contains(&"--reliability=go-back-n".to_string()));
        cfg.profile.firmware.reliability = Reliability::Selective;
        assert!(run_args(&cfg).contains(&"--reliability=selective".to_string()));
    }

    #[test]
    fn a_child_is_ready_at_its_ready_line_and_the_rest_of_that_line_comes_back() {
        let r = spawn_until_ready(
            sh("echo starting; echo 'up: /some/dir'; sleep 5"),
            "sh",
            "ready",
            "up:",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(r.rest, " /some/dir");
        let mut child = r.child;
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_child_that_exits_without_its_ready_line_is_reported_with_what_it_printed() {
        let t = Instant::now();
        let e = spawn_until_ready(
            sh("echo one; echo two; exit 3"),
            "the test child",
            "ready",
            "up:",
            Duration::from_secs(2),
        )
        .err()
        .expect("no ready line");
        let m = e.to_string();
        assert!(matches!(e, RtError::Timeout(_)), "{m}");
        assert!(m.starts_with("the test child did not report ready within 2s"), "{m}");
        assert!(m.contains("(it exited: exit status: 3)") && m.ends_with("one\ntwo"), "{m}");
        // Its stdout closed when it exited: no need to wait out the timeout.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}
