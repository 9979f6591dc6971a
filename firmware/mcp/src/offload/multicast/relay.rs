//! A relay's sends to its children in SDMA's fill (through the fan-out
//! hooks): a packet for a child of a message this NIC relays out of its
//! receive buffers goes out of the buffer it arrived in, once it is
//! there, priced as the copy built for the first child or as a further
//! one; a child's send from host memory is priced the same way. Owns:
//! nothing of its own. May touch: the multicast records' `priced` mark,
//! the transmit buffer being filled.

use super::{further_index, rec_of};
use crate::records::*;
use crate::shared::Shared;
use nic_abi::stats::Stat;

/// Is token `t` (of kind `kind`) a send to a child whose payload is in
/// receive buffers (no host memory)?
#[inline(never)]
pub(super) fn from_rx(cx: &Shared, t: TokenId, kind: TokKind) -> bool {
    kind == TokKind::McastFwd
        && rec_of(cx, t).is_some_and(|r| cx.mcasts[r].source == McastSource::RxBufs)
}

/// A relay's send to a child can send packet k once it arrived (and,
/// `built`: a first copy was built this pass, only a copy of one built
/// before).
#[inline(never)]
pub(super) fn packet_here(cx: &Shared, t: TokenId, built: bool) -> bool {
    let tok = &cx.tokens[t];
    if tok.kind != TokKind::McastFwd {
        return true;
    }
    match rec_of(cx, t) {
        Some(r) => {
            let rec = &cx.mcasts[r];
            rec.source != McastSource::RxBufs
                || (tok.next_pkt < rec.have && !(built && tok.next_pkt >= rec.priced))
        }
        None => true,
    }
}

/// Packet `pkt` of token `t`, a send to a child, goes into `buf`: its
/// price, and for a relayed packet the receive buffer its payload stays
/// in (then true). None when its record finished without it.
pub(super) fn fill(cx: &mut Shared, t: TokenId, pkt: u32, buf: &mut TxBuf) -> Option<bool> {
    let further = cx.tokens[t].further;
    let r = rec_of(cx, t)?;
    let rec = &mut cx.mcasts[r];
    buf.mcast = if further { McastCost::Further(further_index(rec)) } else { McastCost::First };
    if rec.source != McastSource::RxBufs {
        return Some(false);
    }
    let first = pkt >= rec.priced;
    rec.priced = rec.priced.max(pkt + 1);
    buf.mcast = if first { McastCost::First } else { McastCost::Further(further_index(rec)) };
    buf.gather = NonMaxU8::new(rec.bufs[pkt as usize % RELAY_WINDOW]);
    cx.count_later(Stat::McastForwarded, 1);
    Some(true)
}
