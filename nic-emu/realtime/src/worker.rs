//! The real-time loop: one thread runs a set of NICs (by default all of
//! them), stepping each in turn (MCP poll, engines, fabric), so a
//! ping-pong crosses the whole cluster without a thread hand-off.
//!
//! When nothing moves it backs off ([`Backoff`]): spins briefly, then
//! yields, then sleeps in short naps (shorter when a native MCP timer is
//! due sooner), which grow once the cluster has been idle a while, so an
//! idle cluster does not burn a core. A doorbell or a firmware's post is
//! then seen at the end of the current nap.
//!
//! Owns its NICs (`NodeRt`); shares the fabric and the control words
//! (`Ctx`) with the other workers and the supervisor.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::fabric::Held;
use super::node::NodeRt;
use super::Ctx;

/// How a worker waits while its NICs are idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Spin this long after the last progress.
    pub spin: Duration,
    /// Then `sched_yield` until this long after it.
    pub yield_until: Duration,
    /// Then sleep this long per wait (less when a firmware timer is due),
    pub nap: Duration,
    /// doubling after `long_idle` of idleness up to this.
    pub max_nap: Duration,
    pub long_idle: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            spin: Duration::from_micros(2),
            yield_until: Duration::from_millis(2),
            nap: Duration::from_micros(100),
            max_nap: Duration::from_millis(1),
            long_idle: Duration::from_millis(50),
        }
    }
}

impl Backoff {
    /// Never sleep: lowest latency, one busy core per worker.
    pub fn busy() -> Backoff {
        Backoff {
            spin: Duration::MAX,
            yield_until: Duration::MAX,
            nap: Duration::ZERO,
            max_nap: Duration::ZERO,
            long_idle: Duration::MAX,
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Iterations between two refreshes of the counters snapshots while busy.
const SNAPSHOT_EVERY: u64 = 4096;

pub(crate) fn run(mut nodes: Vec<NodeRt>, ctx: Arc<Ctx>) {
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let b = ctx.backoff;
    let (spin, yield_until, nap) = (ns(b.spin), ns(b.yield_until), ns(b.nap));
    let (max_nap, long_idle) = (ns(b.max_nap).max(nap), ns(b.long_idle));
    let mut cur_nap = nap;
    let mut last_progress = ctx.now();
    let mut iter = 0u64;
    let mut snapped = false;
    // The only device thread (it runs every NIC): it holds every inbox.
    let mut held =
        if nodes.len() == ctx.nodes.len() { ctx.fabric.hold_all() } else { Held::none() };
    while !ctx.stop.load(Ordering::Relaxed) {
        let now = ctx.now();
        let (mut progress, mut timed) = (false, false);
        for n in nodes.iter_mut() {
            progress |= carry_out_reset(n, &ctx, &mut held, now);
            let s = n.step(&ctx.fabric, &mut held, now, &mut pool);
            progress |= s.progress;
            timed |= s.timed;
            stop_if_faulted(n, &ctx, &mut held);
        }
        iter = iter.wrapping_add(1);
        if iter.is_multiple_of(SNAPSHOT_EVERY) {
            snapshot(&nodes, &ctx);
        }
        if progress {
            last_progress = now;
            snapped = false;
            cur_nap = nap;
            continue;
        }
        if !snapped {
            snapshot(&nodes, &ctx);
            snapped = true;
        }
        let idle = now.saturating_sub(last_progress);
        if idle < spin {
            // One pause: on some cores it lasts ~100 cycles already.
            std::hint::spin_loop();
        } else if idle < yield_until || timed {
            std::thread::yield_now();
        } else {
            let due = nodes.iter().filter_map(|n| n.deadline()).min();
            let t = match due {
                Some(d) => d.saturating_sub(now).clamp(10_000, cur_nap.max(10_000)),
                None => cur_nap,
            };
            std::thread::sleep(Duration::from_nanos(t));
            if idle >= long_idle {
                cur_nap = (cur_nap.saturating_mul(2)).min(max_nap);
            }
        }
    }
    // A reset asked for (and announced) before the stop is carried out, so
    // the counters printed as the process stops include it.
    let now = ctx.now();
    for n in nodes.iter_mut() {
        carry_out_reset(n, &ctx, &mut held, now);
    }
    snapshot(&nodes, &ctx);
}

/// A page of one of `n`'s files could not be backed (isolated, in any
/// mapping of this process): stop the NIC for good, mark it stopped for
/// the supervisor, and say so in one line.
fn stop_if_faulted(n: &mut NodeRt, ctx: &Ctx, held: &mut Held) {
    if n.stopped() {
        return;
    }
    let Some(f) = n.file_fault() else { return };
    n.stop_for_fault(&ctx.fabric, held);
    ctx.nodes[n.node].stopped.store(true, Ordering::Release);
    ctx.note(f.line(n.node));
}

/// Reset `n` if the supervisor asked for a reset it has not carried out;
/// true if it did. A NIC stopped for good is not reset (the request is
/// acknowledged).
fn carry_out_reset(n: &mut NodeRt, ctx: &Ctx, held: &mut Held, now: u64) -> bool {
    let sh = &ctx.nodes[n.node];
    let req = sh.reset_req.load(Ordering::Acquire);
    if req == n.reset_seen {
        return false;
    }
    if n.stopped() {
        n.reset_seen = req;
        sh.reset_done.store(req, Ordering::Release);
        return false;
    }
    if let Err(e) = n.reset(&ctx.fabric, held, &ctx.params, now, false) {
        ctx.note(format!("node {}: {e}", n.node));
    }
    n.reset_seen = req;
    sh.reset_done.store(req, Ordering::Release);
    true
}

fn snapshot(nodes: &[NodeRt], ctx: &Ctx) {
    for n in nodes {
        let c = n.counters();
        *ctx.nodes[n.node].snapshot.lock().unwrap_or_else(|e| e.into_inner()) = c;
    }
}
