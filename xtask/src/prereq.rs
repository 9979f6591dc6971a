//! Prerequisites of the xtask commands: what each needs, how to tell it is
//! there, and the exact command that installs it. The simulator and the
//! live backend need only a Rust toolchain; the firmware image needs the
//! riscv64 target (build-fw, demo and test install it with rustup), the
//! qemu backend QEMU and `gdb` gdb-multiarch (demo installs QEMU with
//! apt-get when root; `.ci/run` installs both). `cargo xtask doctor` says
//! so ahead of time.

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
            needed_by: "build-fw, flash, demo, gdb, test (installed by them)",
            required_now: false,
            present: has_fw_target,
            install: "rustup target add riscv64imac-unknown-none-elf",
        },
        Prereq {
            name: "qemu-system-riscv64",
            needed_by: "qemu backend: demo (else live), run, gdb, test",
            required_now: false,
            present: || runs("qemu-system-riscv64", &["--version"]),
            install: "apt-get install -y qemu-system-misc   (as root, or with sudo)",
        },
        Prereq {
            name: "gdb-multiarch",
            needed_by: "gdb, test (the scripted gdb session)",
            required_now: false,
            present: || runs("gdb-multiarch", &["--version"]),
            install: "apt-get install -y gdb-multiarch   (as root, or with sudo)",
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

pub fn doctor() -> crate::Result<ExitCode> {
    let mut bad = 0;
    for p in all() {
        let ok = (p.present)();
        let state = match (ok, p.required_now) {
            (true, _) => "ok",
            (false, true) => "MISSING",
            (false, false) => "not installed",
        };
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
