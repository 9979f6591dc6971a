//! What happened at each link, for a timeline (`Fabric::log_links`; the
//! sim's `--trace` draws a track per link from it, docs/trace.md): every
//! packet whose head entered a link, with what the link did to it, the
//! packets a switch dropped at a link (blocked too long, a bad route) and
//! how many heads wait for a link. Recording it changes nothing of what
//! the fabric does.

use nic_abi::le::{get_u16, get_u32, get_u8};
use nic_abi::packet::{HEADER_LEN, ROUTE_FLAG};

use crate::fabric::Hit;

/// A packet's header fields a timeline names it by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketSummary {
    pub ptype: u8,
    pub flags: u8,
    pub src_node: u16,
    pub src_port: u8,
    pub dst_node: u16,
    pub dst_port: u8,
    pub seq: u32,
    /// Bytes on the wire at that link (route bytes left included).
    pub bytes: u32,
}

impl PacketSummary {
    /// The packet whose wire bytes from this link on are `wire` (its
    /// route bytes left, the header, the payload); a packet too short for
    /// a header has type 0.
    pub fn of(wire: &[u8]) -> PacketSummary {
        let r = wire.iter().take_while(|&&b| b & ROUTE_FLAG != 0).count();
        let h = &wire[r..];
        let mut s = PacketSummary { bytes: wire.len() as u32, ..Default::default() };
        if h.len() >= HEADER_LEN {
            s.ptype = get_u8(h, 0);
            s.flags = get_u8(h, 1);
            s.src_node = get_u16(h, 4);
            s.dst_node = get_u16(h, 6);
            s.src_port = get_u8(h, 8);
            s.dst_port = get_u8(h, 9);
            s.seq = get_u32(h, 12);
        }
        s
    }
}

/// One thing that happened at a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkWhat {
    /// A packet's head entered the link; its tail had entered by
    /// `tail_ns` (unless it stalled on the way); `hit` is what the link
    /// did to it.
    Packet { tail_ns: u64, hit: Hit, packet: PacketSummary },
    /// The switch at the link's far end dropped the packet: its head
    /// waited longer than the blocked-packet timeout (for the next link,
    /// or for the NIC at this one's end), or its route byte named no
    /// cabled port.
    SwitchDrop { blocked: bool, packet: PacketSummary },
    /// Heads now waiting for the link (its output port busy).
    Waiting(u32),
}

/// `what` happened at link `link` at `t_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEvent {
    pub t_ns: u64,
    pub link: u32,
    pub what: LinkWhat,
}
