//! The bandwidth resource manager (BRM) of a real-time cluster, device
//! side: one agent per node, and the master process the cluster starts.
//!
//! - Agents. The device process is the only holder of privileged SRAM
//!   access (host processes' `LiveBackend` refuses writes to the flow
//!   table, `FLOW_GEN` and `DISPATCH_TRACE_ENABLE`). When the cluster
//!   runs a BRM, it listens on `node<N>/brm-agent.sock` for every node;
//!   the master sends `AgentCommand` frames there and each is applied by
//!   `host_brm::Agent` over [`FlowTableBackend`], a `NicBackend`
//!   that may write only those words. Malformed frames are answered
//!   (`AgentReply::Failed`) and counted; broken connections are dropped,
//!   counted and noted.
//! - Master. `nic-cluster brm` (`host_brm::server`) run as a child of
//!   the device process ([`MasterProcess`]), listening on `brm.sock`; the
//!   cluster waits for its ready line and stops it first at stop.
//!
//! Owns the agent sockets and threads, and the master's child process.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use host_brm::socket::{serve_connection, Handled, ServeCounters};
use host_brm::{decode, encode, Agent, AgentCommand, AgentReply};
use host_driver::{ClusterDir, HostOp, MappedFile, Nic, NicBackend};
use nic_abi::flows::FLOW_ENTRY_SIZE;
use nic_abi::map::{FLOWS, FLOW_ENTRIES};
use nic_abi::regs::{self, reg};

use super::{Ctx, RtError};

/// How a real-time cluster runs its bandwidth resource manager
/// (`RtConfig::brm`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrmSetup {
    /// The calibration the master decides with (a `*.calibration.toml`
    /// file); None: the profile's stored one
    /// (`Calibration::for_profile`, `cargo xtask calibrate`).
    pub calibration: Option<PathBuf>,
    /// The master's program (`nic-cluster`); None: found as
    /// `process::find_binary` finds it.
    pub program: Option<PathBuf>,
}

/// The line `nic-cluster brm` prints on stdout once it listens: this, a
/// space, and the socket path.
pub const MASTER_READY: &str = "nic-cluster brm: ready";

/// How often idle agent threads look at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// How long an agent waits for a booting NIC's firmware (qemu) before
/// failing a command.
const OPEN_WAIT: Duration = Duration::from_secs(5);

/// A node's SRAM as its BRM agent may touch it: reads anywhere; writes
/// only to the flow table, `FLOW_GEN`, `DISPATCH_TRACE_ENABLE` and (an
/// atomic add) `HOST_DOORBELL`. It has no host memory. Anything else
/// reads zero or is dropped, and is counted.
#[derive(Clone)]
pub struct FlowTableBackend {
    sram: Arc<MappedFile>,
    refused: Arc<AtomicU64>,
    origin: Instant,
}

impl FlowTableBackend {
    pub fn new(sram: Arc<MappedFile>) -> FlowTableBackend {
        FlowTableBackend { sram, refused: Arc::default(), origin: Instant::now() }
    }

    /// Accesses refused so far.
    pub fn refused_accesses(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn writable(off: u32, len: usize) -> bool {
        let (off, end) = (off as u64, off as u64 + len as u64);
        let inside = |start: u32, size: u64| off >= start as u64 && end <= start as u64 + size;
        inside(FLOWS, FLOW_ENTRIES as u64 * FLOW_ENTRY_SIZE as u64)
            || inside(reg(regs::FLOW_GEN), 4)
            || inside(reg(regs::DISPATCH_TRACE_ENABLE), 4)
    }

    fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

impl NicBackend for FlowTableBackend {
    fn sram_read(&self, off: u32, buf: &mut [u8]) {
        if !self.sram.read(off as u64, buf) {
            self.refuse();
        }
    }

    fn sram_write(&self, off: u32, data: &[u8]) {
        if !Self::writable(off, data.len()) || !self.sram.write(off as u64, data) {
            self.refuse();
        }
    }

    fn sram_load_u32(&self, off: u32) -> u32 {
        self.sram.load_u32(off as u64).unwrap_or_else(|| {
            self.refuse();
            0
        })
    }

    fn sram_store_u32(&self, off: u32, v: u32) {
        if !Self::writable(off, 4) || !self.sram.store_u32(off as u64, v) {
            self.refuse();
        }
    }

    fn sram_load_u64(&self, off: u32) -> u64 {
        self.sram.load_u64(off as u64).unwrap_or_else(|| {
            self.refuse();
            0
        })
    }

    fn sram_store_u64(&self, off: u32, v: u64) {
        if !Self::writable(off, 8) || !self.sram.store_u64(off as u64, v) {
            self.refuse();
        }
    }

    fn host_read(&self, _bus: u64, buf: &mut [u8]) {
        buf.fill(0);
        self.refuse();
    }

    fn host_write(&self, _bus: u64, _data: &[u8]) {
        self.refuse();
    }

    fn host_load_u32(&self, _bus: u64) -> u32 {
        self.refuse();
        0
    }

    fn alloc_dma(&self, _len: u64) -> Option<u64> {
        None
    }

    fn free_dma(&self, _bus: u64, _len: u64) {}

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn charge(&self, _op: HostOp) {}

    fn doorbell(&self) {
        if self.sram.fetch_add_u32(reg(regs::HOST_DOORBELL) as u64, 1).is_none() {
            self.refuse();
        }
    }

    fn idle_wait(&self) -> bool {
        std::thread::sleep(Duration::from_millis(1));
        true
    }
}

/// One node's agent: opened at its first command (a qemu NIC may still
/// be booting when the cluster starts).
struct NodeAgent {
    be: FlowTableBackend,
    agent: Option<Agent<FlowTableBackend>>,
}

impl NodeAgent {
    fn handle(&mut self, frame: &[u8]) -> Handled {
        let cmd = match decode::<AgentCommand>(frame) {
            Ok(c) => c,
            Err(e) => return Handled::Malformed(encode(&AgentReply::Failed(e.to_string()))),
        };
        if self.agent.is_none() {
            match Nic::open_timeout(self.be.clone(), OPEN_WAIT) {
                Ok(nic) => self.agent = Some(Agent::new(nic)),
                Err(e) => {
                    return Handled::Reply(encode(&AgentReply::Failed(format!(
                        "the NIC does not run: {e}"
                    ))))
                }
            }
        }
        let reply = match self.agent.as_mut() {
            Some(a) => a.apply(cmd),
            None => AgentReply::Failed("no NIC".into()),
        };
        Handled::Reply(encode(&reply))
    }
}

/// The agents of every node of a cluster: their sockets, the thread that
/// accepts on them, and one thread per connection.
pub(crate) struct Agents {
    pub counters: Arc<ServeCounters>,
    backends: Vec<FlowTableBackend>,
    acceptor: Option<JoinHandle<()>>,
}

impl Agents {
    /// Listen on every node's `brm-agent.sock` (a stale file there is
    /// replaced) and serve until `ctx.stop`, over the cluster's mapping
    /// of each node's SRAM (`srams`).
    pub fn start(
        ctx: Arc<Ctx>,
        dir: &ClusterDir,
        srams: &[Arc<MappedFile>],
    ) -> Result<Agents, RtError> {
        let n = dir.nodes();
        let mut listeners = Vec::with_capacity(n as usize);
        let mut nodes = Vec::with_capacity(n as usize);
        let mut backends = Vec::with_capacity(n as usize);
        for node in 0..n {
            let p = dir.brm_agent_socket_path(node);
            let _ = std::fs::remove_file(&p);
            let l = UnixListener::bind(&p).map_err(|err| RtError::Io {
                what: format!("BRM agent socket {}", p.display()),
                err,
            })?;
            l.set_nonblocking(true)
                .map_err(|err| RtError::Io { what: format!("{}", p.display()), err })?;
            listeners.push(l);
            let be = FlowTableBackend::new(srams[node as usize].clone());
            backends.push(be.clone());
            nodes.push(Arc::new(Mutex::new(NodeAgent { be, agent: None })));
        }
        let counters = Arc::new(ServeCounters::default());
        let c = counters.clone();
        let acceptor = std::thread::Builder::new()
            .name("nic-rt-brm-agents".into())
            .spawn(move || accept_loop(ctx, listeners, nodes, c))
            .map_err(|err| RtError::Io { what: "starting the BRM agent thread".into(), err })?;
        Ok(Agents { counters, backends, acceptor: Some(acceptor) })
    }

    /// Accesses the agents' backends refused (writes outside the flow
    /// table and its registers), over every node.
    pub fn refused_accesses(&self) -> u64 {
        self.backends.iter().map(|b| b.refused_accesses()).sum()
    }

    /// Wait for the threads (after `ctx.stop` was set).
    pub fn join(&mut self) {
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(
    ctx: Arc<Ctx>,
    listeners: Vec<UnixListener>,
    nodes: Vec<Arc<Mutex<NodeAgent>>>,
    counters: Arc<ServeCounters>,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !ctx.stop.load(Ordering::Relaxed) {
        let mut any = false;
        for (node, l) in listeners.iter().enumerate() {
            let s = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    ctx.note(format!("node {node}: BRM agent socket: {e}"));
                    continue;
                }
            };
            any = true;
            // Accepted sockets must block (with timeouts), whatever the
            // listener is.
            if let Err(e) = s.set_nonblocking(false) {
                ctx.note(format!("node {node}: BRM agent connection: {e}"));
                continue;
            }
            let (cx, agent, counters) = (ctx.clone(), nodes[node].clone(), counters.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("nic-rt-brm-agent-{node}"))
                .spawn(move || {
                    let bad0 = counters.malformed();
                    let why = serve_connection(s, &cx.stop, POLL, &counters, |f| {
                        agent.lock().unwrap_or_else(|e| e.into_inner()).handle(f)
                    });
                    let bad = counters.malformed() - bad0;
                    if bad > 0 {
                        cx.note(format!(
                            "node {node}: BRM agent: {bad} malformed command(s) answered"
                        ));
                    }
                    if let Some(why) = why {
                        cx.note(format!("node {node}: BRM agent connection dropped: {why}"));
                    }
                });
            match spawned {
                Ok(h) => conns.push(h),
                Err(e) => ctx.note(format!("node {node}: BRM agent thread: {e}")),
            }
        }
        conns.retain(|h| !h.is_finished());
        if !any {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// The BRM master running as a child process (`nic-cluster brm`).
pub(crate) struct MasterProcess {
    child: Option<Child>,
    _drain: Option<JoinHandle<()>>,
}

impl MasterProcess {
    /// Start `program brm --cluster DIR ...` and wait up to `timeout` for
    /// its ready line. Its stderr is inherited.
    pub fn spawn(
        program: &Path,
        args: &[String],
        timeout: Duration,
    ) -> Result<MasterProcess, RtError> {
        let mut cmd = Command::new(program);
        cmd.args(args);
        let what = format!("the BRM master ({})", program.display());
        let r = super::process::spawn_until_ready(cmd, &what, "ready", MASTER_READY, timeout)?;
        Ok(MasterProcess { child: Some(r.child), _drain: Some(r.drain) })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Has it exited (crashed or killed)?
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// SIGTERM, then SIGKILL after 2 s.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        let _ = super::process::request_stop(c.id());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for MasterProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The BRM master's program: `explicit`, else the `nic-cluster` binary as
/// `process::find_binary` finds it.
pub(crate) fn master_program(explicit: Option<&PathBuf>) -> Result<PathBuf, RtError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(RtError::Config(format!(
                "brm: the BRM master program {} does not exist",
                p.display()
            )))
        };
    }
    super::process::find_binary().ok_or_else(|| {
        RtError::Config(format!(
            "brm: the bandwidth manager runs as `{} brm`, and no `{}` binary was found next to \
             this program or on PATH (build it: cargo build --release -p nic-emu --bin {})",
            super::process::BINARY,
            super::process::BINARY,
            super::process::BINARY
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_backend_writes_only_the_flow_table_and_its_registers() {
        let d = std::env::temp_dir().join(format!("ftb-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("sram");
        std::fs::File::create(&p).unwrap().set_len(nic_abi::map::SRAM_MIN as u64).unwrap();
        let be = FlowTableBackend::new(Arc::new(MappedFile::open(&p).unwrap()));
        be.sram_store_u32(FLOWS, 7);
        be.sram_store_u32(reg(regs::FLOW_GEN), 1);
        be.doorbell();
        assert_eq!(be.refused_accesses(), 0);
        assert_eq!((be.sram_load_u32(FLOWS), be.sram_load_u32(reg(regs::HOST_DOORBELL))), (7, 1));
        be.sram_store_u32(reg(regs::FW_STATUS), 5);
        be.sram_write(FLOWS - 4, &[1; 8]);
        be.host_write(0, &[1]);
        assert_eq!(be.sram_load_u32(reg(regs::FW_STATUS)), 0);
        assert_eq!(be.sram_load_u32(FLOWS - 4), 0);
        assert_eq!(be.refused_accesses(), 3);
        let _ = std::fs::remove_dir_all(&d);
    }
}
