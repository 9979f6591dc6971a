//! Timing profiles: every figure the device model, the fabric, the host
//! cost model (priced in the sim, `nic_sim::HostCost`) and the firmware
//! parameters take from a testbed, as data (TOML). The three built-in
//! profiles (`nic-emu/profiles/*.toml`) are
//! embedded in the binary, so [`Profile::load`] finds them by name from any
//! working directory; any other argument is read as a file path.
//!
//! This module owns the profile's shape, its validation, and the integer
//! conversions the event core uses on its hot path ([`Rate`], [`Clock`]).
//! It touches nothing else.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use nic_abi::{map, regs};

/// Built-in profiles, embedded.
const BUILTIN: [(&str, &str); 3] = [
    ("lanai4-gm", include_str!("../../profiles/lanai4-gm.toml")),
    ("lanai9-gm", include_str!("../../profiles/lanai9-gm.toml")),
    ("modern", include_str!("../../profiles/modern.toml")),
];

const NAMES: [&str; 3] = [BUILTIN[0].0, BUILTIN[1].0, BUILTIN[2].0];

/// A timing profile. Field names match the TOML keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub nic: NicProfile,
    pub link: LinkProfile,
    pub switch: SwitchProfile,
    pub host_dma: HostDmaProfile,
    pub send_dma: EngineProfile,
    pub recv_dma: EngineProfile,
    pub sram_bus: SramBusProfile,
    pub nic_cpu: NicCpuProfile,
    pub host: HostProfile,
    pub firmware: FirmwareProfile,
    /// The multicast latency model's parameters as measured on this
    /// hardware (`mcast::model_params` derives them when absent).
    #[serde(default)]
    pub multicast: Option<McastProfile>,
}

/// Per-relay processing times of each multicast algorithm (us).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcProfile {
    pub separate: f64,
    pub serial: f64,
    pub binomial: f64,
    pub binary: f64,
}

/// The multicast latency model's parameters (us; per-byte terms per byte).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McastProfile {
    pub host_send_us: f64,
    pub host_send_per_byte_us: f64,
    pub host_recv_us: f64,
    pub host_recv_per_byte_us: f64,
    pub nic_send_us: f64,
    pub nic_send_per_byte_us: f64,
    pub nic_recv_us: f64,
    pub nic_recv_per_byte_us: f64,
    pub sdma_us: f64,
    pub rdma_us: f64,
    pub switch_us: f64,
    pub cable_per_hop_us: f64,
    pub host_proc_us: ProcProfile,
    pub nic_proc_us: ProcProfile,
    pub cached_proc_us: f64,
}

impl McastProfile {
    pub fn params(&self) -> nic_abi::multicast::model::ModelParams {
        use nic_abi::multicast::model::{ModelParams, ProcTimes};
        let t = |p: &ProcProfile| ProcTimes {
            separate: p.separate,
            serial: p.serial,
            binomial: p.binomial,
            binary: p.binary,
        };
        ModelParams {
            host_send: self.host_send_us,
            host_send_per_byte: self.host_send_per_byte_us,
            host_recv: self.host_recv_us,
            host_recv_per_byte: self.host_recv_per_byte_us,
            nic_send: self.nic_send_us,
            nic_send_per_byte: self.nic_send_per_byte_us,
            nic_recv: self.nic_recv_us,
            nic_recv_per_byte: self.nic_recv_per_byte_us,
            sdma: self.sdma_us,
            rdma: self.rdma_us,
            switch: self.switch_us,
            cable_per_hop: self.cable_per_hop_us,
            host_proc: t(&self.host_proc_us),
            nic_proc: t(&self.nic_proc_us),
            cached_proc: self.cached_proc_us,
        }
    }
}

/// The NIC itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicProfile {
    /// NIC CPU clock (Hz): the price of a unit of firmware work is in cycles.
    pub cpu_hz: u64,
    /// Real-time clock ticks per second (the `RTC_HZ` register).
    pub rtc_hz: u64,
    /// SRAM size in bytes (at least `map::SRAM_MIN`).
    pub sram_bytes: u32,
    /// Payload bytes per packet (`regs::MTU_MIN` to `nic_abi::MAX_MTU`:
    /// the firmware's boot check, `regs::BootCfg`).
    pub mtu: u32,
    /// The translation cache (recent page-table entries in SRAM): sets (a
    /// power of two) and ways; `tlb_sets * tlb_ways` at most
    /// `map::TLB_MAX`. A miss costs a host-DMA read of
    /// `page_table::LINE_BYTES` bytes (priced by `host_dma`).
    #[serde(default = "default_tlb_sets")]
    pub tlb_sets: u32,
    #[serde(default = "default_tlb_ways")]
    pub tlb_ways: u32,
}

fn default_tlb_sets() -> u32 {
    256
}

fn default_tlb_ways() -> u32 {
    4
}

/// Every link of the fabric (NIC<->switch and switch<->switch).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkProfile {
    /// Bytes per second in each direction.
    pub bandwidth_bytes_per_s: u64,
    /// Signal propagation delay per metre of cable.
    pub cable_ns_per_m: f64,
    /// Length of every cable.
    pub cable_m: f64,
}

/// Most ports a switch may have. A switch of up to 128 ports takes one
/// route byte per hop (`0x80 | port`); a wider one takes two (the port's
/// high bits, then its low 7 bits), which only the sim's fabric reads
/// (`nic_fabric::plan::plan` refuses them for the real-time fabric).
pub const MAX_SWITCH_PORTS: u32 = 1024;

/// Crossbar switches.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchProfile {
    /// Ports per switch (2..=`MAX_SWITCH_PORTS`).
    pub ports: u32,
    /// From a packet's head entering an input port to its head leaving on
    /// the output port (when that port is free): routing + crossbar.
    pub latency_ns: u64,
    /// A packet whose head waits longer than this for a busy output port
    /// is dropped (Myrinet's blocked-packet timeout).
    pub blocked_drop_timeout_ns: u64,
}

/// The host-DMA engine (host memory <-> SRAM over the I/O bus).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostDmaProfile {
    /// Fixed cost of one command (bus arbitration, address phase, ...).
    pub setup_ns: u64,
    pub bandwidth_bytes_per_s: u64,
}

/// The send-DMA or receive-DMA engine (they stream at link speed).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// Fixed cost per packet: send-DMA before the head leaves, receive-DMA
    /// after the tail arrived (before the completion record).
    pub setup_ns: u64,
}

/// The NIC's SRAM bus, which the three DMA engines may share.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SramBusProfile {
    /// Do the engines compete for SRAM bandwidth? The wire engines have
    /// priority (they must keep up with the link); host-DMA transfers wait.
    pub shared: bool,
    pub bandwidth_bytes_per_s: u64,
}

/// How the NIC CPU's time per pass is priced: key `[nic_cpu] pricing`.
/// Under `published` the cycle prices below (`poll`, `descriptor`, ...)
/// apply, tuned to the published hardware's figures; under `firmware`
/// each pass costs the instructions the MCP image runs for its work (the
/// generated table, [`crate::costs`]) times `cycles_per_instruction`,
/// at the profile's `nic.cpu_hz`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pricing {
    /// The profile's own cycle prices (the published testbed's costs).
    #[default]
    Published,
    /// The firmware's measured instructions per unit of work.
    Firmware,
}

impl Pricing {
    /// Every pricing, in the order the docs list them.
    pub const ALL: [Pricing; 2] = [Pricing::Published, Pricing::Firmware];

    /// The key's value: `published` or `firmware`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pricing::Published => "published",
            Pricing::Firmware => "firmware",
        }
    }

    /// The allowed values, for error messages: `published, firmware`.
    pub fn names() -> String {
        Pricing::ALL.map(Pricing::as_str).join(", ")
    }
}

impl fmt::Display for Pricing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Pricing {
    type Err = String;
    fn from_str(s: &str) -> Result<Pricing, String> {
        Pricing::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| format!("\"{s}\" is not a pricing ({})", Pricing::names()))
    }
}

/// Smallest and largest `nic_cpu.cycles_per_instruction`.
pub const CPI_MIN: f64 = 0.01;
pub const CPI_MAX: f64 = 1000.0;

fn default_cpi() -> f64 {
    1.0
}

/// NIC CPU cycles charged per unit of the firmware's reported work
/// (`mcp::Work`), plus a fixed price per main-loop pass (`published`
/// pricing); which pricing applies, and the CPU's cycles per instruction
/// (`firmware` pricing).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCpuProfile {
    /// `published` (default) or `firmware`.
    #[serde(default)]
    pub pricing: Pricing,
    /// Cycles the NIC CPU takes per instruction of the MCP, on average
    /// (`firmware` pricing); 1 when absent.
    #[serde(default = "default_cpi")]
    pub cycles_per_instruction: f64,
    /// Another firmware cost table instead of the built-in one
    /// (`firmware` pricing; a path, relative to the profile file's
    /// directory when the profile is a file).
    #[serde(default)]
    pub firmware_costs: Option<String>,
    pub poll: u64,
    pub descriptor: u64,
    pub tx_packet: u64,
    pub rx_packet: u64,
    pub dma_cmd: u64,
    pub event: u64,
    pub timer: u64,
    /// Per unit of rate control's own work (`Work::flow_ops`: a flow-table
    /// word read or written, a stream the NDT scheduler compares).
    pub flow_op: u64,
    /// Per unit of multicast tree work (`Work::tree_ops`: a child of a
    /// tree computed on the NIC).
    #[serde(default)]
    pub tree_op: u64,
    /// Per multicast step the NIC serves itself (`Work::relay_steps`), by
    /// algorithm (a k-binomial tree is priced as the binomial).
    #[serde(default)]
    pub relay_step: StepPrices,
    /// Per packet of a NIC-served multicast sent (`Work::mcast_packets`).
    #[serde(default)]
    pub mcast_packet: u64,
    /// Per packet of a multicast sent to a further child of the same
    /// sender (`Work::mcast_further`), by algorithm; `mcast_packet` for
    /// every algorithm when not given.
    #[serde(default)]
    pub mcast_further_packet: Option<StepPrices>,
    /// Per multicast packet received into a multicast record
    /// (`Work::mcast_rx_packets`); `mcast_packet` when not given.
    #[serde(default)]
    pub mcast_rx_packet: Option<u64>,
    /// Per multicast descriptor taken (`Work::mcast_descs`) and per
    /// multicast message delivered to the host (`Work::mcast_deliveries`).
    #[serde(default)]
    pub mcast_desc: u64,
    #[serde(default)]
    pub mcast_delivery: u64,
    /// Per element a collective's reduction combines on the NIC
    /// (`Work::coll_elements`), and per floating-point element
    /// (`Work::coll_float_elements`: software arithmetic where the NIC CPU
    /// has no floating-point unit).
    #[serde(default)]
    pub coll_element: u64,
    #[serde(default)]
    pub coll_float_element: u64,
}

/// A price for each multicast algorithm (cycles or ns, as the key says).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepPrices {
    pub separate: u64,
    pub serial: u64,
    pub binomial: u64,
    pub binary: u64,
}

impl StepPrices {
    /// The price of algorithm code `code` (`nic_abi::multicast`), in the
    /// order of `Work::relay_steps`: separate, serial, binomial (and
    /// k-binomial), binary.
    pub fn by_index(&self, i: usize) -> u64 {
        match i {
            0 => self.separate,
            1 => self.serial,
            2 => self.binomial,
            _ => self.binary,
        }
    }

    /// The price of algorithm code `code`.
    pub fn by_code(&self, code: u8) -> u64 {
        match code {
            0 => self.separate,
            1 => self.serial,
            3 => self.binary,
            _ => self.binomial,
        }
    }
}

/// The host CPU cost model (what `NicBackend::charge` charges).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    /// Most DMA-able host memory per node.
    pub memory_bytes: u64,
    /// Programmed I/O write bandwidth to the NIC.
    pub pio_bandwidth_bytes_per_s: u64,
    /// Bytes written by PIO to post one descriptor.
    pub descriptor_bytes: u64,
    /// Fixed part of posting a descriptor (checks, token accounting).
    pub post_fixed_ns: u64,
    /// An event-queue poll that finds an event (and decodes it).
    pub event_found_ns: u64,
    /// An event-queue poll that finds nothing.
    pub event_empty_ns: u64,
    /// `HostOp::Touch(n)`: a program reading/copying n received bytes.
    pub touch_bandwidth_bytes_per_s: u64,
    /// `HostOp::TreeWork(n)`: computing n children of a multicast tree
    /// (the host's part of the host-based and NIC-assisted schemes).
    #[serde(default)]
    pub tree_child_ns: u64,
    /// `HostOp::RelayStep(alg)`: a host's processing of one multicast
    /// step (a relay taking a message and handing it on; separate
    /// addressing at the root: per destination), by algorithm.
    #[serde(default)]
    pub relay_step_ns: StepPrices,
    /// `HostOp::McastReceive`: a member's host taking a host-based
    /// multicast its NIC delivered, beyond the event poll.
    #[serde(default)]
    pub mcast_recv_ns: u64,
}

/// Firmware parameters, written into the cfg registers at reset.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareProfile {
    pub send_timeout_ns: u64,
    pub retransmit_ns: u64,
    pub ack_delay_ns: u64,
    pub nobuf_retry_ns: u64,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub window: u32,
    /// How streams recover lost packets (`regs::RELIABILITY`): key
    /// `reliability = "go-back-n" | "selective"`, go-back-N when absent.
    #[serde(default)]
    pub reliability: Reliability,
}

/// How the firmware's streams recover lost packets (the `RELIABILITY`
/// register). Profile and scenario key `[firmware] reliability`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reliability {
    /// The receiver takes packets in order only; the sender resends from
    /// the first one missing.
    #[default]
    GoBackN,
    /// Selective repeat: the receiver keeps packets past a gap and names
    /// what is missing; the sender resends only that.
    Selective,
}

impl Reliability {
    /// Every mode, in the order the docs list them.
    pub const ALL: [Reliability; 2] = [Reliability::GoBackN, Reliability::Selective];

    /// The key's value: `go-back-n` or `selective`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reliability::GoBackN => "go-back-n",
            Reliability::Selective => "selective",
        }
    }

    /// The `regs::RELIABILITY` value.
    pub fn register_value(self) -> u32 {
        match self {
            Reliability::GoBackN => nic_abi::regs::RELIABILITY_GO_BACK_N,
            Reliability::Selective => nic_abi::regs::RELIABILITY_SELECTIVE,
        }
    }

    /// The allowed values, for error messages: `go-back-n, selective`.
    pub fn names() -> String {
        Reliability::ALL.map(Reliability::as_str).join(", ")
    }
}

impl fmt::Display for Reliability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Reliability {
    type Err = String;
    fn from_str(s: &str) -> Result<Reliability, String> {
        Reliability::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| format!("\"{s}\" is not a reliability mode ({})", Reliability::names()))
    }
}

/// Why a profile could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// Not a built-in name, and no file of that name.
    NotFound { name: String, io: String },
    /// Not a built-in name; a file of that name that cannot be read as a
    /// profile (not a regular file, too large, not UTF-8, no permission).
    Unreadable { path: String, io: String },
    /// The TOML did not parse (unknown key, wrong type, ...).
    Parse { origin: String, message: String },
    /// A value is outside its domain.
    Invalid { origin: String, message: String },
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::NotFound { name, io } => write!(
                f,
                "no timing profile `{name}`: not a built-in ({}) and not a readable file ({io})",
                NAMES.join(", ")
            ),
            ProfileError::Unreadable { path, io } => {
                write!(f, "timing profile {path}: cannot be read: {io}")
            }
            ProfileError::Parse { origin, message } => {
                write!(f, "profile {origin}: {}", message.trim_end())
            }
            ProfileError::Invalid { origin, message } => write!(f, "profile {origin}: {message}"),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// A built-in profile by name (`lanai4-gm`, `lanai9-gm`, `modern`), or
    /// a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::from_toml(text, name);
        }
        match read_text(Path::new(name_or_path), PROFILE_MAX_BYTES) {
            Ok(text) => {
                let mut p = Profile::from_toml(&text, name_or_path)?;
                // A cost table's relative path is the profile file's.
                if let Some(t) = &p.nic_cpu.firmware_costs {
                    let dir = Path::new(name_or_path).parent().unwrap_or(Path::new(""));
                    p.nic_cpu.firmware_costs = Some(dir.join(t).display().to_string());
                }
                Ok(p)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ProfileError::NotFound { name: name_or_path.to_string(), io: e.to_string() })
            }
            Err(e) => {
                Err(ProfileError::Unreadable { path: name_or_path.to_string(), io: e.to_string() })
            }
        }
    }

    /// Names of the built-in profiles.
    pub fn names() -> &'static [&'static str] {
        &NAMES
    }

    /// Parse and validate profile text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        let parse_err = |e: toml::de::Error| ProfileError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        };
        let table: toml::Table = toml::from_str(text).map_err(parse_err)?;
        check_ranges("", &table)
            .and_then(|()| check_reliability(&table))
            .and_then(|()| check_pricing(&table))
            .map_err(|message| ProfileError::Invalid { origin: origin.to_string(), message })?;
        let p: Profile = toml::from_str(text).map_err(parse_err)?;
        p.validate()
            .map_err(|message| ProfileError::Invalid { origin: origin.to_string(), message })?;
        Ok(p)
    }

    /// Check every value's domain; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        fn positive(key: &str, v: u64) -> Result<(), String> {
            if v == 0 {
                Err(format!("{key} must be positive"))
            } else {
                Ok(())
            }
        }
        positive("nic.cpu_hz", self.nic.cpu_hz)?;
        positive("nic.rtc_hz", self.nic.rtc_hz)?;
        if self.nic.rtc_hz > 1_000_000_000 {
            return Err(format!(
                "nic.rtc_hz: {} above 1 GHz (ticks finer than 1 ns)",
                self.nic.rtc_hz
            ));
        }
        if self.nic.sram_bytes < map::SRAM_MIN {
            return Err(format!(
                "nic.sram_bytes: {} is below the SRAM map's minimum {}",
                self.nic.sram_bytes,
                map::SRAM_MIN
            ));
        }
        let (sets, ways) = (self.nic.tlb_sets, self.nic.tlb_ways);
        if !sets.is_power_of_two() {
            return Err(format!("nic.tlb_sets: {sets} is not a power of two"));
        }
        if ways == 0 || sets as u64 * ways as u64 > map::TLB_MAX as u64 {
            return Err(format!(
                "nic.tlb_ways: {sets} sets x {ways} ways out of range (1 to {} entries)",
                map::TLB_MAX
            ));
        }
        // What the firmware would refuse at boot (it halts naming the
        // register), refused here naming the key: the same check.
        let boot = regs::BootCfg {
            num_nodes: 1,
            node_id: 0,
            send_tokens: self.firmware.send_tokens,
            recv_tokens: self.firmware.recv_tokens,
            mtu: self.nic.mtu,
        };
        if let Err(r) = boot.check() {
            let (key, v) = match r.reg {
                "SEND_TOKENS" => ("firmware.send_tokens", self.firmware.send_tokens),
                "RECV_TOKENS" => ("firmware.recv_tokens", self.firmware.recv_tokens),
                "MTU" => ("nic.mtu", self.nic.mtu),
                other => (other, 0),
            };
            return Err(format!(
                "{key}: {v} out of range ({}..={}: the firmware does not start with {} outside \
                 it)",
                r.min, r.max, r.reg
            ));
        }
        if !(1..=mcp::WINDOW_MAX).contains(&self.firmware.window) {
            return Err(format!(
                "firmware.window: {} out of range (1..={}: the firmware's most unacknowledged \
                 packets per stream)",
                self.firmware.window,
                mcp::WINDOW_MAX
            ));
        }
        positive("link.bandwidth_bytes_per_s", self.link.bandwidth_bytes_per_s)?;
        for (key, v) in
            [("link.cable_ns_per_m", self.link.cable_ns_per_m), ("link.cable_m", self.link.cable_m)]
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{key}: {} must be a non-negative number", Short(v)));
            }
        }
        if self.cable_delay_ns() > MAX_CABLE_NS {
            return Err(format!(
                "link.cable_m x link.cable_ns_per_m: a cable of {} m at {} ns/m takes longer \
                 than {} s",
                Short(self.link.cable_m),
                Short(self.link.cable_ns_per_m),
                MAX_CABLE_NS / 1_000_000_000
            ));
        }
        if !(2..=MAX_SWITCH_PORTS).contains(&self.switch.ports) {
            return Err(format!(
                "switch.ports: {} out of range (2..={MAX_SWITCH_PORTS})",
                self.switch.ports
            ));
        }
        positive("switch.blocked_drop_timeout_ns", self.switch.blocked_drop_timeout_ns)?;
        positive("host_dma.bandwidth_bytes_per_s", self.host_dma.bandwidth_bytes_per_s)?;
        positive("sram_bus.bandwidth_bytes_per_s", self.sram_bus.bandwidth_bytes_per_s)?;
        positive("host.pio_bandwidth_bytes_per_s", self.host.pio_bandwidth_bytes_per_s)?;
        positive("host.touch_bandwidth_bytes_per_s", self.host.touch_bandwidth_bytes_per_s)?;
        if self.host.memory_bytes < 1 << 20 {
            return Err(format!("host.memory_bytes: {} is below 1 MiB", self.host.memory_bytes));
        }
        let t = self.firmware.send_timeout_ns;
        if !(SEND_TIMEOUT_MIN_NS..=SEND_TIMEOUT_MAX_NS).contains(&t) {
            return Err(format!(
                "firmware.send_timeout_ns: {t} out of range \
                 ({SEND_TIMEOUT_MIN_NS}..={SEND_TIMEOUT_MAX_NS}: 10 us to an hour)"
            ));
        }
        positive("firmware.retransmit_ns", self.firmware.retransmit_ns)?;
        check_cpi("nic_cpu.cycles_per_instruction", self.nic_cpu.cycles_per_instruction)?;
        Ok(())
    }

    /// The firmware cost table this profile's `firmware` pricing uses:
    /// `nic_cpu.firmware_costs`, else the built-in one. Err: the file
    /// cannot be read or is no table (the message names it).
    pub fn firmware_costs(&self) -> Result<crate::costs::FirmwareCosts, String> {
        match &self.nic_cpu.firmware_costs {
            None => Ok(crate::costs::FirmwareCosts::builtin().clone()),
            Some(path) => crate::costs::FirmwareCosts::load(Path::new(path))
                .map_err(|e| format!("nic_cpu.firmware_costs: {e}")),
        }
    }

    /// Propagation delay of one cable, ns (rounded to the nearest ns;
    /// saturating, `validate` bounds it).
    pub fn cable_delay_ns(&self) -> u64 {
        (self.link.cable_ns_per_m * self.link.cable_m).round() as u64
    }

    /// RTC ticks for a duration in ns (rounded up, at least 1 if non-zero).
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        let t = (ns as u128 * self.nic.rtc_hz as u128).div_ceil(1_000_000_000);
        t.min(u64::MAX as u128) as u64
    }
}

/// Shortest send timeout (ns): 10 us, twenty ticks of a 2 MHz RTC. The
/// send timeout is how long the firmware keeps retrying a send that finds
/// no receive buffer (`nobuf_retry_ns` apart) before it fails the send.
pub const SEND_TIMEOUT_MIN_NS: u64 = 10_000;
/// Longest send timeout (ns): an hour, as every time of a profile.
pub const SEND_TIMEOUT_MAX_NS: u64 = 3_600_000_000_000;

/// A send timeout given in microseconds (a scenario's `[firmware]
/// send_timeout_us`, `nic-cluster --send-timeout-us`) in ns; outside
/// `SEND_TIMEOUT_MIN_NS..=SEND_TIMEOUT_MAX_NS` it is refused naming `key`,
/// the value and the range.
pub fn send_timeout_us_to_ns(key: &str, us: f64) -> Result<u64, String> {
    let (min, max) = (SEND_TIMEOUT_MIN_NS as f64 / 1e3, SEND_TIMEOUT_MAX_NS as f64 / 1e3);
    if us.is_finite() && (min..=max).contains(&us) {
        Ok((us * 1e3).round() as u64)
    } else {
        Err(format!(
            "{key}: {} out of range ({}..={} us: 10 us to an hour)",
            Short(us),
            Short(min),
            Short(max)
        ))
    }
}

/// Largest profile file read (bytes): a profile is a few KiB.
pub const PROFILE_MAX_BYTES: u64 = 1 << 20;

/// Longest cable delay a profile may give (1 s).
pub const MAX_CABLE_NS: u64 = 1_000_000_000;

/// Read a text file of at most `limit` bytes: a longer file is refused
/// after reading `limit + 1` bytes, not read whole, and anything but a
/// regular file (a directory, a FIFO, a device, a socket) is refused
/// before a byte is read. The file is opened without blocking, so a FIFO
/// with no writer is refused at once instead of waiting for one.
pub fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let regular = |kind: std::fs::FileType| {
        if kind.is_file() {
            return Ok(());
        }
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a file"
        };
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file ({what})"),
        ))
    };
    // Looked at before it is opened (opening a socket fails with a vague
    // error), and again once open, in case the path changed in between.
    regular(std::fs::metadata(path)?.file_type())?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    regular(file.metadata()?.file_type())?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// The bound of every number of a profile, by its key: times can be added
/// to a u64 clock in ns for a long run without overflow, rates and sizes
/// stay where their products fit. Every number is finite and not negative.
fn bound_of(key: &str) -> f64 {
    if key.ends_with("_ns") {
        3.6e12 // an hour
    } else if key.ends_with("_us") {
        3.6e9
    } else if key.ends_with("_hz") {
        1e12
    } else if key.contains("bandwidth") {
        1e13 // 10 TB/s
    } else if key.ends_with("cable_m") {
        1e6 // 1000 km
    } else if key.ends_with("_bytes") {
        (1u64 << 40) as f64
    } else {
        1e12 // cycle prices, counts, factors
    }
}

/// Every number in `t` (nested tables and arrays too) within `bound_of`
/// its key; the error names the key.
fn check_ranges(prefix: &str, t: &toml::Table) -> Result<(), String> {
    fn check(key: &str, v: &toml::Value) -> Result<(), String> {
        if key == "nic_cpu.cycles_per_instruction" {
            return Ok(()); // `check_cpi` names its own range
        }
        let (x, shown) = match v {
            toml::Value::Integer(i) => (*i as f64, i.to_string()),
            toml::Value::Float(f) => (*f, Short(*f).to_string()),
            toml::Value::Table(t) => return check_ranges(key, t),
            toml::Value::Array(a) => {
                return a.iter().enumerate().try_for_each(|(i, v)| check(&format!("{key}[{i}]"), v))
            }
            _ => return Ok(()),
        };
        let max = bound_of(key);
        if x.is_finite() && (0.0..=max).contains(&x) {
            Ok(())
        } else {
            Err(format!("{key}: {shown} out of range (0..={max:e})"))
        }
    }
    for (k, v) in t {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        check(&key, v)?;
    }
    Ok(())
}

/// `firmware.reliability`, when given, is one of the modes (checked on the
/// table, so the error names the key and the allowed values).
fn check_reliability(t: &toml::Table) -> Result<(), String> {
    let Some(v) = t.get("firmware").and_then(|f| f.get("reliability")) else {
        return Ok(());
    };
    match v.as_str() {
        Some(s) => s.parse::<Reliability>().map(|_| ()),
        None => Err(format!("{v} is not a string ({})", Reliability::names())),
    }
    .map_err(|m| format!("firmware.reliability: {m}"))
}

/// `nic_cpu.pricing`, when given, is one of the pricings (checked on the
/// table, so the error names the key and the allowed values).
fn check_pricing(t: &toml::Table) -> Result<(), String> {
    let Some(v) = t.get("nic_cpu").and_then(|f| f.get("pricing")) else {
        return Ok(());
    };
    match v.as_str() {
        Some(s) => s.parse::<Pricing>().map(|_| ()),
        None => Err(format!("{v} is not a string ({})", Pricing::names())),
    }
    .map_err(|m| format!("nic_cpu.pricing: {m}"))
}

/// `nic_cpu.cycles_per_instruction` within `CPI_MIN..=CPI_MAX`; the error
/// names `key`.
pub fn check_cpi(key: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (CPI_MIN..=CPI_MAX).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{key}: {} out of range ({}..={} NIC CPU cycles per instruction)",
            Short(v),
            Short(CPI_MIN),
            Short(CPI_MAX)
        ))
    }
}

/// A number as messages print it: as written when it is of everyday size,
/// else in scientific notation (`1e308`, `1e-9`), never hundreds of
/// digits; the shortest form that reads back as the same number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Short(pub f64);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&x.abs()) {
            write!(f, "{x}")
        } else {
            write!(f, "{x:e}")
        }
    }
}

/// A byte rate held as femtoseconds per byte, so that a transfer's
/// duration is one multiplication (exact for the usual rates; otherwise
/// off by under 1e-7 relative). Durations round up to whole ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    fs_per_byte: u64,
}

impl Rate {
    pub fn new(bytes_per_s: u64) -> Rate {
        let bps = bytes_per_s.max(1) as u128;
        Rate { fs_per_byte: ((1_000_000_000_000_000u128 + bps / 2) / bps).max(1) as u64 }
    }

    /// Time to move `bytes`, ns.
    #[inline]
    pub fn ns(self, bytes: u64) -> u64 {
        (bytes.saturating_mul(self.fs_per_byte)).div_ceil(1_000_000)
    }
}

/// A clock frequency, for cycle counts -> ns and ns <-> ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    hz: u64,
    /// ns per cycle when it is a whole number (fast path).
    ns_per_cycle: Option<u64>,
    fs_per_cycle: u64,
}

impl Clock {
    pub fn new(hz: u64) -> Clock {
        let hz = hz.max(1);
        let ns_per_cycle = (1_000_000_000 % hz == 0).then(|| 1_000_000_000 / hz);
        let fs = (1_000_000_000_000_000u128 + hz as u128 / 2) / hz as u128;
        Clock { hz, ns_per_cycle, fs_per_cycle: fs as u64 }
    }

    pub fn hz(self) -> u64 {
        self.hz
    }

    /// Duration of `cycles`, ns (rounded up).
    #[inline]
    pub fn cycles_ns(self, cycles: u64) -> u64 {
        match self.ns_per_cycle {
            Some(n) => cycles.saturating_mul(n),
            None => cycles.saturating_mul(self.fs_per_cycle).div_ceil(1_000_000),
        }
    }

    /// Whole ticks elapsed at time `ns`.
    #[inline]
    pub fn ticks_at(self, ns: u64) -> u64 {
        match self.ns_per_cycle {
            Some(n) => ns / n,
            None => (ns as u128 * self.hz as u128 / 1_000_000_000) as u64,
        }
    }

    /// First ns at which `ticks` have elapsed.
    #[inline]
    pub fn ns_at_tick(self, ticks: u64) -> u64 {
        match self.ns_per_cycle {
            Some(n) => ticks.saturating_mul(n),
            None => {
                let v = (ticks as u128 * 1_000_000_000).div_ceil(self.hz as u128);
                v.min(u64::MAX as u128) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_loads_by_name() {
        for name in Profile::names() {
            let p = Profile::load(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&p.name, name);
        }
    }

    #[test]
    fn lanai_profiles_carry_the_spec_figures() {
        let l4 = Profile::load("lanai4-gm").unwrap();
        assert_eq!(l4.nic.cpu_hz, 33_000_000);
        assert_eq!(l4.nic.rtc_hz, 2_000_000);
        assert_eq!(l4.nic.mtu, 4096);
        assert_eq!(l4.link.bandwidth_bytes_per_s, 160_000_000);
        assert_eq!(l4.switch.ports, 16);
        assert_eq!(l4.firmware.send_timeout_ns, 60_000_000_000);
        let l9 = Profile::load("lanai9-gm").unwrap();
        assert_eq!(l9.switch.latency_ns, 500);
        assert_eq!(l9.cable_delay_ns(), 21);
    }

    #[test]
    fn a_profile_file_loads_by_path() {
        let dir = std::env::temp_dir().join(format!("nic-emu-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        let text = BUILTIN[0].1.replace("name = \"lanai4-gm\"", "name = \"mine\"");
        std::fs::write(&path, text).unwrap();
        let p = Profile::load(path.to_str().unwrap()).unwrap();
        assert_eq!(p.name, "mine");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn unknown_names_keys_and_bad_values_are_refused_with_the_cause() {
        let e = Profile::load("no-such-profile").unwrap_err();
        assert!(e.to_string().contains("lanai4-gm"), "{e}");
        let text = BUILTIN[0].1.replace("[nic]", "[nic]\nbogus = 1");
        let e = Profile::from_toml(&text, "t").unwrap_err();
        assert!(matches!(e, ProfileError::Parse { .. }) && e.to_string().contains("bogus"), "{e}");
        // Token counts past what the firmware gives a port.
        for (line, key, most) in [
            ("send_tokens = 32 ", "send_tokens", regs::PORT_SEND_TOKENS_MAX),
            ("recv_tokens = 32 ", "recv_tokens", regs::PORT_RECV_TOKENS_MAX),
        ] {
            let text = BUILTIN[0].1.replace(line, &format!("{key} = {} ", most + 1));
            let e = Profile::from_toml(&text, "t").unwrap_err().to_string();
            let want = format!("firmware.{key}: {} out of range (1..={most}: ", most + 1);
            assert!(e.contains(&want), "{e}");
        }
        let text = BUILTIN[0].1.replace("mtu = 4096", "mtu = 9000");
        let e = Profile::from_toml(&text, "t").unwrap_err();
        assert!(e.to_string().contains("nic.mtu: 9000 out of range (64..=4096"), "{e}");
        // Switches: 2 to 1024 ports (more than 128 take two route bytes a hop).
        let ports = |n: u32| BUILTIN[0].1.replace("ports = 16 ", &format!("ports = {n} "));
        assert_eq!(Profile::from_toml(&ports(1024), "t").unwrap().switch.ports, 1024);
        for n in [1, 1025] {
            let e = Profile::from_toml(&ports(n), "t").unwrap_err();
            assert!(e.to_string().contains(&format!("switch.ports: {n} out of range (2..=1024)")));
        }
    }

    #[test]
    fn reliability_defaults_to_go_back_n_and_a_bad_value_names_the_key_and_the_choices() {
        for name in Profile::names() {
            let p = Profile::load(name).unwrap();
            assert_eq!(p.firmware.reliability, Reliability::GoBackN, "{name}");
        }
        let base = BUILTIN[1].1;
        let line = base.lines().find(|l| l.trim_start().starts_with("reliability")).unwrap();
        // Absent: go-back-N.
        let p = Profile::from_toml(&base.replace(line, ""), "t").unwrap();
        assert_eq!(p.firmware.reliability, Reliability::GoBackN);
        assert_eq!(p.firmware.reliability.register_value(), nic_abi::regs::RELIABILITY_GO_BACK_N);
        let p =
            Profile::from_toml(&base.replace(line, "reliability = \"selective\""), "t").unwrap();
        assert_eq!(p.firmware.reliability, Reliability::Selective);
        assert_eq!(p.firmware.reliability.register_value(), nic_abi::regs::RELIABILITY_SELECTIVE);
        let e = Profile::from_toml(&base.replace(line, "reliability = \"sack\""), "t").unwrap_err();
        assert!(matches!(e, ProfileError::Invalid { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "profile t: firmware.reliability: \"sack\" is not a reliability mode \
             (go-back-n, selective)"
        );
        let e = Profile::from_toml(&base.replace(line, "reliability = 1"), "t").unwrap_err();
        assert!(e.to_string().contains("firmware.reliability: 1 is not a string"), "{e}");
        assert_eq!("selective".parse::<Reliability>(), Ok(Reliability::Selective));
        assert_eq!(Reliability::GoBackN.to_string(), "go-back-n");
    }

    #[test]
    fn pricing_is_published_by_default_and_a_bad_value_names_the_key_and_the_choices() {
        for name in Profile::names() {
            let p = Profile::load(name).unwrap();
            assert_eq!(p.nic_cpu.pricing, Pricing::Published, "{name}");
            assert_eq!(p.nic_cpu.cycles_per_instruction, 1.0, "{name}");
        }
        let base = BUILTIN[1].1;
        let line = base.lines().find(|l| l.trim_start().starts_with("pricing =")).unwrap();
        let cpi = base.lines().find(|l| l.starts_with("cycles_per_instruction")).unwrap();
        let p = Profile::from_toml(&base.replace(line, "").replace(cpi, ""), "t").unwrap();
        assert_eq!(
            (p.nic_cpu.pricing, p.nic_cpu.cycles_per_instruction),
            (Pricing::Published, 1.0)
        );
        let p = Profile::from_toml(&base.replace(line, "pricing = \"firmware\""), "t").unwrap();
        assert_eq!(p.nic_cpu.pricing, Pricing::Firmware);
        let e = Profile::from_toml(&base.replace(line, "pricing = \"measured\""), "t");
        assert_eq!(
            e.unwrap_err().to_string(),
            "profile t: nic_cpu.pricing: \"measured\" is not a pricing (published, firmware)"
        );
        let e = Profile::from_toml(&base.replace(line, "pricing = 2"), "t").unwrap_err();
        assert!(e.to_string().contains("nic_cpu.pricing: 2 is not a string"), "{e}");
        for bad in ["0.0", "0.001", "1001", "1e300"] {
            let text = base.replace(cpi, &format!("cycles_per_instruction = {bad}"));
            let e = Profile::from_toml(&text, "t").unwrap_err().to_string();
            assert!(
                e.starts_with("profile t: nic_cpu.cycles_per_instruction: ")
                    && e.ends_with("out of range (0.01..=1000 NIC CPU cycles per instruction)"),
                "{bad}: {e}"
            );
        }
        let p = Profile::from_toml(&base.replace(cpi, "cycles_per_instruction = 2"), "t").unwrap();
        assert_eq!(p.nic_cpu.cycles_per_instruction, 2.0);
        assert_eq!("firmware".parse::<Pricing>(), Ok(Pricing::Firmware));
    }

    #[test]
    fn a_profile_file_names_its_cost_table_relative_to_itself() {
        let dir = std::env::temp_dir().join(format!("nic-emu-costs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mine = crate::costs::BUILTIN_TEXT
            .lines()
            .map(|l| if l.starts_with("idle_pass =") { "idle_pass = 7.0" } else { l })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("mine-costs.toml"), mine).unwrap();
        let base = BUILTIN[1].1;
        let line = base.lines().find(|l| l.trim_start().starts_with("pricing =")).unwrap();
        let text =
            base.replace(line, "pricing = \"firmware\"\nfirmware_costs = \"mine-costs.toml\"");
        let path = dir.join("p.toml");
        std::fs::write(&path, text).unwrap();
        let p = Profile::load(path.to_str().unwrap()).unwrap();
        assert_eq!(p.firmware_costs().unwrap().instructions.idle_pass, 7.0);
        // The built-in table when none is named.
        let builtin = Profile::load("lanai9-gm").unwrap().firmware_costs().unwrap();
        assert_eq!(&builtin, crate::costs::FirmwareCosts::builtin());
        std::fs::remove_file(dir.join("mine-costs.toml")).unwrap();
        let e = p.firmware_costs().unwrap_err();
        assert!(
            e.starts_with("nic_cpu.firmware_costs: firmware cost table ")
                && e.contains("mine-costs.toml"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn numbers_that_would_overflow_the_clock_are_refused_naming_the_key() {
        let base = BUILTIN[0].1;
        let cable = base.lines().find(|l| l.trim_start().starts_with("cable_m")).unwrap();
        // A cable of 3e18 m (its delay would wrap the ns clock).
        let e = Profile::from_toml(&base.replace(cable, "cable_m = 3e18"), "t").unwrap_err();
        assert!(e.to_string().contains("link.cable_m"), "{e}");
        // Each in range on its own, too long together (10 s).
        let speed = base.lines().find(|l| l.trim_start().starts_with("cable_ns_per_m")).unwrap();
        let slow = base.replace(cable, "cable_m = 1000.0").replace(speed, "cable_ns_per_m = 1e7");
        let e = Profile::from_toml(&slow, "t").unwrap_err();
        assert!(e.to_string().contains("cable_m x link.cable_ns_per_m"), "{e}");
        let t = base.lines().find(|l| l.trim_start().starts_with("send_timeout_ns")).unwrap();
        let e = Profile::from_toml(&base.replace(t, "send_timeout_ns = 18446744073709551615"), "t");
        // (u64::MAX does not fit TOML's i64: a parse error naming the key.)
        assert!(e.unwrap_err().to_string().contains("send_timeout_ns"));
        let e = Profile::from_toml(&base.replace(t, "send_timeout_ns = 9000000000000000"), "t");
        assert!(e.unwrap_err().to_string().contains("firmware.send_timeout_ns"));
        let e = Profile::from_toml(&base.replace(cable, "cable_m = nan"), "t").unwrap_err();
        assert!(e.to_string().contains("link.cable_m"), "{e}");
    }

    #[test]
    fn a_huge_profile_file_is_refused_without_reading_it_all() {
        let dir = std::env::temp_dir().join(format!("nic-emu-huge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("huge.toml");
        std::fs::write(&path, vec![b'#'; PROFILE_MAX_BYTES as usize + 1]).unwrap();
        let e = Profile::load(path.to_str().unwrap()).unwrap_err();
        assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_profile_path_that_is_no_regular_file_is_refused_at_once() {
        use std::time::{Duration, Instant};
        let dir = std::env::temp_dir().join(format!("nic-emu-nonfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600))
            .unwrap();
        let sock = dir.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let fifo_s = fifo.to_str().unwrap().to_string();
        let sock_s = sock.to_str().unwrap().to_string();
        let dir_s = dir.to_str().unwrap().to_string();
        for (path, what) in [
            (fifo_s.as_str(), "a FIFO"),
            (dir_s.as_str(), "a directory"),
            ("/dev/zero", "a device"),
            (sock_s.as_str(), "a socket"),
        ] {
            // A FIFO with no writer would block a plain open for good: run
            // the load on a thread and give up on it after a while.
            let t = Instant::now();
            let (tx, rx) = std::sync::mpsc::channel();
            let p = path.to_string();
            std::thread::spawn(move || tx.send(Profile::load(&p).map(|_| ())));
            let got = rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("loading {path} ({what}) still waits after 5 s"));
            let e = got.unwrap_err().to_string();
            assert!(e.contains(&format!("not a regular file ({what})")), "{path}: {e}");
            assert!(e.contains(path), "the path is named: {e}");
            assert!(t.elapsed() < Duration::from_secs(1), "{path}: {:?}", t.elapsed());
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn values_the_firmware_would_refuse_at_boot_are_refused_naming_key_and_range() {
        let base = BUILTIN[1].1;
        let with = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            Profile::from_toml(&base.replace(from, to), "t")
        };
        for (mtu, ok) in [(1, false), (63, false), (64, true), (4096, true), (4097, false)] {
            let r = with("mtu = 4096 ", &format!("mtu = {mtu} "));
            match r {
                Ok(p) => assert!(ok && p.nic.mtu == mtu, "{mtu}"),
                Err(e) => assert_eq!(
                    (ok, e.to_string()),
                    (
                        false,
                        format!(
                            "profile t: nic.mtu: {mtu} out of range (64..=4096: the firmware \
                             does not start with MTU outside it)"
                        )
                    )
                ),
            }
        }
        for (from, to, want) in [
            (
                "send_tokens = 32 ",
                "send_tokens = 0 ",
                "firmware.send_tokens: 0 out of range (1..=64",
            ),
            (
                "recv_tokens = 32 ",
                "recv_tokens = 0 ",
                "firmware.recv_tokens: 0 out of range (1..=32",
            ),
            ("window = 16 ", "window = 0 ", "firmware.window: 0 out of range (1..=64"),
            ("window = 16 ", "window = 65 ", "firmware.window: 65 out of range (1..=64"),
        ] {
            let e = with(from, to).unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
        // Whatever the profile takes, the firmware's own check takes too.
        for name in Profile::names() {
            let p = Profile::load(name).unwrap();
            let boot = regs::BootCfg {
                num_nodes: 1,
                node_id: 0,
                send_tokens: p.firmware.send_tokens,
                recv_tokens: p.firmware.recv_tokens,
                mtu: p.nic.mtu,
            };
            assert_eq!(boot.check(), Ok(()), "{name}");
        }
    }

    #[test]
    fn send_timeouts_are_refused_below_10_us_and_above_an_hour_naming_the_range() {
        assert_eq!(send_timeout_us_to_ns("k", 10.0), Ok(10_000));
        assert_eq!(send_timeout_us_to_ns("k", 3.6e9), Ok(3_600_000_000_000));
        for us in [1e-9, 9.99, 0.0, -5.0, 3.7e9, f64::NAN, 1e308] {
            let e = send_timeout_us_to_ns("firmware.send_timeout_us", us).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "firmware.send_timeout_us: {} out of range (10..=3600000000 us: 10 us to an \
                     hour)",
                    Short(us)
                )
            );
        }
        let base = BUILTIN[1].1;
        let t = base.lines().find(|l| l.trim_start().starts_with("send_timeout_ns")).unwrap();
        let e = Profile::from_toml(&base.replace(t, "send_timeout_ns = 9999"), "t").unwrap_err();
        assert!(
            e.to_string().contains("firmware.send_timeout_ns: 9999 out of range (10000..="),
            "{e}"
        );
    }

    #[test]
    fn numbers_in_messages_are_short() {
        assert_eq!(Short(1e308).to_string(), "1e308");
        assert_eq!(Short(1e-300).to_string(), "1e-300");
        assert_eq!(Short(1.5e-9).to_string(), "1.5e-9");
        assert_eq!(Short(2500.0).to_string(), "2500");
        assert_eq!(Short(0.25).to_string(), "0.25");
        assert_eq!(Short(-3.0).to_string(), "-3");
        assert_eq!(Short(f64::NAN).to_string(), "NaN");
        assert_eq!(Short(f64::INFINITY).to_string(), "inf");
        let base = BUILTIN[0].1;
        let cable = base.lines().find(|l| l.trim_start().starts_with("cable_m")).unwrap();
        let e = Profile::from_toml(&base.replace(cable, "cable_m = 1e308"), "t").unwrap_err();
        assert_eq!(e.to_string(), "profile t: link.cable_m: 1e308 out of range (0..=1e6)");
    }

    #[test]
    fn rates_and_clocks_convert_exactly_for_round_figures() {
        assert_eq!(Rate::new(160_000_000).ns(4096), 25_600);
        assert_eq!(Rate::new(12_500_000_000).ns(4096), 328); // 327.68 rounds up
        let rtc = Clock::new(2_000_000);
        assert_eq!(rtc.ticks_at(48_000), 96);
        assert_eq!(rtc.ns_at_tick(96), 48_000);
        let cpu = Clock::new(33_000_000);
        assert_eq!(cpu.cycles_ns(33), 1_000);
        let odd = Clock::new(3);
        assert_eq!(odd.ticks_at(1_000_000_000), 3);
        assert_eq!(odd.ns_at_tick(1), 333_333_334);
    }
}
