//! A multicast run over one port per member of a running cluster (the
//! `multicast` binary's loop, also called by tests): every member installs
//! the group, keeps receive buffers posted, relays when its scheme asks
//! (host, assisted) and checks every message it gets; the root waits until
//! every member said it is ready (a unicast), then multicasts `count`
//! messages one after another and times each from its call to its
//! completion.
//!
//! Works over any backend (`NicBackend`): the binary attaches to a live or
//! qemu cluster; tests may run every member in a thread of one process.

use std::time::{Duration, Instant};

use host_driver::{
    Algorithm, DmaBuf, Event, Group, Multicast, Nic, NicBackend, Port, Priority, Relayed, Scheme,
    SendStatus,
};
use serde::Serialize;

/// Receive buffers each member keeps posted.
const BUFS: usize = 4;
/// Tag of the root's multicasts (relay sends carry the mseq).
const ROOT_TAG: u64 = 1 << 40;
/// Tag of the "ready" unicasts members send the root.
const READY_TAG: u64 = 1 << 41;
/// Tag of the "done" unicasts the root sends every member at the end: a
/// member keeps its port open until then, since its NIC may still be
/// relaying (a NIC gives up a closed port's sends, relays' included).
const DONE_TAG: u64 = 1 << 42;

/// One member's part.
#[derive(Debug, Clone)]
pub struct McastConfig {
    pub group: Group,
    pub scheme: Scheme,
    pub algorithm: Algorithm,
    pub size: u32,
    pub count: u32,
    /// Without progress for this long, give up.
    pub timeout: Duration,
}

/// What a member saw (the root adds the completion latencies).
#[derive(Debug, Clone, Default, Serialize)]
pub struct McastReport {
    pub node: u16,
    pub rank: u16,
    pub received: u32,
    /// Root: microseconds from each call to its completion (the group has
    /// it: NIC-served schemes; every child acknowledged it: host scheme).
    pub completion_us: Vec<f64>,
    pub relayed: u32,
}

/// The content of multicast `mseq`: checkable, different per message.
pub fn payload(mseq: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(mseq as u8 ^ 0x5A)).collect()
}

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Run one member of the multicast (`nic`/`port` opened on the group's port).
pub fn run<B: NicBackend>(
    nic: &Nic<B>,
    port: &mut Port<B>,
    cfg: &McastConfig,
) -> Result<McastReport, String> {
    let largest = nic_abi::class_max_len(nic_abi::MAX_SIZE_CLASS);
    if cfg.size as u64 > largest {
        return Err(format!("size {}: at most {largest} bytes (the largest message)", cfg.size));
    }
    if cfg.count == 0 {
        return Err("count must be at least 1".into());
    }
    let g = &cfg.group;
    let me = nic.node_id();
    let rank = g.rank_of(me).ok_or_else(|| format!("node {me} is not in the group"))?;
    nic.create_group(g, cfg.algorithm).map_err(err("create_group"))?;
    // A reset or a NIC gone among the members ends a wait at once, naming
    // the member's node.
    for &m in g.members() {
        port.watch(m);
    }
    let class = nic_abi::size_class_for(cfg.size.max(1) as u64);
    let mut bufs = Vec::new();
    for i in 0..BUFS {
        let b = port.alloc(1u64 << class.max(6)).map_err(err("alloc"))?;
        port.provide_receive_buffer(&b, class, Priority::Low, i as u64).map_err(err("provide"))?;
        bufs.push(b);
    }
    let mut rep = McastReport { node: me, rank, ..McastReport::default() };
    let tx = port.alloc(cfg.size.max(8) as u64).map_err(err("alloc"))?;
    if rank != 0 {
        // Ready: the root starts once every member has its group and buffers.
        let done = port.alloc(8).map_err(err("alloc"))?;
        port.provide_receive_buffer(&done, 3, Priority::High, DONE_TAG).map_err(err("provide"))?;
        port.write(&tx, 0, &[1u8; 8]).map_err(err("write"))?;
        port.send(&tx, 0, 8, 3, Priority::High, g.root(), g.port(), READY_TAG)
            .map_err(err("ready"))?;
        member(port, cfg, &bufs, &tx, class, &mut rep)?;
    } else {
        root(port, cfg, &tx, class, &mut rep)?;
    }
    Ok(rep)
}

fn root<B: NicBackend>(
    port: &mut Port<B>,
    cfg: &McastConfig,
    tx: &DmaBuf,
    class: u8,
    rep: &mut McastReport,
) -> Result<(), String> {
    let g = &cfg.group;
    let ready_buf: Vec<DmaBuf> =
        (0..g.size()).map(|_| port.alloc(8)).collect::<Result<_, _>>().map_err(err("alloc"))?;
    for b in &ready_buf {
        port.provide_receive_buffer(b, 3, Priority::High, 0).map_err(err("provide"))?;
    }
    let mut ready = 1;
    let mut deadline = Instant::now() + cfg.timeout;
    while ready < g.size() {
        match next(port, &mut deadline, cfg.timeout)? {
            Event::Received { .. } => ready += 1,
            Event::Sent { .. } | Event::PortOpened { .. } => {}
            other => return Err(format!("root, waiting for members: {other:?}")),
        }
    }
    let kids = g.children(cfg.algorithm, 0).len();
    let src = port.alloc(cfg.size.max(1) as u64).map_err(err("alloc"))?;
    for mseq in 0..cfg.count {
        port.write(&src, 0, &payload(mseq, cfg.size)).map_err(err("write"))?;
        let m = Multicast {
            buf: &src,
            offset: 0,
            len: cfg.size,
            size_class: class,
            priority: Priority::Low,
            group: g,
            scheme: cfg.scheme,
            algorithm: cfg.algorithm,
            mseq,
            tag: ROOT_TAG + mseq as u64,
        };
        let t0 = Instant::now();
        let mut posted = port.multicast(&m).map_err(err("multicast"))? as usize;
        let mut left = if cfg.scheme == Scheme::Host { kids } else { 1 };
        while left > 0 {
            match next(port, &mut deadline, cfg.timeout)? {
                Event::Sent { tag, status, mcast, .. } if tag == ROOT_TAG + mseq as u64 => {
                    let unreached = mcast.map_or(0, |m| m.unreached);
                    if status != SendStatus::Ok || unreached != 0 {
                        let which = match mcast.map(|m| g.not_reached(&m)) {
                            Some(n) if n.complete => format!(": nodes {:?}", n.members),
                            Some(n) if !n.members.is_empty() => {
                                format!(", among them nodes {:?}", n.members)
                            }
                            _ => String::new(),
                        };
                        return Err(format!(
                            "multicast {mseq}: {status:?}, {unreached} not reached{which}"
                        ));
                    }
                    left -= 1;
                    if cfg.scheme == Scheme::Host && posted < kids {
                        posted +=
                            port.multicast_more(&m, posted).map_err(err("multicast"))? as usize;
                    }
                }
                Event::Sent { .. } | Event::PortOpened { .. } => {}
                other => return Err(format!("root, multicast {mseq}: {other:?}")),
            }
        }
        rep.completion_us.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    // Done: every member may close its port now.
    for &m in &g.members()[1..] {
        port.send(tx, 0, 8, 3, Priority::High, m, g.port(), DONE_TAG).map_err(err("done"))?;
    }
    let mut acked = 1;
    while acked < g.size() {
        match next(port, &mut deadline, cfg.timeout)? {
            Event::Sent { tag: DONE_TAG, .. } => acked += 1,
            Event::Sent { .. } | Event::Received { .. } => {}
            other => return Err(format!("root, saying done: {other:?}")),
        }
    }
    Ok(())
}

fn member<B: NicBackend>(
    port: &mut Port<B>,
    cfg: &McastConfig,
    bufs: &[DmaBuf],
    tx: &DmaBuf,
    class: u8,
    rep: &mut McastReport,
) -> Result<(), String> {
    let mut deadline = Instant::now() + cfg.timeout;
    // Relay sends out of a buffer still out: (mseq, buffer index, count).
    let mut lent: Vec<(u32, usize, u32)> = Vec::new();
    let mut done = false;
    while rep.received < cfg.count || !lent.is_empty() || !done {
        match next(port, &mut deadline, cfg.timeout)? {
            Event::Received { tag: DONE_TAG, .. } => done = true,
            ev @ Event::Received { buffer, len, mcast: Some(info), .. } => {
                let i = bufs.iter().position(|b| b.vaddr == buffer).ok_or("not our buffer")?;
                let mut data = vec![0u8; len as usize];
                port.read(&bufs[i], 0, &mut data).map_err(err("read"))?;
                if info.mseq != rep.received || data != payload(info.mseq, cfg.size) {
                    return Err(format!(
                        "node {}: multicast {} ({len} B) where {} was due intact",
                        rep.node, info.mseq, rep.received
                    ));
                }
                rep.received += 1;
                match port.relay(&ev, &cfg.group, &bufs[i], class, info.mseq as u64) {
                    Ok(Relayed::Posted { descriptors }) => {
                        rep.relayed += 1;
                        lent.push((info.mseq, i, descriptors));
                    }
                    Ok(Relayed::Nothing) => port
                        .provide_receive_buffer(&bufs[i], class, Priority::Low, i as u64)
                        .map_err(err("provide"))?,
                    Err(e) => return Err(format!("relay: {e}")),
                }
            }
            Event::Sent { tag: READY_TAG, status, .. } if status != SendStatus::Ok => {
                // The root's port is not open yet: say so again shortly.
                std::thread::sleep(Duration::from_millis(20));
                let g = &cfg.group;
                port.send(tx, 0, 8, 3, Priority::High, g.root(), g.port(), READY_TAG)
                    .map_err(err("ready"))?;
            }
            Event::Sent { tag, status, .. } if tag != READY_TAG => {
                if status != SendStatus::Ok {
                    return Err(format!("relay send: {status:?}"));
                }
                let k = lent.iter().position(|l| l.0 as u64 == tag).ok_or("a Sent for nothing")?;
                lent[k].2 -= 1;
                if lent[k].2 == 0 {
                    let (_, i, _) = lent.remove(k);
                    port.provide_receive_buffer(&bufs[i], class, Priority::Low, i as u64)
                        .map_err(err("provide"))?;
                }
            }
            Event::Sent { .. } | Event::PortOpened { .. } => {}
            other => return Err(format!("node {}: {other:?}", rep.node)),
        }
    }
    Ok(())
}

/// The next event, blocking; an error once `timeout` passes without one.
fn next<B: NicBackend>(
    port: &mut Port<B>,
    deadline: &mut Instant,
    timeout: Duration,
) -> Result<Event, String> {
    loop {
        if let Some(ev) = port.poll() {
            *deadline = Instant::now() + timeout;
            return Ok(ev);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no event for {timeout:?}"));
        }
        match port.wait(left.min(Duration::from_millis(100))) {
            Ok(ev) => {
                *deadline = Instant::now() + timeout;
                return Ok(ev);
            }
            Err(host_driver::DriverError::Timeout) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}
