//! Sends, puts and gets, and their completions as GM reports them: each
//! operation's callback runs from `gm_unknown` with the operation's
//! status, once.
//!
//! A failed send disables its connection (the target node and port, at
//! its priority) as GM does: later operations to that target are held,
//! whether the program issued them after the failure or the NIC gave them
//! back as dropped behind it, until `gm_resume_sending` (they go again,
//! in order) or `gm_drop_sends` (they complete with `GM_SEND_DROPPED`).
//! An operation that finds no token or no room in the send ring waits in
//! an outbox and goes at the next call that looks (every receive does).

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;

use host_driver::nic_abi::class_max_len;
use host_driver::{DescKind, Descriptor, DriverError, ErrorCause, LiveBackend, Port, Priority};

use crate::status::*;

/// `gm_send_completion_callback_t`.
pub type Callback = unsafe extern "C" fn(port: *mut c_void, context: *mut c_void, status: GmStatus);

/// Tags of the descriptors this library posts: an operation's carries
/// its number; a receive buffer's its GM tag and size.
pub const OP_TAG: u64 = 1 << 63;
pub const PROVIDE_TAG: u64 = 1 << 62;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Put,
    Get,
    /// A receive buffer (its GM tag in `remote`): no completion.
    Provide,
}

/// A send, put or get, as the program asked for it.
#[derive(Clone, Copy)]
pub struct Op {
    pub kind: OpKind,
    pub prio: Priority,
    /// Target cluster node and port.
    pub node: u16,
    pub port: u8,
    /// Local buffer (a send's message, a put's source, a get's
    /// destination) and its length.
    pub local: u64,
    pub len: u32,
    /// A send's size class.
    pub size: u8,
    /// A put's or get's remote address.
    pub remote: u64,
    pub callback: Option<Callback>,
    pub context: *mut c_void,
}

impl Op {
    fn target(&self) -> (u16, u8, Priority) {
        (self.node, self.port, self.prio)
    }

    fn descriptor(&self, tag: u64) -> Descriptor {
        let kind = match self.kind {
            OpKind::Send => DescKind::Send,
            OpKind::Put => DescKind::Put,
            OpKind::Get => DescKind::Get,
            OpKind::Provide => DescKind::Provide,
        };
        let sized = matches!(self.kind, OpKind::Send | OpKind::Provide);
        Descriptor {
            kind,
            priority: self.prio,
            size_class: if sized { self.size } else { 0 },
            target_port: self.port,
            target_node: self.node,
            local: self.local,
            // A receive buffer is as long as its size class says (GM's
            // buffers are 8 bytes shorter: the NIC writes no further
            // than the message, which is no longer than GM allows).
            len: match self.kind {
                OpKind::Provide => u32::try_from(class_max_len(self.size)).unwrap_or(u32::MAX),
                _ => self.len,
            },
            remote: if self.kind == OpKind::Provide { 0 } else { self.remote },
            tag,
        }
    }
}

/// A completion to report: a callback to run with a status.
#[derive(Clone, Copy)]
pub struct Done {
    pub callback: Callback,
    pub context: *mut c_void,
    pub status: GmStatus,
}

/// The port's operations and completions.
pub struct Sends {
    next: u64,
    /// Posted, by tag, until the NIC completes them.
    posted: HashMap<u64, Op>,
    /// Waiting for a token or ring room, in order.
    outbox: VecDeque<Op>,
    /// Disabled targets and what they hold, in order.
    held: Vec<((u16, u8, Priority), VecDeque<Op>)>,
    /// Completions gm_receive has still to report.
    pub(crate) done: VecDeque<Done>,
    /// Completions reported in an event, until gm_unknown takes them.
    reported: HashMap<u64, Done>,
    next_report: u64,
}

impl Sends {
    pub fn new(_tokens: u32) -> Sends {
        Sends {
            next: 0,
            posted: HashMap::new(),
            outbox: VecDeque::new(),
            held: Vec::new(),
            done: VecDeque::new(),
            reported: HashMap::new(),
            next_report: 1,
        }
    }

    fn held_for(&mut self, t: (u16, u8, Priority)) -> Option<&mut VecDeque<Op>> {
        self.held.iter_mut().find(|(k, _)| *k == t).map(|(_, q)| q)
    }

    /// Start `op`, or hold it: its target is disabled, or no token or ring
    /// slot is free (the outbox, tried again later).
    pub fn start(&mut self, port: &mut Port<LiveBackend>, op: Op) {
        if op.kind != OpKind::Provide {
            if let Some(q) = self.held_for(op.target()) {
                q.push_back(op);
                return;
            }
        }
        if !self.outbox.is_empty() {
            self.outbox.push_back(op);
            return;
        }
        self.post(port, op);
    }

    /// Post `op` now if the driver takes it, else queue it in the outbox
    /// (or complete it, when the driver refuses it for good).
    fn post(&mut self, port: &mut Port<LiveBackend>, op: Op) -> bool {
        let tag = match op.kind {
            OpKind::Provide => PROVIDE_TAG | u64::from(op.size) << 8 | (op.remote & 0xff),
            _ => OP_TAG | self.next,
        };
        match port.post_raw(op.descriptor(tag)) {
            Ok(()) if op.kind == OpKind::Provide => true,
            Ok(()) => {
                self.next = self.next.wrapping_add(1) & !OP_TAG;
                self.posted.insert(tag, op);
                true
            }
            Err(DriverError::NoSendToken | DriverError::NoRecvToken | DriverError::RingFull) => {
                self.outbox.push_back(op);
                false
            }
            Err(e) => {
                eprintln!(
                    "libgm: a {:?} to node id {} port {}: {e}",
                    op.kind,
                    op.node + 1,
                    op.port
                );
                self.complete(&op, GM_FAILURE);
                true
            }
        }
    }

    /// Post what the outbox holds, in order, while the driver takes it.
    pub fn flush(&mut self, port: &mut Port<LiveBackend>) {
        while let Some(op) = self.outbox.pop_front() {
            if !self.post(port, op) {
                // (`post` put it back at the end: it goes first again.)
                let op = self.outbox.pop_back().expect("the operation just queued");
                self.outbox.push_front(op);
                return;
            }
        }
    }

    /// Queue `op`'s completion with `status` (nothing, without callback).
    pub fn complete(&mut self, op: &Op, status: GmStatus) {
        if let Some(callback) = op.callback {
            self.done.push_back(Done { callback, context: op.context, status });
        }
    }

    /// Queue a completion that belongs to no operation (resume, drop).
    pub fn complete_call(&mut self, callback: Option<Callback>, context: *mut c_void) {
        if let Some(callback) = callback {
            self.done.push_back(Done { callback, context, status: GM_SUCCESS });
        }
    }

    /// The NIC completed the operation of `tag` with `status`.
    pub fn completed(&mut self, tag: u64, status: GmStatus) {
        let Some(op) = self.posted.remove(&tag) else { return };
        let t = op.target();
        if status == GM_SEND_DROPPED || (status != GM_SUCCESS && self.held_for(t).is_some()) {
            // Dropped behind a failed send, or failed on its own once its
            // target was disabled (the NIC had it already: a send to a
            // closed port does not stop the ones behind it): held until
            // the program says.
            match self.held_for(t) {
                Some(q) => q.push_back(op),
                None => self.held.push((t, VecDeque::from([op]))),
            }
            return;
        }
        if status != GM_SUCCESS && self.held_for(t).is_none() {
            self.held.push((t, VecDeque::new()));
        }
        self.complete(&op, status);
    }

    /// The NIC refused the descriptor of `tag`.
    pub fn refused(&mut self, tag: u64, cause: ErrorCause) {
        let Some(op) = self.posted.remove(&tag) else { return };
        let status = match cause {
            ErrorCause::BadNode => GM_SEND_TARGET_NODE_UNREACHABLE,
            ErrorCause::BadPort => GM_SEND_TARGET_PORT_CLOSED,
            ErrorCause::BadLength | ErrorCause::BadSizeClass => GM_SEND_REJECTED,
            ErrorCause::NotRegistered => GM_MEMORY_FAULT,
            _ => GM_FAILURE,
        };
        eprintln!(
            "libgm: the NIC refused a {:?} of {} bytes at {:#x} to node id {} port {}: {cause:?}",
            op.kind,
            op.len,
            op.local,
            op.node + 1,
            op.port
        );
        self.complete(&op, status);
    }

    /// gm_resume_sending: the target's held operations go again, in
    /// order, after a Resume tells the NIC to take them.
    pub fn resume(&mut self, port: &mut Port<LiveBackend>, t: (u16, u8, Priority)) {
        let _ = port.resume(t.0, t.1, t.2);
        let Some(i) = self.held.iter().position(|(k, _)| *k == t) else { return };
        let (_, q) = self.held.remove(i);
        for op in q {
            self.start(port, op);
        }
    }

    /// gm_drop_sends: the target's held operations complete with
    /// GM_SEND_DROPPED, and it is enabled again.
    pub fn drop_held(&mut self, port: &mut Port<LiveBackend>, t: (u16, u8, Priority)) {
        let _ = port.resume(t.0, t.1, t.2);
        let Some(i) = self.held.iter().position(|(k, _)| *k == t) else { return };
        let (_, q) = self.held.remove(i);
        for op in q {
            self.complete(&op, GM_SEND_DROPPED);
        }
    }

    /// The next completion to report, under the number its event carries.
    pub fn report_next(&mut self) -> Option<u64> {
        let d = self.done.pop_front()?;
        let id = self.next_report;
        self.next_report += 1;
        self.reported.insert(id, d);
        Some(id)
    }

    /// The completion an event reported, once.
    pub fn take_reported(&mut self, id: u64) -> Option<Done> {
        self.reported.remove(&id)
    }

    /// Operations the NIC has, or that wait here.
    pub fn pending(&self) -> usize {
        self.posted.len()
            + self.outbox.len()
            + self.held.iter().map(|(_, q)| q.len()).sum::<usize>()
    }
}

/// GM's largest message in a buffer of size `size`.
pub fn max_length_for_size(size: u32) -> u64 {
    if !(3..=63).contains(&size) {
        return 0;
    }
    class_max_len(size as u8) - 8
}

/// GM's smallest size whose buffers hold `len` bytes.
pub fn min_size_for_length(len: u64) -> u32 {
    (3..64).find(|&s| max_length_for_size(s) >= len).unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_hold_eight_bytes_less_than_their_power_of_two() {
        assert_eq!(max_length_for_size(3), 0);
        assert_eq!(max_length_for_size(4), 8);
        assert_eq!(max_length_for_size(12), 4088);
        assert_eq!(min_size_for_length(0), 3);
        assert_eq!(min_size_for_length(1), 4);
        assert_eq!(min_size_for_length(8), 4);
        assert_eq!(min_size_for_length(9), 5);
        assert_eq!(min_size_for_length(4088), 12);
        assert_eq!(min_size_for_length(4089), 13);
        for len in [1u64, 7, 100, 1 << 20] {
            let s = min_size_for_length(len);
            assert!(max_length_for_size(s) >= len && max_length_for_size(s - 1) < len);
        }
    }
}
