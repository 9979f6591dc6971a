//! Multicast behind the fan-out hooks (`offload::fanout::Fanout`): what
//! SEND and RDMA do differently for a multicast's packets, tokens and
//! events. Owns: the pricing a transmit buffer carries (`McastCost`),
//! the `MCAST` flag on reports and on the acks of report streams, the
//! multicast part of Received and Sent events, the `McastLost` events.
//! May touch: the receive slot and token it is handed, the multicast
//! records and leaf reports in `Shared`.

use super::{intake, receiver, relay, Multicast};
use crate::hw::Hw;
use crate::offload::fanout::Fanout;
use crate::records::*;
use crate::recv::{ControlOut, Recv};
use crate::reliability::SendWindow;
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::DescKind;
use nic_abi::event::{Event, EventKind, LostHeads, McastInfo, INLINE_MAX};
use nic_abi::map;
use nic_abi::packet::{piggyback, DataView, Flags, McastTag, NackCode, PacketView, ReportView};

impl Fanout for Multicast {
    #[inline(always)]
    fn owns_kind(kind: u8) -> bool {
        kind == DescKind::Multicast as u8
    }

    // (Out of line: inlined, its frame made the unicast intake save and
    // restore more registers.)
    #[inline(never)]
    fn intake(
        sdma: &mut Sdma,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        at: (u32, u32),
        reg_ok: bool,
        w: &mut Work,
    ) -> bool {
        intake::intake(sdma, cx, hw, p, at, reg_ok, w)
    }

    fn span(b: &[u8]) -> Option<u32> {
        intake::continuation_slots(b).map(|extra| 1 + extra)
    }

    fn token_ended(cx: &mut Shared, t: TokenId, ok: bool) {
        super::token_ended(cx, t, ok);
    }

    #[inline(always)]
    fn live(sdma: &Sdma, cx: &Shared) -> bool {
        steps(cx) || sdma.lead.is_some()
    }

    #[inline(always)]
    fn sdma_step(sdma: &mut Sdma, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        if steps(cx) {
            sdma.mcast_step(cx, hw, w);
        }
    }

    #[inline(always)]
    fn deadlines(cx: &Shared, at: &mut impl FnMut(u64)) {
        if !cx.mcasts.is_empty() {
            for r in cx.mcasts.live_indices() {
                at(super::ends_at(cx, r));
            }
        }
    }

    #[inline(always)]
    fn step_due(sdma: &Sdma, cx: &Shared) -> bool {
        !cx.mcasts.is_empty() && sdma.mcast_step_due(cx)
    }

    fn start(sdma: &mut Sdma, cx: &mut Shared, hw: &impl Hw, rec: McastId) {
        sdma.mcast_start(cx, hw, rec);
    }

    /// A relay's child acknowledged part of a relayed message: the
    /// receive buffers every child has acknowledged can go back.
    #[inline(always)]
    fn head_acked(sdma: &Sdma, cx: &mut Shared, s: TxId) {
        let st = &sdma.txs[s];
        let Some(head) = st.head else { return };
        if cx.tokens[head].kind == TokKind::McastFwd {
            let tok = cx.tokens[head];
            let acked = st.win.una().wrapping_sub(st.base).min(tok.npkts);
            super::kid_progress(cx, head, acked);
        }
    }

    #[inline(always)]
    fn packet_here(cx: &Shared, t: TokenId, built: bool) -> bool {
        // (Only a relay's send to a child waits for its packets: no call
        // for any other token.)
        cx.tokens[t].kind != TokKind::McastFwd || relay::packet_here(cx, t, built)
    }

    #[inline(always)]
    fn payload_in_sram(cx: &Shared, t: TokenId, kind: TokKind) -> bool {
        kind == TokKind::McastFwd && relay::from_rx(cx, t, kind)
    }

    #[inline(always)]
    fn fill(cx: &mut Shared, t: TokenId, kind: TokKind, pkt: u32, buf: &mut TxBuf) -> Option<bool> {
        if kind != TokKind::McastFwd {
            return Some(false);
        }
        relay::fill(cx, t, pkt, buf)
    }

    /// After a relayed packet's first copy, only its copies for further
    /// children are filled this pass (SEND sends one built multicast
    /// packet a pass; the copies go along with it).
    #[inline(always)]
    fn yields(buf: &TxBuf) -> bool {
        buf.mcast == McastCost::First && buf.gather.is_some()
    }

    /// A report's payload: the heads of the subtrees it lost, the bitmap
    /// up to its last byte with a bit set (none: no payload).
    fn report_len(hw: &impl Hw, tok: &SendToken) -> u32 {
        let lost = super::read_list(hw, list_from_raw(tok.local));
        lost.iter().rposition(|&b| b != 0).map_or(0, |i| i as u32 + 1)
    }

    fn write_report(hw: &mut impl Hw, tok: &SendToken, at: u32, plen: u32) {
        let lost = super::read_list(hw, list_from_raw(tok.local));
        hw.write(at, &lost[..plen as usize]);
    }

    /// A multicast's packets are data, flagged MCAST, with its tag and
    /// the child's subtree size (a host-scheme send's in its `cookie`, a
    /// relay's in its `tag`).
    #[inline(always)]
    fn mcast_tag(tok: &SendToken) -> Option<McastTag> {
        match tok.kind {
            TokKind::McastSend => Some(McastTag::from_header(tok.remote, tok.cookie)),
            TokKind::McastFwd => Some(McastTag::from_header(tok.remote, tok.tag as u32)),
            _ => None,
        }
    }

    /// The host scheme's lead send: its first packet's buffer, while its
    /// payload is fetched.
    #[inline(always)]
    fn lead_filling(sdma: &mut Sdma, t: TokenId, pkt: u32, n: usize, b: u8) {
        if pkt == 0 && matches!(sdma.lead, Some((lt, _)) if lt == t) {
            sdma.lead = if n == 0 { None } else { Some((t, Some(b))) };
        }
    }

    #[inline(always)]
    fn buffer_filled(sdma: &mut Sdma, b: u8) {
        if matches!(sdma.lead, Some((_, Some(lb))) if lb == b) {
            sdma.lead = None;
        }
    }

    #[inline(always)]
    fn lead_left(sdma: &Sdma) -> bool {
        sdma.lead.is_some()
    }

    #[inline(always)]
    fn builds(buf: &TxBuf) -> bool {
        let copy = matches!(buf.mcast, McastCost::Further(_)) && buf.gather.is_some();
        buf.mcast != McastCost::None && !copy
    }

    #[inline(always)]
    fn priced(buf: &TxBuf, w: &mut Work) {
        match buf.mcast {
            McastCost::None => {}
            McastCost::First => w.mcast_packets += 1,
            McastCost::Further(i) => w.mcast_further[i as usize % 4] += 1,
        }
    }

    /// A report also acks the data stream its message came on (its
    /// `data_ack`, flagged MCAST): the parent may let go of its record
    /// once it has every report, and must know by then that the packets
    /// it sent arrived.
    #[inline(always)]
    fn piggyback(recv: &mut Recv, hw: &mut impl Hw, key: u32, hdr: u32) -> Flags {
        if key & REPORT_STREAM != 0 {
            if let Some(ack) = recv.piggyback_ack(key & !REPORT_STREAM) {
                let at = hdr + piggyback::DATA_ACK_WORD;
                hw.store_u64(at, piggyback::with_data_ack(hw.load_u64(at), ack));
                return Flags::MCAST;
            }
        }
        Flags::empty()
    }

    #[inline(always)]
    fn report_stream(r: &ControlOut) -> bool {
        r.report
    }

    #[inline(always)]
    fn stream_of(recv: &mut Recv, cx: &mut Shared, p: PacketView<'_>, key: u32) -> u32 {
        receiver::stream_of(recv, cx, p, key)
    }

    #[inline(always)]
    fn first_packet(
        recv: &mut Recv,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        d: DataView<'_>,
        w: &mut Work,
    ) -> Result<(Mrec, u64), NackCode> {
        receiver::first_packet(recv, cx, sdma, hw, d, w)
    }

    #[inline(always)]
    fn data_packet(
        recv: &mut Recv,
        cx: &mut Shared,
        hw: &mut impl Hw,
        at: (RxId, u8, bool),
        d: DataView<'_>,
        w: &mut Work,
    ) -> Option<bool> {
        // A unicast's packet (or the host scheme's): nothing to do, and
        // no call.
        if recv.rxs[at.0].mrec == Mrec::NONE {
            return Some(false);
        }
        receiver::data_packet(recv, cx, hw, at, d, w)
    }

    fn report_in(cx: &mut Shared, hw: &mut impl Hw, buf: u8, r: ReportView<'_>) {
        receiver::report_in(cx, hw, buf, r);
    }

    #[inline(always)]
    fn delivered(cx: &mut Shared, hw: &impl Hw, s: SlotId, w: &mut Work) {
        // (A unicast's: its multicast word says so, no more is read.)
        if cx.slot_mcast(hw, s) & MCAST_PRESENT != 0 {
            w.mcast_deliveries += delivered(cx, hw, s) as u32;
        }
    }

    #[inline(always)]
    fn slot_is_its(sl: &RecvSlot) -> bool {
        sl.mcast_tag().is_some()
    }

    #[inline(always)]
    fn slot_event(sl: &RecvSlot, e: &mut Event) {
        e.mcast = sl.mcast_tag().map(|r| mcast_info(r, 0));
    }

    #[inline(always)]
    fn token_kind(k: TokKind) -> Option<EventKind> {
        match k {
            TokKind::McastSend | TokKind::McastRoot => Some(EventKind::Sent),
            _ => None,
        }
    }

    #[inline(always)]
    fn token_event(tok: &SendToken, e: &mut Event) {
        match tok.kind {
            TokKind::McastSend => e.mcast = Some(mcast_info(tok.remote, 0)),
            TokKind::McastRoot => {
                e.mcast = Some(mcast_info(tok.remote, tok.cookie.min(u16::MAX as u32) as u16))
            }
            _ => {}
        }
    }

    fn lost_event(cx: &Shared, hw: &impl Hw, t: TokenId, part: u8) -> Event {
        let mut e = Event::empty(EventKind::McastLost);
        e.tag = cx.tokens[t].tag;
        e.len = part as u32 * INLINE_MAX as u32;
        e.inline_len = INLINE_MAX as u8;
        if let Some(list) = list_from_raw(cx.tokens[t].first_seq as u64) {
            hw.read(map::mcast_lost(list as u32) + e.len, &mut e.inline);
        }
        e
    }

    #[inline(always)]
    fn token_freed(cx: &mut Shared, t: TokenId) {
        super::drop_list(cx, t);
    }
}

/// Has SDMA's multicast step anything to look at: a record this NIC
/// serves, or a leaf's report to send?
#[inline(always)]
fn steps(cx: &Shared) -> bool {
    !(cx.mcasts.is_empty() && cx.leaf_reports.is_empty())
}

/// A multicast's message is with its host (its event is owed after the
/// copy): its record may report. True for a NIC-served multicast's.
/// (Out of line: the hook looked at the slot's multicast word first.)
#[inline(never)]
fn delivered(cx: &mut Shared, hw: &impl Hw, s: SlotId) -> bool {
    let sl = cx.slot(hw, s);
    let (Some(remote), m) = (sl.mcast_tag(), sl.mrec) else { return false };
    if m == Mrec::LEAF {
        let r = ReportTo { remote, parent: sl.src_node, port: sl.port, prio: sl.prio };
        cx.offloads_live = true;
        return cx.leaf_reports.push_back(r).is_ok();
    }
    let Some(m) = m.rec() else { return false };
    let tag = McastTag::from_header(remote, 0);
    if cx.mcasts.is_live(m) {
        let rec = &mut cx.mcasts[m];
        if rec.is_for(&tag) {
            rec.delivered = true;
            return true;
        }
    }
    false
}

/// The multicast an event speaks of.
fn mcast_info(remote: u64, unreached: u16) -> McastInfo {
    let t = McastTag::from_header(remote, 0);
    let lost = LostHeads::NONE;
    McastInfo {
        group: t.group,
        mseq: t.mseq,
        scheme: t.scheme,
        alg: t.alg,
        k: t.k,
        unreached,
        lost,
    }
}
