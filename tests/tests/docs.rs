//! The documentation stands alone: every relative link and every file
//! path a document names (in backticks, e.g. `docs/capture.md`) resolves
//! in the repository, every `#anchor` names a heading of its document, and
//! no document points outside the repository or at an issue tracker.

use std::path::{Path, PathBuf};

use cluster_tests::root;

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut v = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut v);
    v.sort();
    v
}

/// GitHub-style anchor of a heading: lower case, spaces to dashes, only
/// letters, digits, dashes and underscores kept.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Markdown link targets `](...)` in `text`.
fn links(text: &str) -> Vec<String> {
    text.split("](").skip(1).filter_map(|s| s.split(')').next()).map(str::to_string).collect()
}

/// Backticked words that look like a file in the repository: a relative
/// path with a directory and an extension, no placeholders.
fn named_paths(text: &str) -> Vec<String> {
    let exts = [".md", ".rs", ".toml", ".lua", ".sh", ".py", ".json"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.contains('/')
                && !w.contains(['<', '>', '*', ' ', '$', '{'])
                && !w.starts_with('/')
                && !w.starts_with("~")
                && !w.contains("://")
                && exts.iter().any(|x| w.ends_with(x))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_link_and_named_file_in_the_docs_resolves() {
    let mut bad = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        let dir = doc.parent().unwrap();
        let headings: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| slug(l.trim_start_matches('#')))
            .collect();
        for l in links(&text) {
            if l.starts_with("http://") || l.starts_with("https://") {
                continue;
            }
            let (file, anchor) = l.split_once('#').unwrap_or((&l, ""));
            if file.is_empty() {
                if !headings.contains(&anchor.to_string()) {
                    bad.push(format!("{name}: link #{anchor} names no heading"));
                }
            } else if !dir.join(file).exists() {
                bad.push(format!("{name}: link {l} does not resolve"));
            }
        }
        for p in named_paths(&text) {
            // Named from the repository root (the usual way), or beside
            // the document.
            if !root().join(&p).exists() && !dir.join(&p).exists() {
                bad.push(format!("{name}: names `{p}`, which is not in the repository"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Does relative `path`, read from a directory `depth` levels below the
/// repository root, climb out of the repository?
fn escapes(depth: usize, path: &str) -> bool {
    let mut d = depth as i64;
    for c in path.split('/') {
        match c {
            ".." => d -= 1,
            "" | "." => {}
            _ => d += 1,
        }
        if d < 0 {
            return true;
        }
    }
    false
}

#[test]
fn no_document_points_outside_the_repository_or_at_issues() {
    let mut bad = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let rel = doc.strip_prefix(root()).unwrap();
        let name = rel.display().to_string();
        let depth = rel.components().count() - 1;
        for (i, line) in text.lines().enumerate() {
            let l = line.to_lowercase();
            let issue = l.match_indices("issue").any(|(at, _)| {
                let rest = l[at + 5..].trim_start_matches([' ', '#']);
                rest.starts_with(|c: char| c.is_ascii_digit())
            });
            let outside = line
                .split(|c: char| c.is_whitespace() || "`()[]<>\"',;".contains(c))
                .any(|w| w.contains("../") && escapes(depth, w));
            if outside || issue {
                bad.push(format!("{name}:{}: {line}", i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_checks_catch_what_they_look_for() {
    assert!(escapes(1, "../../spec/x.md") && escapes(0, "../x.md"));
    assert!(!escapes(1, "../README.md") && !escapes(2, "../../docs/a.md"));
    assert_eq!(
        slug("## 10. Wire format and fabric (`nic_abi::packet`)".trim_start_matches('#')),
        "10-wire-format-and-fabric-nic_abipacket"
    );
    assert_eq!(links("see [x](docs/a.md#b) and [y](#c)."), ["docs/a.md#b", "#c"]);
    assert_eq!(
        named_paths("`docs/capture.md`, `a/<name>.toml`, `x.rs`, `tools/w/n.lua`"),
        ["docs/capture.md", "tools/w/n.lua"]
    );
}
