//! The two measurements the timing profiles are calibrated against, as
//! small host programs on a two-node star running the MCP through the
//! host driver:
//!
//! - [`pingpong`]: one-way host-to-host latency of small messages (half a
//!   ping-pong round trip, measured on the initiator's host clock from the
//!   send call to the poll that finds the reply). lanai9-gm target: ~17 us.
//! - [`stream`]: an unregulated stream of messages from node 0 to node 1;
//!   bandwidth = bytes / (last receive event - first send call), in 10^6
//!   B/s. lanai4-gm target with 64 KiB messages: ~82 MB/s.
//!
//! Owns only these programs; they use the public API like any other.

use std::cell::RefCell;
use std::rc::Rc;

use host_driver::{DmaBuf, Event, Nic, Port, PortOptions, Priority, SendStatus};
use nic_abi::size_class_for;

use crate::host::{HostApp, HostCx};
use crate::sim::{ClusterConfig, EmuError, RunLimit, RunOutcome, SimCluster};
use crate::SimBackend;
use nic_device::Profile;
use nic_fabric::stats::{NicStats, SimStats};
use nic_fabric::Topology;

/// When the initiator starts (lets the other side open its port first).
const START_NS: u64 = 200_000;

/// What a calibration run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Ping-pong: half round trips (ns), one per iteration. Stream: empty.
    pub samples: Vec<u64>,
    /// Stream: payload bytes delivered and the interval they took (ns).
    pub bytes: u64,
    pub interval_ns: u64,
    pub outcome: RunOutcome,
    pub sim: SimStats,
    /// Both NICs' counters at the end.
    pub nics: Vec<NicStats>,
}

impl Measured {
    /// Smallest sample (ns).
    pub fn min_ns(&self) -> u64 {
        self.samples.iter().copied().min().unwrap_or(0)
    }

    /// Median sample (ns).
    pub fn median_ns(&self) -> u64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        s.get(s.len() / 2).copied().unwrap_or(0)
    }

    /// Bandwidth in 10^6 B/s.
    pub fn mb_s(&self) -> f64 {
        if self.interval_ns == 0 {
            0.0
        } else {
            self.bytes as f64 * 1e3 / self.interval_ns as f64
        }
    }
}

#[derive(Default)]
struct Shared {
    samples: Vec<u64>,
    bytes: u64,
    first_send: Option<u64>,
    last_recv: u64,
}

struct Endpoint {
    be: SimBackend,
    port: Option<Port<SimBackend>>,
    _nic: Option<Nic<SimBackend>>,
    tx: Option<DmaBuf>,
    rx: Vec<DmaBuf>,
}

impl Endpoint {
    fn new(be: SimBackend) -> Endpoint {
        Endpoint { be, port: None, _nic: None, tx: None, rx: Vec::new() }
    }

    /// Open port 0, allocate a send buffer and `nrx` receive buffers of
    /// `size` bytes, and provide them all.
    fn open(&mut self, size: u64, nrx: usize) {
        let nic = Nic::open(self.be.clone()).expect("NIC running");
        let mut port = nic.open_port(0, PortOptions::default()).expect("port 0");
        let class = size_class_for(size.max(1));
        let cap = 1u64 << class;
        self.tx = Some(port.alloc(cap).expect("memory"));
        for i in 0..nrx {
            let b = port.alloc(cap).expect("memory");
            port.provide_receive_buffer(&b, class, Priority::Low, i as u64).expect("provide");
            self.rx.push(b);
        }
        self.port = Some(port);
        self._nic = Some(nic);
    }
}

struct PingPong {
    ep: Endpoint,
    initiator: bool,
    size: u32,
    iters: u64,
    done_iters: u64,
    sent_at: u64,
    started: bool,
    shared: Rc<RefCell<Shared>>,
}

impl PingPong {
    fn send(&mut self) {
        let class = size_class_for(self.size.max(1) as u64);
        let peer = if self.initiator { 1 } else { 0 };
        let tx = self.ep.tx.expect("opened");
        let port = self.ep.port.as_mut().expect("opened");
        port.send(&tx, 0, self.size, class, Priority::Low, peer, 0, 0).expect("send");
    }
}

impl HostApp for PingPong {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        if self.ep.port.is_none() {
            self.ep.open(self.size as u64, 4);
        }
        if self.initiator && !self.started {
            if cx.now_ns() < START_NS {
                cx.wake_at(START_NS);
                return;
            }
            self.started = true;
            self.sent_at = cx.now_ns();
            self.send();
        }
        while let Some(ev) = self.ep.port.as_mut().expect("opened").poll() {
            if let Event::Received { tag, .. } = ev {
                let class = size_class_for(self.size.max(1) as u64);
                let b = self.ep.rx[tag as usize];
                let port = self.ep.port.as_mut().expect("opened");
                port.provide_receive_buffer(&b, class, Priority::Low, tag).expect("provide");
                if self.initiator {
                    let now = cx.now_ns();
                    self.shared.borrow_mut().samples.push((now - self.sent_at) / 2);
                    self.done_iters += 1;
                    if self.done_iters < self.iters {
                        self.sent_at = cx.now_ns();
                        self.send();
                    }
                } else {
                    self.done_iters += 1;
                    self.send();
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.done_iters >= self.iters
    }
}

/// Half round trips of `iters` ping-pongs of `size`-byte messages.
pub fn pingpong(profile: Profile, size: u32, iters: u64) -> Result<Measured, EmuError> {
    let mut c = SimCluster::new(ClusterConfig::new(profile, 2, Topology::Star))?;
    let shared = Rc::new(RefCell::new(Shared::default()));
    for node in 0..2 {
        let app = PingPong {
            ep: Endpoint::new(c.backend(node)),
            initiator: node == 0,
            size,
            iters,
            done_iters: 0,
            sent_at: 0,
            started: false,
            shared: shared.clone(),
        };
        c.spawn(node, Box::new(app));
    }
    let outcome = c.run(RunLimit::Until(10_000_000_000));
    let s = shared.borrow();
    Ok(Measured {
        samples: s.samples.clone(),
        bytes: 0,
        interval_ns: 0,
        outcome,
        sim: c.sim_stats(),
        nics: vec![c.nic_stats(0), c.nic_stats(1)],
    })
}

struct Streamer {
    ep: Endpoint,
    sender: bool,
    size: u32,
    count: u64,
    window: u32,
    posted: u64,
    completed: u64,
    received: u64,
    shared: Rc<RefCell<Shared>>,
}

impl HostApp for Streamer {
    fn wake(&mut self, cx: &mut HostCx<'_>) {
        if self.ep.port.is_none() {
            self.ep.open(self.size as u64, if self.sender { 1 } else { 16 });
        }
        let class = size_class_for(self.size.max(1) as u64);
        if self.sender && self.posted == 0 && cx.now_ns() < START_NS {
            cx.wake_at(START_NS);
            return;
        }
        loop {
            let port = self.ep.port.as_mut().expect("opened");
            if self.sender {
                while self.posted < self.count && self.posted - self.completed < self.window as u64
                {
                    let tx = self.ep.tx.expect("opened");
                    if self.posted == 0 {
                        self.shared.borrow_mut().first_send = Some(cx.now_ns());
                    }
                    port.send(&tx, 0, self.size, class, Priority::Low, 1, 0, self.posted)
                        .expect("send");
                    self.posted += 1;
                }
            }
            let Some(ev) = port.poll() else { break };
            match ev {
                Event::Sent { status, .. } => {
                    assert_eq!(status, SendStatus::Ok, "stream send failed");
                    self.completed += 1;
                }
                Event::Received { tag, len, .. } => {
                    self.received += 1;
                    let mut s = self.shared.borrow_mut();
                    s.bytes += len as u64;
                    s.last_recv = cx.now_ns();
                    drop(s);
                    let b = self.ep.rx[tag as usize];
                    port.provide_receive_buffer(&b, class, Priority::Low, tag).expect("provide");
                }
                _ => {}
            }
        }
    }

    fn done(&self) -> bool {
        if self.sender {
            self.completed >= self.count
        } else {
            self.received >= self.count
        }
    }
}

/// An unregulated stream of `count` messages of `size` bytes, node 0 to
/// node 1, with up to `window` sends outstanding.
pub fn stream(profile: Profile, size: u32, count: u64, window: u32) -> Result<Measured, EmuError> {
    let mut c = SimCluster::new(ClusterConfig::new(profile, 2, Topology::Star))?;
    let shared = Rc::new(RefCell::new(Shared::default()));
    for node in 0..2 {
        let app = Streamer {
            ep: Endpoint::new(c.backend(node)),
            sender: node == 0,
            size,
            count,
            window,
            posted: 0,
            completed: 0,
            received: 0,
            shared: shared.clone(),
        };
        c.spawn(node, Box::new(app));
    }
    let outcome = c.run(RunLimit::Until(100_000_000_000));
    let s = shared.borrow();
    let interval = s.last_recv.saturating_sub(s.first_send.unwrap_or(0));
    Ok(Measured {
        samples: Vec::new(),
        bytes: s.bytes,
        interval_ns: interval,
        outcome,
        sim: c.sim_stats(),
        nics: vec![c.nic_stats(0), c.nic_stats(1)],
    })
}
