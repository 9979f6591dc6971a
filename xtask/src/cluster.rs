//! `cargo xtask cluster list|stop NAME`: the running clusters on this
//! machine, and stopping one, through `nic-cluster list` and
//! `nic-cluster stop` (built first, so the current rules apply).

use std::path::Path;
use std::process::{Command, ExitCode};

use nic_emu::realtime::process;

use crate::fw;

/// What to do with clusters.
#[derive(clap::Subcommand, Debug, Clone, PartialEq)]
pub enum ClusterCmd {
    /// List the clusters under $NIC_CLUSTER_DIR (or /dev/shm/nic-clusters):
    /// name, backend, nodes, device process and whether it is up, each
    /// NIC's firmware state.
    List,
    /// Stop a running cluster (its device process removes its files) and
    /// wait until it is gone; a cluster whose device process died has
    /// its files removed.
    Stop {
        /// Cluster name (one path component: letters, digits, `-`, `_`,
        /// `.`) or directory (a path: it holds a `/`).
        #[arg(value_parser = nic_emu::cli::cluster_name_or_dir)]
        name: String,
        /// Seconds to wait (a positive, finite number).
        #[arg(long, default_value_t = 10.0, allow_negative_numbers = true,
              value_parser = nic_emu::cli::positive_secs)]
        timeout: f64,
    },
}

/// The `nic-cluster` arguments for `cmd`.
pub fn nic_cluster_args(cmd: &ClusterCmd) -> Vec<String> {
    match cmd {
        ClusterCmd::List => vec!["list".into()],
        ClusterCmd::Stop { name, timeout } => {
            let opt = if name.contains('/') { "--dir" } else { "--name" };
            vec!["stop".into(), opt.into(), name.clone(), format!("--timeout={timeout}")]
        }
    }
}

pub fn run(root: &Path, cmd: &ClusterCmd) -> crate::Result<ExitCode> {
    // Built every time (cargo does nothing when it is up to date): an
    // older binary left in the target directory would list and stop by
    // older rules.
    fw::cargo_build(root, &["-p", "nic-emu", "--bin", process::BINARY], process::BINARY)?;
    let exe = fw::release_dir(root).join(process::BINARY);
    let st = Command::new(&exe)
        .args(nic_cluster_args(cmd))
        .status()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    Ok(if st.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: ClusterCmd,
    }

    fn parse(args: &[&str]) -> ClusterCmd {
        Cli::try_parse_from(std::iter::once("cluster").chain(args.iter().copied())).unwrap().cmd
    }

    #[test]
    fn list_and_stop_become_nic_cluster_list_and_stop() {
        assert_eq!(nic_cluster_args(&parse(&["list"])), ["list"]);
        assert_eq!(
            nic_cluster_args(&parse(&["stop", "c1"])),
            ["stop", "--name", "c1", "--timeout=10"]
        );
        assert_eq!(
            nic_cluster_args(&parse(&["stop", "/dev/shm/x", "--timeout", "2.5"])),
            ["stop", "--dir", "/dev/shm/x", "--timeout=2.5"]
        );
    }

    #[test]
    fn a_bad_name_or_timeout_is_a_usage_error_naming_it() {
        let err = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("cluster").chain(args.iter().copied()))
                .err()
                .unwrap()
                .to_string()
        };
        for t in ["nan", "-1", "inf", "0"] {
            let e = err(&["stop", "c1", "--timeout", t]);
            assert!(e.contains("'--timeout <TIMEOUT>': must be a positive, finite number"), "{e}");
        }
        let e = err(&["stop", ""]);
        assert!(e.contains("the name is empty"), "{e}");
        let e = err(&["stop", "a b"]);
        assert!(e.contains("it holds ' '"), "{e}");
    }

    #[test]
    fn stop_needs_a_name() {
        let e = Cli::try_parse_from(["cluster", "stop"]).err().unwrap().to_string();
        assert!(e.contains("<NAME>"), "{e}");
    }
}
