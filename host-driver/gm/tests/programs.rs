//! GM programs in C, compiled against include/gm.h with the system C
//! compiler and linked with libgm.a, run as separate processes against a
//! live cluster served from this test (the MCP on every NIC). They find
//! it through NIC_CLUSTER and NIC_NODE, as a user's programs do, check
//! every byte they receive, and exit non-zero when anything is wrong.

#[path = "../../tests/live_rig/mod.rs"]
mod live_rig;
#[path = "../../../nic-emu/tests/rt/mod.rs"]
mod rt;

mod common;

use std::process::{Command, Output};

use common::{compile, here, libgm, pair, text, LIBS};
use live_rig::{cluster, path_str, Regs};

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
fn gms_utility_modules_answer_from_c() {
    let exe = compile("tests/c/modules.c", "modules");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "modules: ok\n");
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
        .args(LIBS)
        .arg("-o")
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
