//! Command and completion records of the three DMA engines. Each ring is an
//! array in SRAM indexed by a free-running u32 counter modulo its length;
//! the producer writes the record, then bumps its counter (Release); the
//! consumer reads the counter (Acquire), then the record.

use crate::le::*;
use crate::ParseError;

/// Size of a host-DMA command.
pub const HDMA_CMD_SIZE: u32 = 32;
/// Size of a send-DMA command.
pub const TXDMA_CMD_SIZE: u32 = 32;
/// Size of a free-receive-buffer entry.
pub const RXFREE_SIZE: u32 = 4;
/// Size of a receive completion.
pub const RXDONE_SIZE: u32 = 16;

/// Direction of a host-DMA transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaDir {
    /// Host memory -> SRAM (send payloads).
    HostToSram = 0,
    /// SRAM -> host memory (received payloads, events).
    SramToHost = 1,
}

/// Host-DMA command:
/// `dir u8 | pad[3] | len u32 | sram u32 | pad u32 | host u64 | cookie u64`.
/// `host` is a bus address (offset into the node's host memory). `cookie`
/// is the firmware's own and is not interpreted by the engine. An SRAM ->
/// host transfer stores its last 4 bytes last (Release), so a record whose
/// final word is a sequence number (events) is never seen half written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostDmaCmd {
    pub dir: DmaDir,
    pub len: u32,
    pub sram: u32,
    pub host: u64,
    pub cookie: u64,
}

impl HostDmaCmd {
    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u8(b, 0, self.dir as u8);
        put_u8(b, 1, 0);
        put_u16(b, 2, 0);
        put_u32(b, 4, self.len);
        put_u32(b, 8, self.sram);
        put_u32(b, 12, 0);
        put_u64(b, 16, self.host);
        put_u64(b, 24, self.cookie);
    }

    #[inline]
    pub fn decode(b: &[u8]) -> Result<HostDmaCmd, ParseError> {
        if b.len() < HDMA_CMD_SIZE as usize {
            return Err(ParseError::Truncated);
        }
        let dir = match get_u8(b, 0) {
            0 => DmaDir::HostToSram,
            1 => DmaDir::SramToHost,
            _ => return Err(ParseError::BadField("dir")),
        };
        Ok(HostDmaCmd {
            dir,
            len: get_u32(b, 4),
            sram: get_u32(b, 8),
            host: get_u64(b, 16),
            cookie: get_u64(b, 24),
        })
    }
}

/// Send-DMA command (32 bytes):
/// `sram u32 | len u32 | route_len u8 | pad[3] | cookie u32 | tail_sram u32 |
/// tail_len u32 | pad[8]`.
/// The engine sends `len` bytes from `sram`: `route_len` route bytes, then
/// the packet's first part (header, and payload if any), then `tail_len`
/// bytes from `tail_sram` (a gather: a relay sends a packet's payload
/// straight out of the receive buffer it arrived in, behind a header of
/// its own; 0 for none). Before sending it computes the packet's CRC-32
/// over both parts and stores it in the header's `crc` field (hardware
/// CRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxDmaCmd {
    pub sram: u32,
    pub len: u32,
    pub route_len: u8,
    pub cookie: u32,
    pub tail_sram: u32,
    pub tail_len: u32,
}

impl TxDmaCmd {
    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.sram);
        put_u32(b, 4, self.len);
        put_u8(b, 8, self.route_len);
        put_u8(b, 9, 0);
        put_u16(b, 10, 0);
        put_u32(b, 12, self.cookie);
        put_u32(b, 16, self.tail_sram);
        put_u32(b, 20, self.tail_len);
        put_u64(b, 24, 0);
    }

    #[inline]
    pub fn decode(b: &[u8]) -> Result<TxDmaCmd, ParseError> {
        if b.len() < TXDMA_CMD_SIZE as usize {
            return Err(ParseError::Truncated);
        }
        Ok(TxDmaCmd {
            sram: get_u32(b, 0),
            len: get_u32(b, 4),
            route_len: get_u8(b, 8),
            cookie: get_u32(b, 12),
            tail_sram: get_u32(b, 16),
            tail_len: get_u32(b, 20),
        })
    }
}

bitflags::bitflags! {
    /// Receive completion status bits.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct RxStatus: u32 {
        /// The packet's CRC does not match.
        const CRC_BAD = 1;
        /// The packet was longer than a buffer: cut short (and its CRC
        /// fails).
        const TRUNCATED = 2;
    }
}

/// Receive completion: `buf u32 | len u32 | status u32 | pad u32`.
/// `buf` is the index of the receive buffer (`map::rx_buf`), `len` the
/// packet's length (header + payload) as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxDone {
    pub buf: u32,
    pub len: u32,
    pub status: RxStatus,
}

impl RxDone {
    #[inline]
    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.buf);
        put_u32(b, 4, self.len);
        put_u32(b, 8, self.status.bits());
        put_u32(b, 12, 0);
    }

    #[inline]
    pub fn decode(b: &[u8]) -> Result<RxDone, ParseError> {
        if b.len() < RXDONE_SIZE as usize {
            return Err(ParseError::Truncated);
        }
        let status = RxStatus::from_bits(get_u32(b, 8)).ok_or(ParseError::BadField("status"))?;
        Ok(RxDone { buf: get_u32(b, 0), len: get_u32(b, 4), status })
    }
}

/// Slot offset of ring entry `idx` in a ring at `base` of `len` entries of
/// `size` bytes.
pub const fn slot(base: u32, len: u32, size: u32, idx: u32) -> u32 {
    base + (idx & (len - 1)) * size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_dma_cmd_round_trips() {
        let c = HostDmaCmd {
            dir: DmaDir::SramToHost,
            len: 4096,
            sram: 0x80040,
            host: 0x1234_5678_9000,
            cookie: 77,
        };
        let mut b = [0u8; 32];
        c.encode(&mut b);
        assert_eq!(HostDmaCmd::decode(&b), Ok(c));
        assert_eq!(HostDmaCmd::decode(&b[..31]), Err(ParseError::Truncated));
        b[0] = 9;
        assert_eq!(HostDmaCmd::decode(&b), Err(ParseError::BadField("dir")));
    }

    #[test]
    fn tx_and_rx_records_round_trip() {
        let t = TxDmaCmd { sram: 1, len: 2, route_len: 3, cookie: 4, tail_sram: 5, tail_len: 6 };
        let mut b = [0u8; 32];
        t.encode(&mut b);
        assert_eq!(TxDmaCmd::decode(&b), Ok(t));
        assert_eq!(TxDmaCmd::decode(&b[..31]), Err(ParseError::Truncated));
        let mut b = [0u8; 16];
        let r = RxDone { buf: 5, len: 60, status: RxStatus::CRC_BAD };
        r.encode(&mut b);
        assert_eq!(RxDone::decode(&b), Ok(r));
        assert_eq!(RxDone::decode(&b[..3]), Err(ParseError::Truncated));
    }

    #[test]
    fn slot_wraps() {
        assert_eq!(slot(100, 4, 8, 5), 108);
        assert_eq!(slot(100, 4, 8, u32::MAX), 124);
    }
}
