//! Helpers shared by the integration tests: a cluster with round-number
//! timing, and hand-driving of the DMA rings through PIO (the tests play
//! the firmware's part).
#![allow(dead_code)]

use host_driver::backend::NicBackend;
use nic_abi::map;
use nic_abi::packet::{route_byte, Flags, Header, PacketType, HEADER_LEN};
use nic_abi::regs::{self, reg};
use nic_abi::rings::{self, DmaDir, HostDmaCmd, RxDone, TxDmaCmd};
use nic_abi::Priority;
use nic_emu::{
    ClusterConfig, Faults, IdleFirmware, Profile, RunLimit, SimBackend, SimCluster, Topology,
};

/// lanai9-gm with the NIC CPU's price per poll at zero (1 ns): link 6.25
/// ns/byte, cable 21 ns, switch 500 ns, send/recv-DMA setup 300 ns.
pub fn profile() -> Profile {
    let mut p = Profile::load("lanai9-gm").unwrap();
    p.nic_cpu.poll = 0;
    p.send_dma.setup_ns = 300;
    p.recv_dma.setup_ns = 300;
    p
}

pub fn idle_cluster(
    p: Profile,
    nodes: usize,
    topology: Topology,
    faults: Faults,
    seed: u64,
) -> SimCluster {
    let mut cfg = ClusterConfig::new(p, nodes, topology);
    cfg.faults = faults;
    cfg.seed = seed;
    SimCluster::with_firmware(cfg, |_| Box::new(IdleFirmware)).unwrap()
}

pub fn header(src: u16, dst: u16, payload_len: u16) -> [u8; HEADER_LEN] {
    let h = Header {
        ptype: PacketType::Data,
        flags: Flags::FIRST | Flags::LAST,
        priority: Priority::Low,
        nack_code: 0,
        src_node: src,
        dst_node: dst,
        src_port: 0,
        dst_port: 0,
        size_class: 12,
        seq: 7,
        ack: 0,
        msg_len: payload_len as u32,
        offset: 0,
        payload_len,
        remote: 0,
        cookie: 0,
        sync_boot: 0,
        sync_gen: 0,
        crc: 0,
    };
    let mut b = [0u8; HEADER_LEN];
    h.encode(&mut b);
    b
}

/// Star route to `dst` (one switch).
pub fn star_route(dst: usize) -> Vec<u8> {
    vec![route_byte(dst as u8)]
}

/// Put `route + header + payload` into transmit buffer `idx` and post a
/// send-DMA command for it (bumping TXDMA_PROD). Returns the wire length.
pub fn post_tx_raw(be: &SimBackend, idx: u32, route: &[u8], packet: &[u8]) -> usize {
    let start = map::tx_buf(idx) + map::ROUTE_ROOM - route.len() as u32;
    be.sram_write(start, route);
    be.sram_write(start + route.len() as u32, packet);
    let len = route.len() + packet.len();
    let prod = be.sram_load_u32(reg(regs::TXDMA_PROD));
    let cmd = TxDmaCmd {
        sram: start,
        len: len as u32,
        route_len: route.len() as u8,
        cookie: prod,
        tail_sram: 0,
        tail_len: 0,
    };
    let mut b = [0u8; 16];
    cmd.encode(&mut b);
    be.sram_write(
        rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, prod),
        &b,
    );
    be.sram_store_u32(reg(regs::TXDMA_PROD), prod + 1);
    len
}

/// A data packet from `src` to `dst` with `payload`.
pub fn post_tx(
    be: &SimBackend,
    idx: u32,
    route: &[u8],
    src: u16,
    dst: u16,
    payload: &[u8],
) -> usize {
    let mut pkt = header(src, dst, payload.len() as u16).to_vec();
    pkt.extend_from_slice(payload);
    post_tx_raw(be, idx, route, &pkt)
}

/// Give the receive-DMA engine buffer `buf` (bumping RXFREE_PROD).
pub fn post_rx(be: &SimBackend, buf: u32) {
    let prod = be.sram_load_u32(reg(regs::RXFREE_PROD));
    be.sram_store_u32(
        rings::slot(map::RXFREE_RING, map::RXFREE_RING_LEN, rings::RXFREE_SIZE, prod),
        buf,
    );
    be.sram_store_u32(reg(regs::RXFREE_PROD), prod + 1);
}

pub fn rx_done(be: &SimBackend, i: u32) -> RxDone {
    let mut b = [0u8; 16];
    be.sram_read(
        rings::slot(map::RXDONE_RING, map::RXDONE_RING_LEN, rings::RXDONE_SIZE, i),
        &mut b,
    );
    RxDone::decode(&b).unwrap()
}

pub fn reg32(be: &SimBackend, r: regs::Reg<u32>) -> u32 {
    be.sram_load_u32(reg(r))
}

/// Post a host-DMA command (bumping HDMA_PROD).
pub fn post_hdma(be: &SimBackend, dir: DmaDir, sram: u32, host: u64, len: u32) {
    let prod = be.sram_load_u32(reg(regs::HDMA_PROD));
    let cmd = HostDmaCmd { dir, len, sram, host, cookie: 0 };
    let mut b = [0u8; 32];
    cmd.encode(&mut b);
    be.sram_write(rings::slot(map::HDMA_RING, map::HDMA_RING_LEN, rings::HDMA_CMD_SIZE, prod), &b);
    be.sram_store_u32(reg(regs::HDMA_PROD), prod + 1);
}

/// Handle events one at a time until `pred` holds; the time it first did.
pub fn step_until(c: &mut SimCluster, mut pred: impl FnMut(&SimCluster) -> bool) -> u64 {
    for _ in 0..1_000_000 {
        if pred(c) {
            return c.now_ns();
        }
        c.run(RunLimit::Events(1));
    }
    panic!("condition never held");
}
