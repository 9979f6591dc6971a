//! When each member of a multicast group had the message: one simulated
//! multicast of 2 B (after warm-ups), each member's Received event after
//! the root's call, and with `TRACE=1` every NIC's state-machine
//! transitions during it (microseconds after the post).
//!
//! `cargo run --release -p nic-emu --example mcast_arrivals -- lanai9-gm assisted binary 6`
use host_driver::{Algorithm, Scheme};
use nic_device::profile::Profile;
use nic_emu::mcast::{measure, McastRun};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: mcast_arrivals PROFILE SCHEME ALGORITHM G  (e.g. lanai9-gm nic-cached binary 6)";
    let [prof, scheme, alg, g] = a.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let fail = |what: &str| -> ! {
        eprintln!("{what}\n{usage}");
        std::process::exit(2)
    };
    let prof = Profile::load(prof).unwrap_or_else(|e| fail(&e.to_string()));
    let scheme = Scheme::parse(scheme).unwrap_or_else(|| fail("unknown scheme"));
    let alg = Algorithm::parse(alg, 3).unwrap_or_else(|| fail("unknown algorithm"));
    let g: u16 = g.parse().unwrap_or_else(|_| fail("G must be a number"));
    let mut run = McastRun::new(&prof, scheme, alg, g, 2, 4);
    run.trace = std::env::var_os("TRACE").is_some();
    let r = measure(&run);
    if !r.ok {
        eprintln!("problems: {:?}", r.problems);
    }
    println!(
        "completion latency (us): {:?}",
        r.latency_ns.iter().map(|t| *t as f64 / 1e3).collect::<Vec<_>>()
    );
    for (k, t) in r.last_arrivals_ns.iter().enumerate().skip(1) {
        println!("rank {k:3} {:9.1} us", *t as f64 / 1e3);
    }
    let tick_us = 1e6 / prof.nic.rtc_hz as f64;
    for (k, tr) in r.traces.iter().enumerate() {
        for x in tr {
            let at = x.rtc.saturating_sub(r.last_post_tick) as f64 * tick_us;
            println!(
                "node {k:3} {at:9.1} {:?} {} -> {} {:?} {}",
                x.machine, x.from, x.to, x.cause, x.arg
            );
        }
    }
}
