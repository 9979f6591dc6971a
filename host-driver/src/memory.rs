//! DMA-able memory of a port: allocation through the backend, registration
//! in the port's page table in SRAM (`nic_abi::page_table`), and host-side
//! reads and writes of the buffers.
//!
//! Virtual addresses are the driver's own: port p sees bus address `b` at
//! `VIRT_BASE + (p << VIRT_PORT_SHIFT) + b`, so every port has its own
//! range, distinct from bus addresses and from the other ports', and the
//! NIC's translation is real (a port's address means nothing in another
//! port's table).
//!
//! The driver is the only writer of the page table, so it keeps a shadow
//! copy and probes that (no PIO reads). A new entry is written bus page
//! first, then the word holding vpn and state (Release), so the firmware
//! never sees a valid entry with a stale bus page. Deregistration writes
//! tombstones (state 2, vpn kept). When a table holds no live entry and
//! many tombstones, it is rewritten empty so probes stay short.
//!
//! Registration is per page and idempotent: registering a page twice is
//! one registration; deregistering removes it whoever registered it.

use std::collections::BTreeMap;

use nic_abi::map::{page_table, PAGE_TABLE_ENTRIES, PAGE_TABLE_SIZE};
use nic_abi::page_table::{find_slot, insert_slot, lookup, Pte, PteState, PTE_SIZE};
use nic_abi::PAGE_SIZE;

use crate::backend::NicBackend;
use crate::port::{lock, Port};
use crate::DriverError;

/// Start of the driver's virtual address space.
pub const VIRT_BASE: u64 = 0x1000_0000_0000;
/// Each port's virtual range is `1 << VIRT_PORT_SHIFT` bytes.
pub const VIRT_PORT_SHIFT: u32 = 40;

/// Port `port`'s virtual address of bus address `bus`.
pub const fn vaddr_of(port: u8, bus: u64) -> u64 {
    VIRT_BASE + ((port as u64) << VIRT_PORT_SHIFT) + bus
}

/// A DMA-able buffer in host memory. `vaddr` is what descriptors carry and
/// the NIC translates; `bus` is where the bytes are. Plain data: a test may
/// build one with any address to show the NIC refusing it.
///
/// A port hands them out (`Port::alloc`, `Port::alloc_from`) and copies
/// bytes in and out (`Port::write`, `Port::read`); `sub` names a part of
/// one, to send or receive into only that:
///
/// ```
/// use host_driver::DmaBuf;
/// let buf = DmaBuf { vaddr: 0x1000_0000_2000, bus: 0x2000, len: 4096 };
/// let tail = buf.sub(4032, 64).unwrap();
/// assert_eq!((tail.vaddr, tail.bus, tail.len), (0x1000_0000_2fc0, 0x2fc0, 64));
/// assert_eq!(buf.sub(4032, 65), None); // past the end
/// ```
///
/// ```no_run
/// # use host_driver::{Dest, Port, SendOpts};
/// # fn main() -> Result<(), host_driver::DriverError> {
/// let mut port = Port::attach("nic", 0, 1)?;
/// let buf = port.alloc(4096)?;
/// port.write(&buf, 0, b"first 16 bytes..")?;
/// let head = buf.sub(0, 16).expect("inside the buffer");
/// port.send_to(&head, Dest { node: 1, port: 1 }, SendOpts::default())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaBuf {
    pub vaddr: u64,
    pub bus: u64,
    pub len: u64,
}

impl DmaBuf {
    /// The part `[off, off + len)` of this buffer, if it lies inside.
    pub fn sub(&self, off: u64, len: u64) -> Option<DmaBuf> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(DmaBuf { vaddr: self.vaddr + off, bus: self.bus + off, len })
    }

    /// Virtual address of `[off, off + len)`, checked against the buffer.
    pub(crate) fn vaddr_at(&self, off: u64, len: u64) -> Result<u64, DriverError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.vaddr.wrapping_add(off)),
            _ => Err(DriverError::BadSize),
        }
    }
}

/// Shadow of one port's page table, mirrored into SRAM on every change.
pub(crate) struct PageTable {
    base: u32,
    ptes: Vec<Pte>,
    live: u32,
    dead: u32,
}

impl PageTable {
    fn new(port: u8) -> PageTable {
        PageTable {
            base: page_table(port as usize),
            ptes: vec![Pte::EMPTY; PAGE_TABLE_ENTRIES as usize],
            live: 0,
            dead: 0,
        }
    }

    /// Empty the table, in SRAM too.
    pub(crate) fn clear<B: NicBackend>(&mut self, be: &B) {
        be.sram_write(self.base, &vec![0u8; PAGE_TABLE_SIZE as usize]);
        self.ptes.fill(Pte::EMPTY);
        self.live = 0;
        self.dead = 0;
    }

    fn lookup(&self, vpn: u64) -> Option<u64> {
        lookup(|i| self.ptes[i as usize], vpn)
    }

    /// Map `vpn` to `bus_page`. Ok(true): a new entry; Ok(false): it was
    /// already there.
    fn insert<B: NicBackend>(
        &mut self,
        be: &B,
        vpn: u64,
        bus_page: u64,
    ) -> Result<bool, DriverError> {
        let i = insert_slot(|i| self.ptes[i as usize], vpn).ok_or(DriverError::PageTableFull)?;
        let old = self.ptes[i as usize];
        if old.state == PteState::Valid && old.bus_page == bus_page {
            return Ok(false);
        }
        let new = Pte { state: PteState::Valid, vpn, bus_page };
        let mut b = [0u8; PTE_SIZE as usize];
        new.encode(&mut b);
        let off = self.base + i * PTE_SIZE;
        be.sram_write(off + 8, &b[8..16]);
        be.sram_store_u64(
            off,
            u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        );
        match old.state {
            PteState::Valid => {}
            PteState::Deleted => {
                self.dead -= 1;
                self.live += 1;
            }
            PteState::Empty => self.live += 1,
        }
        self.ptes[i as usize] = new;
        Ok(old.state != PteState::Valid)
    }

    /// Tombstone `vpn`'s entry. False: it was not there.
    fn remove<B: NicBackend>(&mut self, be: &B, vpn: u64) -> bool {
        let Some(i) = find_slot(|i| self.ptes[i as usize], vpn) else {
            return false;
        };
        let e = &mut self.ptes[i as usize];
        e.state = PteState::Deleted;
        let mut b = [0u8; PTE_SIZE as usize];
        e.encode(&mut b);
        let word0 = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        be.sram_store_u64(self.base + i * PTE_SIZE, word0);
        self.live -= 1;
        self.dead += 1;
        true
    }

    /// Rewrite the table empty if nothing is registered and tombstones
    /// would lengthen probes.
    fn compact_if_idle<B: NicBackend>(&mut self, be: &B) {
        if self.live == 0 && self.dead > PAGE_TABLE_ENTRIES / 4 {
            self.clear(be);
        }
    }
}

/// A port's allocations and page table.
pub(crate) struct Memory {
    port: u8,
    /// bus address -> length of every allocation made through the port.
    allocs: BTreeMap<u64, u64>,
    pub(crate) table: PageTable,
}

impl Memory {
    pub(crate) fn new(port: u8) -> Memory {
        Memory { port, allocs: BTreeMap::new(), table: PageTable::new(port) }
    }

    /// Hand over every allocation (the port is closing).
    pub(crate) fn take_allocations(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.allocs).into_iter().collect()
    }

    /// Is `buf` (a part of) an allocation of this port, with this port's
    /// virtual address?
    fn owns(&self, buf: &DmaBuf) -> Result<(), DriverError> {
        let end = buf.bus.checked_add(buf.len).ok_or(DriverError::NotRegistered)?;
        if buf.vaddr != vaddr_of(self.port, buf.bus) {
            return Err(DriverError::NotRegistered);
        }
        match self.allocs.range(..=buf.bus).next_back() {
            Some((&a_bus, &a_len)) if end <= a_bus + a_len => Ok(()),
            _ => Err(DriverError::NotRegistered),
        }
    }

    /// (first vpn, first bus page, pages) covering `buf`.
    fn pages(buf: &DmaBuf) -> (u64, u64, u64) {
        let first = buf.vaddr / PAGE_SIZE;
        let last = (buf.vaddr + buf.len - 1) / PAGE_SIZE;
        (first, buf.bus / PAGE_SIZE, last - first + 1)
    }

    fn register<B: NicBackend>(&mut self, be: &B, buf: &DmaBuf) -> Result<(), DriverError> {
        self.owns(buf)?;
        if buf.len == 0 {
            return Err(DriverError::BadSize);
        }
        let (vpn, bus_page, n) = Memory::pages(buf);
        let mut added = Vec::new();
        for k in 0..n {
            match self.table.insert(be, vpn + k, bus_page + k) {
                Ok(true) => added.push(vpn + k),
                Ok(false) => {}
                Err(e) => {
                    // Undo this call's new entries: all or nothing.
                    for v in added {
                        self.table.remove(be, v);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn deregister<B: NicBackend>(&mut self, be: &B, buf: &DmaBuf) -> Result<(), DriverError> {
        self.owns(buf)?;
        if buf.len == 0 {
            return Err(DriverError::BadSize);
        }
        let (vpn, _, n) = Memory::pages(buf);
        if (0..n).any(|k| self.table.lookup(vpn + k).is_none()) {
            return Err(DriverError::NotRegistered);
        }
        for k in 0..n {
            self.table.remove(be, vpn + k);
        }
        self.table.compact_if_idle(be);
        Ok(())
    }

    fn is_registered(&self, buf: &DmaBuf) -> bool {
        if self.owns(buf).is_err() || buf.len == 0 {
            return false;
        }
        let (vpn, bus_page, n) = Memory::pages(buf);
        (0..n).all(|k| self.table.lookup(vpn + k) == Some(bus_page + k))
    }
}

impl<B: NicBackend> Port<B> {
    /// Allocate `len` bytes of DMA-able host memory (page aligned, contents
    /// unspecified) and register it with this port.
    pub fn alloc(&mut self, len: u64) -> Result<DmaBuf, DriverError> {
        let buf = self.alloc_unregistered(len)?;
        if let Err(e) = self.mem.register(&self.be, &buf) {
            self.mem.allocs.remove(&buf.bus);
            self.be.free_dma(buf.bus, buf.len);
            return Err(e);
        }
        Ok(buf)
    }

    /// Allocate `data.len()` bytes of registered DMA memory holding a copy
    /// of `data`: a message ready to send.
    ///
    /// ```no_run
    /// # use host_driver::{Dest, Port, SendOpts};
    /// # fn main() -> Result<(), host_driver::DriverError> {
    /// let mut port = Port::attach("nic", 0, 1)?;
    /// let msg = port.alloc_from(b"ping")?;
    /// assert_eq!(msg.len, 4);
    /// port.send_to(&msg, Dest { node: 1, port: 1 }, SendOpts::default())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn alloc_from(&mut self, data: &[u8]) -> Result<DmaBuf, DriverError> {
        let buf = self.alloc(data.len() as u64)?;
        if let Err(e) = self.write(&buf, 0, data) {
            let _ = self.free(buf);
            return Err(e);
        }
        Ok(buf)
    }

    /// Allocate without registering (register later, or show the NIC
    /// refusing memory it cannot translate).
    pub fn alloc_unregistered(&mut self, len: u64) -> Result<DmaBuf, DriverError> {
        if len == 0 {
            return Err(DriverError::BadSize);
        }
        {
            let mut shared = lock(&self.shared);
            if shared.has_deferred() {
                shared.reap(&self.be);
            }
        }
        let bus = self.be.alloc_dma(len).ok_or(DriverError::OutOfMemory { len })?;
        if bus % PAGE_SIZE != 0 || bus.checked_add(len).is_none_or(|end| end > 1 << VIRT_PORT_SHIFT)
        {
            self.be.free_dma(bus, len);
            return Err(DriverError::BadConfig("backend DMA allocation (alignment or range)"));
        }
        self.mem.allocs.insert(bus, len);
        Ok(DmaBuf { vaddr: vaddr_of(self.num, bus), bus, len })
    }

    /// Deregister and free an allocation (`buf` as `alloc` returned it).
    /// The NIC must no longer be using it.
    pub fn free(&mut self, buf: DmaBuf) -> Result<(), DriverError> {
        match self.mem.allocs.get(&buf.bus) {
            Some(&len) if len == buf.len && buf.vaddr == vaddr_of(self.num, buf.bus) => {}
            _ => return Err(DriverError::NotRegistered),
        }
        let (vpn, _, n) = Memory::pages(&buf);
        for k in 0..n {
            self.mem.table.remove(&self.be, vpn + k);
        }
        self.mem.table.compact_if_idle(&self.be);
        self.mem.allocs.remove(&buf.bus);
        self.be.free_dma(buf.bus, buf.len);
        Ok(())
    }

    /// Register `buf` (this port's memory): page-table entries for every
    /// page it touches. All or nothing: PageTableFull leaves no new entry.
    pub fn register(&mut self, buf: &DmaBuf) -> Result<(), DriverError> {
        self.mem.register(&self.be, buf)
    }

    /// Remove `buf`'s pages from the page table (tombstones). Every page
    /// must be registered (else NotRegistered, nothing changed). The
    /// memory stays allocated: the host may still read and write it, the
    /// NIC refuses descriptors that name it.
    pub fn deregister(&mut self, buf: &DmaBuf) -> Result<(), DriverError> {
        self.mem.deregister(&self.be, buf)
    }

    /// Is every page of `buf` registered with this port?
    pub fn is_registered(&self, buf: &DmaBuf) -> bool {
        self.mem.is_registered(buf)
    }

    /// Copy `data` into `buf` at `off` (host memory; no NIC involved).
    pub fn write(&self, buf: &DmaBuf, off: u64, data: &[u8]) -> Result<(), DriverError> {
        self.mem.owns(buf)?;
        buf.vaddr_at(off, data.len() as u64)?;
        self.be.host_write(buf.bus + off, data);
        Ok(())
    }

    /// Copy `out.len()` bytes of `buf` at `off` into `out`.
    pub fn read(&self, buf: &DmaBuf, off: u64, out: &mut [u8]) -> Result<(), DriverError> {
        self.mem.owns(buf)?;
        buf.vaddr_at(off, out.len() as u64)?;
        self.be.host_read(buf.bus + off, out);
        Ok(())
    }
}
