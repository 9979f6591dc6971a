//! NIC counters in the STATS block: u64 words the firmware writes and
//! anyone may read. `stat_offset(Stat::X)` is the absolute SRAM offset.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// Packets handed to the send-DMA engine (data, acks, nacks; resends too).
    PacketsSent = 0,
    /// Packets taken from the receive-DMA engine with a good CRC.
    PacketsReceived = 1,
    /// Data packets sent again (after a timeout, a nack, a USTAT or a STAT).
    Retransmits = 2,
    /// Received packets dropped for any reason (sum of the drop counters).
    Drops = 3,
    /// Descriptors refused with an error event.
    Errors = 4,
    /// Received packets whose CRC failed.
    CrcErrors = 5,
    /// Duplicate data packets (acked and dropped).
    Duplicates = 6,
    /// Data packets beyond a gap (nacked and dropped).
    OutOfOrder = 7,
    /// Headers that failed to parse, or not for this node.
    BadHeaders = 8,
    AcksSent = 9,
    NacksSent = 10,
    /// Sends completed with TimedOut.
    Timeouts = 11,
    /// Messages delivered to the host (receive events).
    MessagesReceived = 12,
    /// Messages sent (successful completions).
    MessagesSent = 13,
    /// Packets refused for lack of a receive buffer (nacked).
    NoBuffer = 14,
    /// Main-loop passes.
    Polls = 15,
    /// Acks or nacks not queued because the control queue was full.
    ControlDrops = 16,
    /// Multicast packets a relay sent on to a child out of its receive
    /// buffer (no host-DMA).
    McastForwarded = 17,
    /// Children of a multicast tree the NIC computed itself (NIC-based
    /// scheme: the tree work the NIC CPU does).
    McastTreeOps = 18,
    /// Multicast reports sent to a parent (one per member per message).
    McastReports = 19,
    /// Multicasts completed at the root (one event each).
    McastCompleted = 20,
    /// Multicast packets refused (nack Busy) because the relay held as
    /// many receive buffers as it may for forwarding.
    McastBusy = 21,
    /// Data packets sent again after a retransmission timeout (these five
    /// add up to `Retransmits`).
    RetxTimeout = 22,
    /// ... after the receiver nacked a gap (a packet before was lost).
    RetxGap = 23,
    /// ... after the receiver nacked for want of a buffer (or `Busy`).
    RetxNoBuffer = 24,
    /// ... after the receiver refused a message (port closed, memory not
    /// registered): the messages behind it go again.
    RetxRefused = 25,
    /// ... after the receiver lost the stream (its NIC was reset).
    RetxResync = 26,
    /// Polls sent: a sending stream's retransmission timer ran out and it
    /// asked the receiver where the stream stands.
    PollsSent = 27,
    /// Idle streams let go of to make room for a new one when the stream
    /// table was full (sending streams, and receive streams of reports).
    StreamsEvicted = 28,
    /// Translations found in the translation cache.
    TlbHits = 29,
    /// Translations not in the cache: a line of page-table entries was
    /// read from host memory.
    TlbMisses = 30,
    /// Cached translations overwritten to make room.
    TlbEvictions = 31,
    /// Payload bytes of the data packets sent again (`Retransmits`).
    RetxBytes = 32,
    /// Selective repeat: STATs sent (a receiver's answer to a poll: what
    /// it has and which ranges it misses).
    StatsSent = 33,
    /// Selective repeat: USTATs sent (a receiver names at once a gap that
    /// a packet arriving past it opened).
    UstatsSent = 34,
    /// Selective repeat: packets that arrived past a gap and were kept
    /// (not dropped) until the gap filled.
    Held = 35,
}

pub const STAT_COUNT: usize = 36;

pub const fn stat_offset(s: Stat) -> u32 {
    crate::map::STATS + (s as u32) * 8
}

pub const ALL_STATS: [Stat; STAT_COUNT] = [
    Stat::PacketsSent,
    Stat::PacketsReceived,
    Stat::Retransmits,
    Stat::Drops,
    Stat::Errors,
    Stat::CrcErrors,
    Stat::Duplicates,
    Stat::OutOfOrder,
    Stat::BadHeaders,
    Stat::AcksSent,
    Stat::NacksSent,
    Stat::Timeouts,
    Stat::MessagesReceived,
    Stat::MessagesSent,
    Stat::NoBuffer,
    Stat::Polls,
    Stat::ControlDrops,
    Stat::McastForwarded,
    Stat::McastTreeOps,
    Stat::McastReports,
    Stat::McastCompleted,
    Stat::McastBusy,
    Stat::RetxTimeout,
    Stat::RetxGap,
    Stat::RetxNoBuffer,
    Stat::RetxRefused,
    Stat::RetxResync,
    Stat::PollsSent,
    Stat::StreamsEvicted,
    Stat::TlbHits,
    Stat::TlbMisses,
    Stat::TlbEvictions,
    Stat::RetxBytes,
    Stat::StatsSent,
    Stat::UstatsSent,
    Stat::Held,
];

const _: () = assert!(STAT_COUNT as u32 * 8 <= crate::map::STATS_SIZE);
