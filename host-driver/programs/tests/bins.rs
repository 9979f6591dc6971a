//! The `pingpong`, `stream` and `multicast` binaries as separate
//! processes against a live cluster served from this process (the MCP on
//! every NIC): they attach by path, map the same files, check every
//! message, print their numbers, and exit non-zero with a clear message
//! when something is wrong.

#[path = "../../tests/live_rig/mod.rs"]
mod live_rig;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use host_driver::nic_abi::port::{self as pcb, port_reg};

use live_rig::{cluster, path_str, Regs};

fn pingpong(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pingpong"));
    c.args(args);
    c
}

fn stream(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stream"));
    c.args(args);
    c
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn pingpong_processes_on_two_nodes_report_latency() {
    let c = cluster("bin-pingpong", 2, Regs::default());
    let path = path_str(&c);
    let common = ["--cluster", &path, "--size", "64", "--count", "200", "--timeout", "20"];
    let pong = pingpong(&common)
        .args(["--node", "1", "--port", "2", "--peer", "0", "--peer-port", "5", "--role", "pong"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ping = pingpong(&common)
        .args(["--node", "0", "--port", "5", "--peer", "1", "--peer-port", "2", "--role", "ping"])
        .args(["--json"])
        .output()
        .unwrap();
    let pong = pong.wait_with_output().unwrap();
    assert!(ping.status.success(), "{}", text(&ping));
    assert!(pong.status.success(), "{}", text(&pong));
    let v: serde_json::Value = serde_json::from_slice(&ping.stdout).expect("one JSON object");
    assert_eq!(v["role"], "ping");
    assert_eq!(v["one_way"]["samples"], 200);
    let med = v["one_way_us"]["median"].as_f64().unwrap();
    assert!(med > 0.0 && med <= v["one_way_us"]["max"].as_f64().unwrap());
}

#[test]
fn pingpong_text_output_names_the_percentiles() {
    let c = cluster("bin-text", 1, Regs::default());
    let path = path_str(&c);
    let base = ["--cluster", &path, "--node", "0", "--count", "20", "--priority", "high"];
    let pong = pingpong(&base)
        .args(["--port", "1", "--peer", "0", "--peer-port", "0", "--role", "pong"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ping = pingpong(&base)
        .args(["--port", "0", "--peer", "0", "--peer-port", "1", "--role", "ping"])
        .output()
        .unwrap();
    assert!(pong.wait_with_output().unwrap().status.success());
    let out = text(&ping);
    assert!(ping.status.success(), "{out}");
    for word in ["one-way latency (us)", "min", "median", "p99", "max"] {
        assert!(out.contains(word), "{out}");
    }
}

#[test]
fn stream_processes_check_every_size_in_turn() {
    let c = cluster("bin-stream", 2, Regs::default());
    let path = path_str(&c);
    let common = ["--cluster", &path, "--size", "100,4096,65536", "--count", "50", "--json"];
    let recv = stream(&common)
        .args(["--node", "1", "--port", "0", "--peer", "0", "--peer-port", "0", "--role", "recv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let send = stream(&common)
        .args(["--node", "0", "--port", "0", "--peer", "1", "--peer-port", "0", "--role", "send"])
        .args(["--window", "4"])
        .output()
        .unwrap();
    let recv = recv.wait_with_output().unwrap();
    assert!(send.status.success(), "{}", text(&send));
    assert!(recv.status.success(), "{}", text(&recv));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&recv.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (v, size) in lines.iter().zip([100, 4096, 65536]) {
        assert_eq!(v["size"], size);
        assert_eq!(v["role"], "recv");
        assert!(v["mb_per_s"].as_f64().unwrap() > 0.0);
    }
}

/// Wait until node `node`'s firmware serves port `port`, which `holder`
/// (a program just started) opens, and give the holder back; fail with
/// its output if it exits first or the port is not served within 30 s.
fn served(c: &nic_emu::realtime::RtCluster, node: u32, port: usize, mut holder: Child) -> Child {
    let sram = live_rig::sram(c, node);
    let start = Instant::now();
    while sram.load_u32(port_reg(port, pcb::FW_STATE) as u64) != Some(pcb::STATE_OPEN) {
        if let Ok(Some(_)) = holder.try_wait() {
            let out = holder.wait_with_output().unwrap();
            panic!("the program opening node {node} port {port} exited: {}", text(&out));
        }
        let waited = start.elapsed();
        assert!(
            waited < Duration::from_secs(30),
            "node {node} port {port} not served in {waited:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    holder
}

#[test]
fn binaries_fail_clearly() {
    let c = cluster("bin-errors", 2, Regs::default());
    let path = path_str(&c);
    // No such cluster.
    let o = pingpong(&["--cluster", "/nonexistent/cluster", "--node", "0", "--port", "0"])
        .args(["--peer", "1", "--peer-port", "0", "--role", "ping"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no cluster at /nonexistent/cluster"), "{}", text(&o));
    // No peer: gives up after the timeout.
    let o = pingpong(&["--cluster", &path, "--node", "0", "--port", "0", "--peer", "1"])
        .args(["--peer-port", "0", "--role", "ping", "--timeout", "0.2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("did not come up"), "{}", text(&o));
    // A receiver with no sender times out.
    let o = stream(&["--cluster", &path, "--node", "1", "--port", "0", "--peer", "0"])
        .args(["--peer-port", "0", "--role", "recv", "--timeout", "0.2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("timed out"), "{}", text(&o));
    assert!(
        text(&o).contains("nothing has come yet: is the program at node 0 port 0 running"),
        "{}",
        text(&o)
    );
    // Both ends up, with different sizes: the messages fit none of the
    // receiver's buffers, and both say what to check. Once with the pong
    // up first (the ping starts once the firmware serves the pong's
    // port), once with the ping first, so that its first send finds the
    // pong's port closed (which is not hearing from the pong). The pong
    // waits twice as long as the ping, so that it outlives it: a pong
    // that gave up first closed its port, and the ping's next resend
    // (the NIC resends a message refused for want of a buffer) came back
    // refused by a closed port, which reads as a peer that went away.
    // The ping's 3 s also leave a loaded machine time to start the late
    // pong.
    for ping_first in [false, true] {
        let pong = || {
            pingpong(&["--cluster", &path, "--node", "1", "--port", "2", "--peer", "0"])
                .args(["--peer-port", "2", "--role", "pong", "--size", "8", "--timeout", "6"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let early = (!ping_first).then(|| served(&c, 1, 2, pong()));
        let ping = pingpong(&["--cluster", &path, "--node", "0", "--port", "2", "--peer", "1"])
            .args(["--peer-port", "2", "--role", "ping", "--size", "100", "--timeout", "3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let late = ping_first.then(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            pong()
        });
        let o = ping.wait_with_output().unwrap();
        let pong = early.or(late).unwrap().wait_with_output().unwrap();
        let both = format!("ping first {ping_first}:\nping {}\npong {}", text(&o), text(&pong));
        for (o, peer) in [(&o, "node 1 port 2"), (&pong, "node 0 port 2")] {
            assert_eq!(o.status.code(), Some(1), "{both}");
            assert!(text(o).contains(&format!("is the program at {peer} running")), "{both}");
        }
    }
    // A node the cluster does not have.
    let o = stream(&["--cluster", &path, "--node", "7", "--port", "0", "--peer", "0"])
        .args(["--peer-port", "1", "--role", "send"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("node 7 does not exist"), "{}", text(&o));
    // Usage errors are clap's (exit 2).
    let o = stream(&["--role", "sideways"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Multicast sizes and counts the program cannot run are refused up
    // front (a size past the largest message once ran out of host memory,
    // a count of 0 waited for the timeout).
    for (extra, says) in [
        (["--count", "0"], "count must be at least 1"),
        (["--size", "5000000"], "size 5000000: at most 4194304 bytes"),
    ] {
        let o = multicast(&["--cluster", &path, "--node", "0", "--port", "0", "--group", "0,1"])
            .args(["--timeout", "5"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(says), "{}", text(&o));
    }
}

fn multicast(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_multicast"));
    c.args(args);
    c
}

#[test]
fn multicast_processes_deliver_every_message_and_the_root_reports_completion() {
    // Four members, one process each, on a live cluster: every scheme
    // (host and assisted relay from their hosts, nic and nic-cached on
    // their NICs), a binomial tree (rank 2 relays to 3) and a chain.
    let c = cluster("bin-mcast", 4, Regs::default());
    let path = path_str(&c);
    for (id, (scheme, alg)) in [
        ("host", "binomial"),
        ("assisted", "binomial"),
        ("nic", "serial"),
        ("nic-cached", "binomial"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = id.to_string();
        let common = [
            "--cluster",
            &path,
            "--port",
            "3",
            "--group",
            "0,2,1,3",
            "--group-id",
            &id,
            "--scheme",
            scheme,
            "--algorithm",
            alg,
            "--size",
            "5000",
            "--count",
            "20",
            "--timeout",
            "20",
        ];
        let members: Vec<_> = ["1", "2", "3"]
            .iter()
            .map(|n| {
                multicast(&common)
                    .args(["--node", n])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let root = multicast(&common).args(["--node", "0", "--json"]).output().unwrap();
        for m in members {
            let o = m.wait_with_output().unwrap();
            assert!(o.status.success(), "{scheme} member: {}\nroot: {}", text(&o), text(&root));
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("20 messages, all intact, in order")
            );
        }
        assert!(root.status.success(), "{scheme} root: {}", text(&root));
        let v: serde_json::Value = serde_json::from_slice(&root.stdout).expect("one JSON object");
        assert_eq!(v["completion_us"].as_array().map(Vec::len), Some(20), "{scheme}");
    }
}
