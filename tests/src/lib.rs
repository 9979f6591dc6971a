//! Integration tests across crates live in tests/tests/; this library holds
//! what they share: finding the example scenarios, running scenario text
//! (or having it refused), and the assertion that a run delivered
//! everything intact.

use std::path::PathBuf;
use std::time::Duration;

use host_driver::cluster::ClusterBackend;
use nic_emu::scenario::{self, Report, RtScenarioOptions, Scenario};

/// The workspace root (this crate lives in `tests/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// Path of an example scenario under scenarios/.
pub fn example(name: &str) -> PathBuf {
    root().join("scenarios").join(name)
}

/// Run an example scenario by file name.
pub fn run_example(name: &str) -> Report {
    let sc = scenario::load_file(&example(name)).unwrap_or_else(|e| panic!("{e}"));
    scenario::run(&sc).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Run scenario text.
pub fn run_text(text: &str) -> Report {
    let sc = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    scenario::run(&sc).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Options of a real-time scenario run in a test: the wall-clock limit
/// `timeout`, 30 s for the NICs to boot, and the firmware image (qemu).
pub fn rt_options(
    backend: ClusterBackend,
    timeout: Duration,
    image: Option<PathBuf>,
) -> RtScenarioOptions {
    let mut o = RtScenarioOptions::new(backend);
    o.timeout = Some(timeout);
    o.boot_timeout = Duration::from_secs(30);
    o.image = image;
    o
}

/// Run scenario text on a real-time backend (`rt_options`, 60 s).
pub fn run_rt_text(text: &str, backend: ClusterBackend, image: Option<PathBuf>) -> Report {
    let v = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let o = rt_options(backend, Duration::from_secs(60), image);
    scenario::run_realtime(&v, &o).unwrap_or_else(|e| panic!("{backend}: {e}"))
}

/// The error that refuses scenario text, at validation or at the start
/// of the run; panics if the scenario is accepted and runs.
pub fn refused(text: &str) -> String {
    match Scenario::parse_validated(text) {
        Ok(v) => match scenario::run(&v) {
            Ok(r) => panic!("accepted:\n{text}\n{}", r.summary()),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// Every flow delivered every message exactly once, intact and in order,
/// nothing went wrong on the hosts, and no NIC refused a descriptor.
pub fn assert_all_intact(r: &Report) {
    let mut bad = Vec::new();
    for f in &r.flows {
        if f.delivered != f.messages
            || f.corrupted != 0
            || f.duplicates != 0
            || f.out_of_order != 0
            || f.send_errors != 0
            || !f.complete
        {
            bad.push(format!(
                "{}: delivered {}/{} corrupted {} duplicates {} out_of_order {} send_errors {}",
                f.name,
                f.delivered,
                f.messages,
                f.corrupted,
                f.duplicates,
                f.out_of_order,
                f.send_errors
            ));
        }
        let expect_bytes: u64 =
            (0..f.messages).map(|i| f.sizes[(i % f.sizes.len() as u64) as usize]).sum();
        let expect_bytes = if f.kind == "pingpong" { 2 * expect_bytes } else { expect_bytes };
        if f.bytes != expect_bytes {
            bad.push(format!("{}: {} bytes delivered, expected {expect_bytes}", f.name, f.bytes));
        }
    }
    let errors: u64 = r.nics.iter().map(|n| n.errors).sum();
    assert!(
        bad.is_empty() && r.complete && r.problems.is_empty() && errors == 0,
        "run not clean (stopped: {}, complete: {}, NIC errors: {errors}):\n{}\nproblems: {:#?}\n{}",
        r.sim.stopped,
        r.complete,
        bad.join("\n"),
        r.problems.iter().take(20).collect::<Vec<_>>(),
        r.summary()
    );
}

/// A cluster driven straight from a test: the test opens NICs and ports
/// with the host driver on the nodes' sim backends, posts descriptors,
/// and lets virtual time run until the events it waits for arrive.
pub mod rig {
    use host_driver::{Event, Nic, Port};
    use nic_emu::{ClusterConfig, KeepAlive, Profile, RunLimit, SimBackend, SimCluster, Topology};

    pub struct Rig {
        pub c: SimCluster,
    }

    impl Rig {
        /// `nodes` nodes on one switch, `profile`, and optionally a short
        /// send timeout (us).
        pub fn new(profile: &str, nodes: usize, send_timeout_us: Option<f64>) -> Rig {
            let p = Profile::load(profile).expect("profile");
            let mut cfg = ClusterConfig::new(p, nodes, Topology::Star);
            cfg.send_timeout_us = send_timeout_us;
            let mut c = SimCluster::new(cfg).expect("cluster");
            c.spawn(0, Box::new(KeepAlive));
            Rig { c }
        }

        /// Node `n`'s backend with its host clock brought up to now.
        pub fn backend(&self, n: usize) -> SimBackend {
            let be = self.c.backend(n);
            be.advance_to(self.c.now_ns());
            be
        }

        pub fn nic(&self, n: usize) -> Nic<SimBackend> {
            Nic::open(self.backend(n)).expect("open NIC")
        }

        /// Bring every host clock up to the cluster's time (before a test
        /// posts anything, so doorbells ring now, not in the past).
        pub fn sync(&self) {
            for n in 0..self.c.nodes() {
                self.c.backend(n).advance_to(self.c.now_ns());
            }
        }

        /// Let `ns` of virtual time pass.
        pub fn run_for(&mut self, ns: u64) {
            let t = self.c.now_ns() + ns;
            self.c.run(RunLimit::Until(t));
            self.sync();
        }

        pub fn now(&self) -> u64 {
            self.c.now_ns()
        }

        /// Run until `port` has an event (at most `limit_ns` from now);
        /// returns it with the virtual time it was found at (within 1 us).
        pub fn next_event(
            &mut self,
            port: &mut Port<SimBackend>,
            limit_ns: u64,
        ) -> Option<(Event, u64)> {
            let end = self.c.now_ns() + limit_ns;
            loop {
                self.sync();
                if let Some(e) = port.poll() {
                    return Some((e, self.c.now_ns()));
                }
                if self.c.now_ns() >= end {
                    return None;
                }
                let t = (self.c.now_ns() + 1_000).min(end);
                self.c.run(RunLimit::Until(t));
            }
        }

        /// The next event that is not PortOpened.
        pub fn next_real_event(
            &mut self,
            port: &mut Port<SimBackend>,
            limit_ns: u64,
        ) -> Option<(Event, u64)> {
            loop {
                match self.next_event(port, limit_ns)? {
                    (Event::PortOpened { .. }, _) => continue,
                    other => return Some(other),
                }
            }
        }
    }
}
