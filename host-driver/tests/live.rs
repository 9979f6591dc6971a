//! The live backend over a cluster directory: port locks (in this process
//! and across processes), taking over a dead holder's port, DMA memory in
//! the port's slice, what a port may touch, atomics, and the driver and the
//! measuring loops end to end, over a live cluster whose NICs run the MCP
//! (served from this test process, reached only through the files).

mod live_rig;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use host_driver::cluster::ClusterDir;
use host_driver::nic_abi::map::{self, port_window, PORT_WINDOW};
use host_driver::nic_abi::port::{self as pcb, port_reg};
use host_driver::nic_abi::regs::{self, reg};
use host_driver::nic_abi::{size_class_for, PAGE_SIZE};
use host_driver::{
    AttachOptions, ClusterFault, Dest, DriverError, Event, LiveBackend, Nic, NicBackend, Port,
    PortOptions, Priority, RecvOpts, SendOpts, SendStatus,
};
use host_programs::bench::StreamRole;
use host_programs::bench::{self, BenchError, Check, PingPongConfig, PingRole, StreamConfig};
use host_programs::pattern;
use live_rig::{cluster, path_str, sram, Regs, HOST};
use nic_emu::realtime::{Backoff, RtCluster};

const CHILD_ENV: &str = "HOST_DRIVER_TEST_CHILD";

fn attach(c: &RtCluster, node: u16, port: u8) -> Result<LiveBackend, DriverError> {
    LiveBackend::attach(&path_str(c), node, port)
}

#[test]
fn a_port_can_be_attached_once_until_its_holder_lets_go() {
    let c = cluster("lock", 2, Regs::default());
    let a = attach(&c, 0, 1).unwrap();
    assert_eq!(attach(&c, 0, 1).err(), Some(DriverError::PortBusy(1)));
    // Other ports and the same port of another node are free.
    let b = attach(&c, 0, 2).unwrap();
    let d = attach(&c, 1, 1).unwrap();
    // A clone keeps the lock.
    let a2 = a.clone();
    drop(a);
    assert_eq!(attach(&c, 0, 1).err(), Some(DriverError::PortBusy(1)));
    drop(a2);
    attach(&c, 0, 1).unwrap();
    drop((b, d));
}

#[test]
fn attach_says_what_is_wrong_with_the_request() {
    let c = cluster("attach-errors", 2, Regs::default());
    assert_eq!(attach(&c, 0, 8).err(), Some(DriverError::BadPort(8)));
    assert_eq!(
        attach(&c, 2, 0).err(),
        Some(DriverError::Cluster {
            path: c.path().to_path_buf(),
            fault: ClusterFault::NoSuchNode { node: 2, nodes: 2 }
        })
    );
    let missing = live_rig::temp_path("nothing-here");
    let e = LiveBackend::attach(missing.to_str().unwrap(), 0, 0).unwrap_err();
    assert_eq!(e, DriverError::Cluster { path: missing.clone(), fault: ClusterFault::NotFound });
    let name = missing.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "cluster directory {}: not found: no cluster.toml there (is the cluster running? \
             Start one with `cargo xtask run --name {name}` or `nic-cluster run --name {name} \
             --nodes 2`)",
            missing.display()
        )
    );
    // A dead device process.
    let mut dir = ClusterDir::open_path(c.path()).unwrap();
    dir.update(|m| m.pid = u32::MAX - 1).unwrap();
    let e = attach(&c, 0, 0).unwrap_err();
    assert_eq!(
        e,
        DriverError::Cluster {
            path: c.path().to_path_buf(),
            fault: ClusterFault::DeviceGone { pid: u32::MAX - 1 }
        }
    );
    assert!(e.to_string().contains("not running"), "{e}");
    let opts = AttachOptions { require_device: false, ..AttachOptions::default() };
    LiveBackend::attach_with(&dir, 0, 0, &opts).unwrap();
}

#[test]
fn port_attach_opens_a_served_port_once_and_its_errors_name_cluster_node_and_port() {
    let c = cluster("port-attach", 2, Regs::default());
    let path = path_str(&c);
    let p = Port::attach(&path, 1, 4).unwrap();
    assert!(p.nic_serving());
    assert_eq!(p.address(), Dest::new(1, 4));
    let e = Port::attach(&path, 1, 4).err().unwrap();
    assert_eq!(e.root_cause(), &DriverError::PortBusy(4));
    assert_eq!(
        e.to_string(),
        format!(
            "cannot open port 4 of node 1 of the cluster at {path}: port 4 is already open \
             (held by another process or handle)"
        )
    );
    assert_eq!(
        Port::attach(&path, 1, 9).err().unwrap(),
        DriverError::Attach {
            path: c.path().to_path_buf(),
            node: 1,
            port: 9,
            cause: Box::new(DriverError::BadPort(9))
        }
    );
    // The cluster's own errors name its directory, not wrapped again.
    assert_eq!(
        Port::attach(&path, 5, 0).err().unwrap(),
        DriverError::Cluster {
            path: c.path().to_path_buf(),
            fault: ClusterFault::NoSuchNode { node: 5, nodes: 2 }
        }
    );
    drop(p);
    Port::attach(&path, 1, 4).unwrap();
}

/// The child half of the cross-process tests: attach, open the port, say
/// so, then hold it until killed or stdin closes.
#[test]
#[ignore = "helper run as a child process by a_port_held_by_another_process_..."]
fn child_holds_a_port() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut it = spec.splitn(3, ':');
    let (node, port, path) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let be = LiveBackend::attach(path, node.parse().unwrap(), port.parse().unwrap()).unwrap();
    let nic = Nic::open(be).unwrap();
    let _p = nic.open_port(port.parse().unwrap(), PortOptions::default()).unwrap();
    println!("HOLDING");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// A child process (`child_holds_a_port`) holding (node, port) of `c`
/// open, once it says so.
fn spawn_holder(c: &RtCluster, node: u32, port: u8) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_a_port", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{node}:{port}:{}", path_str(c)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HOLDING") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child died before holding the port");
    }
    child
}

#[test]
fn a_port_held_by_another_process_is_busy_and_free_again_when_it_dies() {
    let c = cluster("child", 1, Regs::default());
    let mut child = spawn_holder(&c, 0, 3);
    assert_eq!(attach(&c, 0, 3).err(), Some(DriverError::PortBusy(3)));
    // (A mapping of the windows keeps the port from changing hands: this
    // test's is dropped before the next holder asks.)
    let state = || sram(&c, 0).load_u32(port_reg(3, pcb::STATE) as u64);
    assert_eq!(state(), Some(pcb::STATE_OPEN));
    // Killed mid-use: the kernel drops its lock; the next attach takes
    // over and closes the port the dead holder left open.
    child.kill().unwrap();
    child.wait().unwrap();
    let be = attach(&c, 0, 3).unwrap();
    assert_eq!(state(), Some(pcb::STATE_CLOSED));
    let nic = Nic::open(be).unwrap();
    nic.open_port(3, PortOptions::default()).unwrap();
}

#[test]
fn take_over_waits_for_the_firmware_to_let_go_of_the_old_holder() {
    // A NIC slow to notice: idle, its worker naps a second between polls.
    let mut cfg = live_rig::config("takeover", 1, Regs::default());
    let nap = Duration::from_secs(1);
    cfg.backoff = Backoff {
        spin: Duration::ZERO,
        yield_until: Duration::ZERO,
        nap,
        max_nap: nap,
        long_idle: Duration::MAX,
    };
    let c = live_rig::start(cfg);
    let sram = sram(&c, 0);
    // A holder in another process opens port 4 (generation 5) and dies
    // once the firmware serves it.
    sram.store_u32(port_reg(4, pcb::GENERATION) as u64, 4);
    let mut child = spawn_holder(&c, 0, 4);
    let start = Instant::now();
    while sram.load_u32(port_reg(4, pcb::FW_GENERATION) as u64) != Some(5)
        || sram.load_u32(port_reg(4, pcb::FW_STATE) as u64) != Some(pcb::STATE_OPEN)
    {
        assert!(start.elapsed() < Duration::from_secs(10), "the firmware did not serve the port");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Its control connection ended: the device process closes the port
    // on its behalf at once, though the firmware, napping, still serves it.
    let start = Instant::now();
    while sram.load_u32(port_reg(4, pcb::STATE) as u64) != Some(pcb::STATE_CLOSED) {
        assert!(start.elapsed() < Duration::from_secs(2), "the dead holder's port stays open");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(sram.load_u32(port_reg(4, pcb::FW_STATE) as u64), Some(pcb::STATE_OPEN));
    // A new holder is handed the port only once the firmware lets go
    // (and once no other process, nor this test's own mapping of the
    // windows, has the port's memory: that mapping goes first).
    drop(sram);
    let dir = ClusterDir::open_path(c.path()).unwrap();
    LiveBackend::attach_with(&dir, 0, 4, &AttachOptions::default()).unwrap();
    let sram = live_rig::sram(&c, 0);
    assert_eq!(sram.load_u32(port_reg(4, pcb::STATE) as u64), Some(pcb::STATE_CLOSED));
    assert_eq!(sram.load_u32(port_reg(4, pcb::FW_STATE) as u64), Some(pcb::STATE_CLOSED));
}

#[test]
fn dma_memory_comes_only_from_the_ports_slice() {
    let c = cluster("slice", 1, Regs::default());
    for port in [0u8, 5] {
        let be = attach(&c, 0, port).unwrap();
        let (start, len) = be.slice();
        assert_eq!((start, len), c.dir().port_slice(port));
        // An eighth of host memory, less its page table's share.
        assert!((HOST / 8 * 98 / 100..=HOST / 8).contains(&len), "{len}");
        let mut got = Vec::new();
        while let Some(bus) = be.alloc_dma(3 * PAGE_SIZE + 1) {
            assert_eq!(bus % PAGE_SIZE, 0);
            assert!(bus >= start && bus + 4 * PAGE_SIZE <= start + len, "{bus:#x}");
            assert_ne!(bus, 0, "bus address 0 is never handed out");
            got.push(bus);
        }
        assert!(got.len() >= (len / (4 * PAGE_SIZE)) as usize - 1);
        assert_eq!(be.dma_in_use(), got.len() as u64 * 4 * PAGE_SIZE);
        for &b in &got {
            be.free_dma(b, 3 * PAGE_SIZE + 1);
        }
        assert_eq!(be.dma_in_use(), 0);
        be.free_dma(start + PAGE_SIZE, 1);
        assert_eq!(be.bad_frees(), 1);
        // Everything in one piece again.
        assert!(be.alloc_dma(len - PAGE_SIZE).is_some());
    }
}

#[test]
fn ports_of_one_node_allocate_disjoint_memory() {
    let c = cluster("disjoint", 1, Regs::default());
    let a = attach(&c, 0, 1).unwrap();
    let b = attach(&c, 0, 2).unwrap();
    let x = a.alloc_dma(PAGE_SIZE).unwrap();
    let y = b.alloc_dma(PAGE_SIZE).unwrap();
    a.host_write(x, b"port one");
    b.host_write(y, b"port two");
    let mut buf = [0u8; 8];
    a.host_read(x, &mut buf);
    assert_eq!(&buf, b"port one");
    // Port 1 cannot see (or scribble over) port 2's memory.
    a.host_read(y, &mut buf);
    assert_eq!(buf, [0u8; 8]);
    a.host_write(y, b"XXXXXXXX");
    b.host_read(y, &mut buf);
    assert_eq!(&buf, b"port two");
    assert_eq!(a.refused_accesses(), 2);
}

fn start_of_slice(be: &LiveBackend) -> u64 {
    be.slice().0
}

#[test]
fn out_of_range_and_foreign_accesses_read_zero_and_drop_writes() {
    let c = cluster("bounds", 1, Regs::default());
    let be = attach(&c, 0, 2).unwrap();
    let sram = sram(&c, 0);
    let mut b = [0xFFu8; 16];
    // Past the end of SRAM (and straddling it).
    be.sram_read(map::SRAM_MIN - 8, &mut b);
    assert_eq!(b, [0u8; 16]);
    assert_eq!(be.sram_load_u32(u32::MAX), 0);
    assert_eq!(be.sram_load_u64(map::SRAM_MIN - 4), 0);
    // Reads anywhere inside are fine.
    assert_eq!(be.sram_load_u32(reg(regs::MAGIC)), regs::MAGIC_VALUE);
    assert_eq!(be.refused_accesses(), 3);
    // Writes: another port's window, a register the host does not own,
    // the translation cache, and past the end.
    be.sram_store_u32(port_reg(3, pcb::STATE), 1);
    be.sram_store_u32(reg(regs::FW_STATUS), 7);
    be.sram_write(map::TLB, &[1; 16]);
    be.sram_write(map::SRAM_MIN - 2, &[1; 4]);
    be.sram_write(port_window(2) + PORT_WINDOW - 4, &[1; 8]); // straddles out of the window
                                                              // Writes outside the window go to the device process, which refuses
                                                              // these (each named) when they are sent.
    assert_eq!(be.refused_accesses(), 3);
    assert_eq!(
        be.flush(),
        Err(DriverError::Cluster { path: c.path().to_path_buf(), fault: ClusterFault::Refused })
    );
    assert_eq!(be.refused_accesses(), 8);
    assert!(be.last_refusal().unwrap().contains("port 2 may not write"), "{:?}", be.last_refusal());
    assert_eq!(sram.load_u32(port_reg(3, pcb::STATE) as u64), Some(0));
    assert_eq!(sram.load_u32(reg(regs::FW_STATUS) as u64), Some(regs::FW_RUNNING));
    // What the port owns is writable.
    let evq = be.slice().0 + PAGE_SIZE;
    let mut reg_evq = evq.to_le_bytes().to_vec();
    reg_evq.extend_from_slice(&64u32.to_le_bytes());
    be.sram_write(reg(regs::port_evq_bus(2)), &reg_evq);
    be.sram_store_u32(reg(regs::TRACE_ENABLE), 1);
    be.flush().unwrap();
    assert_eq!(sram.load_u32(reg(regs::port_evq_len(2)) as u64), Some(64));
    assert_eq!(sram.load_u64(reg(regs::port_evq_bus(2)) as u64), Some(evq));
    // Its page table in host memory, through the device process: an entry
    // naming a page of its slice, not one outside.
    let layout = c.dir().host_layout();
    let page = (start_of_slice(&be) + 5 * PAGE_SIZE) / PAGE_SIZE;
    be.pt_write(2, 3, &[host_driver::nic_abi::page_table::pte(page)]);
    be.commit().unwrap();
    let host = c.dir().map_host(0).unwrap();
    assert_eq!(
        host.load_u64(layout.table(2) + 3 * 8),
        Some(host_driver::nic_abi::page_table::pte(page))
    );
    be.pt_write(2, 4, &[host_driver::nic_abi::page_table::pte(layout.slice(3).0 / PAGE_SIZE)]);
    assert!(be.commit().is_err(), "an entry onto port 3's memory");
    assert_eq!(host.load_u64(layout.table(2) + 4 * 8), Some(0));
    assert_eq!(be.refused_accesses(), 9);
    // The multicast group table (the driver installs groups), but not the
    // firmware's child lists after it.
    be.sram_store_u32(map::group_entry(3) + 4, 0x55);
    be.flush().unwrap();
    assert_eq!(sram.load_u32(map::group_entry(3) as u64 + 4), Some(0x55));
    assert_eq!(be.refused_accesses(), 9);
    be.sram_write(map::MCAST_LISTS - 2, &[1; 4]);
    assert!(be.flush().is_err(), "a write across the end of the group table");
    assert_eq!(be.refused_accesses(), 10);
    assert_eq!(sram.load_u32(map::MCAST_LISTS as u64), Some(0));
    // Host memory outside the slice, and huge addresses.
    let (start, len) = be.slice();
    be.host_write(start + len - 2, &[1, 2, 3, 4]);
    be.host_read(u64::MAX - 1, &mut b);
    assert_eq!(be.host_load_u32(start - 4), 0);
    assert_eq!(be.refused_accesses(), 13);
}

#[test]
fn words_are_little_endian_and_unaligned_ones_still_work() {
    let c = cluster("words", 1, Regs::default());
    let be = attach(&c, 0, 0).unwrap();
    let w = port_window(0);
    be.sram_store_u64(w + 0x100, 0x0807_0605_0403_0201);
    let mut b = [0u8; 8];
    be.sram_read(w + 0x100, &mut b);
    assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(be.sram_load_u32(w + 0x104), 0x0807_0605);
    // Unaligned words and odd byte ranges.
    be.sram_store_u32(w + 0x201, 0xAABB_CCDD);
    assert_eq!(be.sram_load_u32(w + 0x201), 0xAABB_CCDD);
    be.sram_store_u64(w + 0x303, u64::MAX - 5);
    assert_eq!(be.sram_load_u64(w + 0x303), u64::MAX - 5);
    let data: Vec<u8> = (0..77).collect();
    be.sram_write(w + 0x401, &data);
    let mut back = vec![0u8; 77];
    be.sram_read(w + 0x401, &mut back);
    assert_eq!(back, data);
    assert_eq!(be.refused_accesses(), 0);
}

#[test]
fn doorbells_from_many_threads_and_ports_all_count() {
    let c = cluster("doorbell", 1, Regs::default());
    let a = attach(&c, 0, 0).unwrap();
    let b = attach(&c, 0, 1).unwrap();
    // Each port rings its own window's doorbell (the only SRAM page it
    // may write).
    let bells = || {
        a.sram_load_u32(port_reg(0, pcb::DOORBELL)) + b.sram_load_u32(port_reg(1, pcb::DOORBELL))
    };
    let before = bells();
    std::thread::scope(|s| {
        for be in [&a, &b, &a, &b] {
            s.spawn(move || {
                for _ in 0..10_000 {
                    be.doorbell();
                }
            });
        }
    });
    assert_eq!(bells(), before + 40_000);
}

#[test]
fn the_clock_is_monotonic_and_idle_wait_returns() {
    let c = cluster("clock", 1, Regs::default());
    let be = attach(&c, 0, 0).unwrap();
    let t0 = be.now_ns();
    assert!(be.idle_wait());
    std::thread::sleep(Duration::from_millis(2));
    let t1 = be.now_ns();
    assert!(t1 >= t0 + 2_000_000, "{t0} {t1}");
    // A long idle streak ends up sleeping rather than spinning.
    let start = std::time::Instant::now();
    let mut waits = 0;
    while start.elapsed() < Duration::from_millis(20) {
        be.idle_wait();
        waits += 1;
    }
    assert!(waits < 2_000_000, "{waits} waits in 20 ms");
}

#[test]
fn the_driver_opens_a_nic_and_only_the_attached_port() {
    let c = cluster("nic", 3, Regs::default());
    let be = attach(&c, 1, 4).unwrap();
    let nic = Nic::open(be.clone()).unwrap();
    assert_eq!((nic.node_id(), nic.num_nodes(), nic.send_tokens()), (1, 3, 8));
    assert_eq!(
        nic.open_port(5, PortOptions::default()).err(),
        Some(DriverError::PortNotAttached { port: 5, attached: 4 })
    );
    let p = nic.open_port(4, PortOptions::default()).unwrap();
    let sram = sram(&c, 1);
    assert_eq!(sram.load_u32(port_reg(4, pcb::STATE) as u64), Some(pcb::STATE_OPEN));
    let evq = p.event_queue_bus();
    let (start, len) = be.slice();
    assert!(evq >= start && evq < start + len);
    drop(p);
    assert_eq!(sram.load_u32(port_reg(4, pcb::STATE) as u64), Some(pcb::STATE_CLOSED));
    assert_eq!(be.refused_accesses(), 0);
}

#[test]
fn open_timeout_waits_for_the_firmware_to_boot() {
    let c = cluster("boot", 1, Regs::default());
    // The register block says the firmware is still booting.
    sram(&c, 0).store_u32(reg(regs::FW_STATUS) as u64, regs::FW_BOOTING);
    let be = attach(&c, 0, 0).unwrap();
    assert_eq!(
        Nic::open_timeout(be.clone(), Duration::from_millis(10)).err(),
        Some(DriverError::NicNotReady { fw_status: regs::FW_BOOTING })
    );
    let sram = sram(&c, 0);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        sram.store_u32(reg(regs::FW_STATUS) as u64, regs::FW_RUNNING);
    });
    Nic::open_timeout(be, Duration::from_secs(10)).unwrap();
    t.join().unwrap();
}

#[test]
fn open_timeout_waits_for_a_device_still_writing_its_registers() {
    let c = cluster("reset", 1, Regs::default());
    let sram = sram(&c, 0);
    sram.store_u32(reg(regs::MAGIC) as u64, 0);
    let be = attach(&c, 0, 0).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        sram.store_u32(reg(regs::MAGIC) as u64, regs::MAGIC_VALUE);
    });
    Nic::open_timeout(be, Duration::from_secs(10)).unwrap();
    t.join().unwrap();
}

#[test]
fn send_and_receive_through_the_mapped_files() {
    let c = cluster("e2e", 2, Regs::default());
    let a = attach(&c, 0, 1).unwrap();
    let b = attach(&c, 1, 2).unwrap();
    let na = Nic::open(a.clone()).unwrap();
    let nb = Nic::open(b).unwrap();
    let mut pa = na.open_port(1, PortOptions::default()).unwrap();
    let mut pb = nb.open_port(2, PortOptions::default()).unwrap();
    let t = Duration::from_secs(10);
    assert!(matches!(pa.wait(t), Ok(Event::PortOpened { .. })));
    assert!(matches!(pb.wait(t), Ok(Event::PortOpened { .. })));
    let rx = pb.alloc(64).unwrap();
    pb.provide_receive_buffer(&rx, 6, Priority::High, 77).unwrap();
    let tx = pa.alloc(40).unwrap();
    pa.write(&tx, 0, &[0x42; 40]).unwrap();
    pa.send(&tx, 0, 40, 6, Priority::High, 1, 2, 9).unwrap();
    match pb.wait(t).unwrap() {
        Event::Received { node, port, len, tag, buffer, inline, .. } => {
            assert_eq!((node, port, len, tag, buffer), (0, 1, 40, 77, rx.vaddr));
            // Too long to travel inline (16 bytes at most).
            assert!(inline.is_empty(), "{inline:?}");
        }
        e => panic!("{e:?}"),
    }
    let sent = pa.wait(t).unwrap();
    assert!(matches!(sent, Event::Sent { tag: 9, status: SendStatus::Ok, .. }), "{sent:?}");
    let mut back = [0u8; 40];
    pb.read(&rx, 0, &mut back).unwrap();
    assert_eq!(back, [0x42; 40]);
    let bells: u32 = (0..nic_abi::NUM_PORTS)
        .map(|p| sram(&c, 0).load_u32(port_reg(p, pcb::DOORBELL) as u64).unwrap())
        .sum();
    assert!(bells > 0);
    assert_eq!(a.refused_accesses(), 0);
}

/// A 2-node live cluster `tag` with port `port` attached on both nodes:
/// (the cluster, node 1's port with a 4 KiB receive buffer posted for
/// each of its receive tokens, tagged 0, 1, ..., node 0's port, those
/// buffers).
fn two_ports(
    tag: &str,
    port: u8,
) -> (RtCluster, Port<LiveBackend>, Port<LiveBackend>, Vec<host_driver::DmaBuf>) {
    let c = cluster(tag, 2, Regs::default());
    let path = path_str(&c);
    let mut rx = Port::attach(&path, 1, port).unwrap();
    let tx = Port::attach(&path, 0, port).unwrap();
    let mut inbox = Vec::new();
    for tag in 0..u64::from(rx.recv_tokens()) {
        let b = rx.alloc(4096).unwrap();
        rx.provide(&b, RecvOpts { tag, ..Default::default() }).unwrap();
        inbox.push(b);
    }
    (c, rx, tx, inbox)
}

/// The transfer as the rustdoc shows it: quiet sends (no `notify`), a
/// `recv_timeout` on the sender at `NoSendToken`, a receiver looping on
/// `recv_timeout`. Each wait ends with the event it waits for, never with
/// the timeout (a wait for a token used to last the whole timeout: the
/// completion that freed it was consumed and not returned).
#[test]
fn a_wait_for_a_send_token_ends_with_the_completion_that_frees_it() {
    const COUNT: u64 = 300;
    let (_c, mut rx, mut tx, inbox) = two_ports("token-wait", 1);
    let to = rx.address();
    let limit = Duration::from_secs(20);
    let sender = std::thread::spawn(move || {
        let msgs: Vec<_> = (0..8u8).map(|k| tx.alloc_from(&[k; 4096]).unwrap()).collect();
        let (mut refused, mut waits) = (0, 0);
        for i in 0..COUNT {
            // (No buffer changes while a send of it may be in flight.)
            let msg = &msgs[(i % 8) as usize];
            loop {
                match tx.send_to(msg, to, SendOpts::default()) {
                    Ok(()) => break,
                    Err(DriverError::NoSendToken) => {
                        refused += 1;
                        match tx.recv_timeout(limit) {
                            Ok(Event::Sent { status: SendStatus::Ok, .. }) => {
                                waits += 1;
                                assert!(tx.send_tokens_free() >= 1);
                            }
                            other => panic!("send {i}: waiting for a token gave {other:?}"),
                        }
                    }
                    Err(e) => panic!("send {i}: {e}"),
                }
            }
        }
        (refused, waits, tx)
    });
    for i in 0..COUNT {
        let e = rx.recv_timeout(limit).unwrap_or_else(|e| panic!("message {i}: {e}"));
        let Event::Received { tag, node: 0, port: 1, len: 4096, .. } = e else {
            panic!("message {i}: {e:?}");
        };
        assert_eq!(rx.read_message(&e).unwrap(), vec![(i % 8) as u8; 4096], "message {i}");
        rx.provide(&inbox[tag as usize], RecvOpts { tag, ..Default::default() }).unwrap();
    }
    let (refused, waits, mut tx) = sender.join().unwrap();
    assert!(refused > 0, "the sender ran out of tokens at least once");
    assert_eq!(waits, refused, "every wait for a token ended with a completion");
    // Nothing else for either program; the last quiet sends complete.
    let quiet = Duration::from_millis(200);
    assert_eq!(rx.recv_timeout(quiet), Err(DriverError::Timeout));
    assert_eq!(tx.recv_timeout(quiet), Err(DriverError::Timeout));
    assert_eq!(tx.sends_in_flight(), 0);
}

/// One thread serves a sending and a receiving port with `recv_any`: it
/// sends until `NoSendToken`, then takes whatever comes first (a message,
/// or the completion that frees a token). Every message arrives intact,
/// and no wait ends with the timeout.
#[test]
fn one_thread_serves_two_ports_with_recv_any() {
    const COUNT: u64 = 300;
    let (_c, mut rx, mut tx, inbox) = two_ports("recv-any", 2);
    let to = rx.address();
    let msg = tx.alloc_from(&[0x5A; 4096]).unwrap();
    let (mut sent, mut got, mut completions) = (0, 0, 0);
    while got < COUNT {
        while sent < COUNT {
            match tx.send_to(&msg, to, SendOpts::default()) {
                Ok(()) => sent += 1,
                Err(DriverError::NoSendToken) => break,
                Err(e) => panic!("send {sent}: {e}"),
            }
        }
        match Port::recv_any(&mut [&mut tx, &mut rx], Duration::from_secs(20)) {
            Ok((0, Event::Sent { status: SendStatus::Ok, .. })) => completions += 1,
            Ok((1, e @ Event::Received { tag, node: 0, port: 2, .. })) => {
                assert_eq!(rx.read_message(&e).unwrap(), vec![0x5A; 4096], "message {got}");
                got += 1;
                rx.provide(&inbox[tag as usize], RecvOpts { tag, ..Default::default() }).unwrap();
            }
            other => panic!("after {got} messages: {other:?}"),
        }
    }
    assert_eq!(sent, COUNT);
    assert!(completions > 0, "the sender ran out of tokens and got them back");
    assert_eq!(
        Port::recv_any(&mut [&mut tx, &mut rx], Duration::from_millis(200)),
        Err(DriverError::Timeout)
    );
    assert_eq!(tx.sends_in_flight(), 0);
}

/// Run both ends of a ping-pong in two threads.
fn run_pingpong(
    c: &RtCluster,
    ping: (u32, u8),
    pong: (u32, u8),
    size: u32,
    count: u64,
) -> (Result<bench::PingPongReport, BenchError>, Result<bench::PingPongReport, BenchError>) {
    let path = path_str(c);
    let t = Duration::from_secs(20);
    std::thread::scope(|s| {
        let path2 = path.clone();
        let pong_h = s.spawn(move || {
            let (nic, mut port) =
                bench::open_live_port(&path2, pong.0, pong.1, t, Default::default()).unwrap();
            let mut cfg = PingPongConfig::new(PingRole::Pong, ping.0 as u16, ping.1, size, count);
            cfg.timeout = t;
            bench::pingpong(&nic, &mut port, &cfg)
        });
        let ping_h = s.spawn(move || {
            let (nic, mut port) =
                bench::open_live_port(&path, ping.0, ping.1, t, Default::default()).unwrap();
            let mut cfg = PingPongConfig::new(PingRole::Ping, pong.0 as u16, pong.1, size, count);
            cfg.timeout = t;
            bench::pingpong(&nic, &mut port, &cfg)
        });
        (ping_h.join().unwrap(), pong_h.join().unwrap())
    })
}

#[test]
fn pingpong_between_nodes_measures_every_checked_round_trip() {
    let c = cluster("pingpong", 2, Regs::default());
    for size in [1u32, 8, 5000] {
        let (ping, pong) = run_pingpong(&c, (0, 1), (1, 2), size, 50);
        let ping = ping.unwrap();
        pong.unwrap();
        let l = ping.one_way.unwrap();
        assert_eq!(l.samples, 50);
        assert!(l.min_ns > 0 && l.min_ns <= l.median_ns && l.median_ns <= l.p99_ns);
        assert!(l.p99_ns <= l.max_ns);
    }
}

#[test]
fn pingpong_between_ports_of_one_node_works_too() {
    let c = cluster("pingpong-local", 1, Regs::default());
    let (ping, pong) = run_pingpong(&c, (0, 6), (0, 7), 100, 20);
    assert_eq!(ping.unwrap().one_way.unwrap().samples, 20);
    pong.unwrap();
}

#[test]
fn ping_waits_for_a_pong_that_starts_late() {
    let c = cluster("late-pong", 2, Regs::default());
    let path = path_str(&c);
    let t = Duration::from_secs(20);
    std::thread::scope(|s| {
        let p2 = path.clone();
        let ping = s.spawn(move || {
            let (nic, mut port) = bench::open_live_port(&p2, 0, 0, t, Default::default()).unwrap();
            let mut cfg = PingPongConfig::new(PingRole::Ping, 1, 0, 8, 5);
            cfg.timeout = t;
            bench::pingpong(&nic, &mut port, &cfg)
        });
        std::thread::sleep(Duration::from_millis(50));
        let (nic, mut port) = bench::open_live_port(&path, 1, 0, t, Default::default()).unwrap();
        let cfg = PingPongConfig::new(PingRole::Pong, 0, 0, 8, 5);
        bench::pingpong(&nic, &mut port, &cfg).unwrap();
        let r = ping.join().unwrap().unwrap();
        assert!(r.startup_retries > 0, "the first request found the port closed");
    });
}

#[test]
fn ping_without_a_pong_gives_up_with_a_clear_error() {
    let c = cluster("no-pong", 2, Regs::default());
    let t = Duration::from_millis(100);
    let (nic, mut port) =
        bench::open_live_port(&path_str(&c), 0, 0, t, Default::default()).unwrap();
    let mut cfg = PingPongConfig::new(PingRole::Ping, 1, 5, 8, 5);
    cfg.timeout = t;
    let e = bench::pingpong(&nic, &mut port, &cfg).unwrap_err();
    assert!(
        matches!(
            e,
            BenchError::PeerNotUp { node: 1, port: 5, last: SendStatus::TargetPortClosed, .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("did not come up"), "{e}");
}

/// How long the stream tests' programs wait for anything.
const STREAM_TIMEOUT: Duration = Duration::from_secs(20);

/// The receiving end of a stream from (0, 3) on (1, 3) of `path`, with
/// four receive buffers.
fn stream_receiver(
    path: &str,
    size: u32,
    count: u64,
    check: Check,
) -> Result<bench::StreamReport, BenchError> {
    let t = STREAM_TIMEOUT;
    let (nic, mut port) = bench::open_live_port(path, 1, 3, t, Default::default()).unwrap();
    let mut cfg = StreamConfig::new(StreamRole::Recv, 0, 3, size, count);
    cfg.recv_buffers = 4;
    cfg.check = check;
    cfg.timeout = t;
    bench::stream(&nic, &mut port, &cfg)
}

fn run_stream(
    c: &RtCluster,
    size: u32,
    count: u64,
    window: u32,
    check: Check,
) -> (Result<bench::StreamReport, BenchError>, Result<bench::StreamReport, BenchError>) {
    let path = path_str(c);
    let t = STREAM_TIMEOUT;
    std::thread::scope(|s| {
        let recv = s.spawn(|| stream_receiver(&path, size, count, check));
        let send = s.spawn(|| {
            let (nic, mut port) =
                bench::open_live_port(&path, 0, 3, t, Default::default()).unwrap();
            let mut cfg = StreamConfig::new(StreamRole::Send, 1, 3, size, count);
            cfg.window = window;
            cfg.check = check;
            cfg.timeout = t;
            bench::stream(&nic, &mut port, &cfg)
        });
        (send.join().unwrap(), recv.join().unwrap())
    })
}

#[test]
fn stream_delivers_every_message_intact_and_in_order() {
    let c = cluster("stream", 2, Regs::default());
    for (size, window) in [(3u32, 1u32), (4096, 4), (65536, 8)] {
        let (send, recv) = run_stream(&c, size, 100, window, Check::Full);
        let (send, recv) = (send.unwrap(), recv.unwrap());
        assert_eq!(send.bytes, 100 * size as u64);
        assert_eq!(recv.bytes, 99 * size as u64);
        assert!(recv.mb_per_s.unwrap() > 0.0);
        assert_eq!(send.depth, window);
        assert_eq!(recv.depth, 4);
    }
}

/// A stream from (0, 3) to (1, 3) whose message `bad` arrives with its
/// last byte changed: the receiver is `bench::stream`; the sender is
/// written out here, one message at a time with the stream's pattern,
/// since no NIC or link sends a corrupted message (a flipped bit fails
/// the CRC and the packet is sent again). Returns (sender, receiver).
fn run_stream_with_a_bad_byte(
    c: &RtCluster,
    size: u32,
    count: u64,
    check: Check,
    bad: u64,
) -> (Result<(), String>, Result<bench::StreamReport, BenchError>) {
    let path = path_str(c);
    let t = STREAM_TIMEOUT;
    std::thread::scope(|s| {
        let recv = s.spawn(|| stream_receiver(&path, size, count, check));
        let send = s.spawn(|| {
            let (_nic, mut port) =
                bench::open_live_port(&path, 0, 3, t, Default::default()).unwrap();
            let stream = bench::stream_id(bench::KIND_STREAM, 0, 3);
            let class = size_class_for(size as u64);
            let buf = port.alloc(size as u64).unwrap();
            let mut msg = 0;
            while msg < count {
                let mut data = pattern::make(size as usize, stream, msg as u32);
                if msg == bad {
                    data[size as usize - 1] ^= 0x5A;
                }
                port.write(&buf, 0, &data).unwrap();
                port.send(&buf, 0, size, class, Priority::Low, 1, 3, msg).unwrap();
                loop {
                    match port.wait(t) {
                        Ok(Event::Sent { status: SendStatus::Ok, .. }) => msg += 1,
                        // The receiver is not up yet: send it again.
                        Ok(Event::Sent { status: SendStatus::TargetPortClosed, .. })
                            if msg == 0 =>
                        {
                            std::thread::sleep(Duration::from_millis(1));
                            port.resume(1, 3, Priority::Low).unwrap();
                        }
                        Ok(Event::Sent { status, .. }) => {
                            return Err(format!("message {msg}: {status:?}"))
                        }
                        Ok(_) => continue,
                        Err(e) => return Err(format!("message {msg}: {e}")),
                    }
                    break;
                }
            }
            Ok(())
        });
        (send.join().unwrap(), recv.join().unwrap())
    })
}

#[test]
fn stream_catches_a_corrupted_byte() {
    let c = cluster("corrupt", 2, Regs::default());
    let (_send, recv) = run_stream_with_a_bad_byte(&c, 1000, 60, Check::Full, 36);
    match recv.unwrap_err() {
        BenchError::Content { msg: 36, offset: 999, .. } => {}
        e => panic!("{e}"),
    }
}

#[test]
fn stream_index_check_catches_order_only() {
    let c = cluster("index", 2, Regs::default());
    // A corrupted last byte goes unseen when only the index is checked.
    let (send, recv) = run_stream_with_a_bad_byte(&c, 1000, 20, Check::Index, 4);
    send.unwrap();
    recv.unwrap();
}

#[test]
fn mapped_file_copies_any_offset_and_length() {
    let c = cluster("copies", 1, Regs::default());
    let m = c.dir().map_host(0).unwrap();
    assert_eq!(m.len(), HOST);
    for off in 0..17u64 {
        for len in [0usize, 1, 3, 4, 5, 8, 9, 15, 16, 17, 100] {
            let d: Vec<u8> = (0..len).map(|x| (x as u8).wrapping_mul(31) ^ off as u8).collect();
            assert!(m.write(1000 + off, &d));
            let mut b = vec![0u8; len];
            assert!(m.read(1000 + off, &mut b));
            assert_eq!(b, d, "offset {off} length {len}");
        }
    }
    // The last bytes are reachable; one more is not.
    assert!(m.write(HOST - 3, &[1, 2, 3]));
    assert!(!m.write(HOST - 3, &[1, 2, 3, 4]));
    let mut b = [9u8; 4];
    assert!(!m.read(HOST - 3, &mut b));
    assert_eq!(b, [0; 4]);
    assert!(m.fill(HOST - 5000, 5000, 0xAB));
    assert!(!m.fill(HOST - 5000, 5001, 0xAB));
    assert_eq!(m.fetch_add_u32(8, 5), Some(0));
    assert_eq!(m.fetch_add_u32(8, 5), Some(5));
    assert_eq!(m.fetch_add_u32(9, 1), None, "no atomic add on an unaligned word");
    assert_eq!(m.load_u32(HOST), None);
}

#[test]
fn a_new_holder_finds_the_ports_memory_zeroed() {
    let c = cluster("wipe", 1, Regs::default());
    let be = attach(&c, 0, 6).unwrap();
    let x = be.alloc_dma(2 * PAGE_SIZE).unwrap();
    be.host_write(x, &[0x5E; 8192]);
    // Its send ring: descriptors of its own (addresses, lengths, tags).
    let ring = port_window(6) + map::PORT_SEND_RING;
    let ring_len = (map::SEND_RING_LEN * nic_abi::desc::DESC_SIZE) as usize;
    be.sram_write(ring, &vec![0x5E; ring_len]);
    drop(be);
    let be = attach(&c, 0, 6).unwrap();
    let y = be.alloc_dma(2 * PAGE_SIZE).unwrap();
    assert_eq!(y, x, "the same memory is handed out again");
    let mut back = [0xFFu8; 8192];
    be.host_read(y, &mut back);
    assert!(back.iter().all(|&b| b == 0), "the last holder's bytes are left");
    let mut ring_back = vec![0xFFu8; ring_len];
    be.sram_read(ring, &mut ring_back);
    assert!(ring_back.iter().all(|&b| b == 0), "the last holder's descriptors are left");
}
