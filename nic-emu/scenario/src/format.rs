//! The scenario file: a cluster and its traffic, in TOML.
//!
//! Parsing is strict: every table refuses keys it does not know (the error
//! names the key and its line), and [`Scenario::validate`] refuses values
//! outside their domain with an error naming the key and the value, e.g.
//! `flows[2].dst: node 9 out of range (fabric.nodes = 4)`. The format is
//! documented in docs/scenarios.md; keep the two in step.
//!
//! This module owns only the description. It knows nothing of the event
//! core; `runner` turns a validated [`Scenario`] into a cluster.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use nic_abi::map::GROUP_ENTRIES;
use nic_abi::multicast::{children_computed, Algorithm, Scheme};
use nic_abi::{class_max_len, size_class_for, Priority, MAX_NODES, MAX_SIZE_CLASS, NUM_PORTS};
use nic_device::profile::{check_cpi, send_timeout_us_to_ns, Short, MAX_SWITCH_PORTS};
pub use nic_device::profile::{Pricing, Reliability};

/// Send window used when a stream flow does not give one.
pub const DEFAULT_WINDOW: u32 = 8;
/// Multicasts outstanding when a multicast flow does not give `window`.
pub const DEFAULT_MCAST_WINDOW: u32 = 1;
/// Virtual-time limit of a run when the scenario does not give one (ms).
pub const DEFAULT_LIMIT_MS: f64 = 60_000.0;
/// Most flows a scenario may have (after `[[alltoall]]` tables are
/// expanded): a full all-to-all of 512 nodes (261,632 flows) fits, one of
/// 1,024 (1,047,552) does not; `offsets` keep an all-to-all's flows per
/// node fixed.
pub const MAX_FLOWS: u64 = 1 << 18;
/// Slowest rate a flow may reserve (MB/s): 1 KB/s.
pub const MIN_RATE_MB_S: f64 = 0.001;
/// Fastest rate a flow may reserve (MB/s): 1 TB/s.
pub const MAX_RATE_MB_S: f64 = 1e6;

/// A whole scenario as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Timing profile: a built-in name (`lanai4-gm`, ...) or a file path.
    pub profile: String,
    /// Seeds fault injection (and anything else random). Default 0.
    #[serde(default)]
    pub seed: u64,
    pub fabric: Fabric,
    #[serde(default)]
    pub flows: Vec<Flow>,
    /// Shorthand: one stream flow for every ordered pair of nodes.
    #[serde(default)]
    pub alltoall: Vec<AllToAll>,
    /// Fault injection, per packet per link.
    #[serde(default)]
    pub faults: FaultRates,
    /// Overrides of the profile's firmware parameters.
    #[serde(default)]
    pub firmware: FirmwareOverrides,
    /// Overrides of how the profile prices the NIC CPU's work (sim).
    #[serde(default)]
    pub nic_cpu: NicCpuOverrides,
    /// Limits of the run.
    #[serde(default)]
    pub run: RunSettings,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    /// Hosts, one NIC each.
    pub nodes: u64,
    /// `star` (one crossbar) or another topology name of nic-emu.
    #[serde(default = "default_topology")]
    pub topology: String,
    /// Ports per switch, instead of the profile's `switch.ports`
    /// (2..=1024; more than 128 only on the sim).
    #[serde(default)]
    pub switch_ports: Option<u32>,
}

fn default_topology() -> String {
    "star".to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowKind {
    /// Back-to-back messages, up to `window` outstanding.
    Stream,
    /// A request, then an equal-size reply from the target; `messages`
    /// round trips, one at a time.
    Pingpong,
    /// One root sends each message to a group of nodes through a
    /// multicast tree; up to `window` multicasts outstanding.
    Multicast,
    /// Collectives of a group (coll.rs): `count` barriers, reductions to
    /// a root, reductions to every member, broadcasts from a root, one
    /// after another.
    Barrier,
    Reduce,
    Allreduce,
    Broadcast,
}

impl FlowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowKind::Stream => "stream",
            FlowKind::Pingpong => "pingpong",
            FlowKind::Multicast => "multicast",
            FlowKind::Barrier => "barrier",
            FlowKind::Reduce => "reduce",
            FlowKind::Allreduce => "allreduce",
            FlowKind::Broadcast => "broadcast",
        }
    }

    /// A collective (barrier, reduce, allreduce, broadcast)?
    pub fn is_collective(self) -> bool {
        matches!(
            self,
            FlowKind::Barrier | FlowKind::Reduce | FlowKind::Allreduce | FlowKind::Broadcast
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowPriority {
    Low,
    High,
}

impl FlowPriority {
    pub fn abi(self) -> Priority {
        match self {
            FlowPriority::Low => Priority::Low,
            FlowPriority::High => Priority::High,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FlowPriority::Low => "low",
            FlowPriority::High => "high",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// Shown in the output; default `flow<index>`.
    #[serde(default)]
    pub name: Option<String>,
    /// `[node, port]` of the sender (not for collectives: `port`).
    #[serde(default)]
    pub src: Vec<u64>,
    /// `[node, port]` of the receiver (stream and pingpong flows).
    #[serde(default)]
    pub dst: Option<Vec<u64>>,
    pub kind: FlowKind,
    /// Message size in bytes (give this or `sizes`).
    #[serde(default)]
    pub bytes: Option<u64>,
    /// Mixed message sizes, used in turn (give this or `bytes`).
    #[serde(default)]
    pub sizes: Option<Vec<u64>>,
    /// Stream: messages; pingpong: round trips (collectives: `count`).
    #[serde(default)]
    pub messages: Option<u64>,
    #[serde(default = "default_priority")]
    pub priority: FlowPriority,
    /// When the first message is sent (virtual us from the start).
    #[serde(default)]
    pub start_us: f64,
    /// Most sends outstanding (stream; pingpong always has one).
    #[serde(default)]
    pub window: Option<u32>,
    /// Rate control: a raw IDT (RTC ticks; 0 = unregulated, entry present).
    #[serde(default)]
    pub idt: Option<u64>,
    /// Rate control: an IDT as a multiple of the profile's calibrated T.
    #[serde(default)]
    pub idt_t: Option<f64>,
    /// Rate control: ask the bandwidth manager for this much (MB/s).
    #[serde(default)]
    pub rate_mb_s: Option<f64>,
    /// Rate control: run as a best-effort flow of the bandwidth manager.
    #[serde(default)]
    pub best_effort: bool,
    /// Stream: stop sending at this time (us); a reservation is released
    /// once the last send completed.
    #[serde(default)]
    pub stop_us: Option<f64>,
    /// Record the NIC clock of every packet dispatch of the flow.
    #[serde(default)]
    pub trace: bool,
    /// Multicast: the destination nodes in rank order after the root.
    #[serde(default)]
    pub group: Option<Vec<u64>>,
    /// Multicast: the root and the next G-1 nodes by number, wrapping.
    #[serde(default)]
    pub group_size: Option<u64>,
    /// Multicast: who serves the tree (host, nic, assisted, nic-cached).
    #[serde(default)]
    pub scheme: Option<String>,
    /// Multicast: the tree (separate, serial, binomial, binary,
    /// k-binomial, auto; default auto).
    #[serde(default)]
    pub algorithm: Option<String>,
    /// Multicast, k-binomial only: the k (default: the profile's best).
    #[serde(default)]
    pub k: Option<u64>,
    /// Collectives: every member's port.
    #[serde(default)]
    pub port: Option<u64>,
    /// Reductions: sum, min, max, band, bor (default sum).
    #[serde(default)]
    pub op: Option<String>,
    /// Reductions and broadcast: i32, i64, u32, u64, f32, f64 (default f64).
    #[serde(default)]
    pub datatype: Option<String>,
    /// Reductions and broadcast: elements per member (default 1).
    #[serde(default)]
    pub elements: Option<u64>,
    /// Collectives: how many, one after another (default 1).
    #[serde(default)]
    pub count: Option<u64>,
    /// Reduce and broadcast: the root's rank (default 0).
    #[serde(default)]
    pub root: Option<u64>,
}

fn default_priority() -> FlowPriority {
    FlowPriority::Low
}

/// `[[alltoall]]`: a flow from every node to every other node (of `nodes`,
/// default all), from and to `port`, named `<name>.<src>-<dst>`; with
/// `offsets`, from every node only to the nodes that many places after it
/// in `nodes` (wrapping). The other keys mean what they mean in
/// `[[flows]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllToAll {
    pub name: String,
    pub port: u64,
    #[serde(default)]
    pub nodes: Option<Vec<u64>>,
    /// Each node sends to the nodes this many places after it (a shift
    /// pattern: the traffic per node does not grow with the nodes).
    #[serde(default)]
    pub offsets: Option<Vec<u64>>,
    #[serde(default = "default_kind")]
    pub kind: FlowKind,
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(default)]
    pub sizes: Option<Vec<u64>>,
    pub messages: u64,
    #[serde(default = "default_priority")]
    pub priority: FlowPriority,
    #[serde(default)]
    pub start_us: f64,
    #[serde(default)]
    pub window: Option<u32>,
}

fn default_kind() -> FlowKind {
    FlowKind::Stream
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRates {
    /// Probability a packet is lost on a link.
    #[serde(default)]
    pub drop: f64,
    /// Probability a packet has bits flipped on a link (the CRC catches it).
    #[serde(default)]
    pub corrupt: f64,
    /// Probability a packet is delivered twice by a link.
    #[serde(default)]
    pub duplicate: f64,
    /// Cables that go down for a while (`[[faults.link_down]]`).
    #[serde(default)]
    pub link_down: Vec<LinkDown>,
    /// NICs reset during the run (`[[faults.nic_reset]]`; sim only).
    #[serde(default)]
    pub nic_reset: Vec<NicReset>,
}

impl FaultRates {
    /// Does the scenario inject any fault at all?
    pub fn any(&self) -> bool {
        self.drop > 0.0
            || self.corrupt > 0.0
            || self.duplicate > 0.0
            || !self.link_down.is_empty()
            || !self.nic_reset.is_empty()
    }
}

/// NIC `node` resets at `at_us` (from the start of the traffic).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicReset {
    pub node: u64,
    pub at_us: f64,
}

impl NicReset {
    pub fn at_ns(&self) -> u64 {
        (self.at_us * 1000.0).round() as u64
    }
}

/// A cable that loses everything entering it, both ways, from `at_us`
/// for `for_us`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDown {
    /// `node<N>` (node N's cable to its switch) or `sw<S>.p<P>` (the cable
    /// at port P of switch S).
    pub link: String,
    pub at_us: f64,
    pub for_us: f64,
}

impl LinkDown {
    /// [from, until) in ns.
    pub fn span_ns(&self) -> (u64, u64) {
        let from = (self.at_us * 1000.0).round() as u64;
        (from, from + (self.for_us * 1000.0).round() as u64)
    }
}

/// The longest `firmware.ack_delay_us` taken (a second). (An ack held
/// past the senders' retransmission timeout has them send again first.)
pub const MAX_ACK_DELAY_US: f64 = 1e6;

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareOverrides {
    /// A send that finds no receive buffer is retried this long (us), then
    /// completes with TimedOut. Default: the profile's.
    #[serde(default)]
    pub send_timeout_us: Option<f64>,
    /// How streams recover lost packets: `go-back-n` or `selective`.
    /// Default: the profile's (`firmware.reliability`, go-back-N).
    #[serde(default)]
    pub reliability: Option<Reliability>,
    /// How long (us) a receiver waits for data to carry an ack before it
    /// sends the ack alone. Default: the profile's (`firmware.ack_delay_ns`).
    #[serde(default)]
    pub ack_delay_us: Option<f64>,
}

/// `[nic_cpu]`: how the sim prices the NIC CPU's passes, instead of the
/// profile's (docs/profiles.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCpuOverrides {
    /// `published` (the profile's cycle prices) or `firmware` (the
    /// firmware cost table's instructions).
    #[serde(default)]
    pub pricing: Option<Pricing>,
    /// NIC CPU cycles per instruction under `firmware` pricing.
    #[serde(default)]
    pub cycles_per_instruction: Option<f64>,
    /// Another firmware cost table (a path, relative to the working
    /// directory).
    #[serde(default)]
    pub firmware_costs: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Stop the run at this virtual time (ms) even if flows are not done.
    #[serde(default = "default_limit_ms")]
    pub limit_ms: f64,
}

fn default_limit_ms() -> f64 {
    DEFAULT_LIMIT_MS
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings { limit_ms: DEFAULT_LIMIT_MS }
    }
}

/// Why a scenario was refused. The message names the key (and the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub message: String,
}

impl ScenarioError {
    pub fn new(message: impl Into<String>) -> ScenarioError {
        ScenarioError { message: message.into() }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// The receiver's view of where a message comes from: (sending node,
/// sending port, receiving node, receiving port, priority). GM orders
/// messages per such stream, and the runner tells flows apart by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamKey {
    pub src_node: u16,
    pub src_port: u8,
    pub dst_node: u16,
    pub dst_port: u8,
    pub priority: Priority,
}

impl StreamKey {
    /// The key as one number that orders as the key does (field by
    /// field), for cheap searches.
    #[inline]
    pub fn packed(&self) -> u64 {
        (self.src_node as u64) << 40
            | (self.src_port as u64) << 32
            | (self.dst_node as u64) << 16
            | (self.dst_port as u64) << 8
            | self.priority as u64
    }
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} -> {}:{} {}",
            self.src_node,
            self.src_port,
            self.dst_node,
            self.dst_port,
            self.priority.name()
        )
    }
}

/// How a flow's rate is controlled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RatePlan {
    /// No flow-table entry: as without rate control.
    Unmanaged,
    /// A raw IDT in RTC ticks (0: unregulated, but with an entry).
    Idt(u32),
    /// An IDT as a multiple of the profile's calibrated T.
    IdtT(f64),
    /// A reservation through the bandwidth manager (MB/s).
    Reserve(f64),
    /// A best-effort flow of the bandwidth manager.
    BestEffort,
}

impl RatePlan {
    /// Does the flow go through the bandwidth manager?
    pub fn uses_brm(&self) -> bool {
        matches!(self, RatePlan::Reserve(_) | RatePlan::BestEffort)
    }
}

/// The tree a multicast flow asked for: one given outright, a k-binomial
/// tree whose k the profile's costs choose, or whichever the profile's
/// latency model prices lowest (`auto`). The runner resolves the last two
/// once the profile is loaded ([`McastSpec::algorithm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmChoice {
    Given(Algorithm),
    KBinomialBestK,
    Auto,
}

impl AlgorithmChoice {
    /// As the file spelled it.
    pub fn as_str(self) -> &'static str {
        match self {
            AlgorithmChoice::Given(a) => a.name(),
            AlgorithmChoice::KBinomialBestK => "k-binomial",
            AlgorithmChoice::Auto => "auto",
        }
    }
}

/// Host CPU and NIC CPU prices of tree work, from the profile (for the
/// report's `tree_ns`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TreePrices {
    /// Host: one child of a tree computed (`HostOp::TreeWork`).
    pub host_child_ns: u64,
    /// NIC: one child computed by the firmware (`nic_cpu.tree_op` cycles).
    pub nic_child_ns: f64,
    /// NIC: the steps of the whole tree, for one multicast of the flow's
    /// algorithm and group (`nic_cpu.relay_step`: once per node with
    /// children, per destination for separate addressing).
    pub nic_steps_ns: f64,
}

/// What a multicast flow adds to its [`FlowSpec`].
#[derive(Debug, Clone, PartialEq)]
pub struct McastSpec {
    /// The group's id: its slot in every member NIC's group table (one
    /// per multicast flow, in file order).
    pub group_id: u16,
    /// Rank order, the root first (all on the flow's `src` port).
    pub members: Vec<u16>,
    pub scheme: Scheme,
    pub choice: AlgorithmChoice,
    /// The tree used: the given one, or what the runner chose for the
    /// profile (None until then).
    pub algorithm: Option<Algorithm>,
    pub prices: TreePrices,
}

impl McastSpec {
    /// G: members, the root included.
    pub fn size(&self) -> u16 {
        self.members.len() as u16
    }

    pub fn rank_of(&self, node: u16) -> Option<u16> {
        self.members.iter().position(|&m| m == node).map(|r| r as u16)
    }

    /// The tree in use (the given one until the runner resolved it).
    pub fn alg(&self) -> Algorithm {
        match (self.algorithm, self.choice) {
            (Some(a), _) | (None, AlgorithmChoice::Given(a)) => a,
            _ => Algorithm::Binomial,
        }
    }

    /// Does the host of `rank` post sends for this multicast (the root
    /// always; a relay under the host and assisted schemes)?
    pub fn host_posts(&self, rank: u16) -> bool {
        rank == 0
            || (matches!(self.scheme, Scheme::Host | Scheme::Assisted)
                && children_computed(self.alg(), self.size(), rank) > 0)
    }
}

/// A flow after validation: every default filled in, numbers narrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    pub index: usize,
    pub name: String,
    /// Where the flow came from, as errors name it: `flows[i]`, or
    /// `alltoall[g] (flow NAME)` for a flow of an `[[alltoall]]` table.
    pub label: String,
    pub src_node: u16,
    pub src_port: u8,
    pub dst_node: u16,
    pub dst_port: u8,
    pub kind: FlowKind,
    /// Message sizes used in turn (one entry for a fixed size).
    pub sizes: Vec<u64>,
    pub messages: u64,
    pub priority: Priority,
    pub start_ns: u64,
    pub window: u32,
    pub rate: RatePlan,
    /// Stream: stop sending at this time.
    pub stop_ns: Option<u64>,
    /// Record every packet dispatch (`dispatch_ticks` in the report).
    pub trace: bool,
    /// Multicast flows: the group and the tree (`dst` is then the root's
    /// own `src`, unused).
    pub mcast: Option<McastSpec>,
    /// Collective flows: the group, the collective and its algorithm
    /// (`src` and `dst` are then the first member's `port`, unused).
    pub coll: Option<super::coll::CollSpec>,
}

impl FlowSpec {
    /// Size of message `msg`.
    #[inline]
    pub fn size_of(&self, msg: u64) -> u64 {
        match self.sizes.len() {
            // One size (the usual case): no division.
            1 => self.sizes[0],
            n => self.sizes[(msg % n as u64) as usize],
        }
    }

    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The distinct size classes its messages use, ascending.
    pub fn size_classes(&self) -> Vec<u8> {
        let mut c: Vec<u8> = self.sizes.iter().map(|&s| size_class_for(s)).collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// The stream of its requests (or of its messages, for a stream).
    pub fn forward_key(&self) -> StreamKey {
        StreamKey {
            src_node: self.src_node,
            src_port: self.src_port,
            dst_node: self.dst_node,
            dst_port: self.dst_port,
            priority: self.priority,
        }
    }

    /// The stream of its replies (pingpong only).
    pub fn reply_key(&self) -> StreamKey {
        StreamKey {
            src_node: self.dst_node,
            src_port: self.dst_port,
            dst_node: self.src_node,
            dst_port: self.src_port,
            priority: self.priority,
        }
    }

    /// Every stream the flow uses. A multicast flow's messages are told
    /// apart by their group, not by a stream: none.
    pub fn keys(&self) -> Vec<StreamKey> {
        match self.kind {
            FlowKind::Stream => vec![self.forward_key()],
            FlowKind::Pingpong => vec![self.forward_key(), self.reply_key()],
            _ => Vec::new(),
        }
    }

    /// Sends it keeps outstanding from its source port.
    pub fn send_window(&self) -> u32 {
        match self.kind {
            FlowKind::Stream | FlowKind::Multicast => self.window,
            _ => 1,
        }
    }
}

/// A scenario after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    pub profile: String,
    pub seed: u64,
    pub nodes: usize,
    pub topology: String,
    /// `fabric.switch_ports`: overrides the profile's.
    pub switch_ports: Option<u32>,
    pub flows: Vec<FlowSpec>,
    pub faults: FaultRates,
    pub send_timeout_us: Option<f64>,
    /// `firmware.reliability`: overrides the profile's.
    pub reliability: Option<Reliability>,
    /// `firmware.ack_delay_us`: overrides the profile's, in ns.
    pub ack_delay_ns: Option<u64>,
    /// `[nic_cpu]`: overrides the profile's pricing.
    pub nic_cpu: NicCpuOverrides,
    pub limit_ns: u64,
}

impl Scenario {
    /// Parse TOML text. Unknown keys and ill-typed values are refused with
    /// the key and its line.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let de =
            toml::Deserializer::parse(text).map_err(|e| ScenarioError::new(toml_error("", &e)))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ScenarioError::new(toml_error(&path, e.inner()))
        })
    }

    /// Parse and validate.
    pub fn parse_validated(text: &str) -> Result<Validated, ScenarioError> {
        Scenario::parse(text)?.validate()
    }

    /// Check every value and fill in defaults.
    pub fn validate(&self) -> Result<Validated, ScenarioError> {
        let err = |m: String| Err(ScenarioError::new(m));
        if self.profile.trim().is_empty() {
            return err("profile: must name a timing profile".into());
        }
        check_name("profile", &self.profile)?;
        check_name("fabric.topology", &self.fabric.topology)?;
        let nodes = self.fabric.nodes;
        if nodes < 1 || nodes > MAX_NODES as u64 {
            return err(format!("fabric.nodes: {nodes} out of range (1..={MAX_NODES})"));
        }
        if self.fabric.topology.trim().is_empty() {
            return err("fabric.topology: must name a topology".into());
        }
        if let Some(p) = self.fabric.switch_ports {
            if !(2..=MAX_SWITCH_PORTS).contains(&p) {
                return err(format!(
                    "fabric.switch_ports: {p} out of range (2..={MAX_SWITCH_PORTS})"
                ));
            }
        }
        for (key, p) in [
            ("faults.drop", self.faults.drop),
            ("faults.corrupt", self.faults.corrupt),
            ("faults.duplicate", self.faults.duplicate),
        ] {
            if !(0.0..1.0).contains(&p) {
                return err(format!("{key}: {} is not a probability in [0, 1)", Short(p)));
            }
        }
        for (i, d) in self.faults.link_down.iter().enumerate() {
            let key = format!("faults.link_down[{i}]");
            if d.link.trim().is_empty() {
                return err(format!("{key}.link: must name a cable (node<N> or sw<S>.p<P>)"));
            }
            check_name(&format!("{key}.link"), &d.link)?;
            if !(d.at_us.is_finite() && (0.0..=3.6e9).contains(&d.at_us)) {
                return err(format!(
                    "{key}.at_us: {} out of range (0..=3600000000, an hour in us)",
                    Short(d.at_us)
                ));
            }
            if !(d.for_us.is_finite() && (0.001..=3.6e9).contains(&d.for_us)) {
                return err(format!(
                    "{key}.for_us: {} out of range (0.001..=3600000000: 1 ns to an hour, in us)",
                    Short(d.for_us)
                ));
            }
        }
        for (i, r) in self.faults.nic_reset.iter().enumerate() {
            let key = format!("faults.nic_reset[{i}]");
            if r.node >= nodes {
                return err(format!(
                    "{key}.node: {} is no node (nodes 0 to {})",
                    r.node,
                    nodes - 1
                ));
            }
            if !(r.at_us.is_finite() && (0.0..=3.6e9).contains(&r.at_us)) {
                return err(format!(
                    "{key}.at_us: {} out of range (0..=3600000000, an hour in us)",
                    Short(r.at_us)
                ));
            }
        }
        if let Some(t) = self.firmware.send_timeout_us {
            send_timeout_us_to_ns("firmware.send_timeout_us", t).map_err(ScenarioError::new)?;
        }
        if let Some(t) = self.firmware.ack_delay_us {
            if !(t.is_finite() && (0.0..=MAX_ACK_DELAY_US).contains(&t)) {
                return err(format!(
                    "firmware.ack_delay_us: {} out of range (0..={MAX_ACK_DELAY_US}, a second in us)",
                    Short(t)
                ));
            }
        }
        if let Some(c) = self.nic_cpu.cycles_per_instruction {
            check_cpi("nic_cpu.cycles_per_instruction", c).map_err(ScenarioError::new)?;
        }
        if let Some(t) = &self.nic_cpu.firmware_costs {
            check_name("nic_cpu.firmware_costs", t)?;
        }
        let limit = self.run.limit_ms;
        if !(limit.is_finite() && (0.001..=3.6e6).contains(&limit)) {
            return err(format!(
                "run.limit_ms: {} out of range (0.001..=3600000: 1 us to an hour, in ms)",
                Short(limit)
            ));
        }
        // The flow count before any table is expanded: a scenario of more
        // flows than the limit is refused before it takes the memory.
        let counted = self.flows.len() as u64
            + self.alltoall.iter().map(|a| alltoall_flows(a, nodes)).sum::<u64>();
        if counted > MAX_FLOWS {
            let mut parts: Vec<String> = Vec::new();
            if !self.flows.is_empty() {
                parts.push(format!("{} [[flows]]", self.flows.len()));
            }
            for (g, a) in self.alltoall.iter().enumerate() {
                parts.push(format!("alltoall[{g}]: {}", alltoall_flows(a, nodes)));
            }
            return err(format!(
                "flows: {counted} flows ({}) is more than a scenario may have ({MAX_FLOWS}); \
                 give [[alltoall]] `offsets` (each node sends to a few others, a shift \
                 pattern) or fewer `nodes`",
                parts.join(", ")
            ));
        }
        // Every flow with the label its errors name: `flows[i]` for a
        // table of its own, `alltoall[g] (flow NAME)` for an expanded one.
        let mut all: Vec<(String, Flow)> = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("flows[{i}]"), f.clone()))
            .collect();
        for (g, a) in self.alltoall.iter().enumerate() {
            all.extend(expand_alltoall(g, a, nodes)?);
        }
        if all.is_empty() {
            return err("flows: at least one [[flows]] (or [[alltoall]]) table is needed".into());
        }

        let mut flows = Vec::with_capacity(all.len());
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        let mut streams: BTreeMap<StreamKey, usize> = BTreeMap::new();
        let mut groups = 0u16;
        for (i, (label, f)) in all.iter().enumerate() {
            let mut spec = validate_flow(i, label, f, nodes)?;
            let slot = match (spec.mcast.as_mut(), spec.coll.as_mut()) {
                (Some(m), _) => Some(&mut m.group_id),
                (_, Some(c)) => Some(&mut c.group_id),
                _ => None,
            };
            if let Some(id) = slot {
                if groups as u32 >= GROUP_ENTRIES {
                    return err(format!(
                        "{label}: more than {GROUP_ENTRIES} multicast and collective flows \
                         (each takes a slot of a NIC's group table, which has {GROUP_ENTRIES})"
                    ));
                }
                *id = groups;
                groups += 1;
            }
            if let Some(j) = names.insert(spec.name.clone(), i) {
                return err(format!(
                    "{label}.name: \"{}\" is already the name of {}",
                    spec.name, all[j].0
                ));
            }
            for key in spec.keys() {
                if let Some(j) = streams.insert(key, i) {
                    return err(format!(
                        "{label}: its stream {key} is also used by {} \
                         (flows are told apart by source node and port, target port and priority)",
                        all[j].0
                    ));
                }
            }
            flows.push(spec);
        }
        check_host_collective_ports(&flows)?;
        Ok(Validated {
            profile: self.profile.trim().to_string(),
            seed: self.seed,
            nodes: nodes as usize,
            topology: self.fabric.topology.trim().to_string(),
            switch_ports: self.fabric.switch_ports,
            flows,
            faults: self.faults.clone(),
            send_timeout_us: self.firmware.send_timeout_us,
            reliability: self.firmware.reliability,
            ack_delay_ns: self.firmware.ack_delay_us.map(|t| (t * 1000.0).round() as u64),
            nic_cpu: self.nic_cpu.clone(),
            limit_ns: (limit * 1e6) as u64,
        })
    }
}

/// A host-scheme collective takes every message its members send to its
/// port (its messages carry no stream of their own): refuse another
/// flow's stream between two of its members into that port, and another
/// host-scheme collective there with two members in common, which it
/// would take for its own.
fn check_host_collective_ports(flows: &[FlowSpec]) -> Result<(), ScenarioError> {
    use super::coll::CollScheme;
    let host_colls = || {
        flows
            .iter()
            .filter_map(|f| f.coll.as_ref().map(|c| (f, c)))
            .filter(|(_, c)| c.scheme == CollScheme::Host)
    };
    for (cf, cs) in host_colls() {
        // Two of them on one port: each would take the other's messages.
        for (of, os) in host_colls().filter(|(of, os)| of.index > cf.index && os.port == cs.port) {
            let shared = os.members.iter().filter(|&&m| cs.rank_of(m).is_some()).count();
            if shared >= 2 {
                return Err(ScenarioError::new(format!(
                    "{}: the host-scheme collective {} shares port {} and {shared} members \
                     with the host-scheme collective {} ({}): each takes every message its \
                     members send to its port, so they would take each other's: give one \
                     of them another port",
                    of.label, of.name, cs.port, cf.name, cf.label
                )));
            }
        }
        for f in flows.iter().filter(|f| f.coll.is_none()) {
            for key in f.keys() {
                if key.dst_port == cs.port
                    && cs.rank_of(key.src_node).is_some()
                    && cs.rank_of(key.dst_node).is_some()
                {
                    return Err(ScenarioError::new(format!(
                        "{}: its stream {key} goes into port {} between members of the \
                         host-scheme collective {} ({}), which takes every message its \
                         members send to that port: give one of them another port",
                        f.label, cs.port, cf.name, cf.label
                    )));
                }
            }
        }
    }
    Ok(())
}

/// How many flows `[[alltoall]]` table `a` expands to (before its keys
/// are checked: a node listed twice or out of range counts as any other).
fn alltoall_flows(a: &AllToAll, nodes: u64) -> u64 {
    let n = a.nodes.as_ref().map_or(nodes, |v| v.len() as u64);
    match &a.offsets {
        Some(o) => n.saturating_mul(o.len() as u64),
        None => n.saturating_mul(n.saturating_sub(1)),
    }
}

/// Names and other strings of a scenario (flow names, `[[alltoall]]`
/// names, the profile, the topology, a cable) are one line of printable
/// text: a newline, NUL or other control character is refused, shown
/// escaped.
fn check_name(key: &str, s: &str) -> Result<(), ScenarioError> {
    match s.chars().find(|c| c.is_control()) {
        None => Ok(()),
        Some(c) => Err(ScenarioError::new(format!(
            "{key}: {s:?} holds a control character ({:?}); names are one line of printable text",
            c
        ))),
    }
}

/// The flows of one `[[alltoall]]` table, labelled for error messages.
fn expand_alltoall(
    g: usize,
    a: &AllToAll,
    nodes: u64,
) -> Result<Vec<(String, Flow)>, ScenarioError> {
    let label = format!("alltoall[{g}]");
    if a.name.trim().is_empty() {
        return Err(ScenarioError::new(format!("{label}.name: must not be empty")));
    }
    check_name(&format!("{label}.name"), &a.name)?;
    if a.kind == FlowKind::Multicast || a.kind.is_collective() {
        return Err(ScenarioError::new(format!(
            "{label}.kind: \"{}\" does not apply to [[alltoall]] (give a [[flows]] table \
             with `group` or `group_size`)",
            a.kind.as_str()
        )));
    }
    let members: Vec<u64> = match &a.nodes {
        Some(v) => v.clone(),
        None => (0..nodes).collect(),
    };
    for (k, &n) in members.iter().enumerate() {
        if n >= nodes {
            return Err(ScenarioError::new(format!(
                "{label}.nodes[{k}]: node {n} out of range (fabric.nodes = {nodes})"
            )));
        }
        if members[..k].contains(&n) {
            return Err(ScenarioError::new(format!(
                "{label}.nodes[{k}]: node {n} is listed twice"
            )));
        }
    }
    if members.len() < 2 {
        return Err(ScenarioError::new(format!("{label}.nodes: needs at least two nodes")));
    }
    let n = members.len() as u64;
    let offsets: &[u64] = a.offsets.as_deref().unwrap_or_default();
    if a.offsets.is_some() && offsets.is_empty() {
        return Err(ScenarioError::new(format!("{label}.offsets: needs at least one offset")));
    }
    for (k, &o) in offsets.iter().enumerate() {
        if o < 1 || o >= n {
            return Err(ScenarioError::new(format!(
                "{label}.offsets[{k}]: {o} out of range (1..={}: {n} nodes take part)",
                n - 1
            )));
        }
        if offsets[..k].contains(&o) {
            return Err(ScenarioError::new(format!("{label}.offsets[{k}]: {o} is listed twice")));
        }
    }
    // Every other member in member order, or those at the offsets.
    let targets = |i: usize| -> Vec<u64> {
        if a.offsets.is_some() {
            offsets.iter().map(|&o| members[((i as u64 + o) % n) as usize]).collect()
        } else {
            members.iter().copied().filter(|&d| d != members[i]).collect()
        }
    };
    let mut out = Vec::new();
    for (i, &s) in members.iter().enumerate() {
        for d in targets(i) {
            let name = format!("{}.{s}-{d}", a.name.trim());
            out.push((
                format!("{label} (flow {name})"),
                Flow {
                    name: Some(name),
                    src: vec![s, a.port],
                    dst: Some(vec![d, a.port]),
                    kind: a.kind,
                    bytes: a.bytes,
                    sizes: a.sizes.clone(),
                    messages: Some(a.messages),
                    priority: a.priority,
                    start_us: a.start_us,
                    window: a.window,
                    idt: None,
                    idt_t: None,
                    rate_mb_s: None,
                    best_effort: false,
                    stop_us: None,
                    trace: false,
                    group: None,
                    group_size: None,
                    scheme: None,
                    algorithm: None,
                    k: None,
                    port: None,
                    op: None,
                    datatype: None,
                    elements: None,
                    count: None,
                    root: None,
                },
            ));
        }
    }
    Ok(out)
}

fn validate_flow(i: usize, label: &str, f: &Flow, nodes: u64) -> Result<FlowSpec, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let name = match &f.name {
        Some(n) if n.trim().is_empty() => return err(format!("{label}.name: must not be empty")),
        Some(n) => {
            check_name(&format!("{label}.name"), n)?;
            n.clone()
        }
        None => format!("flow{i}"),
    };
    if f.kind.is_collective() {
        return validate_collective(i, label, name, f, nodes);
    }
    if f.src.is_empty() {
        return err(format!("{label}: `src` is missing (the sender's [node, port])"));
    }
    let Some(messages) = f.messages else {
        return err(format!("{label}: `messages` is missing (how many messages or round trips)"));
    };
    for (key, given) in [
        ("port", f.port.is_some()),
        ("op", f.op.is_some()),
        ("datatype", f.datatype.is_some()),
        ("elements", f.elements.is_some()),
        ("count", f.count.is_some()),
        ("root", f.root.is_some()),
    ] {
        if given {
            return err(format!("{label}.{key}: applies to collective flows only"));
        }
    }
    let multicast = f.kind == FlowKind::Multicast;
    if !multicast {
        for (key, given) in [
            ("group", f.group.is_some()),
            ("group_size", f.group_size.is_some()),
            ("scheme", f.scheme.is_some()),
            ("algorithm", f.algorithm.is_some()),
            ("k", f.k.is_some()),
        ] {
            if given {
                return err(format!("{label}.{key}: applies to multicast flows only"));
            }
        }
    }
    let dst = match (&f.dst, multicast) {
        (Some(d), false) => d.clone(),
        (None, false) => {
            return err(format!("{label}: `dst` is missing (the receiver's [node, port])"));
        }
        (Some(d), true) => {
            return err(format!(
                "{label}.dst: {d:?} does not apply to a multicast flow (give `group` or \
                 `group_size`)"
            ));
        }
        // A multicast's receivers are its group; `dst` stands for the root.
        (None, true) => f.src.clone(),
    };
    for (key, v) in [("src", &f.src), ("dst", &dst)] {
        let &[node, port] = v.as_slice() else {
            return err(format!("{label}.{key}: {v:?} must be [node, port]"));
        };
        if node >= nodes {
            return err(format!(
                "{label}.{key}: node {node} out of range (fabric.nodes = {nodes})"
            ));
        }
        if port >= NUM_PORTS as u64 {
            return err(format!(
                "{label}.{key}: port {port} out of range (ports 0 to {})",
                NUM_PORTS - 1
            ));
        }
    }
    if !multicast && f.src[0] == dst[0] {
        return err(format!(
            "{label}: src and dst are both on node {} (a flow crosses the fabric)",
            f.src[0]
        ));
    }
    let sizes = match (&f.bytes, &f.sizes) {
        (Some(_), Some(_)) => {
            return err(format!("{label}: give `bytes` or `sizes`, not both"));
        }
        (None, None) => return err(format!("{label}: `bytes` (or `sizes`) is missing")),
        (Some(b), None) => {
            check_size(&format!("{label}.bytes"), *b)?;
            vec![*b]
        }
        (None, Some(v)) => {
            if v.is_empty() {
                return err(format!("{label}.sizes: must list at least one size"));
            }
            for (k, s) in v.iter().enumerate() {
                check_size(&format!("{label}.sizes[{k}]"), *s)?;
            }
            v.clone()
        }
    };
    if messages == 0 || messages > u32::MAX as u64 {
        return err(format!("{label}.messages: {messages} out of range (1..={})", u32::MAX));
    }
    if !(f.start_us.is_finite() && f.start_us >= 0.0 && f.start_us <= 3.6e9) {
        return err(format!(
            "{label}.start_us: {} out of range (0..=3600000000, an hour in us)",
            Short(f.start_us)
        ));
    }
    let window = match (f.kind, f.window) {
        (_, Some(0)) => return err(format!("{label}.window: 0 must be at least 1")),
        (FlowKind::Pingpong, Some(w)) if w != 1 => {
            return err(format!(
                "{label}.window: {w} does not apply to a pingpong flow (one round trip at a time)"
            ));
        }
        (_, Some(w)) if w > 1024 => {
            return err(format!("{label}.window: {w} out of range (1..=1024)"));
        }
        (FlowKind::Stream | FlowKind::Multicast, Some(w)) => w,
        (FlowKind::Stream, None) => DEFAULT_WINDOW,
        (FlowKind::Multicast, None) => DEFAULT_MCAST_WINDOW,
        (_, _) => 1,
    };
    let mcast = if multicast { Some(validate_multicast(label, f, nodes)?) } else { None };
    let rate = validate_rate(label, f)?;
    let stop_ns = match f.stop_us {
        None => None,
        Some(_) if f.kind != FlowKind::Stream => {
            return err(format!("{label}.stop_us: applies to stream flows only"));
        }
        Some(t) if !(t.is_finite() && t > f.start_us && t <= 3.6e9) => {
            return err(format!(
                "{label}.stop_us: {} must be a time after start_us ({}) and at most \
                 3600000000 (an hour in us)",
                Short(t),
                Short(f.start_us)
            ));
        }
        Some(t) => Some((t * 1000.0).round() as u64),
    };
    Ok(FlowSpec {
        index: i,
        name,
        label: label.to_string(),
        src_node: f.src[0] as u16,
        src_port: f.src[1] as u8,
        dst_node: dst[0] as u16,
        dst_port: dst[1] as u8,
        kind: f.kind,
        sizes,
        messages,
        priority: f.priority.abi(),
        start_ns: (f.start_us * 1000.0).round() as u64,
        window,
        rate,
        stop_ns,
        trace: f.trace,
        mcast,
        coll: None,
    })
}

/// A collective flow: its keys (coll.rs), as a flow of `count` messages
/// of its vector's size from its first member.
fn validate_collective(
    i: usize,
    label: &str,
    name: String,
    f: &Flow,
    nodes: u64,
) -> Result<FlowSpec, ScenarioError> {
    let c = super::coll::validate(label, f, nodes)?;
    if !(f.start_us.is_finite() && f.start_us >= 0.0 && f.start_us <= 3.6e9) {
        return Err(ScenarioError::new(format!(
            "{label}.start_us: {} out of range (0..=3600000000, an hour in us)",
            Short(f.start_us)
        )));
    }
    Ok(FlowSpec {
        index: i,
        name,
        label: label.to_string(),
        src_node: c.members[0],
        src_port: c.port,
        dst_node: c.members[0],
        dst_port: c.port,
        kind: f.kind,
        sizes: vec![c.bytes() as u64],
        messages: c.count,
        priority: f.priority.abi(),
        start_ns: (f.start_us * 1000.0).round() as u64,
        window: 1,
        rate: RatePlan::Unmanaged,
        stop_ns: None,
        trace: false,
        mcast: None,
        coll: Some(c),
    })
}

/// The multicast keys of a flow: its group, scheme and tree. Keys that
/// only make sense for a stream are refused by name.
fn validate_multicast(label: &str, f: &Flow, nodes: u64) -> Result<McastSpec, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    for (key, given) in [
        ("idt", f.idt.is_some()),
        ("idt_t", f.idt_t.is_some()),
        ("rate_mb_s", f.rate_mb_s.is_some()),
        ("best_effort", f.best_effort),
        ("stop_us", f.stop_us.is_some()),
        ("trace", f.trace),
    ] {
        if given {
            return err(format!("{label}.{key}: does not apply to a multicast flow"));
        }
    }
    let root = f.src[0];
    let members: Vec<u64> = match (&f.group, f.group_size) {
        (Some(_), Some(_)) => {
            return err(format!("{label}: give `group` or `group_size`, not both"));
        }
        (None, None) => {
            return err(format!(
                "{label}: a multicast flow needs `group` (its destination nodes) or `group_size`"
            ));
        }
        (Some(g), None) => {
            if g.is_empty() {
                return err(format!("{label}.group: must list at least one node"));
            }
            for (i, &n) in g.iter().enumerate() {
                if n >= nodes {
                    return err(format!(
                        "{label}.group[{i}]: node {n} out of range (fabric.nodes = {nodes})"
                    ));
                }
                if n == root {
                    return err(format!(
                        "{label}.group[{i}]: node {n} is the root (src); list only the \
                         destinations"
                    ));
                }
                if g[..i].contains(&n) {
                    return err(format!("{label}.group[{i}]: node {n} is listed twice"));
                }
            }
            std::iter::once(root).chain(g.iter().copied()).collect()
        }
        (None, Some(size)) => {
            if size < 2 || size > nodes {
                return err(format!(
                    "{label}.group_size: {size} out of range (2..={nodes}: the root and at \
                     least one other node, at most fabric.nodes)"
                ));
            }
            (0..size).map(|i| (root + i) % nodes).collect()
        }
    };
    let Some(name) = f.scheme.as_deref() else {
        return err(format!(
            "{label}: a multicast flow needs `scheme` (host, nic, assisted, nic-cached)"
        ));
    };
    let Some(scheme) = Scheme::parse(name) else {
        return err(format!(
            "{label}.scheme: \"{name}\" is not a multicast scheme (host, nic, assisted, \
             nic-cached)"
        ));
    };
    let alg_name = f.algorithm.as_deref().unwrap_or("auto");
    let choice = match (alg_name, f.k) {
        ("k-binomial", None) => AlgorithmChoice::KBinomialBestK,
        ("k-binomial", Some(k)) if k < 2 => {
            return err(format!("{label}.k: {k} must be at least 2"));
        }
        ("k-binomial", Some(k)) if k > u8::MAX as u64 => {
            return err(format!("{label}.k: {k} out of range (2..={})", u8::MAX));
        }
        ("k-binomial", Some(k)) => AlgorithmChoice::Given(Algorithm::KBinomial { k: k as u8 }),
        (a, Some(_)) if a == "auto" || Algorithm::parse(a, 2).is_some() => {
            return err(format!(
                "{label}.k: applies to algorithm = \"k-binomial\" only (algorithm is \"{a}\")"
            ));
        }
        ("auto", None) => AlgorithmChoice::Auto,
        (a, None) => match Algorithm::parse(a, 0) {
            Some(alg) => AlgorithmChoice::Given(alg),
            None => {
                return err(format!(
                    "{label}.algorithm: \"{a}\" is not a multicast algorithm (separate, \
                     serial, binomial, binary, k-binomial, auto)"
                ));
            }
        },
        (a, Some(_)) => {
            return err(format!(
                "{label}.algorithm: \"{a}\" is not a multicast algorithm (separate, serial, \
                 binomial, binary, k-binomial, auto)"
            ));
        }
    };
    // The assisted root lists its children in its one descriptor.
    if let (Scheme::Assisted, AlgorithmChoice::Given(a)) = (scheme, choice) {
        let n = children_computed(a, members.len() as u16, 0) as usize;
        if n > nic_abi::desc::MAX_LISTED_CHILDREN {
            return err(format!(
                "{label}: the assisted root of a {} tree over {} members lists {n} children, \
                 more than a descriptor holds ({})",
                a.name(),
                members.len(),
                nic_abi::desc::MAX_LISTED_CHILDREN
            ));
        }
    }
    Ok(McastSpec {
        group_id: 0,
        members: members.into_iter().map(|n| n as u16).collect(),
        scheme,
        choice,
        algorithm: None,
        prices: TreePrices::default(),
    })
}

/// The rate-control keys of a flow: at most one of them.
fn validate_rate(label: &str, f: &Flow) -> Result<RatePlan, ScenarioError> {
    let err = |m: String| Err(ScenarioError::new(m));
    let given: Vec<&str> = [
        ("idt", f.idt.is_some()),
        ("idt_t", f.idt_t.is_some()),
        ("rate_mb_s", f.rate_mb_s.is_some()),
        ("best_effort", f.best_effort),
    ]
    .iter()
    .filter(|(_, g)| *g)
    .map(|(k, _)| *k)
    .collect();
    if given.len() > 1 {
        return err(format!(
            "{label}: give at most one of `idt`, `idt_t`, `rate_mb_s`, `best_effort = true` \
             (found {})",
            given.join(", ")
        ));
    }
    if let Some(i) = f.idt {
        if i > u32::MAX as u64 {
            return err(format!("{label}.idt: {i} out of range (0..={} RTC ticks)", u32::MAX));
        }
        return Ok(RatePlan::Idt(i as u32));
    }
    if let Some(k) = f.idt_t {
        if !(k.is_finite() && (0.0..=1e6).contains(&k)) {
            return err(format!(
                "{label}.idt_t: {} must be a multiple of T in 0..=1000000",
                Short(k)
            ));
        }
        return Ok(RatePlan::IdtT(k));
    }
    if let Some(b) = f.rate_mb_s {
        if f.kind != FlowKind::Stream {
            return err(format!("{label}.rate_mb_s: applies to stream flows only"));
        }
        if !(b.is_finite() && (MIN_RATE_MB_S..=MAX_RATE_MB_S).contains(&b)) {
            return err(format!(
                "{label}.rate_mb_s: {} out of range ({}..={} MB/s)",
                Short(b),
                Short(MIN_RATE_MB_S),
                Short(MAX_RATE_MB_S)
            ));
        }
        return Ok(RatePlan::Reserve(b));
    }
    if f.best_effort {
        if f.kind != FlowKind::Stream {
            return err(format!("{label}.best_effort: applies to stream flows only"));
        }
        return Ok(RatePlan::BestEffort);
    }
    Ok(RatePlan::Unmanaged)
}

fn check_size(key: &str, b: u64) -> Result<(), ScenarioError> {
    let max = class_max_len(MAX_SIZE_CLASS);
    if b > max {
        return Err(ScenarioError::new(format!(
            "{key}: {b} bytes is more than the largest message ({max} bytes)"
        )));
    }
    Ok(())
}

/// A validation error of scenario `text` with the line of the value it
/// names and a caret under it, as a parse error has them:
///
/// ```text
/// flows[0].start_us: 1e308 out of range (0..=3600000000, an hour in us)
/// at line 14, column 12
///    |
/// 14 | start_us = 1e308
///    |            ^^^^^
/// ```
///
/// An error that names no value of the file (a key that is missing, the
/// whole scenario, a flow of an `[[alltoall]]` table) or that has an
/// excerpt already is returned as it is.
pub fn with_excerpt(text: &str, e: ScenarioError) -> ScenarioError {
    if e.message.contains('\n') {
        return e;
    }
    let Some((path, _)) = e.message.split_once(": ") else { return e };
    let Some(span) = value_span(text, path) else { return e };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let number = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let width = text[start..span.end.min(line_end).max(start)].chars().count().max(1);
    let gutter = " ".repeat(number.to_string().len());
    ScenarioError::new(format!(
        "{}\nat line {number}, column {column}\n{gutter} |\n{number} | {line}\n{gutter} | {}{}",
        e.message,
        " ".repeat(column - 1),
        "^".repeat(width)
    ))
}

/// Where the value at `path` (`flows[0].start_us`, `firmware.send_timeout_us`,
/// `faults.link_down[1].link`) is in `text`, if it is there and is not a
/// table.
fn value_span(text: &str, path: &str) -> Option<std::ops::Range<usize>> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let mut table: &DeTable<'_> = doc.get_ref();
    let mut found: Option<&toml::Spanned<DeValue<'_>>> = None;
    for seg in path.split('.') {
        if let Some(v) = found {
            match v.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return None,
            }
        }
        let (name, index) = match seg.split_once('[') {
            Some((n, rest)) => (n, Some(rest.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (seg, None),
        };
        let v = table.iter().find(|(k, _)| k.get_ref().as_ref() == name).map(|(_, v)| v)?;
        found = match (index, v.get_ref()) {
            (None, _) => Some(v),
            (Some(i), DeValue::Array(a)) => Some(a.get(i)?),
            _ => return None,
        };
    }
    let v = found?;
    match v.get_ref() {
        DeValue::Table(_) => None,
        // `[[flows]]` and the like: a list of tables, no one value.
        DeValue::Array(a) if a.iter().any(|e| matches!(e.get_ref(), DeValue::Table(_))) => None,
        _ => Some(v.span()),
    }
}

/// The first line says where (the key path, when known) and what is
/// wrong; toml's excerpt of the file follows.
fn toml_error(path: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim();
    let first =
        if path.is_empty() || path == "." { msg.to_string() } else { format!("{path}: {msg}") };
    let full = e.to_string();
    match full.find('\n') {
        // "TOML parse error at line L, column C\n  |\n L | ...": keep the
        // location and the excerpt, drop toml's repeat of the message.
        Some(_) => {
            let excerpt: Vec<&str> = full.lines().filter(|l| l.trim() != msg).collect();
            format!("{first}\n{}", excerpt.join("\n").trim_end())
        }
        None => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
profile = "lanai4-gm"
seed = 1
[fabric]
nodes = 4
topology = "star"
[[flows]]
name = "f1"
src = [0, 2]
dst = [1, 2]
kind = "stream"
bytes = 65536
messages = 500
priority = "low"
start_us = 0
window = 8
[faults]
drop = 0.01
corrupt = 0.001
duplicate = 0.001
"#;

    #[test]
    fn the_example_of_the_issue_parses() {
        let v = Scenario::parse_validated(GOOD).unwrap();
        assert_eq!(v.nodes, 4);
        assert_eq!(v.flows[0].sizes, vec![65536]);
        assert_eq!(v.flows[0].window, 8);
        assert_eq!(v.faults.drop, 0.01);
    }

    #[test]
    fn defaults_are_filled_in() {
        let v = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
             kind = \"pingpong\"\nbytes = 4\nmessages = 3\n",
        )
        .unwrap();
        assert_eq!(v.seed, 0);
        assert_eq!(v.topology, "star");
        assert_eq!(v.flows[0].name, "flow0");
        assert_eq!(v.flows[0].priority, Priority::Low);
        assert_eq!(v.flows[0].window, 1);
        assert_eq!(v.limit_ns, 60_000_000_000);
    }

    #[test]
    fn unknown_top_level_key_is_named() {
        let e = Scenario::parse(&format!("{GOOD}\nbogus = 3\n")).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
    }

    #[test]
    fn unknown_key_in_a_flow_is_named() {
        let e = Scenario::parse(&GOOD.replace("window = 8", "windw = 8")).unwrap_err();
        assert!(e.message.contains("windw"), "{e}");
    }

    #[test]
    fn node_out_of_range_is_named_with_value() {
        let e =
            Scenario::parse_validated(&GOOD.replace("dst = [1, 2]", "dst = [9, 2]")).unwrap_err();
        assert_eq!(e.message, "flows[0].dst: node 9 out of range (fabric.nodes = 4)");
    }

    #[test]
    fn bad_enum_value_is_named() {
        let e = Scenario::parse(&GOOD.replace("\"stream\"", "\"flood\"")).unwrap_err();
        assert!(e.message.contains("flood"), "{e}");
        let e = Scenario::parse(&GOOD.replace("\"low\"", "\"urgent\"")).unwrap_err();
        assert!(e.message.contains("urgent"), "{e}");
    }

    #[test]
    fn nic_cpu_pricing_is_taken_and_bad_values_are_named_with_their_line_and_a_caret() {
        assert_eq!(Scenario::parse_validated(GOOD).unwrap().nic_cpu, NicCpuOverrides::default());
        let v = Scenario::parse_validated(&format!(
            "{GOOD}[nic_cpu]\npricing = \"firmware\"\ncycles_per_instruction = 1.5\n"
        ))
        .unwrap();
        assert_eq!(v.nic_cpu.pricing, Some(Pricing::Firmware));
        assert_eq!(v.nic_cpu.cycles_per_instruction, Some(1.5));
        let text = format!("{GOOD}[nic_cpu]\npricing = \"guessed\"\n");
        let e = Scenario::parse_validated(&text).unwrap_err().message;
        let line = text.lines().position(|l| l.starts_with("pricing")).unwrap() + 1;
        assert!(
            e.starts_with(
                "nic_cpu.pricing: unknown variant `guessed`, expected `published` or `firmware`"
            ),
            "{e}"
        );
        assert!(e.contains(&format!("{line} | pricing = \"guessed\"")) && e.contains("^^^"), "{e}");
        // A value out of range: key, line and a caret (`with_excerpt`).
        let text = format!("{GOOD}[nic_cpu]\ncycles_per_instruction = 0\n");
        let e = Scenario::parse_validated(&text).unwrap_err();
        assert_eq!(
            e.message,
            "nic_cpu.cycles_per_instruction: 0 out of range (0.01..=1000 NIC CPU cycles per \
             instruction)"
        );
        let e = with_excerpt(&text, e).message;
        let line = text.lines().position(|l| l.starts_with("cycles_per")).unwrap() + 1;
        assert!(e.contains(&format!("at line {line}, column 26")), "{e}");
        assert!(e.ends_with(&format!("|{}^", " ".repeat(26))), "{e}");
        let e = Scenario::parse(&format!("{GOOD}[nic_cpu]\npoll = 3\n")).unwrap_err();
        assert!(e.message.contains("poll"), "{e}");
    }

    #[test]
    fn reliability_is_taken_and_a_bad_value_is_named_with_its_line_and_a_caret() {
        assert_eq!(Scenario::parse_validated(GOOD).unwrap().reliability, None);
        for (text, want) in
            [("go-back-n", Reliability::GoBackN), ("selective", Reliability::Selective)]
        {
            let v =
                Scenario::parse_validated(&format!("{GOOD}[firmware]\nreliability = \"{text}\"\n"))
                    .unwrap();
            assert_eq!(v.reliability, Some(want));
        }
        let text = format!("{GOOD}[firmware]\nsend_timeout_us = 5000\nreliability = \"sack\"\n");
        let line = text.lines().position(|l| l.starts_with("reliability")).unwrap() + 1;
        let e = Scenario::parse_validated(&text).unwrap_err().message;
        let mut lines = e.lines();
        assert_eq!(
            lines.next(),
            Some(
                "firmware.reliability: unknown variant `sack`, expected `go-back-n` or `selective`"
            )
        );
        assert!(e.contains(&format!("line {line}, column 15")), "{e}");
        assert!(e.contains("reliability = \"sack\"") && e.contains("^^^^^^"), "{e}");
    }

    #[test]
    fn two_flows_on_one_stream_are_refused() {
        let twice = format!(
            "{}\n[[flows]]\nname = \"f2\"\nsrc = [0, 2]\ndst = [1, 2]\nkind = \"stream\"\n\
             bytes = 8\nmessages = 1\n",
            GOOD.split("[faults]").next().unwrap()
        );
        let e = Scenario::parse_validated(&twice).unwrap_err();
        assert!(e.message.starts_with("flows[1]: its stream 0:2 -> 1:2 low"), "{e}");
    }

    #[test]
    fn pingpong_reply_stream_collides_with_a_reverse_stream() {
        let text = "profile = \"x\"\n[fabric]\nnodes = 2\n\
            [[flows]]\nsrc = [0, 1]\ndst = [1, 1]\nkind = \"pingpong\"\nbytes = 4\nmessages = 3\n\
            [[flows]]\nsrc = [1, 1]\ndst = [0, 1]\nkind = \"stream\"\nbytes = 4\nmessages = 3\n";
        let e = Scenario::parse_validated(text).unwrap_err();
        assert!(e.message.contains("flows[1]") && e.message.contains("flows[0]"), "{e}");
    }

    #[test]
    fn bad_probabilities_and_sizes_are_refused() {
        let e = Scenario::parse_validated(&GOOD.replace("drop = 0.01", "drop = 1.5")).unwrap_err();
        assert_eq!(e.message, "faults.drop: 1.5 is not a probability in [0, 1)");
        let e = Scenario::parse_validated(&GOOD.replace("bytes = 65536", "bytes = 99999999"))
            .unwrap_err();
        assert!(e.message.starts_with("flows[0].bytes: 99999999"), "{e}");
        let e =
            Scenario::parse_validated(&GOOD.replace("bytes = 65536", "bytes = 1\nsizes = [1, 2]"))
                .unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
    }

    #[test]
    fn src_must_be_a_pair() {
        let e = Scenario::parse_validated(&GOOD.replace("src = [0, 2]", "src = [0, 2, 5]"))
            .unwrap_err();
        assert_eq!(e.message, "flows[0].src: [0, 2, 5] must be [node, port]");
        let e =
            Scenario::parse_validated(&GOOD.replace("src = [0, 2]", "src = [0, 8]")).unwrap_err();
        assert_eq!(e.message, "flows[0].src: port 8 out of range (ports 0 to 7)");
    }

    #[test]
    fn missing_key_is_named() {
        // (`messages` is for streams and ping-pongs, `count` for the
        // collectives: the check is the validation's.)
        let e = Scenario::parse_validated(&GOOD.replace("messages = 500", "")).unwrap_err();
        assert!(e.message.contains("`messages` is missing"), "{e}");
        let e = Scenario::parse(&GOOD.replace("kind = \"stream\"", "")).unwrap_err();
        assert!(e.message.contains("kind"), "{e}");
    }

    #[test]
    fn alltoall_expands_to_every_ordered_pair() {
        let v = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"a\"\nport = 2\n\
             sizes = [8, 4096]\nmessages = 5\npriority = \"high\"\n",
        )
        .unwrap();
        let names: Vec<&str> = v.flows.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.0-1", "a.0-2", "a.1-0", "a.1-2", "a.2-0", "a.2-1"]);
        assert!(v.flows.iter().all(|f| f.priority == Priority::High && f.src_port == 2));
        assert_eq!(v.flows[3].index, 3);
    }

    #[test]
    fn alltoall_errors_name_the_table() {
        let e = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"a\"\nport = 9\n\
             bytes = 8\nmessages = 5\n",
        )
        .unwrap_err();
        assert_eq!(e.message, "alltoall[0] (flow a.0-1).src: port 9 out of range (ports 0 to 7)");
        let e = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"a\"\nport = 1\n\
             nodes = [0, 5]\nbytes = 8\nmessages = 5\n",
        )
        .unwrap_err();
        assert_eq!(e.message, "alltoall[0].nodes[1]: node 5 out of range (fabric.nodes = 3)");
    }

    #[test]
    fn alltoall_offsets_send_to_the_nodes_that_many_places_on() {
        let text = |offsets: &str, nodes: &str| {
            format!(
                "profile = \"x\"\n[fabric]\nnodes = 6\n[[alltoall]]\nname = \"a\"\nport = 2\n\
                 {nodes}offsets = {offsets}\nbytes = 8\nmessages = 5\n"
            )
        };
        let v = Scenario::parse_validated(&text("[1, 3]", "")).unwrap();
        let pairs: Vec<(u16, u16)> = v.flows.iter().map(|f| (f.src_node, f.dst_node)).collect();
        assert_eq!(
            pairs,
            [(0, 1), (0, 3), (1, 2), (1, 4), (2, 3), (2, 5), (3, 4), (3, 0), (4, 5), (4, 1)]
                .into_iter()
                .chain([(5, 0), (5, 2)])
                .collect::<Vec<_>>()
        );
        assert_eq!(v.flows[3].name, "a.1-4");
        // Places in `nodes`, wrapping.
        let v = Scenario::parse_validated(&text("[2]", "nodes = [5, 1, 3]\n")).unwrap();
        let pairs: Vec<(u16, u16)> = v.flows.iter().map(|f| (f.src_node, f.dst_node)).collect();
        assert_eq!(pairs, [(5, 3), (1, 5), (3, 1)]);
        for (offsets, want) in [
            ("[0]", "alltoall[0].offsets[0]: 0 out of range (1..=5: 6 nodes take part)"),
            ("[1, 6]", "alltoall[0].offsets[1]: 6 out of range (1..=5: 6 nodes take part)"),
            ("[2, 2]", "alltoall[0].offsets[1]: 2 is listed twice"),
            ("[]", "alltoall[0].offsets: needs at least one offset"),
        ] {
            let e = Scenario::parse_validated(&text(offsets, "")).unwrap_err();
            assert_eq!(e.message, want);
        }
        // Without offsets: every other node, in node order (as before).
        let v = Scenario::parse_validated(&text("[1]", "").replace("offsets = [1]\n", "")).unwrap();
        assert_eq!(v.flows.len(), 30);
        assert_eq!((v.flows[5].src_node, v.flows[5].dst_node), (1, 0));
    }

    #[test]
    fn switch_ports_are_checked_and_carried() {
        let text = |p: u32| {
            format!(
                "profile = \"x\"\n[fabric]\nnodes = 3\nswitch_ports = {p}\n[[alltoall]]\n\
                 name = \"a\"\nport = 2\nbytes = 8\nmessages = 5\n"
            )
        };
        assert_eq!(Scenario::parse_validated(&text(1024)).unwrap().switch_ports, Some(1024));
        for p in [0, 1, 1025] {
            let e = Scenario::parse_validated(&text(p)).unwrap_err();
            assert_eq!(e.message, format!("fabric.switch_ports: {p} out of range (2..=1024)"));
        }
    }

    const MC: &str = r#"
profile = "lanai9-gm"
[fabric]
nodes = 8
[[flows]]
name = "m"
src = [0, 2]
kind = "multicast"
group = [1, 2, 3]
scheme = "host"
algorithm = "binomial"
bytes = 2
messages = 20
"#;

    fn mc_err(from: &str, to: &str) -> String {
        assert!(MC.contains(from), "{from}");
        Scenario::parse_validated(&MC.replace(from, to)).unwrap_err().message
    }

    #[test]
    fn a_multicast_flow_parses_with_its_group_in_rank_order() {
        let v = Scenario::parse_validated(MC).unwrap();
        let f = &v.flows[0];
        let m = f.mcast.as_ref().unwrap();
        assert_eq!(m.members, vec![0, 1, 2, 3]);
        assert_eq!((m.group_id, m.scheme), (0, Scheme::Host));
        assert_eq!(m.choice, AlgorithmChoice::Given(Algorithm::Binomial));
        assert_eq!((f.window, f.kind), (1, FlowKind::Multicast));
        assert!(f.keys().is_empty(), "a multicast is told apart by its group");
        // group_size: the root and the next nodes by number, wrapping.
        let v = Scenario::parse_validated(
            &MC.replace("src = [0, 2]", "src = [6, 2]")
                .replace("group = [1, 2, 3]", "group_size = 4"),
        )
        .unwrap();
        assert_eq!(v.flows[0].mcast.as_ref().unwrap().members, vec![6, 7, 0, 1]);
    }

    #[test]
    fn algorithm_choices_k_binomial_with_and_without_k_and_auto() {
        let choice = |alg: &str| {
            let v =
                Scenario::parse_validated(&MC.replace("algorithm = \"binomial\"", alg)).unwrap();
            v.flows[0].mcast.as_ref().unwrap().choice
        };
        assert_eq!(choice("algorithm = \"k-binomial\""), AlgorithmChoice::KBinomialBestK);
        assert_eq!(
            choice("algorithm = \"k-binomial\"\nk = 3"),
            AlgorithmChoice::Given(Algorithm::KBinomial { k: 3 })
        );
        assert_eq!(choice("algorithm = \"auto\""), AlgorithmChoice::Auto);
        assert_eq!(choice(""), AlgorithmChoice::Auto);
        assert_eq!(choice("algorithm = \"separate\""), AlgorithmChoice::Given(Algorithm::Separate));
    }

    #[test]
    fn multicast_errors_name_the_key_and_the_value() {
        let cases = [
            ("src = [0, 2]", "src = [0, 2]\ndst = [1, 2]", "flows[0].dst: [1, 2] does not apply to a multicast flow"),
            ("group = [1, 2, 3]", "group = [1, 2, 3]\ngroup_size = 4", "flows[0]: give `group` or `group_size`, not both"),
            ("group = [1, 2, 3]", "", "flows[0]: a multicast flow needs `group`"),
            ("group = [1, 2, 3]", "group = [1, 0, 3]", "flows[0].group[1]: node 0 is the root (src)"),
            ("group = [1, 2, 3]", "group = [1, 2, 1]", "flows[0].group[2]: node 1 is listed twice"),
            ("group = [1, 2, 3]", "group = [1, 9]", "flows[0].group[1]: node 9 out of range (fabric.nodes = 8)"),
            ("group = [1, 2, 3]", "group = []", "flows[0].group: must list at least one node"),
            ("group = [1, 2, 3]", "group_size = 1", "flows[0].group_size: 1 out of range (2..=8"),
            ("group = [1, 2, 3]", "group_size = 9", "flows[0].group_size: 9 out of range (2..=8"),
            ("scheme = \"host\"", "scheme = \"switch\"", "flows[0].scheme: \"switch\" is not a multicast scheme (host, nic, assisted, nic-cached)"),
            ("scheme = \"host\"", "", "flows[0]: a multicast flow needs `scheme`"),
            ("algorithm = \"binomial\"", "algorithm = \"ring\"", "flows[0].algorithm: \"ring\" is not a multicast algorithm"),
            ("algorithm = \"binomial\"", "algorithm = \"binomial\"\nk = 3", "flows[0].k: applies to algorithm = \"k-binomial\" only (algorithm is \"binomial\")"),
            ("algorithm = \"binomial\"", "k = 3", "flows[0].k: applies to algorithm = \"k-binomial\" only (algorithm is \"auto\")"),
            ("algorithm = \"binomial\"", "algorithm = \"k-binomial\"\nk = 1", "flows[0].k: 1 must be at least 2"),
            ("algorithm = \"binomial\"", "algorithm = \"k-binomial\"\nk = 300", "flows[0].k: 300 out of range (2..=255)"),
            ("bytes = 2", "bytes = 2\nidt = 5", "flows[0].idt: does not apply to a multicast flow"),
            ("bytes = 2", "bytes = 2\nrate_mb_s = 5", "flows[0].rate_mb_s: does not apply to a multicast flow"),
            ("bytes = 2", "bytes = 2\nbest_effort = true", "flows[0].best_effort: does not apply to a multicast flow"),
            ("bytes = 2", "bytes = 2\nstop_us = 50", "flows[0].stop_us: does not apply to a multicast flow"),
            ("bytes = 2", "bytes = 2\ntrace = true", "flows[0].trace: does not apply to a multicast flow"),
            ("bytes = 2", "bytes = 2\nwindow = 0", "flows[0].window: 0 must be at least 1"),
        ];
        for (from, to, want) in cases {
            let e = mc_err(from, to);
            assert!(e.starts_with(want), "{to}: got `{e}`, want `{want}...`");
        }
    }

    #[test]
    fn multicast_keys_on_a_stream_and_a_stream_without_dst_are_refused() {
        let e =
            Scenario::parse_validated(&GOOD.replace("window = 8", "scheme = \"nic\"")).unwrap_err();
        assert_eq!(e.message, "flows[0].scheme: applies to multicast flows only");
        let e =
            Scenario::parse_validated(&GOOD.replace("window = 8", "group_size = 3")).unwrap_err();
        assert_eq!(e.message, "flows[0].group_size: applies to multicast flows only");
        let e = Scenario::parse_validated(&GOOD.replace("dst = [1, 2]", "")).unwrap_err();
        assert_eq!(e.message, "flows[0]: `dst` is missing (the receiver's [node, port])");
        let e = Scenario::parse_validated(
            "profile = \"x\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"a\"\nport = 2\n\
             kind = \"multicast\"\nbytes = 8\nmessages = 5\n",
        )
        .unwrap_err();
        assert!(e.message.starts_with("alltoall[0].kind: \"multicast\" does not apply"), "{e}");
    }

    #[test]
    fn each_multicast_flow_takes_a_group_table_slot_and_there_are_16() {
        let flow = |i: usize| {
            format!(
                "[[flows]]\nname = \"m{i}\"\nsrc = [{}, 2]\nkind = \"multicast\"\n\
                 group_size = 3\nscheme = \"nic\"\nalgorithm = \"serial\"\nbytes = 8\n\
                 messages = 1\n",
                i % 8
            )
        };
        let head = "profile = \"x\"\n[fabric]\nnodes = 8\n";
        let sixteen: String = (0..16).map(flow).collect();
        let v = Scenario::parse_validated(&format!("{head}{sixteen}")).unwrap();
        let ids: Vec<u16> = v.flows.iter().map(|f| f.mcast.as_ref().unwrap().group_id).collect();
        assert_eq!(ids, (0..16).collect::<Vec<u16>>());
        let e = Scenario::parse_validated(&format!("{head}{sixteen}{}", flow(16))).unwrap_err();
        assert!(
            e.message.starts_with("flows[16]: more than 16 multicast and collective flows"),
            "{e}"
        );
    }

    #[test]
    fn times_past_an_hour_are_refused_naming_the_key_and_the_range() {
        let at = |start: &str| {
            Scenario::parse_validated(&format!(
                "profile = \"x\"\n[fabric]\nnodes = 2\n[[flows]]\nsrc = [0, 1]\ndst = [1, 1]\n\
                 kind = \"stream\"\nbytes = 4\nmessages = 4294967295\nstart_us = {start}\n"
            ))
        };
        let e = at("18446744073709551615.0").unwrap_err();
        assert!(
            e.message.contains("flows[0].start_us") && e.message.contains("out of range"),
            "{}",
            e.message
        );
        // A flow of 2^32 - 1 messages is taken (its statistics are bounded).
        assert_eq!(at("0").unwrap().flows[0].messages, u32::MAX as u64);
    }

    #[test]
    fn huge_and_tiny_numbers_print_short_in_errors() {
        let e = Scenario::parse_validated(&GOOD.replace("start_us = 0", "start_us = 1e308"))
            .unwrap_err();
        assert_eq!(
            e.message,
            "flows[0].start_us: 1e308 out of range (0..=3600000000, an hour in us)"
        );
        let e = Scenario::parse_validated(&format!(
            "{GOOD}[[faults.link_down]]\nlink = \"node1\"\nat_us = 1e300\nfor_us = 5\n"
        ))
        .unwrap_err();
        assert!(e.message.starts_with("faults.link_down[0].at_us: 1e300 out of range"), "{e}");
    }

    #[test]
    fn an_ack_delay_is_taken_in_us_and_refused_outside_its_range_by_name() {
        let fw =
            |t: &str| Scenario::parse_validated(&format!("{GOOD}[firmware]\nack_delay_us = {t}\n"));
        assert_eq!(Scenario::parse_validated(GOOD).unwrap().ack_delay_ns, None);
        assert_eq!(fw("0").unwrap().ack_delay_ns, Some(0));
        assert_eq!(fw("2.5").unwrap().ack_delay_ns, Some(2_500));
        assert_eq!(fw("1e6").unwrap().ack_delay_ns, Some(1_000_000_000));
        for t in ["-1", "1000001", "1e300", "nan", "inf"] {
            let e = fw(t).unwrap_err().message;
            assert!(
                e.starts_with("firmware.ack_delay_us: ") && e.contains("out of range (0..=1000000"),
                "{t}: {e}"
            );
        }
    }

    #[test]
    fn send_timeouts_rates_and_run_limits_are_refused_outside_their_range() {
        let fw = |t: &str| {
            Scenario::parse_validated(&format!("{GOOD}[firmware]\nsend_timeout_us = {t}\n"))
        };
        assert_eq!(fw("10").unwrap().send_timeout_us, Some(10.0));
        for t in ["1e-9", "9.5", "0", "-1", "4e9"] {
            let e = fw(t).unwrap_err().message;
            assert!(
                e.starts_with("firmware.send_timeout_us: ")
                    && e.ends_with("out of range (10..=3600000000 us: 10 us to an hour)"),
                "{t}: {e}"
            );
        }
        assert_eq!(
            fw("1e-9").unwrap_err().message,
            "firmware.send_timeout_us: 1e-9 out of range (10..=3600000000 us: 10 us to an hour)"
        );
        let rate = |r: &str| {
            Scenario::parse_validated(&GOOD.replace("window = 8", &format!("rate_mb_s = {r}")))
        };
        assert_eq!(rate("0.001").unwrap().flows[0].rate, RatePlan::Reserve(0.001));
        for r in ["1e-300", "0.0009", "0", "2e6"] {
            let e = rate(r).unwrap_err().message;
            assert!(
                e.starts_with("flows[0].rate_mb_s: ")
                    && e.ends_with("out of range (0.001..=1000000 MB/s)"),
                "{r}: {e}"
            );
        }
        assert!(rate("1e-300").unwrap_err().message.starts_with("flows[0].rate_mb_s: 1e-300 "));
        let e = Scenario::parse_validated(&format!("{GOOD}[run]\nlimit_ms = 1e-9\n")).unwrap_err();
        assert_eq!(
            e.message,
            "run.limit_ms: 1e-9 out of range (0.001..=3600000: 1 us to an hour, in ms)"
        );
        let e = Scenario::parse_validated(&format!(
            "{GOOD}[[faults.link_down]]\nlink = \"node1\"\nat_us = 0\nfor_us = 1e-9\n"
        ))
        .unwrap_err();
        assert!(e.message.starts_with("faults.link_down[0].for_us: 1e-9 out of range"), "{e}");
    }

    #[test]
    fn names_with_a_newline_nul_or_other_control_character_are_refused() {
        let cases = [
            (GOOD.replace("name = \"f1\"", "name = \"f\\n1\""), "flows[0].name: \"f\\n1\" holds a control character ('\\n')"),
            (GOOD.replace("name = \"f1\"", "name = \"f\\u00001\""), "flows[0].name: \"f\\01\" holds a control character ('\\0')"),
            (GOOD.replace("\"lanai4-gm\"", "\"lanai4-gm\\n\""), "profile: \"lanai4-gm\\n\" holds a control character"),
            (GOOD.replace("\"star\"", "\"st\\tar\""), "fabric.topology: \"st\\tar\" holds a control character ('\\t')"),
            (
                "profile = \"x\"\n[fabric]\nnodes = 3\n[[alltoall]]\nname = \"a\\r\"\nport = 2\nbytes = 8\nmessages = 5\n".to_string(),
                "alltoall[0].name: \"a\\r\" holds a control character ('\\r')",
            ),
            (format!("{GOOD}[[faults.link_down]]\nlink = \"node1\\n\"\nat_us = 0\nfor_us = 5\n"), "faults.link_down[0].link: \"node1\\n\" holds a control character"),
        ];
        for (text, want) in cases {
            let e = Scenario::parse_validated(&text).unwrap_err().message;
            assert!(e.starts_with(want), "got `{e}`, want `{want}...`");
        }
        // Other characters, spaces and non-ASCII letters included, are names.
        let v = Scenario::parse_validated(&GOOD.replace("name = \"f1\"", "name = \"flux Ä 1\""));
        assert_eq!(v.unwrap().flows[0].name, "flux Ä 1");
    }

    #[test]
    fn more_flows_than_the_limit_are_refused_before_they_are_expanded() {
        let text = |nodes: u64, offsets: &str| {
            format!(
                "profile = \"x\"\n[fabric]\nnodes = {nodes}\n[[alltoall]]\nname = \"a\"\nport = 2\n\
                 {offsets}bytes = 8\nmessages = 1\n"
            )
        };
        let t = std::time::Instant::now();
        let e = Scenario::parse_validated(&text(1024, "")).unwrap_err().message;
        assert_eq!(
            e,
            "flows: 1047552 flows (alltoall[0]: 1047552) is more than a scenario may have \
             (262144); give [[alltoall]] `offsets` (each node sends to a few others, a shift \
             pattern) or fewer `nodes`"
        );
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
        // With offsets the same nodes are four flows each.
        assert_eq!(
            Scenario::parse_validated(&text(1024, "offsets = [1, 2, 3, 4]\n")).unwrap().flows.len(),
            4096
        );
        // A full all-to-all of 512 nodes is within the limit.
        assert_eq!(
            alltoall_flows(&Scenario::parse(&text(512, "")).unwrap().alltoall[0], 512),
            261_632
        );
        const { assert!(261_632 <= MAX_FLOWS) };
    }

    #[test]
    fn a_validation_error_of_a_value_in_the_file_gets_its_line_and_a_caret() {
        let text = GOOD.replace("start_us = 0", "start_us = 1e308");
        let e = with_excerpt(&text, Scenario::parse_validated(&text).unwrap_err());
        let line = text.lines().position(|l| l.starts_with("start_us")).unwrap() + 1;
        assert_eq!(
            e.message,
            format!(
                "flows[0].start_us: 1e308 out of range (0..=3600000000, an hour in us)\n\
                 at line {line}, column 12\n   |\n{line} | start_us = 1e308\n   |            ^^^^^"
            )
        );
        let text = format!("{GOOD}[firmware]\nsend_timeout_us = 1e-9\n");
        let e = with_excerpt(&text, Scenario::parse_validated(&text).unwrap_err()).message;
        assert!(e.contains("send_timeout_us = 1e-9\n   |                   ^^^^"), "{e}");
        let text =
            format!("{GOOD}[[faults.link_down]]\nlink = \"node1\\n\"\nat_us = 0\nfor_us = 5\n");
        let e = with_excerpt(&text, Scenario::parse_validated(&text).unwrap_err()).message;
        assert!(e.contains("link = \"node1\\n\"\n   |        ^^^^^^^^^"), "{e}");
        // Nothing in the file to point at: the message as it was.
        let text = GOOD.replace("dst = [1, 2]", "");
        let e = Scenario::parse_validated(&text).unwrap_err();
        assert_eq!(with_excerpt(&text, e.clone()), e);
        let e = ScenarioError::new("flows: too many");
        assert_eq!(with_excerpt(GOOD, e.clone()), e);
    }

    #[test]
    fn sizes_cycle() {
        let v = Scenario::parse_validated(&GOOD.replace("bytes = 65536", "sizes = [4, 5000, 64]"))
            .unwrap();
        let f = &v.flows[0];
        assert_eq!((f.size_of(0), f.size_of(1), f.size_of(2), f.size_of(3)), (4, 5000, 64, 4));
        assert_eq!(f.size_classes(), vec![2, 6, 13]);
        assert_eq!(f.max_size(), 5000);
    }
}
