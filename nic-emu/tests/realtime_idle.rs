//! An idle real-time cluster backs off: its device threads sleep in naps
//! instead of spinning. (Alone in its test binary: it measures this
//! process's CPU time.)

mod rt;

use std::time::{Duration, Instant};

use nic_emu::realtime::qemu::process_cpu_seconds;

#[test]
fn an_idle_live_cluster_uses_little_cpu() {
    let c = rt::live("idle", 4);
    // Past the spin and yield phases, into long naps.
    std::thread::sleep(Duration::from_millis(300));
    let me = std::process::id();
    let (c0, t0) = (process_cpu_seconds(me).unwrap(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = (process_cpu_seconds(me).unwrap() - c0) / t0.elapsed().as_secs_f64();
    eprintln!("idle live cluster of 4 NICs: {:.1}% of a core", used * 100.0);
    assert!(used < 0.25, "an idle cluster used {:.0}% of a core", used * 100.0);
    // And it still answers after idling.
    rt::pingpong(c.path(), (0, 1), (3, 1), 8, 20);
}
