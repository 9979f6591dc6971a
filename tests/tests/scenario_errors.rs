//! Scenario files that are wrong are refused with an error naming the key
//! (and the value), before anything runs.

use std::io::Write;

use cluster_tests::refused;
use nic_emu::scenario::{self, Scenario};

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
    let e = refused(&BASE.replace("kind = \"stream\"", "kind = \"scatter\""));
    assert!(e.starts_with("flows[0].kind: unknown variant `scatter`"), "{e}");
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
    // The value's line, with a caret under it.
    assert!(
        e.contains("\nat line 10, column 7\n   |\n10 | dst = [7, 2]\n   |       ^^^^^^"),
        "{e}"
    );
    let e = scenario::load_file(&dir.join("missing.toml")).unwrap_err().to_string();
    assert!(e.contains("missing.toml"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory of this test process, made anew.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scenario-errors-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `f` on a thread of its own, failing the test if it has not returned
/// after `secs` (a FIFO opened the ordinary way waits for a writer).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: still waiting after {secs} s"))
}

#[test]
fn a_profile_or_scenario_path_that_is_no_regular_file_is_refused_at_once() {
    let dir = scratch("fifo");
    let fifo = dir.join("profile.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(
        made.as_ref().is_ok_and(|s| s.success()),
        "this test needs mkfifo(1) to make {}: {made:?}",
        fifo.display()
    );
    let sock = dir.join("profile.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for (path, what) in [
        (fifo.clone(), "a FIFO"),
        (dir.clone(), "a directory"),
        ("/dev/zero".into(), "a device"),
        (sock.clone(), "a socket"),
    ] {
        let t = std::time::Instant::now();
        let text = BASE.replace("\"lanai4-gm\"", &format!("\"{}\"", path.display()));
        let e = within(10, &format!("profile {}", path.display()), move || refused(&text));
        assert!(
            e.starts_with(&format!("profile: timing profile {}: cannot be read", path.display()))
                && e.ends_with(&format!("not a regular file ({what})")),
            "{e}"
        );
        // The scenario file itself.
        let p = path.clone();
        let e = within(10, &format!("scenario {}", path.display()), move || {
            scenario::load_file(&p).unwrap_err().to_string()
        });
        assert_eq!(e, format!("{}: not a regular file ({what})", path.display()));
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_value_the_firmware_would_halt_on_is_refused_naming_the_key_and_its_range() {
    let dir = scratch("mtu");
    let base = nic_emu::profile::Profile::load("lanai4-gm").unwrap();
    let text =
        std::fs::read_to_string(cluster_tests::root().join("nic-emu/profiles/lanai4-gm.toml"))
            .unwrap();
    assert_eq!(base.nic.mtu, 4096);
    for (from, to, want) in [
        (
            "mtu = 4096 ",
            "mtu = 1 ",
            "nic.mtu: 1 out of range (64..=4096: the firmware does not start with MTU outside it)",
        ),
        ("recv_tokens = 32 ", "recv_tokens = 33 ", "firmware.recv_tokens: 33 out of range (1..=32"),
        ("send_tokens = 32 ", "send_tokens = 0 ", "firmware.send_tokens: 0 out of range (1..=64"),
    ] {
        assert!(text.contains(from), "{from}");
        let path = dir.join("p.toml");
        std::fs::write(&path, text.replace(from, to)).unwrap();
        let e = refused(&BASE.replace("\"lanai4-gm\"", &format!("\"{}\"", path.display())));
        assert!(
            e.starts_with(&format!("profile: profile {}: {want}", path.display())),
            "{to}: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn numbers_in_errors_print_in_a_short_form() {
    let e = refused(&BASE.replace("messages = 5", "messages = 5\nstart_us = 1e308"));
    assert_eq!(e, "flows[0].start_us: 1e308 out of range (0..=3600000000, an hour in us)");
    assert!(e.len() < 100, "{e}");
    let e = refused(&BASE.replace("messages = 5", "messages = 5\nidt_t = 1e300"));
    assert!(e.starts_with("flows[0].idt_t: 1e300 must be"), "{e}");
}

#[test]
fn send_timeouts_rates_and_limits_outside_their_range_are_refused_with_key_value_and_range() {
    for (extra, want) in [
        (
            "[firmware]\nsend_timeout_us = 1e-9\n",
            "firmware.send_timeout_us: 1e-9 out of range (10..=3600000000 us: 10 us to an hour)",
        ),
        (
            "[firmware]\nsend_timeout_us = 1e12\n",
            "firmware.send_timeout_us: 1000000000000 out of range (10..=3600000000 us",
        ),
        ("[run]\nlimit_ms = 1e-300\n", "run.limit_ms: 1e-300 out of range (0.001..=3600000"),
    ] {
        let e = refused(&format!("{BASE}{extra}"));
        assert!(e.starts_with(want), "{extra}: got `{e}`, want `{want}...`");
    }
    for (rate, want) in [
        ("1e-300", "flows[0].rate_mb_s: 1e-300 out of range (0.001..=1000000 MB/s)"),
        ("0.0001", "flows[0].rate_mb_s: 0.0001 out of range (0.001..=1000000 MB/s)"),
        ("1e7", "flows[0].rate_mb_s: 10000000 out of range (0.001..=1000000 MB/s)"),
    ] {
        let e =
            refused(&BASE.replace("messages = 5", &format!("messages = 5\nrate_mb_s = {rate}")));
        assert_eq!(e, want);
    }
    // The ends of the ranges are taken.
    let v = Scenario::parse_validated(&format!(
        "{}[firmware]\nsend_timeout_us = 10\n[run]\nlimit_ms = 0.001\n",
        BASE.replace("messages = 5", "messages = 5\nrate_mb_s = 0.001")
    ))
    .unwrap();
    assert_eq!((v.send_timeout_us, v.limit_ns), (Some(10.0), 1000));
}

#[test]
fn a_scenario_of_more_flows_than_the_limit_is_refused_with_the_count_and_how_to_lower_it() {
    let text = |nodes: u64, offsets: &str| {
        format!(
            "profile = \"modern\"\n[fabric]\nnodes = {nodes}\nswitch_ports = {nodes}\n\
             [[alltoall]]\nname = \"a\"\nport = 1\n{offsets}bytes = 8\nmessages = 1\n"
        )
    };
    let t = std::time::Instant::now();
    let e = refused(&text(1024, ""));
    assert_eq!(
        e,
        "flows: 1047552 flows (alltoall[0]: 1047552) is more than a scenario may have (262144); \
         give [[alltoall]] `offsets` (each node sends to a few others, a shift pattern) or \
         fewer `nodes`"
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
    // The way out the message names: a shift of the same nodes is taken.
    let v = Scenario::parse_validated(&text(1024, "offsets = [1, 512]\n")).unwrap();
    assert_eq!(v.flows.len(), 2048);
}

#[test]
fn a_scenario_that_would_take_more_memory_than_the_machine_has_is_refused_with_the_estimate() {
    use nic_emu::scenario::plan::{self, Limits};
    // 128 nodes, every one streaming 4 MiB messages 4 at a time to every
    // other: 16,256 flows of 16 MiB of send buffers each (2 GiB a host,
    // within `modern`'s 4 GiB), some 275 GB in all.
    let text = "profile = \"modern\"\n[fabric]\nnodes = 128\nswitch_ports = 128\n\
                [[alltoall]]\nname = \"a\"\nport = 1\nbytes = 4194304\nwindow = 4\nmessages = 2\n";
    let v = Scenario::parse_validated(text).unwrap();
    let lim = Limits { send_tokens: 64, recv_tokens: 32, host_memory: 4 << 30 };
    let fp = plan::plan(&v, Limits { host_memory: u64::MAX, ..lim });
    let avail = plan::mem_available().expect("this test needs MemAvailable in /proc/meminfo");
    let e = match fp {
        Err(e) => e.to_string(),
        Ok(_) => panic!(
            "this machine has {} available, more than the scenario's estimate: the test needs \
             a larger scenario here",
            plan::human_bytes(avail)
        ),
    };
    println!("{e}");
    let t = std::time::Instant::now();
    let got = refused(text);
    // (What is available moves between the two looks.)
    let cut = |m: &str| m.split("available (").next().unwrap_or_default().to_string();
    assert_eq!(cut(&got), cut(&e));
    assert!(
        got.starts_with("flows: a run would take about ")
            && got.contains("(16256 flows x 8 KiB, 128 nodes x 2.5 MiB, ")
            && got.contains("more than this machine has available (")
            && got.contains("MemAvailable in /proc/meminfo); lower it with fewer flows"),
        "{got}"
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn names_with_a_newline_or_nul_are_refused() {
    for (from, to, want) in [
        (
            "name = \"f1\"",
            "name = \"f\\n1\"",
            "flows[0].name: \"f\\n1\" holds a control character ('\\n'); names are one line",
        ),
        (
            "name = \"f1\"",
            "name = \"f\\u00001\"",
            "flows[0].name: \"f\\01\" holds a control character ('\\0')",
        ),
        ("\"star\"", "\"star\\n\"", "fabric.topology: \"star\\n\" holds a control character"),
        ("\"lanai4-gm\"", "\"lanai4-gm\\u0000\"", "profile: \"lanai4-gm\\0\" holds a control"),
    ] {
        let e = refused(&BASE.replace(from, to));
        assert!(e.starts_with(want), "{to}: got `{e}`, want `{want}...`");
    }
    let e = refused(
        "profile = \"lanai4-gm\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"all\\nto\"\n\
         port = 2\nbytes = 8\nmessages = 5\n",
    );
    assert!(e.starts_with("alltoall[0].name: \"all\\nto\" holds a control character"), "{e}");
    let e = refused(&format!(
        "{BASE}[[flows]]\nname = \"m\\u0000\"\nsrc = [0, 3]\nkind = \"multicast\"\n\
         group = [1, 2]\nscheme = \"nic\"\nbytes = 8\nmessages = 1\n"
    ));
    assert!(e.starts_with("flows[1].name: \"m\\0\" holds a control character"), "{e}");
}

#[test]
fn zero_byte_multicasts_and_one_destination_groups_deliver_and_a_root_alone_is_refused() {
    let mc = |group: &str, scheme: &str, bytes: u64| {
        format!(
            "profile = \"lanai9-gm\"\n[fabric]\nnodes = 4\n[[flows]]\nname = \"m\"\n\
             src = [0, 2]\nkind = \"multicast\"\n{group}\nscheme = \"{scheme}\"\n\
             algorithm = \"binomial\"\nbytes = {bytes}\nmessages = 5\n"
        )
    };
    for scheme in ["host", "nic", "assisted", "nic-cached"] {
        for group in ["group = [1]", "group = [1, 2, 3]"] {
            let r = cluster_tests::run_text(&mc(group, scheme, 0));
            cluster_tests::assert_all_intact(&r);
            assert_eq!((r.flows[0].delivered, r.flows[0].messages), (5, 5), "{scheme} {group}");
        }
    }
    // A group is the root and at least one other node.
    for (group, want) in [
        ("group = []", "flows[0].group: must list at least one node"),
        ("group_size = 1", "flows[0].group_size: 1 out of range (2..=4"),
        ("group = [0]", "flows[0].group[0]: node 0 is the root (src)"),
    ] {
        let e = refused(&mc(group, "nic", 0));
        assert!(e.starts_with(want), "{group}: got `{e}`, want `{want}...`");
    }
}
