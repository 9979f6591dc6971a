//! What the driver needs from a backend: programmed I/O on the NIC's SRAM
//! (only the port window and, for the privileged part, the page table),
//! access to this node's host memory (bus address = offset), an allocator
//! of DMA-able host memory, a clock, and a hook that charges host CPU time
//! (the sim's host cost model; a no-op in real time).
//!
//! Handles are cheap to clone: every `Port` keeps one.
//!
//! A backend implements only raw byte access to SRAM (`sram_read`,
//! `sram_write`); the word accessors default to `nic_abi::sram::Sram`'s,
//! through [`Pio`]. A backend over a shared mapping overrides them with
//! its atomics (Acquire/Release).

use nic_abi::sram::Sram;

/// Host CPU work the sim charges time for (the profile prices each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOp {
    /// Posting one descriptor by PIO (send, provide, put, get, ...).
    PostDescriptor,
    /// One poll of the event queue that found an event.
    EventFound,
    /// One poll of the event queue that found nothing.
    EventEmpty,
    /// Host-side handling of a received message of `n` bytes (e.g. a copy
    /// or a check the program does); charged by programs, not the driver.
    Touch(u64),
    /// Computing `n` children of a multicast tree (building the tree at a
    /// root or relay, or a group's cached tree).
    TreeWork(u32),
    /// One multicast step of algorithm code `alg` at this host (a relay
    /// handing a message on; separate addressing: per destination).
    RelayStep(u8),
    /// Taking a host-scheme multicast the NIC delivered (the member's
    /// host receive; charged by the driver when it takes the event).
    McastReceive,
}

pub trait NicBackend: Clone {
    /// PIO read of NIC SRAM.
    fn sram_read(&self, off: u32, buf: &mut [u8]);
    /// PIO write of NIC SRAM.
    fn sram_write(&self, off: u32, data: &[u8]);
    /// Shared SRAM word, Acquire.
    #[inline]
    fn sram_load_u32(&self, off: u32) -> u32 {
        Pio(self).load_u32(off)
    }
    /// Shared SRAM word, Release.
    #[inline]
    fn sram_store_u32(&self, off: u32, v: u32) {
        Pio(self).store_u32(off, v)
    }
    #[inline]
    fn sram_load_u64(&self, off: u32) -> u64 {
        Pio(self).load_u64(off)
    }
    #[inline]
    fn sram_store_u64(&self, off: u32, v: u64) {
        Pio(self).store_u64(off, v)
    }

    /// Read this node's host memory at bus address `bus`.
    fn host_read(&self, bus: u64, buf: &mut [u8]);
    /// Write this node's host memory.
    fn host_write(&self, bus: u64, data: &[u8]);
    /// Shared host-memory word, Acquire (event sequence numbers).
    fn host_load_u32(&self, bus: u64) -> u32;

    /// Privileged: write `entries` into port `port`'s page table in host
    /// memory from entry `first` on (`nic_abi::page_table`). Default: a
    /// host-memory write where `regs::port_pt_bus` says the table is (the
    /// sim, whose driver layer is the privileged side). A live backend
    /// asks the device process.
    fn pt_write(&self, port: u8, first: u64, entries: &[u64]) {
        let bus = self.sram_load_u64(nic_abi::regs::reg(nic_abi::regs::port_pt_bus(port as usize)));
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        self.host_write(bus.saturating_add(first.saturating_mul(8)), &bytes);
    }

    /// Allocate `len` bytes of DMA-able host memory, page aligned.
    /// Returns the bus address, or None when host memory is exhausted.
    fn alloc_dma(&self, len: u64) -> Option<u64>;
    /// Give back an allocation made by `alloc_dma`.
    fn free_dma(&self, bus: u64, len: u64);

    /// Host time in ns (virtual in sim).
    fn now_ns(&self) -> u64;
    /// Charge host CPU time for `op` (sim); real-time backends ignore it.
    fn charge(&self, op: HostOp);
    /// Wake the NIC: the driver calls it after posting descriptors and
    /// after changing a port's STATE. The firmware polls and never needs
    /// it; it only wakes an idle NIC CPU. A backend that maps SRAM does it
    /// as `HOST_DOORBELL += 1` (the register's contract); the sim may wake
    /// the NIC directly instead.
    fn doorbell(&self);
    /// Wait a little for events (blocking wait): real-time backends sleep
    /// or spin; the sim returns false (a simulated program never blocks: it
    /// is called back when it has work).
    fn idle_wait(&self) -> bool;

    /// The one port this backend may serve, if it is tied to one (a live
    /// backend holds one port's lock and memory slice). `Nic::open_port`
    /// refuses any other number with `PortNotAttached`. Default: None
    /// (any port).
    fn port_hint(&self) -> Option<u8> {
        None
    }

    /// Make the privileged writes made so far take effect now, and say
    /// whether all were accepted. A live backend sends them through the
    /// node's control socket (it batches them); `Err` when the device
    /// process refused one (`LiveBackend::last_refusal` says why).
    /// Default: writes take effect at once (the sim).
    fn commit(&self) -> Result<(), crate::DriverError> {
        Ok(())
    }

    /// Does the device advance each port's `HEARTBEAT` (real-time
    /// clusters)? Then a wait that sees it stop reports `NicDown`.
    /// Default: no (the sim).
    fn has_heartbeat(&self) -> bool {
        false
    }

    /// Is the process serving the NIC still there? Asked only when the
    /// heartbeat stopped (a starved device process is not a dead one).
    fn device_alive(&self) -> bool {
        true
    }
}

/// A backend's SRAM seen as `nic_abi::sram::Sram` (programmed I/O): the
/// one place the word accessors come from.
pub struct Pio<'a, B>(pub &'a B);

impl<B: NicBackend> Sram for Pio<'_, B> {
    #[inline]
    fn read(&self, off: u32, buf: &mut [u8]) {
        self.0.sram_read(off, buf)
    }

    #[inline]
    fn write(&mut self, off: u32, data: &[u8]) {
        self.0.sram_write(off, data)
    }
}
