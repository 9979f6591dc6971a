//! QEMU as the NIC CPU: one `qemu-system-riscv64 -M virt` per NIC, its
//! RAM the node's `sram` file (so guest address 0x8000_0000 + off is SRAM
//! offset off), except the register page and the port windows: the
//! node's `regs` and `port<P>.win` files, shown to the guest as
//! ivshmem PCI devices (the register page at slot [`REGS_PCI_SLOT`], an
//! `ivshmem-doorbell` whose server is the device process (`irq`), so
//! that it can interrupt the CPU; port P's window at `REGS_PCI_SLOT + 1 +
//! P`, an `ivshmem-doorbell` too, whose file the device process hands
//! over on `node<N>/win<P>.sock`), whose BARs the image maps at 0x4000_0000 + off
//! (firmware/image/src/pci.rs).
//! Then the node's `flash` file as the kernel, semihosting output
//! (raw defmt frames) captured to `<node>/console.log` and QEMU's own
//! messages to `<node>/qemu.log`.
//!
//! Also: finding programs on PATH (so a missing QEMU is a clear error, not
//! a silent skip), writing a firmware image into a flash file (packed: an
//! ELF may carry huge zero-filled non-loaded sections), checking
//! that a file is a RISC-V ELF, and reading a process's CPU time from
//! /proc (to measure what an idle NIC costs).
//!
//! QEMU is started through `setpriv --pdeathsig KILL` when util-linux's
//! setpriv is there, so the guests die with the thread that started them
//! (the supervisor) even if the device process is killed outright.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nic_abi::NUM_PORTS;
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

/// Guest physical address of SRAM offset 0 (QEMU virt's RAM base).
pub const GUEST_RAM_BASE: u64 = 0x8000_0000;

/// PCI slot (bus 0) of the `ivshmem-doorbell` device showing the node's
/// `regs` file (and interrupting its CPU); port P's window file is at the slot `REGS_PCI_SLOT + 1 +
/// P`. The image looks for them there (firmware/image/src/pci.rs).
pub const REGS_PCI_SLOT: u32 = 1;

/// Is `path` a firmware image the NIC CPU can boot? A 64-bit
/// little-endian RISC-V executable ELF whose program headers lie inside
/// the file, whose every loadable segment's bytes lie inside the file and
/// whose memory lies inside the image region of SRAM (`nic_abi::map`), and
/// whose entry point is in an executable loaded segment. Only the headers
/// are read (an image is sparse and may be GiBs long). Err says what is
/// wrong, naming the file.
pub fn check_riscv_elf(path: &Path) -> Result<(), String> {
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mut read = |off: u64, buf: &mut [u8]| -> io::Result<()> {
        f.seek(SeekFrom::Start(off))?;
        f.read_exact(buf)
    };
    let base = GUEST_RAM_BASE + nic_abi::map::IMAGE as u64;
    check_elf(&mut read, len, base..base + nic_abi::map::IMAGE_SIZE as u64)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The smallest image [`check_riscv_elf`] takes: one executable loadable
/// segment holding `code` at the image base (file offset 0x1000), the
/// entry point at its first byte. For tests of flashing and booting.
pub fn minimal_image(code: &[u8]) -> Vec<u8> {
    let base = GUEST_RAM_BASE + nic_abi::map::IMAGE as u64;
    let mut b = vec![0u8; 0x1000 + code.len()];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[6] = 1; // version
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // EXEC
    b[18..20].copy_from_slice(&0xF3u16.to_le_bytes()); // RISC-V
    b[24..32].copy_from_slice(&base.to_le_bytes()); // entry
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // program headers
    b[52..54].copy_from_slice(&64u16.to_le_bytes());
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&1u16.to_le_bytes());
    let p = &mut b[64..120];
    p[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    p[4..8].copy_from_slice(&5u32.to_le_bytes()); // R X
    p[8..16].copy_from_slice(&0x1000u64.to_le_bytes());
    p[16..24].copy_from_slice(&base.to_le_bytes());
    p[24..32].copy_from_slice(&base.to_le_bytes());
    p[32..40].copy_from_slice(&(code.len() as u64).to_le_bytes());
    p[40..48].copy_from_slice(&(code.len() as u64).to_le_bytes());
    b[0x1000..].copy_from_slice(code);
    b
}

/// The checks of [`check_riscv_elf`] on a file of `len` bytes read
/// through `read` (offset, buffer), for the guest address range `region`.
pub fn check_elf(
    read: &mut dyn FnMut(u64, &mut [u8]) -> io::Result<()>,
    len: u64,
    region: std::ops::Range<u64>,
) -> Result<(), String> {
    let mut h = [0u8; 64];
    read(0, &mut h).map_err(|_| format!("too short for an ELF header ({len} bytes)"))?;
    if &h[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    use nic_abi::le::{get_u16 as u16_at, get_u32 as u32_at, get_u64 as u64_at};
    if h[4] != 2 || h[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let machine = u16_at(&h, 18);
    if machine != 0xF3 {
        return Err(format!("an ELF for machine {machine:#x}, not RISC-V (0xf3)"));
    }
    if u16_at(&h, 16) != 2 {
        return Err("not an executable ELF (e_type is not EXEC)".into());
    }
    let entry = u64_at(&h, 24);
    let (phoff, phentsize, phnum) = (u64_at(&h, 32), u16_at(&h, 54) as u64, u16_at(&h, 56) as u64);
    if phnum == 0 || phentsize < 56 {
        return Err("no program headers".into());
    }
    let table_end = phnum.checked_mul(phentsize).and_then(|n| n.checked_add(phoff));
    if table_end.is_none_or(|e| e > len) {
        return Err(format!("its program headers lie past the end of the file ({len} bytes)"));
    }
    let (mut loads, mut entry_ok) = (0, false);
    for i in 0..phnum {
        let mut p = [0u8; 56];
        read(phoff + i * phentsize, &mut p).map_err(|e| format!("program header {i}: {e}"))?;
        if u32_at(&p, 0) != 1 {
            continue; // not PT_LOAD
        }
        let (flags, off, paddr) = (u32_at(&p, 4), u64_at(&p, 8), u64_at(&p, 24));
        let (filesz, memsz) = (u64_at(&p, 32), u64_at(&p, 40));
        if memsz == 0 {
            continue;
        }
        loads += 1;
        if off.checked_add(filesz).is_none_or(|e| e > len) {
            return Err(format!(
                "loadable segment {i} ({filesz} bytes at file offset {off:#x}) lies past the \
                 end of the file ({len} bytes): a truncated image?"
            ));
        }
        if filesz > memsz {
            return Err(format!("loadable segment {i}: {filesz} file bytes in {memsz} of memory"));
        }
        let end = paddr.checked_add(memsz);
        if paddr < region.start || end.is_none_or(|e| e > region.end) {
            return Err(format!(
                "loadable segment {i} ({memsz} bytes at {paddr:#x}) lies outside the image \
                 region {:#x}..{:#x}",
                region.start, region.end
            ));
        }
        entry_ok |= flags & 1 != 0 && (paddr..paddr + memsz).contains(&entry);
    }
    if loads == 0 {
        return Err("no loadable segment".into());
    }
    if !entry_ok {
        return Err(format!("its entry point {entry:#x} is in no executable loaded segment"));
    }
    Ok(())
}

/// Copy `image` to `flash` through a temporary file and a rename, so the
/// device process never sees half an image. An ELF is written packed: its
/// zero-filled non-loaded sections (the 2 GiB `.defmt`) take no bytes, so
/// the flash file is as long as the image needs (see `elfpack`). Anything
/// else is copied as it is, holes in the source (found with
/// SEEK_DATA/SEEK_HOLE) staying holes.
pub fn write_flash(image: &Path, flash: &Path) -> io::Result<()> {
    let mut src = File::open(image)?;
    let len = src.metadata()?.len();
    let tmp = flash.with_extension(format!("tmp{}", std::process::id()));
    let mut dst = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(nic_cluster_dir::cluster::PRIVATE)
        .open(&tmp)?;
    if let Some(packed) = crate::elfpack::pack(&mut src, len)? {
        dst.write_all(&packed)?;
        dst.sync_all()?;
        drop(dst);
        return fs::rename(&tmp, flash);
    }
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
#[derive(Debug)]
pub(crate) struct QemuSpec {
    pub program: PathBuf,
    /// util-linux setpriv, if found (for --pdeathsig).
    pub setpriv: Option<PathBuf>,
    /// util-linux taskset and the CPUs to run the guests on, if any were
    /// asked for (`RtConfig::guest_cpus`).
    pub pin: Option<(PathBuf, Vec<usize>)>,
    pub sram_size: u64,
    pub extra_args: Vec<String>,
    /// Each node's gdbstub: a socket listening on 127.0.0.1, bound and held
    /// by this process for the cluster's life and handed to every QEMU the
    /// node runs (`-chardev socket,fd=N`). Binding it here, not in QEMU,
    /// leaves no moment in which another program can take the port, and a
    /// guest restarted by a reset or a reflash keeps its port.
    pub gdb: Vec<TcpListener>,
}

impl QemuSpec {
    /// The command line for `node`: its gdbstub (`gdb`), the guest halted
    /// at its first instruction (`-S`) if `halted`. The listening socket's
    /// descriptor is inherited by the child (see `spawn`).
    pub fn command(&self, dir: &ClusterDir, node: u32, halted: bool) -> Command {
        // [setpriv --pdeathsig KILL --] [taskset -c CPUS] qemu ...
        let mut prefix: Vec<std::ffi::OsString> = Vec::new();
        if let Some(sp) = &self.setpriv {
            prefix.extend([
                sp.as_os_str().into(),
                "--pdeathsig".into(),
                "KILL".into(),
                "--".into(),
            ]);
        }
        if let Some((ts, cpus)) = &self.pin {
            let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
            prefix.extend([ts.as_os_str().into(), "-c".into(), list.join(",").into()]);
        }
        let mut c = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&self.program);
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
        // The register page and the port windows: files of their own (a
        // host process is given only its part), as shared-memory PCI
        // devices at fixed slots. The register page's device is also the
        // CPU's interrupt: the device process's server on the node's
        // irq.sock hands QEMU the `regs` file and an eventfd (`irq`).
        c.arg("-chardev")
            .arg(format!("socket,id=regs,path={}", crate::irq::socket_path(dir, node).display()))
            .arg("-device")
            .arg(format!("ivshmem-doorbell,chardev=regs,vectors=1,addr={REGS_PCI_SLOT}"));
        // Each window's file comes from the device process too (its own
        // open of it, which QEMU then shares: how the device process tells
        // whether anyone else still maps a port's window); its vector is
        // never raised.
        for (slot, p) in (REGS_PCI_SLOT + 1..).zip(0..NUM_PORTS as u8) {
            let sock = crate::irq::window_socket_path(dir, node, p);
            c.arg("-chardev")
                .arg(format!("socket,id=win{p},path={}", sock.display()))
                .arg("-device")
                .arg(format!("ivshmem-doorbell,chardev=win{p},vectors=1,addr={slot}"));
        }
        if let Some(l) = self.gdb.get(node as usize) {
            let fd = l.as_raw_fd();
            c.arg("-chardev")
                .arg(format!("socket,id=gdb,fd={fd},server=on,wait=off,nodelay=on"))
                .args(["-gdb", "chardev:gdb"]);
        }
        if halted {
            c.arg("-S");
        }
        c.args(&self.extra_args);
        c
    }

    /// Start the guest of `node` (as `command`): stdout (semihosting) to
    /// console.log, stderr to qemu.log.
    pub fn spawn(&self, dir: &ClusterDir, node: u32, halted: bool) -> io::Result<Child> {
        let nd = dir.node_dir(node);
        let console = File::create(nd.join("console.log"))?;
        let log = File::create(nd.join("qemu.log"))?;
        let mut c = self.command(dir, node, halted);
        if let Some(l) = self.gdb.get(node as usize) {
            let fd = l.as_raw_fd();
            // SAFETY: runs in the forked child before exec, and only clears
            // FD_CLOEXEC on a descriptor this process holds open (the
            // node's gdbstub listener) with fcntl, which is
            // async-signal-safe; it touches no memory of the parent.
            unsafe {
                c.pre_exec(move || {
                    let fd = rustix::fd::BorrowedFd::borrow_raw(fd);
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                    Ok(())
                });
            }
        }
        c.stdin(Stdio::null()).stdout(console).stderr(log).spawn()
    }
}

/// One gdbstub listener per guest on 127.0.0.1, each on a port of its own
/// the OS picks, except node `given.0`'s on port `given.1` (asked for on
/// the command line; an error if it is taken).
pub fn gdb_listeners(n: usize, given: Option<(usize, u16)>) -> io::Result<Vec<TcpListener>> {
    (0..n)
        .map(|node| {
            let port = given.filter(|g| g.0 == node).map_or(0, |g| g.1);
            TcpListener::bind(("127.0.0.1", port)).map_err(|e| {
                io::Error::new(e.kind(), format!("gdbstub of node {node} on 127.0.0.1:{port}: {e}"))
            })
        })
        .collect()
}

/// CPU time (user + system, seconds) process `pid` has used, from
/// `/proc/<pid>/stat`. None if it cannot be read.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

#[cfg(test)]
mod image_checks {
    use super::*;

    const BASE: u64 = GUEST_RAM_BASE;

    fn elf(code: usize) -> Vec<u8> {
        minimal_image(&vec![0x13; code]) // addi x0, x0, 0 (bytes of nops)
    }

    fn check(b: &[u8]) -> Result<(), String> {
        let mut read = |off: u64, buf: &mut [u8]| -> io::Result<()> {
            let s = b
                .get(off as usize..off as usize + buf.len())
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(s);
            Ok(())
        };
        check_elf(&mut read, b.len() as u64, BASE..BASE + 0x4_0000)
    }

    fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn a_well_formed_image_passes() {
        assert_eq!(check(&elf(256)), Ok(()));
    }

    #[test]
    fn a_truncated_image_is_refused() {
        let b = elf(256);
        let e = check(&b[..b.len() - 10]).unwrap_err();
        assert!(e.contains("lies past the end of the file"), "{e}");
        let e = check(&b[..100]).unwrap_err();
        assert!(e.contains("program headers lie past the end"), "{e}");
        assert!(check(&b[..20]).unwrap_err().contains("too short for an ELF header"));
    }

    #[test]
    fn garbage_and_foreign_files_are_refused() {
        assert_eq!(check(&[0x5a; 4096]).unwrap_err(), "not an ELF file");
        let mut b = elf(64);
        b[18] = 0x3e; // x86-64
        assert!(check(&b).unwrap_err().contains("not RISC-V"));
        let mut b = elf(64);
        b[4] = 1;
        assert!(check(&b).unwrap_err().contains("64-bit little-endian"));
    }

    #[test]
    fn segments_outside_the_image_region_and_a_stray_entry_are_refused() {
        let mut b = elf(64);
        set_u64(&mut b, 64 + 24, BASE + 0x4_0000 - 32); // paddr: runs past the end
        assert!(check(&b).unwrap_err().contains("outside the image region"));
        let mut b = elf(64);
        set_u64(&mut b, 64 + 40, u64::MAX); // memsz: wraps
        assert!(check(&b).unwrap_err().contains("outside the image region"));
        let mut b = elf(64);
        set_u64(&mut b, 24, BASE + 0x1000); // entry outside the segment
        assert!(check(&b).unwrap_err().contains("entry point"));
        let mut b = elf(64);
        set_u64(&mut b, 64 + 40, 32); // more file bytes than memory
        assert!(check(&b).unwrap_err().contains("file bytes in"));
    }

    #[test]
    fn check_riscv_elf_names_the_file() {
        let dir = std::env::temp_dir().join(format!("elfcheck-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.elf");
        fs::write(&good, elf(128)).unwrap();
        assert_eq!(check_riscv_elf(&good), Ok(()));
        let cut = dir.join("cut.elf");
        fs::write(&cut, &elf(128)[..0x1000 + 64]).unwrap();
        let e = check_riscv_elf(&cut).unwrap_err();
        assert!(e.starts_with(&format!("{}: loadable segment 0", cut.display())), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod gdb_ports {
    use super::*;

    #[test]
    fn each_node_gets_a_port_of_its_own_and_a_taken_one_is_named() {
        let ls = gdb_listeners(3, None).unwrap();
        let mut ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert!(ports.iter().all(|&p| p != 0));
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 3, "{ports:?}");
        // The listener is held: asking for node 1 on node 0's port fails,
        // naming the node and the port.
        let taken = ls[0].local_addr().unwrap().port();
        let e = gdb_listeners(2, Some((1, taken))).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("gdbstub of node 1 on 127.0.0.1:{taken}: ")), "{msg}");
        // The sockets are listening already: a debugger may connect before
        // any QEMU runs (it is served once one does).
        assert!(std::net::TcpStream::connect(("127.0.0.1", taken)).is_ok());
    }
}
