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

use crate::topology::{Layout, Topology};

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
pub fn plan(
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
    let send_timeout_ns = match send_timeout_us {
        None => p.firmware.send_timeout_ns,
        Some(us) if us.is_finite() && us > 0.0 => ((us * 1e3).round() as u64).max(1),
        Some(us) => {
            return Err(EmuError::Config(format!(
                "send_timeout_us: {us} must be a positive number"
            )))
        }
    };
    let routes: Vec<Vec<Vec<u8>>> =
        (0..nodes).map(|s| (0..nodes).map(|d| layout.route(s, d)).collect()).collect();
    Ok(Plan { layout, send_timeout_ns, routes })
}
