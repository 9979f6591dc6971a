//! The supervisor thread: everything slow the device process watches
//! while the workers run the NICs.
//!
//! (A port whose holder died is closed by the control socket, when its
//! connection ends: `control.rs`.)
//! - Reflash: each node's `flash` file is watched (size, mtime, inode);
//!   once a change has been stable for one look, the NIC is reset: under
//!   QEMU the guest is killed, the worker resets the NIC (registers,
//!   ports closed), and a new guest boots the new image; live: the worker
//!   resets the NIC and boots its native MCP again.
//! - QEMU guests that exit on their own (a panicking image exits QEMU)
//!   are reported, and the NIC is marked FW_HALTED.
//! - Node files that change size under the cluster (someone truncated or
//!   grew `sram` or `host`): every `PROBE_EVERY` the sizes are checked and
//!   set back, as they are at once by any mapping that faults on a cut
//!   (`MappedFile`'s SIGBUS guard); either way the log says so and the NIC
//!   is reset, since the cut bytes read as zeros (its registers, rings).
//! - A node file that kept its size but could not back a page (its file
//!   system full, or failing) stops its node for good: the worker that
//!   meets it marks the NIC halted and logs one line (`worker`); here its
//!   guest is stopped and not started again, and resets are refused. When
//!   the cluster's file system has no room left the log says so once.
//!
//! Owns the QEMU child processes (started from this thread, so that
//! `setpriv --pdeathsig` ties their lives to it) and a mapping of every
//! node's SRAM for the port words.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nic_abi::port::{self as pcb, port_reg};
use nic_abi::regs::{self, reg};
use nic_abi::NUM_PORTS;
use nic_cluster_dir::mapped;
use nic_cluster_dir::{ClusterDir, MappedFile};

use super::node::NodeNews;
use super::qemu::QemuSpec;
use super::{Ctx, RtError};

const TICK: Duration = Duration::from_millis(pcb::HEARTBEAT_PERIOD_MS);
const PROBE_EVERY: Duration = Duration::from_millis(50);
const FLASH_EVERY: Duration = Duration::from_millis(100);
/// Why the supervisor resets a NIC that `RtCluster::reset_node` asked for.
pub const RESET_ASKED: &str = "reset asked for";

/// The cluster note a NIC reset leaves (`RtCluster::notes`).
pub fn reset_note(node: usize, why: &str) -> String {
    format!("node {node}: {why}: resetting the NIC")
}

/// Longest wait for a worker to carry out a reset.
const RESET_WAIT: Duration = Duration::from_secs(5);

/// How often the room on the cluster's file system is looked at, and the
/// room that makes a full one worth saying again when it fills.
const SPACE_EVERY: Duration = Duration::from_secs(1);
const SPACE_AGAIN: u64 = 1 << 20;

/// Whether the cluster's file system was found full (`check_space`).
#[derive(Default)]
struct SpaceWatch {
    last: Option<Instant>,
    full: bool,
}

/// What identifies a version of a flash file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlashSig {
    len: u64,
    mtime: i64,
    mtime_ns: i64,
    ino: u64,
}

fn flash_sig(p: &Path) -> Option<FlashSig> {
    let m = std::fs::metadata(p).ok()?;
    Some(FlashSig { len: m.len(), mtime: m.mtime(), mtime_ns: m.mtime_nsec(), ino: m.ino() })
}

struct FlashWatch {
    seen: Option<FlashSig>,
    /// A change not yet acted on (waiting for it to settle).
    pending: Option<FlashSig>,
}

pub(crate) struct Supervisor {
    pub ctx: Arc<Ctx>,
    pub dir: ClusterDir,
    pub srams: Vec<Arc<MappedFile>>,
    /// Every node's host memory (only to watch its size).
    pub hosts: Vec<Arc<MappedFile>>,
    pub qemu: Option<QemuSpec>,
    /// (node, gdb port): start that guest halted, with a gdbstub.
    pub halted: Option<(usize, u16)>,
    /// How long a guest may take to report RUNNING.
    pub boot_timeout: Duration,
}

impl Supervisor {
    /// Run until the cluster stops. `ready` gets the outcome of starting
    /// the guests (at once for live clusters).
    pub fn run(self, ready: Sender<Result<(), RtError>>) {
        let n = self.srams.len();
        let mut children: Vec<Option<Child>> = (0..n).map(|_| None).collect();
        if let Some(spec) = &self.qemu {
            // The guests inherit this thread's timer slack: 1 ns, so that
            // a guest's timer (the MCP's next deadline, a paced packet)
            // ends its wait when it falls due, not up to the default
            // 50 us later (QEMU's main loop sleeps in ppoll until then).
            if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)) {
                self.ctx.note(format!("cannot set the guests' timer slack: {e}"));
            }
            for (node, slot) in children.iter_mut().enumerate() {
                match spec.spawn(&self.dir, node as u32, self.is_gdb_node(node)) {
                    Ok(c) => {
                        self.ctx.qemu_pids[node].store(c.id(), Ordering::Relaxed);
                        *slot = Some(c);
                    }
                    Err(e) => {
                        let _ = ready.send(Err(RtError::Io {
                            what: format!("starting {}", spec.program.display()),
                            err: e,
                        }));
                        kill_all(&mut children);
                        return;
                    }
                }
            }
        }
        let _ = ready.send(Ok(()));
        drop(ready);

        let mut flash: Vec<FlashWatch> = (0..n)
            .map(|node| FlashWatch {
                seen: flash_sig(&self.dir.flash_path(node as u32)),
                pending: None,
            })
            .collect();
        let (mut last_probe, mut last_flash) = (Instant::now(), Instant::now());
        let mut repairs: Vec<[u64; 2]> = vec![[0; 2]; n];
        let mut full = SpaceWatch::default();
        // Guests started and not yet RUNNING: since when.
        let mut booting: Vec<Option<Instant>> = children
            .iter()
            .enumerate()
            .map(|(node, c)| c.as_ref().filter(|_| !self.is_gdb_node(node)).map(|_| Instant::now()))
            .collect();
        let mut news = NodeNews::new(n);
        while !self.ctx.stop.load(Ordering::Relaxed) {
            std::thread::sleep(TICK);
            self.beat(&children);
            self.boot_deadlines(&mut children, &mut booting);
            for node in 0..n {
                if self.ctx.nodes[node].reset_wanted.swap(false, Ordering::AcqRel) {
                    self.reset(node, &mut children, RESET_ASKED);
                }
            }
            self.stop_guests_of_stopped_nodes(&mut children);
            if last_probe.elapsed() >= PROBE_EVERY {
                last_probe = Instant::now();
                self.check_files(&mut children, &mut repairs);
                self.check_space(&mut full);
            }
            if last_flash.elapsed() >= FLASH_EVERY {
                last_flash = Instant::now();
                for (node, w) in flash.iter_mut().enumerate() {
                    let cur = flash_sig(&self.dir.flash_path(node as u32));
                    if cur == w.seen {
                        w.pending = None;
                        continue;
                    }
                    if cur.is_none() {
                        // Deleted (or being replaced): wait for a new one.
                        w.seen = None;
                        continue;
                    }
                    if w.pending != cur {
                        w.pending = cur;
                        continue;
                    }
                    w.seen = cur;
                    w.pending = None;
                    self.reset(node, &mut children, "flash changed");
                }
            }
            self.reap(&mut children);
            self.publish_news(&mut news, &children);
        }
        kill_all(&mut children);
    }

    /// Publish every node's resets and state into every port window
    /// (`NodeNews`): a host process waiting on a port learns of a reset
    /// or a NIC gone at its next heartbeat check.
    fn publish_news(&self, news: &mut NodeNews, children: &[Option<Child>]) {
        let now: Vec<u16> = (0..self.srams.len())
            .map(|node| {
                let resets = self.ctx.nodes[node].reset_req.load(Ordering::Acquire);
                let status = self.srams[node].load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0);
                NodeNews::entry(resets, status, self.qemu.is_some() && children[node].is_none())
            })
            .collect();
        news.publish(&self.srams, &now);
    }

    /// Advance every port's HEARTBEAT of every live NIC (under qemu: whose
    /// guest runs), once a TICK: drivers waiting on a NIC whose heart
    /// stopped report it down.
    ///
    /// Each window also gets a copy of the NIC's `FW_STATUS` (a host
    /// process maps no register), for every NIC, beating or not.
    fn beat(&self, children: &[Option<Child>]) {
        for (node, sram) in self.srams.iter().enumerate() {
            let status = sram.load_u32(reg(regs::FW_STATUS) as u64).unwrap_or(0);
            let beats = self.qemu.is_none() || children[node].is_some();
            for port in 0..NUM_PORTS {
                sram.store_u32(port_reg(port, pcb::NIC_STATUS) as u64, status);
                if beats {
                    sram.fetch_add_u32(port_reg(port, pcb::HEARTBEAT) as u64, 1);
                }
            }
        }
    }

    /// Node files whose size changed, or that some mapping in this process
    /// faulted on after a cut (the guard set the size back): logged, size
    /// set back, NIC reset.
    fn check_files(&self, children: &mut [Option<Child>], seen: &mut [[u64; 2]]) {
        for (node, seen) in seen.iter_mut().enumerate() {
            let mut cut = false;
            let files = [("sram", &self.srams[node]), ("host", &self.hosts[node])];
            for (k, (what, m)) in files.into_iter().enumerate() {
                match m.check_size() {
                    Ok(None) => {}
                    Ok(Some((file, was))) => {
                        cut = true;
                        self.ctx.note(format!(
                            "node {node}: its {what} file {} was resized to {was} bytes while \
                             the cluster ran; set back (anything cut reads as zeros)",
                            file.display(),
                        ));
                    }
                    Err(e) => self.ctx.note(format!(
                        "node {node}: cannot check the size of {}: {e}",
                        m.path().display()
                    )),
                }
                let r = m.repairs();
                if r > seen[k] {
                    cut = true;
                    self.ctx.note(format!(
                        "node {node}: its {what} file was cut while mapped; an access that \
                         would have raised SIGBUS set its size back ({r} so far)"
                    ));
                    seen[k] = r;
                }
            }
            if cut {
                self.reset(node, children, "a node file was cut or resized");
            }
        }
    }

    /// Nodes stopped for good (a file that could not back a page): their
    /// guests are stopped, and not started again.
    fn stop_guests_of_stopped_nodes(&self, children: &mut [Option<Child>]) {
        for (node, slot) in children.iter_mut().enumerate() {
            if slot.is_some() && self.ctx.nodes[node].stopped.load(Ordering::Acquire) {
                if let Some(mut c) = slot.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                self.ctx.qemu_pids[node].store(0, Ordering::Relaxed);
            }
        }
    }

    /// Once a second: is the cluster's file system full? Said once when
    /// it becomes so (sparse node files take a page when first touched,
    /// and a host program whose page cannot be had exits), and again only
    /// after it had room once more.
    fn check_space(&self, w: &mut SpaceWatch) {
        if w.last.is_some_and(|t| t.elapsed() < SPACE_EVERY) {
            return;
        }
        w.last = Some(Instant::now());
        let Ok(space) = mapped::fs_space(self.dir.path()) else { return };
        if space.free < nic_abi::PAGE_SIZE && !w.full {
            w.full = true;
            self.ctx.note(format!(
                "the file system holding {} is full ({space}): a node whose files need a new \
                 page stops, and a host program whose memory needs one exits",
                self.dir.path().display()
            ));
        } else if space.free >= SPACE_AGAIN {
            w.full = false;
        }
    }

    /// The node started halted for a debugger (no boot timeout).
    fn is_gdb_node(&self, node: usize) -> bool {
        self.halted.is_some_and(|h| h.0 == node)
    }

    /// Guests that booted (RUNNING) leave `booting`; one that ran out the
    /// boot timeout is stopped, its NIC marked halted, and the log says so.
    fn boot_deadlines(&self, children: &mut [Option<Child>], booting: &mut [Option<Instant>]) {
        for (node, since) in booting.iter_mut().enumerate() {
            if children[node].is_none() {
                // Reset (or reflashed) since: a new guest, a new deadline.
                *since = None;
                continue;
            }
            let status = self.srams[node].load_u32(reg(regs::FW_STATUS) as u64);
            let Some(t) = *since else {
                if status != Some(regs::FW_RUNNING) && !self.is_gdb_node(node) {
                    *since = Some(Instant::now());
                }
                continue;
            };
            if status == Some(regs::FW_RUNNING) {
                *since = None;
            } else if t.elapsed() >= self.boot_timeout {
                *since = None;
                if let Some(mut c) = children[node].take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                self.ctx.qemu_pids[node].store(0, Ordering::Relaxed);
                self.srams[node].store_u32(reg(regs::FW_STATUS) as u64, regs::FW_HALTED);
                self.ctx.note(format!(
                    "node {node}: its firmware did not start within {:?}; QEMU stopped, NIC halted \
                     (see {}; reflash it with a working image)",
                    self.boot_timeout,
                    self.dir.node_dir(node as u32).join("console.log").display()
                ));
            }
        }
    }

    /// Reset NIC `node`: stop its guest, have its worker reset it, start
    /// a new guest.
    fn reset(&self, node: usize, children: &mut [Option<Child>], why: &str) {
        if self.ctx.nodes[node].stopped.load(Ordering::Acquire) {
            self.ctx.note(format!(
                "node {node}: {why}: not reset: it stopped for a file that could not back a page \
                 (restart the cluster)"
            ));
            return;
        }
        // (Its pid stays published until the new guest's replaces it, so
        // nobody takes a reflash for a guest that died.)
        if let Some(mut c) = children[node].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let sh = &self.ctx.nodes[node];
        let want = sh.reset_req.fetch_add(1, Ordering::AcqRel) + 1;
        // Announced once asked for: a stop that follows the line still
        // finds the request, and the device loop carries it out first.
        self.ctx.note(reset_note(node, why));
        let t = Instant::now();
        while sh.reset_done.load(Ordering::Acquire) < want {
            if t.elapsed() > RESET_WAIT || self.ctx.stop.load(Ordering::Relaxed) {
                self.ctx.note(format!("node {node}: the device loop did not reset the NIC"));
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(spec) = &self.qemu {
            // The same gdbstub port, so a debugger can attach again.
            match spec.spawn(&self.dir, node as u32, false) {
                Ok(c) => {
                    self.ctx.qemu_pids[node].store(c.id(), Ordering::Relaxed);
                    children[node] = Some(c);
                }
                Err(e) => {
                    self.ctx.qemu_pids[node].store(0, Ordering::Relaxed);
                    self.ctx.note(format!("node {node}: cannot restart QEMU: {e}"))
                }
            }
        }
    }

    /// Guests that exited on their own.
    fn reap(&self, children: &mut [Option<Child>]) {
        for (node, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot.as_mut() else { continue };
            if let Ok(Some(status)) = c.try_wait() {
                *slot = None;
                self.ctx.qemu_pids[node].store(0, Ordering::Relaxed);
                if self.ctx.stop.load(Ordering::Relaxed) {
                    continue;
                }
                self.srams[node].store_u32(reg(regs::FW_STATUS) as u64, regs::FW_HALTED);
                use std::os::unix::process::ExitStatusExt;
                let sram = self.dir.sram_path(node as u32);
                let full = mapped::fs_space(&sram).ok().filter(|s| s.free < nic_abi::PAGE_SIZE);
                if let (Some(s), true) =
                    (full, status.signal() == Some(rustix::process::Signal::BUS.as_raw()))
                {
                    // Its RAM is the node's sram file: a page of it that
                    // the full file system could not back killed it. (A
                    // cut file kills it too, with room left: that is
                    // set back and the node reset, as below.)
                    let why = format!("{} ({s})", mapped::FaultCause::NoSpace);
                    self.ctx.nodes[node].stopped.store(true, Ordering::Release);
                    self.ctx.note(format!(
                        "node {node}: SRAM file {} (QEMU's RAM): {why}: QEMU died of SIGBUS; \
                         node {node} stopped (its NIC is marked halted; restart the cluster once \
                         the file system has room)",
                        sram.display()
                    ));
                    continue;
                }
                self.ctx.note(format!(
                    "node {node}: QEMU exited ({status}); NIC halted (see {} and {})",
                    self.dir.node_dir(node as u32).join("qemu.log").display(),
                    self.dir.node_dir(node as u32).join("console.log").display()
                ));
            }
        }
    }
}

fn kill_all(children: &mut [Option<Child>]) {
    for c in children.iter_mut().filter_map(|c| c.as_mut()) {
        let _ = c.kill();
    }
    for c in children.iter_mut().filter_map(|c| c.take()) {
        let mut c = c;
        let _ = c.wait();
    }
}
