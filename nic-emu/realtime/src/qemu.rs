//! QEMU as the NIC CPU: one `qemu-system-riscv64 -M virt` per NIC, its
//! RAM the node's `sram` file (so guest address 0x8000_0000 + off is SRAM
//! offset off), the node's `flash` file as the kernel, semihosting output
//! (raw defmt frames) captured to `<node>/console.log` and QEMU's own
//! messages to `<node>/qemu.log`.
//!
//! Also: finding programs on PATH (so a missing QEMU is a clear error, not
//! a silent skip), writing a firmware image into a flash file (sparse
//! aware: an ELF may carry huge zero-filled non-loaded sections), checking
//! that a file is a RISC-V ELF, and reading a process's CPU time from
//! /proc (to measure what an idle NIC costs).
//!
//! QEMU is started through `setpriv --pdeathsig KILL` when util-linux's
//! setpriv is there, so the guests die with the thread that started them
//! (the supervisor) even if the device process is killed outright.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nic_cluster_dir::ClusterDir;

/// The QEMU board needs this much guest RAM for its device tree to land
/// above the ABI's SRAM map: QEMU puts the FDT 2 MiB below the top of RAM
/// (aligned down to 2 MiB), i.e. at 6 MiB of 8.
pub const QEMU_SRAM_MIN: u64 = 8 << 20;

/// The default QEMU program.
pub const QEMU_PROGRAM: &str = "qemu-system-riscv64";

/// Where QEMU 7.2 puts the flattened device tree in guest RAM of `size`
/// bytes (offset into SRAM): `align_down(size - fdt_size, 2 MiB)` with a
/// device tree well under 2 MiB.
pub fn fdt_offset(size: u64) -> u64 {
    size.saturating_sub(1) / (2 << 20) * (2 << 20)
}

/// `program` as found on PATH (or as a path, if it names one).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|c| c.is_file())
}

/// Is `path` an ELF for RISC-V (e_machine 0xF3)? Err says what it is not.
pub fn check_riscv_elf(path: &Path) -> Result<(), String> {
    let mut h = [0u8; 20];
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.read_exact(&mut h).map_err(|_| format!("{}: too short for an ELF", path.display()))?;
    if &h[..4] != b"\x7fELF" {
        return Err(format!("{}: not an ELF file", path.display()));
    }
    let machine = u16::from_le_bytes([h[18], h[19]]);
    if machine != 0xF3 {
        return Err(format!(
            "{}: an ELF for machine {machine:#x}, not RISC-V (0xf3)",
            path.display()
        ));
    }
    Ok(())
}

/// Copy `image` to `flash` through a temporary file and a rename, so the
/// device process never sees half an image. Holes in the source (found
/// with SEEK_DATA/SEEK_HOLE) stay holes.
pub fn write_flash(image: &Path, flash: &Path) -> io::Result<()> {
    let mut src = File::open(image)?;
    let len = src.metadata()?.len();
    let tmp = flash.with_extension(format!("tmp{}", std::process::id()));
    let mut dst = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
    let mut off = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    while off < len {
        let data = match rustix::fs::seek(&src, rustix::fs::SeekFrom::Data(off)) {
            Ok(d) => d,
            // ENXIO: no data after off (only a hole to the end).
            Err(e) if e == rustix::io::Errno::NXIO => break,
            // No SEEK_DATA here: copy everything.
            Err(_) => off,
        };
        let hole = rustix::fs::seek(&src, rustix::fs::SeekFrom::Hole(data)).unwrap_or(len).min(len);
        src.seek(SeekFrom::Start(data))?;
        dst.seek(SeekFrom::Start(data))?;
        let mut left = hole - data;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            src.read_exact(&mut buf[..k])?;
            dst.write_all(&buf[..k])?;
            left -= k as u64;
        }
        off = hole;
    }
    dst.set_len(len)?;
    dst.sync_all()?;
    drop(dst);
    fs::rename(&tmp, flash)
}

/// How to start the guests.
#[derive(Debug, Clone)]
pub(crate) struct QemuSpec {
    pub program: PathBuf,
    /// util-linux setpriv, if found (for --pdeathsig).
    pub setpriv: Option<PathBuf>,
    pub sram_size: u64,
    pub extra_args: Vec<String>,
}

impl QemuSpec {
    /// The command line for `node` (halted with a gdbstub on `gdb_port`).
    pub fn command(&self, dir: &ClusterDir, node: u32, gdb_port: Option<u16>) -> Command {
        let mut c = match &self.setpriv {
            Some(sp) => {
                let mut c = Command::new(sp);
                c.arg("--pdeathsig").arg("KILL").arg("--").arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        let mib = self.sram_size >> 20;
        c.arg("-machine")
            .arg("virt,memory-backend=sram")
            .arg("-object")
            .arg(format!(
                "memory-backend-file,id=sram,size={},mem-path={},share=on",
                self.sram_size,
                dir.sram_path(node).display()
            ))
            .arg("-m")
            .arg(format!("{mib}M"))
            .args(["-smp", "1", "-bios", "none"])
            .arg("-kernel")
            .arg(dir.flash_path(node))
            .args(["-display", "none", "-serial", "none", "-monitor", "none", "-nodefaults"])
            .args(["-semihosting-config", "enable=on,target=native"]);
        if let Some(port) = gdb_port {
            c.arg("-S").arg("-gdb").arg(format!("tcp:127.0.0.1:{port}"));
        }
        c.args(&self.extra_args);
        c
    }

    /// Start the guest of `node`: stdout (semihosting) to console.log,
    /// stderr to qemu.log.
    pub fn spawn(&self, dir: &ClusterDir, node: u32, gdb_port: Option<u16>) -> io::Result<Child> {
        let nd = dir.node_dir(node);
        let console = File::create(nd.join("console.log"))?;
        let log = File::create(nd.join("qemu.log"))?;
        self.command(dir, node, gdb_port).stdin(Stdio::null()).stdout(console).stderr(log).spawn()
    }
}

/// CPU time (user + system, seconds) process `pid` has used, from
/// /proc/<pid>/stat. None if it cannot be read.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}
