//! Figures in human units for the binaries' text output: sizes in B, KiB
//! or MiB, rates in KB/s, MB/s or GB/s (decimal: 10^3 B/s steps, as the
//! JSON's `mb_per_s`), times in ns, us, ms or s.

/// `bytes` as `512 B`, `4 KiB`, `1.5 KiB`, `64 KiB`, `1 MiB`.
pub fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    let (unit, name) = match bytes {
        b if b >= MIB => (MIB, "MiB"),
        b if b >= KIB => (KIB, "KiB"),
        _ => return format!("{bytes} B"),
    };
    if bytes.is_multiple_of(unit) {
        format!("{} {name}", bytes / unit)
    } else {
        format!("{:.1} {name}", bytes as f64 / unit as f64)
    }
}

/// Bytes per second as `850 B/s`, `12.3 KB/s`, `812.4 MB/s`, `1.25 GB/s`.
pub fn rate(bytes_per_s: f64) -> String {
    let b = bytes_per_s;
    if !b.is_finite() || b < 0.0 {
        return "n/a".to_string();
    }
    if b >= 1e9 {
        format!("{:.2} GB/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB/s", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB/s", b / 1e3)
    } else {
        format!("{b:.0} B/s")
    }
}

/// Nanoseconds as `850 ns`, `12.34 us`, `80.7 ms`, `2.50 s`.
pub fn duration(ns: u64) -> String {
    let n = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.2} s", n / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", n / 1e6)
    } else if ns >= 1_000 {
        format!("{:.2} us", n / 1e3)
    } else {
        format!("{ns} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units_and_keep_odd_sizes_readable() {
        assert_eq!(size(8), "8 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(65536), "64 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
    }

    #[test]
    fn rates_step_by_a_thousand() {
        assert_eq!(rate(850.0), "850 B/s");
        assert_eq!(rate(12_345.0), "12.3 KB/s");
        assert_eq!(rate(812_400_000.0), "812.4 MB/s");
        assert_eq!(rate(1.25e9), "1.25 GB/s");
        assert_eq!(rate(f64::NAN), "n/a");
    }

    #[test]
    fn durations_pick_the_unit_that_fits() {
        assert_eq!(duration(850), "850 ns");
        assert_eq!(duration(12_340), "12.34 us");
        assert_eq!(duration(80_700_000), "80.7 ms");
        assert_eq!(duration(2_500_000_000), "2.50 s");
    }
}
