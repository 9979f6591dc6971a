//! Which emulated NIC a process uses. GM names a board by its unit number
//! on each host; here one machine runs a whole cluster, so the cluster
//! comes from `NIC_CLUSTER` (a name, or a directory) and the node from
//! `NIC_NODE`, else from the rank an MPI launcher gives the process (so
//! that `mpirun -np 4 prog` puts rank r on node r).
//!
//! GM's node ids start at 1 (0 is `GM_NO_SUCH_NODE_ID`): node n of the
//! cluster is GM node id n + 1, and its host name is the cluster's name
//! for it, `node<n>`.

/// The variable that names the cluster.
pub const CLUSTER_VAR: &str = "NIC_CLUSTER";
/// The variable that names the node.
pub const NODE_VAR: &str = "NIC_NODE";
/// The ranks MPI launchers set, looked at in this order when `NIC_NODE`
/// is not set (Open MPI, MPICH's PMI, PMIx).
pub const RANK_VARS: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];

/// The cluster and node a process opens its ports on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub cluster: String,
    pub node: u16,
    /// The variable the node came from.
    pub node_from: &'static str,
}

/// The target as the environment `var` reads it (a function, for tests).
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Target, String> {
    let cluster = match var(CLUSTER_VAR) {
        Some(c) if !c.trim().is_empty() => c,
        Some(_) => return Err(format!("{CLUSTER_VAR} is empty: name a cluster or its directory")),
        None => {
            return Err(format!(
                "{CLUSTER_VAR} is not set: name the cluster this program runs on, e.g. \
                 {CLUSTER_VAR}=nic for the one `cargo xtask run` serves"
            ))
        }
    };
    let from = std::iter::once(NODE_VAR).chain(RANK_VARS).find_map(|v| var(v).map(|x| (v, x)));
    let Some((node_from, text)) = from else {
        return Err(format!(
            "{NODE_VAR} is not set (nor an MPI rank: {}): say which node of cluster `{cluster}` \
             this process runs on, e.g. {NODE_VAR}=0",
            RANK_VARS.join(", ")
        ));
    };
    let node = text.trim().parse::<u16>().map_err(|_| {
        format!("{node_from}={text:?} is not a node number (0, 1, ...) of cluster `{cluster}`")
    })?;
    Ok(Target { cluster, node, node_from })
}

/// GM's node id of cluster node `node`.
pub fn gm_id(node: u16) -> u32 {
    u32::from(node) + 1
}

/// The cluster node of GM node id `id`, if there is one among `nodes`.
pub fn node_of(id: u32, nodes: u32) -> Option<u16> {
    (1..=nodes).contains(&id).then(|| (id - 1) as u16)
}

/// The host name of cluster node `node`.
pub fn host_name(node: u16) -> String {
    format!("node{node}")
}

/// The cluster node a host name names, if it is one of `nodes`.
pub fn node_named(name: &str, nodes: u32) -> Option<u16> {
    let n: u32 = name.strip_prefix("node")?.parse().ok()?;
    // (No leading zeros or signs: "node01" names nothing.)
    (host_name(n as u16) == name && n < nodes).then_some(n as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_node_comes_from_nic_node_before_any_rank() {
        let t = from_env(env(&[("NIC_CLUSTER", "c1"), ("NIC_NODE", "3"), ("PMI_RANK", "1")]));
        assert_eq!(t, Ok(Target { cluster: "c1".into(), node: 3, node_from: "NIC_NODE" }));
        let t = from_env(env(&[("NIC_CLUSTER", "/tmp/c"), ("PMI_RANK", "1")])).unwrap();
        assert_eq!((t.node, t.node_from), (1, "PMI_RANK"));
        let t = from_env(env(&[("NIC_CLUSTER", "c"), ("OMPI_COMM_WORLD_RANK", "2")])).unwrap();
        assert_eq!(t.node, 2);
    }

    #[test]
    fn a_missing_or_wrong_variable_is_named() {
        let e = from_env(env(&[("NIC_NODE", "0")])).unwrap_err();
        assert!(e.starts_with("NIC_CLUSTER is not set"), "{e}");
        let e = from_env(env(&[("NIC_CLUSTER", "c")])).unwrap_err();
        assert!(e.starts_with("NIC_NODE is not set"), "{e}");
        let e = from_env(env(&[("NIC_CLUSTER", "c"), ("NIC_NODE", "x")])).unwrap_err();
        assert!(e.starts_with("NIC_NODE=\"x\" is not a node number"), "{e}");
        let e = from_env(env(&[("NIC_CLUSTER", " "), ("NIC_NODE", "0")])).unwrap_err();
        assert!(e.starts_with("NIC_CLUSTER is empty"), "{e}");
    }

    #[test]
    fn gm_ids_start_at_one_and_names_are_the_nodes() {
        assert_eq!(gm_id(0), 1);
        assert_eq!(node_of(1, 2), Some(0));
        assert_eq!(node_of(2, 2), Some(1));
        assert_eq!(node_of(0, 2), None);
        assert_eq!(node_of(3, 2), None);
        assert_eq!(host_name(1), "node1");
        assert_eq!(node_named("node1", 2), Some(1));
        assert_eq!(node_named("node2", 2), None);
        assert_eq!(node_named("node01", 2), None);
        assert_eq!(node_named("host", 2), None);
    }
}
