//! The MCP: the NIC control program, after Myricom's GM. Four state
//! machines over one hardware interface ([`hw::Hw`]):
//!
//! - SDMA ([`sdma`]): takes descriptors from the port send rings, validates
//!   and translates them, makes send tokens, queues them on streams and
//!   connections, picks the next packet (GM rotation: one packet per turn)
//!   and has the host-DMA engine copy its payload into a transmit buffer.
//! - SEND ([`send`]): puts the route and header on filled transmit buffers
//!   (piggybacking acks) and hands them to the send-DMA engine; sends acks
//!   and nacks.
//! - RECV ([`recv`]): takes packets from the receive-DMA engine, checks
//!   CRC status and header, handles acks and nacks, sequence numbers
//!   (duplicates acked and dropped, gaps nacked), matches receive buffers.
//! - RDMA ([`rdma`]): copies accepted payloads to host memory and writes
//!   events into the ports' event queues in host memory.
//!
//! `Mcp::poll` is one pass of the main loop: each machine steps a bounded
//! number of times; it returns the [`Work`] done so a simulator can charge
//! NIC CPU time. Time is only ever the RTC read at the start of a pass.
//! No heap, no panics on input from the host or the wire, no unsafe.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod hw;
mod pool;
pub mod rate;
mod rdma;
mod recv;
mod sdma;
mod send;
mod state;
mod trace;

use hw::Hw;
use nic_abi::map;
use nic_abi::regs;
use nic_abi::stats::{stat_offset, Stat, ALL_STATS, STAT_COUNT};
use pool::{Pool, NIL};
use state::*;

pub use state::{PORT_RECV_TOKENS_MAX, PORT_SEND_TOKENS_MAX, WINDOW_MAX};
pub use trace::{RdmaState, RecvState, SdmaState, SendState};

/// What one `poll` did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Send-ring descriptors taken and validated.
    pub descriptors: u32,
    /// Packets handed to the send-DMA engine.
    pub tx_packets: u32,
    /// Received packets examined.
    pub rx_packets: u32,
    /// Host-DMA commands posted.
    pub dma_cmds: u32,
    /// Events composed.
    pub events: u32,
    /// Timers handled.
    pub timers: u32,
    /// Rate control's own work, in flow-table words read or written and
    /// streams compared: a dispatched packet's NDT and flow counters (5),
    /// a flow-table rescan (on FLOW_GEN and when a stream is first used:
    /// one key word per entry, the IDT of each stream's flow), each stream
    /// the NDT scheduler compares. With no flow entries only the rescans
    /// remain, once per new stream.
    pub flow_ops: u32,
}

impl Work {
    pub fn is_idle(&self) -> bool {
        *self == Work::default()
    }

    pub fn add(&mut self, o: &Work) {
        self.descriptors += o.descriptors;
        self.tx_packets += o.tx_packets;
        self.rx_packets += o.rx_packets;
        self.dma_cmds += o.dma_cmds;
        self.events += o.events;
        self.timers += o.timers;
        self.flow_ops += o.flow_ops;
    }
}

/// Why the firmware would not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitError {
    BadMagic,
    AbiMismatch,
    BadConfig(&'static str),
}

/// Configuration read from the register block at init.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub node: u16,
    pub nodes: u16,
    pub mtu: u32,
    pub send_timeout: u64,
    pub rto: u64,
    pub ack_delay: u64,
    pub nobuf_retry: u64,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub window: u32,
}

impl Config {
    const EMPTY: Config = Config {
        node: 0,
        nodes: 0,
        mtu: 0,
        send_timeout: 0,
        rto: 0,
        ack_delay: 0,
        nobuf_retry: 0,
        send_tokens: 0,
        recv_tokens: 0,
        window: 0,
    };

    fn read(hw: &impl Hw) -> Result<Config, InitError> {
        if hw.reg32(regs::MAGIC) != regs::MAGIC_VALUE {
            return Err(InitError::BadMagic);
        }
        if hw.reg32(regs::ABI_VERSION) != regs::ABI_VERSION_VALUE {
            return Err(InitError::AbiMismatch);
        }
        let nodes = hw.reg32(regs::NUM_NODES);
        let node = hw.reg32(regs::NODE_ID);
        if nodes == 0 || nodes as usize > nic_abi::MAX_NODES {
            return Err(InitError::BadConfig("NUM_NODES"));
        }
        if node >= nodes {
            return Err(InitError::BadConfig("NODE_ID"));
        }
        let mtu = hw.reg32(regs::MTU);
        if !(64..=nic_abi::MAX_MTU as u32).contains(&mtu) {
            return Err(InitError::BadConfig("MTU"));
        }
        let c = Config {
            node: node as u16,
            nodes: nodes as u16,
            mtu,
            send_timeout: hw.reg64(regs::SEND_TIMEOUT_TICKS).max(1),
            rto: hw.reg64(regs::RETRANSMIT_TICKS).max(1),
            ack_delay: hw.reg64(regs::ACK_DELAY_TICKS),
            nobuf_retry: hw.reg64(regs::NOBUF_RETRY_TICKS).max(1),
            send_tokens: hw.reg32(regs::SEND_TOKENS).clamp(1, PORT_SEND_TOKENS_MAX),
            recv_tokens: hw.reg32(regs::RECV_TOKENS).clamp(1, PORT_RECV_TOKENS_MAX),
            window: hw.reg32(regs::WINDOW).clamp(1, WINDOW_MAX),
        };
        Ok(c)
    }
}

/// Data transmit buffers may not take the last few: acks and nacks must
/// always find one.
const CONTROL_RESERVE: u32 = 2;

/// The MCP: every piece of firmware state.
pub struct Mcp {
    pub(crate) cfg: Config,
    pub(crate) now: u64,
    pub(crate) tokens: Pool<SendToken, MAX_TOKENS>,
    pub(crate) slots: Pool<RecvSlot, MAX_SLOTS>,
    pub(crate) ports: [PortState; nic_abi::NUM_PORTS],
    pub(crate) port_events: [heapless::Deque<EvRef, 128>; nic_abi::NUM_PORTS],
    pub(crate) txs: Pool<TxStream, MAX_STREAMS>,
    pub(crate) tx_index: heapless::FnvIndexMap<u32, u16, 256>,
    pub(crate) rxs: Pool<RxStream, MAX_STREAMS>,
    pub(crate) rx_index: heapless::FnvIndexMap<u32, u16, 256>,
    pub(crate) conns: Pool<Conn, MAX_CONNS>,
    pub(crate) conn_index: heapless::FnvIndexMap<u16, u16, 128>,
    /// Current connection of the circular connection queue (NIL: empty).
    pub(crate) conn_cur: u16,
    pub(crate) conn_queue_len: u16,
    /// Streams with unacknowledged packets (retransmit timers).
    pub(crate) active_tx: heapless::Vec<u16, MAX_STREAMS>,
    /// Receiving streams owing an ack.
    pub(crate) ack_list: heapless::Vec<u16, MAX_STREAMS>,
    pub(crate) control: heapless::Deque<Control, 64>,
    pub(crate) txbufs: [TxBuf; map::TX_BUF_COUNT as usize],
    /// Filled transmit buffers in fill order (SEND takes from the front).
    pub(crate) tx_ready: heapless::Deque<u8, { map::TX_BUF_COUNT as usize }>,
    /// Buffers handed to the send-DMA engine, in order.
    pub(crate) tx_inflight: heapless::Deque<u8, { map::TX_BUF_COUNT as usize }>,
    pub(crate) txdma_prod: u32,
    pub(crate) txdma_done: u32,
    pub(crate) data_bufs_busy: u32,
    pub(crate) hdma_prod: u32,
    pub(crate) hdma_done: u32,
    pub(crate) hdma_actions: [HdmaAction; map::HDMA_RING_LEN as usize],
    pub(crate) rxfree_prod: u32,
    pub(crate) rxdone_cons: u32,
    pub(crate) rdma_jobs: heapless::Deque<RdmaJob, { map::RX_BUF_COUNT as usize }>,
    pub(crate) staging_busy: [bool; map::EVT_STAGING_LEN as usize],
    pub(crate) staging_next: u32,
    pub(crate) stats: [u64; STAT_COUNT],
    pub(crate) stats_dirty: bool,
    pub(crate) trace_on: bool,
    pub(crate) trace_prod: u32,
    pub(crate) sdma_state: SdmaState,
    pub(crate) send_state: SendState,
    pub(crate) recv_state: RecvState,
    pub(crate) rdma_state: RdmaState,
    pub(crate) port_rr: u8,
    pub(crate) deadline: Option<u64>,
    pub(crate) running: bool,
    /// Differs between boots of this NIC: SYNC packets carry it.
    pub(crate) boot: u16,
    /// Rate control: streams with a non-zero IDT, the flow-table generation
    /// last read, streams set up so far, the time SDMA waits for (an NDT).
    pub(crate) regulated: u16,
    pub(crate) flow_gen: u32,
    pub(crate) streams_made: u32,
    pub(crate) rate_wait: Option<u64>,
    pub(crate) dispatch_trace: bool,
    pub(crate) dispatch_prod: u32,
    /// A stream was set up since the flow table was last read.
    pub(crate) flow_pending: bool,
    /// Valid flow-table entries at the last read: with none, a new
    /// stream has no flow and the table is not searched for it.
    pub(crate) flow_entries: u16,
}

impl Default for Mcp {
    fn default() -> Self {
        Self::new()
    }
}

const EMPTY_DEQUE: heapless::Deque<EvRef, 128> = heapless::Deque::new();

impl Mcp {
    pub const fn new() -> Mcp {
        Mcp {
            cfg: Config::EMPTY,
            now: 0,
            tokens: Pool::new(SendToken::EMPTY),
            slots: Pool::new(RecvSlot::EMPTY),
            ports: [PortState::EMPTY; nic_abi::NUM_PORTS],
            port_events: [EMPTY_DEQUE; nic_abi::NUM_PORTS],
            txs: Pool::new(TxStream::EMPTY),
            tx_index: heapless::FnvIndexMap::new(),
            rxs: Pool::new(RxStream::EMPTY),
            rx_index: heapless::FnvIndexMap::new(),
            conns: Pool::new(Conn::EMPTY),
            conn_index: heapless::FnvIndexMap::new(),
            conn_cur: NIL,
            conn_queue_len: 0,
            active_tx: heapless::Vec::new(),
            ack_list: heapless::Vec::new(),
            control: heapless::Deque::new(),
            txbufs: [TxBuf::EMPTY; map::TX_BUF_COUNT as usize],
            tx_ready: heapless::Deque::new(),
            tx_inflight: heapless::Deque::new(),
            txdma_prod: 0,
            txdma_done: 0,
            data_bufs_busy: 0,
            hdma_prod: 0,
            hdma_done: 0,
            hdma_actions: [HdmaAction::Nothing; map::HDMA_RING_LEN as usize],
            rxfree_prod: 0,
            rxdone_cons: 0,
            rdma_jobs: heapless::Deque::new(),
            staging_busy: [false; map::EVT_STAGING_LEN as usize],
            staging_next: 0,
            stats: [0; STAT_COUNT],
            stats_dirty: false,
            trace_on: false,
            trace_prod: 0,
            sdma_state: SdmaState::Idle,
            send_state: SendState::Idle,
            recv_state: RecvState::Idle,
            rdma_state: RdmaState::Idle,
            port_rr: 0,
            deadline: None,
            running: false,
            boot: 0,
            regulated: 0,
            flow_gen: 0,
            streams_made: 0,
            rate_wait: None,
            dispatch_trace: false,
            dispatch_prod: 0,
            flow_pending: false,
            flow_entries: 0,
        }
    }

    /// Read the configuration, give every receive buffer to the rx-DMA
    /// engine, and report FW_RUNNING (or FW_HALTED with the reason).
    pub fn init(&mut self, hw: &mut impl Hw) -> Result<(), InitError> {
        *self = Mcp::new();
        let cfg = match Config::read(hw) {
            Ok(c) => c,
            Err(e) => {
                hw.set_reg32(regs::FW_STATUS, regs::FW_HALTED);
                return Err(e);
            }
        };
        self.cfg = cfg;
        self.now = hw.rtc();
        let n = ((hw.reg32(regs::BOOT_COUNT) as u64) << 32) ^ self.now;
        self.boot = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as u16;
        // Pick up the engines' counters as they are (a warm restart).
        self.flow_gen = hw.reg32(regs::FLOW_GEN);
        // Entries a host left in the table (a warm restart) count from now.
        self.reload_flows(hw, &mut Work::default());
        self.dispatch_prod = hw.reg32(regs::DISPATCH_TRACE_PROD);
        self.hdma_prod = hw.reg32(regs::HDMA_DONE);
        hw.set_reg32(regs::HDMA_PROD, self.hdma_prod);
        self.hdma_done = self.hdma_prod;
        self.txdma_prod = hw.reg32(regs::TXDMA_DONE);
        hw.set_reg32(regs::TXDMA_PROD, self.txdma_prod);
        self.txdma_done = self.txdma_prod;
        self.rxdone_cons = hw.reg32(regs::RXDONE_PROD);
        hw.set_reg32(regs::RXDONE_CONS, self.rxdone_cons);
        self.rxfree_prod = hw.reg32(regs::RXFREE_CONS);
        for i in 0..map::RX_BUF_COUNT {
            self.post_rx_buffer(hw, i as u8);
        }
        for p in 0..nic_abi::NUM_PORTS {
            hw.store_u32(nic_abi::port::port_reg(p, nic_abi::port::FW_STATE), 0);
        }
        for s in ALL_STATS {
            hw.store_u64(stat_offset(s), 0);
        }
        self.running = true;
        hw.set_reg32(regs::FW_STATUS, regs::FW_RUNNING);
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// One pass of the main loop.
    pub fn poll(&mut self, hw: &mut impl Hw) -> Work {
        let mut w = Work::default();
        if !self.running {
            return w;
        }
        self.now = hw.rtc();
        self.trace_on = hw.reg32(regs::TRACE_ENABLE) != 0;
        self.dispatch_trace = hw.reg32(regs::DISPATCH_TRACE_ENABLE) != 0;
        let gen = hw.reg32(regs::FLOW_GEN);
        if gen != self.flow_gen {
            self.flow_gen = gen;
            self.reload_flows(hw, &mut w);
        }
        self.stats[Stat::Polls as usize] += 1;
        self.check_ports(hw, &mut w);
        // Completions first: they free buffers the machines need.
        self.hdma_completions(hw);
        self.txdma_completions(hw);
        // RECV: packets from the wire (acks free window space for SDMA).
        self.recv_step(hw, &mut w);
        // RDMA: payloads to host memory.
        self.rdma_step(hw, &mut w);
        // SDMA: descriptors, then timers, then fill transmit buffers.
        self.sdma_intake(hw, &mut w);
        self.timers(hw, &mut w);
        self.sdma_fill(hw, &mut w);
        // SEND: to the wire.
        self.send_step(hw, &mut w);
        // Events to the hosts.
        self.flush_events(hw, &mut w);
        self.compute_deadline();
        self.write_stats(hw);
        w
    }

    /// RTC tick when a timer falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Current states of the four machines (for debuggers and tests).
    pub fn states(&self) -> (SdmaState, SendState, RecvState, RdmaState) {
        (self.sdma_state, self.send_state, self.recv_state, self.rdma_state)
    }

    /// A counter as the firmware holds it.
    pub fn stat(&self, s: Stat) -> u64 {
        self.stats[s as usize]
    }

    pub(crate) fn bump(&mut self, s: Stat, n: u64) {
        self.stats[s as usize] += n;
        self.stats_dirty = true;
    }

    fn write_stats(&mut self, hw: &mut impl Hw) {
        if !self.stats_dirty {
            return;
        }
        self.stats_dirty = false;
        for s in ALL_STATS {
            hw.store_u64(stat_offset(s), self.stats[s as usize]);
        }
    }

    fn compute_deadline(&mut self) {
        let mut d: Option<u64> = None;
        let mut at = |t: u64| {
            d = Some(match d {
                Some(x) => x.min(t),
                None => t,
            });
        };
        for &s in self.active_tx.iter() {
            let st = &self.txs[s];
            if st.outstanding() != 0 {
                at(st.last_progress.saturating_add(st.rto(self.cfg.rto)));
            }
            if st.hold_until > self.now {
                at(st.hold_until);
            }
        }
        for &r in self.ack_list.iter() {
            at(self.rxs[r].ack_due);
        }
        for p in self.ports.iter() {
            if let Some(t) = p.alarm_at {
                at(t);
            }
        }
        if let Some(t) = self.rate_wait {
            at(t);
        }
        self.deadline = d;
    }

    /// Open/close handshakes with the driver.
    fn check_ports(&mut self, hw: &mut impl Hw, w: &mut Work) {
        use nic_abi::port::*;
        for p in 0..nic_abi::NUM_PORTS {
            let want = hw.load_u32(port_reg(p, STATE)) == STATE_OPEN;
            let gen = hw.load_u32(port_reg(p, GENERATION));
            let cur = self.ports[p];
            if want && (!cur.open || cur.generation != gen) {
                if cur.open {
                    self.close_port(hw, p);
                }
                self.open_port(hw, p, gen);
                w.events += 1;
            } else if !want && cur.open {
                self.close_port(hw, p);
                w.events += 1;
            }
        }
    }

    fn open_port(&mut self, hw: &mut impl Hw, p: usize, gen: u32) {
        use nic_abi::port::*;
        let evq_len = hw.load_u32(port_reg(p, EVQ_LEN));
        let ps = &mut self.ports[p];
        *ps = PortState::EMPTY;
        ps.open = true;
        ps.generation = gen;
        ps.evq_bus = hw.load_u64(port_reg(p, EVQ_BUS));
        ps.evq_len = if evq_len.is_power_of_two() { evq_len } else { 0 };
        // The driver zeroes SEND_PROD and SEND_CONS before opening.
        ps.cons = 0;
        hw.store_u32(port_reg(p, SEND_CONS), 0);
        self.port_events[p].clear();
        let _ = self.port_events[p].push_back(EvRef::PortOpened);
        hw.store_u32(port_reg(p, EVQ_PRODUCED), 0);
        hw.store_u32(port_reg(p, FW_GENERATION), gen);
        hw.store_u32(port_reg(p, FW_STATE), STATE_OPEN);
    }

    /// Close a port: its receive buffers, queued sends and owed events go;
    /// streams keep their sequence numbers (later sends SYNC).
    fn close_port(&mut self, hw: &mut impl Hw, p: usize) {
        use nic_abi::port::*;
        // Receiving streams into this port: drop partial messages (their
        // claimed buffers go back on the port's list, freed just below).
        let rx: heapless::Vec<u16, MAX_STREAMS> =
            self.rxs.live_indices().filter(|&i| self.rxs[i].local_port as usize == p).collect();
        for r in rx {
            self.abort_assembly(r);
        }
        // Receive slots.
        let mut s = self.ports[p].slots_head;
        while s != NIL {
            let next = self.slots[s].next;
            self.slots.free(s);
            s = next;
        }
        // Events owed: free what they hold.
        while let Some(ev) = self.port_events[p].pop_front() {
            match ev {
                EvRef::Token(t) => self.tokens.free(t),
                EvRef::Slot(s) => self.slots.free(s),
                _ => {}
            }
        }
        // Streams from this port: abandon their tokens.
        let streams: heapless::Vec<u16, MAX_STREAMS> =
            self.txs.live_indices().filter(|&i| self.txs[i].local_port as usize == p).collect();
        for st in streams {
            self.abandon_stream(st, None);
        }
        // Gets waiting for answers on this port.
        let waiting: heapless::Vec<u16, MAX_TOKENS> = self
            .tokens
            .live_indices()
            .filter(|&t| self.tokens[t].port as usize == p && !self.tokens[t].is_internal())
            .collect();
        for t in waiting {
            if self.tokens[t].state == TokState::AwaitGet {
                self.tokens.free(t);
            }
        }
        self.ports[p] = PortState::EMPTY;
        hw.store_u32(port_reg(p, FW_STATE), STATE_CLOSED);
    }

    /// Give receive buffer `i` back to the rx-DMA engine.
    pub(crate) fn post_rx_buffer(&mut self, hw: &mut impl Hw, i: u8) {
        let slot = nic_abi::rings::slot(
            map::RXFREE_RING,
            map::RXFREE_RING_LEN,
            nic_abi::rings::RXFREE_SIZE,
            self.rxfree_prod,
        );
        hw.store_u32(slot, i as u32);
        self.rxfree_prod = self.rxfree_prod.wrapping_add(1);
        hw.set_reg32(regs::RXFREE_PROD, self.rxfree_prod);
    }
}

#[cfg(test)]
mod tests;
