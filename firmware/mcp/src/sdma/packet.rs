//! What a filled packet carries and what its stream notes of it: its
//! sequence number, its header, the stream's advance.

use super::Sdma;
use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Win, Window};
use crate::records::*;
use crate::reliability::{SendWindow, Sent};
use crate::shared::Shared;
use nic_abi::packet::{Addr, DataKind, DataRepr, GetReqRepr, SeqRepr, SyncStamp};
use nic_abi::stats::Stat;

impl Sdma {
    /// The sequence number of stream `s`'s next packet, `pkt` of token
    /// `t`: a message's first packet notes it in the token, and carries
    /// the stream's SYNC when one is owed.
    #[inline(always)]
    pub(super) fn number(&mut self, cx: &mut Shared, s: TxId, t: TokenId, pkt: u32) -> u32 {
        let seq = self.txs[s].win.next();
        if pkt == 0 {
            cx.tokens[t].first_seq = seq;
            if self.txs[s].sync_next {
                cx.tokens[t].sync = true;
                self.txs[s].sync_next = false;
            }
        }
        seq
    }

    /// Store the header of token `t`'s packet (`seq`, at payload offset
    /// `off`, `plen` bytes, `last`: the message's last) of stream `s` at
    /// `hdr_at`: six word stores.
    pub(super) fn write_header(
        &self,
        cx: &Shared,
        hw: &mut impl Hw,
        (s, t): (TxId, TokenId),
        hdr_at: u32,
        (seq, off, plen, last): (u32, u32, u32, bool),
    ) {
        let st = &self.txs[s];
        let tok = &cx.tokens[t];
        let (first, sync) = (tok.next_pkt == 0, tok.sync);
        let stream = SeqRepr {
            addr: Addr {
                src_node: cx.cfg.node,
                src_port: tok.port,
                dst_node: tok.target_node,
                dst_port: tok.target_port,
                priority: tok.prio,
            },
            size_class: tok.size_class,
            seq,
            // The stream's round: a nack this packet draws echoes it
            // (as the window policy numbers rounds).
            round: Win::round(&cx.cfg, st),
            first,
            last,
            // (SEND writes the ack in as the packet leaves.)
            ack: None,
            sync: first && sync,
            // Every packet of a message sent with SYNC says which.
            stamp: if sync {
                SyncStamp { boot: cx.boot, gen: st.sync_gen }
            } else {
                SyncStamp::NONE
            },
            incarnation: (first && sync && st.reborn).then_some(st.order),
        };
        let h = match tok.kind {
            TokKind::Get => {
                GetReqRepr { stream, remote_addr: tok.remote, len: tok.len, get: tok.cookie }.emit()
            }
            // A fan-out's report: its header and payload are the fan-out's.
            TokKind::Report => Fan::report_header(stream, tok, plen),
            k => {
                let kind = match k {
                    TokKind::Put => DataKind::Put { remote_addr: tok.remote },
                    TokKind::GetResp => DataKind::GetResp { get: tok.cookie },
                    // A send's; a fan-out's own kinds: its messages'.
                    _ => Fan::data_kind(tok),
                };
                let (msg_len, offset, payload_len) = (tok.len, off, plen as u16);
                DataRepr { stream, kind, msg_len, offset, payload_len }.emit()
            }
        };
        for (i, word) in h.words().into_iter().enumerate() {
            hw.store_u64(hdr_at + 8 * i as u32, word);
        }
    }

    /// Token `t`'s packet (`plen` payload bytes) went into a buffer:
    /// stream `s` moves on.
    pub(super) fn advance_stream(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        s: TxId,
        t: TokenId,
        plen: u32,
    ) {
        let now = cx.now;
        let st = &mut self.txs[s];
        if st.outstanding() == 0 {
            st.last_progress = now;
            st.acked_at = now;
        }
        let seq = st.win.next();
        let sent = st.win.sent();
        if sent == Sent::New {
            st.rtt.sent_new(seq, now);
        }
        cx.tokens[t].next_pkt += 1;
        if cx.tokens[t].next_pkt >= cx.tokens[t].npkts {
            self.txs[s].cursor = cx.tokens[t].next;
        }
        if sent == Sent::Retransmit {
            cx.bump(hw, Stat::Retransmits, 1);
            cx.bump(hw, self.txs[s].retx_cause.stat(), 1);
            cx.bump(hw, Stat::RetxBytes, plen as u64);
        }
        self.watch(s);
        Win::sent(self, cx, hw, s, seq);
    }
}
