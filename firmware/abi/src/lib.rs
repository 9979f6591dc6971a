//! The one definition of every layout shared between the MCP firmware, the
//! NIC device model (nic-emu) and the host driver.
//!
//! Nothing here touches memory: every type is either a constant, a plain
//! struct (`*Repr`), or a checked view over a byte slice that parses without
//! panicking (after smoltcp's `wire` module). Offsets into SRAM live only
//! here; firmware, emulator and driver name them, they never spell numbers.
//! The one interface to SRAM itself, [`sram::Sram`], is here too, so that
//! every side reaches it through the same trait.
//!
//! All multi-byte fields are little-endian.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![forbid(unsafe_code)]

pub mod collective;
pub mod desc;
pub mod event;
pub mod flows;
pub mod group;
pub mod le;
pub mod map;
pub mod multicast;
pub mod packet;
pub mod page_table;
pub mod port;
pub mod regs;
pub mod rings;
pub mod sram;
pub mod stats;
pub mod trace;

#[cfg(test)]
mod fuzz_tests;

/// Errors from parsing shared structures. Parsing never panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer is shorter than the structure.
    Truncated,
    /// A field holds a value outside its domain (named).
    BadField(&'static str),
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParseError::Truncated => f.write_str("truncated"),
            ParseError::BadField(name) => write!(f, "bad field `{name}`"),
        }
    }
}

/// Number of ports on every NIC.
pub const NUM_PORTS: usize = 8;
/// Largest node count a NIC's route table can address.
pub const MAX_NODES: usize = 1024;
/// Largest payload of one packet (the profile's MTU may be smaller).
pub const MAX_MTU: usize = 4096;
/// Largest size class: messages of up to 2^MAX_SIZE_CLASS bytes.
pub const MAX_SIZE_CLASS: u8 = 22;
/// Page size of the per-port page tables.
pub const PAGE_SIZE: u64 = 4096;
/// Two priorities.
pub const NUM_PRIORITIES: usize = 2;

/// Largest message length of a size class: 2^class bytes.
pub const fn class_max_len(class: u8) -> u64 {
    // Total: a class past 63 holds as much as a u64 can say.
    if class >= 64 {
        u64::MAX
    } else {
        1u64 << class
    }
}

/// Smallest size class that holds `len` bytes (GM chose it from the
/// length). Total: a length above 2^63 is class 64, which no descriptor
/// takes (its size-class check refuses it).
pub const fn size_class_for(len: u64) -> u8 {
    if len <= 1 {
        0
    } else {
        (64 - (len - 1).leading_zeros()) as u8
    }
}

/// Message priority. A (port, priority) pair is a sub-port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    Low = 0,
    High = 1,
}

impl Priority {
    pub const fn from_u8(v: u8) -> Option<Priority> {
        match v {
            0 => Some(Priority::Low),
            1 => Some(Priority::High),
            _ => None,
        }
    }

    /// "low" or "high", as scenario files and the programs' options name it.
    pub const fn name(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::High => "high",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_class_is_smallest_power_of_two_that_fits() {
        assert_eq!(size_class_for(0), 0);
        assert_eq!(size_class_for(1), 0);
        assert_eq!(size_class_for(2), 1);
        assert_eq!(size_class_for(3), 2);
        assert_eq!(size_class_for(4096), 12);
        assert_eq!(size_class_for(4097), 13);
        assert_eq!(size_class_for(1 << 20), 20);
        // The top of the range: no loop, no overflow.
        assert_eq!(size_class_for(1 << 63), 63);
        assert_eq!(size_class_for((1 << 63) + 1), 64);
        assert_eq!(size_class_for(u64::MAX), 64);
        assert_eq!(class_max_len(63), 1 << 63);
        assert_eq!((class_max_len(64), class_max_len(255)), (u64::MAX, u64::MAX));
    }

    proptest::proptest! {
        /// Every length has a class, the smallest that holds it.
        #[test]
        fn size_class_for_is_total_and_smallest(len in proptest::num::u64::ANY) {
            let c = size_class_for(len);
            proptest::prop_assert!(c <= 64);
            proptest::prop_assert!(class_max_len(c) >= len);
            proptest::prop_assert!(c == 0 || class_max_len(c - 1) < len);
        }

        /// Every class has a length, growing with the class.
        #[test]
        fn class_max_len_is_total_and_monotonic(c in proptest::num::u8::ANY) {
            proptest::prop_assert!(class_max_len(c) >= class_max_len(c.saturating_sub(1)));
            proptest::prop_assert!(c > 63 || size_class_for(class_max_len(c)) == c);
        }
    }
}
