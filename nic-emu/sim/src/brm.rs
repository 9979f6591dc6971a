//! The BRM as components of a simulated cluster: the master and one agent
//! per node, reached by programs through [`SimTransport`]. A request is a
//! direct call at the requesting program's virtual time: the master
//! decides, its agents write the NICs' flow tables at once (PIO by the
//! agent's host) and ring their doorbells, so each NIC sees its new IDTs
//! when the event core next runs it. Messages cross as postcard bytes,
//! as they will between processes.

use std::cell::RefCell;
use std::rc::Rc;

use host_brm::protocol::{decode, encode, Agent, BrmClient, BrmTransport, Refused, Reply, Request};
use host_driver::Nic;

use crate::{SimBackend, SimCluster};
use host_brm::calibration::Calibration;
use host_brm::master::{ports_on_route, AgentLinks, Change, Master};

/// The BRM of one simulated cluster.
pub struct SimBrm {
    master: Master,
    agents: Vec<Agent<SimBackend>>,
}

struct Links<'a>(&'a mut [Agent<SimBackend>]);

impl AgentLinks for Links<'_> {
    fn send(&mut self, node: u16, command: &[u8]) -> Vec<u8> {
        match self.0.get_mut(node as usize) {
            Some(a) => a.handle(command),
            None => encode(&host_brm::protocol::AgentReply::Failed(format!("no node {node}"))),
        }
    }
}

impl SimBrm {
    /// A master for `cluster`'s fabric with `cal`, and an agent on every
    /// node. Err: a NIC would not open, or the routes do not match the
    /// topology's.
    pub fn new(cluster: &SimCluster, cal: Calibration) -> Result<SimBrm, String> {
        let n = cluster.nodes();
        let layout = cluster
            .topology()
            .layout(n, cluster.profile().switch.ports as usize)
            .map_err(|e| format!("BRM: {e}"))?;
        for s in 0..n {
            for d in (0..n).filter(|&d| d != s) {
                if layout.route(s, d) != cluster.route(s, d) {
                    return Err(format!("BRM: route {s} -> {d} differs from the topology's"));
                }
                ports_on_route(&layout, s, d).map_err(|e| format!("BRM: {e}"))?;
            }
        }
        let agents = (0..n)
            .map(|node| {
                Nic::open(cluster.backend(node))
                    .map(Agent::new)
                    .map_err(|e| format!("BRM agent on node {node}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(SimBrm { master: Master::new(cal, layout), agents })
    }

    /// Shared, for clients.
    pub fn shared(self) -> Rc<RefCell<SimBrm>> {
        Rc::new(RefCell::new(self))
    }

    pub fn master(&self) -> &Master {
        &self.master
    }

    /// Every IDT change the master sent, with its virtual time.
    pub fn history(&self) -> &[Change] {
        self.master.history()
    }

    /// Handle one request at virtual time `now_ns`.
    pub fn handle(&mut self, now_ns: u64, req: Request) -> Reply {
        self.master.set_now(now_ns);
        self.master.handle(req, &mut Links(&mut self.agents))
    }

    /// NIC `node` was reset at `now_ns`: the master installs its flows'
    /// entries again (see `Master::nic_reset`).
    pub fn nic_reset(&mut self, now_ns: u64, node: u16) -> usize {
        self.master.set_now(now_ns);
        self.master.nic_reset(node, &mut Links(&mut self.agents))
    }

    /// Handle one request given as postcard bytes.
    pub fn handle_bytes(&mut self, now_ns: u64, req: &[u8]) -> Vec<u8> {
        let reply = match decode::<Request>(req) {
            Ok(r) => self.handle(now_ns, r),
            Err(e) => Reply::Refused(Refused::BadRequest(e.to_string())),
        };
        encode(&reply)
    }

    /// A client for a program on `node` (its host clock stamps requests).
    pub fn client(this: &Rc<RefCell<SimBrm>>, be: SimBackend) -> BrmClient<SimTransport> {
        BrmClient::new(SimTransport { brm: this.clone(), be })
    }
}

/// Carries a program's requests to the master by direct call, at the
/// program's host time.
pub struct SimTransport {
    brm: Rc<RefCell<SimBrm>>,
    be: SimBackend,
}

impl BrmTransport for SimTransport {
    fn call(&mut self, request: &[u8]) -> Result<Vec<u8>, String> {
        let mut b = self.brm.try_borrow_mut().map_err(|_| "BRM busy (re-entered)".to_string())?;
        Ok(b.handle_bytes(self.be.now_ns(), request))
    }
}
