//! Prerequisites of the xtask commands: what each needs, how to tell it is
//! there, and the exact command that installs it. The simulator and the
//! live backend need only a Rust toolchain; the firmware image needs the
//! riscv64 target, the qemu backend QEMU, the gdb session
//! gdb-multiarch, and the packet-capture test tshark (with capinfos, which
//! the tshark package brings). The commands that need them install them the same way
//! ([`ensure`]): the Rust target with rustup, QEMU and gdb-multiarch with
//! apt-get when running as root; otherwise they stop before doing
//! anything, naming the command to run. `cargo xtask doctor` says so
//! ahead of time.

use std::process::{Command, ExitCode, Stdio};

pub const FW_TARGET: &str = "riscv64imac-unknown-none-elf";

/// One prerequisite.
pub struct Prereq {
    pub name: &'static str,
    /// The commands that need it.
    pub needed_by: &'static str,
    /// Needed now (false: only by commands still to come, or optional).
    pub required_now: bool,
    pub present: fn() -> bool,
    pub install: &'static str,
}

fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub fn has_fw_target() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == FW_TARGET))
        .unwrap_or(false)
}

pub fn has_nextest() -> bool {
    runs("cargo", &["nextest", "--version"])
}

pub fn all() -> Vec<Prereq> {
    vec![
        Prereq {
            name: "cargo",
            needed_by: "everything",
            required_now: true,
            present: || runs("cargo", &["--version"]),
            install: "curl https://sh.rustup.rs -sSf | sh   (see https://rustup.rs)",
        },
        Prereq {
            name: "rust target riscv64imac-unknown-none-elf",
            needed_by: "build-fw, flash, demo, gdb, test (they install it with rustup)",
            required_now: false,
            present: has_fw_target,
            install: "rustup target add riscv64imac-unknown-none-elf",
        },
        Prereq {
            name: "qemu-system-riscv64",
            needed_by: "qemu backend: demo (else live), run, gdb, test (they install it as root)",
            required_now: false,
            present: || Need::Qemu.present(),
            install: "apt-get install -y qemu-system-misc   (as root, or with sudo)",
        },
        Prereq {
            name: "gdb-multiarch",
            needed_by: "gdb, test (the scripted gdb session; they install it as root)",
            required_now: false,
            present: || Need::Gdb.present(),
            install: "apt-get install -y gdb-multiarch   (as root, or with sudo)",
        },
        Prereq {
            name: "tshark and capinfos",
            needed_by: "test (decoding a packet capture, its time order; it installs it as root)",
            required_now: false,
            present: || Need::Tshark.present(),
            install: "apt-get install -y tshark   (as root, or with sudo)",
        },
        Prereq {
            name: "mpicc and mpirun (MPICH)",
            needed_by: "test (a GM program under mpirun; it installs them as root)",
            required_now: false,
            present: || Need::Mpi.present(),
            install: "apt-get install -y libmpich-dev   (as root, or with sudo)",
        },
        Prereq {
            name: "cargo-nextest (optional)",
            needed_by: "test (faster; plain cargo test otherwise)",
            required_now: false,
            present: has_nextest,
            install: "cargo install cargo-nextest --locked",
        },
    ]
}

/// Something a command needs beyond cargo, that it can install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The firmware's Rust target (rustup).
    FwTarget,
    /// qemu-system-riscv64 (Debian package qemu-system-misc).
    Qemu,
    /// gdb-multiarch (the Debian package of the same name).
    Gdb,
    /// tshark and capinfos (the packet-capture test decodes with the one
    /// and checks time order with the other; Debian's tshark package
    /// brings both).
    Tshark,
    /// An MPI (mpicc and mpirun; Debian's MPICH): the GM library's MPI
    /// test.
    Mpi,
}

impl Need {
    pub fn program(self) -> &'static str {
        match self {
            Need::FwTarget => FW_TARGET,
            Need::Qemu => "qemu-system-riscv64",
            Need::Gdb => "gdb-multiarch",
            Need::Tshark => "tshark",
            Need::Mpi => "mpicc",
        }
    }

    /// The Debian package that brings it (None: rustup's).
    pub fn package(self) -> Option<&'static str> {
        match self {
            Need::FwTarget => None,
            Need::Qemu => Some("qemu-system-misc"),
            Need::Gdb => Some("gdb-multiarch"),
            Need::Tshark => Some("tshark"),
            Need::Mpi => Some("libmpich-dev"),
        }
    }

    /// What it is for.
    pub fn why(self) -> &'static str {
        match self {
            Need::FwTarget => "the firmware image",
            Need::Qemu => "the qemu backend",
            Need::Gdb => "the debugger session",
            Need::Tshark => "the packet-capture test",
            Need::Mpi => "the GM library's MPI test",
        }
    }

    pub fn present(self) -> bool {
        match self {
            Need::FwTarget => has_fw_target(),
            Need::Qemu => runs("qemu-system-riscv64", &["--version"]),
            Need::Gdb => runs("gdb-multiarch", &["--version"]),
            Need::Tshark => runs("tshark", &["--version"]) && runs("capinfos", &["--version"]),
            Need::Mpi => runs("mpicc", &["-show"]) && runs("mpirun", &["--version"]),
        }
    }
}

/// What the installer does about the missing needs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// `rustup target add` the firmware target.
    pub rustup_target: bool,
    /// Packages to install with apt-get (running as root).
    pub apt: Vec<&'static str>,
    /// Packages the user must install (not root): the command is printed.
    pub manual: Vec<&'static str>,
}

impl Plan {
    /// The decision for `missing`: rustup needs no privilege; apt-get runs
    /// only as root, otherwise the packages are left to the user.
    pub fn new(missing: &[Need], root: bool) -> Plan {
        let mut p = Plan::default();
        for &n in missing {
            match n.package() {
                None => p.rustup_target = true,
                Some(pkg) if root => p.apt.push(pkg),
                Some(pkg) => p.manual.push(pkg),
            }
        }
        p
    }

    /// The command a user without root runs, if any.
    pub fn manual_command(&self) -> Option<String> {
        (!self.manual.is_empty())
            .then(|| format!("sudo apt-get install -y {}", self.manual.join(" ")))
    }
}

/// Install what `cmd` needs and lacks (see [`Plan::new`]); fail naming the
/// command to run when something cannot be installed from here.
pub fn ensure(cmd: &str, needs: &[Need]) -> crate::Result<()> {
    let missing: Vec<Need> = needs.iter().copied().filter(|n| !n.present()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<String> =
        missing.iter().map(|n| format!("{} (for {})", n.program(), n.why())).collect();
    println!("{cmd} needs {}: not installed", names.join(", "));
    let plan = Plan::new(&missing, crate::fw::is_root());
    if let Some(c) = plan.manual_command() {
        return Err(format!(
            "{cmd} cannot install {} without root; run this first:\n  {c}",
            plan.manual.join(", ")
        ));
    }
    if plan.rustup_target {
        crate::fw::ensure_fw_target()?;
    }
    if !plan.apt.is_empty() {
        crate::fw::apt_install(&plan.apt)?;
    }
    let still: Vec<&str> = missing.iter().filter(|n| !n.present()).map(|n| n.program()).collect();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!("{cmd}: {} still missing after installing", still.join(", ")))
    }
}

/// Fail with the install commands if something needed now is missing.
pub fn require_now() -> crate::Result<()> {
    let missing: Vec<Prereq> =
        all().into_iter().filter(|p| p.required_now && !(p.present)()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut msg = String::from("missing prerequisites:\n");
    for p in missing {
        msg.push_str(&format!("  {}: install with `{}`\n", p.name, p.install));
    }
    Err(msg)
}

/// How `doctor` shows a prerequisite.
pub fn verdict(present: bool, required_now: bool) -> &'static str {
    match (present, required_now) {
        (true, _) => "ok",
        (false, true) => "MISSING",
        (false, false) => "not installed",
    }
}

pub fn doctor() -> crate::Result<ExitCode> {
    let mut bad = 0;
    for p in all() {
        let ok = (p.present)();
        let state = verdict(ok, p.required_now);
        println!("{:<44} {:<32} needed by: {}", p.name, state, p.needed_by);
        if !ok {
            println!("{:<44} install: {}", "", p.install);
            if p.required_now {
                bad += 1;
            }
        }
    }
    if bad == 0 {
        println!("everything the sim and live commands need is here (see above for qemu, gdb and the firmware)");
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installer_uses_rustup_always_apt_get_as_root_and_names_the_command_otherwise() {
        let all = [Need::FwTarget, Need::Qemu, Need::Gdb];
        let root = Plan::new(&all, true);
        assert_eq!(
            root,
            Plan {
                rustup_target: true,
                apt: vec!["qemu-system-misc", "gdb-multiarch"],
                manual: vec![]
            }
        );
        assert_eq!(root.manual_command(), None);
        let user = Plan::new(&all, false);
        assert!(user.rustup_target && user.apt.is_empty());
        assert_eq!(
            user.manual_command().as_deref(),
            Some("sudo apt-get install -y qemu-system-misc gdb-multiarch")
        );
        // Only gdb missing, as on a machine where demo already ran.
        let gdb = Plan::new(&[Need::Gdb], false);
        assert!(!gdb.rustup_target);
        assert_eq!(gdb.manual_command().as_deref(), Some("sudo apt-get install -y gdb-multiarch"));
        assert_eq!(Plan::new(&[], false), Plan::default());
        assert_eq!(Plan::new(&[Need::FwTarget], false).manual_command(), None);
    }

    #[test]
    fn doctor_fails_only_on_what_is_needed_now() {
        assert_eq!(verdict(true, true), "ok");
        assert_eq!(verdict(true, false), "ok");
        assert_eq!(verdict(false, true), "MISSING");
        assert_eq!(verdict(false, false), "not installed");
        // Only cargo is needed by every command; the rest are installed
        // by the commands that need them.
        let now: Vec<&str> = all().iter().filter(|p| p.required_now).map(|p| p.name).collect();
        assert_eq!(now, ["cargo"]);
        for p in all().iter().filter(|p| p.name != "cargo") {
            assert!(
                p.install.contains("install") || p.install.contains("target add"),
                "{}",
                p.name
            );
        }
    }
}
