//! Fan-out: an offload that sends one message on to several nodes over
//! the core's own reliable streams, and whose packets, tokens and events
//! therefore pass through the machines (multicast, `offload::multicast`,
//! feature `multicast`). The machines call the hooks of the alias [`Fan`]
//! where a message that fans out differs from a unicast; with the offload
//! compiled out (or `--cfg mcast_off`) the alias names [`Unicast`], whose
//! hooks are the trait's defaults (constants and empty bodies), and the
//! calls fold away: unicast pays nothing for it.
//!
//! Owns: nothing but the trait, the unicast default, and what the core
//! keeps for a fan-out whether it is compiled in or not: its descriptor
//! kind ([`DESC_KIND`], refused without it) and the tokens reserved for
//! its own sends ([`TOKENS`]). A hook takes the machine's records it
//! stands in for, as a window policy's do.

use crate::hw::Hw;
use crate::records::{
    McastId, Mrec, RecvSlot, RxId, SendToken, SlotId, TokKind, TokenId, TxBuf, TxId,
};
use crate::recv::{ControlOut, Recv};
use crate::sdma::Sdma;
use crate::shared::Shared;
use crate::Work;
use nic_abi::desc::DescKind;
use nic_abi::event::{Event, EventKind};
use nic_abi::packet::{
    DataKind, DataView, Flags, Header, McastTag, NackCode, PacketView, ReportRepr, ReportView,
    SeqRepr,
};

/// The descriptor kind a fan-out owns (a send whose continuation slots
/// follow it in the ring). Without the offload the intake refuses it.
pub const DESC_KIND: DescKind = DescKind::Multicast;

/// Tokens of the table kept for a fan-out's own sends (to children, and
/// their reports): the hosts' descriptors never take them.
pub const TOKENS: usize = crate::records::MCAST_TOKENS;

/// The hooks. Each default is what a unicast does.
pub trait Fanout {
    // SDMA.

    /// Is `kind` (a descriptor's kind byte) the fan-out's, compiled in?
    #[inline(always)]
    fn owns_kind(_kind: u8) -> bool {
        false
    }

    /// Take the fan-out's descriptor at `at.1` of port `p`'s ring (`at.0`:
    /// the ring's producer index), the memory it names registered or not
    /// (`reg_ok`). True: taken or refused (the intake stops for this pass:
    /// its first packet leaves first); false: it waits in the ring.
    #[inline(always)]
    fn intake(
        _sdma: &mut Sdma,
        _cx: &mut Shared,
        _hw: &mut impl Hw,
        _p: usize,
        _at: (u32, u32),
        _reg_ok: bool,
        _w: &mut Work,
    ) -> bool {
        false
    }

    /// The ring slots the fan-out's descriptor `b` takes, its
    /// continuation slots included; None: the look-ahead does not pass it.
    #[inline(always)]
    fn span(_b: &[u8]) -> Option<u32> {
        None
    }

    /// The NIC's own token `t` ended (`ok`: delivered); it is freed next.
    #[inline(always)]
    fn token_ended(_cx: &mut Shared, _t: TokenId, _ok: bool) {}

    /// Does it hold state the per-pass hooks look at (`Shared::offloads_live`
    /// stays set while it does)?
    #[inline(always)]
    fn live(_sdma: &Sdma, _cx: &Shared) -> bool {
        false
    }

    /// SDMA's step for the offload (after its timers, before the fill).
    #[inline(always)]
    fn sdma_step(_sdma: &mut Sdma, _cx: &mut Shared, _hw: &mut impl Hw, _w: &mut Work) {}

    /// Its deadlines, each to `at`.
    #[inline(always)]
    fn deadlines(_cx: &Shared, _at: &mut impl FnMut(u64)) {}

    /// Would its step (`sdma_step`) act at the next pass whatever the
    /// news? Asked after the pass's machines ran: what a later part of
    /// the pass did for it (a child's last packet filled, an event that
    /// delivered the local copy) is the next pass's to act on.
    #[inline(always)]
    fn step_due(_sdma: &Sdma, _cx: &Shared) -> bool {
        false
    }

    /// RECV made record `rec`, served out of receive buffers
    /// (`FromRecv::FanStart`): start it.
    #[inline(always)]
    fn start(_sdma: &mut Sdma, _cx: &mut Shared, _hw: &impl Hw, _rec: McastId) {}

    /// An ack moved stream `s`'s window on (its head token, if any, the
    /// first not wholly acknowledged): what the offload keeps for the
    /// acknowledged part may go.
    #[inline(always)]
    fn head_acked(_sdma: &Sdma, _cx: &mut Shared, _s: TxId) {}

    /// May the packet of token `t` at a stream's cursor be filled now
    /// (`built`: a packet [`Fanout::yields`] for was filled this pass)?
    #[inline(always)]
    fn packet_here(_cx: &Shared, _t: TokenId, _built: bool) -> bool {
        true
    }

    /// Is token `t` (of kind `kind`) one whose payload is already in
    /// SRAM (receive buffers the offload holds): no host memory?
    #[inline(always)]
    fn payload_in_sram(_cx: &Shared, _t: TokenId, _kind: TokKind) -> bool {
        false
    }

    /// Packet `pkt` of token `t` (of kind `kind`) goes into `buf` (its
    /// header not yet written): what the offload sets in it. Some(true):
    /// its payload is gathered from the receive buffer set in `buf` (it is
    /// filled at once); None: the message can go no further (dropped from
    /// its stream alone).
    #[inline(always)]
    fn fill(
        _cx: &mut Shared,
        _t: TokenId,
        _kind: TokKind,
        _pkt: u32,
        _buf: &mut TxBuf,
    ) -> Option<bool> {
        Some(false)
    }

    /// After buffer `buf` was filled: is it a packet built for one
    /// receiver of several (the fill yields to SEND after it, and fills
    /// only copies of it for the others this pass)?
    #[inline(always)]
    fn yields(_buf: &TxBuf) -> bool {
        false
    }

    /// The payload length of a `Report` token `tok`'s packet.
    #[inline(always)]
    fn report_len(_hw: &impl Hw, _tok: &SendToken) -> u32 {
        0
    }

    /// Write the payload (`plen` bytes) of `Report` token `tok`'s packet
    /// at `at`.
    #[inline(always)]
    fn write_report(_hw: &mut impl Hw, _tok: &SendToken, _at: u32, _plen: u32) {}

    /// The multicast a data packet of token `tok` belongs to (its tag,
    /// with the receiver's subtree size), for the offload's own token
    /// kinds; None: a unicast's.
    #[inline(always)]
    fn mcast_tag(_tok: &SendToken) -> Option<McastTag> {
        None
    }

    /// The kind of a data packet of a send's token `tok`, or of the
    /// offload's own kinds: a message for a receive buffer, with its
    /// fan-out's tag if it has one ([`Fanout::mcast_tag`]).
    #[inline(always)]
    fn data_kind(tok: &SendToken) -> DataKind {
        DataKind::Data { mcast: Self::mcast_tag(tok) }
    }

    /// The header of `Report` token `tok`'s packet (`stream` its place in
    /// the stream, `plen` its payload: the heads lost). `cookie` counts
    /// the members not reached, `tag` names the subtree.
    #[inline(always)]
    fn report_header(stream: SeqRepr, tok: &SendToken, plen: u32) -> Header {
        ReportRepr {
            stream,
            tag: McastTag::from_header(tok.remote, tok.tag as u32),
            unreached: tok.cookie,
            // (SEND writes it in as the report leaves.)
            data_ack: None,
            lost_len: plen as u16,
        }
        .emit()
    }

    /// Packet `pkt` of token `t` took buffer `b` with `n` host-DMA
    /// commands to fetch its payload (`Sdma::lead`).
    #[inline(always)]
    fn lead_filling(_sdma: &mut Sdma, _t: TokenId, _pkt: u32, _n: usize, _b: u8) {}

    /// Buffer `b`'s host-DMA completed (`Sdma::lead`).
    #[inline(always)]
    fn buffer_filled(_sdma: &mut Sdma, _b: u8) {}

    /// Has the fill work for the offload at the next pass whatever the
    /// news (a lead held its next descriptor back: it may be ready now)?
    #[inline(always)]
    fn lead_left(_sdma: &Sdma) -> bool {
        false
    }

    // SEND.

    /// Is buffer `buf` a packet SEND builds at most one of a pass (so
    /// that a sender's children get the message one send time apart)?
    #[inline(always)]
    fn builds(_buf: &TxBuf) -> bool {
        false
    }

    /// Buffer `buf` went on the wire: price its send.
    #[inline(always)]
    fn priced(_buf: &TxBuf, _w: &mut Work) {}

    /// A data packet of the stream `key` is about to leave with its header
    /// at `hdr`: the flags to add for what the offload piggybacks on it
    /// (`nic_abi::packet::piggyback`).
    #[inline(always)]
    fn piggyback(_recv: &mut Recv, _hw: &mut impl Hw, _key: u32, _hdr: u32) -> Flags {
        Flags::empty()
    }

    /// Is an ack, nack, poll or status report of stream `r` one of the
    /// offload's own streams (flagged as such, `report_stream` of its
    /// repr)?
    #[inline(always)]
    fn report_stream(_r: &ControlOut) -> bool {
        false
    }

    // RECV.

    /// The stream key packet `p` of our sending stream `key` speaks
    /// about (a stream of the offload's own between the same two ports),
    /// having passed on to SDMA what else it acks.
    #[inline(always)]
    fn stream_of(_recv: &mut Recv, _cx: &mut Shared, _p: PacketView<'_>, key: u32) -> u32 {
        key
    }

    /// The first packet `d` of a message: what the offload serves it
    /// with (`Mrec::NONE`: nothing; RECV keeps it in the receiving
    /// stream's `mrec` and the slot) and the slot's tag word (0: none),
    /// or the nack that refuses it now.
    #[inline(always)]
    fn first_packet(
        _recv: &mut Recv,
        _cx: &mut Shared,
        _sdma: &Sdma,
        _hw: &mut impl Hw,
        _d: DataView<'_>,
        _w: &mut Work,
    ) -> Result<(Mrec, u64), NackCode> {
        Ok((Mrec::NONE, 0))
    }

    /// A packet `d` in `buf` of the message receiving stream `r`
    /// assembles (`last`: its last): true when the offload sends its
    /// payload on from the receive buffer (RDMA's copy waits a pass);
    /// None: refused now (RECV nacks it Busy).
    #[inline(always)]
    fn data_packet(
        _recv: &mut Recv,
        _cx: &mut Shared,
        _hw: &mut impl Hw,
        _at: (RxId, u8, bool),
        _d: DataView<'_>,
        _w: &mut Work,
    ) -> Option<bool> {
        Some(false)
    }

    /// A `Report` (`r`) in `buf`: the buffer goes back when the offload
    /// is done with it.
    #[inline(always)]
    fn report_in(cx: &mut Shared, hw: &mut impl Hw, buf: u8, _r: ReportView<'_>) {
        cx.rxfree.give(hw, buf);
    }

    // RDMA.

    /// Receive slot `s`'s message is with its host (its event is owed).
    #[inline(always)]
    fn delivered(_cx: &mut Shared, _hw: &impl Hw, _s: SlotId, _w: &mut Work) {}

    /// Is slot `sl`'s Received event one the offload adds to (so not
    /// composed on the unicast fast path)?
    #[inline(always)]
    fn slot_is_its(_sl: &RecvSlot) -> bool {
        false
    }

    /// The Received event `e` of slot `sl`: what it adds.
    #[inline(always)]
    fn slot_event(_sl: &RecvSlot, _e: &mut Event) {}

    /// The event kind of a token of a kind of its own (None: not its).
    #[inline(always)]
    fn token_kind(_k: TokKind) -> Option<EventKind> {
        None
    }

    /// The completion event `e` of token `tok`: what it adds.
    #[inline(always)]
    fn token_event(_tok: &SendToken, _e: &mut Event) {}

    /// An event the offload owes through a token (`EvRef::Lost`), part
    /// `part`: composed whole here, its inline bytes included.
    #[inline(always)]
    fn lost_event(_cx: &Shared, _hw: &impl Hw, _t: TokenId, _part: u8) -> Event {
        Event::empty(EventKind::Error)
    }

    /// Token `t`'s event is written and the token freed: let go of what
    /// the offload kept for it.
    #[inline(always)]
    fn token_freed(_cx: &mut Shared, _t: TokenId) {}
}

/// No fan-out: every hook its default.
pub struct Unicast;

impl Fanout for Unicast {}

/// The fan-out compiled in.
#[cfg(all(feature = "multicast", not(mcast_off)))]
pub type Fan = super::multicast::Multicast;
#[cfg(not(all(feature = "multicast", not(mcast_off))))]
pub type Fan = Unicast;
