//! SEND: transmit buffers -> the send-DMA engine. Acks and nacks that
//! RECV queued go first (they are small and unblock peers); then the
//! buffers SDMA filled, in fill order, each with the piggybacked ack of the
//! reverse stream written into its header (always, when RECV has that
//! stream: it is free). A buffer filled before its stream rewound is stale
//! and freed unsent. Buffers come back free when the engine reports them
//! sent.
//!
//! Owns: the send-DMA command ring's producer side and the buffers on the
//! wire. Takes from: `Shared::controls` (RECV), `Shared::tx_ready` (SDMA).
//! Asks SDMA whether a buffer's stream is current, and RECV for the ack
//! value to carry (RECV then owes no separate ack).

use crate::hw::Hw;
use crate::offload::fanout::{Fan, Fanout};
use crate::offload::policy::{Win, Window};
use crate::queue::{self, Consumer};
use crate::records::*;
use crate::recv::Recv;
use crate::sdma::Sdma;
use crate::shared::{write_route, MachineState, Shared};
use crate::Work;
use nic_abi::map;
use nic_abi::packet::{
    piggyback, AckRepr, Addr, Flags, NackCode, NackRepr, PacketType, PollRepr, StatRepr, HEADER_LEN,
};
use nic_abi::regs;
use nic_abi::rings::{self, TxDmaCmd};
use nic_abi::stats::Stat;
use nic_abi::trace::{Cause, Machine};

/// What SEND is doing or waiting for (persists between polls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    /// Nothing queued, nothing on the wire.
    Idle,
    /// Starting a control packet of stream `stream` (its index: the
    /// receiving stream's for an ack, a nack or a report, the sending
    /// stream's for a poll).
    Control { stream: u16 },
    /// Starting data packet `seq` from transmit buffer `buf`.
    Data { buf: u8, seq: u32 },
    /// `in_flight` packets are with the send-DMA engine, the last from
    /// transmit buffer `buf`.
    Wire { buf: u8, in_flight: u8 },
    /// `waiting` acks or nacks wait for a free transmit buffer.
    BufferWait { waiting: u8 },
}

impl SendState {
    pub const IDLE: u8 = 0;
    pub const CONTROL: u8 = 1;
    pub const DATA: u8 = 2;
    pub const WIRE: u8 = 3;
    pub const BUFFER_WAIT: u8 = 4;
}

impl MachineState for SendState {
    const MACHINE: Machine = Machine::Send;

    fn code(&self) -> u8 {
        match self {
            SendState::Idle => Self::IDLE,
            SendState::Control { .. } => Self::CONTROL,
            SendState::Data { .. } => Self::DATA,
            SendState::Wire { .. } => Self::WIRE,
            SendState::BufferWait { .. } => Self::BUFFER_WAIT,
        }
    }

    fn arg(&self) -> u32 {
        match *self {
            SendState::Idle => 0,
            SendState::Control { stream } => stream as u32,
            SendState::Data { seq, .. } => seq,
            SendState::Wire { buf, .. } => buf as u32,
            SendState::BufferWait { waiting } => waiting as u32,
        }
    }
}

// A header in a transmit buffer starts on a word (`piggyback` edits it
// word by word).
const _: () = assert!((map::TX_BUFS + map::ROUTE_ROOM).is_multiple_of(8));

// A send-DMA command is four aligned words (`Send::start_txdma`).
const _: () = assert!(map::TXDMA_RING.is_multiple_of(8) && rings::TXDMA_CMD_SIZE == 32);

/// The SEND machine.
pub struct Send {
    state: SendState,
    /// Buffers handed to the send-DMA engine, in order.
    in_flight: crate::ring::Ring<u8, { map::TX_BUF_COUNT as usize }>,
    prod: u32,
    done: u32,
    /// Its halves of the queues between machines (`crate::queue`): the
    /// filled buffers and the control packets it sends.
    ready: Consumer<queue::ToSend>,
    controls: Consumer<queue::Controls>,
}

impl Send {
    pub(crate) const fn new() -> Send {
        Send {
            state: SendState::Idle,
            in_flight: crate::ring::Ring::new(),
            prod: 0,
            done: 0,
            ready: queue::consumer(),
            controls: queue::consumer(),
        }
    }

    pub fn state(&self) -> SendState {
        self.state
    }

    fn go(&mut self, cx: &mut Shared, hw: &mut impl Hw, to: SendState, cause: Cause) {
        cx.transition(hw, &mut self.state, to, cause);
    }

    /// Take over the engine's counters as they are (a warm restart).
    pub fn init(&mut self, hw: &mut impl Hw) {
        self.prod = hw.reg(regs::TXDMA_DONE);
        hw.set_reg(regs::TXDMA_PROD, self.prod);
        self.done = self.prod;
    }

    /// Packets the send-DMA engine finished: their buffers are free.
    /// Send completions taken so far (TXDMA_DONE as they left it).
    pub(crate) fn done(&self) -> u32 {
        self.done
    }

    pub fn completions(&mut self, cx: &mut Shared, hw: &mut impl Hw) {
        let done = hw.reg(regs::TXDMA_DONE);
        let n = done.wrapping_sub(self.done).min(self.in_flight.len() as u32);
        for _ in 0..n {
            self.done = self.done.wrapping_add(1);
            if let Some(b) = self.in_flight.pop_front() {
                cx.txbufs.release(b);
            }
        }
        if n > 0 {
            let next = self.at_rest(cx);
            self.go(cx, hw, next, Cause::WireDone);
        }
    }

    /// What the machine waits for when it has started all it can.
    fn at_rest(&self, cx: &Shared) -> SendState {
        if !cx.controls.is_empty() {
            SendState::BufferWait { waiting: cx.controls.len() as u8 }
        } else if let Some(&buf) = self.in_flight.back() {
            SendState::Wire { buf, in_flight: self.in_flight.len() as u8 }
        } else {
            SendState::Idle
        }
    }

    /// A step: with nothing queued (no offload packet, no ack or nack,
    /// no filled buffer) there is nothing to do: what the machine waits
    /// for was settled when the queues or the engine last moved (the end
    /// of `send_queued`, `completions`), and only those move it. Kept out
    /// of line (a debugger breaks here) and short.
    #[inline(never)]
    pub fn step(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        recv: &mut Recv,
        hw: &mut impl Hw,
        w: &mut Work,
    ) {
        let offload_tx = crate::offload::Offloads::ANY && !cx.offload.tx.is_empty();
        if !offload_tx && cx.controls.is_empty() && cx.tx_ready.is_empty() {
            #[cfg(any(test, feature = "check-timers"))]
            assert_eq!(self.at_rest(cx), self.state, "SEND at rest in another state");
            return;
        }
        self.send_queued(cx, sdma, recv, hw, w);
    }

    /// Start what is queued (kept out of line: its frame is large).
    #[inline(never)]
    fn send_queued(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        recv: &mut Recv,
        hw: &mut impl Hw,
        w: &mut Work,
    ) {
        // Packets the offloads built (`offload::Services::send`), then
        // acks and nacks: they are small and unblock peers.
        if crate::offload::Offloads::ANY {
            while let Some(b) = cx.offload.tx.pop_front() {
                self.start_txdma(cx, hw, b, w);
            }
        }
        while let Some(&c) = cx.controls.front() {
            let Some(b) = cx.txbufs.free_one() else { break };
            cx.controls.pop_front(&self.controls);
            let stream = c.stream_raw();
            self.go(cx, hw, SendState::Control { stream }, Cause::ControlOut);
            if self.send_control(cx, sdma, recv, hw, b, c) {
                self.start_txdma(cx, hw, b, w);
            }
        }
        // One fan-out packet built per pass: the NIC CPU's work for it is
        // paid before the next leaves, so a sender's children get the
        // message one send time apart, not in a batch at the end of a
        // pass (the copies that go with it are not built).
        let mut built = false;
        while let Some(&b) = cx.tx_ready.front() {
            let buf = cx.txbufs.get(b);
            let builds = Fan::builds(&buf);
            if built && builds {
                break;
            }
            cx.tx_ready.pop_front(&self.ready);
            let current = buf.stream.filter(|&s| sdma.is_current(s, buf.epoch));
            let Some(stream) = current else {
                // Filled before a rewind: the stream will send it again.
                cx.txbufs.release(b);
                continue;
            };
            self.go(cx, hw, SendState::Data { buf: b, seq: buf.seq }, Cause::DataOut);
            let hdr = map::tx_buf(b as u32) + map::ROUTE_ROOM;
            let key = sdma.stream_key(stream);
            // The acks piggybacked, written into the header's words.
            let w0 = hw.load_u64(hdr + piggyback::FLAGS_WORD);
            let mut add = Flags::empty();
            // (A SYNC naming its incarnation has no room for an ack.)
            if piggyback::has_ack_room(w0) {
                if let Some(ack) = recv.piggyback_ack(key) {
                    add |= Flags::ACK_VALID;
                    let at = hdr + piggyback::ACK_WORD;
                    hw.store_u64(at, piggyback::with_ack(hw.load_u64(at), ack));
                }
            }
            add |= Fan::piggyback(recv, hw, key, hdr);
            if !add.is_empty() {
                hw.store_u64(hdr + piggyback::FLAGS_WORD, piggyback::with_flags(w0, add));
            }
            self.start_txdma(cx, hw, b, w);
            built |= builds;
        }
        let next = self.at_rest(cx);
        self.go(cx, hw, next, Cause::Drained);
    }

    fn start_txdma(&mut self, cx: &mut Shared, hw: &mut impl Hw, b: u8, w: &mut Work) {
        let buf = cx.txbufs.get(b);
        let start = map::tx_buf(b as u32) + map::ROUTE_ROOM - buf.route_len as u32;
        // A relayed packet: its payload is gathered from its receive buffer.
        let (head, tail_sram, tail_len) = match buf.gather {
            None => (buf.len, 0, 0),
            Some(g) => {
                let tail = buf.len.saturating_sub(HEADER_LEN as u32);
                (HEADER_LEN as u32, map::rx_buf(g.get() as u32) + HEADER_LEN as u32, tail)
            }
        };
        let cmd = TxDmaCmd {
            sram: start,
            len: buf.route_len as u32 + head,
            route_len: buf.route_len,
            cookie: b as u32,
            tail_sram,
            tail_len,
        };
        // Four word stores of `TxDmaCmd::encode`'s layout.
        let slot =
            rings::slot(map::TXDMA_RING, map::TXDMA_RING_LEN, rings::TXDMA_CMD_SIZE, self.prod);
        hw.store_u64(slot, cmd.sram as u64 | (cmd.len as u64) << 32);
        hw.store_u64(slot + 8, cmd.route_len as u64 | (cmd.cookie as u64) << 32);
        hw.store_u64(slot + 16, cmd.tail_sram as u64 | (cmd.tail_len as u64) << 32);
        hw.store_u64(slot + 24, 0);
        self.prod = self.prod.wrapping_add(1);
        hw.set_reg(regs::TXDMA_PROD, self.prod);
        cx.txbufs.sending(b);
        let _ = self.in_flight.push_back(b);
        cx.bump(hw, Stat::PacketsSent, 1);
        w.tx_packets += 1;
        Fan::priced(&buf, w);
    }

    /// Write control packet `c` (an ack, a nack, a poll or a window
    /// policy's status report) into free transmit buffer `b` and take it;
    /// false when it went stale (nothing to send, `b` stays free).
    fn send_control(
        &mut self,
        cx: &mut Shared,
        sdma: &Sdma,
        recv: &mut Recv,
        hw: &mut impl Hw,
        b: u8,
        c: Control,
    ) -> bool {
        // SDMA (a poll) or RECV (an ack, a nack, a STAT or a USTAT) says
        // what the packet carries, or that it went stale. A nack echoes
        // the round of the packet that drew it. A status report of the
        // window policy (a STAT, a USTAT) is its to write.
        let mut stat_len = 0;
        let (r, h, seq) = if let Some(s) = c.tx_stream() {
            let Some((r, next, round, poll)) = sdma.poll_out(cx, s) else { return false };
            let p = PollRepr {
                addr: control_addr(cx, &r),
                una: r.expected,
                next,
                round,
                poll,
                // Which boot of this NIC asks (the receiver may hold the
                // stream of an earlier one).
                boot: cx.boot,
                incarnation: (r.incarnation != 0).then_some(r.incarnation),
                report_stream: Fan::report_stream(&r),
            };
            (r, p.emit(), r.expected)
        } else if c.is_report() {
            let at = map::tx_buf(b as u32) + map::ROUTE_ROOM + HEADER_LEN as u32;
            let Some((r, ptype, len)) = Win::report_out(recv, hw, at, c) else { return false };
            stat_len = len;
            let p = StatRepr {
                addr: control_addr(cx, &r),
                ustat: ptype == PacketType::Ustat,
                ack: Some(r.expected),
                payload_len: len as u16,
                report_stream: Fan::report_stream(&r),
            };
            (r, p.emit(), 0)
        } else {
            let Some(r) = recv.control_out(c) else { return false };
            let (addr, ack) = (control_addr(cx, &r), Some(r.expected));
            let report_stream = Fan::report_stream(&r);
            // (Every code queued is a `NackCode`'s.)
            match c.nack().and_then(|(code, seq)| Some((NackCode::from_u8(code)?, seq))) {
                Some((code, seq)) => {
                    let p = NackRepr { addr, code, seq, round: c.round, ack, report_stream };
                    (r, p.emit(), seq)
                }
                None => (r, AckRepr { addr, ack, report_stream }.emit(), 0),
            }
        };
        let route_len = write_route(hw, b, r.remote_node);
        let mut hb = [0u8; HEADER_LEN];
        h.encode(&mut hb);
        hw.write(map::tx_buf(b as u32) + map::ROUTE_ROOM, &hb);
        cx.txbufs.take(
            b,
            TxBuf {
                state: TxBufState::Filled,
                stream: None,
                epoch: 0,
                route_len,
                len: (HEADER_LEN + stat_len) as u32,
                control: true,
                seq,
                gather: None,
                ..TxBuf::EMPTY
            },
        );
        cx.bump(hw, sent_stat(h.ptype), 1);
        true
    }
}

/// The ends of a control packet (an ack, a nack, a poll, a window
/// policy's report) of stream `r`.
fn control_addr(cx: &Shared, r: &crate::recv::ControlOut) -> Addr {
    Addr {
        src_node: cx.cfg.node,
        src_port: r.local_port,
        dst_node: r.remote_node,
        dst_port: r.remote_port,
        priority: r.prio,
    }
}

/// The counter of control packets of type `ptype` sent.
fn sent_stat(ptype: PacketType) -> Stat {
    match ptype {
        PacketType::Nack => Stat::NacksSent,
        PacketType::Ack => Stat::AcksSent,
        PacketType::Stat => Stat::StatsSent,
        PacketType::Ustat => Stat::UstatsSent,
        _ => Stat::PollsSent,
    }
}
