//! Selective repeat's reports from RECV: the USTAT naming a gap and the
//! STAT answering a poll, each written into its control packet.

use crate::hw::Hw;
use crate::records::*;
use crate::recv::{ControlOut, Recv};
use nic_abi::packet::PacketType;

impl Recv {
    /// SEND is about to send USTAT `c`: what it carries (as an ack does)
    /// and the runs of its gap still missing now (a resend may have come
    /// since it was queued: naming that again would have it sent twice),
    /// as a STAT's list; None when none is.
    /// SEND is about to send control `c`, a STAT or USTAT: its payload
    /// written at `at`; what it carries as an ack does, its type and
    /// payload length; None when it went stale.
    pub(super) fn report_out(
        &mut self,
        hw: &mut impl Hw,
        at: u32,
        c: Control,
    ) -> Option<(ControlOut, PacketType, usize)> {
        let (ptype, stat) = match c.stat_of() {
            Some(_) => (PacketType::Stat, self.stat_out(c)),
            None => (PacketType::Ustat, self.ustat_out(c)),
        };
        let (r, stat) = stat?;
        let mut p = [0u8; nic_abi::packet::STAT_PAYLOAD_MAX];
        let len = stat.encode(&mut p).unwrap_or(0);
        hw.write(at, &p[..len]);
        Some((r, ptype, len))
    }

    fn ustat_out(&mut self, c: Control) -> Option<(ControlOut, super::Stat)> {
        let (lo, hi) = c.ustat_of()?;
        let r = c.rx_stream()?;
        if !self.rxs.is_live(r) {
            return None;
        }
        let w = self.rxs[r].win;
        let missing = w.missing(lo, hi);
        if missing.is_empty() {
            return None;
        }
        let out = self.control_out(Control::new(r, None))?;
        Some((out, super::Stat { ps: 0, ns: hi, ack: w.expected(), missing }))
    }

    /// SEND is about to send STAT `c`: what it carries (as an ack does)
    /// and the STAT itself, or None when the stream is gone.
    fn stat_out(&mut self, c: Control) -> Option<(ControlOut, super::Stat)> {
        let (ns, ps) = c.stat_of()?;
        let r = c.rx_stream()?;
        if !self.rxs.is_live(r) {
            return None;
        }
        let stat = self.rxs[r].win.stat(super::Poll { ns, ps: ps as u32 });
        let out = self.control_out(Control::new(r, None))?;
        Some((out, stat))
    }
}
