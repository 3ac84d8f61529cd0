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

/// The shared leaves, which a folder's `Imports:` line may sum up as "the shared leaves".
const LEAVES: [&str; 4] = ["error", "files", "progress", "proto_gen"];

/// ARCHITECTURE.md, whose "Allowed imports" table is the one source of the import rules.
fn architecture_md() -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md")).unwrap()
}

/// Module -> the modules it may import, read from the rows `| `m` | `a`, `b` |` of the
/// "Allowed imports" table in `doc`.
fn allowed_in(doc: &str) -> BTreeMap<String, Vec<String>> {
    let start = doc
        .find("### Allowed imports")
        .expect("ARCHITECTURE.md has an \"Allowed imports\" section");
    let names = |cell: &str| -> Vec<String> {
        cell.split(',')
            .map(|n| n.trim().trim_matches('`').to_string())
            .filter(|n| !n.is_empty())
            .collect()
    };
    let mut table = BTreeMap::new();
    for line in doc[start..].lines().skip_while(|l| !l.starts_with('|')) {
        let Some(row) = line.strip_prefix("| `") else {
            if line.starts_with('|') {
                continue;
            }
            break;
        };
        let cells: Vec<&str> = row.split('|').collect();
        let module = cells[0].trim().trim_end_matches('`').to_string();
        assert!(
            table.insert(module.clone(), names(cells[1])).is_none(),
            "ARCHITECTURE.md lists `{module}` twice"
        );
    }
    assert!(table.len() > 10, "the allowed-imports table was not read");
    table
}

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

/// Every path `prefix` starts in `lines` (outside comments), as (line index, first segment);
/// a `prefix{a, b::c}` group gives each head.
fn paths_after(lines: &[&str], prefix: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, raw) in lines.iter().enumerate() {
        let mut rest = code_of(raw);
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().next_back();
            let after = &rest[i + prefix.len()..];
            rest = after;
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let heads = match after.strip_prefix('{') {
                Some(group) => group_heads(lines, n, group),
                None => vec![ident(after).to_string()],
            };
            out.extend(heads.into_iter().map(|h| (n, h)));
        }
    }
    out
}

/// Every edge of `file` (of module `from`, shown as `shown`) to another top-level module,
/// through paths starting with `prefix` (`crate::` in the library, `lipfp::` in `fuzz/`).
fn edges_in(file: &Path, (from, shown, prefix): (&str, &Path, &str), out: &mut Vec<Edge>) {
    let text = fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (n, to) in paths_after(&lines, prefix) {
        if !to.is_empty() && to != from && to != "self" {
            out.push(Edge {
                file: shown.to_path_buf(),
                line: n + 1,
                text: lines[n].trim().to_string(),
                from: from.to_string(),
                to,
            });
        }
    }
}

/// Every edge of `file` to another top-level module, and its `super::super::` climbs.
fn edges_of(src: &Path, file: &Path, out: &mut Vec<Edge>, climbs: &mut Vec<String>) {
    let Some(from) = top_module(src, file) else {
        return;
    };
    let shown = file.strip_prefix(src.parent().unwrap()).unwrap();
    let text = fs::read_to_string(file).unwrap();
    for (n, raw) in text.lines().enumerate() {
        if code_of(raw).contains("super::super::") {
            climbs.push(format!("{}:{}: {}", shown.display(), n + 1, raw.trim()));
        }
    }
    edges_in(file, (&from, shown, "crate::"), out);
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

/// The allowed imports of ARCHITECTURE.md, borrowed.
fn table_of(allowed: &BTreeMap<String, Vec<String>>) -> BTreeMap<&str, Vec<&str>> {
    (allowed.iter())
        .map(|(m, deps)| (m.as_str(), deps.iter().map(String::as_str).collect()))
        .collect()
}

#[test]
fn allowed_table_is_acyclic() {
    let allowed = allowed_in(&architecture_md());
    let table = table_of(&allowed);
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
    let allowed = allowed_in(&architecture_md());
    let mut table = table_of(&allowed);
    table.get_mut("arith").unwrap().push("report");
    let c = cycle_of(&table).expect("a planted cycle is found");
    assert_eq!(c.first(), c.last());
}

#[test]
fn imports_follow_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = allowed_in(&architecture_md());
    let table = table_of(&allowed);
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
                    "{}: top-level module `{m}` is not in ARCHITECTURE.md's allowed imports",
                    file.display()
                ));
            }
        }
        edges_of(&src, file, &mut edges, &mut climbs);
    }
    // the fuzz targets and their library reach the crate as `lipfp::`
    let root = src.parent().unwrap();
    for dir in ["fuzz/src", "fuzz/fuzz_targets"] {
        let mut fuzz = Vec::new();
        rust_files(&root.join(dir), &mut fuzz);
        assert!(!fuzz.is_empty(), "no Rust files under {dir}");
        for file in &fuzz {
            let shown = file.strip_prefix(root).unwrap();
            edges_in(file, ("fuzz", shown, "lipfp::"), &mut edges);
        }
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
        "imports against the layering (ARCHITECTURE.md, \"Allowed imports\"):\n{}",
        problems.join("\n")
    );
}

/// A command (a file or folder of `src/commands/`) imports no other command: what two commands
/// share lives in the layer it belongs to.
#[test]
fn commands_import_no_other_command() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&dir).unwrap();
        let own = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let own = own.trim_end_matches(".rs");
        if own == "mod" {
            continue;
        }
        let text = fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut heads = paths_after(&lines, "crate::commands::");
        if rel.components().count() == 1 {
            // `super::` of a command file is `commands` itself
            heads.extend(paths_after(&lines, "super::"));
        }
        for (n, head) in heads {
            if head != own && head != "*" && head != "self" && !head.is_empty() {
                problems.push(format!(
                    "src/commands/{}:{}: command `{own}` imports command `{head}`: {}",
                    rel.display(),
                    n + 1,
                    lines[n].trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The modules an `Imports:` paragraph of a module doc names (its `crate::x` links), and
/// whether it sums up the shared leaves.
fn imports_line(doc: &str) -> Option<(Vec<String>, bool)> {
    let lines: Vec<&str> = doc
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let start = lines.iter().position(|l| l.starts_with("Imports:"))?;
    let para: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    let text = para.join(" ");
    let named = paths_after(&[text.as_str()], "crate::")
        .into_iter()
        .map(|(_, h)| h)
        .collect();
    Some((named, text.contains("shared leaves")))
}

/// Each folder's `mod.rs` names on its `Imports:` line exactly the modules ARCHITECTURE.md
/// allows it (the shared leaves may be summed up).
#[test]
fn every_folder_names_its_allowed_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = allowed_in(&architecture_md());
    let mut problems = Vec::new();
    for (module, deps) in &allowed {
        let path = src.join(module).join("mod.rs");
        if !path.exists() {
            continue;
        }
        let doc = fs::read_to_string(&path).unwrap();
        let Some((named, leaves)) = imports_line(&doc) else {
            problems.push(format!("src/{module}/mod.rs has no `Imports:` line"));
            continue;
        };
        for n in &named {
            if !deps.contains(n) {
                problems.push(format!(
                    "src/{module}/mod.rs names `{n}`, which ARCHITECTURE.md does not allow it"
                ));
            }
        }
        for d in deps {
            let summed = leaves && LEAVES.contains(&d.as_str());
            if !named.contains(d) && !summed {
                problems.push(format!(
                    "src/{module}/mod.rs does not name `{d}`, which ARCHITECTURE.md allows it"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The table parser reads rows, and an `Imports:` line that names a module the table does not
/// allow is told apart.
#[test]
fn the_rule_readers_read_what_they_should() {
    let doc = "x\n### Allowed imports\n\n| module | may import |\n|---|---|\n| `a` | |\n\
               | `b` | `a` |\n| `c` | `a`, `b` |\n| `d` | `c` |\n| `e` | |\n| `f` | |\n\
               | `g` | |\n| `h` | |\n| `i` | |\n| `j` | |\n| `k` | `j` |\n\nafter\n";
    let t = allowed_in(doc);
    assert_eq!(t["c"], ["a", "b"]);
    assert!(t["a"].is_empty());
    let (named, leaves) =
        imports_line("//! Intro.\n//!\n//! Imports: [`crate::a`] and\n//! [`crate::b`], the shared leaves.\n//!\n//! [`crate::z`]").unwrap();
    assert_eq!(named, ["a", "b"]);
    assert!(leaves);
}

/// The items a folder's `mod.rs` defines itself (outside its tests), not those it re-exports.
fn items_defined_in(mod_rs: &str) -> Vec<String> {
    let code = mod_rs.split("#[cfg(test)]").next().unwrap_or("");
    let kinds = [
        "struct ", "enum ", "fn ", "const ", "type ", "trait ", "static ",
    ];
    let mut names = Vec::new();
    for line in code.lines() {
        let mut rest = line;
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            rest = rest.strip_prefix(vis).unwrap_or(rest);
        }
        if let Some(kind) = kinds.iter().find(|k| rest.starts_with(**k)) {
            names.push(ident(&rest[kind.len()..]).to_string());
        }
    }
    names
}

/// Inside a folder, the types sit below the code that orchestrates them: `mod.rs` declares the
/// folder's files and re-exports their items, and no file of the folder imports an item that
/// `mod.rs` itself defines (through `super::` or the folder's `crate::` path), which would make
/// the entry point a home that the files below it reach back up to.
#[test]
fn no_file_reaches_up_to_its_folders_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for mod_rs in files.iter().filter(|f| f.ends_with("mod.rs")) {
        let defined = items_defined_in(&fs::read_to_string(mod_rs).unwrap());
        let dir = mod_rs.parent().unwrap();
        let rel = dir.strip_prefix(&src).unwrap();
        let folder_path = format!("crate::{}::", rel.display()).replace('/', "::");
        for file in files.iter().filter(|f| f.starts_with(dir) && *f != mod_rs) {
            let name = file.file_name().unwrap().to_string_lossy();
            if name.contains("tests") {
                continue;
            }
            let text = fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let lines: Vec<&str> = code.lines().collect();
            let mut heads = paths_after(&lines, &folder_path);
            if file.parent() == Some(dir) {
                heads.extend(paths_after(&lines, "super::"));
            }
            for (n, head) in heads.into_iter().filter(|(_, h)| defined.contains(h)) {
                problems.push(format!(
                    "{}:{}: `{head}` is defined in {}; move it to a file of its own: {}",
                    file.strip_prefix(&src).unwrap().display(),
                    n + 1,
                    mod_rs.strip_prefix(&src).unwrap().display(),
                    lines[n].trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_mod_rs_reader_sees_definitions_not_re_exports() {
    let text =
        "pub mod a;\npub use a::X;\npub struct Y;\nfn helper() {}\npub(crate) const Z: u8 = 0;\n\
                #[cfg(test)]\nmod tests { struct T; }\n";
    assert_eq!(items_defined_in(text), ["Y", "helper", "Z"]);
}
