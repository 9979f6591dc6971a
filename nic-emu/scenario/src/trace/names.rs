//! Names for what a transition record carries as numbers: the machines
//! (`nic_abi::trace::Machine`), their states (the codes of the MCP's
//! state enums, `mcp::SdmaState::IDLE` and friends, named as the enum
//! variants are), each state's operand, and the causes
//! (`nic_abi::trace::Cause`).

use mcp::{RdmaState, RecvState, SdmaState, SendState};
use nic_abi::trace::{Cause, Machine};

/// Every machine, in code order.
pub const MACHINES: [Machine; 4] = [Machine::Sdma, Machine::Send, Machine::Recv, Machine::Rdma];

/// A machine's name as the docs write it.
pub const fn machine(m: Machine) -> &'static str {
    match m {
        Machine::Sdma => "SDMA",
        Machine::Send => "SEND",
        Machine::Recv => "RECV",
        Machine::Rdma => "RDMA",
    }
}

/// (code, state name, what the record's operand is) of each machine's
/// states.
type States = &'static [(u8, &'static str, Option<&'static str>)];

const SDMA: States = &[
    (SdmaState::IDLE, "Idle", None),
    (SdmaState::INTAKE, "Intake", Some("port")),
    (SdmaState::FILL_WAIT, "FillWait", Some("packet")),
    (SdmaState::BUFFER_WAIT, "BufferWait", None),
    (SdmaState::ACK_WAIT, "AckWait", Some("una")),
    (SdmaState::PACED, "Paced", Some("until")),
    (SdmaState::TIMEOUT, "Timeout", Some("una")),
    (SdmaState::READY, "Ready", None),
    (SdmaState::TRANSLATE_WAIT, "TranslateWait", Some("port")),
];

const SEND: States = &[
    (SendState::IDLE, "Idle", None),
    (SendState::CONTROL, "Control", Some("stream")),
    (SendState::DATA, "Data", Some("seq")),
    (SendState::WIRE, "Wire", Some("buf")),
    (SendState::BUFFER_WAIT, "BufferWait", Some("waiting")),
];

const RECV: States = &[
    (RecvState::IDLE, "Idle", None),
    (RecvState::CHECK, "Check", Some("buf")),
    (RecvState::ACK, "Ack", Some("seq")),
    (RecvState::ACCEPT, "Accept", Some("seq")),
    (RecvState::RDMA_FULL, "RdmaFull", Some("waiting")),
    (RecvState::BACKLOG, "Backlog", Some("waiting")),
];

const RDMA: States = &[
    (RdmaState::IDLE, "Idle", None),
    (RdmaState::COPYING, "Copying", Some("bytes_left")),
    (RdmaState::RING_FULL, "RingFull", Some("jobs")),
    (RdmaState::EVENT, "Event", Some("port")),
    (RdmaState::HOST_BEHIND, "HostBehind", Some("port")),
    (RdmaState::TRANSLATE_WAIT, "TranslateWait", Some("port")),
];

const fn states(m: Machine) -> States {
    match m {
        Machine::Sdma => SDMA,
        Machine::Send => SEND,
        Machine::Recv => RECV,
        Machine::Rdma => RDMA,
    }
}

/// The idle state's code (every machine's is 0).
pub const IDLE: u8 = 0;

/// State `code` of machine `m` by name; `unknown` for a code the MCP does
/// not have.
pub fn state(m: Machine, code: u8) -> &'static str {
    states(m).iter().find(|s| s.0 == code).map_or("unknown", |s| s.1)
}

/// What the operand of a record entering state `code` of `m` is (None:
/// the state has none, the record carries 0).
pub fn operand(m: Machine, code: u8) -> Option<&'static str> {
    states(m).iter().find(|s| s.0 == code).and_then(|s| s.2)
}

/// The code of machine `m`'s state called `name`.
pub fn code(m: Machine, name: &str) -> Option<u8> {
    states(m).iter().find(|s| s.1 == name).map(|s| s.0)
}

/// A cause by name (as the `Cause` variants are called).
pub const fn cause(c: Cause) -> &'static str {
    match c {
        Cause::Descriptor => "Descriptor",
        Cause::Scheduled => "Scheduled",
        Cause::DmaDone => "DmaDone",
        Cause::NoRoom => "NoRoom",
        Cause::Window => "Window",
        Cause::Paced => "Paced",
        Cause::Drained => "Drained",
        Cause::Timeout => "Timeout",
        Cause::Packet => "Packet",
        Cause::AckIn => "AckIn",
        Cause::Accepted => "Accepted",
        Cause::RdmaFull => "RdmaFull",
        Cause::Budget => "Budget",
        Cause::EventOwed => "EventOwed",
        Cause::HostBehind => "HostBehind",
        Cause::ControlOut => "ControlOut",
        Cause::DataOut => "DataOut",
        Cause::WireDone => "WireDone",
        Cause::PortClosed => "PortClosed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_one_name_and_idle_is_zero() {
        for m in MACHINES {
            let s = states(m);
            assert_eq!(state(m, IDLE), "Idle", "{}", machine(m));
            for (i, a) in s.iter().enumerate() {
                assert_eq!(code(m, a.1), Some(a.0));
                for b in &s[i + 1..] {
                    assert_ne!(a.0, b.0, "{}: two names for one code", machine(m));
                }
            }
            assert_eq!(state(m, 200), "unknown");
            assert_eq!(operand(m, 200), None);
        }
        assert_eq!(s(Machine::Send, "Data"), Some("seq"));
        assert_eq!(s(Machine::Recv, "Accept"), Some("seq"));
        assert_eq!(s(Machine::Sdma, "Ready"), None);
    }

    fn s(m: Machine, name: &str) -> Option<&'static str> {
        operand(m, code(m, name).unwrap())
    }

    #[test]
    fn every_cause_code_has_its_name() {
        let mut n = 0;
        for c in 0..=255u8 {
            if let Some(k) = Cause::from_u8(c) {
                assert_eq!(format!("{k:?}"), cause(k));
                n += 1;
            }
        }
        assert_eq!(n, 19);
    }
}
