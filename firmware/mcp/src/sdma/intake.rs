//! SDMA intake: descriptors from the ports' send rings, validated against
//! the port's page table and the NIC's limits, become send tokens on their
//! stream, receive buffers for RECV, resumes or alarms; a refused one
//! becomes an error event. A descriptor is taken only when what it (or its
//! error event) needs is there: otherwise it waits in the ring.

pub(crate) use super::checks::{complete_token, packets_for, refuse, send_bounds, RawDesc};
use super::checks::{has_room, read_core, registered_range, takes_send_token};
use super::{Sdma, SdmaState};
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout, DESC_KIND as FAN_KIND};
use crate::offload::{Intake, Offloads, Services};
use crate::records::*;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::{DescKind, Descriptor};
use nic_abi::event::{ErrorCause, SendStatus};
use nic_abi::port::{port_reg, send_slot, SEND_CONS, SEND_PROD};
use nic_abi::stats::Stat;
use nic_abi::trace::Cause;
use nic_abi::NUM_PORTS;

/// What `intake_one` did.
enum Taken {
    Nothing,
    One,
    /// A slot whose descriptor the look-ahead took in an earlier pass:
    /// passed over, not taken again (costs no budget: a pass that only
    /// passed over such slots would do no work, and the descriptors after
    /// them would wait for the next doorbell).
    Passed,
    /// Taken, and the intake stops for the pass: a fan-out's first packet
    /// leaves before the next descriptor is taken (a relay's deepest
    /// child first).
    Last,
}

/// Descriptors taken per pass, all ports together.
pub(crate) const INTAKE_BUDGET: u32 = 8;
/// How far past a waiting send the intake looks for receive buffers.
const AHEAD_MAX: u32 = 32;

impl Sdma {
    /// Descriptors: a pass no open port posted to since the last look
    /// costs one load per open port and changes nothing (the round robin
    /// moves on only when the rings are read, so a pass the summary lets
    /// the core skip leaves the machine as running it would); otherwise
    /// the ports' rings are read (`intake_ports`). A step of the machine,
    /// kept out of line (a debugger breaks here) and short.
    #[inline(never)]
    pub fn intake(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        offloads: &mut Offloads,
        w: &mut Work,
    ) {
        // Nothing posted: nothing to take, none to look past (`take_ahead`
        // needs two posted), and the machine's state stays.
        if self.posted(cx, hw) {
            self.intake_ports(cx, hw, offloads, w);
        }
    }

    /// Has an open port descriptors in its ring not yet taken? (A port is
    /// served from its opening to its closing: `serving`.)
    #[inline(always)]
    fn posted(&self, cx: &Shared, hw: &impl Hw) -> bool {
        let mut ports = self.serving;
        while ports != 0 {
            let p = ports.trailing_zeros() as usize;
            ports &= ports - 1;
            if cx.is_open(p) && hw.load_u32(port_reg(p, SEND_PROD)) != self.cons[p] {
                return true;
            }
        }
        false
    }

    /// Take what the ports posted (kept out of line: its frame is large).
    #[inline(never)]
    fn intake_ports(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        offloads: &mut Offloads,
        w: &mut Work,
    ) {
        let before = self.state;
        let mut budget = INTAKE_BUDGET;
        // The ports served, in round-robin order from `port_rr`: bit k of
        // `order` is port `port_rr + k` (the others are not looked at).
        let rr = self.port_rr as u32 % NUM_PORTS as u32;
        let all = (1u32 << NUM_PORTS) - 1;
        let served = self.serving as u32;
        let mut order = ((served >> rr) | (served << (NUM_PORTS as u32 - rr))) & all;
        while order != 0 {
            let k = order.trailing_zeros() as usize;
            order &= order - 1;
            let p = (rr as usize + k) % NUM_PORTS;
            // A closed port is passed over before anything is set up for
            // taking from its ring (the compiler hoists that set-up out
            // of the loop below, to here).
            if !cx.is_open(p) {
                continue;
            }
            while budget > 0 && cx.is_open(p) {
                match self.intake_one(cx, hw, p, offloads, w) {
                    Taken::Nothing => {
                        budget = self.take_ahead(cx, hw, p, budget, w);
                        break;
                    }
                    Taken::One => budget -= 1,
                    Taken::Passed => {}
                    Taken::Last => budget = 0,
                }
            }
        }
        self.port_rr = ((self.port_rr as usize + 1) % NUM_PORTS) as u8;
        // Descriptors left in a ring (the budget ran out, or they wait
        // for tokens or translations): the next pass looks again whatever
        // the news.
        self.intake_left = self.posted(cx, hw);
        // Back to what the machine was waiting for before.
        self.go(cx, hw, before, Cause::Descriptor);
    }

    /// Take one descriptor from port `p`'s ring. Nothing: nothing to take,
    /// or not now (no token or stream free: the descriptor stays in the ring).
    fn intake_one(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        offloads: &mut Offloads,
        w: &mut Work,
    ) -> Taken {
        let prod = hw.load_u32(port_reg(p, SEND_PROD));
        let cons = self.cons[p];
        if prod == cons {
            return Taken::Nothing;
        }
        if self.ahead[p] & 1 != 0 {
            // Taken before, past a descriptor that waited.
            self.ahead[p] >>= 1;
            self.cons[p] = cons.wrapping_add(1);
            hw.store_u32(port_reg(p, SEND_CONS), self.cons[p]);
            return Taken::Passed;
        }
        let (raw, parsed) = read_core(hw, send_slot(p, cons));
        let kind_byte = raw.kind;
        log_trace!("port {=usize}: descriptor {=u32} of kind {=u8}", p, cons, kind_byte);
        if Offloads::owns_kind(kind_byte) {
            cx.offloads_live = true;
            return self.intake_offload(cx, hw, p, offloads, w);
        }
        if !has_room(cx, p, raw, &parsed) || self.stream_waits(cx, p, parsed.as_ref().ok()) {
            return Taken::Nothing;
        }
        // The memory it names, page by page through the translation cache:
        // a page whose translation is being read keeps the descriptor in
        // the ring (the pages found so far stay found).
        let reg_ok = match self.range_check(cx, hw, p, parsed.as_ref().ok()) {
            Some(ok) => ok,
            None => {
                self.go(cx, hw, SdmaState::TranslateWait { port: p as u8 }, Cause::NoRoom);
                return Taken::Nothing;
            }
        };
        if Fan::owns_kind(kind_byte) {
            cx.offloads_live = true;
            return match Fan::intake(self, cx, hw, p, (prod, cons), reg_ok, w) {
                true => Taken::Last,
                false => Taken::Nothing,
            };
        }
        self.go(cx, hw, SdmaState::Intake { port: p as u8 }, Cause::Descriptor);
        self.cons[p] = cons.wrapping_add(1);
        self.ahead[p] >>= 1;
        self.checked[p] = 0;
        hw.store_u32(port_reg(p, SEND_CONS), self.cons[p]);
        self.take(cx, hw, p, raw, &parsed, reg_ok, w);
        Taken::One
    }

    /// The descriptor at the head of port `p`'s ring is of a kind an
    /// offload owns: read whole, decoded, handed to it, and taken or
    /// refused as it says (a refusal is an Error event, as the core's
    /// own). Cold and out of line: its frame (the descriptor's bytes) is
    /// not the unicast intake's.
    #[cold]
    #[inline(never)]
    fn intake_offload(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        offloads: &mut Offloads,
        w: &mut Work,
    ) -> Taken {
        let mut b = [0u8; nic_abi::desc::DESC_SIZE as usize];
        hw.read(send_slot(p, self.cons[p]), &mut b);
        let b = &b[..];
        let parsed = Descriptor::decode(b);
        let raw = RawDesc::of(b);
        if !has_room(cx, p, raw, &parsed) {
            return Taken::Nothing;
        }
        let res = match parsed {
            Ok(d) => {
                let mut sv = Services::new(cx, hw, w);
                match offloads.descriptor(&mut sv, p as u8, d.kind as u8, &d, b) {
                    Some(r) => r,
                    None => Intake::Refused(ErrorCause::BadKind),
                }
            }
            Err(cause) => Intake::Refused(cause),
        };
        if res == Intake::Wait {
            return Taken::Nothing;
        }
        self.go(cx, hw, SdmaState::Intake { port: p as u8 }, Cause::Descriptor);
        w.descriptors += 1;
        self.cons[p] = self.cons[p].wrapping_add(1);
        self.ahead[p] >>= 1;
        self.checked[p] = 0;
        hw.store_u32(port_reg(p, SEND_CONS), self.cons[p]);
        if let Intake::Refused(cause) = res {
            refuse(cx, hw, p, raw, cause, takes_send_token(raw, &parsed));
        }
        Taken::One
    }

    /// Validate and take descriptor `b` (`parsed`) of port `p`, or refuse
    /// it with an error event.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        raw: RawDesc,
        parsed: &Result<Descriptor, ErrorCause>,
        reg_ok: bool,
        w: &mut Work,
    ) {
        w.descriptors += 1;
        let takes_send = takes_send_token(raw, parsed);
        let result = match parsed {
            Ok(d) => match d.kind {
                // A fan-out's kind is its hook's (`Fanout::intake`); with
                // none compiled in, as an offload's kind with no offload
                // compiled in to own it, it is refused.
                FAN_KIND => Err(ErrorCause::BadKind),
                k if crate::offload::is_offload_kind(k as u8) => Err(ErrorCause::BadKind),
                _ => self.validate(cx, d, reg_ok).map(|_| d),
            },
            Err(cause) => Err(*cause),
        };
        match result {
            Ok(d) => self.accept_descriptor(cx, hw, p, d),
            Err(cause) => refuse(cx, hw, p, raw, cause, takes_send),
        }
    }

    /// The descriptor at the head of port `p`'s ring waits: take what is
    /// posted behind it that does not depend on it, in ring order, up to
    /// `budget` descriptors and `AHEAD_MAX` slots past the head. Behind a
    /// send waiting for a token, the receive buffers; behind a receive
    /// buffer waiting for room, the sends (and puts, gets, resumes,
    /// alarms). A send waits for tokens that come back when its peers
    /// receive, and a peer's message may wait for this port's buffers: so
    /// neither kind ever waits for the other. Each kind keeps its own
    /// order: the look-ahead stops at the first of the other kind that
    /// cannot be taken now. A fan-out's descriptor is a send whose
    /// continuation slots (`Fanout::span`) are passed over; behind receive
    /// buffers the look-ahead stops at one. Returns the budget left.
    fn take_ahead(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        mut budget: u32,
        w: &mut Work,
    ) -> u32 {
        let prod = hw.load_u32(port_reg(p, SEND_PROD));
        let cons = self.cons[p];
        let pending = prod.wrapping_sub(cons);
        if !(2..=nic_abi::map::SEND_RING_LEN).contains(&pending) || self.ahead[p] & 1 != 0 {
            return budget;
        }
        let mut b = [0u8; nic_abi::desc::DESC_SIZE as usize];
        hw.read(send_slot(p, cons), &mut b);
        let head = Descriptor::raw_kind(&b);
        // A fan-out's descriptor at the head waits as a send does (for a
        // record, or for the one before it to leave): what is posted
        // behind its continuation slots may go ahead.
        let first = if head != FAN_KIND as u8 {
            1
        } else {
            match Fan::span(&b) {
                Some(n) => n,
                None => return budget,
            }
        };
        let head_provides = head == DescKind::Provide as u8;
        let end = pending.min(AHEAD_MAX);
        let mut i = first;
        while i < end && budget > 0 {
            if self.ahead[p] & (1 << i) != 0 {
                i += 1;
                continue;
            }
            hw.read(send_slot(p, cons.wrapping_add(i)), &mut b);
            let kind = Descriptor::raw_kind(&b);
            if Offloads::owns_kind(kind) {
                break; // an offload's: taken in ring order only
            }
            if kind == FAN_KIND as u8 {
                // A send: behind sends it waits in their order, its
                // continuation slots passed over; behind receive buffers
                // the look-ahead stops there.
                match Fan::span(&b) {
                    Some(n) if !head_provides => {
                        i += n;
                        continue;
                    }
                    _ => break,
                }
            }
            if (kind == DescKind::Provide as u8) == head_provides {
                i += 1;
                continue; // waits behind the head, in its kind's order
            }
            let parsed = Descriptor::decode(&b);
            let raw = RawDesc::of(&b);
            if !has_room(cx, p, raw, &parsed) || self.stream_waits(cx, p, parsed.as_ref().ok()) {
                break;
            }
            let mut checked = 0;
            let Some(reg_ok) = registered_range(cx, hw, p, parsed.as_ref().ok(), &mut checked)
            else {
                break; // its translation is on the way: next pass
            };
            self.ahead[p] |= 1 << i;
            budget -= 1;
            self.take(cx, hw, p, raw, &parsed, reg_ok, w);
            i += 1;
        }
        budget
    }

    /// Does send, put or get `d` of port `p` wait for a stream record? Every
    /// record is in use by a stream with sends outstanding: one goes idle
    /// (and may be let go of) when its sends complete, so the descriptor
    /// waits in the ring rather than being refused.
    fn stream_waits(&self, cx: &Shared, p: usize, d: Option<&Descriptor>) -> bool {
        let Some(d) = d else { return false };
        matches!(d.kind, DescKind::Send | DescKind::Put | DescKind::Get)
            && (d.target_port as usize) < NUM_PORTS
            && d.target_node < cx.cfg.nodes
            && !self.stream_room(
                cx,
                stream_key(d.target_node, p as u8, d.target_port, d.priority),
                d.target_node,
            )
    }

    /// Is the memory descriptor `d` names (if it names any, and its
    /// length is one the NIC could take) registered by port `p`? None:
    /// not known yet (a translation is being read).
    fn range_check(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        d: Option<&Descriptor>,
    ) -> Option<bool> {
        registered_range(cx, hw, p, d, &mut self.checked[p])
    }

    fn accept_descriptor(&mut self, cx: &mut Shared, hw: &mut impl Hw, p: usize, d: &Descriptor) {
        match d.kind {
            DescKind::Send | DescKind::Put | DescKind::Get => {
                let kind = match d.kind {
                    DescKind::Send => TokKind::Send,
                    DescKind::Put => TokKind::Put,
                    _ => TokKind::Get,
                };
                let mut t = SendToken::EMPTY;
                t.kind = kind;
                t.port = p as u8;
                t.prio = d.priority;
                t.target_node = d.target_node;
                t.target_port = d.target_port;
                t.size_class = d.size_class;
                t.local = d.local;
                t.len = d.len;
                t.remote = d.remote;
                t.tag = d.tag;
                t.desc_kind = d.kind as u8;
                t.npkts = packets_for(cx, kind, d.len);
                let Some(s) =
                    self.find_or_make_tx(cx, d.target_node, p as u8, d.target_port, d.priority)
                else {
                    return; // checked before the descriptor was taken
                };
                let Some(i) = cx.tokens.alloc(t) else { return };
                cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
                if kind == TokKind::Get {
                    // (The answer names it: `recv::take`.)
                    cx.tokens[i].cookie = i.raw() as u32;
                }
                if self.txs[s].suspended {
                    complete_token(cx, i, SendStatus::Dropped);
                } else {
                    self.append_token(cx, s, i);
                }
            }
            DescKind::Provide => {
                let mut s = RecvSlot::EMPTY;
                s.port = p as u8;
                s.prio = d.priority;
                s.size_class = d.size_class;
                s.vaddr = d.local;
                s.len = d.len;
                s.tag = d.tag;
                if let Some(i) = cx.new_slot(hw, &s) {
                    cx.credits[p].recv_taken = cx.credits[p].recv_taken.wrapping_add(1);
                    // RECV posts it on the port's list at its next step
                    // (the queue holds a pass's intake: it cannot fill).
                    if cx.provided.push_back(&self.to_recv, i).is_err() {
                        cx.slots.free(i);
                        cx.bump(hw, Stat::Errors, 1);
                    }
                }
            }
            DescKind::Resume => {
                let key = stream_key(d.target_node, p as u8, d.target_port, d.priority);
                if let Some(s) = self.stream_of(key) {
                    self.txs[s].suspended = false;
                    self.txs[s].nobuf_since = 0;
                }
            }
            DescKind::Alarm => {
                self.set_alarm(p, Some(cx.now.saturating_add(d.remote)));
                self.alarm_tag[p] = d.tag;
            }
            // The offloads' and the fan-out's kinds never come here.
            _ => {}
        }
    }
}
