//! Assisted collectives: the host releases the steps one by one. The
//! descriptor of step 0 begins the run (as any collective's); each next
//! descriptor of the run's group and number releases the step after the
//! last released (`release`). Every chunk goes only through the steps
//! released (run.rs's `step_chunk`; a chunk from a peer for a step not
//! released is held, or refused Busy, as one that comes before its step);
//! when all have gone through them and steps remain, the NIC posts a
//! `CollStep` event and waits (`step_done`). A run waiting for its host
//! waits for no peer: it neither probes nor gives up anyone, and it
//! answers probes Alive as ever.

use super::run::event_of;
use super::{Collective, Intake, Run};
use crate::hw::Hw;
use crate::offload::Services;
use nic_abi::collective::{CollFields, Shape};
use nic_abi::event::{ErrorCause, EventKind};

impl Collective {
    /// Descriptor `f` from port `port` releases step `f.step` (above 0)
    /// of its run: the run of its group and number on that port, assisted, whose last step
    /// released is the one before (its other fields are the run's; the
    /// driver checks them, and that the step is one the member has).
    pub(super) fn release<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        port: u8,
        f: CollFields,
    ) -> Intake {
        if f.cseq <= Self::done(sv.hw, f.group) {
            // It ended here (members missing) before the host heard: no
            // step is left to release.
            return Intake::Taken;
        }
        let run = self.run_of(f.group, f.cseq);
        if !run.is_some_and(|i| Run::release(sv.hw, i, (port, f.step, f.tag))) {
            return Intake::Refused(ErrorCause::BadStep);
        }
        self.progress(sv);
        self.refresh_due(sv.hw);
        Intake::Taken
    }

    /// Has every chunk of assisted run `r` gone through the steps
    /// released, with steps still to come? Then tell the host (once).
    pub(super) fn step_done<H: Hw>(&mut self, sv: &mut Services<'_, H>, r: &mut Run) {
        if !r.f.assisted || r.told || r.failed {
            return;
        }
        let s = r.f.step;
        let all = (0..r.window_len() as usize).all(|w| r.at[w] > s);
        if r.lo > 0 || !all || s as usize + 1 >= steps(&r.shape) {
            return;
        }
        let e = event_of(EventKind::CollStep, &r.f, s as u64);
        match sv.event(r.f.port, &e) {
            true => r.told = true,
            false => self.again = true,
        }
    }
}

/// The steps of an assisted run (the same for every chunk).
#[inline(never)]
fn steps(s: &Shape) -> usize {
    s.steps(0).len()
}
