//! RDMA: accepted payloads from receive buffers to host memory (host-DMA,
//! one command per page piece, translated through the port's page table),
//! then events into the ports' event queues in host memory. A message's
//! Received event is queued only after its last packet's copy was posted,
//! and the host-DMA engine completes in order, so the host never sees an
//! event before the data.

use crate::hw::Hw;
use crate::state::*;
use crate::trace::RdmaState;
use crate::{Mcp, Work};
use nic_abi::desc::DescKind;
use nic_abi::event::{Event, EventKind, SendStatus, EVENT_SIZE};
use nic_abi::map;
use nic_abi::packet::HEADER_LEN;
use nic_abi::page_table::page_pieces;
use nic_abi::port::{port_reg, EVQ_CONSUMED, EVQ_PRODUCED};
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::NUM_PORTS;

impl Mcp {
    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn rdma_step(&mut self, hw: &mut impl Hw, w: &mut Work) {
        while let Some(&job) = self.rdma_jobs.front() {
            // A packet spans at most two pages.
            if self.hdma_space() < 3 {
                break;
            }
            self.rdma_jobs.pop_front();
            self.set_rdma(hw, RdmaState::Copy, job.rx_buf as u32);
            let mut pieces: heapless::Vec<(u64, u32, u32), 4> = heapless::Vec::new();
            let mut at = 0u32;
            let mut bad = false;
            for (v, n) in page_pieces(job.vaddr, job.len as u64) {
                match self.translate(hw, job.port, v) {
                    Some(bus) if pieces.push((bus, n as u32, at)).is_ok() => {}
                    // Deregistered while the message was arriving: the
                    // bytes cannot be placed; the event still comes.
                    _ => bad = true,
                }
                at += n as u32;
            }
            if bad {
                self.bump(Stat::Errors, 1);
            }
            let n = pieces.len();
            if n == 0 {
                self.post_rx_buffer(hw, job.rx_buf);
            }
            let src = map::rx_buf(job.rx_buf as u32) + HEADER_LEN as u32;
            for (k, (bus, len, at)) in pieces.into_iter().enumerate() {
                let action =
                    if k + 1 == n { HdmaAction::RxDone(job.rx_buf) } else { HdmaAction::Nothing };
                let cmd = HostDmaCmd {
                    dir: DmaDir::SramToHost,
                    len,
                    sram: src + at,
                    host: bus,
                    cookie: 0,
                };
                self.hdma_post(hw, cmd, action);
                w.dma_cmds += 1;
            }
            if let Some(ev) = job.then {
                if let EvRef::Slot(_) = ev {
                    self.bump(Stat::MessagesReceived, 1);
                }
                self.owe_event(job.port as usize, ev);
            }
        }
        if self.rdma_state == RdmaState::Copy {
            self.set_rdma(hw, RdmaState::Idle, 0);
        }
    }

    /// Write owed events into the ports' event queues (host memory).
    /// A step of the machine (kept out of line: a debugger breaks here).
    #[inline(never)]
    pub(crate) fn flush_events(&mut self, hw: &mut impl Hw, w: &mut Work) {
        for p in 0..NUM_PORTS {
            while let Some(&ev) = self.port_events[p].front() {
                let ps = self.ports[p];
                if !ps.open || ps.evq_len == 0 {
                    break;
                }
                let consumed = hw.load_u32(port_reg(p, EVQ_CONSUMED));
                if ps.evq_produced.wrapping_sub(consumed) >= ps.evq_len {
                    break; // the host is behind: its queue is full
                }
                if self.hdma_space() == 0 {
                    return;
                }
                let Some(slot) = self.free_staging() else { return };
                self.port_events[p].pop_front();
                self.set_rdma(hw, RdmaState::Event, p as u32);
                let mut e = self.compose_event(p, ev);
                e.seq = ps.evq_produced.wrapping_add(1);
                e.rtc = self.now;
                let mut b = [0u8; EVENT_SIZE as usize];
                e.encode(&mut b);
                let staging = map::EVT_STAGING + slot as u32 * EVENT_SIZE;
                hw.write(staging, &b);
                self.staging_busy[slot as usize] = true;
                let at =
                    ps.evq_bus + (ps.evq_produced & (ps.evq_len - 1)) as u64 * EVENT_SIZE as u64;
                let cmd = HostDmaCmd {
                    dir: DmaDir::SramToHost,
                    len: EVENT_SIZE,
                    sram: staging,
                    host: at,
                    cookie: 0,
                };
                self.hdma_post(hw, cmd, HdmaAction::EventDone(slot));
                w.dma_cmds += 1;
                w.events += 1;
                self.ports[p].evq_produced = ps.evq_produced.wrapping_add(1);
                hw.store_u32(port_reg(p, EVQ_PRODUCED), self.ports[p].evq_produced);
                self.release_event_source(p, ev);
            }
        }
        if self.rdma_state == RdmaState::Event {
            self.set_rdma(hw, RdmaState::Idle, 0);
        }
    }

    fn free_staging(&mut self) -> Option<u8> {
        let n = map::EVT_STAGING_LEN;
        for k in 0..n {
            let i = (self.staging_next + k) % n;
            if !self.staging_busy[i as usize] {
                self.staging_next = (i + 1) % n;
                return Some(i as u8);
            }
        }
        None
    }

    fn compose_event(&self, p: usize, ev: EvRef) -> Event {
        match ev {
            EvRef::PortOpened => Event::empty(EventKind::PortOpened),
            EvRef::Alarm => {
                let mut e = Event::empty(EventKind::Alarm);
                e.tag = self.ports[p].alarm_tag;
                e
            }
            EvRef::Token(t) => {
                let tok = self.tokens[t];
                let status = match tok.state {
                    TokState::Completing(s) => s,
                    _ => SendStatus::Ok as u8,
                };
                let kind = match tok.kind {
                    TokKind::Send => EventKind::Sent,
                    TokKind::Put => EventKind::PutDone,
                    TokKind::Get => EventKind::GetDone,
                    _ => EventKind::Error,
                };
                let mut e = Event::empty(kind);
                e.status = status;
                e.priority = tok.prio;
                e.port = tok.target_port;
                e.node = tok.target_node;
                e.size_class = tok.size_class;
                e.len = tok.len;
                e.addr = tok.local;
                e.tag = tok.tag;
                e.desc_kind = tok.desc_kind;
                e
            }
            EvRef::Slot(s) => {
                let sl = self.slots[s];
                if sl.error != 0 {
                    let mut e = Event::empty(EventKind::Error);
                    e.status = sl.error;
                    e.tag = sl.tag;
                    e.desc_kind = DescKind::Provide as u8;
                    return e;
                }
                let mut e = Event::empty(EventKind::Received);
                e.priority = sl.prio;
                e.port = sl.src_port;
                e.node = sl.src_node;
                e.size_class = sl.size_class;
                e.len = sl.msg_len;
                e.addr = sl.vaddr;
                e.tag = sl.tag;
                e.inline_len = sl.inline_len;
                e.inline = sl.inline;
                e
            }
        }
    }

    /// The event is written: free the token or slot that held it and give
    /// the port its token back.
    fn release_event_source(&mut self, p: usize, ev: EvRef) {
        match ev {
            EvRef::Token(t) => {
                let tok = self.tokens[t];
                let counted = match DescKind::from_u8(tok.desc_kind) {
                    Some(k) => k.uses_send_token(),
                    // A descriptor too broken to name its kind took a send token.
                    None => tok.kind == TokKind::Error,
                };
                if counted {
                    self.ports[p].send_tokens = self.ports[p].send_tokens.saturating_sub(1);
                }
                self.tokens.free(t);
            }
            EvRef::Slot(s) => {
                self.ports[p].recv_tokens = self.ports[p].recv_tokens.saturating_sub(1);
                self.slots.free(s);
            }
            _ => {}
        }
    }
}
