//! Selective repeat's part of SDMA: what a STAT or USTAT from the
//! receiver does to a sending stream (acknowledges, marks packets to
//! resend), where the send cursor goes (the oldest packet to resend, else
//! the first new one), each packet's poll stamp in SRAM
//! (`map::sr_stamp`), and the answer to a refusal (only the refused
//! packet goes again).
//!
//! Owns: the stamps in `map::SR_STAMPS` and each stream's `marks`. May
//! touch: SDMA's sending streams, through the hooks of
//! [`Window`](crate::offload::policy::Window) it stands behind.

use super::{ps_lt, Stamps, Stat as SrStat};
use crate::hw::Hw;
use crate::records::*;
use crate::reliability::SendWindow;
use crate::sdma::Sdma;
use crate::shared::Shared;
use nic_abi::packet::NackCode;
use nic_abi::stats::Stat;

impl Sdma {
    /// A STAT or USTAT for stream `key` in receive buffer `buf`.
    pub(super) fn report_in(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        key: u32,
        buf: u8,
        ustat: bool,
    ) {
        let stat = read_stat(hw, buf);
        cx.rxfree.give(hw, buf);
        match (self.tx_index.get(&key), stat) {
            (Some(&s), Some(st)) => self.on_stat(cx, hw, s, &st, ustat),
            (_, None) => {
                cx.bump(hw, Stat::BadHeaders, 1);
                cx.bump(hw, Stat::Drops, 1);
            }
            _ => {}
        }
    }

    /// Selective repeat: a STAT answered a poll, or a USTAT (`ustat`)
    /// named a new gap. Everything it acknowledges is; what a USTAT lists
    /// missing is resent at once, what a STAT lists only if it went
    /// before that poll (its stamp says). (A go-back-N sender takes the
    /// first gap as a gap nack.)
    fn on_stat(&mut self, cx: &mut Shared, hw: &impl Hw, s: TxId, st: &SrStat, ustat: bool) {
        self.on_ack(cx, s, st.ack);
        if !cx.cfg.selective {
            if let Some(&(lo, _)) = st.missing.first() {
                let round = self.txs[s].epoch as u8;
                self.on_nack(cx, hw, s, NackCode::OutOfOrder, lo, round);
            }
            return;
        }
        if ustat {
            for &(lo, hi) in &st.missing {
                self.mark_resend(cx, s, lo, hi, RetxCause::Gap);
            }
            return;
        }
        let t = &mut self.txs[s];
        let (una, high) = (t.win.una(), t.win.high());
        if t.marks.stat(una, high, st, &SramStamps { hw, stream: s }) > 0 {
            let cause = if t.polled { RetxCause::Timeout } else { RetxCause::Gap };
            self.resends_marked(cx, s, una, cause);
        }
        self.sr_position(cx, s);
    }

    /// Selective repeat: mark `lo..hi` (of what was sent and is not
    /// acknowledged) to be resent for `cause`, ahead of new packets.
    fn mark_resend(&mut self, cx: &mut Shared, s: TxId, lo: u32, hi: u32, cause: RetxCause) {
        let t = &mut self.txs[s];
        if t.marks.ustat(t.win.una(), t.win.high(), lo, hi) > 0 {
            self.resends_marked(cx, s, lo, cause);
        }
        self.sr_position(cx, s);
    }

    /// Packets from `from` on were marked to resend for `cause`. They get
    /// a stamp of their own (the poll number moves on): a nack or STAT
    /// about an earlier copy is then told apart from one about them.
    fn resends_marked(&mut self, cx: &Shared, s: TxId, from: u32, cause: RetxCause) {
        let t = &mut self.txs[s];
        t.marks.poll();
        t.retx_cause = cause;
        t.rtt.rewound(from);
        t.last_progress = cx.now;
    }

    /// Selective repeat: the send cursor goes to the oldest packet to
    /// resend, else back to the first new one. Not a rewind: packets
    /// filled meanwhile stay good (the stream's epoch stays).
    pub(super) fn sr_position(&mut self, cx: &mut Shared, s: TxId) {
        let t = &self.txs[s];
        let target = t.marks.next_resend(t.win.una()).unwrap_or(t.win.high());
        if target != t.win.next() {
            self.seek_to(cx, s, target);
        }
    }
    /// The receiver refused `seq` for want of a buffer (`code`): the
    /// packets after it may be held there, so only it goes again, backed
    /// off while the refusals go on (every stream into a receiver short of
    /// buffers retrying each refused packet every retry time took its
    /// whole memory bus, and it could not get the buffers it lacked to its
    /// host). Returns the wait.
    pub(super) fn sr_refused(&mut self, cx: &mut Shared, s: TxId, seq: u32, code: NackCode) -> u64 {
        self.mark_resend(cx, s, seq, seq.wrapping_add(1), RetxCause::NoBuffer);
        if code == NackCode::NoBuffer {
            self.txs[s].refused(cx.cfg.nobuf_retry, cx.cfg.send_timeout)
        } else {
            cx.cfg.nobuf_retry
        }
    }

    /// A nack of `seq` drawn by a packet stamped `round`: news only if
    /// `seq` has not gone again since that packet (its stamp is not
    /// later; a resend gets a stamp of its own, `mark_resend`).
    pub(super) fn sr_nack_news(&self, hw: &impl Hw, s: TxId, seq: u32, round: u8) -> bool {
        !ps_lt(round, SramStamps { hw, stream: s }.stamp(seq))
    }

    /// Packet `seq` of stream `s` went to SEND: it is stamped with the
    /// poll number now current; a resend of it is no longer due; the
    /// cursor goes to the next resend, or back to the new packets.
    pub(super) fn sr_sent(&mut self, cx: &mut Shared, hw: &mut impl Hw, s: TxId, seq: u32) {
        let st = &mut self.txs[s];
        hw.write(nic_abi::map::sr_stamp(s.raw() as u32, seq), &[st.marks.ps()]);
        st.marks.resent(st.win.una(), seq);
        self.sr_position(cx, s);
    }
}

/// The poll stamps of stream `stream` in SRAM (`map::sr_stamp`).
struct SramStamps<'a, H: Hw> {
    hw: &'a H,
    stream: TxId,
}

impl<H: Hw> Stamps for SramStamps<'_, H> {
    fn stamp(&self, seq: u32) -> u8 {
        let mut b = [0u8; 1];
        self.hw.read(nic_abi::map::sr_stamp(self.stream.raw() as u32, seq), &mut b);
        b[0]
    }
}

/// The STAT in receive buffer `buf`, if its payload is one a receiver
/// would send.
fn read_stat(hw: &impl Hw, buf: u8) -> Option<SrStat> {
    use nic_abi::packet::{field, HEADER_LEN, STAT_PAYLOAD_MAX};
    let at = nic_abi::map::rx_buf(buf as u32);
    let mut len = [0u8; 2];
    hw.read(at + field::PAYLOAD_LEN as u32, &mut len);
    let n = u16::from_le_bytes(len) as usize;
    let mut b = [0u8; STAT_PAYLOAD_MAX];
    let payload = b.get_mut(..n)?;
    hw.read(at + HEADER_LEN as u32, payload);
    SrStat::decode(payload)
}
