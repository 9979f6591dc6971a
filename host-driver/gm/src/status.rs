//! GM's status codes (`gm_status_t`), their messages (`gm_strerror`),
//! and what the driver's errors and the NIC's send statuses are in them.

use std::ffi::{c_char, CStr};

use host_driver::{DriverError, SendStatus};

/// `gm_status_t`: a C enum, an `int`.
pub type GmStatus = i32;

pub const GM_SUCCESS: GmStatus = 0;
pub const GM_FAILURE: GmStatus = 1;
pub const GM_INPUT_BUFFER_TOO_SMALL: GmStatus = 2;
pub const GM_OUTPUT_BUFFER_TOO_SMALL: GmStatus = 3;
pub const GM_TRY_AGAIN: GmStatus = 4;
pub const GM_BUSY: GmStatus = 5;
pub const GM_MEMORY_FAULT: GmStatus = 6;
pub const GM_INTERRUPTED: GmStatus = 7;
pub const GM_INVALID_PARAMETER: GmStatus = 8;
pub const GM_OUT_OF_MEMORY: GmStatus = 9;
pub const GM_INVALID_COMMAND: GmStatus = 10;
pub const GM_PERMISSION_DENIED: GmStatus = 11;
pub const GM_INTERNAL_ERROR: GmStatus = 12;
pub const GM_UNATTACHED: GmStatus = 13;
pub const GM_UNSUPPORTED_DEVICE: GmStatus = 14;
pub const GM_SEND_TIMED_OUT: GmStatus = 15;
pub const GM_SEND_REJECTED: GmStatus = 16;
pub const GM_SEND_TARGET_PORT_CLOSED: GmStatus = 17;
pub const GM_SEND_TARGET_NODE_UNREACHABLE: GmStatus = 18;
pub const GM_SEND_DROPPED: GmStatus = 19;
pub const GM_SEND_PORT_CLOSED: GmStatus = 20;
pub const GM_NODE_ID_NOT_YET_SET: GmStatus = 21;
pub const GM_STILL_SHUTTING_DOWN: GmStatus = 22;
pub const GM_CLONE_BUSY: GmStatus = 23;
pub const GM_NO_SUCH_DEVICE: GmStatus = 24;
pub const GM_ABORTED: GmStatus = 25;
pub const GM_INCOMPATIBLE_LIB_AND_DRIVER: GmStatus = 26;
pub const GM_UNTRANSLATED_SYSTEM_ERROR: GmStatus = 27;
pub const GM_ACCESS_DENIED: GmStatus = 28;
pub const GM_NO_DRIVER_SUPPORT: GmStatus = 29;
pub const GM_PTE_REF_CNT_OVERFLOW: GmStatus = 30;
pub const GM_NOT_SUPPORTED_IN_KERNEL: GmStatus = 31;
pub const GM_NOT_SUPPORTED_ON_ARCH: GmStatus = 32;
pub const GM_NO_MATCH: GmStatus = 33;
pub const GM_USER_ERROR: GmStatus = 34;
pub const GM_TIMED_OUT: GmStatus = 35;
pub const GM_DATA_CORRUPTED: GmStatus = 36;
pub const GM_HARDWARE_FAULT: GmStatus = 37;
pub const GM_SEND_ORPHANED: GmStatus = 38;
pub const GM_MINOR_OVERFLOW: GmStatus = 39;
pub const GM_PAGE_TABLE_FULL: GmStatus = 40;
pub const GM_UC_ERROR: GmStatus = 41;
pub const GM_INVALID_PORT_NUMBER: GmStatus = 42;
pub const GM_DEV_NOT_FOUND: GmStatus = 43;
pub const GM_FIRMWARE_NOT_RUNNING: GmStatus = 44;
pub const GM_YP_NO_MATCH: GmStatus = 45;
pub const GM_SRAM_PARITY_ERROR: GmStatus = 46;
pub const GM_FIRMWARE_ABORT: GmStatus = 47;
/// `GM_NUM_STATUS_CODES`: one past the last.
pub const GM_NUM_STATUS_CODES: GmStatus = 48;

/// What each code means, in the order of the codes (NUL-terminated for
/// `gm_strerror`, which hands C a pointer to one).
const MESSAGES: [&CStr; GM_NUM_STATUS_CODES as usize] = [
    c"success",
    c"the operation failed",
    c"the input buffer is too small",
    c"the output buffer is too small",
    c"try again",
    c"the port is busy",
    c"memory fault",
    c"interrupted",
    c"invalid parameter",
    c"out of memory",
    c"invalid command",
    c"permission denied",
    c"internal error",
    c"not attached",
    c"unsupported device",
    c"send timed out: the receiver provided no matching buffer in time",
    c"send rejected: the receiver does not accept messages of that size",
    c"send failed: the target port is closed",
    c"send failed: the target node is unreachable",
    c"send dropped at the sender's request",
    c"send failed: the sending port was closed",
    c"the node id is not set yet",
    c"the port is still shutting down",
    c"clone busy",
    c"no such device",
    c"aborted",
    c"the library and the driver do not match",
    c"untranslated system error",
    c"access denied",
    c"no driver support",
    c"page table entry reference count overflow",
    c"not supported in the kernel",
    c"not supported on this architecture",
    c"no match",
    c"user error",
    c"timed out",
    c"data corrupted",
    c"hardware fault",
    c"send orphaned",
    c"minor number overflow",
    c"the page table is full",
    c"UC error",
    c"invalid port number",
    c"no device files found",
    c"the NIC's firmware is not running",
    c"no match for the query",
    c"SRAM parity error",
    c"the NIC's firmware stopped on a fatal error",
];

/// The message of `s` (a fixed text for a code GM does not define).
pub fn message(s: GmStatus) -> &'static CStr {
    usize::try_from(s)
        .ok()
        .and_then(|i| MESSAGES.get(i))
        .copied()
        .unwrap_or(c"unknown GM status code")
}

/// The message of `s` as C wants it (`char *`; C must not write it).
pub fn message_ptr(s: GmStatus) -> *mut c_char {
    message(s).as_ptr().cast_mut()
}

/// A send's completion as GM reports it.
pub fn of_send(s: SendStatus) -> GmStatus {
    match s {
        SendStatus::Ok => GM_SUCCESS,
        SendStatus::TimedOut => GM_SEND_TIMED_OUT,
        SendStatus::TargetPortClosed => GM_SEND_TARGET_PORT_CLOSED,
        SendStatus::Dropped => GM_SEND_DROPPED,
        // A put or get outside what the target registered.
        SendStatus::RemoteAccess => GM_SEND_REJECTED,
        SendStatus::Unreachable | SendStatus::Incomplete => GM_SEND_TARGET_NODE_UNREACHABLE,
    }
}

/// An error opening a port, as `gm_open` returns it.
pub fn of_open(e: &DriverError) -> GmStatus {
    match e {
        DriverError::Attach { cause, .. } => of_open(cause),
        DriverError::PortBusy(_) | DriverError::PortHeld { .. } => GM_BUSY,
        DriverError::BadPort(_) => GM_INVALID_PORT_NUMBER,
        DriverError::Cluster { .. } => GM_NO_SUCH_DEVICE,
        DriverError::AttachRefused { .. } => GM_PERMISSION_DENIED,
        DriverError::NicDown { .. } => GM_FIRMWARE_NOT_RUNNING,
        _ => GM_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_message() {
        let mut seen = std::collections::HashSet::new();
        for s in 0..GM_NUM_STATUS_CODES {
            assert!(seen.insert(message(s)), "code {s} repeats a message");
        }
        assert_eq!(message(GM_NUM_STATUS_CODES), c"unknown GM status code");
        assert_eq!(message(-1), c"unknown GM status code");
    }

    #[test]
    fn send_statuses_map_to_gms_codes() {
        assert_eq!(of_send(SendStatus::Ok), 0);
        assert_eq!(of_send(SendStatus::TimedOut), 15);
        assert_eq!(of_send(SendStatus::TargetPortClosed), 17);
        assert_eq!(of_send(SendStatus::Unreachable), 18);
        assert_eq!(of_send(SendStatus::Dropped), 19);
    }
}
