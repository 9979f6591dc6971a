//! Receiving: the NIC's events turned into GM's 64-byte receive events
//! (`gm_recv_event_t`, fields in network byte order, the type in the last
//! byte), the completions and alarms gm_unknown handles, and waiting.

use std::time::Duration;

use host_driver::{DriverError, Event, Priority};

use crate::port::GmPort;
use crate::send::{OP_TAG, PROVIDE_TAG};
use crate::status::{self, GmStatus, GM_FIRMWARE_NOT_RUNNING};
use crate::target::gm_id;

/// GM's receive event types this library writes.
pub const GM_NO_RECV_EVENT: u8 = 0;
pub const GM_ALARM_EVENT: u8 = 2;
pub const GM_SENT_EVENT: u8 = 3;
pub const GM_RECV_EVENT: u8 = 11;
pub const GM_HIGH_RECV_EVENT: u8 = 12;
pub const GM_PEER_RECV_EVENT: u8 = 13;
pub const GM_HIGH_PEER_RECV_EVENT: u8 = 14;
pub const GM_FATAL_FIRMWARE_ERROR_EVENT: u8 = 32;

/// Offsets in an event (gm.h's layout for 64-bit pointers).
pub mod at {
    /// `recv.message`, `recv.buffer` (user pointers).
    pub const MESSAGE: usize = 32;
    pub const BUFFER: usize = 40;
    pub const LENGTH: usize = 52;
    pub const SENDER_NODE_ID: usize = 56;
    pub const TAG: usize = 60;
    pub const SIZE: usize = 61;
    pub const SENDER_PORT_ID: usize = 62;
    /// `sent.message_list`: here, the number of the completion reported.
    pub const MESSAGE_LIST: usize = 48;
    /// `fatal_firmware_error.status`.
    pub const STATUS: usize = 56;
    pub const TYPE: usize = 63;
}

/// One event as gm_receive returns it.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct RawEvent(pub [u8; 64]);

impl Default for RawEvent {
    fn default() -> RawEvent {
        RawEvent([0; 64])
    }
}

impl RawEvent {
    fn of_type(t: u8) -> RawEvent {
        let mut e = RawEvent::default();
        e.0[at::TYPE] = t;
        e
    }

    pub fn kind(&self) -> u8 {
        self.0[at::TYPE]
    }

    fn put(&mut self, off: usize, bytes: &[u8]) {
        self.0[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// The number a sent event carries.
    pub fn report(&self) -> u64 {
        u64::from_be_bytes(self.0[at::MESSAGE_LIST..at::MESSAGE_LIST + 8].try_into().unwrap())
    }

    fn sent(id: u64) -> RawEvent {
        let mut e = RawEvent::of_type(GM_SENT_EVENT);
        e.put(at::MESSAGE_LIST, &id.to_be_bytes());
        e
    }

    fn fatal(s: GmStatus) -> RawEvent {
        let mut e = RawEvent::of_type(GM_FATAL_FIRMWARE_ERROR_EVENT);
        e.put(at::STATUS, &(s as u32).to_be_bytes());
        e
    }
}

/// The receive event type of a message of `prio` from port `port` to
/// port `to_port` (PEER: the two ports have one number).
fn recv_type(prio: Priority, port: u8, to_port: u8) -> u8 {
    match (prio == Priority::High, port == to_port) {
        (false, false) => GM_RECV_EVENT,
        (true, false) => GM_HIGH_RECV_EVENT,
        (false, true) => GM_PEER_RECV_EVENT,
        (true, true) => GM_HIGH_PEER_RECV_EVENT,
    }
}

/// A message received: GM's receive event for it (`to_port`: the
/// receiving port, whose number a PEER event shares with the sender's).
#[allow(clippy::too_many_arguments)]
pub fn received(
    node: u16,
    port: u8,
    prio: Priority,
    len: u32,
    buffer: u64,
    tag: u8,
    size: u8,
    to_port: u8,
) -> RawEvent {
    let mut e = RawEvent::of_type(recv_type(prio, port, to_port));
    e.put(at::MESSAGE, &buffer.to_be_bytes());
    e.put(at::BUFFER, &buffer.to_be_bytes());
    e.put(at::LENGTH, &len.to_be_bytes());
    e.put(at::SENDER_NODE_ID, &(gm_id(node) as u16).to_be_bytes());
    e.0[at::TAG] = tag;
    e.0[at::SIZE] = size;
    e.0[at::SENDER_PORT_ID] = port;
    e
}

impl GmPort {
    /// The next event for the program (GM_NO_RECV_EVENT when there is
    /// none and `block` is false), composed into the port's event.
    pub fn receive(&mut self, block: bool) -> RawEvent {
        loop {
            self.sends.flush(&mut self.port);
            if let Some(id) = self.sends.report_next() {
                return RawEvent::sent(id);
            }
            if let Some(e) = self.next_nic_event() {
                match self.nic_event(e) {
                    Some(ev) => return ev,
                    None => continue,
                }
            }
            if self.alarms.next_deadline().is_some_and(|d| d <= self.ticks()) {
                return RawEvent::of_type(GM_ALARM_EVENT);
            }
            if !block {
                return RawEvent::of_type(GM_NO_RECV_EVENT);
            }
            let wait = match self.alarms.next_deadline() {
                // Half microseconds to the earliest alarm.
                Some(d) => Duration::from_nanos(d.saturating_sub(self.ticks()) * 500),
                None => Duration::MAX,
            };
            match self.port.wait(wait) {
                Ok(e) => self.stash.push_back(e),
                Err(DriverError::Timeout) => {}
                Err(e) => {
                    eprintln!("libgm: port {} of node id {}: {e}", self.id, gm_id(self.node));
                    return RawEvent::fatal(GM_FIRMWARE_NOT_RUNNING);
                }
            }
        }
    }

    fn next_nic_event(&mut self) -> Option<Event> {
        self.stash.pop_front().or_else(|| self.port.poll())
    }

    /// Is an event waiting (gm_receive would return one)? Its type and,
    /// for a message, its sender's node id.
    pub fn peek(&mut self) -> Option<(u8, u16)> {
        if !self.sends.done.is_empty() {
            return Some((GM_SENT_EVENT, 0));
        }
        if self.stash.is_empty() {
            if let Some(e) = self.port.poll() {
                self.stash.push_back(e);
            }
        }
        match self.stash.front() {
            Some(&Event::Received { node, priority, port, .. }) => {
                Some((recv_type(priority, port, self.id), gm_id(node) as u16))
            }
            // (What the event gives may be nothing for the program: a
            // completion with no callback. Pending still.)
            Some(_) => Some((GM_SENT_EVENT, 0)),
            None => self
                .alarms
                .next_deadline()
                .is_some_and(|d| d <= self.ticks())
                .then_some((GM_ALARM_EVENT, 0)),
        }
    }

    /// What a NIC event is to the program: a receive event, or nothing
    /// yet (a completion queued for reporting, or an event of no interest).
    fn nic_event(&mut self, e: Event) -> Option<RawEvent> {
        match e {
            Event::Received { node, port, priority, len, buffer, tag, size_class, .. } => {
                Some(received(node, port, priority, len, buffer, tag as u8, size_class, self.id))
            }
            Event::Sent { tag, status, .. }
            | Event::PutDone { tag, status, .. }
            | Event::GetDone { tag, status, .. } => {
                if tag & OP_TAG != 0 {
                    self.sends.completed(tag, status::of_send(status));
                }
                None
            }
            Event::Error { cause, tag, .. } => {
                if tag & OP_TAG != 0 {
                    self.sends.refused(tag, cause);
                } else if tag & PROVIDE_TAG != 0 {
                    eprintln!(
                        "libgm: the NIC refused a receive buffer of size {} (tag {}): {cause:?}",
                        (tag >> 8) & 0xff,
                        tag & 0xff
                    );
                } else {
                    eprintln!("libgm: the NIC refused a descriptor: {cause:?}");
                }
                None
            }
            Event::Alarm { .. }
            | Event::PortOpened { .. }
            | Event::Echo { .. }
            | Event::Collective { .. }
            | Event::CollStep { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_event_is_in_network_order_with_its_type_last() {
        let e = received(1, 2, Priority::High, 0x0102_0304, 0x1000_0000_2000, 7, 12, 3);
        assert_eq!(e.kind(), GM_HIGH_RECV_EVENT);
        assert_eq!(&e.0[at::LENGTH..at::LENGTH + 4], &[1, 2, 3, 4]);
        assert_eq!(&e.0[at::SENDER_NODE_ID..at::SENDER_NODE_ID + 2], &[0, 2]);
        assert_eq!(&e.0[at::MESSAGE..at::MESSAGE + 8], &0x1000_0000_2000u64.to_be_bytes());
        assert_eq!(e.0[at::BUFFER..at::BUFFER + 8], e.0[at::MESSAGE..at::MESSAGE + 8]);
        assert_eq!((e.0[at::TAG], e.0[at::SIZE], e.0[at::SENDER_PORT_ID]), (7, 12, 2));
        assert_eq!(received(0, 3, Priority::Low, 0, 0, 0, 0, 3).kind(), GM_PEER_RECV_EVENT);
        assert_eq!(received(0, 3, Priority::High, 0, 0, 0, 0, 3).kind(), GM_HIGH_PEER_RECV_EVENT);
        assert_eq!(received(0, 1, Priority::Low, 0, 0, 0, 0, 3).kind(), GM_RECV_EVENT);
    }

    #[test]
    fn a_sent_event_carries_its_report_number() {
        let e = RawEvent::sent(0x0102);
        assert_eq!((e.kind(), e.report()), (GM_SENT_EVENT, 0x0102));
        assert_eq!(RawEvent::fatal(44).0[at::STATUS..at::STATUS + 4], [0, 0, 0, 44]);
    }
}
