//! `cargo xtask build-fw`: the bare-metal MCP image (firmware/image,
//! riscv64imac-unknown-none-elf) built with cargo into `<target>/fw`
//! (beside the workspace's own target directory) and its size report
//! (text, data, bss from the ELF's section headers; the `.stack`
//! reservation is not counted).
//!
//! Also what the other commands share: where the workspace's target
//! directory is, building workspace binaries (host-programs' `pingpong` and
//! `stream`, nic-emu examples) with cargo, and installing missing programs.
//! Every build says what it builds on stderr before it starts, and
//! cargo's own progress shows.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use object::read::elf::{FileHeader, SectionHeader};
use object::{elf, Endianness, ReadCache, ReadRef};

use crate::prereq::FW_TARGET;

/// The image budget: text + data + bss must stay under this. The image
/// region is 256 KiB with the stack at its top; the budget keeps the MCP
/// to about half of it (the stack has the rest, over 100 KiB), as a
/// LANai 9's SRAM held the MCP beside its buffers. (It was 128 KiB until
/// selective repeat's placement of packets past a gap needed 2 KiB more.)
/// 140 KiB since the image is built for speed (opt-level "s",
/// firmware/image/Cargo.toml), not for the least size ("z", 131.3 KiB):
/// under QEMU the NIC CPU's time is TCG's, about proportional to the
/// instructions the MCP runs, and "s" runs about a third fewer per pass
/// for 5.0 KB more code (136.1 KiB; docs/design/performance.md).
/// 148 KiB since the offload interface and the echo offload (about 4 KB;
/// docs/offloads.md), with room for the next. 192 KiB since opt-level 3
/// (171.5 KiB at log level info: 15% fewer instructions than "s" for 23 KB
/// more code); the stack keeps 64 KiB, nine times the deepest measured
/// (about 7 KiB under a 64 KiB stream). 208 KiB since the collective
/// offload (about 27 KB of code, its software floating point included);
/// the stack keeps 48 KiB, about seven times the deepest measured. 212
/// KiB since the collectives' long vectors (their windows and the slots
/// past the SRAM map: 208.6 KiB); the stack keeps 44 KiB, about six
/// times the deepest measured.
pub const IMAGE_BUDGET: u64 = 212 * 1024;

/// The cargo target directory this xtask was built into (the workspace's,
/// or `$CARGO_TARGET_DIR`): xtask runs from `<target>/<profile>/xtask`
/// (`release` through the alias).
pub fn target_dir(root: &Path) -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .filter(|p| {
            p.file_name().is_some_and(|n| ["quick", "release", "debug"].iter().any(|x| n == *x))
        })
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| root.join("target"))
}

/// `<target>/release`: where the workspace's release binaries land.
pub fn release_dir(root: &Path) -> PathBuf {
    target_dir(root).join("release")
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Say on stderr what is about to be built (a line before every cargo
/// build a command starts, so a long first build is never silent), then
/// run `c`, a `cargo build` that shows cargo's own progress: what it
/// compiles, and on a terminal its progress bar; an up-to-date build
/// prints one `Finished` line.
fn build_saying(mut c: Command, what: &str, profile: &str) -> crate::Result<()> {
    eprintln!("{}", building_line(what, profile));
    let st = c.status().map_err(|e| format!("cannot run cargo to build {what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("building {what} failed ({st})"))
    }
}

/// The line printed before a build: `building WHAT (PROFILE)...`.
pub fn building_line(what: &str, profile: &str) -> String {
    format!("building {what} ({profile})...")
}

/// `cargo build --release ARGS` in the workspace, saying what it builds
/// (`build_saying`); errors shown.
pub fn cargo_build(root: &Path, args: &[&str], what: &str) -> crate::Result<()> {
    let mut c = Command::new(cargo());
    c.current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir(root))
        .args(["build", "--release"])
        .args(args);
    build_saying(c, what, "release")
}

/// The host programs every real-time command runs: host-programs'
/// `pingpong` and `stream`, the `nic-cluster` device process, the
/// `rt_alltoall` and `rt_baselines` examples. Returns `<target>/release`.
pub fn build_host_programs(root: &Path) -> crate::Result<PathBuf> {
    cargo_build(
        root,
        &[
            "-p",
            "host-programs",
            "--bins",
            "-p",
            "nic-emu",
            "--bin",
            "nic-cluster",
            "--example",
            "rt_alltoall",
            "--example",
            "rt_baselines",
        ],
        "the host programs (pingpong, stream, nic-cluster, rt_alltoall, rt_baselines)",
    )?;
    use_release_nic_cluster(root);
    Ok(release_dir(root))
}

/// Clusters and bandwidth managers this process starts run the
/// `nic-cluster` built in `<target>/release` (`$NIC_CLUSTER_BIN`, unless
/// the user set it): found "next to this program" they would be looked
/// for beside xtask, which the `cargo xtask` alias builds in
/// `<target>/quick`.
pub fn use_release_nic_cluster(root: &Path) {
    use nic_emu::realtime::process::{BINARY, BINARY_ENV};
    if std::env::var_os(BINARY_ENV).is_none() {
        std::env::set_var(BINARY_ENV, release_dir(root).join(BINARY));
    }
}

/// Install the firmware's Rust target when rustup lacks it (saying so).
pub fn ensure_fw_target() -> crate::Result<()> {
    if crate::prereq::has_fw_target() {
        return Ok(());
    }
    println!("installing the Rust target {FW_TARGET}: rustup target add {FW_TARGET}");
    let st = Command::new("rustup").args(["target", "add", FW_TARGET]).status().map_err(|e| {
        format!("cannot run rustup ({e}); install the target with `rustup target add {FW_TARGET}`")
    })?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("`rustup target add {FW_TARGET}` failed"))
    }
}

/// Is this process root (apt-get can install)?
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Install Debian packages with apt-get when running as root. Returns
/// false (after saying which command to run) when not root.
pub fn apt_install(packages: &[&str]) -> crate::Result<bool> {
    if !is_root() {
        println!("not root: install them with `sudo apt-get install -y {}`", packages.join(" "));
        return Ok(false);
    }
    println!("installing {} with apt-get (running as root)", packages.join(", "));
    let quiet = |c: &mut Command| {
        c.env("DEBIAN_FRONTEND", "noninteractive").stdout(Stdio::null());
    };
    let mut up = Command::new("apt-get");
    up.args(["update", "-qq"]);
    quiet(&mut up);
    let _ = up.status();
    let mut inst = Command::new("apt-get");
    inst.args(["install", "-y", "-qq"]).args(packages);
    quiet(&mut inst);
    let st = inst.status().map_err(|e| format!("cannot run apt-get: {e}"))?;
    if !st.success() {
        return Err(format!("`apt-get install -y {}` failed", packages.join(" ")));
    }
    Ok(true)
}

/// The firmware's own target directory: `<target>/fw`.
pub fn fw_target_dir(root: &Path, selftest: bool) -> PathBuf {
    target_dir(root).join(if selftest { "fw-selftest" } else { "fw" })
}

/// Build the image (installing the target if missing). Returns the ELF.
pub fn build_image(root: &Path, selftest: bool) -> crate::Result<PathBuf> {
    let level = std::env::var("DEFMT_LOG").unwrap_or_else(|_| "info".into());
    build_image_logging(root, selftest, &level)
}

/// The firmware's log levels (`defmt`'s, chosen when the image is built).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
    Off,
}

impl LogLevel {
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Off => "off",
        }
    }
}

/// `build_image` with the log level `level` (`DEFMT_LOG` syntax).
pub fn build_image_logging(root: &Path, selftest: bool, level: &str) -> crate::Result<PathBuf> {
    ensure_fw_target()?;
    let dir = fw_target_dir(root, selftest);
    let mut c = Command::new(cargo());
    c.current_dir(root.join("firmware/image"))
        .env("CARGO_TARGET_DIR", &dir)
        .env("DEFMT_LOG", level)
        .args(["build", "--release"]);
    if selftest {
        c.args(["--features", "selftest"]);
    }
    let what = format!(
        "the firmware image{} (firmware/image, {FW_TARGET}, log level {level})",
        if selftest { " with the self-test" } else { "" }
    );
    build_saying(c, &what, "release")?;
    let elf = dir.join(FW_TARGET).join("release").join("mcp-image");
    if !elf.is_file() {
        return Err(format!("cargo built nothing at {}", elf.display()));
    }
    Ok(elf)
}

/// Which offloads a measuring image is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloads {
    /// The image's default features: every offload compiled in.
    All,
    /// None: the image without its default offload features, and the
    /// multicast paths compiled out (`--cfg mcast_off`).
    None,
}

/// The image with its instruction counter (feature `poll-stats`: each
/// pass's `minstret` and the sum of its work, `cargo xtask bench
/// --firmware`), built into a target directory of its own
/// (`<target>/fw-stats`, `<target>/fw-stats-nooff`) so the image others
/// flash is never replaced by a measuring one. Returns the ELF.
pub fn build_measuring_image(root: &Path, offloads: Offloads) -> crate::Result<PathBuf> {
    ensure_fw_target()?;
    let sub = match offloads {
        Offloads::All => "fw-stats",
        Offloads::None => "fw-stats-nooff",
    };
    let dir = target_dir(root).join(sub);
    let image = root.join("firmware/image");
    let mut c = Command::new(cargo());
    c.current_dir(&image)
        .env("CARGO_TARGET_DIR", &dir)
        .env("DEFMT_LOG", "info")
        .args(["build", "--release"]);
    let mut features = vec!["poll-stats", "defmt"];
    if offloads == Offloads::None {
        // The offload features the image forwards to the MCP, where it
        // has them; the old switch for multicast meanwhile.
        c.arg("--no-default-features");
        let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
        flags.push_str(" --cfg mcast_off");
        c.env("RUSTFLAGS", flags.trim());
    } else {
        features.extend(image_offload_features(&image));
    }
    c.args(["--features", &features.join(",")]);
    let what = format!(
        "the measuring firmware image (firmware/image, features {}{})",
        features.join(", "),
        if offloads == Offloads::None { ", no offloads" } else { "" }
    );
    build_saying(c, &what, "release")?;
    let elf = dir.join(FW_TARGET).join("release").join("mcp-image");
    if !elf.is_file() {
        return Err(format!("cargo built nothing at {}", elf.display()));
    }
    Ok(elf)
}

/// The offload features firmware/image/Cargo.toml declares (`multicast`,
/// `rate`, `selective`, `echo`, `collective`: those it has).
fn image_offload_features(image: &Path) -> Vec<&'static str> {
    let toml = std::fs::read_to_string(image.join("Cargo.toml")).unwrap_or_default();
    ["multicast", "rate", "selective", "echo", "collective"]
        .into_iter()
        .filter(|f| toml.lines().any(|l| l.trim_start().starts_with(&format!("{f} ="))))
        .collect()
}

/// One allocated section of an ELF (name, size, flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub size: u64,
    pub addr: u64,
    pub alloc: bool,
    pub write: bool,
    pub exec: bool,
    pub nobits: bool,
}

/// The section headers of a 64-bit little-endian ELF, read through
/// `object` from `data`: a byte slice, or a `ReadCache` over a file that
/// reads only the ranges asked for (the image is sparse and GiBs long,
/// `.defmt` sits beside RAM, so only the headers and the section-name
/// table are read).
pub fn sections<'data, R: ReadRef<'data>>(data: R) -> crate::Result<Vec<Section>> {
    let header = elf::FileHeader64::<Endianness>::parse(data)
        .map_err(|e| format!("not a 64-bit little-endian ELF ({e})"))?;
    let endian = header.endian().map_err(|e| format!("malformed ELF: {e}"))?;
    if endian != Endianness::Little {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let table = header.sections(endian, data).map_err(|e| format!("malformed ELF: {e}"))?;
    let flag =
        |h: &elf::SectionHeader64<Endianness>, f: u32| h.sh_flags(endian) & u64::from(f) != 0;
    Ok(table
        .iter()
        .map(|h| Section {
            name: table
                .section_name(endian, h)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default(),
            size: h.sh_size(endian),
            addr: h.sh_addr(endian),
            alloc: flag(h, elf::SHF_ALLOC),
            write: flag(h, elf::SHF_WRITE),
            exec: flag(h, elf::SHF_EXECINSTR),
            nobits: h.sh_type(endian) == elf::SHT_NOBITS,
        })
        .collect())
}

/// The section headers of the ELF file at `path`.
pub fn file_sections(path: &Path) -> crate::Result<Vec<Section>> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    sections(&ReadCache::new(f)).map_err(|e| format!("{}: {e}", path.display()))
}

/// text (code and read-only data), data, bss of an image, as `size`
/// counts them; the `.stack` reservation and the `.defmt` table (not
/// loaded) are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeReport {
    pub text: u64,
    pub data: u64,
    pub bss: u64,
    pub stack: u64,
}

impl SizeReport {
    pub fn total(&self) -> u64 {
        self.text + self.data + self.bss
    }
}

pub fn size_report(secs: &[Section]) -> SizeReport {
    let mut r = SizeReport::default();
    for s in secs.iter().filter(|s| s.alloc && s.size > 0) {
        if s.name == ".stack" {
            r.stack += s.size;
        } else if s.name == ".defmt" || s.name == ".heap" {
            // The defmt string table is never loaded (placed beside RAM);
            // the heap is empty.
        } else if s.nobits {
            r.bss += s.size;
        } else if s.write {
            r.data += s.size;
        } else {
            r.text += s.size;
        }
    }
    r
}

fn kib(b: u64) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

/// Print the image's size report; Err when it breaks the budget.
pub fn report_size(elf: &Path) -> crate::Result<SizeReport> {
    let secs = file_sections(elf)?;
    let r = size_report(&secs);
    println!("image: {}", elf.display());
    println!(
        "  text {:>7} B   data {:>7} B   bss {:>7} B   total {:>7} B ({} of the {} budget; stack reserve {} not counted)",
        r.text,
        r.data,
        r.bss,
        r.total(),
        kib(r.total()),
        kib(IMAGE_BUDGET),
        kib(r.stack)
    );
    if r.total() >= IMAGE_BUDGET {
        return Err(format!(
            "the image is {} B (text + data + bss): over the {} B budget",
            r.total(),
            IMAGE_BUDGET
        ));
    }
    Ok(r)
}

/// `cargo xtask build-fw [--selftest]`.
pub fn build_fw(root: &Path, selftest: bool, log: LogLevel) -> crate::Result<ExitCode> {
    // `build_image_logging` says what it builds.
    let elf = build_image_logging(root, selftest, log.name())?;
    report_size(&elf)?;
    if selftest {
        println!("run it: qemu-system-riscv64 -M virt -m 8M -bios none -display none -semihosting-config enable=on,target=native -kernel {}  (exit status 0 = pass)", elf.display());
    } else {
        println!("flash it into a running cluster: cargo xtask flash --node N [--cluster NAME]");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(name: &str, size: u64, write: bool, nobits: bool) -> Section {
        Section { name: name.into(), size, addr: 0, alloc: true, write, exec: false, nobits }
    }

    #[test]
    fn size_report_leaves_out_the_stack_and_the_defmt_table() {
        let s = vec![
            sec(".text", 1000, false, false),
            sec(".rodata", 200, false, false),
            sec(".data", 300, true, false),
            sec(".bss", 40, true, true),
            sec(".stack", 4096, true, true),
            sec(".defmt", 1 << 31, false, false),
            Section { alloc: false, ..sec(".debug_info", 9999, false, false) },
        ];
        let r = size_report(&s);
        assert_eq!(r, SizeReport { text: 1200, data: 300, bss: 40, stack: 4096 });
        assert_eq!(r.total(), 1540);
    }

    #[test]
    fn a_file_that_is_not_an_elf_is_refused() {
        let junk = b"hello world, not an elf at all, really, not even close to one".to_vec();
        assert!(sections(&junk[..]).is_err());
    }

    #[test]
    fn a_real_elf_has_its_text_section_allocated_and_executable() {
        // This test binary is a 64-bit little-endian ELF on the hosts the
        // project runs on.
        let me = std::env::current_exe().unwrap();
        let secs = file_sections(&me).unwrap();
        let text = secs.iter().find(|s| s.name == ".text").expect("a .text section");
        assert!(text.alloc && text.exec && !text.write && !text.nobits && text.size > 0);
        assert!(secs.iter().any(|s| s.name == ".bss" && s.nobits && s.write));
    }
}
