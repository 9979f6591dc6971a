//! Opening a NIC: the identity and configuration checks, the values the
//! driver caches from the configuration registers, the NIC clock, and the
//! gate to its ports.
//!
//! Reads only the register block and the STATS block; the ports
//! (`port.rs`) touch their own window and page table.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nic_abi::regs::{self, reg};
use nic_abi::stats::{stat_offset, Stat};
use nic_abi::{MAX_MTU, MAX_NODES};

use crate::backend::NicBackend;
use crate::port::{Port, PortOptions, Shared};
use crate::DriverError;

/// What the configuration registers said when the NIC was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicInfo {
    pub node_id: u16,
    pub num_nodes: u32,
    /// RTC ticks per second.
    pub rtc_hz: u64,
    /// Payload bytes per packet.
    pub mtu: u32,
    /// Send tokens per port.
    pub send_tokens: u32,
    /// Receive tokens per port.
    pub recv_tokens: u32,
    pub sram_size: u32,
}

/// An opened NIC. Cheap to keep around; ports are opened from it and live
/// on their own (each holds a clone of the backend). A program that only
/// wants a port of a live or qemu cluster can skip it: `Port::attach`
/// opens the NIC itself.
///
/// ```no_run
/// use std::time::Duration;
/// use host_driver::{LiveBackend, Nic, PortOptions};
///
/// # fn main() -> Result<(), host_driver::DriverError> {
/// // A live backend serves one port (here 3) of one node (here 0).
/// let be = LiveBackend::attach("nic", 0, 3)?;
/// let nic = Nic::open_timeout(be, Duration::from_secs(10))?;
/// println!("node {} of {}, MTU {} bytes", nic.node_id(), nic.num_nodes(), nic.mtu());
/// let port = nic.open_port(3, PortOptions::default())?;
/// # drop(port);
/// # Ok(())
/// # }
/// ```
pub struct Nic<B: NicBackend> {
    be: B,
    info: NicInfo,
    shared: Arc<Mutex<Shared>>,
}

impl<B: NicBackend> Nic<B> {
    /// Check MAGIC, ABI_VERSION and FW_STATUS, then read the configuration.
    /// Fails at once if the firmware is not (yet) running.
    pub fn open(backend: B) -> Result<Nic<B>, DriverError> {
        check_identity(&backend)?;
        let st = backend.sram_load_u32(reg(regs::FW_STATUS));
        if st != regs::FW_RUNNING {
            return Err(DriverError::NicNotReady { fw_status: st });
        }
        let info = read_info(&backend)?;
        Ok(Nic { be: backend, info, shared: Arc::new(Mutex::new(Shared::default())) })
    }

    /// As `open`, but while the firmware is still booting, wait for it (up
    /// to `timeout` of backend time) with `idle_wait`. A MAGIC of zero
    /// (a device that has not written its register block yet, or is
    /// resetting the NIC) is waited for too. On a backend that cannot
    /// block (the sim) this is `open`.
    pub fn open_timeout(backend: B, timeout: Duration) -> Result<Nic<B>, DriverError> {
        let start = backend.now_ns();
        let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        loop {
            match Nic::open(backend.clone()) {
                Err(
                    e @ (DriverError::NicNotReady { fw_status: regs::FW_BOOTING }
                    | DriverError::BadMagic { found: 0 }),
                ) => {
                    if backend.now_ns().saturating_sub(start) >= limit || !backend.idle_wait() {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    pub fn info(&self) -> &NicInfo {
        &self.info
    }

    pub fn node_id(&self) -> u16 {
        self.info.node_id
    }

    pub fn num_nodes(&self) -> u32 {
        self.info.num_nodes
    }

    pub fn rtc_hz(&self) -> u64 {
        self.info.rtc_hz
    }

    pub fn mtu(&self) -> u32 {
        self.info.mtu
    }

    /// Send tokens per port (the `SEND_TOKENS` register).
    pub fn send_tokens(&self) -> u32 {
        self.info.send_tokens
    }

    /// Receive tokens per port (the `RECV_TOKENS` register).
    pub fn recv_tokens(&self) -> u32 {
        self.info.recv_tokens
    }

    /// The NIC's real-time clock, in ticks (`rtc_hz` per second).
    pub fn clock(&self) -> u64 {
        self.be.sram_load_u64(reg(regs::RTC))
    }

    /// Convert RTC ticks to nanoseconds.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((ticks as u128 * 1_000_000_000) / self.info.rtc_hz as u128) as u64
    }

    /// Convert nanoseconds to RTC ticks (rounded down).
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        ((ns as u128 * self.info.rtc_hz as u128) / 1_000_000_000) as u64
    }

    /// `LINK_STATE` bit 0.
    pub fn link_up(&self) -> bool {
        self.be.sram_load_u32(reg(regs::LINK_STATE)) & 1 != 0
    }

    /// Current `FW_STATUS`.
    pub fn fw_status(&self) -> u32 {
        self.be.sram_load_u32(reg(regs::FW_STATUS))
    }

    /// One NIC counter from the STATS block.
    pub fn stat(&self, s: Stat) -> u64 {
        self.be.sram_load_u64(stat_offset(s))
    }

    pub fn backend(&self) -> &B {
        &self.be
    }

    /// Open port `port` (see `Port` for the handshake). Refuses a number
    /// out of range (BadPort) and a port whose STATE is open (PortBusy).
    pub fn open_port(&self, port: u8, opts: PortOptions) -> Result<Port<B>, DriverError> {
        Port::open(self.be.clone(), self.shared.clone(), &self.info, port, opts)
    }
}

fn check_identity<B: NicBackend>(be: &B) -> Result<(), DriverError> {
    let magic = be.sram_load_u32(reg(regs::MAGIC));
    if magic != regs::MAGIC_VALUE {
        return Err(DriverError::BadMagic { found: magic });
    }
    let abi = be.sram_load_u32(reg(regs::ABI_VERSION));
    if abi != regs::ABI_VERSION_VALUE {
        return Err(DriverError::AbiMismatch { nic: abi, driver: regs::ABI_VERSION_VALUE });
    }
    Ok(())
}

fn read_info<B: NicBackend>(be: &B) -> Result<NicInfo, DriverError> {
    let r32 = |r| be.sram_load_u32(reg(r));
    let num_nodes = r32(regs::NUM_NODES);
    if num_nodes == 0 || num_nodes as usize > MAX_NODES {
        return Err(DriverError::BadConfig("NUM_NODES"));
    }
    let node_id = r32(regs::NODE_ID);
    if node_id >= num_nodes {
        return Err(DriverError::BadConfig("NODE_ID"));
    }
    let rtc_hz = be.sram_load_u64(reg(regs::RTC_HZ));
    if rtc_hz == 0 {
        return Err(DriverError::BadConfig("RTC_HZ"));
    }
    let mtu = r32(regs::MTU);
    if mtu == 0 || mtu as usize > MAX_MTU {
        return Err(DriverError::BadConfig("MTU"));
    }
    let send_tokens = r32(regs::SEND_TOKENS);
    if send_tokens == 0 || send_tokens > regs::PORT_SEND_TOKENS_MAX {
        return Err(DriverError::BadConfig("SEND_TOKENS"));
    }
    let recv_tokens = r32(regs::RECV_TOKENS);
    if recv_tokens == 0 || recv_tokens > regs::PORT_RECV_TOKENS_MAX {
        return Err(DriverError::BadConfig("RECV_TOKENS"));
    }
    Ok(NicInfo {
        node_id: node_id as u16,
        num_nodes,
        rtc_hz,
        mtu,
        send_tokens,
        recv_tokens,
        sram_size: r32(regs::SRAM_SIZE),
    })
}
