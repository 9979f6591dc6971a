//! The example scenarios under scenarios/, run through the scenario runner
//! on the simulator: every message delivered exactly once, intact and in
//! order; faults are survived and counted; runs are reproducible.

use cluster_tests::{assert_all_intact, run_example, run_text};

#[test]
fn pingpong_2node_delivers_every_round_trip_intact() {
    let r = run_example("pingpong-2node.toml");
    assert_all_intact(&r);
    assert_eq!(r.flows.len(), 2);
    // Half a round trip is at least a few microseconds on any profile.
    assert!(r.flows[0].latency_ns.min > 1_000, "{}", r.summary());
}

#[test]
fn stream_2node_delivers_every_message_intact() {
    let r = run_example("stream-2node.toml");
    assert_all_intact(&r);
    assert!(r.flows[0].bandwidth_mb_s > 0.0);
}

#[test]
fn alltoall_16_both_priorities_mixed_sizes_exactly_once_in_order() {
    let r = run_example("alltoall-16.toml");
    assert_all_intact(&r);
    assert_eq!(r.nodes, 16);
    assert_eq!(r.flows.len(), 16 * 15 * 2);
    assert!(
        r.flows.iter().any(|f| f.priority == "high") && r.flows.iter().any(|f| f.priority == "low")
    );
    assert!(r.flows.iter().all(|f| f.sizes.len() > 1));
    // Without faults nothing is lost, so nothing is resent for a loss.
    let crc: u64 = r.nics.iter().map(|n| n.crc_errors).sum();
    assert_eq!(crc, 0);
}

#[test]
fn alltoall_16_with_faults_still_exactly_once_and_counts_retransmits_and_drops() {
    let r = run_example("alltoall-16-faults.toml");
    assert_all_intact(&r);
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    let sum = |key: &str| -> u64 {
        json["nics"].as_array().unwrap().iter().map(|n| n[key].as_u64().unwrap()).sum()
    };
    assert!(sum("retransmits") > 0, "no retransmits counted under 1% loss");
    assert!(sum("drops") > 0, "no drops counted under faults");
    assert!(sum("crc_errors") > 0, "corrupted packets were not caught by the CRC");
}

#[test]
fn two_switch_fabric_delivers_across_the_trunk() {
    let r = run_example("two-switch-4node.toml");
    assert_all_intact(&r);
    assert_eq!(r.topology, "two-switch");
}

#[test]
fn demo_scenario_is_clean() {
    assert_all_intact(&run_example("demo-4node.toml"));
}

/// A small faulty cluster: every source of randomness and contention.
const FAULTY_8: &str = r#"
profile = "lanai4-gm"
seed = 99
[fabric]
nodes = 8
topology = "two-switch"
[[alltoall]]
name = "a"
port = 2
sizes = [1, 100, 5000, 9000]
messages = 6
window = 3
[[flows]]
name = "pp"
src = [0, 4]
dst = [7, 4]
kind = "pingpong"
bytes = 3000
messages = 10
priority = "high"
[faults]
drop = 0.02
corrupt = 0.005
duplicate = 0.005
"#;

#[test]
fn same_scenario_twice_gives_identical_json_apart_from_wall_ms() {
    let a = run_text(FAULTY_8);
    let b = run_text(FAULTY_8);
    assert_all_intact(&a);
    assert_eq!(a.deterministic_json(), b.deterministic_json());
    // The document really has the fields, in the documented order.
    let text = a.to_json();
    let order = [
        "\"profile\"",
        "\"seed\"",
        "\"sim\"",
        "\"end_ns\"",
        "\"events\"",
        "\"packets\"",
        "\"wall_ms\"",
        "\"flows\"",
        "\"name\"",
        "\"messages\"",
        "\"delivered\"",
        "\"bytes\"",
        "\"corrupted\"",
        "\"duplicates\"",
        "\"first_send_ns\"",
        "\"last_recv_ns\"",
        "\"bandwidth_mb_s\"",
        "\"latency_ns\"",
        "\"min\"",
        "\"p50\"",
        "\"p99\"",
        "\"max\"",
        "\"nics\"",
        "\"node\"",
        "\"packets_sent\"",
        "\"packets_received\"",
        "\"retransmits\"",
        "\"drops\"",
        "\"errors\"",
    ];
    let mut at = 0;
    for key in order {
        let i = text[at..].find(key).unwrap_or_else(|| panic!("{key} missing or out of order"));
        at += i;
    }
}

#[test]
fn another_seed_gives_another_run() {
    let a = run_text(FAULTY_8);
    let b = run_text(&FAULTY_8.replace("seed = 99", "seed = 100"));
    assert_all_intact(&b);
    assert_ne!(a.deterministic_json()["nics"], b.deterministic_json()["nics"]);
}

#[test]
fn a_run_cut_short_by_its_time_limit_says_so() {
    let r = run_text(
        "profile = \"lanai4-gm\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"long\"\nsrc = [0, 2]\n\
         dst = [1, 2]\nkind = \"stream\"\nbytes = 65536\nmessages = 1000\n[run]\nlimit_ms = 2\n",
    );
    assert_eq!(r.sim.stopped, "time-limit");
    assert!(!r.complete && !r.flows[0].complete);
    assert!(r.flows[0].delivered > 0 && r.flows[0].delivered < 1000, "{}", r.summary());
    assert!(r.sim.end_ns <= 2_000_000);
    assert!(!r.all_delivered_intact());
    assert!(r.summary().contains("INCOMPLETE"));
}

/// Heavy incast of small messages (every node to every other, 300 each):
/// receivers must keep taking packets while their send side is busy, or the
/// fabric deadlocks (it did once: acks and nacks filled the control queue
/// and the receive path waited for it).
#[test]
fn heavy_small_message_incast_on_16_nodes_completes() {
    let r = run_text(
        "profile = \"lanai4-gm\"\n[fabric]\nnodes = 16\n[[alltoall]]\nname = \"a2a\"\nport = 2\n\
         bytes = 64\nmessages = 300\nwindow = 4\n[run]\nlimit_ms = 5000\n",
    );
    assert_all_intact(&r);
}

/// Senders that want more messages outstanding than a port has send or
/// receive tokens: 15 flows out of every node with windows of 16 and 32
/// (240 and 480 sends wanted, 32 send tokens), into ports of 32 or 64
/// receive buffers. The host's token count and the firmware's agree, so no
/// send waits in the port's ring ahead of the receive buffers posted
/// behind it. (The modern profile once said 64 send tokens while the
/// firmware gave a port 32: sends past the 32nd waited in the ring, the
/// reposted receive buffers behind them never reached the NIC, and every
/// node stopped receiving within a millisecond.)
#[test]
fn all_to_all_windows_past_the_tokens_complete_on_every_profile() {
    for profile in ["modern", "lanai9-gm"] {
        for (window, reliability) in [(16, "go-back-n"), (32, "go-back-n"), (16, "selective")] {
            let r = run_text(&format!(
                "profile = \"{profile}\"\nseed = 3\n[fabric]\nnodes = 16\n[firmware]\n\
                 reliability = \"{reliability}\"\n[[alltoall]]\nname = \"a2a\"\nport = 2\n\
                 bytes = 16384\nmessages = 40\nwindow = {window}\n[run]\nlimit_ms = 2000\n"
            ));
            eprintln!("{profile} window {window} {reliability}: {}", r.summary());
            assert_all_intact(&r);
            let delivered: u64 = r.flows.iter().map(|f| f.delivered).sum();
            assert_eq!(delivered, 16 * 15 * 40, "{profile} window {window} {reliability}");
        }
    }
}

/// Five ports of every node each in an all-to-all of their own, each port
/// wanting more sends than its 64 tokens: together they hold more than the
/// NIC's shared token table (32 a port), so sends wait in the rings for
/// tokens, while every port's 32 receive buffers stay backed by slots.
/// Every message arrives exactly once. (That a receive buffer is taken
/// past a waiting send is the firmware's
/// `a_receive_buffer_posted_behind_a_waiting_send_is_taken_past_it`.)
#[test]
fn ports_that_together_want_more_tokens_than_the_nic_has_all_complete() {
    let mut text = String::from(
        "profile = \"modern\"\nseed = 5\n[fabric]\nnodes = 6\n[run]\nlimit_ms = 2000\n",
    );
    for port in 1..=5 {
        text += &format!(
            "[[alltoall]]\nname = \"p{port}\"\nport = {port}\nbytes = 16384\nmessages = 30\n\
             window = 16\n"
        );
    }
    let r = run_text(&text);
    eprintln!("{}", r.summary());
    assert_all_intact(&r);
    let delivered: u64 = r.flows.iter().map(|f| f.delivered).sum();
    assert_eq!(delivered, 5 * 6 * 5 * 30);
}
