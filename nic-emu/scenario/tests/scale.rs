//! Large fabrics: the bundled scale scenarios run exactly once, a switch
//! of more than 128 ports (two route bytes a hop) delivers to its far
//! ports, and only the sim takes such a switch.

use host_driver::cluster::ClusterBackend;
use nic_scenario::{check_realtime, load_file, run, Report, Scenario};

/// Every message of every flow exactly once, in order, intact.
fn assert_exactly_once(r: &Report, what: &str) {
    assert!(r.complete && r.problems.is_empty(), "{what}: {:?}\n{}", r.problems, r.summary());
    for f in &r.flows {
        assert_eq!(f.delivered, f.messages, "{what} {}: every message", f.name);
        assert_eq!((f.duplicates, f.corrupted, f.out_of_order), (0, 0, 0), "{what} {}", f.name);
    }
}

#[test]
fn the_64_node_scale_scenarios_deliver_every_message_exactly_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    for file in ["scale-64-star.toml", "scale-64-clos.toml"] {
        let v = load_file(&dir.join(file)).unwrap();
        assert_eq!(v.flows.len(), 4 * 64, "{file}");
        let r = run(&v).unwrap();
        assert_exactly_once(&r, file);
        // Each node sent 20 messages on each of its 4 flows.
        for n in &r.nics {
            assert_eq!(n.messages_sent, 80, "{file} node {}", n.node);
        }
    }
}

/// 200 nodes on one 256-port switch: node i streams to i + 199 (its
/// neighbour below, the far end of the switch for node 0) and i + 100.
const WIDE: &str = r#"
profile = "modern"
seed = 2
[fabric]
nodes = 200
switch_ports = 256
[[alltoall]]
name = "w"
port = 2
offsets = [199, 100]
sizes = [64, 5000]
messages = 4
window = 2
"#;

#[test]
fn a_switch_of_256_ports_routes_by_two_bytes_to_every_port() {
    let v = Scenario::parse_validated(WIDE).unwrap();
    let r = run(&v).unwrap();
    assert_exactly_once(&r, "256-port star");
    // One switch: two links a packet (acks included).
    assert_eq!(r.sim.hops, 2 * r.sim.packets);
    assert!(r.nics.iter().all(|n| n.packets_received > 0 && n.errors == 0));
}

#[test]
fn only_the_sim_takes_switches_of_more_than_128_ports() {
    let v = Scenario::parse_validated(WIDE).unwrap();
    for backend in [ClusterBackend::Live, ClusterBackend::Qemu] {
        let e = check_realtime(&v, backend).unwrap_err().to_string();
        assert!(
            e.starts_with("fabric.switch_ports: 256-port switches take two route bytes a hop"),
            "{e}"
        );
    }
    let narrow = WIDE
        .replace("nodes = 200", "nodes = 100")
        .replace("switch_ports = 256", "switch_ports = 128")
        .replace("[199, 100]", "[99, 50]");
    let narrow = Scenario::parse_validated(&narrow).unwrap();
    assert!(check_realtime(&narrow, ClusterBackend::Live).is_ok());
}

#[test]
fn nodes_that_do_not_fit_the_switches_name_switch_ports() {
    let v = Scenario::parse_validated(&WIDE.replace("switch_ports = 256", "switch_ports = 150"))
        .unwrap();
    let e = run(&v).unwrap_err().to_string();
    assert!(
        e.starts_with("fabric.nodes: 200 nodes do not fit topology star with 150-port switches")
            && e.contains("fabric.switch_ports"),
        "{e}"
    );
}
