//! Command-line options of a live or qemu cluster that more than one
//! program takes: `nic-cluster run` flattens [`ClusterOpts`] into its own
//! options, and `cargo xtask run` takes the same and hands them on to
//! `nic-cluster run` ([`ClusterOpts::args`]), so both spell, document and
//! default them alike; and the value parsers they share.

use crate::profile::Reliability;
use crate::Topology;

/// The timing profile, topology, fault injection, statistics and
/// reliability mode of a cluster.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ClusterOpts {
    /// Timing profile: built-in name or TOML file.
    #[arg(long, default_value = "lanai9-gm")]
    pub profile: String,
    /// star, two-switch or clos.
    #[arg(long, default_value = "star")]
    pub topology: Topology,
    /// Fault injection: the probability that a link drops a packet.
    #[arg(long, default_value_t = 0.0, value_parser = probability, allow_negative_numbers = true)]
    pub drop: f64,
    /// The probability that a link corrupts a packet (its CRC then fails).
    #[arg(long, default_value_t = 0.0, value_parser = probability, allow_negative_numbers = true)]
    pub corrupt: f64,
    /// The probability that a link delivers a packet twice.
    #[arg(long, default_value_t = 0.0, value_parser = probability, allow_negative_numbers = true)]
    pub duplicate: f64,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 0, value_parser = unsigned::<u64>, allow_negative_numbers = true)]
    pub seed: u64,
    /// Print every NIC's counters when the cluster stops.
    #[arg(long)]
    pub stats: bool,
    /// How streams recover lost packets: go-back-n or selective (default:
    /// the profile's `[firmware] reliability`).
    #[arg(long, value_name = "MODE")]
    pub reliability: Option<Reliability>,
}

impl Default for ClusterOpts {
    fn default() -> ClusterOpts {
        ClusterOpts {
            profile: "lanai9-gm".to_string(),
            topology: Topology::Star,
            drop: 0.0,
            corrupt: 0.0,
            duplicate: 0.0,
            seed: 0,
            stats: false,
            reliability: None,
        }
    }
}

impl ClusterOpts {
    /// These options as `nic-cluster run` arguments (every value spelled
    /// out, `--stats` when set): parsing them gives these options back.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--profile".to_string(),
            self.profile.clone(),
            "--topology".to_string(),
            self.topology.name().to_string(),
            format!("--drop={}", self.drop),
            format!("--corrupt={}", self.corrupt),
            format!("--duplicate={}", self.duplicate),
            format!("--seed={}", self.seed),
        ];
        if self.stats {
            a.push("--stats".to_string());
        }
        if let Some(r) = self.reliability {
            a.push(format!("--reliability={r}"));
        }
        a
    }
}

/// A clap value parser for counts of 1 or more (`--threads`, `--runs`,
/// `--steps` ...): 0 or a negative number is refused with the option
/// named, as a usage error.
pub fn at_least_one<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    if is_negative(s) {
        return Err("must be at least 1".into());
    }
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn is_negative(s: &str) -> bool {
    s.trim_start().starts_with('-')
}

/// A clap value parser for a whole number of 0 or more: a negative one
/// is refused as such (not "invalid digit").
pub fn unsigned<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    if is_negative(s) {
        return Err("must not be negative (a whole number from 0)".into());
    }
    s.parse::<T>().map_err(|e| e.to_string())
}

/// A clap value parser for a probability: a number from 0 to 1.
pub fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        Ok(_) => Err("must be a probability, from 0 to 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A clap value parser for a time in seconds: a finite number above
/// zero that a `Duration` holds (not `nan`, `inf`, 0 or negative).
pub fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && std::time::Duration::try_from_secs_f64(x).is_ok() => Ok(x),
        Ok(_) => Err("must be a positive, finite number of seconds".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A clap value parser for a user id a cluster may allow
/// (`--allow-uid`): a whole number, not `u32::MAX` (the kernel's "no
/// user").
pub fn uid(s: &str) -> Result<u32, String> {
    let uid = unsigned::<u32>(s)?;
    host_driver::cluster::check_uid(uid)?;
    Ok(uid)
}

/// A clap value parser for `--ports-per-user`: 1 to the ports a NIC has.
pub fn ports_per_user(s: &str) -> Result<u8, String> {
    let n = at_least_one::<u8>(s)?;
    let most = nic_abi::NUM_PORTS as u8;
    if n > most {
        return Err(format!("{n} ports: a NIC has {most}"));
    }
    Ok(n)
}

/// A clap value parser for a cluster name (`--name`): one path component
/// of letters, digits, `-`, `_` and `.` (`host_driver::cluster::check_name`).
pub fn cluster_name(s: &str) -> Result<String, String> {
    host_driver::cluster::check_name(s)?;
    Ok(s.to_string())
}

/// A clap value parser for a cluster directory (`--dir`): a path whose
/// last component is a valid name; made absolute.
pub fn cluster_dir(s: &str) -> Result<String, String> {
    match host_driver::cluster::ClusterLocation::dir(std::path::Path::new(s)) {
        Ok(host_driver::cluster::ClusterLocation::Dir(d)) => {
            d.to_str().map(str::to_string).ok_or_else(|| "not UTF-8".to_string())
        }
        Ok(_) => Err("not a directory".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A clap value parser for a cluster named either way: a path (it holds
/// a `/`) is a directory (`cluster_dir`, kept as given), anything else a
/// name (`cluster_name`).
pub fn cluster_name_or_dir(s: &str) -> Result<String, String> {
    if s.contains('/') {
        cluster_dir(s).map(|_| s.to_string())
    } else {
        cluster_name(s)
    }
}

/// `cmd` with every option that takes a value, in it and its
/// subcommands, taking a negative number as its value: `--seed -1` is
/// then refused by the option's own parser, naming the option, not by
/// clap as an unknown argument `-1`.
pub fn allow_negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| if a.get_action().takes_values() { a.allow_negative_numbers(true) } else { a })
        .mut_subcommands(allow_negative_numbers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: ClusterOpts,
    }

    fn parse(args: &[&str]) -> ClusterOpts {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap().opts
    }

    #[test]
    fn ports_per_user_is_one_to_the_ports_a_nic_has() {
        assert_eq!(ports_per_user("1"), Ok(1));
        assert_eq!(ports_per_user("8"), Ok(8));
        assert_eq!(ports_per_user("9"), Err("9 ports: a NIC has 8".into()));
        assert_eq!(ports_per_user("0"), Err("must be at least 1".into()));
        assert_eq!(ports_per_user("-1"), Err("must be at least 1".into()));
        assert!(ports_per_user("x").is_err());
    }

    #[test]
    fn the_defaults_are_what_default_gives() {
        assert_eq!(parse(&[]), ClusterOpts::default());
    }

    #[test]
    fn args_parse_back_to_the_same_options() {
        let o = parse(&[
            "--profile",
            "lanai4-gm",
            "--topology",
            "two-switch",
            "--drop",
            "0.01",
            "--corrupt",
            "0.002",
            "--duplicate",
            "0.5",
            "--seed",
            "7",
            "--stats",
            "--reliability",
            "selective",
        ]);
        assert_eq!(
            o.args(),
            [
                "--profile",
                "lanai4-gm",
                "--topology",
                "two-switch",
                "--drop=0.01",
                "--corrupt=0.002",
                "--duplicate=0.5",
                "--seed=7",
                "--stats",
                "--reliability=selective"
            ]
        );
        for opts in [o, ClusterOpts::default()] {
            let owned = opts.args();
            let args: Vec<&str> = owned.iter().map(String::as_str).collect();
            assert_eq!(parse(&args), opts);
        }
    }

    #[test]
    fn negative_numbers_and_probabilities_out_of_range_are_refused_naming_the_option() {
        use clap::{CommandFactory, FromArgMatches};
        let parse = |args: &[&str]| {
            let cmd = allow_negative_numbers(Cli::command());
            cmd.try_get_matches_from(std::iter::once("t").chain(args.iter().copied()))
                .and_then(|m| Cli::from_arg_matches(&m))
                .map(|c| c.opts)
        };
        let e = parse(&["--seed", "-0"]).err().unwrap().to_string();
        assert!(e.contains("'--seed <SEED>': must not be negative"), "{e}");
        let e = parse(&["--drop", "-0.5"]).err().unwrap().to_string();
        assert!(e.contains("'--drop <DROP>': must be a probability, from 0 to 1"), "{e}");
        let e = parse(&["--corrupt", "nan"]).err().unwrap().to_string();
        assert!(e.contains("--corrupt") && e.contains("probability"), "{e}");
        assert_eq!(parse(&["--duplicate", "1"]).unwrap().duplicate, 1.0);
    }

    #[test]
    fn times_uids_and_cluster_places_are_checked_as_they_are_parsed() {
        for bad in ["nan", "inf", "-1", "0", "1e300"] {
            assert!(positive_secs(bad).is_err(), "{bad}");
        }
        assert_eq!(positive_secs("2.5"), Ok(2.5));
        assert!(uid("4294967295").unwrap_err().contains("not a user id"));
        assert!(uid("-3").unwrap_err().contains("negative"));
        assert_eq!(uid("65534"), Ok(65534));
        assert!(cluster_name("x/../../etc").is_err());
        assert!(cluster_name("").is_err());
        assert_eq!(cluster_name("demo").as_deref(), Ok("demo"));
        assert_eq!(cluster_dir("/tmp/c1").as_deref(), Ok("/tmp/c1"));
        assert!(cluster_dir("/tmp/..").is_err());
        assert_eq!(at_least_one::<usize>("-1"), Err("must be at least 1".into()));
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_option() {
        let e = Cli::try_parse_from(["t", "--topology", "ring"]).err().unwrap().to_string();
        assert!(e.contains("--topology"), "{e}");
        let e = Cli::try_parse_from(["t", "--reliability", "sack"]).err().unwrap().to_string();
        assert!(e.contains("--reliability") && e.contains("go-back-n, selective"), "{e}");
    }
}
