//! Scenario files that are wrong are refused with an error naming the key
//! (and the value), before anything runs.

use std::io::Write;

use cluster_tests::refused;
use nic_emu::scenario;

const BASE: &str = r#"
profile = "lanai4-gm"
seed = 1
[fabric]
nodes = 4
topology = "star"
[[flows]]
name = "f1"
src = [0, 2]
dst = [1, 2]
kind = "stream"
bytes = 65536
messages = 5
"#;

#[test]
fn unknown_keys_are_named_with_their_path() {
    let e = refused(&format!("colour = \"red\"\n{BASE}"));
    assert!(e.starts_with("colour: unknown field `colour`"), "{e}");
    // Keys after a [[flows]] header belong to that flow.
    let e = refused(&format!("{BASE}colour = \"red\"\n"));
    assert!(e.starts_with("flows[0].colour: unknown field `colour`"), "{e}");
    let e = refused(&BASE.replace("messages = 5", "messages = 5\nwindw = 3"));
    assert!(e.starts_with("flows[0].windw: unknown field `windw`"), "{e}");
    assert!(e.contains("line 14"), "the line is named: {e}");
    let e = refused(&BASE.replace("nodes = 4", "nodes = 4\nswitches = 2"));
    assert!(e.starts_with("fabric.switches: unknown field"), "{e}");
    let e = refused(&format!("{BASE}[faults]\nloss = 0.1\n"));
    assert!(e.starts_with("faults.loss: unknown field"), "{e}");
}

#[test]
fn bad_values_are_named_with_key_and_value() {
    let cases = [
        ("dst = [1, 2]", "dst = [9, 2]", "flows[0].dst: node 9 out of range (fabric.nodes = 4)"),
        ("src = [0, 2]", "src = [0, 11]", "flows[0].src: port 11 out of range (ports 0 to 7)"),
        ("messages = 5", "messages = 0", "flows[0].messages: 0 out of range"),
        ("nodes = 4", "nodes = 0", "fabric.nodes: 0 out of range"),
        (
            "bytes = 65536",
            "bytes = 8388608",
            "flows[0].bytes: 8388608 bytes is more than the largest message",
        ),
        ("dst = [1, 2]", "dst = [0, 3]", "flows[0]: src and dst are both on node 0"),
    ];
    for (from, to, want) in cases {
        let e = refused(&BASE.replace(from, to));
        assert!(e.starts_with(want), "{to}: got `{e}`, want `{want}...`");
    }
    let e = refused(&BASE.replace("kind = \"stream\"", "kind = \"broadcast\""));
    assert!(e.starts_with("flows[0].kind: unknown variant `broadcast`"), "{e}");
    let e = refused(&format!("{BASE}[faults]\ndrop = -0.5\n"));
    assert!(e.starts_with("faults.drop: -0.5 is not a probability"), "{e}");
}

#[test]
fn what_only_the_simulator_knows_is_refused_by_key_too() {
    let e = refused(&BASE.replace("lanai4-gm", "lanai99"));
    assert!(e.starts_with("profile:") && e.contains("lanai99"), "{e}");
    let e = refused(&BASE.replace("\"star\"", "\"torus\""));
    assert!(e.starts_with("fabric.topology:") && e.contains("torus"), "{e}");
    let e = refused(&BASE.replace("nodes = 4", "nodes = 40"));
    assert!(e.starts_with("fabric.nodes: 40 nodes do not fit topology star"), "{e}");
    // More DMA-able memory than the profile's host has (a port registers
    // as much as it needs: its page table maps all of its memory).
    let e = refused(&BASE.replace("bytes = 65536", "bytes = 4194304\nwindow = 100"));
    assert!(e.starts_with("node 0: its flows need"), "{e}");
}

#[test]
fn two_flows_on_one_stream_are_refused() {
    let e = refused(&format!(
        "{BASE}[[flows]]\nname = \"f2\"\nsrc = [0, 2]\ndst = [1, 2]\nkind = \"pingpong\"\nbytes = 8\nmessages = 1\n"
    ));
    assert!(e.starts_with("flows[1]: its stream 0:2 -> 1:2 low is also used by flows[0]"), "{e}");
}

#[test]
fn a_file_error_names_the_file() {
    let dir = std::env::temp_dir().join(format!("scenario-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(BASE.replace("dst = [1, 2]", "dst = [7, 2]").as_bytes()).unwrap();
    let e = scenario::load_file(&path).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: flows[0].dst: node 7", path.display())), "{e}");
    let e = scenario::load_file(&dir.join("missing.toml")).unwrap_err().to_string();
    assert!(e.contains("missing.toml"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
