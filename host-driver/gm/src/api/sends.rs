//! Sends, puts and gets; the send tokens a program counts itself; what
//! follows a failed send.

use std::ffi::{c_uint, c_void};

use host_driver::nic_abi::NUM_PORTS;
use host_driver::Priority;

use super::{port, stop, PortPtr};
use crate::send::{self, Callback, Op, OpKind};
use crate::status::*;
use crate::target::node_of;

// ----- operations -----

pub(super) fn priority(call: &str, v: c_uint) -> Priority {
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

/// What follows a failed send, for GM's target (node id, port, priority):
/// its held sends go again (`drop` false) or complete with
/// GM_SEND_DROPPED (`drop`); then the callback.
#[allow(clippy::too_many_arguments)]
unsafe fn after_failure(
    p: PortPtr,
    call: &str,
    drop: bool,
    prio: c_uint,
    node_id: c_uint,
    port_id: c_uint,
    callback: Option<Callback>,
    context: *mut c_void,
) {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, call) };
    if let Some(t) = target(gp, call, prio, node_id, port_id) {
        if drop {
            gp.sends.drop_held(&mut gp.port, t);
        } else {
            gp.sends.resume(&mut gp.port, t);
        }
    }
    gp.sends.complete_call(callback, context);
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
    // SAFETY: the caller's promise.
    unsafe {
        after_failure(p, "gm_resume_sending", false, prio, node_id, port_id, callback, context)
    }
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
    // SAFETY: the caller's promise.
    unsafe { after_failure(p, "gm_drop_sends", true, prio, node_id, port_id, callback, context) }
}
