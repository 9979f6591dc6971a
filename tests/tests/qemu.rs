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
    selftest_image_with("selftest", "fw-selftest")
}

/// The self-test image with `features`, built in `<target>/<dir>`.
fn selftest_image_with(features: &str, dir: &str) -> PathBuf {
    // The normal image's build checks the target and says how to install it.
    let _ = rt::firmware_image();
    let target = rt::profile_dir().parent().unwrap().join(dir);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let o = Command::new(std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string()))
        .current_dir(root.join("firmware/image"))
        .env("CARGO_TARGET_DIR", &target)
        .env("DEFMT_LOG", "info")
        .args(["build", "--quiet", "--release", "--features", features])
        .output()
        .expect("cargo");
    assert!(o.status.success(), "building the self-test image failed:\n{}", rt::text(&o));
    target.join(rt::FW_TARGET).join("release").join("mcp-image")
}

/// A bare image under QEMU alone (no device process): its semihosting
/// output (raw defmt frames) on stdout, its verdict in the exit status.
fn run_bare(elf: &std::path::Path) -> Output {
    let mut c = Command::new(qemu::QEMU_PROGRAM);
    c.args(["-machine", "virt", "-m", "8M", "-smp", "1", "-bios", "none"])
        .args(["-display", "none", "-serial", "none", "-monitor", "none", "-nodefaults"])
        .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(elf);
    run_with_timeout(c, Duration::from_secs(60))
}

#[test]
fn the_firmware_self_test_passes_on_the_nic_cpu_and_exits_qemu_with_status_0() {
    rt::require_qemu();
    let o = run_bare(&selftest_image());
    assert_eq!(o.status.code(), Some(0), "the self-test failed under QEMU:\n{}", rt::text(&o));
}

#[test]
fn a_firmware_panic_is_decoded_to_its_kind_file_line_and_function() {
    // The self-test, then an index past the end of an array on purpose.
    // The image keeps no panic locations; its panic line carries the
    // words at the top of its stack, and `cargo xtask logs` finds the
    // panic site among them with the image's DWARF.
    rt::require_qemu();
    let elf = selftest_image_with("panic-test", "fw-panic-test");
    let xtask = xtask_bin();
    let o = run_bare(&elf);
    assert_ne!(o.status.code(), Some(0), "the panic test exited as a pass:\n{}", rt::text(&o));
    let log = std::env::temp_dir().join(format!("nic-panic-test-{}.log", std::process::id()));
    std::fs::write(&log, &o.stdout).unwrap();
    let mut c = Command::new(&xtask);
    c.args(["logs", "--file"]).arg(&log).arg("--image").arg(&elf);
    let o = run_with_timeout(c, Duration::from_secs(60));
    let _ = std::fs::remove_file(&log);
    assert!(o.status.success(), "cargo xtask logs --file failed:\n{}", rt::text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("selftest passed"), "{out}");
    let line = out.lines().find(|l| l.contains("panic")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.starts_with("ERROR"), "{line}");
    let src = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../firmware/image/src/selftest.rs"),
    )
    .unwrap();
    let at = 1 + src.lines().position(|l| l.contains("a[core::hint::black_box(i)]")).unwrap();
    let want = format!(
        "panic (index out of bounds) at firmware/image/src/selftest.rs:{at}, in \
         mcp_image::selftest::index_past_the_end"
    );
    assert!(line.ends_with(&want), "{line}\nwanted it to end: {want}");
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
    let mut cfg = RtConfig::new(&rt::cluster_path("gdb"), ClusterBackend::Qemu, 2);
    cfg.image = Some(elf.clone());
    cfg.halted_node = Some((0, 0));
    let c = rt::start(cfg);
    let port = c.dir().manifest().gdb_port(0).expect("the halted node's gdbstub port");
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

/// `cargo xtask logs --node 0 --cluster DIR --image ELF`, with `xtask`
/// (from [`xtask_bin`]).
fn xtask_logs(xtask: &std::path::Path, cluster: &std::path::Path, elf: &std::path::Path) -> Output {
    let mut c = Command::new(xtask);
    c.args(["logs", "--node", "0", "--cluster"]).arg(cluster).arg("--image").arg(elf);
    run_with_timeout(c, Duration::from_secs(60))
}

#[test]
fn xtask_logs_on_a_live_cluster_says_its_firmware_keeps_no_log() {
    let elf = rt::firmware_image();
    let xtask = xtask_bin();
    let c = rt::live("logs-live", 2);
    let o = xtask_logs(&xtask, c.path(), &elf);
    assert_eq!(o.status.code(), Some(1), "{}", rt::text(&o));
    assert!(
        rt::text(&o).contains("runs on the live backend, whose firmware keeps no log"),
        "{}",
        rt::text(&o)
    );
}

#[test]
fn xtask_logs_decodes_the_boot_line_of_node_0_from_its_defmt_console_log() {
    let elf = rt::firmware_image();
    let xtask = xtask_bin();
    let c = rt::qemu_cluster("logs", 2);
    // The boot line, then the info lines of a port opening and closing.
    let wait_for = |want: &str| {
        let t = Instant::now();
        loop {
            let o = xtask_logs(&xtask, c.path(), &elf);
            assert!(o.status.success(), "cargo xtask logs failed:\n{}", rt::text(&o));
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            if let Some(line) = out.lines().find(|l| l.contains(want)) {
                assert!(line.starts_with("INFO"), "not an info line: {line}");
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no `{want}` in node 0's decoded log:\n{}",
                rt::text(&o)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for("MCP running: node 0 of 2");
    let port = host_driver::Port::attach(&c.path().to_string_lossy(), 0, 5).unwrap();
    wait_for("port 5 open (generation");
    drop(port);
    wait_for("port 5 closed");
}

/// xtask, built in this test's profile and target directory (before any
/// cluster starts: a fresh build takes a while).
fn xtask_bin() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string()));
    c.current_dir(&root)
        .env("CARGO_TARGET_DIR", rt::profile_dir().parent().unwrap())
        .args(["build", "--quiet"])
        .args(rt::profile_args())
        .args(["-p", "xtask", "--bin", "xtask"]);
    let o = run_with_timeout(c, Duration::from_secs(900));
    assert!(o.status.success(), "building xtask failed:\n{}", rt::text(&o));
    rt::profile_dir().join("xtask")
}

/// The variant names of `pub enum NAME` in a firmware source file.
fn enum_variants(file: &str, name: &str) -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let src = std::fs::read_to_string(root.join("firmware/mcp/src").join(file)).unwrap();
    let body = src
        .split(&format!("pub enum {name} {{"))
        .nth(1)
        .and_then(|b| b.split("\n}").next())
        .unwrap_or_else(|| panic!("no `pub enum {name}` in {file}"));
    body.lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .map(|l| l.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap().to_string())
        .collect()
}

#[test]
fn xtask_gdb_attaches_to_both_nics_of_a_running_cluster_shows_their_machines_and_detaches() {
    rt::require_qemu();
    require_gdb();
    let xtask = xtask_bin();
    let machines = [
        ("SDMA", enum_variants("sdma/mod.rs", "SdmaState")),
        ("SEND", enum_variants("send.rs", "SendState")),
        ("RECV", enum_variants("recv/mod.rs", "RecvState")),
        ("RDMA", enum_variants("rdma/mod.rs", "RdmaState")),
    ];
    for (m, v) in &machines {
        assert!(v.contains(&"Idle".to_string()), "{m}: no Idle among {v:?}");
    }
    let t0 = Instant::now();
    let c = rt::qemu_cluster("gdbattach", 2);
    let ports = c.manifest().gdb_ports.clone();
    assert_eq!(ports.len(), 2, "cluster.toml's gdb_ports: {ports:?}");
    // Not halted: both NICs run with their gdbstubs open.
    assert_eq!(c.fw_status(), vec![regs::FW_RUNNING, regs::FW_RUNNING]);
    let dir = std::env::temp_dir().join(format!("nic-gdb-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gdb = |script: &std::path::Path| {
        let mut cmd = Command::new(&xtask);
        cmd.args(["gdb", "--node", "0,1", "--nx", "--cluster"])
            .arg(c.path())
            .arg("--batch")
            .arg(script);
        run_with_timeout(cmd, Duration::from_secs(60))
    };

    // A missing script, and a failing one, fail the command and say so.
    let o = gdb(&dir.join("missing.gdb"));
    assert_eq!(o.status.code(), Some(1), "{}", rt::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("gdb batch script {}", dir.join("missing.gdb").display())),
        "{err}"
    );
    let bad = dir.join("bad.gdb");
    std::fs::write(&bad, "print no_such_symbol_here\necho NOT-REACHED\\n\n").unwrap();
    let o = gdb(&bad);
    assert_eq!(o.status.code(), Some(1), "{}", rt::text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("NOT-REACHED"), "{}", rt::text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains(&format!("the batch script {} failed", bad.display())),
        "{}",
        rt::text(&o)
    );

    // Attach to both NICs (which halts them), show both, detach.
    let script = dir.join("mcp.gdb");
    std::fs::write(
        &script,
        "info inferiors\nmcp all\necho MCP-DONE\\n\ninferior 2\nmcp\ndetach inferiors 1 2\n",
    )
    .unwrap();
    let o = gdb(&script);
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let all = rt::text(&o);
    assert!(o.status.success(), "cargo xtask gdb failed:\n{all}");
    let (both, single) = out.split_once("MCP-DONE").unwrap_or_else(|| panic!("{all}"));
    for (node, port) in ports.iter().enumerate() {
        let head = format!("NIC {node} (inferior {}, 127.0.0.1:{port})", node + 1);
        let view = both.split(&head).nth(1).unwrap_or_else(|| panic!("no `{head}`:\n{all}"));
        let lines: Vec<&str> = view.lines().skip(1).take(5).collect();
        for (i, (m, variants)) in machines.iter().enumerate() {
            let line = lines.get(i).copied().unwrap_or("");
            let rest = line
                .strip_prefix(&format!("  {m}  "))
                .unwrap_or_else(|| panic!("NIC {node}: line {i} is not {m}'s: `{line}`\n{all}"));
            let state: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            assert!(
                variants.contains(&state),
                "NIC {node}: {m}'s state `{state}` is not one of {variants:?}:\n{all}"
            );
        }
        let counters = lines.get(4).copied().unwrap_or("");
        assert!(
            counters.starts_with("  counters: PacketsSent ") && counters.contains(", Polls "),
            "NIC {node}: no counters line: `{counters}`\n{all}"
        );
        assert_mcp_view_reads_every_field(&lines, &all);
    }
    let single_lines: Vec<&str> = single
        .split(&format!("NIC 1 (inferior 2, 127.0.0.1:{})", ports[1]))
        .nth(1)
        .unwrap_or("")
        .lines()
        .skip(1)
        .take(5)
        .collect();
    assert_mcp_view_reads_every_field(&single_lines, &all);
    assert!(single.contains(&format!("NIC 1 (inferior 2, 127.0.0.1:{})", ports[1])), "{all}");
    assert!(!single.contains("NIC 0 ("), "`mcp` showed more than the current NIC:\n{all}");
    assert_eq!(out.matches("detached]").count(), 2, "both NICs detached:\n{all}");

    // Detached: both NICs run on and carry traffic, their counters advancing.
    let sent = |n: usize| c.nic_stats(n).fw[nic_abi::stats::Stat::PacketsSent as usize];
    let before = [sent(0), sent(1)];
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 20);
    let after = [sent(0), sent(1)];
    assert!(after[0] >= before[0] + 30 && after[1] >= before[1] + 30, "{before:?} -> {after:?}");
    eprintln!("attach, mcp on both NICs, detach, pingpong: {:?}", t0.elapsed());
}

/// The labels of `mcp`'s view, machine by machine (tools/gdb/mcp.py),
/// then the counters shown.
const MCP_LABELS: [(&str, &[&str]); 5] = [
    ("SDMA", &["conn queue", "active streams", "tx streams"]),
    ("SEND", &["in flight", "queued"]),
    ("RECV", &["unread packets", "acks due", "rx streams"]),
    ("RDMA", &["host-DMA commands", "bytes left"]),
    (
        "counters:",
        &[
            "PacketsSent",
            "PacketsReceived",
            "MessagesSent",
            "MessagesReceived",
            "Retransmits",
            "Drops",
            "Errors",
            "Timeouts",
            "Polls",
        ],
    ),
];

/// One NIC's `mcp` view (its five lines after the title) read every
/// field of the current firmware: each label is there with a number
/// after it, and no `?` (a field the script could not read: one that
/// moved or was renamed in firmware/mcp/src) appears anywhere.
fn assert_mcp_view_reads_every_field(lines: &[&str], all: &str) {
    assert_eq!(lines.len(), 5, "an `mcp` view has five lines:\n{all}");
    for (line, (head, labels)) in lines.iter().zip(MCP_LABELS) {
        assert!(line.trim_start().starts_with(head), "`{line}` is not {head}'s line:\n{all}");
        assert!(!line.contains('?'), "`mcp` could not read a field: `{line}`\n{all}");
        for label in labels {
            let value = line
                .split(&format!("{label} "))
                .nth(1)
                .and_then(|v| v.split(',').next())
                .unwrap_or_else(|| panic!("no `{label}` in `{line}`:\n{all}"));
            assert!(
                value.trim().parse::<u64>().is_ok(),
                "`{label}` is not a number in `{line}`:\n{all}"
            );
        }
    }
}

#[test]
fn a_gdb_batch_that_never_stops_ends_at_its_time_limit_and_its_nics_run_again() {
    rt::require_qemu();
    require_gdb();
    let xtask = xtask_bin();
    let c = rt::qemu_cluster("gdbtimeout", 2);
    let dir = std::env::temp_dir().join(format!("nic-gdb-timeout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No breakpoint is left, so `continue` on NIC 0 waits for ever; NIC 1
    // stays halted meanwhile (attaching halts it). Nothing after it runs.
    let script = dir.join("never.gdb");
    std::fs::write(&script, "delete\ncontinue\necho NOT-REACHED\\n\n").unwrap();
    let mut cmd = Command::new(&xtask);
    cmd.args(["gdb", "--node", "0,1", "--nx", "--cluster"])
        .arg(c.path())
        .arg("--batch")
        .arg(&script)
        .args(["--timeout", "3"]);
    let t0 = Instant::now();
    let o = run_with_timeout(cmd, Duration::from_secs(60));
    let took = t0.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    let all = rt::text(&o);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "a timed-out batch fails the command:\n{all}");
    assert!(
        err.contains(&format!(
            "gdb: the batch script {} did not finish within its time limit of 3 s (--timeout)",
            script.display()
        )),
        "{all}"
    );
    assert!(!out.contains("NOT-REACHED"), "{all}");
    assert!(out.contains("gdb ended: NIC(s) 0, 1 detached and running"), "{all}");
    // The limit counts from gdb's start, after xtask's own set-up.
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(30), "{took:?}\n{all}");

    // Both NICs run again: a ping-pong between them goes through and
    // both count its packets.
    let sent = |n: usize| c.nic_stats(n).fw[nic_abi::stats::Stat::PacketsSent as usize];
    let before = [sent(0), sent(1)];
    rt::pingpong(c.path(), (0, 1), (1, 1), 8, 20);
    let after = [sent(0), sent(1)];
    assert!(after[0] >= before[0] + 30 && after[1] >= before[1] + 30, "{before:?} -> {after:?}");
    eprintln!("gdb batch stopped at its 3 s limit, xtask returned after {took:?}, NICs resumed");
}

/// The firmware cost table the simulator's `firmware` pricing reads
/// (nic-emu/profiles/firmware-costs.toml) against the image as built
/// now: a short run of the firmware bench counts each workload's
/// busy-pass instructions per message and the idle pass under QEMU
/// (`-icount shift=0`, exact); each must be within 10% of what the table
/// recorded when it was made (the idle pass within 10% or
/// [`IDLE_SLACK`] instructions, whichever is more). The message names the
/// command that refreshes the table.
/// The workloads the drift test measures: the 8 B ping-pong, whose
/// busy-pass count a quick run repeats within about 1% (with the idle
/// pass it gives). A quick stream or loss run may end before its window
/// has two readings on a fast machine, and rate control's and the
/// multicast schemes' counts vary by up to a quarter between runs (how
/// their work batches into passes follows wall time); the full bench
/// (`cargo xtask bench --firmware`) shows them.
const DRIFT_WORKLOADS: [&str; 1] = ["pingpong-8b"];

/// Instructions the idle pass may move between runs of one image: it is
/// the mean of quiet passes (58 when they read the summary alone, about
/// 130 when they also take or leave completions no machine waits for)
/// and of the few completions and whole passes that found no work, in a
/// ratio QEMU's schedule sets. Runs of the image of f8af787 read 82 to
/// 100. What the firmware's idle passes cost is checked by the quiet
/// pass, which the schedule does not move (`QUIET_SLACK`).
const IDLE_SLACK: f64 = 40.0;

/// Instructions the quiet pass (the summary read, nothing more) may move
/// between runs of one image: it is the same code every time.
const QUIET_SLACK: f64 = 6.0;

#[test]
fn the_firmware_cost_table_is_within_10_percent_of_the_image_as_built_now() {
    rt::require_qemu();
    let xtask = xtask_bin();
    let mut c = Command::new(&xtask);
    c.args(["bench", "--firmware", "--quick", "--json", "--quiet"]);
    for w in DRIFT_WORKLOADS {
        c.args(["--workload", w]);
    }
    let o = run_with_timeout(c, Duration::from_secs(1800));
    assert!(o.status.success(), "cargo xtask bench --firmware --quick failed:\n{}", rt::text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("the bench's JSON does not parse: {e}\n{}", rt::text(&o)));
    let table = nic_emu::costs::FirmwareCosts::builtin();
    let mut lines = Vec::new();
    let mut drifted = Vec::new();
    let mut check = |what: String, now: f64, then: f64, slack: f64| {
        let rel = if then > 0.0 { now / then - 1.0 } else { f64::INFINITY };
        lines.push(format!(
            "  {what:<24} now {now:>12.1}  table {then:>12.1}  {:+.1}%",
            rel * 100.0
        ));
        if rel.abs() > 0.10 && (now - then).abs() > slack {
            drifted.push(what);
        }
    };
    let idle = doc["idle"]["one_port"].as_f64().expect("idle.one_port in the bench's JSON");
    check("idle pass".into(), idle, table.instructions.idle_pass, IDLE_SLACK);
    let quiet =
        doc["idle"]["quiet_one_port"].as_f64().expect("idle.quiet_one_port in the bench's JSON");
    assert!(
        table.passes.quiet > 0.0,
        "the firmware cost table ({}) has no [passes] quiet: refresh it with `{}`",
        nic_emu::costs::BUILTIN_PATH,
        nic_emu::costs::REFRESH_COMMAND
    );
    check("quiet pass".into(), quiet, table.passes.quiet, QUIET_SLACK);
    for name in DRIFT_WORKLOADS {
        let m = table
            .workloads
            .get(name)
            .unwrap_or_else(|| panic!("workload {name} missing from the firmware cost table"));
        let now = doc["workloads"][name]["busy_per_message"]
            .as_f64()
            .unwrap_or_else(|| panic!("workload {name} missing from the bench's JSON"));
        check(name.to_string(), now, m.busy_per_message, 0.0);
    }
    assert!(
        drifted.is_empty(),
        "the image and the firmware cost table ({}, measured on {} at {}) differ by more than \
         10% in {drifted:?}; refresh the table with `{}` and commit it:\n{}",
        nic_emu::costs::BUILTIN_PATH,
        table.image.commit,
        table.image.date,
        nic_emu::costs::REFRESH_COMMAND,
        lines.join("\n")
    );
}
