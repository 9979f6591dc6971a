//! Tracing the NICs of a running live or qemu cluster through its
//! directory, as the cluster's owner's tools reach it
//! (`ClusterDir::map_sram`): [`LiveTracer::start`] sets `TRACE_ENABLE`
//! and `DISPATCH_TRACE_ENABLE` on each traced NIC, [`LiveTracer::poll`]
//! reads what is new in both rings (counting what the firmware overwrote
//! before it was read) and samples the RTCs, [`LiveTracer::finish`] puts
//! the registers back and hands over the [`ClusterTrace`].
//!
//! Clocks. Each NIC's RTC counts from its first boot on the device
//! process's clock; where its tick 0 falls on the tracer's clock (ns since
//! `start`) is estimated from readings of its RTC register. A register is
//! only as fresh as the NIC's last firmware pass (an idle NIC's lags), so
//! the earliest origin any reading gives is kept: while the NIC works,
//! right to within microseconds.

use std::time::Instant;

use host_driver::cluster::ClusterDir;
use host_driver::mapped::MappedFile;
use nic_abi::regs::{self, reg};

use super::{ClusterTrace, Cursors, HostCall, NicTrace};

/// One traced NIC.
struct Traced {
    node: u16,
    sram: MappedFile,
    trace: NicTrace,
    cursors: Cursors,
    /// Its RTC's tick 0 on the tracer's clock (earliest estimate so far).
    origin: i64,
    /// `TRACE_ENABLE` and `DISPATCH_TRACE_ENABLE` as they were.
    before: (u32, u32),
}

/// Tracing some NICs of a running cluster (see the module doc).
pub struct LiveTracer {
    nics: Vec<Traced>,
    rtc_hz: u64,
    start: Instant,
}

fn load(s: &MappedFile, off: u32) -> u32 {
    s.load_u32(off as u64).unwrap_or(0)
}

impl LiveTracer {
    /// Start tracing `nodes` of the cluster in `dir`. Err names the node
    /// whose SRAM could not be mapped, or a NIC that shows no RTC rate.
    pub fn start(dir: &ClusterDir, nodes: &[u32]) -> Result<LiveTracer, String> {
        let start = Instant::now();
        let mut rtc_hz = 0;
        let mut nics = Vec::new();
        for &n in nodes {
            let sram = dir.map_sram(n).map_err(|e| format!("node {n}: mapping its SRAM: {e}"))?;
            let hz = sram.load_u64(reg(regs::RTC_HZ) as u64).unwrap_or(0);
            if hz == 0 {
                return Err(format!("node {n}: its RTC_HZ register is 0 (has it booted?)"));
            }
            rtc_hz = hz;
            let before = (
                load(&sram, reg(regs::TRACE_ENABLE)),
                load(&sram, reg(regs::DISPATCH_TRACE_ENABLE)),
            );
            let cursors = Cursors {
                transitions: load(&sram, reg(regs::TRACE_PROD)),
                dispatches: load(&sram, reg(regs::DISPATCH_TRACE_PROD)),
            };
            sram.store_u32(reg(regs::TRACE_ENABLE) as u64, 1);
            sram.store_u32(reg(regs::DISPATCH_TRACE_ENABLE) as u64, 1);
            nics.push(Traced {
                node: n as u16,
                sram,
                trace: NicTrace::default(),
                cursors,
                origin: i64::MAX,
                before,
            });
        }
        let mut t = LiveTracer { nics, rtc_hz, start };
        t.sample_clocks();
        Ok(t)
    }

    /// The tracer's clock: ns since `start`.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// When the tracer started.
    pub fn started(&self) -> Instant {
        self.start
    }

    fn sample_clocks(&mut self) {
        for n in &mut self.nics {
            let ticks = n.sram.load_u64(reg(regs::RTC) as u64).unwrap_or(0);
            let now = self.start.elapsed().as_nanos() as i64;
            let o = now - (ticks as u128 * 1_000_000_000 / self.rtc_hz as u128) as i64;
            n.origin = n.origin.min(o);
        }
    }

    /// Read what is new in every traced NIC's rings.
    pub fn poll(&mut self) {
        self.sample_clocks();
        for n in &mut self.nics {
            let s = &n.sram;
            // A NIC reset clears the register: switch it on again (the
            // new boot's records are read from its start).
            if load(s, reg(regs::TRACE_ENABLE)) == 0 {
                s.store_u32(reg(regs::TRACE_ENABLE) as u64, 1);
                s.store_u32(reg(regs::DISPATCH_TRACE_ENABLE) as u64, 1);
            }
            n.trace.drain(&mut n.cursors, &|off| load(s, off), &mut |off, b| {
                if !s.read(off as u64, b) {
                    b.fill(0);
                }
            });
        }
    }

    /// Transition records read so far.
    pub fn transitions(&self) -> usize {
        self.nics.iter().map(|n| n.trace.transitions.len()).sum()
    }

    /// Read the rest, put the trace registers back as they were, and
    /// return the trace (`backend`: `live` or `qemu`; `calls`: the host
    /// programs' calls, on the tracer's clock).
    pub fn finish(mut self, backend: &str, calls: Vec<HostCall>) -> ClusterTrace {
        self.poll();
        let end_ns = self.now_ns();
        for n in &self.nics {
            n.sram.store_u32(reg(regs::TRACE_ENABLE) as u64, n.before.0);
            n.sram.store_u32(reg(regs::DISPATCH_TRACE_ENABLE) as u64, n.before.1);
        }
        let ids: Vec<u16> = self.nics.iter().map(|n| n.node).collect();
        let nics = self.nics.into_iter().map(|n| (n.trace, n.origin)).collect();
        let mut t = ClusterTrace::collect(backend, self.rtc_hz, end_ns, nics, Vec::new());
        for (n, id) in t.nodes.iter_mut().zip(ids) {
            n.node = id;
        }
        for c in calls {
            if let Some(n) = t.nodes.iter_mut().find(|n| n.node == c.node) {
                n.host.push(c);
            }
        }
        t
    }
}
