//! The NIC-offloaded collectives through the host driver on each backend:
//! the sim, a live cluster (the MCP as native threads) and a qemu
//! cluster (the riscv64 image under qemu-system-riscv64). Every member of
//! a group of 4 posts the same barriers, allreduces and reduces in the
//! same order; each member must get exactly one `Event::Collective` per
//! collective, with its number, in order, status Ok, and its vector must
//! hold what `collective::reference` computes, bit for bit (the
//! allreduce's at every member, the reduce's at its root). A member whose
//! port is closed is named missing in the others' Incomplete barrier.
//!
//! The qemu test FAILS, naming what is missing, when qemu-system-riscv64
//! or the riscv64imac-unknown-none-elf target is not installed: it is
//! never skipped.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::time::{Duration, Instant};

use cluster_tests::rig::Rig;
use host_driver::collective::reference::{self, Spec};
use host_driver::collective::{self, Alg, Collective, Dtype, Kind, Op};
use host_driver::{
    Algorithm, DmaBuf, Event, Group, LiveBackend, Nic, NicBackend, Port, PortOptions, SendStatus,
};
use nic_emu::SimBackend;

const MS: u64 = 1_000_000;
const PORT: u8 = 2;
const GROUP: u16 = 5;
const NODES: u16 = 4;

/// One collective of a sequence every member posts.
#[derive(Debug, Clone, Copy)]
struct Step {
    kind: Kind,
    /// None: through the port's helper (`barrier`, `allreduce`,
    /// `reduce`), the driver picking the algorithm; Some: through
    /// `Port::collective` with that algorithm.
    alg: Option<Alg>,
    op: Op,
    dtype: Dtype,
    root: u16,
    elems: usize,
}

impl Step {
    fn barrier(alg: Option<Alg>) -> Step {
        Step { kind: Kind::Barrier, alg, op: Op::Sum, dtype: Dtype::U64, root: 0, elems: 0 }
    }

    fn allreduce(alg: Option<Alg>, op: Op, dtype: Dtype, elems: usize) -> Step {
        Step { kind: Kind::Allreduce, alg, op, dtype, root: 0, elems }
    }

    fn reduce(alg: Option<Alg>, root: u16, op: Op, dtype: Dtype, elems: usize) -> Step {
        Step { kind: Kind::Reduce, alg, op, dtype, root, elems }
    }

    fn len(&self) -> usize {
        if self.kind.has_data() {
            self.elems * self.dtype.size()
        } else {
            0
        }
    }

    /// The algorithm the NICs run: the one asked for, or the driver's pick.
    fn algorithm(&self, mtu: (u32, u32)) -> Alg {
        self.alg.unwrap_or_else(|| {
            collective::auto_for(self.kind, self.dtype, self.len() as u32, mtu.0, mtu.1)
        })
    }

    /// The tag posted (the helpers post 0).
    fn tag(&self, k: usize) -> u64 {
        if self.alg.is_some() {
            100 + k as u64
        } else {
            0
        }
    }

    fn name(&self, k: usize, mtu: (u32, u32)) -> String {
        let alg = self.algorithm(mtu).name();
        let how = if self.alg.is_some() { "" } else { " (the driver's pick)" };
        match self.kind {
            Kind::Barrier => format!("step {k}: {alg} barrier{how}"),
            Kind::Reduce => format!(
                "step {k}: {alg} reduce{how} to rank {} of {} {} {}",
                self.root,
                self.elems,
                self.dtype.name(),
                self.op.name()
            ),
            kind => format!(
                "step {k}: {alg} {}{how} of {} {} {}",
                kind.name(),
                self.elems,
                self.dtype.name(),
                self.op.name()
            ),
        }
    }

    /// Rank `rank`'s input to step `k`: values of many magnitudes (the
    /// order of floating-point additions shows in the last bits).
    fn input(&self, k: usize, rank: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for i in 0..self.elems {
            match self.dtype {
                Dtype::F64 => {
                    let x = ((i * 7 + rank * 131 + k * 17) as f64 * 0.618).sin();
                    let x = x
                        * 10f64.powi((i % 9) as i32 - 4)
                        * if rank.is_multiple_of(2) { 1.0 } else { -3.0 };
                    v.extend_from_slice(&x.to_le_bytes());
                }
                Dtype::U64 => {
                    let x = (i as u64 + 1)
                        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .rotate_left(rank as u32 * 7 + k as u32);
                    v.extend_from_slice(&x.to_le_bytes());
                }
                other => panic!("no inputs of {other:?} here"),
            }
        }
        v
    }

    /// What every rank must end with (a reduce: only the root's counts),
    /// from the reference, cross-checked against a plain sum.
    fn expected(&self, what: &str, k: usize, n: usize, mtu: (u32, u32)) -> Vec<Vec<u8>> {
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| self.input(k, r)).collect();
        let spec = Spec::new(
            self.kind,
            self.algorithm(mtu),
            n as u16,
            self.root,
            self.op,
            self.dtype,
            mtu,
        );
        let out =
            reference::run(&spec, &inputs).unwrap_or_else(|e| panic!("{what}: reference: {e}"));
        assert_eq!(self.op, Op::Sum, "{what}: the cross-check below sums");
        let at_root = &out.values[self.root as usize];
        for i in 0..self.elems {
            let e = |b: &[u8]| <[u8; 8]>::try_from(&b[i * 8..i * 8 + 8]).unwrap();
            match self.dtype {
                Dtype::U64 => {
                    let sum =
                        inputs.iter().fold(0u64, |s, b| s.wrapping_add(u64::from_le_bytes(e(b))));
                    assert_eq!(
                        u64::from_le_bytes(e(at_root)),
                        sum,
                        "{what}: reference element {i}"
                    );
                }
                Dtype::F64 => {
                    let sum: f64 = inputs.iter().map(|b| f64::from_le_bytes(e(b))).sum();
                    let got = f64::from_le_bytes(e(at_root));
                    let scale: f64 = inputs.iter().map(|b| f64::from_le_bytes(e(b)).abs()).sum();
                    assert!((got - sum).abs() <= 1e-12 * scale, "{what}: reference element {i}");
                }
                _ => unreachable!(),
            }
        }
        out.values
    }
}

/// The steps of the sim's and live cluster's sequences: the three
/// barriers, f64 allreduces by ring and recursive doubling, a u64 reduce
/// to rank 2, the port's helpers (the driver picking: the dissemination
/// barrier, recursive doubling or the ring by size, the binomial tree),
/// and a long ring allreduce and reduce (79 chunks of 4 KiB on
/// `lanai9-gm`, whose 2 MiB of SRAM give 4 KiB chunks).
fn sequence() -> Vec<Step> {
    vec![
        Step::barrier(Some(Alg::Dissemination)),
        Step::barrier(Some(Alg::Pairwise)),
        Step::barrier(Some(Alg::Tree)),
        Step::allreduce(Some(Alg::Ring), Op::Sum, Dtype::F64, 300),
        Step::allreduce(Some(Alg::Pairwise), Op::Sum, Dtype::F64, 300),
        Step::reduce(Some(Alg::Binomial), 2, Op::Sum, Dtype::U64, 700),
        Step::barrier(None),
        Step::allreduce(None, Op::Sum, Dtype::F64, 300),
        Step::allreduce(None, Op::Sum, Dtype::F64, 4096),
        Step::reduce(None, 2, Op::Sum, Dtype::U64, 40),
        // 313 KB: more chunks than a member's window holds.
        Step::allreduce(Some(Alg::Ring), Op::Sum, Dtype::F64, 40_000),
        Step::reduce(Some(Alg::Binomial), 1, Op::Sum, Dtype::U64, 40_000),
    ]
}

/// How a backend's events are taken.
trait Driver<B: NicBackend> {
    /// Before posting (the sim brings the hosts' clocks up to now).
    fn sync(&mut self) {}
    /// The port's next event other than PortOpened; fails after a while.
    fn next(&mut self, what: &str, port: &mut Port<B>) -> Event;
    /// No further event at any port.
    fn assert_quiet(&mut self, what: &str, ports: &mut [Port<B>]);
}

/// The sim: the rig, and how long (virtual ns) an event may take.
struct Sim<'a>(&'a mut Rig, u64);

impl Driver<SimBackend> for Sim<'_> {
    fn sync(&mut self) {
        self.0.sync();
    }

    fn next(&mut self, what: &str, port: &mut Port<SimBackend>) -> Event {
        match self.0.next_real_event(port, self.1) {
            Some((e, _)) => e,
            None => panic!(
                "sim: {what}: node {}: no event within {} ms of virtual time",
                port.address().node,
                self.1 / MS
            ),
        }
    }

    fn assert_quiet(&mut self, what: &str, ports: &mut [Port<SimBackend>]) {
        self.0.run_for(5 * MS);
        for p in ports {
            if let Some(e) = p.poll() {
                panic!("sim: {what}: node {}: an event more: {e:?}", p.address().node);
            }
        }
    }
}

/// A live or qemu cluster: its name, and how long an event may take.
struct Rt(&'static str, Duration);

impl Driver<LiveBackend> for Rt {
    fn next(&mut self, what: &str, port: &mut Port<LiveBackend>) -> Event {
        let t = Instant::now();
        loop {
            match port.recv_timeout(self.1) {
                Ok(Event::PortOpened { .. }) => continue,
                Ok(e) => return e,
                Err(e) => panic!(
                    "{}: {what}: node {}: no event in {:?}: {e}",
                    self.0,
                    port.address().node,
                    t.elapsed()
                ),
            }
        }
    }

    fn assert_quiet(&mut self, what: &str, ports: &mut [Port<LiveBackend>]) {
        for p in ports {
            while let Some(e) = p.try_recv() {
                if !matches!(e, Event::PortOpened { .. }) {
                    panic!("{}: {what}: node {}: an event more: {e:?}", self.0, p.address().node);
                }
            }
        }
    }
}

/// What a run of steps needs to know: the backend (in messages), the
/// group, the MTU.
struct Cx<'a> {
    backend: String,
    g: &'a Group,
    mtu: (u32, u32),
}

impl<'a> Cx<'a> {
    fn new(backend: &str, g: &'a Group, mtu: (u32, u32)) -> Cx<'a> {
        Cx { backend: backend.to_string(), g, mtu }
    }
}

/// A step posted at every member: its index, number and each member's
/// vector.
struct Posted {
    s: Step,
    k: usize,
    cseq: u32,
    what: String,
    bufs: Vec<Option<DmaBuf>>,
}

/// Post step `k` at every member (ports in rank order): its number must
/// be `cseq`.
fn post<B: NicBackend>(cx: &Cx, ports: &mut [Port<B>], s: Step, k: usize, cseq: u32) -> Posted {
    let (backend, g) = (&cx.backend, cx.g);
    let what = s.name(k, cx.mtu);
    let mut bufs = Vec::new();
    for (rank, p) in ports.iter_mut().enumerate() {
        let buf = s.kind.has_data().then(|| {
            let b = p.alloc(s.len() as u64).unwrap_or_else(|e| panic!("{backend}: alloc: {e}"));
            p.write(&b, 0, &s.input(k, rank)).unwrap();
            b
        });
        let posted = match (s.alg, s.kind, &buf) {
            (None, Kind::Barrier, _) => p.barrier(g),
            (None, Kind::Allreduce, Some(b)) => p.allreduce(g, s.op, s.dtype, b),
            (None, Kind::Reduce, Some(b)) => p.reduce(g, s.root, s.op, s.dtype, b),
            (alg, kind, buf) => p.collective(&Collective {
                group: g,
                kind,
                algorithm: alg,
                op: s.op,
                dtype: s.dtype,
                root: s.root,
                data: buf.as_ref(),
                result: None,
                tag: s.tag(k),
                assisted: false,
            }),
        };
        let got = posted.unwrap_or_else(|e| panic!("{backend}: {what}: rank {rank}: post: {e}"));
        assert_eq!(got, cseq, "{backend}: {what}: rank {rank}: the collective's number");
        bufs.push(buf);
    }
    Posted { s, k, cseq, what, bufs }
}

/// Take each member's event of step `st`: exactly it, in its turn, Ok.
fn take<B: NicBackend>(cx: &Cx, d: &mut impl Driver<B>, ports: &mut [Port<B>], st: &Posted) {
    let (backend, what, cseq) = (&cx.backend, &st.what, st.cseq);
    for (rank, p) in ports.iter_mut().enumerate() {
        let node = p.address().node;
        match d.next(what, p) {
            Event::Collective { group, cseq: c, tag, status, result, missing, .. } => {
                let missing: Vec<u16> = missing.iter().collect();
                assert_eq!(
                    (group, c, tag, status, missing.as_slice()),
                    (cx.g.id(), cseq, st.s.tag(st.k), SendStatus::Ok, &[][..]),
                    "{backend}: {what}: rank {rank} (node {node}): the event \
                     (group, cseq, tag, status, missing)"
                );
                if let Some(b) = &st.bufs[rank] {
                    assert_eq!(result, b.vaddr, "{backend}: {what}: rank {rank}: the result's address");
                }
            }
            other => panic!(
                "{backend}: {what}: rank {rank} (node {node}): expected Collective {cseq}, got {other:?}"
            ),
        }
    }
}

/// Each member's vector of step `st` against the reference.
fn check_results<B: NicBackend>(cx: &Cx, ports: &[Port<B>], st: &Posted) {
    let (s, backend, what) = (&st.s, &cx.backend, &st.what);
    if !s.kind.combines() {
        return;
    }
    let want = s.expected(what, st.k, ports.len(), cx.mtu);
    for (rank, (p, b)) in ports.iter().zip(&st.bufs).enumerate() {
        if s.kind == Kind::Reduce && rank != s.root as usize {
            continue;
        }
        let mut got = vec![0u8; s.len()];
        p.read(b.as_ref().unwrap(), 0, &mut got).unwrap();
        if got != want[rank] {
            let at = got.chunks(8).zip(want[rank].chunks(8)).position(|(a, b)| a != b).unwrap();
            panic!(
                "{backend}: {what}: rank {rank}: the result differs from the reference first at \
                 element {at}: {:02x?} where {:02x?}",
                &got[at * 8..at * 8 + 8],
                &want[rank][at * 8..at * 8 + 8]
            );
        }
    }
}

/// Run `steps` at every member, their numbers from `first`: one at a
/// time (each posted at every member, then each member's event taken),
/// or `pipelined` (all posted first, then the events taken). Returns the
/// next number.
fn run_steps<B: NicBackend>(
    cx: &Cx,
    d: &mut impl Driver<B>,
    ports: &mut [Port<B>],
    steps: &[Step],
    first: u32,
    pipelined: bool,
) -> u32 {
    let how = if pipelined { " (all posted at once)" } else { "" };
    let cx = Cx { backend: format!("{}{how}", cx.backend), ..*cx };
    let mut posted = Vec::new();
    for (k, &s) in steps.iter().enumerate() {
        d.sync();
        posted.push(post(&cx, ports, s, k, first + k as u32));
        if !pipelined {
            take(&cx, d, ports, &posted[k]);
        }
    }
    if pipelined {
        for st in &posted {
            take(&cx, d, ports, st);
        }
    }
    d.assert_quiet("after the last collective", ports);
    for st in &posted {
        check_results(&cx, ports, st);
    }
    first + steps.len() as u32
}

fn group() -> Group {
    Group::new(GROUP, PORT, (0..NODES).collect()).unwrap()
}

/// A sim cluster of `NODES` with the group installed and every member's
/// port served; the MTU.
fn sim_members(rig: &mut Rig, g: &Group) -> (Vec<Port<SimBackend>>, (u32, u32)) {
    let mut ports = Vec::new();
    let mut mtu = (0, 0);
    for n in 0..NODES as usize {
        let nic = rig.nic(n);
        nic.create_group(g, Algorithm::Binomial).unwrap();
        mtu = (nic.mtu(), nic.info().sram_size);
        ports.push(nic.open_port(PORT, PortOptions::default()).unwrap());
    }
    for p in &mut ports {
        match rig.next_event(p, 10 * MS) {
            Some((Event::PortOpened { .. }, _)) => {}
            other => panic!("sim: node {}: expected PortOpened, got {other:?}", p.address().node),
        }
    }
    (ports, mtu)
}

/// Every node's port of cluster `c`, the group installed in each NIC
/// before its port opens; the MTU.
fn rt_members(
    backend: &str,
    c: &nic_emu::realtime::RtCluster,
    g: &Group,
) -> (Vec<Port<LiveBackend>>, (u32, u32)) {
    let path = c.path().to_string_lossy().into_owned();
    let mut ports = Vec::new();
    let mut mtu = (0, 0);
    for node in 0..NODES {
        let be = LiveBackend::attach(&path, node, PORT)
            .unwrap_or_else(|e| panic!("{backend}: attach node {node}: {e}"));
        let nic = Nic::open(be).unwrap_or_else(|e| panic!("{backend}: open node {node}: {e}"));
        nic.create_group(g, Algorithm::Binomial)
            .unwrap_or_else(|e| panic!("{backend}: node {node}: create_group: {e}"));
        mtu = (nic.mtu(), nic.info().sram_size);
        let mut p = nic.open_port(PORT, PortOptions::default()).unwrap();
        p.wait_served(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{backend}: node {node}: port not served: {e}"));
        ports.push(p);
    }
    (ports, mtu)
}

#[test]
fn collectives_end_once_in_order_with_the_reference_results_on_the_sim() {
    let mut rig = Rig::new("lanai9-gm", NODES as usize, None);
    let g = group();
    let (mut ports, mtu) = sim_members(&mut rig, &g);
    let steps = sequence();
    let cx = Cx::new("sim", &g, mtu);
    let next = run_steps(&cx, &mut Sim(&mut rig, 200 * MS), &mut ports, &steps, 1, false);
    assert_eq!(next, steps.len() as u32 + 1);
}

#[test]
fn collectives_posted_all_at_once_end_once_in_order_with_the_reference_results_on_the_sim() {
    let mut rig = Rig::new("lanai9-gm", NODES as usize, None);
    let g = group();
    let (mut ports, mtu) = sim_members(&mut rig, &g);
    let cx = Cx::new("sim", &g, mtu);
    run_steps(&cx, &mut Sim(&mut rig, 200 * MS), &mut ports, &sequence(), 1, true);
}

#[test]
fn collectives_end_once_in_order_with_the_reference_results_on_live() {
    let c = rt::live("collectives", NODES as usize);
    let g = group();
    let (mut ports, mtu) = rt_members("live", &c, &g);
    let steps = sequence();
    let cx = Cx::new("live", &g, mtu);
    let mut d = Rt("live", Duration::from_secs(20));
    let t = Instant::now();
    let next = run_steps(&cx, &mut d, &mut ports, &steps, 1, false);
    run_steps(&cx, &mut d, &mut ports, &steps, next, true);
    println!("live: {} collectives in {:?}", 2 * steps.len(), t.elapsed());
}

#[test]
fn a_barrier_allreduces_and_a_reduce_end_once_in_order_with_the_reference_results_on_qemu() {
    let c = rt::qemu_cluster("collectives", NODES as usize);
    let g = group();
    let (mut ports, mtu) = rt_members("qemu", &c, &g);
    // A handful: a qemu cluster is slow to start.
    let steps = [
        Step::barrier(None),
        Step::allreduce(Some(Alg::Ring), Op::Sum, Dtype::F64, 300),
        Step::allreduce(None, Op::Sum, Dtype::F64, 300),
        Step::reduce(None, 2, Op::Sum, Dtype::U64, 700),
        // 313 KB in 4 KiB chunks (a guest has 8 MiB of SRAM): more than a
        // member's window holds.
        Step::allreduce(Some(Alg::Ring), Op::Sum, Dtype::F64, 40_000),
    ];
    let cx = Cx::new("qemu", &g, mtu);
    let t = Instant::now();
    run_steps(&cx, &mut Rt("qemu", Duration::from_secs(20)), &mut ports, &steps, 1, false);
    println!("qemu: {} collectives in {:?}", steps.len(), t.elapsed());
}

/// The members but the last post a barrier after the last closed its
/// port: each gets one Collective event, Incomplete, naming the last
/// member's node (and only it) missing.
fn check_closed_member<B: NicBackend>(
    backend: &str,
    d: &mut impl Driver<B>,
    g: &Group,
    ports: &mut Vec<Port<B>>,
) {
    let gone = ports.pop().expect("a member to close").address().node;
    d.sync();
    for p in ports.iter_mut() {
        assert_eq!(p.barrier(g).unwrap(), 1, "{backend}");
    }
    for p in ports.iter_mut() {
        let node = p.address().node;
        match d.next(&format!("the barrier with node {gone}'s port closed"), p) {
            Event::Collective {
                group, cseq: 1, status: SendStatus::Incomplete, missing, ..
            } => {
                assert_eq!(group, g.id(), "{backend}: node {node}");
                let missing: Vec<u16> = missing.iter().collect();
                assert_eq!(missing, [gone], "{backend}: node {node}: the members missing");
            }
            other => panic!(
                "{backend}: node {node}: expected barrier 1 Incomplete with node {gone} missing, \
                 got {other:?}"
            ),
        }
    }
    d.assert_quiet("after the barrier with a member closed", ports);
}

#[test]
fn a_member_whose_port_closed_is_named_missing_in_the_others_barrier_on_the_sim() {
    let mut rig = Rig::new("lanai9-gm", NODES as usize, None);
    let g = group();
    let (mut ports, _) = sim_members(&mut rig, &g);
    let start = rig.now();
    // Well before the profile's send timeout (60 s): the closed port's
    // NIC answers that it is gone.
    check_closed_member("sim", &mut Sim(&mut rig, 3_000 * MS), &g, &mut ports);
    // (Less the 5 ms of assert_quiet.)
    let took = rig.now() - start - 5 * MS;
    println!("sim: Incomplete after {} us of virtual time", took / 1000);
}

#[test]
fn a_member_whose_port_closed_is_named_missing_in_the_others_barrier_on_live() {
    let c = rt::live("collectives-closed", NODES as usize);
    let g = group();
    let (mut ports, _) = rt_members("live", &c, &g);
    let t = Instant::now();
    // Well before the profile's send timeout (60 s): the closed port's
    // NIC answers that it is gone.
    check_closed_member("live", &mut Rt("live", Duration::from_secs(5)), &g, &mut ports);
    println!("live: Incomplete after {:?}", t.elapsed());
}
