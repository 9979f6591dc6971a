//! Fabric timing, backpressure, routes and drops, driven by hand through
//! the DMA rings (no MCP).

mod common;

use common::*;
use host_driver::backend::NicBackend;
use nic_abi::map;
use nic_abi::packet::route_byte;
use nic_abi::regs;
use nic_abi::rings::RxStatus;
use nic_emu::profile::Rate;
use nic_emu::{ClusterConfig, EmuError, Faults, RunLimit, RunOutcome, SimCluster, Topology};

#[test]
fn a_packet_crosses_a_star_in_the_cut_through_time() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 4, Topology::Star, Faults::NONE, 0);
    let (a, b) = (c.backend(0), c.backend(3));
    post_rx(&b, 0);
    let payload = vec![0x5a; 1000];
    let wire = post_tx(&a, 0, &star_route(3), 0, 3, &payload);
    c.kick(0);
    c.kick(3);
    let t = step_until(&mut c, |_| reg32(&b, regs::RXDONE_PROD) == 1);
    // Poll (1 ns) + send setup + cable + switch + cable + the last link's
    // serialisation of what is left (the switch consumed one route byte)
    // + receive setup.
    let link = Rate::new(p.link.bandwidth_bytes_per_s);
    let expect = 1 + 300 + 21 + 500 + 21 + link.ns(wire as u64 - 1) + 300;
    assert_eq!(t, expect);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 1);
    assert_eq!(c.sim_stats().packets, 1);
    assert_eq!(c.sim_stats().hops, 2);
}

#[test]
fn a_packet_between_two_switches_pays_two_switch_latencies_and_three_cables() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 4, Topology::TwoSwitch, Faults::NONE, 0);
    // Nodes 0, 1 on switch 0; 2, 3 on switch 1.
    let (a, b) = (c.backend(0), c.backend(3));
    assert_eq!(c.route(0, 3), &[route_byte(15), route_byte(1)]);
    post_rx(&b, 5);
    let wire = post_tx(&a, 0, c.route(0, 3).to_vec().as_slice(), 0, 3, &[1; 100]);
    c.kick(0);
    c.kick(3);
    let t = step_until(&mut c, |_| reg32(&b, regs::RXDONE_PROD) == 1);
    let link = Rate::new(p.link.bandwidth_bytes_per_s);
    let expect = 1 + 300 + 3 * 21 + 2 * 500 + link.ns(wire as u64 - 2) + 300;
    assert_eq!(t, expect);
    assert_eq!(rx_done(&b, 0).buf, 5);
    assert_eq!(rx_done(&b, 0).status, RxStatus::empty());
}

#[test]
fn route_tables_hold_the_mappers_routes_in_both_topologies() {
    for (topo, n) in [(Topology::Star, 16), (Topology::TwoSwitch, 30), (Topology::Clos, 40)] {
        let c = idle_cluster(profile(), n, topo, Faults::NONE, 0);
        for s in 0..n {
            let be = c.backend(s);
            assert_eq!(reg32(&be, regs::NODE_ID), s as u32);
            assert_eq!(reg32(&be, regs::NUM_NODES), n as u32);
            for d in 0..n {
                let mut e = [0u8; 8];
                be.sram_read(map::route_entry(d), &mut e);
                let r = &e[1..1 + e[0] as usize];
                assert_eq!(r, c.route(s, d), "{topo} {s}->{d}");
                let same_switch = match topo {
                    Topology::Star => true,
                    Topology::TwoSwitch => (s < 15) == (d < 15),
                    Topology::Clos => s / 8 == d / 8,
                };
                assert_eq!(
                    r.len(),
                    if same_switch {
                        1
                    } else if topo == Topology::Clos {
                        3
                    } else {
                        2
                    }
                );
            }
        }
    }
}

#[test]
fn every_node_reaches_every_node_in_a_multi_switch_fabric() {
    let n = 10;
    let mut c = idle_cluster(profile(), n, Topology::TwoSwitch, Faults::NONE, 0);
    for d in 0..n {
        let be = c.backend(d);
        for b in 0..n as u32 {
            post_rx(&be, b);
        }
    }
    for s in 0..n {
        let be = c.backend(s);
        for d in 0..n {
            let route = c.route(s, d).to_vec();
            post_tx(&be, d as u32, &route, s as u16, d as u16, &[s as u8; 64]);
        }
        c.kick(s);
    }
    for d in 0..n {
        c.kick(d);
    }
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    for d in 0..n {
        let be = c.backend(d);
        assert_eq!(reg32(&be, regs::RXDONE_PROD), n as u32, "node {d}");
        let mut srcs: Vec<u16> = (0..n as u32)
            .map(|i| {
                let r = rx_done(&be, i);
                assert_eq!(r.status, RxStatus::empty());
                let mut h = [0u8; 48];
                be.sram_read(map::rx_buf(r.buf), &mut h);
                let h = nic_abi::packet::Header::parse(&{
                    let mut v = h.to_vec();
                    v.extend_from_slice(&[0; 64]);
                    v
                })
                .unwrap();
                assert_eq!(h.dst_node as usize, d);
                h.src_node
            })
            .collect();
        srcs.sort();
        assert_eq!(srcs, (0..n as u16).collect::<Vec<_>>());
    }
}

#[test]
fn two_senders_to_one_output_the_second_waits_for_the_first_tail() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 3, Topology::Star, Faults::NONE, 0);
    let dst = c.backend(2);
    post_rx(&dst, 0);
    post_rx(&dst, 1);
    let payload = vec![7u8; 2000];
    let wire = post_tx(&c.backend(0), 0, &star_route(2), 0, 2, &payload);
    post_tx(&c.backend(1), 0, &star_route(2), 1, 2, &payload);
    for n in 0..3 {
        c.kick(n);
    }
    let t1 = step_until(&mut c, |_| reg32(&dst, regs::RXDONE_PROD) == 1);
    let t2 = step_until(&mut c, |_| reg32(&dst, regs::RXDONE_PROD) == 2);
    // The second gets the output when the first's tail has entered it,
    // and then streams behind it: one serialisation time later.
    let ser = Rate::new(p.link.bandwidth_bytes_per_s).ns(wire as u64 - 1);
    assert_eq!(t2 - t1, ser);
    let into2 = c.link_stats().into_iter().find(|l| l.to == nic_emu::LinkEnd::Nic(2)).unwrap();
    assert_eq!(into2.waits, 1);
    assert!(into2.wait_ns > 0);
    // The second sender's link stayed held while it waited (wormhole):
    // its send-DMA finished later than the first's.
    c.run(RunLimit::Unlimited);
    assert_eq!(reg32(&c.backend(1), regs::TXDMA_DONE), 1);
}

#[test]
fn a_nic_without_receive_buffers_holds_the_link_and_loses_nothing() {
    let p = profile();
    let mut c = idle_cluster(p, 3, Topology::Star, Faults::NONE, 0);
    let (a, b) = (c.backend(0), c.backend(1));
    post_tx(&a, 0, &star_route(1), 0, 1, &[3u8; 4000]);
    c.kick(0);
    // Nothing can happen but the blocked-packet timeout (50 ms): the
    // packet waits at node 1, holding the path.
    assert_eq!(c.run(RunLimit::Until(1_000_000)), RunOutcome::TimeLimit);
    assert_eq!(reg32(&b, regs::RXDONE_PROD), 0);
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 0, "the tail cannot leave while the head waits");
    assert_eq!(c.nic_stats(1).device.rx_backpressure_waits, 1);
    // A buffer appears (4 ms later): the packet lands, intact.
    assert_eq!(c.run(RunLimit::Until(5_000_000)), RunOutcome::TimeLimit);
    assert_eq!(c.now_ns(), 5_000_000);
    post_rx(&b, 9);
    c.kick(1);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&b, regs::RXDONE_PROD), 1);
    assert_eq!(rx_done(&b, 0).buf, 9);
    assert_eq!(rx_done(&b, 0).status, RxStatus::empty());
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 1);
    let s = c.nic_stats(1);
    assert!(s.device.rx_backpressure_ns >= 4_000_000, "{}", s.device.rx_backpressure_ns);
    assert_eq!(c.nic_stats(0).link_blocked_drops, 0);
}

#[test]
fn a_packet_blocked_in_a_switch_past_the_timeout_is_dropped_and_counted() {
    let p = profile();
    let timeout = p.switch.blocked_drop_timeout_ns;
    let mut c = idle_cluster(p, 3, Topology::Star, Faults::NONE, 0);
    // Node 0's packet waits at node 1 (no buffers) and holds switch port 1.
    post_tx(&c.backend(0), 0, &star_route(1), 0, 1, &[1u8; 4000]);
    // Node 2's packet to node 1 waits in the switch behind it.
    post_tx(&c.backend(2), 0, &star_route(1), 2, 1, &[2u8; 100]);
    c.kick(0);
    c.kick(2);
    // The timeout is pending.
    assert_eq!(c.run(RunLimit::Until(timeout / 2)), RunOutcome::TimeLimit);
    assert_eq!(c.nic_stats(2).link_blocked_drops, 0);
    // Both are dropped then, and nothing is left to happen.
    assert_eq!(c.run(RunLimit::Until(timeout * 2)), RunOutcome::Done);
    assert_eq!(c.nic_stats(2).link_blocked_drops, 1);
    // The packet blocked at the NIC's input too: the switch feeding the
    // NIC drops it, and its sender's link goes free.
    assert_eq!(c.nic_stats(0).link_blocked_drops, 1, "the packet at the NIC's input");
    assert_eq!(reg32(&c.backend(0), regs::TXDMA_DONE), 1);
    // Node 2's send completed (its tail left before it was dropped).
    assert_eq!(reg32(&c.backend(2), regs::TXDMA_DONE), 1);
    let into1 = c.link_stats().into_iter().find(|l| l.to == nic_emu::LinkEnd::Nic(1)).unwrap();
    assert_eq!(into1.blocked_drops, 2);
    assert_eq!(reg32(&c.backend(1), regs::RXDONE_PROD), 0);
}

#[test]
fn a_nic_that_takes_no_packets_holds_its_senders_only_for_the_blocked_packet_timeout() {
    // Node 1's firmware never posts a receive buffer (wedged, or stopped
    // in a debugger). Node 0 sends to it, then to node 2. The first
    // packet's head waits at node 1's input holding node 0's link; after
    // the switches' blocked-packet timeout it is dropped, and node 0's
    // second packet goes out and lands at node 2.
    let p = profile();
    let timeout = p.switch.blocked_drop_timeout_ns;
    let mut c = idle_cluster(p, 3, Topology::Star, Faults::NONE, 0);
    let (a, z) = (c.backend(0), c.backend(2));
    post_rx(&z, 4);
    c.kick(2);
    post_tx(&a, 0, &star_route(1), 0, 1, &[5u8; 2000]);
    post_tx(&a, 1, &star_route(2), 0, 2, &[6u8; 2000]);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Until(timeout - 1_000)), RunOutcome::TimeLimit);
    assert_eq!(reg32(&z, regs::RXDONE_PROD), 0, "node 0's link is held until the timeout");
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert!(c.now_ns() >= timeout && c.now_ns() < timeout + 1_000_000, "{}", c.now_ns());
    assert_eq!(reg32(&z, regs::RXDONE_PROD), 1);
    assert_eq!(rx_done(&z, 0).status, RxStatus::empty());
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 2);
    assert_eq!(c.nic_stats(0).link_blocked_drops, 1);
    let s = c.nic_stats(1).device;
    assert_eq!((s.rx_backpressure_waits, s.rx_backpressure_ns), (1, timeout));
}

#[test]
fn a_route_byte_naming_no_connected_port_drops_the_packet() {
    let mut c = idle_cluster(profile(), 3, Topology::Star, Faults::NONE, 0);
    post_rx(&c.backend(1), 0);
    // Port 9 of the switch has no node (3 nodes).
    post_tx(&c.backend(0), 0, &[route_byte(9)], 0, 1, &[0; 10]);
    // A header byte where a route byte is due.
    post_tx(&c.backend(0), 1, &[], 0, 1, &[0; 10]);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(c.nic_stats(0).link_bad_routes, 2);
    assert_eq!(reg32(&c.backend(1), regs::RXDONE_PROD), 0);
    assert_eq!(reg32(&c.backend(0), regs::TXDMA_DONE), 2);
}

#[test]
fn a_packet_arriving_with_route_bytes_left_is_dropped_by_the_receiver() {
    let mut c = idle_cluster(profile(), 3, Topology::Star, Faults::NONE, 0);
    let b = c.backend(1);
    post_rx(&b, 0);
    post_tx(&c.backend(0), 0, &[route_byte(1), route_byte(2)], 0, 1, &[0; 10]);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&b, regs::RX_DROPS), 1);
    assert_eq!(reg32(&b, regs::RXDONE_PROD), 0);
    assert_eq!(c.nic_stats(1).device.rx_misrouted, 1);
}

#[test]
fn a_star_refuses_more_nodes_than_switch_ports() {
    let cfg = ClusterConfig::new(profile(), 17, Topology::Star);
    let e = SimCluster::with_firmware(cfg, |_| Box::new(nic_emu::IdleFirmware)).err().unwrap();
    assert!(matches!(&e, EmuError::Config(m) if m.contains("at most 16")), "{e}");
}
