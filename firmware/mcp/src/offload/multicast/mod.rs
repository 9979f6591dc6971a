//! Multicast: the records of the multicasts this NIC serves and what the
//! machines do with them. A multicast is unicasts along the edges of a
//! tree (or chain) over the ordinary reliable streams, each packet tagged
//! with its [`McastTag`]; the tree's shape comes from
//! `nic_abi::multicast`. Who computes it depends on the scheme:
//!
//! - host: the hosts do everything; the NIC only carries the tag (one
//!   descriptor per child) and puts it in the Received event. No record.
//! - nic: the root's NIC, and every relay's, computes its children from
//!   the group table (work counted per child) and relays each packet to
//!   them out of the receive buffer it arrived in (no host-DMA), while it
//!   also delivers to its own host.
//! - nic-cached: the same, with each NIC's children cached in its group
//!   table when the group was created: no computing per message.
//! - assisted: the root's host lists the children; a relay's NIC delivers
//!   to its host, which hands back the child list with one descriptor;
//!   the NIC sends to them from that host buffer without computing.
//!
//! Completion: every member reports to its parent (a sequenced `Report`
//! packet) once its own host has the message and every child reported
//! (or failed, or the deadline passed); the root's descriptor completes
//! when its children have reported: one event, saying how many members
//! were not reached. On the wire that costs one header-only packet per
//! tree edge.
//!
//! A record lives in `Shared::mcasts`: RECV makes a member's at the first
//! packet, SDMA a root's at the descriptor; RDMA marks delivery; SDMA
//! starts children, takes reports and finishes it. The functions here
//! are the shared part: child lists, the tree computation, release of
//! relayed receive buffers and the bookkeeping when a token ends.

mod hooks;
mod intake;
mod receiver;
pub mod records;
mod relay;
mod sender;

/// Multicast, the fan-out compiled in (`offload::fanout::Fan`).
pub struct Multicast;

use crate::hw::Hw;
use crate::records::*;
use crate::shared::Shared;
use nic_abi::event::LOST_BYTES;
use nic_abi::group::{self, GroupHead};
use nic_abi::map;
use nic_abi::multicast::{self as tree, Algorithm};
use nic_abi::packet::McastTag;
use nic_abi::stats::Stat;

fn ld16(hw: &impl Hw, at: u32) -> u16 {
    let mut b = [0u8; 2];
    hw.read(at, &mut b);
    u16::from_le_bytes(b)
}

fn st16(hw: &mut impl Hw, at: u32, v: u16) {
    hw.write(at, &v.to_le_bytes());
}

/// Write child `i` of record `r`'s own list.
pub fn set_child(hw: &mut impl Hw, r: McastId, i: u16, node: u16, subtree: u16) {
    let at = map::mcast_list(r.raw() as u32) + 4 * i as u32;
    st16(hw, at, node);
    st16(hw, at + 2, subtree);
}

/// The group table entry `id`'s head, if it is installed and valid.
pub fn group_head(hw: &impl Hw, id: u16) -> Option<GroupHead> {
    if id as u32 >= map::GROUP_ENTRIES {
        return None;
    }
    let mut b = [0u8; GroupHead::LEN];
    hw.read(map::group_entry(id as u32), &mut b);
    GroupHead::decode(&b)
}

/// Child `i` of record `r`: (node, subtree size).
pub fn child(hw: &impl Hw, cx: &Shared, r: McastId, i: u16) -> (u16, u16) {
    let rec = &cx.mcasts[r];
    match rec.list {
        ChildList::Cached => {
            let id = rec.tag.group as u32;
            let rank = ld16(hw, group::child(id, i));
            let subtree = ld16(hw, group::child(id, i) + 2);
            (ld16(hw, group::member(id, rank)), subtree)
        }
        _ => {
            let at = map::mcast_list(r.raw() as u32) + 4 * i as u32;
            (ld16(hw, at), ld16(hw, at + 2))
        }
    }
}

/// Compute this NIC's children in group `id` (head `g`) for algorithm
/// `alg` into record `r`'s list: the NIC-based scheme's tree work. The
/// number of children, or None if they do not fit a list.
pub fn compute_children(
    hw: &mut impl Hw,
    cx: &mut Shared,
    r: McastId,
    id: u16,
    g: &GroupHead,
    alg: Algorithm,
) -> Option<u16> {
    let mut n = 0u16;
    for c in tree::children(alg, g.size, g.rank) {
        if n as usize >= nic_abi::desc::MAX_LISTED_CHILDREN {
            return None;
        }
        let node = ld16(hw, group::member(id as u32, c.rank));
        set_child(hw, r, n, node, c.subtree);
        n += 1;
    }
    cx.bump(hw, Stat::McastTreeOps, n as u64);
    Some(n)
}

/// An algorithm's index in `Work::relay_steps` and `Work::mcast_further`
/// (a k-binomial tree counts as the binomial).
pub fn work_index(alg: Algorithm) -> usize {
    match alg {
        Algorithm::Separate => 0,
        Algorithm::Serial => 1,
        Algorithm::Binomial | Algorithm::KBinomial { .. } => 2,
        Algorithm::Binary => 3,
    }
}

/// Record `rec`'s algorithm index (`work_index`; binomial if unknown).
pub fn further_index(rec: &McastRec) -> u8 {
    Algorithm::from_code(rec.tag.alg, rec.tag.k).map_or(2, work_index) as u8
}

/// Count the NIC-based scheme's share of the tree work: one step for a
/// node with `n` children, or one per destination for separate addressing.
pub fn count_steps(w: &mut crate::Work, alg: Algorithm, n: u16) {
    let i = work_index(alg);
    let steps = if alg == Algorithm::Separate { n } else { (n > 0) as u16 };
    w.relay_steps[i] += steps;
    w.tree_ops += n as u32;
}

/// How long a member waits for its children's reports: a send timeout
/// for each level of its subtree below it, and one more.
pub fn wait_for(cx: &Shared, tag: &McastTag, subtree: u16) -> u64 {
    tree::report_wait(Algorithm::from_code(tag.alg, tag.k), subtree, cx.cfg.send_timeout)
}

/// When record `r` stops waiting: its deadline, or, for a message it
/// relays out of its receive buffers that stopped coming, a send timeout
/// and a quarter after its last packet came in. Its parent gives up on
/// this NIC once it has had no ack for a send timeout (or been refused
/// for one), so by then the rest will never come (the parent's NIC was
/// reset, or died), and the children's sends, which wait for it, would
/// hold up every message queued behind them on their streams until the
/// deadline (several send timeouts away), long enough for those to give
/// up. The quarter covers the ack's trip and the parent's last retry.
pub fn ends_at(cx: &Shared, r: McastId) -> u64 {
    let rec = &cx.mcasts[r];
    let t = cx.cfg.send_timeout;
    if rec.source == McastSource::RxBufs && rec.have < rec.npkts {
        rec.deadline.min(rec.last_in.saturating_add(t.saturating_add(t / 4)))
    } else {
        rec.deadline
    }
}

/// Does record `m` (a `RxStream::mrec`) still serve the multicast whose
/// packet `d` is? A record that finished before the whole message came
/// (out of time) may since serve another one.
pub fn serves(cx: &Shared, m: McastId, d: nic_abi::packet::DataView<'_>) -> bool {
    let from = d.stream().addr().src_node();
    cx.mcasts.is_live(m)
        && d.mcast().is_some_and(|tag| cx.mcasts[m].is_for(&tag))
        && cx.mcasts[m].parent == Some(from)
}

/// The record serving multicast (`group`, `mseq`), if any.
pub fn find(cx: &Shared, group: u16, mseq: u32) -> Option<McastId> {
    cx.mcasts.live_indices().find(|&r| {
        let t = cx.mcasts[r].tag;
        t.group == group && t.mseq == mseq
    })
}

/// How far record `r`'s relayed packets are acknowledged by every child
/// (None: not a relay out of receive buffers).
fn acked_upto(cx: &Shared, r: McastId) -> Option<u32> {
    let rec = &cx.mcasts[r];
    if rec.source != McastSource::RxBufs {
        return None;
    }
    let kids = rec.nchildren.min(RELAY_CHILDREN as u16) as usize;
    let all = rec.kid_acked[..kids].iter().copied().min().unwrap_or(KID_DONE);
    Some(if all == KID_DONE { rec.have } else { (all as u32).min(rec.have) })
}

/// Has record `r` relayed packets every child acknowledged whose
/// buffers [`release_acked`] would give back?
pub fn acked_to_release(cx: &Shared, r: McastId) -> bool {
    acked_upto(cx, r).is_some_and(|upto| upto > cx.mcasts[r].released)
}

/// Give back the receive buffers of relayed packets every child has
/// acknowledged (and RDMA copied: `Shared::rx_release` counts both).
pub fn release_acked(cx: &mut Shared, hw: &mut impl Hw, r: McastId) {
    let Some(upto) = acked_upto(cx, r) else { return };
    let rec = cx.mcasts[r];
    let mut k = rec.released;
    while k < upto {
        let b = rec.bufs[k as usize % RELAY_WINDOW];
        cx.rx_release(hw, b);
        k += 1;
    }
    cx.mcasts[r].released = k;
}

/// Which of record `r`'s relay children is token `t`.
fn kid_of(cx: &Shared, r: McastId, t: TokenId) -> Option<usize> {
    let rec = &cx.mcasts[r];
    rec.kids[..rec.started.min(RELAY_CHILDREN as u16) as usize].iter().position(|&k| k == Some(t))
}

/// The record token `t` (a NIC multicast token) belongs to, if it is
/// still live and the same multicast.
pub fn rec_of(cx: &Shared, t: TokenId) -> Option<McastId> {
    let tok = cx.tokens[t];
    // (Its cookie names the record: `Sdma::start_child`, `intake`.)
    let tag = McastTag::from_header(tok.remote, 0);
    McastId::from_raw(tok.cookie as u16)
        .filter(|&r| cx.mcasts.is_live(r) && cx.mcasts[r].is_for(&tag))
}

/// The lost-heads list token `t` carries on (a Report's, or the root's
/// completion's), if any.
fn token_list(tok: &SendToken) -> Option<u8> {
    match tok.kind {
        TokKind::Report => list_from_raw(tok.local),
        // Set when it completes (before that `first_seq` means nothing).
        TokKind::McastRoot if matches!(tok.state, TokState::Completing(_)) => {
            list_from_raw(tok.first_seq as u64)
        }
        _ => None,
    }
}

/// Is lost-heads list `i` held by its owner? A list whose owner went
/// (a token freed on a path that did not give it back) is free again.
fn list_held(cx: &Shared, i: u8) -> bool {
    match cx.lost_owner[i as usize] {
        LostOwner::Free => false,
        LostOwner::Record(r) => cx.mcasts.is_live(r) && cx.mcasts[r].lost == Some(i),
        LostOwner::Token(t) => cx.tokens.is_live(t) && token_list(&cx.tokens[t]) == Some(i),
    }
}

/// Record `r`'s lost-heads list, taken (and cleared) if it has none; None
/// when every list is in use: the members lost are then counted, not
/// named.
fn lost_list(cx: &mut Shared, hw: &mut impl Hw, r: McastId) -> Option<u8> {
    if let Some(have) = cx.mcasts[r].lost {
        return Some(have);
    }
    let i = (0..map::MCAST_LOST_LISTS as u8).find(|&i| !list_held(cx, i))?;
    cx.lost_owner[i as usize] = LostOwner::Record(r);
    cx.mcasts[r].lost = Some(i);
    hw.write(map::mcast_lost(i as u32), &[0u8; LOST_BYTES]);
    Some(i)
}

/// Name `node` the head of a subtree record `r` did not reach.
pub fn name_lost(cx: &mut Shared, hw: &mut impl Hw, r: McastId, node: u16) {
    if node as usize >= nic_abi::MAX_NODES {
        return;
    }
    if let Some(i) = lost_list(cx, hw, r) {
        set_bit(hw, map::mcast_lost(i as u32) + node as u32 / 8, 1 << (node % 8));
    }
}

/// Set bit `mask` of the SRAM byte at `at`; false when it was set already.
fn set_bit(hw: &mut impl Hw, at: u32, mask: u8) -> bool {
    let mut b = [0u8; 1];
    hw.read(at, &mut b);
    if b[0] & mask != 0 {
        return false;
    }
    hw.write(at, &[b[0] | mask]);
    true
}

/// Add the heads a child's report names (`bytes`: the first bytes of its
/// bitmap) to record `r`'s list.
fn merge_lost(cx: &mut Shared, hw: &mut impl Hw, r: McastId, bytes: &[u8]) {
    if bytes.iter().all(|&b| b == 0) {
        return;
    }
    if let Some(i) = lost_list(cx, hw, r) {
        let at = map::mcast_lost(i as u32);
        let mut have = [0u8; LOST_BYTES];
        hw.read(at, &mut have);
        for (h, b) in have.iter_mut().zip(bytes) {
            *h |= b;
        }
        hw.write(at, &have);
    }
}

/// Record `r` is finishing: its list, if any, goes to token `t`, which
/// carries it on (a Report, or the root's completion).
pub fn hand_list(cx: &mut Shared, r: McastId, t: TokenId) -> Option<u8> {
    let i = cx.mcasts[r].lost.take();
    if let Some(i) = i {
        cx.lost_owner[i as usize] = LostOwner::Token(t);
    }
    i
}

/// Token `t` is done with the list it carried.
pub fn drop_list(cx: &mut Shared, t: TokenId) {
    if let Some(i) = token_list(&cx.tokens[t]) {
        if cx.lost_owner[i as usize] == LostOwner::Token(t) {
            cx.lost_owner[i as usize] = LostOwner::Free;
        }
    }
}

/// List `i`'s bytes (all of them; none: all zero).
pub fn read_list(hw: &impl Hw, i: Option<u8>) -> [u8; LOST_BYTES] {
    let mut b = [0u8; LOST_BYTES];
    if let Some(i) = i.filter(|&i| (i as u32) < map::MCAST_LOST_LISTS) {
        hw.read(map::mcast_lost(i as u32), &mut b);
    }
    b
}

/// Name the heads of the children whose sends failed (noted where no
/// SRAM access was at hand, `Shared::lost_pending`), and mark them heard
/// from: they are counted, so a report that still comes from one (its
/// send failed for want of acks that got lost) is not counted again.
pub fn name_failed(cx: &mut Shared, hw: &mut impl Hw) {
    while let Some((r, node)) = cx.lost_pending.pop_front() {
        if cx.mcasts.is_live(r) {
            first_word(hw, r, node);
            name_lost(cx, hw, r, node);
        }
    }
}

/// Take a multicast record for `rec`, its heard-from set empty.
pub fn new_record(cx: &mut Shared, hw: &mut impl Hw, rec: McastRec) -> Option<McastId> {
    let r = cx.mcasts.alloc(rec)?;
    cx.offloads_live = true;
    let (at, _) = map::mcast_heard(r.raw() as u32, 0);
    hw.write(at, &[0u8; map::MCAST_HEARD_SIZE as usize]);
    Some(r)
}

/// Has record `r` had a report from child `node`?
fn heard(hw: &impl Hw, r: McastId, node: u16) -> bool {
    if node as usize >= nic_abi::MAX_NODES {
        return true;
    }
    let (at, bit) = map::mcast_heard(r.raw() as u32, node);
    let mut b = [0u8; 1];
    hw.read(at, &mut b);
    b[0] & bit != 0
}

/// First report from child `node` for record `r`? Marks it heard: a
/// report taken twice (its stream was let go and it came again with SYNC)
/// counts once.
fn first_word(hw: &mut impl Hw, r: McastId, node: u16) -> bool {
    if node as usize >= nic_abi::MAX_NODES {
        return false;
    }
    let (at, bit) = map::mcast_heard(r.raw() as u32, node);
    set_bit(hw, at, bit)
}

/// Record `r` finishes before every child answered (its deadline
/// passed): the children it has not heard from head subtrees it counts
/// as not reached, so they are named too (a failed child already is).
pub fn name_silent(cx: &mut Shared, hw: &mut impl Hw, r: McastId) {
    let rec = cx.mcasts[r];
    if rec.done >= rec.nchildren || rec.list == ChildList::Awaiting {
        return;
    }
    for i in 0..rec.nchildren {
        let (node, _) = child(hw, cx, r, i);
        if !heard(hw, r, node) {
            name_lost(cx, hw, r, node);
        }
    }
}

/// A child's report (RECV hands it over as it takes the packet): node
/// `node`'s subtree of `subtree` members has multicast (`group`, `mseq`)
/// but for `unreached` of them; `lost` is the start of its lost-heads
/// bitmap (the heads of the subtrees it lost).
pub fn report_in(
    cx: &mut Shared,
    hw: &mut impl Hw,
    (node, group, mseq): (u16, u16, u32),
    subtree: u16,
    unreached: u16,
    lost: &[u8],
) {
    // Failures noted since the last multicast step first: a child
    // counted as failed is not counted again for its report.
    name_failed(cx, hw);
    let Some(r) = find(cx, group, mseq) else { return };
    if !first_word(hw, r, node) {
        return;
    }
    let kid = cx.tokens.live_indices().find(|&t| {
        let tok = cx.tokens[t];
        tok.kind == TokKind::McastFwd && tok.cookie == r.raw() as u32 && tok.target_node == node
    });
    if let Some(t) = kid {
        cx.tokens[t].desc_kind = KID_REPORTED;
    }
    let rec = &mut cx.mcasts[r];
    rec.done += 1;
    rec.reached = rec.reached.saturating_add(subtree.saturating_sub(unreached));
    merge_lost(cx, hw, r, lost);
}

/// `McastRec::kid_acked` of a child whose send is over.
pub const KID_DONE: u16 = u16::MAX;

/// A child send token of record `r` acknowledged `acked` packets so far
/// (its buffers go back at SDMA's next multicast step).
pub fn kid_progress(cx: &mut Shared, t: TokenId, acked: u32) {
    let Some(r) = rec_of(cx, t) else { return };
    if let Some(i) = kid_of(cx, r, t) {
        let a = &mut cx.mcasts[r].kid_acked[i];
        *a = (*a).max(acked.min(KID_DONE as u32 - 1) as u16);
    }
}

/// `TokKind::McastFwd` in `SendToken::desc_kind`: the child reported, so
/// a later failure of its send (its NIC died after) changes nothing.
pub const KID_REPORTED: u8 = 1;

/// A NIC multicast token ends (`ok`: fully acknowledged). A child's send
/// that failed counts its whole subtree as not reached.
pub fn token_ended(cx: &mut Shared, t: TokenId, ok: bool) {
    let tok = cx.tokens[t];
    if tok.kind == TokKind::Report {
        drop_list(cx, t);
    }
    if tok.kind != TokKind::McastFwd {
        return;
    }
    let Some(r) = rec_of(cx, t) else { return };
    if let Some(i) = kid_of(cx, r, t) {
        cx.mcasts[r].kid_acked[i] = KID_DONE;
    }
    if !ok && tok.desc_kind != KID_REPORTED {
        cx.mcasts[r].done += 1;
        // Named at the next multicast step (SRAM is not at hand here);
        // with the queue full it is only counted.
        let _ = cx.lost_pending.push_back((r, tok.target_node));
    }
}
