//! SDMA: host send descriptors -> send tokens -> streams and connections;
//! the scheduler that picks the next packet (GM rotation, or the
//! scheduler policy compiled in, `offload::policy::Scheduler`); host-DMA
//! of that packet's payload into
//! a transmit buffer, which then goes to SEND; and the sending half of
//! reliability (acks and nacks from RECV, go-back-N rewinds, retransmission
//! and send timeouts), and the ports' alarms.
//!
//! Owns: the sending streams ([`TxStream`], each with its window, the
//! window policy's marks and the scheduler policy's pace), the connection queue, the ports' send-ring cursors and alarms,
//! the scheduler policy's state (`sched`). Takes from: the ports' send
//! rings, `Shared::from_recv`. Hands on: filled transmit buffers
//! (`Shared::tx_ready`), posted receive buffers (`Shared::provided`), owed
//! events. Its fields are private to this module tree: no other machine
//! writes them.
//!
//! Files: `intake` (descriptors, validation), `queues` (streams,
//! connections, the rotation), `fill` (host-DMA into
//! transmit buffers), `sender` (acks, nacks, timers).

mod fill;
pub(crate) mod intake;
mod queues;
mod sender;

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Sched, Scheduler, Win, Window};
use crate::pool::{Pool, NIL};
use crate::records::*;
use crate::reliability::SendWindow;
use crate::shared::{MachineState, Shared};
use crate::Work;
use nic_abi::trace::{Cause, Machine};
use nic_abi::NUM_PORTS;

pub(crate) use intake::{packets_for, INTAKE_BUDGET};

/// What SDMA is doing or waiting for. It persists between polls: a
/// debugger stopped anywhere reads what the machine waits for.
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
    pub(crate) txs: TxPool,
    /// Host builds: each sending stream's timers as of its last change
    /// (`Sdma::timer_view`).
    #[cfg(not(target_os = "none"))]
    views: [TimerView; MAX_STREAMS],
    /// The active streams' part of the deadline, as last worked out
    /// (`Sdma::active_deadline`).
    dl: ActiveDeadline,
    pub(crate) tx_index: heapless::FnvIndexMap<u32, u16, MAX_STREAMS>,
    /// The sending stream found or made last (`Sdma::stream_of`): the
    /// next descriptor or ack is most often for it again, and a look at
    /// its key is cheaper than hashing one.
    last_stream: u16,
    pub(crate) conns: Pool<Conn, MAX_CONNS>,
    conn_index: heapless::FnvIndexMap<u16, u16, MAX_CONNS>,
    /// Current connection of the circular connection queue (NIL: empty).
    pub(crate) conn_cur: u16,
    pub(crate) conn_queue_len: u16,
    /// Streams with unacknowledged packets (retransmit timers).
    active_tx: heapless::Vec<u16, MAX_STREAMS>,
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
    pub(crate) lead: Option<(u16, Option<u8>)>,
    /// The last intake left descriptors in a port's ring.
    intake_left: bool,
    /// Why the last fill loop stopped.
    stopped: fill::Stop,
    /// The transmit buffers held when it stopped (`TxBufs::held`).
    held_at_stop: u32,
    /// The scheduler policy's wait when the machine's state was last
    /// settled (`Sdma::fill`).
    settled_wait: Option<u64>,
}

impl Sdma {
    pub(crate) const fn new() -> Sdma {
        Sdma {
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
            last_stream: NIL,
            conns: Pool::new(Conn::EMPTY),
            conn_index: heapless::FnvIndexMap::new(),
            conn_cur: NIL,
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
    }

    /// One step: descriptors, then timers, then fills. Each part is a step
    /// function of its own, kept out of line so a debugger breaks there.
    pub fn step(
        &mut self,
        cx: &mut Shared,
        hw: &mut impl Hw,
        offloads: &mut crate::offload::Offloads,
        w: &mut Work,
    ) {
        self.intake(cx, hw, offloads, w);
        self.timers(cx, hw, w);
        Fan::sdma_step(self, cx, hw, w);
        self.fill(cx, hw, w);
    }

    /// Has SDMA work it would do at the next pass whatever the news?
    /// Descriptors left in a ring, or a fill that may go on
    /// ([`Sdma::fill_left`]).
    pub fn leftover(&self, cx: &Shared) -> bool {
        self.intake_left || self.fill_left(cx)
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
        let streams: heapless::Vec<u16, MAX_STREAMS> =
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
    pub fn is_current(&self, stream: u16, epoch: u16) -> bool {
        stream != NIL && self.txs.is_live(stream) && self.txs[stream].epoch == epoch
    }

    /// The key of sending stream `s` (remote node, ports, priority).
    pub fn stream_key(&self, s: u16) -> u32 {
        self.txs[s].key
    }

    /// SEND is about to send a poll for sending stream `s`: where it goes,
    /// its first unacknowledged sequence number (in `expected`), the first
    /// not yet handed to the send-DMA engine (the poll overtakes packets
    /// still in buffers: the receiver cannot have seen those), its round
    /// and its poll number (the window policy's); None when nothing is
    /// unacknowledged any more.
    pub fn poll_out(&self, cx: &Shared, s: u16) -> Option<(crate::recv::ControlOut, u32, u8, u8)> {
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

    /// Tests: every stream with packets unacknowledged or a hold still to
    /// end is on the timer list, so the NIC's next deadline covers it (a
    /// NIC with nothing else due sleeps until then).
    #[cfg(any(test, feature = "check-timers"))]
    fn check_timer_list(&self, cx: &Shared) {
        for s in self.txs.live_indices() {
            let st = &self.txs[s];
            let timed = st.outstanding() != 0 || st.hold_until > cx.now;
            assert!(
                !timed || (st.active && self.active_tx.contains(&s)),
                "stream {s} to node {} has a timer to keep (una {}, next {}, high {}, hold until \
                 {} at {}) but is not on the timer list",
                st.remote_node,
                st.win.una(),
                st.win.next(),
                st.win.high(),
                st.hold_until,
                cx.now
            );
        }
    }

    /// Stream `s` has a timer to keep (packets unacknowledged, or a hold
    /// to end): on the timer list (`active_tx`) if it is not there yet.
    /// (A stream is on it at most once, so the list has room.)
    pub(crate) fn watch(&mut self, s: u16) {
        if !self.txs[s].active {
            self.txs[s].active = true;
            let _ = self.active_tx.push(s);
            self.txs.list_changed();
        }
    }

    /// Stream `s` sends nothing for `wait` ticks; the timer list wakes
    /// the NIC when they are over.
    pub(crate) fn hold(&mut self, cx: &Shared, s: u16, wait: u64) {
        self.txs[s].hold_until = cx.now.saturating_add(wait);
        self.watch(s);
    }

    /// Host builds: take again the timer views of the streams handed out
    /// for writing since the last look, and count the active streams'
    /// deadline stale only if one of them changed (a stream written
    /// without touching what its timers depend on, e.g. a packet sent while
    /// others are unacknowledged, leaves the deadline as it was). Its
    /// views are then those `timer_view` would take: each is taken again
    /// from the record as it is now, and a later write notes the stream
    /// again.
    #[cfg(not(target_os = "none"))]
    #[inline]
    fn settle_views(&mut self, cx: &Shared) {
        if !self.txs.touched {
            return;
        }
        self.txs.touched = false;
        for w in 0..self.txs.changed.len() {
            let mut bits = core::mem::take(&mut self.txs.changed[w]);
            while bits != 0 {
                let s = (w * 64) as u16 + bits.trailing_zeros() as u16;
                bits &= bits - 1;
                let v = TimerView::of(&self.txs[s], cx);
                if v != self.views[s as usize] {
                    self.views[s as usize] = v;
                    self.txs.dl_stale = true;
                }
            }
        }
    }

    /// The image keeps no views: a stream handed out for writing since
    /// the last look counts the active streams' deadline stale (one flag
    /// for them all, so a pass that wrote no stream neither scans the
    /// timer list nor works the deadline out again).
    #[cfg(target_os = "none")]
    #[inline]
    fn settle_views(&mut self, _cx: &Shared) {
        if self.txs.touched {
            self.txs.touched = false;
            self.txs.dl_stale = true;
        }
    }

    /// What the timers of sending stream `s` depend on. Host builds keep
    /// it from one look to the next and take it again only after the
    /// stream changed (`TxPool` notes every change): the timer scan and
    /// the deadline read each active stream every pass, and a record on a
    /// cache line of its own per stream made those scans a large part of
    /// a pass in the simulator. The image reads the record each time.
    #[inline]
    fn timer_view(&mut self, cx: &Shared, s: u16) -> TimerView {
        #[cfg(not(target_os = "none"))]
        {
            if !self.txs.take_changed(s) {
                return self.views[s as usize];
            }
            let v = TimerView::of(&self.txs[s], cx);
            self.views[s as usize] = v;
            v
        }
        #[cfg(target_os = "none")]
        TimerView::of(&self.txs[s], cx)
    }

    /// The active streams' timers: the earliest retransmission or send
    /// timeout of those with packets unacknowledged, and the earliest hold
    /// still to end. Kept while no stream changed and the list stayed
    /// the same (the first only depends on the streams; the second also
    /// on the time, and stays while that hold has not ended).
    #[inline]
    fn active_deadline(&mut self, cx: &Shared) -> (Option<u64>, Option<u64>) {
        self.settle_views(cx);
        if !self.txs.dl_stale && cx.now >= self.dl.at && self.dl.hold.is_none_or(|h| h > cx.now) {
            return (self.dl.busy, self.dl.hold);
        }
        let (mut busy, mut hold) = (None::<u64>, None::<u64>);
        let mut removable = false;
        for k in 0..self.active_tx.len() {
            let s = self.active_tx[k];
            let v = self.timer_view(cx, s);
            removable |= !self.txs.is_live(s) || (!v.busy && v.hold_until <= cx.now);
            if v.busy {
                let t = v.expire_at.min(v.acked_at.saturating_add(cx.cfg.send_timeout));
                busy = Some(busy.map_or(t, |b| b.min(t)));
            }
            if v.hold_until > cx.now {
                hold = Some(hold.map_or(v.hold_until, |h| h.min(v.hold_until)));
            }
        }
        self.dl = ActiveDeadline { at: cx.now, busy, hold, removable };
        self.txs.dl_stale = false;
        (busy, hold)
    }

    /// Would the timer scan at `now` find nothing to do (no stream to
    /// take off the list, none timed out)? Known when nothing changed
    /// since the active streams' deadline was worked out, no hold has
    /// ended since and no timer falls due by `now`.
    #[inline]
    fn timers_idle(&mut self, cx: &Shared, now: u64) -> bool {
        self.settle_views(cx);
        !self.txs.dl_stale
            && now >= self.dl.at
            && now < u64::MAX
            && !self.dl.removable
            && self.dl.hold.is_none_or(|h| h > now)
            && self.dl.busy.is_none_or(|b| b > now)
    }

    /// The earliest RTC tick one of SDMA's timers falls due.
    pub fn deadline(&mut self, cx: &Shared, mut at: impl FnMut(u64)) {
        #[cfg(any(test, feature = "check-timers"))]
        self.check_timer_list(cx);
        let (busy, hold) = self.active_deadline(cx);
        if let Some(t) = busy {
            at(t);
        }
        if let Some(t) = hold {
            at(t);
        }
        let mut alarms = self.alarms;
        while alarms != 0 {
            let p = alarms.trailing_zeros() as usize;
            alarms &= alarms - 1;
            if let Some(t) = self.alarm_at[p] {
                at(t);
            }
        }
        if let Some(t) = self.sched.wait() {
            at(t);
        }
        Fan::deadlines(cx, &mut at);
    }
}

/// Bytes of SDMA's state that only host builds have (the timer views and
/// the changed bits): not part of the image's budget.
#[cfg(not(target_os = "none"))]
pub const HOST_ONLY_BYTES: usize =
    core::mem::size_of::<[TimerView; MAX_STREAMS]>() + MAX_STREAMS.div_ceil(64) * 8;

/// What a sending stream's timers depend on (`Sdma::timer_view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimerView {
    /// Packets are unacknowledged.
    busy: bool,
    hold_until: u64,
    /// When the retransmission timer runs out: the last progress and
    /// the poll interval after it.
    expire_at: u64,
    acked_at: u64,
}

impl TimerView {
    #[cfg(not(target_os = "none"))]
    const NONE: TimerView = TimerView { busy: false, hold_until: 0, expire_at: 0, acked_at: 0 };

    #[inline]
    fn of(st: &TxStream, cx: &Shared) -> TimerView {
        TimerView {
            busy: st.outstanding() != 0,
            hold_until: st.hold_until,
            expire_at: st.last_progress.saturating_add(st.poll_after(
                cx.cfg.rto,
                Win::on(&cx.cfg),
                cx.cfg.send_timeout,
            )),
            acked_at: st.acked_at,
        }
    }
}

/// `Sdma::active_deadline` as worked out at RTC `at`.
#[derive(Debug, Clone, Copy)]
struct ActiveDeadline {
    at: u64,
    busy: Option<u64>,
    hold: Option<u64>,
    /// A stream on the list was let go, or has nothing unacknowledged and
    /// no hold left: the timer scan takes it off.
    removable: bool,
}

/// The sending streams' pool. It notes each stream handed out for
/// writing (`IndexMut`, `alloc`, `free`): the active streams' deadline is
/// worked out again (`dl_stale`, also set when the active list changes:
/// `list_changed`), and in host builds that stream's timer view is taken
/// again.
pub(crate) struct TxPool {
    pool: Pool<TxStream, MAX_STREAMS>,
    #[cfg(not(target_os = "none"))]
    changed: [u64; MAX_STREAMS.div_ceil(64)],
    dl_stale: bool,
    /// A stream was handed out for writing (`IndexMut`) since
    /// `Sdma::settle_views` last looked: its view may have changed.
    touched: bool,
    /// A stream or the timer list was written, or the machine moved,
    /// since what it waits for was last settled (`Sdma::fill`).
    pub(super) unsettled: bool,
}

impl TxPool {
    const fn new() -> TxPool {
        TxPool {
            pool: Pool::new(TxStream::EMPTY),
            #[cfg(not(target_os = "none"))]
            changed: [u64::MAX; MAX_STREAMS.div_ceil(64)],
            dl_stale: true,
            touched: false,
            unsettled: true,
        }
    }

    /// Stream `i` was handed out for writing: its view is taken again
    /// (`Sdma::settle_views`, `Sdma::timer_view`).
    #[inline]
    fn note(&mut self, _i: u16) {
        #[cfg(not(target_os = "none"))]
        if let Some(w) = self.changed.get_mut(_i as usize / 64) {
            *w |= 1 << (_i % 64);
        }
        self.touched = true;
        self.unsettled = true;
    }

    /// Stream `i` was set up or let go of: its view is taken again, and
    /// the deadline too (the liveness of a stream on the list counts).
    #[inline]
    fn note_live(&mut self, i: u16) {
        self.note(i);
        self.dl_stale = true;
    }

    /// The active list (`Sdma::active_tx`) gained or lost a stream.
    #[inline]
    fn list_changed(&mut self) {
        self.dl_stale = true;
        self.unsettled = true;
    }

    /// Did stream `i` change since the last call for it?
    #[cfg(not(target_os = "none"))]
    #[inline]
    fn take_changed(&mut self, i: u16) -> bool {
        match self.changed.get_mut(i as usize / 64) {
            Some(w) => {
                let bit = 1 << (i % 64);
                let was = *w & bit != 0;
                *w &= !bit;
                was
            }
            None => true,
        }
    }

    fn alloc(&mut self, v: TxStream) -> Option<u16> {
        let i = self.pool.alloc(v)?;
        self.note_live(i);
        Some(i)
    }

    fn free(&mut self, i: u16) {
        self.note_live(i);
        self.pool.free(i)
    }

    fn is_live(&self, i: u16) -> bool {
        self.pool.is_live(i)
    }

    fn available(&self) -> usize {
        self.pool.available()
    }

    pub(crate) fn live_indices(&self) -> impl Iterator<Item = u16> + '_ {
        self.pool.live_indices()
    }
}

impl core::ops::Index<u16> for TxPool {
    type Output = TxStream;
    #[inline]
    fn index(&self, i: u16) -> &TxStream {
        &self.pool[i]
    }
}

impl core::ops::IndexMut<u16> for TxPool {
    #[inline]
    fn index_mut(&mut self, i: u16) -> &mut TxStream {
        self.note(i);
        &mut self.pool[i]
    }
}
