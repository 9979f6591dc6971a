//! What the tests of GM programs share: libgm.a as cargo built it, the C
//! compiler, and running a program as processes on the nodes of a cluster
//! (NIC_CLUSTER, NIC_NODE), killed if they outlive a limit.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The system libraries a program linked with libgm.a needs.
pub const LIBS: [&str; 6] = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];

/// How long a program may run. The programs give up by themselves
/// sooner (their `-t`, 30 s unless told): this is for one that hangs
/// regardless, so that the test fails instead.
pub const LIMIT: Duration = Duration::from_secs(90);

/// This crate's directory.
pub fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// libgm.a as cargo built it for this test: in the test's own `deps`
/// directory (`libgm-<hash>.a`; the newest, should there be several).
pub fn libgm() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("target/<profile>/deps/<test>");
    let newest = std::fs::read_dir(deps)
        .expect("the deps directory")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("libgm-") && n.ends_with(".a")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
    match newest {
        Some(e) => e.path(),
        None => panic!("no libgm-*.a in {}: cargo builds it with the gm crate", deps.display()),
    }
}

/// The C compiler: $CC, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Compile `src` (under this crate) into an executable named `name`,
/// once per run of this file (tests run in parallel: a second compile
/// into the same path could replace a program another test is running).
pub fn compile(src: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let exe = compile_now(src, name);
    built.push((name.to_string(), exe.clone()));
    exe
}

pub fn compile_now(src: &str, name: &str) -> PathBuf {
    let out_dir = libgm().parent().unwrap().parent().unwrap().join("gm-programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let out = Command::new(cc())
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(here().join("include"))
        .arg(here().join(src))
        .arg(libgm())
        .args(LIBS)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the C compiler `{}` could not run ({e}): install gcc (apt-get install gcc)",
                cc()
            )
        });
    assert!(out.status.success(), "compiling {src}:\n{}", text(&out));
    exe
}

/// A process's status and output, for a failure's message (the
/// real-time test helpers', which every test file that includes this one
/// includes as `rt`).
pub use crate::rt::text;

/// `exe args` as node `node` of the cluster at `path`.
pub fn on_node(exe: &Path, path: &str, node: u16, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .env("NIC_CLUSTER", path)
        .env("NIC_NODE", node.to_string())
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .env_remove("PMIX_RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A pipe read to its end on a thread of its own, so that neither
/// process of a pair can block on a full pipe while the test waits for
/// the other.
pub fn drain(r: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut v);
        }
        v
    })
}

/// Wait for every child, killing any still running at `LIMIT`; their
/// outputs, in order.
pub fn outputs(children: Vec<Child>) -> Vec<Output> {
    let deadline = Instant::now() + LIMIT;
    let mut running: Vec<_> = children
        .into_iter()
        .map(|mut c| {
            let out = drain(c.stdout.take());
            let err = drain(c.stderr.take());
            (c, out, err)
        })
        .collect();
    let statuses: Vec<ExitStatus> = running
        .iter_mut()
        .map(|(c, _, _)| loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                break c.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        })
        .collect();
    running
        .into_iter()
        .zip(statuses)
        .map(|((_, out, err), status)| Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        })
        .collect()
}

/// Run `exe args` on nodes 0 and 1 at once (GM node ids 1 and 2); both
/// outputs.
pub fn pair(exe: &Path, path: &str, args: &[&str]) -> (Output, Output) {
    let one = on_node(exe, path, 1, args).spawn().unwrap();
    let zero = on_node(exe, path, 0, args).spawn().unwrap();
    let mut o = outputs(vec![zero, one]);
    let one = o.pop().unwrap();
    (o.pop().unwrap(), one)
}

/// Both processes of a pair succeeded (else the two outputs).
pub fn assert_both(zero: &Output, one: &Output) {
    assert!(
        zero.status.success() && one.status.success(),
        "node 0:\n{}\nnode 1:\n{}",
        text(zero),
        text(one)
    );
}

/// `o`'s standard output has a line that is exactly `line`.
pub fn assert_line(o: &Output, line: &str) {
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.lines().any(|l| l == line), "no line {line:?}:\n{}", text(o));
}
