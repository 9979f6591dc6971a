//! A scenario's rate control before a run, on any backend: the
//! calibration its keys need (`idt_t` the profile's calibrated T, the
//! bandwidth manager its whole calibration), refused naming the key when
//! the profile has none, and every `idt_t` turned into a raw IDT
//! (round(k x T) RTC ticks). Both runners, the sim's and the real-time
//! one, start with it.

use host_brm::Calibration;
use nic_device::Profile;

use super::format::{FlowSpec, RatePlan, ScenarioError, Validated};

/// The flows as the programs run them (`idt_t` resolved to `Idt`), and
/// whether a flow asks the bandwidth manager (which decides with the same
/// stored calibration).
pub(crate) struct Rates {
    pub flows: Vec<FlowSpec>,
    pub uses_brm: bool,
    /// The calibration the flows needed, if any.
    pub calibration: Option<Calibration>,
}

impl Rates {
    /// Does any flow use rate control or the dispatch trace (so the
    /// programs write the flow table or `DISPATCH_TRACE_ENABLE`)?
    pub fn touches_flow_table(&self) -> bool {
        self.flows.iter().any(|f| f.rate != RatePlan::Unmanaged || f.trace)
    }
}

/// `v`'s rate control under `profile` (see the module doc).
pub(crate) fn resolve(v: &Validated, profile: &Profile) -> Result<Rates, ScenarioError> {
    let err = |m: String| ScenarioError::new(m);
    let mut flows = v.flows.clone();
    let needs_cal = flows.iter().find(|f| matches!(f.rate, RatePlan::IdtT(_)) || f.rate.uses_brm());
    let calibration = match needs_cal {
        None => None,
        Some(f) => {
            let key = match f.rate {
                RatePlan::IdtT(_) => "idt_t",
                RatePlan::Reserve(_) => "rate_mb_s",
                _ => "best_effort",
            };
            match Calibration::for_profile(&v.profile, profile) {
                Ok(Some(c)) => Some(c),
                Ok(None) => {
                    return Err(err(format!(
                        "{}.{key}: profile `{}` has no rate-control calibration (run `cargo \
                         xtask calibrate --profile {}`)",
                        f.label, v.profile, v.profile
                    )))
                }
                Err(e) => return Err(err(format!("{}.{key}: {e}", f.label))),
            }
        }
    };
    for f in &mut flows {
        if let (RatePlan::IdtT(k), Some(c)) = (f.rate, calibration.as_ref()) {
            let idt = (k * c.t_ticks).round();
            if idt > u32::MAX as f64 {
                return Err(err(format!("{}.idt_t: {k} x T is too long an IDT", f.label)));
            }
            f.rate = RatePlan::Idt(idt as u32);
        }
    }
    let uses_brm = flows.iter().any(|f| f.rate.uses_brm());
    Ok(Rates { flows, uses_brm, calibration })
}
