//! The stream and connection records: a sending stream (its window,
//! queue, timers and retries), a receiving stream (its window and the
//! message being assembled) and a connection (the streams to one node).

use super::*;

/// A stream is (remote node, local port, remote port, priority); packed as
/// the flow key of the rate-control table (a sending stream is a flow).
pub fn stream_key(remote_node: u16, local_port: u8, remote_port: u8, prio: Priority) -> u32 {
    nic_abi::flows::flow_key(local_port, remote_node, remote_port, prio)
}

/// Sending half of a stream.
#[derive(Debug, Clone, Copy)]
pub struct TxStream {
    pub key: u32,
    pub remote_node: u16,
    pub local_port: u8,
    pub remote_port: u8,
    pub prio: Priority,
    /// The go-back-N window: una, next, high.
    pub win: GoBackN,
    /// Sequence number of the head token's first packet: the tokens on the
    /// list cover `base..` contiguously.
    pub base: u32,
    /// The next message's first packet must carry SYNC (a new stream starts
    /// with it).
    pub sync_next: bool,
    /// The sync_gen SYNC packets carry; changes at every resynchronisation.
    pub sync_gen: u8,
    /// When the receiver last acknowledged progress (or the stream woke).
    pub acked_at: u64,
    /// Retransmission timeouts in a row without progress: the timeout
    /// doubles with each (exponential backoff), so a congested receiver is
    /// not buried in go-back-N resends.
    pub backoff: u8,
    /// Token list, oldest first (None: empty).
    pub head: Option<TokenId>,
    pub tail: Option<TokenId>,
    /// Token being sent (None: all sent).
    pub cursor: Option<TokenId>,
    /// When acks last made progress (or the timer was restarted).
    pub last_progress: u64,
    /// Do not send before this (no-buffer or busy retry).
    pub hold_until: u64,
    /// When the target first refused for lack of a buffer (0: not now).
    pub nobuf_since: u64,
    /// `NoBuffer` refusals in a row without progress. The wait before
    /// sending again (the window, or under selective repeat the refused
    /// packet) doubles with each, so a receiver short of buffers is not
    /// kept busy turning it away.
    pub refusals: u8,
    /// Sends are dropped until the host resumes (after a timeout).
    pub suspended: bool,
    /// Bumped at every rewind: filled buffers of an older epoch are stale.
    pub epoch: u16,
    /// Connection this stream belongs to (set when the stream is made).
    pub conn: Option<ConnId>,
    /// Its links in the connection's ring of streams while it is on it
    /// (None: not on the ring).
    pub ring: Option<Links<TxStream>>,
    /// On the active list (streams with unacked packets).
    pub active: bool,
    /// What the scheduler policy keeps beside the stream (rate control:
    /// its pacing clock and flow-table entry).
    pub pace: crate::offload::policy::StreamPace,
    /// Set-up order (ties of the scheduler; the incarnation).
    pub order: u32,
    /// The measured round trip, which sets the retransmission timeout.
    pub rtt: crate::rtt::Rtt,
    /// Why the stream last went back (`RetxCause`): the packets it sends
    /// again are counted under it.
    pub retx_cause: RetxCause,
    /// The retransmission timer ran out and a poll went: the gap its
    /// answer reports is the timeout's to resend.
    pub polled: bool,
    /// Made after this NIC let an idle stream go: its SYNC packets name
    /// its incarnation (`order`, with `Flags::INCARNATION`).
    pub reborn: bool,
    /// What the window policy keeps beside the window (selective repeat:
    /// what was acknowledged out of order, what is to be resent, the poll
    /// number; each packet's stamp is in SRAM, `map::sr_stamp`).
    pub marks: crate::offload::policy::StreamMarks,
}

/// Why a stream sends packets again; each has its counter
/// (`RetxCause::stat`), and they add up to `Stat::Retransmits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RetxCause {
    /// Nothing acknowledged for a retransmission timeout.
    Timeout,
    /// The receiver saw a gap and nacked the first missing packet.
    Gap,
    /// The receiver had no buffer (or, relaying a multicast, no room).
    NoBuffer,
    /// The receiver refused a message (port closed, memory not
    /// registered): the stream goes on from the next one.
    Refused,
    /// The receiver lost the stream's state (its NIC was reset): the
    /// stream starts again with SYNC.
    Resync,
}

impl RetxCause {
    pub fn stat(self) -> nic_abi::stats::Stat {
        use nic_abi::stats::Stat;
        match self {
            RetxCause::Timeout => Stat::RetxTimeout,
            RetxCause::Gap => Stat::RetxGap,
            RetxCause::NoBuffer => Stat::RetxNoBuffer,
            RetxCause::Refused => Stat::RetxRefused,
            RetxCause::Resync => Stat::RetxResync,
        }
    }
}

impl TxStream {
    pub const EMPTY: TxStream = TxStream {
        key: 0,
        remote_node: 0,
        local_port: 0,
        remote_port: 0,
        prio: Priority::Low,
        win: GoBackN::new(),
        base: 0,
        sync_next: true,
        sync_gen: 0,
        acked_at: 0,
        backoff: 0,
        head: None,
        tail: None,
        cursor: None,
        last_progress: 0,
        hold_until: 0,
        nobuf_since: 0,
        refusals: 0,
        suspended: false,
        epoch: 0,
        conn: None,
        ring: None,
        active: false,
        pace: <crate::offload::policy::StreamPace as crate::offload::policy::Pacing>::NEW,
        order: 0,
        rtt: crate::rtt::Rtt::new(),
        retx_cause: RetxCause::Timeout,
        polled: false,
        reborn: false,
        marks: <crate::offload::policy::StreamMarks as crate::offload::policy::Marks>::NEW,
    };

    pub fn outstanding(&self) -> u32 {
        self.win.outstanding()
    }

    /// The stream starts a new round: packets filled before are stale
    /// (the epoch moves on), and so, for selective repeat, whose packets
    /// carry their poll stamp as their round, does the poll number.
    pub fn next_round(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        crate::offload::policy::Marks::poll(&mut self.marks);
    }

    /// When to poll after the last progress: the retransmission timeout,
    /// or under selective repeat (a poll resends nothing blindly) the
    /// measured round trip's with a quarter of the configured floor, not
    /// backed off. Backoff never spaces the tries so far apart that fewer
    /// than [`TRIES_PER_TIMEOUT`] fit in the send timeout: a stream is
    /// given up on when nothing was acknowledged for that long, and on a
    /// lossy path with a short send timeout a handful of tries could all
    /// be lost.
    pub fn poll_after(&self, rto: u64, selective: bool, send_timeout: u64) -> u64 {
        // Selective: no backoff, as a poll is one small packet and resends
        // nothing (measured: doubling it per poll without progress left
        // streams a receiver kept cutting idle for milliseconds).
        let (floor, backoff) =
            if selective { (rto / POLL_FLOOR_DIV, 0) } else { (rto, self.backoff) };
        let once = self.rtt.rto(floor);
        let cap = (send_timeout / TRIES_PER_TIMEOUT).max(once);
        once.saturating_mul(1 << backoff.min(MAX_BACKOFF)).min(cap)
    }

    /// How long to wait before sending again (the window, or under
    /// selective repeat the refused packet) after the target refused a
    /// packet for want of a buffer, counting this
    /// refusal: the profile's retry time, doubled for each refusal in a
    /// row before this one without progress, at most
    /// `2^MAX_REFUSAL_SHIFT` times it and never more than a
    /// [`TRIES_PER_TIMEOUT`]th of the send timeout. A receiver short of
    /// buffers for long would otherwise spend its memory bus taking in and
    /// dropping what its senders try again.
    pub fn refused(&mut self, nobuf_retry: u64, send_timeout: u64) -> u64 {
        let shift = self.refusals.min(MAX_REFUSAL_SHIFT);
        self.refusals = self.refusals.saturating_add(1);
        let cap = (send_timeout / TRIES_PER_TIMEOUT).max(nobuf_retry);
        nobuf_retry.saturating_mul(1 << shift).min(cap)
    }
}

/// The most a refused sender's wait doubles ([`TxStream::refused`]).
pub const MAX_REFUSAL_SHIFT: u8 = 6;

/// The fewest retransmission timeouts a send timeout holds, however far
/// they are backed off. Each try is a poll and its answer, which over a
/// path losing 28% of round trips (four hops each way at 4% a hop) all
/// fail about once in 10^9 with sixteen; with eight, once in 10^4.5, which
/// random runs with a short send timeout found.
pub const TRIES_PER_TIMEOUT: u64 = 16;

/// A selective stream's poll timer has this fraction of the configured
/// retransmission timeout as its floor.
pub const POLL_FLOOR_DIV: u64 = 4;

/// What a receiving stream is assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assembly {
    Idle,
    /// A message into receive slot `slot`.
    Message {
        slot: SlotId,
    },
    /// A put into the local port's memory at `base`.
    Put {
        base: u64,
    },
    /// A get answer for local token `token`.
    GetResp {
        token: TokenId,
    },
}

/// Receiving half of a stream.
#[derive(Debug, Clone, Copy)]
pub struct RxStream {
    pub key: u32,
    pub remote_node: u16,
    pub local_port: u8,
    pub remote_port: u8,
    pub prio: Priority,
    /// The next sequence number expected.
    pub win: RecvWindow,
    /// An ack is owed; send it by `ack_due`.
    pub ack_pending: bool,
    pub ack_due: u64,
    /// Packets accepted since the last ack went out (at most what a
    /// counter of 16 bits holds: acks are owed at half a window).
    pub unacked: u16,
    /// Last out-of-order nack: for which expected value, the sender's
    /// round of the packet that drew it, and when.
    pub nacked: Option<u32>,
    pub nack_round: u8,
    /// The last SYNC adopted, if any.
    pub sync_seen: SyncSeen,
    pub nack_time: u64,
    pub assembly: Assembly,
    /// Bytes of the current message placed so far.
    pub offset: u32,
    pub msg_len: u32,
    /// On the ack list.
    pub on_ack_list: bool,
    /// What the message being assembled counts for as a multicast.
    pub mrec: Mrec,
}

impl RxStream {
    pub const EMPTY: RxStream = RxStream {
        key: 0,
        remote_node: 0,
        local_port: 0,
        remote_port: 0,
        prio: Priority::Low,
        win: RecvWindow::new(),
        ack_pending: false,
        ack_due: 0,
        unacked: 0,
        nacked: None,
        nack_round: 0,
        sync_seen: SyncSeen::NONE,
        nack_time: 0,
        assembly: Assembly::Idle,
        offset: 0,
        msg_len: 0,
        on_ack_list: false,
        mrec: Mrec::NONE,
    };
}

/// A connection: a remote node with streams that have packets to send.
/// Its streams form a circular list (GM's sub-port queue).
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub node: u16,
    /// Current stream of the ring (the next to serve), None if empty.
    pub ring: Option<TxId>,
    /// Streams on the ring.
    pub ring_len: u16,
    /// Its links in the circular connection queue while it is on it
    /// (None: not on the queue).
    pub queue: Option<Links<Conn>>,
}

impl Conn {
    pub const EMPTY: Conn = Conn { node: 0, ring: None, ring_len: 0, queue: None };
}

/// A record's links in a circular list (a member of a one-record list
/// links to itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Links<T> {
    pub next: Id<T>,
    pub prev: Id<T>,
}
