//! `cargo xtask logs --node N [--cluster NAME] [--image ELF] [--follow]`
//! (or `--file PATH` for a saved log): decode a qemu NIC's defmt log, a
//! panic's stack words into where it panicked.
//!
//! The bare-metal image writes raw defmt frames over semihosting to stdout,
//! which the device process captures to `<cluster>/node<N>/console.log`.
//! The frames name their format strings by a 16-bit index; the image's
//! `.defmt` section sits at 0x8000_0000 (linker/defmt-sram.x), so each
//! string's symbol address is 0x8000_0000 + index. defmt-decoder keys its
//! table by symbol address: we parse the ELF (mapped, never read whole: it
//! is a 2 GiB sparse file) and re-key the table by `address & 0xFFFF`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use defmt_decoder::{DecodeError, Frame, Table};

/// The image's defmt table, keyed by the 16-bit index the firmware sends.
pub fn load_table(elf: &Path) -> crate::Result<Table> {
    let file = File::open(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    // SAFETY: the file is mapped read-only and only parsed; an image is
    // replaced by rename (write_flash), never rewritten in place.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| format!("cannot map {}: {e}", elf.display()))?;
    let table = Table::parse(&map)
        .map_err(|e| format!("{}: reading the defmt table: {e}", elf.display()))?
        .ok_or_else(|| format!("{}: no .defmt section (not a defmt image)", elf.display()))?;
    rekey(table)
}

/// Mask every entry's key (symbol address) to its low 16 bits. The table
/// has no public constructor but is (de)serialisable: rewrite the keys of
/// its serialised form.
fn rekey(table: Table) -> crate::Result<Table> {
    let mut v = serde_json::to_value(&table)
        .map_err(|e| format!("cannot re-key the defmt table (serialising): {e}"))?;
    let entries = v
        .get_mut("entries")
        .and_then(|e| e.as_object_mut())
        .ok_or("defmt table without entries")?;
    let old = std::mem::take(entries);
    for (k, e) in old {
        let addr: u64 =
            k.parse().map_err(|_| format!("defmt table key `{k}` is not an address"))?;
        let index = (addr & 0xFFFF).to_string();
        if entries.insert(index.clone(), e).is_some() {
            return Err(format!("two defmt strings at index {index}"));
        }
    }
    serde_json::from_value(v).map_err(|e| format!("cannot re-key the defmt table: {e}"))
}

/// One line per frame: level, timestamp (`-` when the image has none), message.
pub fn format_frame(f: &Frame<'_>) -> String {
    let level = f.level().map_or("PRINT", |l| match l.as_str() {
        "trace" => "TRACE",
        "debug" => "DEBUG",
        "info" => "INFO",
        "warn" => "WARN",
        _ => "ERROR",
    });
    let ts = f.display_timestamp().map_or_else(|| "-".to_string(), |t| t.to_string());
    format!("{level:<5} {ts} {}", f.display_message())
}

/// Decode every complete frame of `bytes` (appended to `dec`), emitting a
/// line each (a panic's with its site, through `sites`). Err when the
/// stream is malformed.
fn drain(
    dec: &mut dyn defmt_decoder::StreamDecoder,
    bytes: &[u8],
    can_recover: bool,
    sites: &mut PanicSites,
) -> crate::Result<()> {
    dec.received(bytes);
    loop {
        match dec.decode() {
            Ok(f) => crate::emit(&format!("{}\n", sites.rewrite(&format_frame(&f)))),
            Err(DecodeError::UnexpectedEof) => return Ok(()),
            Err(DecodeError::Malformed) if can_recover => {
                crate::emit("(malformed frame skipped)\n");
            }
            Err(DecodeError::Malformed) => {
                return Err("malformed defmt frame (the log does not match the image?)".into())
            }
        }
    }
}

/// `cargo xtask logs --file PATH`: decode a saved log with `image` (else
/// the built image).
pub fn decode_file(root: &Path, log: &Path, image: Option<PathBuf>) -> crate::Result<ExitCode> {
    let bytes = std::fs::read(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let image = match image {
        Some(i) => i,
        None => crate::fw::build_image(root, false)?,
    };
    let table = load_table(&image)?;
    let mut sites = PanicSites::new(image.clone());
    let mut dec = table.new_stream_decoder();
    drain(dec.as_mut(), &bytes, table.encoding().can_recover(), &mut sites)?;
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask logs`.
pub fn run(
    root: &Path,
    node: u32,
    cluster: &str,
    image: Option<PathBuf>,
    follow: bool,
) -> crate::Result<ExitCode> {
    use host_driver::cluster::{self, ClusterDir};
    // A stopped cluster's directory may still hold the logs.
    let dir = match ClusterDir::open(cluster) {
        Ok(d) => {
            d.check_node(node).map_err(|e| e.to_string())?;
            if d.manifest().backend != cluster::ClusterBackend::Qemu {
                return Err(format!(
                    "cluster `{cluster}` runs on the {} backend, whose firmware keeps no log \
                     (logging is compiled into the qemu image only): read its NICs with \
                     `cargo xtask trace --cluster {cluster}`, or the counters a cluster run with `--stats` \
                     prints when it stops (docs/logs.md)",
                    d.manifest().backend
                ));
            }
            d.node_dir(node)
        }
        Err(e) => {
            let d = cluster::resolve(cluster).join(format!("node{node}"));
            if !d.join("console.log").is_file() {
                return Err(format!("{e} (and no {})", d.join("console.log").display()));
            }
            d
        }
    };
    let log = dir.join("console.log");
    // The image the NIC runs: its flash file, else the built image.
    let image = match image {
        Some(i) => i,
        None if dir.join("flash").is_file() => dir.join("flash"),
        None => crate::fw::build_image(root, false)?,
    };
    let table = load_table(&image)?;
    let mut sites = PanicSites::new(image.clone());
    let can_recover = table.encoding().can_recover();

    let mut f = File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut dec = table.new_stream_decoder();
    let mut pos = 0u64;
    let mut buf = Vec::new();
    loop {
        let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            // The NIC was reset: QEMU started over with a new console.log.
            crate::emit("(console.log restarted: NIC reset)\n");
            f = File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            dec = table.new_stream_decoder();
            pos = 0;
        }
        buf.clear();
        f.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
        f.read_to_end(&mut buf).map_err(|e| format!("{}: {e}", log.display()))?;
        pos += buf.len() as u64;
        drain(dec.as_mut(), &buf, can_recover, &mut sites)?;
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the firmware's panic line says (`panic [stack [w0, w1, ..]]`, the
/// words at the top of its stack: it keeps no locations in the image) made
/// into where it panicked: among the words are the return addresses of
/// the frames that led to the panic handler. The first that falls in a
/// function of our own (not `core`'s panic machinery, not the handler) is
/// the panic site, and the core function just before it says what kind of
/// panic it was. Built from the image's DWARF when the first panic comes.
pub struct PanicSites {
    image: PathBuf,
    ctx: Option<Result<Resolver, String>>,
}

struct Resolver {
    ctx:
        addr2line::Context<addr2line::gimli::EndianSlice<'static, addr2line::gimli::RunTimeEndian>>,
    text: std::ops::Range<u64>,
}

/// One return address: the function it is in (demangled) and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl PanicSites {
    pub fn new(image: PathBuf) -> PanicSites {
        PanicSites { image, ctx: None }
    }

    /// `line` with a panic's stack words replaced by its site, or as it is.
    pub fn rewrite(&mut self, line: &str) -> String {
        let Some(words) = stack_words(line) else { return line.to_string() };
        let head = &line[..line.find(" [stack [").unwrap_or(line.len())];
        let image = self.image.clone();
        let r = match self.ctx.get_or_insert_with(|| Resolver::load(&image)) {
            Ok(r) => r,
            Err(e) => return format!("{line}\n      (no panic site: {e})"),
        };
        let chain: Vec<Site> = words.iter().filter_map(|&w| r.site(w)).collect();
        match panic_site(&chain) {
            Some((kind, site)) => {
                // Our files relative to the repository (the DWARF has
                // the absolute paths of the machine that built it).
                let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
                let rel = |f: &str| {
                    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.into());
                    let root = format!("{}/", root.display());
                    f.strip_prefix(&root).unwrap_or(f).to_string()
                };
                let at = match (site.file.as_deref().map(rel), site.line) {
                    (Some(f), Some(l)) => format!("{f}:{l}"),
                    (Some(f), None) => f,
                    _ => "?".to_string(),
                };
                format!("{head} ({kind}) at {at}, in {}", site.function)
            }
            None => format!("{head} (no return address into our code among the stack words)"),
        }
    }
}

impl Resolver {
    fn load(elf: &Path) -> Result<Resolver, String> {
        use addr2line::gimli;
        use object::{Object, ObjectSection};
        let file = File::open(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
        // SAFETY: mapped read-only and only parsed (see load_table).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot map {}: {e}", elf.display()))?;
        // Kept for the rest of the command: the DWARF borrows from it.
        let map: &'static memmap2::Mmap = Box::leak(Box::new(map));
        let obj = object::File::parse(&**map).map_err(|e| format!("{}: {e}", elf.display()))?;
        let text = obj
            .section_by_name(".text")
            .map(|s| s.address()..s.address() + s.size())
            .ok_or_else(|| format!("{}: no .text", elf.display()))?;
        let endian = gimli::RunTimeEndian::Little;
        let load = |id: gimli::SectionId| -> Result<_, gimli::Error> {
            let data = obj.section_by_name(id.name()).and_then(|s| s.data().ok()).unwrap_or(&[]);
            Ok(gimli::EndianSlice::new(data, endian))
        };
        let dwarf =
            gimli::Dwarf::load(load).map_err(|e| format!("{}: DWARF: {e}", elf.display()))?;
        let ctx = addr2line::Context::from_dwarf(dwarf)
            .map_err(|e| format!("{}: DWARF: {e}", elf.display()))?;
        Ok(Resolver { ctx, text })
    }

    /// The innermost function and line at return address `ra` (the call
    /// is the instruction before it), or None outside the code.
    fn site(&self, ra: u64) -> Option<Site> {
        if !self.text.contains(&ra) || ra == self.text.start {
            return None;
        }
        let pc = ra - 1;
        let mut frames = self.ctx.find_frames(pc).skip_all_loads().ok()?;
        // Inlined functions come first, the function the address is in
        // last: the first frame is the innermost, which names the line.
        let f = frames.next().ok()??;
        let function = f
            .function
            .as_ref()
            .and_then(|n| n.demangle().ok().map(|d| d.into_owned()))
            .unwrap_or_else(|| "?".to_string());
        let (file, line) =
            f.location.map(|l| (l.file.map(str::to_string), l.line)).unwrap_or((None, None));
        Some(Site { function, file, line })
    }
}

/// The stack words of a decoded panic line, or None for any other line.
pub fn stack_words(line: &str) -> Option<Vec<u64>> {
    let rest = &line[line.find("panic [stack [")? + "panic [stack [".len()..];
    let list = &rest[..rest.find(']')?];
    list.split(',')
        .map(|w| {
            let w = w.trim();
            u64::from_str_radix(w.trim_start_matches("0x"), 16).ok()
        })
        .collect()
}

/// Is `function` part of the panic machinery (core's entry points, the
/// handler, its logging)?
fn machinery(function: &str) -> bool {
    function.starts_with("core::")
        || function.starts_with("mcp_image::panic")
        || function.starts_with("mcp_image::log::")
        || function.starts_with("defmt::")
        || function == "rust_begin_unwind"
}

/// The first site of our own in `chain` (return addresses from the
/// innermost frame out), with what kind of panic the machinery before it
/// says it was.
pub fn panic_site(chain: &[Site]) -> Option<(&'static str, &Site)> {
    let i = chain.iter().position(|s| !machinery(&s.function) && s.function != "?")?;
    let kind =
        chain[..i].iter().rev().find_map(|s| panic_kind(&s.function)).unwrap_or("explicit panic");
    Some((kind, &chain[i]))
}

/// What panicked, from the core function a panic went through.
fn panic_kind(function: &str) -> Option<&'static str> {
    let f = function;
    Some(if f.contains("panic_bounds_check") {
        "index out of bounds"
    } else if f.contains("slice_") && f.contains("_fail") {
        "slice range out of bounds"
    } else if f.contains("option::unwrap_failed") || f.contains("option::expect_failed") {
        "unwrap or expect on None"
    } else if f.contains("result::unwrap_failed") {
        "unwrap or expect on Err"
    } else if f.contains("div_by_zero") || f.contains("rem_by_zero") {
        "division by zero"
    } else if f.contains("_overflow") {
        "arithmetic overflow"
    } else if f.contains("assert_failed") {
        "assertion failed"
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(f: &str, line: u32) -> Site {
        Site { function: f.into(), file: Some("x.rs".into()), line: Some(line) }
    }

    #[test]
    fn the_stack_words_of_a_panic_line_and_of_no_other() {
        let l = "ERROR 12.000000 panic [stack [0x80001234, 0x0, 0xdeadbeef]]";
        assert_eq!(stack_words(l), Some(vec![0x8000_1234, 0, 0xdead_beef]));
        assert_eq!(stack_words("INFO - MCP running: node 0 of 2"), None);
    }

    #[test]
    fn the_site_is_the_first_frame_past_the_panic_machinery() {
        let chain = [
            site("core::panicking::panic_fmt", 1),
            site("core::panicking::panic_bounds_check", 2),
            site("mcp::recv::Recv::step", 30),
            site("main", 40),
        ];
        let (kind, s) = panic_site(&chain).unwrap();
        assert_eq!(
            (kind, s.function.as_str(), s.line),
            ("index out of bounds", "mcp::recv::Recv::step", Some(30))
        );
        let chain = [site("core::option::unwrap_failed", 1), site("mcp::Mcp::poll", 7)];
        assert_eq!(panic_site(&chain).unwrap().0, "unwrap or expect on None");
        assert_eq!(panic_site(&[site("core::panicking::panic_fmt", 1)]), None);
    }
}
