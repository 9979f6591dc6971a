//! The NIC hardware model, once for every backend: the register block's
//! reset values, the RTC, and the three DMA engines (command decoding,
//! completion, device counters) over a node's memories ([`NicMem`]: its
//! SRAM and its host's memory). The backends differ only in how time
//! passes and how memory is backed: the sim (`sim_nic`) schedules each
//! engine step as an event in virtual time and backs memory with heap
//! buffers (`memory::NodeMem`); the real-time device process
//! (`realtime::engines`) runs the steps as wall-clock time allows over
//! shared file mappings.
//!
//! - Host-DMA: takes `HDMA_RING` commands in order, one at a time
//!   ([`Engines::hdma_start`], which reads the length for the cost model;
//!   [`Engines::hdma_finish`] moves the bytes). A command whose SRAM or
//!   host range is out of bounds (or that does not decode) moves nothing,
//!   counts `HDMA_ERRORS`, and still completes; `HDMA_DONE` counts every
//!   command, last.
//! - Send-DMA: takes `TXDMA_RING` commands in order ([`Engines::tx_next`]);
//!   a malformed one counts `TXDMA_ERRORS` and completes without sending.
//!   [`Engines::tx_fill`] reads the packet into a wire buffer (gathering
//!   its tail from a second SRAM range when the command names one) and computes
//!   its CRC-32 into its header (in SRAM and on the wire); `TXDMA_DONE`
//!   counts it when its tail has left ([`Engines::tx_finish`]).
//! - Receive-DMA: an arriving packet takes the next free buffer from
//!   `RXFREE_RING` ([`Engines::rx_take`]); with none free it waits
//!   (backpressure: the backend holds it). [`Engines::rx_deliver`] writes
//!   it into `map::rx_buf(i)` (cut at `BUF_STRIDE`: `RxStatus::TRUNCATED`),
//!   checks the CRC (`RxStatus::CRC_BAD`), writes an `RxDone` record and bumps
//!   `RXDONE_PROD` last. A packet that still carries route bytes was
//!   misrouted: [`Engines::rx_misrouted`] drops it and counts `RX_DROPS`.
//!
//! Owns the engines' positions in their rings and the device counters;
//! touches SRAM and host memory only through [`NicMem`]. It never runs
//! firmware, never moves packets between NICs (the fabric does) and never
//! decides when a step happens (the backend does).

use nic_abi::map::{self, BUF_STRIDE, RX_BUF_COUNT};
use nic_abi::packet::{field, HEADER_LEN};
use nic_abi::page_table::{vaddr_of, HostLayout};
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::rings::{self, DmaDir, HostDmaCmd, RxDone, TxDmaCmd};
use nic_abi::sram::Sram;
use nic_abi::{MAX_MTU, NUM_PORTS};

use crate::profile::{Clock, Profile};

/// Longest send-DMA transfer accepted (route room + header + MTU, with
/// slack so that an over-long packet reaches the receiver and is cut).
pub const MAX_WIRE: usize = 4 * BUF_STRIDE as usize;

/// One node's memories as the DMA engines see them: its SRAM (register
/// block included) and host-DMA copies between SRAM and host memory.
pub trait NicMem {
    type Sram: Sram + ?Sized;
    fn sram(&self) -> &Self::Sram;
    fn sram_mut(&mut self) -> &mut Self::Sram;
    /// Bytes of SRAM.
    fn sram_len(&self) -> usize;
    /// Run host-DMA command `c`'s copy. False (nothing moved) if its SRAM
    /// or host range leaves its memory. A `SramToHost` copy into a shared
    /// host memory must publish its last word last (Release), so that a
    /// host polling it (an event's `seq`) sees the rest with it.
    fn dma(&mut self, c: &HostDmaCmd) -> bool;
    /// Append `len` bytes of SRAM from `off` to `out` (zeros where the
    /// range leaves SRAM, as `Sram::read`).
    #[inline]
    fn sram_append(&self, off: u32, len: usize, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + len, 0);
        self.sram().read(off, &mut out[at..]);
    }
}

/// Counters the device keeps (beside the firmware's STATS block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Packets the send-DMA engine put on the link.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub txdma_errors: u64,
    /// Packets the receive-DMA engine wrote into buffers.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_crc_bad: u64,
    pub rx_truncated: u64,
    /// Packets that arrived with route bytes left (dropped, RX_DROPS).
    pub rx_misrouted: u64,
    /// RXFREE entries naming no buffer (skipped).
    pub rx_bad_free: u64,
    /// Packets that waited at the NIC for a free receive buffer.
    pub rx_backpressure_waits: u64,
    /// Total time they waited (ns).
    pub rx_backpressure_ns: u64,
    pub hdma_cmds: u64,
    pub hdma_bytes: u64,
    pub hdma_errors: u64,
}

/// Configuration written into the cfg registers at reset.
pub struct ResetConfig<'a> {
    pub node: usize,
    pub nodes: usize,
    pub profile: &'a Profile,
    pub send_timeout_ns: u64,
    /// Route to every node: `routes[dst]`.
    pub routes: &'a [Vec<u8>],
    /// How host memory is shared out: each port's slice (the privileged
    /// side's record, `regs::PORT_SLICES`, that the MCP checks every
    /// translation and event queue against) and each port's page table
    /// (`regs::PORT_PTS`).
    pub host: HostLayout,
}

/// Write the register block's cfg words and the route table, as the NIC's
/// EEPROM and GM's mapper would; close every port and empty the flow
/// table (and move `PORT_NEWS`). SRAM must hold the map. `FW_STATUS =
/// FW_BOOTING` goes first and MAGIC last but one, so that a NIC reset under
/// running host processes never shows MAGIC with a stale firmware status
/// (docs/design/cluster-dir.md, "Reset of one NIC").
pub fn reset_sram<M: NicMem + ?Sized>(m: &mut M, cfg: &ResetConfig<'_>) {
    let p = cfg.profile;
    let ticks = |ns: u64| p.ns_to_ticks(ns);
    let len = m.sram_len() as u32;
    let sram = m.sram_mut();
    sram.store_u32(reg(regs::FW_STATUS), regs::FW_BOOTING);
    // Every boot is a new one: the MCP derives its stream sync nonce from
    // this count and its clock, and under QEMU the clock of a restarted
    // guest starts again from zero (a repeated nonce made peers take the
    // new NIC's streams for the old one's).
    let boots = sram.load_u32(reg(regs::BOOT_COUNT));
    sram.store_u32(reg(regs::BOOT_COUNT), boots.wrapping_add(1));
    sram.store_u32(reg(regs::ABI_VERSION), regs::ABI_VERSION_VALUE);
    sram.store_u32(reg(regs::NODE_ID), cfg.node as u32);
    sram.store_u32(reg(regs::NUM_NODES), cfg.nodes as u32);
    sram.store_u64(reg(regs::RTC), 0);
    sram.store_u64(reg(regs::RTC_HZ), p.nic.rtc_hz);
    sram.store_u32(reg(regs::SRAM_SIZE), len);
    sram.store_u32(reg(regs::MTU), p.nic.mtu.min(MAX_MTU as u32));
    sram.store_u32(reg(regs::LINK_STATE), 1);
    sram.store_u64(reg(regs::SEND_TIMEOUT_TICKS), ticks(cfg.send_timeout_ns));
    sram.store_u64(reg(regs::RETRANSMIT_TICKS), ticks(p.firmware.retransmit_ns));
    sram.store_u64(reg(regs::ACK_DELAY_TICKS), ticks(p.firmware.ack_delay_ns));
    sram.store_u64(reg(regs::NOBUF_RETRY_TICKS), ticks(p.firmware.nobuf_retry_ns));
    sram.store_u32(reg(regs::SEND_TOKENS), p.firmware.send_tokens);
    sram.store_u32(reg(regs::RECV_TOKENS), p.firmware.recv_tokens);
    sram.store_u32(reg(regs::WINDOW), p.firmware.window);
    sram.store_u32(reg(regs::TLB_SETS), p.nic.tlb_sets);
    sram.store_u32(reg(regs::TLB_WAYS), p.nic.tlb_ways);
    sram.store_u32(reg(regs::RELIABILITY), p.firmware.reliability.register_value());
    for port in 0..NUM_PORTS as u8 {
        let (base, len) = cfg.host.slice(port);
        let i = port as usize;
        sram.store_u64(reg(regs::port_slice_base(i)), base);
        sram.store_u64(reg(regs::port_slice_len(i)), len);
        sram.store_u64(reg(regs::port_pt_bus(i)), cfg.host.table(port));
        sram.store_u64(reg(regs::port_pt_vbase(i)), vaddr_of(port, base));
    }
    for (dst, route) in cfg.routes.iter().enumerate() {
        let mut e = [0u8; map::ROUTE_ENTRY as usize];
        e[0] = route.len() as u8;
        e[1..1 + route.len()].copy_from_slice(route);
        sram.write(map::route_entry(dst), &e[..1 + route.len()]);
    }
    // Every port is closed on its holder's behalf.
    for port in 0..NUM_PORTS {
        sram.store_u32(port_reg(port, pcb::STATE), pcb::STATE_CLOSED);
        sram.store_u32(port_reg(port, pcb::FW_STATE), pcb::STATE_CLOSED);
    }
    nic_abi::port::move_news(sram);
    // The flow table does not survive a reset: the privileged side (the
    // bandwidth manager's agent) installs its entries again.
    let flows = map::FLOW_ENTRIES * nic_abi::flows::FLOW_ENTRY_SIZE;
    for off in (0..flows).step_by(8) {
        sram.store_u64(map::FLOWS + off, 0);
    }
    sram.store_u32(reg(regs::MAGIC), regs::MAGIC_VALUE);
}

/// The NIC's real-time clock: ticks of the profile's RTC rate since
/// `origin` (ns on the backend's clock: virtual time in the sim, the
/// cluster's start in real time), shown in the `RTC` register.
#[derive(Debug, Clone, Copy)]
pub struct Rtc {
    pub clock: Clock,
    pub origin: u64,
}

impl Rtc {
    pub fn new(hz: u64) -> Rtc {
        Rtc { clock: Clock::new(hz), origin: 0 }
    }

    /// Ticks at `now`.
    #[inline]
    pub fn ticks(&self, now: u64) -> u64 {
        self.clock.ticks_at(now.saturating_sub(self.origin))
    }

    /// When (ns on the backend's clock) tick `t` falls.
    #[inline]
    pub fn ns_at_tick(&self, t: u64) -> u64 {
        self.origin.saturating_add(self.clock.ns_at_tick(t))
    }

    /// Show the time `now` in the RTC register; returns its ticks.
    #[inline]
    pub fn write<S: Sram + ?Sized>(&self, sram: &mut S, now: u64) -> u64 {
        let t = self.ticks(now);
        sram.store_u64(reg(regs::RTC), t);
        t
    }
}

/// A well-formed send-DMA command's packet in SRAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSpan {
    /// First byte (of the route).
    pub sram: usize,
    /// Route + header + payload bytes on the wire (the tail included).
    pub len: usize,
    pub route_len: usize,
    /// The gathered tail: its first byte and length (0: none). The first
    /// `len - tail_len` bytes come from `sram`.
    pub tail_sram: usize,
    pub tail_len: usize,
}

impl TxSpan {
    /// Wire bytes that come from `sram` (route, header and the payload
    /// before the gathered tail).
    #[inline]
    pub fn head_len(&self) -> usize {
        self.len - self.tail_len
    }
}

/// A send-DMA command's span, if it is well formed and inside SRAM of
/// `sram_len` bytes.
#[inline]
fn tx_span(cmd: Result<TxDmaCmd, nic_abi::ParseError>, sram_len: usize) -> Option<TxSpan> {
    cmd.ok().and_then(|c| {
        let (s, len, rl) = (c.sram as usize, c.len as usize, c.route_len as usize);
        let (ts, tl) = (c.tail_sram as usize, c.tail_len as usize);
        let total = len.checked_add(tl)?;
        let ok = len >= rl + HEADER_LEN
            && total <= MAX_WIRE
            && s.checked_add(len)? <= sram_len
            && ts.checked_add(tl)? <= sram_len;
        ok.then_some(TxSpan { sram: s, len: total, route_len: rl, tail_sram: ts, tail_len: tl })
    })
}

/// The three DMA engines of one NIC: where each stands in its rings, and
/// the device counters. Backend-independent: every step takes the node's
/// memories ([`NicMem`]); the backend calls the steps when its time says.
#[derive(Debug, Default)]
pub struct Engines {
    // Host-DMA engine.
    hdma_started: u32,
    hdma_done: u32,
    hdma_errors: u32,
    /// The ring slot of the command in progress.
    hdma_slot: Option<u32>,
    // Send-DMA engine.
    tx_cons: u32,
    tx_done: u32,
    tx_errors: u32,
    /// A packet is on the wire (its tail has not left).
    tx_busy: bool,
    /// Packets whose tail has left but whose completion waits
    /// ([`Engines::tx_hand_off`]; the real-time backend's lent packets).
    tx_owed: u32,
    // Receive-DMA engine.
    rx_free_cons: u32,
    rx_done_prod: u32,
    rx_drops: u32,
    pub c: DeviceCounters,
}

impl Engines {
    /// Engines that take up where the registers stand (zero on a fresh
    /// NIC): a device process restarted over a running cluster's files.
    pub fn adopt<M: NicMem + ?Sized>(m: &M) -> Engines {
        let s = m.sram();
        let tx_done = s.load_u32(reg(regs::TXDMA_DONE));
        let hdma_done = s.load_u32(reg(regs::HDMA_DONE));
        Engines {
            hdma_started: hdma_done,
            hdma_done,
            hdma_errors: s.load_u32(reg(regs::HDMA_ERRORS)),
            tx_cons: tx_done,
            tx_done,
            tx_errors: s.load_u32(reg(regs::TXDMA_ERRORS)),
            rx_free_cons: s.load_u32(reg(regs::RXFREE_CONS)),
            rx_done_prod: s.load_u32(reg(regs::RXDONE_PROD)),
            rx_drops: s.load_u32(reg(regs::RX_DROPS)),
            ..Engines::default()
        }
    }

    /// Hardware reset (the NIC is being reset; its firmware is gone): a
    /// packet on the wire has finished leaving, and commands the old
    /// firmware posted but the engines did not start are discarded (the
    /// producer registers are wound back to the engines' positions; the
    /// next firmware adopts them at init). A host-DMA command in progress
    /// completes first (`hdma_finish`).
    pub fn reset<M: NicMem + ?Sized>(&mut self, m: &mut M) {
        if self.tx_busy {
            self.tx_busy = false;
            self.tx_done = self.tx_done.wrapping_add(1);
        }
        self.tx_done = self.tx_done.wrapping_add(std::mem::take(&mut self.tx_owed));
        self.tx_cons = self.tx_done;
        self.hdma_started = self.hdma_done;
        let s = m.sram_mut();
        s.store_u32(reg(regs::TXDMA_DONE), self.tx_done);
        s.store_u32(reg(regs::TXDMA_PROD), self.tx_cons);
        s.store_u32(reg(regs::HDMA_DONE), self.hdma_done);
        s.store_u32(reg(regs::HDMA_PROD), self.hdma_done);
    }

    /// Is every engine idle with nothing posted? (Packets waiting for a
    /// receive buffer are the backend's to count.)
    pub fn quiet<M: NicMem + ?Sized>(&self, m: &M) -> bool {
        let s = m.sram();
        self.hdma_slot.is_none()
            && !self.tx_busy
            && self.tx_owed == 0
            && s.load_u32(reg(regs::HDMA_PROD)) == self.hdma_started
            && s.load_u32(reg(regs::TXDMA_PROD)) == self.tx_cons
    }

    // ---- host-DMA ----

    /// Start the next posted host-DMA command if the engine is idle.
    /// Returns its length (for the cost model). The slot is the engine's
    /// until `HDMA_DONE` passes it: the rest is read when it completes.
    #[inline]
    pub fn hdma_start<M: NicMem + ?Sized>(&mut self, m: &M) -> Option<u64> {
        let prod = m.sram().load_u32(reg(regs::HDMA_PROD));
        self.hdma_start_before(m, prod)
    }

    /// `hdma_start`, seeing only the commands before producer index
    /// `prod` (see `tx_next_before`).
    #[inline]
    pub fn hdma_start_before<M: NicMem + ?Sized>(&mut self, m: &M, prod: u32) -> Option<u64> {
        let s = m.sram();
        if self.hdma_slot.is_some() || prod == self.hdma_started {
            return None;
        }
        let slot = rings::slot(
            map::HDMA_RING,
            map::HDMA_RING_LEN,
            rings::HDMA_CMD_SIZE,
            self.hdma_started,
        );
        self.hdma_slot = Some(slot);
        self.hdma_started = self.hdma_started.wrapping_add(1);
        Some(s.load_u32(slot + 4) as u64)
    }

    /// The command in progress completes: its bytes move, the counters
    /// and `HDMA_ERRORS` count it, `HDMA_DONE` last. Returns whether it
    /// wrote host memory (the host's programs may have something to see);
    /// None if no command was in progress.
    #[inline]
    pub fn hdma_finish<M: NicMem + ?Sized>(&mut self, m: &mut M) -> Option<bool> {
        let slot = self.hdma_slot.take()?;
        let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
        m.sram().read(slot, &mut b);
        let cmd = HostDmaCmd::decode(&b).ok();
        let ok = cmd.is_some_and(|c| m.dma(&c));
        self.c.hdma_cmds += 1;
        let s = m.sram_mut();
        if ok {
            self.c.hdma_bytes += cmd.map_or(0, |c| c.len as u64);
        } else {
            self.c.hdma_errors += 1;
            self.hdma_errors = self.hdma_errors.wrapping_add(1);
            s.store_u32(reg(regs::HDMA_ERRORS), self.hdma_errors);
        }
        self.hdma_done = self.hdma_done.wrapping_add(1);
        s.store_u32(reg(regs::HDMA_DONE), self.hdma_done);
        Some(ok && cmd.is_some_and(|c| c.dir == DmaDir::SramToHost))
    }

    // ---- send-DMA ----

    /// Take posted send-DMA commands while the engine is idle: malformed
    /// ones complete at once (counted); the first good one makes the
    /// engine busy and is returned. Also returns whether commands
    /// completed (the firmware should be woken).
    #[inline]
    pub fn tx_next<M: NicMem + ?Sized>(&mut self, m: &mut M) -> (Option<TxSpan>, bool) {
        let prod = m.sram().load_u32(reg(regs::TXDMA_PROD));
        self.tx_next_before(m, prod)
    }

    /// Is a host-DMA command in progress?
    pub fn hdma_busy(&self) -> bool {
        self.hdma_slot.is_some()
    }

    /// Is a packet on the wire (the engine busy until its tail leaves)?
    pub fn tx_busy(&self) -> bool {
        self.tx_busy
    }

    /// `tx_next`, seeing only the commands before producer index `prod`
    /// (those posted by then: the sim hides the commands a firmware pass
    /// still in progress wrote until the pass ends).
    #[inline]
    pub fn tx_next_before<M: NicMem + ?Sized>(
        &mut self,
        m: &mut M,
        prod: u32,
    ) -> (Option<TxSpan>, bool) {
        let mut completed = false;
        if self.tx_busy {
            return (None, completed);
        }
        let len = m.sram_len();
        for _ in 0..map::TXDMA_RING_LEN {
            let s = m.sram_mut();
            if prod == self.tx_cons {
                break;
            }
            let slot = rings::slot(
                map::TXDMA_RING,
                map::TXDMA_RING_LEN,
                rings::TXDMA_CMD_SIZE,
                self.tx_cons,
            );
            let mut b = [0u8; rings::TXDMA_CMD_SIZE as usize];
            s.read(slot, &mut b);
            self.tx_cons = self.tx_cons.wrapping_add(1);
            if let Some(span) = tx_span(TxDmaCmd::decode(&b), len) {
                self.tx_busy = true;
                return (Some(span), completed);
            }
            self.c.txdma_errors += 1;
            self.tx_errors = self.tx_errors.wrapping_add(1);
            self.tx_done = self.tx_done.wrapping_add(1);
            s.store_u32(reg(regs::TXDMA_ERRORS), self.tx_errors);
            s.store_u32(reg(regs::TXDMA_DONE), self.tx_done);
            completed = true;
        }
        (None, completed)
    }

    /// Read `p`'s packet into `buf` (its wire bytes: route, header,
    /// payload) with the hardware CRC-32 over header + payload (crc field
    /// zero) put into its header, in `buf` and in SRAM; count it.
    #[inline]
    pub fn tx_fill<M: NicMem + ?Sized>(&mut self, m: &mut M, p: TxSpan, buf: &mut Vec<u8>) {
        // A recycled buffer is refilled from SRAM in place of what it
        // held: nothing is zeroed first.
        buf.clear();
        let head = p.head_len();
        m.sram_append(p.sram as u32, head, buf);
        if p.tail_len > 0 {
            m.sram_append(p.tail_sram as u32, p.tail_len, buf);
        }
        let s = m.sram_mut();
        let at = p.route_len + field::CRC;
        buf[at..at + 4].fill(0);
        let crc = crc32fast::hash(&buf[p.route_len..]);
        buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        s.write((p.sram + at) as u32, &crc.to_le_bytes());
        self.c.tx_packets += 1;
        self.c.tx_bytes += p.len as u64;
    }

    /// Count `p`'s packet as `tx_fill` does and put `crc` (the CRC-32 of
    /// its header and payload with the crc field zero, which the backend
    /// computed over SRAM) into its header in SRAM, without reading the
    /// packet out: the real-time backend's receiving engine then takes the
    /// bytes from here ([`Engines::tx_hand_off`]).
    #[inline]
    pub fn tx_seal<M: NicMem + ?Sized>(&mut self, m: &mut M, p: TxSpan, crc: u32) {
        let at = p.sram + p.route_len + field::CRC;
        m.sram_mut().write(at as u32, &crc.to_le_bytes());
        self.c.tx_packets += 1;
        self.c.tx_bytes += p.len as u64;
    }

    /// The packet on the wire has left, but its completion must wait (the
    /// real-time backend lent its bytes to the receiving engine, which
    /// has not taken them yet): the engine may start the next command;
    /// `TXDMA_DONE` counts this one at [`Engines::tx_complete_owed`], in
    /// order. False if no packet was on the wire.
    #[inline]
    pub fn tx_hand_off(&mut self) -> bool {
        if !self.tx_busy {
            return false;
        }
        self.tx_busy = false;
        self.tx_owed += 1;
        true
    }

    /// The oldest handed-off packet completes: `TXDMA_DONE` counts it.
    /// False if none was owed.
    #[inline]
    pub fn tx_complete_owed<M: NicMem + ?Sized>(&mut self, m: &mut M) -> bool {
        if self.tx_owed == 0 {
            return false;
        }
        self.tx_owed -= 1;
        self.tx_done = self.tx_done.wrapping_add(1);
        m.sram_mut().store_u32(reg(regs::TXDMA_DONE), self.tx_done);
        true
    }

    /// The packet on the wire has left (its tail): `TXDMA_DONE` counts
    /// it. False if none was (or handed-off packets are still owed: they
    /// complete first, `tx_hand_off` this one too).
    #[inline]
    pub fn tx_finish<M: NicMem + ?Sized>(&mut self, m: &mut M) -> bool {
        if !self.tx_busy || self.tx_owed > 0 {
            return false;
        }
        self.tx_busy = false;
        self.tx_done = self.tx_done.wrapping_add(1);
        m.sram_mut().store_u32(reg(regs::TXDMA_DONE), self.tx_done);
        true
    }

    // ---- receive-DMA ----

    /// Take the next free receive buffer from the RXFREE ring, if one is
    /// posted and the RXDONE ring has room for its completion (with
    /// `inflight` completions still to come). Entries naming no buffer
    /// are skipped and counted.
    #[inline]
    pub fn rx_take<M: NicMem + ?Sized>(&mut self, m: &mut M, inflight: u32) -> Option<u32> {
        let s = m.sram_mut();
        loop {
            if s.load_u32(reg(regs::RXFREE_PROD)) == self.rx_free_cons {
                return None;
            }
            let pending = self.rx_done_prod.wrapping_sub(s.load_u32(reg(regs::RXDONE_CONS)));
            if pending.saturating_add(inflight) >= map::RXDONE_RING_LEN {
                return None;
            }
            let slot = rings::slot(
                map::RXFREE_RING,
                map::RXFREE_RING_LEN,
                rings::RXFREE_SIZE,
                self.rx_free_cons,
            );
            let idx = s.load_u32(slot);
            self.rx_free_cons = self.rx_free_cons.wrapping_add(1);
            s.store_u32(reg(regs::RXFREE_CONS), self.rx_free_cons);
            if idx < RX_BUF_COUNT {
                return Some(idx);
            }
            self.c.rx_bad_free += 1;
        }
    }

    /// A packet arrived with route bytes left: dropped, `RX_DROPS`.
    pub fn rx_misrouted<M: NicMem + ?Sized>(&mut self, m: &mut M) {
        self.c.rx_misrouted += 1;
        self.rx_drops = self.rx_drops.wrapping_add(1);
        m.sram_mut().store_u32(reg(regs::RX_DROPS), self.rx_drops);
    }

    /// The receive engine's completion of packet `data` (header +
    /// payload) into receive buffer `buf`: cut at `BUF_STRIDE`
    /// (`RxStatus::TRUNCATED`, which fails the CRC too), else its CRC checked
    /// (`RxStatus::CRC_BAD`); its `RxDone` into the next RXDONE slot, then
    /// `RXDONE_PROD` bumped (last: where SRAM is shared, a Release store)
    /// and the counters. An untouched packet carries the CRC its sender
    /// computed over exactly these bytes, so only a `corrupted` one can
    /// fail; release builds skip the redundant check.
    #[inline]
    pub fn rx_deliver<M: NicMem + ?Sized>(
        &mut self,
        m: &mut M,
        buf: u32,
        data: &[u8],
        corrupted: bool,
    ) {
        let (n, status) = rx_checks(data.len(), corrupted, || crc_ok(data));
        m.sram_mut().write(map::rx_buf(buf), &data[..n]);
        self.rx_complete(m, buf, n, status);
    }

    /// `rx_deliver` after its copy: the `n` bytes of a packet are in
    /// receive buffer `buf` (put there by the backend, e.g. straight from
    /// the sender's SRAM), `status` what the checks found; its `RxDone`,
    /// `RXDONE_PROD` last, the counters.
    #[inline]
    pub fn rx_complete<M: NicMem + ?Sized>(
        &mut self,
        m: &mut M,
        buf: u32,
        n: usize,
        status: rings::RxStatus,
    ) {
        let s = m.sram_mut();
        if status.contains(rings::RxStatus::TRUNCATED) {
            self.c.rx_truncated += 1;
        }
        if status.contains(rings::RxStatus::CRC_BAD) {
            self.c.rx_crc_bad += 1;
        }
        let slot = rings::slot(
            map::RXDONE_RING,
            map::RXDONE_RING_LEN,
            rings::RXDONE_SIZE,
            self.rx_done_prod,
        );
        let mut rec = [0u8; rings::RXDONE_SIZE as usize];
        RxDone { buf, len: n as u32, status }.encode(&mut rec);
        s.write(slot, &rec);
        self.rx_done_prod = self.rx_done_prod.wrapping_add(1);
        s.store_u32(reg(regs::RXDONE_PROD), self.rx_done_prod);
        self.c.rx_packets += 1;
        self.c.rx_bytes += n as u64;
    }
}

/// The receive engine's checks of a `len`-byte packet (header +
/// payload): the bytes it keeps (cut at `BUF_STRIDE`: `TRUNCATED`, which
/// fails the CRC too) and its status; `crc_ok` (its CRC) is asked only of
/// a `corrupted` packet, or of every one in debug builds (an untouched
/// packet carries the CRC its sender computed over exactly these bytes).
#[inline]
pub fn rx_checks(
    len: usize,
    corrupted: bool,
    crc_ok: impl FnOnce() -> bool,
) -> (usize, rings::RxStatus) {
    let cap = BUF_STRIDE as usize;
    let (n, status) = if len > cap {
        (cap, rings::RxStatus::TRUNCATED | rings::RxStatus::CRC_BAD)
    } else if (corrupted || cfg!(debug_assertions)) && !crc_ok() {
        (len, rings::RxStatus::CRC_BAD)
    } else {
        (len, rings::RxStatus::empty())
    };
    debug_assert!(corrupted || !status.contains(rings::RxStatus::CRC_BAD) || len > cap);
    (n, status)
}

/// Does a received packet (header + payload) carry a good CRC?
pub fn crc_ok(pkt: &[u8]) -> bool {
    if pkt.len() < HEADER_LEN {
        return false;
    }
    let c = field::CRC;
    let stored = u32::from_le_bytes([pkt[c], pkt[c + 1], pkt[c + 2], pkt[c + 3]]);
    let mut h = crc32fast::Hasher::new();
    h.update(&pkt[..c]);
    h.update(&[0; 4]);
    h.update(&pkt[c + 4..]);
    h.finalize() == stored
}

#[cfg(test)]
mod tests {
    //! The engines' protocol, backend-independent: driven directly over
    //! the sim's heap memories (the real-time backend runs the same code
    //! over file mappings).
    use super::*;
    use crate::memory::NodeMem;

    fn node() -> NodeMem {
        NodeMem::new(map::SRAM_MIN as usize, 1 << 20)
    }

    fn post_hdma(m: &mut NodeMem, n: u32, c: HostDmaCmd) {
        let mut b = [0u8; rings::HDMA_CMD_SIZE as usize];
        c.encode(&mut b);
        m.sram.write(rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, n), &b);
        m.sram.store_u32(reg(regs::HDMA_PROD), n + 1);
    }

    fn post_tx(m: &mut NodeMem, n: u32, c: TxDmaCmd) {
        let mut b = [0u8; rings::TXDMA_CMD_SIZE as usize];
        c.encode(&mut b);
        m.sram
            .write(rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, n), &b);
        m.sram.store_u32(reg(regs::TXDMA_PROD), n + 1);
    }

    #[test]
    fn a_host_dma_command_moves_its_bytes_when_it_finishes_and_counts_done_last() {
        let mut m = node();
        let host = m.host.alloc(4096).unwrap();
        m.host.write(host, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut e = Engines::default();
        let cmd = HostDmaCmd { dir: DmaDir::HostToSram, len: 8, sram: 0x9_0000, host, cookie: 0 };
        post_hdma(&mut m, 0, cmd);
        assert_eq!(e.hdma_start(&m), Some(8), "the length, for the cost model");
        assert_eq!(e.hdma_start(&m), None, "one command at a time");
        assert_eq!(&m.sram[0x9_0000..0x9_0008], &[0; 8], "nothing moves before it finishes");
        assert_eq!(e.hdma_finish(&mut m), Some(false), "it did not write host memory");
        assert_eq!(&m.sram[0x9_0000..0x9_0008], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m.sram.load_u32(reg(regs::HDMA_DONE)), 1);
        assert_eq!((e.c.hdma_cmds, e.c.hdma_bytes, e.c.hdma_errors), (1, 8, 0));
        assert!(e.quiet(&m));
    }

    #[test]
    fn an_out_of_range_host_dma_command_moves_nothing_counts_an_error_and_completes() {
        let mut m = node();
        let mut e = Engines::default();
        let far = m.host.len() + 4096;
        post_hdma(
            &mut m,
            0,
            HostDmaCmd { dir: DmaDir::SramToHost, len: 64, sram: 0, host: far, cookie: 0 },
        );
        e.hdma_start(&m);
        assert_eq!(e.hdma_finish(&mut m), Some(false));
        assert_eq!(m.sram.load_u32(reg(regs::HDMA_ERRORS)), 1);
        assert_eq!(m.sram.load_u32(reg(regs::HDMA_DONE)), 1, "it still completes");
        assert_eq!((e.c.hdma_errors, e.c.hdma_bytes), (1, 0));
    }

    #[test]
    fn a_malformed_send_command_completes_at_once_and_the_next_good_one_is_sent_with_its_crc() {
        let mut m = node();
        let mut e = Engines::default();
        let s = map::TX_BUFS;
        post_tx(
            &mut m,
            0,
            TxDmaCmd { sram: s, len: 2, route_len: 1, cookie: 0, tail_sram: 0, tail_len: 0 },
        );
        let len = (1 + HEADER_LEN + 16) as u32;
        m.sram[s as usize..(s + len) as usize].fill(0x5A);
        post_tx(
            &mut m,
            1,
            TxDmaCmd { sram: s, len, route_len: 1, cookie: 0, tail_sram: 0, tail_len: 0 },
        );
        let (next, completed) = e.tx_next(&mut m);
        assert!(completed, "the malformed one completed");
        assert_eq!(m.sram.load_u32(reg(regs::TXDMA_ERRORS)), 1);
        assert_eq!(m.sram.load_u32(reg(regs::TXDMA_DONE)), 1);
        let p = next.expect("the good one");
        assert_eq!(e.tx_next(&mut m), (None, false), "busy until its tail leaves");
        let mut wire = Vec::new();
        e.tx_fill(&mut m, p, &mut wire);
        assert_eq!(wire.len(), len as usize);
        assert!(crc_ok(&wire[1..]), "the CRC is on the wire");
        assert_eq!(&wire[..], &m.sram[s as usize..(s + len) as usize], "and in SRAM");
        assert!(e.tx_finish(&mut m));
        assert_eq!(m.sram.load_u32(reg(regs::TXDMA_DONE)), 2);
        assert!(!e.tx_finish(&mut m));
    }

    #[test]
    fn a_gathered_send_puts_the_tail_behind_the_head_and_the_crc_over_both() {
        let mut m = node();
        let mut e = Engines::default();
        let s = map::TX_BUFS;
        let head = (1 + HEADER_LEN) as u32;
        m.sram[s as usize..(s + head) as usize].fill(0x11);
        let tail = map::RX_BUFS + HEADER_LEN as u32;
        m.sram[tail as usize..tail as usize + 100].fill(0x77);
        post_tx(
            &mut m,
            0,
            TxDmaCmd {
                sram: s,
                len: head,
                route_len: 1,
                cookie: 0,
                tail_sram: tail,
                tail_len: 100,
            },
        );
        let p = e.tx_next(&mut m).0.expect("a good command");
        let mut wire = Vec::new();
        e.tx_fill(&mut m, p, &mut wire);
        assert_eq!(wire.len(), head as usize + 100);
        assert!(wire[head as usize..].iter().all(|&b| b == 0x77), "the tail follows the head");
        assert!(crc_ok(&wire[1..]), "one CRC over header and gathered payload");
        // A tail that leaves SRAM is a malformed command.
        let far = m.sram.len() as u32 - 10;
        post_tx(
            &mut m,
            1,
            TxDmaCmd { sram: s, len: head, route_len: 1, cookie: 0, tail_sram: far, tail_len: 100 },
        );
        e.tx_finish(&mut m);
        assert_eq!(e.tx_next(&mut m), (None, true));
    }

    #[test]
    fn a_received_packet_goes_into_a_free_buffer_with_its_rxdone_and_the_producer_last() {
        let mut m = node();
        let mut e = Engines::default();
        assert_eq!(e.rx_take(&mut m, 0), None, "no buffer posted");
        let free = |i| rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, i);
        m.sram.store_u32(free(0), RX_BUF_COUNT + 5);
        m.sram.store_u32(free(1), 3);
        m.sram.store_u32(reg(regs::RXFREE_PROD), 2);
        assert_eq!(e.rx_take(&mut m, 0), Some(3), "the entry naming no buffer is skipped");
        assert_eq!(e.c.rx_bad_free, 1);
        assert_eq!(m.sram.load_u32(reg(regs::RXFREE_CONS)), 2);
        let mut pkt = vec![7u8; HEADER_LEN + 10];
        pkt[field::CRC..field::CRC + 4].fill(0);
        let crc = crc32fast::hash(&pkt);
        pkt[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        e.rx_deliver(&mut m, 3, &pkt, false);
        let at = map::rx_buf(3) as usize;
        assert_eq!(&m.sram[at..at + pkt.len()], &pkt[..]);
        let mut rec = [0u8; rings::RXDONE_SIZE as usize];
        m.sram.read(map::RXDONE_RING, &mut rec);
        let done = RxDone::decode(&rec).unwrap();
        assert_eq!(
            (done.buf, done.len, done.status),
            (3, pkt.len() as u32, rings::RxStatus::empty())
        );
        assert_eq!(m.sram.load_u32(reg(regs::RXDONE_PROD)), 1);
        e.rx_misrouted(&mut m);
        assert_eq!(m.sram.load_u32(reg(regs::RX_DROPS)), 1);
    }
}
