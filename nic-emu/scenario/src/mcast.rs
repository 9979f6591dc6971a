//! Multicast flows, between validation and the report: the tree each one
//! uses once the profile is known (`auto` and a k-binomial tree without a
//! k are chosen by the profile's latency model, `nic_device::mcast`), the
//! profile's prices of tree work, the trees of broadcast collective flows
//! run as multicasts (chosen alike), what a tree does to the fabric's
//! links (computed from the tree and the source routes), and the flow's
//! `multicast` object in the report. Shared by the sim and the real-time
//! runners; pure apart from reading the profile.

use std::collections::{BTreeMap, BTreeSet};

use nic_abi::multicast::{children, relays_on_deepest_path, Algorithm};
use nic_device::mcast::{k_for, pick};
use nic_device::Profile;
use nic_fabric::fabric::McastSpan;
use nic_fabric::topology::{Layout, Topology};
use nic_fabric::LinkEnd;

use super::format::{AlgorithmChoice, FlowSpec, McastSpec, ScenarioError, TreePrices, Validated};
use super::ledger::{FlowLedger, Ledger};
use super::report::{McastReport, MeanSpread, P50Max, P50};

/// The scenario with every multicast flow's tree chosen for `profile`
/// and its tree-work prices filled in, and every collective flow given
/// the profile's costs (for `auto`). Unicast flows are untouched.
pub fn resolve(v: &Validated, profile: &Profile) -> Result<Validated, ScenarioError> {
    let mut out = v.clone();
    let ns = |cycles: u64| cycles as f64 * 1e9 / profile.nic.cpu_hz.max(1) as f64;
    for c in out.flows.iter_mut().filter_map(|f| f.coll.as_mut()) {
        c.costs = Some(super::coll::costs_of(profile));
    }
    // Broadcasts run as multicasts: their trees, as a multicast flow's.
    for f in &mut out.flows {
        let (label, bytes) = (f.label.clone(), f.max_size());
        let Some(c) = f.coll.as_mut() else { continue };
        let g = c.size();
        let Some(m) = c.mcast.as_mut() else { continue };
        m.algorithm = Some(match m.choice {
            AlgorithmChoice::Given(a) => a,
            AlgorithmChoice::KBinomialBestK => Algorithm::KBinomial { k: k_for(profile, g, bytes) },
            AlgorithmChoice::Auto => pick(profile, m.scheme, g, bytes),
        });
        super::coll::check_listed(&label, m, g as usize)?;
    }
    for f in &mut out.flows {
        let bytes = f.max_size();
        let Some(m) = f.mcast.as_mut() else { continue };
        let g = m.size();
        let alg = match m.choice {
            AlgorithmChoice::Given(a) => a,
            AlgorithmChoice::KBinomialBestK => Algorithm::KBinomial { k: k_for(profile, g, bytes) },
            AlgorithmChoice::Auto => pick(profile, m.scheme, g, bytes),
        };
        m.algorithm = Some(alg);
        // NIC steps: one per node with children, one per destination
        // for separate addressing.
        let steps = if alg == Algorithm::Separate {
            g.saturating_sub(1) as u64
        } else {
            (0..g).filter(|&r| nic_abi::multicast::children_computed(alg, g, r) > 0).count() as u64
        };
        m.prices = TreePrices {
            host_child_ns: profile.host.tree_child_ns,
            nic_child_ns: ns(profile.nic_cpu.tree_op),
            nic_steps_ns: steps as f64 * ns(profile.nic_cpu.relay_step.by_code(alg.code())),
        };
    }
    Ok(out)
}

/// The links a message from `src` to `dst` crosses, as link ids in the
/// fabric's numbering (`Layout::links`).
fn path(layout: &Layout, links: &[(LinkEnd, LinkEnd)], src: usize, dst: usize) -> Vec<usize> {
    let find = |from: LinkEnd| links.iter().position(|&(f, _)| f == from);
    let mut out = Vec::new();
    let Some(mut at) = find(LinkEnd::Nic(src)) else { return out };
    out.push(at);
    for port in layout.route_ports(src, dst) {
        let LinkEnd::Switch { switch, .. } = links[at].1 else { break };
        match find(LinkEnd::Switch { switch, port }) {
            Some(next) => {
                out.push(next);
                at = next;
            }
            None => break,
        }
    }
    out
}

/// Link visits of one multicast over the distinct links it uses: every
/// edge of the tree is one message along its source route (the root's
/// sends and every relay's); 1.0 when no link carries it twice.
pub fn link_concentration(layout: &Layout, m: &McastSpec) -> f64 {
    let links = layout.links();
    let (alg, g) = (m.alg(), m.size());
    let mut visits = 0usize;
    let mut used = BTreeSet::new();
    for rank in 0..g {
        let from = m.members[rank as usize] as usize;
        for c in children(alg, g, rank) {
            let to = m.members[c.rank as usize] as usize;
            for l in path(layout, &links, from, to) {
                visits += 1;
                used.insert(l);
            }
        }
    }
    if used.is_empty() {
        0.0
    } else {
        round3(visits as f64 / used.len() as f64)
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The most packets of each multicast that were in the fabric at once,
/// from the sim's spans (a packet leaving as another enters at the same
/// instant does not overlap it), into each multicast flow's ledger.
pub fn count_in_flight(l: &mut Ledger, spans: &[McastSpan]) {
    let mut edges: BTreeMap<(u16, u32), Vec<(u64, i32)>> = BTreeMap::new();
    for s in spans {
        let e = edges.entry((s.group, s.mseq)).or_default();
        e.push((s.start_ns, 1));
        e.push((s.end_ns, -1));
    }
    for ((group, _), mut e) in edges {
        e.sort_unstable();
        let (mut now, mut most) = (0i32, 0i32);
        for (_, d) in e {
            now += d;
            most = most.max(now);
        }
        let Some(&flow) = l.groups.get(&group) else { continue };
        if let Some(m) = l.flows[flow].mcast.as_mut() {
            m.in_flight_most.push(most.max(0) as u64);
        }
    }
}

/// Nearest-rank median of `v` (sorted in place); None when empty.
fn median<T: Copy + PartialOrd>(v: &mut [T]) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Some(v[v.len().div_ceil(2) - 1])
}

/// The layout of the scenario's fabric (for link figures).
pub fn layout(v: &Validated, topology: Topology, profile: &Profile) -> Option<Layout> {
    topology.layout(v.nodes, profile.switch.ports as usize).ok()
}

/// The `multicast` object of a multicast flow's report. `sim` says
/// whether the figures priced at the profile's costs (host busy clock,
/// tree work in ns) mean anything: only in virtual time.
pub fn report(f: &FlowLedger, layout: Option<&Layout>, sim: bool) -> Option<McastReport> {
    let (spec, l) = (f.spec.mcast.as_ref()?, f.mcast.as_ref()?);
    let alg = spec.alg();
    let mut cpu = l.root_cpu_ns.clone();
    let mut util = l.root_cpu_util.clone();
    let mut tree = l.tree_ns.clone();
    let mut kids = l.tree_children.clone();
    let mut flight = l.in_flight_most.clone();
    let lat: Vec<u64> = l.timed.iter().map(|&(lat, _)| lat).collect();
    let below = l.timed.iter().filter(|&&(lat, cpu)| cpu.is_some_and(|c| lat < c)).count() as u64;
    Some(McastReport {
        scheme: spec.scheme.name().to_string(),
        algorithm: alg.name().to_string(),
        k: match alg {
            Algorithm::KBinomial { k } => Some(k),
            _ => None,
        },
        requested: spec.choice.as_str().to_string(),
        group_size: spec.size(),
        group: spec.members.clone(),
        deliveries: l.deliveries,
        relays_deepest: relays_on_deepest_path(alg, spec.size()),
        latency_ns: MeanSpread::of(&lat),
        root_cpu_ns: if sim { P50Max::of(&mut cpu) } else { None },
        below_root_cpu: if sim { Some(below) } else { None },
        root_cpu_util: if sim { median(&mut util).map(round3) } else { None },
        tree_ns: if sim { median(&mut tree).map(|p50| P50 { p50 }) } else { None },
        tree_children: median(&mut kids).map(|p50| P50 { p50 }),
        link_concentration: layout.map(|lay| link_concentration(lay, spec)),
        link_concurrency: if sim { P50Max::of(&mut flight) } else { None },
    })
}

/// Member receptions a scenario's multicast flows make (for progress).
pub fn receptions(f: &FlowSpec) -> u64 {
    f.mcast.as_ref().map_or(0, |m| f.messages * (m.size() as u64 - 1))
}

#[cfg(test)]
mod tests {
    use super::super::format::Scenario;
    use super::*;

    fn spec(nodes: u64, alg: &str, topology: &str) -> (Layout, McastSpec) {
        let v = Scenario::parse_validated(&format!(
            "profile = \"x\"\n[fabric]\nnodes = {nodes}\ntopology = \"{topology}\"\n[[flows]]\n\
             src = [0, 1]\nkind = \"multicast\"\ngroup_size = {nodes}\nscheme = \"nic\"\n\
             algorithm = \"{alg}\"\nbytes = 8\nmessages = 1\n"
        ))
        .unwrap();
        let t: Topology = topology.parse().unwrap();
        (t.layout(nodes as usize, 16).unwrap(), v.flows[0].mcast.clone().unwrap())
    }

    #[test]
    fn a_separate_tree_on_a_star_sends_every_message_down_the_root_s_link() {
        // 7 edges of 2 links; distinct: the root's link out and 7 links in.
        let (lay, m) = spec(8, "separate", "star");
        assert_eq!(link_concentration(&lay, &m), 1.75);
        // Binomial over 8: senders 0 (3 times), 4 (twice), 2 and 6; 11 links.
        let (lay, m) = spec(8, "binomial", "star");
        assert_eq!(link_concentration(&lay, &m), round3(14.0 / 11.0));
        // A chain uses every link once.
        let (lay, m) = spec(8, "serial", "star");
        assert_eq!(link_concentration(&lay, &m), 1.0);
    }

    #[test]
    fn paths_cross_the_trunk_on_two_switches() {
        let (lay, _) = spec(4, "serial", "two-switch");
        let links = lay.links();
        let p = path(&lay, &links, 0, 3);
        assert_eq!(p.len(), 3, "NIC -> switch, trunk, switch -> NIC: {p:?}");
        assert_eq!(links[p[0]].0, LinkEnd::Nic(0));
        assert_eq!(links[p[2]].1, LinkEnd::Nic(3));
    }
}
