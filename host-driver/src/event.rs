//! Driver-level events: the NIC's 64-byte event records
//! (`nic_abi::event::Event`) turned into a typed enum, plus the rule that
//! says which token each event gives back.

use nic_abi::desc::DescKind;
use nic_abi::event::{
    self as abi, ErrorCause, EventKind, LostHeads, McastInfo, SendStatus, INLINE_MAX,
};
use nic_abi::Priority;

/// The first bytes of a small received message, copied into its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inline {
    len: u8,
    bytes: [u8; INLINE_MAX],
}

impl Inline {
    /// The inline bytes (at most `INLINE_MAX`; empty if the NIC sent none).
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What the NIC told a port. Every variant carries `rtc`, the NIC clock
/// when the firmware composed the event. `Port::recv` returns the ones a
/// program acts on; `Port::poll` every one.
///
/// ```no_run
/// use host_driver::{Event, Port, RecvOpts, SendStatus};
///
/// # fn main() -> Result<(), host_driver::DriverError> {
/// let mut port = Port::attach("nic", 1, 0)?;
/// let inbox = port.alloc(4096)?;
/// port.provide(&inbox, RecvOpts::default())?;
/// match port.recv()? {
///     e @ Event::Received { node, port: from, .. } => {
///         let bytes = port.read_message(&e)?;
///         println!("{} bytes from node {node} port {from}", bytes.len());
///     }
///     Event::Sent { tag, status, .. } if status != SendStatus::Ok => {
///         eprintln!("send {tag} failed: {status:?}");
///     }
///     Event::Error { cause, tag, .. } => eprintln!("the NIC refused {tag}: {cause:?}"),
///     other => println!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A message landed in a receive buffer provided with
    /// `provide_receive_buffer`; its receive token is back.
    Received {
        /// Sending node and port.
        node: u16,
        port: u8,
        priority: Priority,
        /// Message length in bytes.
        len: u32,
        /// Virtual address of the receive buffer (the `DmaBuf::vaddr` given).
        buffer: u64,
        /// The tag of the Provide descriptor.
        tag: u64,
        size_class: u8,
        /// First bytes of the message, if the NIC inlined them.
        inline: Inline,
        /// The multicast the message belongs to (None: a unicast).
        mcast: Option<McastInfo>,
        rtc: u64,
    },
    /// A send completed (see `status`); its send token is back. A
    /// multicast's completion says which multicast, and how many members
    /// it did not reach (`SendStatus::Incomplete`).
    Sent { tag: u64, status: SendStatus, mcast: Option<McastInfo>, rtc: u64 },
    /// A put completed at the sender; its send token is back.
    PutDone { tag: u64, status: SendStatus, rtc: u64 },
    /// A get completed (data in the local buffer if `status` is Ok); its
    /// send token is back.
    GetDone { tag: u64, status: SendStatus, rtc: u64 },
    /// The NIC refused a descriptor. `desc_kind` is the refused
    /// descriptor's kind (None if its kind byte named none); the token it
    /// took, if any, is back (a send token when the kind byte named none).
    Error { cause: ErrorCause, tag: u64, desc_kind: Option<DescKind>, rtc: u64 },
    /// An alarm set with `set_alarm` went off.
    Alarm { tag: u64, rtc: u64 },
    /// The firmware has noticed the open and serves the port.
    PortOpened { rtc: u64 },
    /// The answer to `Port::nic_echo`: the NIC of `node` answered (status
    /// Ok) after `rtt` NIC clock ticks, or did not within the send timeout
    /// (`SendStatus::Unreachable`, `rtt` 0). No token.
    Echo { node: u16, tag: u64, status: SendStatus, rtt: u64, rtc: u64 },
    /// This member's part of a collective is done (`Port::barrier`,
    /// `Port::allreduce`, ...): collective `cseq` of group `group`, the
    /// result (if it has one) at `result`. `status` is Ok, or Incomplete
    /// with the nodes of the members that went missing (their NIC reset,
    /// their port closed, or no answer for the send timeout) in
    /// `missing`. No token.
    Collective {
        group: u16,
        cseq: u32,
        tag: u64,
        status: SendStatus,
        result: u64,
        missing: LostHeads,
        rtc: u64,
    },
    /// An assisted collective ([`Collective::assisted`]): this member's NIC
    /// took every chunk of collective `cseq` of group `group` through its
    /// step `step` (the steps released so far) and waits for the host to
    /// release step `step + 1` (`Port::collective_step`). `tag` is the
    /// releasing call's. The last step ends with `Event::Collective`
    /// instead. No token.
    ///
    /// [`Collective::assisted`]: crate::collective::Collective::assisted
    CollStep { group: u16, cseq: u32, step: u16, tag: u64, rtc: u64 },
}

impl Event {
    /// NIC clock when the event was composed.
    pub fn rtc(&self) -> u64 {
        match *self {
            Event::Received { rtc, .. }
            | Event::Sent { rtc, .. }
            | Event::PutDone { rtc, .. }
            | Event::GetDone { rtc, .. }
            | Event::Error { rtc, .. }
            | Event::Alarm { rtc, .. }
            | Event::Echo { rtc, .. }
            | Event::Collective { rtc, .. }
            | Event::CollStep { rtc, .. }
            | Event::PortOpened { rtc } => rtc,
        }
    }

    /// The tag the event carries (0 for PortOpened).
    pub fn tag(&self) -> u64 {
        match *self {
            Event::Received { tag, .. }
            | Event::Sent { tag, .. }
            | Event::PutDone { tag, .. }
            | Event::GetDone { tag, .. }
            | Event::Error { tag, .. }
            | Event::Alarm { tag, .. }
            | Event::Echo { tag, .. }
            | Event::Collective { tag, .. }
            | Event::CollStep { tag, .. } => tag,
            Event::PortOpened { .. } => 0,
        }
    }
}

/// Which token an event record returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenBack {
    None,
    Send,
    Recv,
}

/// Token returned by a completion of `kind`, or by an Error event about a
/// descriptor whose kind byte was `desc_kind`.
pub(crate) fn token_back(kind: EventKind, desc_kind: u8) -> TokenBack {
    match kind {
        EventKind::Sent | EventKind::PutDone | EventKind::GetDone => TokenBack::Send,
        EventKind::Received => TokenBack::Recv,
        EventKind::Error => token_of_byte(desc_kind),
        EventKind::Alarm
        | EventKind::PortOpened
        | EventKind::McastLost
        | EventKind::Echo
        | EventKind::Collective
        | EventKind::CollStep => TokenBack::None,
    }
}

/// Token a descriptor of `kind` consumes.
pub(crate) fn token_of(kind: DescKind) -> TokenBack {
    if kind.uses_send_token() {
        TokenBack::Send
    } else if kind.uses_recv_token() {
        TokenBack::Recv
    } else {
        TokenBack::None
    }
}

/// Token a descriptor with kind byte `b` consumes. A kind byte naming no
/// kind takes a send token (the firmware accounts for a descriptor too
/// broken to name its kind that way, and returns it with the Error event).
pub(crate) fn token_of_byte(b: u8) -> TokenBack {
    match DescKind::from_u8(b) {
        Some(k) => token_of(k),
        None => TokenBack::Send,
    }
}

/// Turn a parsed record into a driver event. None: a status or cause code
/// the driver does not know (the caller counts it as a bad event).
pub(crate) fn from_abi(e: &abi::Event) -> Option<Event> {
    let rtc = e.rtc;
    let tag = e.tag;
    Some(match e.kind {
        EventKind::Received => {
            let n = e.inline_len.min(INLINE_MAX as u8);
            let mut bytes = [0u8; INLINE_MAX];
            bytes[..n as usize].copy_from_slice(&e.inline[..n as usize]);
            Event::Received {
                node: e.node,
                port: e.port,
                priority: e.priority,
                len: e.len,
                buffer: e.addr,
                tag,
                size_class: e.size_class,
                inline: Inline { len: n, bytes },
                mcast: e.mcast,
                rtc,
            }
        }
        EventKind::Sent => {
            Event::Sent { tag, status: SendStatus::from_u8(e.status)?, mcast: e.mcast, rtc }
        }
        EventKind::PutDone => Event::PutDone { tag, status: SendStatus::from_u8(e.status)?, rtc },
        EventKind::GetDone => Event::GetDone { tag, status: SendStatus::from_u8(e.status)?, rtc },
        EventKind::Error => Event::Error {
            cause: ErrorCause::from_u8(e.status)?,
            tag,
            desc_kind: DescKind::from_u8(e.desc_kind),
            rtc,
        },
        EventKind::Alarm => Event::Alarm { tag, rtc },
        EventKind::PortOpened => Event::PortOpened { rtc },
        EventKind::Echo => Event::Echo {
            node: e.node,
            tag,
            status: SendStatus::from_u8(e.status)?,
            rtt: e.addr,
            rtc,
        },
        EventKind::Collective => Event::Collective {
            group: e.node,
            cseq: e.len,
            tag,
            status: SendStatus::from_u8(e.status)?,
            result: e.addr,
            missing: LostHeads::NONE,
            rtc,
        },
        EventKind::CollStep => Event::CollStep {
            group: e.node,
            cseq: e.len,
            step: e.addr.min(u16::MAX as u64) as u16,
            tag,
            rtc,
        },
        // The port folds these into the Sent or Collective event that
        // follows.
        EventKind::McastLost => return None,
    })
}
