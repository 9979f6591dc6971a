//! A full file system under a running cluster: the node files are sparse,
//! so a page is taken from the file system when first touched, and on a
//! full one that touch raises SIGBUS though the file kept its size. The
//! mappings' guard must tell that from a cut file: the device process
//! stops the node whose file it is, with one line naming the file and the
//! cause, and goes on (no reset loop, still answering its control sockets
//! and SIGTERM); a host process exits with a message instead of a SIGBUS.
//!
//! Each test mounts a small tmpfs of its own (unmounted at the end, even
//! on failure), which needs root: as any other user these tests FAIL,
//! saying so. The cluster tests run the `nic-cluster` binary as the
//! device process, on live and on qemu (QEMU and the riscv target
//! missing: they FAIL, naming them).

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use host_driver::cluster::{ClusterBackend, ClusterDir};
use host_driver::mapped::{self, FaultCause, FaultPolicy, MappedFile};
use nic_abi::regs::{self, reg};
use nic_emu::realtime::process::{self, READY_PREFIX};

/// A tmpfs of `size` mounted on a fresh directory; unmounted (and the
/// directory removed) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(tag: &str, size: &str) -> Tmpfs {
        assert!(
            rt::euid_is_root(),
            "the full-file-system tests mount a small tmpfs (mount -t tmpfs -o size={size}), \
             which needs root: run `cargo xtask test` as root (CI does)"
        );
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("full-disk-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(o.status.success(), "mount -t tmpfs on {}: {}", dir.display(), rt::text(&o));
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !ok {
            // Still in use (a process of a failed test): detach it now,
            // the kernel frees it when the last user goes.
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A sparse file of `len` bytes at `path`.
fn sparse(path: &Path, len: u64) {
    let f = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.set_len(len).unwrap();
}

#[test]
fn a_page_a_full_file_system_cannot_back_is_isolated_and_named_not_taken_for_a_cut() {
    let fs = Tmpfs::mount("isolate", "1m");
    let path = fs.path().join("mem");
    sparse(&path, 4 << 20);
    let m = MappedFile::open(&path).unwrap();
    mapped::set_fault_policy(FaultPolicy::Isolate);
    let (repaired, isolated) = (mapped::truncations_repaired(), mapped::pages_isolated());
    assert_eq!(m.fault(), None);
    // 4 MiB into a 1 MiB file system: the pages past its room fault.
    let t = Instant::now();
    assert!(m.fill(0, 4 << 20, 0x5a));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let f = m.fault().expect("the pages that could not be backed are recorded");
    assert_eq!((f.path.as_path(), f.cause), (path.as_path(), FaultCause::NoSpace));
    let lost = f.pages();
    assert!((768..=1024).contains(&lost), "{lost} of the 1024 pages isolated");
    assert!(mapped::pages_isolated() >= isolated + lost);
    assert_eq!(mapped::truncations_repaired(), repaired, "no page was taken for a cut");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 << 20, "the file kept its size");
    // The bytes that found room are in the file; the others reach nobody.
    let file = std::fs::read(&path).unwrap();
    assert_eq!(file[0], 0x5a);
    assert_eq!(file[(4 << 20) - 1], 0, "the last page went to a private page");
    // A file cut on the full file system is still set back (growing it
    // needs no room), and its pages past the room are isolated too.
    let path2 = fs.path().join("cut");
    sparse(&path2, 64 << 10);
    let m2 = MappedFile::open(&path2).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path2).unwrap().set_len(4096).unwrap();
    assert!(m2.store_u32(32 << 10, 7));
    assert!(mapped::truncations_repaired() > repaired, "the cut was repaired");
    assert_eq!(std::fs::metadata(&path2).unwrap().len(), 64 << 10, "set back");
    assert_eq!(m2.load_u32(32 << 10), Some(7), "the access completed");
    assert_eq!(m2.fault().map(|f| f.cause), Some(FaultCause::NoSpace));
    drop((m, m2));
}

/// The child of the next test: maps the file its environment names and
/// writes all of it, which must end the process (status 74).
#[test]
#[ignore = "run by a_host_process_whose_page_cannot_be_backed_exits_74_naming_the_file"]
fn exit_policy_child() {
    let path = std::env::var_os("FULL_DISK_CHILD_FILE")
        .expect("run by a_host_process_whose_page_cannot_be_backed_exits_74_naming_the_file");
    let m = MappedFile::open(Path::new(&path)).unwrap();
    m.fill(0, m.len(), 0xa5);
    panic!("the whole file was written: no page went unbacked");
}

#[test]
fn a_host_process_whose_page_cannot_be_backed_exits_74_naming_the_file() {
    let fs = Tmpfs::mount("exit", "1m");
    let path = fs.path().join("mem");
    sparse(&path, 4 << 20);
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "exit_policy_child", "--nocapture", "--test-threads=1"])
        .env("FULL_DISK_CHILD_FILE", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = rt::finish(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(mapped::EXIT_UNBACKED), "{}", rt::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let want = format!(
        "mapped file {}: a page cannot be backed: no space left on the file system; exiting",
        path.display()
    );
    assert!(err.contains(&want), "{}", rt::text(&o));
}

/// A `nic-cluster run` device process for cluster `c` under `base`, its
/// stderr in a file outside the tmpfs. Killed if still alive when dropped.
struct Device {
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
}

impl Device {
    fn start(base: &Path, backend: ClusterBackend) -> Device {
        let log = std::env::temp_dir().join(format!(
            "full-disk-{}-{}.log",
            backend.as_str(),
            std::process::id()
        ));
        let err = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(rt::nic_cluster_bin());
        cmd.env("NIC_CLUSTER_DIR", base)
            .args(["run", "--name", "c", "--nodes", "2", "--backend", backend.as_str()])
            // Host memory whose port slices hold 32 receive buffers of
            // 1 MiB: a stream takes more than the file system has.
            .args(["--host-size", &(512u64 << 20).to_string(), "--foreground", "--stats"]);
        if backend == ClusterBackend::Qemu {
            rt::require_qemu();
            cmd.arg("--image").arg(rt::firmware_image());
        }
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut d = Device { child: Some(child), dir: base.join("c"), log };
        let t = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with(READY_PREFIX) => return d,
                Ok(_) => {}
                Err(_) => {
                    let exited = d.child.as_mut().unwrap().try_wait().unwrap();
                    assert!(
                        exited.is_none() && t.elapsed() < Duration::from_secs(60),
                        "the device process did not come up ({exited:?}):\n{}",
                        d.log_text()
                    );
                }
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A field of /proc/<pid>/status, in kB.
    fn status_kb(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{}/status", self.pid()))
    }

    /// CPU time it used so far (user + system).
    fn cpu(&self) -> Duration {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command's closing parenthesis: state is 3,
        // utime 14 and stime 15 (in clock ticks, 100 a second).
        let rest = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
        Duration::from_millis((f[11] + f[12]) * 10)
    }

    /// SIGTERM; the time it took to exit (at most `limit`) and how.
    fn sigterm(&mut self, limit: Duration) -> (Duration, ExitStatus) {
        let mut child = self.child.take().unwrap();
        let t = Instant::now();
        process::request_stop(child.id()).unwrap();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return (t.elapsed(), s);
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the device process did not exit within {limit:?} of SIGTERM:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Fill the cluster's 20 MB file system with a stream of 1 MiB messages
/// from node 0 into 32 receive buffers on node 1, then check that one
/// node stopped with one line, the programs exited with an error, and the
/// device process still answers, did not run away, and stops on SIGTERM.
fn full_file_system_stops_one_node(backend: ClusterBackend) {
    let fs = Tmpfs::mount(backend.as_str(), "20m");
    let mut dev = Device::start(fs.path(), backend);
    let anon_before = dev.status_kb("RssAnon");
    let (send, recv) = rt::stream_spawn(
        &dev.dir,
        (0, 3),
        (1, 3),
        1 << 20,
        2000,
        &["--window", "1", "--recv-buffers", "32"],
    );
    let send = rt::finish(send, Duration::from_secs(60));
    let recv = rt::finish(recv, Duration::from_secs(60));
    let log = dev.log_text();
    let diag = || {
        format!("sender: {}\nreceiver: {}\ndevice log:\n{log}", rt::text(&send), rt::text(&recv))
    };
    // Both ended with an error of their own, not a signal, and said why.
    for o in [&send, &recv] {
        assert!(o.status.code().is_some_and(|c| c != 0), "{}", diag());
        assert!(!o.stderr.is_empty(), "{}", diag());
    }
    // One line per stopped node, naming one of its files and the cause;
    // at least one node stopped, and no NIC was reset.
    let d = ClusterDir::open_path(&dev.dir).unwrap_or_else(|e| panic!("{e}\n{}", diag()));
    let mut stopped = Vec::new();
    for node in 0..2u32 {
        let nd = d.node_dir(node);
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains(&format!("node {node}: "))
                    && l.contains(&format!(" file {}/", nd.display()))
                    && l.contains("no space left on the file system")
                    && l.contains(&format!("node {node} stopped"))
            })
            .collect();
        assert!(lines.len() <= 1, "node {node}: {} lines:\n{}", lines.len(), diag());
        let status = d.map_sram(node).unwrap().load_u32(reg(regs::FW_STATUS) as u64);
        if lines.len() == 1 {
            assert_eq!(status, Some(regs::FW_HALTED), "node {node} is marked halted\n{}", diag());
            stopped.push(node);
        }
    }
    assert!(!stopped.is_empty(), "no node stopped:\n{}", diag());
    assert_eq!(log.matches("no space left").count(), stopped.len(), "{}", diag());
    assert!(!log.contains("resetting the NIC"), "a NIC was reset:\n{}", diag());
    // Warned at the start that the cluster's files could outgrow the
    // file system, and told once that it is full.
    let warned = format!("the file system holding {} has ", dev.dir.display());
    assert!(log.contains(&warned) && log.contains("may take up to"), "{}", diag());
    let full = format!("the file system holding {} is full (", dev.dir.display());
    let t = Instant::now();
    while !dev.log_text().contains(&full) {
        assert!(t.elapsed() < Duration::from_secs(5), "no word of a full file system:\n{}", diag());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reflash of a stopped node does not bring it back: refused, said.
    let node = stopped[0];
    let flash = d.node_dir(node).join("flash");
    match std::fs::File::options().write(true).open(&flash) {
        Ok(f) => f.set_modified(std::time::SystemTime::now()).unwrap(),
        Err(_) => drop(std::fs::File::create(&flash).unwrap()),
    }
    let refused = format!("node {node}: flash changed: not reset: it stopped");
    let t = Instant::now();
    while !dev.log_text().contains(&refused) {
        assert!(t.elapsed() < Duration::from_secs(5), "no word of the reflash:\n{}", diag());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = dev.log_text();
    assert!(!log.contains("resetting the NIC"), "a NIC was reset:\n{}", diag());
    assert_eq!(log.matches("full (").count(), 1, "{}", diag());
    // Still serving: a control request is answered within a few seconds
    // (a port handed out on a running node; on a stopped one, an answer).
    let node = (0..2u16).find(|&n| !stopped.contains(&(n as u32))).unwrap_or(0);
    let cluster = dev.dir.to_string_lossy().into_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = host_driver::LiveBackend::attach(&cluster, node, 5).map(drop);
        let _ = tx.send(r);
    });
    let r = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
        panic!("node {node}'s control socket did not answer within 5 s:\n{}", diag())
    });
    if stopped.len() < 2 {
        r.unwrap_or_else(|e| panic!("attach to running node {node}: {e}\n{}", diag()));
    }
    // Idle and bounded: no busy loop, no memory growing.
    let cpu = dev.cpu();
    std::thread::sleep(Duration::from_secs(1));
    let used = dev.cpu() - cpu;
    let anon = dev.status_kb("RssAnon");
    println!("{backend:?}: nodes {stopped:?} stopped; device: {used:?} of CPU in 1 s, RssAnon {anon_before} -> {anon} kB");
    assert!(used < Duration::from_millis(500), "{used:?} of CPU in 1 s idle\n{}", diag());
    assert!(anon < anon_before + 20 * 1024, "RssAnon {anon_before} -> {anon} kB\n{}", diag());
    // SIGTERM: out within a few seconds, directory removed, no reset.
    let (took, status) = dev.sigterm(Duration::from_secs(5));
    let log = dev.log_text();
    println!("{backend:?}: SIGTERM -> exit in {took:?} ({status})");
    assert!(status.success(), "{status}\n{log}");
    assert!(!dev.dir.exists(), "{} removed", dev.dir.display());
    let stats: Vec<&str> = log.lines().filter(|l| l.contains(" resets; ")).collect();
    assert_eq!(stats.len(), 2, "{log}");
    assert!(stats.iter().all(|l| l.contains(", 0 resets; ")), "{log}");
}

#[test]
fn a_full_file_system_stops_one_live_node_with_one_line_and_the_device_still_stops_on_sigterm() {
    full_file_system_stops_one_node(ClusterBackend::Live);
}

#[test]
fn a_full_file_system_stops_one_qemu_node_with_one_line_and_the_device_still_stops_on_sigterm() {
    full_file_system_stops_one_node(ClusterBackend::Qemu);
}

/// A device process whose NICs never boot (a stand-in for QEMU that only
/// sleeps) still stops at once on SIGTERM, removing its directory; it
/// does not wait out its boot timeout first.
#[test]
fn a_device_process_stops_on_sigterm_while_its_nics_boot() {
    let base = PathBuf::from(rt::cluster_path("boot-sigterm"));
    std::fs::create_dir_all(&base).unwrap();
    let fake = base.join("fake-qemu");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 600\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = Command::new(rt::nic_cluster_bin())
        .env("NIC_CLUSTER_DIR", &base)
        .args(["run", "--name", "c", "--nodes", "2", "--backend", "qemu", "--foreground"])
        .args(["--boot-timeout", "120", "--image"])
        .arg(rt::firmware_image())
        .arg("--qemu")
        .arg(&fake)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dir = base.join("c");
    let t = Instant::now();
    while !dir.join("cluster.toml").exists() {
        if t.elapsed() > Duration::from_secs(30) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "the cluster was not published:\n{}",
                rt::text(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Booting: no NIC can report RUNNING.
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "the device process ended while booting");
    let t = Instant::now();
    process::request_stop(child.id()).unwrap();
    let o = rt::finish(child, Duration::from_secs(5));
    let took = t.elapsed();
    println!("SIGTERM while booting -> exit in {took:?} ({})", o.status);
    assert!(took < Duration::from_secs(3), "{took:?}\n{}", rt::text(&o));
    assert!(o.status.code().is_some(), "ended by a signal: {}", rt::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("stopped by a signal before every NIC's firmware ran"),
        "{}",
        rt::text(&o)
    );
    assert!(!dir.exists(), "{} removed", dir.display());
    let _ = std::fs::remove_dir_all(&base);
}

/// A file system too small for even the pages a NIC's reset writes: the
/// start fails with an error naming the file and the cause, and leaves
/// nothing behind.
#[test]
fn a_cluster_whose_first_pages_do_not_fit_fails_to_start_naming_the_file() {
    let fs = Tmpfs::mount("start", "16k");
    let path = fs.path().join("c");
    let cfg = nic_emu::realtime::RtConfig::new(&path.to_string_lossy(), ClusterBackend::Live, 2);
    let e = match nic_emu::realtime::RtCluster::start(cfg) {
        Ok(c) => {
            let _ = c.stop();
            panic!("a cluster started on a 16 KiB file system");
        }
        Err(e) => e.to_string(),
    };
    println!("{e}");
    assert!(e.to_lowercase().contains("no space left"), "{e}");
    assert!(e.contains(&fs.path().display().to_string()), "names no file: {e}");
    assert!(!path.exists() || std::fs::read_dir(&path).unwrap().next().is_none(), "{e}");
}
