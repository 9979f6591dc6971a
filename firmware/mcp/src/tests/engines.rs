//! The test bench's engines: host-DMA, send-DMA (and the wire, with its
//! faults and jitter) and receive-DMA, as the device model runs them.

use super::*;

impl Bench {
    pub(crate) fn engines(&mut self, i: usize) -> bool {
        let hdma = self.host_dma(i);
        let tx = self.send_dma(i);
        let rx = self.receive_dma(i);
        hdma || tx || rx
    }

    fn host_dma(&mut self, i: usize) -> bool {
        let mut busy = false;
        let node = &mut self.nodes[i];
        let prod = node.r32(reg(regs::HDMA_PROD));
        let mut done = node.r32(reg(regs::HDMA_DONE));
        while done != prod {
            let off = rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, done)
                as usize;
            let c = HostDmaCmd::decode(&node.sram[off..off + 32]).unwrap();
            let (s, h, n) = (c.sram as usize, c.host as usize, c.len as usize);
            // The engine refuses (and counts) a transfer outside either memory.
            let fits = |at: usize, len: usize| at.checked_add(n).is_some_and(|e| e <= len);
            if fits(s, node.sram.len()) && fits(h, node.host.len()) {
                match c.dir {
                    DmaDir::HostToSram => node.sram[s..s + n].copy_from_slice(&node.host[h..h + n]),
                    DmaDir::SramToHost => node.host[h..h + n].copy_from_slice(&node.sram[s..s + n]),
                }
            } else {
                let e = node.r32(reg(regs::HDMA_ERRORS));
                node.w32(reg(regs::HDMA_ERRORS), e + 1);
            }
            done = done.wrapping_add(1);
            busy = true;
        }
        node.w32(reg(regs::HDMA_DONE), done);
        busy
    }

    /// The packets node `i` sent, onto the wire (each to its inbox,
    /// as the faults and the jitter say).
    fn send_dma(&mut self, i: usize) -> bool {
        let mut busy = false;
        let node = &mut self.nodes[i];
        let prod = node.r32(reg(regs::TXDMA_PROD));
        let mut done = node.r32(reg(regs::TXDMA_DONE));
        let mut out = Vec::new();
        while done != prod {
            let off = rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, done)
                as usize;
            let size = rings::TXDMA_CMD_SIZE as usize;
            let c = TxDmaCmd::decode(&node.sram[off..off + size]).unwrap();
            let mut bytes = node.sram[c.sram as usize..(c.sram + c.len) as usize].to_vec();
            let (ts, tl) = (c.tail_sram as usize, c.tail_len as usize);
            bytes.extend_from_slice(&node.sram[ts..ts + tl]);
            let rl = c.route_len as usize;
            bytes[rl + field::CRC..rl + field::CRC + 4].fill(0);
            let crc = crc32fast::hash(&bytes[rl..]);
            bytes[rl + field::CRC..rl + field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
            out.push(bytes);
            done = done.wrapping_add(1);
            busy = true;
        }
        node.w32(reg(regs::TXDMA_DONE), done);
        for bytes in out {
            let dst = (bytes[0] & 0x7f) as usize;
            let pkt = bytes[1..].to_vec();
            self.log.push(Header::parse(&pkt).unwrap());
            self.wire_count += 1;
            let k = self.wire_count;
            let f = self.faults;
            if f.drop_every != 0 && k.is_multiple_of(f.drop_every) || k == f.drop_at {
                continue;
            }
            let mut pkt = pkt;
            if f.corrupt_every != 0 && k.is_multiple_of(f.corrupt_every) {
                let at = pkt.len() / 2;
                pkt[at] ^= 0x10;
            }
            if f.dup_every != 0 && k.is_multiple_of(f.dup_every) {
                self.nodes[dst].inbox.push_back(pkt.clone());
            }
            if let Some(j) = &mut self.jitter {
                let due = self.rtc + 1 + j.next() % j.max;
                self.held.push((due, dst, pkt));
                continue;
            }
            self.nodes[dst].inbox.push_back(pkt);
        }
        busy
    }

    fn receive_dma(&mut self, i: usize) -> bool {
        let mut busy = false;
        let node = &mut self.nodes[i];
        while let Some(pkt) = node.inbox.front() {
            let fprod = node.r32(reg(regs::RXFREE_PROD));
            let fcons = node.r32(reg(regs::RXFREE_CONS));
            if fprod == fcons {
                break;
            }
            let pkt = pkt.clone();
            node.inbox.pop_front();
            let foff =
                rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, fcons)
                    as usize;
            let b = node.r32(foff as u32);
            node.w32(reg(regs::RXFREE_CONS), fcons.wrapping_add(1));
            if b >= map::RX_BUF_COUNT || pkt.len() > map::BUF_STRIDE as usize {
                // Not a buffer, or a packet no buffer holds: dropped, counted.
                let d = node.r32(reg(regs::RX_DROPS));
                node.w32(reg(regs::RX_DROPS), d + 1);
                continue;
            }
            let at = map::rx_buf(b) as usize;
            node.sram[at..at + pkt.len()].copy_from_slice(&pkt);
            let mut check = pkt.clone();
            let status = if check.len() < HEADER_LEN {
                rings::RxStatus::CRC_BAD
            } else {
                let want =
                    u32::from_le_bytes(check[field::CRC..field::CRC + 4].try_into().unwrap());
                check[field::CRC..field::CRC + 4].fill(0);
                if crc32fast::hash(&check) == want {
                    rings::RxStatus::empty()
                } else {
                    rings::RxStatus::CRC_BAD
                }
            };
            let dprod = node.r32(reg(regs::RXDONE_PROD));
            let doff =
                rings::slot(map::RXDONE_RING, map::RXDONE_RING_LEN, rings::RXDONE_SIZE, dprod)
                    as usize;
            RxDone { buf: b, len: pkt.len() as u32, status }
                .encode(&mut node.sram[doff..doff + 16]);
            node.w32(reg(regs::RXDONE_PROD), dprod.wrapping_add(1));
            busy = true;
        }
        busy
    }
}

impl Bench {
    /// Hold each packet on the wire up to `max` rounds, pseudo-randomly
    /// from `seed` (so packets also overtake each other).
    pub(crate) fn set_jitter(&mut self, seed: u64, max: u64) {
        let state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        self.jitter = Some(super::Jitter { state, max });
    }

    /// Node n's SRAM, as the privileged side writes it (group tables).
    pub(crate) fn sram_mut(&mut self, n: usize) -> &mut [u8] {
        &mut self.nodes[n].sram
    }
}
