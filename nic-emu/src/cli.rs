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
    #[arg(long, default_value_t = 0.0)]
    pub drop: f64,
    /// The probability that a link corrupts a packet (its CRC then fails).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// The probability that a link delivers a packet twice.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 0)]
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
/// `--steps` ...): 0 is refused with the option named, as a usage error.
pub fn at_least_one<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
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
    fn a_bad_value_is_refused_naming_the_option() {
        let e = Cli::try_parse_from(["t", "--topology", "ring"]).err().unwrap().to_string();
        assert!(e.contains("--topology"), "{e}");
        let e = Cli::try_parse_from(["t", "--reliability", "sack"]).err().unwrap().to_string();
        assert!(e.contains("--reliability") && e.contains("go-back-n, selective"), "{e}");
    }
}
