//! Simulated multicast latency against the published model, every scheme
//! x algorithm, for G = 4..16 (a calibration aid; `cargo xtask model
//! multicast` is the user-facing form).
//! `cargo run --release -p nic-emu --example mcast_model [profile] [bytes]`
use host_driver::{Algorithm, Scheme};
use nic_emu::mcast::{measure, median, McastRun};
use nic_emu::Profile;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let profile = Profile::load(args.get(1).map_or("lanai9-gm", |s| s)).expect("profile");
    let bytes: u32 = args.get(2).map_or(2, |s| s.parse().expect("bytes"));
    let m = nic_device::mcast::model_params(&profile);
    for scheme in Scheme::ALL {
        for alg in Algorithm::FIXED {
            let mut line = format!("{:10} {:9}", scheme.name(), alg.name());
            for g in (4..=16).step_by(2) {
                let r = measure(&McastRun::new(&profile, scheme, alg, g, bytes, 4));
                let sim = median(&r.latency_ns) as f64 / 1000.0;
                let model = nic_abi::multicast::model::model_latency_us(&m, scheme, alg, g, bytes);
                let flag = if r.ok { "" } else { "!" };
                line += &format!(
                    " | G{g:2} {sim:7.1} {model:7.1} {:+5.1}%{flag}",
                    (sim / model - 1.0) * 100.0
                );
            }
            println!("{line}");
        }
    }
}
