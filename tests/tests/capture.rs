//! Packet capture (`cargo xtask sim FILE --pcap out.pcap`): the pcap file
//! holds one record per link a packet enters, and tshark with the
//! project's dissector (tools/wireshark/nic_emu.lua) decodes the capture
//! header and the packet header to the values the run sent.
//!
//! A run with drops, corruption, duplicates, an outage and
//! retransmissions checks every display filter docs/capture.md documents
//! against the simulator's own counts, and capinfos's strict time order.
//!
//! FAILS, naming what is missing, when tshark or capinfos is not installed
//! (`cargo xtask test` and `.ci/run` install them as root: capinfos comes
//! with tshark); never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use nic_emu::scenario::{self, Scenario, SimOptions};

fn dissector() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/wireshark/nic_emu.lua")
}

fn require_tshark() {
    for tool in ["tshark", "capinfos"] {
        let ok = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{tool} is not installed (not found on PATH): the capture test decodes with tshark \
             and checks time order with capinfos (Debian/Ubuntu: apt-get install -y tshark, \
             which brings both; `cargo xtask test` installs it as root)"
        );
    }
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
    let (r, path) = captured(text, "stream.pcapng");
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
    let (_r, path) = captured(text, "mcast.pcapng");
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
    let path = capture_path("live.pcapng");
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
    assert_strict_time_order(&path);
    std::fs::remove_file(&path).unwrap();
}

/// capinfos says the file's records are in strict time order.
fn assert_strict_time_order(path: &Path) {
    let o = Command::new("capinfos").arg("-o").arg(path).output().expect("run capinfos");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "capinfos: {}", String::from_utf8_lossy(&o.stderr));
    let line = out.lines().find(|l| l.starts_with("Strict time order:")).unwrap_or("");
    assert!(line.ends_with("True"), "capinfos -o {}: {out}", path.display());
}

/// How many records tshark's display filter `filter` matches.
fn count(path: &Path, filter: &str) -> u64 {
    let mut c = Command::new("tshark");
    c.arg("-X").arg(format!("lua_script:{}", dissector().display()));
    c.arg("-r").arg(path).args(["-Y", filter, "-T", "fields", "-e", "frame.number"]);
    let o = c.output().expect("run tshark");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("Lua: Error"), "tshark -Y {filter:?}: {err}");
    String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.is_empty()).count() as u64
}

/// The display filters docs/capture.md documents: the first column of
/// the table under "## Display filters".
fn documented_filters() -> Vec<String> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/capture.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let section = text.split("## Display filters").nth(1).expect("a Display filters section");
    let section = section.split("\n#").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(f, _)| f.to_string()))
        .collect()
}

/// One record as this test reads the pcapng file itself: whether it is
/// on a link out of a NIC, and the packet header's bytes (route skipped).
struct Rec {
    link: u32,
    from_nic: bool,
    header: Vec<u8>,
}

fn read_pcapng(path: &Path) -> Vec<Rec> {
    let b = std::fs::read(path).unwrap();
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let (mut o, mut from_nic, mut out) = (0, Vec::new(), Vec::new());
    while o < b.len() {
        let (kind, len) = (u32_at(o), u32_at(o + 4) as usize);
        let body = &b[o + 8..o + len - 4];
        if kind == 1 {
            // The description option (code 3) names the link's ends.
            let mut p = 8;
            let mut nic = false;
            while p + 4 <= body.len() {
                let code = u16::from_le_bytes([body[p], body[p + 1]]);
                let l = u16::from_le_bytes([body[p + 2], body[p + 3]]) as usize;
                if code == 3 {
                    nic = body[p + 4..p + 4 + l].starts_with(b"node");
                }
                p += 4 + l.next_multiple_of(4);
            }
            from_nic.push(nic);
        } else if kind == 6 {
            let link = u32::from_le_bytes(body[0..4].try_into().unwrap());
            let incl = u32::from_le_bytes(body[12..16].try_into().unwrap()) as usize;
            let wire = &body[20..20 + incl];
            let r = wire.iter().take_while(|&&x| x >= 0x80).count();
            out.push(Rec { link, from_nic: from_nic[link as usize], header: wire[r..].to_vec() });
        }
        o += len;
    }
    out
}

/// Data-bearing packets each NIC put on the wire again (the sim's own log
/// of what its engines sent): per stream, a sequence number not above
/// the highest already sent.
fn retransmitted_on_the_wire(t: &scenario::trace::ClusterTrace) -> u64 {
    use std::collections::HashMap;
    let mut n = 0;
    for node in &t.nodes {
        let mut highest: HashMap<(u16, u8, u16, u8, u8), u32> = HashMap::new();
        for p in node.nic.sent.iter().filter(|p| [1, 4, 5, 6, 7].contains(&p.ptype)) {
            let k = (p.src_node, p.src_port, p.dst_node, p.dst_port, p.priority);
            match highest.get_mut(&k) {
                Some(h) if p.seq <= *h => n += 1,
                Some(h) => *h = p.seq,
                None => {
                    highest.insert(k, p.seq);
                }
            }
        }
    }
    n
}

#[test]
fn every_documented_filter_matches_what_it_says_and_the_file_is_in_time_order() {
    require_tshark();
    let text = "profile = \"lanai9-gm\"\nseed = 5\n[fabric]\nnodes = 4\n\
                [faults]\ndrop = 0.03\ncorrupt = 0.02\nduplicate = 0.02\n\
                [[faults.link_down]]\nlink = \"node3\"\nat_us = 1000\nfor_us = 300\n\
                [[flows]]\nname = \"a\"\nkind = \"stream\"\nsrc = [0, 2]\ndst = [1, 3]\n\
                bytes = 9000\nmessages = 20\n\
                [[flows]]\nname = \"b\"\nkind = \"stream\"\nsrc = [2, 2]\ndst = [3, 3]\n\
                bytes = 3000\nmessages = 30\n\
                [[flows]]\nname = \"m\"\nkind = \"multicast\"\nsrc = [1, 1]\ngroup_size = 4\n\
                scheme = \"nic-cached\"\nalgorithm = \"binomial\"\nbytes = 64\nmessages = 5\n";
    let path = capture_path("faults.pcapng");
    let v = Scenario::parse_validated(text).unwrap();
    let opts = SimOptions { pcap: Some(path.clone()) };
    let (r, trace) = scenario::run_traced(&v, &opts, &mut |_| {}).unwrap();
    assert!(r.all_delivered_intact(), "{}", r.summary());
    assert_strict_time_order(&path);

    let recs = read_pcapng(&path);
    assert_eq!(recs.len() as u64, r.captured.unwrap());
    assert_eq!(r.captured.unwrap(), r.sim.hops);
    let s = &r.sim;
    let nic = |f: fn(&scenario::NicReport) -> u64| r.nics.iter().map(f).sum::<u64>();
    let outage: u64 = r.link_down.iter().map(|d| d.dropped).sum();
    let resent = retransmitted_on_the_wire(&trace);
    // The run exercises every kind of record the filters single out.
    assert!(s.link_drops > outage && outage > 0, "drops {} outage {outage}", s.link_drops);
    assert!(s.link_corrupts > 0 && s.link_dups > 0, "{s:?}");
    assert!(resent > 0 && nic(|n| n.nacks_sent) > 0 && nic(|n| n.polls_sent) > 0);
    // The firmware counts a packet when it schedules it again: never fewer
    // than went on the wire.
    assert!(nic(|n| n.retransmits) >= resent, "{} < {resent}", nic(|n| n.retransmits));

    let own = |keep: &dyn Fn(&Rec) -> bool| recs.iter().filter(|r| keep(r)).count() as u64;
    let filters = documented_filters();
    assert!(filters.len() >= 10, "the filter table of docs/capture.md: {filters:?}");
    let mut seen = Vec::new();
    for f in &filters {
        let want = match f.as_str() {
            "nicemu_capture.from_kind == 0" => s.packets,
            "nicemu_capture.link == 0" => own(&|r| r.link == 0),
            "nicemu_capture.dropped == 1" | "nicemu_capture.expert.dropped" => s.link_drops,
            "nicemu_capture.link_down == 1" => outage,
            "nicemu_capture.corrupted == 1"
            | "frame.packet_flags_crc_error == 1"
            | "nicemu_capture.expert.corrupted"
            | "_ws.expert.severity == error" => s.link_corrupts,
            "nicemu_capture.duplicated == 1" | "nicemu_capture.expert.duplicated" => s.link_dups,
            "nicemu.expert.retransmission && nicemu_capture.from_kind == 0"
            | "nicemu.retransmission == 1 && nicemu_capture.from_kind == 0" => resent,
            "nicemu.type == 2 && nicemu_capture.from_kind == 0" => nic(|n| n.acks_sent),
            "nicemu.type == 3 && nicemu_capture.from_kind == 0" => nic(|n| n.nacks_sent),
            "nicemu.type == 8 && nicemu_capture.from_kind == 0" => nic(|n| n.polls_sent),
            "nicemu.src_node == 2 && nicemu.flags.sync == 1" => {
                own(&|r| r.header[4..6] == [2, 0] && r.header[1] & 0x08 != 0)
            }
            "nicemu.mcast.group == 0 && nicemu_capture.from_kind == 0" => own(&|r| {
                let h = &r.header;
                r.from_nic && (h[0] == 1 || h[0] == 7) && h[1] & 0x10 != 0 && h[32..34] == [0, 0]
            }),
            other => panic!("docs/capture.md documents the filter `{other}`: give it a count here"),
        };
        let got = count(&path, f);
        seen.push(format!("{f}: {got}"));
        assert_eq!(got, want, "`{f}` matched {got} records, the run says {want}");
        assert!(got < recs.len() as u64, "`{f}` matches every record");
    }
    eprintln!(
        "{} records; firmware retransmits {}, on the wire {resent}; {}",
        recs.len(),
        nic(|n| n.retransmits),
        seen.join("; ")
    );
    std::fs::remove_file(&path).unwrap();
}
