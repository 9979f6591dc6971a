//! Where the instructions go: the QEMU TCG plugin of tools/qemu-plugin
//! (built here with `cc`) counts the guest's instructions at each
//! address of the image's code; two readings of its counters subtracted
//! are a window's, and the image's DWARF (addr2line: each address's
//! function and the functions inlined there) turns them into the split by
//! machine, by offload and the top functions.
//!
//! Attribution of one address: the machine is that of the outermost of
//! its frames (the function the code is in, then the functions inlined
//! into it, outwards in) whose module is `mcp::sdma`, `mcp::send`,
//! `mcp::recv` or `mcp::rdma` (a submodule included); else `core`. The
//! offload is that of the innermost frame in an offload's module. A
//! function outside the MCP and its hardware interface (the image's run
//! loop and its counter, the runtime) is outside the passes and left out.
//! An out-of-line helper (memcpy, memset, a record method, an accessor)
//! has no machine of its own: the plugin keeps a shadow call stack and
//! charges it to its caller's (`write_contexts` gives it each address's
//! context), so the split by machine and offload counts what each machine
//! caused; the functions table is by address.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use addr2line::gimli;

use super::image::RAM_BASE;
use super::report::ByMachine;

/// The counters file the plugin writes in each node's directory.
pub const COUNTS_FILE: &str = "insn-counts";

/// The plugin's source, relative to the repository.
const SOURCE: &str = "tools/qemu-plugin/insn_count.c";

/// Build the plugin (`cc`, when the library is older than its source)
/// into `<target>/qemu-plugin/`. Returns the library.
pub fn build_plugin(root: &Path) -> crate::Result<PathBuf> {
    let src = root.join(SOURCE);
    let dir = crate::fw::target_dir(root).join("qemu-plugin");
    let lib = dir.join("libinsn_count.so");
    let newer = |a: &Path, b: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(a), m(b)), (Some(x), Some(y)) if x >= y)
    };
    if lib.is_file() && newer(&lib, &src) {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!("building the instruction-counting QEMU plugin ({SOURCE}) with cc...");
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-D_GNU_SOURCE", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .map_err(|e| {
            format!("cannot run cc to build the QEMU plugin ({e}): install a C compiler (gcc)")
        })?;
    if !o.status.success() {
        return Err(format!(
            "building the QEMU plugin {SOURCE} failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(lib)
}

/// The QEMU arguments that load the plugin over `size` bytes of code
/// from RAM's start, with the context table `ctx` (`Symbolizer::contexts`).
pub fn qemu_args(lib: &Path, size: u64, ctx: &Path) -> Vec<String> {
    vec![
        "-plugin".into(),
        format!(
            "{},base={RAM_BASE:#x},size={size},name={COUNTS_FILE},ctx={}",
            lib.display(),
            ctx.display()
        ),
    ]
}

/// Contexts the plugin charges blocks to: the low 3 bits a machine (0:
/// the caller's; 1-4: sdma, send, recv, rdma; 5: core; 7: outside the
/// passes), the high 5 an offload (0: the caller's, else its number in
/// `Symbolizer::offload_names` plus 1).
pub const CTX_CORE: u8 = 5;
pub const CTX_OUTSIDE: u8 = 7;

/// A node's counters (empty when the file is not there yet).
pub fn read(node_dir: &Path) -> crate::Result<Vec<u64>> {
    let p = node_dir.join(COUNTS_FILE);
    match std::fs::read(&p) {
        Ok(b) => Ok(b.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// `sum += after - before`, per address.
pub fn add_delta(sum: &mut Vec<u64>, before: &[u64], after: &[u64]) {
    if sum.len() < after.len() {
        sum.resize(after.len(), 0);
    }
    for (i, &a) in after.iter().enumerate() {
        sum[i] += a.wrapping_sub(before.get(i).copied().unwrap_or(0));
    }
}

/// Each NIC's counters moved from `before` to `after` (one list per NIC,
/// in node order), added to `sum`: every NIC's, or only NIC `nic`'s
/// (`--nic`).
pub fn add_deltas(sum: &mut Vec<u64>, before: &[Vec<u64>], after: &[Vec<u64>], nic: Option<usize>) {
    for (i, (x, y)) in before.iter().zip(after).enumerate() {
        if nic.is_none_or(|n| n == i) {
            add_delta(sum, x, y);
        }
    }
}

/// The machines by module.
const MACHINES: [(&str, usize); 4] = [("sdma", 0), ("send", 1), ("recv", 2), ("rdma", 3)];

/// Offload modules and their names (the old places, then the offload
/// tree's: `mcp::offload::<name>`).
const OFFLOADS: [(&str, &str); 4] = [
    ("mcp::sdma::mcast", "multicast"),
    ("mcp::mcast", "multicast"),
    ("mcp::selective", "selective"),
    ("mcp::rate", "rate"),
];

/// The module path a demangled function name starts with: `mcp::recv::
/// accept::<impl mcp::recv::Recv>::accept` -> `mcp::recv::accept`,
/// `<mcp::hw::SramHw as mcp::hw::Hw>::read` -> `mcp::hw::SramHw`.
pub fn module_of(function: &str) -> &str {
    let f = function.strip_prefix('<').unwrap_or(function);
    let end =
        [f.find('<'), f.find(" as "), f.find('>')].into_iter().flatten().min().unwrap_or(f.len());
    f[..end].trim_end_matches("::")
}

fn in_module(module: &str, prefix: &str) -> bool {
    module == prefix || module.strip_prefix(prefix).is_some_and(|r| r.starts_with("::"))
}

/// The machine of a chain of frames (outermost first): index into
/// sdma, send, recv, rdma, or None (core).
pub fn machine_of(frames: &[String]) -> Option<usize> {
    frames.iter().find_map(|f| {
        let m = module_of(f);
        MACHINES.iter().find(|(n, _)| in_module(m, &format!("mcp::{n}"))).map(|&(_, i)| i)
    })
}

/// The offload of a chain of frames (outermost first): the innermost
/// frame's in an offload module.
pub fn offload_of(frames: &[String]) -> Option<String> {
    frames.iter().rev().find_map(|f| {
        let m = module_of(f);
        if let Some(rest) = m.strip_prefix("mcp::offload::") {
            return Some(rest.split("::").next().unwrap_or(rest).to_string());
        }
        OFFLOADS.iter().find(|(p, _)| in_module(m, p)).map(|(_, n)| n.to_string())
    })
}

/// Is this chain of frames (outermost first) code of the passes (the
/// MCP, its hardware interface, the helpers they call), not the image's
/// run loop? MCP code inlined into the run loop's pass counts; the rest
/// of the run loop (its own reads of the device's registers too) does not.
pub fn in_passes(frames: &[String]) -> bool {
    // The counter's own bookkeeping after a pass (it sums the pass's work
    // with `mcp::Work::add`) is outside what `minstret` counts.
    if frames.iter().any(|f| in_module(module_of(f), "mcp_image::poll_stats")) {
        return false;
    }
    if frames.iter().any(|f| module_of(f).starts_with("mcp::")) {
        return true;
    }
    let Some(outer) = frames.first() else { return false };
    let m = module_of(outer);
    let outside = (m.starts_with("mcp_image") && !in_module(m, "mcp_image::hw"))
        || m == "main"
        || m.starts_with("riscv_rt")
        || m.starts_with("riscv::")
        || m.starts_with("qemu_exit")
        || m.starts_with("defmt");
    !outside
}

/// A library's generic helper (`core::array::map` and the like), left
/// out of the functions table: the function it is inlined into counts
/// its instructions.
pub fn is_library(function: &str) -> bool {
    let m = module_of(function);
    let m = m.trim_start_matches('&').trim_start_matches("mut ");
    // Raw pointers' methods (`<*mut T>::wrapping_add`) too.
    m.starts_with('*')
        || ["core::", "alloc::", "heapless::", "compiler_builtins::"]
            .iter()
            .any(|p| m.starts_with(p))
}

/// Is this chain of frames the pass's entry (the scheduler: `Mcp::poll`
/// and the image's wrapper around it), charged to core itself rather
/// than to a caller?
fn is_entry(frames: &[String]) -> bool {
    frames.first().is_some_and(|f| {
        let m = module_of(f);
        m == "mcp::Mcp::poll" || m == "mcp_image::poll"
    })
}

/// A window's instructions by where they ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    /// sdma, send, recv, rdma, core: instructions.
    pub machines: [u64; 5],
    pub offloads: BTreeMap<String, u64>,
    /// Each function's instructions, its inlined code included.
    pub functions: BTreeMap<String, u64>,
    /// Each source line's instructions (innermost frame: `file:line
    /// function`).
    pub lines: BTreeMap<String, u64>,
    /// Outside the passes (the run loop).
    pub outside: u64,
}

impl Split {
    pub fn in_passes(&self) -> u64 {
        self.machines.iter().sum()
    }

    /// Per message.
    pub fn by_machine(&self, messages: u64) -> ByMachine {
        let p = |i: usize| super::counters::per(self.machines[i], messages);
        ByMachine { sdma: p(0), send: p(1), recv: p(2), rdma: p(3), core: p(4) }
    }
}

/// `split`'s machines and offloads from the plugin's sums by context
/// (`sums[c]`: instructions charged to context c; `names`: the offloads
/// by number less 1).
pub fn split_sums(sums: &[u64], names: &[String], split: &mut Split) {
    split.machines = [0; 5];
    split.offloads.clear();
    split.outside = 0;
    for (c, &n) in sums.iter().enumerate().filter(|(_, &n)| n > 0) {
        let m = (c & 7) as u8;
        if m == CTX_OUTSIDE {
            split.outside += n;
            continue;
        }
        let i = if (1..=4).contains(&m) { m as usize - 1 } else { 4 };
        split.machines[i] += n;
        if let Some(name) = (c >> 3).checked_sub(1).and_then(|k| names.get(k)) {
            *split.offloads.entry(name.clone()).or_default() += n;
        }
    }
}

type Ctx = addr2line::Context<gimli::EndianSlice<'static, gimli::RunTimeEndian>>;

/// Addresses to frames, through the image's DWARF.
pub struct Symbolizer {
    ctx: Ctx,
    cache: std::cell::RefCell<BTreeMap<u64, Vec<String>>>,
    /// The offloads the context table numbers (1 + index).
    offload_names: std::cell::RefCell<Vec<String>>,
}

impl Symbolizer {
    pub fn load(elf: &Path) -> crate::Result<Symbolizer> {
        let file = std::fs::File::open(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
        // SAFETY: mapped read-only and only parsed; the bench does not
        // rebuild the image while it reads it.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot map {}: {e}", elf.display()))?;
        // Kept for the command's life: the DWARF borrows from it.
        let map: &'static memmap2::Mmap = Box::leak(Box::new(map));
        let obj: &'static object::File<'static> = Box::leak(Box::new(
            object::File::parse(&**map).map_err(|e| format!("{}: {e}", elf.display()))?,
        ));
        let dwarf = super::image::dwarf(obj)?;
        let ctx = addr2line::Context::from_dwarf(dwarf)
            .map_err(|e| format!("{}: DWARF: {e}", elf.display()))?;
        Ok(Symbolizer { ctx, cache: Default::default(), offload_names: Default::default() })
    }

    /// The plugin's context table for `slots` addresses from RAM's start
    /// (one byte each; see `CTX_CORE`), written to `path`. An address in a
    /// machine's code is that machine's, the passes' entry is core's, the
    /// run loop is outside, and anything else (a helper) is its caller's.
    pub fn write_contexts(&self, slots: u64, path: &Path) -> crate::Result<()> {
        let mut t = vec![0u8; slots as usize];
        for (i, c) in t.iter_mut().enumerate() {
            let frames = self.frames(RAM_BASE + 2 * i as u64);
            if frames == ["?"] {
                continue;
            }
            let m = if !in_passes(&frames) {
                CTX_OUTSIDE
            } else if let Some(m) = machine_of(&frames) {
                m as u8 + 1
            } else if is_entry(&frames) {
                CTX_CORE
            } else {
                0
            };
            let o = match offload_of(&frames) {
                Some(name) => {
                    let mut names = self.offload_names.borrow_mut();
                    let k = names.iter().position(|n| *n == name).unwrap_or_else(|| {
                        names.push(name);
                        names.len() - 1
                    });
                    (k as u8 + 1).min(31)
                }
                None => 0,
            };
            *c = m | o << 3;
        }
        self.cache.borrow_mut().clear();
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        // Written aside and renamed: a QEMU starting meanwhile (another
        // bench's) reads the whole old table or the whole new one.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &t).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The split by machine and offload from the plugin's sums by
    /// context (`sums[c]`: instructions charged to context c).
    pub fn split_contexts(&self, sums: &[u64], split: &mut Split) {
        split_sums(sums, &self.offload_names.borrow(), split)
    }

    /// The frames at `pc`, outermost (the function the code is in) first,
    /// demangled; `?` for one without a name.
    pub fn frames(&self, pc: u64) -> Vec<String> {
        if let Some(f) = self.cache.borrow().get(&pc) {
            return f.clone();
        }
        let mut out = Vec::new();
        if let Ok(mut it) = self.ctx.find_frames(pc).skip_all_loads() {
            while let Ok(Some(f)) = it.next() {
                let name = f
                    .function
                    .as_ref()
                    .and_then(|n| n.demangle().ok().map(|d| d.into_owned()))
                    .unwrap_or_else(|| "?".to_string());
                out.push(name);
            }
        }
        if out.is_empty() {
            out.push("?".to_string());
        }
        out.reverse();
        self.cache.borrow_mut().insert(pc, out.clone());
        out
    }

    /// `file:line function` of the innermost frame at `pc` (`frames`: its
    /// chain), the file relative to the crate's `src/`.
    pub fn line(&self, pc: u64, frames: &[String]) -> String {
        let f = frames.last().map(String::as_str).unwrap_or("?");
        let f = f
            .rsplit("::")
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("::");
        match self.ctx.find_location(pc) {
            Ok(Some(l)) => {
                let file = l.file.unwrap_or("?");
                let file = file.rsplit_once("/src/").map_or(file, |(_, r)| r);
                format!("{file}:{} {f}", l.line.unwrap_or(0))
            }
            _ => format!("? {f}"),
        }
    }

    /// The split of the plugin's counters `counts`: `slots` per-address
    /// counters (counter i: the instructions at RAM_BASE + 2 i), then the
    /// sums by context, which give the machines and offloads when there.
    pub fn split(&self, counts: &[u64], slots: usize) -> Split {
        let (counts, sums) = counts.split_at(slots.min(counts.len()));
        let mut s = Split::default();
        for (i, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
            let frames = self.frames(RAM_BASE + 2 * i as u64);
            if !in_passes(&frames) {
                s.outside += n;
                continue;
            }
            s.machines[machine_of(&frames).unwrap_or(4)] += n;
            if let Some(o) = offload_of(&frames) {
                *s.offloads.entry(o).or_default() += n;
            }
            *s.lines.entry(self.line(RAM_BASE + 2 * i as u64, &frames)).or_default() += n;
            let mut seen: Vec<&String> = Vec::new();
            for f in frames.iter().filter(|f| !is_library(f)) {
                if !seen.contains(&f) {
                    *s.functions.entry(f.clone()).or_default() += n;
                    seen.push(f);
                }
            }
        }
        if sums.iter().any(|&n| n > 0) {
            self.split_contexts(sums, &mut s);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_functions_module_is_its_leading_path() {
        assert_eq!(
            module_of("mcp::recv::accept::<impl mcp::recv::Recv>::accept"),
            "mcp::recv::accept"
        );
        assert_eq!(module_of("<mcp::hw::SramHw as mcp::hw::Hw>::read"), "mcp::hw::SramHw");
        assert_eq!(module_of("mcp::Mcp::poll"), "mcp::Mcp::poll");
        assert_eq!(module_of("memcpy"), "memcpy");
    }

    #[test]
    fn the_outermost_machine_frame_names_the_machine() {
        // A record helper inlined into SEND's step is SEND's.
        let f = chain(&["mcp::Mcp::poll", "mcp::send::Send::step", "mcp::records::Token::get"]);
        assert_eq!(machine_of(&f), Some(1));
        let f = chain(&["mcp::Mcp::poll", "mcp::recv::accept::<impl mcp::recv::Recv>::accept"]);
        assert_eq!(machine_of(&f), Some(2));
        assert_eq!(machine_of(&chain(&["mcp::Mcp::poll"])), None, "the scheduler: core");
        assert_eq!(machine_of(&chain(&["memcpy"])), None);
        assert_eq!(machine_of(&chain(&["mcp::sdmax::f"])), None, "a module, not a prefix");
    }

    #[test]
    fn the_innermost_offload_frame_names_the_offload() {
        let f = chain(&["mcp::sdma::Sdma::step", "mcp::sdma::mcast::relay"]);
        assert_eq!(offload_of(&f).as_deref(), Some("multicast"));
        let f = chain(&["mcp::recv::Recv::step", "mcp::offload::echo::Echo::packet"]);
        assert_eq!(offload_of(&f).as_deref(), Some("echo"));
        assert_eq!(offload_of(&chain(&["mcp::rate::ndt"])).as_deref(), Some("rate"));
        assert_eq!(offload_of(&chain(&["mcp::sdma::Sdma::step"])), None);
    }

    #[test]
    fn the_run_loop_is_outside_the_passes_and_the_mcp_inlined_into_it_is_not() {
        assert!(!in_passes(&chain(&["mcp_image::main", "mcp_image::news"])));
        assert!(!in_passes(&chain(&["mcp_image::poll_stats::record"])));
        assert!(!in_passes(&chain(&[
            "mcp_image::poll",
            "mcp_image::poll_stats::record",
            "mcp::Work::add"
        ])));
        // The run loop's own register reads, through the hardware layer.
        assert!(!in_passes(&chain(&["main", "mcp_image::news", "nic_abi::sram::Sram::reg"])));
        assert!(!in_passes(&chain(&[
            "mcp_image::news",
            "<mcp_image::hw::SramHw as nic_abi::sram::Sram>::load_u32"
        ])));
        assert!(in_passes(&chain(&["mcp_image::poll", "mcp::Mcp::poll"])));
        assert!(in_passes(&chain(&["<mcp_image::hw::SramHw as mcp::hw::Hw>::read"])));
        assert!(in_passes(&chain(&["memcpy"])));
    }

    #[test]
    fn library_generics_are_left_out_of_the_functions() {
        assert!(is_library("core::array::<impl [T; N]>::map"));
        assert!(is_library(
            "<&mut core::array::drain::Drain<T,_,F> as core::ops::FnMut>::call_mut"
        ));
        assert!(is_library("<*mut usize>::wrapping_add"));
        assert!(!is_library("mcp::sdma::Sdma::step"));
        assert!(!is_library("memcpy"));
    }

    #[test]
    fn context_sums_split_into_machines_offloads_and_the_outside() {
        let mut sums = vec![0u64; 256];
        sums[1] = 10; // sdma
        sums[4] = 20; // rdma
        sums[5] = 3; // core
        sums[0] = 2; // no context: core
        sums[7] = 100; // outside the passes
        sums[(1 << 3) | 3] = 7; // recv, in the first offload
        sums[(2 << 3) | 7] = 9; // outside, in the second: outside
        let mut s = Split::default();
        split_sums(&sums, &["multicast".into(), "rate".into()], &mut s);
        assert_eq!(s.machines, [10, 0, 7, 20, 5]);
        assert_eq!(s.outside, 109);
        assert_eq!(s.offloads.get("multicast"), Some(&7));
        assert_eq!(s.offloads.get("rate"), None);
        assert_eq!(s.in_passes(), 42);
    }

    #[test]
    fn counts_add_up_per_address_across_windows() {
        let mut sum = Vec::new();
        add_delta(&mut sum, &[1, 2], &[4, 2, 7]);
        add_delta(&mut sum, &[0, 0, 0], &[1, 1, 1]);
        assert_eq!(sum, vec![4, 1, 8]);
    }

    #[test]
    fn one_nics_counts_are_its_own() {
        let before = vec![vec![1, 1], vec![10, 10]];
        let after = vec![vec![2, 3], vec![15, 10]];
        let mut all = Vec::new();
        add_deltas(&mut all, &before, &after, None);
        assert_eq!(all, vec![6, 2]);
        let mut one = Vec::new();
        add_deltas(&mut one, &before, &after, Some(1));
        assert_eq!(one, vec![5, 0]);
        let mut none = Vec::new();
        add_deltas(&mut none, &before, &after, Some(2));
        assert!(none.iter().all(|&c| c == 0));
    }
}
