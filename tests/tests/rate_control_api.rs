//! The host API of rate control on the simulator: a flow's IDT in the
//! NIC's flow table, its counters and achieved rate, the dispatch trace,
//! and bandwidth requests through the BRM's client (`SimBrm`), with
//! scenario keys refused by name when wrong.

use cluster_tests::refused;
use cluster_tests::rig::Rig;
use host_brm::{Criterion, FlowId};
use host_driver::{DriverError, Event, FlowKey, PortOptions, Priority, SendStatus};
use nic_abi::map::FLOW_ENTRIES;
use nic_emu::brm::{Calibration, SimBrm};
use nic_emu::Profile;

#[test]
fn a_flow_idt_paces_the_stream_and_its_counters_and_trace_show_it() {
    let mut rig = Rig::new("lanai4-gm", 2, None);
    let (nic0, nic1) = (rig.nic(0), rig.nic(1));
    let mut tx = nic0.open_port(1, PortOptions::default()).unwrap();
    let mut rx = nic1.open_port(1, PortOptions::default()).unwrap();
    let len = 65536u64;
    let class = nic_abi::size_class_for(len);
    let rbufs: Vec<_> = (0..8).map(|_| rx.alloc(len).unwrap()).collect();
    for (i, b) in rbufs.iter().enumerate() {
        rx.provide_receive_buffer(b, class, Priority::Low, i as u64).unwrap();
    }
    let key = FlowKey::new(1, 1, 1, Priority::Low);
    let entry = nic0.set_flow_idt(key, 200).unwrap();
    assert_eq!(nic0.set_flow_idt(key, 200).unwrap(), entry, "the same entry is updated");
    let cursor = nic0.set_dispatch_trace(true);
    let before = nic0.flow(key).unwrap();
    assert_eq!((before.idt, before.packets, before.bytes), (200, 0, 0));
    let sbuf = tx.alloc(len).unwrap();
    let messages = 8u64;
    for k in 0..messages {
        tx.send(&sbuf, 0, len as u32, class, Priority::Low, 1, 1, k).unwrap();
    }
    let mut sent = 0;
    while sent < messages {
        match rig.next_real_event(&mut tx, 100_000_000) {
            Some((Event::Sent { status, .. }, _)) => {
                assert_eq!(status, SendStatus::Ok);
                sent += 1;
            }
            Some(_) => {}
            None => panic!("sends did not complete"),
        }
    }
    let after = nic0.flow(key).unwrap();
    assert_eq!(after.packets, messages * 16);
    assert_eq!(after.bytes, messages * len);
    // 4096 B per 200 ticks of 0.5 us: 40.96 MB/s.
    let mb_s = after.mb_s_since(&before, nic0.rtc_hz());
    assert!((mb_s - 40.96).abs() < 0.05 * 40.96, "{mb_s} MB/s");
    let t = nic0.dispatch_trace_since(cursor);
    assert_eq!(t.lost, 0);
    let mine: Vec<u64> =
        t.records.iter().filter(|r| r.key == key.abi_key()).map(|r| r.rtc).collect();
    assert_eq!(mine.len() as u64, messages * 16);
    // NDT pacing: dispatch k is never before NDT_0 + k IDT, so a packet
    // sent late (the NIC was busy) may be followed sooner, but no run of
    // packets beats the IDT by more than one packet.
    for i in 0..mine.len() {
        for j in i + 1..mine.len() {
            let (gap, least) = (mine[j] - mine[i], (j - i - 1) as u64 * 200);
            assert!(gap >= least, "dispatches {i}..{j}: {gap} ticks, IDT allows {least}");
        }
    }
    assert_eq!(nic0.dispatch_trace_since(t.cursor).records.len(), 0);
    assert_eq!(nic0.flows().len(), 1);
    assert!(nic0.clear_flow(key));
    assert!(nic0.flow(key).is_none());
    assert!(!nic0.clear_flow(key));
}

#[test]
fn the_dispatch_trace_is_read_in_order_across_the_rings_end_and_counts_what_was_overwritten() {
    use host_driver::NicBackend;
    use nic_abi::flows::{DispatchRecord, DISPATCH_RECORD_SIZE};
    use nic_abi::map::{DISPATCH_TRACE, DISPATCH_TRACE_LEN};
    use nic_abi::regs;
    let rig = Rig::new("lanai4-gm", 2, None);
    let nic = rig.nic(0);
    // Records written as the NIC writes them (no flow dispatches here):
    // record k in slot k mod the ring's length, its RTC k.
    let write = |from: u32, to: u32| {
        let mut b = [0u8; DISPATCH_RECORD_SIZE as usize];
        for k in from..to {
            DispatchRecord { rtc: k as u64, key: 7, bytes: 4096 }.encode(&mut b);
            let slot = k % DISPATCH_TRACE_LEN;
            nic.backend().sram_write(DISPATCH_TRACE + slot * DISPATCH_RECORD_SIZE, &b);
        }
        nic.backend().sram_store_u32(regs::reg(regs::DISPATCH_TRACE_PROD), to);
    };
    let rtcs = |t: &host_driver::TraceRead| t.records.iter().map(|r| r.rtc).collect::<Vec<_>>();
    // Across the end of the ring: the last 6 slots, then the first 4.
    let end = DISPATCH_TRACE_LEN;
    write(end - 6, end + 4);
    let t = nic.dispatch_trace_since(end - 6);
    assert_eq!((t.cursor, t.lost), (end + 4, 0));
    assert_eq!(rtcs(&t), ((end - 6) as u64..(end + 4) as u64).collect::<Vec<_>>());
    // More than the ring holds since the cursor: the oldest are lost,
    // the ring's worth read in order.
    write(end + 4, 3 * end + 100);
    let t = nic.dispatch_trace_since(end + 4);
    assert_eq!((t.cursor, t.lost), (3 * end + 100, end + 96));
    assert_eq!(rtcs(&t), ((2 * end + 100) as u64..(3 * end + 100) as u64).collect::<Vec<_>>());
    assert!(nic.dispatch_trace_since(t.cursor).records.is_empty());
}

#[test]
fn the_flow_table_refuses_bad_flows_and_fills_up() {
    let rig = Rig::new("lanai4-gm", 2, None);
    let nic = rig.nic(0);
    assert_eq!(
        nic.set_flow_idt(FlowKey::new(1, 5, 1, Priority::Low), 10),
        Err(DriverError::BadFlow("target node out of range"))
    );
    assert_eq!(
        nic.set_flow_idt(FlowKey::new(9, 1, 1, Priority::Low), 10),
        Err(DriverError::BadPort(9))
    );
    let mut n = 0;
    'fill: for sp in 0..8u8 {
        for p in 0..8u8 {
            for prio in [Priority::Low, Priority::High] {
                for node in 0..2u16 {
                    if n == FLOW_ENTRIES {
                        break 'fill;
                    }
                    nic.set_flow_idt(FlowKey::new(sp, node, p, prio), 100).unwrap();
                    n += 1;
                }
            }
        }
    }
    // 8 x 8 x 2 x 2 = 256 entries: every one used.
    assert_eq!(nic.flows().len() as u32, FLOW_ENTRIES);
    let one_more = FlowKey::new(0, 1, 0, Priority::Low);
    assert!(nic.flow(one_more).is_some(), "already there: an update, not a new entry");
    nic.clear_flow(one_more);
    assert!(nic.set_flow_idt(one_more, 7).is_ok());
}

#[test]
fn bandwidth_requests_through_the_client_are_admitted_refused_and_released() {
    let rig = Rig::new("lanai4-gm", 4, None);
    let p = Profile::load("lanai4-gm").unwrap();
    let cal = Calibration::for_profile("lanai4-gm", &p).unwrap().unwrap();
    let brm = SimBrm::new(&rig.c, cal.clone()).unwrap().shared();
    let mut client = SimBrm::client(&brm, rig.backend(0));
    let f01 = FlowId::new(0, 1, 1, 1, Priority::Low);
    let f02 = FlowId::new(0, 1, 2, 1, Priority::Low);
    let a = client.request_bandwidth(f01, 50.0).unwrap();
    assert_eq!(a.idt, cal.idt_for(50.0));
    // The agent on node 0 installed it.
    let nic0 = rig.nic(0);
    assert_eq!(nic0.flow(f01.key()).map(|f| f.idt), Some(a.idt));
    let refused = client.request_bandwidth(f02, 40.0).unwrap_err();
    assert_eq!(refused.criterion(), Some(Criterion::SourceNode { node: 0 }));
    assert!(client.request_bandwidth(f02, 0.0).is_err());
    assert_eq!(client.release_bandwidth(f01), Ok(true));
    assert!(nic0.flow(f01.key()).is_none(), "released: entry removed");
    assert!(client.request_bandwidth(f02, 40.0).is_ok(), "released bandwidth lets it in");
    let status = client.status().unwrap();
    assert_eq!(status, vec![(f02, Some(40.0), cal.idt_for(40.0))]);
}

const BASE: &str = "profile = \"lanai4-gm\"\n[fabric]\nnodes = 3\n[[flows]]\nsrc = [0, 1]\n\
                    dst = [1, 1]\nkind = \"stream\"\nbytes = 65536\nmessages = 5\n";

#[test]
fn bad_rate_keys_are_refused_naming_the_key() {
    for (extra, want) in [
        ("idt = -1", "flows[0].idt"),
        ("idt = 5000000000", "flows[0].idt: 5000000000 out of range"),
        ("idt_t = -2", "flows[0].idt_t: -2"),
        ("rate_mb_s = 0", "flows[0].rate_mb_s: 0 out of range (0.001..=1000000 MB/s)"),
        ("rate_mb_s = \"fast\"", "flows[0].rate_mb_s"),
        ("best_effort = 1", "flows[0].best_effort"),
        ("idt = 100\nrate_mb_s = 10", "flows[0]: give at most one of"),
        ("stop_us = 0", "flows[0].stop_us: 0 must be a time after start_us"),
        ("trace = \"yes\"", "flows[0].trace"),
        ("ratemb = 3", "ratemb"),
    ] {
        let e = refused(&format!("{BASE}{extra}\n"));
        assert!(e.contains(want), "{extra}: {e}");
    }
    let pp = BASE.replace("\"stream\"", "\"pingpong\"");
    assert!(
        refused(&format!("{pp}rate_mb_s = 10\n")).contains("flows[0].rate_mb_s: applies to stream")
    );
    assert!(refused(&format!("{pp}stop_us = 10\n")).contains("flows[0].stop_us: applies to stream"));
}

#[test]
fn idt_t_needs_a_calibrated_profile() {
    // A profile file with no calibration beside it.
    let dir = std::env::temp_dir().join(format!("rc-uncal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text =
        std::fs::read_to_string(cluster_tests::root().join("nic-emu/profiles/lanai4-gm.toml"))
            .unwrap()
            .replace("name = \"lanai4-gm\"", "name = \"uncalibrated\"");
    let path = dir.join("uncal.toml");
    std::fs::write(&path, text).unwrap();
    let scen = BASE.replace("lanai4-gm", &path.display().to_string());
    let e = refused(&format!("{scen}idt_t = 2\n"));
    assert!(
        e.contains("flows[0].idt_t: profile") && e.contains("no rate-control calibration"),
        "{e}"
    );
    let e = refused(&format!("{scen}rate_mb_s = 20\n"));
    assert!(e.contains("flows[0].rate_mb_s"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn after_a_nic_reset_the_bandwidth_manager_installs_its_flow_entries_again() {
    let mut rig = Rig::new("lanai4-gm", 4, None);
    let p = Profile::load("lanai4-gm").unwrap();
    let cal = Calibration::for_profile("lanai4-gm", &p).unwrap().unwrap();
    let brm = SimBrm::new(&rig.c, cal.clone()).unwrap().shared();
    let mut client = SimBrm::client(&brm, rig.backend(1));
    let reserved = FlowId::new(1, 1, 2, 1, Priority::Low);
    let best = FlowId::new(1, 2, 3, 1, Priority::High);
    let other = FlowId::new(0, 1, 2, 2, Priority::Low);
    client.request_bandwidth(reserved, 30.0).unwrap();
    client.best_effort(best).unwrap();
    client.request_bandwidth(other, 20.0).unwrap();
    // What the NICs hold, as (key, IDT), against what the manager installed.
    let table = |rig: &Rig, n: usize| {
        let mut t: Vec<_> = rig.nic(n).flows().iter().map(|f| (f.flow, f.idt)).collect();
        t.sort();
        t
    };
    let want = |n: u16| {
        let b = brm.borrow();
        let mut t: Vec<_> = b
            .master()
            .managed()
            .keys()
            .filter(|f| f.src_node == n)
            .map(|f| (f.key(), b.master().installed(f).expect("installed")))
            .collect();
        t.sort();
        t
    };
    assert_eq!(table(&rig, 1), want(1));
    assert_eq!(table(&rig, 1).len(), 2);
    let before0 = table(&rig, 0);
    rig.c.reset_nic(1).unwrap();
    assert!(table(&rig, 1).is_empty(), "a reset empties the flow table");
    let now = rig.c.now_ns();
    assert_eq!(brm.borrow_mut().nic_reset(now, 1), 2);
    assert_eq!(table(&rig, 1), want(1), "the reservations match the flow table again");
    assert_eq!(table(&rig, 0), before0, "other NICs untouched");
    assert!(brm.borrow().master().failures.is_empty());
}
