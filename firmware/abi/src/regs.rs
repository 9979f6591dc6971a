//! The register block at `map::REGS`. Registers are little-endian memory
//! words; the device model watches the ones it owns. Offsets are relative to
//! `map::REGS`; use [`reg`] for an absolute SRAM offset.
//!
//! Ownership: "dev" words are written only by the device model, "fw" words
//! only by the firmware, "host" words only by the host driver, "cfg" words by
//! the device model at reset (the NIC's configuration EEPROM).

use core::marker::PhantomData;

/// A register of the block: its offset, and in its type its width (`u32`
/// or `u64`), so reading a 64-bit register as 32 bits does not compile:
/// `Sram::reg(regs::RTC)` is a u64, `Sram::reg(regs::MTU)` a u32.
///
/// ```
/// use nic_abi::{map, regs, sram::Sram};
/// let mut m = vec![0u8; map::SRAM_MIN as usize];
/// let sram: &mut [u8] = &mut m;
/// sram.set_reg(regs::RTC, 1 << 40);
/// let rtc: u64 = sram.reg(regs::RTC);
/// assert_eq!(rtc, 1 << 40);
/// ```
///
/// ```compile_fail
/// use nic_abi::{map, regs, sram::Sram};
/// let m = vec![0u8; map::SRAM_MIN as usize];
/// let sram: &[u8] = &m;
/// let rtc: u32 = sram.reg(regs::RTC); // a 64-bit register read as 32 bits
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Reg<W> {
    off: u32,
    width: PhantomData<W>,
}

impl<W> Clone for Reg<W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Reg<W> {}

impl<W> Reg<W> {
    /// The register at `off` in the block.
    pub const fn at(off: u32) -> Reg<W> {
        Reg { off, width: PhantomData }
    }

    /// Offset in the register block.
    pub const fn offset(self) -> u32 {
        self.off
    }

    /// Absolute SRAM offset.
    pub const fn addr(self) -> u32 {
        crate::map::REGS + self.off
    }
}

/// The widths a register can have.
pub trait Width: Copy {
    fn load(s: &(impl crate::sram::Sram + ?Sized), off: u32) -> Self;
    fn store(s: &mut (impl crate::sram::Sram + ?Sized), off: u32, v: Self);
}

impl Width for u32 {
    #[inline]
    fn load(s: &(impl crate::sram::Sram + ?Sized), off: u32) -> u32 {
        s.load_u32(off)
    }
    #[inline]
    fn store(s: &mut (impl crate::sram::Sram + ?Sized), off: u32, v: u32) {
        s.store_u32(off, v)
    }
}

impl Width for u64 {
    #[inline]
    fn load(s: &(impl crate::sram::Sram + ?Sized), off: u32) -> u64 {
        s.load_u64(off)
    }
    #[inline]
    fn store(s: &mut (impl crate::sram::Sram + ?Sized), off: u32, v: u64) {
        s.store_u64(off, v)
    }
}

/// Absolute SRAM offset of a register (for code that reaches SRAM by
/// offset; prefer `Sram::reg`/`Sram::set_reg`, which know the width).
pub const fn reg<W>(r: Reg<W>) -> u32 {
    r.addr()
}

/// Value of `MAGIC`: "NICE".
pub const MAGIC_VALUE: u32 = 0x4543_494E;
/// Version of this ABI; firmware refuses to run on a mismatch.
pub const ABI_VERSION_VALUE: u32 = 4;

// Identity and configuration (cfg).
pub const MAGIC: Reg<u32> = Reg::at(0x000); // cfg
pub const ABI_VERSION: Reg<u32> = Reg::at(0x004); // cfg
pub const NODE_ID: Reg<u32> = Reg::at(0x008); // cfg
pub const NUM_NODES: Reg<u32> = Reg::at(0x00C); // cfg
/// Real-time clock, in ticks (dev, read-only for everyone else).
pub const RTC: Reg<u64> = Reg::at(0x010); // dev
/// RTC ticks per second (cfg).
pub const RTC_HZ: Reg<u64> = Reg::at(0x018); // cfg
pub const SRAM_SIZE: Reg<u32> = Reg::at(0x020); // cfg
/// Payload bytes per packet, at most `MAX_MTU` (cfg).
pub const MTU: Reg<u32> = Reg::at(0x024); // cfg
/// Firmware status: see `FW_*` (fw).
pub const FW_STATUS: Reg<u32> = Reg::at(0x028); // fw
/// Host doorbell: the driver adds one after posting descriptors. The
/// firmware polls the rings and never needs it; the device model uses it
/// to wake an idle NIC CPU (wait-for-interrupt in the qemu backend).
pub const HOST_DOORBELL: Reg<u32> = Reg::at(0x02C); // host
/// Link state, bit 0 = up (dev).
pub const LINK_STATE: Reg<u32> = Reg::at(0x030); // dev
/// The NIC CPU's wait count (fw): odd while the CPU waits for an
/// interrupt, even while it runs. The firmware makes it odd, then looks
/// at everything once more, then waits; it makes it even when it wakes.
/// While it is odd the device model raises the CPU's interrupt (once per
/// value) when it completes a DMA command, stores a received packet or
/// sees a host write the firmware reads change (`HOST_WRITES`). Only the
/// qemu backend's CPU waits; elsewhere it stays 0.
pub const IRQ_WAIT: Reg<u32> = Reg::at(0x034); // fw
/// How many times the device model saw a host write the firmware reads
/// change (dev): one register that moves whenever a port's `DOORBELL`,
/// `STATE`, `PT_GEN` or `PT_ADDED`, `HOST_DOORBELL`, the trace switches
/// or `FLOW_GEN` did, so that the firmware (and a CPU waiting for news)
/// can watch one word instead of every port's. Every backend keeps it:
/// the sim at each host write to SRAM ([`host_wrote`]), the real-time
/// backends' device step when one of those words differs from its last
/// look. A port's `EVQ_CONSUMED` need not move it (the real-time backends'
/// does not): the firmware reads it only while that port's event queue is
/// full, and then looks again every `NOBUF_RETRY_TICKS` by itself.
pub const HOST_WRITES: Reg<u32> = Reg::at(0x03C); // dev
/// How many times this NIC was reset (cfg): the firmware derives its boot
/// nonce from it, so peers can tell a restarted NIC's streams apart.
pub const BOOT_COUNT: Reg<u32> = Reg::at(0x038); // cfg

// Firmware parameters (cfg), from the timing profile and the scenario.
/// A send that finds no receive buffer is retried this long, then times out.
pub const SEND_TIMEOUT_TICKS: Reg<u64> = Reg::at(0x040); // cfg
/// Unacknowledged packets are resent (go-back-N) after this long.
pub const RETRANSMIT_TICKS: Reg<u64> = Reg::at(0x048); // cfg
/// An ack waits at most this long for reverse traffic to ride on.
pub const ACK_DELAY_TICKS: Reg<u64> = Reg::at(0x050); // cfg
/// Pause before resending a packet nacked for lack of a receive buffer.
pub const NOBUF_RETRY_TICKS: Reg<u64> = Reg::at(0x058); // cfg
/// Send tokens per port (cfg), 1 to `PORT_SEND_TOKENS_MAX`. The host
/// counts its tokens from this register and the firmware honours every
/// one (a firmware refuses a value out of range: it does not start).
pub const SEND_TOKENS: Reg<u32> = Reg::at(0x060); // cfg
/// Receive tokens per port (cfg), 1 to `PORT_RECV_TOKENS_MAX`.
pub const RECV_TOKENS: Reg<u32> = Reg::at(0x064); // cfg
/// Most send tokens a port can have. The firmware's token table is shared
/// by the ports (32 each, plus its own): when ports together hold more, a
/// send waits in its ring until a token comes back, and the receive
/// buffers posted behind it are taken past it.
pub const PORT_SEND_TOKENS_MAX: u32 = 64;
/// Most receive tokens a port can have: the firmware's receive slots
/// (`map::RX_INLINE_SLOTS`) shared evenly by the ports, so a receive
/// buffer within its port's count always finds a slot, whatever the other
/// ports hold.
pub const PORT_RECV_TOKENS_MAX: u32 = crate::map::RX_INLINE_SLOTS / crate::NUM_PORTS as u32;
/// Most unacknowledged packets per stream (cfg).
pub const WINDOW: Reg<u32> = Reg::at(0x068); // cfg
/// The translation cache's shape: sets (a power of two) and ways. 0: the
/// firmware's default; the firmware caps them to what `map::TLB` holds.
pub const TLB_SETS: Reg<u32> = Reg::at(0x070); // cfg
pub const TLB_WAYS: Reg<u32> = Reg::at(0x074); // cfg
/// How streams recover lost packets (cfg): `RELIABILITY_GO_BACK_N` (the
/// receiver takes packets in order only; the sender resends from the
/// first one missing) or `RELIABILITY_SELECTIVE` (the receiver keeps
/// packets that arrive past a gap and names what is missing; the sender
/// resends only that). Any other value: go-back-N.
pub const RELIABILITY: Reg<u32> = Reg::at(0x078); // cfg
pub const RELIABILITY_GO_BACK_N: u32 = 0;
pub const RELIABILITY_SELECTIVE: u32 = 1;

/// Smallest MTU the firmware runs with (bytes).
pub const MTU_MIN: u32 = 64;

/// The values a cfg word may hold for the firmware to start: `min..=max`.
/// A value outside halts the firmware at boot (`FW_HALTED`, the register
/// named); whatever writes the cfg words (a timing profile) checks them
/// with [`BootCfg::check`] first, so that it can name its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CfgRange {
    /// The register's name, as the firmware's log line gives it.
    pub reg: &'static str,
    pub min: u32,
    pub max: u32,
}

impl CfgRange {
    pub const fn contains(&self, v: u32) -> bool {
        self.min <= v && v <= self.max
    }
}

/// `NUM_NODES`: 1 to `MAX_NODES`.
pub const NUM_NODES_RANGE: CfgRange =
    CfgRange { reg: "NUM_NODES", min: 1, max: crate::MAX_NODES as u32 };
/// `SEND_TOKENS`: 1 to `PORT_SEND_TOKENS_MAX`.
pub const SEND_TOKENS_RANGE: CfgRange =
    CfgRange { reg: "SEND_TOKENS", min: 1, max: PORT_SEND_TOKENS_MAX };
/// `RECV_TOKENS`: 1 to `PORT_RECV_TOKENS_MAX`.
pub const RECV_TOKENS_RANGE: CfgRange =
    CfgRange { reg: "RECV_TOKENS", min: 1, max: PORT_RECV_TOKENS_MAX };
/// `MTU`: `MTU_MIN` to `MAX_MTU`.
pub const MTU_RANGE: CfgRange = CfgRange { reg: "MTU", min: MTU_MIN, max: crate::MAX_MTU as u32 };

/// The cfg words the firmware refuses to start with when out of range:
/// the firmware's boot and a timing profile's validation run the same
/// [`check`](BootCfg::check), so the two cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootCfg {
    pub num_nodes: u32,
    pub node_id: u32,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub mtu: u32,
}

impl BootCfg {
    /// The first word out of its range, with that range (`NODE_ID`:
    /// 0 to `num_nodes - 1`).
    pub fn check(&self) -> Result<(), CfgRange> {
        let node_id = CfgRange { reg: "NODE_ID", min: 0, max: self.num_nodes.saturating_sub(1) };
        for (range, v) in [
            (NUM_NODES_RANGE, self.num_nodes),
            (node_id, self.node_id),
            (SEND_TOKENS_RANGE, self.send_tokens),
            (RECV_TOKENS_RANGE, self.recv_tokens),
            (MTU_RANGE, self.mtu),
        ] {
            if !range.contains(v) {
                return Err(range);
            }
        }
        Ok(())
    }
}

// Host-DMA engine (host memory <-> SRAM). Commands in `map::HDMA_RING`.
/// Commands posted (fw), free-running.
pub const HDMA_PROD: Reg<u32> = Reg::at(0x100); // fw
/// Commands completed (dev), free-running; completion is in order.
pub const HDMA_DONE: Reg<u32> = Reg::at(0x104); // dev
/// Commands refused (bad range); they still count as done (dev).
pub const HDMA_ERRORS: Reg<u32> = Reg::at(0x108); // dev

// Send-DMA engine (SRAM -> wire). Commands in `map::TXDMA_RING`.
/// Commands posted (fw), free-running.
pub const TXDMA_PROD: Reg<u32> = Reg::at(0x110); // fw
/// Commands finished (dev), in order: the packet's tail has left the NIC
/// (or the command was refused), so its buffer may be reused.
pub const TXDMA_DONE: Reg<u32> = Reg::at(0x114); // dev
/// Commands refused (range outside SRAM, or shorter than route + header);
/// they still count as done (dev).
pub const TXDMA_ERRORS: Reg<u32> = Reg::at(0x118); // dev

// Receive-DMA engine (wire -> SRAM).
/// Free receive buffers posted in `map::RXFREE_RING` (fw).
pub const RXFREE_PROD: Reg<u32> = Reg::at(0x120); // fw
/// Free receive buffers taken by the engine (dev).
pub const RXFREE_CONS: Reg<u32> = Reg::at(0x124); // dev
/// Filled buffers reported in `map::RXDONE_RING` (dev).
pub const RXDONE_PROD: Reg<u32> = Reg::at(0x128); // dev
/// Filled buffers consumed (fw).
pub const RXDONE_CONS: Reg<u32> = Reg::at(0x12C); // fw
/// Packets the engine dropped: misrouted (route bytes left on arrival) or
/// shorter than a header (dev). A packet longer than a buffer is not
/// dropped: it is stored cut short and flagged `RxStatus::TRUNCATED`.
pub const RX_DROPS: Reg<u32> = Reg::at(0x130); // dev

// The words besides the engines' counters that the firmware reads at
// every pass share their cache line (0x100-0x13F): a pass reads the
// register block's RTC line and this one, and no other (on a simulated
// cluster of hundreds of NICs each further line is a miss at every pass).
/// Non-zero: record state-machine transitions in the trace ring (host).
pub const TRACE_ENABLE: Reg<u32> = Reg::at(0x10C); // host
/// Bumped by whoever edits the flow table (driver or BRM agent): the
/// firmware re-reads the IDTs of its flows when it changes (host).
pub const FLOW_GEN: Reg<u32> = Reg::at(0x11C); // host
/// Non-zero: record every packet dispatch in DISPATCH_TRACE (host).
pub const DISPATCH_TRACE_ENABLE: Reg<u32> = Reg::at(0x134); // host
/// Port news (dev): moved by the privileged side whenever a port's
/// `STATE` or `GENERATION` word (`port::STATE`, `port::GENERATION`) may
/// have changed: by the sim's driver layer at the write, by the
/// real-time backends' device model when its step sees one of those
/// words differ from its last look (a host process writes them in its
/// own window and cannot reach this register), and at every reset. The
/// firmware reads the port windows' `STATE` and `GENERATION` again only
/// after a pass that found this word changed (and at its first pass), so
/// a pass need not touch the windows of ports that stay closed. Any
/// value is harmless: a change only makes the firmware look again.
pub const PORT_NEWS: Reg<u32> = Reg::at(0x138); // dev

/// Move `HOST_WRITES`: what the device model does after a host write
/// the firmware may read.
pub fn host_wrote<S: crate::sram::Sram + ?Sized>(sram: &mut S) {
    let n = sram.reg(HOST_WRITES);
    sram.set_reg(HOST_WRITES, n.wrapping_add(1));
}

/// Trace records written (fw), free-running; slot = n % TRACE_LEN.
pub const TRACE_PROD: Reg<u32> = Reg::at(0x140); // fw

// Rate control (see flows).
/// Dispatch records written (fw), free-running; slot = n % DISPATCH_TRACE_LEN.
pub const DISPATCH_TRACE_PROD: Reg<u32> = Reg::at(0x158); // fw

/// Protection: the host-memory slice of each port, `[base, base + len)`
/// in bus addresses, written by the privileged side (the device model, at
/// reset) and never by a host process. The MCP uses a page-table entry or
/// an event queue only inside its port's slice; a port whose slice is
/// empty reaches no host memory. `port_slice_base(p)` and
/// `port_slice_len(p)` name port p's words.
pub const PORT_SLICES: u32 = 0x200; // cfg
/// Bytes per port in `PORT_SLICES`: base (u64), then len (u64).
pub const PORT_SLICE_SIZE: u32 = 16;

/// Port `p`'s slice base (bus address).
pub const fn port_slice_base(p: usize) -> Reg<u64> {
    Reg::at(PORT_SLICES + p as u32 * PORT_SLICE_SIZE)
}

/// Port `p`'s slice length in bytes.
pub const fn port_slice_len(p: usize) -> Reg<u64> {
    Reg::at(PORT_SLICES + p as u32 * PORT_SLICE_SIZE + 8)
}

/// Protection: each port's event queue, registered by the privileged side
/// when the port opens (the sim's driver layer; on the real-time backends
/// the device process, on the port's request through the node's control
/// socket) and never written by a host process: `port_evq_bus(p)` (bus
/// address, u64) and `port_evq_len(p)` (entries, u32). The MCP still
/// checks it (a power of two of entries, inside the port's slice) when
/// the port opens.
pub const PORT_EVQS: u32 = 0x280; // cfg
/// Bytes per port in `PORT_EVQS`: bus (u64), entries (u32), 4 unused.
pub const PORT_EVQ_SIZE: u32 = 16;

/// Port `p`'s event queue: its bus address.
pub const fn port_evq_bus(p: usize) -> Reg<u64> {
    Reg::at(PORT_EVQS + p as u32 * PORT_EVQ_SIZE)
}

/// Port `p`'s event queue: its length in entries.
pub const fn port_evq_len(p: usize) -> Reg<u32> {
    Reg::at(PORT_EVQS + p as u32 * PORT_EVQ_SIZE + 8)
}

/// Port `p`'s slice of a node's host memory of `host_size` bytes, as the
/// real-time backends lay it out: `(base, len)`, NUM_PORTS equal page-
/// aligned slices in port order, below the ports' page tables
/// (`page_table::HostLayout`).
pub const fn port_slice(host_size: u64, p: u8) -> (u64, u64) {
    crate::page_table::HostLayout::new(host_size, false).slice(p)
}

/// Protection: each port's page table in host memory, written by the
/// privileged side at reset (`page_table` says what an entry is):
/// `port_pt_bus(p)`, the table's bus address (u64), and
/// `port_pt_vbase(p)`, the virtual address its first entry translates
/// (u64). The table has one entry per page of the port's slice.
pub const PORT_PTS: u32 = 0x300; // cfg
/// Bytes per port in `PORT_PTS`.
pub const PORT_PT_SIZE: u32 = 16;

/// Port `p`'s page table: its bus address.
pub const fn port_pt_bus(p: usize) -> Reg<u64> {
    Reg::at(PORT_PTS + p as u32 * PORT_PT_SIZE)
}

/// Port `p`'s page table: the virtual address of its first entry's page.
pub const fn port_pt_vbase(p: usize) -> Reg<u64> {
    Reg::at(PORT_PTS + p as u32 * PORT_PT_SIZE + 8)
}

// The register block is checked at compile time.
const _: () = {
    // The words a pass reads share one line with the engines' counters,
    // and no two words of that line overlap.
    assert!(crate::map::REGS.is_multiple_of(64));
    let line = [
        HDMA_PROD,
        HDMA_DONE,
        HDMA_ERRORS,
        TRACE_ENABLE,
        TXDMA_PROD,
        TXDMA_DONE,
        TXDMA_ERRORS,
        FLOW_GEN,
        RXFREE_PROD,
        RXFREE_CONS,
        RXDONE_PROD,
        RXDONE_CONS,
        RX_DROPS,
        DISPATCH_TRACE_ENABLE,
        PORT_NEWS,
    ];
    let mut i = 0;
    while i < line.len() {
        assert!(line[i].offset() / 64 == HDMA_PROD.offset() / 64);
        assert!(line[i].offset().is_multiple_of(4));
        let mut j = i + 1;
        while j < line.len() {
            assert!(line[i].offset() != line[j].offset());
            j += 1;
        }
        i += 1;
    }
    assert!(RX_DROPS.offset() + 4 <= TRACE_PROD.offset());
    assert!(PORT_SLICES + crate::NUM_PORTS as u32 * PORT_SLICE_SIZE <= PORT_EVQS);
    assert!(PORT_EVQS + crate::NUM_PORTS as u32 * PORT_EVQ_SIZE <= PORT_PTS);
    assert!(PORT_PTS + crate::NUM_PORTS as u32 * PORT_PT_SIZE <= crate::map::REGS_SIZE);
};

/// `FW_STATUS` values.
pub const FW_BOOTING: u32 = 0;
pub const FW_RUNNING: u32 = 1;
/// The firmware stopped: wrong ABI version or bad configuration.
pub const FW_HALTED: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> BootCfg {
        BootCfg { num_nodes: 4, node_id: 3, send_tokens: 32, recv_tokens: 32, mtu: 4096 }
    }

    #[test]
    fn boot_check_names_the_first_word_out_of_range_and_its_range() {
        assert_eq!(good().check(), Ok(()));
        let cases: [(BootCfg, &str, u32, u32); 7] = [
            (BootCfg { num_nodes: 0, ..good() }, "NUM_NODES", 1, crate::MAX_NODES as u32),
            (BootCfg { num_nodes: 1025, ..good() }, "NUM_NODES", 1, 1024),
            (BootCfg { node_id: 4, ..good() }, "NODE_ID", 0, 3),
            (BootCfg { send_tokens: 0, ..good() }, "SEND_TOKENS", 1, PORT_SEND_TOKENS_MAX),
            (BootCfg { recv_tokens: 33, ..good() }, "RECV_TOKENS", 1, PORT_RECV_TOKENS_MAX),
            (BootCfg { mtu: 63, ..good() }, "MTU", 64, 4096),
            (BootCfg { mtu: 4097, ..good() }, "MTU", 64, 4096),
        ];
        for (cfg, reg, min, max) in cases {
            assert_eq!(cfg.check(), Err(CfgRange { reg, min, max }), "{cfg:?}");
        }
        assert_eq!(BootCfg { mtu: 64, send_tokens: 64, ..good() }.check(), Ok(()));
    }
}
