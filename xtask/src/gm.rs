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

/// Messages of the 64 KiB streams `bench --gm` runs.
const STREAM_COUNT: u64 = 1000;

/// Two `gm_bench` processes on nodes 0 and 1 of `cluster` (the one on
/// node `report` prints the figures).
fn gm_pair(
    bin: &Path,
    cluster: &Path,
    args: &[&str],
    report: u16,
) -> crate::Result<serde_json::Value> {
    let spawn = |node: u16| {
        Command::new(bin)
            .args(args)
            .env("NIC_CLUSTER", cluster)
            .env("NIC_NODE", node.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))
    };
    let one = spawn(1)?;
    let zero = spawn(0)?;
    let limit = std::time::Duration::from_secs(120);
    let zero = crate::rt::finish(zero, "gm_bench (node 0)", limit)?;
    let one = crate::rt::finish(one, "gm_bench (node 1)", limit)?;
    crate::rt::json_line(if report == 0 { &zero } else { &one })
}

/// `cargo xtask bench --gm`: 8 B one-way latency and 64 KiB stream
/// bandwidth through libgm and through the host driver, on one live
/// cluster, `runs` runs of each interleaved; the medians side by side.
pub fn bench(root: &Path, count: u64, runs: usize, quiet: bool) -> crate::Result<()> {
    let dirs = build(root)?;
    let bins = crate::fw::build_host_programs(root)?;
    let gm_bench = dirs.bin.join("gm_bench");
    let cfg = nic_emu::realtime::RtConfig::new(
        &format!("bench-gm-{}", std::process::id()),
        host_driver::cluster::ClusterBackend::Live,
        2,
    );
    let c = crate::rt::start(cfg)?;
    let pb = crate::progress::bar(runs as u64, "bench (libgm against the host driver)", quiet);
    let (mut lat, mut bw) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let n = count.to_string();
    let stream_n = STREAM_COUNT.to_string();
    for _ in 0..runs {
        lat.0.push(crate::rt::pingpong(&bins, c.path(), 1, 8, count, &[])?.median_us);
        let v = gm_pair(&gm_bench, c.path(), &["-m", "pingpong", "-l", "8", "-n", &n], 0)?;
        lat.1.push(v["one_way_us"]["median"].as_f64().unwrap_or(f64::NAN));
        bw.0.push(crate::rt::stream(&bins, c.path(), 2, 2, 65536, STREAM_COUNT, &[])?);
        let v = gm_pair(&gm_bench, c.path(), &["-m", "stream", "-l", "65536", "-n", &stream_n], 1)?;
        bw.1.push(v["mb_per_s"].as_f64().unwrap_or(f64::NAN));
        pb.inc(1);
    }
    pb.finish_and_clear();
    c.stop().map_err(|e| e.to_string())?;
    let median = crate::bench::median;
    let (l_host, l_gm, b_host, b_gm) =
        (median(&lat.0), median(&lat.1), median(&bw.0), median(&bw.1));
    println!("\n== libgm against the host driver, live cluster of 2 nodes (medians of {runs} runs, interleaved; every message checked)");
    println!("{:<34} {:>12} {:>12} {:>8}", "", "host driver", "libgm", "ratio");
    println!(
        "{:<34} {:>12.2} {:>12.2} {:>8.3}",
        format!("8 B one-way us ({count} round trips)"),
        l_host,
        l_gm,
        l_gm / l_host
    );
    println!(
        "{:<34} {:>12.1} {:>12.1} {:>8.3}",
        format!("64 KiB stream MB/s ({STREAM_COUNT} messages)"),
        b_host,
        b_gm,
        b_gm / b_host
    );
    println!(
        "(ratio: libgm over host driver; targets: latency at most 1.10, bandwidth at least 0.95)"
    );
    Ok(())
}
