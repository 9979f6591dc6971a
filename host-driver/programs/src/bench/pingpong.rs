//! The ping-pong loop: `pingpong` runs one end (ping: send request i,
//! wait for reply i, record half the round trip; pong: answer each
//! request), with its configuration and report.

use std::time::Duration;

use nic_abi::{class_max_len, size_class_for};
use serde::Serialize;

use super::run::{check_common, pages, retryable, Got, Run};
use super::{stream_id, BenchError, Check, LatencySummary, KIND_PING, KIND_PONG, PAGE_BUDGET};
use host_driver::{Nic, NicBackend, Port, Priority, SendStatus};

/// Which end of a ping-pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PingRole {
    /// Sends a request, waits for the reply, measures.
    Ping,
    /// Answers each request.
    Pong,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingPongConfig {
    pub role: PingRole,
    pub peer_node: u16,
    pub peer_port: u8,
    /// Bytes per message (both directions), at least 1.
    pub size: u32,
    /// Round trips measured.
    pub count: u64,
    /// Round trips before measuring (content-checked too).
    pub warmup: u64,
    pub priority: Priority,
    /// Longest wait for an event (and for the peer to come up).
    pub timeout: Duration,
    pub check: Check,
}

impl PingPongConfig {
    pub fn new(role: PingRole, peer_node: u16, peer_port: u8, size: u32, count: u64) -> Self {
        PingPongConfig {
            role,
            peer_node,
            peer_port,
            size,
            count,
            warmup: 10,
            priority: Priority::Low,
            timeout: Duration::from_secs(30),
            check: Check::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingPongReport {
    pub role: PingRole,
    pub node: u16,
    pub port: u8,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    pub warmup: u64,
    /// One-way latency (half the round trip), measured at the ping only.
    pub one_way: Option<LatencySummary>,
    /// Backend ns from the first measured send (ping) or first request
    /// (pong) to the end.
    pub elapsed_ns: u64,
    /// Times the first message was sent again because the peer was not up.
    pub startup_retries: u64,
}

/// Run one end of a ping-pong on `port` (opened on `nic`). The ping sends
/// request i, waits for reply i, and records half the round trip; the pong
/// answers each request. Both check every message (sender, class,
/// priority, length, content, index) and wait for their last sends to
/// complete before returning.
pub fn pingpong<B: NicBackend>(
    nic: &Nic<B>,
    port: &mut Port<B>,
    cfg: &PingPongConfig,
) -> Result<PingPongReport, BenchError> {
    let peer = (cfg.peer_node, cfg.peer_port);
    check_common(nic, port, peer, cfg.size, cfg.count)?;
    let total = cfg
        .count
        .checked_add(cfg.warmup)
        .filter(|&t| t <= u32::MAX as u64)
        .ok_or_else(|| BenchError::Config("count + warmup must fit in 32 bits".into()))?;
    let me = (nic.node_id(), port.number());
    let (out_kind, in_kind) = match cfg.role {
        PingRole::Ping => (KIND_PING, KIND_PONG),
        PingRole::Pong => (KIND_PONG, KIND_PING),
    };
    let class = size_class_for(cfg.size as u64);
    // Two send slots (prefill the next message while one is in flight)
    // and two receive buffers, fewer if tokens or the page table say so.
    let mut nsend = port.send_tokens_free().clamp(1, 2);
    let mut nrecv = port.recv_tokens_free().clamp(1, 2);
    while nsend as u64 * pages(cfg.size as u64) + nrecv as u64 * pages(class_max_len(class))
        > PAGE_BUDGET
    {
        if nsend > 1 {
            nsend -= 1;
        } else if nrecv > 1 {
            nrecv -= 1;
        } else {
            return Err(BenchError::Config(format!(
                "size {}: a send and a receive buffer do not fit in one port's {} registrable pages",
                cfg.size, PAGE_BUDGET
            )));
        }
    }
    let mut run = Run::new(
        port,
        cfg.timeout,
        cfg.priority,
        peer,
        cfg.size,
        cfg.check,
        stream_id(out_kind, me.0, me.1),
        stream_id(in_kind, peer.0, peer.1),
    );
    run.alloc_send(nsend)?;
    run.alloc_recv(nrecv, total)?;
    let result = match cfg.role {
        PingRole::Ping => ping(&mut run, cfg, total),
        PingRole::Pong => pong(&mut run, total),
    };
    run.free_all();
    let (one_way, elapsed_ns, startup_retries) = result?;
    Ok(PingPongReport {
        role: cfg.role,
        node: me.0,
        port: me.1,
        peer_node: peer.0,
        peer_port: peer.1,
        size: cfg.size,
        count: cfg.count,
        warmup: cfg.warmup,
        one_way,
        elapsed_ns,
        startup_retries,
    })
}

type PingResult = (Option<LatencySummary>, u64, u64);

fn ping<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &PingPongConfig,
    total: u64,
) -> Result<PingResult, BenchError> {
    let mut samples = Vec::with_capacity(cfg.count as usize);
    let mut retries = 0u64;
    let start = run.now();
    let mut first_measured = None;
    let mut started = false;
    let mut i = 0u64;
    run.prefill(0)?;
    while i < total {
        let slot = run.ready_slot(i)?;
        let t0 = run.now();
        run.post_waiting(slot)?;
        if i >= cfg.warmup && first_measured.is_none() {
            first_measured = Some(t0);
        }
        if i + 1 < total {
            run.prefill(i + 1)?;
        }
        // Wait for reply i; a failed first send means the peer is not up.
        let reply = loop {
            let what = || format!("the reply to request {i}");
            match run.pump(&what)? {
                Got::Rx(rx) => break Ok(rx),
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } if !started && msg == i && retryable(status) => {
                    break Err(status)
                }
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            }
        };
        let rx = match reply {
            Ok(rx) => rx,
            Err(status) => {
                run.retry_first(start, status)?;
                retries += 1;
                continue;
            }
        };
        let t1 = rx.t;
        run.check_header(&rx, i)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
        started = true;
        if i >= cfg.warmup {
            samples.push(t1.saturating_sub(t0) / 2);
        }
        i += 1;
    }
    run.drain()?;
    let elapsed = run.now().saturating_sub(first_measured.unwrap_or(start));
    Ok((LatencySummary::from_samples(&mut samples), elapsed, retries))
}

fn pong<B: NicBackend>(run: &mut Run<'_, B>, total: u64) -> Result<PingResult, BenchError> {
    let mut first = None;
    run.prefill(0)?;
    for i in 0..total {
        let rx = loop {
            match run.pump(&|| format!("request {i}"))? {
                Got::Rx(rx) => break rx,
                Got::Sent { status: SendStatus::Ok, .. } => {}
                Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            }
        };
        first.get_or_insert(rx.t);
        // Answer at once; check the content while the reply travels.
        run.check_header(&rx, i)?;
        let slot = run.ready_slot(i)?;
        run.post_waiting(slot)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
        if i + 1 < total {
            run.prefill(i + 1)?;
        }
    }
    run.drain()?;
    let elapsed = run.now().saturating_sub(first.unwrap_or(0));
    Ok((None, elapsed, 0))
}
