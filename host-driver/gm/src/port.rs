//! A GM port (`struct gm_port`, opaque to C): a port of an emulated NIC
//! opened through the host driver, with the port's slice of host memory
//! mapped at the virtual addresses the NIC translates. A pointer into DMA
//! memory is then the very address a descriptor carries and the NIC
//! writes into events, as under GM, where a process's own pointers were
//! what it handed its NIC: no table maps one to the other, and a remote
//! pointer another process sends (for a put or a get) is its NIC address.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::time::Duration;

use host_driver::live::ATTACH_WAIT;
use host_driver::{vaddr_of, DmaBuf, DriverError, Event, LiveBackend, Nic, Port, PortOptions};

use crate::alarm::Alarms;
use crate::recv::RawEvent;
use crate::send::Sends;
use crate::status::{self, GmStatus, GM_OUT_OF_MEMORY};
use crate::target::Target;

/// Bytes every DMA allocation gets beyond what was asked: a receive
/// buffer of GM size s holds 2^s - 8 bytes, and the NIC checks that the
/// whole 2^s of its size class is registered.
pub const DMA_SLACK: u64 = 8;

/// How long `gm_open` waits for the NIC to serve the port.
pub const OPEN_WAIT: Duration = ATTACH_WAIT;

/// An open GM port.
pub struct GmPort {
    pub(crate) port: Port<LiveBackend>,
    pub(crate) nic: Nic<LiveBackend>,
    /// The port number (GM's port id).
    pub(crate) id: u8,
    /// This process's cluster node.
    pub(crate) node: u16,
    pub(crate) nodes: u32,
    pub(crate) send_tokens: u32,
    pub(crate) recv_tokens: u32,
    pub(crate) mtu: u32,
    map: SliceMap,
    /// The nodes' host names, for gm_node_id_to_host_name.
    pub(crate) names: Vec<std::ffi::CString>,
    /// gm_dma_malloc's allocations, by address.
    allocs: BTreeMap<u64, DmaBuf>,
    pub(crate) sends: Sends,
    pub(crate) alarms: Alarms,
    /// NIC events taken (by a peek, or a blocking wait) and not yet
    /// handled.
    pub(crate) stash: VecDeque<Event>,
    /// Where gm_receive composes the event it returns.
    pub(crate) event: Box<RawEvent>,
    /// The port's slice: its file (registering the program's own memory
    /// maps it again) and its first bus address.
    pub(crate) slice_file: std::fs::File,
    pub(crate) slice_start: u64,
    /// The program's own memory registered (`crate::register`).
    pub(crate) registrations: Vec<crate::register::Registration>,
    /// GM-level send tokens the program took with gm_alloc_send_token.
    pub(crate) tokens_taken: [u32; 2],
}

impl GmPort {
    /// Open port `id` of the NIC `t` names, map its slice and wait until
    /// the NIC serves it: the status gm_open returns and why, if not.
    pub fn open(t: &Target, id: u8) -> Result<GmPort, (GmStatus, String)> {
        let driver = |e: DriverError| (status::of_open(&e), e.to_string());
        let be = LiveBackend::attach(&t.cluster, t.node, id).map_err(driver)?;
        let (start, len) = be.slice();
        let mapping = |e: std::io::Error| {
            (GM_OUT_OF_MEMORY, format!("mapping the port's memory of {}: {e}", t.cluster))
        };
        let file = be.slice_file().map_err(mapping)?;
        let nic = Nic::open_timeout(be, OPEN_WAIT).map_err(driver)?;
        let mut port = nic.open_port(id, PortOptions::default()).map_err(driver)?;
        port.wait_served(OPEN_WAIT).map_err(driver)?;
        let map = SliceMap::new(&file, vaddr_of(id, start), len).map_err(mapping)?;
        let info = *nic.info();
        Ok(GmPort {
            port,
            id,
            node: info.node_id,
            nodes: info.num_nodes,
            send_tokens: info.send_tokens,
            recv_tokens: info.recv_tokens,
            mtu: info.mtu,
            names: (0..info.num_nodes as u16)
                .map(|n| std::ffi::CString::new(crate::target::host_name(n)).expect("no NUL"))
                .collect(),
            nic,
            map,
            allocs: BTreeMap::new(),
            sends: Sends::new(info.send_tokens),
            alarms: Alarms::default(),
            stash: VecDeque::new(),
            event: Box::new(RawEvent::default()),
            tokens_taken: [0; 2],
            slice_file: file,
            slice_start: start,
            registrations: Vec::new(),
        })
    }

    /// GM's clock: ticks of half a microsecond, from the NIC's clock.
    pub fn ticks(&self) -> u64 {
        let hz = self.nic.info().rtc_hz.max(1) as u128;
        (self.nic.clock() as u128 * 2_000_000 / hz) as u64
    }

    /// `len` bytes of registered DMA memory (zeroed when `zero`): the
    /// address C uses, or None (out of the slice).
    pub fn dma_alloc(&mut self, len: u64, zero: bool) -> Option<*mut c_void> {
        let buf = self.port.alloc(len.max(1).checked_add(DMA_SLACK)?).ok()?;
        if zero {
            // SAFETY: the allocation lies inside the mapped slice (the
            // driver allocates only there), mapped at its vaddr.
            unsafe { std::ptr::write_bytes(buf.vaddr as *mut u8, 0, buf.len as usize) };
        }
        self.allocs.insert(buf.vaddr, buf);
        Some(buf.vaddr as *mut c_void)
    }

    /// Free an allocation of `dma_alloc`; false if `addr` is not one.
    pub fn dma_free(&mut self, addr: u64) -> bool {
        match self.allocs.remove(&addr) {
            Some(buf) => self.port.free(buf).is_ok(),
            None => false,
        }
    }

    /// Is `[addr, addr + len)` inside one DMA allocation of this port?
    pub fn in_dma(&self, addr: u64, len: u64) -> bool {
        let Some((_, b)) = self.allocs.range(..=addr).next_back() else { return false };
        addr.checked_add(len).is_some_and(|end| end <= b.vaddr + b.len)
    }

    /// Is `[addr, addr + len)` inside the mapped slice?
    pub fn in_slice(&self, addr: u64, len: u64) -> bool {
        self.map.contains(addr, len)
    }
}

/// The port's slice mapped (shared) at the NIC's virtual address of its
/// first byte; unmapped when dropped.
struct SliceMap {
    at: u64,
    len: u64,
}

impl SliceMap {
    fn new(file: &std::fs::File, at: u64, len: u64) -> std::io::Result<SliceMap> {
        let n = usize::try_from(len).map_err(std::io::Error::other)?;
        // SAFETY: a new shared mapping of a file this process holds open,
        // at an address range nothing else may use (FIXED_NOREPLACE fails
        // rather than replace a mapping): no Rust object refers to it.
        let p = unsafe {
            libc::mmap(
                at as *mut c_void,
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        if p as u64 != at {
            // An old kernel that takes the flag as a hint.
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(p, n) };
            return Err(std::io::Error::other(format!(
                "the port's memory could not be mapped at {at:#x} (mapped at {p:p})"
            )));
        }
        Ok(SliceMap { at, len })
    }

    fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.at && addr.checked_add(len).is_some_and(|end| end <= self.at + self.len)
    }
}

impl Drop for SliceMap {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made; C pointers into it are dangling
        // from here on, as GM's were after gm_close.
        unsafe { libc::munmap(self.at as *mut c_void, self.len as usize) };
    }
}
