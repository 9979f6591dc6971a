//! What every backend derives from a cluster configuration before it
//! builds anything: the profile and faults checked, the topology laid out,
//! the firmware's send timeout and every node's source routes
//! ([`plan`]), and the error a configuration is refused with
//! ([`EmuError`]). The sim (`nic-sim`) and the real-time device process
//! (`nic-cluster`) both start from it, so both write the same registers and
//! routes. Owns nothing; pure.

use std::fmt;

use nic_abi::MAX_NODES;
use nic_device::faults::Faults;
use nic_device::profile::{Profile, ProfileError};

use crate::topology::{Layout, Topology, NARROW_PORTS};

/// Why a cluster could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmuError {
    Profile(ProfileError),
    /// The configuration is inconsistent (the message names the field).
    Config(String),
    /// The firmware refused to start on a node.
    FirmwareHalted {
        node: usize,
        message: String,
    },
}

impl fmt::Display for EmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmuError::Profile(e) => e.fmt(f),
            EmuError::Config(m) => f.write_str(m),
            EmuError::FirmwareHalted { node, message } => {
                write!(f, "firmware on node {node} halted at boot: {message}")
            }
        }
    }
}

impl std::error::Error for EmuError {}

impl From<ProfileError> for EmuError {
    fn from(e: ProfileError) -> EmuError {
        EmuError::Profile(e)
    }
}

/// What every backend derives from a cluster configuration: the wiring,
/// the firmware's send timeout and every node's route table.
pub struct Plan {
    pub layout: Layout,
    pub send_timeout_ns: u64,
    /// `routes[src][dst]`: the source route from `src` to `dst`.
    pub routes: Vec<Vec<Vec<u8>>>,
}

/// Check a configuration and plan the cluster (the sim and the real-time
/// backends share it, so both write the same registers and routes).
/// Switches of more than `topology::NARROW_PORTS` ports, whose hops take
/// two route bytes, are refused: the real-time fabric reads one byte a
/// hop. The sim plans with [`plan_sim`].
pub fn plan(
    p: &Profile,
    nodes: usize,
    topology: Topology,
    faults: &Faults,
    send_timeout_us: Option<f64>,
) -> Result<Plan, EmuError> {
    if p.switch.ports as usize > NARROW_PORTS {
        return Err(EmuError::Config(format!(
            "switch.ports: {}-port switches take two route bytes a hop, which only the sim's \
             fabric reads (at most {NARROW_PORTS} ports here)",
            p.switch.ports
        )));
    }
    plan_sim(p, nodes, topology, faults, send_timeout_us)
}

/// [`plan`] for the sim, whose fabric also reads the two route bytes a
/// hop of switches of more than `topology::NARROW_PORTS` ports.
pub fn plan_sim(
    p: &Profile,
    nodes: usize,
    topology: Topology,
    faults: &Faults,
    send_timeout_us: Option<f64>,
) -> Result<Plan, EmuError> {
    p.validate().map_err(|m| {
        EmuError::Profile(ProfileError::Invalid { origin: p.name.clone(), message: m })
    })?;
    faults.validate().map_err(EmuError::Config)?;
    if nodes > MAX_NODES {
        return Err(EmuError::Config(format!("nodes: {nodes} is more than the ABI's {MAX_NODES}")));
    }
    let layout = topology.layout(nodes, p.switch.ports as usize).map_err(EmuError::Config)?;
    let send_timeout_ns = send_timeout_ns(p, send_timeout_us).map_err(EmuError::Config)?;
    let routes: Vec<Vec<Vec<u8>>> =
        (0..nodes).map(|s| (0..nodes).map(|d| layout.route(s, d)).collect()).collect();
    Ok(Plan { layout, send_timeout_ns, routes })
}

/// The send timeout a cluster of profile `p` runs with: `send_timeout_us`
/// when given (10 us to an hour), else the profile's.
pub fn send_timeout_ns(p: &Profile, send_timeout_us: Option<f64>) -> Result<u64, String> {
    match send_timeout_us {
        None => Ok(p.firmware.send_timeout_ns),
        Some(us) => nic_device::profile::send_timeout_us_to_ns("send_timeout_us", us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sim_plans_switches_of_more_than_128_ports() {
        let mut p = Profile::load("modern").unwrap();
        p.switch.ports = 256;
        let e = plan(&p, 200, Topology::Star, &Faults::NONE, None).err().unwrap();
        assert!(e.to_string().contains("256-port switches take two route bytes"), "{e}");
        let sim = plan_sim(&p, 200, Topology::Star, &Faults::NONE, None).ok().unwrap();
        assert_eq!(sim.routes[0][199], vec![0x81, 0x80 | 71]);
        p.switch.ports = 128;
        assert!(plan(&p, 128, Topology::Star, &Faults::NONE, None).is_ok());
    }
}
