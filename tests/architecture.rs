//! The layering of `src/`, enforced (in the style of rust-analyzer's tidy tests): every
//! `use crate::...` and every `crate::x::` path in code names a top-level module, and each such
//! edge between two top-level modules must be in [`ALLOWED`]. The table itself must be acyclic,
//! so the data flow policy -> model + data -> norms -> certificates -> verdicts -> reporters stays
//! one way. See ARCHITECTURE.md.
//!
//! Comments (doc links included) are not imports and are skipped. `super::super::` is refused:
//! a path that climbs out of its folder is written from `crate::`, where this test sees it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules it may import, bottom layer first. `lib.rs` and
/// `main.rs` are the crate root and may name anything.
const ALLOWED: &[(&str, &[&str])] = &[
    // Shared leaves: the one diagnostic type, bounded file reads and report writes, progress on
    // stderr, the generated certificate-file types. They import no folder.
    ("error", &[]),
    ("files", &["error"]),
    ("progress", &[]),
    ("proto_gen", &[]),
    // Floating-point arithmetic: formats, directed rounding, execution models, runtimes.
    ("arith", &["error"]),
    // Untrusted ONNX in, a checked DenseNet out: reader, spec checks, graph -> network.
    ("onnx", &["arith", "error", "files"]),
    // Sound norms and per-instance certificates over the network.
    ("bounds", &["onnx", "arith", "error"]),
    // The lipfp.toml schema (it names modes, formats, runtimes and the Gram iterations).
    (
        "policy",
        &["bounds", "arith", "error", "files", "proto_gen"],
    ),
    // Data, the centre execution, runs and the falsifier: outcomes, never reports.
    (
        "engine",
        &[
            "policy", "bounds", "onnx", "arith", "error", "files", "progress",
        ],
    ),
    // Gate verdicts, baseline comparison and curve figures, from the engine's outcomes.
    (
        "gate",
        &["engine", "policy", "bounds", "arith", "error", "files"],
    ),
    // Reporters (render, never compute) and certificate files.
    (
        "report",
        &[
            "gate",
            "engine",
            "policy",
            "bounds",
            "onnx",
            "arith",
            "error",
            "files",
            "progress",
            "proto_gen",
        ],
    ),
    // The subcommands: they wire every layer below together.
    (
        "commands",
        &[
            "report",
            "gate",
            "engine",
            "policy",
            "bounds",
            "onnx",
            "arith",
            "error",
            "files",
            "progress",
            "proto_gen",
        ],
    ),
    // The argument parser and dispatch.
    (
        "cli",
        &[
            "commands",
            "report",
            "gate",
            "engine",
            "policy",
            "bounds",
            "onnx",
            "arith",
            "error",
            "files",
            "progress",
            "proto_gen",
        ],
    ),
];

/// One `crate::` path in code.
struct Edge {
    file: PathBuf,
    line: usize,
    text: String,
    from: String,
    to: String,
}

/// The `.rs` files under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module of a file (`src/engine/run/mod.rs` -> `engine`); `None` at the root.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

/// A line without its `//` comment (a `//` inside a string cuts the line short, which can only
/// hide text after a URL, never add an edge).
fn code_of(line: &str) -> &str {
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segments of a `{a, b::c, d::{e, f}}` group starting at `s` (after the `{`),
/// reading on across lines; with the number of lines the group spans.
fn group_heads(lines: &[&str], start: usize, s: &str) -> Vec<String> {
    let mut text = s.to_string();
    let mut k = start;
    while text.matches('{').count() + 1 > text.matches('}').count() && k + 1 < lines.len() {
        k += 1;
        text.push(' ');
        text.push_str(code_of(lines[k]));
    }
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_head = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_head = true,
            c if at_head && depth == 0 && !c.is_whitespace() => {
                at_head = false;
                heads.push(ident(&text[i..]).to_string());
            }
            _ => {}
        }
    }
    heads
}

/// Every edge of `file` to another top-level module.
fn edges_of(src: &Path, file: &Path, out: &mut Vec<Edge>, climbs: &mut Vec<String>) {
    let Some(from) = top_module(src, file) else {
        return;
    };
    let text = fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let shown = file.strip_prefix(src.parent().unwrap()).unwrap();
    for (n, raw) in lines.iter().enumerate() {
        let code = code_of(raw);
        if code.contains("super::super::") {
            climbs.push(format!("{}:{}: {}", shown.display(), n + 1, raw.trim()));
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().next_back();
            let after = &rest[i + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let targets = match after.strip_prefix('{') {
                Some(group) => group_heads(&lines, n, group),
                None => vec![ident(after).to_string()],
            };
            for to in targets {
                if !to.is_empty() && to != from && to != "self" {
                    out.push(Edge {
                        file: shown.to_path_buf(),
                        line: n + 1,
                        text: raw.trim().to_string(),
                        from: from.clone(),
                        to,
                    });
                }
            }
        }
    }
}

/// A cycle of `table`, if it has one.
fn cycle_of(table: &BTreeMap<&str, Vec<&str>>) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        table: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|n| *n == node).unwrap();
                let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node, 1);
        path.push(node);
        for next in table.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, table, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(node, 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in table.keys() {
        if let Some(c) = visit(node, table, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn table() -> BTreeMap<&'static str, Vec<&'static str>> {
    ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.to_vec()))
        .collect()
}

#[test]
fn allowed_table_is_acyclic() {
    let table = table();
    assert_eq!(table.len(), ALLOWED.len(), "a module is listed twice");
    for (m, deps) in &table {
        for d in deps {
            assert!(
                table.contains_key(d),
                "`{m}` may import `{d}`, which is not in the table"
            );
        }
    }
    if let Some(c) = cycle_of(&table) {
        panic!("the allowed dependencies have a cycle: {}", c.join(" -> "));
    }
}

#[test]
fn cycle_check_finds_cycles() {
    let mut table = table();
    table.get_mut("arith").unwrap().push("report");
    let c = cycle_of(&table).expect("a planted cycle is found");
    assert_eq!(c.first(), c.last());
}

#[test]
fn imports_follow_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let table = table();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut edges = Vec::new();
    let mut climbs = Vec::new();
    let mut problems = Vec::new();
    for file in &files {
        if let Some(m) = top_module(&src, file) {
            if !table.contains_key(m.as_str()) {
                problems.push(format!(
                    "{}: top-level module `{m}` is not in ALLOWED (tests/architecture.rs)",
                    file.display()
                ));
            }
        }
        edges_of(&src, file, &mut edges, &mut climbs);
    }
    assert!(
        edges.len() > 100,
        "too few edges found: the parser is broken"
    );
    for e in &edges {
        let ok = table
            .get(e.from.as_str())
            .is_some_and(|d| d.contains(&e.to.as_str()));
        if !ok {
            problems.push(format!(
                "{}:{}: `{}` may not import `{}`: {}",
                e.file.display(),
                e.line,
                e.from,
                e.to,
                e.text
            ));
        }
    }
    for c in climbs {
        problems.push(format!("{c}: write `crate::` instead of `super::super::`"));
    }
    assert!(
        problems.is_empty(),
        "imports against the layering (ARCHITECTURE.md, ALLOWED in tests/architecture.rs):\n{}",
        problems.join("\n")
    );
}
