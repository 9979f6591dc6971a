//! `cargo xtask gm build`: libgm, GM's C interface over the host driver,
//! ready for C programs: `<target>/gm/include/gm.h`, `<target>/gm/lib/`
//! with `libgm.a` and `libgm.so`, and the bundled GM programs
//! (host-driver/gm/programs/*.c) compiled into `<target>/gm/bin/`.
//!
//! cargo builds `libgm.a` (the crate `gm`, a staticlib: Rust and the
//! small C part with the variadic calls); `libgm.so` is linked from it
//! with the system C compiler, exporting only GM's names (a Rust cdylib
//! would not export the C part). Programs link either way:
//!
//! ```text
//! cc prog.c -I<target>/gm/include <target>/gm/lib/libgm.a -lpthread -ldl -lm -lrt -lutil -lgcc_s
//! cc prog.c -I<target>/gm/include -L<target>/gm/lib -lgm      # LD_LIBRARY_PATH=<target>/gm/lib to run
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::fw::{cargo_build, release_dir, target_dir};

/// What a program linked with libgm.a needs beside it (the Rust
/// standard library's system libraries).
pub const STATIC_LIBS: [&str; 6] = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];

/// The names libgm.so exports (a linker version script).
const EXPORTS: &str = "{\n  global: gm_*; _gm_*; GM_PAGE_LEN;\n  local: *;\n};\n";

#[derive(clap::Subcommand, Debug)]
pub enum GmCmd {
    /// Build libgm.a and libgm.so, put gm.h beside them, and compile the
    /// bundled GM programs (host-driver/gm/programs/*.c). Prints where
    /// they are and how to build and run a program of your own.
    Build,
}

pub fn run(root: &Path, cmd: &GmCmd) -> crate::Result<ExitCode> {
    match cmd {
        GmCmd::Build => {
            let out = build(root)?;
            print_usage(&out);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Where `gm build` puts things.
pub struct GmDirs {
    pub include: PathBuf,
    pub lib: PathBuf,
    pub bin: PathBuf,
}

/// The C compiler: $CC, else `cc`.
fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Run `c` (a C compiler or linker command, `what` in messages).
fn run_cc(mut c: Command, what: &str) -> crate::Result<()> {
    let out = c.output().map_err(|e| {
        format!(
            "cannot run the C compiler `{}` for {what}: {e} (install gcc: apt-get install gcc)",
            cc()
        )
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// Build everything; the directories it went to.
pub fn build(root: &Path) -> crate::Result<GmDirs> {
    cargo_build(root, &["-p", "gm"], "libgm (host-driver/gm)")?;
    let base = target_dir(root).join("gm");
    let dirs =
        GmDirs { include: base.join("include"), lib: base.join("lib"), bin: base.join("bin") };
    for d in [&dirs.include, &dirs.lib, &dirs.bin] {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let src = root.join("host-driver/gm");
    let copy = |from: PathBuf, to: PathBuf| {
        std::fs::copy(&from, &to)
            .map(|_| ())
            .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
    };
    copy(src.join("include/gm.h"), dirs.include.join("gm.h"))?;
    let archive = dirs.lib.join("libgm.a");
    copy(release_dir(root).join("libgm.a"), archive.clone())?;

    eprintln!("linking libgm.so...");
    let map = base.join("gm.map");
    std::fs::write(&map, EXPORTS).map_err(|e| format!("writing {}: {e}", map.display()))?;
    let mut c = Command::new(cc());
    c.arg("-shared")
        .arg("-o")
        .arg(dirs.lib.join("libgm.so"))
        .arg("-Wl,--whole-archive")
        .arg(&archive)
        .arg("-Wl,--no-whole-archive")
        .arg(format!("-Wl,--version-script={}", map.display()))
        .args(STATIC_LIBS);
    run_cc(c, "linking libgm.so")?;

    let mut programs: Vec<PathBuf> = std::fs::read_dir(src.join("programs"))
        .map_err(|e| format!("reading host-driver/gm/programs: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    programs.sort();
    for p in &programs {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        eprintln!("compiling {name}...");
        let mut c = Command::new(cc());
        c.args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(&dirs.include)
            .arg(p)
            .arg(&archive)
            .args(STATIC_LIBS)
            .arg("-o")
            .arg(dirs.bin.join(&name));
        run_cc(c, &format!("compiling {}", p.display()))?;
    }
    Ok(dirs)
}

fn print_usage(d: &GmDirs) {
    println!(
        "libgm: {}/libgm.a and libgm.so; header {}/gm.h",
        d.lib.display(),
        d.include.display()
    );
    println!("GM programs: {}", d.bin.display());
    println!();
    println!("build a GM program of your own:");
    println!(
        "  cc prog.c -I{} {}/libgm.a {}",
        d.include.display(),
        d.lib.display(),
        STATIC_LIBS.join(" ")
    );
    println!(
        "  cc prog.c -I{} -L{} -lgm   # then LD_LIBRARY_PATH={}",
        d.include.display(),
        d.lib.display(),
        d.lib.display()
    );
    println!();
    println!("run it on a cluster (start one with `cargo xtask run`), one process per node:");
    println!("  NIC_CLUSTER=nic NIC_NODE=1 {}/gm_allsize &", d.bin.display());
    println!("  NIC_CLUSTER=nic NIC_NODE=0 {}/gm_allsize", d.bin.display());
    println!("(under mpirun the rank gives the node: NIC_CLUSTER=nic mpirun -np 2 prog)");
}
