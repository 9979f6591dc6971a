//! Setting a node's program up: open the NIC and the ports its plan
//! names, carve and post the receive buffers, carve the send slots of
//! each role, and put raw IDTs into the flow table before anything is
//! sent.

use std::collections::VecDeque;

use host_brm::BrmTransport;
use host_driver::{DmaBuf, DriverError, Nic, NicBackend, PortOptions};

use super::super::format::RatePlan;
use super::super::plan::{align, RoleKind};
use super::role::{Gate, Role};
use super::tags::recv_tag;
use super::{NodeApp, NodeHost, Pool, PortCtx};

impl<H: NodeHost, T: BrmTransport> NodeApp<H, T> {
    /// Open the NIC and the ports, allocate and post buffers. Ok(false):
    /// the firmware is still booting, try again later.
    pub(super) fn setup(&mut self) -> Result<bool, String> {
        let attach = |host: &mut H, port: u8| {
            host.attach(port).map_err(|e| format!("attaching port {port}: {e}"))
        };
        let first = match (self.host.shared(), self.plan.ports.first()) {
            (Some(b), _) => b,
            (None, Some(pp)) => attach(&mut self.host, pp.port)?,
            // Nothing to open: a node without flows.
            (None, None) => {
                self.set_up = true;
                return Ok(true);
            }
        };
        let nic = match Nic::open(first) {
            Ok(n) => n,
            Err(DriverError::NicNotReady { fw_status: 0 }) => return Ok(false),
            Err(e) => return Err(format!("opening the NIC: {e}")),
        };
        for pp in &self.plan.ports {
            // A backend tied to one port serves only that one: the others
            // are opened through backends of their own.
            let serves = |n: &Nic<H::B>| n.backend().port_hint().is_none_or(|p| p == pp.port);
            let opened = if serves(&nic) {
                nic.open_port(pp.port, PortOptions::default())
            } else {
                // (The port keeps what it needs of that NIC handle.)
                Nic::open(attach(&mut self.host, pp.port)?)
                    .map_err(|e| format!("opening the NIC for port {}: {e}", pp.port))?
                    .open_port(pp.port, PortOptions::default())
            };
            let mut port = opened.map_err(|e| format!("opening port {}: {e}", pp.port))?;
            let mut pools = Vec::new();
            let began = self.host.trace_ns();
            for (pi, q) in pp.pools.iter().enumerate() {
                let stride = align(q.buf_len);
                let region = port
                    .alloc(stride * q.count as u64)
                    .map_err(|e| format!("port {}: receive buffers: {e}", pp.port))?;
                let mut bufs = Vec::new();
                for k in 0..q.count as u64 {
                    let b = region.sub(k * stride, q.buf_len).ok_or("receive buffer carving")?;
                    port.provide_receive_buffer(&b, q.class, q.priority, recv_tag(pi, k as usize))
                        .map_err(|e| format!("port {}: posting a receive buffer: {e}", pp.port))?;
                    bufs.push(b);
                }
                pools.push(Pool { class: q.class, priority: q.priority, bufs });
            }
            let n: usize = pools.iter().map(|p| p.bufs.len()).sum();
            self.log_call("provide", pp.port, began, || format!("{n} receive buffers"));
            self.ports.push(PortCtx {
                num: pp.port,
                port,
                pools,
                repost: VecDeque::new(),
                opened: false,
                ready: false,
                pending: (u32::MAX, 0),
            });
        }
        for rp in &self.plan.roles {
            let port = self
                .ports
                .iter()
                .position(|p| p.num == rp.port)
                .ok_or("a role's port is not open")?;
            let stride = align(rp.slot_len);
            let region = self.ports[port]
                .port
                .alloc(stride * rp.slots as u64)
                .map_err(|e| format!("port {}: send buffers: {e}", rp.port))?;
            let slots: Vec<DmaBuf> = (0..rp.slots as u64)
                .map(|k| region.sub(k * stride, rp.slot_len.max(1)))
                .collect::<Option<_>>()
                .ok_or("send buffer carving")?;
            let (messages, rate, stop_ns, trace) = {
                let l = self.ledger.borrow();
                let s = &l.flows[rp.flow].spec;
                (s.messages, s.rate, s.stop_ns, s.trace && rp.kind != RoleKind::PingResponder)
            };
            let mut queue = VecDeque::new();
            if rp.kind == RoleKind::PingInitiator {
                queue.push_back(0);
            }
            self.roles.push(Role {
                flow: rp.flow,
                kind: rp.kind,
                port,
                peer_node: rp.peer_node,
                peer_port: rp.peer_port,
                priority: rp.priority,
                free: (0..slots.len()).rev().collect(),
                slots,
                next: 0,
                queue,
                start_ns: rp.start_ns,
                messages,
                sent_all: false,
                rate,
                gate: if rate.uses_brm() { Gate::Pending } else { Gate::Running },
                stop_ns,
                trace,
                mcast_pending: Default::default(),
                mcast_awaiting: Vec::new(),
            });
        }
        // Raw IDTs go into the flow table before anything is sent (both
        // directions of a ping-pong).
        for r in &self.roles {
            if let RatePlan::Idt(idt) = r.rate {
                let key = r.key(self.ports[r.port].num);
                nic.set_flow_idt(key, idt).map_err(|e| format!("flow table ({key}): {e}"))?;
                if r.kind != RoleKind::PingResponder {
                    self.ledger.borrow_mut().flows[r.flow].idt = Some(idt);
                }
            }
        }
        if self.roles.iter().any(|r| r.trace) {
            self.trace_cursor = Some(nic.set_dispatch_trace(true));
            let now = self.host.now_ns();
            self.trace_read = (now, now);
        }
        self.create_groups(&nic)?;
        self.create_colls(&nic)?;
        self.nic = Some(nic);
        // Every role is looked at in the first pass.
        let words = self.roles.len().div_ceil(64);
        self.may_send = vec![0; words];
        self.port_roles = vec![vec![0; words]; self.ports.len()];
        self.special_roles = vec![0; words];
        for ri in 0..self.roles.len() {
            self.role_may_send(ri);
            let r = &self.roles[ri];
            let bit = 1u64 << (ri % 64);
            self.port_roles[r.port][ri / 64] |= bit;
            if r.start_ns > 0
                || r.gate == Gate::Pending
                || r.stop_ns.is_some()
                || r.kind == RoleKind::McastRoot
            {
                self.special_roles[ri / 64] |= bit;
            }
        }
        self.ping_roles = self
            .roles
            .iter()
            .any(|r| matches!(r.kind, RoleKind::PingInitiator | RoleKind::PingResponder));
        self.set_up = true;
        Ok(true)
    }
}
