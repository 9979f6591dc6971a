//! Simulated hosts: the backend's clock and prices, doorbells, and when
//! programs are called.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use host_driver::backend::{HostOp, NicBackend};
use nic_abi::map;
use nic_abi::regs;
use nic_abi::rings::DmaDir;
use nic_emu::profile::Rate;
use nic_emu::{Faults, HostApp, HostCost, HostCx, RunLimit, RunOutcome, Topology};

/// Posts one SramToHost DMA by hand at its first call (playing both host
/// and firmware), then records when it is called again.
struct DmaWatcher {
    calls: Rc<RefCell<Vec<u64>>>,
    busy_first: u64,
    done: bool,
}

impl HostApp for DmaWatcher {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        let be = cx.backend();
        self.calls.borrow_mut().push(cx.now_ns());
        if self.calls.borrow().len() == 1 {
            let bus = be.alloc_dma(4096).unwrap();
            be.charge(HostOp::PostDescriptor);
            post_hdma(be, DmaDir::SramToHost, map::EVT_STAGING, bus, 64);
            be.doorbell();
            be.charge(HostOp::Touch(self.busy_first));
        } else {
            self.done = true;
        }
    }
    fn done(&self) -> bool {
        self.done
    }
}

#[test]
fn a_doorbell_wakes_the_nic_at_host_time_and_a_host_write_wakes_the_program() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 1, Topology::Star, Faults::NONE, 0);
    c.run(RunLimit::Unlimited);
    let calls = Rc::new(RefCell::new(Vec::new()));
    c.spawn(0, Box::new(DmaWatcher { calls: calls.clone(), busy_first: 0, done: false }));
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    let post = p.host_cost_ns(HostOp::PostDescriptor);
    // Doorbell at the host clock (after the post), 1 ns poll, then the DMA.
    let dma_done =
        post + 1 + p.host_dma.setup_ns + Rate::new(p.host_dma.bandwidth_bytes_per_s).ns(64);
    let t0 = calls.borrow()[0];
    assert_eq!(calls.borrow()[1], t0 + dma_done);
    assert_eq!(c.nic_stats(0).host_busy_ns, post);
    assert_eq!(reg32(&c.backend(0), regs::HOST_DOORBELL), 1);
}

#[test]
fn a_busy_host_is_called_when_it_is_free_again() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 1, Topology::Star, Faults::NONE, 0);
    let calls = Rc::new(RefCell::new(Vec::new()));
    // 10 MB of touching at 1 GB/s: 10 ms busy, far longer than the DMA.
    c.spawn(0, Box::new(DmaWatcher { calls: calls.clone(), busy_first: 10_000_000, done: false }));
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    let busy = p.host_cost_ns(HostOp::PostDescriptor) + p.host_cost_ns(HostOp::Touch(10_000_000));
    assert_eq!(calls.borrow().clone(), vec![0, busy]);
    assert_eq!(c.nic_stats(0).host_busy_ns, busy);
}

struct Sleeper {
    wakes: Vec<u64>,
}

impl HostApp for Sleeper {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        self.wakes.push(cx.now_ns());
        cx.wake_in(1_000);
        cx.wake_at(cx.now_ns() + 5_000); // the earliest request wins
    }
    fn done(&self) -> bool {
        self.wakes.len() >= 3
    }
}

#[test]
fn programs_are_called_when_they_ask_and_the_run_ends_when_all_are_done() {
    let mut c = idle_cluster(profile(), 2, Topology::Star, Faults::NONE, 0);
    c.spawn(1, Box::new(Sleeper { wakes: Vec::new() }));
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(c.now_ns(), 2_000);
    assert_eq!(reg32(&c.backend(1), regs::NODE_ID), 1);
}

/// Asks for a call at 100 us once, at its first call; meanwhile the NIC
/// writes host memory (an earlier call). The request must survive it.
struct PatientWatcher {
    calls: Rc<RefCell<Vec<u64>>>,
}

impl HostApp for PatientWatcher {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        let be = cx.backend();
        self.calls.borrow_mut().push(cx.now_ns());
        if self.calls.borrow().len() == 1 {
            let bus = be.alloc_dma(4096).unwrap();
            post_hdma(be, DmaDir::SramToHost, map::EVT_STAGING, bus, 64);
            be.doorbell();
            cx.wake_at(100_000);
        }
    }
    fn done(&self) -> bool {
        self.calls.borrow().last().is_some_and(|&t| t >= 100_000)
    }
}

#[test]
fn a_requested_call_survives_earlier_calls() {
    let mut c = idle_cluster(profile(), 1, Topology::Star, Faults::NONE, 0);
    let calls = Rc::new(RefCell::new(Vec::new()));
    c.spawn(0, Box::new(PatientWatcher { calls: calls.clone() }));
    assert_eq!(c.run(RunLimit::Until(1_000_000)), RunOutcome::Done);
    let calls = calls.borrow();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[1] < 100_000);
    assert_eq!(calls[2], 100_000);
}

#[test]
fn the_host_reads_the_rtc_at_its_own_clock() {
    let p = profile();
    let c = idle_cluster(p, 1, Topology::Star, Faults::NONE, 0);
    let be = c.backend(0);
    be.advance_to(10_000);
    assert_eq!(be.sram_load_u64(nic_abi::regs::reg(regs::RTC)), 20); // 2 MHz
}
