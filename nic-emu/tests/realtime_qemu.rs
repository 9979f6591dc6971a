//! The qemu backend: one qemu-system-riscv64 per NIC runs the bare-metal
//! MCP image (built here with cargo for the riscv target) with the node's
//! SRAM file as its RAM; nic-emu runs the engines and the fabric. These
//! tests FAIL, naming what is missing, when QEMU or the riscv target is
//! not installed: they are never skipped.

mod rt;

use std::time::{Duration, Instant};

use host_driver::cluster::{ClusterBackend, ClusterDir};
use nic_abi::map;
use nic_abi::regs::{self, reg};
use nic_emu::realtime::{qemu, RtCluster, RtConfig, RtError};

#[test]
fn a_qemu_cluster_boots_the_image_from_flash_with_the_device_tree_above_the_map() {
    let c = rt::qemu_cluster("boot", 2);
    let d = ClusterDir::open_path(c.path()).unwrap();
    assert_eq!(d.manifest().backend, ClusterBackend::Qemu);
    assert!(d.manifest().sram_size >= qemu::QEMU_SRAM_MIN);
    for node in 0..2u32 {
        assert!(c.qemu_pid(node as usize).is_some());
        let s = d.map_sram(node).unwrap();
        assert_eq!(s.load_u32(reg(regs::FW_STATUS) as u64), Some(regs::FW_RUNNING));
        // QEMU's device tree (magic d00dfeed, big-endian) sits above the map.
        let fdt = qemu::fdt_offset(d.manifest().sram_size);
        assert!(fdt >= map::MAP_END as u64);
        let mut m = [0u8; 4];
        s.read(fdt, &mut m);
        assert_eq!(m, [0xd0, 0x0d, 0xfe, 0xed], "no device tree at {fdt:#x}");
        // The image came from flash; its first instruction is in IMAGE.
        let mut w = [0u8; 4];
        s.read(map::IMAGE as u64, &mut w);
        assert_ne!(w, [0; 4]);
    }
    // The flash file is as long as the image needs: the ELF's loaded
    // bytes, symbols and debug information, without the 2 GiB of zeros
    // its `.defmt` section spans (packed by write_flash), and no holes.
    {
        use std::os::unix::fs::MetadataExt;
        let f = std::fs::metadata(d.flash_path(0)).unwrap();
        assert!(f.len() < 4 << 20, "flash is {} bytes", f.len());
        assert!(
            f.blocks() * 512 >= f.len(),
            "flash has holes: {} bytes, {} blocks",
            f.len(),
            f.blocks()
        );
    }
    // The guest logs (defmt frames over semihosting) land in console.log.
    let t = Instant::now();
    let console = d.node_dir(0).join("console.log");
    while std::fs::metadata(&console).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "nothing in {}", console.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    let path = c.path().to_path_buf();
    let pids: Vec<u32> = (0..2).filter_map(|n| c.qemu_pid(n)).collect();
    c.stop().unwrap();
    assert!(!path.exists());
    for pid in pids {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "QEMU {pid} still runs");
    }
}

#[test]
fn pingpong_and_stream_between_two_host_processes_on_qemu() {
    let c = rt::qemu_cluster("pp", 2);
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 100);
    let r = rt::stream(c.path(), (0, 2), (1, 2), 65536, 20);
    assert!(String::from_utf8_lossy(&r.stdout).contains("content and order checked"));
    assert_eq!(c.nic_stats(1).counters.device.rx_crc_bad, 0);
}

#[test]
fn four_nodes_all_to_all_on_qemu_every_message_checked() {
    let c = rt::qemu_cluster("a2a", 4);
    rt::alltoall(c.path(), 4, 2, 2000, 10);
}

#[test]
fn reflashing_a_qemu_nic_restarts_its_guest_and_peers_recover() {
    let c = rt::qemu_cluster("reflash", 2);
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 20);
    let old = c.qemu_pid(1).unwrap();
    qemu::write_flash(&rt::firmware_image(), &c.dir().flash_path(1)).unwrap();
    let t = Instant::now();
    while c.qemu_pid(1).is_none_or(|p| p == old) {
        assert!(t.elapsed() < Duration::from_secs(10), "the guest was not restarted");
        std::thread::sleep(Duration::from_millis(10));
    }
    c.wait_running(Duration::from_secs(20)).unwrap();
    assert_eq!(c.nic_stats(1).counters.resets, 1);
    // A new boot, whose stream nonce differs from the last one's even
    // though its guest's clock started again from zero.
    let boots =
        |n: u32| c.dir().map_sram(n).unwrap().load_u32(reg(regs::BOOT_COUNT) as u64).unwrap();
    assert_eq!((boots(0), boots(1)), (1, 2));
    assert_eq!(c.qemu_pid(0).map(|_| c.nic_stats(0).counters.resets), Some(0));
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 20);
}

#[test]
fn a_node_file_cut_under_a_qemu_cluster_is_set_back_and_its_nic_reset() {
    let c = rt::qemu_cluster("cut", 3);
    rt::cut_node_files(&c, 3000);
}

#[test]
fn a_node_started_halted_waits_for_a_debugger() {
    rt::require_qemu();
    let mut cfg = RtConfig::new(&rt::cluster_path("halted"), ClusterBackend::Qemu, 2);
    cfg.image = Some(rt::firmware_image());
    cfg.halted_node = Some((1, 0));
    let c = rt::start(cfg);
    let port = c.dir().manifest().gdb_port(1).expect("the halted node's gdbstub port");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.fw_status(), vec![regs::FW_RUNNING, regs::FW_BOOTING]);
    let s = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(s.is_ok(), "no gdbstub on port {port}");
}

#[test]
fn a_missing_qemu_is_a_clear_error_naming_it() {
    let mut cfg = RtConfig::new(&rt::cluster_path("noqemu"), ClusterBackend::Qemu, 1);
    cfg.qemu_program = "qemu-system-riscv64-not-installed".into();
    cfg.image = Some("/nonexistent".into());
    match RtCluster::start(cfg) {
        Err(e @ RtError::MissingProgram { .. }) => {
            assert!(e.to_string().contains("qemu-system-riscv64-not-installed"), "{e}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started without QEMU"),
    }
}

#[test]
fn an_image_that_is_not_a_riscv_elf_is_refused() {
    rt::require_qemu();
    let junk = std::env::temp_dir().join(format!("not-an-elf-{}", std::process::id()));
    std::fs::write(&junk, [b'x'; 64]).unwrap();
    let mut cfg = RtConfig::new(&rt::cluster_path("junk"), ClusterBackend::Qemu, 1);
    cfg.image = Some(junk.clone());
    let e = RtCluster::start(cfg).err().expect("refused");
    assert!(e.to_string().contains("not an ELF"), "{e}");
    let _ = std::fs::remove_file(junk);
}

#[test]
fn an_idle_qemu_nic_sleeps_instead_of_spinning() {
    let c = rt::qemu_cluster("idle", 1);
    let pid = c.qemu_pid(0).unwrap();
    let d = ClusterDir::open_path(c.path()).unwrap();
    let s = d.map_sram_with_windows(0).unwrap();
    let wait = || s.load_u32(reg(regs::IRQ_WAIT) as u64).unwrap();
    // The image polls a while after the last work, then waits in WFI for
    // its interrupt; with no timer pending nothing wakes it: the same odd
    // IRQ_WAIT a second later.
    std::thread::sleep(Duration::from_millis(500));
    let (w0, c0, t0) = (wait(), qemu::process_cpu_seconds(pid).unwrap(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = (qemu::process_cpu_seconds(pid).unwrap() - c0) / t0.elapsed().as_secs_f64();
    eprintln!("idle QEMU NIC: {:.1}% of a core", used * 100.0);
    assert!(w0 % 2 == 1, "an idle NIC CPU waits for its interrupt (IRQ_WAIT {w0})");
    assert_eq!(wait(), w0, "nothing woke an idle NIC CPU");
    assert!(used < 0.5, "an idle QEMU NIC used {:.0}% of a core", used * 100.0);
    // A doorbell wakes it: it looks, finds nothing, and waits again.
    s.fetch_add_u32(reg(regs::HOST_DOORBELL) as u64, 1);
    let t = Instant::now();
    while wait() == w0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the doorbell did not wake the NIC CPU");
        std::thread::sleep(Duration::from_millis(1));
    }
    while wait() % 2 == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the NIC CPU did not wait again");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A host write the firmware reads but no doorbell announces wakes it
    // too: a port set open (with no event queue registered: the firmware
    // answers by refusing it).
    use nic_abi::port::{self as pcb, port_reg};
    s.store_u32(port_reg(3, pcb::STATE) as u64, pcb::STATE_OPEN);
    let fw_state = || s.load_u32(port_reg(3, pcb::FW_STATE) as u64).unwrap();
    while fw_state() != pcb::STATE_REFUSED {
        assert!(t.elapsed() < Duration::from_secs(5), "a port's STATE did not wake the NIC CPU");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Pids of QEMU processes whose command line mentions `dir`.
fn guests_of(dir: &std::path::Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.starts_with("qemu-system")
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| {
                        let c = String::from_utf8_lossy(&c);
                        c.contains(&needle)
                    })
                    .unwrap_or(false)
        })
        .collect()
}

#[test]
fn killing_the_device_process_outright_takes_its_guests_down() {
    rt::require_qemu();
    let mut cfg = RtConfig::new(&rt::cluster_path("orphans"), ClusterBackend::Qemu, 2);
    cfg.image = Some(rt::firmware_image());
    let p = nic_emu::realtime::process::ClusterProcess::spawn(
        env!("CARGO_BIN_EXE_nic-cluster").as_ref(),
        &cfg,
        Duration::from_secs(30),
    )
    .unwrap();
    let path = p.path().to_path_buf();
    assert_eq!(guests_of(&path).len(), 2);
    // SIGKILL: no chance to clean up; the guests must not outlive it.
    std::process::Command::new("kill").args(["-KILL", &p.pid().to_string()]).status().unwrap();
    let t = Instant::now();
    while !guests_of(&path).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "QEMU guests outlived their device process");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(p);
    // A new cluster replaces the stale directory.
    let c = rt::start({
        let mut c = RtConfig::new(&path.to_string_lossy(), ClusterBackend::Live, 1);
        c.log_to_stderr = false;
        c
    });
    c.stop().unwrap();
}

#[test]
fn a_wait_on_a_node_whose_qemu_is_killed_fails_with_nic_down_at_once() {
    let c = rt::qemu_cluster("qkill", 2);
    let pid = c.qemu_pid(1).expect("node 1's QEMU");
    let took = rt::wait_then_kill(c.path(), 1, || rt::kill_pid(pid));
    assert!(took < Duration::from_millis(100), "NicDown {took:?} after the kill");
}

#[test]
fn an_image_that_never_boots_is_stopped_after_the_boot_timeout() {
    rt::require_qemu();
    let mut cfg = RtConfig::new(&rt::cluster_path("noboot"), ClusterBackend::Qemu, 2);
    cfg.image = Some(rt::firmware_image());
    cfg.boot_timeout = Duration::from_secs(2);
    let c = rt::start(cfg);
    // A well-formed image that never boots: `j .` (jal x0, 0).
    let img = c.path().join("spin.elf");
    std::fs::write(&img, qemu::minimal_image(&0x0000_006fu32.to_le_bytes())).unwrap();
    qemu::check_riscv_elf(&img).expect("a well-formed image");
    qemu::write_flash(&img, &c.dir().flash_path(1)).unwrap();
    let t = Instant::now();
    let said = |c: &RtCluster| c.notes().iter().any(|n| n.contains("did not start within"));
    while !said(&c) {
        assert!(t.elapsed() < Duration::from_secs(20), "no boot timeout: {:?}", c.notes());
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("stopped after {:?}: {:?}", t.elapsed(), c.notes().last());
    assert_eq!(c.qemu_pid(1), None, "its QEMU is stopped");
    assert_eq!(c.fw_status(), vec![regs::FW_RUNNING, regs::FW_HALTED]);
    assert!(c.qemu_pid(0).is_some(), "the other node runs on");
}
