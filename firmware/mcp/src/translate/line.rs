//! The page-table line slots the translation reads entries into, and the
//! version of a port's table they were read at.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LineState {
    Free,
    Reading,
    Ready,
}

/// Where a port's table stands: its `PT_GEN` and `PT_ADDED` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Version {
    pub(super) gen: u32,
    pub(super) added: u32,
}

/// A page-table line slot: which port's entries, from which table index
/// and for which virtual page (an alias of the table reads the same
/// entries for other pages), read at which version of the port's table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Line {
    pub(super) state: LineState,
    pub(super) port: u8,
    pub(super) first_vpn: u64,
    pub(super) first_index: u64,
    pub(super) version: Version,
}

pub(super) const NO_LINE: Line = Line {
    state: LineState::Free,
    port: 0,
    first_vpn: 0,
    first_index: 0,
    version: Version { gen: 0, added: 0 },
};
