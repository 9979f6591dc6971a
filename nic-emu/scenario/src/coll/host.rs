//! The host scheme's messages and chunks.

use nic_abi::collective::Alg;

use super::CollSpec;

/// The host scheme's messages: a header (`HOST_HEADER` bytes: the
/// collective's number u64, the chunk u32, the step's tag u8) and a
/// chunk. The host scheme cuts the vector into one chunk (n for the
/// ring: one per segment), so each step is one message.
pub const HOST_HEADER: u64 = 16;

/// Receive buffers the host scheme keeps posted on each member's port.
pub const HOST_RECV_BUFFERS: u32 = 16;

/// The host scheme's chunk of collective flow `c` (bytes, whole units).
pub fn host_chunk(c: &CollSpec, alg: Alg) -> u32 {
    let unit = nic_abi::collective::unit(c.kind, c.dtype) as u32;
    let b = c.bytes();
    if b == 0 {
        return 0;
    }
    match alg {
        Alg::Ring => (b / unit).div_ceil(c.size() as u32).max(1) * unit,
        _ => b,
    }
}

/// The longest host-scheme message of `c`: its algorithm's chunk when
/// that is known before the run (asked for, or picked by the profile's
/// costs, which do not depend on the NICs' chunks for the host scheme),
/// else the whole vector. The members' receive buffers are all of its
/// size class.
pub fn host_message_len(c: &CollSpec) -> u64 {
    let known = c.requested.is_some() || c.costs.is_some();
    match known {
        true => HOST_HEADER + host_chunk(c, c.alg((nic_abi::MAX_MTU as u32, u32::MAX))) as u64,
        false => HOST_HEADER + c.bytes() as u64,
    }
}
