//! SEND: filled transmit buffers -> send-DMA engine. Writes the piggyback
//! ack into each data packet's header (always, when the reverse stream
//! exists: it is free), builds acks and nacks, and frees transmit buffers
//! when the engine reports them sent. Also the host-DMA command ring, which
//! SDMA and RDMA share.

use crate::hw::Hw;
use crate::pool::NIL;
use crate::state::*;
use crate::trace::SendState;
use crate::{Mcp, Work};
use nic_abi::map;
use nic_abi::packet::{field, flags, Header, NackCode, PacketType, HEADER_LEN};
use nic_abi::regs;
use nic_abi::rings::{self, HostDmaCmd, TxDmaCmd};
use nic_abi::stats::Stat;

impl Mcp {
    // ----------------------------------------------------------------
    // Host-DMA ring (shared by SDMA, RDMA and events)

    pub(crate) fn hdma_space(&self) -> u32 {
        map::HDMA_RING_LEN - self.hdma_prod.wrapping_sub(self.hdma_done)
    }

    pub(crate) fn hdma_post(&mut self, hw: &mut impl Hw, cmd: HostDmaCmd, action: HdmaAction) {
        let slot =
            rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, self.hdma_prod);
        let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
        cmd.encode(&mut b);
        hw.write(slot, &b);
        self.hdma_actions[(self.hdma_prod & (map::HDMA_RING_LEN - 1)) as usize] = action;
        self.hdma_prod = self.hdma_prod.wrapping_add(1);
        hw.set_reg32(regs::HDMA_PROD, self.hdma_prod);
    }

    /// Act on host-DMA commands the engine finished (in order).
    pub(crate) fn hdma_completions(&mut self, hw: &mut impl Hw) {
        let done = hw.reg32(regs::HDMA_DONE);
        // Never believe the engine about more than was posted.
        let n = done.wrapping_sub(self.hdma_done).min(self.hdma_prod.wrapping_sub(self.hdma_done));
        for _ in 0..n {
            let i = (self.hdma_done & (map::HDMA_RING_LEN - 1)) as usize;
            let action = core::mem::replace(&mut self.hdma_actions[i], HdmaAction::Nothing);
            self.hdma_done = self.hdma_done.wrapping_add(1);
            match action {
                HdmaAction::Nothing => {}
                HdmaAction::TxFilled(b) => {
                    if let Some(buf) = self.txbufs.get_mut(b as usize) {
                        if buf.state == TxBufState::Filling {
                            buf.state = TxBufState::Filled;
                            let _ = self.tx_ready.push_back(b);
                        }
                    }
                }
                HdmaAction::RxDone(b) => self.post_rx_buffer(hw, b),
                HdmaAction::EventDone(i) => {
                    if let Some(s) = self.staging_busy.get_mut(i as usize) {
                        *s = false;
                    }
                }
            }
        }
    }

    // ----------------------------------------------------------------
    // Send-DMA

    pub(crate) fn txdma_completions(&mut self, hw: &mut impl Hw) {
        let done = hw.reg32(regs::TXDMA_DONE);
        let n = done.wrapping_sub(self.txdma_done).min(self.tx_inflight.len() as u32);
        for _ in 0..n {
            self.txdma_done = self.txdma_done.wrapping_add(1);
            if let Some(b) = self.tx_inflight.pop_front() {
                self.release_txbuf(b);
            }
        }
    }

    fn release_txbuf(&mut self, b: u8) {
        let buf = &mut self.txbufs[b as usize];
        if !buf.control && buf.state != TxBufState::Free {
            self.data_bufs_busy = self.data_bufs_busy.saturating_sub(1);
        }
        *buf = TxBuf::EMPTY;
    }

    fn start_txdma(&mut self, hw: &mut impl Hw, b: u8, w: &mut Work) {
        let buf = self.txbufs[b as usize];
        let start = map::tx_buf(b as u32) + map::ROUTE_ROOM - buf.route_len as u32;
        let cmd = TxDmaCmd {
            sram: start,
            len: buf.route_len as u32 + buf.len,
            route_len: buf.route_len,
            cookie: b as u32,
        };
        let slot = rings::slot(
            map::TXDMA_RING,
            map::TXDMA_RING_LEN,
            rings::TXDMA_CMD_SIZE,
            self.txdma_prod,
        );
        let mut rec = [0u8; rings::TXDMA_CMD_SIZE as usize];
        cmd.encode(&mut rec);
        hw.write(slot, &rec);
        self.txdma_prod = self.txdma_prod.wrapping_add(1);
        hw.set_reg32(regs::TXDMA_PROD, self.txdma_prod);
        self.txbufs[b as usize].state = TxBufState::Sending;
        let _ = self.tx_inflight.push_back(b);
        self.bump(Stat::PacketsSent, 1);
        w.tx_packets += 1;
    }

    // ----------------------------------------------------------------
    // The SEND machine

    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn send_step(&mut self, hw: &mut impl Hw, w: &mut Work) {
        // Acks and nacks first: they are small and unblock peers.
        while let Some(&c) = self.control.front() {
            let Some(b) = self.txbufs.iter().position(|b| b.state == TxBufState::Free) else {
                break;
            };
            self.control.pop_front();
            self.set_send(hw, SendState::Control, c.rx_stream as u32);
            self.send_control(hw, b as u8, c, w);
        }
        while let Some(b) = self.tx_ready.pop_front() {
            let buf = self.txbufs[b as usize];
            let live = buf.stream != NIL
                && self.txs.is_live(buf.stream)
                && self.txs[buf.stream].epoch == buf.epoch;
            if !live {
                // Filled before a rewind: the stream will send it again.
                self.release_txbuf(b);
                continue;
            }
            self.set_send(hw, SendState::Data, buf.seq);
            let st = self.txs[buf.stream];
            let hdr = map::tx_buf(b as u32) + map::ROUTE_ROOM;
            if let Some(&r) = self.rx_index.get(&st.key) {
                let rx = &mut self.rxs[r];
                let mut fl = [0u8; 1];
                hw.read(hdr + field::FLAGS as u32, &mut fl);
                hw.write(hdr + field::FLAGS as u32, &[fl[0] | flags::ACK_VALID]);
                hw.write(hdr + field::ACK as u32, &rx.expected.to_le_bytes());
                rx.ack_pending = false;
                rx.unacked = 0;
            }
            self.start_txdma(hw, b, w);
        }
        self.set_send(hw, SendState::Idle, 0);
    }

    /// Queue an ack or nack for receiving stream `r`.
    /// When the queue is full the ack or nack is dropped (counted): acks
    /// are owed again by the ack timer, a lost nack costs the sender a
    /// retransmission timeout. The receive path never waits for it.
    pub(crate) fn queue_control(&mut self, r: u16, nack: Option<(u8, u32)>) {
        // One of each kind per stream is enough: acks carry the latest
        // expected value when they leave, nacks repeat.
        if self.control.iter().any(|c| c.rx_stream == r && c.nack == nack) {
            return;
        }
        if self.control.push_back(Control { rx_stream: r, nack }).is_err() {
            self.bump(Stat::ControlDrops, 1);
        }
    }

    fn send_control(&mut self, hw: &mut impl Hw, b: u8, c: Control, w: &mut Work) {
        if !self.rxs.is_live(c.rx_stream) {
            return;
        }
        let r = self.rxs[c.rx_stream];
        // A nack waiting in the queue may have gone stale: the packet it
        // refuses was taken since (or the stream got its SYNC). Sending it
        // would contradict an ack that went out before it.
        if let Some((code, seq)) = c.nack {
            let stale = if code == NackCode::Unsynced as u8 {
                r.sync_seen.is_some()
            } else {
                seq != r.expected
            };
            if stale {
                return;
            }
        }
        let route_len = self.write_route(hw, b, r.remote_node);
        let (ptype, code, seq) = match c.nack {
            Some((code, seq)) => (PacketType::Nack, code, seq),
            None => (PacketType::Ack, 0, 0),
        };
        let h = Header {
            ptype,
            flags: flags::ACK_VALID,
            priority: r.prio,
            nack_code: code,
            src_node: self.cfg.node,
            dst_node: r.remote_node,
            src_port: r.local_port,
            dst_port: r.remote_port,
            size_class: 0,
            seq,
            ack: r.expected,
            msg_len: 0,
            offset: 0,
            payload_len: 0,
            remote: 0,
            cookie: 0,
            sync_boot: 0,
            sync_gen: 0,
            crc: 0,
        };
        let mut hb = [0u8; HEADER_LEN];
        h.encode(&mut hb);
        hw.write(map::tx_buf(b as u32) + map::ROUTE_ROOM, &hb);
        self.txbufs[b as usize] = TxBuf {
            state: TxBufState::Filled,
            stream: NIL,
            epoch: 0,
            route_len,
            len: HEADER_LEN as u32,
            control: true,
            seq,
        };
        let rx = &mut self.rxs[c.rx_stream];
        rx.ack_pending = false;
        rx.unacked = 0;
        if c.nack.is_some() {
            self.bump(Stat::NacksSent, 1);
        } else {
            self.bump(Stat::AcksSent, 1);
        }
        self.start_txdma(hw, b, w);
    }
}
