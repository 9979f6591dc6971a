//! Packet capture: every packet the fabric carries, each time its head
//! enters a link, written as a pcap file (nanosecond timestamps, link type
//! `LINKTYPE_USER0` = 147) that Wireshark and tshark read with the
//! dissector shipped in `tools/wireshark/nic_emu.lua`.
//!
//! Each record is a 12-byte capture header of ours followed by the bytes
//! on the wire at that link: the route bytes still ahead of the packet
//! (high bit set, one per switch left), the 48-byte packet header, the
//! payload.
//!
//! ```text
//! 0  u8   version (1)
//! 1  u8   what the link did: bit 0 dropped it (a fault or an outage),
//!         bit 1 flipped a bit of it, bit 2 delivers it twice
//! 2  u16  link (the fabric's directed link number), little-endian
//! 4  u8   from: 0 a NIC, 1 a switch      5 u8  its port (0 for a NIC)
//! 6  u16  from: the node or switch number
//! 8  u8   to: 0 a NIC, 1 a switch        9 u8  its port (0 for a NIC)
//! 10 u16  to: the node or switch number
//! ```
//!
//! Timestamps are the time the packet's head entered the link: virtual
//! time from the start of the run on the sim, wall-clock time on live and
//! qemu.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::fabric::{Hit, LinkEnd, LinkSpec};

/// pcap's link type for private use (Wireshark: "USER0").
pub const LINKTYPE_USER0: u32 = 147;
/// Bytes of our capture header before the wire bytes.
pub const CAPTURE_HEADER_LEN: usize = 12;
/// The longest record kept (the rest of a packet is cut).
pub const SNAPLEN: u32 = 65_535;

/// A pcap file being written.
pub struct Capture {
    out: BufWriter<File>,
    /// Records written.
    pub packets: u64,
    /// The first write error (later records are not written).
    error: Option<io::Error>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("packets", &self.packets).finish()
    }
}

fn end(e: LinkEnd) -> (u8, u8, u16) {
    match e {
        LinkEnd::Nic(n) => (0, 0, n as u16),
        LinkEnd::Switch { switch, port } => (1, port as u8, switch as u16),
    }
}

impl Capture {
    /// Create `path` and write the pcap file header.
    pub fn create(path: &Path) -> io::Result<Capture> {
        let mut out = BufWriter::new(File::create(path)?);
        // Magic for nanosecond timestamps, version 2.4, GMT offset 0,
        // accuracy 0, snaplen, link type.
        out.write_all(&0xa1b2_3c4du32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&[0u8; 8])?;
        out.write_all(&SNAPLEN.to_le_bytes())?;
        out.write_all(&LINKTYPE_USER0.to_le_bytes())?;
        Ok(Capture { out, packets: 0, error: None })
    }

    /// One packet's head entered `link` (`spec`) at `t_ns`; `hit` is what
    /// the link did to it; `wire` its bytes from there on.
    pub fn record(&mut self, t_ns: u64, link: u32, spec: &LinkSpec, hit: &Hit, wire: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let mut h = [0u8; CAPTURE_HEADER_LEN];
        h[0] = 1;
        h[1] = hit.drop as u8 | (hit.corrupt as u8) << 1 | (hit.duplicate as u8) << 2;
        h[2..4].copy_from_slice(&(link as u16).to_le_bytes());
        let (fk, fp, fid) = end(spec.from);
        let (tk, tp, tid) = end(spec.to);
        h[4] = fk;
        h[5] = fp;
        h[6..8].copy_from_slice(&fid.to_le_bytes());
        h[8] = tk;
        h[9] = tp;
        h[10..12].copy_from_slice(&tid.to_le_bytes());
        let orig = (CAPTURE_HEADER_LEN + wire.len()) as u32;
        let incl = orig.min(SNAPLEN);
        let body = incl as usize - CAPTURE_HEADER_LEN;
        let r = (|| {
            self.out.write_all(&((t_ns / 1_000_000_000) as u32).to_le_bytes())?;
            self.out.write_all(&((t_ns % 1_000_000_000) as u32).to_le_bytes())?;
            self.out.write_all(&incl.to_le_bytes())?;
            self.out.write_all(&orig.to_le_bytes())?;
            self.out.write_all(&h)?;
            self.out.write_all(&wire[..body])
        })();
        match r {
            Ok(()) => self.packets += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Flush the file. Returns the records written, or the first error.
    pub fn finish(mut self) -> io::Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.packets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_device::profile::Rate;

    #[test]
    fn a_capture_is_a_pcap_file_with_our_header_before_the_wire_bytes() {
        let dir = std::env::temp_dir().join(format!("nic-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcap");
        let mut c = Capture::create(&path).unwrap();
        let spec = LinkSpec {
            from: LinkEnd::Nic(3),
            to: LinkEnd::Switch { switch: 1, port: 7 },
            head_delay: 0,
            rate: Rate::new(1_000_000_000),
        };
        let hit = Hit { drop: true, corrupt: false, duplicate: true, outage: None };
        c.record(2_000_000_123, 9, &spec, &hit, &[0x81, 1, 2, 3]);
        assert_eq!(c.finish().unwrap(), 1);
        let b = std::fs::read(&path).unwrap();
        assert_eq!(&b[..4], &0xa1b2_3c4du32.to_le_bytes());
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), LINKTYPE_USER0);
        let r = &b[24..];
        assert_eq!(u32::from_le_bytes(r[0..4].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(r[4..8].try_into().unwrap()), 123);
        assert_eq!(u32::from_le_bytes(r[8..12].try_into().unwrap()), 16);
        assert_eq!(&r[16..28], &[1, 0b101, 9, 0, 0, 0, 3, 0, 1, 7, 1, 0]);
        assert_eq!(&r[28..], &[0x81, 1, 2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
