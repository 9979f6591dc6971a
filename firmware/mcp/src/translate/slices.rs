//! Each port's slice of host memory, as the privileged side recorded it
//! (`regs::PORT_SLICES`): the MCP keeps its own copy, taken at start and
//! as each port opens, and uses a page or an event queue only inside the
//! port's slice, whatever the page table and the port window say.

use super::{Translator, Xlat};
use crate::hw::Hw;
use nic_abi::{regs, PAGE_SIZE};

impl Translator {
    /// Take port `p`'s slice of host memory as the privileged side
    /// recorded it (at start, and as the port opens).
    pub fn read_slice(&mut self, hw: &impl Hw, p: usize) {
        let base = hw.load_u64(regs::reg(regs::port_slice_base(p)));
        let len = hw.load_u64(regs::reg(regs::port_slice_len(p)));
        self.slices[p] = (base, len);
    }

    /// Is `[bus, bus + len)` inside `port`'s slice of host memory?
    /// Never wraps; a port out of range has none.
    #[inline]
    pub fn in_slice(&self, port: u8, bus: u64, len: u64) -> bool {
        within(&self.slices, port, bus, len)
    }
}

/// Is `[bus, bus + len)` inside port `port`'s slice of `slices`?
#[inline]
pub(super) fn within(slices: &[(u64, u64)], port: u8, bus: u64, len: u64) -> bool {
    let Some(&(base, size)) = slices.get(port as usize) else { return false };
    bus >= base
        && bus.checked_add(len).zip(base.checked_add(size)).is_some_and(|(end, top)| end <= top)
}

/// `vaddr`'s bus address in bus page `page`, if the whole page is in port
/// `p`'s slice (an entry written wrongly, or by someone it does not belong
/// to, is no translation) and its end fits the bus's addresses.
pub(super) fn bus_in_slice(x: &Translator, p: usize, page: u64, vaddr: u64) -> Xlat {
    match page.checked_mul(PAGE_SIZE) {
        Some(start) if x.in_slice(p as u8, start, PAGE_SIZE) => {
            Xlat::Bus(start + vaddr % PAGE_SIZE)
        }
        _ => Xlat::Fault,
    }
}
