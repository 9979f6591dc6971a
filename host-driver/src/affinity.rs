//! CPU affinity: which cores a thread may run on, from a list such as
//! `1`, `0-3` or `0,2-3` (the format of taskset(1) and /sys cpulists).
//!
//! A real NIC has a processor of its own. On a small machine the emulated
//! NIC's device thread competes with the host processes for cores;
//! pinning the device threads to some cores (`nic-cluster run --cpus`) and
//! the host programs to the others (`--cpus` of `stream` and `pingpong`)
//! gives each side its own processor, as on real hardware, and steadier
//! figures.

use rustix::thread::{sched_setaffinity, CpuSet};

/// A parsed CPU list, for command lines (`FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<CpuList, String> {
        parse_cpu_list(s).map(CpuList)
    }
}

/// Parse a CPU list (`1`, `0-3`, `0,2-3`). Errors name the bad part.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("CPU list `{s}`: `{part}` is not a CPU number or range"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(format!("CPU list `{s}`: range `{part}` runs backwards"));
        }
        if hi >= CpuSet::MAX_CPU {
            return Err(format!(
                "CPU list `{s}`: CPU {hi} is past the largest, {}",
                CpuSet::MAX_CPU - 1
            ));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs this thread may run on now, ascending.
pub fn current() -> Result<Vec<usize>, String> {
    let set = rustix::thread::sched_getaffinity(None)
        .map_err(|e| format!("cannot read this thread's CPU affinity: {e}"))?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Check that this thread may run on every CPU of `cpus`; the error names
/// the first that it may not and the ones it may.
pub fn check_available(cpus: &[usize]) -> Result<(), String> {
    let have = current()?;
    match cpus.iter().find(|c| !have.contains(c)) {
        None => Ok(()),
        Some(c) => Err(format!("CPU {c} is not available here (this process may use {have:?})")),
    }
}

/// Restrict the calling thread (and the threads and processes it starts
/// afterwards) to `cpus`. An empty list changes nothing. Errors say which
/// CPUs were asked for (e.g. one this machine does not have).
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), String> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        if c >= CpuSet::MAX_CPU {
            return Err(format!(
                "cannot pin to CPU {c}: past the largest, {}",
                CpuSet::MAX_CPU - 1
            ));
        }
        set.set(c);
    }
    sched_setaffinity(None, &set).map_err(|e| {
        let have = current().map(|v| format!(" (this process may use {v:?})")).unwrap_or_default();
        format!("cannot pin to CPUs {cpus:?}: {e}{have}")
    })
}

/// How long one cache line takes to pass from CPU `a` to CPU `b` and
/// back, halved (ns): two threads pinned one on each bounce a counter for
/// about `dur`. What host memory shared between a device thread and a
/// host process costs: on this project's 2-core VM it reads about 30 ns
/// most of the time and 150 ns or more in spells (the hypervisor moving
/// the virtual CPUs apart), and a live stream then runs at half speed.
/// `a` and `b` should differ (on one CPU the two threads take turns).
pub fn handoff_ns(a: usize, b: usize, dur: std::time::Duration) -> Result<f64, String> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;
    let line = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // A thread that cannot be pinned stops the other one too.
    let pin = |cpu: usize| {
        pin_current_thread(&[cpu]).inspect_err(|_| stop.store(true, Ordering::Relaxed))
    };
    // Both ends on threads of their own: the caller's affinity stays as it is.
    std::thread::scope(|s| {
        let echo = s.spawn(|| -> Result<(), String> {
            pin(b)?;
            let mut want = 1;
            while !stop.load(Ordering::Relaxed) {
                if line.load(Ordering::Acquire) == want {
                    line.store(want + 1, Ordering::Release);
                    want += 2;
                }
                std::hint::spin_loop();
            }
            Ok(())
        });
        let ping = s.spawn(|| -> Result<f64, String> {
            pin(a)?;
            let t = Instant::now();
            let mut v = 0u64;
            let mut rounds = 0u64;
            while t.elapsed() < dur {
                for _ in 0..100 {
                    line.store(v + 1, Ordering::Release);
                    let mut spins = 0u64;
                    while line.load(Ordering::Acquire) != v + 2 {
                        std::hint::spin_loop();
                        spins += 1;
                        if spins.is_multiple_of(1 << 20) && stop.load(Ordering::Relaxed) {
                            return Err(format!("CPU {b} stopped answering"));
                        }
                    }
                    v += 2;
                }
                rounds += 100;
            }
            Ok(t.elapsed().as_nanos() as f64 / rounds as f64 / 2.0)
        });
        let r = ping.join().map_err(|_| "the probe's first thread panicked".to_string());
        stop.store(true, Ordering::Relaxed);
        echo.join().map_err(|_| "the probe's second thread panicked".to_string())??;
        r?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_taskset() {
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("0-3"), Ok(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("3,0-1, 1"), Ok(vec![0, 1, 3]));
        assert!(parse_cpu_list("").unwrap_err().contains("not a CPU number"));
        assert!(parse_cpu_list("2-1").unwrap_err().contains("backwards"));
        assert!(parse_cpu_list("x").unwrap_err().contains("`x`"));
        assert!(parse_cpu_list("99999").unwrap_err().contains("past the largest"));
    }

    #[test]
    fn handoff_between_two_cpus_is_measured() {
        let have = current().unwrap();
        let (a, b) = (have[0], *have.last().unwrap());
        let ns = handoff_ns(a, b, std::time::Duration::from_millis(20)).unwrap();
        assert!(ns > 0.0 && ns < 1_000_000.0, "{ns}");
        assert_eq!(current().unwrap(), have, "the caller's affinity is left alone");
        let far = CpuSet::MAX_CPU + 1;
        assert!(handoff_ns(a, far, std::time::Duration::from_millis(5))
            .unwrap_err()
            .contains("past the largest"));
    }

    #[test]
    fn a_cpu_we_do_not_have_is_named() {
        let have = current().unwrap();
        assert!(!have.is_empty());
        check_available(&have).unwrap();
        let missing = CpuSet::MAX_CPU - 1;
        let e = check_available(&[have[0], missing]).unwrap_err();
        assert!(e.contains(&format!("CPU {missing} is not available")), "{e}");
        // Pinning to only CPUs this machine lacks fails, saying which it has.
        let e =
            std::thread::spawn(move || pin_current_thread(&[missing]).unwrap_err()).join().unwrap();
        assert!(e.contains(&format!("this process may use {have:?}")), "{e}");
    }

    #[test]
    fn pinning_to_a_cpu_we_have_works_and_to_none_changes_nothing() {
        // Run in a thread of its own: the test harness's threads keep
        // their affinity.
        std::thread::spawn(|| {
            pin_current_thread(&[]).unwrap();
            pin_current_thread(&[0]).unwrap();
            let now = rustix::thread::sched_getaffinity(None).unwrap();
            assert!(now.is_set(0));
            assert_eq!(now.count(), 1);
        })
        .join()
        .unwrap();
    }
}
