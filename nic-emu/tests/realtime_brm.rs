//! The bandwidth resource manager of the real-time backends: the master
//! process (`nic-cluster brm`) the cluster starts, the agents in the
//! device process, and programs asking over `<dir>/brm.sock` with
//! `BrmClient::connect`. Live and qemu.
//!
//! The qemu test FAILS (naming what is missing) when qemu-system-riscv64
//! or the riscv64 target is not installed; it is never skipped.

mod rt;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use host_brm::socket::{read_frame, write_frame};
use host_brm::{decode, encode, AgentReply, BrmClient, Criterion, FlowId, Refused, Reply, Request};
use host_driver::cluster::ClusterBackend;
use host_driver::{LiveBackend, Nic, Priority};
use nic_emu::brm::Calibration;
use nic_emu::realtime::{process, BrmSetup, RtCluster, RtConfig};
use nic_emu::{Profile, Topology};

fn lanai4() -> (Profile, Calibration) {
    let p = Profile::load("lanai4-gm").unwrap();
    let c = Calibration::for_profile("lanai4-gm", &p).unwrap().expect("stored calibration");
    (p, c)
}

fn flow(s: u16, d: u16) -> FlowId {
    FlowId::new(s, 1, d, 1, Priority::Low)
}

/// The IDT node `node`'s NIC has for `f` now, read by an ordinary host
/// process attached to `port` (reads of the flow table are allowed).
fn installed(path: &std::path::Path, f: FlowId, port: u8) -> Option<u32> {
    let be = LiveBackend::attach(&path.to_string_lossy(), f.src_node, port).unwrap();
    let nic = Nic::open_timeout(be, Duration::from_secs(10)).unwrap();
    nic.flow(f.key()).map(|i| i.idt)
}

/// Send raw bytes as one frame and read the answer.
fn raw_call(sock: &std::path::Path, bytes: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write_frame(&mut s, bytes).unwrap();
    read_frame(&mut s, Duration::from_secs(10)).unwrap()
}

#[test]
fn a_live_brm_admits_refuses_by_each_criterion_installs_idts_and_releases() {
    let (p, cal) = lanai4();
    let mut cfg = RtConfig::new(&rt::cluster_path("brm"), ClusterBackend::Live, 6);
    cfg.profile = p;
    // Nodes 0..3 on switch 0, 3..6 on switch 1, one trunk (port 15).
    cfg.topology = Topology::TwoSwitch;
    cfg.brm = Some(BrmSetup::default());
    let mut c = rt::start(cfg);
    let path = c.path().to_path_buf();
    let d = c.dir().clone();
    let master = c.brm_pid().expect("the BRM master process runs with the cluster");
    assert_ne!(master, std::process::id());
    assert!(d.brm_socket_path().exists());
    for n in 0..6 {
        assert!(d.brm_agent_socket_path(n).exists(), "node {n}'s agent socket");
    }
    let mut brm = BrmClient::connect(&path.to_string_lossy()).unwrap();

    // Admitted: IDT = T * Bmax / B, installed in the source NIC.
    let a = brm.request_bandwidth(flow(0, 3), 55.0).expect("admitted");
    assert_eq!(a.idt, cal.idt_for(55.0));
    assert_eq!(installed(&path, flow(0, 3), 7), Some(a.idt));

    // 1: node 0 already sends 55.
    let r = brm.request_bandwidth(flow(0, 1), 40.0).unwrap_err();
    assert_eq!(r.criterion(), Some(Criterion::SourceNode { node: 0 }), "{r}");
    assert!(r.to_string().contains("criterion 1"), "{r}");
    assert_eq!(installed(&path, flow(0, 1), 7), None, "a refused flow gets no entry");
    // 3: node 3 already receives 55.
    let r = brm.request_bandwidth(flow(4, 3), 40.0).unwrap_err();
    assert_eq!(r.criterion(), Some(Criterion::DestinationNode { node: 3 }), "{r}");
    // 2: the trunk (switch 0, port 15) would carry 3 x 55 > its link.
    brm.request_bandwidth(flow(1, 4), 55.0).expect("admitted");
    let r = brm.request_bandwidth(flow(2, 5), 55.0).unwrap_err();
    assert_eq!(r.criterion(), Some(Criterion::SwitchPort { switch: 0, port: 15 }), "{r}");

    // Releasing one lets the refused request in; the released entry goes.
    assert_eq!(brm.release_bandwidth(flow(0, 3)), Ok(true));
    assert_eq!(installed(&path, flow(0, 3), 7), None);
    let a = brm.request_bandwidth(flow(2, 5), 55.0).expect("admitted after the release");
    assert_eq!(installed(&path, flow(2, 5), 7), Some(a.idt));
    // Best effort: node 1 already sends 55 reserved, so 0 -> 1 gets a
    // share of what is left there (regulated), installed the same way.
    let be_idt = brm.best_effort(flow(0, 1)).unwrap();
    assert!(be_idt > cal.idt_for(55.0), "{be_idt}");
    assert_eq!(installed(&path, flow(0, 1), 7), Some(be_idt));
    let st = brm.status().unwrap();
    assert_eq!(st.len(), 3, "{st:?}");

    // Malformed frames: answered with an error, counted, harmless.
    let sock = d.brm_socket_path();
    let bad: Reply = decode(&raw_call(&sock, &[0xFF, 0xFF, 0xFF])).unwrap();
    assert!(matches!(bad, Reply::Refused(Refused::BadRequest(_))), "{bad:?}");
    let ok: Reply = decode(&raw_call(&sock, &encode(&Request::Status))).unwrap();
    assert!(matches!(ok, Reply::Status(ref v) if v.len() == 3), "{ok:?}");
    let agent_bad: AgentReply = decode(&raw_call(&d.brm_agent_socket_path(2), &[9, 9])).unwrap();
    assert!(matches!(agent_bad, AgentReply::Failed(_)), "{agent_bad:?}");
    // A bogus length is dropped, not waited on.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert_eq!(s.read(&mut [0u8; 4]).unwrap(), 0, "the master closes a frame it will not read");
    assert_eq!(brm.status().unwrap().len(), 3, "the master goes on");
    let (frames, malformed, _broken, refused) = c.brm_agent_counters().unwrap();
    assert!(frames >= 5 && malformed >= 1, "{frames} {malformed}");
    assert_eq!(refused, 0, "the agents stay inside the flow table");

    // A host program still cannot write the flow table itself.
    let be = LiveBackend::attach(&path.to_string_lossy(), 1, 6).unwrap();
    let nic = Nic::open(be.clone()).unwrap();
    nic.set_flow_idt(flow(1, 0).key(), 7).unwrap();
    assert!(be.refused_accesses() > 0);
    assert_eq!(nic.flow(flow(1, 0).key()), None);
    drop((nic, be));

    // A dead master: requests fail at once, never hang.
    process::request_stop(master).unwrap();
    let t = Instant::now();
    while c.brm_pid().is_some() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(c.brm_pid().is_none(), "the master exits on SIGTERM");
    let t = Instant::now();
    let e = brm.request_bandwidth(flow(3, 0), 10.0).unwrap_err();
    assert!(matches!(e, Refused::Unavailable(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    c.stop().unwrap();
    assert!(!path.exists());
}

#[test]
fn after_a_nic_reset_the_live_brm_installs_its_flow_entries_again() {
    let (p, cal) = lanai4();
    let mut cfg = RtConfig::new(&rt::cluster_path("brm-reset"), ClusterBackend::Live, 3);
    cfg.profile = p;
    cfg.brm = Some(BrmSetup::default());
    let c = rt::start(cfg);
    let path = c.path().to_path_buf();
    let mut brm = BrmClient::connect(&path.to_string_lossy()).unwrap();
    let a = brm.request_bandwidth(flow(1, 0), 30.0).expect("admitted");
    assert_eq!(a.idt, cal.idt_for(30.0));
    let other = brm.request_bandwidth(flow(2, 0), 20.0).expect("admitted");
    assert_eq!(installed(&path, flow(1, 0), 7), Some(a.idt));
    c.reset_node(1);
    let t = Instant::now();
    while c.nic_stats(1).counters.resets == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "no reset");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.wait_running(Duration::from_secs(5)).unwrap();
    // The reset emptied node 1's flow table; the master notices the new
    // boot and installs the entry again.
    let t = Instant::now();
    while installed(&path, flow(1, 0), 7) != Some(a.idt) {
        assert!(t.elapsed() < Duration::from_secs(5), "not installed again after the reset");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(installed(&path, flow(2, 0), 7), Some(other.idt), "node 2 untouched");
    assert_eq!(brm.status().unwrap().len(), 2);
}

#[test]
fn a_brm_needs_a_calibration_that_fits_the_profile() {
    let (_, mut cal) = lanai4();
    cal.rtc_hz = 1_000_000;
    let f = std::env::temp_dir().join(format!("brm-cal-{}.calibration.toml", std::process::id()));
    std::fs::write(&f, cal.to_toml()).unwrap();
    let mut cfg = RtConfig::new(&rt::cluster_path("brmcal"), ClusterBackend::Live, 2);
    cfg.profile = Profile::load("lanai4-gm").unwrap();
    cfg.brm = Some(BrmSetup { calibration: Some(f.clone()), program: None });
    let e = RtCluster::start(cfg).err().expect("refused").to_string();
    assert!(e.contains("rtc_hz"), "{e}");
    let _ = std::fs::remove_file(&f);
}

#[test]
fn a_qemu_cluster_runs_the_same_brm_and_its_guest_firmware_takes_the_admitted_flow() {
    rt::require_qemu();
    let (p, cal) = lanai4();
    let mut cfg = RtConfig::new(&rt::cluster_path("brmq"), ClusterBackend::Qemu, 3);
    cfg.profile = p;
    cfg.image = Some(rt::firmware_image());
    cfg.brm = Some(BrmSetup::default());
    let mut c = rt::start(cfg);
    assert!(c.brm_pid().is_some());
    let path = c.path().to_string_lossy().into_owned();
    let mut brm = BrmClient::connect(&path).unwrap();
    let a = brm.request_bandwidth(flow(0, 1), 40.0).expect("admitted");
    assert_eq!(a.idt, cal.idt_for(40.0));
    assert_eq!(installed(c.path(), flow(0, 1), 7), Some(a.idt));
    let r = brm.request_bandwidth(flow(0, 2), 50.0).unwrap_err();
    assert_eq!(r.criterion(), Some(Criterion::SourceNode { node: 0 }), "{r}");

    // The guest firmware takes the entry: the flow's packets are counted
    // and its NDT advances. (The guest streams slower than 40 MB/s, so
    // this cannot show the rate bound itself; the live tests do.)
    let recv = std::thread::spawn({
        let path = path.clone();
        move || {
            let (nic, mut port) = host_programs::bench::open_live_port(
                &path,
                1,
                1,
                Duration::from_secs(10),
                host_driver::IdlePolicy::default(),
            )
            .unwrap();
            let cfg = host_programs::bench::StreamConfig::new(
                host_programs::bench::StreamRole::Recv,
                0,
                1,
                65536,
                20,
            );
            host_programs::bench::stream(&nic, &mut port, &cfg).unwrap()
        }
    });
    let (nic, mut port) = host_programs::bench::open_live_port(
        &path,
        0,
        1,
        Duration::from_secs(10),
        host_driver::IdlePolicy::default(),
    )
    .unwrap();
    let scfg = host_programs::bench::StreamConfig::new(
        host_programs::bench::StreamRole::Send,
        1,
        1,
        65536,
        20,
    );
    let before = nic.flow(flow(0, 1).key()).expect("the entry is there");
    let sent = host_programs::bench::stream(&nic, &mut port, &scfg).unwrap();
    recv.join().unwrap();
    let info = nic.flow(flow(0, 1).key()).expect("the entry is there");
    assert_eq!(info.idt, a.idt);
    // 16 packets a message (a start-up retry of the first adds some).
    assert!(info.packets - before.packets >= 20 * 16, "{info:?}");
    assert!(info.ndt > before.ndt, "{info:?}");
    let mb_s = sent.mb_per_s.unwrap();
    eprintln!("qemu: 40 MB/s admitted (IDT {}), stream sent at {mb_s:.2} MB/s", a.idt);
    assert!(mb_s < cal.mb_s_for(a.idt) * 1.05, "{mb_s} MB/s: not paced");

    assert_eq!(brm.release_bandwidth(flow(0, 1)), Ok(true));
    assert!(brm.request_bandwidth(flow(0, 2), 50.0).is_ok(), "admitted after the release");
    c.stop().unwrap();
}

/// Loose on purpose (a loaded 2-core machine): the 7-part flow must get
/// clearly more than the 3-part one, in about the right proportion.
/// Without pacing by the IDTs both would share node 0 about evenly
/// (ratio ~1). The exact figures are in `cargo xtask report rate-control
/// --backend live`.
#[test]
fn on_live_two_admitted_flows_get_bandwidth_in_about_their_idt_ratio() {
    use nic_emu::brm::live::{measure, Probe, Traffic};
    let (p, cal) = lanai4();
    let mut cfg = RtConfig::new(&rt::cluster_path("brmratio"), ClusterBackend::Live, 3);
    cfg.profile = p;
    cfg.pacing = nic_emu::realtime::Pacing::LinkBandwidth;
    cfg.brm = Some(BrmSetup::default());
    let c = rt::start(cfg);
    let path = c.path().to_string_lossy().into_owned();
    let mut brm = BrmClient::connect(&path).unwrap();
    let cap = cal.out_capacity(0.0).min(cal.bmax_mb_s);
    let (f3, f7) = (FlowId::new(0, 2, 2, 2, Priority::Low), FlowId::new(0, 1, 1, 1, Priority::Low));
    let i3 = brm.request_bandwidth(f3, cap * 0.3).unwrap().idt;
    let i7 = brm.request_bandwidth(f7, cap * 0.7).unwrap().idt;
    let (mut t3, mut t7) = (Traffic::start(&path, f3).unwrap(), Traffic::start(&path, f7).unwrap());
    let mut probe = Probe::new(&path, 3);
    let m =
        measure(&mut probe, &[f3, f7], Duration::from_millis(300), Duration::from_secs(1)).unwrap();
    t3.check().unwrap();
    t7.check().unwrap();
    let (got, want) = (m[1].mb_s / m[0].mb_s.max(1e-9), i3 as f64 / i7 as f64);
    eprintln!(
        "live 3:7: {:.2} and {:.2} MB/s (asked {:.2}, {:.2}): ratio {got:.3}, IDT ratio {want:.3}",
        m[0].mb_s,
        m[1].mb_s,
        cap * 0.3,
        cap * 0.7
    );
    assert!(m[0].packets > 0 && m[1].packets > 0, "{m:?}");
    assert!((1.6..=3.2).contains(&got), "achieved ratio {got:.3}, IDT ratio {want:.3}: {m:?}");
    // Neither beats its IDT by much. Not by nothing: each packet moves a
    // flow's NDT on by one IDT, so a flow the busy machine held back
    // (the device thread descheduled) sends its backlog in a burst, and a
    // window that catches the burst sees more than the IDT's rate (alone:
    // 56.9 MB/s for 57.2 asked; with the rest of the suite beside it, up
    // to 1.27 times that).
    assert!(m[1].mb_s < cal.mb_s_for(i7) * 1.35, "{m:?}");
    t3.stop().unwrap();
    t7.stop().unwrap();
    c.stop().unwrap();
}
