//! The live backend: the real-time device process with the MCP run
//! natively, driven by host programs running as separate processes.

mod rt;

use std::time::{Duration, Instant};

use host_driver::cluster::{ClusterBackend, ClusterDir};

use nic_abi::map;
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_emu::realtime::{Pacing, RtCluster, RtConfig};
use nic_emu::{Faults, Profile, Topology};

#[test]
fn a_live_cluster_is_published_reset_as_the_sim_resets_and_removed_at_stop() {
    let c = rt::live("publish", 3);
    let path = c.path().to_path_buf();
    let d = ClusterDir::open_path(&path).expect("published");
    let m = d.manifest();
    assert_eq!((m.backend, m.nodes, m.pid), (ClusterBackend::Live, 3, std::process::id()));
    assert_eq!(m.profile, "lanai9-gm");
    let p = Profile::load("lanai9-gm").unwrap();
    let layout = Topology::Star.layout(3, p.switch.ports as usize).unwrap();
    for node in 0..3u32 {
        let s = d.map_sram_with_windows(node).unwrap();
        let r32 = |r| s.load_u32(reg(r) as u64).unwrap();
        assert_eq!(r32(regs::MAGIC), regs::MAGIC_VALUE);
        assert_eq!(r32(regs::NODE_ID), node);
        assert_eq!(r32(regs::NUM_NODES), 3);
        assert_eq!(r32(regs::FW_STATUS), regs::FW_RUNNING);
        assert_eq!(r32(regs::SRAM_SIZE) as u64, m.sram_size);
        assert_eq!(r32(regs::SEND_TOKENS), p.firmware.send_tokens);
        assert_eq!(r32(regs::RELIABILITY), regs::RELIABILITY_GO_BACK_N);
        assert_eq!(s.load_u64(reg(regs::RTC_HZ) as u64), Some(p.nic.rtc_hz));
        for dst in 0..3 {
            let route = layout.route(node as usize, dst);
            let mut e = vec![0u8; 1 + route.len()];
            s.read(map::route_entry(dst) as u64, &mut e);
            assert_eq!(e[0] as usize, route.len());
            assert_eq!(&e[1..], &route[..]);
        }
        for port in 0..8 {
            assert_eq!(s.load_u32(port_reg(port, pcb::STATE) as u64), Some(pcb::STATE_CLOSED));
        }
        // The RTC runs (the device thread moves it at its steps: give it
        // a second, for a loaded machine that runs it late).
        let a = s.load_u64(reg(regs::RTC) as u64).unwrap();
        let since = Instant::now();
        while s.load_u64(reg(regs::RTC) as u64).unwrap() == a {
            assert!(since.elapsed() < Duration::from_secs(1), "node {node}: the RTC stands at {a}");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(s.load_u64(reg(regs::RTC) as u64).unwrap() > a);
    }
    c.stop().unwrap();
    assert!(!path.exists(), "the cluster directory is removed at stop");
}

#[test]
fn a_live_cluster_writes_the_profiles_reliability_mode_as_the_sim_does() {
    let mut cfg = RtConfig::new(&rt::cluster_path("reliability"), ClusterBackend::Live, 2);
    cfg.profile.firmware.reliability = nic_emu::profile::Reliability::Selective;
    let c = rt::start(cfg);
    let d = ClusterDir::open_path(c.path()).expect("published");
    for node in 0..2u32 {
        let s = d.map_sram(node).unwrap();
        let r32 = |r| s.load_u32(reg(r) as u64).unwrap();
        assert_eq!(r32(regs::RELIABILITY), regs::RELIABILITY_SELECTIVE, "node {node}");
        assert_eq!(r32(regs::FW_STATUS), regs::FW_RUNNING, "node {node}");
    }
    c.stop().unwrap();
}

#[test]
fn pingpong_and_stream_between_two_host_processes_check_every_byte() {
    let c = rt::live("pp", 2);
    let v = rt::pingpong(c.path(), (0, 1), (1, 1), 8, 300);
    assert!(v["one_way_us"]["median"].as_f64().unwrap() > 0.0);
    let r = rt::stream(c.path(), (0, 2), (1, 2), 65536, 100);
    assert!(String::from_utf8_lossy(&r.stdout).contains("content and order checked"));
    let s = c.nic_stats(1);
    assert!(s.counters.device.rx_packets >= 100 * 16, "{s:?}");
    assert_eq!(s.counters.device.rx_crc_bad, 0);
    assert_eq!(s.counters.hw_faults, 0);
}

#[test]
fn lent_transmit_buffers_are_not_reused_before_their_bytes_are_taken() {
    // A packet goes from its sender's transmit buffer straight into the
    // receiver's receive buffer; the sender's firmware must not get the
    // buffer back (TXDMA_DONE) before. Three streams into one NIC (it runs
    // out of receive buffers: packets wait and are reclaimed) and one out
    // of it, the NICs on two device threads (a receiving engine copies
    // while the sender's thread runs on), every byte of every message
    // checked: a buffer refilled too early delivers another packet's bytes.
    let mut cfg = RtConfig::new(&rt::cluster_path("lend"), ClusterBackend::Live, 4);
    cfg.threads = 2;
    cfg.check_crc = true;
    let c = rt::start(cfg);
    let pairs = [((1, 1), (0, 1)), ((2, 1), (0, 2)), ((3, 1), (0, 3)), ((0, 4), (1, 4))];
    let kids: Vec<_> =
        pairs.iter().map(|&(a, b)| rt::stream_spawn(c.path(), a, b, 65536, 300, &[])).collect();
    for (send, recv) in kids {
        let send = rt::finish(send, Duration::from_secs(60));
        let recv = rt::finish(recv, Duration::from_secs(60));
        rt::both_succeed(c.path(), [("sender", &send), ("receiver", &recv)]);
        assert!(String::from_utf8_lossy(&recv.stdout).contains("content and order checked"));
    }
    let st: Vec<_> = (0..4).map(|n| c.nic_stats(n).counters).collect();
    let lent: u64 = st.iter().map(|s| s.lent).sum();
    assert!(lent >= 4 * 300 * 16, "packets went lent: {st:?}");
    assert!(st.iter().all(|s| s.device.rx_crc_bad == 0 && s.hw_faults == 0), "{st:?}");
}

#[test]
fn four_nodes_all_to_all_every_message_checked() {
    let c = rt::live("a2a", 4);
    let lines = rt::alltoall(c.path(), 4, 2, 3000, 40);
    assert_eq!(lines.len(), 4);
    for n in 0..4 {
        let st = c.nic_stats(n);
        assert_eq!(st.counters.device.hdma_errors, 0, "{st:?}");
    }
}

#[test]
fn nics_spread_over_two_threads_on_a_two_switch_fabric_still_deliver() {
    let mut cfg = RtConfig::new(&rt::cluster_path("threads"), ClusterBackend::Live, 4);
    cfg.threads = 2;
    cfg.topology = Topology::TwoSwitch;
    let c = rt::start(cfg);
    rt::alltoall(c.path(), 4, 3, 1000, 20);
    // Node 0 -> node 3 crosses the trunk between the switches.
    let trunk = c.link_stats().iter().skip(8).map(|l| l.packets).sum::<u64>();
    assert!(trunk > 0);
}

#[test]
fn killing_a_host_process_mid_transfer_closes_its_port_and_the_sender_sees_target_port_closed() {
    let mut cfg = RtConfig::new(&rt::cluster_path("kill"), ClusterBackend::Live, 2);
    // Nothing is lost here, so the retransmit timer only matters when the
    // NIC CPU is slow (an unoptimised build polls every few hundred us):
    // keep spurious go-back-N storms out of this test.
    cfg.profile.firmware.retransmit_ns = 20_000_000;
    let c = rt::start(cfg);
    let (send, mut recv) = rt::stream_spawn(c.path(), (0, 1), (1, 1), 65536, 1_000_000, &[]);
    // Let the transfer run, then kill the receiver outright.
    let t = Instant::now();
    while c.nic_stats(1).counters.device.rx_packets < 200 {
        assert!(t.elapsed() < Duration::from_secs(20), "the stream did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    recv.kill().unwrap();
    let _ = recv.wait();
    let send = rt::finish(send, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&send.stderr);
    assert!(
        !send.status.success() && err.contains("failed: the target port is not open"),
        "{}",
        rt::text(&send)
    );
    assert!(!c.port_open(1, 1), "the dead holder's port is closed");
    assert!(c.notes().iter().any(|n| n.contains("node 1 port 1") && n.contains("holder is gone")));
    // The NIC and its other ports go on; the port can be taken again.
    rt::pingpong(c.path(), (0, 2), (1, 3), 64, 50);
    rt::pingpong(c.path(), (0, 1), (1, 1), 64, 50);
}

#[test]
fn reflashing_a_live_nic_resets_it_closes_its_ports_and_peers_recover() {
    let c = rt::live("reflash", 2);
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 50);
    let flash = c.dir().flash_path(1);
    std::fs::write(&flash, b"new image").unwrap();
    let t = Instant::now();
    while c.nic_stats(1).counters.resets == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "no reset after the flash changed");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.wait_running(Duration::from_secs(5)).unwrap();
    assert!(c.notes().iter().any(|n| n.contains("node 1: flash changed")));
    // Streams resynchronise: the same ports work again, both ways.
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 50);
    rt::pingpong(c.path(), (1, 2), (0, 2), 8, 50);
    assert_eq!(c.nic_stats(0).counters.resets, 0);
}

#[test]
fn a_node_file_cut_under_a_live_cluster_is_set_back_and_its_nic_reset() {
    let c = rt::live("cut", 3);
    rt::cut_node_files(&c, 200_000);
}

#[test]
fn injected_faults_are_recovered_by_the_firmware() {
    let mut cfg = RtConfig::new(&rt::cluster_path("faults"), ClusterBackend::Live, 2);
    cfg.faults = Faults { drop: 0.02, corrupt: 0.02, duplicate: 0.02 };
    cfg.seed = 7;
    // Retransmit sooner than the profile's 1 ms: the test stays short.
    cfg.profile.firmware.retransmit_ns = 200_000;
    let c = rt::start(cfg);
    rt::stream(c.path(), (0, 1), (1, 1), 8192, 300);
    let d = c.nic_stats(0).drops;
    assert!(d.fault_drops + d.fault_corrupts + d.fault_dups > 0, "{d:?}");
    assert!(c.nic_stats(1).counters.device.rx_crc_bad > 0 || d.fault_corrupts == 0);
}

#[test]
fn a_paced_fabric_carries_about_the_link_bandwidth() {
    let mut cfg = RtConfig::new(&rt::cluster_path("paced"), ClusterBackend::Live, 2);
    cfg.pacing = Pacing::LinkBandwidth;
    // 40 MB/s links: 4 MB take at least 100 ms.
    cfg.profile.link.bandwidth_bytes_per_s = 40_000_000;
    let c = rt::start(cfg);
    let t = Instant::now();
    rt::stream(c.path(), (0, 1), (1, 1), 65536, 64);
    let s = t.elapsed().as_secs_f64();
    assert!(s >= 0.1, "4 MiB over a 40 MB/s link took {s} s");
}

#[test]
fn a_running_cluster_is_not_replaced_by_another_start() {
    let c = rt::live("twice", 1);
    let path = c.path().to_string_lossy().into_owned();
    // In this process.
    let e = RtCluster::start(RtConfig::new(&path, ClusterBackend::Live, 1)).err().expect("refused");
    assert!(e.to_string().contains("already"), "{e}");
    // From another process.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_nic-cluster"))
        .args(["run", "--dir", &path, "--nodes", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", rt::text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already lives"), "{}", rt::text(&o));
    assert_eq!(c.fw_status(), vec![regs::FW_RUNNING]);
}
