//! RECV's part of multicast: the record a relay or leaf makes at a
//! multicast's first packet (children computed, cached or awaited), the
//! receive buffers a relay holds until its children have each packet, the
//! reports its children send, and which packets belong to report streams.
//! Owns: the `MCAST` flag's meaning on what comes in, the records it makes
//! (`Shared::mcasts`). May touch: RECV's receiving streams' `mrec`, the
//! receive slot it is handed, through the hooks of
//! [`Fanout`](crate::offload::fanout::Fanout).

use crate::hw::Hw;
use crate::offload::multicast as mcast;
use crate::offload::policy::{Win, Window};
use crate::records::*;
use crate::recv::Recv;
use crate::sdma::{packets_for, Sdma};
use crate::shared::{FromRecv, Shared};
use nic_abi::map;
use nic_abi::multicast::{Algorithm, Scheme};
use nic_abi::packet::{DataView, McastTag, NackCode, PacketView, ReportView, HEADER_LEN};
use nic_abi::stats::Stat;

/// The stream key packet `p` of sending stream `key` speaks about: its
/// report stream's for a report and for the acks, nacks, polls and
/// status reports of report streams; and the data stream's ack a report
/// carries, passed to SDMA.
#[inline(always)]
pub(super) fn stream_of(recv: &mut Recv, cx: &mut Shared, p: PacketView<'_>, key: u32) -> u32 {
    // Reports, and the acks and nacks of report streams, belong to
    // the report stream between the two ports.
    let report = match p {
        PacketView::Report(r) => {
            if let Some(ack) = r.data_ack() {
                // The data stream's ack a report carries.
                recv.pass_to_sdma(cx, FromRecv::Ack { key, ack });
            }
            true
        }
        PacketView::Ack(a) => a.report_stream(),
        PacketView::Nack(n) => n.report_stream(),
        PacketView::Poll(q) => q.report_stream(),
        PacketView::Stat(s) => s.report_stream(),
        _ => false,
    };
    if report {
        key | REPORT_STREAM
    } else {
        key
    }
}

/// The first packet `d` of a message: the record this NIC serves it
/// with (`Mrec::NONE`: the host scheme or a unicast) and the tag word its
/// slot carries (0: a unicast), or why it is refused now.
#[inline(always)]
pub(super) fn first_packet(
    recv: &mut Recv,
    cx: &mut Shared,
    sdma: &Sdma,
    hw: &mut impl Hw,
    d: DataView<'_>,
    w: &mut crate::Work,
) -> Result<(Mrec, u64), NackCode> {
    let Some(tag) = d.mcast() else {
        return Ok((Mrec::NONE, 0));
    };
    let mrec = recv.mcast_first(cx, sdma, hw, d, &tag, w)?;
    Ok((mrec, tag.remote() | MCAST_PRESENT))
}

/// A packet `d` (in `buf`) of the message receiving stream `r`
/// assembles: true when this NIC relays it out of its receive buffer;
/// None when the relay holds all the buffers it may (refused: Busy).
#[inline(never)]
pub(super) fn data_packet(
    recv: &mut Recv,
    cx: &mut Shared,
    hw: &mut impl Hw,
    (r, buf, last): (RxId, u8, bool),
    d: DataView<'_>,
    w: &mut crate::Work,
) -> Option<bool> {
    let m = recv.rxs[r].mrec;
    if m == Mrec::NONE {
        // A unicast's packet (or the host scheme's): nothing to do.
        return Some(false);
    }
    let rec = m.rec();
    if rec.is_some_and(|rec| !mcast::serves(cx, rec, d)) {
        // Its record finished before the whole message came
        // (out of time): the rest goes to the host only.
        recv.rxs[r].mrec = Mrec::NONE;
        return Some(false);
    }
    w.mcast_rx_packets += 1;
    if let Some(rec) = rec {
        if !recv.relay_hold(cx, hw, rec, buf) {
            // The relay holds all the buffers it may: later.
            cx.bump(hw, Stat::McastBusy, 1);
            return None;
        }
    }
    if last {
        recv.rxs[r].mrec = Mrec::NONE;
    }
    Some(rec.is_some_and(|m| cx.mcasts.is_live(m) && cx.mcasts[m].source == McastSource::RxBufs))
}

/// A report `rp` in receive buffer `buf`: its subtree's count and lost
/// heads to the record it speaks of; the buffer goes back.
pub(super) fn report_in(cx: &mut Shared, hw: &mut impl Hw, buf: u8, rp: ReportView<'_>) {
    let tag = rp.tag();
    // The heads of the subtrees it lost: the first bytes of
    // a bitmap (parsing bounded the length).
    let mut raw = [0u8; nic_abi::event::LOST_BYTES];
    let n = (rp.lost_len() as usize).min(raw.len());
    hw.read(map::rx_buf(buf as u32) + HEADER_LEN as u32, &mut raw[..n]);
    let unreached = rp.unreached().min(u16::MAX as u32) as u16;
    let who = (rp.stream().addr().src_node(), tag.group, tag.mseq);
    mcast::report_in(cx, hw, who, tag.subtree, unreached, &raw[..n]);
    cx.rxfree.give(hw, buf);
}

impl Recv {
    /// The first packet `d` of a multicast message (tagged `tag`): the
    /// record this NIC serves it with (none for the host scheme), or why
    /// not now.
    fn mcast_first(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        hw: &mut impl Hw,
        d: DataView<'_>,
        tag: &McastTag,
        w: &mut crate::Work,
    ) -> Result<Mrec, NackCode> {
        let scheme = match Scheme::from_code(tag.scheme) {
            Some(Scheme::Host) | None => return Ok(Mrec::NONE),
            Some(s) => s,
        };
        if tag.subtree <= 1 {
            // A leaf keeps no record: it reports when its host has the
            // message (RDMA queues the report).
            return Ok(Mrec::LEAF);
        }
        if cx.mcasts.available() == 0 {
            cx.bump(hw, Stat::McastBusy, 1);
            return Err(NackCode::Busy);
        }
        let (s, a) = (d.stream(), d.stream().addr());
        let mut rec = McastRec::EMPTY;
        rec.tag = *tag;
        rec.port = a.dst_port();
        rec.prio = a.priority();
        rec.size_class = s.size_class();
        rec.len = d.msg_len();
        rec.npkts = packets_for(cx, TokKind::Send, d.msg_len());
        rec.parent = Some(a.src_node());
        rec.subtree = tag.subtree;
        rec.list = ChildList::Scratch;
        rec.deadline = cx.now.saturating_add(mcast::wait_for(cx, tag, rec.subtree));
        let Some(r) = mcast::new_record(cx, hw, rec) else { return Err(NackCode::Busy) };
        if scheme == Scheme::Assisted {
            // Its host hands over the child list once it has the message.
            cx.mcasts[r].list = ChildList::Awaiting;
            return Ok(Mrec::rec_of(r));
        }
        let n = nic_children(cx, hw, r, a.dst_port(), tag, scheme, w);
        // Relaying out of receive buffers needs a token per child now and
        // room to hold buffers; more children than a relay tracks: leaf.
        let n = if n as usize > RELAY_CHILDREN { 0 } else { n };
        let room = cx.mcast_tokens_free(n as usize, TokKind::McastFwd)
            && cx.relay_held() < map::RX_BUF_COUNT / 2
            && (0..n).all(|i| {
                let (node, _) = mcast::child(hw, cx, r, i);
                let port = a.dst_port();
                sdma.stream_room(cx, stream_key(node, port, port, a.priority()), node)
            });
        if n > 0 && !room {
            cx.mcasts.free(r);
            cx.bump(hw, Stat::McastBusy, 1);
            return Err(NackCode::Busy);
        }
        let rec = &mut cx.mcasts[r];
        rec.nchildren = n;
        if n > 0 {
            rec.source = McastSource::RxBufs;
            let _ = cx.from_recv.push_back(&self.to_sdma, FromRecv::FanStart { rec: r });
        }
        Ok(Mrec::rec_of(r))
    }

    /// Packet of a relayed message in receive buffer `buf`: record `m`
    /// holds the buffer until every child has it. False when the relay
    /// holds as many as it may: `RELAY_WINDOW` of this message, or, with
    /// every other message it relays, half of the receive buffers (a
    /// record holding none may take one over that). The other half takes
    /// the acks that let held buffers go: without this bound a few
    /// messages relayed at once could hold every buffer and wait for acks
    /// that find none. (Packets the window policy keeps past a gap never
    /// make it refuse: refusing the packet that fills the gap because of
    /// them would keep them forever. They make room for it instead.)
    fn relay_hold(&mut self, cx: &mut Shared, hw: &mut impl Hw, m: McastId, buf: u8) -> bool {
        if !cx.mcasts.is_live(m) || cx.mcasts[m].source != McastSource::RxBufs {
            return true;
        }
        let rec = cx.mcasts[m];
        let held = rec.have.wrapping_sub(rec.released);
        // Relays hold at most half the buffers; a record holding none may
        // take one over that: its forward may be the token at the head of
        // a stream that another record's forwards (holding the buffers)
        // wait behind, and refusing it would stall both until their
        // deadline.
        if held >= RELAY_WINDOW as u32 || (held > 0 && cx.relay_held() >= map::RX_BUF_COUNT / 2) {
            return false;
        }
        // With the packets the window policy holds past gaps, at most its
        // share: the engine keeps the rest, for the acks and the packets
        // that let held ones go. This packet is in order, so held ones
        // make room for it, not it for them.
        Win::make_room(self, cx, hw);
        cx.rx_holds[buf as usize] += 1;
        let rec = &mut cx.mcasts[m];
        rec.bufs[rec.have as usize % RELAY_WINDOW] = buf;
        rec.have += 1;
        rec.last_in = cx.now;
        true
    }
}

/// NIC-based: children from the group table, computed now or
/// cached at group creation. A NIC without the group (or with
/// another tree cached, or the group on another port than the
/// message's `port`) serves as a leaf: its subtree counts as
/// not reached.
fn nic_children(
    cx: &mut Shared,
    hw: &mut impl Hw,
    r: McastId,
    port: u8,
    tag: &McastTag,
    scheme: Scheme,
    w: &mut crate::Work,
) -> u16 {
    let alg = Algorithm::from_code(tag.alg, tag.k);
    match (mcast::group_head(hw, tag.group), alg) {
        (Some(g), Some(alg)) if g.port == port => {
            if scheme == Scheme::NicCached {
                if g.alg == tag.alg && g.k == tag.k {
                    cx.mcasts[r].list = ChildList::Cached;
                    g.nchildren
                } else {
                    0
                }
            } else {
                let n = mcast::compute_children(hw, cx, r, tag.group, &g, alg).unwrap_or(0);
                mcast::count_steps(w, alg, n);
                n
            }
        }
        _ => 0,
    }
}
