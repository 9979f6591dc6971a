//! The device process's own descriptors of each node's port files (the
//! eight windows and the eight slices of host memory), and the one test
//! that decides whether a port may change hands: does any process but
//! this one (and the node's QEMU, which is given the same descriptors)
//! still have one of the port's files open or mapped?
//!
//! Each file is opened once here. Every mapping the device process makes
//! of it (`map_sram`, `map_host`) and the window descriptor handed to the
//! node's QEMU (`irq`) are duplicates of that one open file description;
//! a host process is handed a fresh open of its own (`control`). So
//! while a holder, or a child it forked, still maps a window or a slice,
//! the file has a second open description, and the kernel refuses this
//! process an exclusive lease on it (`F_SETLEASE F_WRLCK`: granted only
//! when the asking description is the only one open). The lease is
//! released at once; it is a question, not a lock.
//!
//! Owns the descriptors; touches nothing through them but the mappings
//! it makes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use nic_abi::map::{port_window, REGS};
use nic_abi::NUM_PORTS;
use nic_cluster_dir::{ClusterDir, MappedFile};

/// One node's port files, each open once (read-write).
pub(crate) struct NodeFiles {
    pub windows: Vec<File>,
    pub slices: Vec<File>,
}

/// Is a port's file still reached by another process?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Only this process (and the node's QEMU, through our descriptor).
    Alone,
    /// Another open description exists: some process has it open or mapped.
    Shared,
    /// The kernel cannot tell (leases off or not supported here).
    Unknown,
}

impl NodeFiles {
    /// Open node `node`'s windows and slices.
    pub fn open(dir: &ClusterDir, node: u32) -> io::Result<NodeFiles> {
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        let ports = 0..NUM_PORTS as u8;
        Ok(NodeFiles {
            windows: ports
                .clone()
                .map(|p| open(&dir.window_path(node, p)))
                .collect::<Result<_, _>>()?,
            slices: ports.map(|p| open(&dir.slice_path(node, p))).collect::<Result<_, _>>()?,
        })
    }

    /// The descriptor (a duplicate) of the file at `path`, if it is one of
    /// ours; else a fresh open.
    fn dup_or_open(&self, dir: &ClusterDir, node: u32, path: &Path) -> io::Result<File> {
        for p in 0..NUM_PORTS as u8 {
            if path == dir.window_path(node, p) {
                return self.windows[p as usize].try_clone();
            }
            if path == dir.slice_path(node, p) {
                return self.slices[p as usize].try_clone();
            }
        }
        OpenOptions::new().read(true).write(true).open(path)
    }

    /// Node `node`'s whole SRAM as the device process sees it (as
    /// `ClusterDir::map_sram`, the windows through our descriptors).
    pub fn map_sram(&self, dir: &ClusterDir, node: u32) -> io::Result<MappedFile> {
        let mut parts = vec![(REGS as u64, dir.regs_path(node))];
        parts.extend(
            (0..NUM_PORTS as u8)
                .map(|p| (port_window(p as usize) as u64, dir.window_path(node, p))),
        );
        MappedFile::open_overlaid_with(&dir.sram_path(node), &parts, |p| {
            self.dup_or_open(dir, node, p)
        })
    }

    /// Node `node`'s whole host memory (as `ClusterDir::map_host`, the
    /// slices through our descriptors).
    pub fn map_host(&self, dir: &ClusterDir, node: u32) -> io::Result<MappedFile> {
        let parts: Vec<_> =
            (0..NUM_PORTS as u8).map(|p| (dir.port_slice(p).0, dir.slice_path(node, p))).collect();
        MappedFile::open_overlaid_with(&dir.host_path(node), &parts, |p| {
            self.dup_or_open(dir, node, p)
        })
    }

    /// Do port `port`'s window and slice have no open description but
    /// ours? (Shared if either has another; Unknown if the kernel cannot
    /// say for either.)
    pub fn port_sharing(&self, port: u8) -> Sharing {
        let p = port as usize;
        match (sharing(&self.windows[p]), sharing(&self.slices[p])) {
            (Sharing::Shared, _) | (_, Sharing::Shared) => Sharing::Shared,
            (Sharing::Alone, Sharing::Alone) => Sharing::Alone,
            _ => Sharing::Unknown,
        }
    }
}

/// Ask for an exclusive lease on `f` and give it back at once.
pub(crate) fn sharing(f: &File) -> Sharing {
    ignore_lease_breaks();
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    let r = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) };
    if r == 0 {
        // SAFETY: as above; gives the lease back.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Sharing::Alone;
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EBUSY) => Sharing::Shared,
        _ => Sharing::Unknown,
    }
}

/// An open of a leased file by another process makes the kernel signal
/// the lease holder (SIGIO, whose default is to end the process). Our
/// leases last a few instructions and are never broken on purpose:
/// ignore the signal, once, process-wide (nothing else here uses SIGIO).
fn ignore_lease_breaks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: setting a signal's disposition to SIG_IGN installs no
        // handler code; no other part of the process relies on SIGIO.
        unsafe {
            libc::signal(libc::SIGIO, libc::SIG_IGN);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_opened_or_mapped_elsewhere_is_shared_and_alone_once_let_go() {
        let path = std::env::temp_dir().join(format!("nic-files-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(8192).unwrap();
        assert_eq!(sharing(&f), Sharing::Alone, "only our description");
        // Our own duplicate and our own mapping through it: still alone.
        let m = MappedFile::from_file(f.try_clone().unwrap(), &path, true).unwrap();
        assert_eq!(sharing(&f), Sharing::Alone, "a duplicate is the same description");
        // A second open description, mapped then closed: shared while mapped.
        let other = MappedFile::open(&path).unwrap();
        assert_eq!(sharing(&f), Sharing::Shared, "another mapping");
        drop(other);
        assert_eq!(sharing(&f), Sharing::Alone, "let go");
        drop(m);
        let _ = std::fs::remove_file(&path);
    }
}
