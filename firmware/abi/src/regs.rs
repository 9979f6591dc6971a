//! The register block at `map::REGS`. Registers are little-endian memory
//! words; the device model watches the ones it owns. Offsets are relative to
//! `map::REGS`; use [`reg`] for an absolute SRAM offset.
//!
//! Ownership: "dev" words are written only by the device model, "fw" words
//! only by the firmware, "host" words only by the host driver, "cfg" words by
//! the device model at reset (the NIC's configuration EEPROM).

/// Absolute SRAM offset of a register.
pub const fn reg(off: u32) -> u32 {
    crate::map::REGS + off
}

/// Value of `MAGIC`: "NICE".
pub const MAGIC_VALUE: u32 = 0x4543_494E;
/// Version of this ABI; firmware refuses to run on a mismatch.
pub const ABI_VERSION_VALUE: u32 = 1;

// Identity and configuration (cfg).
pub const MAGIC: u32 = 0x000; // u32 cfg
pub const ABI_VERSION: u32 = 0x004; // u32 cfg
pub const NODE_ID: u32 = 0x008; // u32 cfg
pub const NUM_NODES: u32 = 0x00C; // u32 cfg
/// Real-time clock, in ticks (dev, read-only for everyone else).
pub const RTC: u32 = 0x010; // u64 dev
/// RTC ticks per second (cfg).
pub const RTC_HZ: u32 = 0x018; // u64 cfg
pub const SRAM_SIZE: u32 = 0x020; // u32 cfg
/// Payload bytes per packet, at most `MAX_MTU` (cfg).
pub const MTU: u32 = 0x024; // u32 cfg
/// Firmware status: see `FW_*` (fw).
pub const FW_STATUS: u32 = 0x028; // u32 fw
/// Host doorbell: the driver adds one after posting descriptors. The
/// firmware polls the rings and never needs it; the device model uses it
/// to wake an idle NIC CPU (wait-for-interrupt in the qemu backend).
pub const HOST_DOORBELL: u32 = 0x02C; // u32 host
/// Link state, bit 0 = up (dev).
pub const LINK_STATE: u32 = 0x030; // u32 dev
/// How many times this NIC was reset (cfg): the firmware derives its boot
/// nonce from it, so peers can tell a restarted NIC's streams apart.
pub const BOOT_COUNT: u32 = 0x038; // u32 cfg

// Firmware parameters (cfg), from the timing profile and the scenario.
/// A send that finds no receive buffer is retried this long, then times out.
pub const SEND_TIMEOUT_TICKS: u32 = 0x040; // u64 cfg
/// Unacknowledged packets are resent (go-back-N) after this long.
pub const RETRANSMIT_TICKS: u32 = 0x048; // u64 cfg
/// An ack waits at most this long for reverse traffic to ride on.
pub const ACK_DELAY_TICKS: u32 = 0x050; // u64 cfg
/// Pause before resending a packet nacked for lack of a receive buffer.
pub const NOBUF_RETRY_TICKS: u32 = 0x058; // u64 cfg
/// Send tokens per port (cfg).
pub const SEND_TOKENS: u32 = 0x060; // u32 cfg
/// Receive tokens per port (cfg).
pub const RECV_TOKENS: u32 = 0x064; // u32 cfg
/// Most unacknowledged packets per stream (cfg).
pub const WINDOW: u32 = 0x068; // u32 cfg
/// Non-zero: record state-machine transitions in the trace ring (host).
pub const TRACE_ENABLE: u32 = 0x06C; // u32 host

// Host-DMA engine (host memory <-> SRAM). Commands in `map::HDMA_RING`.
/// Commands posted (fw), free-running.
pub const HDMA_PROD: u32 = 0x100; // u32 fw
/// Commands completed (dev), free-running; completion is in order.
pub const HDMA_DONE: u32 = 0x104; // u32 dev
/// Commands refused (bad range); they still count as done (dev).
pub const HDMA_ERRORS: u32 = 0x108; // u32 dev

// Send-DMA engine (SRAM -> wire). Commands in `map::TXDMA_RING`.
/// Commands posted (fw), free-running.
pub const TXDMA_PROD: u32 = 0x110; // u32 fw
/// Commands finished (dev), in order: the packet's tail has left the NIC
/// (or the command was refused), so its buffer may be reused.
pub const TXDMA_DONE: u32 = 0x114; // u32 dev
/// Commands refused (range outside SRAM, or shorter than route + header);
/// they still count as done (dev).
pub const TXDMA_ERRORS: u32 = 0x118; // u32 dev

// Receive-DMA engine (wire -> SRAM).
/// Free receive buffers posted in `map::RXFREE_RING` (fw).
pub const RXFREE_PROD: u32 = 0x120; // u32 fw
/// Free receive buffers taken by the engine (dev).
pub const RXFREE_CONS: u32 = 0x124; // u32 dev
/// Filled buffers reported in `map::RXDONE_RING` (dev).
pub const RXDONE_PROD: u32 = 0x128; // u32 dev
/// Filled buffers consumed (fw).
pub const RXDONE_CONS: u32 = 0x12C; // u32 fw
/// Packets the engine dropped: misrouted (route bytes left on arrival) or
/// shorter than a header (dev). A packet longer than a buffer is not
/// dropped: it is stored cut short and flagged `RX_TRUNCATED`.
pub const RX_DROPS: u32 = 0x130; // u32 dev

/// Trace records written (fw), free-running; slot = n % TRACE_LEN.
pub const TRACE_PROD: u32 = 0x140; // u32 fw

// Rate control (see flows).
/// Bumped by whoever edits the flow table (driver or BRM agent): the
/// firmware re-reads the IDTs of its flows when it changes (host).
pub const FLOW_GEN: u32 = 0x150; // u32 host
/// Non-zero: record every packet dispatch in DISPATCH_TRACE (host).
pub const DISPATCH_TRACE_ENABLE: u32 = 0x154; // u32 host
/// Dispatch records written (fw), free-running; slot = n % DISPATCH_TRACE_LEN.
pub const DISPATCH_TRACE_PROD: u32 = 0x158; // u32 fw

/// `FW_STATUS` values.
pub const FW_BOOTING: u32 = 0;
pub const FW_RUNNING: u32 = 1;
/// The firmware stopped: wrong ABI version or bad configuration.
pub const FW_HALTED: u32 = 2;
