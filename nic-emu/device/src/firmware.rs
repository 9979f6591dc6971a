//! The seam between the event core and the NIC control program. The core
//! runs any [`Firmware`]: the real MCP ([`McpFirmware`], made by
//! [`mcp_firmware`]: the one place that knows the `mcp` crate's API), or a stand-in for tests that
//! drive the DMA rings by hand ([`IdleFirmware`]) or that load the fabric
//! without the MCP's costs (`testfw`).
//!
//! Firmware sees SRAM (register block included) through `mcp::hw::SliceHw`,
//! the same hardware interface the MCP is written against; the core writes
//! the RTC register before every poll.

pub use mcp::hw::{Hw, SliceHw, Sram};

/// What one poll pass did; the profile prices each unit in NIC CPU cycles.
pub use mcp::{check_gating_here, SdmaState, Work, MULTICAST};

/// A NIC control program as the event core drives it.
pub trait Firmware {
    /// Boot: read the configuration registers, post receive buffers, set
    /// `FW_STATUS`. Err: the firmware halted (the message says why).
    fn init(&mut self, hw: &mut SliceHw<'_>) -> Result<(), String>;
    /// One pass of the main loop (bounded work); says what it did.
    fn poll(&mut self, hw: &mut SliceHw<'_>) -> Work;
    /// RTC tick at which a timer falls due, if any.
    fn next_deadline(&self) -> Option<u64>;
}

/// Firmware that does nothing: for tests that drive the engines' rings
/// by hand through SRAM.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdleFirmware;

impl Firmware for IdleFirmware {
    fn init(&mut self, _hw: &mut SliceHw<'_>) -> Result<(), String> {
        Ok(())
    }
    fn poll(&mut self, _hw: &mut SliceHw<'_>) -> Work {
        Work::default()
    }
    fn next_deadline(&self) -> Option<u64> {
        None
    }
}

/// The MCP for one node, boxed (its state is large).
///
/// MCP GLUE: this and [`McpFirmware`] are the only places that name the
/// `mcp` crate's firmware API (`mcp::Mcp::{new, init, poll,
/// next_deadline}`, docs/design/interfaces.md).
pub fn mcp_firmware(_node: usize) -> Box<dyn Firmware> {
    Box::new(McpFirmware::new())
}

/// The MCP as a [`Firmware`].
pub struct McpFirmware {
    mcp: Box<mcp::Mcp>,
}

impl McpFirmware {
    pub fn new() -> McpFirmware {
        McpFirmware { mcp: Box::default() }
    }

    /// The firmware's own state (for tests and debuggers).
    pub fn mcp(&self) -> &mcp::Mcp {
        &self.mcp
    }
}

impl Default for McpFirmware {
    fn default() -> Self {
        McpFirmware::new()
    }
}

impl Firmware for McpFirmware {
    fn init(&mut self, hw: &mut SliceHw<'_>) -> Result<(), String> {
        self.mcp.init(hw).map_err(|e| format!("{e:?}"))
    }
    fn poll(&mut self, hw: &mut SliceHw<'_>) -> Work {
        self.mcp.poll(hw)
    }
    fn next_deadline(&self) -> Option<u64> {
        self.mcp.next_deadline()
    }
}
