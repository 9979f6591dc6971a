//! SDMA: host send descriptors -> send tokens -> streams and connections;
//! the scheduler that picks the next packet (GM rotation, or the
//! scheduler policy compiled in, `offload::policy::Scheduler`); host-DMA
//! of that packet's payload into
//! a transmit buffer, which then goes to SEND; and the sending half of
//! reliability (acks and nacks from RECV, go-back-N rewinds, retransmission
//! and send timeouts), and the ports' alarms.
//!
//! Owns: the sending streams (`TxStream`, each with its window, the
//! window policy's marks and the scheduler policy's pace), the connection queue, the ports' send-ring cursors and alarms,
//! the scheduler policy's state (`sched`). Takes from: the ports' send
//! rings, `Shared::from_recv`. Hands on: filled transmit buffers
//! (`Shared::tx_ready`), posted receive buffers (`Shared::provided`), owed
//! events. Its fields are private to this module tree: no other machine
//! writes them.
//!
//! Files: `intake` (descriptors) and `checks` (their validation),
//! `queues` (streams, connections, the rotation), `fill` (host-DMA into
//! transmit buffers), `sender` (acks, nacks, rewinds), `timers` (the
//! retransmission and send timeouts, the alarms, the deadline) and
//! `txpool` (the sending streams' pool).

mod checks;
mod fill;
pub(crate) mod intake;
mod packet;
mod queues;
mod sender;
mod timers;
mod txpool;

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Sched, Scheduler, Win, Window};
use crate::pool::Pool;
use crate::queue::{self, Consumer, Producer};
use crate::records::*;
use crate::reliability::SendWindow;
use crate::shared::{MachineState, Shared};
use crate::Work;
use nic_abi::trace::{Cause, Machine};
use nic_abi::NUM_PORTS;

pub(crate) use intake::{packets_for, INTAKE_BUDGET};
use timers::ActiveDeadline;
#[cfg(not(target_os = "none"))]
use timers::TimerView;
#[cfg(not(target_os = "none"))]
pub use timers::HOST_ONLY_BYTES;
use txpool::TxPool;

/// What SDMA is doing or waiting for. It persists between polls: a
/// debugger stopped anywhere reads what the machine waits for (a token or
/// a stream by its index, `Id::raw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdmaState {
    /// No stream has a packet to send, and no fill is in flight.
    Idle,
    /// Taking a descriptor from `port`'s send ring.
    Intake { port: u8 },
    /// Streams have packets to send: the next fill starts at SDMA's step.
    Ready,
    /// The host-DMA of packet `packet` of send token `token` into transmit
    /// buffer `buf` is in flight.
    FillWait { token: u16, packet: u32, buf: u8 },
    /// A packet is ready but no transmit buffer (or host-DMA ring room) is
    /// free.
    BufferWait,
    /// Streams have packets, but none may send now: `stream` (the next in
    /// the rotation) waits for acks from `una` (window full), or holds
    /// after its target refused a packet.
    AckWait { stream: u16, una: u32 },
    /// The scheduler policy paces the streams: the next packet is due at
    /// RTC `until`.
    Paced { until: u64 },
    /// Handling the retransmission timeout of `stream` (from `una`).
    Timeout { stream: u16, una: u32 },
    /// A descriptor of `port` (intake) or the next packet's payload (fill)
    /// waits for a translation: its page-table line is being read from
    /// host memory.
    TranslateWait { port: u8 },
}

impl SdmaState {
    pub const IDLE: u8 = 0;
    pub const INTAKE: u8 = 1;
    pub const FILL_WAIT: u8 = 2;
    pub const BUFFER_WAIT: u8 = 3;
    pub const ACK_WAIT: u8 = 4;
    pub const PACED: u8 = 5;
    pub const TIMEOUT: u8 = 6;
    pub const READY: u8 = 7;
    pub const TRANSLATE_WAIT: u8 = 8;
}

impl MachineState for SdmaState {
    const MACHINE: Machine = Machine::Sdma;

    fn code(&self) -> u8 {
        match self {
            SdmaState::Idle => Self::IDLE,
            SdmaState::Intake { .. } => Self::INTAKE,
            SdmaState::FillWait { .. } => Self::FILL_WAIT,
            SdmaState::BufferWait => Self::BUFFER_WAIT,
            SdmaState::AckWait { .. } => Self::ACK_WAIT,
            SdmaState::Paced { .. } => Self::PACED,
            SdmaState::Timeout { .. } => Self::TIMEOUT,
            SdmaState::Ready => Self::READY,
            SdmaState::TranslateWait { .. } => Self::TRANSLATE_WAIT,
        }
    }

    fn arg(&self) -> u32 {
        match *self {
            SdmaState::Idle | SdmaState::BufferWait | SdmaState::Ready => 0,
            SdmaState::Intake { port } | SdmaState::TranslateWait { port } => port as u32,
            SdmaState::FillWait { packet, .. } => packet,
            SdmaState::AckWait { una, .. } | SdmaState::Timeout { una, .. } => una,
            SdmaState::Paced { until } => until as u32,
        }
    }
}

/// The SDMA machine.
///
/// (`repr(C)`: the machine's state, cursors and flags first, its stream
/// and connection tables last, so that a pass reaches the first with one
/// load in the image.)
#[repr(C)]
pub struct Sdma {
    state: SdmaState,
    /// This pass's fills made a relayed packet's first copy: its copies
    /// for further children may follow, another packet's first may not.
    relay_built: bool,
    /// Per port: descriptors taken from the send ring.
    pub(crate) cons: [u32; NUM_PORTS],
    /// Per port: receive buffers taken from the ring ahead of a send that
    /// waits for a token, bit `i` for the slot `cons + i` (skipped when
    /// the intake reaches it).
    pub(crate) ahead: [u32; NUM_PORTS],
    /// Per port: bytes of the next descriptor's range found registered
    /// so far (its check waits for translations; 0 for a new one).
    pub(crate) checked: [u64; NUM_PORTS],
    /// The port intake starts at next pass (round robin).
    port_rr: u8,
    /// The ports served (bit p: opened, with its event queue, and not
    /// closed since): the ports whose rings a pass looks at.
    serving: u8,
    /// Per port: a pending alarm (when, tag).
    alarm_at: [Option<u64>; NUM_PORTS],
    alarm_tag: [u64; NUM_PORTS],
    /// The ports with an alarm pending (bit p: `alarm_at[p]` is Some), so
    /// that a pass with none does not read `alarm_at` (two cache lines).
    alarms: u8,
    /// The active streams' part of the deadline, as last worked out
    /// (`Sdma::active_deadline`).
    dl: ActiveDeadline,
    /// The sending stream found or made last (`Sdma::stream_of`): the
    /// next descriptor or ack is most often for it again, and a look at
    /// its key is cheaper than hashing one.
    last_stream: Option<TxId>,
    /// Current connection of the circular connection queue (None: empty).
    pub(crate) conn_cur: Option<ConnId>,
    pub(crate) conn_queue_len: u16,
    /// The scheduler policy compiled in (the rotation: nothing).
    pub(crate) sched: Sched,
    /// Sending streams set up so far.
    streams_made: u32,
    /// Idle sending streams let go of to make room (`Sdma::tx_victim`).
    evicted: u32,
    /// A fan-out's lead send (a token) and, once its first packet is
    /// being fetched, that packet's buffer: the fan-out's hooks take no
    /// further descriptor of its kind until the packet is ready to go, so
    /// a sender's deepest child is not kept waiting behind the intake of
    /// its siblings' descriptors (`offload::fanout`).
    pub(crate) lead: Option<(TokenId, Option<u8>)>,
    /// The last intake left descriptors in a port's ring.
    intake_left: bool,
    /// Why the last fill loop stopped.
    stopped: fill::Stop,
    /// The transmit buffers held when it stopped (`TxBufs::held`).
    held_at_stop: u32,
    /// The scheduler policy's wait when the machine's state was last
    /// settled (`Sdma::fill`).
    settled_wait: Option<u64>,
    pub(crate) txs: TxPool,
    /// Host builds: each sending stream's timers as of its last change
    /// (`Sdma::timer_view`).
    #[cfg(not(target_os = "none"))]
    views: [TimerView; MAX_STREAMS],
    pub(crate) tx_index: heapless::FnvIndexMap<u32, TxId, MAX_STREAMS>,
    pub(crate) conns: Pool<Conn, MAX_CONNS>,
    conn_index: heapless::FnvIndexMap<u16, ConnId, MAX_CONNS>,
    /// Streams with unacknowledged packets (retransmit timers).
    active_tx: heapless::Vec<TxId, MAX_STREAMS>,
    /// Its halves of the queues between machines (`crate::queue`): filled
    /// buffers for SEND, posted receive buffers for RECV, RECV's acks and
    /// answers, its polls for SEND.
    pub(crate) to_send: Producer<queue::ToSend>,
    pub(crate) to_recv: Producer<queue::Posted>,
    pub(crate) from_recv: Consumer<queue::ToSdma>,
    pub(crate) polls: Producer<queue::Controls>,
}

impl Sdma {
    pub(crate) const fn new() -> Sdma {
        Sdma {
            to_send: queue::producer(),
            to_recv: queue::producer(),
            from_recv: queue::consumer(),
            polls: queue::producer(),
            state: SdmaState::Idle,
            relay_built: false,
            cons: [0; NUM_PORTS],
            ahead: [0; NUM_PORTS],
            checked: [0; NUM_PORTS],
            port_rr: 0,
            serving: 0,
            alarm_at: [None; NUM_PORTS],
            alarm_tag: [0; NUM_PORTS],
            alarms: 0,
            txs: TxPool::new(),
            #[cfg(not(target_os = "none"))]
            views: [TimerView::NONE; MAX_STREAMS],
            dl: ActiveDeadline { at: 0, busy: None, hold: None, removable: true },
            tx_index: heapless::FnvIndexMap::new(),
            last_stream: None,
            conns: Pool::new(Conn::EMPTY),
            conn_index: heapless::FnvIndexMap::new(),
            conn_cur: None,
            conn_queue_len: 0,
            active_tx: heapless::Vec::new(),
            sched: <Sched as Scheduler>::NEW,
            streams_made: 0,
            evicted: 0,
            lead: None,
            intake_left: false,
            stopped: fill::Stop::NothingDue,
            held_at_stop: 0,
            settled_wait: None,
        }
    }

    pub fn state(&self) -> SdmaState {
        self.state
    }

    /// When the next stream the scheduler policy paces may send, if one
    /// waits for its time.
    pub fn paced_until(&self) -> Option<u64> {
        self.sched.wait()
    }

    pub(crate) fn go(&mut self, cx: &mut Shared, hw: &mut impl Hw, to: SdmaState, cause: Cause) {
        // (What the machine waits for is settled again: `fill`.)
        self.txs.unsettled = true;
        cx.transition(hw, &mut self.state, to, cause);
    }

    /// Start of the MCP (or a warm restart): what the host left for the
    /// scheduler policy.
    pub fn init(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        Sched::init(self, cx, hw);
    }

    /// The start of a pass: what the scheduler policy looks at each pass.
    pub fn begin_pass(&mut self, cx: &mut Shared, hw: &mut impl Hw, w: &mut Work) {
        Sched::begin_pass(self, cx, hw, w);
        // (A flow table read may have given streams rates.)
        cx.offloads_live |= self.sched.live();
    }

    /// One step: descriptors (`host`: the host wrote since the last
    /// pass), then timers, then fills. Each part is a step
    /// function of its own, kept out of line so a debugger breaks there.
    pub fn step(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        offloads: &mut crate::offload::Offloads,
        host: bool,
        w: &mut Work,
    ) {
        // Descriptors come with a host write (the doorbell after the
        // producer index), or were left in a ring by the last intake.
        if host || self.intake_left {
            self.intake(cx, hw, offloads, w);
        }
        self.timers(cx, hw, w);
        if cx.offloads_live {
            Fan::sdma_step(self, cx, hw, w);
        }
        self.fill(cx, hw, w);
    }

    /// Has SDMA work it would do at the next pass whatever the news?
    /// Descriptors left in a ring, or a fill that may go on
    /// (`Sdma::fill_left`).
    pub fn leftover(&self, cx: &Shared) -> bool {
        self.intake_left || self.fill_left(cx)
    }

    /// Did the fill stop for want of host-DMA ring room or a transmit
    /// buffer, with streams queued?
    pub(crate) fn waits_for_room(&self) -> bool {
        self.stopped == fill::Stop::NoRoom && self.conn_queue_len > 0
    }

    /// Would transmit buffers coming free let SDMA go on? Its fill
    /// stopped for want of one with streams queued, or a scheduler policy
    /// paces streams (what it waits for depends on the buffers held).
    pub(crate) fn waits_for_tx_bufs(&self, cx: &Shared) -> bool {
        self.waits_for_room() || self.policy_may_pick(cx)
    }

    /// Port `p` opened: its send ring starts at 0.
    pub fn port_opened(&mut self, p: usize) {
        self.serving |= 1 << p;
        self.cons[p] = 0;
        self.ahead[p] = 0;
        self.checked[p] = 0;
        self.set_alarm(p, None);
        self.alarm_tag[p] = 0;
    }

    /// Port `p` closed: its streams' tokens are abandoned (streams keep
    /// their sequence numbers: later sends SYNC); its alarm goes.
    pub fn port_closed(&mut self, cx: &mut Shared, p: usize) {
        let streams: heapless::Vec<TxId, MAX_STREAMS> =
            self.txs.live_indices().filter(|&i| self.txs[i].local_port as usize == p).collect();
        for st in streams {
            self.abandon_stream(cx, st, None);
        }
        self.set_alarm(p, None);
        self.alarm_tag[p] = 0;
        self.cons[p] = 0;
        self.ahead[p] = 0;
        self.serving &= !(1 << p);
    }

    /// The tag of port `p`'s alarm (for its event).
    /// Set or clear port `p`'s alarm, and its bit in `alarms`.
    fn set_alarm(&mut self, p: usize, at: Option<u64>) {
        self.alarm_at[p] = at;
        match at {
            Some(_) => self.alarms |= 1 << p,
            None => self.alarms &= !(1 << p),
        }
    }

    pub fn alarm_tag(&self, p: usize) -> u64 {
        self.alarm_tag.get(p).copied().unwrap_or(0)
    }

    /// Is `stream` alive and still at `epoch` (no rewind since a buffer
    /// was filled for it)?
    pub(crate) fn is_current(&self, stream: TxId, epoch: u16) -> bool {
        self.txs.is_live(stream) && self.txs[stream].epoch == epoch
    }

    /// The key of sending stream `s` (remote node, ports, priority).
    pub(crate) fn stream_key(&self, s: TxId) -> u32 {
        self.txs[s].key
    }

    /// SEND is about to send a poll for sending stream `s`: where it goes,
    /// its first unacknowledged sequence number (in `expected`), the first
    /// not yet handed to the send-DMA engine (the poll overtakes packets
    /// still in buffers: the receiver cannot have seen those), its round
    /// and its poll number (the window policy's); None when nothing is
    /// unacknowledged any more.
    pub(crate) fn poll_out(
        &self,
        cx: &Shared,
        s: TxId,
    ) -> Option<(crate::recv::ControlOut, u32, u8, u8)> {
        if !self.txs.is_live(s) {
            return None;
        }
        let st = &self.txs[s];
        let (sent_up_to, ps) = Win::poll_view(&cx.cfg, st);
        if sent_up_to == st.win.una() {
            return None;
        }
        let out = crate::recv::ControlOut {
            remote_node: st.remote_node,
            local_port: st.local_port,
            remote_port: st.remote_port,
            prio: st.prio,
            expected: st.win.una(),
            report: st.key & REPORT_STREAM != 0,
            incarnation: if st.reborn { st.order } else { 0 },
        };
        let sent = cx.txbufs.unsent_from(s, st.epoch).unwrap_or(sent_up_to);
        Some((out, sent, st.epoch as u8, ps))
    }
}
