//! `cargo xtask bench --firmware`: the MCP image's instructions counted
//! exactly under QEMU, per workload. [`report`] is the document it writes.

// The runner that fills it lands next; the pricing side reads it.
#[allow(dead_code)]
pub mod report;
