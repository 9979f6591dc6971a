//! Feature `check-gating`: a check that the summary of news never hides
//! work. Each pass the core would end early (no news; or only
//! completions that gave no machine work) runs whole instead, and must
//! find nothing to do and leave the next deadline as it was. On in this
//! crate's tests and in the simulator's (the scenario crate's); without
//! the feature only `check_gating_here` remains, and does nothing.

#[cfg(any(test, feature = "check-gating"))]
use crate::{hw::Hw, Mcp, Work, NEWS};

/// Feature `check-gating`: check, on this thread, the passes the summary
/// skips (`Mcp::poll`: each runs whole and must find nothing). Only a
/// deterministic backend can check: on the real-time ones the host writes
/// beside the pass, before the device counts the write, so a whole pass
/// may find what the next one would have been told of. The simulator
/// turns it on for its thread (this crate's tests have it from the
/// start); without the feature this does nothing.
pub fn check_gating_here(_on: bool) {
    #[cfg(any(test, feature = "check-gating"))]
    GATING_CHECKED.with(|c| c.set(_on));
}

#[cfg(any(test, feature = "check-gating"))]
std::thread_local! {
    pub(crate) static GATING_CHECKED: core::cell::Cell<bool> = const { core::cell::Cell::new(cfg!(test)) };
}

#[cfg(any(test, feature = "check-gating"))]
impl Mcp {
    /// Feature `check-gating` (and this crate's tests): a pass that would
    /// end at the summary runs whole instead, and must find no work and
    /// leave the next deadline as it was; else the gating hid work, and
    /// this panics with what the pass found.
    pub(crate) fn check_gating(&mut self, hw: &mut impl Hw, now: u64) -> Work {
        let (deadline, states, seen) = (self.deadline, self.states(), self.seen);
        let mut w = Work::default();
        // As if every counter had moved: every part of the pass looks.
        self.pass(hw, now, crate::bit::ALL, &mut w);
        // On the real-time backends the host and the device run beside
        // the MCP: what came with news moved after the summary was read
        // is the next pass's, not hidden work.
        let later = NEWS.iter().zip(seen).any(|(&r, s)| hw.reg(r) != s);
        assert!(
            later || (w.is_idle() && deadline == self.deadline),
            "a pass the summary would have skipped at RTC {now} did {w:?}; deadline {deadline:?} \
             -> {:?}; states {states:?} -> {:?}",
            self.deadline,
            self.states()
        );
        w
    }
}
