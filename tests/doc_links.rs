//! Every relative link in the documentation resolves: README.md, ARCHITECTURE.md (when present)
//! and every docs/*.md are scanned for Markdown links `[text](path)`, `[text](path#anchor)`,
//! `[text](#anchor)` and reference definitions `[label]: path`. A path must name a file or
//! folder of the repository (relative to the linking file's folder, or to the repository root
//! when it starts with `/`); an anchor must be a heading of the target Markdown file (of the
//! same file for a bare `#anchor`), as GitHub slugs it: lowercased, punctuation other than `-`
//! and `_` dropped, spaces turned into `-`, and `-1`, `-2`, ... appended to repeated headings.
//! Links to other schemes (`http://`, `https://`, `mailto:`, ...) are not checked, and neither
//! is anything inside code spans or fenced code blocks.
//!
//! The test fails listing every broken link as `file:line: link (why)`. Standard library only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked, relative to the repository root.
fn documentation_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    if root.join("ARCHITECTURE.md").is_file() {
        files.push(PathBuf::from("ARCHITECTURE.md"));
    }
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "md"))
                .map(|p| PathBuf::from("docs").join(p.file_name().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    files
}

/// An opening code fence: its character and length, e.g. ("`", 3) for "```toml".
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let c = t.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = t.chars().take_while(|&x| x == c).count();
    (n >= 3).then_some((c, n))
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        match (open, fence(line)) {
            (None, Some(f)) => open = Some(f),
            // a closing fence: the same character, at least as long, no info string
            (Some((c, n)), Some((c2, n2)))
                if c == c2 && n2 >= n && line.trim().chars().all(|x| x == c) =>
            {
                open = None
            }
            (Some(_), _) => {}
            (None, None) => out.push((i + 1, line)),
        }
    }
    out
}

/// `line` with every inline code span (and its backticks) blanked out.
fn strip_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        // the closing run has exactly n backticks
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut out[i..j + n] {
                    *c = ' ';
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// The destinations of the inline links `[text](dest)` in `s` (code spans already removed).
fn inline_destinations(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(k) = rest.find("](") {
        let after = &rest[k + 2..];
        let dest: String = if let Some(inner) = after.strip_prefix('<') {
            inner.split('>').next().unwrap_or("").to_string()
        } else {
            let mut depth = 0usize;
            let mut end = after.len();
            for (i, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            after[..end].to_string()
        };
        out.push(dest);
        rest = after;
    }
    out
}

/// The destination of a reference definition `[label]: dest`, if `s` is one.
fn reference_destination(s: &str) -> Option<String> {
    let t = s.trim_start();
    if s.len() - t.len() > 3 || !t.starts_with('[') || t.starts_with("[^") {
        return None;
    }
    let close = t.find("]:")?;
    if close < 2 {
        return None;
    }
    let dest = t[close + 2..].split_whitespace().next()?;
    Some(
        dest.trim_start_matches('<')
            .trim_end_matches('>')
            .to_string(),
    )
}

/// Every link destination of a Markdown text, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let s = strip_code_spans(line);
        out.extend(inline_destinations(&s).into_iter().map(|d| (n, d)));
        if let Some(d) = reference_destination(&s) {
            out.push((n, d));
        }
    }
    out
}

/// The text a heading renders to, before slugging: links keep their text, images their alt.
fn heading_text(raw: &str) -> String {
    let mut s = raw.to_string();
    // [text](dest) -> text
    while let Some(k) = s.find("](") {
        let Some(open) = s[..k].rfind('[') else { break };
        let tail = &s[k + 2..];
        let Some(close) = tail.find(')') else { break };
        let text = s[open + 1..k].to_string();
        let start = if open > 0 && s.as_bytes()[open - 1] == b'!' {
            open - 1
        } else {
            open
        };
        s = format!("{}{}{}", &s[..start], text, &tail[close + 1..]);
    }
    // inline HTML tags
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// GitHub's anchor for a heading text (without the repeat suffix).
fn slug(heading: &str) -> String {
    heading_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The text of an ATX heading (`## Text ##`), if `line` is one.
fn atx_heading(line: &str) -> Option<&str> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let level = t.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &t[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim();
    // an optional closing sequence of #s, preceded by a space
    let stripped = rest.trim_end_matches('#');
    let rest = if stripped.len() < rest.len() && (stripped.is_empty() || stripped.ends_with(' ')) {
        stripped.trim_end()
    } else {
        rest
    };
    Some(rest)
}

/// Every anchor a Markdown text defines: its headings' slugs (ATX and setext, repeats
/// numbered as GitHub does) and explicit HTML `id="..."` / `name="..."` attributes.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    let mut add = |s: String, out: &mut HashSet<String>| {
        let k = seen.entry(s.clone()).or_insert(0);
        let anchor = if *k == 0 {
            s.clone()
        } else {
            format!("{s}-{k}")
        };
        *k += 1;
        out.insert(anchor);
    };
    let lines = prose_lines(text);
    let mut previous: Option<(usize, &str)> = None;
    for &(n, line) in &lines {
        if let Some(h) = atx_heading(line) {
            add(slug(h), &mut out);
        } else if let Some((pn, p)) = previous {
            let t = line.trim();
            let underline =
                !t.is_empty() && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'));
            let pt = p.trim();
            if underline
                && pn + 1 == n
                && !pt.is_empty()
                && atx_heading(p).is_none()
                && !pt.starts_with(['|', '*', '-', '+', '>'])
            {
                add(slug(pt), &mut out);
            }
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(k) = rest.find(attr) {
                let v = &rest[k + attr.len()..];
                if let Some(end) = v.find('"') {
                    out.insert(v[..end].to_string());
                }
                rest = v;
            }
        }
        previous = Some((n, line));
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why `dest`, linked from `file` (relative to `root`), is broken; None when it resolves.
fn broken(
    root: &Path,
    file: &Path,
    dest: &str,
    anchor_cache: &mut HashMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    let lower = dest.to_ascii_lowercase();
    if dest.is_empty() {
        return Some("empty link".into());
    }
    if lower.starts_with("mailto:") || lower.contains("://") {
        return None;
    }
    let (path, anchor) = match dest.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (dest, None),
    };
    let path = path.split('?').next().unwrap_or("");
    let target = if path.is_empty() {
        root.join(file)
    } else if let Some(abs) = path.strip_prefix('/') {
        root.join(percent_decode(abs))
    } else {
        root.join(file).parent().unwrap().join(percent_decode(path))
    };
    if !target.exists() {
        return Some("no such file".into());
    }
    let canonical = target.canonicalize().ok()?;
    if !canonical.starts_with(root.canonicalize().ok()?) {
        return Some("outside the repository".into());
    }
    let anchor = match anchor {
        Some(a) => percent_decode(a),
        None => return None,
    };
    if !(canonical.is_file() && canonical.extension().is_some_and(|x| x == "md")) {
        return None; // e.g. a line anchor into a source file
    }
    if anchor.is_empty() {
        return Some("empty anchor".into());
    }
    let known = anchor_cache
        .entry(canonical.clone())
        .or_insert_with(|| anchors(&std::fs::read_to_string(&canonical).unwrap_or_default()));
    (!known.contains(&anchor)).then(|| format!("no heading for #{anchor}"))
}

#[test]
fn every_relative_link_in_the_documentation_resolves() {
    let root = root();
    let files = documentation_files(&root);
    assert!(
        files.len() > 1,
        "no docs/*.md found under {}",
        root.display()
    );
    let mut cache = HashMap::new();
    let mut problems: BTreeMap<(String, usize), Vec<String>> = BTreeMap::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let shown = file.to_string_lossy().replace('\\', "/");
        for (line, dest) in links(&text) {
            checked += 1;
            if let Some(why) = broken(&root, file, &dest, &mut cache) {
                problems
                    .entry((shown.clone(), line))
                    .or_default()
                    .push(format!("{dest} ({why})"));
            }
        }
    }
    assert!(checked > 0, "no links found in {files:?}");
    let report: Vec<String> = problems
        .into_iter()
        .flat_map(|((file, line), v)| v.into_iter().map(move |l| format!("{file}:{line}: {l}")))
        .collect();
    assert!(
        report.is_empty(),
        "{} broken documentation link(s):\n{}",
        report.len(),
        report.join("\n")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("Policy reference (`lipfp.toml`)"),
        "policy-reference-lipfptoml"
    );
    assert_eq!(
        slug("Runtimes beyond IEEE accumulation (beyond the paper)"),
        "runtimes-beyond-ieee-accumulation-beyond-the-paper"
    );
    assert_eq!(
        slug("Componentwise bounds (beyond the paper; `best` only)"),
        "componentwise-bounds-beyond-the-paper-best-only"
    );
    assert_eq!(slug("lipfp check"), "lipfp-check");
    assert_eq!(
        slug("What is certified, and the limits"),
        "what-is-certified-and-the-limits"
    );
    assert_eq!(slug("snake_case and - dash"), "snake_case-and---dash");
    assert_eq!(slug("A [linked](other.md) heading"), "a-linked-heading");
    assert_eq!(
        slug("Measured on the paper's benchmark"),
        "measured-on-the-papers-benchmark"
    );
}

#[test]
fn anchors_skip_code_blocks_and_number_repeats() {
    let text = "# Title\n\n```toml\n# not a heading\n```\n\n## Same\n\n## Same ##\n\nSetext\n------\n\n| a |\n|---|\n";
    let a = anchors(text);
    for want in ["title", "same", "same-1", "setext"] {
        assert!(a.contains(want), "{want} missing from {a:?}");
    }
    assert!(!a.contains("not-a-heading"), "{a:?}");
    assert_eq!(a.len(), 4, "{a:?}");
}

#[test]
fn links_skip_code_and_read_every_form() {
    let text =
        "See [a](docs/a.md#x) and `[b](nope.md)` and [c](<d e.md>) and ![i](img.png \"t\").\n\
                ```\n[in](fence.md)\n```\n[ref]: ref.md\n[t](f(x).md)\n";
    let found: Vec<String> = links(text).into_iter().map(|(_, d)| d).collect();
    assert_eq!(
        found,
        ["docs/a.md#x", "d e.md", "img.png", "ref.md", "f(x).md"]
    );
    assert_eq!(links(text)[3].0, 5);
}
