//! The intake's checks and bookkeeping: a descriptor read from its ring
//! slot, whether what taking it needs is there, its validation against
//! the NIC's limits and the port's page table, a refusal's error event,
//! and a token's completion.

use super::Sdma;
use crate::hw::Hw;
use crate::offload::fanout::{self, Fan, Fanout, DESC_KIND as FAN_KIND};
use crate::records::*;
use crate::shared::Shared;
use crate::translate::Xlat;
use nic_abi::desc::{DescKind, Descriptor, DESC_CORE_WORDS};
use nic_abi::event::{ErrorCause, SendStatus};
use nic_abi::port::send_slot;
use nic_abi::stats::Stat;
use nic_abi::{class_max_len, MAX_SIZE_CLASS, NUM_PORTS};

impl Sdma {
    /// Check descriptor `d`; `reg_ok`: the memory it names is registered
    /// by its port (`range_check`). (A send, put or get has its stream
    /// record already: it waited in the ring for one, `stream_waits`.)
    pub(super) fn validate(
        &self,
        cx: &Shared,
        d: &Descriptor,
        reg_ok: bool,
    ) -> Result<(), ErrorCause> {
        let target = || {
            if d.target_port as usize >= NUM_PORTS {
                Err(ErrorCause::BadPort)
            } else if d.target_node >= cx.cfg.nodes {
                Err(ErrorCause::BadNode)
            } else {
                Ok(())
            }
        };
        match d.kind {
            DescKind::Send => {
                target()?;
                send_bounds(d, reg_ok)?;
            }
            DescKind::Put | DescKind::Get => {
                target()?;
                if d.len as u64 > class_max_len(MAX_SIZE_CLASS) {
                    return Err(ErrorCause::BadLength);
                }
                if !reg_ok {
                    return Err(ErrorCause::NotRegistered);
                }
            }
            DescKind::Provide => {
                if d.size_class > MAX_SIZE_CLASS {
                    return Err(ErrorCause::BadSizeClass);
                }
                let need = class_max_len(d.size_class);
                if (d.len as u64) < need {
                    return Err(ErrorCause::BadLength);
                }
                if !reg_ok {
                    return Err(ErrorCause::NotRegistered);
                }
            }
            DescKind::Resume => target()?,
            DescKind::Alarm => {}
            // The offloads' and the fan-out's kinds are refused before
            // (`take`).
            _ => return Err(ErrorCause::BadKind),
        }
        Ok(())
    }
}

/// Does descriptor `b` of port `p` find what taking it needs: a receive
/// buffer a slot and a receive token, anything else a token from the
/// table (and a send token of the port when it takes one)?
pub(super) fn has_room(
    cx: &Shared,
    p: usize,
    raw: RawDesc,
    parsed: &Result<Descriptor, ErrorCause>,
) -> bool {
    let credits = cx.credits[p];
    if raw.kind == DescKind::Provide as u8 {
        cx.slots.available() > 0 && credits.recv_in_use() < cx.cfg.recv_tokens
    } else {
        cx.tokens.available() > INTERNAL_TOKENS + fanout::TOKENS
            && (!takes_send_token(raw, parsed) || credits.send_in_use() < cx.cfg.send_tokens)
    }
}

/// Does descriptor `b` (`parsed`) take a send token? A broken descriptor
/// of a known kind takes that kind's token; a kind byte that names no
/// kind takes a send token.
pub(super) fn takes_send_token(raw: RawDesc, parsed: &Result<Descriptor, ErrorCause>) -> bool {
    match parsed {
        Ok(d) => d.kind.uses_send_token(),
        Err(_) => DescKind::from_u8(raw.kind).is_none_or(|k| k.uses_send_token()),
    }
}

/// What the intake keeps of a descriptor's raw bytes for its error event
/// when it does not parse: its kind byte and its tag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawDesc {
    pub kind: u8,
    pub tag: u64,
}

impl RawDesc {
    pub(crate) fn of(b: &[u8]) -> RawDesc {
        RawDesc { kind: Descriptor::raw_kind(b), tag: Descriptor::raw_tag(b) }
    }
}

// A ring slot is read as aligned words.
const _: () = assert!(send_slot(0, 0).is_multiple_of(8) && send_slot(1, 1).is_multiple_of(8));

/// The descriptor in the ring slot at `at`, as five word loads (bytes
/// 0..40: every field a core kind has): its raw kind and tag, and the
/// parse.
#[inline]
pub(super) fn read_core(hw: &impl Hw, at: u32) -> (RawDesc, Result<Descriptor, ErrorCause>) {
    let w: [u64; DESC_CORE_WORDS] = core::array::from_fn(|i| hw.load_u64(at + 8 * i as u32));
    (RawDesc { kind: w[0] as u8, tag: w[4] }, Descriptor::decode_words(&w))
}

/// `range_check` for descriptor `d` of port `p`, its progress (bytes found
/// registered so far) in `checked`.
pub(super) fn registered_range(
    cx: &mut Shared,
    hw: &mut impl Hw,
    p: usize,
    d: Option<&Descriptor>,
    checked: &mut u64,
) -> Option<bool> {
    let Some(d) = d else { return Some(false) };
    let most = class_max_len(MAX_SIZE_CLASS);
    let len = match d.kind {
        DescKind::Send | DescKind::Put | DescKind::Get | FAN_KIND => d.len as u64,
        DescKind::Provide => class_max_len(d.size_class),
        // Resume, alarm, and the offloads' kinds (which the intake hands
        // on before this check, or refuses).
        _ => return Some(false),
    };
    if len > most {
        return Some(false); // refused for its length, not looked up
    }
    match cx.registered(hw, p as u8, d.local, len, checked) {
        Xlat::Bus(_) => Some(true),
        Xlat::Fault => Some(false),
        Xlat::Wait => None,
    }
}

/// A refused descriptor (`b`): its error event is owed, holding the
/// token of its kind (`takes_send`: a send token; a Provide: a receive
/// token).
pub(crate) fn refuse(
    cx: &mut Shared,
    hw: &mut impl Hw,
    p: usize,
    raw: RawDesc,
    cause: ErrorCause,
    takes_send: bool,
) {
    cx.bump(hw, Stat::Errors, 1);
    log_warn!("port {=usize}: descriptor refused: {}", p, cause);
    let (tag, kind_byte) = (raw.tag, raw.kind);
    if kind_byte == DescKind::Provide as u8 {
        let mut s = RecvSlot::EMPTY;
        s.port = p as u8;
        s.tag = tag;
        s.error = cause as u8;
        if let Some(i) = cx.new_slot(hw, &s) {
            cx.credits[p].recv_taken = cx.credits[p].recv_taken.wrapping_add(1);
            cx.owe_event(p, EvRef::Slot(i));
        }
    } else {
        let mut t = SendToken::EMPTY;
        t.kind = TokKind::Error;
        t.state = TokState::Completing(cause as u8);
        t.port = p as u8;
        t.tag = tag;
        t.desc_kind = kind_byte;
        if let Some(i) = cx.tokens.alloc(t) {
            if takes_send {
                cx.credits[p].send_taken = cx.credits[p].send_taken.wrapping_add(1);
            }
            cx.owe_event(p, EvRef::Token(i));
        }
    }
}

/// Packets a message of `len` bytes takes (a get request is one).
pub(crate) fn packets_for(cx: &Shared, kind: TokKind, len: u32) -> u32 {
    if kind == TokKind::Get || len == 0 {
        1
    } else {
        len.div_ceil(cx.cfg.mtu)
    }
}

/// Token `t` is done with `status`: its event is owed to its port (the
/// NIC's own tokens are freed, once a fan-out counted them).
pub(crate) fn complete_token(cx: &mut Shared, t: TokenId, status: SendStatus) {
    if cx.tokens[t].is_internal() {
        Fan::token_ended(cx, t, status == SendStatus::Ok);
        cx.tokens.free(t);
        return;
    }
    cx.tokens[t].state = TokState::Completing(status as u8);
    cx.tokens[t].next = None;
    let p = cx.tokens[t].port as usize;
    cx.owe_event(p, EvRef::Token(t));
}

/// A send's size class, its length within the class, and its buffer
/// registered (in that order): the checks a send and a fan-out's message share.
pub(crate) fn send_bounds(d: &Descriptor, reg_ok: bool) -> Result<(), ErrorCause> {
    if d.size_class > MAX_SIZE_CLASS {
        return Err(ErrorCause::BadSizeClass);
    }
    if d.len as u64 > class_max_len(d.size_class) {
        return Err(ErrorCause::BadLength);
    }
    if !reg_ok {
        return Err(ErrorCause::NotRegistered);
    }
    Ok(())
}
