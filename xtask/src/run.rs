//! `cargo xtask run`: start a live or qemu cluster as a `nic-cluster run`
//! device process in the foreground, print where its files are and how
//! host programs reach it, and keep it up until Ctrl-C (`--backend sim`
//! runs the demo scenario instead: the sim is not a service).
//!
//! The cluster options `nic-cluster run` has (profile, topology, fault
//! injection, `--stats`, `--reliability`) are one definition,
//! `nic_emu::cli::ClusterOpts`, flattened into both command lines and
//! handed on as they are. The
//! device process's messages (a NIC reset, a guest that exited, the
//! counters with `--stats`) go to this terminal as they happen: its
//! stderr is this process's.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use host_driver::cluster::ClusterBackend;
use nic_emu::cli::ClusterOpts;
use nic_emu::realtime::process::{self, READY_PREFIX};
use nic_emu::realtime::qemu;

use crate::demo::{small_machine_layout, Layout};
use crate::fw;
use crate::rt::{self, Backend};

/// `cargo xtask run`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    #[arg(long, default_value_t = 2, allow_negative_numbers = true,
          value_parser = nic_emu::cli::at_least_one::<usize>)]
    pub nodes: usize,
    #[arg(long, value_enum, default_value = "live")]
    pub backend: Backend,
    /// Cluster name: one path component of letters, digits, `-`, `_` and
    /// `.` (the cluster lives in $NIC_CLUSTER_DIR or
    /// /dev/shm/nic-clusters).
    #[arg(long, default_value = "nic", value_parser = nic_emu::cli::cluster_name)]
    pub name: String,
    /// Cluster directory instead of a name: a new one, or a cluster
    /// directory of yours.
    #[arg(long, conflicts_with = "name", value_parser = nic_emu::cli::cluster_dir)]
    pub dir: Option<String>,
    /// Also start the bandwidth resource manager: its master (a
    /// `nic-cluster brm` process on `<cluster>/brm.sock`) and an agent per
    /// NIC, deciding with the profile's stored calibration. Host
    /// programs then ask it for bandwidth (`BrmClient::connect`).
    #[arg(long)]
    pub brm: bool,
    /// CPUs the device threads run on (`1`, `2-3`); give host programs
    /// the others with their `--cpus` (a NIC with a processor of its own).
    #[arg(long)]
    pub cpus: Option<host_driver::affinity::CpuList>,
    /// qemu: CPUs the QEMU guests (the NICs' processors) run on.
    #[arg(long)]
    pub guest_cpus: Option<host_driver::affinity::CpuList>,
    /// Let programs of this user (a uid) use the cluster too, through
    /// each node's control socket only (repeatable; docs/design/protection.md).
    #[arg(long = "allow-uid", value_name = "UID", allow_negative_numbers = true,
          value_parser = nic_emu::cli::uid)]
    pub allow_uid: Vec<u32>,
    /// Ports of each node one allowed user may hold at once (1 to 8).
    #[arg(long = "ports-per-user", value_name = "N", allow_negative_numbers = true,
          value_parser = nic_emu::cli::ports_per_user)]
    pub ports_per_user: Option<u8>,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

/// The `nic-cluster` arguments that serve `a` in the foreground
/// (`image`: the firmware every NIC runs, qemu).
pub fn nic_cluster_args(a: &RunArgs, backend: ClusterBackend, image: Option<&Path>) -> Vec<String> {
    let (opt, place) = match &a.dir {
        Some(d) => ("--dir", d.clone()),
        None => ("--name", a.name.clone()),
    };
    let mut v: Vec<String> = vec![
        "run".into(),
        opt.into(),
        place,
        "--nodes".into(),
        a.nodes.to_string(),
        "--backend".into(),
        backend.as_str().into(),
    ];
    v.extend(a.cluster.args());
    for (flag, cpus) in [("cpus", &a.cpus), ("guest-cpus", &a.guest_cpus)] {
        if let Some(cpus) = cpus {
            let list: Vec<String> = cpus.0.iter().map(usize::to_string).collect();
            v.push(format!("--{flag}={}", list.join(",")));
        }
    }
    for uid in &a.allow_uid {
        v.push(format!("--allow-uid={uid}"));
    }
    if let Some(n) = a.ports_per_user {
        v.push(format!("--ports-per-user={n}"));
    }
    if a.brm {
        v.push("--brm".into());
    }
    if let Some(img) = image {
        v.push("--image".into());
        v.push(img.display().to_string());
    }
    v.push("--foreground".into());
    v
}

/// What `run` prints once the cluster is up: how host programs reach it,
/// and the commands that list and stop clusters.
pub fn hints(name: &str, backend: ClusterBackend) -> String {
    let mut s = format!(
        "host programs find it as `--cluster {name}`, e.g.\n  \
         target/release/pingpong --cluster {name} --node 1 --port 1 --peer 0 --peer-port 1 --role pong &\n  \
         target/release/pingpong --cluster {name} --node 0 --port 1 --peer 1 --peer-port 1 --role ping\n"
    );
    if backend == ClusterBackend::Qemu {
        s += &format!("reflash a NIC: cargo xtask flash --node N --cluster {name} [IMAGE]\n");
    }
    s += &format!(
        "clusters on this machine: cargo xtask cluster list; stop this one with Ctrl-C here or \
         `cargo xtask cluster stop {name}`\n"
    );
    s
}

/// On a small machine where the user placed nothing: how to give the NICs'
/// processors a core of their own, as `demo` and `bench` do (empty
/// otherwise).
pub fn layout_hint(backend: ClusterBackend, layout: Option<&Layout>) -> String {
    let Some(l) = layout else { return String::new() };
    let rest = crate::bench_rt::cpu_list(&l.rest);
    let nic = match backend {
        ClusterBackend::Qemu => format!("--guest-cpus {} --cpus {rest}", l.nic),
        _ => format!("--cpus {}", l.nic),
    };
    format!(
        "on {} cores the NICs answer about twice as fast on a core of their own: start the \
         cluster with `{nic}` and give host programs `--cpus {rest}` \
         (docs/design/performance.md)\n",
        l.rest.len() + 1
    )
}

/// `cargo xtask run --nodes N --backend sim|live|qemu [--name NAME] ...`.
pub fn run(root: &Path, a: &RunArgs) -> crate::Result<ExitCode> {
    let backend = match a.backend {
        Backend::Sim => {
            println!(
                "the sim backend is not a long-running service: it runs a scenario in virtual \
                 time and exits. Running the demo scenario (scenarios/demo-4node.toml); write \
                 your own and run it with `cargo xtask sim FILE`.\n"
            );
            return crate::demo::run_sim(false);
        }
        Backend::Live => ClusterBackend::Live,
        Backend::Qemu => ClusterBackend::Qemu,
    };
    let mut image: Option<PathBuf> = None;
    if backend == ClusterBackend::Qemu {
        if !rt::ensure_qemu()? {
            return Err(format!("the qemu backend needs {}", qemu::QEMU_PROGRAM));
        }
        let elf = fw::build_image(root, false)?;
        fw::report_size(&elf)?;
        image = Some(elf);
    }
    eprintln!("building the device process (nic-cluster) and the host programs, release");
    let exe = fw::build_host_programs(root)?.join(process::BINARY);
    let args = nic_cluster_args(a, backend, image.as_deref());
    // Ctrl-C reaches the device process too (same process group); this
    // one waits for it to stop and remove the cluster.
    let stop = rt::stop_flag()?;
    let mut child = Command::new(&exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let out = child.stdout.take().ok_or("no stdout pipe to the device process")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut forwarded = false;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.starts_with(READY_PREFIX) => {
                print!("{}", hints(a.dir.as_ref().unwrap_or(&a.name), backend));
                if a.cpus.is_none() && a.guest_cpus.is_none() {
                    let cores = host_driver::affinity::current().unwrap_or_default();
                    print!("{}", layout_hint(backend, small_machine_layout(&cores).as_ref()));
                }
                println!("serving until Ctrl-C");
            }
            Ok(line) => println!("{line}"),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait().map_err(|e| format!("waiting for the device process: {e}"))?;
            }
        }
        // A SIGTERM sent to this process alone: pass it on (once).
        if stop.load(Ordering::Relaxed) && !forwarded {
            forwarded = true;
            let _ = process::request_stop(child.id());
        }
    };
    let _ = reader.join();
    if status.success() {
        println!("cluster `{}` stopped", a.dir.as_ref().unwrap_or(&a.name));
        Ok(ExitCode::SUCCESS)
    } else {
        Err(format!("the device process ({}) ended with {status}", exe.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied())).unwrap().run
    }

    #[test]
    fn the_cluster_options_are_handed_on_to_nic_cluster_run() {
        let a = parse(&[
            "--nodes",
            "4",
            "--name",
            "c1",
            "--profile",
            "lanai4-gm",
            "--topology",
            "clos",
            "--drop",
            "0.02",
            "--corrupt",
            "0.001",
            "--duplicate",
            "0.003",
            "--seed",
            "9",
            "--stats",
            "--cpus",
            "1-2",
            "--allow-uid",
            "1001",
            "--allow-uid",
            "1002",
            "--brm",
        ]);
        assert_eq!(
            nic_cluster_args(&a, ClusterBackend::Live, None),
            [
                "run",
                "--name",
                "c1",
                "--nodes",
                "4",
                "--backend",
                "live",
                "--profile",
                "lanai4-gm",
                "--topology",
                "clos",
                "--drop=0.02",
                "--corrupt=0.001",
                "--duplicate=0.003",
                "--seed=9",
                "--stats",
                "--cpus=1,2",
                "--allow-uid=1001",
                "--allow-uid=1002",
                "--brm",
                "--foreground",
            ]
        );
    }

    #[test]
    fn defaults_give_nic_cluster_the_same_defaults_and_qemu_gets_the_image() {
        let a = parse(&["--backend", "qemu"]);
        assert_eq!(a.cluster, ClusterOpts::default());
        assert_eq!(
            nic_cluster_args(&a, ClusterBackend::Qemu, Some(Path::new("/fw/mcp-image"))),
            [
                "run",
                "--name",
                "nic",
                "--nodes",
                "2",
                "--backend",
                "qemu",
                "--profile",
                "lanai9-gm",
                "--topology",
                "star",
                "--drop=0",
                "--corrupt=0",
                "--duplicate=0",
                "--seed=0",
                "--image",
                "/fw/mcp-image",
                "--foreground",
            ]
        );
    }

    #[test]
    fn the_guests_cpus_are_handed_on_beside_the_device_threads() {
        let a = parse(&["--backend", "qemu", "--cpus", "0", "--guest-cpus", "1"]);
        let args = nic_cluster_args(&a, ClusterBackend::Qemu, None);
        assert!(args.contains(&"--cpus=0".to_string()), "{args:?}");
        assert!(args.contains(&"--guest-cpus=1".to_string()), "{args:?}");
    }

    #[test]
    fn a_small_machine_is_told_how_to_give_the_nics_a_core() {
        let two = Layout { nic: 1, rest: vec![0] };
        let q = layout_hint(ClusterBackend::Qemu, Some(&two));
        assert!(q.starts_with("on 2 cores"), "{q}");
        assert!(q.contains("`--guest-cpus 1 --cpus 0`") && q.contains("`--cpus 0`"), "{q}");
        let l = layout_hint(ClusterBackend::Live, Some(&Layout { nic: 2, rest: vec![0, 1] }));
        assert!(l.contains("`--cpus 2`") && l.contains("programs `--cpus 0,1`"), "{l}");
        assert_eq!(layout_hint(ClusterBackend::Live, None), "");
    }

    #[test]
    fn a_directory_is_handed_on_as_one_and_bad_names_uids_and_counts_are_refused() {
        let a = parse(&["--dir", "/tmp/x/c1"]);
        assert_eq!(
            nic_cluster_args(&a, ClusterBackend::Live, None)[..3],
            ["run", "--dir", "/tmp/x/c1"]
        );
        let err = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
                .err()
                .unwrap()
                .to_string()
        };
        let e = err(&["--name", "x/../../etc"]);
        assert!(e.contains("'--name <NAME>': it holds '/'"), "{e}");
        let e = err(&["--allow-uid", "4294967295"]);
        assert!(e.contains("not a user id"), "{e}");
        let e = err(&["--allow-uid", "-1"]);
        assert!(e.contains("must not be negative"), "{e}");
        let e = err(&["--nodes", "-0"]);
        assert!(e.contains("'--nodes <NODES>': must be at least 1"), "{e}");
    }

    #[test]
    fn a_bad_fault_value_is_refused_naming_the_option() {
        let e = Cli::try_parse_from(["run", "--drop", "often"]).err().unwrap().to_string();
        assert!(e.contains("--drop"), "{e}");
    }

    #[test]
    fn the_hints_point_to_cluster_list_and_stop() {
        let h = hints("c1", ClusterBackend::Live);
        assert!(h.contains("`--cluster c1`"), "{h}");
        assert!(
            h.ends_with(
                "clusters on this machine: cargo xtask cluster list; stop this one with Ctrl-C \
                 here or `cargo xtask cluster stop c1`\n"
            ),
            "{h}"
        );
        assert!(!h.contains("flash"), "{h}");
        assert!(hints("q", ClusterBackend::Qemu).contains("cargo xtask flash --node N --cluster q"));
    }
}
