//! Receive buffers, receiving, gm_unknown, and alarms.

use std::ffi::{c_uint, c_void};

use super::sends::priority;
use super::{port, stop, PortPtr};
use crate::alarm::{GmAlarm, GM_ALARM_FREE, GM_ALARM_SET};
use crate::recv::{RawEvent, GM_ALARM_EVENT, GM_FATAL_FIRMWARE_ERROR_EVENT, GM_SENT_EVENT};
use crate::send::{Op, OpKind};
use crate::status::*;

// ----- receiving -----

/// A receive buffer of GM size `size` at `ptr` (2^size - 8 bytes).
///
/// # Safety
/// `p` is an open port; `ptr` is DMA memory the program does not touch
/// until a receive event gives it back.
#[no_mangle]
pub unsafe extern "C" fn gm_provide_receive_buffer_with_tag(
    p: PortPtr,
    ptr: *mut c_void,
    size: c_uint,
    prio: c_uint,
    tag: c_uint,
) {
    let call = "gm_provide_receive_buffer_with_tag";
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    let op = Op {
        kind: OpKind::Provide,
        prio: priority(call, prio),
        node: 0,
        port: 0,
        local: ptr as u64,
        len: 0,
        size: size.min(255) as u8,
        remote: u64::from(tag & 0xff),
        callback: None,
        context: std::ptr::null_mut(),
    };
    gp.sends.start(&mut gp.port, op);
}

/// # Safety
/// As gm_provide_receive_buffer_with_tag.
#[no_mangle]
pub unsafe extern "C" fn gm_provide_receive_buffer(
    p: PortPtr,
    ptr: *mut c_void,
    size: c_uint,
    prio: c_uint,
) {
    // SAFETY: the caller's promise.
    unsafe { gm_provide_receive_buffer_with_tag(p, ptr, size, prio, 0) }
}

/// The port's event, filled with `e`.
fn event_ptr(gp: &mut crate::GmPort, e: RawEvent) -> *mut RawEvent {
    *gp.event = e;
    &mut *gp.event
}

/// The next receive event, or one of type GM_NO_RECV_EVENT. Valid until
/// the next receive call on the port.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_receive(p: PortPtr) -> *mut RawEvent {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_receive") };
    let e = gp.receive(false);
    event_ptr(gp, e)
}

/// As gm_receive, waiting until there is an event (an alarm's included).
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_blocking_receive(p: PortPtr) -> *mut RawEvent {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_blocking_receive") };
    let e = gp.receive(true);
    event_ptr(gp, e)
}

/// As gm_blocking_receive (the driver's wait decides how to idle).
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_blocking_receive_no_spin(p: PortPtr) -> *mut RawEvent {
    // SAFETY: the caller's promise.
    unsafe { gm_blocking_receive(p) }
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_receive_pending(p: PortPtr) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { port(p, "gm_receive_pending") }.peek().is_some() as i32
}

/// # Safety
/// `p` is an open port; `sender` is null or a gm_u16_t.
#[no_mangle]
pub unsafe extern "C" fn gm_next_event_peek(p: PortPtr, sender: *mut u16) -> i32 {
    // SAFETY: the caller's promise.
    match unsafe { port(p, "gm_next_event_peek") }.peek() {
        Some((kind, node)) => {
            if !sender.is_null() {
                // SAFETY: as above.
                unsafe { *sender = node };
            }
            i32::from(kind)
        }
        None => 0,
    }
}

/// What the program does not handle itself: completions (their callbacks
/// run here), alarms (every one due), a fatal error (the process stops).
///
/// # Safety
/// `p` is an open port, `e` an event gm_receive returned.
#[no_mangle]
pub unsafe extern "C" fn gm_unknown(p: PortPtr, e: *mut RawEvent) {
    if e.is_null() {
        return;
    }
    // SAFETY: the caller's promise: an event of 64 bytes.
    let ev = unsafe { *e };
    match ev.kind() {
        GM_SENT_EVENT => {
            // SAFETY: the caller's promise; the borrow ends before the
            // callback, which may call into the port again.
            let done = unsafe { port(p, "gm_unknown") }.sends.take_reported(ev.report());
            if let Some(d) = done {
                // SAFETY: a callback the program gave with this context.
                unsafe { (d.callback)(p.cast(), d.context, d.status) };
            }
        }
        GM_ALARM_EVENT => loop {
            // SAFETY: as above, per alarm.
            let gp = unsafe { port(p, "gm_unknown") };
            let now = gp.ticks();
            let Some(a) = gp.alarms.pop_due(now) else { break };
            // SAFETY: an alarm the program set, valid while set; it is
            // free now, and its callback may set it again.
            unsafe {
                if let Some(f) = (*a).callback {
                    f((*a).context);
                }
            }
        },
        GM_FATAL_FIRMWARE_ERROR_EVENT => {
            eprintln!(
                "libgm: gm_unknown: the NIC no longer serves this port: {}",
                message(GM_FIRMWARE_NOT_RUNNING).to_string_lossy()
            );
            std::process::exit(1);
        }
        _ => {}
    }
}

/// The older entry point for completions: as gm_unknown.
///
/// # Safety
/// As gm_unknown.
#[no_mangle]
pub unsafe extern "C" fn gm_handle_sent_tokens(p: PortPtr, e: *mut RawEvent) {
    // SAFETY: the caller's promise.
    unsafe { gm_unknown(p, e) }
}

/// # Safety
/// As gm_unknown.
#[no_mangle]
pub unsafe extern "C" fn gm_handle_put_notification(p: PortPtr, e: *mut RawEvent) {
    // SAFETY: the caller's promise.
    unsafe { gm_unknown(p, e) }
}

/// The message in `buffer`: copied there if it is elsewhere.
///
/// # Safety
/// `message` and `buffer` hold `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_memorize_message(
    message: *mut c_void,
    buffer: *mut c_void,
    len: c_uint,
) -> *mut c_void {
    if message != buffer {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy(message.cast::<u8>(), buffer.cast::<u8>(), len as usize) };
    }
    buffer
}

// ----- alarms -----

/// # Safety
/// `a` points to a gm_alarm_t.
#[no_mangle]
pub unsafe extern "C" fn gm_initialize_alarm(a: *mut GmAlarm) {
    if a.is_null() {
        stop("gm_initialize_alarm", "the alarm is NULL");
    }
    // SAFETY: the caller's promise.
    unsafe {
        (*a).next = std::ptr::null_mut();
        (*a).state = GM_ALARM_FREE;
        (*a).port = std::ptr::null_mut();
    }
}

/// Set `a` to call `callback(context)` from gm_unknown `usecs`
/// microseconds from now (set again if it was set).
///
/// # Safety
/// `p` is an open port; `a` was initialised and stays valid while set.
#[no_mangle]
pub unsafe extern "C" fn gm_set_alarm(
    p: PortPtr,
    a: *mut GmAlarm,
    usecs: u64,
    callback: Option<unsafe extern "C" fn(*mut c_void)>,
    context: *mut c_void,
) {
    if a.is_null() {
        stop("gm_set_alarm", "the alarm is NULL");
    }
    // SAFETY: the caller's promises.
    unsafe {
        if (*a).state == GM_ALARM_SET && !(*a).port.is_null() && (*a).port != p.cast() {
            // Set on another port: taken off there first.
            port((*a).port.cast(), "gm_set_alarm").alarms.remove(a);
        }
        let gp = port(p, "gm_set_alarm");
        (*a).port = p.cast();
        (*a).callback = callback;
        (*a).context = context;
        let at = gp.ticks().saturating_add(usecs.saturating_mul(2));
        gp.alarms.set(a, at);
    }
}

/// # Safety
/// `a` points to an initialised gm_alarm_t whose port, if set, is open.
#[no_mangle]
pub unsafe extern "C" fn gm_cancel_alarm(a: *mut GmAlarm) {
    if a.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    unsafe {
        if (*a).state == GM_ALARM_SET && !(*a).port.is_null() {
            port((*a).port.cast(), "gm_cancel_alarm").alarms.remove(a);
        }
        (*a).state = GM_ALARM_FREE;
    }
}
