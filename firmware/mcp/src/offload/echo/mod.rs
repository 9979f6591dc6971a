//! The echo offload: a packet the NIC answers itself, no host involved.
//!
//! A host posts an Echo descriptor naming a node; this NIC sends that node
//! an `EchoRequest`; the MCP there answers at once with an `EchoReply`
//! (its host never hears of it); here the reply becomes one `Echo` event
//! for the asking port with the round trip in RTC ticks. No answer within
//! the send timeout: the event says `Unreachable`. Requests and answers
//! are not sequenced and not retransmitted.
//!
//! Owns: descriptor kind `DescKind::Echo`, packet types `EchoRequest` and
//! `EchoReply`, SRAM region `map::ECHO` (one record per request in
//! flight), one timer (the earliest request to send, time out or report).
//! Touches nothing else: the core's services send its packets and post
//! its events.

use super::{Intake, Offload, Packet, Received, Region, Services};
use crate::hw::Hw;
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::{ErrorCause, Event, EventKind, SendStatus};
use nic_abi::map::{ECHO, ECHO_SLOTS, ECHO_SLOT_SIZE};
use nic_abi::packet::{Addr, EchoRepr, EchoView, PacketType, PacketView};
use nic_abi::stats::Stat;
use nic_abi::Priority;

/// A request's record in SRAM (`map::ECHO`):
/// ```text
///  0 port u8   1 status u8   2 node u16   4 cookie u32
///  8 sent u64 (RTC when it went; once answered, the round trip)
/// 16 tag u64  24 reserved
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Request {
    port: u8,
    status: u8,
    node: u16,
    cookie: u32,
    sent: u64,
    tag: u64,
}

impl Request {
    fn at(i: u32) -> u32 {
        ECHO + i * ECHO_SLOT_SIZE
    }

    fn load(hw: &impl Hw, i: u32) -> Request {
        let mut b = [0u8; 24];
        hw.read(Self::at(i), &mut b);
        let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
        Request {
            port: b[0],
            status: b[1],
            node: u16::from_le_bytes([b[2], b[3]]),
            cookie: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            sent: w(8),
            tag: w(16),
        }
    }

    fn store(&self, hw: &mut impl Hw, i: u32) {
        let mut b = [0u8; 24];
        b[0] = self.port;
        b[1] = self.status;
        b[2..4].copy_from_slice(&self.node.to_le_bytes());
        b[4..8].copy_from_slice(&self.cookie.to_le_bytes());
        b[8..16].copy_from_slice(&self.sent.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        hw.write(Self::at(i), &b);
    }
}

/// The echo offload's state besides its SRAM: which records are in use
/// and what each waits for, as bit sets (bit `i`: record `i`).
pub struct Echo {
    /// Records in use.
    live: u16,
    /// Requests not yet on the wire (no transmit buffer was free).
    unsent: u16,
    /// Answered or timed out: the event is still to be posted.
    done: u16,
    /// The next request's cookie.
    next_cookie: u32,
    /// The earliest time a request sent and unanswered times out.
    timeout_at: Option<u64>,
}

impl Echo {
    /// Send request `i` if a transmit buffer is free; true if it went.
    fn send_request<H: Hw>(&mut self, sv: &mut Services<'_, H>, i: u32) -> bool {
        let mut r = Request::load(sv.hw, i);
        r.sent = sv.now();
        let to = (sv.config().node, r.node, (r.port, r.port));
        let h = EchoRepr { addr: addr(to), reply: false, cookie: r.cookie, sent: r.sent }.emit();
        if !sv.send(&h, &[]) {
            return false;
        }
        r.store(sv.hw, i);
        self.unsent &= !(1 << i);
        let t = r.sent.saturating_add(sv.config().send_timeout);
        self.timeout_at = Some(self.timeout_at.map_or(t, |x| x.min(t)));
        true
    }

    /// Request `i` ended with `status` (round trip `rtt`): its event is owed.
    fn finish<H: Hw>(&mut self, sv: &mut Services<'_, H>, i: u32, status: SendStatus, rtt: u64) {
        let mut r = Request::load(sv.hw, i);
        r.status = status as u8;
        r.sent = rtt;
        r.store(sv.hw, i);
        self.done |= 1 << i;
        self.unsent &= !(1 << i);
    }

    /// Post the events owed; a record whose event is posted is free again.
    fn report<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let mut done = self.done;
        while done != 0 {
            let i = done.trailing_zeros();
            done &= done - 1;
            let r = Request::load(sv.hw, i);
            let mut e = Event::empty(EventKind::Echo);
            e.status = r.status;
            e.node = r.node;
            e.tag = r.tag;
            e.addr = r.sent;
            if sv.is_open(r.port) && !sv.event(r.port, &e) {
                continue; // no room: next pass
            }
            self.done &= !(1 << i);
            self.live &= !(1 << i);
        }
    }

    /// Time out the requests sent longest ago; the next timeout.
    fn time_out<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let now = sv.now();
        let limit = sv.config().send_timeout;
        let mut next: Option<u64> = None;
        let mut waiting = self.live & !self.unsent & !self.done;
        while waiting != 0 {
            let i = waiting.trailing_zeros();
            waiting &= waiting - 1;
            let r = Request::load(sv.hw, i);
            let t = r.sent.saturating_add(limit);
            if t <= now {
                sv.timer_handled();
                self.finish(sv, i, SendStatus::Unreachable, 0);
            } else {
                next = Some(next.map_or(t, |x| x.min(t)));
            }
        }
        self.timeout_at = next;
    }

    /// Answer request `q` from another NIC.
    fn answer<H: Hw>(&mut self, sv: &mut Services<'_, H>, q: EchoView<'_>) {
        let a = q.addr();
        let to = (sv.config().node, a.src_node(), (a.dst_port(), a.src_port()));
        let h = EchoRepr { addr: addr(to), reply: true, cookie: q.cookie(), sent: q.sent() }.emit();
        if !sv.send(&h, &[]) {
            // No transmit buffer: the asker times out.
            sv.count(Stat::Drops, 1);
        }
    }

    /// A reply `p`: the request it answers is done.
    fn replied<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: EchoView<'_>) {
        let mut waiting = self.live & !self.unsent & !self.done;
        while waiting != 0 {
            let i = waiting.trailing_zeros();
            waiting &= waiting - 1;
            let r = Request::load(sv.hw, i);
            if r.cookie == p.cookie() && r.node == p.addr().src_node() {
                let rtt = sv.now().saturating_sub(r.sent);
                self.finish(sv, i, SendStatus::Ok, rtt);
                return;
            }
        }
        // Late (timed out already) or not ours.
        sv.count(Stat::Drops, 1);
    }
}

/// An echo packet's ends: from node `me` to node `node`, from port
/// `ports.0` to port `ports.1`.
fn addr((me, node, ports): (u16, u16, (u8, u8))) -> Addr {
    Addr {
        src_node: me,
        src_port: ports.0,
        dst_node: node,
        dst_port: ports.1,
        priority: Priority::Low,
    }
}

impl Offload for Echo {
    const NAME: &'static str = "echo";
    const DESC_KINDS: &'static [u8] = &[DescKind::Echo as u8];
    const PACKET_TYPES: &'static [u8] =
        &[PacketType::EchoRequest as u8, PacketType::EchoReply as u8];
    const SRAM: &'static [Region] = &[Region { start: ECHO, len: ECHO_SLOTS * ECHO_SLOT_SIZE }];
    const NEW: Echo = Echo { live: 0, unsent: 0, done: 0, next_cookie: 1, timeout_at: None };

    fn init<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        *self = Echo { next_cookie: (sv.boot() as u32) << 16 | 1, ..Self::NEW };
    }

    fn descriptor<H: Hw>(
        &mut self,
        sv: &mut Services<'_, H>,
        port: u8,
        d: &Descriptor,
        _raw: &[u8],
    ) -> Intake {
        if d.target_node >= sv.config().nodes || d.target_node == sv.config().node {
            return Intake::Refused(ErrorCause::BadNode);
        }
        let free = !self.live;
        if free == 0 || free.trailing_zeros() >= ECHO_SLOTS {
            return Intake::Wait;
        }
        let i = free.trailing_zeros();
        let cookie = self.next_cookie;
        self.next_cookie = cookie.wrapping_add(1);
        let r = Request { port, status: 0, node: d.target_node, cookie, sent: 0, tag: d.tag };
        r.store(sv.hw, i);
        self.live |= 1 << i;
        self.unsent |= 1 << i;
        self.send_request(sv, i);
        Intake::Taken
    }

    fn packet<H: Hw>(&mut self, sv: &mut Services<'_, H>, p: &Packet) -> Received {
        match p.header.view() {
            PacketView::Echo(q) if !q.is_reply() => self.answer(sv, q),
            PacketView::Echo(q) => self.replied(sv, q),
            // (Only its own types come to it.)
            _ => {}
        }
        Received::Done
    }

    fn deadline(&self) -> Option<u64> {
        if self.unsent != 0 || self.done != 0 {
            return Some(0); // at the next pass
        }
        self.timeout_at
    }

    fn expire<H: Hw>(&mut self, sv: &mut Services<'_, H>) {
        let mut unsent = self.unsent;
        while unsent != 0 {
            let i = unsent.trailing_zeros();
            unsent &= unsent - 1;
            if !self.send_request(sv, i) {
                break;
            }
        }
        if self.timeout_at.is_some_and(|t| t <= sv.now()) {
            self.time_out(sv);
        }
        self.report(sv);
    }

    fn port_closed<H: Hw>(&mut self, sv: &mut Services<'_, H>, port: u8) {
        let mut live = self.live;
        while live != 0 {
            let i = live.trailing_zeros();
            live &= live - 1;
            if Request::load(sv.hw, i).port == port {
                self.live &= !(1 << i);
                self.unsent &= !(1 << i);
                self.done &= !(1 << i);
            }
        }
    }
}

#[cfg(test)]
mod tests;
