//! Same seed, same run; fault injection is seeded and counted.

use nic_abi::stats::Stat;
use nic_emu::testfw::{Dest, PumpFirmware};
use nic_emu::{
    ClusterConfig, Faults, NicStats, Profile, RunLimit, RunOutcome, SimCluster, Topology,
};

fn pump_run(
    seed: u64,
    faults: Faults,
    topology: Topology,
) -> (RunOutcome, u64, u64, Vec<NicStats>, Vec<nic_emu::LinkStats>) {
    let p = Profile::load("lanai9-gm").unwrap();
    let mut cfg = ClusterConfig::new(p, 8, topology);
    cfg.seed = seed;
    cfg.faults = faults;
    let mut c =
        SimCluster::with_firmware(cfg, |_| Box::new(PumpFirmware::new(300, 512, Dest::AllOthers)))
            .unwrap();
    let out = c.run(RunLimit::Until(1_000_000_000));
    let s = c.sim_stats();
    (out, s.end_ns, s.events, (0..8).map(|n| c.nic_stats(n)).collect(), c.link_stats())
}

const SOME: Faults = Faults { drop: 0.01, corrupt: 0.01, duplicate: 0.01 };

#[test]
fn the_same_seed_gives_the_same_run_bit_for_bit() {
    for topo in [Topology::Star, Topology::TwoSwitch] {
        let a = pump_run(42, SOME, topo);
        let b = pump_run(42, SOME, topo);
        assert_eq!(a.0, RunOutcome::Done);
        assert_eq!(a.1, b.1);
        assert_eq!(a.2, b.2);
        assert_eq!(a.3, b.3);
        assert_eq!(a.4, b.4);
    }
}

#[test]
fn another_seed_injects_other_faults() {
    let a = pump_run(42, SOME, Topology::Star);
    let b = pump_run(43, SOME, Topology::Star);
    assert_ne!(a.4, b.4);
}

#[test]
fn without_faults_every_packet_arrives_once_with_a_good_crc() {
    let (out, _, _, nics, links) = pump_run(1, Faults::NONE, Topology::TwoSwitch);
    assert_eq!(out, RunOutcome::Done);
    let sent: u64 = nics.iter().map(|n| n.stat(Stat::PacketsSent)).sum();
    let got: u64 = nics.iter().map(|n| n.stat(Stat::PacketsReceived)).sum();
    assert_eq!(sent, 8 * 300);
    assert_eq!(got, sent);
    assert!(nics.iter().all(|n| n.stat(Stat::CrcErrors) == 0));
    assert!(links.iter().all(|l| l.fault_drops + l.fault_corrupts + l.fault_dups == 0));
}

#[test]
fn dropped_and_duplicated_packets_are_counted_where_they_happened() {
    let f = Faults { drop: 0.05, corrupt: 0.0, duplicate: 0.05 };
    let (out, _, _, nics, links) = pump_run(9, f, Topology::Star);
    assert_eq!(out, RunOutcome::Done);
    let sent: u64 = nics.iter().map(|n| n.stat(Stat::PacketsSent)).sum();
    let got: u64 = nics.iter().map(|n| n.stat(Stat::PacketsReceived)).sum();
    let drops: u64 = nics.iter().map(|n| n.fault_drops).sum();
    let dups: u64 = nics.iter().map(|n| n.fault_dups).sum();
    assert!(drops > 0 && dups > 0);
    assert_eq!(drops, links.iter().map(|l| l.fault_drops).sum::<u64>());
    // A packet dropped on its first link never reaches a duplicating link;
    // one dropped on its last link may have been marked to duplicate too.
    let dup_delivered: u64 = nics.iter().map(|n| n.device.rx_packets).sum::<u64>() + drops - sent;
    assert!(dup_delivered <= dups);
    assert_eq!(got + drops, sent + dup_delivered);
    // Only links into NICs duplicate.
    assert!(links.iter().all(|l| l.fault_dups == 0 || matches!(l.to, nic_emu::LinkEnd::Nic(_))));
}
