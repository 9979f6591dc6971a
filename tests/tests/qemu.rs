//! The bare-metal firmware under QEMU, beyond what nic-emu's own
//! realtime_qemu.rs covers (ping-pong, stream and a 4-node all-to-all,
//! content-checked, on qemu; realtime_live.rs: the same on live): the
//! firmware self-test (QEMU's exit status), a scripted gdb-multiarch
//! session in batch mode against a NIC started halted, as `cargo xtask gdb
//! --batch` runs it, and `cargo xtask logs` decoding a NIC's defmt log.
//!
//! These tests FAIL, naming what is missing, when qemu-system-riscv64,
//! gdb-multiarch or the riscv64imac-unknown-none-elf target is not
//! installed: they are never skipped (`.ci/run` installs all three).

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterBackend;
use nic_abi::regs;
use nic_emu::realtime::{qemu, RtConfig};

fn require_gdb() {
    assert!(
        qemu::find_program("gdb-multiarch").is_some(),
        "gdb-multiarch is not installed (not found on PATH): the gdb session test needs it \
         (Debian/Ubuntu: apt-get install gdb-multiarch; `cargo xtask test` installs it as root)"
    );
}

/// Run `c`, killing it after `timeout` (a test must never hang).
fn run_with_timeout(mut c: Command, timeout: Duration) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {c:?}: {e}"));
    let t = Instant::now();
    while t.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    panic!("{c:?} did not finish within {timeout:?}:\n{}", rt::text(&o));
}

/// The self-test image (`--features selftest`), built in `<target>/fw-selftest`
/// as `cargo xtask build-fw --selftest` builds it.
fn selftest_image() -> PathBuf {
    // The normal image's build checks the target and says how to install it.
    let _ = rt::firmware_image();
    let target = rt::profile_dir().parent().unwrap().join("fw-selftest");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let o = Command::new(std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string()))
        .current_dir(root.join("firmware/image"))
        .env("CARGO_TARGET_DIR", &target)
        .env("DEFMT_LOG", "info")
        .args(["build", "--quiet", "--release", "--features", "selftest"])
        .output()
        .expect("cargo");
    assert!(o.status.success(), "building the self-test image failed:\n{}", rt::text(&o));
    target.join(rt::FW_TARGET).join("release").join("mcp-image")
}

#[test]
fn the_firmware_self_test_passes_on_the_nic_cpu_and_exits_qemu_with_status_0() {
    rt::require_qemu();
    let elf = selftest_image();
    let mut c = Command::new(qemu::QEMU_PROGRAM);
    c.args(["-machine", "virt", "-m", "8M", "-smp", "1", "-bios", "none"])
        .args(["-display", "none", "-serial", "none", "-monitor", "none", "-nodefaults"])
        .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(&elf);
    let o = run_with_timeout(c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "the self-test failed under QEMU:\n{}", rt::text(&o));
}

/// The gdb-multiarch command line of `cargo xtask gdb --batch` (xtask's
/// `gdb::gdb_command`), breaking on the SDMA intake step only.
fn gdb(elf: &std::path::Path, port: u16, script: &std::path::Path) -> Command {
    let mut c = Command::new("gdb-multiarch");
    c.args(["-q", "-nx", "-batch", "-ex", "set pagination off", "-ex", "set confirm off"])
        .arg("-ex")
        .arg(format!("file {}", elf.display()))
        .arg("-ex")
        .arg(format!("target remote 127.0.0.1:{port}"))
        .args(["-ex", "break 'mcp::sdma::Sdma::intake<mcp_image::hw::SramHw>'"])
        .arg("-x")
        .arg(script);
    c
}

#[test]
fn gdb_stops_in_the_sdma_step_single_steps_reads_its_state_and_continues() {
    rt::require_qemu();
    require_gdb();
    let elf = rt::firmware_image();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = RtConfig::new(&rt::cluster_path("gdb"), ClusterBackend::Qemu, 2);
    cfg.image = Some(elf.clone());
    cfg.halted_node = Some((0, port));
    let c = rt::start(cfg);
    // Node 0 waits for the debugger; node 1 runs.
    assert_eq!(c.fw_status(), vec![regs::FW_BOOTING, regs::FW_RUNNING]);
    // 64 KiB messages from node 0 to node 1, every byte checked: they
    // start once gdb lets node 0 run.
    let (send, recv) = rt::stream_spawn(c.path(), (0, 1), (1, 1), 65536, 20, &[]);
    let script = std::env::temp_dir().join(format!("nic-gdb-{}.gdb", std::process::id()));
    std::fs::write(
        &script,
        // Stop in the SDMA intake step, step, read the states, go on; then
        // stop in SEND's step once SDMA waits for a fill's host-DMA in the
        // middle of a 64 KiB send, and print what each machine waits for.
        // The condition is Python: a condition in gdb's own language with
        // a string literal needs malloc in the inferior, which the image
        // does not have.
        "continue\n\
         echo STOPPED-IN-SDMA\\n\n\
         bt 1\n\
         next\n\
         stepi\n\
         print mcp_image::MCP.sdma.state\n\
         print mcp_image::MCP.recv.state\n\
         continue\n\
         echo CONTINUED\\n\n\
         print $pc\n\
         delete\n\
         python\n\
         class MidSend(gdb.Breakpoint):\n\
         \x20   def stop(self):\n\
         \x20       s = str(gdb.parse_and_eval('mcp_image::MCP.sdma.state'))\n\
         \x20       return 'FillWait' in s\n\
         MidSend(\"'mcp::send::Send::step<mcp_image::hw::SramHw>'\")\n\
         end\n\
         continue\n\
         echo MID-SEND\\n\n\
         print mcp_image::MCP.sdma.state\n\
         print mcp_image::MCP.send.state\n\
         print mcp_image::MCP.recv.state\n\
         print mcp_image::MCP.rdma.state\n\
         print mcp_image::MCP.shared.hdma.prod - mcp_image::MCP.shared.hdma.done\n\
         delete\n\
         detach\n",
    )
    .unwrap();
    let o = run_with_timeout(gdb(&elf, port, &script), Duration::from_secs(120));
    let _ = std::fs::remove_file(&script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let all = rt::text(&o);
    assert!(o.status.success(), "gdb-multiarch failed:\n{all}");
    // Stopped in the SDMA step function, twice (before and after continue).
    let hits = out.matches("Breakpoint 1, mcp::sdma::Sdma::intake").count();
    assert!(hits >= 2, "gdb did not stop in Sdma::intake twice:\n{all}");
    assert!(out.contains("STOPPED-IN-SDMA") && out.contains("CONTINUED"), "{all}");
    // A single step stayed in the MCP's source.
    assert!(out.contains("sdma/intake.rs"), "no source line of sdma/intake.rs:\n{all}");
    // The state variables read as their enums.
    assert!(out.contains("= mcp::sdma::SdmaState::"), "no SdmaState printed:\n{all}");
    assert!(out.contains("= mcp::recv::RecvState::"), "no RecvState printed:\n{all}");
    assert!(out.contains("<mcp::sdma::Sdma::intake"), "$pc not in Sdma::intake:\n{all}");
    // In the middle of the send: SDMA waits for the fill of a packet of a
    // send token, with its operands, while host-DMA commands are posted
    // and not yet seen complete; the other machines say what they do.
    let mid = out.split("MID-SEND").nth(1).unwrap_or_else(|| panic!("never mid-send:\n{all}"));
    eprintln!("gdb, mid-send:{mid}");
    let fill = mid.lines().find(|l| l.contains("SdmaState::")).unwrap_or("");
    assert!(
        fill.contains("SdmaState::FillWait{token: ") && fill.contains("packet: "),
        "SDMA is not waiting for a fill with its token:\n{all}"
    );
    assert!(mid.contains("= mcp::send::SendState::"), "{all}");
    assert!(mid.contains("= mcp::rdma::RdmaState::"), "{all}");
    let outstanding = mid
        .lines()
        .filter_map(|l| l.split_once(" = ").map(|(_, v)| v.trim()))
        .filter_map(|v| v.parse::<u32>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no host-DMA count printed:\n{all}"));
    assert!(outstanding > 0, "no host-DMA outstanding while SDMA waits for a fill:\n{all}");
    // Detached: the guest runs on, and the stream completes intact.
    let t = Instant::now();
    while c.fw_status() != vec![regs::FW_RUNNING, regs::FW_RUNNING] {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "FW_STATUS {:?} after detach",
            c.fw_status()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let send = rt::finish(send, Duration::from_secs(60));
    let recv = rt::finish(recv, Duration::from_secs(60));
    assert!(send.status.success(), "sender:\n{}", rt::text(&send));
    assert!(recv.status.success(), "receiver:\n{}", rt::text(&recv));
}

/// `cargo xtask logs --node 0 --cluster DIR --image ELF` (xtask built in
/// this test's profile and target directory).
fn xtask_logs(cluster: &std::path::Path, elf: &std::path::Path) -> Output {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string()));
    c.current_dir(&root)
        .env("CARGO_TARGET_DIR", rt::profile_dir().parent().unwrap())
        .args(["run", "--quiet"])
        .args(rt::profile_args())
        .args(["-p", "xtask", "--", "logs", "--node", "0"])
        .arg("--cluster")
        .arg(cluster)
        .arg("--image")
        .arg(elf);
    run_with_timeout(c, Duration::from_secs(600))
}

#[test]
fn xtask_logs_decodes_the_boot_line_of_node_0_from_its_defmt_console_log() {
    let elf = rt::firmware_image();
    let c = rt::qemu_cluster("logs", 2);
    let want = "MCP running: node 0 of 2";
    let t = Instant::now();
    loop {
        let o = xtask_logs(c.path(), &elf);
        assert!(o.status.success(), "cargo xtask logs failed:\n{}", rt::text(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(line) = out.lines().find(|l| l.contains(want)) {
            assert!(line.starts_with("INFO"), "not an info line: {line}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no `{want}` in node 0's decoded log:\n{}",
            rt::text(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
