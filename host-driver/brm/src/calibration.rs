//! The rate-control calibration of a timing profile: T (RTC ticks: the
//! per-packet service time of an unregulated flow of MTU packets), Bmax
//! (MB/s, 10^6 B/s of payload: the bandwidth it reaches), the payload
//! capacity of a link, and the node-capacity curve (the most a node can
//! send while it receives at a given rate). `cargo xtask calibrate
//! --profile P` measures them (`crate::calibrate::rate`) and writes them
//! next to the profile.
//!
//! Where they live: `nic-emu/profiles/<name>.calibration.toml` beside the
//! built-in profile `<name>.toml` (embedded in the binary, like the
//! profiles), or for a profile given as a file `dir/x.toml`, the file
//! `dir/x.calibration.toml`. A separate file, because profiles refuse
//! unknown keys and are written by hand, while this one is written by a
//! program.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use nic_device::profile::Profile;

/// Built-in calibrations, embedded (name, text).
const BUILTIN: [(&str, &str); 3] = [
    ("lanai4-gm", include_str!("../../../nic-emu/profiles/lanai4-gm.calibration.toml")),
    ("lanai9-gm", include_str!("../../../nic-emu/profiles/lanai9-gm.calibration.toml")),
    ("modern", include_str!("../../../nic-emu/profiles/modern.calibration.toml")),
];

/// One point of the IDT sweep: one flow of 64 KiB messages at `idt`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub idt: u32,
    pub mb_s: f64,
}

/// One point of the node-capacity curve: while node B receives `in_mb_s`
/// (from A), it sends at most `out_mb_s` (to C).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub in_mb_s: f64,
    pub out_mb_s: f64,
}

/// A profile's rate-control calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The profile it was measured on.
    pub profile: String,
    /// RTC ticks per second and payload bytes per packet of that profile.
    pub rtc_hz: u64,
    pub mtu: u32,
    /// T: per-packet service time of an unregulated flow, RTC ticks.
    pub t_ticks: f64,
    /// Bmax: bandwidth of an unregulated 64 KiB-message flow, MB/s.
    pub bmax_mb_s: f64,
    /// Mean time between two dispatches of the unregulated flow (from the
    /// dispatch trace), RTC ticks: a second look at T.
    #[serde(default)]
    pub dispatch_interval_ticks: f64,
    /// Payload a link carries at most with MTU packets, MB/s.
    pub link_mb_s: f64,
    /// The IDT sweep T and Bmax come from.
    #[serde(default)]
    pub sweep: Vec<SweepPoint>,
    /// The node-capacity curve, by increasing `in_mb_s`.
    pub node_curve: Vec<CurvePoint>,
}

impl Calibration {
    /// Largest calibration file read (a few hundred bytes is usual).
    pub const MAX_FILE: u64 = 1 << 20;

    /// Read and parse the calibration file `path` (at most [`Self::MAX_FILE`]
    /// bytes: a device or a huge file is refused, not read to the end).
    pub fn read_file(path: &Path) -> Result<Calibration, String> {
        let origin = path.display().to_string();
        let text = nic_device::profile::read_text(path, Self::MAX_FILE)
            .map_err(|e| format!("{origin}: {e}"))?;
        Calibration::from_toml(&text, &origin)
    }

    /// Parse calibration text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Calibration, String> {
        let c: Calibration =
            toml::from_str(text).map_err(|e| format!("calibration {origin}: {e}"))?;
        c.validate().map_err(|e| format!("calibration {origin}: {e}"))?;
        Ok(c)
    }

    pub fn to_toml(&self) -> String {
        let head = format!(
            "# Rate-control calibration of profile `{}`, written by `cargo xtask calibrate \
             --profile {}`\n# (nic_emu::calibrate::rate); loaded with the profile by \
             nic_emu::brm::Calibration::for_profile.\n# t_ticks: T, the per-packet service \
             time of an unregulated flow of MTU packets (RTC ticks);\n# bmax_mb_s: Bmax, its \
             bandwidth with 64 KiB messages (10^6 B/s); node_curve: the most a node sends\n# \
             while it receives in_mb_s (three nodes A -> B -> C).\n",
            self.profile, self.profile
        );
        head + &toml::to_string(self).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), String> {
        let pos = |k: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{k}: {v} must be a positive number"))
            }
        };
        pos("t_ticks", self.t_ticks)?;
        pos("bmax_mb_s", self.bmax_mb_s)?;
        pos("link_mb_s", self.link_mb_s)?;
        if self.rtc_hz == 0 || self.mtu == 0 {
            return Err("rtc_hz and mtu must be positive".into());
        }
        if self.node_curve.is_empty() {
            return Err("node_curve: needs at least one point".into());
        }
        for w in self.node_curve.windows(2) {
            if w[1].in_mb_s < w[0].in_mb_s {
                return Err("node_curve: points must be by increasing in_mb_s".into());
            }
        }
        for p in &self.node_curve {
            if !(p.in_mb_s >= 0.0 && p.out_mb_s >= 0.0) {
                return Err(format!("node_curve: bad point {p:?}"));
            }
        }
        Ok(())
    }

    /// The calibration file that goes with a profile name or path.
    pub fn path_for(profile: &str) -> PathBuf {
        if Profile::names().contains(&profile) {
            // The timing profiles' directory (nic-device embeds the
            // profiles from there).
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../nic-emu/profiles")
                .join(format!("{profile}.calibration.toml"))
        } else {
            let p = Path::new(profile);
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            p.with_file_name(format!("{stem}.calibration.toml"))
        }
    }

    /// The calibration of a profile (built-in name or file path), if it
    /// has been measured. Err: the file exists but is bad, or was measured
    /// on a profile with another clock or MTU.
    pub fn for_profile(profile: &str, p: &Profile) -> Result<Option<Calibration>, String> {
        let text = match BUILTIN.iter().find(|(n, _)| *n == profile) {
            Some((_, t)) => Some(t.to_string()),
            None => {
                let path = Self::path_for(profile);
                match nic_device::profile::read_text(&path, Self::MAX_FILE) {
                    Ok(t) => Some(t),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(format!("{}: {e}", path.display())),
                }
            }
        };
        let Some(text) = text else { return Ok(None) };
        if text.trim().is_empty() {
            return Ok(None);
        }
        let c = Calibration::from_toml(&text, profile)?;
        if c.rtc_hz != p.nic.rtc_hz || c.mtu != p.nic.mtu {
            return Err(format!(
                "calibration of `{profile}` was measured with rtc_hz {} and mtu {}, the profile \
                 has {} and {}: run `cargo xtask calibrate --profile {profile}` again",
                c.rtc_hz, c.mtu, p.nic.rtc_hz, p.nic.mtu
            ));
        }
        Ok(Some(c))
    }

    /// T * Bmax: the IDT for 1 MB/s (ticks x MB/s).
    pub fn t_bmax(&self) -> f64 {
        self.t_ticks * self.bmax_mb_s
    }

    /// The IDT that gives `mb_s`: T * Bmax / B, rounded up (never faster
    /// than asked), at least 1.
    pub fn idt_for(&self, mb_s: f64) -> u32 {
        if mb_s.is_nan() || mb_s <= 0.0 {
            return MAX_IDT;
        }
        (self.t_bmax() / mb_s).ceil().clamp(1.0, MAX_IDT as f64) as u32
    }

    /// The bandwidth an IDT gives a backlogged flow: Bmax while IDT <= T,
    /// T / IDT * Bmax beyond.
    pub fn mb_s_for(&self, idt: u32) -> f64 {
        if (idt as f64) <= self.t_ticks {
            self.bmax_mb_s
        } else {
            self.t_bmax() / idt as f64
        }
    }

    /// The most a node sends while it receives `in_mb_s`: the curve,
    /// interpolated, extended past its last point along its last segment.
    pub fn out_capacity(&self, in_mb_s: f64) -> f64 {
        let c = &self.node_curve;
        if c.len() == 1 || in_mb_s <= c[0].in_mb_s {
            return if c.len() == 1 { (c[0].out_mb_s - in_mb_s).max(0.0) } else { c[0].out_mb_s };
        }
        let seg = c.windows(2).find(|w| in_mb_s <= w[1].in_mb_s).unwrap_or(&c[c.len() - 2..]);
        let (a, b) = (seg[0], seg[1]);
        let dx = b.in_mb_s - a.in_mb_s;
        if dx <= 0.0 {
            return b.out_mb_s.max(0.0);
        }
        (a.out_mb_s + (b.out_mb_s - a.out_mb_s) * (in_mb_s - a.in_mb_s) / dx).max(0.0)
    }

    /// The most a node receives: what the fastest sender gives (Bmax), or
    /// the curve's last measured incoming rate if higher.
    pub fn in_capacity(&self) -> f64 {
        self.node_curve.last().map_or(self.bmax_mb_s, |p| p.in_mb_s.max(self.bmax_mb_s))
    }

    /// May a node receive `in_mb_s` and send `out_mb_s` at once?
    pub fn node_admits(&self, in_mb_s: f64, out_mb_s: f64) -> bool {
        in_mb_s <= self.in_capacity() + EPS && out_mb_s <= self.out_capacity(in_mb_s) + EPS
    }
}

/// Largest IDT the BRM installs (a flow that gets nothing still trickles).
pub const MAX_IDT: u32 = 1 << 24;

/// Slack of the admission comparisons (MB/s).
pub const EPS: f64 = 1e-6;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_calibration_file_that_is_a_device_is_refused_unread() {
        let e = Calibration::read_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero") && e.contains("not a regular file (a device)"), "{e}");
        let e = Calibration::read_file(Path::new("/nonexistent/cal.toml")).unwrap_err();
        assert!(e.contains("/nonexistent/cal.toml"), "{e}");
    }

    /// A calibration for tests: T = 100 ticks, Bmax 82 MB/s, a node curve
    /// of three points.
    pub(crate) fn sample() -> Calibration {
        Calibration {
            profile: "x".into(),
            rtc_hz: 2_000_000,
            mtu: 4096,
            t_ticks: 100.0,
            bmax_mb_s: 82.0,
            dispatch_interval_ticks: 100.0,
            link_mb_s: 158.0,
            sweep: vec![],
            node_curve: vec![
                CurvePoint { in_mb_s: 0.0, out_mb_s: 82.0 },
                CurvePoint { in_mb_s: 40.0, out_mb_s: 42.0 },
                CurvePoint { in_mb_s: 80.0, out_mb_s: 4.0 },
            ],
        }
    }

    #[test]
    fn idt_is_t_times_bmax_over_the_request() {
        let c = sample();
        assert_eq!(c.idt_for(82.0), 100);
        assert_eq!(c.idt_for(41.0), 200);
        assert_eq!(c.idt_for(40.0), 205);
        assert_eq!(c.mb_s_for(50), 82.0);
        assert_eq!(c.mb_s_for(200), 41.0);
    }

    #[test]
    fn the_node_curve_interpolates_and_extends() {
        let c = sample();
        assert_eq!(c.out_capacity(0.0), 82.0);
        assert_eq!(c.out_capacity(20.0), 62.0);
        assert!((c.out_capacity(60.0) - 23.0).abs() < 1e-9);
        assert_eq!(c.out_capacity(200.0), 0.0);
        assert!(c.node_admits(40.0, 42.0));
        assert!(!c.node_admits(40.0, 43.0));
        assert!(!c.node_admits(90.0, 0.0));
    }

    #[test]
    fn calibration_text_round_trips_and_refuses_nonsense() {
        let c = sample();
        assert_eq!(Calibration::from_toml(&c.to_toml(), "t").unwrap(), c);
        let bad = c.to_toml().replace("t_ticks = 100.0", "t_ticks = -1.0");
        assert!(Calibration::from_toml(&bad, "t").unwrap_err().contains("t_ticks"));
    }

    #[test]
    fn builtin_profiles_find_their_files() {
        assert!(Calibration::path_for("lanai4-gm").ends_with("profiles/lanai4-gm.calibration.toml"));
        assert_eq!(
            Calibration::path_for("/tmp/p/my.toml"),
            PathBuf::from("/tmp/p/my.calibration.toml")
        );
    }
}
