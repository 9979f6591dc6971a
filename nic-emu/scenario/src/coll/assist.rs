//! The assisted scheme of a barrier, reduce or allreduce flow
//! (`scheme = "assisted"`): each member's program posts the collective
//! (step 0) and, on each `Event::CollStep` of its NIC, releases the next
//! step (app/assist.rs); the NIC does the rest of each step. Its
//! algorithms are those whose steps are the same for every chunk: not the
//! ring (`auto` picks among the others), and its vector is at most
//! `MAX_ASSISTED_CHUNKS` chunks. (A broadcast under `assisted` is a
//! NIC-assisted multicast: bcast.rs.)

use nic_abi::collective::{Alg, Kind, CHUNK_MAX, MAX_ASSISTED_CHUNKS};

use super::super::format::ScenarioError;

/// Refuse what the assisted scheme cannot run: the ring, and a vector of
/// `bytes` longer than the NICs take assisted on any fabric (chunks of
/// 4 KiB; a NIC with smaller chunks refuses a longer one when it runs).
pub(super) fn check(
    label: &str,
    kind: Kind,
    requested: Option<Alg>,
    bytes: u64,
) -> Result<(), ScenarioError> {
    if requested == Some(Alg::Ring) {
        let others: Vec<&str> = Alg::ALL
            .iter()
            .filter(|a| a.serves(kind) && **a != Alg::Ring)
            .map(|a| a.name())
            .collect();
        return Err(ScenarioError::new(format!(
            "{label}.algorithm: \"ring\" cannot run assisted: its steps depend on the chunk \
             (assisted, a {} takes {}, auto)",
            kind.name(),
            others.join(", ")
        )));
    }
    let max = (MAX_ASSISTED_CHUNKS * CHUNK_MAX) as u64;
    if bytes > max {
        return Err(ScenarioError::new(format!(
            "{label}.elements: {bytes} bytes, more than an assisted collective takes ({max}: \
             {MAX_ASSISTED_CHUNKS} chunks of up to {CHUNK_MAX} bytes)"
        )));
    }
    Ok(())
}
