//! The cluster directory on a shared machine, attacked through the shipped
//! `nic-cluster` binary as a careless or hostile user would: names that
//! climb out of the base directory, an existing directory that is not a
//! cluster's, an empty name, a symbolic link planted in the base, a base
//! owned by another user, a manifest whose pid was edited to name an
//! unrelated process, and a second start under a taken name. Each must be
//! refused with a message that says why, and nothing outside the cluster's
//! own directory may change (every tree around it is compared, file by
//! file, before and after). Then the inputs the command line must refuse
//! up front, and `list` showing what it cannot read and what is dead.
//!
//! Each test uses a fresh tree under the temp dir as its base directory
//! (NIC_CLUSTER_DIR, given to the binary only). Live clusters; one qemu
//! case (it FAILS when QEMU or the riscv target is missing). The test of a
//! base owned by another user needs root (chown), and FAILS without it.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The user a hostile directory belongs to.
const NOBODY: u32 = 65534;

/// A fresh tree for one test: `base` (the base directory, not made yet),
/// `victim` (a directory of someone's files), `cwd` (two levels down, to
/// start from), removed at the end.
struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(tag: &str) -> Tree {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("nic-dirs-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("cwd/a/b")).unwrap();
        let v = root.join("victim");
        fs::create_dir_all(v.join("sub")).unwrap();
        fs::write(v.join("notes.txt"), "the user's own notes").unwrap();
        fs::write(v.join("sub/data"), vec![7u8; 5000]).unwrap();
        fs::set_permissions(&v, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(root.join("p"), "a file beside the tree").unwrap();
        Tree { root }
    }

    fn base(&self) -> PathBuf {
        self.root.join("base")
    }

    fn victim(&self) -> PathBuf {
        self.root.join("victim")
    }

    fn cwd(&self) -> PathBuf {
        self.root.join("cwd/a/b")
    }

    /// `nic-cluster ARGS` with this tree's base, from `cwd`; its output
    /// (killed after 60 s).
    fn nic_cluster(&self, args: &[&str]) -> Output {
        let child = Command::new(rt::nic_cluster_bin())
            .args(args)
            .env("NIC_CLUSTER_DIR", self.base())
            .current_dir(self.cwd())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run nic-cluster");
        rt::finish(child, Duration::from_secs(60))
    }

    /// Start live cluster `name` in the background (1 node).
    fn start(&self, name: &str) -> Running<'_> {
        let o = self.nic_cluster(&["run", "--name", name, "--nodes", "1", "--detach"]);
        assert!(o.status.success(), "{}", rt::text(&o));
        Running { tree: self, name: name.to_string() }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// A cluster started in the background: stopped when dropped.
struct Running<'a> {
    tree: &'a Tree,
    name: String,
}

impl Running<'_> {
    fn dir(&self) -> PathBuf {
        self.tree.base().join(&self.name)
    }

    fn manifest(&self) -> String {
        fs::read_to_string(self.dir().join("cluster.toml")).unwrap()
    }

    fn device_pid(&self) -> u32 {
        field(&self.manifest(), "pid").parse().unwrap()
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let o = self.tree.nic_cluster(&["stop", "--name", &self.name]);
        if !o.status.success() && self.dir().exists() {
            eprintln!("could not stop {}: {}", self.name, rt::text(&o));
        }
    }
}

/// A `key = value` line's value in a manifest.
fn field(manifest: &str, key: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{manifest}"))
        .trim_matches('"')
        .to_string()
}

/// Every path under `root` (itself included) with its type, mode, owner,
/// size, and content or link target: what "nothing touched" compares.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    snapshot_except(root, &[])
}

/// `snapshot`, but running clusters' directories (`inside`) only by their
/// mode and owner: their memory files change as they run.
fn snapshot_except(root: &Path, inside: &[PathBuf]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(md) = fs::symlink_metadata(&p) else { continue };
        let what = if md.file_type().is_symlink() {
            format!("link to {}", fs::read_link(&p).unwrap().display())
        } else if inside.contains(&p) {
            "a running cluster's directory".to_string()
        } else if md.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            "dir".to_string()
        } else if !md.is_file() {
            // A socket or a FIFO: opening one is no way to read it.
            format!("{:?}", md.file_type())
        } else {
            format!("file {:?}", fs::read(&p).unwrap())
        };
        out.insert(p, format!("{:o} uid {} {} B {what}", md.mode(), md.uid(), md.len()));
    }
    out
}

fn assert_untouched(before: &BTreeMap<PathBuf, String>, root: &Path, what: &str) {
    assert_untouched_except(before, root, &[], what)
}

fn assert_untouched_except(
    before: &BTreeMap<PathBuf, String>,
    root: &Path,
    inside: &[PathBuf],
    what: &str,
) {
    let after = snapshot_except(root, inside);
    if &after != before {
        let changed: Vec<_> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .map(|k| format!("{}: {:?} -> {:?}", k.display(), before.get(k), after.get(k)))
            .collect();
        panic!("{what} changed something outside the cluster directory:\n{}", changed.join("\n"));
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn refused(o: &Output, says: &str) {
    assert!(!o.status.success(), "accepted:\n{}", rt::text(o));
    assert!(stderr(o).contains(says), "the error does not say `{says}`:\n{}", rt::text(o));
}

fn process_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
}

#[test]
fn a_name_that_climbs_out_of_the_base_is_refused_and_nothing_outside_is_touched() {
    let t = Tree::new("climb");
    fs::create_dir_all(t.base().join("x")).unwrap();
    let before = snapshot(&t.root);
    // <base>/x/../../victim is the victim; from cwd, ../../victim too.
    for name in ["x/../../victim", "../../victim", "/p", ""] {
        let o = t.nic_cluster(&["run", "--name", name, "--nodes", "1", "--detach"]);
        assert_eq!(o.status.code(), Some(2), "a usage error:\n{}", rt::text(&o));
        refused(&o, &format!("invalid value '{name}' for '--name <NAME>'"));
        refused(&o, "a cluster name is one path component of letters, digits");
        let o = t.nic_cluster(&["stop", "--name", name]);
        refused(&o, &format!("invalid value '{name}' for '--name <NAME>'"));
    }
    // The same places as directories: they exist and are not clusters.
    let climb = t.base().join("x/../../victim");
    for dir in [climb.to_str().unwrap(), "../../../victim"] {
        let o = t.nic_cluster(&["run", "--dir", dir, "--nodes", "1", "--detach"]);
        refused(&o, "exists and is not a cluster directory (no marker file");
        refused(&o, "nothing in it was changed or removed");
        let o = t.nic_cluster(&["run", "--dir", dir, "--nodes", "1"]);
        refused(&o, "exists and is not a cluster directory");
    }
    assert_untouched(&before, &t.root, "a name or directory that climbs out");
}

#[test]
fn an_existing_directory_that_is_not_a_cluster_is_neither_taken_nor_removed() {
    let t = Tree::new("taken");
    let victim = t.victim();
    // A manifest of a dead cluster planted in it: `stop` would remove a
    // dead cluster's directory, but this one carries no marker.
    fs::write(
        victim.join("cluster.toml"),
        "format = 1\nname = \"victim\"\nbackend = \"live\"\nnodes = 1\nprofile = \"p\"\n\
         sram_size = 1048576\nhost_size = 1048576\npid = 4294967294\ncreated = 0\n",
    )
    .unwrap();
    let before = snapshot(&t.root);
    let v = victim.to_str().unwrap();
    let o = t.nic_cluster(&["run", "--dir", v, "--nodes", "1", "--detach"]);
    refused(&o, &format!("{v}: exists and is not a cluster directory (no marker file"));
    let o = t.nic_cluster(&["stop", "--dir", v]);
    refused(&o, &format!("{v}: exists and is not a cluster directory (no marker file"));
    assert_untouched(&before, &t.root, "run/stop --dir of a directory that is not a cluster");
    // A new directory is made, used, and removed by `stop` (with its log).
    let fresh = t.root.join("fresh");
    let f = fresh.to_str().unwrap();
    let o = t.nic_cluster(&["run", "--dir", f, "--nodes", "1", "--detach"]);
    assert!(o.status.success(), "{}", rt::text(&o));
    assert!(fresh.join("nic-cluster.log").is_file());
    assert_eq!(fs::metadata(&fresh).unwrap().mode() & 0o7777, 0o700);
    let o = t.nic_cluster(&["stop", "--dir", f]);
    assert!(o.status.success(), "{}", rt::text(&o));
    assert!(!fresh.exists(), "stop removes the cluster directory");
    assert_untouched(&before, &t.root, "a cluster in a new directory beside them");
}

#[test]
fn an_empty_name_is_refused_and_other_clusters_survive_it() {
    let t = Tree::new("empty");
    let c1 = t.start("c1");
    let c2 = t.start("c2");
    let running = [c1.dir(), c2.dir()];
    let manifests = [c1.manifest(), c2.manifest()];
    let before = snapshot_except(&t.root, &running);
    let o = t.nic_cluster(&["run", "--name", "", "--nodes", "1", "--detach"]);
    refused(&o, "the name is empty");
    let o = t.nic_cluster(&["stop", "--name", ""]);
    refused(&o, "the name is empty");
    for bad in [".", "..", "a\nb", &"x".repeat(65)] {
        let o = t.nic_cluster(&["stop", "--name", bad]);
        refused(&o, "a cluster name is one path component");
    }
    assert_untouched_except(&before, &t.root, &running, "run/stop with an empty name");
    assert_eq!([c1.manifest(), c2.manifest()], manifests);
    assert!(process_alive(c1.device_pid()) && process_alive(c2.device_pid()));
}

#[test]
fn a_symbolic_link_planted_in_the_base_is_refused_and_its_target_untouched() {
    let t = Tree::new("link");
    let mine = t.start("mine");
    let running = [mine.dir()];
    let victim = t.victim();
    std::os::unix::fs::symlink(&victim, t.base().join("victim")).unwrap();
    // Planted by another user, as it would be in a shared base.
    std::os::unix::fs::lchown(t.base().join("victim"), Some(NOBODY), Some(NOBODY)).ok();
    let before = snapshot_except(&t.root, &running);
    let o = t.nic_cluster(&["run", "--name", "victim", "--nodes", "1", "--detach"]);
    refused(&o, &format!("a symbolic link (to {})", victim.display()));
    refused(&o, "a cluster directory is never reached through a link");
    let o = t.nic_cluster(&["run", "--name", "victim", "--nodes", "1"]);
    refused(&o, "a symbolic link");
    let o = t.nic_cluster(&["stop", "--name", "victim"]);
    assert!(!o.status.success(), "{}", rt::text(&o));
    assert_untouched_except(&before, &t.root, &running, "a start on a planted link");
    // `list` says what it is instead of following it.
    let o = t.nic_cluster(&["list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("victim") && out.contains("a symbolic link"), "{out}");
    // The base itself as a link is refused, naming it and its owner.
    let t2 = Tree::new("baselink");
    std::os::unix::fs::symlink(t2.victim(), t2.base()).unwrap();
    let before = snapshot(&t2.root);
    let o = t2.nic_cluster(&["run", "--name", "c", "--nodes", "1", "--detach"]);
    refused(
        &o,
        &format!("{}: the base directory of clusters is a symbolic link", t2.base().display()),
    );
    assert_untouched(&before, &t2.root, "a start in a base that is a link");
}

#[test]
fn a_base_owned_by_another_user_is_refused_naming_it_and_its_owner() {
    assert!(
        rt::euid_is_root(),
        "this test gives the base directory to uid {NOBODY}: run it as root"
    );
    let t = Tree::new("owner");
    fs::create_dir(t.base()).unwrap();
    fs::set_permissions(t.base(), fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(t.base(), Some(NOBODY), Some(NOBODY)).unwrap();
    let before = snapshot(&t.root);
    let o = t.nic_cluster(&["run", "--name", "c", "--nodes", "1", "--detach"]);
    refused(
        &o,
        &format!("{}: the base directory of clusters is owned by uid {NOBODY}", t.base().display()),
    );
    refused(&o, "set NIC_CLUSTER_DIR to a directory of your own");
    let o =
        t.nic_cluster(&["run", "--name", "c", "--nodes", "1", "--allow-uid", "1001", "--detach"]);
    refused(&o, "is owned by uid 65534");
    assert_untouched(&before, &t.root, "a start in another user's base");
    // A cluster directory of another user's (marker and all) is not taken.
    let t2 = Tree::new("owner-dir");
    fs::create_dir(t2.base()).unwrap();
    fs::set_permissions(t2.base(), fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir(t2.base().join("theirs")).unwrap();
    fs::write(t2.base().join("theirs/.nic-cluster"), "nic-cluster directory 1\n").unwrap();
    std::os::unix::fs::chown(t2.base().join("theirs"), Some(NOBODY), Some(NOBODY)).unwrap();
    let before = snapshot(&t2.root);
    let o = t2.nic_cluster(&["run", "--name", "theirs", "--nodes", "1", "--detach"]);
    refused(&o, "exists and is owned by uid 65534");
    assert_untouched(&before, &t2.root, "a start in another user's cluster directory");
}

#[test]
fn stop_never_signals_a_pid_the_manifest_was_edited_to_name() {
    let t = Tree::new("pid");
    let c = t.start("c");
    let device = c.device_pid();
    let manifest = c.manifest();
    let mut sleep = Command::new("sleep").arg("60").spawn().unwrap();
    let edit = |from: &str, to: &str| {
        assert!(manifest.contains(from), "{manifest}");
        fs::write(c.dir().join("cluster.toml"), manifest.replace(from, to)).unwrap();
    };
    // The sleep's pid, the device's start time and program.
    edit(&format!("pid = {device}\n"), &format!("pid = {}\n", sleep.id()));
    let o = t.nic_cluster(&["stop", "--name", "c"]);
    refused(&o, &format!("pid {} is not this cluster's device process (process", sleep.id()));
    refused(&o, "the pid was reused or the manifest edited); not signalled");
    // The sleep's pid and start time: its program differs.
    let stat = fs::read_to_string(format!("/proc/{}/stat", sleep.id())).unwrap();
    let start = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().to_string();
    let edited =
        manifest.replace(&format!("pid = {device}\n"), &format!("pid = {}\n", sleep.id())).replace(
            &format!("pid_start = {}", field(&manifest, "pid_start")),
            &format!("pid_start = {start}"),
        );
    fs::write(c.dir().join("cluster.toml"), edited).unwrap();
    let o = t.nic_cluster(&["stop", "--name", "c"]);
    let sleep_exe = fs::read_link(format!("/proc/{}/exe", sleep.id())).unwrap();
    refused(&o, &format!("runs {}, the device process ran", sleep_exe.display()));
    // No start time recorded (an older manifest): cannot tell, not signalled.
    let old: String = manifest
        .lines()
        .filter(|l| !l.starts_with("pid_"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace(&format!("pid = {device}\n"), &format!("pid = {}\n", sleep.id()));
    fs::write(c.dir().join("cluster.toml"), old).unwrap();
    let o = t.nic_cluster(&["stop", "--name", "c"]);
    refused(&o, "records no start time");
    // pid = 0 is a manifest error, not "no liveness check".
    edit(&format!("pid = {device}\n"), "pid = 0\n");
    let o = t.nic_cluster(&["stop", "--name", "c"]);
    refused(&o, "pid = 0: the device process's pid is required");
    assert_eq!(sleep.try_wait().unwrap(), None, "the sleep was signalled");
    assert!(process_alive(device), "the device process was signalled");
    assert!(c.dir().join("node0").is_dir(), "the cluster's files were removed");
    // The true manifest back: stopped.
    fs::write(c.dir().join("cluster.toml"), &manifest).unwrap();
    let o = t.nic_cluster(&["stop", "--name", "c"]);
    assert!(o.status.success(), "{}", rt::text(&o));
    let t0 = Instant::now();
    while process_alive(device) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the device process did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!c.dir().exists());
    sleep.kill().unwrap();
    sleep.wait().unwrap();
}

#[test]
fn a_second_start_under_a_taken_name_leaves_the_running_clusters_log() {
    let t = Tree::new("twice");
    let c = t.start("c");
    let log = c.dir().join("nic-cluster.log");
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("nic-cluster: ready"), "{text}");
    let running = [c.dir()];
    let before = snapshot_except(&t.root, &running);
    let manifest = c.manifest();
    for args in [&["--detach"][..], &[][..]] {
        let mut a = vec!["run", "--name", "c", "--nodes", "1"];
        a.extend_from_slice(args);
        let o = t.nic_cluster(&a);
        refused(&o, &format!("a running cluster already lives at {}", c.dir().display()));
        refused(&o, &format!("(device process {})", c.device_pid()));
    }
    assert_untouched_except(&before, &t.root, &running, "a second start under a taken name");
    assert_eq!(fs::read_to_string(&log).unwrap(), text, "the running cluster's log changed");
    assert_eq!(c.manifest(), manifest);
    assert!(process_alive(c.device_pid()));
}

#[test]
fn list_shows_an_unreadable_manifest_and_a_dead_clusters_nics_as_dead() {
    let t = Tree::new("list");
    let dead = t.start("dead");
    let broken = t.start("broken");
    let good = broken.manifest();
    fs::write(broken.dir().join("cluster.toml"), "this is = not [toml").unwrap();
    let pid = dead.device_pid();
    rt::kill_pid(pid);
    let t0 = Instant::now();
    while process_alive(pid) {
        assert!(t0.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = t.nic_cluster(&["list"]);
    assert!(o.status.success(), "{}", rt::text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("`list` hides {name}:\n{out}"))
            .to_string()
    };
    let b = line("broken");
    assert!(b.contains("unreadable:") && b.contains("cluster.toml: TOML parse error"), "{b}");
    assert!(
        b.ends_with("column 6: key with no value, expected `=`"),
        "the reason on one line: {b}"
    );
    let d = line("dead");
    assert!(d.contains(" dead ") && d.ends_with("[dead]"), "{d}");
    // A dead cluster's directory goes with `stop`, with what its log said.
    let o = t.nic_cluster(&["stop", "--name", "dead"]);
    assert!(o.status.success(), "{}", rt::text(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("was not running (it died)") && said.contains("nic-cluster: ready"),
        "{said}"
    );
    assert!(!dead.dir().exists());
    fs::write(broken.dir().join("cluster.toml"), good).unwrap();
}

#[test]
fn bad_uids_timeouts_and_negative_numbers_are_usage_errors_naming_the_option() {
    let t = Tree::new("cli");
    let cases: [(&[&str], &str); 9] = [
        (
            &["run", "--name", "c", "--allow-uid", "4294967295"],
            "'--allow-uid <UID>': 4294967295 is not a user id",
        ),
        (&["run", "--name", "c", "--allow-uid", "-1"], "'--allow-uid <UID>': must not be negative"),
        (
            &["stop", "--name", "c", "--timeout", "nan"],
            "'--timeout <TIMEOUT>': must be a positive, finite number",
        ),
        (&["stop", "--name", "c", "--timeout", "-1"], "'--timeout <TIMEOUT>': must be a positive"),
        (&["stop", "--name", "c", "--timeout", "inf"], "'--timeout <TIMEOUT>': must be a positive"),
        (&["run", "--name", "c", "--seed", "-0"], "'--seed <SEED>': must not be negative"),
        (&["run", "--name", "c", "--nodes", "-2"], "'--nodes <NODES>': must be at least 1"),
        (&["run", "--name", "c", "--drop", "-0.5"], "'--drop <DROP>': must be a probability"),
        (
            &["run", "--name", "c", "--host-size", "-4096"],
            "'--host-size <HOST_SIZE>': must not be negative",
        ),
    ];
    for (args, says) in cases {
        let o = t.nic_cluster(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: a usage error:\n{}", rt::text(&o));
        refused(&o, says);
    }
    assert!(!t.base().exists(), "a refused command made the base directory");
}

#[test]
fn a_qemu_cluster_refuses_a_planted_link_and_a_climbing_name_too() {
    rt::require_qemu();
    let image = rt::firmware_image();
    let t = Tree::new("qemu");
    fs::create_dir(t.base()).unwrap();
    fs::set_permissions(t.base(), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(t.victim(), t.base().join("victim")).unwrap();
    let before = snapshot(&t.root);
    let img = image.to_str().unwrap();
    let q = |name: &str| {
        t.nic_cluster(&[
            "run",
            "--backend",
            "qemu",
            "--image",
            img,
            "--name",
            name,
            "--nodes",
            "1",
            "--detach",
        ])
    };
    refused(&q("victim"), "a symbolic link (to ");
    refused(&q("x/../../victim"), "it holds '/'");
    assert_untouched(&before, &t.root, "a qemu start on a planted link");
    // And a good name beside them runs and goes away whole.
    let o = q("good");
    assert!(o.status.success(), "{}", rt::text(&o));
    let o = t.nic_cluster(&["stop", "--name", "good"]);
    assert!(o.status.success(), "{}", rt::text(&o));
    assert_untouched(&before, &t.root, "a qemu cluster beside them");
}
