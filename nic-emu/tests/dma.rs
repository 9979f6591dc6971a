//! DMA engine semantics, driven by hand through the rings (no MCP): the
//! test plays the firmware's part through PIO on SRAM.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use host_driver::backend::NicBackend;
use nic_abi::map::{self, BUF_STRIDE};
use nic_abi::packet::{field, HEADER_LEN};
use nic_abi::regs;
use nic_abi::rings::{DmaDir, RxStatus};
use nic_emu::firmware::{Firmware, Hw, SliceHw, Sram, Work};
use nic_emu::profile::Rate;
use nic_emu::{crc_ok, ClusterConfig, Faults, RunLimit, RunOutcome, SimCluster, Topology};

#[test]
fn host_to_sram_command_moves_the_bytes_and_counts_done_after_setup_plus_transfer() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 2, Topology::Star, Faults::NONE, 0);
    let be = c.backend(0);
    let bus = be.alloc_dma(8192).unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    be.host_write(bus + 100, &data);
    post_hdma(&be, DmaDir::HostToSram, map::tx_buf(2), bus + 100, 3000);
    c.kick(0);
    let t = step_until(&mut c, |_| reg32(&be, regs::HDMA_DONE) == 1);
    let expect = 1 + p.host_dma.setup_ns + Rate::new(p.host_dma.bandwidth_bytes_per_s).ns(3000);
    assert_eq!(t, expect);
    let mut got = vec![0u8; 3000];
    be.sram_read(map::tx_buf(2), &mut got);
    assert_eq!(got, data);
    assert_eq!(reg32(&be, regs::HDMA_ERRORS), 0);
}

#[test]
fn sram_to_host_commands_run_in_order_back_to_back() {
    let p = profile();
    let mut c = idle_cluster(p.clone(), 1, Topology::Star, Faults::NONE, 0);
    let be = c.backend(0);
    let bus = be.alloc_dma(4096).unwrap();
    be.sram_write(map::EVT_STAGING, &[0xAB; 64]);
    be.sram_write(map::EVT_STAGING + 64, &[0xCD; 64]);
    post_hdma(&be, DmaDir::SramToHost, map::EVT_STAGING, bus, 64);
    post_hdma(&be, DmaDir::SramToHost, map::EVT_STAGING + 64, bus + 64, 64);
    c.kick(0);
    let t1 = step_until(&mut c, |_| reg32(&be, regs::HDMA_DONE) == 1);
    let t2 = step_until(&mut c, |_| reg32(&be, regs::HDMA_DONE) == 2);
    assert_eq!(t2 - t1, p.host_dma.setup_ns + Rate::new(p.host_dma.bandwidth_bytes_per_s).ns(64));
    let mut got = [0u8; 128];
    be.host_read(bus, &mut got);
    assert_eq!(&got[..64], &[0xAB; 64]);
    assert_eq!(&got[64..], &[0xCD; 64]);
}

#[test]
fn an_out_of_range_command_moves_nothing_counts_an_error_and_still_completes() {
    let mut c = idle_cluster(profile(), 1, Topology::Star, Faults::NONE, 0);
    let be = c.backend(0);
    let bus = be.alloc_dma(4096).unwrap();
    be.host_write(bus, &[9; 16]);
    let sram_size = reg32(&be, regs::SRAM_SIZE);
    // SRAM range past the end; host range past host memory; then a good one.
    post_hdma(&be, DmaDir::HostToSram, sram_size - 8, bus, 16);
    post_hdma(&be, DmaDir::SramToHost, map::tx_buf(0), bus + (1 << 40), 16);
    post_hdma(&be, DmaDir::HostToSram, map::tx_buf(1), bus, 16);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&be, regs::HDMA_DONE), 3);
    assert_eq!(reg32(&be, regs::HDMA_ERRORS), 2);
    let mut tail = [0u8; 8];
    be.sram_read(sram_size - 8, &mut tail);
    assert_eq!(tail, [0; 8]);
    let mut got = [0u8; 16];
    be.sram_read(map::tx_buf(1), &mut got);
    assert_eq!(got, [9; 16]);
    assert_eq!(c.nic_stats(0).device.hdma_errors, 2);
}

#[test]
fn send_dma_fills_in_the_crc_and_the_receiver_gets_the_packet_intact() {
    let mut c = idle_cluster(profile(), 2, Topology::Star, Faults::NONE, 0);
    let (a, b) = (c.backend(0), c.backend(1));
    post_rx(&b, 4);
    let payload: Vec<u8> = (0..1500u32).map(|i| (i ^ 0x55) as u8).collect();
    let wire = post_tx(&a, 3, &star_route(1), 0, 1, &payload);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 1);
    let d = rx_done(&b, 0);
    assert_eq!((d.buf, d.len as usize, d.status), (4, wire - 1, RxStatus::empty()));
    let mut got = vec![0u8; d.len as usize];
    b.sram_read(map::rx_buf(4), &mut got);
    assert!(crc_ok(&got));
    assert_eq!(&got[HEADER_LEN..], &payload[..]);
    // The sender's SRAM copy carries the same CRC (hardware wrote it there).
    let mut sent = vec![0u8; got.len()];
    a.sram_read(map::tx_buf(3) + map::ROUTE_ROOM, &mut sent);
    assert_eq!(sent, got);
    let crc = u32::from_le_bytes(got[field::CRC..field::CRC + 4].try_into().unwrap());
    assert_ne!(crc, 0);
    assert_eq!(reg32(&b, regs::RXFREE_CONS), 1);
}

#[test]
fn a_corrupted_packet_is_flagged_crc_bad_and_only_a_corrupted_one() {
    let faults = Faults { corrupt: 0.4, ..Faults::NONE };
    let mut c = idle_cluster(profile(), 2, Topology::Star, faults, 7);
    let (a, b) = (c.backend(0), c.backend(1));
    let n = 40u32;
    for i in 0..n {
        post_rx(&b, i % 32);
        let payload = vec![i as u8; 200];
        post_tx(&a, i % 16, &star_route(1), 0, 1, &payload);
        c.kick(0);
        c.kick(1);
        assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
        let d = rx_done(&b, i);
        let mut got = vec![0u8; d.len as usize];
        b.sram_read(map::rx_buf(d.buf), &mut got);
        let mut orig = header(0, 1, 200).to_vec();
        orig.extend_from_slice(&payload);
        let mut clean = got.clone();
        clean[field::CRC..field::CRC + 4].fill(0);
        let intact = clean == orig;
        assert_eq!(!d.status.contains(RxStatus::CRC_BAD), intact, "packet {i}");
    }
    let s = c.nic_stats(0);
    let bad = c.nic_stats(1).device.rx_crc_bad;
    assert!(bad > 5 && bad < 35, "{bad}");
    assert!(s.fault_corrupts >= bad, "{} < {bad}", s.fault_corrupts);
}

#[test]
fn a_packet_longer_than_a_buffer_is_cut_and_flagged() {
    let mut c = idle_cluster(profile(), 2, Topology::Star, Faults::NONE, 0);
    let (a, b) = (c.backend(0), c.backend(1));
    post_rx(&b, 31);
    post_rx(&b, 30);
    // Fits the transmit area (the next buffers), not a receive buffer.
    let long = vec![1u8; BUF_STRIDE as usize + 100 - HEADER_LEN];
    post_tx(&a, 0, &star_route(1), 0, 1, &long);
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    let d = rx_done(&b, 0);
    assert_eq!(d.buf, 31);
    assert_eq!(d.len, BUF_STRIDE);
    assert_eq!(d.status, RxStatus::TRUNCATED | RxStatus::CRC_BAD);
    // Buffer 30 is untouched by the overflow.
    let mut next = [0u8; 16];
    b.sram_read(map::rx_buf(30), &mut next);
    assert_eq!(next, [0; 16]);
}

#[test]
fn a_malformed_send_command_counts_an_error_and_sends_nothing() {
    let mut c = idle_cluster(profile(), 2, Topology::Star, Faults::NONE, 0);
    let a = c.backend(0);
    post_tx_raw(&a, 0, &star_route(1), &[0u8; 10]); // shorter than a header
    c.kick(0);
    assert_eq!(c.run(RunLimit::Unlimited), RunOutcome::Done);
    assert_eq!(reg32(&a, regs::TXDMA_ERRORS), 1);
    assert_eq!(reg32(&a, regs::TXDMA_DONE), 1);
    assert_eq!(c.sim_stats().packets, 0);
}

/// Firmware that records the RTC it sees at each poll.
struct RtcRecorder(Rc<RefCell<Vec<u64>>>);

impl Firmware for RtcRecorder {
    fn init(&mut self, hw: &mut SliceHw<'_>) -> Result<(), String> {
        hw.set_reg(regs::FW_STATUS, regs::FW_RUNNING);
        Ok(())
    }
    fn poll(&mut self, hw: &mut SliceHw<'_>) -> Work {
        self.0.borrow_mut().push(hw.rtc());
        Work::default()
    }
    fn next_deadline(&self) -> Option<u64> {
        // Ask to be woken at each of the first ticks 0..=10 in turn.
        let seen = self.0.borrow();
        let last = *seen.last().unwrap_or(&0);
        (last < 10).then_some(last + 3)
    }
}

/// A program that is done at its second call, 50 us in.
struct KeepAlive(bool);

impl nic_emu::HostApp for KeepAlive {
    fn wake(&mut self, cx: &mut nic_emu::HostCx<'_>) {
        if cx.now_ns() >= 50_000 {
            self.0 = true;
        } else {
            cx.wake_at(50_000);
        }
    }
    fn done(&self) -> bool {
        self.0
    }
}

#[test]
fn the_rtc_register_is_current_at_every_poll_and_deadlines_wake_the_firmware() {
    let p = profile();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s2 = seen.clone();
    let cfg = ClusterConfig::new(p.clone(), 1, Topology::Star);
    let mut c = SimCluster::with_firmware(cfg, move |_| Box::new(RtcRecorder(s2.clone()))).unwrap();
    let be = c.backend(0);
    assert_eq!(reg32(&be, regs::MAGIC), regs::MAGIC_VALUE);
    assert_eq!(be.sram_load_u64(nic_abi::regs::reg(regs::RTC_HZ)), p.nic.rtc_hz);
    // Firmware timers alone do not keep a run going: a program does.
    c.spawn(0, Box::new(KeepAlive(false)));
    c.run(RunLimit::Until(100_000));
    // Polls at t = 0, then at ticks 3, 6, 9, 12 (timer wakes), then none.
    assert_eq!(*seen.borrow(), vec![0, 3, 6, 9, 12]);
    assert_eq!(c.nic_stats(0).nic_polls, 5);
}

#[test]
fn cfg_registers_hold_the_profile_and_the_send_timeout_override() {
    let p = profile();
    let mut cfg = ClusterConfig::new(p.clone(), 3, Topology::Star);
    cfg.send_timeout_us = Some(1500.0);
    let c = SimCluster::with_firmware(cfg, |_| Box::new(nic_emu::IdleFirmware)).unwrap();
    let be = c.backend(2);
    let r64 = |r| be.sram_load_u64(nic_abi::regs::reg(r));
    assert_eq!(reg32(&be, regs::ABI_VERSION), regs::ABI_VERSION_VALUE);
    assert_eq!(reg32(&be, regs::NODE_ID), 2);
    assert_eq!(reg32(&be, regs::MTU), 4096);
    assert_eq!(reg32(&be, regs::SRAM_SIZE), p.nic.sram_bytes);
    assert_eq!(r64(regs::SEND_TIMEOUT_TICKS), 3000); // 1.5 ms at 2 MHz
    assert_eq!(r64(regs::RETRANSMIT_TICKS), p.ns_to_ticks(p.firmware.retransmit_ns));
    assert_eq!(reg32(&be, regs::WINDOW), p.firmware.window);
    assert_eq!(reg32(&be, regs::SEND_TOKENS), p.firmware.send_tokens);
    assert_eq!(reg32(&be, regs::LINK_STATE), 1);
    assert_eq!(reg32(&be, regs::BOOT_COUNT), 1, "one boot so far");
    assert_eq!(reg32(&be, regs::RELIABILITY), regs::RELIABILITY_GO_BACK_N, "the default");
}

#[test]
fn the_reliability_register_holds_the_profiles_mode_at_every_reset_and_the_mcp_boots_with_it() {
    let mut p = profile();
    p.firmware.reliability = nic_emu::profile::Reliability::Selective;
    let mut c = SimCluster::new(ClusterConfig::new(p, 2, Topology::Star)).unwrap();
    for node in 0..2 {
        let be = c.backend(node);
        assert_eq!(reg32(&be, regs::RELIABILITY), regs::RELIABILITY_SELECTIVE, "node {node}");
        assert_eq!(reg32(&be, regs::FW_STATUS), regs::FW_RUNNING, "node {node}");
    }
    // A NIC reset writes the cfg registers again: the mode stays.
    let be = c.backend(1);
    be.sram_store_u32(nic_abi::regs::reg(regs::RELIABILITY), 7);
    c.reset_nic(1).unwrap();
    assert_eq!(reg32(&be, regs::RELIABILITY), regs::RELIABILITY_SELECTIVE);
    assert_eq!(reg32(&be, regs::BOOT_COUNT), 2);
}
