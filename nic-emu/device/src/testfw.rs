//! Stand-in firmwares that drive the DMA engines and the fabric without
//! the MCP: for tests of the device model and for the fabric benchmark.
//! They use only the ABI (rings, registers, route table, STATS block),
//! exactly as the MCP does, and report their work so the profile's NIC
//! CPU prices apply.
//!
//! [`PumpFirmware`] sends `packets` data packets of `payload` bytes from
//! its transmit buffers (to one node, or round-robin to all others),
//! recycles every receive buffer as soon as its completion is seen, and
//! counts what it got in the STATS block (`PacketsSent`,
//! `PacketsReceived`, `CrcErrors`).

use nic_abi::map::{self, RX_BUF_COUNT, TX_BUF_COUNT};
use nic_abi::packet::{Flags, Header, PacketType, HEADER_LEN};
use nic_abi::regs;
use nic_abi::rings::{self, RxDone, RxStatus, TxDmaCmd};
use nic_abi::stats::{stat_offset, Stat};
use nic_abi::Priority;

use crate::firmware::{Firmware, SliceHw, Sram, Work};

/// Where a pump sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// Every packet to this node.
    One(usize),
    /// Round-robin over every other node.
    AllOthers,
}

/// A traffic generator and sink (see the module doc).
#[derive(Debug, Clone)]
pub struct PumpFirmware {
    packets: u64,
    payload: u16,
    dest: Dest,
    /// Completions handled per poll pass (bounded work).
    batch: u32,
    node: usize,
    nodes: usize,
    posted: u32,
    sent: u64,
    rx_free_prod: u32,
    rx_cons: u32,
    received: u64,
    crc_bad: u64,
    next_dst: usize,
    seq: u32,
}

impl PumpFirmware {
    pub fn new(packets: u64, payload: u16, dest: Dest) -> PumpFirmware {
        PumpFirmware {
            packets,
            payload,
            dest,
            batch: 8,
            node: 0,
            nodes: 1,
            posted: 0,
            sent: 0,
            rx_free_prod: 0,
            rx_cons: 0,
            received: 0,
            crc_bad: 0,
            next_dst: 0,
            seq: 0,
        }
    }

    /// A pump that only receives.
    pub fn sink() -> PumpFirmware {
        PumpFirmware::new(0, 0, Dest::AllOthers)
    }

    fn pick(&mut self) -> Option<usize> {
        match self.dest {
            Dest::One(d) => Some(d),
            Dest::AllOthers if self.nodes < 2 => None,
            Dest::AllOthers => {
                let d = (self.node + 1 + self.next_dst) % self.nodes;
                self.next_dst = (self.next_dst + 1) % (self.nodes - 1);
                Some(d)
            }
        }
    }

    fn post_rx(&mut self, hw: &mut SliceHw<'_>, buf: u32) {
        let slot = rings::slot(
            map::RXFREE_RING,
            map::RXFREE_RING_LEN,
            rings::RXFREE_SIZE,
            self.rx_free_prod,
        );
        hw.store_u32(slot, buf);
        self.rx_free_prod = self.rx_free_prod.wrapping_add(1);
        hw.set_reg(regs::RXFREE_PROD, self.rx_free_prod);
    }
}

impl Firmware for PumpFirmware {
    fn init(&mut self, hw: &mut SliceHw<'_>) -> Result<(), String> {
        if hw.reg(regs::MAGIC) != regs::MAGIC_VALUE {
            return Err("bad MAGIC".into());
        }
        self.node = hw.reg(regs::NODE_ID) as usize;
        self.nodes = hw.reg(regs::NUM_NODES) as usize;
        let mtu = hw.reg(regs::MTU);
        self.payload = self.payload.min(mtu as u16);
        for b in 0..RX_BUF_COUNT {
            self.post_rx(hw, b);
        }
        hw.set_reg(regs::FW_STATUS, regs::FW_RUNNING);
        Ok(())
    }

    fn poll(&mut self, hw: &mut SliceHw<'_>) -> Work {
        let mut w = Work::default();
        // Receive side: count and recycle.
        let prod = hw.reg(regs::RXDONE_PROD);
        while self.rx_cons != prod && w.rx_packets < self.batch {
            let slot = rings::slot(
                map::RXDONE_RING,
                map::RXDONE_RING_LEN,
                rings::RXDONE_SIZE,
                self.rx_cons,
            );
            let mut rec = [0u8; rings::RXDONE_SIZE as usize];
            hw.read(slot, &mut rec);
            let d = RxDone::decode(&rec).unwrap_or(RxDone {
                buf: 0,
                len: 0,
                status: RxStatus::CRC_BAD,
            });
            if d.status.contains(RxStatus::CRC_BAD) {
                self.crc_bad += 1;
            } else {
                self.received += 1;
            }
            self.rx_cons = self.rx_cons.wrapping_add(1);
            hw.set_reg(regs::RXDONE_CONS, self.rx_cons);
            self.post_rx(hw, d.buf % RX_BUF_COUNT);
            w.rx_packets += 1;
        }
        // Send side: keep every transmit buffer busy.
        let done = hw.reg(regs::TXDMA_DONE);
        while self.sent < self.packets
            && self.posted.wrapping_sub(done) < TX_BUF_COUNT
            && w.tx_packets < self.batch
        {
            let Some(dst) = self.pick() else { break };
            let mut entry = [0u8; map::ROUTE_ENTRY as usize];
            hw.read(map::route_entry(dst), &mut entry);
            let rl = (entry[0] as usize).min(map::ROUTE_MAX);
            let buf = map::tx_buf(self.posted % TX_BUF_COUNT);
            let start = buf + map::ROUTE_ROOM - rl as u32;
            hw.write(start, &entry[1..1 + rl]);
            let h = Header {
                ptype: PacketType::Data,
                flags: Flags::FIRST | Flags::LAST,
                priority: Priority::Low,
                nack_code: 0,
                src_node: self.node as u16,
                dst_node: dst as u16,
                src_port: 0,
                dst_port: 0,
                size_class: 12,
                seq: self.seq,
                ack: 0,
                msg_len: self.payload as u32,
                offset: 0,
                payload_len: self.payload,
                remote: 0,
                cookie: 0,
                sync_boot: 0,
                sync_gen: 0,
                crc: 0,
            };
            let mut hb = [0u8; HEADER_LEN];
            h.encode(&mut hb);
            hw.write(buf + map::ROUTE_ROOM, &hb);
            let cmd = TxDmaCmd {
                sram: start,
                len: (rl + HEADER_LEN + self.payload as usize) as u32,
                route_len: rl as u8,
                cookie: self.posted,
                tail_sram: 0,
                tail_len: 0,
            };
            let mut cb = [0u8; rings::TXDMA_CMD_SIZE as usize];
            cmd.encode(&mut cb);
            hw.write(
                rings::slot(
                    map::TXDMA_RING,
                    map::TXDMA_RING_LEN,
                    rings::TXDMA_CMD_SIZE,
                    self.posted,
                ),
                &cb,
            );
            self.posted = self.posted.wrapping_add(1);
            hw.set_reg(regs::TXDMA_PROD, self.posted);
            self.seq = self.seq.wrapping_add(1);
            self.sent += 1;
            w.tx_packets += 1;
        }
        if !w.is_idle() {
            hw.store_u64(stat_offset(Stat::PacketsSent), self.sent);
            hw.store_u64(stat_offset(Stat::PacketsReceived), self.received);
            hw.store_u64(stat_offset(Stat::CrcErrors), self.crc_bad);
        }
        w
    }

    fn next_deadline(&self) -> Option<u64> {
        None
    }
}
