//! Packet capture: every packet the fabric carries, each time its head
//! enters a link, written as a pcapng file that Wireshark and tshark read
//! with the dissector shipped in `tools/wireshark/nic_emu.lua`
//! (docs/capture.md).
//!
//! - One interface per directed link, in the fabric's link order (so a
//!   record's interface number is its link number), link type
//!   `LINKTYPE_USER0` (147), nanosecond timestamps; its name is `linkN`
//!   and its description the link's two ends (`node0 -> sw0.p0`,
//!   `sw0.p1 -> node1`).
//! - One enhanced packet block per packet per link: exactly the bytes on
//!   the wire at that link (the route bytes still ahead of the packet,
//!   high bit set, one per switch left; the 48-byte packet header; the
//!   payload), so a record's frame length is the packet's length there.
//! - What the link did to the packet is the record's comment
//!   (`nicemu: dropped`, `corrupted`, `duplicated`, `link down`, comma
//!   separated); a corrupted packet also has the CRC-error bit of its
//!   flags set.
//!
//! Timestamps are the time the packet's head entered the link: virtual
//! time from the start of the run on the sim, the cluster's clock on live
//! and qemu. Records reach the writer out of time order (a NIC's engines
//! put packets on the wire ahead of the simulator's clock; on live,
//! several device threads capture, and a paced packet's later hops are
//! stamped when it is launched), so the writer holds them back until the
//! caller says no earlier record can come ([`Capture::release`]) and
//! writes them in time order, ties in arrival order. A record that still
//! arrives behind what was written (`late`), or that was pushed out early
//! because more than [`MAX_HELD_BYTES`] were held, is merged into its
//! place when the file is finished: the file is always in time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::fabric::{Hit, LinkEnd, LinkSpec};

/// pcap's link type for private use (Wireshark: "USER0").
pub const LINKTYPE_USER0: u16 = 147;
/// The longest record kept (the rest of a packet is cut).
pub const SNAPLEN: u32 = 65_535;
/// Bytes of records held back for ordering before the oldest are written
/// regardless (any that then arrive behind them are merged at the end).
pub const MAX_HELD_BYTES: usize = 64 << 20;
/// The flag bit of an enhanced packet block that says the frame had a
/// CRC error (pcapng `epb_flags`, link-layer errors, bit 24).
pub const EPB_FLAG_CRC_ERROR: u32 = 1 << 24;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_DESCRIPTION: u16 = 3;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_EPB_FLAGS: u16 = 2;

/// A link end as the capture names it (`node3`, `sw1.p7`).
pub fn end_name(e: LinkEnd) -> String {
    match e {
        LinkEnd::Nic(n) => format!("node{n}"),
        LinkEnd::Switch { switch, port } => format!("sw{switch}.p{port}"),
    }
}

/// The comment a record gets for what the link did (None: nothing).
pub fn what_comment(hit: &Hit) -> Option<String> {
    let mut w: Vec<&str> = Vec::new();
    if hit.drop {
        w.push("dropped");
    }
    if hit.outage.is_some() {
        w.push("link down");
    }
    if hit.corrupt {
        w.push("corrupted");
    }
    if hit.duplicate {
        w.push("duplicated");
    }
    (!w.is_empty()).then(|| format!("nicemu: {}", w.join(", ")))
}

fn option(b: &mut Vec<u8>, code: u16, data: &[u8]) {
    b.extend_from_slice(&code.to_le_bytes());
    b.extend_from_slice(&(data.len() as u16).to_le_bytes());
    b.extend_from_slice(data);
    b.resize(b.len().next_multiple_of(4), 0);
}

/// A whole block: type, length, `body` (padded to 4), length.
fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().next_multiple_of(4);
    let len = (12 + padded) as u32;
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.resize(8 + padded, 0);
    b.extend_from_slice(&len.to_le_bytes());
    b
}

/// The section header and one interface per link.
fn file_header(links: &[LinkSpec]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    option(&mut body, OPT_END, &[]);
    let mut out = block(SHB, &body);
    for (i, l) in links.iter().enumerate() {
        let mut body = Vec::new();
        body.extend_from_slice(&LINKTYPE_USER0.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&SNAPLEN.to_le_bytes());
        option(&mut body, OPT_IF_NAME, format!("link{i}").as_bytes());
        let desc = format!("{} -> {}", end_name(l.from), end_name(l.to));
        option(&mut body, OPT_IF_DESCRIPTION, desc.as_bytes());
        option(&mut body, OPT_IF_TSRESOL, &[9]);
        option(&mut body, OPT_END, &[]);
        out.extend_from_slice(&block(IDB, &body));
    }
    out
}

/// One record as an enhanced packet block.
fn packet_block(t_ns: u64, link: u32, hit: &Hit, wire: &[u8]) -> Vec<u8> {
    let orig = wire.len() as u32;
    let incl = orig.min(SNAPLEN);
    let mut body = Vec::with_capacity(20 + wire.len() + 48);
    body.extend_from_slice(&link.to_le_bytes());
    body.extend_from_slice(&((t_ns >> 32) as u32).to_le_bytes());
    body.extend_from_slice(&(t_ns as u32).to_le_bytes());
    body.extend_from_slice(&incl.to_le_bytes());
    body.extend_from_slice(&orig.to_le_bytes());
    body.extend_from_slice(&wire[..incl as usize]);
    body.resize(body.len().next_multiple_of(4), 0);
    if let Some(c) = what_comment(hit) {
        option(&mut body, OPT_COMMENT, c.as_bytes());
        if hit.corrupt {
            option(&mut body, OPT_EPB_FLAGS, &EPB_FLAG_CRC_ERROR.to_le_bytes());
        }
        option(&mut body, OPT_END, &[]);
    }
    block(EPB, &body)
}

/// A record waiting to be written: ordered by time, then arrival.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    t_ns: u64,
    n: u64,
    block: Vec<u8>,
}

/// A pcapng file being written.
pub struct Capture {
    out: BufWriter<File>,
    path: PathBuf,
    /// Bytes of the section header and interfaces (records follow).
    header_len: u64,
    held: BinaryHeap<Reverse<Held>>,
    held_bytes: usize,
    /// Records that arrived behind what was written: merged at `finish`.
    behind: Vec<Held>,
    /// The time of the last record written.
    written_ns: u64,
    arrived: u64,
    /// Records taken.
    pub packets: u64,
    /// Records that arrived behind what was already written (placed by
    /// the merge at `finish`).
    pub late: u64,
    /// The most records held back at once.
    pub most_held: usize,
    /// The first write error (later records are not written).
    error: Option<io::Error>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("packets", &self.packets)
            .field("held", &self.held.len())
            .field("late", &self.late)
            .finish()
    }
}

impl Capture {
    /// Create `path` and write the section header and one interface per
    /// link of `links` (the fabric's directed links, in link order).
    pub fn create(path: &Path, links: &[LinkSpec]) -> io::Result<Capture> {
        let mut out = BufWriter::new(File::create(path)?);
        let header = file_header(links);
        out.write_all(&header)?;
        Ok(Capture {
            out,
            path: path.to_path_buf(),
            header_len: header.len() as u64,
            held: BinaryHeap::new(),
            held_bytes: 0,
            behind: Vec::new(),
            written_ns: 0,
            arrived: 0,
            packets: 0,
            late: 0,
            most_held: 0,
            error: None,
        })
    }

    /// One packet's head entered link number `link` at `t_ns`; `hit` is
    /// what the link did to it; `wire` its bytes from there on. Held until
    /// [`release`](Self::release) passes `t_ns`.
    pub fn record(&mut self, t_ns: u64, link: u32, hit: &Hit, wire: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let h = Held { t_ns, n: self.arrived, block: packet_block(t_ns, link, hit, wire) };
        self.arrived += 1;
        self.packets += 1;
        if t_ns < self.written_ns {
            self.late += 1;
            self.behind.push(h);
            return;
        }
        self.held_bytes += h.block.len();
        self.held.push(Reverse(h));
        self.most_held = self.most_held.max(self.held.len());
        while self.held_bytes > MAX_HELD_BYTES {
            self.write_oldest();
        }
    }

    /// No record stamped before `upto_ns` will come any more: write those
    /// held, in time order.
    pub fn release(&mut self, upto_ns: u64) {
        while self.held.peek().is_some_and(|h| h.0.t_ns <= upto_ns) {
            self.write_oldest();
        }
    }

    fn write_oldest(&mut self) {
        let Some(Reverse(h)) = self.held.pop() else { return };
        self.held_bytes -= h.block.len();
        self.written_ns = h.t_ns;
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(&h.block) {
                self.error = Some(e);
            }
        }
    }

    /// Write what is held, put late records in their place, and flush.
    /// Returns the records written, or the first error.
    pub fn finish(mut self) -> io::Result<u64> {
        while !self.held.is_empty() {
            self.write_oldest();
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        if !self.behind.is_empty() {
            let mut behind = std::mem::take(&mut self.behind);
            behind.sort_unstable();
            merge_into(&self.path, self.header_len, &behind)?;
        }
        Ok(self.packets)
    }
}

/// Rewrite the capture at `path` (its records in time order after
/// `header_len` bytes) with `late` (sorted) merged into their places:
/// one pass over the file, into a new file that then replaces it.
fn merge_into(path: &Path, header_len: u64, late: &[Held]) -> io::Result<()> {
    let tmp = path.with_extension("merging");
    let mut r = BufReader::new(File::open(path)?);
    let mut w = BufWriter::new(File::create(&tmp)?);
    let mut head = vec![0u8; header_len as usize];
    r.read_exact(&mut head)?;
    w.write_all(&head)?;
    let mut late = late.iter().peekable();
    let mut hdr = [0u8; 20];
    loop {
        match r.read_exact(&mut hdr[..8]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        let len = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
        if len < 28 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a capture block too short"));
        }
        let mut b = vec![0u8; len];
        b[..8].copy_from_slice(&hdr[..8]);
        r.read_exact(&mut b[8..])?;
        let t = (u32::from_le_bytes(b[12..16].try_into().unwrap()) as u64) << 32
            | u32::from_le_bytes(b[16..20].try_into().unwrap()) as u64;
        // Records written first go first among equal times.
        while let Some(l) = late.next_if(|l| l.t_ns < t) {
            w.write_all(&l.block)?;
        }
        w.write_all(&b)?;
    }
    for l in late {
        w.write_all(&l.block)?;
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_device::profile::Rate;

    fn spec(from: LinkEnd, to: LinkEnd) -> LinkSpec {
        LinkSpec { from, to, head_delay: 0, rate: Rate::new(1_000_000_000) }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nic-capture-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// (type, body) of every block.
    fn blocks(b: &[u8]) -> Vec<(u32, &[u8])> {
        let mut out = Vec::new();
        let mut o = 0;
        while o < b.len() {
            let kind = u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
            let len = u32::from_le_bytes(b[o + 4..o + 8].try_into().unwrap()) as usize;
            assert_eq!(&b[o + 4..o + 8], &b[o + len - 4..o + len], "trailing length");
            out.push((kind, &b[o + 8..o + len - 4]));
            o += len;
        }
        out
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    /// (interface, time, captured length, original length, comment).
    fn records(b: &[u8]) -> Vec<(u32, u64, u32, u32, Option<String>)> {
        blocks(b)
            .into_iter()
            .filter(|(k, _)| *k == EPB)
            .map(|(_, p)| {
                let incl = u32_at(p, 12);
                let mut o = 20 + (incl as usize).next_multiple_of(4);
                let mut comment = None;
                while o + 4 <= p.len() {
                    let code = u16::from_le_bytes([p[o], p[o + 1]]);
                    let len = u16::from_le_bytes([p[o + 2], p[o + 3]]) as usize;
                    if code == OPT_COMMENT {
                        comment = Some(String::from_utf8(p[o + 4..o + 4 + len].to_vec()).unwrap());
                    }
                    o += 4 + len.next_multiple_of(4);
                }
                let t = (u32_at(p, 4) as u64) << 32 | u32_at(p, 8) as u64;
                (u32_at(p, 0), t, incl, u32_at(p, 16), comment)
            })
            .collect()
    }

    #[test]
    fn a_capture_has_an_interface_per_link_and_the_wire_bytes_as_frames() {
        let d = dir("format");
        let path = d.join("t.pcapng");
        let links = [
            spec(LinkEnd::Nic(3), LinkEnd::Switch { switch: 1, port: 7 }),
            spec(LinkEnd::Switch { switch: 1, port: 2 }, LinkEnd::Nic(0)),
        ];
        let mut c = Capture::create(&path, &links).unwrap();
        let hit = Hit { drop: true, corrupt: false, duplicate: true, outage: None };
        c.record(2_000_000_123, 1, &hit, &[0x81, 1, 2, 3, 4]);
        c.record(2_000_000_124, 0, &Hit::default(), &[9; 4]);
        assert_eq!(c.finish().unwrap(), 2);
        let b = std::fs::read(&path).unwrap();
        let bl = blocks(&b);
        assert_eq!(bl.iter().map(|x| x.0).collect::<Vec<_>>(), [SHB, IDB, IDB, EPB, EPB]);
        assert_eq!(u32_at(bl[0].1, 0), 0x1A2B_3C4D);
        let idb = bl[2].1;
        assert_eq!(u16::from_le_bytes([idb[0], idb[1]]), LINKTYPE_USER0);
        let text = String::from_utf8_lossy(idb);
        assert!(text.contains("link1") && text.contains("sw1.p2 -> node0"), "{text}");
        let r = records(&b);
        assert_eq!(r[0], (1, 2_000_000_123, 5, 5, Some("nicemu: dropped, duplicated".into())));
        assert_eq!(r[1], (0, 2_000_000_124, 4, 4, None));
        // The frame is the wire bytes, nothing before them.
        assert_eq!(&bl[3].1[20..25], &[0x81, 1, 2, 3, 4]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn records_come_out_in_time_order_whatever_order_they_arrive_in() {
        let d = dir("order");
        let path = d.join("t.pcapng");
        let links = [spec(LinkEnd::Nic(0), LinkEnd::Nic(1))];
        let mut c = Capture::create(&path, &links).unwrap();
        let none = Hit::default();
        // Ahead of the clock, then behind it: held, then released.
        c.record(50, 0, &none, &[1]);
        c.record(20, 0, &none, &[2]);
        c.record(20, 0, &none, &[3]);
        c.release(20);
        c.record(30, 0, &none, &[4]);
        c.release(40);
        // Behind what was written (30): merged into place at the end.
        c.record(10, 0, &none, &[5]);
        c.record(25, 0, &none, &[6]);
        c.record(60, 0, &none, &[7]);
        assert_eq!(c.late, 2);
        assert_eq!(c.finish().unwrap(), 7);
        let b = std::fs::read(&path).unwrap();
        let bl = blocks(&b);
        let got: Vec<(u64, u8)> = records(&b)
            .iter()
            .zip(bl.iter().filter(|x| x.0 == EPB))
            .map(|(r, (_, p))| (r.1, p[20]))
            .collect();
        assert_eq!(got, [(10, 5), (20, 2), (20, 3), (25, 6), (30, 4), (50, 1), (60, 7)]);
        assert!(!path.with_extension("merging").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_frame_longer_than_the_snaplen_is_cut_but_keeps_its_length() {
        let d = dir("snap");
        let path = d.join("t.pcapng");
        let mut c = Capture::create(&path, &[spec(LinkEnd::Nic(0), LinkEnd::Nic(1))]).unwrap();
        let hit = Hit { drop: false, corrupt: true, duplicate: false, outage: None };
        c.record(1, 0, &hit, &vec![7u8; SNAPLEN as usize + 10]);
        c.finish().unwrap();
        let b = std::fs::read(&path).unwrap();
        let r = records(&b);
        assert_eq!((r[0].2, r[0].3), (SNAPLEN, SNAPLEN + 10));
        assert_eq!(r[0].4.as_deref(), Some("nicemu: corrupted"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
