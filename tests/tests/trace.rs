//! Decoded state-machine traces (`cargo xtask sim FILE --trace out.json`,
//! docs/trace.md): scenarios/pingpong-2node.toml on the sim with the trace
//! on gives a valid Chrome trace-event document in which one message is
//! followed from the sender's SDMA and SEND to the receiver's RECV and
//! RDMA by one flow arrow; and tracing does not change the run. Under
//! faults, the fabric's link tracks carry every packet and every drop,
//! and the counter tracks (queues, send windows, tokens) are there.

use std::path::Path;

use nic_emu::scenario::{self, trace, SimOptions};
use serde_json::Value;

fn pingpong() -> scenario::Validated {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/pingpong-2node.toml");
    scenario::load_file(&path).unwrap()
}

/// The report's JSON without its wall-clock time.
fn results(r: &scenario::Report) -> Value {
    let mut v: Value = serde_json::from_str(&r.to_json()).unwrap();
    v["sim"].as_object_mut().unwrap().remove("wall_ms").expect("the report has sim.wall_ms");
    v
}

fn f(e: &Value, k: &str) -> f64 {
    e[k].as_f64().unwrap_or_else(|| panic!("{k} is not a number in {e}"))
}

#[test]
fn pingpong_trace_follows_a_message_across_both_nics() {
    let v = pingpong();
    let (report, t) = scenario::run_traced(&v, &SimOptions::default(), &mut |_| {}).unwrap();
    assert!(report.all_delivered_intact(), "{}", report.summary());
    assert_eq!(t.lost_transitions(), 0, "the sim reads the rings after every pass");
    let doc: Value = serde_json::from_str(&trace::chrome_json(&t)).unwrap();

    // A valid trace-event document.
    let ev = doc["traceEvents"].as_array().expect("a traceEvents array");
    assert!(ev.len() > 1000, "{} events", ev.len());
    for e in ev {
        for k in ["ph", "ts", "pid", "tid"] {
            assert!(e.get(k).is_some(), "an event without {k}: {e}");
        }
        assert!(e["ts"].is_number() && e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        let ph = e["ph"].as_str().unwrap();
        assert!(["X", "i", "M", "s", "t", "f", "C"].contains(&ph), "{e}");
        if ph == "X" {
            assert!(f(e, "dur") >= 0.0, "{e}");
        }
    }
    let named = |pid: u64, what: &str| -> Vec<&str> {
        ev.iter()
            .filter(|e| e["ph"] == "M" && e["pid"] == pid && e["name"] == what)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect()
    };
    assert_eq!(named(0, "process_name"), ["NIC 0"]);
    assert_eq!(named(1, "process_name"), ["NIC 1"]);
    assert_eq!(named(0, "thread_name")[..5], ["SDMA", "SEND", "RECV", "RDMA", "host program"]);

    // Every data packet of the run (200 + 10 x 64 each way) is one arrow.
    let flow_ids: std::collections::BTreeSet<u64> =
        ev.iter().filter(|e| e["ph"] == "s").map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(flow_ids.len(), 2 * (200 + 10 * 64));
    assert_eq!(doc["otherData"]["packets_followed"], 1680);

    // One message: node 0's first 4-byte ping (port 2 -> 1:2). Its arrow
    // is the one whose receiver copies 4 bytes with seq 0.
    let steps = |id: u64| -> Vec<(usize, &Value)> {
        ev.iter().enumerate().filter(|(_, e)| e["cat"] == "packet" && e["id"] == id).collect()
    };
    // The slice a flow event is bound to: the one written right before it
    // (the exporter's rule), which must also contain its time.
    let slice_of = |i: usize, e: &Value| -> Value {
        let mut j = i;
        while ev[j - 1]["cat"] == "packet" {
            j -= 1;
        }
        let s = &ev[j - 1];
        assert_eq!(s["ph"], "X", "flow event {e} follows no slice");
        assert_eq!((&s["pid"], &s["tid"]), (&e["pid"], &e["tid"]), "{e} is not on {s}'s track");
        let (ts, at) = (f(s, "ts"), f(e, "ts"));
        assert!(ts <= at && at <= ts + f(s, "dur"), "{e} outside {s}");
        s.clone()
    };
    let chosen = flow_ids
        .iter()
        .copied()
        .find(|&id| {
            let st = steps(id);
            st[0].1["name"] == "seq 0 0->1" && {
                let (i, last) = st[st.len() - 1];
                slice_of(i, last)["args"]["bytes_left"] == 4
            }
        })
        .expect("an arrow for node 0's first 4-byte ping");
    let st = steps(chosen);
    let got: Vec<(&str, u64, u64)> = st
        .iter()
        .map(|(_, e)| {
            (e["ph"].as_str().unwrap(), e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())
        })
        .collect();
    // s on node 0's SDMA (tid 1), t on its SEND (2), t on node 1's RECV
    // (3), f on its RDMA (4), bound to the enclosing slice.
    assert_eq!(got, [("s", 0, 1), ("t", 0, 2), ("t", 1, 3), ("f", 1, 4)]);
    assert_eq!(st[3].1["bp"], "e");
    let slices: Vec<Value> = st.iter().map(|&(i, e)| slice_of(i, e)).collect();
    let names: Vec<&str> = slices.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["FillWait", "Data", "Accept", "Copying"]);
    assert_eq!(slices[1]["args"]["seq"], 0);
    assert_eq!(slices[2]["args"]["seq"], 0);
    assert_eq!(slices[1]["args"]["cause"], "DataOut");
    assert_eq!(slices[2]["args"]["cause"], "Accepted");
    // In time order: the fill, the send, then (a wire later) the accept
    // and the copy.
    let ts: Vec<f64> = slices.iter().map(|s| f(s, "ts")).collect();
    assert!(ts[0] <= ts[1] && ts[1] < ts[2] && ts[2] <= ts[3], "{ts:?}");
    assert!(ts[2] - ts[1] >= 1.0, "the wire and the switch take over a microsecond: {ts:?}");

    // The host programs: node 0 sent message 0 before its fill, node 1
    // took the reception after the copy started.
    let host = |pid: u64, name: &str, detail: &str| -> Vec<f64> {
        ev.iter()
            .filter(|e| e["pid"] == pid && e["tid"] == 5 && e["name"] == name)
            .filter(|e| e["args"]["detail"] == detail)
            .map(|e| f(e, "ts"))
            .collect()
    };
    let sends = host(0, "send", "message 0, 4 B to 1:2");
    assert_eq!(sends.len(), 1);
    assert!(sends[0] <= ts[0], "send call at {} us, fill at {} us", sends[0], ts[0]);
    let recvs = host(1, "event", "received 4 B from 0:2");
    assert_eq!(recvs.len(), 200);
    assert!(recvs[0] >= ts[3], "reception at {} us, copy at {} us", recvs[0], ts[3]);
}

#[test]
fn tracing_does_not_change_the_run() {
    let v = pingpong();
    let plain = scenario::run(&v).unwrap();
    let (traced, t) = scenario::run_traced(&v, &SimOptions::default(), &mut |_| {}).unwrap();
    assert!(t.nodes.iter().all(|n| !n.nic.transitions.is_empty()));
    assert_eq!(results(&plain), results(&traced));
}

/// Faults on a traced run: the `fabric` process has a track per link
/// whose slices are the run's link traversals (one per hop, named after
/// the packet) and whose drop instants are the links' drops; every NIC
/// has its send-window, queue and token counters, and a window goes back
/// to 0 once everything is acked.
#[test]
fn the_fabric_tracks_show_every_packet_and_drop_and_the_counters_add_up() {
    let text = r#"
profile = "lanai9-gm"
seed = 5
[fabric]
nodes = 4
[faults]
drop = 0.03
corrupt = 0.02
duplicate = 0.02
[[faults.link_down]]
link = "node1"
at_us = 1000
for_us = 300
[[flows]]
name = "a"
kind = "stream"
src = [0, 2]
dst = [1, 3]
bytes = 9000
messages = 20
[[flows]]
name = "b"
kind = "stream"
src = [2, 2]
dst = [1, 4]
bytes = 3000
messages = 30
"#;
    let v = scenario::Scenario::parse_validated(text).unwrap();
    let plain = scenario::run(&v).unwrap();
    let (r, t) = scenario::run_traced(&v, &SimOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(results(&plain), results(&r), "the link log changes nothing");
    assert!(r.all_delivered_intact(), "{}", r.summary());
    let doc: Value = serde_json::from_str(&trace::chrome_json(&t)).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let fab = trace::FABRIC_PID;
    let on_fabric = |ph: &'static str| ev.iter().filter(move |e| e["pid"] == fab && e["ph"] == ph);
    // 4 nodes on one switch: 8 directed links, a track each, named.
    let tracks: Vec<&str> = on_fabric("M")
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tracks.len(), 8, "{tracks:?}");
    assert_eq!(doc["otherData"]["links"], 8);
    assert!(tracks.contains(&"link0 node0 -> sw0.p0"), "{tracks:?}");
    // A slice per hop; drops where the links dropped.
    let slices: Vec<&Value> = on_fabric("X").collect();
    assert_eq!(slices.len() as u64, r.sim.hops);
    assert!(slices.iter().all(|e| f(e, "dur") > 0.0), "a packet takes time to enter a link");
    let drops: Vec<&Value> = on_fabric("i").filter(|e| e["name"] == "drop").collect();
    let outage: u64 = r.link_down.iter().map(|d| d.dropped).sum();
    let by = |cause: &str| drops.iter().filter(|e| e["args"]["cause"] == cause).count() as u64;
    assert!(r.sim.link_drops > 0 && outage > 0);
    assert_eq!(by("fault") + by("link down"), r.sim.link_drops);
    assert_eq!(by("link down"), outage);
    let marked =
        |m: &str| slices.iter().filter(|e| e["name"].as_str().unwrap().contains(m)).count() as u64;
    assert_eq!(marked("dropped"), r.sim.link_drops);
    assert_eq!(marked("corrupted"), r.sim.link_corrupts);
    assert_eq!(marked("duplicated"), r.sim.link_dups);
    assert!(slices.iter().any(|e| e["name"].as_str().unwrap().starts_with("Data 0:2->1:3 seq ")));
    // Counters on every NIC.
    let counters = |pid: u64, name: &str| -> Vec<&Value> {
        ev.iter().filter(|e| e["ph"] == "C" && e["pid"] == pid && e["name"] == name).collect()
    };
    // Tokens: node 0's sends hold send tokens until they complete; node
    // 1's port 3 has receive buffers posted all along.
    let tokens = |pid: u64, port: u8, series: &str| -> Vec<u64> {
        counters(pid, &format!("port {port} tokens"))
            .iter()
            .map(|e| e["args"][series].as_u64().unwrap())
            .collect()
    };
    let send = tokens(0, 2, "send in use");
    assert!(send.iter().any(|&n| n > 0), "{send:?}");
    assert_eq!(send.last(), Some(&0), "every send completed: {send:?}");
    let recv = tokens(1, 3, "receive in use");
    assert!(!recv.is_empty() && recv.iter().all(|&n| n > 0), "{recv:?}");
    // Node 0's window on its one stream: it opens, and ends at 0.
    let w = counters(0, "send window");
    let series = "port 2 -> 1:3 low";
    let vals: Vec<u64> = w.iter().filter_map(|e| e["args"][series].as_u64()).collect();
    assert!(vals.iter().any(|&x| x > 1), "{vals:?}");
    assert_eq!(vals.last(), Some(&0), "everything acked at the end: {vals:?}");
    // Counters' values are numbers, times in order per track.
    let ts: Vec<f64> = w.iter().map(|e| f(e, "ts")).collect();
    assert!(ts.windows(2).all(|p| p[0] <= p[1]));
    // Two senders into node 1: heads wait for the switch's link to it.
    let into_1 = tracks.iter().position(|t| t.ends_with("-> node1")).unwrap();
    let waiting: Vec<u64> = on_fabric("C")
        .filter(|e| e["name"] == format!("link{into_1} waiting"))
        .map(|e| e["args"]["heads"].as_u64().unwrap())
        .collect();
    assert!(waiting.iter().any(|&n| n > 0), "{waiting:?}");
    assert_eq!(waiting.last(), Some(&0), "no head waits at the end");
    let queues = ev.iter().filter(|e| e["ph"] == "C" && e["name"] == "queues").count();
    eprintln!(
        "{} link slices, {} drops, {} waiting points, {} NIC queue points, {} window points",
        slices.len(),
        drops.len(),
        on_fabric("C").count(),
        queues,
        w.len()
    );
}

/// A NIC reset in the middle of a traced run: nothing is lost (the ring is
/// read before the reset clears it, and the new boot is traced from its
/// start), the reset NIC's records go on after it, and the run is the same
/// as without the trace.
#[test]
fn a_traced_nic_reset_loses_nothing_and_changes_nothing() {
    let text = r#"
profile = "lanai9-gm"
seed = 3
[fabric]
nodes = 3
[[flows]]
name = "into-the-reset"
kind = "stream"
src = [0, 1]
dst = [1, 1]
sizes = [3000]
messages = 100
[[flows]]
name = "elsewhere"
kind = "stream"
src = [2, 1]
dst = [0, 3]
sizes = [1000]
messages = 100
[[faults.nic_reset]]
node = 1
at_us = 2000
"#;
    let v = scenario::Scenario::parse_validated(text).unwrap();
    let plain = scenario::run(&v).unwrap();
    let (traced, t) = scenario::run_traced(&v, &SimOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(results(&plain), results(&traced));
    assert_eq!(traced.nic_reset.len(), 1);
    assert!(traced.nic_reset[0].done, "{}", traced.summary());
    assert!(traced.flows[0].cut_by_reset_us.is_some(), "the reset hit the traffic");
    assert_eq!(t.lost_transitions(), 0);
    let n1 = &t.nodes[1];
    assert_eq!(n1.nic.transition_ns.len(), n1.nic.transitions.len());
    let after = n1.nic.transition_ns.iter().filter(|&&ns| ns > 2_000_000).count();
    assert!(after > 0, "node 1's new boot was traced");
    // Times never go back on one NIC, across the reset too.
    assert!(n1.nic.transition_ns.windows(2).all(|w| w[0] <= w[1]));
    // The document still parses and every slice has a duration.
    let doc: Value = serde_json::from_str(&trace::chrome_json(&t)).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    assert!(ev.iter().filter(|e| e["ph"] == "X").all(|e| f(e, "dur") >= 0.0));
}

/// The same scenario on a live cluster, traced while it runs: both NICs'
/// records are read (none lost: the rings are read every millisecond),
/// and the host programs' calls are on the NICs' clock: by the time the
/// host program takes its k-th reception, its NIC has accepted at least k
/// data packets.
#[test]
fn a_live_run_is_traced_with_its_host_calls_on_the_nics_clock() {
    let v = pingpong();
    let opts = cluster_tests::rt_options(
        host_driver::cluster::ClusterBackend::Live,
        std::time::Duration::from_secs(60),
        None,
    );
    let (report, t) = scenario::run_realtime_traced(&v, &opts, &mut |_| {}).unwrap();
    assert!(report.all_delivered_intact(), "{}", report.summary());
    assert_eq!(t.backend, "live");
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.lost_transitions(), 0);
    let doc: Value = serde_json::from_str(&trace::chrome_json(&t)).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    assert_eq!(doc["otherData"]["packets_followed"], 0, "no packet log in real time");
    for node in 0..2u64 {
        let on = |e: &&Value| e["pid"] == node;
        let mut accepts: Vec<f64> = ev
            .iter()
            .filter(on)
            .filter(|e| e["ph"] == "X" && e["tid"] == 3 && e["name"] == "Accept")
            .map(|e| f(e, "ts"))
            .collect();
        accepts.sort_by(f64::total_cmp);
        let mut receptions: Vec<f64> = ev
            .iter()
            .filter(on)
            .filter(|e| e["tid"] == 5 && e["name"] == "event")
            .filter(|e| e["args"]["detail"].as_str().unwrap().starts_with("received"))
            .map(|e| f(e, "ts"))
            .collect();
        receptions.sort_by(f64::total_cmp);
        assert_eq!(receptions.len(), 210, "node {node}: 200 small and 10 large messages");
        let sends = ev.iter().filter(on).filter(|e| e["tid"] == 5 && e["name"] == "send").count();
        assert_eq!(sends, 210, "node {node}");
        for (k, r) in receptions.iter().enumerate() {
            let before = accepts.partition_point(|a| a <= r);
            assert!(
                before > k,
                "node {node}: reception {k} at {r} us, only {before} packets accepted by then"
            );
        }
    }
}
