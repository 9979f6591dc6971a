//! `cargo xtask run`: start a live or qemu cluster, served by this
//! process, print where its files are and how host programs reach it, and
//! keep it up until Ctrl-C (`--backend sim` runs the demo scenario
//! instead: the sim is not a service).

use std::path::Path;
use std::process::ExitCode;

use host_driver::cluster::ClusterBackend;
use nic_emu::realtime::{qemu, RtConfig};

use crate::fw;
use crate::rt::{self, Backend};

/// `cargo xtask run --nodes N --backend sim|live|qemu [--name NAME]`.
pub fn run(
    root: &Path,
    nodes: usize,
    backend: Backend,
    name: &str,
    brm: bool,
    cpus: Vec<usize>,
    allow_uids: Vec<u32>,
) -> crate::Result<ExitCode> {
    let backend = match backend {
        Backend::Sim => {
            println!(
                "the sim backend is not a long-running service: it runs a scenario in virtual \
                 time and exits. Running the demo scenario (scenarios/demo-4node.toml); write \
                 your own and run it with `cargo xtask sim FILE`.\n"
            );
            return crate::demo::run_sim(false);
        }
        Backend::Live => ClusterBackend::Live,
        Backend::Qemu => ClusterBackend::Qemu,
    };
    let mut cfg = RtConfig::new(name, backend, nodes);
    cfg.cpus = cpus;
    cfg.allow_uids = allow_uids;
    if backend == ClusterBackend::Qemu {
        if !rt::ensure_qemu()? {
            return Err(format!("the qemu backend needs {}", qemu::QEMU_PROGRAM));
        }
        let elf = fw::build_image(root, false)?;
        fw::report_size(&elf)?;
        cfg.image = Some(elf);
    }
    if brm {
        let bins = fw::build_host_programs(root)?;
        cfg.brm = Some(nic_emu::realtime::BrmSetup {
            calibration: None,
            program: Some(bins.join(nic_emu::realtime::process::BINARY)),
        });
    }
    let stop = rt::stop_flag()?;
    let c = rt::start(cfg)?;
    rt::print_where(&c);
    println!(
        "host programs find it as `--cluster {name}`, e.g.\n  \
         target/release/pingpong --cluster {name} --node 1 --port 1 --peer 0 --peer-port 1 --role pong &\n  \
         target/release/pingpong --cluster {name} --node 0 --port 1 --peer 1 --peer-port 1 --role ping"
    );
    if backend == ClusterBackend::Qemu {
        println!("reflash a NIC: cargo xtask flash --node N --cluster {name} [IMAGE]");
    }
    println!("serving until Ctrl-C");
    c.serve_until(&stop);
    println!("\nstopping `{name}`");
    for note in c.notes() {
        println!("  device process: {note}");
    }
    c.stop().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
