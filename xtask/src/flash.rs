//! `cargo xtask flash`: write a firmware image (default: the one
//! build-fw builds) into a node's flash file of a running cluster; its
//! device process notices and resets that NIC.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use host_driver::cluster::{ClusterBackend, ClusterDir};

use crate::fw;

/// `cargo xtask flash --node N [IMAGE] [--cluster NAME]`.
pub fn run(
    root: &Path,
    node: u32,
    image: Option<PathBuf>,
    cluster: &str,
) -> crate::Result<ExitCode> {
    let dir = ClusterDir::open(cluster).map_err(|e| {
        format!("{e} (start one with `cargo xtask run --nodes N --backend qemu --name {cluster}`)")
    })?;
    let m = dir.manifest();
    if node >= m.nodes {
        return Err(format!(
            "node {node}: cluster `{}` has nodes 0 to {}",
            m.name,
            m.nodes.saturating_sub(1)
        ));
    }
    let image = match image {
        Some(i) => i,
        None => {
            let elf = fw::build_image(root, false)?;
            fw::report_size(&elf)?;
            elf
        }
    };
    nic_emu::realtime::qemu::check_riscv_elf(&image)?;
    let flash = dir.flash_path(node);
    nic_emu::realtime::qemu::write_flash(&image, &flash)
        .map_err(|e| format!("writing {}: {e}", flash.display()))?;
    println!("flashed {} into {}", image.display(), flash.display());
    if m.backend == ClusterBackend::Qemu {
        println!(
            "cluster `{}` (device process {}) resets node {node}: its QEMU guest restarts with the new image and its ports close",
            m.name, m.pid
        );
    } else {
        println!(
            "cluster `{}` runs the live backend (native MCP): node {node} is reset, and keeps running the native MCP",
            m.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
