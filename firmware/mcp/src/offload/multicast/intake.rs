//! The multicast descriptor (SDMA's intake calls it through the fan-out
//! hooks, `Fanout::intake` and `Fanout::span`): at a root, a send with
//! its child list in the ring slots that follow it, which becomes a
//! tagged send (host scheme) or a record with its children (the NIC's
//! schemes); at an assisted relay, the child list its host hands back for
//! a record waiting for it. Owns: the lead send of the host scheme
//! (`Sdma::lead`). May touch: the port's ring and send credits, the
//! multicast records, the send tokens and streams it makes.

use super::{self as mcast};
use crate::hw::Hw;
use crate::records::*;
use crate::sdma::intake::{complete_token, packets_for, refuse, send_bounds, RawDesc};
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::{self, DescKind, Descriptor, ListedChild, McastFields, DESC_SIZE};
use nic_abi::event::{ErrorCause, SendStatus};
use nic_abi::multicast::{Algorithm, Scheme};
use nic_abi::packet::McastTag;
use nic_abi::port::{port_reg, send_slot, SEND_CONS};
use nic_abi::trace::Cause;

/// The send token of multicast descriptor `d` on port `p` (its event
/// names the multicast `tag`).
fn descriptor_token(kind: TokKind, p: usize, d: &Descriptor, tag: &McastTag) -> SendToken {
    let mut t = SendToken::EMPTY;
    t.kind = kind;
    t.port = p as u8;
    t.prio = d.priority;
    t.target_port = p as u8;
    t.size_class = d.size_class;
    t.local = d.local;
    t.len = d.len;
    t.remote = tag.remote();
    t.tag = d.tag;
    t.desc_kind = DescKind::Multicast as u8;
    t
}

/// The ring slots after multicast descriptor `b` that hold its child
/// list (0 for a list too long to take: it is refused alone); None when
/// its fields do not decode.
pub(crate) fn continuation_slots(b: &[u8]) -> Option<u32> {
    Some(list_slots(McastFields::decode(b).ok()?.nchildren))
}

/// The slots a child list of `n` takes after its descriptor (0 for one
/// too long to take).
fn list_slots(n: u16) -> u32 {
    let n = n as usize;
    if n <= desc::MAX_LISTED_CHILDREN {
        desc::child_slots(n) as u32
    } else {
        0
    }
}

/// Child `i` of the list that follows the descriptor at `cons` of port
/// `p`'s ring.
fn listed_child(hw: &impl Hw, p: usize, cons: u32, i: usize) -> ListedChild {
    let (slot, at) = desc::child_at(i);
    let mut e = [0u8; 4];
    hw.read(send_slot(p, cons.wrapping_add(slot as u32)) + at as u32, &mut e);
    ListedChild::decode(&e, 0)
}

/// The members a list of `n` children (after the descriptor at `cons` of
/// port `p`'s ring) reaches, this NIC's included; refused when the list
/// is empty, too long, or names this node, no node, or an empty subtree.
fn check_list(hw: &impl Hw, cx: &Shared, p: usize, cons: u32, n: usize) -> Result<u16, ErrorCause> {
    if n == 0 || n > desc::MAX_LISTED_CHILDREN {
        return Err(ErrorCause::BadMulticast);
    }
    let mut members = 1u16;
    for i in 0..n {
        let c = listed_child(hw, p, cons, i);
        if c.node >= cx.cfg.nodes || c.node == cx.cfg.node || c.subtree == 0 {
            return Err(ErrorCause::BadMulticast);
        }
        members = members.saturating_add(c.subtree);
    }
    Ok(members)
}

/// Check multicast descriptor `d` of port `p`; `reg_ok`: the memory it
/// names is registered by the port. The group's port is the sender's:
/// members use one port.
fn validate(p: u8, d: &Descriptor, reg_ok: bool) -> Result<(), ErrorCause> {
    if d.target_port != p {
        return Err(ErrorCause::BadPort);
    }
    send_bounds(d, reg_ok)
}

/// The intake's hook: the multicast descriptor at `cons` of port `p`'s
/// ring (`prod`: its producer index), the memory it names registered or
/// not (`reg_ok`). True: taken (or refused); false: it waits in the ring
/// (the host scheme's last send still has its first packet to get
/// ready, or `Sdma::intake_mcast` said so).
pub(super) fn intake(
    sdma: &mut Sdma,
    cx: &mut Shared,
    hw: &mut impl Hw,
    p: usize,
    at: (u32, u32),
    reg_ok: bool,
    w: &mut Work,
) -> bool {
    if sdma.lead_pending(cx) {
        return false;
    }
    let mut b = [0u8; DESC_SIZE as usize];
    hw.read(send_slot(p, at.1), &mut b);
    sdma.intake_mcast(cx, hw, p, at, &b, reg_ok, w)
}

impl Sdma {
    /// Whether the host scheme's last multicast send still has its first
    /// packet to get ready (`lead`); forgets a lead that went.
    fn lead_pending(&mut self, cx: &Shared) -> bool {
        let Some((t, buf)) = self.lead else { return false };
        let tok = &cx.tokens[t];
        let pending = cx.tokens.is_live(t)
            && tok.kind == TokKind::McastSend
            && tok.state == TokState::Active
            && (buf.is_some() || tok.next_pkt == 0);
        if !pending {
            self.lead = None;
        }
        pending
    }

    /// Take the multicast descriptor at `cons` of port `p`'s ring with its
    /// continuation slots. False: not all of it is posted yet, or no
    /// multicast record is free (it waits in the ring).
    #[allow(clippy::too_many_arguments)]
    fn intake_mcast(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        (prod, cons): (u32, u32),
        b: &[u8],
        reg_ok: bool,
        w: &mut Work,
    ) -> bool {
        let fields = McastFields::decode(b);
        let extra = fields.map_or(0, |f| list_slots(f.nchildren)) as usize;
        if prod.wrapping_sub(cons) < 1 + extra as u32 {
            return false;
        }
        // A root's descriptor waits in the ring for a free record. A
        // host-scheme send takes none, and an assisted relay's child list
        // fills the record waiting for it: neither may wait behind roots.
        let desc = Descriptor::decode(b);
        let needs_record = fields.is_ok_and(|f| {
            f.scheme != Scheme::Host as u8
                && desc.is_ok_and(|d| mcast::find(cx, d.target_node, f.mseq).is_none())
        });
        if needs_record && cx.mcasts.available() == 0 {
            return false;
        }
        self.go(cx, hw, crate::SdmaState::Intake { port: p as u8 }, Cause::Descriptor);
        w.descriptors += 1 + extra as u32;
        let parsed = desc.and_then(|d| {
            validate(p as u8, &d, reg_ok)?;
            Ok((d, fields?))
        });
        let result = parsed.and_then(|(d, f)| self.accept_mcast(cx, hw, p, cons, &d, &f, w));
        self.cons[p] = cons.wrapping_add(1 + extra as u32);
        // (What was taken ahead of it lies past its continuation slots.)
        self.ahead[p] = self.ahead[p].checked_shr(1 + extra as u32).unwrap_or(0);
        self.checked[p] = 0;
        hw.store_u32(port_reg(p, SEND_CONS), self.cons[p]);
        if let Err(cause) = result {
            refuse(cx, hw, p, RawDesc::of(b), cause, true);
        }
        true
    }

    /// Accept multicast descriptor `d` (fields `f`) at `cons` of port
    /// `p`'s ring: the host scheme's tagged send, or the record of a root
    /// (or the child list of an assisted relay's record) with its root
    /// token.
    #[allow(clippy::too_many_arguments)]
    fn accept_mcast(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        p: usize,
        cons: u32,
        d: &Descriptor,
        f: &McastFields,
        w: &mut Work,
    ) -> Result<(), ErrorCause> {
        let scheme = Scheme::from_code(f.scheme).ok_or(ErrorCause::BadMulticast)?;
        let alg = Algorithm::from_code(f.alg, f.k).ok_or(ErrorCause::BadMulticast)?;
        let tag = McastTag {
            group: d.target_node,
            mseq: f.mseq,
            scheme: f.scheme,
            alg: f.alg,
            k: f.k,
            subtree: 0,
        };
        let n = f.nchildren as usize;
        if scheme == Scheme::Host {
            return self.accept_host(cx, hw, (p, cons), d, tag, n);
        }
        // An assisted relay handing over the child list of a multicast
        // its NIC holds a record for.
        let waiting = mcast::find(cx, tag.group, tag.mseq)
            .filter(|&r| cx.mcasts[r].list == ChildList::Awaiting && cx.mcasts[r].port == p as u8);
        let r = match waiting {
            Some(r) => {
                if scheme != Scheme::Assisted {
                    return Err(ErrorCause::BadMulticast);
                }
                if d.len != cx.mcasts[r].len {
                    return Err(ErrorCause::BadLength);
                }
                r
            }
            None => {
                let mut rec = McastRec::EMPTY;
                rec.tag = tag;
                rec.port = p as u8;
                rec.prio = d.priority;
                rec.size_class = d.size_class;
                rec.len = d.len;
                rec.npkts = packets_for(cx, TokKind::Send, d.len);
                rec.delivered = true;
                mcast::new_record(cx, hw, rec).ok_or(ErrorCause::NoToken)?
            }
        };
        let built = match scheme {
            Scheme::Assisted => check_list(hw, cx, p, cons, n).map(|members| {
                for i in 0..n {
                    let c = listed_child(hw, p, cons, i);
                    mcast::set_child(hw, r, i as u16, c.node, c.subtree);
                }
                (ChildList::Scratch, n as u16, members)
            }),
            _ => group_list(cx, hw, (p, r, tag.group), scheme, f, alg, w),
        };
        match built {
            Ok(b) => self.root_token(cx, p, (d, &tag), (r, waiting.is_none()), b, w),
            Err(e) => {
                if waiting.is_none() {
                    cx.mcasts.free(r);
                }
                Err(e)
            }
        }
    }

    /// The host scheme (the host serves the tree): one child, one tagged
    /// send, the lead until its first packet is ready to go.
    fn accept_host(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        (p, cons): (usize, u32),
        d: &Descriptor,
        mut tag: McastTag,
        n: usize,
    ) -> Result<(), ErrorCause> {
        if n != 1 {
            return Err(ErrorCause::BadMulticast);
        }
        check_list(hw, cx, p, cons, n)?;
        let c = listed_child(hw, p, cons, 0);
        let key = stream_key(c.node, p as u8, p as u8, d.priority);
        if !self.stream_room(cx, key, c.node) {
            return Err(ErrorCause::TooManyStreams);
        }
        tag.subtree = c.subtree;
        let mut t = descriptor_token(TokKind::McastSend, p, d, &tag);
        t.target_node = c.node;
        t.cookie = tag.cookie();
        t.npkts = packets_for(cx, TokKind::Send, d.len);
        let s = self.find_or_make_tx(cx, c.node, p as u8, p as u8, d.priority);
        let (Some(s), Some(i)) = (s, cx.tokens.alloc(t)) else {
            return Err(ErrorCause::TooManyStreams);
        };
        cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
        if self.txs[s].suspended {
            complete_token(cx, i, SendStatus::Dropped);
        } else {
            self.append_token(cx, s, i);
            self.lead = Some((i, None));
            cx.offloads_live = true;
        }
        Ok(())
    }

    /// Record `r` (`fresh`: made for this descriptor, so let go of when it
    /// is refused) has its child list (`list`, `nchildren`, `members` in
    /// the subtree): the root's token for descriptor `d` (multicast
    /// `tag`), which completes when the children have reported.
    fn root_token(
        &mut self,
        cx: &mut Shared,
        p: usize,
        (d, tag): (&Descriptor, &McastTag),
        (r, fresh): (McastId, bool),
        (list, nchildren, members): (ChildList, u16, u16),
        w: &mut Work,
    ) -> Result<(), ErrorCause> {
        w.mcast_descs += 1;
        let mut t = descriptor_token(TokKind::McastRoot, p, d, tag);
        t.target_node = tag.group;
        t.cookie = r.raw() as u32;
        let Some(i) = cx.tokens.alloc(t) else {
            if fresh {
                cx.mcasts.free(r);
            }
            return Err(ErrorCause::NoToken);
        };
        cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
        let rec = &mut cx.mcasts[r];
        rec.local = d.local;
        rec.source = McastSource::Host;
        rec.list = list;
        rec.nchildren = nchildren;
        if fresh {
            rec.subtree = members;
        }
        rec.token = Some(i);
        let wait = mcast::wait_for(cx, &cx.mcasts[r].tag, cx.mcasts[r].subtree);
        cx.mcasts[r].deadline = cx.now.saturating_add(wait);
        Ok(())
    }
}

/// The NIC's schemes: this NIC's children in the group table (the root's
/// entry for the descriptor's port): cached there (nic-cached, the same
/// algorithm only), or computed into record `r`'s list (nic, counted as
/// tree work). The list, its length and the group's size.
fn group_list(
    cx: &mut Shared,
    hw: &mut impl Hw,
    (p, r, group): (usize, McastId, u16),
    scheme: Scheme,
    f: &McastFields,
    alg: Algorithm,
    w: &mut Work,
) -> Result<(ChildList, u16, u16), ErrorCause> {
    match mcast::group_head(hw, group) {
        Some(g) if g.port as usize == p && g.rank == 0 => {
            if scheme == Scheme::NicCached {
                if g.alg != f.alg || g.k != f.k {
                    Err(ErrorCause::BadMulticast)
                } else {
                    Ok((ChildList::Cached, g.nchildren, g.size))
                }
            } else {
                match mcast::compute_children(hw, cx, r, group, &g, alg) {
                    Some(k) => {
                        mcast::count_steps(w, alg, k);
                        Ok((ChildList::Scratch, k, g.size))
                    }
                    None => Err(ErrorCause::BadMulticast),
                }
            }
        }
        _ => Err(ErrorCause::BadGroup),
    }
}
