//! Sending: each role that may send now (started, let through by the
//! bandwidth manager, not stopped) sends what it has while a slot, a
//! token and ring room are free; each message is filled with its stream's
//! pattern and its send time recorded in the ledger.

use host_brm::BrmTransport;
use host_driver::DriverError;

use super::super::pattern;
use super::super::plan::{class_of, Dir, RoleKind};
use super::role::Gate;
use super::tags::send_tag;
use super::{NodeApp, NodeHost};

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Send what can be sent now. Returns the earliest future start time
    /// of a role that is waiting for it.
    pub(super) fn pump(&mut self, now: u64) -> Option<u64> {
        let mut later: Option<u64> = None;
        // Ports (bits by index in `ports`) whose driver refused a unicast
        // send (no send token, ring full): nothing else is posted on them
        // in this pass (no event is taken meanwhile, and the NIC does not
        // run), so their other roles are not asked to try.
        let mut refused = 0u64;
        // A port with no room now gets none in this pass: its roles are
        // not looked at (those that wait for a time or the bandwidth
        // manager, and multicast roots, are).
        let mut skip = std::mem::take(&mut self.skip_scratch);
        skip.clear();
        skip.resize(self.may_send.len(), 0);
        for pi in 0..self.ports.len() {
            let roles = &self.port_roles[pi];
            if roles.iter().zip(&self.may_send).all(|(r, m)| r & m == 0) {
                continue;
            }
            if self.ports[pi].port.send_room().is_err() {
                refused |= 1 << pi;
                for (s, r) in skip.iter_mut().zip(&self.port_roles[pi]) {
                    *s |= r;
                }
            }
        }
        // The roles in order, those that may act only (`may_send`): the
        // others would find nothing to do.
        for (w, skip) in skip.iter().enumerate() {
            let mut bits = self.may_send[w] & (self.special_roles[w] | !skip);
            while bits != 0 {
                let ri = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.pump_role(ri, now, &mut later, &mut refused);
                if self.role_idle(ri, now) {
                    self.may_send[w] &= !(1 << (ri % 64));
                }
            }
        }
        self.skip_scratch = skip;
        later
    }

    /// Role `ri` might act in a pass: set when a completion gives it a
    /// slot back or a message is queued for it.
    pub(super) fn role_may_send(&mut self, ri: usize) {
        self.may_send[ri / 64] |= 1 << (ri % 64);
    }

    /// Would a pass find nothing to do for role `ri` until a slot comes
    /// back or a message is queued (`role_may_send`)? Roles waiting for a
    /// time (start, stop), for the bandwidth manager, and multicast roots
    /// (which also wait for tokens) are always looked at.
    fn role_idle(&self, ri: usize, now: u64) -> bool {
        let r = &self.roles[ri];
        if r.sent_all {
            return true;
        }
        if now < r.start_ns
            || r.gate.waits()
            || r.stop_ns.is_some()
            || r.kind == RoleKind::McastRoot
        {
            return false;
        }
        r.free.is_empty()
            || match r.kind {
                RoleKind::StreamSender => r.next >= r.messages,
                _ => r.queue.is_empty(),
            }
    }

    /// One role's turn in `pump`: send what it may.
    fn pump_role(&mut self, ri: usize, now: u64, later: &mut Option<u64>, refused: &mut u64) {
        if self.roles[ri].kind == RoleKind::McastRoot {
            self.post_more_children(ri);
        }
        {
            let r = &self.roles[ri];
            if r.sent_all {
                return;
            }
            if now < r.start_ns {
                *later = Some(later.map_or(r.start_ns, |l: u64| l.min(r.start_ns)));
                return;
            }
            if r.gate == Gate::Pending {
                self.open_gate(ri);
            }
            // (Refused: it sent all it will; asked: the answer comes at
            // a later pass.)
            if self.roles[ri].sent_all || self.roles[ri].gate != Gate::Running {
                return;
            }
            if let Some(stop) = self.roles[ri].stop_ns {
                if now >= stop {
                    let sent = self.roles[ri].next;
                    self.end_role(ri, sent);
                    return;
                }
                *later = Some(later.map_or(stop, |l: u64| l.min(stop)));
            }
            loop {
                let r = &self.roles[ri];
                let msg = match r.kind {
                    RoleKind::StreamSender | RoleKind::McastRoot => {
                        if r.next >= r.messages {
                            break;
                        }
                        r.next
                    }
                    _ => match r.queue.front() {
                        Some(&m) => m,
                        None => break,
                    },
                };
                let Some(&slot) = r.free.last() else { break };
                if r.kind == RoleKind::McastRoot && self.mcast_root_waits(ri) {
                    break;
                }
                let (port, mcast) = (r.port, r.kind == RoleKind::McastRoot);
                if *refused & 1 << port != 0 {
                    break;
                }
                let sent = if mcast {
                    self.send_mcast(ri, slot, msg)
                } else {
                    self.send_one(ri, slot, msg)
                };
                match sent {
                    Ok(()) => {}
                    Err(DriverError::NoSendToken | DriverError::RingFull) => {
                        // A multicast may need more ring slots than one.
                        if !mcast {
                            *refused |= 1 << port;
                        }
                        break;
                    }
                    Err(e) => {
                        let flow = self.roles[ri].flow;
                        let name = self.ledger.borrow().flows[flow].spec.name.clone();
                        self.problem(format!(
                            "flow {name}: send of message {msg} refused by the driver: {e}"
                        ));
                        let dir = self.roles[ri].sends();
                        let mcast = self.roles[ri].kind == RoleKind::McastRoot;
                        let now = self.host.now_ns();
                        let mut l = self.ledger.borrow_mut();
                        if mcast {
                            l.flows[flow].mcast_done(msg, false, now, None);
                        } else {
                            l.flows[flow].send_done(dir, msg, false);
                        }
                        l.resolved += 1;
                    }
                }
                let r = &mut self.roles[ri];
                match r.kind {
                    RoleKind::StreamSender | RoleKind::McastRoot => r.next += 1,
                    _ => {
                        r.queue.pop_front();
                    }
                }
                // A failed send above already gave its slot back.
            }
            let r = &mut self.roles[ri];
            r.sent_all = match r.kind {
                RoleKind::StreamSender | RoleKind::McastRoot => r.next >= r.messages,
                _ => false,
            };
        }
    }

    fn send_one(&mut self, ri: usize, slot: usize, msg: u64) -> Result<(), DriverError> {
        let r = &self.roles[ri];
        // A send the driver would refuse (no token, ring full) is refused
        // before its message is filled: the slot stays free, and filling
        // it again each time the program looks would cost a copy of the
        // message for nothing (writing host memory is not priced, so the
        // run is the same).
        self.ports[r.port].port.send_room()?;
        let (len, stream, class) = {
            let l = self.ledger.borrow();
            let spec = &l.flows[r.flow].spec;
            let len = spec.size_of(msg);
            let stream = match r.sends() {
                Dir::Forward => pattern::forward_stream(r.flow),
                Dir::Reply => pattern::reply_stream(r.flow),
            };
            (len, stream, class_of(len))
        };
        let buf = r.slots[slot];
        let n = len as usize;
        // The message is filled where it lies when the host lets the
        // program reach its memory (the sim; a slot is the port's own
        // memory), else in a scratch buffer written through the driver.
        let fill = &mut |b: &mut [u8]| pattern::fill(b, stream, msg as u32);
        if n > 0 && !(n as u64 <= buf.len && self.host.in_place_mut(buf.bus, n, fill)) {
            if self.scratch.len() < n {
                self.scratch.resize(n, 0);
            }
            fill(&mut self.scratch[..n]);
            self.ports[r.port].port.write(&buf, 0, &self.scratch[..n])?;
        }
        let pc = &mut self.ports[r.port];
        let now = self.host.now_ns();
        let traced_at = self.host.trace_ns();
        pc.port.send(
            &buf,
            0,
            len as u32,
            class,
            r.priority,
            r.peer_node,
            r.peer_port,
            send_tag(ri, slot, msg),
        )?;
        let (port, peer) = (self.ports[r.port].num, (r.peer_node, r.peer_port));
        self.log_call("send", port, traced_at, || {
            format!("message {msg}, {len} B to {}:{}", peer.0, peer.1)
        });
        let r = &mut self.roles[ri];
        r.free.pop();
        let mut l = self.ledger.borrow_mut();
        let f = &mut l.flows[r.flow];
        f.first_send_ns = Some(f.first_send_ns.map_or(now, |t| t.min(now)));
        if r.kind != RoleKind::PingResponder {
            f.send_ns.insert(msg, now);
        }
        Ok(())
    }
}
