//! DMA-able memory of a port: allocation through the backend, registration
//! in the port's page table in host memory (`nic_abi::page_table`), and
//! host-side reads and writes of the buffers.
//!
//! Virtual addresses are the driver's own (`nic_abi::page_table::vaddr_of`):
//! port p sees bus address `b` at `VIRT_BASE + (p << VIRT_PORT_SHIFT) + b`,
//! so every port has its own range, distinct from bus addresses and from
//! the other ports', and the NIC's translation is real (a port's address
//! means nothing in another port's table).
//!
//! The page table is one entry per page of the port's slice of host
//! memory, so a port can register all of it. It lives outside the slice,
//! and only the privileged side writes it (`NicBackend::pt_write`: the
//! sim's driver layer; on the real-time backends the device process, on
//! the port's request through the node's control socket). The driver keeps
//! a shadow of the entries it wrote and looks there (no reads back).
//! After each change it bumps the port's `PT_GEN`, so the NIC forgets the
//! translations it cached; a deregistration waits until the firmware says
//! (`PT_ACK`) that it has.
//!
//! Registration is per page and idempotent: registering a page twice is
//! one registration; deregistering removes it whoever registered it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nic_abi::page_table::pte;
use nic_abi::port::{self as pcb, port_reg};
use nic_abi::{regs, PAGE_SIZE};

use crate::backend::NicBackend;
use crate::port::{lock, Port};
use crate::DriverError;

pub use nic_abi::page_table::{vaddr_of, VIRT_BASE, VIRT_PORT_SHIFT};

/// How long a deregistration waits for the firmware to forget the pages.
const FORGET_WAIT: Duration = Duration::from_millis(100);

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

/// Shadow of one port's page table: the pages registered, by virtual
/// page number.
pub(crate) struct PageTable {
    port: u8,
    /// The table's first virtual page and its number of entries, as the
    /// privileged side configured them (registers: on a live backend each
    /// read is a control-socket round trip, so they are read once).
    first: u64,
    entries: u64,
    pages: BTreeMap<u64, u64>,
}

impl PageTable {
    fn new<B: NicBackend>(port: u8, be: &B) -> PageTable {
        let p = port as usize;
        let first = be.sram_load_u64(regs::reg(regs::port_pt_vbase(p))) / PAGE_SIZE;
        let entries = be.sram_load_u64(regs::reg(regs::port_slice_len(p))) / PAGE_SIZE;
        PageTable { port, first, entries, pages: BTreeMap::new() }
    }

    /// Write `n` entries from virtual page `vpn`: mapping to bus pages
    /// from `bus_page` on, or (None) to nothing.
    fn write<B: NicBackend>(
        &self,
        be: &B,
        vpn: u64,
        n: u64,
        bus_page: Option<u64>,
    ) -> Result<(), DriverError> {
        let Some(i) = vpn.checked_sub(self.first).filter(|&i| i.saturating_add(n) <= self.entries)
        else {
            return Err(DriverError::PageTableFull);
        };
        let words: Vec<u64> = (0..n).map(|k| bus_page.map_or(0, |b| pte(b + k))).collect();
        be.pt_write(self.port, i, &words);
        Ok(())
    }

    /// Tell the NIC entries were added (`PT_ADDED`): it forgets what it
    /// read of entries that were not valid, and reads the translations of
    /// the first pages added (`PT_HINT`) ahead of the first descriptor.
    fn added<B: NicBackend>(&self, be: &B, vpn: u64, pages: u64) {
        let p = self.port as usize;
        be.sram_store_u64(port_reg(p, pcb::PT_HINT), vpn);
        be.sram_store_u32(port_reg(p, pcb::PT_HINT_PAGES), pages.min(u32::MAX as u64) as u32);
        let n = be.sram_load_u32(port_reg(p, pcb::PT_ADDED)).wrapping_add(1);
        be.sram_store_u32(port_reg(p, pcb::PT_ADDED), n);
    }

    /// Tell the NIC entries were cleared (`PT_GEN`); `wait`: until it says
    /// it forgot what it cached, where a firmware runs beside us. False
    /// when the wait found the device process gone (its heartbeat still
    /// for `HEARTBEAT_DEAD_MS`, then its pid dead): nothing will answer.
    fn changed<B: NicBackend>(&self, be: &B, wait: bool) -> bool {
        let p = self.port as usize;
        let gen = be.sram_load_u32(port_reg(p, pcb::PT_GEN)).wrapping_add(1);
        be.sram_store_u32(port_reg(p, pcb::PT_GEN), gen);
        if !wait || !be.has_heartbeat() {
            // The sim runs the firmware between the driver's calls: it
            // sees the new generation before it translates again.
            return true;
        }
        be.doorbell();
        // Window words only (a host process maps no register): the
        // firmware answers while it serves the port and is not halted.
        let word = |off| be.sram_load_u32(port_reg(p, off));
        let start = Instant::now();
        let (mut beat, mut beat_at) = (word(pcb::HEARTBEAT), start);
        let still = Duration::from_millis(pcb::HEARTBEAT_DEAD_MS);
        while word(pcb::PT_ACK) != gen
            && word(pcb::FW_STATE) == pcb::STATE_OPEN
            && word(pcb::NIC_STATUS) != regs::FW_HALTED
            && start.elapsed() < FORGET_WAIT
        {
            let b = word(pcb::HEARTBEAT);
            if b != beat {
                (beat, beat_at) = (b, Instant::now());
            } else if beat_at.elapsed() >= still {
                if !be.device_alive() {
                    return false;
                }
                beat_at = Instant::now();
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        true
    }

    /// Forget every entry, in the table too (the port closes): one write
    /// per run of consecutive pages.
    pub(crate) fn clear<B: NicBackend>(&mut self, be: &B) {
        let pages = std::mem::take(&mut self.pages);
        let mut run: Option<(u64, u64)> = None;
        for &vpn in pages.keys() {
            run = match run {
                Some((start, n)) if start + n == vpn => Some((start, n + 1)),
                Some((start, n)) => {
                    let _ = self.write(be, start, n, None);
                    Some((vpn, 1))
                }
                None => Some((vpn, 1)),
            };
        }
        if let Some((start, n)) = run {
            let _ = self.write(be, start, n, None);
        }
        let _ = be.commit();
        if !pages.is_empty() {
            self.changed(be, false);
        }
    }

    fn lookup(&self, vpn: u64) -> Option<u64> {
        self.pages.get(&vpn).copied()
    }
}

/// A port's allocations and page table.
pub(crate) struct Memory {
    port: u8,
    /// bus address -> length of every allocation made through the port.
    allocs: BTreeMap<u64, u64>,
    pub(crate) table: PageTable,
    /// The port's aliases of its table (`nic_abi::port::WINDOWS`): each
    /// in use names its first virtual page and its pages.
    aliases: [Option<(u64, u64)>; pcb::WINDOW_COUNT],
}

impl Memory {
    pub(crate) fn new<B: NicBackend>(port: u8, be: &B) -> Memory {
        Memory {
            port,
            allocs: BTreeMap::new(),
            table: PageTable::new(port, be),
            aliases: [None; pcb::WINDOW_COUNT],
        }
    }

    /// Clear every alias in the port's control block (the port opens: a
    /// holder before may have left some).
    pub(crate) fn clear_aliases<B: NicBackend>(&mut self, be: &B) {
        let p = self.port as usize;
        for w in 0..pcb::WINDOW_COUNT {
            be.sram_store_u64(port_reg(p, pcb::window(w)), 0);
            be.sram_store_u64(port_reg(p, pcb::window(w)) + 8, 0);
        }
        self.aliases = [None; pcb::WINDOW_COUNT];
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
        if (0..n).all(|k| self.table.lookup(vpn + k) == Some(bus_page + k)) {
            return Ok(());
        }
        self.table.write(be, vpn, n, Some(bus_page))?;
        be.commit()?;
        // Pages registered before keep their entries (the same bus pages:
        // an allocation's pages are fixed), so this only adds.
        for k in 0..n {
            self.table.pages.insert(vpn + k, bus_page + k);
        }
        self.table.added(be, vpn, n);
        Ok(())
    }

    /// Deregister `buf`; Ok(false) when the wait for the NIC found the
    /// device process gone.
    fn deregister<B: NicBackend>(
        &mut self,
        be: &B,
        buf: &DmaBuf,
        wait: bool,
    ) -> Result<bool, DriverError> {
        self.owns(buf)?;
        if buf.len == 0 {
            return Err(DriverError::BadSize);
        }
        let (vpn, _, n) = Memory::pages(buf);
        if (0..n).any(|k| self.table.lookup(vpn + k).is_none()) {
            return Err(DriverError::NotRegistered);
        }
        Ok(self.remove(be, vpn, n, wait))
    }

    /// Remove `n` registered-or-not pages from `vpn` and, if `wait`, wait
    /// for the NIC to forget them. False when the wait found the device
    /// process gone.
    fn remove<B: NicBackend>(&mut self, be: &B, vpn: u64, n: u64, wait: bool) -> bool {
        if (0..n).all(|k| self.table.lookup(vpn + k).is_none()) {
            return true;
        }
        let _ = self.table.write(be, vpn, n, None);
        let _ = be.commit();
        for k in 0..n {
            self.table.pages.remove(&(vpn + k));
        }
        self.table.changed(be, wait)
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
        let answered = self.mem.remove(&self.be, vpn, n, self.down().is_none());
        self.device_answered(answered);
        self.mem.allocs.remove(&buf.bus);
        self.be.free_dma(buf.bus, buf.len);
        Ok(())
    }

    /// A wait for the NIC to forget pages found the device process gone
    /// (`answered` false): every later wait, free or close says so at
    /// once instead of waiting again.
    fn device_answered(&mut self, answered: bool) {
        if !answered {
            self.mark_device_gone();
        }
    }

    /// Register `buf` (this port's memory): page-table entries for every
    /// page it touches. A port may register all of its slice of host
    /// memory.
    pub fn register(&mut self, buf: &DmaBuf) -> Result<(), DriverError> {
        self.mem.register(&self.be, buf)
    }

    /// Remove `buf`'s pages from the page table. Every page must be
    /// registered (else NotRegistered, nothing changed). When it returns,
    /// the NIC has forgotten the translations it cached (real-time
    /// backends wait for it, at most 100 ms; not at all once the port
    /// knows its NIC is gone, `Port::down`). The memory stays allocated:
    /// the host may still read and write it, the NIC refuses descriptors
    /// that name it.
    pub fn deregister(&mut self, buf: &DmaBuf) -> Result<(), DriverError> {
        let wait = self.down().is_none();
        let answered = self.mem.deregister(&self.be, buf, wait)?;
        self.device_answered(answered);
        Ok(())
    }

    /// Name `buf` (registered memory of this port) at virtual address
    /// `at` too, as well as at its own: descriptors of this port, and puts
    /// and gets of other ports into it, may use either. `at` must have
    /// `buf.vaddr`'s offset in its page (`BadSize` otherwise), and a page
    /// named already here may not be named again (`BadSize`). A port has
    /// `nic_abi::port::WINDOW_COUNT` aliases (`PageTableFull` when all are
    /// in use). Returns the alias's number, for [`Port::unalias`].
    pub fn alias(&mut self, buf: &DmaBuf, at: u64) -> Result<usize, DriverError> {
        if !self.mem.is_registered(buf) {
            return Err(DriverError::NotRegistered);
        }
        if at % PAGE_SIZE != buf.vaddr % PAGE_SIZE || at.checked_add(buf.len).is_none() {
            return Err(DriverError::BadSize);
        }
        let (vpn, _, pages) = Memory::pages(buf);
        let first = at / PAGE_SIZE;
        let overlaps = |&(v, n): &(u64, u64)| first < v + n && v < first + pages;
        if self.mem.aliases.iter().flatten().any(overlaps) {
            return Err(DriverError::BadSize);
        }
        let w =
            self.mem.aliases.iter().position(Option::is_none).ok_or(DriverError::PageTableFull)?;
        let index = vpn - self.mem.table.first;
        let (Ok(index), Ok(n)) = (u32::try_from(index), u32::try_from(pages)) else {
            return Err(DriverError::BadSize);
        };
        let p = self.num as usize;
        self.be.sram_store_u64(port_reg(p, pcb::window(w)), first);
        self.be.sram_store_u64(port_reg(p, pcb::window(w)) + 8, pcb::window_word(index, n));
        self.mem.aliases[w] = Some((first, pages));
        self.mem.table.added(&self.be, first, pages);
        Ok(w)
    }

    /// Remove alias `w` (as [`Port::alias`] returned it): when it returns,
    /// the NIC has forgotten its translations (as for `deregister`).
    pub fn unalias(&mut self, w: usize) -> Result<(), DriverError> {
        if self.mem.aliases.get(w).copied().flatten().is_none() {
            return Err(DriverError::NotRegistered);
        }
        let p = self.num as usize;
        self.be.sram_store_u64(port_reg(p, pcb::window(w)) + 8, 0);
        self.be.sram_store_u64(port_reg(p, pcb::window(w)), 0);
        self.mem.aliases[w] = None;
        let answered = self.mem.table.changed(&self.be, self.down().is_none());
        self.device_answered(answered);
        Ok(())
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
