//! Memory, sends, puts, gets, receive buffers, receiving, gm_unknown and
//! alarms.

use std::ffi::{c_uint, c_void};

use host_driver::nic_abi::NUM_PORTS;
use host_driver::Priority;

use super::{port, stop, PortPtr};
use crate::alarm::{GmAlarm, GM_ALARM_FREE, GM_ALARM_SET};
use crate::recv::{RawEvent, GM_ALARM_EVENT, GM_FATAL_FIRMWARE_ERROR_EVENT, GM_SENT_EVENT};
use crate::send::{self, Callback, Op, OpKind};
use crate::status::*;
use crate::target::node_of;

// ----- memory -----

/// `length` bytes of DMA memory (registered, mapped where the NIC sees
/// it), or NULL when the port's memory is exhausted.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_dma_malloc(p: PortPtr, length: usize) -> *mut c_void {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_dma_malloc") };
    gp.dma_alloc(length as u64, false).unwrap_or(std::ptr::null_mut())
}

/// As gm_dma_malloc, `count * length` bytes, zeroed.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_dma_calloc(p: PortPtr, count: usize, length: usize) -> *mut c_void {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_dma_calloc") };
    let Some(n) = count.checked_mul(length) else { return std::ptr::null_mut() };
    gp.dma_alloc(n as u64, true).unwrap_or(std::ptr::null_mut())
}

/// # Safety
/// `p` is an open port; the NIC no longer uses `addr`.
#[no_mangle]
pub unsafe extern "C" fn gm_dma_free(p: PortPtr, addr: *mut c_void) {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_dma_free") };
    if !addr.is_null() && !gp.dma_free(addr as u64) {
        eprintln!("libgm: gm_dma_free: {addr:p} is not memory gm_dma_malloc gave this port");
    }
}

/// Register memory for DMA. Memory of gm_dma_malloc is registered
/// already; any other is not supported yet (GM_FAILURE, with a message).
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_register_memory(p: PortPtr, ptr: *mut c_void, len: usize) -> GmStatus {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_register_memory") };
    if gp.in_dma(ptr as u64, len as u64) {
        return GM_SUCCESS;
    }
    eprintln!(
        "libgm: gm_register_memory: {ptr:p} (+{len}) is not DMA memory of this port: registering \
         other memory is not supported yet (use gm_dma_malloc)"
    );
    GM_FAILURE
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_register_memory_ex(
    p: PortPtr,
    ptr: *mut c_void,
    len: usize,
    _pvma: *mut c_void,
) -> GmStatus {
    // SAFETY: the caller's promise.
    unsafe { gm_register_memory(p, ptr, len) }
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_deregister_memory(
    p: PortPtr,
    ptr: *mut c_void,
    len: usize,
) -> GmStatus {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_deregister_memory") };
    if gp.in_dma(ptr as u64, len as u64) {
        // (gm_dma_free takes it back.)
        return GM_SUCCESS;
    }
    eprintln!("libgm: gm_deregister_memory: {ptr:p} (+{len}) was not registered");
    GM_FAILURE
}

/// Remote processes may put into and get from this port's registered
/// memory. They always may, on the emulated NIC.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_allow_remote_memory_access(p: PortPtr) -> GmStatus {
    // SAFETY: the caller's promise.
    let _ = unsafe { port(p, "gm_allow_remote_memory_access") };
    GM_SUCCESS
}

// ----- sizes -----

#[no_mangle]
pub extern "C" fn gm_max_length_for_size(size: c_uint) -> usize {
    send::max_length_for_size(size) as usize
}

#[no_mangle]
pub extern "C" fn gm_min_size_for_length(length: usize) -> c_uint {
    send::min_size_for_length(length as u64)
}

/// Accepted, not enforced: a message of a size the mask leaves out finds
/// no buffer (its send times out) rather than being rejected.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_set_acceptable_sizes(
    p: PortPtr,
    priority: c_uint,
    _mask: usize,
) -> GmStatus {
    // SAFETY: the caller's promise.
    let _ = unsafe { port(p, "gm_set_acceptable_sizes") };
    if priority > 1 {
        return GM_INVALID_PARAMETER;
    }
    GM_SUCCESS
}

// ----- operations -----

fn priority(call: &str, v: c_uint) -> Priority {
    match v {
        0 => Priority::Low,
        1 => Priority::High,
        _ => stop(call, &format!("priority {v} is neither GM_LOW_PRIORITY nor GM_HIGH_PRIORITY")),
    }
}

/// Start `op` to GM node id `node_id`, or complete it at once with the
/// status GM would give a target that is not there.
fn start(gp: &mut crate::GmPort, node_id: c_uint, mut op: Op) {
    let bad = match node_of(node_id, gp.nodes) {
        None => Some(GM_SEND_TARGET_NODE_UNREACHABLE),
        Some(_) if op.port as usize >= NUM_PORTS => Some(GM_SEND_TARGET_PORT_CLOSED),
        Some(n) => {
            op.node = n;
            None
        }
    };
    match bad {
        Some(s) => gp.sends.complete(&op, s),
        None => gp.sends.start(&mut gp.port, op),
    }
}

#[allow(clippy::too_many_arguments)]
fn send_op(
    call: &str,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) -> Result<Op, Op> {
    let op = Op {
        kind: OpKind::Send,
        prio: priority(call, prio),
        node: 0,
        port: port_id.min(255) as u8,
        local: message as u64,
        len: u32::try_from(len).unwrap_or(u32::MAX),
        size: size.min(255) as u8,
        remote: 0,
        callback,
        context,
    };
    // A message longer than its size holds is GM's "rejected".
    if len as u64 > send::max_length_for_size(size) {
        return Err(op);
    }
    Ok(op)
}

/// # Safety
/// `p` is an open port; `message` stays as it is until the callback runs.
#[no_mangle]
pub unsafe extern "C" fn gm_send_with_callback(
    p: PortPtr,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    let call = "gm_send_with_callback";
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    match send_op(call, message, size, len, prio, port_id, callback, context) {
        Ok(op) => start(gp, node_id, op),
        Err(op) => gp.sends.complete(&op, GM_SEND_REJECTED),
    }
}

/// A send to the port of the same number as this one.
///
/// # Safety
/// As gm_send_with_callback.
#[no_mangle]
pub unsafe extern "C" fn gm_send_to_peer_with_callback(
    p: PortPtr,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let id = unsafe { port(p, "gm_send_to_peer_with_callback") }.id as c_uint;
    // SAFETY: as above.
    unsafe { gm_send_with_callback(p, message, size, len, prio, node_id, id, callback, context) }
}

/// The deprecated send with no callback: its completion is not reported.
///
/// # Safety
/// As gm_send_with_callback.
#[no_mangle]
pub unsafe extern "C" fn gm_send(
    p: PortPtr,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
) {
    // SAFETY: the caller's promise.
    unsafe {
        gm_send_with_callback(
            p,
            message,
            size,
            len,
            prio,
            node_id,
            port_id,
            None,
            std::ptr::null_mut(),
        )
    }
}

/// # Safety
/// As gm_send_with_callback.
#[no_mangle]
pub unsafe extern "C" fn gm_send_to_peer(
    p: PortPtr,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
) {
    // SAFETY: the caller's promise.
    let id = unsafe { port(p, "gm_send_to_peer") }.id as c_uint;
    // SAFETY: as above.
    unsafe { gm_send(p, message, size, len, prio, node_id, id) }
}

/// An unreliable send in GM; here as reliable as any other.
///
/// # Safety
/// As gm_send_with_callback.
#[no_mangle]
pub unsafe extern "C" fn gm_datagram_send(
    p: PortPtr,
    message: *mut c_void,
    size: c_uint,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    unsafe {
        gm_send_with_callback(p, message, size, len, prio, node_id, port_id, callback, context)
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn remote_op(
    p: PortPtr,
    call: &str,
    kind: OpKind,
    local: *mut c_void,
    remote: u64,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    let op = Op {
        kind,
        prio: priority(call, prio),
        node: 0,
        port: port_id.min(255) as u8,
        local: local as u64,
        len: u32::try_from(len).unwrap_or(u32::MAX),
        size: 0,
        remote,
        callback,
        context,
    };
    start(gp, node_id, op);
}

/// Write `len` bytes at `local` into `remote` of (node, port): a put.
///
/// # Safety
/// `p` is an open port; `local` stays as it is until the callback runs.
#[no_mangle]
pub unsafe extern "C" fn gm_put(
    p: PortPtr,
    local: *mut c_void,
    remote: u64,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    unsafe {
        remote_op(
            p,
            "gm_put",
            OpKind::Put,
            local,
            remote,
            len,
            prio,
            node_id,
            port_id,
            callback,
            context,
        )
    }
}

/// gm_put under its GM 1 name.
///
/// # Safety
/// As gm_put.
#[no_mangle]
pub unsafe extern "C" fn gm_directed_send_with_callback(
    p: PortPtr,
    source: *mut c_void,
    target: u64,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    let call = "gm_directed_send_with_callback";
    // SAFETY: the caller's promise.
    unsafe {
        remote_op(
            p,
            call,
            OpKind::Put,
            source,
            target,
            len,
            prio,
            node_id,
            port_id,
            callback,
            context,
        )
    }
}

/// The deprecated put with no callback.
///
/// # Safety
/// As gm_put.
#[no_mangle]
pub unsafe extern "C" fn gm_directed_send(
    p: PortPtr,
    source: *mut c_void,
    target: u64,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
) {
    let none = std::ptr::null_mut();
    // SAFETY: the caller's promise.
    unsafe {
        remote_op(
            p,
            "gm_directed_send",
            OpKind::Put,
            source,
            target,
            len,
            prio,
            node_id,
            port_id,
            None,
            none,
        )
    }
}

/// Read `len` bytes at `remote` of (node, port) into `local`: a get.
///
/// # Safety
/// `p` is an open port; `local` is not touched until the callback runs.
#[no_mangle]
pub unsafe extern "C" fn gm_get(
    p: PortPtr,
    remote: u64,
    local: *mut c_void,
    len: usize,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    unsafe {
        remote_op(
            p,
            "gm_get",
            OpKind::Get,
            local,
            remote,
            len,
            prio,
            node_id,
            port_id,
            callback,
            context,
        )
    }
}

// ----- send tokens the program counts itself -----

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_alloc_send_token(p: PortPtr, prio: c_uint) -> i32 {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_alloc_send_token") };
    let i = priority("gm_alloc_send_token", prio) as usize;
    if gp.tokens_taken[i] >= gp.send_tokens {
        return 0;
    }
    gp.tokens_taken[i] += 1;
    1
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_free_send_tokens(p: PortPtr, prio: c_uint, count: c_uint) {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_free_send_tokens") };
    let i = priority("gm_free_send_tokens", prio) as usize;
    gp.tokens_taken[i] = gp.tokens_taken[i].saturating_sub(count);
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_free_send_token(p: PortPtr, prio: c_uint) {
    // SAFETY: the caller's promise.
    unsafe { gm_free_send_tokens(p, prio, 1) }
}

/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_send_token_available(p: PortPtr, prio: c_uint) -> i32 {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_send_token_available") };
    let i = priority("gm_send_token_available", prio) as usize;
    (gp.tokens_taken[i] < gp.send_tokens) as i32
}

// ----- after a failed send -----

fn target(
    gp: &crate::GmPort,
    call: &str,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
) -> Option<(u16, u8, Priority)> {
    let node = node_of(node_id, gp.nodes)?;
    (port_id < NUM_PORTS as c_uint).then(|| (node, port_id as u8, priority(call, prio)))
}

/// The held sends to the target go again, in order; then the callback.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_resume_sending(
    p: PortPtr,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    let call = "gm_resume_sending";
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    if let Some(t) = target(gp, call, prio, node_id, port_id) {
        gp.sends.resume(&mut gp.port, t);
    }
    gp.sends.complete_call(callback, context);
}

/// The held sends to the target complete with GM_SEND_DROPPED; then the
/// callback.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_drop_sends(
    p: PortPtr,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    let call = "gm_drop_sends";
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    if let Some(t) = target(gp, call, prio, node_id, port_id) {
        gp.sends.drop_held(&mut gp.port, t);
    }
    gp.sends.complete_call(callback, context);
}

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
