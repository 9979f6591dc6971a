//! Latency statistics of a ping-pong: `LatencySummary` (min, median,
//! p99, max, mean) from the samples.

use serde::Serialize;

/// Latency statistics in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub min_ns: u64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

impl LatencySummary {
    /// Summary of `samples` (sorted in place); None if empty. The median
    /// is the upper middle sample, p99 the smallest sample with at least
    /// 99% of samples at or below it.
    pub fn from_samples(samples: &mut [u64]) -> Option<LatencySummary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let p99 = (n * 99).div_ceil(100).max(1) - 1;
        let sum: u128 = samples.iter().map(|&s| s as u128).sum();
        Some(LatencySummary {
            samples: n as u64,
            min_ns: samples[0],
            median_ns: samples[n / 2],
            p99_ns: samples[p99],
            max_ns: samples[n - 1],
            mean_ns: (sum / n as u128) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_picks_min_median_p99_max() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        let l = LatencySummary::from_samples(&mut s).unwrap();
        assert_eq!(
            (l.samples, l.min_ns, l.median_ns, l.p99_ns, l.max_ns, l.mean_ns),
            (100, 1, 51, 99, 100, 50)
        );
        let l = LatencySummary::from_samples(&mut [7]).unwrap();
        assert_eq!((l.min_ns, l.median_ns, l.p99_ns, l.max_ns), (7, 7, 7, 7));
        assert!(LatencySummary::from_samples(&mut []).is_none());
    }
}
