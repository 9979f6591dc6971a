//! The MCP placeholder (being written).
#![no_std]
pub mod hw;
