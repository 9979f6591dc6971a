//! GM programs in C, compiled against include/gm.h with the system C
//! compiler and linked with libgm.a, run as separate processes against a
//! live cluster served from this test (the MCP on every NIC). They find
//! it through NIC_CLUSTER and NIC_NODE, as a user's programs do, check
//! every byte they receive, and exit non-zero when anything is wrong.

#[path = "../../tests/live_rig/mod.rs"]
mod live_rig;
#[path = "../../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use live_rig::{cluster, path_str, Regs};

/// This crate's directory.
fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// libgm.a as cargo built it for this test: in the test's own `deps`
/// directory (`libgm-<hash>.a`; the newest, should there be several).
fn libgm() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("target/<profile>/deps/<test>");
    let newest = std::fs::read_dir(deps)
        .expect("the deps directory")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("libgm-") && n.ends_with(".a")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
    match newest {
        Some(e) => e.path(),
        None => panic!("no libgm-*.a in {}: cargo builds it with the gm crate", deps.display()),
    }
}

/// The C compiler: $CC, else `cc`.
fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Compile `src` (under this crate) into an executable named `name`,
/// once per run of this file (tests run in parallel: a second compile
/// into the same path could replace a program another test is running).
fn compile(src: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let exe = compile_now(src, name);
    built.push((name.to_string(), exe.clone()));
    exe
}

fn compile_now(src: &str, name: &str) -> PathBuf {
    let out_dir = libgm().parent().unwrap().parent().unwrap().join("gm-programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let out = Command::new(cc())
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(here().join("include"))
        .arg(here().join(src))
        .arg(libgm())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the C compiler `{}` could not run ({e}): install gcc (apt-get install gcc)",
                cc()
            )
        });
    assert!(out.status.success(), "compiling {src}:\n{}", text(&out));
    exe
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `exe args` as node `node` of the cluster at `path`.
fn on_node(exe: &Path, path: &str, node: u16, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .env("NIC_CLUSTER", path)
        .env("NIC_NODE", node.to_string())
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .env_remove("PMIX_RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run `exe args` on nodes 0 and 1 at once; both outputs.
fn pair(exe: &Path, path: &str, args: &[&str]) -> (Output, Output) {
    let one = on_node(exe, path, 1, args).spawn().unwrap();
    let zero = on_node(exe, path, 0, args).spawn().unwrap();
    (zero.wait_with_output().unwrap(), one.wait_with_output().unwrap())
}

#[test]
fn the_header_lays_events_and_alarms_out_as_gm_documents() {
    // (The checks are static assertions: compiling is most of the test.)
    let exe = compile("tests/c/layout.c", "layout");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    // The library writes its events at the same offsets.
    use gm::recv::at;
    for (field, off) in [
        ("recv.message", at::MESSAGE),
        ("recv.buffer", at::BUFFER),
        ("recv.length", at::LENGTH),
        ("recv.sender_node_id", at::SENDER_NODE_ID),
        ("recv.tag", at::TAG),
        ("recv.size", at::SIZE),
        ("recv.sender_port_id", at::SENDER_PORT_ID),
        ("recv.type", at::TYPE),
        ("sent.message_list", at::MESSAGE_LIST),
        ("fatal.status", at::STATUS),
    ] {
        assert!(s.contains(&format!("{field} {off} ")), "{field} at {off}: {s}");
    }
    assert!(s.contains(&format!("alarm {}", std::mem::size_of::<gm::alarm::GmAlarm>())), "{s}");
}

/// gm_allsize's two outputs: both succeeded, the leader printed a line
/// per size from 4 to `max` and found every message intact.
fn assert_allsize(lead: &Output, other: &Output, max: u32) {
    assert!(lead.status.success(), "node 0:\n{}\nnode 1:\n{}", text(lead), text(other));
    assert!(other.status.success(), "node 1:\n{}", text(other));
    let s = String::from_utf8_lossy(&lead.stdout);
    for size in 4..=max {
        let bytes = (1u64 << size) - 8;
        assert!(
            s.lines()
                .any(|l| l.split_whitespace().take(2).eq([size.to_string(), bytes.to_string()])),
            "no line for size {size}:\n{s}"
        );
    }
    assert!(s.contains("every message intact"), "{s}");
}

#[test]
fn gm_allsize_carries_every_size_intact_between_two_live_nodes() {
    let exe = compile("programs/gm_allsize.c", "gm_allsize");
    let c = cluster("gm-allsize", 2, Regs::default());
    let (lead, other) = pair(&exe, &path_str(&c), &["-n", "10", "-s", "14", "-b", "4"]);
    assert_allsize(&lead, &other, 14);
}

#[test]
fn gm_allsize_carries_every_size_intact_between_two_qemu_nodes() {
    let exe = compile("programs/gm_allsize.c", "gm_allsize");
    let c = rt::qemu_cluster("gm-allsize", 2);
    let path = c.path().to_string_lossy().into_owned();
    let (lead, other) = pair(&exe, &path, &["-n", "4", "-s", "13", "-b", "4"]);
    assert_allsize(&lead, &other, 13);
}

#[test]
fn a_missing_variable_is_named_and_gm_open_fails() {
    let exe = compile("programs/gm_allsize.c", "gm_allsize");
    let out = Command::new(&exe).env_remove("NIC_CLUSTER").env("NIC_NODE", "0").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NIC_CLUSTER is not set"), "{err}");
    assert!(err.contains("gm_open: no such device"), "{err}");
}

/// An MPI compiler wrapper and launcher, or a failure naming them.
fn require_mpi() {
    for (prog, arg) in [("mpicc", "-show"), ("mpirun", "--version")] {
        let ok = Command::new(prog).arg(arg).output().is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{prog} is not installed: the MPI test needs an MPI (Debian: apt-get install -y \
             libmpich-dev; `cargo xtask test` installs it as root)"
        );
    }
}

#[test]
fn an_mpi_program_bootstraps_with_mpi_and_talks_over_gm_under_mpirun() {
    require_mpi();
    let exe = libgm().parent().unwrap().parent().unwrap().join("gm-programs").join("mpi_gm_ring");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let out = Command::new("mpicc")
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(here().join("include"))
        .arg(here().join("programs/mpi/mpi_gm_ring.c"))
        .arg(libgm())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "mpicc:\n{}", text(&out));
    let c = cluster("gm-mpi", 2, Regs::default());
    // (Open MPI refuses root without --allow-run-as-root; MPICH's mpirun
    // takes no such flag. The rank, not NIC_NODE, picks each node.)
    let mut run = Command::new("mpirun");
    let open_mpi = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"));
    if open_mpi {
        run.arg("--allow-run-as-root");
    }
    let out = run
        .args(["-np", "2"])
        .arg(&exe)
        .env("NIC_CLUSTER", path_str(&c))
        .env_remove("NIC_NODE")
        .output()
        .unwrap();
    assert!(out.status.success(), "mpirun -np 2 mpi_gm_ring:\n{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for (rank, id, from) in [(0, 1, 1), (1, 2, 0)] {
        let line =
            format!("rank {rank} of 2 (node id {id}): message and put from rank {from} intact");
        assert!(s.contains(&line), "no `{line}`:\n{s}");
    }
}
