//! The firmware cost table: instructions the MCP image runs per unit of
//! the work its passes report (`mcp::Work`), as `cargo xtask calibrate
//! firmware` measured them on the image under QEMU with exact counting
//! and wrote them into `nic-emu/profiles/firmware-costs.toml`. A profile
//! with `[nic_cpu] pricing = "firmware"` prices each pass from this
//! table: instructions x `nic_cpu.cycles_per_instruction` cycles at
//! `nic.cpu_hz`.
//!
//! The table is embedded in the build ([`FirmwareCosts::builtin`]), so a
//! simulation needs no file at run time; `[nic_cpu] firmware_costs`
//! names another one. Besides the prices, the table keeps what the image
//! counted per workload when it was made (`[workloads.<name>]`), which
//! the tests compare the simulator against.
//!
//! This module owns the table's shape, its parsing and validation, and
//! the order of the work items ([`ITEMS`]); it touches nothing else.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::firmware::Work;
use crate::profile::Short;

/// The table as built in.
pub const BUILTIN_TEXT: &str = include_str!("../../profiles/firmware-costs.toml");

/// Where the built-in table lives in the repository (for messages).
pub const BUILTIN_PATH: &str = "nic-emu/profiles/firmware-costs.toml";

/// The command that measures the image and writes the table.
pub const REFRESH_COMMAND: &str = "cargo xtask calibrate firmware";

/// Largest instruction count a table may give one work item.
const MAX_INSTRUCTIONS: f64 = 1e9;

/// The priced work items, in the order of [`Instructions::to_array`]:
/// (table key, `mcp::Work` field, element of an array field). The work
/// items first, in `mcp::Work`'s order; the fixed parts of a pass
/// (`idle_pass`, `busy_pass`, no work field) last.
pub const ITEMS: [(&str, &str, Option<usize>); 24] = [
    ("descriptor", "descriptors", None),
    ("tx_packet", "tx_packets", None),
    ("rx_packet", "rx_packets", None),
    ("dma_cmd", "dma_cmds", None),
    ("event", "events", None),
    ("timer", "timers", None),
    ("flow_op", "flow_ops", None),
    ("tree_op", "tree_ops", None),
    ("relay_step.separate", "relay_steps", Some(0)),
    ("relay_step.serial", "relay_steps", Some(1)),
    ("relay_step.binomial", "relay_steps", Some(2)),
    ("relay_step.binary", "relay_steps", Some(3)),
    ("mcast_packet", "mcast_packets", None),
    ("mcast_further.separate", "mcast_further", Some(0)),
    ("mcast_further.serial", "mcast_further", Some(1)),
    ("mcast_further.binomial", "mcast_further", Some(2)),
    ("mcast_further.binary", "mcast_further", Some(3)),
    ("mcast_rx_packet", "mcast_rx_packets", None),
    ("mcast_desc", "mcast_descs", None),
    ("mcast_delivery", "mcast_deliveries", None),
    ("coll_element", "coll_elements", None),
    ("coll_float_element", "coll_float_elements", None),
    ("idle_pass", "", None),
    ("busy_pass", "", None),
];

/// Work items (the entries of [`ITEMS`] that count `mcp::Work`).
pub const WORK_ITEMS: usize = 22;

/// A work sum's counts in the order of [`ITEMS`] (the fixed parts 0).
pub fn counts(w: &Work) -> [u64; WORK_ITEMS] {
    let s = |a: [u16; 4], i: usize| a[i] as u64;
    [
        w.descriptors as u64,
        w.tx_packets as u64,
        w.rx_packets as u64,
        w.dma_cmds as u64,
        w.events as u64,
        w.timers as u64,
        w.flow_ops as u64,
        w.tree_ops as u64,
        s(w.relay_steps, 0),
        s(w.relay_steps, 1),
        s(w.relay_steps, 2),
        s(w.relay_steps, 3),
        w.mcast_packets as u64,
        s(w.mcast_further, 0),
        s(w.mcast_further, 1),
        s(w.mcast_further, 2),
        s(w.mcast_further, 3),
        w.mcast_rx_packets as u64,
        w.mcast_descs as u64,
        w.mcast_deliveries as u64,
        w.coll_elements as u64,
        w.coll_float_elements as u64,
    ]
}

/// Instructions for each multicast algorithm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerAlgorithm {
    pub separate: f64,
    pub serial: f64,
    pub binomial: f64,
    pub binary: f64,
}

/// Instructions per unit of work (each key as in [`ITEMS`]), and the
/// fixed parts of a pass: `idle_pass`, what every pass costs (a pass that
/// finds nothing to do), and `busy_pass`, what a pass that does work costs
/// beyond it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instructions {
    pub idle_pass: f64,
    pub busy_pass: f64,
    pub descriptor: f64,
    pub tx_packet: f64,
    pub rx_packet: f64,
    pub dma_cmd: f64,
    pub event: f64,
    pub timer: f64,
    pub flow_op: f64,
    pub tree_op: f64,
    pub relay_step: PerAlgorithm,
    pub mcast_packet: f64,
    pub mcast_further: PerAlgorithm,
    pub mcast_rx_packet: f64,
    pub mcast_desc: f64,
    pub mcast_delivery: f64,
    /// A collective's element combined (integer, floating point); 0 in a
    /// table measured before the collective offload.
    #[serde(default)]
    pub coll_element: f64,
    #[serde(default)]
    pub coll_float_element: f64,
}

impl Instructions {
    /// Per-item instructions in the order of [`ITEMS`] (`idle_pass` and
    /// `busy_pass` last).
    pub fn to_array(&self) -> [f64; ITEMS.len()] {
        let (r, f) = (&self.relay_step, &self.mcast_further);
        [
            self.descriptor,
            self.tx_packet,
            self.rx_packet,
            self.dma_cmd,
            self.event,
            self.timer,
            self.flow_op,
            self.tree_op,
            r.separate,
            r.serial,
            r.binomial,
            r.binary,
            self.mcast_packet,
            f.separate,
            f.serial,
            f.binomial,
            f.binary,
            self.mcast_rx_packet,
            self.mcast_desc,
            self.mcast_delivery,
            self.coll_element,
            self.coll_float_element,
            self.idle_pass,
            self.busy_pass,
        ]
    }

    /// The inverse of [`Instructions::to_array`].
    pub fn from_array(a: &[f64; ITEMS.len()]) -> Instructions {
        let alg = |i: usize| PerAlgorithm {
            separate: a[i],
            serial: a[i + 1],
            binomial: a[i + 2],
            binary: a[i + 3],
        };
        Instructions {
            descriptor: a[0],
            tx_packet: a[1],
            rx_packet: a[2],
            dma_cmd: a[3],
            event: a[4],
            timer: a[5],
            flow_op: a[6],
            tree_op: a[7],
            relay_step: alg(8),
            mcast_packet: a[12],
            mcast_further: alg(13),
            mcast_rx_packet: a[17],
            mcast_desc: a[18],
            mcast_delivery: a[19],
            coll_element: a[20],
            coll_float_element: a[21],
            idle_pass: a[22],
            busy_pass: a[23],
        }
    }

    /// Instructions of `passes` passes of which `busy` did work, the work
    /// summing to `counts` (as [`counts`] orders it).
    pub fn of(&self, passes: u64, busy: u64, counts: &[u64; WORK_ITEMS]) -> f64 {
        let a = self.to_array();
        let work: f64 = counts.iter().zip(a.iter()).map(|(&n, &p)| n as f64 * p).sum();
        passes as f64 * self.idle_pass + busy as f64 * self.busy_pass + work
    }
}

/// Where the table's figures come from.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageStamp {
    /// The firmware source's commit the image was built from.
    pub commit: String,
    /// When it was measured (UTC, RFC 3339).
    pub date: String,
    /// The image's cargo features.
    #[serde(default)]
    pub features: Vec<String>,
    /// The bench's short run (fewer messages).
    #[serde(default)]
    pub quick: bool,
}

/// What the image counted for one workload when the table was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredWorkload {
    /// Messages in the measured window.
    pub messages: u64,
    /// Instructions of the passes that did work, over all NICs, per
    /// message, as counted.
    pub busy_per_message: f64,
    /// The same from the table's prices and the workload's work.
    pub fitted_per_message: f64,
    /// Whether the fit used this workload.
    #[serde(default = "yes")]
    pub fitted: bool,
}

fn yes() -> bool {
    true
}

/// Pass costs measured beside the prices (not used to price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Passes {
    /// A pass that read the summary of news and found none (instructions;
    /// 0: not measured).
    #[serde(default)]
    pub quiet: f64,
}

/// A whole table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareCosts {
    pub image: ImageStamp,
    #[serde(default)]
    pub passes: Passes,
    pub instructions: Instructions,
    /// Keyed by the bench's workload names.
    #[serde(default)]
    pub workloads: BTreeMap<String, MeasuredWorkload>,
}

impl FirmwareCosts {
    /// The table built in (`nic-emu/profiles/firmware-costs.toml`).
    pub fn builtin() -> &'static FirmwareCosts {
        static TABLE: OnceLock<FirmwareCosts> = OnceLock::new();
        TABLE.get_or_init(|| {
            FirmwareCosts::from_toml(BUILTIN_TEXT, BUILTIN_PATH)
                .unwrap_or_else(|e| panic!("the built-in firmware cost table: {e}"))
        })
    }

    /// A table from a file (`[nic_cpu] firmware_costs`).
    pub fn load(path: &Path) -> Result<FirmwareCosts, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("firmware cost table {}: {e}", path.display()))?;
        FirmwareCosts::from_toml(&text, &path.display().to_string())
    }

    /// Parse and validate; `origin` names the table in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<FirmwareCosts, String> {
        let t: FirmwareCosts = toml::from_str(text)
            .map_err(|e| format!("firmware cost table {origin}: {}", e.to_string().trim_end()))?;
        for (i, v) in t.instructions.to_array().iter().enumerate() {
            if !(v.is_finite() && (0.0..=MAX_INSTRUCTIONS).contains(v)) {
                return Err(format!(
                    "firmware cost table {origin}: instructions.{}: {} out of range (0..={})",
                    ITEMS[i].0,
                    Short(*v),
                    Short(MAX_INSTRUCTIONS)
                ));
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_table_parses_and_prices_every_pass() {
        let t = FirmwareCosts::builtin();
        assert!(t.instructions.idle_pass > 0.0, "an idle pass costs something");
        assert!(!t.image.commit.is_empty() && !t.image.date.is_empty());
    }

    #[test]
    fn the_item_order_matches_the_array_and_the_work_fields() {
        let mut a = [0.0; ITEMS.len()];
        for (i, x) in a.iter_mut().enumerate() {
            *x = i as f64 + 1.0;
        }
        let ins = Instructions::from_array(&a);
        assert_eq!(ins.to_array(), a);
        assert_eq!(ins.relay_step.binary, 12.0);
        assert_eq!(ins.mcast_further.separate, 14.0);
        assert_eq!(ins.coll_float_element, 22.0);
        assert_eq!(ins.busy_pass, 24.0);
        // One unit of each work field lands on its own item.
        let w = Work {
            descriptors: 1,
            dma_cmds: 2,
            relay_steps: [0, 0, 3, 0],
            mcast_further: [0, 0, 0, 4],
            mcast_deliveries: 5,
            coll_float_elements: 6,
            ..Work::default()
        };
        let c = counts(&w);
        assert_eq!((c[0], c[3], c[10], c[16], c[19], c[21]), (1, 2, 3, 4, 5, 6));
        assert_eq!(c.iter().sum::<u64>(), 21);
        assert_eq!(ITEMS[10], ("relay_step.binomial", "relay_steps", Some(2)));
        assert_eq!(ITEMS[19].1, "mcast_deliveries");
        assert_eq!(ITEMS[21].1, "coll_float_elements");
        // 3 passes, 2 busy: 3 x 23 + 2 x 24 + the work.
        let want =
            69.0 + 48.0 + 1.0 + 2.0 * 4.0 + 3.0 * 11.0 + 4.0 * 17.0 + 5.0 * 20.0 + 6.0 * 22.0;
        assert_eq!(ins.of(3, 2, &c), want);
    }

    #[test]
    fn a_bad_table_is_refused_naming_the_key() {
        let text = BUILTIN_TEXT.replace("[instructions]", "[instructions]\nbogus = 1");
        let e = FirmwareCosts::from_toml(&text, "t").unwrap_err();
        assert!(e.contains("bogus") && e.starts_with("firmware cost table t:"), "{e}");
        let line = BUILTIN_TEXT.lines().find(|l| l.starts_with("event =")).unwrap();
        let e = FirmwareCosts::from_toml(&BUILTIN_TEXT.replace(line, "event = -1.0"), "t");
        assert_eq!(
            e.unwrap_err(),
            "firmware cost table t: instructions.event: -1 out of range (0..=1000000000)"
        );
    }
}
