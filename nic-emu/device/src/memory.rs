//! One node's memories, shared (through `Rc<RefCell<_>>`) by the device
//! model, which runs the NIC's DMA engines and firmware over them, and the
//! host backend, which gives host programs PIO on SRAM and access to host
//! memory: the NIC's SRAM, the host's DMA-able memory with its page-aligned
//! allocator, and the host CPU's clock.
//!
//! Host memory is a growable byte vector: bus address = offset. It grows to
//! the high-water mark of allocations (at most the ports' slice of the
//! profile's `host.memory_bytes`, `page_table::HostLayout` shared). Page 0
//! is never handed out, so bus address 0 is never a valid buffer. Above
//! the slice are the ports' page tables, written only by the privileged
//! side: kept apart, page by page as they are written (a 4 GiB memory's
//! tables are 64 MiB, mostly never touched).
//!
//! `NodeMem` is the sim's backing of the device model's memories
//! (`device::NicMem`): SRAM as a plain byte buffer, host-DMA as copies
//! between the two vectors.

use std::collections::BTreeMap;

use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::sram::span;
use nic_abi::PAGE_SIZE;

use crate::device::NicMem;

/// A zeroed byte buffer that starts `color` bytes into its allocation.
///
/// Every node's SRAM and host memory are large allocations, each placed
/// by the system at a page boundary, and the nodes use the same offsets in
/// them (the same registers, rings and event-queue slots): without an
/// offset of its own per node, those lines of every node compete for the
/// same few cache sets, and a cluster of hundreds of nodes misses in the
/// cache on nearly every one of them. `color` spreads them.
#[derive(Debug, Clone, Default)]
pub struct Colored {
    buf: Vec<u8>,
    color: usize,
}

impl Colored {
    /// `len` zero bytes, `color` bytes into the allocation.
    pub fn zeroed(len: usize, color: usize) -> Colored {
        Colored { buf: vec![0; color + len], color }
    }

    /// Grow (with zeros) or shrink to `len` bytes.
    pub fn resize(&mut self, len: usize) {
        self.buf.resize(self.color + len, 0);
    }
}

impl std::ops::Deref for Colored {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.buf[self.color..]
    }
}

impl std::ops::DerefMut for Colored {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.color..]
    }
}

/// Huge pages are 2 MiB here (x86-64, aarch64 with 4 KiB pages).
const HUGE: usize = 2 << 20;

/// Clusters of this many nodes or more keep their SRAMs in huge pages
/// (`SramBuf`).
pub const HUGE_FROM_NODES: usize = 64;

/// A node's SRAM: `len` zero bytes, `color` bytes into a mapping of its
/// own that starts on a 2 MiB boundary, which the kernel is asked to back
/// with huge pages where it can (transparent huge pages, `madvise` mode).
///
/// Everything the firmware and the device model touch in SRAM lies in its
/// first megabyte (`nic_abi::map`), so one huge page holds a node's whole
/// working set: one TLB entry instead of about 180. On a cluster of a
/// thousand nodes the 4 KiB pages' translations no longer fit the TLB and
/// every visit to a node walked the page tables for each page it touched.
/// The cost: that first 2 MiB of each node's SRAM is resident as soon as
/// it is touched (2 GiB at 1,024 nodes), and the kernel may have to
/// compact memory to find free huge pages when the cluster is built (at
/// times seconds of system time for 1,024 nodes). So only clusters of at
/// least `HUGE_FROM_NODES` nodes ask (a 64-node all-to-all ran 11% faster
/// with them, a 16-node one no faster). Where the system says no, the
/// mapping is ordinary memory and nothing else changes.
#[derive(Debug)]
pub struct SramBuf {
    map: memmap2::MmapMut,
    start: usize,
    len: usize,
}

impl SramBuf {
    /// `len` zero bytes, `color` bytes past a 2 MiB boundary; in huge
    /// pages if `huge` and the system agrees.
    pub fn zeroed(len: usize, color: usize, huge: bool) -> SramBuf {
        // In huge pages: whole ones from the boundary on (a 1 MiB SRAM
        // too), and room to find the boundary. Else just the bytes (the
        // mapping starts on a page boundary, which is all the colour
        // needs).
        let huge = huge && cfg!(target_os = "linux");
        let span = if huge { (len + color).next_multiple_of(HUGE) } else { len + color };
        let room = if huge { HUGE } else { 0 };
        let map = memmap2::MmapMut::map_anon(span + room)
            .unwrap_or_else(|e| panic!("SRAM: cannot map {} bytes: {e}", span + room));
        let base = map.as_ptr() as usize;
        let at = if huge { base.next_multiple_of(HUGE) - base } else { 0 };
        // A hint: a system without transparent huge pages says no.
        #[cfg(target_os = "linux")]
        if huge {
            let _ = map.advise_range(memmap2::Advice::HugePage, at, span);
        }
        SramBuf { map, start: at + color, len }
    }
}

impl std::ops::Deref for SramBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.map[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for SramBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.start..self.start + self.len]
    }
}

/// Offset of node `node`'s buffers in their allocations: a different
/// cache line of the page for each of 64 nodes in turn (`Colored`), the
/// host memory's another line than the SRAM's. The SRAM's also moves by
/// whole 4 KiB pages, one more for each 64 nodes (up to 512 KiB): inside a
/// huge page the address bits above the page offset are the same for
/// every node, so without that step the same register of every 64th node
/// would compete for the same cache sets.
fn colors(node: usize) -> (usize, usize) {
    let line = |k: usize| (k % 64) * 64;
    let page = (node / 64 % SRAM_PAGE_STEPS) * 4096;
    (page + line(node), line(node * 37 + 19))
}

/// How many page steps the SRAM's color takes (`colors`): the first huge
/// page still holds the whole SRAM map past the largest.
const SRAM_PAGE_STEPS: usize = 128;
const _: () = assert!(
    (SRAM_PAGE_STEPS * 4096 + 64 * 64) as u64 + nic_abi::map::MAP_END as u64 <= HUGE as u64
);

/// A node's SRAM, host memory and host clock.
#[derive(Debug)]
pub struct NodeMem {
    pub sram: SramBuf,
    pub host: HostMem,
    /// The host CPU's clock (ns): it runs ahead of the event core while
    /// the host is busy with charged work.
    pub host_clock: u64,
    /// Host CPU time charged so far (ns).
    pub host_busy_ns: u64,
}

impl NodeMem {
    /// A node with `host_size` bytes of host memory, laid out as the sim
    /// does (`HostLayout::new(host_size, true)`: one slice for every port).
    pub fn new(sram_bytes: usize, host_size: u64) -> NodeMem {
        NodeMem::of_node(0, 1, sram_bytes, host_size)
    }

    /// `new` for node `node` of a cluster of `nodes`: its buffers placed
    /// apart from the other nodes' in the caches (`Colored`), its SRAM in
    /// huge pages on a large cluster (`SramBuf`).
    pub fn of_node(node: usize, nodes: usize, sram_bytes: usize, host_size: u64) -> NodeMem {
        let (sram_color, host_color) = colors(node);
        let l = nic_abi::page_table::HostLayout::new(host_size, true);
        let mut host = HostMem::new(l.slice_len);
        host.bytes = Colored::zeroed(0, host_color);
        host.tables_end = l.end();
        NodeMem {
            sram: SramBuf::zeroed(sram_bytes, sram_color, nodes >= HUGE_FROM_NODES),
            host,
            host_clock: 0,
            host_busy_ns: 0,
        }
    }
}

impl NicMem for NodeMem {
    type Sram = [u8];

    #[inline]
    fn sram(&self) -> &[u8] {
        &self.sram
    }

    #[inline]
    fn sram_mut(&mut self) -> &mut [u8] {
        &mut self.sram
    }

    #[inline]
    fn sram_len(&self) -> usize {
        self.sram.len()
    }

    #[inline]
    fn sram_append(&self, off: u32, len: usize, out: &mut Vec<u8>) {
        match span(self.sram.len(), off, len) {
            Some(r) => out.extend_from_slice(&self.sram[r]),
            None => out.resize(out.len() + len, 0),
        }
    }

    #[inline]
    fn dma(&mut self, c: &HostDmaCmd) -> bool {
        let len = c.len as usize;
        if c.host >= self.host.limit {
            // The page tables: the firmware reads lines of them.
            let Some(s) = span(self.sram.len(), c.sram, len) else { return false };
            return match c.dir {
                DmaDir::HostToSram => self.host.read_tables(c.host, &mut self.sram[s]),
                DmaDir::SramToHost => false,
            };
        }
        let (Some(s), Some(h)) = (span(self.sram.len(), c.sram, len), self.host.range(c.host, len))
        else {
            return false;
        };
        match c.dir {
            DmaDir::HostToSram => self.sram[s].copy_from_slice(&self.host.bytes[h]),
            DmaDir::SramToHost => self.host.bytes[h].copy_from_slice(&self.sram[s]),
        }
        true
    }
}

/// `[bus, bus + len)` cut at page boundaries: (page number, offset in
/// the page, offset in the range, length) of each part.
fn page_parts(bus: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    nic_abi::page_table::page_pieces(bus, len as u64).map(move |(at, n)| {
        (at / PAGE_SIZE, (at % PAGE_SIZE) as usize, (at - bus) as usize, n as usize)
    })
}

/// Host memory with a first-fit page allocator (free ranges kept in
/// address order, so allocation is deterministic).
#[derive(Debug)]
pub struct HostMem {
    bytes: Colored,
    limit: u64,
    /// Free ranges below `top`: start -> length, coalesced.
    free: BTreeMap<u64, u64>,
    /// End of the highest allocation ever made.
    top: u64,
    /// The page tables, `[limit, tables_end)`: pages written so far.
    tables: BTreeMap<u64, Box<[u8]>>,
    tables_end: u64,
}

impl HostMem {
    /// Memory whose allocations stay below `limit` (and no page tables).
    pub fn new(limit: u64) -> HostMem {
        HostMem {
            bytes: Colored::default(),
            limit,
            free: BTreeMap::new(),
            top: PAGE_SIZE,
            tables: BTreeMap::new(),
            tables_end: limit,
        }
    }

    /// Is `[bus, bus + len)` in the page tables?
    fn in_tables(&self, bus: u64, len: usize) -> bool {
        bus >= self.limit && bus.checked_add(len as u64).is_some_and(|e| e <= self.tables_end)
    }

    /// Read the page tables (false, and zeros, outside them).
    pub fn read_tables(&self, bus: u64, buf: &mut [u8]) -> bool {
        buf.fill(0);
        if !self.in_tables(bus, buf.len()) {
            return false;
        }
        for (page, o, k, n) in page_parts(bus, buf.len()) {
            if let Some(page) = self.tables.get(&page) {
                buf[k..k + n].copy_from_slice(&page[o..o + n]);
            }
        }
        true
    }

    /// Write the page tables (the privileged side); false outside them.
    pub fn write_tables(&mut self, bus: u64, data: &[u8]) -> bool {
        if !self.in_tables(bus, data.len()) {
            return false;
        }
        for (page, o, k, n) in page_parts(bus, data.len()) {
            let page = self
                .tables
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE_SIZE as usize].into_boxed_slice());
            page[o..o + n].copy_from_slice(&data[k..k + n]);
        }
        true
    }

    /// Bytes of host memory that exist (bus addresses below this are valid).
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The byte range `[bus, bus + len)` if it lies inside host memory.
    #[inline]
    pub fn range(&self, bus: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let end = bus.checked_add(len as u64)?;
        (end <= self.bytes.len() as u64).then_some(bus as usize..end as usize)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// Read; bytes outside host memory read as zero.
    pub fn read(&self, bus: u64, buf: &mut [u8]) {
        // Host memory lies below `limit` (it grows to the allocations'
        // high-water mark, at most `limit`): a range inside it is never in
        // the tables.
        if let Some(r) = self.range(bus, buf.len()) {
            buf.copy_from_slice(&self.bytes[r]);
            return;
        }
        if self.in_tables(bus, buf.len()) {
            self.read_tables(bus, buf);
            return;
        }
        buf.fill(0);
        let have = (self.bytes.len() as u64).saturating_sub(bus) as usize;
        if bus < self.bytes.len() as u64 {
            let n = have.min(buf.len());
            buf[..n].copy_from_slice(&self.bytes[bus as usize..bus as usize + n]);
        }
    }

    /// Write; bytes outside host memory are dropped. Returns whether all
    /// of it landed.
    pub fn write(&mut self, bus: u64, data: &[u8]) -> bool {
        if self.in_tables(bus, data.len()) {
            return self.write_tables(bus, data);
        }
        match self.range(bus, data.len()) {
            Some(r) => {
                self.bytes[r].copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// Allocate `len` bytes (rounded up to whole pages), zeroed. None when
    /// the profile's host memory is exhausted.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(1).checked_next_multiple_of(PAGE_SIZE)?;
        let hit = self.free.iter().find(|(_, &l)| l >= len).map(|(&s, &l)| (s, l));
        let start = match hit {
            Some((s, l)) => {
                self.free.remove(&s);
                if l > len {
                    self.free.insert(s + len, l - len);
                }
                s
            }
            None => {
                let s = self.top;
                let end = s.checked_add(len)?;
                if end > self.limit {
                    return None;
                }
                self.top = end;
                s
            }
        };
        // Memory grown for it comes zeroed: only what was there before
        // is cleared.
        let (start, end) = (start as usize, (start + len) as usize);
        let had = self.bytes.len();
        if had < end {
            self.bytes.resize(end);
        }
        self.bytes[start..end.min(had).max(start)].fill(0);
        Some(start as u64)
    }

    /// Give back an allocation. Ranges that were not allocated (not page
    /// aligned, outside memory, overlapping free space) are ignored.
    pub fn free(&mut self, bus: u64, len: u64) {
        let Some(len) = len.max(1).checked_next_multiple_of(PAGE_SIZE) else { return };
        if !bus.is_multiple_of(PAGE_SIZE) || bus < PAGE_SIZE || bus.saturating_add(len) > self.top {
            return;
        }
        // Refuse a double free: any overlap with a free range.
        if let Some((&s, &l)) = self.free.range(..bus + len).next_back() {
            if s + l > bus {
                return;
            }
        }
        let mut start = bus;
        let mut l = len;
        if let Some((&ps, &pl)) = self.free.range(..bus).next_back() {
            if ps + pl == bus {
                self.free.remove(&ps);
                start = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(bus + len)) {
            self.free.remove(&(bus + len));
            l += nl;
        }
        if start + l == self.top {
            self.top = start;
        } else {
            self.free.insert(start, l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sram_is_zeroed_its_length_and_colored_past_a_huge_page_boundary() {
        for (len, color) in [(1 << 20, 0), (1 << 20, 64 * 63), (8 << 20, 128), (3000, 64)] {
            let huge = len > 4096;
            let mut s = SramBuf::zeroed(len, color, huge);
            assert_eq!(s.len(), len);
            let boundary = if huge && cfg!(target_os = "linux") { HUGE } else { 4096 };
            assert_eq!(s.as_ptr() as usize % boundary, color % boundary, "len {len} color {color}");
            assert!(s.iter().all(|&b| b == 0));
            s[len - 1] = 7;
            s[0] = 9;
            assert_eq!((s[0], s[len - 1]), (9, 7));
        }
    }

    #[test]
    fn allocations_are_page_aligned_zeroed_and_never_at_zero() {
        let mut m = HostMem::new(1 << 20);
        let a = m.alloc(10).unwrap();
        let b = m.alloc(5000).unwrap();
        assert_eq!(a, PAGE_SIZE);
        assert_eq!(b, 2 * PAGE_SIZE);
        assert!(m.write(a, &[1, 2, 3]));
        m.free(a, 10);
        let c = m.alloc(100).unwrap();
        assert_eq!(c, a, "first fit reuses the freed page");
        let mut buf = [9u8; 3];
        m.read(c, &mut buf);
        assert_eq!(buf, [0, 0, 0]);
    }

    #[test]
    fn exhaustion_returns_none_and_freeing_coalesces() {
        let mut m = HostMem::new(8 * PAGE_SIZE);
        let v: Vec<u64> = (0..7).map(|_| m.alloc(PAGE_SIZE).unwrap()).collect();
        assert_eq!(m.alloc(1), None);
        m.free(v[1], PAGE_SIZE);
        m.free(v[2], PAGE_SIZE);
        m.free(v[2], PAGE_SIZE); // double free ignored
        assert_eq!(m.alloc(2 * PAGE_SIZE), Some(v[1]));
        m.free(v[6], PAGE_SIZE);
        assert_eq!(m.alloc(PAGE_SIZE), Some(v[6]));
    }

    #[test]
    fn out_of_range_access_reads_zero_and_drops_writes() {
        let mut m = HostMem::new(1 << 20);
        let a = m.alloc(PAGE_SIZE).unwrap();
        assert!(!m.write(a + PAGE_SIZE - 1, &[1, 2]));
        let mut b = [7u8; 4];
        m.read(a + PAGE_SIZE - 2, &mut b);
        assert_eq!(b, [0, 0, 0, 0]);
        m.read(u64::MAX - 1, &mut b);
        assert_eq!(b, [0; 4]);
    }
}
