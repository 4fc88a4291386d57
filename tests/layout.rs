//! The shape of the codebase, checked: no `.rs` file in the workspace over 1 000 lines, and no
//! import cycle between the library's top-level modules (docs/architecture.md#modules — a
//! lower layer never names a higher one). Test code is left out of the cycle check: a test may
//! reach across layers to build its fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 1_000;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(
                name.as_ref(),
                "target" | "node_modules" | ".git" | "corpus" | "artifacts"
            ) {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_rust_file_is_over_a_thousand_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "src", "adapters", "tests", "benches", "examples", "fuzz", "hosts",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "found only {} .rs files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = fs::read_to_string(path).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:#?}");
}

/// The non-test source of a file: everything before its `#[cfg(test)] mod tests`, with line
/// comments removed; nothing for a `tests.rs` file or a file under a `tests/` directory.
fn non_test_source(path: &Path, src: &Path) -> String {
    let relative = path.strip_prefix(src).unwrap_or(path);
    if relative.file_name().is_some_and(|n| n == "tests.rs")
        || relative.components().any(|c| c.as_os_str() == "tests")
    {
        return String::new();
    }
    let text = fs::read_to_string(path).unwrap();
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start() == "#[cfg(test)]" {
            // Skip further attributes; a test module ends the non-test source.
            let mut ahead = lines.clone();
            let mut next = ahead.next();
            while next.is_some_and(|l| l.trim_start().starts_with("#[")) {
                next = ahead.next();
            }
            if next.is_some_and(|l| l.trim_start().starts_with("mod ")) {
                break;
            }
        }
        let code = line.split("//").next().unwrap_or("");
        kept.push(code.to_string());
    }
    kept.join("\n")
}

/// The top-level names after `crate::` in `source`, including those inside a
/// `use crate::{a::x, b::y, c}` group (a name that is no module is never a node).
fn named_modules(source: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in source.match_indices("crate::") {
        let rest = &source[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find_map(|(i, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(i)
                })
                .unwrap_or(group.len());
            // Top-level entries of the group: split on commas at depth 0.
            let mut depth = 0;
            let mut start = 0;
            let body = &group[..end];
            for (i, c) in body.char_indices().chain([(body.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.insert(ident(body[start..i].trim()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            named.insert(ident(rest));
        }
    }
    named.remove("");
    named
}

/// A cycle in `edges`, if there is one, as the modules along it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|n| n == next).unwrap_or(0);
                    let mut cycle = path[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, edges, state, path) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, edges, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let named = named_modules(&non_test_source(&path, src));
        let entry = edges.entry(top.clone()).or_default();
        entry.extend(named.into_iter().filter(|m| *m != top));
    }
    edges
}

#[test]
fn the_top_level_modules_form_no_import_cycle() {
    let edges = module_edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for expected in [
        "harness",
        "contract",
        "projection",
        "backend",
        "store",
        "serve",
    ] {
        assert!(edges.contains_key(expected), "module {expected} not found");
    }
    // The reader sees the edges it must: the harness names the store and the contract.
    assert!(edges["harness"].contains("store") && edges["harness"].contains("contract"));
    if let Some(cycle) = find_cycle(&edges) {
        panic!(
            "import cycle between top-level modules: {}",
            cycle.join(" → ")
        );
    }
    // The leaves stay leaves.
    for leaf in ["contract", "util"] {
        assert!(edges[leaf].is_empty(), "{leaf} names {:?}", edges[leaf]);
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_the_reader_reads_groups() {
    let named =
        named_modules("use crate::{a::X, b::{Y, Z}, c};\nuse crate::d::W;\nlet v = crate::e::f();");
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e"]
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default();
    assert_eq!(find_cycle(&edges), None);
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
