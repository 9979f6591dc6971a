//! The streaming loop: `stream` runs one end (the sender keeps a window
//! of sends outstanding, the receiver keeps buffers posted and checks
//! every message and the order), with its configuration and report.

use std::time::Duration;

use nic_abi::class_max_len;
use serde::Serialize;

use super::run::{check_common, pages, retryable, Got, Run, Slot};
use super::{stream_id, BenchError, Check, KIND_STREAM, PAGE_BUDGET};
use host_driver::{Nic, NicBackend, Port, Priority, SendStatus};

/// Which end of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamRole {
    Send,
    Recv,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamConfig {
    pub role: StreamRole,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    /// Sender: most sends outstanding (also bounded by the port's send
    /// tokens and its registrable memory).
    pub window: u32,
    /// Receiver: receive buffers kept posted (also bounded by receive
    /// tokens and registrable memory).
    pub recv_buffers: u32,
    pub priority: Priority,
    pub timeout: Duration,
    pub check: Check,
}

impl StreamConfig {
    pub fn new(role: StreamRole, peer_node: u16, peer_port: u8, size: u32, count: u64) -> Self {
        StreamConfig {
            role,
            peer_node,
            peer_port,
            size,
            count,
            window: 8,
            recv_buffers: 16,
            priority: Priority::Low,
            timeout: Duration::from_secs(30),
            check: Check::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    pub role: StreamRole,
    pub node: u16,
    pub port: u8,
    pub peer_node: u16,
    pub peer_port: u8,
    pub size: u32,
    pub count: u64,
    /// Sends outstanding (sender) or buffers posted (receiver) actually used.
    pub depth: u32,
    /// Bytes the rate counts: sender, every message from its first send
    /// to its last completion; receiver, every message after the first,
    /// from the first arrival to the last.
    pub bytes: u64,
    pub elapsed_ns: u64,
    /// 10^6 bytes per second; None when nothing was timed.
    pub mb_per_s: Option<f64>,
    pub msgs_per_s: Option<f64>,
    pub startup_retries: u64,
}

/// Run one end of a stream on `port`. The sender keeps up to `window`
/// sends outstanding; the receiver keeps `recv_buffers` posted and checks
/// every message's sender, length, content and order.
pub fn stream<B: NicBackend>(
    nic: &Nic<B>,
    port: &mut Port<B>,
    cfg: &StreamConfig,
) -> Result<StreamReport, BenchError> {
    let peer = (cfg.peer_node, cfg.peer_port);
    check_common(nic, port, peer, cfg.size, cfg.count)?;
    if cfg.count > u32::MAX as u64 {
        return Err(BenchError::Config("count must fit in 32 bits".into()));
    }
    let me = (nic.node_id(), port.number());
    let (out_stream, in_stream) = match cfg.role {
        StreamRole::Send => (stream_id(KIND_STREAM, me.0, me.1), 0),
        StreamRole::Recv => (0, stream_id(KIND_STREAM, peer.0, peer.1)),
    };
    let mut run =
        Run::new(port, cfg.timeout, cfg.priority, peer, cfg.size, cfg.check, out_stream, in_stream);
    let class = run.class;
    let result = match cfg.role {
        StreamRole::Send => {
            let fit = (PAGE_BUDGET / pages(cfg.size as u64)) as u32;
            let depth = cfg.window.min(run.port.send_tokens_free()).min(fit);
            if depth == 0 {
                return Err(BenchError::Config(format!(
                    "window {}: no send buffer fits (tokens {}, registrable pages {PAGE_BUDGET})",
                    cfg.window,
                    run.port.send_tokens_free()
                )));
            }
            run.alloc_send(depth)?;
            stream_send(&mut run, cfg).map(|r| (depth, r))
        }
        StreamRole::Recv => {
            let fit = (PAGE_BUDGET / pages(class_max_len(class))) as u32;
            let depth = cfg.recv_buffers.min(run.port.recv_tokens_free()).min(fit);
            if depth == 0 {
                return Err(BenchError::Config(format!(
                    "recv_buffers {}: no receive buffer fits (tokens {}, registrable pages {PAGE_BUDGET})",
                    cfg.recv_buffers,
                    run.port.recv_tokens_free()
                )));
            }
            run.alloc_recv(depth, cfg.count)?;
            stream_recv(&mut run, cfg).map(|r| (depth, r))
        }
    };
    run.free_all();
    let (depth, (bytes, elapsed_ns, msgs, startup_retries)) = result?;
    Ok(StreamReport {
        role: cfg.role,
        node: me.0,
        port: me.1,
        peer_node: peer.0,
        peer_port: peer.1,
        size: cfg.size,
        count: cfg.count,
        depth,
        bytes,
        elapsed_ns,
        mb_per_s: rate(bytes, elapsed_ns).map(|r| r / 1e6),
        msgs_per_s: rate(msgs, elapsed_ns),
        startup_retries,
    })
}

/// (bytes timed, ns, messages timed, start-up retries)
type StreamResult = (u64, u64, u64, u64);

fn stream_send<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &StreamConfig,
) -> Result<StreamResult, BenchError> {
    let start = run.now();
    let mut retries = 0u64;
    // Message 0 alone until the receiver is there.
    let t_start = loop {
        let slot = run.ready_slot(0)?;
        let t = run.now();
        run.post_waiting(slot)?;
        match run.pump(&|| "the first send's completion".to_string())? {
            Got::Sent { status: SendStatus::Ok, .. } => break t,
            Got::Sent { status, .. } if retryable(status) => {
                run.retry_first(start, status)?;
                retries += 1;
            }
            Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            Got::Rx(rx) => {
                return Err(BenchError::Unexpected(format!(
                    "a message in receive buffer {} at a sender",
                    rx.idx
                )))
            }
        }
    };
    let mut t_end = run.now();
    let mut next = 1u64;
    loop {
        // Fill every free slot with the next message and send it.
        while next < cfg.count {
            let Some(s) = run.slots.iter().position(|s| !matches!(s, Slot::InFlight(_))) else {
                break;
            };
            if run.slots[s] != Slot::Filled(next) {
                run.fill(s, next)?;
            }
            match run.post(s) {
                Ok(()) => next += 1,
                Err(None) => break,
                Err(Some(e)) => return Err(e),
            }
        }
        if run.in_flight() == 0 {
            break;
        }
        match run.pump(&|| format!("send completions ({next} of {} posted)", cfg.count))? {
            Got::Sent { status: SendStatus::Ok, .. } => t_end = run.now(),
            Got::Sent { msg, status } => return Err(BenchError::SendFailed { msg, status }),
            Got::Rx(rx) => {
                return Err(BenchError::Unexpected(format!(
                    "a message in receive buffer {} at a sender",
                    rx.idx
                )))
            }
        }
    }
    let ns = t_end.saturating_sub(t_start);
    Ok((cfg.count * cfg.size as u64, ns, cfg.count, retries))
}

fn stream_recv<B: NicBackend>(
    run: &mut Run<'_, B>,
    cfg: &StreamConfig,
) -> Result<StreamResult, BenchError> {
    let mut t_first = 0;
    let mut t_last = 0;
    for i in 0..cfg.count {
        let rx = match run.pump(&|| format!("message {i} of {}", cfg.count))? {
            Got::Rx(rx) => rx,
            Got::Sent { msg, .. } => {
                return Err(BenchError::Unexpected(format!(
                    "a send completion (message {msg}) at a receiver"
                )))
            }
        };
        if i == 0 {
            t_first = rx.t;
        }
        t_last = rx.t;
        run.check_header(&rx, i)?;
        run.check_content(&rx, i)?;
        run.repost(rx.idx)?;
    }
    let timed = cfg.count - 1;
    Ok((timed * cfg.size as u64, t_last.saturating_sub(t_first), timed, 0))
}

fn rate(units: u64, ns: u64) -> Option<f64> {
    (ns > 0 && units > 0).then(|| units as f64 * 1e9 / ns as f64)
}
