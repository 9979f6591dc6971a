//! The MCP's shape, checked on its source: the four machines name none
//! of the offloads that live beside them, no source file grows past 500
//! lines and no function past 80.

use std::path::{Path, PathBuf};
use std::string::String;
use std::vec::Vec;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = std::vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_machines_name_none_of_the_offloads() {
    // The offloads' own words (comments included): they reach the
    // machines only through the hooks of `offload::` (a fan-out, a
    // scheduler policy, a window policy).
    let words = ["mcast", "multicast", "selective", "idt", "ndt", "rate control", "collective"];
    let s = src();
    let machines: Vec<PathBuf> = ["sdma", "recv", "rdma"]
        .iter()
        .flat_map(|d| sources(&s.join(d)))
        .chain([s.join("send.rs")])
        .collect();
    assert!(machines.len() > 10, "found only {machines:?}");
    let mut found = Vec::new();
    for p in &machines {
        let text = std::fs::read_to_string(p).unwrap();
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            for w in words {
                let named = lower.match_indices(w).any(|(at, _)| {
                    let before = lower[..at].chars().next_back();
                    let after = lower[at + w.len()..].chars().next();
                    // "idt" in "width" is not rate control's.
                    !(w.len() == 3
                        && (before.is_some_and(char::is_alphanumeric)
                            || after.is_some_and(char::is_alphanumeric)))
                });
                if named {
                    found.push(std::format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "the machines name an offload:\n{}", found.join("\n"));
}

#[test]
fn no_source_file_is_over_500_lines() {
    let long: Vec<String> = sources(&src())
        .into_iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(&p).unwrap().lines().count();
            (n > 500).then(|| std::format!("{}: {n} lines", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn no_function_is_over_80_lines() {
    // (rustfmt's layout: a function ends at the first line that is its
    // own indentation and a closing brace.)
    let mut long = Vec::new();
    for p in sources(&src()) {
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let decl = body
                .strip_prefix("pub ")
                .or_else(|| body.strip_prefix("pub(crate) "))
                .or_else(|| body.strip_prefix("pub(super) "))
                .unwrap_or(body);
            let decl = decl.strip_prefix("const ").unwrap_or(decl);
            let Some(name) = decl.strip_prefix("fn ") else { continue };
            let name: String =
                name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let close = std::format!("{indent}}}");
            // The signature ends with the body's `{`, or a declaration's `;`.
            let Some(sig) = lines[i..].iter().position(|l| l.ends_with('{') || l.ends_with(';'))
            else {
                continue;
            };
            if lines[i + sig].ends_with(';') {
                continue;
            }
            let Some(n) = lines[i..].iter().position(|l| *l == close) else { continue };
            if n + 1 > 80 {
                long.push(std::format!("{}:{}: {name}: {} lines", p.display(), i + 1, n + 1));
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}
