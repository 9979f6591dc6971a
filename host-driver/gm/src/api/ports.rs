//! Initialisation, opening and closing ports, and what a port says of the
//! NIC and the network: node ids, host names, unique ids.

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::atomic::{AtomicU32, Ordering};

use host_driver::nic_abi::NUM_PORTS;

use super::{port, PortPtr};
use crate::port::GmPort;
use crate::status::*;
use crate::target::{self, gm_id, node_of, Target};

/// API versions gm_open accepts (gm.h's `GM_API_VERSION_*`).
pub const VERSIONS: [c_uint; 11] =
    [0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x200, 0x20006, 0x2000c, 0x20010];

/// gm_init calls not yet matched by gm_finalize.
static INITS: AtomicU32 = AtomicU32::new(0);

/// The host page size GM programs read (`GM_PAGE_LEN`).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static GM_PAGE_LEN: std::ffi::c_ulong = host_driver::nic_abi::PAGE_SIZE as std::ffi::c_ulong;

#[no_mangle]
pub extern "C" fn gm_init() -> GmStatus {
    INITS.fetch_add(1, Ordering::Relaxed);
    GM_SUCCESS
}

#[no_mangle]
pub extern "C" fn gm_finalize() {
    let _ = INITS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// Open `port_id` of this process's NIC (`unit` 0: a host has one).
///
/// # Safety
/// `p` is a valid place for the port pointer; `name` is null or a C
/// string.
#[no_mangle]
pub unsafe extern "C" fn gm_open(
    p: *mut PortPtr,
    unit: c_uint,
    port_id: c_uint,
    _name: *const c_char,
    version: c_uint,
) -> GmStatus {
    if p.is_null() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: the caller's promise for `p`.
    unsafe { *p = std::ptr::null_mut() };
    if !VERSIONS.contains(&version) {
        eprintln!(
            "libgm: gm_open: API version {version:#x} is not one this library provides \
             (1.0 to 2.0.16)"
        );
        return GM_INCOMPATIBLE_LIB_AND_DRIVER;
    }
    if unit != 0 {
        eprintln!("libgm: gm_open: unit {unit}: each emulated host has one NIC, unit 0");
        return GM_NO_SUCH_DEVICE;
    }
    if port_id as usize >= NUM_PORTS {
        eprintln!("libgm: gm_open: port {port_id}: the NIC has ports 0 to {}", NUM_PORTS - 1);
        return GM_INVALID_PORT_NUMBER;
    }
    let t = match target::from_env(|v| std::env::var(v).ok()) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("libgm: gm_open: {why}");
            return GM_NO_SUCH_DEVICE;
        }
    };
    gm_init();
    match GmPort::open(&t, port_id as u8) {
        Ok(gp) => {
            // SAFETY: as above.
            unsafe { *p = Box::into_raw(Box::new(gp)) };
            GM_SUCCESS
        }
        Err((s, why)) => {
            let Target { cluster, node, node_from } = &t;
            eprintln!(
                "libgm: gm_open: port {port_id} of node {node} ({node_from}) of cluster \
                 {cluster}: {why}"
            );
            gm_finalize();
            s
        }
    }
}

/// Close a port: its alarms are dropped, its memory unmapped.
///
/// # Safety
/// `p` is null or an open port, not used again.
#[no_mangle]
pub unsafe extern "C" fn gm_close(p: PortPtr) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's promise: an open port, given back here once.
    let mut gp = unsafe { Box::from_raw(p) };
    gp.alarms.clear();
    gp.deregister_all();
    drop(gp);
    gm_finalize();
}

macro_rules! port_fn {
    ($(#[$m:meta])* $name:ident($p:ident) -> $t:ty $body:block) => {
        $(#[$m])*
        /// # Safety
        /// `p` is an open port.
        #[no_mangle]
        pub unsafe extern "C" fn $name($p: PortPtr) -> $t {
            // SAFETY: the caller's promise.
            let $p = unsafe { port($p, stringify!($name)) };
            $body
        }
    };
}

port_fn!(gm_get_port_id(p) -> c_uint { p.id as c_uint });
port_fn!(gm_num_ports(p) -> c_uint {
    let _ = p;
    NUM_PORTS as c_uint
});
port_fn!(gm_num_send_tokens(p) -> c_uint { p.send_tokens });
port_fn!(gm_num_receive_tokens(p) -> c_uint { p.recv_tokens });
port_fn!(gm_mtu(p) -> c_uint { p.mtu });
port_fn!(
    /// The smallest message size (GM size 3 holds a message of 0 bytes).
    gm_min_message_size(p) -> c_uint {
        let _ = p;
        3
    }
);
port_fn!(
    /// GM's clock: half microseconds, from the NIC's clock.
    gm_ticks(p) -> u64 { p.ticks() }
);

/// Store through `out` (GM_INVALID_PARAMETER when it is null).
unsafe fn store(out: *mut c_uint, v: u32) -> GmStatus {
    if out.is_null() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: the caller's promise: `out` points to an unsigned int.
    unsafe { *out = v };
    GM_SUCCESS
}

/// # Safety
/// `p` is an open port, `n` points to an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn gm_get_node_id(p: PortPtr, n: *mut c_uint) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store(n, gm_id(port(p, "gm_get_node_id").node)) }
}

/// The largest node id of the network: the cluster's last node's.
///
/// # Safety
/// As gm_get_node_id.
#[no_mangle]
pub unsafe extern "C" fn gm_max_node_id(p: PortPtr, n: *mut c_uint) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store(n, port(p, "gm_max_node_id").nodes) }
}

/// As gm_max_node_id: every node of a cluster is in use.
///
/// # Safety
/// As gm_get_node_id.
#[no_mangle]
pub unsafe extern "C" fn gm_max_node_id_in_use(p: PortPtr, n: *mut c_uint) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store(n, port(p, "gm_max_node_id_in_use").nodes) }
}

/// The older name of gm_max_node_id_in_use.
///
/// # Safety
/// As gm_get_node_id.
#[no_mangle]
pub unsafe extern "C" fn gm_max_node_id_inuse(p: PortPtr, n: *mut c_uint) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store(n, port(p, "gm_max_node_id_inuse").nodes) }
}

/// Global ids are the node ids: one network.
///
/// # Safety
/// As gm_get_node_id.
#[no_mangle]
pub unsafe extern "C" fn gm_node_id_to_global_id(
    p: PortPtr,
    node_id: c_uint,
    global_id: *mut c_uint,
) -> GmStatus {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_node_id_to_global_id") };
    if node_of(node_id, gp.nodes).is_none() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: the caller's promise.
    unsafe { store(global_id, node_id) }
}

/// # Safety
/// As gm_get_node_id.
#[no_mangle]
pub unsafe extern "C" fn gm_global_id_to_node_id(
    p: PortPtr,
    global_id: c_uint,
    node_id: *mut c_uint,
) -> GmStatus {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_global_id_to_node_id") };
    if node_of(global_id, gp.nodes).is_none() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: the caller's promise.
    unsafe { store(node_id, global_id) }
}

/// Copy `s` and its NUL into `out` of `room` bytes (truncated to fit).
unsafe fn copy_name(out: *mut c_char, room: usize, s: &str) -> GmStatus {
    if out.is_null() || room == 0 {
        return GM_INVALID_PARAMETER;
    }
    let n = s.len().min(room - 1);
    // SAFETY: the caller's promise: `out` has `room` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        *out.add(n) = 0;
    }
    GM_SUCCESS
}

/// This node's host name (`node<n>`).
///
/// # Safety
/// `p` is an open port, `name` has GM_MAX_HOST_NAME_LEN bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_get_host_name(p: PortPtr, name: *mut c_char) -> GmStatus {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_get_host_name") };
    // SAFETY: as above.
    unsafe { copy_name(name, 128, &target::host_name(gp.node)) }
}

/// The host name of node id `node_id`, or NULL: the pointer stays valid
/// while the port is open.
///
/// # Safety
/// `p` is an open port.
#[no_mangle]
pub unsafe extern "C" fn gm_node_id_to_host_name(p: PortPtr, node_id: c_uint) -> *mut c_char {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_node_id_to_host_name") };
    match node_of(node_id, gp.nodes) {
        Some(n) => gp.names[n as usize].as_ptr().cast_mut(),
        None => std::ptr::null_mut(),
    }
}

/// # Safety
/// `p` is an open port; `name` points to GM_MAX_HOST_NAME_LEN + 1 bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_node_id_to_host_name_ex(
    p: PortPtr,
    _timeout_usecs: c_uint,
    node_id: c_uint,
    name: *mut [c_char; 129],
) -> GmStatus {
    // SAFETY: the caller's promise.
    let gp = unsafe { port(p, "gm_node_id_to_host_name_ex") };
    match node_of(node_id, gp.nodes) {
        // SAFETY: as above.
        Some(n) => unsafe { copy_name(name.cast(), 129, &target::host_name(n)) },
        None => GM_NO_MATCH,
    }
}

/// The node id of a host name, or GM_NO_SUCH_NODE_ID (0).
///
/// # Safety
/// `p` is an open port, `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_host_name_to_node_id(p: PortPtr, name: *mut c_char) -> c_uint {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_host_name_to_node_id") };
    if name.is_null() {
        return 0;
    }
    // SAFETY: as above.
    let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    target::node_named(&s, gp.nodes).map_or(0, gm_id)
}

/// # Safety
/// `p` is an open port, `name` a C string, `node_id` an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn gm_host_name_to_node_id_ex(
    p: PortPtr,
    _timeout_usecs: c_uint,
    name: *const c_char,
    node_id: *mut c_uint,
) -> GmStatus {
    // SAFETY: the caller's promises.
    match unsafe { gm_host_name_to_node_id(p, name.cast_mut()) } {
        0 => GM_NO_MATCH,
        // SAFETY: as above.
        id => unsafe { store(node_id, id) },
    }
}

/// A node's 6-byte board id: Myricom's prefix 00:60:dd, then the node
/// id. (The emulated boards have no other.)
fn unique_of(id: u32) -> [u8; 6] {
    let b = id.to_be_bytes();
    [0x00, 0x60, 0xdd, b[1], b[2], b[3]]
}

unsafe fn store_unique(out: *mut c_char, id: u32) -> GmStatus {
    if out.is_null() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: the caller's promise: six bytes at `out`.
    unsafe { std::ptr::copy_nonoverlapping(unique_of(id).as_ptr(), out.cast(), 6) };
    GM_SUCCESS
}

/// # Safety
/// `p` is an open port, `unique` has six bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_unique_id(p: PortPtr, unique: *mut c_char) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store_unique(unique, gm_id(port(p, "gm_unique_id").node)) }
}

/// # Safety
/// As gm_unique_id.
#[no_mangle]
pub unsafe extern "C" fn gm_get_unique_board_id(p: PortPtr, unique: *mut c_char) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store_unique(unique, gm_id(port(p, "gm_get_unique_board_id").node)) }
}

/// # Safety
/// As gm_unique_id.
#[no_mangle]
pub unsafe extern "C" fn gm_get_mapper_unique_id(p: PortPtr, unique: *mut c_char) -> GmStatus {
    // SAFETY: the caller's promises.
    unsafe { store_unique(unique, gm_id(port(p, "gm_get_mapper_unique_id").node)) }
}

/// # Safety
/// As gm_unique_id.
#[no_mangle]
pub unsafe extern "C" fn gm_node_id_to_unique_id(
    p: PortPtr,
    n: c_uint,
    unique: *mut c_char,
) -> GmStatus {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_node_id_to_unique_id") };
    if node_of(n, gp.nodes).is_none() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: as above.
    unsafe { store_unique(unique, n) }
}

/// # Safety
/// `p` is an open port, `unique` six bytes, `node_id` an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn gm_unique_id_to_node_id(
    p: PortPtr,
    unique: *mut c_char,
    node_id: *mut c_uint,
) -> GmStatus {
    // SAFETY: the caller's promises.
    let gp = unsafe { port(p, "gm_unique_id_to_node_id") };
    if unique.is_null() {
        return GM_INVALID_PARAMETER;
    }
    let mut u = [0u8; 6];
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(unique.cast::<u8>(), u.as_mut_ptr(), 6) };
    match (1..=gp.nodes).find(|&id| unique_of(id) == u) {
        // SAFETY: as above.
        Some(id) => unsafe { store(node_id, id) },
        None => GM_NO_MATCH,
    }
}

/// The kind of node: every emulated node is a host (0).
///
/// # Safety
/// `p` is an open port, `node_type` an int.
#[no_mangle]
pub unsafe extern "C" fn gm_get_node_type(p: PortPtr, node_type: *mut c_int) -> GmStatus {
    // SAFETY: the caller's promise.
    let _ = unsafe { port(p, "gm_get_node_type") };
    if node_type.is_null() {
        return GM_INVALID_PARAMETER;
    }
    // SAFETY: as above.
    unsafe { *node_type = 0 };
    GM_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn board_ids_carry_the_node_id_and_name_it_back() {
        assert_eq!(unique_of(1), [0, 0x60, 0xdd, 0, 0, 1]);
        assert_eq!(unique_of(0x1_0203), [0, 0x60, 0xdd, 1, 2, 3]);
    }

    #[test]
    fn an_unknown_api_version_or_unit_is_refused_before_any_cluster_is_looked_for() {
        let mut p: PortPtr = std::ptr::null_mut();
        // SAFETY: `p` is a valid place; no name.
        let s = unsafe { gm_open(&mut p, 0, 0, std::ptr::null(), 0x107) };
        assert_eq!((s, p.is_null()), (GM_INCOMPATIBLE_LIB_AND_DRIVER, true));
        // SAFETY: as above.
        let s = unsafe { gm_open(&mut p, 1, 0, std::ptr::null(), 0x200) };
        assert_eq!(s, GM_NO_SUCH_DEVICE);
        // SAFETY: as above.
        let s = unsafe { gm_open(&mut p, 0, 8, std::ptr::null(), 0x200) };
        assert_eq!(s, GM_INVALID_PORT_NUMBER);
    }
}
