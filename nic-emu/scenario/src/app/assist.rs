//! Assisted collective flows in a member's program: as the NIC scheme
//! (one `Port::collective` per collective, which releases step 0), but
//! the NIC stops after each step with an `Event::CollStep`, and the
//! program releases the next step (`Port::collective_step`) until the
//! last ends with `Event::Collective` (coll.rs's `on_collective`).

use host_brm::BrmTransport;
use host_driver::collective::Collective;
use host_driver::DmaBuf;

use super::super::coll::CollScheme;
use super::coll::CollCtx;
use super::{NodeApp, NodeHost};

/// Collective `k` of member context `c`, its vector `data`, as the NIC
/// and assisted schemes post it (and release its steps).
pub(super) fn request<'a>(c: &'a CollCtx, data: &'a DmaBuf, k: u64) -> Collective<'a> {
    Collective {
        group: &c.group,
        kind: c.spec.kind,
        algorithm: Some(c.alg),
        op: c.spec.op,
        dtype: c.spec.dtype,
        root: c.spec.root,
        data: c.spec.kind.has_data().then_some(data),
        result: None,
        tag: k,
        assisted: c.spec.scheme == CollScheme::Assisted && c.spec.mcast.is_none(),
    }
}

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// An assisted collective's step is done at this member's NIC:
    /// release the next.
    pub(super) fn on_coll_step(&mut self, pi: usize, group: u16, cseq: u32, step: u16) {
        let found = self.colls.iter().position(|c| {
            c.port == pi && c.group.id() == group && c.running.map(|r| r.0) == Some(cseq as u64)
        });
        let Some(ci) = found else {
            self.problem(format!("group {group}: step {step} of collective {cseq}, not running"));
            return;
        };
        self.colls[ci].release = Some(step + 1);
        self.assist_release(ci);
    }

    /// Post the step release `ci` owes (again later when the ring is
    /// full).
    pub(super) fn assist_release(&mut self, ci: usize) {
        let c = &self.colls[ci];
        let (Some(step), Some((k, _))) = (c.release, c.running) else { return };
        let data = c.data.sub(0, c.spec.bytes() as u64).unwrap_or(c.data);
        let req = request(c, &data, k);
        match self.ports[c.port].port.collective_step(&req, k as u32, step) {
            Ok(()) => self.colls[ci].release = None,
            Err(host_driver::DriverError::RingFull) => {}
            Err(e) => {
                let m = format!("flow {}: collective {k}, step {step}: {e}", c.flow);
                self.colls[ci].release = None;
                self.problem(m);
            }
        }
    }
}
