//! DMA memory, registration, and GM's message sizes.

use std::ffi::{c_uint, c_void};

use super::{port, PortPtr};
use crate::send;
use crate::status::*;

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

/// Register `[ptr, ptr + len)` of this process for DMA: memory from
/// malloc, static data, the stack (whole pages; `crate::register`).
/// Memory of gm_dma_malloc is registered already.
///
/// # Safety
/// `p` is an open port; the range is the program's memory.
#[no_mangle]
pub unsafe extern "C" fn gm_register_memory(p: PortPtr, ptr: *mut c_void, len: usize) -> GmStatus {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_register_memory") };
    match gp.register(ptr as u64, len as u64) {
        Ok(()) => GM_SUCCESS,
        Err((s, why)) => {
            eprintln!("libgm: gm_register_memory: {ptr:p} (+{len}): {why}");
            s
        }
    }
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

/// Deregister what gm_register_memory registered: the memory keeps its
/// content, and the NIC no longer reaches it.
///
/// # Safety
/// `p` is an open port; the NIC no longer uses the range.
#[no_mangle]
pub unsafe extern "C" fn gm_deregister_memory(
    p: PortPtr,
    ptr: *mut c_void,
    len: usize,
) -> GmStatus {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_deregister_memory") };
    match gp.deregister(ptr as u64, len as u64) {
        Ok(()) => GM_SUCCESS,
        Err((s, why)) => {
            eprintln!("libgm: gm_deregister_memory: {ptr:p} (+{len}): {why}");
            s
        }
    }
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
