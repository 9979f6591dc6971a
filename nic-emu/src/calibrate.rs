//! The sim's calibration programs (`nic_sim::calibrate`: ping-pong
//! latency and stream bandwidth), and the rate-control calibration
//! ([`rate`]), which runs scenarios and fills the bandwidth manager's
//! `Calibration`, so it sits here, above the sim, the scenario runner and
//! the bandwidth manager.

pub use nic_sim::calibrate::*;

/// Rate-control calibration (docs/rate-control.md): T, Bmax and
/// the node-capacity curve of a profile, measured with scenarios on the
/// simulator (so each point can be re-run with `cargo xtask sim`).
///
/// - IDT sweep: one flow of 64 KiB messages, node 0 -> 1, at IDT 0 (Bmax)
///   and at multiples of T0 = MTU / Bmax. Bandwidth stays at Bmax while
///   IDT <= T and falls as T / IDT * Bmax beyond: T is fitted to the
///   points well past the knee (mean of B * IDT / Bmax), and checked
///   against the mean dispatch interval of the unregulated flow (its
///   dispatch trace).
/// - Node capacity: three nodes A -> B -> C. A sends to B at several
///   rates (IDTs), B sends to C unregulated; each point is (what B
///   received, what B sent).
pub mod rate {
    use crate::scenario::{self, Report, Scenario};
    use crate::Profile;
    use host_brm::{Calibration, CurvePoint, SweepPoint};

    /// Bytes of the messages the calibration uses.
    pub const MESSAGE: u64 = 65536;

    /// Multiples of T0 the sweep visits (besides IDT 0).
    pub const SWEEP: [f64; 13] =
        [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0];

    /// Incoming rates of the node-capacity curve, as fractions of Bmax
    /// (0: nothing incoming; 1: A unregulated).
    pub const CURVE: [f64; 9] = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0];

    /// Run scenario text; Err if it did not deliver everything intact.
    pub fn run(text: &str) -> Result<Report, String> {
        let sc = Scenario::parse_validated(text).map_err(|e| format!("{e}\n{text}"))?;
        let r = scenario::run(&sc).map_err(|e| e.to_string())?;
        if !r.all_delivered_intact() {
            return Err(format!(
                "calibration run not clean: {}\n{text}",
                r.summary().lines().last().unwrap_or("")
            ));
        }
        Ok(r)
    }

    /// One flow of `messages` 64 KiB messages at `idt` (None: no flow
    /// entry), node 0 -> 1.
    pub fn one_flow_toml(profile: &str, idt: Option<u32>, messages: u64, trace: bool) -> String {
        let idt = idt.map(|i| format!("idt = {i}\n")).unwrap_or_default();
        format!(
            "profile = \"{profile}\"\n[fabric]\nnodes = 2\n[[flows]]\nname = \"f\"\nsrc = [0, 1]\n\
             dst = [1, 1]\nkind = \"stream\"\nbytes = {MESSAGE}\nmessages = {messages}\n{idt}\
             trace = {trace}\n"
        )
    }

    /// A -> B at `idt` (None: no A -> B flow) and B -> C unregulated, both
    /// for `run_us`.
    pub fn three_node_toml(profile: &str, idt: Option<u32>, run_us: u64) -> String {
        let mut t = format!("profile = \"{profile}\"\n[fabric]\nnodes = 3\n");
        let flow = |name: &str, s: u32, d: u32, idt: Option<u32>| {
            format!(
                "[[flows]]\nname = \"{name}\"\nsrc = [{s}, 1]\ndst = [{d}, 1]\nkind = \"stream\"\n\
                 bytes = {MESSAGE}\nmessages = 1000000\nstop_us = {run_us}\n{}",
                idt.map(|i| format!("idt = {i}\n")).unwrap_or_default()
            )
        };
        if let Some(i) = idt {
            t += &flow("a-b", 0, 1, Some(i));
        }
        t += &flow("b-c", 1, 2, None);
        t
    }

    /// Sort by incoming rate, merge points less than 0.5 MB/s apart (A
    /// could not reach its rate while B sent unregulated: several IDTs
    /// end at one point), and make the most B sends non-increasing in
    /// what it receives.
    pub fn monotone(mut curve: Vec<CurvePoint>) -> Vec<CurvePoint> {
        curve.sort_by(|a, b| a.in_mb_s.total_cmp(&b.in_mb_s));
        let mut out: Vec<(CurvePoint, u32)> = Vec::new();
        for p in curve {
            match out.last_mut() {
                Some((q, n)) if p.in_mb_s - q.in_mb_s < 0.5 => {
                    let k = *n as f64;
                    q.in_mb_s = (q.in_mb_s * k + p.in_mb_s) / (k + 1.0);
                    q.out_mb_s = (q.out_mb_s * k + p.out_mb_s) / (k + 1.0);
                    *n += 1;
                }
                _ => out.push((p, 1)),
            }
        }
        let mut v: Vec<CurvePoint> = out.into_iter().map(|(p, _)| p).collect();
        for i in 1..v.len() {
            v[i].out_mb_s = v[i].out_mb_s.min(v[i - 1].out_mb_s);
        }
        v
    }

    /// What the calibration measured, with a log of every point.
    pub struct Measured {
        pub cal: Calibration,
        /// Unregulated and A -> B unregulated details for the log.
        pub log: Vec<String>,
    }

    /// Measure `profile` (built-in name or file). `quick`: fewer messages
    /// per point (rougher numbers, a few times faster).
    pub fn measure(profile: &str, quick: bool) -> Result<Measured, String> {
        let p = Profile::load(profile).map_err(|e| e.to_string())?;
        let messages: u64 = if quick { 60 } else { 200 };
        let mut log = Vec::new();
        // Bmax, and the dispatch interval, from the unregulated flow.
        let r = run(&one_flow_toml(profile, None, messages, true))?;
        let f = &r.flows[0];
        let bmax = f.bandwidth_mb_s;
        let ticks = f.dispatch_ticks.clone().unwrap_or_default();
        let skip = ticks.len() / 10;
        let iv: Vec<u64> = ticks[skip..].windows(2).map(|w| w[1] - w[0]).collect();
        let dispatch_interval =
            if iv.is_empty() { 0.0 } else { iv.iter().sum::<u64>() as f64 / iv.len() as f64 };
        let t0 = p.nic.mtu as f64 * p.nic.rtc_hz as f64 / (bmax * 1e6);
        log.push(format!(
            "unregulated: {bmax:.2} MB/s, mean dispatch interval {dispatch_interval:.2} ticks, \
             MTU / Bmax = {t0:.2} ticks"
        ));
        let mut sweep = vec![SweepPoint { idt: 0, mb_s: bmax }];
        for k in SWEEP {
            let idt = (k * t0).round().max(1.0) as u32;
            // Fewer messages at low rates keep the virtual time bounded.
            let m = if k > 2.0 { messages / 2 } else { messages };
            let r = run(&one_flow_toml(profile, Some(idt), m, false))?;
            sweep.push(SweepPoint { idt, mb_s: r.flows[0].bandwidth_mb_s });
        }
        // T from the points past the knee: B = T / IDT * Bmax.
        let past: Vec<f64> = sweep
            .iter()
            .filter(|s| s.idt as f64 >= 1.5 * t0)
            .map(|s| s.mb_s * s.idt as f64 / bmax)
            .collect();
        let t = if past.is_empty() { t0 } else { past.iter().sum::<f64>() / past.len() as f64 };
        // The node-capacity curve.
        let run_us: u64 = if quick { 60_000 } else { 150_000 };
        let mut curve = Vec::new();
        for frac in CURVE {
            let idt = if frac == 0.0 {
                None
            } else if frac >= 1.0 {
                Some(0)
            } else {
                Some((t * bmax / (frac * bmax)).round() as u32)
            };
            let r = run(&three_node_toml(profile, idt, run_us))?;
            let out = r.flows.iter().find(|f| f.name == "b-c").map_or(0.0, |f| f.bandwidth_mb_s);
            let inn = r.flows.iter().find(|f| f.name == "a-b").map_or(0.0, |f| f.bandwidth_mb_s);
            curve.push(CurvePoint { in_mb_s: inn, out_mb_s: out });
        }
        // Past the last point (A cannot get more into B while B sends
        // unregulated) the curve goes on along its last segment, up to
        // what B receives at most (Bmax: `Calibration::in_capacity`).
        let curve = monotone(curve);
        // A link carries MTU payload per MTU + header + one route byte.
        let wire = p.nic.mtu as f64 + nic_abi::packet::HEADER_LEN as f64 + 1.0;
        let link = p.link.bandwidth_bytes_per_s as f64 * p.nic.mtu as f64 / wire / 1e6;
        let round = |x: f64, d: i32| (x * 10f64.powi(d)).round() / 10f64.powi(d);
        Ok(Measured {
            cal: Calibration {
                profile: p.name.clone(),
                rtc_hz: p.nic.rtc_hz,
                mtu: p.nic.mtu,
                t_ticks: round(t, 3),
                bmax_mb_s: round(bmax, 3),
                dispatch_interval_ticks: round(dispatch_interval, 3),
                link_mb_s: round(link, 3),
                sweep,
                node_curve: curve
                    .into_iter()
                    .map(|c| CurvePoint {
                        in_mb_s: round(c.in_mb_s, 3),
                        out_mb_s: round(c.out_mb_s, 3),
                    })
                    .collect(),
            },
            log,
        })
    }
}
