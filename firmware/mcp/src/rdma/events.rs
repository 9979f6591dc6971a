//! RDMA's events: the owed events composed (unicast ones straight into
//! a staging slot), staged in SRAM and written into the ports' event
//! queues in host memory by host-DMA, while the queues have room.

use super::{Rdma, RdmaState};
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::records::*;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::DescKind;
use nic_abi::event::{Event, EventKind, SendStatus, EVENT_SIZE, INLINE_MAX};
use nic_abi::map;
use nic_abi::port::{port_reg, EVQ_CONSUMED, EVQ_PRODUCED};
use nic_abi::rings::{DmaDir, HostDmaCmd};
use nic_abi::trace::Cause;

impl Rdma {
    /// Write owed events into the ports' event queues (host memory).
    /// A step of the machine (kept out of line: a debugger breaks here).
    /// With nothing owed and nothing moving it returns before any
    /// register is saved (the work is a tail call).
    #[inline(never)]
    pub fn flush_events(&mut self, cx: &mut Shared, sdma: &Sdma, hw: &mut impl Hw, w: &mut Work) {
        if cx.events_owed == 0 && self.xlat_wait.is_none() && self.is_idle(cx) {
            return;
        }
        self.flush_step(cx, sdma, hw, w);
    }

    /// The flush's work: the events, then the state.
    #[inline(never)]
    fn flush_step(&mut self, cx: &mut Shared, sdma: &Sdma, hw: &mut impl Hw, w: &mut Work) {
        let behind = if cx.events_owed != 0 { self.write_events(cx, sdma, hw, w) } else { None };
        let next = match behind {
            Some(port) => RdmaState::HostBehind { port },
            None => self.at_rest(cx),
        };
        let cause = if behind.is_some() { Cause::HostBehind } else { Cause::Drained };
        self.go(cx, hw, next, cause);
    }

    /// The owed events written, port by port, while there is room; the
    /// port whose host is behind (its queue full), if one is.
    #[inline(never)]
    fn write_events(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        w: &mut Work,
    ) -> Option<u8> {
        let mut behind = None;
        // The ports owed events, in port order.
        let mut owed = cx.events_owed;
        'ports: while owed != 0 {
            let p = owed.trailing_zeros() as usize;
            owed &= owed - 1;
            if cx.events[p].is_empty() {
                cx.events_owed &= !(1 << p);
                continue;
            }
            while let Some(&ev) = cx.events[p].front() {
                let q = self.evq[p];
                if !cx.is_open(p) || q.len == 0 {
                    break;
                }
                let consumed = hw.load_u32(port_reg(p, EVQ_CONSUMED));
                if q.produced.wrapping_sub(consumed) >= q.len {
                    behind = Some(p as u8);
                    break; // the host is behind: its queue is full
                }
                if cx.hdma.space() == 0 {
                    break 'ports;
                }
                cx.events[p].pop_front();
                self.go(cx, hw, RdmaState::Event { port: p as u8 }, Cause::EventOwed);
                // The staging slot of the ring slot the command takes.
                let staging = map::EVT_STAGING + cx.hdma.next_slot() * EVENT_SIZE;
                let seq = q.produced.wrapping_add(1);
                if !stage_unicast(cx, hw, ev, staging, seq) {
                    stage_event(cx, sdma, hw, p, ev, staging, seq);
                }
                let at = q.bus + (q.produced & (q.len - 1)) as u64 * EVENT_SIZE as u64;
                let cmd = HostDmaCmd {
                    dir: DmaDir::SramToHost,
                    len: EVENT_SIZE,
                    sram: staging,
                    host: at,
                    cookie: 0,
                };
                cx.hdma.post(hw, cmd, HdmaAction::Nothing);
                w.dma_cmds += 1;
                w.events += 1;
                self.evq[p].produced = q.produced.wrapping_add(1);
                hw.store_u32(port_reg(p, EVQ_PRODUCED), self.evq[p].produced);
                release_event_source(cx, p, ev);
            }
            if cx.events[p].is_empty() {
                cx.events_owed &= !(1 << p);
            }
        }
        behind
    }
}

/// The event of a unicast message received, sent, put or got, composed
/// as its eight words straight into staging slot `staging` (the layout
/// of [`Event::encode`]). False for any other event: [`stage_event`]
/// composes it.
#[inline(always)]
fn stage_unicast(cx: &Shared, hw: &mut impl Hw, ev: EvRef, staging: u32, seq: u32) -> bool {
    let b = |x: u8, at: u32| (x as u64) << at;
    let (w0, w1, addr, tag, inline) = match ev {
        EvRef::Slot(s) => {
            let sl = cx.slot(hw, s);
            if sl.error != 0 || Fan::slot_is_its(&sl) {
                return false;
            }
            let n = (sl.inline_len as u32).min(INLINE_MAX as u32);
            let inline = if n == 0 {
                (0, 0)
            } else {
                let at = map::rx_inline(s.raw() as u32);
                let (lo, hi) = (hw.load_ram_u64(at), hw.load_ram_u64(at + 8));
                // Only the message's bytes: the rest of the slot's room
                // holds an earlier message's.
                let mask = |k: u32| if k >= 8 { u64::MAX } else { (1u64 << (8 * k)) - 1 };
                (lo & mask(n), hi & mask(n.saturating_sub(8)))
            };
            let w0 = b(EventKind::Received as u8, 0)
                | b(sl.prio as u8, 16)
                | b(sl.src_port, 24)
                | (sl.src_node as u64) << 32
                | b(sl.size_class, 48)
                | b(sl.inline_len, 56);
            (w0, sl.msg_len as u64, sl.vaddr, sl.tag, inline)
        }
        EvRef::Token(t) => {
            let tok = &cx.tokens[t];
            let kind = match tok.kind {
                TokKind::Send => EventKind::Sent,
                TokKind::Put => EventKind::PutDone,
                TokKind::Get => EventKind::GetDone,
                _ => return false,
            };
            let status = match tok.state {
                TokState::Completing(s) => s,
                _ => SendStatus::Ok as u8,
            };
            let w0 = b(kind as u8, 0)
                | b(status, 8)
                | b(tok.prio as u8, 16)
                | b(tok.target_port, 24)
                | (tok.target_node as u64) << 32
                | b(tok.size_class, 48);
            (w0, tok.len as u64 | (tok.desc_kind as u64) << 32, tok.local, tok.tag, (0, 0))
        }
        _ => return false,
    };
    let words = [w0, w1, addr, tag, cx.now, inline.0, inline.1, (seq as u64) << 32];
    for (i, &x) in words.iter().enumerate() {
        hw.store_ram_u64(staging + 8 * i as u32, x);
    }
    true
}

/// Any event, composed as an [`Event`] and encoded into staging slot
/// `staging` (out of line: its `Event` stays off the unicast path's
/// stack).
#[inline(never)]
fn stage_event(
    cx: &mut Shared,
    sdma: &Sdma,
    hw: &mut impl Hw,
    p: usize,
    ev: EvRef,
    staging: u32,
    seq: u32,
) {
    let mut e = compose_event(cx, sdma, hw, p, ev);
    match ev {
        EvRef::Slot(s) => {
            let n = (e.inline_len as usize).min(e.inline.len());
            hw.read(map::rx_inline(s.raw() as u32), &mut e.inline[..n]);
        }
        EvRef::Offload(i) => cx.offload.events.free(i),
        _ => {}
    }
    e.seq = seq;
    e.rtc = cx.now;
    let mut b = [0u8; EVENT_SIZE as usize];
    e.encode(&mut b);
    hw.write(staging, &b);
}

fn compose_event(cx: &Shared, sdma: &Sdma, hw: &impl Hw, p: usize, ev: EvRef) -> Event {
    match ev {
        EvRef::PortOpened => Event::empty(EventKind::PortOpened),
        EvRef::Offload(i) => crate::offload::CoreSide::event(hw, i),
        EvRef::Alarm => {
            let mut e = Event::empty(EventKind::Alarm);
            e.tag = sdma.alarm_tag(p);
            e
        }
        EvRef::Token(t) => {
            let tok = cx.tokens[t];
            let status = match tok.state {
                TokState::Completing(s) => s,
                _ => SendStatus::Ok as u8,
            };
            let kind = match tok.kind {
                TokKind::Send => EventKind::Sent,
                TokKind::Put => EventKind::PutDone,
                TokKind::Get => EventKind::GetDone,
                k => Fan::token_kind(k).unwrap_or(EventKind::Error),
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
            Fan::token_event(&tok, &mut e);
            e
        }
        EvRef::Lost(t, part) => Fan::lost_event(cx, hw, t, part),
        EvRef::Slot(s) => {
            let sl = cx.slot(hw, s);
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
            Fan::slot_event(&sl, &mut e);
            e
        }
    }
}

/// The event is written: free the token or slot that held it and give
/// the port its token back.
fn release_event_source(cx: &mut Shared, p: usize, ev: EvRef) {
    match ev {
        EvRef::Token(t) => {
            let tok = cx.tokens[t];
            let counted = match DescKind::from_u8(tok.desc_kind) {
                Some(k) => k.uses_send_token(),
                // A descriptor too broken to name its kind took a send token.
                None => tok.kind == TokKind::Error,
            };
            if counted {
                let c = &mut cx.credits[p];
                if c.send_in_use() > 0 {
                    c.send_returned = c.send_returned.wrapping_add(1);
                }
            }
            Fan::token_freed(cx, t);
            cx.tokens.free(t);
        }
        EvRef::Slot(s) => {
            let c = &mut cx.credits[p];
            if c.recv_in_use() > 0 {
                c.recv_returned = c.recv_returned.wrapping_add(1);
            }
            cx.slots.free(s);
        }
        _ => {}
    }
}
