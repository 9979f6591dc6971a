//! `cargo xtask logs --node N [--cluster NAME] [--image ELF] [--follow]`:
//! decode a qemu NIC's defmt log.
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
/// line each. Err when the stream is malformed.
fn drain(
    dec: &mut dyn defmt_decoder::StreamDecoder,
    bytes: &[u8],
    can_recover: bool,
) -> crate::Result<()> {
    dec.received(bytes);
    loop {
        match dec.decode() {
            Ok(f) => crate::emit(&format!("{}\n", format_frame(&f))),
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
        drain(dec.as_mut(), &buf, can_recover)?;
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
