//! The BRM master as a process of a live or qemu cluster (`nic-cluster
//! brm`, started by the device process when `RtConfig::brm` asks for
//! it): the same [`Master`] as the sim's, fed by programs over
//! `<dir>/brm.sock` and driving the node agents over
//! `<dir>/node<N>/brm-agent.sock` (`crate::socket` frames).
//!
//! - Routes: the fabric layout of `--topology` with the profile's switch
//!   size, checked against the route table each NIC was reset with (read
//!   from its SRAM), as the sim BRM checks the simulator's.
//! - Requests are served one at a time (one lock around the master);
//!   each connection has its own thread.
//! - An agent that cannot be reached, times out or fails a command is
//!   logged and counted; if it is the requesting flow's source node, the
//!   request is undone and answered `Refused::Unavailable` naming the
//!   node (other nodes' changes are sent again at the next change).
//! - Malformed frames are answered `Refused::BadRequest` and counted.
//!
//! Owns the master's state and the socket; touches NICs only through the
//! agents. Reads the cluster's SRAM files only to check the routes.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::protocol::{decode, encode, AgentReply, Refused, Reply, Request};
use crate::socket::{serve_connection, FrameCaller, Handled, ServeCounters, AGENT_TIMEOUT};
use host_driver::ClusterDir;
use nic_abi::{map, regs};

use crate::calibration::Calibration;
use crate::master::{ports_on_route, AgentLinks, Managed, Master};
use nic_fabric::topology::{Layout, Topology};

/// The master's connections to the node agents.
struct SocketAgents {
    callers: Vec<FrameCaller>,
    /// Nodes whose agent failed during the current request, with why.
    failed: Vec<(u16, String)>,
}

impl AgentLinks for SocketAgents {
    fn send(&mut self, node: u16, command: &[u8]) -> Vec<u8> {
        let Some(c) = self.callers.get_mut(node as usize) else {
            self.failed.push((node, format!("no node {node}")));
            return encode(&AgentReply::Failed(format!("no node {node}")));
        };
        match c.call(command) {
            Ok(r) => {
                match decode::<AgentReply>(&r) {
                    Ok(AgentReply::Done) => {}
                    Ok(AgentReply::Failed(e)) => self.failed.push((node, e)),
                    Err(e) => self.failed.push((node, e.to_string())),
                }
                r
            }
            Err(e) => {
                let why = format!("agent unreachable: {e}");
                self.failed.push((node, why.clone()));
                encode(&AgentReply::Failed(why))
            }
        }
    }
}

/// What the master process counts.
#[derive(Debug, Default)]
pub struct ServerCounters {
    pub requests: AtomicU64,
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    pub agent_failures: AtomicU64,
    pub undone: AtomicU64,
    pub connections: ServeCounters,
}

/// The master and its agent links, behind one lock.
pub struct BrmServer {
    state: Mutex<(Master, SocketAgents)>,
    origin: Instant,
    pub counters: ServerCounters,
    /// Each NIC's SRAM (read-only use: its boot count and status), and the
    /// boot count it had when last seen running (None: not seen yet), to
    /// notice resets.
    srams: Vec<host_driver::MappedFile>,
    boots: Mutex<Vec<Option<u32>>>,
}

/// The boot a NIC's firmware runs (its boot count), if it runs.
fn running_boot(sram: &host_driver::MappedFile) -> Option<u32> {
    let running = sram.load_u32(regs::reg(regs::FW_STATUS) as u64) == Some(regs::FW_RUNNING);
    running.then(|| sram.load_u32(regs::reg(regs::BOOT_COUNT) as u64).unwrap_or(0))
}

/// Check that every NIC of `dir` was reset with `layout`'s routes.
fn check_routes(dir: &ClusterDir, layout: &Layout) -> Result<(), String> {
    let n = dir.nodes();
    for s in 0..n {
        let sram = dir.map_sram(s).map_err(|e| format!("{}: {e}", dir.sram_path(s).display()))?;
        for d in (0..n).filter(|&d| d != s) {
            let want = layout.route(s as usize, d as usize);
            let mut e = vec![0u8; 1 + want.len()];
            sram.read(map::route_entry(d as usize) as u64, &mut e);
            if e[0] as usize != want.len() || e[1..] != want[..] {
                return Err(format!(
                    "route {s} -> {d} in node {s}'s SRAM is not the topology's (was the cluster \
                     started with another --topology?)"
                ));
            }
            ports_on_route(layout, s as usize, d as usize)?;
        }
    }
    Ok(())
}

impl BrmServer {
    /// A master for the cluster at `dir` (its NICs already reset) with
    /// `topology` over switches of `switch_ports`, deciding with `cal`.
    pub fn new(
        dir: &ClusterDir,
        topology: Topology,
        switch_ports: usize,
        cal: Calibration,
    ) -> Result<BrmServer, String> {
        let n = dir.nodes() as usize;
        let layout = topology.layout(n, switch_ports).map_err(|e| format!("BRM: {e}"))?;
        check_routes(dir, &layout).map_err(|e| format!("BRM: {e}"))?;
        let callers = (0..n as u32)
            .map(|node| FrameCaller::new(&dir.brm_agent_socket_path(node), AGENT_TIMEOUT))
            .collect();
        let srams = (0..n as u32)
            .map(|s| dir.map_sram(s).map_err(|e| format!("{}: {e}", dir.sram_path(s).display())))
            .collect::<Result<Vec<_>, _>>()?;
        // The boot each NIC runs now (a NIC still booting: its first boot,
        // seen when it runs).
        let boots = srams.iter().map(running_boot).collect();
        Ok(BrmServer {
            state: Mutex::new((Master::new(cal, layout), SocketAgents { callers, failed: vec![] })),
            origin: Instant::now(),
            counters: ServerCounters::default(),
            srams,
            boots: Mutex::new(boots),
        })
    }

    /// Install again the flow entries of every NIC that was reset since the
    /// last look and whose firmware runs again (a reset empties the flow
    /// table). Returns the nodes it did.
    pub fn reinstall_after_resets(&self) -> Vec<u16> {
        let mut done = Vec::new();
        let mut boots = self.boots.lock().unwrap_or_else(|e| e.into_inner());
        for (node, sram) in self.srams.iter().enumerate() {
            let Some(now) = running_boot(sram) else { continue };
            if boots[node] == Some(now) {
                continue;
            }
            let first_look = boots[node].is_none();
            boots[node] = Some(now);
            if first_look {
                // The boot it had when the cluster started.
                continue;
            }
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (m, links) = &mut *g;
            m.set_now(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX));
            let n = m.nic_reset(node as u16, links);
            for (node, why) in std::mem::take(&mut links.failed) {
                self.counters.agent_failures.fetch_add(1, Ordering::Relaxed);
                eprintln!("nic-cluster brm: node {node}'s agent: {why}");
            }
            eprintln!(
                "nic-cluster brm: node {node}'s NIC was reset: {n} flow entries installed again"
            );
            done.push(node as u16);
        }
        done
    }

    /// Handle one request.
    pub fn handle(&self, req: Request) -> Reply {
        let c = &self.counters;
        c.requests.fetch_add(1, Ordering::Relaxed);
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (m, links) = &mut *g;
        m.set_now(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let flow = match &req {
            Request::Reserve { flow, .. }
            | Request::BestEffort { flow }
            | Request::Release { flow } => Some(*flow),
            Request::Status => None,
        };
        let before = flow.and_then(|f| m.managed().get(&f).copied());
        links.failed.clear();
        let mut reply = m.handle(req, links);
        let failed = std::mem::take(&mut links.failed);
        for (node, why) in &failed {
            c.agent_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!("nic-cluster brm: node {node}'s agent: {why}");
        }
        // The requesting flow's IDT did not reach its NIC: undo.
        if let (Some(f), Reply::Admitted(_) | Reply::Registered { .. }) = (flow, &reply) {
            if let Some((node, why)) = failed.iter().find(|(n, _)| *n == f.src_node) {
                let undo = match before {
                    None => Request::Release { flow: f },
                    Some(Managed::Reserved(b)) => Request::Reserve { flow: f, mb_s: b },
                    Some(Managed::BestEffort) => Request::BestEffort { flow: f },
                };
                m.handle(undo, links);
                links.failed.clear();
                c.undone.fetch_add(1, Ordering::Relaxed);
                reply = Reply::Refused(Refused::Unavailable(format!(
                    "node {node}'s BRM agent did not install flow {f}'s IDT ({why}); the request \
                     was undone"
                )));
            }
        }
        match &reply {
            Reply::Admitted(_) => c.admitted.fetch_add(1, Ordering::Relaxed),
            Reply::Refused(_) => c.refused.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        reply
    }

    /// Handle one frame: a reply, or an error reply for a frame that does
    /// not decode.
    pub fn handle_frame(&self, frame: &[u8]) -> Handled {
        match decode::<Request>(frame) {
            Ok(r) => Handled::Reply(encode(&self.handle(r))),
            Err(e) => {
                Handled::Malformed(encode(&Reply::Refused(Refused::BadRequest(e.to_string()))))
            }
        }
    }

    /// Agent failures recorded by the master so far.
    pub fn failures(&self) -> Vec<String> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0.failures.clone()
    }
}

/// Serve `dir`'s `brm.sock` until `stop` is set or the cluster's device
/// process is gone. `ready` is called once the socket listens.
pub fn serve(
    dir: &ClusterDir,
    server: Arc<BrmServer>,
    stop: Arc<AtomicBool>,
    ready: impl FnOnce(&std::path::Path),
) -> Result<(), String> {
    let path: PathBuf = dir.brm_socket_path();
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    l.set_nonblocking(true).map_err(|e| format!("{}: {e}", path.display()))?;
    ready(&path);
    let device = dir.manifest().pid;
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let mut last_check = Instant::now();
    let mut next_id = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if last_check.elapsed() > Duration::from_millis(50) {
            last_check = Instant::now();
            if !dir.device_alive() {
                eprintln!("nic-cluster brm: the device process {device} is gone; stopping");
                break;
            }
            server.reinstall_after_resets();
        }
        match l.accept() {
            Ok((s, _)) => {
                if s.set_nonblocking(false).is_err() {
                    continue;
                }
                next_id += 1;
                let (srv, st) = (server.clone(), stop.clone());
                match std::thread::Builder::new().name(format!("brm-conn-{next_id}")).spawn(
                    move || {
                        let why = serve_connection(
                            s,
                            &st,
                            Duration::from_millis(100),
                            &srv.counters.connections,
                            |f| srv.handle_frame(f),
                        );
                        if let Some(why) = why {
                            eprintln!("nic-cluster brm: a client connection dropped: {why}");
                        }
                    },
                ) {
                    Ok(h) => conns.push(h),
                    Err(e) => eprintln!("nic-cluster brm: connection thread: {e}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                eprintln!("nic-cluster brm: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        conns.retain(|h| !h.is_finished());
    }
    stop.store(true, Ordering::Relaxed);
    for h in conns {
        let _ = h.join();
    }
    let _ = std::fs::remove_file(&path);
    let c = &server.counters;
    eprintln!(
        "nic-cluster brm: stopped: {} requests ({} admitted, {} refused), {} clients, {} \
         malformed frames, {} broken connections, {} agent failures ({} requests undone)",
        c.requests.load(Ordering::Relaxed),
        c.admitted.load(Ordering::Relaxed),
        c.refused.load(Ordering::Relaxed),
        next_id,
        c.connections.malformed(),
        c.connections.broken(),
        c.agent_failures.load(Ordering::Relaxed),
        c.undone.load(Ordering::Relaxed),
    );
    Ok(())
}
