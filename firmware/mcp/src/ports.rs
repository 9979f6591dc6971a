//! The ports' open and close handshakes with the driver: the core reads
//! the port windows when `PORT_NEWS` moved, and tells each machine of a
//! port opened or closed (each drops its own part of a closed one).

use crate::hw::Hw;
use crate::records::*;
use crate::{offload, shared, Mcp, Work};
use nic_abi::regs;
use nic_abi::stats::Stat;
use nic_abi::NUM_PORTS;

impl Mcp {
    /// Open/close handshakes with the driver. The port windows' `STATE`
    /// and `GENERATION` are read only when `PORT_NEWS` moved since the
    /// last look (every port's, on eight cache lines of their own, at
    /// every pass, was most of what a pass missed in the host's caches
    /// on a large simulated cluster); the privileged side moves it after
    /// any of those words may have changed, and a value it did not mean
    /// only costs one look.
    pub(crate) fn check_ports(&mut self, hw: &mut impl Hw, w: &mut Work) {
        use nic_abi::port::*;
        let news = hw.reg(regs::PORT_NEWS);
        if self.port_news == Some(news) {
            return;
        }
        self.port_news = Some(news);
        for p in 0..NUM_PORTS {
            let cur = self.shared.ports[p];
            if hw.load_u32(port_reg(p, STATE)) == STATE_OPEN {
                // A port that stays closed needs no second word.
                let gen = hw.load_u32(port_reg(p, GENERATION));
                if !cur.open || cur.generation != gen {
                    if cur.open {
                        self.close_port(hw, p);
                    }
                    self.open_port(hw, p, gen);
                    w.events += 1;
                }
            } else if cur.open {
                self.close_port(hw, p);
                w.events += 1;
            }
        }
    }

    fn open_port(&mut self, hw: &mut impl Hw, p: usize, gen: u32) {
        use nic_abi::port::*;
        let evq_len = hw.reg(nic_abi::regs::port_evq_len(p));
        let evq_bus = hw.reg(nic_abi::regs::port_evq_bus(p));
        let cx = &mut self.shared;
        cx.xlat.read_slice(hw, p);
        // The event queue: a power of two of entries, all of it in the
        // port's slice of host memory (which also keeps its end below 2^64).
        let evq_bytes = evq_len as u64 * nic_abi::event::EVENT_SIZE as u64;
        let evq_ok = evq_len.is_power_of_two() && cx.xlat.in_slice(p as u8, evq_bus, evq_bytes);
        cx.ports[p] = shared::PortOpen { open: true, generation: gen, refused: !evq_ok };
        cx.credits[p] = shared::Credits::default();
        hw.store_u32(port_reg(p, FW_GENERATION), gen);
        if !evq_ok {
            // No event queue of its own: the port is not served, and says
            // so (the driver reports it); nothing is written anywhere.
            cx.bump(hw, Stat::Errors, 1);
            log_warn!("port {=usize} refused: its event queue is not in its memory", p);
            hw.store_u32(port_reg(p, FW_STATE), STATE_REFUSED);
            return;
        }
        self.rdma.port_opened(p, evq_bus, evq_len);
        // The driver zeroes SEND_PROD and SEND_CONS before opening.
        self.sdma.port_opened(p);
        hw.store_u32(port_reg(p, SEND_CONS), 0);
        cx.events[p].clear();
        let _ = cx.events[p].push_back(EvRef::PortOpened);
        cx.events_owed |= 1 << p;
        hw.store_u32(port_reg(p, EVQ_PRODUCED), 0);
        hw.store_u32(port_reg(p, FW_STATE), STATE_OPEN);
        log_info!("port {=usize} open (generation {=u32})", p, gen);
    }

    /// Close a port: each machine drops its part (RECV its partial
    /// messages and receive buffers, RDMA the events owed, SDMA the queued
    /// sends; streams keep their sequence numbers, later sends SYNC), and
    /// gets still waiting for an answer go.
    fn close_port(&mut self, hw: &mut impl Hw, p: usize) {
        use nic_abi::port::*;
        log_info!("port {=usize} closed", p);
        let cx = &mut self.shared;
        self.recv.port_closed(cx, hw, p);
        self.rdma.port_closed(cx, p);
        self.sdma.port_closed(cx, p);
        let mut w = Work::default();
        self.offloads.port_closed(&mut offload::Services::new(cx, hw, &mut w), p as u8);
        let cx = &mut self.shared;
        let waiting: heapless::Vec<TokenId, MAX_TOKENS> = cx
            .tokens
            .live_indices()
            .filter(|&t| {
                let tok = &cx.tokens[t];
                tok.port as usize == p && !tok.is_internal() && tok.state == TokState::AwaitGet
            })
            .collect();
        for t in waiting {
            cx.tokens.free(t);
        }
        cx.ports[p] = shared::PortOpen { open: false, generation: 0, refused: false };
        cx.credits[p] = shared::Credits::default();
        cx.port_tables_closed(hw, p);
        hw.store_u32(port_reg(p, FW_STATE), STATE_CLOSED);
    }
}
