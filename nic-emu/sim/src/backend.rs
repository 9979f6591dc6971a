//! `SimBackend`: the sim's implementation of `host_driver::NicBackend` for
//! one node. A cheap handle (`Rc`s) to that node's memories: PIO on SRAM,
//! host memory and its DMA allocator, the host clock, the NIC CPU's busy
//! time (read only: the event core keeps it). `charge` advances
//! the host clock by the profile's price for the operation; `doorbell`
//! adds one to `HOST_DOORBELL` and asks the event core to wake the NIC at
//! the host's current time (the core collects doorbells after each host
//! program's turn); `idle_wait`
//! returns false (a simulated program never blocks: it is woken).
//!
//! Owns nothing but the handles and the host price list. Single-threaded
//! (`Rc<RefCell<_>>`): the whole simulation runs on one thread.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use host_driver::backend::{HostOp, NicBackend};
use nic_abi::regs::{self, reg};

use crate::host::HostCost;
use nic_device::device::Rtc;
use nic_device::memory::NodeMem;
use nic_device::profile::{Profile, Rate};

/// Host CPU prices (ns), from the profile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostPrices {
    post: u64,
    found: u64,
    empty: u64,
    touch: Rate,
    tree_child: u64,
    relay_step: nic_device::profile::StepPrices,
    mcast_recv: u64,
}

impl HostPrices {
    pub fn new(p: &Profile) -> HostPrices {
        HostPrices {
            post: p.host_cost_ns(HostOp::PostDescriptor),
            found: p.host.event_found_ns,
            empty: p.host.event_empty_ns,
            touch: Rate::new(p.host.touch_bandwidth_bytes_per_s),
            tree_child: p.host.tree_child_ns,
            relay_step: p.host.relay_step_ns,
            mcast_recv: p.host.mcast_recv_ns,
        }
    }

    fn of(&self, op: HostOp) -> u64 {
        match op {
            HostOp::PostDescriptor => self.post,
            HostOp::EventFound => self.found,
            HostOp::EventEmpty => self.empty,
            HostOp::Touch(n) => self.touch.ns(n),
            HostOp::TreeWork(n) => self.tree_child.saturating_mul(n as u64),
            HostOp::RelayStep(alg) => self.relay_step.by_code(alg),
            HostOp::McastReceive => self.mcast_recv,
        }
    }
}

/// Doorbells rung and not yet seen by the core: (node, host time).
pub(crate) type Bells = Rc<RefCell<Vec<(usize, u64)>>>;

/// A NIC CPU's busy clock: the core adds each pass, the node's backend
/// reads it.
pub(crate) type NicBusy = Rc<Cell<BusyClock>>;

/// The prices of a NIC CPU's passes so far (ns), the last one's whole,
/// and that one's price and end.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BusyClock {
    pub total: u64,
    last: u64,
    until: u64,
}

impl BusyClock {
    /// A pass of `cost` ns that ends at `end`.
    pub fn add(&mut self, cost: u64, end: u64) {
        self.total += cost;
        (self.last, self.until) = (cost, end);
    }

    /// Busy up to time `t`: the last pass only as far as `t` when it
    /// ends after it.
    fn at(self, t: u64) -> u64 {
        self.total - self.until.saturating_sub(t).min(self.last)
    }
}

/// One node's backend handle.
#[derive(Clone)]
pub struct SimBackend {
    node: usize,
    mem: Rc<RefCell<NodeMem>>,
    bells: Bells,
    nic_busy: NicBusy,
    prices: HostPrices,
    rtc: Rtc,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend").field("node", &self.node).finish_non_exhaustive()
    }
}

const RTC_OFF: u32 = reg(regs::RTC);
const DOORBELL_OFF: u32 = reg(regs::HOST_DOORBELL);

impl SimBackend {
    pub(crate) fn new(
        node: usize,
        mem: Rc<RefCell<NodeMem>>,
        bells: Bells,
        prices: HostPrices,
        rtc: Rtc,
    ) -> Self {
        SimBackend { node, mem, bells, nic_busy: NicBusy::default(), prices, rtc }
    }

    /// The NIC CPU's busy clock, for the core to add each pass to.
    pub(crate) fn nic_busy(&self) -> NicBusy {
        self.nic_busy.clone()
    }

    /// The node this backend drives.
    pub fn node(&self) -> usize {
        self.node
    }

    /// The host clock (ns); the same as `NicBackend::now_ns`.
    pub fn now_ns(&self) -> u64 {
        self.mem.borrow().host_clock
    }

    /// Host CPU time charged so far (ns).
    pub fn host_busy_ns(&self) -> u64 {
        self.mem.borrow().host_busy_ns
    }

    /// The NIC CPU's busy time up to the host clock (ns): the prices of
    /// the passes the core has run, a pass that ends later counted as far
    /// as the host clock; across resets. At the end of a run,
    /// `NicStats::nic_busy_ns`.
    pub fn nic_busy_ns(&self) -> u64 {
        self.nic_busy.get().at(self.now_ns())
    }

    /// Call `f` on the `len` bytes of host memory at bus address `bus`,
    /// in place: what a program on this host touches without a copy. False
    /// (and `f` not called) when the range is not all host memory.
    pub fn with_host(&self, bus: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let m = self.mem.borrow();
        let Some(r) = m.host.range(bus, len) else { return false };
        f(&m.host.bytes()[r]);
        true
    }

    /// `with_host`, to write.
    pub fn with_host_mut(&self, bus: u64, len: usize, f: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut m = self.mem.borrow_mut();
        let Some(r) = m.host.range(bus, len) else { return false };
        f(&mut m.host.bytes_mut()[r]);
        true
    }

    /// Let the host clock run to at least `t` (a program that waits).
    pub fn advance_to(&self, t: u64) {
        let mut m = self.mem.borrow_mut();
        m.host_clock = m.host_clock.max(t);
    }

    fn sram_range(sram: &[u8], off: u32, len: usize) -> Option<std::ops::Range<usize>> {
        let s = off as usize;
        let e = s.checked_add(len)?;
        (e <= sram.len()).then_some(s..e)
    }

    /// The RTC as the host sees it: ticks at the host's clock.
    fn refresh_rtc(&self, m: &mut NodeMem) {
        let now = m.host_clock;
        self.rtc.write(&mut m.sram[..], now);
    }
}

impl NicBackend for SimBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        let mut m = self.mem.borrow_mut();
        if (off as u64) < RTC_OFF as u64 + 8 && off as u64 + buf.len() as u64 > RTC_OFF as u64 {
            self.refresh_rtc(&mut m);
        }
        match Self::sram_range(&m.sram, off, buf.len()) {
            Some(r) => buf.copy_from_slice(&m.sram[r]),
            None => buf.fill(0),
        }
    }

    /// A write that reaches a port's `STATE` or `GENERATION` moves
    /// `PORT_NEWS` after it: the sim's driver layer is the privileged side
    /// that tells the firmware to look at the port windows again. Every
    /// host write moves `HOST_WRITES` (the firmware's summary of news).
    fn sram_write(&self, off: u32, data: &[u8]) {
        let mut m = self.mem.borrow_mut();
        if let Some(r) = Self::sram_range(&m.sram, off, data.len()) {
            m.sram[r].copy_from_slice(data);
            if nic_abi::port::touches_state(off, data.len() as u32) {
                nic_abi::port::move_news(&mut m.sram[..]);
            }
            nic_abi::regs::host_wrote(&mut m.sram[..]);
        }
    }

    fn host_read(&self, bus: u64, buf: &mut [u8]) {
        self.mem.borrow().host.read(bus, buf)
    }

    fn host_write(&self, bus: u64, data: &[u8]) {
        self.mem.borrow_mut().host.write(bus, data);
    }

    fn host_load_u32(&self, bus: u64) -> u32 {
        let m = self.mem.borrow();
        let host = m.host.bytes();
        match host.get(bus as usize..).and_then(|b| b.first_chunk::<4>()) {
            Some(w) => u32::from_le_bytes(*w),
            _ => {
                let mut b = [0u8; 4];
                m.host.read(bus, &mut b);
                u32::from_le_bytes(b)
            }
        }
    }

    /// A word: the RTC's as `sram_read` shows it, any other straight
    /// from SRAM (0 outside it, as `sram_read`).
    #[inline]
    fn sram_load_u32(&self, off: u32) -> u32 {
        if off.abs_diff(RTC_OFF) < 8 {
            let mut b = [0u8; 4];
            self.sram_read(off, &mut b);
            return u32::from_le_bytes(b);
        }
        let m = self.mem.borrow();
        match m.sram.get(off as usize..).and_then(|b| b.first_chunk::<4>()) {
            Some(w) => u32::from_le_bytes(*w),
            None => 0,
        }
    }

    /// `sram_write` of the word's four bytes, without the general copy.
    #[inline]
    fn sram_store_u32(&self, off: u32, v: u32) {
        let mut m = self.mem.borrow_mut();
        if let Some(w) = m.sram.get_mut(off as usize..).and_then(|b| b.first_chunk_mut::<4>()) {
            *w = v.to_le_bytes();
            if nic_abi::port::touches_state(off, 4) {
                nic_abi::port::move_news(&mut m.sram[..]);
            }
            nic_abi::regs::host_wrote(&mut m.sram[..]);
        }
    }

    fn alloc_dma(&self, len: u64) -> Option<u64> {
        self.mem.borrow_mut().host.alloc(len)
    }

    fn free_dma(&self, bus: u64, len: u64) {
        self.mem.borrow_mut().host.free(bus, len)
    }

    fn now_ns(&self) -> u64 {
        self.mem.borrow().host_clock
    }

    fn charge(&self, op: HostOp) {
        let ns = self.prices.of(op);
        let mut m = self.mem.borrow_mut();
        m.host_clock += ns;
        m.host_busy_ns += ns;
    }

    fn doorbell(&self) {
        let mut m = self.mem.borrow_mut();
        // The register's contract (HOST_DOORBELL += 1), and a wake of the
        // NIC CPU at the host's time.
        let o = DOORBELL_OFF as usize;
        let v = u32::from_le_bytes([m.sram[o], m.sram[o + 1], m.sram[o + 2], m.sram[o + 3]]);
        m.sram[o..o + 4].copy_from_slice(&v.wrapping_add(1).to_le_bytes());
        nic_abi::regs::host_wrote(&mut m.sram[..]);
        self.bells.borrow_mut().push((self.node, m.host_clock));
    }

    fn idle_wait(&self) -> bool {
        false
    }
}
