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

failing!(_gm_get_route, gm_set_enable_nack_down, gm_directcopy_get, gm_yp);

stopping!(
    gm_datagram_send_4,
    gm_flush_alarm,
    gm_dump_buffers,
    gm_register_buffer,
    gm_unregister_buffer,
    gm_zone_create_zone,
    gm_zone_destroy_zone,
    gm_zone_free,
    gm_zone_malloc,
    gm_zone_calloc,
    gm_zone_addr_in_zone,
);
