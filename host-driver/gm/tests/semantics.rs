//! GM's semantics as programs written for GM see them: puts, gets,
//! alarms, and what follows a failed send. Each is a C program under
//! programs/, compiled against include/gm.h with the system C compiler
//! and linked with libgm.a, run as separate processes on a live cluster
//! served from this test (NIC_CLUSTER, NIC_NODE). The programs check
//! every byte they move and exit 1 with the reason on stderr when
//! anything is wrong; the tests check their exit statuses and the lines
//! that say what they verified.

#[path = "../../tests/live_rig/mod.rs"]
mod live_rig;
#[path = "../../../nic-emu/tests/rt/mod.rs"]
mod rt;

mod common;

use std::process::Output;

use common::{assert_both, assert_line, compile, on_node, outputs, pair, text};
use live_rig::{cluster, path_str, Regs};

#[test]
fn gm_put_writes_every_range_and_nothing_around_them() {
    let c = cluster("gm-put", 2, Regs::default());
    check_put(&path_str(&c));
}

/// gm_put's two processes on the cluster at `path`, and what they print.
fn check_put(path: &str) {
    let exe = compile("programs/gm_put.c", "gm_put");
    let (putter, target) = pair(&exe, path, &[]);
    assert_both(&putter, &target);
    // The program's nine ranges: 1 + 3 + 8 + 4096 + 4097 + 20000 + 1 +
    // 9000 + 24999 bytes of the 65536 of the region.
    assert_line(
        &putter,
        "gm_put: 62205 bytes put intact in 9 puts, the rest of the 65536 bytes untouched",
    );
    assert_line(
        &target,
        "gm_put: target region of 65536 bytes checked: 62205 bytes put, 3331 untouched, 0 wrong",
    );
}

#[test]
fn gm_get_reads_every_range_into_its_place_and_leaves_the_source_alone() {
    let c = cluster("gm-get", 2, Regs::default());
    check_get(&path_str(&c));
}

/// gm_get's two processes on the cluster at `path`, and what they print.
fn check_get(path: &str) {
    let exe = compile("programs/gm_get.c", "gm_get");
    let (reader, source) = pair(&exe, path, &[]);
    assert_both(&reader, &source);
    // The program's eleven ranges: six one at a time, five together.
    assert_line(
        &reader,
        "gm_get: 63334 bytes got intact in 11 gets, the rest of the 70000 bytes untouched",
    );
    assert_line(
        &source,
        "gm_get: source region of 65536 bytes unchanged after the reader got 63334 bytes",
    );
}

#[test]
fn a_program_whose_partner_never_comes_says_what_it_waited_for_and_fails() {
    // The failure path the others rely on not to hang: node id 1 of
    // gm_put alone waits for the region's address, until its `-t`.
    let exe = compile("programs/gm_put.c", "gm_put");
    let c = cluster("gm-put-alone", 2, Regs::default());
    let out = outputs(vec![on_node(&exe, &path_str(&c), 0, &["-t", "1"]).spawn().unwrap()]);
    let out = &out[0];
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l == "gm_put: node id 1: timed out waiting for the region's address"),
        "{}",
        text(out)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("intact"), "{}", text(out));
}

/// gm_alarm's output: it succeeded and found every alarm as GM says.
fn assert_alarms(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
    for line in [
        "alarm g: ran once, not early",
        "alarm b: ran once, not early",
        "alarm d: ran once, not early",
        "alarm f: ran twice, not early",
        "alarm a: ran once, not early",
        "alarm e: ran once, not early",
        "alarm c: cancelled, never ran",
        "alarm z: ran once, not early",
        "alarm order: every callback in deadline order",
        "gm_alarm: ok",
    ] {
        assert_line(o, line);
    }
}

#[test]
fn gm_alarm_runs_each_callback_once_in_deadline_order_and_never_a_cancelled_one() {
    let exe = compile("programs/gm_alarm.c", "gm_alarm");
    let c = cluster("gm-alarm", 2, Regs::default());
    // One process on each node at once: each has its own port and alarms.
    let (zero, one) = pair(&exe, &path_str(&c), &[]);
    assert_alarms(&zero);
    assert_alarms(&one);
}

/// GM disables a connection whose send failed: every send queued to it
/// waits for gm_resume_sending or gm_drop_sends, the one already with the
/// NIC behind the failed one too (the NIC tries it at once, and it fails
/// as well: held, not reported).
#[test]
fn gm_resume_holds_a_failed_connections_sends_until_dropped_then_resumes() {
    let c = cluster("gm-resume", 2, Regs::default());
    check_resume(&path_str(&c));
}

/// gm_resume's two processes on the cluster at `path`, and what they
/// print.
fn check_resume(path: &str) {
    let exe = compile("programs/gm_resume.c", "gm_resume");
    let (sender, receiver) = pair(&exe, path, &[]);
    assert_both(&sender, &receiver);
    for line in [
        "gm_resume: a send to closed port 7 of node id 2: GM_SEND_TARGET_PORT_CLOSED",
        "gm_resume: port 2 of the same node is reached meanwhile",
        "gm_resume: the held sends completed only at gm_drop_sends, with GM_SEND_DROPPED",
        "gm_resume: after gm_resume_sending, 3000 bytes to port 7 arrived intact, and nothing else",
        "gm_resume: ok",
    ] {
        assert_line(&sender, line);
    }
    assert_line(
        &receiver,
        "gm_resume: port 7, opened when asked, got 3000 bytes intact and nothing else",
    );
}

#[test]
fn malloced_static_and_stack_memory_registered_is_sent_received_put_and_got() {
    let c = cluster("gm-register", 2, Regs::default());
    check_register(&path_str(&c));
}

/// gm_register's two processes on the cluster at `path`, and what they
/// print.
fn check_register(path: &str) {
    let exe = compile("programs/gm_register.c", "gm_register");
    let (user, owner) = pair(&exe, path, &[]);
    assert_both(&user, &owner);
    assert_line(
        &user,
        "gm_register: got 30000 bytes from malloc'd memory of node id 2 intact, put 20000 into it",
    );
    assert_line(
        &user,
        "gm_register: 10000 bytes sent from static memory and 6000 from the stack arrived intact \
         in malloc'd buffers",
    );
    assert_line(
        &owner,
        "gm_register: malloc'd region of 70000 bytes: 20000 put bytes and the rest intact, and \
         after deregistration",
    );
    // The pages of a stack buffer hold the registering call's frames:
    // they must not change between the copy and the remapping (1 run in
    // 75 crashed when a thread of the process wrote them meanwhile).
    assert_line(
        &owner,
        "gm_register: a stack buffer registered and deregistered 4096 times, intact",
    );
}

#[test]
fn puts_gets_alarms_and_a_failed_connection_behave_alike_on_qemu() {
    // The real firmware image on every NIC; the programs one after the
    // other on one cluster.
    let c = rt::qemu_cluster("gm-semantics", 2);
    let path = c.path().to_string_lossy().into_owned();
    check_put(&path);
    check_get(&path);
    check_resume(&path);
    check_register(&path);
    let exe = compile("programs/gm_alarm.c", "gm_alarm");
    let (zero, one) = pair(&exe, &path, &[]);
    assert_alarms(&zero);
    assert_alarms(&one);
}
