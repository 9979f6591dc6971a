//! The driver's typed errors. Every call that can fail returns one of these
//! at once; none of them is a panic, and none of them blocks the NIC.
//!
//! Errors about a *descriptor's content* (a bad size class, a target node
//! out of range, an unregistered range) are not found here: the NIC checks
//! those and answers with an `Event::Error`. The driver refuses only what it
//! alone knows: tokens, ring space, its own buffers, its own options.

use core::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverError {
    /// `MAGIC` does not hold "NICE": not one of our NICs, or not mapped.
    BadMagic { found: u32 },
    /// The NIC's ABI version differs from the one this driver was built for.
    AbiMismatch { nic: u32, driver: u32 },
    /// The firmware is not running (`FW_STATUS`: 0 booting, 2 halted).
    NicNotReady { fw_status: u32 },
    /// A configuration register holds a value the driver cannot use.
    BadConfig(&'static str),
    /// Port number out of range (`0..NUM_PORTS`).
    BadPort(u8),
    /// The port is already open (its `STATE` word says so).
    PortBusy(u8),
    /// A `PortOptions` field is out of range (named).
    InvalidOption(&'static str),
    /// No send token left: wait for a Sent/PutDone/GetDone/Error event.
    NoSendToken,
    /// No receive token left: wait for a Received/Error event.
    NoRecvToken,
    /// The send ring holds `SEND_RING_LEN` descriptors the NIC has not taken.
    RingFull,
    /// The buffer is not memory of this port (driver-side lookup), or a
    /// range to deregister is not registered.
    NotRegistered,
    /// A length or offset does not fit (zero-length allocation, a range past
    /// the end of a buffer, a length above `u32::MAX`).
    BadSize,
    /// The backend has no DMA-able host memory left for `len` bytes.
    OutOfMemory { len: u64 },
    /// The port's page table has no free slot for another page.
    PageTableFull,
    /// No event, and this backend cannot block (the sim): return and let
    /// the program be called back when the NIC has written something.
    WouldBlock,
    /// No event arrived within the timeout of a blocking wait.
    Timeout,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DriverError::*;
        match self {
            BadMagic { found } => {
                write!(f, "no NIC here: MAGIC reads {found:#010x}, expected \"NICE\"")
            }
            AbiMismatch { nic, driver } => {
                write!(f, "NIC speaks ABI version {nic}, this driver speaks {driver}")
            }
            NicNotReady { fw_status } => {
                let what = match *fw_status {
                    nic_abi::regs::FW_BOOTING => "still booting",
                    nic_abi::regs::FW_HALTED => "halted",
                    _ => "in an unknown state",
                };
                write!(f, "NIC firmware is {what} (FW_STATUS = {fw_status})")
            }
            BadConfig(what) => write!(f, "NIC configuration register `{what}` is unusable"),
            BadPort(p) => {
                write!(f, "port {p} does not exist (ports are 0..{})", nic_abi::NUM_PORTS)
            }
            PortBusy(p) => write!(f, "port {p} is already open"),
            InvalidOption(what) => write!(f, "port option `{what}` is out of range"),
            NoSendToken => f.write_str("no send token left on this port"),
            NoRecvToken => f.write_str("no receive token left on this port"),
            RingFull => f.write_str("the port's send ring is full"),
            NotRegistered => f.write_str("buffer is not registered memory of this port"),
            BadSize => f.write_str("length or offset out of range for this buffer"),
            OutOfMemory { len } => write!(f, "no DMA-able host memory left for {len} bytes"),
            PageTableFull => f.write_str("the port's page table is full"),
            WouldBlock => f.write_str("no event yet and this backend cannot block"),
            Timeout => f.write_str("no event before the timeout"),
        }
    }
}

impl std::error::Error for DriverError {}
