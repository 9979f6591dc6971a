//! Calls of gm.h this library does not provide. Each exists (a program
//! that names one links), says so on standard error naming itself, and
//! fails: GM_FAILURE where the call returns a status, else the process
//! stops. None fails silently. docs/gm-api.md lists them.

use crate::status::{GmStatus, GM_FAILURE};

fn say(call: &str) {
    eprintln!("libgm: {call} is not supported on the emulated NIC (see docs/gm-api.md)");
}

/// Calls that return a status: the message, then GM_FAILURE.
macro_rules! failing {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> GmStatus {
            say(stringify!($name));
            GM_FAILURE
        }
    )*};
}

/// Calls that return no status: the message, then the process stops.
macro_rules! stopping {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> ! {
            say(stringify!($name));
            std::process::abort()
        }
    )*};
}

failing!(
    _gm_get_route,
    gm_set_enable_nack_down,
    gm_directcopy_get,
    gm_yp,
    gm_hash_insert,
    gm_mark,
    gm_create_mark_set,
);

stopping!(
    gm_datagram_send_4,
    gm_flush_alarm,
    gm_dump_buffers,
    gm_register_buffer,
    gm_unregister_buffer,
    gm_create_lookaside,
    gm_destroy_lookaside,
    gm_lookaside_alloc,
    gm_lookaside_zalloc,
    gm_lookaside_free,
    gm_create_hash,
    gm_destroy_hash,
    gm_hash_remove,
    gm_hash_find,
    gm_hash_rekey,
    gm_hash_compare_strings,
    gm_hash_hash_string,
    gm_hash_compare_longs,
    gm_hash_hash_long,
    gm_hash_compare_ints,
    gm_hash_hash_int,
    gm_hash_compare_ptrs,
    gm_hash_hash_ptr,
    gm_create_mutex,
    gm_destroy_mutex,
    gm_mutex_enter,
    gm_mutex_exit,
    gm_zone_create_zone,
    gm_zone_destroy_zone,
    gm_zone_free,
    gm_zone_malloc,
    gm_zone_calloc,
    gm_zone_addr_in_zone,
    gm_mark_is_valid,
    gm_destroy_mark_set,
    gm_unmark,
    gm_unmark_all,
);
