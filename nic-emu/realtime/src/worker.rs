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
//! On a busy machine the OS takes the CPU away from the worker now and
//! then, for milliseconds; a real NIC's processor is never descheduled.
//! Two things keep that from the NICs (docs/rate-control.md, live):
//!
//! - A yield that comes back late (the OS ran something else: the machine
//!   is busy) stops the worker yielding for a while: it takes short naps
//!   instead, after which the OS gives a thread that slept the CPU back
//!   soon, where a thread that yielded waits for its turn.
//! - A turn that starts later than the worker asked for, by more than
//!   [`STALL_SLACK`], was a stall: each native NIC's RTC skips it
//!   (`NodeRt::skip_stall`), so its firmware does not find that time
//!   gone at once (an IDT-paced flow a stall behind its NDT, sending the
//!   stall's packets back to back).
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

/// How much longer than the sleep it asked for one turn of the loop may
/// take before the rest counts as a stall, hidden from the NICs' clocks.
/// A turn that steps every NIC takes microseconds and a nap oversleeps by
/// tens of them, so a longer gap is the thread waiting for a CPU. What a
/// stall still shows the NICs is at most this: an IDT-paced flow is at
/// most this behind its NDT after one, and catches up in a burst that
/// short. (Hiding every stall whole would slow the NICs' clocks, and the
/// paced flows, by the time the worker waits for a CPU: a loaded 2-core
/// machine gave the RTC a fifth of the wall clock's time.)
pub(crate) const STALL_SLACK: Duration = Duration::from_millis(1);

/// A yield that came back after this long gave the CPU away to another
/// thread: the machine is busy.
const YIELD_LATE: Duration = Duration::from_micros(200);
/// After such a yield the worker naps instead of yielding for this long,
/// then tries a yield again.
const BUSY_FOR: Duration = Duration::from_millis(100);
/// A nap in place of a yield on a busy machine.
const BUSY_NAP: Duration = Duration::from_micros(20);

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
    let (slack, yield_late, busy_for, busy_nap) =
        (ns(STALL_SLACK), ns(YIELD_LATE), ns(BUSY_FOR), ns(BUSY_NAP));
    // When the last turn started and the sleep it asked for: a turn that
    // starts much later than that follows a stall the NICs' clocks skip.
    let (mut last, mut asked) = (ctx.now(), 0u64);
    // Until when yields are replaced by naps (a yield came back late).
    let mut busy_until = 0u64;
    while !ctx.stop.load(Ordering::Relaxed) {
        let now = ctx.now();
        let stalled = now.saturating_sub(last).saturating_sub(asked.saturating_add(slack));
        (last, asked) = (now, 0);
        if stalled > 0 {
            for n in nodes.iter_mut() {
                n.skip_stall(stalled);
            }
        }
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
        } else if (idle < yield_until || timed) && now >= busy_until {
            std::thread::yield_now();
            let back = ctx.now();
            if back.saturating_sub(now) >= yield_late {
                busy_until = back.saturating_add(busy_for);
            }
        } else if idle < yield_until || timed {
            // The machine is busy: a short nap, after which the OS gives
            // the CPU back sooner than after a yield.
            std::thread::sleep(Duration::from_nanos(busy_nap));
            asked = busy_nap;
        } else {
            let due = nodes.iter().filter_map(|n| n.deadline()).min();
            let t = match due {
                Some(d) => d.saturating_sub(now).clamp(10_000, cur_nap.max(10_000)),
                None => cur_nap,
            };
            std::thread::sleep(Duration::from_nanos(t));
            asked = t;
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
