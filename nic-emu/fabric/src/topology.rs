//! Topologies: which NIC is cabled to which switch port, which switch
//! ports are cabled together, and the source route from every node to
//! every other (what GM's mapper would write into each NIC's route table).
//!
//! Owns the wiring plan only; `fabric` builds links and switches from it.
//! Routes are deterministic functions of (topology, node count, ports).

use std::fmt;
use std::str::FromStr;

use nic_abi::map::ROUTE_MAX;
use nic_abi::packet::route_byte;

use crate::fabric::LinkEnd;
use nic_device::profile::MAX_SWITCH_PORTS;

/// A switch fabric shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// Every node on one crossbar switch (node i on port i).
    Star,
    /// Two switches joined by one cable on their last ports; the first
    /// ceil(N/2) nodes on switch 0, the rest on switch 1.
    TwoSwitch,
    /// Two-level leaf/spine: each leaf switch has ports/2 nodes and
    /// ports/2 uplinks, one to each of ports/2 spine switches. Traffic
    /// between leaves goes up to spine `dst % spines` (destination-mod-k
    /// routing, deadlock free).
    Clos,
}

const NAMES: [&str; 3] = ["star", "two-switch", "clos"];

impl Topology {
    pub fn names() -> &'static [&'static str] {
        &NAMES
    }

    pub fn name(self) -> &'static str {
        match self {
            Topology::Star => NAMES[0],
            Topology::TwoSwitch => NAMES[1],
            Topology::Clos => NAMES[2],
        }
    }

    /// Most nodes this topology holds with switches of `ports` ports.
    pub fn max_nodes(self, ports: usize) -> usize {
        match self {
            Topology::Star => ports,
            Topology::TwoSwitch => 2 * (ports - 1),
            Topology::Clos => (ports / 2) * ports,
        }
    }

    /// The wiring plan for `nodes` nodes.
    pub fn layout(self, nodes: usize, ports: usize) -> Result<Layout, String> {
        if nodes == 0 {
            return Err("a cluster needs at least one node".into());
        }
        if !(2..=MAX_SWITCH_PORTS as usize).contains(&ports) {
            return Err(format!(
                "switches of {ports} ports: out of range (2..={MAX_SWITCH_PORTS})"
            ));
        }
        let max = self.max_nodes(ports);
        if nodes > max {
            return Err(format!(
                "topology `{}` with {ports}-port switches holds at most {max} nodes, not {nodes}",
                self.name()
            ));
        }
        let mut l =
            Layout { topology: self, ports, switches: 0, attach: Vec::new(), trunks: Vec::new() };
        match self {
            Topology::Star => {
                l.switches = 1;
                l.attach = (0..nodes).map(|n| (0, n)).collect();
            }
            Topology::TwoSwitch => {
                l.switches = 2;
                let first = nodes.div_ceil(2);
                l.attach =
                    (0..nodes).map(|n| if n < first { (0, n) } else { (1, n - first) }).collect();
                l.trunks.push(((0, ports - 1), (1, ports - 1)));
            }
            Topology::Clos => {
                let half = ports / 2;
                let leaves = nodes.div_ceil(half);
                if leaves <= 1 {
                    // One leaf: a star with room to spare.
                    l.switches = 1;
                    l.attach = (0..nodes).map(|n| (0, n)).collect();
                } else {
                    let spines = half;
                    l.switches = leaves + spines;
                    l.attach = (0..nodes).map(|n| (n / half, n % half)).collect();
                    for leaf in 0..leaves {
                        for s in 0..spines {
                            l.trunks.push(((leaf, half + s), (leaves + s, leaf)));
                        }
                    }
                }
            }
        }
        Ok(l)
    }
}

impl FromStr for Topology {
    type Err = String;
    fn from_str(s: &str) -> Result<Topology, String> {
        match s.trim() {
            "star" => Ok(Topology::Star),
            "two-switch" => Ok(Topology::TwoSwitch),
            "clos" | "leaf-spine" => Ok(Topology::Clos),
            other => Err(format!("unknown topology `{other}` (known: {})", NAMES.join(", "))),
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A wiring plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub topology: Topology,
    /// Ports per switch.
    pub ports: usize,
    pub switches: usize,
    /// Node n is cabled to switch port `attach[n]` = (switch, port).
    pub attach: Vec<(usize, usize)>,
    /// Switch-to-switch cables (one link each way).
    pub trunks: Vec<((usize, usize), (usize, usize))>,
}

impl Layout {
    pub fn nodes(&self) -> usize {
        self.attach.len()
    }

    /// Every directed link, in the order the fabric numbers them (link id
    /// = index): per node its link into the switch, then the one out of
    /// it; then per trunk one link each way. Fault injection seeds each
    /// link's random stream with its id, so every backend must agree.
    pub fn links(&self) -> Vec<(LinkEnd, LinkEnd)> {
        let mut v = Vec::with_capacity(2 * (self.attach.len() + self.trunks.len()));
        for (n, &(switch, port)) in self.attach.iter().enumerate() {
            v.push((LinkEnd::Nic(n), LinkEnd::Switch { switch, port }));
            v.push((LinkEnd::Switch { switch, port }, LinkEnd::Nic(n)));
        }
        for &((sa, pa), (sb, pb)) in &self.trunks {
            let a = LinkEnd::Switch { switch: sa, port: pa };
            let b = LinkEnd::Switch { switch: sb, port: pb };
            v.push((a, b));
            v.push((b, a));
        }
        v
    }

    /// The directed links of the cable `name` (`Layout::links` ids, both
    /// ways): `node<N>`, node N's cable to its switch, or `sw<S>.p<P>`, the
    /// cable at port P of switch S (a node's or a trunk).
    pub fn cable(&self, name: &str) -> Result<Vec<usize>, String> {
        let bad = || {
            format!(
                "no cable `{name}`: name one `node<N>` (N < {}) or `sw<S>.p<P>` (S < {}, P < {}, \
                 a port with a cable)",
                self.nodes(),
                self.switches,
                self.ports
            )
        };
        let end = if let Some(n) = name.strip_prefix("node") {
            let n: usize = n.parse().map_err(|_| bad())?;
            LinkEnd::Nic(n)
        } else if let Some((s, p)) = name.strip_prefix("sw").and_then(|r| r.split_once(".p")) {
            let switch: usize = s.parse().map_err(|_| bad())?;
            let port: usize = p.parse().map_err(|_| bad())?;
            LinkEnd::Switch { switch, port }
        } else {
            return Err(bad());
        };
        let ids: Vec<usize> = self
            .links()
            .iter()
            .enumerate()
            .filter(|(_, (a, b))| *a == end || *b == end)
            .map(|(i, _)| i)
            .collect();
        if ids.is_empty() {
            return Err(bad());
        }
        Ok(ids)
    }

    /// Do its switches take two route bytes a hop (more than
    /// `NARROW_PORTS` ports each)?
    pub fn wide(&self) -> bool {
        self.ports > NARROW_PORTS
    }

    /// The output port taken at each switch from `src` to `dst`, in order.
    pub fn route_ports(&self, src: usize, dst: usize) -> Vec<usize> {
        let (ssw, _) = self.attach[src];
        let (dsw, dport) = self.attach[dst];
        let mut r = Vec::with_capacity(3);
        if ssw != dsw {
            match self.topology {
                Topology::Star => unreachable!("a star has one switch"),
                Topology::TwoSwitch => r.push(self.ports - 1),
                Topology::Clos => {
                    let half = self.ports / 2;
                    let spine = dst % half;
                    r.push(half + spine);
                    r.push(dsw);
                }
            }
        }
        r.push(dport);
        r
    }

    /// The source route from `src` to `dst`: per switch crossed, in order,
    /// the byte `0x80 | port`, or on switches of more than `NARROW_PORTS`
    /// ports two bytes (`hop_bytes`).
    pub fn route(&self, src: usize, dst: usize) -> Vec<u8> {
        let mut r = Vec::with_capacity(6);
        for port in self.route_ports(src, dst) {
            r.extend_from_slice(hop_bytes(port, self.wide()).as_slice());
        }
        debug_assert!(r.len() <= ROUTE_MAX);
        r
    }
}

/// Most ports a switch addressed by one route byte has: the byte's low 7
/// bits name the port.
pub const NARROW_PORTS: usize = 128;

/// The route bytes that send a head out of `port` of a switch: one byte,
/// `0x80 | port`, on a switch of at most `NARROW_PORTS` ports; two on a
/// `wide` one, `0x80 | port >> 7` then `0x80 | port & 0x7F` (ports up to
/// 2^14). The real-time fabric reads one byte a hop only
/// (`plan::plan` refuses wide switches).
pub fn hop_bytes(port: usize, wide: bool) -> HopBytes {
    if wide {
        HopBytes { bytes: [route_byte((port >> 7) as u8), route_byte(port as u8 & 0x7F)], len: 2 }
    } else {
        HopBytes { bytes: [route_byte(port as u8), 0], len: 1 }
    }
}

/// One hop's route bytes (`hop_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopBytes {
    bytes: [u8; 2],
    len: usize,
}

impl HopBytes {
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cables_are_named_by_node_or_switch_port() {
        let l = Topology::TwoSwitch.layout(6, 4).unwrap();
        assert_eq!(l.cable("node0").unwrap(), vec![0, 1]);
        let (s, p) = l.attach[5];
        assert_eq!(l.cable(&format!("sw{s}.p{p}")).unwrap(), l.cable("node5").unwrap());
        let trunk = l.trunks[0].0;
        assert_eq!(l.cable(&format!("sw{}.p{}", trunk.0, trunk.1)).unwrap().len(), 2);
        for bad in ["node6", "nodeX", "sw9.p0", "sw0.p99", "link3", ""] {
            assert!(l.cable(bad).unwrap_err().contains("no cable"), "{bad}");
        }
    }

    #[test]
    fn names_parse_and_print_back() {
        for n in Topology::names() {
            assert_eq!(n.parse::<Topology>().unwrap().name(), *n);
        }
        assert!("ring".parse::<Topology>().unwrap_err().contains("star"));
    }

    #[test]
    fn star_refuses_more_nodes_than_switch_ports() {
        let e = Topology::Star.layout(17, 16).unwrap_err();
        assert!(e.contains("at most 16") && e.contains("17"), "{e}");
        assert!(Topology::Star.layout(16, 16).is_ok());
        assert!(Topology::TwoSwitch.layout(31, 16).is_err());
        assert!(Topology::Clos.layout(128, 16).is_ok());
        assert!(Topology::Clos.layout(129, 16).is_err());
    }

    #[test]
    fn star_routes_are_one_byte_naming_the_target_port() {
        let l = Topology::Star.layout(4, 16).unwrap();
        assert_eq!(l.route(0, 3), vec![0x83]);
        assert_eq!(l.route(3, 0), vec![0x80]);
    }

    #[test]
    fn two_switch_routes_cross_the_trunk_only_between_halves() {
        let l = Topology::TwoSwitch.layout(5, 16).unwrap();
        // Nodes 0..3 on switch 0 (ports 0..3), 3..5 on switch 1 (ports 0..2).
        assert_eq!(l.attach, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
        assert_eq!(l.route(0, 2), vec![0x82]);
        assert_eq!(l.route(0, 4), vec![0x8F, 0x81]);
        assert_eq!(l.route(4, 1), vec![0x8F, 0x81]);
        assert_eq!(l.trunks, vec![((0, 15), (1, 15))]);
    }

    #[test]
    fn switches_of_more_than_128_ports_take_two_route_bytes_a_hop() {
        let l = Topology::Star.layout(1024, 1024).unwrap();
        assert!(l.wide());
        // Port 1023 = 7 << 7 | 127.
        assert_eq!(l.route(0, 1023), vec![0x87, 0xFF]);
        assert_eq!(l.route(5, 0), vec![0x80, 0x80]);
        assert_eq!(l.route(0, 200), vec![0x81, 0x80 | (200 - 128)]);
        for port in [0, 1, 127, 128, 129, 1023] {
            let b = hop_bytes(port, true);
            let mut ports = vec![crate::fabric::NO_LINK; 1024];
            ports[port] = 7;
            let (hi, lo) = (b.as_slice()[0], b.as_slice()[1]);
            assert_eq!(crate::fabric::switch_out_wide(&ports, Some(hi), Some(lo), 1), 7);
            // One byte short, or a payload byte in the second place: no port.
            assert_eq!(crate::fabric::switch_out_wide(&ports, Some(hi), None, 1), u32::MAX);
            assert_eq!(
                crate::fabric::switch_out_wide(&ports, Some(hi), Some(lo & 0x7F), 1),
                u32::MAX
            );
        }
        // A clos of 256-port switches: three hops, six bytes.
        let l = Topology::Clos.layout(300, 256).unwrap();
        assert_eq!(l.route(0, 299).len(), 6);
        assert_eq!(l.route_ports(0, 299), vec![128 + 299 % 128, 2, 299 % 128]);
        // 128 ports and fewer: one byte.
        let l = Topology::Star.layout(128, 128).unwrap();
        assert!(!l.wide());
        assert_eq!(l.route(0, 127), vec![0xFF]);
    }

    #[test]
    fn switch_ports_out_of_range_are_refused() {
        for ports in [0, 1, 1025] {
            let e = Topology::Star.layout(1, ports).unwrap_err();
            assert!(e.contains(&format!("{ports} ports")) && e.contains("2..=1024"), "{e}");
        }
    }

    #[test]
    fn clos_routes_go_up_to_the_destination_spine_and_down() {
        let l = Topology::Clos.layout(20, 8).unwrap();
        // 4 nodes per leaf, 5 leaves, 4 spines (switches 5..9).
        assert_eq!(l.switches, 9);
        assert_eq!(l.route(0, 1), vec![0x81]);
        // 0 -> 13: leaf 0 -> spine 13 % 4 = 1 (uplink port 4 + 1) -> leaf 3 -> port 1.
        assert_eq!(l.route(0, 13), vec![0x85, 0x83, 0x81]);
    }
}
