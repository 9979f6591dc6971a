//! The decoder and the exporter on hand-made records.

use super::*;
use nic_abi::packet::PacketType;
use nic_abi::trace::TraceRecord;
use nic_sim::trace::WirePacket;
use serde_json::Value;

fn r(rtc: u64, machine: Machine, from: &str, to: &str, cause: Cause, arg: u32) -> TraceRecord {
    TraceRecord {
        rtc,
        machine,
        from: names::code(machine, from).unwrap(),
        to: names::code(machine, to).unwrap(),
        cause,
        arg,
    }
}

#[test]
fn decode_names_states_and_ends_each_at_its_machines_next_record() {
    let recs = [
        r(10, Machine::Sdma, "Idle", "FillWait", Cause::Scheduled, 0),
        r(12, Machine::Send, "Idle", "Data", Cause::DataOut, 7),
        r(12, Machine::Send, "Data", "Wire", Cause::Drained, 3),
        r(15, Machine::Sdma, "FillWait", "Idle", Cause::Drained, 0),
        // Records between were lost: SEND was in Wire, not Idle.
        r(20, Machine::Send, "Idle", "Data", Cause::DataOut, 8),
    ];
    let s = decode(&recs);
    assert_eq!(s.len(), 5);
    assert_eq!((s[0].name, s[0].from, s[0].start, s[0].end), ("FillWait", "Idle", 10, Some(15)));
    assert_eq!((s[0].arg_name, s[0].cause), (Some("packet"), Cause::Scheduled));
    assert_eq!((s[1].name, s[1].arg_name, s[1].arg), ("Data", Some("seq"), 7));
    assert_eq!((s[1].start, s[1].end), (12, Some(12)), "left in the same tick");
    assert_eq!((s[2].name, s[2].arg_name, s[2].end), ("Wire", Some("buf"), Some(20)));
    assert_eq!((s[3].name, s[3].end), ("Idle", None), "still idle at the end");
    assert!(!s[2].after_gap);
    assert!(s[4].after_gap, "from Idle, but the last record left SEND in Wire");
    assert_eq!(s[4].end, None);
    // An unknown state code decodes, named as such.
    let odd = TraceRecord { to: 99, ..recs[0] };
    assert_eq!(decode(&[odd])[0].name, "unknown");
}

/// Two NICs: node 0 fills, sends seq 5 (and an ack), node 1 checks,
/// accepts and copies it.
fn two_nodes() -> ClusterTrace {
    let pkt = |ns, ptype: PacketType, seq, buf| WirePacket {
        ns,
        ptype: ptype as u8,
        flags: 0,
        priority: 0,
        src_node: 0,
        dst_node: 1,
        src_port: 2,
        dst_port: 2,
        seq,
        ack: 0,
        payload_len: 4,
        buf,
    };
    let n0 = NicTrace {
        transitions: vec![
            r(10, Machine::Sdma, "Idle", "FillWait", Cause::Scheduled, 0),
            r(14, Machine::Sdma, "FillWait", "Idle", Cause::DmaDone, 0),
            r(14, Machine::Send, "Idle", "Control", Cause::ControlOut, 1),
            r(14, Machine::Send, "Control", "Wire", Cause::Drained, 0),
            r(15, Machine::Send, "Wire", "Data", Cause::DataOut, 5),
            r(15, Machine::Send, "Data", "Wire", Cause::Drained, 1),
            r(18, Machine::Send, "Wire", "Idle", Cause::WireDone, 0),
        ],
        // Ticks are 1 us (rtc_hz 1 MHz): the ack left at 14.5 us, the
        // data at 15.5 us.
        sent: vec![pkt(14_500, PacketType::Ack, 0, 0), pkt(15_500, PacketType::Data, 5, 0)],
        ..NicTrace::default()
    };
    let n1 = NicTrace {
        transitions: vec![
            r(30, Machine::Recv, "Idle", "Check", Cause::Packet, 4),
            r(30, Machine::Recv, "Check", "Accept", Cause::Accepted, 5),
            r(30, Machine::Recv, "Accept", "Idle", Cause::Drained, 0),
            r(30, Machine::Rdma, "Idle", "Copying", Cause::Accepted, 4),
            r(33, Machine::Rdma, "Copying", "Idle", Cause::DmaDone, 0),
        ],
        delivered: vec![WirePacket { ns: 29_900, buf: 4, ..pkt(0, PacketType::Data, 5, 0) }],
        lost_transitions: 3,
        ..NicTrace::default()
    };
    let call = HostCall {
        node: 0,
        start_ns: 9_000,
        end_ns: 9_500,
        what: "send",
        port: 2,
        detail: "message 0, 4 B to 1:2".into(),
        tokens: Some((1, 0)),
    };
    ClusterTrace::collect("sim", 1_000_000, 40_000, vec![(n0, 0), (n1, 0)], vec![call])
}

#[test]
fn a_packet_is_followed_from_its_fill_to_its_copy() {
    let t = two_nodes();
    let f = flows(&t);
    assert_eq!(f.len(), 1, "the ack is no flow: {f:?}");
    let s0 = decode(&t.nodes[0].nic.transitions);
    let s1 = decode(&t.nodes[1].nic.transitions);
    let f = f[0];
    assert_eq!((f.src, f.dst, f.seq), (0, 1, 5));
    assert_eq!(s0[f.fill.unwrap()].name, "FillWait");
    assert_eq!((s0[f.send].name, s0[f.send].arg), ("Data", 5));
    assert_eq!((s1[f.recv].name, s1[f.recv].arg), ("Accept", 5));
    assert_eq!(s1[f.rdma.unwrap()].name, "Copying");
}

#[test]
fn a_packet_whose_data_record_is_missing_is_not_followed() {
    let mut t = two_nodes();
    t.nodes[0].nic.transitions.retain(|r| r.machine != Machine::Send || r.arg != 5);
    assert_eq!(flows(&t), vec![]);
}

fn events(t: &ClusterTrace) -> Vec<Value> {
    let doc: Value = serde_json::from_str(&chrome_json(t)).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

#[test]
fn the_document_has_a_process_per_nic_a_track_per_machine_and_the_arrows() {
    let ev = events(&two_nodes());
    let meta = |pid: u64, what: &str| -> Vec<String> {
        ev.iter()
            .filter(|e| e["ph"] == "M" && e["pid"] == pid && e["name"] == what)
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(meta(0, "process_name"), ["NIC 0"]);
    assert_eq!(meta(1, "process_name"), ["NIC 1"]);
    assert_eq!(
        meta(1, "thread_name"),
        ["SDMA", "SEND", "RECV", "RDMA", "host program", "dispatches"]
    );
    for e in &ev {
        for k in ["ph", "ts", "pid", "tid"] {
            assert!(e.get(k).is_some(), "{k} missing in {e}");
        }
    }
    // Slices: no Idle; ts/dur in us; args named.
    let x: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X" && e["cat"] != "host").collect();
    assert!(x.iter().all(|e| e["name"] != "Idle"));
    let data = x.iter().find(|e| e["name"] == "Data").unwrap();
    assert_eq!(data["pid"], 0);
    assert_eq!(data["tid"], 2);
    assert_eq!(data["ts"], 15.0);
    assert_eq!(data["dur"], 0.0);
    assert_eq!(data["args"]["seq"], 5);
    assert_eq!(data["args"]["from"], "Wire");
    assert_eq!(data["args"]["cause"], "DataOut");
    let fill = x.iter().find(|e| e["name"] == "FillWait").unwrap();
    assert_eq!((fill["ts"].as_f64(), fill["dur"].as_f64()), (Some(10.0), Some(4.0)));
    let wire = x.iter().rfind(|e| e["name"] == "Wire").unwrap();
    assert_eq!(wire["dur"], 3.0);
    // The flow: s on node 0's SDMA, t on its SEND, t on node 1's RECV, f
    // on its RDMA (bound to the enclosing slice), each right after its
    // slice.
    let fl: Vec<(usize, &Value)> =
        ev.iter().enumerate().filter(|(_, e)| e["cat"] == "packet").collect();
    let got: Vec<(String, u64, u64, f64)> = fl
        .iter()
        .map(|(_, e)| {
            (
                e["ph"].as_str().unwrap().to_string(),
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                e["ts"].as_f64().unwrap(),
            )
        })
        .collect();
    let want = [("s", 0, 1, 10.0), ("t", 0, 2, 15.0), ("t", 1, 3, 30.0), ("f", 1, 4, 30.0)];
    let want: Vec<(String, u64, u64, f64)> =
        want.iter().map(|&(p, a, b, c)| (p.to_string(), a, b, c)).collect();
    let mut sorted = got.clone();
    sorted.sort_by(|a, b| a.3.total_cmp(&b.3).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    assert_eq!(sorted, want);
    assert!(fl.iter().all(|(_, e)| e["id"] == fl[0].1["id"] && e["name"] == "seq 5 0->1"));
    assert_eq!(fl.iter().find(|(_, e)| e["ph"] == "f").unwrap().1["bp"], "e");
    for (i, e) in &fl {
        let before = &ev[i - 1];
        assert!(
            before["ph"] == "X" || before["cat"] == "packet",
            "a flow event follows its slice: {before}"
        );
        if before["ph"] == "X" {
            assert_eq!(
                (&before["pid"], &before["tid"], &before["ts"]),
                (&e["pid"], &e["tid"], &e["ts"])
            );
        }
    }
    // The host call, and the lost records of node 1.
    let send = ev.iter().find(|e| e["cat"] == "host").unwrap();
    assert_eq!((send["ph"].as_str(), send["tid"].as_u64()), (Some("X"), Some(5)));
    assert_eq!((send["ts"].as_f64(), send["dur"].as_f64()), (Some(9.0), Some(0.5)));
    let lost = ev.iter().find(|e| e["ph"] == "i" && e["pid"] == 1).unwrap();
    assert_eq!(lost["name"], "3 records lost");
}

#[test]
fn a_real_time_nics_clock_is_placed_by_its_origin() {
    let mut t = two_nodes();
    t.nodes[1].origin_ns = -20_000;
    let n = &t.nodes[1];
    assert_eq!(t.tick_ns(n, 30), 10_000);
    assert_eq!(t.tick_ns(n, 5), 0, "before the trace's clock starts: clamped");
    // Only node 1 traced: its events carry its own node number.
    t.nodes.remove(0);
    let ev = events(&t);
    assert!(ev.iter().all(|e| e["pid"] == 1));
    assert!(ev.iter().all(|e| e["cat"] != "packet"), "no sender, no arrow");
}

#[test]
fn a_dispatch_names_its_flow() {
    let mut t = two_nodes();
    let key = nic_abi::flows::flow_key(2, 1, 3, nic_abi::Priority::High);
    t.nodes[0].nic.dispatches.push(nic_abi::flows::DispatchRecord { rtc: 12, key, bytes: 4096 });
    let ev = events(&t);
    let d: Vec<&Value> = ev.iter().filter(|e| e["name"] == "dispatch").collect();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0]["pid"].as_u64(), d[0]["tid"].as_u64()), (Some(0), Some(6)));
    assert_eq!(d[0]["ts"], 12.0);
    assert_eq!(d[0]["args"]["flow"], "port 2 -> 1:3 high");
    assert_eq!(d[0]["args"]["bytes"], 4096);
}

/// Counter events named `name` on `pid`: (ts, args).
fn counter(ev: &[Value], pid: u64, name: &str) -> Vec<(f64, Value)> {
    ev.iter()
        .filter(|e| e["ph"] == "C" && e["pid"] == pid && e["name"] == name)
        .map(|e| (e["ts"].as_f64().unwrap(), e["args"].clone()))
        .collect()
}

#[test]
fn queue_counters_follow_the_waiting_operands_and_drop_to_zero() {
    let n = NicTrace {
        transitions: vec![
            r(10, Machine::Recv, "Idle", "Check", Cause::Packet, 4),
            r(11, Machine::Recv, "Check", "Backlog", Cause::Budget, 3),
            r(12, Machine::Recv, "Backlog", "RdmaFull", Cause::RdmaFull, 5),
            r(13, Machine::Rdma, "Idle", "RingFull", Cause::NoRoom, 2),
            r(14, Machine::Recv, "RdmaFull", "Idle", Cause::Drained, 0),
            r(15, Machine::Rdma, "RingFull", "Idle", Cause::Drained, 0),
        ],
        ..NicTrace::default()
    };
    let t = ClusterTrace::collect("sim", 1_000_000, 20_000, vec![(n, 0)], vec![]);
    let q = counter(&events(&t), 0, "queues");
    let got: Vec<(f64, String)> = q
        .iter()
        .map(|(ts, a)| {
            let (k, v) = a.as_object().unwrap().iter().next().unwrap();
            (*ts, format!("{k}={v}"))
        })
        .collect();
    let want = [
        (11.0, "RECV waiting=3"),
        (12.0, "RECV waiting=5"),
        (13.0, "RDMA jobs=2"),
        (14.0, "RECV waiting=0"),
        (15.0, "RDMA jobs=0"),
    ];
    assert_eq!(got, want.map(|(t, s)| (t, s.to_string())));
}

#[test]
fn a_send_window_opens_with_each_packet_and_closes_with_each_ack() {
    let data = |ns, seq| WirePacket {
        ns,
        ptype: PacketType::Data as u8,
        src_node: 0,
        dst_node: 1,
        src_port: 2,
        dst_port: 3,
        seq,
        ..WirePacket::default()
    };
    let ack = |ns, ack| WirePacket {
        ns,
        ptype: PacketType::Ack as u8,
        flags: nic_abi::packet::Flags::ACK_VALID.bits(),
        src_node: 1,
        dst_node: 0,
        src_port: 3,
        dst_port: 2,
        ack,
        ..WirePacket::default()
    };
    let n = NicTrace {
        // Seq 7 first (the stream starts where it starts), 8, 9; a
        // retransmission of 8 moves nothing.
        sent: vec![data(1_000, 7), data(2_000, 8), data(3_000, 9), data(5_000, 8)],
        // An ack of 9 (7 and 8 in), a stale one, then everything.
        delivered: vec![ack(4_000, 9), ack(4_500, 8), ack(6_000, 10)],
        ..NicTrace::default()
    };
    let t = ClusterTrace::collect("sim", 1_000_000, 20_000, vec![(n, 0)], vec![]);
    let w: Vec<(f64, u64)> = counter(&events(&t), 0, "send window")
        .iter()
        .map(|(ts, a)| (*ts, a["port 2 -> 1:3 low"].as_u64().unwrap()))
        .collect();
    assert_eq!(w, [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 1), (6.0, 0)]);
}

#[test]
fn token_counters_are_the_ports_tokens_after_each_call() {
    let mut t = two_nodes();
    t.nodes[0].host.push(HostCall {
        node: 0,
        start_ns: 20_000,
        end_ns: 20_000,
        what: "event",
        port: 2,
        detail: "send completed: Success".into(),
        tokens: Some((0, 4)),
    });
    let c = counter(&events(&t), 0, "port 2 tokens");
    let got: Vec<(f64, u64, u64)> = c
        .iter()
        .map(|(ts, a)| {
            (*ts, a["send in use"].as_u64().unwrap(), a["receive in use"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(got, [(9.5, 1, 0), (20.0, 0, 4)]);
}

#[test]
fn each_link_is_a_track_with_its_packets_drops_and_waiting_heads() {
    use nic_fabric::fabric::Hit;
    let mut t = two_nodes();
    t.links = vec!["node0 -> sw0.p0".into(), "sw0.p1 -> node1".into()];
    let p = PacketSummary {
        ptype: PacketType::Data as u8,
        src_node: 0,
        src_port: 2,
        dst_node: 1,
        dst_port: 3,
        seq: 5,
        bytes: 100,
        ..PacketSummary::default()
    };
    let lost = Hit { drop: true, outage: Some(0), ..Hit::default() };
    t.link_events = vec![
        LinkEvent {
            t_ns: 1_000,
            link: 0,
            what: LinkWhat::Packet { tail_ns: 1_500, hit: Hit::default(), packet: p },
        },
        LinkEvent { t_ns: 2_000, link: 1, what: LinkWhat::Waiting(1) },
        LinkEvent { t_ns: 3_000, link: 1, what: LinkWhat::Waiting(0) },
        LinkEvent { t_ns: 4_000, link: 1, what: LinkWhat::SwitchDrop { blocked: true, packet: p } },
        LinkEvent {
            t_ns: 5_000,
            link: 0,
            what: LinkWhat::Packet { tail_ns: 5_500, hit: lost, packet: p },
        },
    ];
    let ev = events(&t);
    let fab: Vec<&Value> = ev.iter().filter(|e| e["pid"] == FABRIC_PID).collect();
    let names: Vec<&str> = fab
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["link0 node0 -> sw0.p0", "link1 sw0.p1 -> node1"]);
    let x: Vec<(&str, u64, f64, f64)> = fab
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            let n = e["name"].as_str().unwrap();
            (n, e["tid"].as_u64().unwrap(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(
        x,
        [
            ("Data 0:2->1:3 seq 5", 1, 1.0, 0.5),
            ("Data 0:2->1:3 seq 5 [dropped (link down)]", 1, 5.0, 0.5)
        ]
    );
    let drops: Vec<(u64, f64, &str)> = fab
        .iter()
        .filter(|e| e["name"] == "drop")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["ts"].as_f64().unwrap(),
                e["args"]["cause"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(drops, [(2, 4.0, "blocked too long"), (1, 5.0, "link down")]);
    let w: Vec<(f64, u64)> = counter(&ev, FABRIC_PID, "link1 waiting")
        .iter()
        .map(|(ts, a)| (*ts, a["heads"].as_u64().unwrap()))
        .collect();
    assert_eq!(w, [(2.0, 1), (3.0, 0)]);
}
