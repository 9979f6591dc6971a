//! The document `cargo xtask bench --firmware` writes (`--json`, and
//! always `target/bench/firmware.json`): what the image's instruction
//! counter measured per workload, and the (de)serialising structs of it.
//! This module is the one place the document's shape is defined; every
//! reader of the file (the simulator's firmware pricing, its drift test)
//! parses it through these types.
//!
//! Instruction figures are counted by the image itself (`minstret` around
//! each pass of the MCP, exact under QEMU's `-icount shift=0`) over a
//! workload's measured window, with the set-up before it subtracted. They
//! are per message over all NICs unless named per NIC.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The workloads, by the names the document keys them with, in the order
/// the bench runs and prints them.
pub const WORKLOADS: [&str; 12] = [
    "pingpong-8b",
    "pingpong-8b-carried",
    "stream-4k",
    "stream-64k",
    "loss-gbn",
    "loss-sr",
    "rate",
    "mcast-host",
    "mcast-nic",
    "mcast-assisted",
    "mcast-cached",
    "port-close",
];

/// The whole document.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FirmwareReport {
    /// Which image was measured, and how.
    pub image: ImageInfo,
    /// Keyed by the names of [`WORKLOADS`] (a quick run may hold fewer).
    pub workloads: BTreeMap<String, Workload>,
    /// The idle pass, in instructions, with few and with many ports and
    /// streams live.
    pub idle: Idle,
}

/// The measured image and the counting set-up.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ImageInfo {
    /// The ELF measured.
    #[serde(default)]
    pub elf: String,
    /// The image's cargo features (`poll-stats` always among them).
    #[serde(default)]
    pub features: Vec<String>,
    /// The source's commit (`git describe --always --dirty`), if known.
    #[serde(default)]
    pub commit: String,
    /// text + data + bss of the image, bytes.
    #[serde(default)]
    pub size_bytes: u64,
    /// The QEMU counting mode (`-icount shift=0`).
    #[serde(default)]
    pub icount: String,
    /// A short run (`--quick`): fewer messages, figures less settled.
    #[serde(default)]
    pub quick: bool,
}

/// The idle pass, instructions per pass: the mean of the passes that did
/// no work (what the simulator prices an idle poll at), and the quiet
/// pass (no news that gives work: the summary read and nothing more; 0 for an image
/// that does not count the kinds of pass).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Idle {
    /// One port open, one stream live.
    pub one_port: f64,
    /// Eight ports open, 128 streams live.
    pub eight_ports_128_streams: f64,
    #[serde(default)]
    pub quiet_one_port: f64,
    #[serde(default)]
    pub quiet_eight_ports_128_streams: f64,
}

/// One workload's figures.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Workload {
    /// Messages in the measured window (for `port-close`: closes; for
    /// `pingpong-8b`: one-way messages, two per round trip).
    pub messages: u64,
    /// Instructions of the passes that did work, over all NICs, per
    /// message.
    pub busy_per_message: f64,
    /// Instructions of all passes (idle ones too), over all NICs, per
    /// message.
    pub all_per_message: f64,
    /// Busy-pass instructions per data packet, per NIC (in `nics`' order):
    /// a NIC's busy instructions over the data packets it sent plus those
    /// it received (0 for a NIC that handled none).
    pub per_packet: Vec<f64>,
    /// Instructions of an idle pass during the window (mean).
    pub idle_pass: f64,
    /// Acks sent as packets of their own, over all NICs, per message
    /// (an ack a data packet carries is not one): a ping-pong whose
    /// hosts answer after the ack delay draws one a message.
    #[serde(default)]
    pub acks_per_message: f64,
    /// Passes by kind, per message (empty for an image that does not
    /// count them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_kinds: Vec<KindFigures>,
    /// Passes by kind and by what ran them (the news, a timer, work the
    /// last pass left), per message, the costliest first; empty for an
    /// image that does not count them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_causes: Vec<CauseFigures>,
    /// Instructions per message of the passes (idle ones included: an
    /// address does not tell a busy pass from an idle one) by state
    /// machine, counted per code address by the QEMU plugin; their sum is
    /// `attributed_per_message`, close to `all_per_message`.
    pub by_machine: ByMachine,
    /// Instructions per message (as `by_machine`) in each offload's code,
    /// keyed by offload name (`multicast`, `rate`, `selective`, ...).
    #[serde(default)]
    pub by_offload: BTreeMap<String, f64>,
    /// The sum of `by_machine`: what the plugin counted in the passes.
    #[serde(default)]
    pub attributed_per_message: f64,
    /// The functions that ran most instructions per message (their
    /// inlined code included), most first: (demangled name, instructions).
    #[serde(default)]
    pub functions: Vec<(String, f64)>,
    /// The source lines that ran most instructions per message (the
    /// innermost frame's `file:line function`), most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<(String, f64)>,
    /// Each NIC's raw counts over the window.
    pub nics: Vec<NicCounts>,
    /// The busy figures in microseconds at each profile's NIC clock,
    /// keyed by profile name.
    #[serde(default)]
    pub us: BTreeMap<String, Micros>,
}

/// Instructions per message by machine; `core` is the scheduler and all
/// code outside the four machines.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ByMachine {
    pub sdma: f64,
    pub send: f64,
    pub recv: f64,
    pub rdma: f64,
    pub core: f64,
}

impl ByMachine {
    pub fn total(&self) -> f64 {
        self.sdma + self.send + self.recv + self.rdma + self.core
    }
}

/// A workload's busy figures at one profile's NIC clock.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Micros {
    pub busy_per_message: f64,
    pub per_packet: Vec<f64>,
}

/// One NIC's counts over a measured window (after minus before).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NicCounts {
    pub node: u16,
    pub passes: u64,
    pub busy_passes: u64,
    pub instructions_busy: u64,
    pub instructions_all: u64,
    /// Data packets this NIC sent and received (`work.tx_packets` +
    /// `work.rx_packets`; acks excluded when the image tells them apart).
    pub packets: u64,
    /// Passes by kind (`quiet`, `completions`, `whole`: what of the MCP
    /// they ran); empty for an image that does not count them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kinds: BTreeMap<String, KindCounts>,
    /// Passes by kind and cause (`whole: rx left`: see
    /// `counters::cause_name`), the causes seen; empty for an image that
    /// does not count them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub causes: BTreeMap<String, KindCounts>,
    /// The sum of the `mcp::Work` the passes returned, by field name.
    pub work: WorkSum,
    /// Control packets of their own this NIC sent (its counters): acks
    /// (not those a data packet carried), nacks, polls.
    #[serde(default)]
    pub acks_sent: u64,
    #[serde(default)]
    pub nacks_sent: u64,
    #[serde(default)]
    pub polls_sent: u64,
}

/// One kind of pass at one NIC over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KindCounts {
    pub idle_passes: u64,
    pub idle_instructions: u64,
    pub busy_passes: u64,
    pub busy_instructions: u64,
}

impl KindCounts {
    /// The counts between two readings of an image's `[idle, busy]` x
    /// `[passes, instructions]` counters (each wraps at 64 bits).
    pub fn between(a: &[[u64; 2]; 2], b: &[[u64; 2]; 2]) -> KindCounts {
        let d = |busy: usize, j: usize| b[busy][j].wrapping_sub(a[busy][j]);
        KindCounts {
            idle_passes: d(0, 0),
            idle_instructions: d(0, 1),
            busy_passes: d(1, 0),
            busy_instructions: d(1, 1),
        }
    }

    /// Add `o`'s counts (another NIC's) to these.
    pub fn add(&mut self, o: &KindCounts) {
        self.idle_passes += o.idle_passes;
        self.idle_instructions += o.idle_instructions;
        self.busy_passes += o.busy_passes;
        self.busy_instructions += o.busy_instructions;
    }
}

/// One kind of pass over all NICs: how many a message and what one costs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KindFigures {
    /// `quiet` (no news: the summary read and nothing else),
    /// `completions` (only the engines' completions, and what they gave
    /// work), `whole` (the machines stepped).
    pub kind: String,
    pub passes_per_message: f64,
    pub instructions_per_pass: f64,
    /// The passes of this kind that did no work.
    pub idle_passes_per_message: f64,
    pub instructions_per_idle_pass: f64,
}

/// Passes of one kind and cause over all NICs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CauseFigures {
    /// The kind, then the news bits (`counters::cause_name`).
    pub cause: String,
    pub passes_per_message: f64,
    pub instructions_per_pass: f64,
    pub instructions_per_message: f64,
    /// The passes of this cause that did no work.
    pub idle_passes_per_message: f64,
}

/// The sum of `mcp::Work` over a window: each field of the struct by its
/// Rust name, a number or (for array fields) a list of numbers. Read
/// from the image by the struct's debug information, so a field added to
/// `mcp::Work` appears here without a change to this module.
pub type WorkSum = BTreeMap<String, WorkValue>;

/// A `mcp::Work` field's sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WorkValue {
    Count(u64),
    Counts(Vec<u64>),
}

impl WorkValue {
    /// The total (an array's elements summed).
    pub fn total(&self) -> u64 {
        match self {
            WorkValue::Count(n) => *n,
            WorkValue::Counts(v) => v.iter().sum(),
        }
    }
}

impl NicCounts {
    /// A `work` field's total, 0 when absent.
    pub fn work_total(&self, field: &str) -> u64 {
        self.work.get(field).map_or(0, WorkValue::total)
    }
}

impl FirmwareReport {
    /// Read a saved document.
    pub fn load(path: &Path) -> crate::Result<FirmwareReport> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> crate::Result<FirmwareReport> {
        serde_json::from_str(text).map_err(|e| format!("not a firmware bench document: {e}"))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serialises")
    }

    /// Write it, creating the directory.
    pub fn save(&self, path: &Path) -> crate::Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        std::fs::write(path, self.to_json() + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Where the document is always saved: `<target>/bench/firmware.json`.
pub fn default_path(root: &Path) -> std::path::PathBuf {
    crate::fw::target_dir(root).join("bench").join("firmware.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FirmwareReport {
        let mut work = WorkSum::new();
        work.insert("descriptors".into(), WorkValue::Count(1000));
        work.insert("relay_steps".into(), WorkValue::Counts(vec![1, 2, 0, 0]));
        let nic = NicCounts {
            node: 0,
            passes: 5000,
            busy_passes: 3000,
            instructions_busy: 9_000_000,
            instructions_all: 12_000_000,
            packets: 2000,
            kinds: BTreeMap::new(),
            causes: BTreeMap::new(),
            work,
            acks_sent: 2000,
            nacks_sent: 0,
            polls_sent: 0,
        };
        let w = Workload {
            messages: 2000,
            busy_per_message: 4500.0,
            all_per_message: 6000.0,
            per_packet: vec![4500.0],
            idle_pass: 1000.0,
            acks_per_message: 1.0,
            pass_kinds: Vec::new(),
            pass_causes: Vec::new(),
            by_machine: ByMachine { sdma: 1.0, send: 2.0, recv: 3.0, rdma: 4.0, core: 5.0 },
            by_offload: [("multicast".to_string(), 0.0)].into_iter().collect(),
            attributed_per_message: 15.0,
            functions: vec![("mcp::Mcp::poll".into(), 15.0)],
            lines: Vec::new(),
            nics: vec![nic],
            us: [(
                "lanai9-gm".to_string(),
                Micros { busy_per_message: 33.8, per_packet: vec![33.8] },
            )]
            .into_iter()
            .collect(),
        };
        FirmwareReport {
            image: ImageInfo { features: vec!["poll-stats".into()], ..Default::default() },
            workloads: [("pingpong-8b".to_string(), w)].into_iter().collect(),
            idle: Idle { one_port: 90.0, eight_ports_128_streams: 95.0, ..Idle::default() },
        }
    }

    #[test]
    fn the_document_reads_back_as_written() {
        let r = sample();
        assert_eq!(FirmwareReport::parse(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn the_document_has_the_contract_keys() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        let w = &v["workloads"]["pingpong-8b"];
        for k in [
            "messages",
            "busy_per_message",
            "all_per_message",
            "per_packet",
            "idle_pass",
            "by_machine",
            "by_offload",
            "nics",
            "us",
        ] {
            assert!(!w[k].is_null(), "workload key {k} missing");
        }
        for k in ["sdma", "send", "recv", "rdma", "core"] {
            assert!(w["by_machine"][k].is_number(), "by_machine.{k}");
        }
        assert_eq!(w["nics"][0]["work"]["relay_steps"], serde_json::json!([1, 2, 0, 0]));
        assert_eq!(w["nics"][0]["work"]["descriptors"], serde_json::json!(1000));
        assert!(
            v["idle"]["one_port"].is_number() && v["idle"]["eight_ports_128_streams"].is_number()
        );
    }

    #[test]
    fn an_array_field_totals_its_elements() {
        let r = sample();
        let nic = &r.workloads["pingpong-8b"].nics[0];
        assert_eq!(nic.work_total("relay_steps"), 3);
        assert_eq!(nic.work_total("descriptors"), 1000);
        assert_eq!(nic.work_total("no_such_field"), 0);
    }
}
