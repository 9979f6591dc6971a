//! Packet capture (`cargo xtask sim FILE --pcap out.pcap`): the pcap file
//! holds one record per link a packet enters, and tshark with the
//! project's dissector (tools/wireshark/nic_emu.lua) decodes the capture
//! header and the packet header to the values the run sent.
//!
//! FAILS, naming what is missing, when tshark is not installed (`cargo
//! xtask test` and `.ci/run` install it as root); never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use nic_emu::scenario::{self, Scenario, SimOptions};

fn dissector() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/wireshark/nic_emu.lua")
}

fn require_tshark() {
    let ok = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "tshark is not installed (not found on PATH): the capture test decodes with it \
         (Debian/Ubuntu: apt-get install tshark; `cargo xtask test` installs it as root)"
    );
}

/// A capture file under cargo's temporary directory for integration tests
/// (inside the target directory), one directory per test process.
fn capture_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nic-capture-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Run `text` on the sim capturing into a fresh file; (report, path).
fn captured(text: &str, name: &str) -> (scenario::Report, PathBuf) {
    let path = capture_path(name);
    let v = Scenario::parse_validated(text).unwrap();
    let opts = SimOptions { pcap: Some(path.clone()) };
    let r = scenario::run_with_options(&v, &opts, &mut |_| {}).unwrap();
    assert!(r.all_delivered_intact(), "{}", r.summary());
    (r, path)
}

/// tshark's fields, one Vec per frame.
fn fields(path: &Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut c = Command::new("tshark");
    c.arg("-X").arg(format!("lua_script:{}", dissector().display()));
    c.arg("-r").arg(path).args(["-T", "fields", "-E", "separator=|"]);
    for n in names {
        c.args(["-e", n]);
    }
    let o = c.output().expect("run tshark");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("Lua: Error"), "tshark: {err}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

#[test]
fn tshark_decodes_a_captured_stream_with_the_dissector() {
    require_tshark();
    let text = "profile = \"lanai9-gm\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"s\"\n\
                kind = \"stream\"\nsrc = [0, 2]\ndst = [1, 3]\nbytes = 5000\nmessages = 3\n";
    let (r, path) = captured(text, "stream.pcap");
    let rows = fields(
        &path,
        &[
            "nicemu_capture.link",
            "nicemu_capture.from_kind",
            "nicemu_capture.from_id",
            "nicemu_capture.to_kind",
            "nicemu.type",
            "nicemu.src_node",
            "nicemu.src_port",
            "nicemu.dst_node",
            "nicemu.dst_port",
            "nicemu.seq",
            "nicemu.msg_len",
            "nicemu.offset",
            "nicemu.payload_len",
            "nicemu.flags.first",
            "nicemu.flags.sync",
            "nicemu.route",
        ],
    );
    // One record per link a packet entered: two per packet on one switch.
    assert_eq!(rows.len() as u64, r.captured.unwrap());
    assert_eq!(r.captured.unwrap(), r.sim.hops);
    // The first: node 0's first packet, on its own link into the switch,
    // with the one route byte still ahead of it.
    let first = &rows[0];
    assert_eq!(&first[1..4], ["0", "0", "1"], "NIC 0 -> the switch: {first:?}");
    assert_eq!(&first[4..12], ["1", "0", "2", "1", "3", "0", "5000", "0"], "{first:?}");
    assert_eq!(first[12], "4096", "an MTU of payload: {first:?}");
    assert_eq!(&first[13..15], ["1", "1"], "FIRST and SYNC (a new stream): {first:?}");
    assert_eq!(first[15], "81", "one route byte, to port 1: {first:?}");
    // Node 0's data packets as they leave the switch: 5000 B messages in
    // two packets each, numbered 0..6 in order, offsets 0 and 4096.
    let data: Vec<&Vec<String>> =
        rows.iter().filter(|f| f[3] == "0" && f[4] == "1" && f[5] == "0").collect();
    assert!(data.iter().all(|f| f[2] == "0" && f[1] == "1"), "from the switch");
    let seqs: Vec<&str> = data.iter().map(|f| f[9].as_str()).collect();
    assert_eq!(seqs, ["0", "1", "2", "3", "4", "5"]);
    let offsets: Vec<&str> = data.iter().map(|f| f[11].as_str()).collect();
    assert_eq!(offsets, ["0", "4096", "0", "4096", "0", "4096"]);
    assert!(data.iter().all(|f| f[15].is_empty()), "no route bytes left at the NIC");
    // Acks come back from node 1.
    assert!(rows.iter().any(|f| f[4] == "2" && f[5] == "1"), "an Ack from node 1");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn tshark_shows_the_multicast_block_of_a_multicast_packet() {
    require_tshark();
    let text = "profile = \"modern\"\n[fabric]\nnodes = 5\n[[flows]]\nname = \"m\"\n\
                kind = \"multicast\"\nsrc = [0, 2]\ngroup_size = 5\nscheme = \"nic-cached\"\n\
                algorithm = \"binomial\"\nbytes = 64\nmessages = 2\n";
    let (_r, path) = captured(text, "mcast.pcap");
    let rows = fields(
        &path,
        &[
            "nicemu.type",
            "nicemu.flags.mcast",
            "nicemu.mcast.group",
            "nicemu.mcast.mseq",
            "nicemu.mcast.scheme",
            "nicemu.mcast.algorithm",
            "nicemu.mcast.subtree",
        ],
    );
    let m: Vec<&Vec<String>> = rows.iter().filter(|f| f[0] == "1" && f[1] == "1").collect();
    assert!(!m.is_empty(), "no multicast data packet in {} frames", rows.len());
    for f in &m {
        // Group 0 (the file's first multicast flow), nic-cached (3), binomial (2).
        assert_eq!((f[2].as_str(), f[4].as_str(), f[5].as_str()), ("0", "3", "2"), "{f:?}");
        assert!(f[3] == "0" || f[3] == "1", "{f:?}");
    }
    // Both multicasts appear; a relay heads more than itself.
    assert!(m.iter().any(|f| f[3] == "1"));
    assert!(m.iter().any(|f| f[6] != "1"), "a relay's subtree is more than itself");
    // Reports go back up the tree.
    assert!(rows.iter().any(|f| f[0] == "7"), "a Report");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_live_cluster_captures_its_packets_too() {
    require_tshark();
    let text = "profile = \"lanai9-gm\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"s\"\n\
                kind = \"stream\"\nsrc = [0, 2]\ndst = [1, 3]\nbytes = 5000\nmessages = 3\n";
    let path = capture_path("live.pcap");
    let v = Scenario::parse_validated(text).unwrap();
    let mut o = scenario::RtScenarioOptions::new(host_driver::cluster::ClusterBackend::Live);
    o.pcap = Some(path.clone());
    let r = scenario::run_realtime(&v, &o).unwrap();
    assert!(r.all_delivered_intact(), "{}", r.summary());
    let rows =
        fields(&path, &["nicemu_capture.to_kind", "nicemu.type", "nicemu.src_node", "nicemu.seq"]);
    assert_eq!(rows.len() as u64, r.captured.unwrap());
    let seqs: Vec<&str> = rows
        .iter()
        .filter(|f| f[0] == "0" && f[1] == "1" && f[2] == "0")
        .map(|f| f[3].as_str())
        .collect();
    assert_eq!(seqs, ["0", "1", "2", "3", "4", "5"], "node 0's packets as node 1 got them");
    std::fs::remove_file(&path).unwrap();
}
