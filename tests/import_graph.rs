//! The crate's imports run one way (docs/architecture.md): no module cycle, between the
//! top-level modules or between the files of one module, and every top-level import goes to a
//! module of the same or a lower layer. Read from the source itself: every `crate::` and
//! `super::` path outside comments and strings, resolved to the file of the module it names
//! (through a parent's `pub use child::…` re-exports). A child using its parent's own items is
//! not an edge (the parent is its module's interface); anything else between two files is.
//! Test code (`#[cfg(test)] mod … { }`) is left out: a test may reach into a sibling for its
//! fixtures without the product's structure depending on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may import from its own layer and the ones before it.
const LAYERS: &[&[&str]] = &[
    // Foundations: no capability of the agent.
    &[
        "quantity",
        "resources",
        "hashing",
        "checkpoints",
        "kubelet_config",
        "table",
        "metrics",
        "health",
        "systemd",
        "http",
        "admin",
        "cri",
    ],
    // The API server.
    &["kube"],
    // Pods and containers of this node, joined.
    &["nodeview"],
    // What every request kind shares: reading a request and its loop; stopping containers.
    &["requests", "restart"],
    // The capabilities: one module each.
    &[
        "recreate",
        "restartrequest",
        "rollout",
        "resize",
        "containermeta",
        "upgrade",
    ],
    // Configuration, the agent's wiring and the commands.
    &["config", "logging", "inspect", "agent"],
];

/// A module path: `["kube", "watches"]` for src/kube/watches.rs; empty for the crate root.
type ModPath = Vec<String>;

struct Source {
    module: ModPath,
    /// The code with comments, strings and character literals blanked out.
    code: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(&root).ok()?.with_extension("");
            let mut module: ModPath = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            // main.rs is the binary crate: its `crate::` is not the library's.
            if file.ends_with("main.rs") {
                return None;
            }
            let text = std::fs::read_to_string(&file).ok()?;
            Some(Source {
                module,
                code: blank_comments_and_strings(&text),
            })
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Replaces comments, string literals (raw ones too) and character literals by spaces, so that
/// what remains is code and its braces balance.
fn blank_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(&other) => blank(&mut out, other),
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&inner) = chars.get(i) {
                    blank(&mut out, inner);
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && char_literal_len(&chars, i).is_some() {
            i += char_literal_len(&chars, i).unwrap_or(1);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The length of a character literal starting at `i` ('x', '\n', '\''), or None for a lifetime.
fn char_literal_len(chars: &[char], i: usize) -> Option<usize> {
    match (chars.get(i + 1), chars.get(i + 2), chars.get(i + 3)) {
        (Some('\\'), _, _) => (i + 2..chars.len().min(i + 12))
            .find(|&j| chars[j] == '\'')
            .map(|j| j - i + 1),
        (Some(_), Some('\''), _) => Some(3),
        _ => None,
    }
}

/// Every path the code names, as (module path the code is in, path segments, where `super`s
/// are already resolved against the inline modules the path sits in).
fn named_paths(source: &Source) -> Vec<ModPath> {
    let code = &source.code;
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    // The inline modules (`mod tests { … }`) open at this point, with the brace depth each
    // opened at and whether it is test code (`#[cfg(test)]`).
    let mut inline: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d, _)| *d == depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        if starts_word(code, i, "mod ") {
            let rest = &code[i + 4..];
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = rest.trim_start()[name.len()..].trim_start();
            if after.starts_with('{') {
                let test_only = code[..i].trim_end().ends_with("#[cfg(test)]");
                inline.push((name, depth, test_only));
            }
        }
        let in_test_code = inline.iter().any(|(_, _, test_only)| *test_only);
        for (start, from_root) in [("crate::", true), ("super::", false)] {
            if !in_test_code && starts_word(code, i, start) {
                let (segments, used) = path_at(&code[i..]);
                let mut here: ModPath = source.module.clone();
                here.extend(inline.iter().map(|(n, _, _)| n.clone()));
                for expanded in expand(&segments) {
                    let resolved = if from_root {
                        expanded[1..].to_vec()
                    } else {
                        let mut base = here.clone();
                        let mut rest = expanded.as_slice();
                        while rest.first().map(String::as_str) == Some("super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        base.extend(rest.iter().cloned());
                        base
                    };
                    paths.push(resolved);
                }
                i += used.max(1);
            }
        }
        i += 1;
    }
    paths
}

fn starts_word(code: &str, i: usize, word: &str) -> bool {
    code[i..].starts_with(word)
        && (i == 0 || {
            let before = code.as_bytes()[i - 1];
            !(before.is_ascii_alphanumeric() || before == b'_' || before == b':')
        })
}

/// A path starting at the beginning of `code`, with one `{…}` group of a `use` (nested groups
/// flattened): its text as written, and how many bytes it took.
fn path_at(code: &str) -> (String, usize) {
    let mut end = 0;
    let mut depth = 0;
    for (at, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if depth > 0 && (c.is_alphanumeric() || "_:, *\n\t".contains(c)) => {}
            c if c.is_alphanumeric() || c == '_' || c == ':' => {}
            _ => {
                end = at;
                break;
            }
        }
        end = at + c.len_utf8();
        if depth == 0 && c == '}' {
            break;
        }
    }
    (code[..end].to_string(), end)
}

/// `a::b::{c, d::e}` → [a, b, c], [a, b, d, e]; `a::b` → [a, b].
fn expand(text: &str) -> Vec<ModPath> {
    let split = |s: &str| -> ModPath {
        s.split("::")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    };
    match text.find('{') {
        None => vec![split(text)],
        Some(open) => {
            let prefix = split(&text[..open]);
            let inner = text[open + 1..].trim_end_matches('}');
            inner
                .split([',', '{', '}'])
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| {
                    let mut path = prefix.clone();
                    path.extend(split(item));
                    path
                })
                .collect()
        }
    }
}

/// Name → the child module it is re-exported from, for each module with `pub use child::…`.
fn reexports(sources: &[Source]) -> BTreeMap<ModPath, BTreeMap<String, String>> {
    let mut map: BTreeMap<ModPath, BTreeMap<String, String>> = BTreeMap::new();
    for source in sources {
        for statement in source.code.split(';') {
            let statement = statement.trim();
            let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|p| statement.rsplit_once(p).map(|(_, r)| r))
            else {
                continue;
            };
            for path in expand(rest) {
                if path.len() >= 2 && path[0] != "crate" && path[0] != "super" {
                    let name = path
                        .last()
                        .map(|n| n.rsplit(" as ").next().unwrap_or(n).trim().to_owned())
                        .unwrap_or_default();
                    map.entry(source.module.clone())
                        .or_default()
                        .insert(name, path[0].clone());
                }
            }
        }
    }
    map
}

/// Edges between files: (from module, to module).
fn file_edges(sources: &[Source]) -> BTreeSet<(ModPath, ModPath)> {
    let modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    let reexported = reexports(sources);
    let mut edges = BTreeSet::new();
    for source in sources {
        for path in named_paths(source) {
            // The deepest module of the crate the path names.
            let mut target: ModPath = Vec::new();
            for segment in &path {
                let mut deeper = target.clone();
                deeper.push(segment.clone());
                if modules.contains(&deeper) {
                    target = deeper;
                } else {
                    break;
                }
            }
            // An item a module re-exports from one of its children is the child's.
            if let Some(item) = path.get(target.len())
                && let Some(child) = reexported.get(&target).and_then(|m| m.get(item))
            {
                target.push(child.clone());
            }
            let is_ancestor = source.module.starts_with(&target);
            if target.is_empty() || is_ancestor {
                continue;
            }
            edges.insert((source.module.clone(), target));
        }
    }
    edges
}

/// The groups of nodes that reach each other (strongly connected components) of more than one
/// node. The graphs are small: reachability from every node is cheap enough.
fn cycles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let reachable = |from: &String| -> BTreeSet<&String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(v) = todo.pop() {
            for (_, w) in edges.iter().filter(|(a, _)| a == v) {
                if seen.insert(w) {
                    todo.push(w);
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<&String>> =
        nodes.iter().map(|v| (*v, reachable(v))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for v in &nodes {
        let mut component: Vec<String> = nodes
            .iter()
            .filter(|w| reach[*v].contains(*w) && reach[*w].contains(*v))
            .map(|w| (*w).clone())
            .collect();
        component.sort();
        if component.len() > 1 && !found.contains(&component) {
            found.push(component);
        }
    }
    found
}

fn named(path: &[String]) -> String {
    path.join("::")
}

#[test]
fn no_module_cycle_between_files_or_top_level_modules() {
    let sources = sources();
    assert!(sources.len() > 50, "the sources were found");
    let edges = file_edges(&sources);
    let between_files: BTreeSet<(String, String)> =
        edges.iter().map(|(a, b)| (named(a), named(b))).collect();
    let top_level: BTreeSet<(String, String)> = edges
        .iter()
        .filter(|(a, b)| a[0] != b[0])
        .map(|(a, b)| (a[0].clone(), b[0].clone()))
        .collect();
    for (kind, graph) in [("files", &between_files), ("modules", &top_level)] {
        let found = cycles(graph);
        let described: Vec<String> = found
            .iter()
            .map(|component| {
                let inner: Vec<String> = graph
                    .iter()
                    .filter(|(a, b)| component.contains(a) && component.contains(b))
                    .map(|(a, b)| format!("{a} -> {b}"))
                    .collect();
                format!("{component:?}: {}", inner.join(", "))
            })
            .collect();
        assert!(
            found.is_empty(),
            "import cycles between {kind}:\n{}",
            described.join("\n")
        );
    }
}

#[test]
fn top_level_imports_go_to_the_same_or_a_lower_layer() {
    let layer_of = |module: &str| LAYERS.iter().position(|layer| layer.contains(&module));
    let sources = sources();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (from, to) in file_edges(&sources) {
        let (Some(a), Some(b)) = (layer_of(&from[0]), layer_of(&to[0])) else {
            unplaced.insert(if layer_of(&from[0]).is_none() {
                from[0].clone()
            } else {
                to[0].clone()
            });
            continue;
        };
        if b > a {
            upward.push(format!("{} -> {}", named(&from), named(&to)));
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules in no layer (add them to LAYERS and docs/architecture.md): {unplaced:?}"
    );
    assert!(upward.is_empty(), "imports running back up: {upward:#?}");
}

/// The checker itself: a cycle through a re-export and one through an inline test module's
/// `super` are found; a child using its parent is not an edge.
#[test]
fn the_checker_resolves_reexports_super_and_skips_comments() {
    let source = |module: &[&str], code: &str| Source {
        module: module.iter().map(|s| s.to_string()).collect(),
        code: blank_comments_and_strings(code),
    };
    let sources = vec![
        source(&[], "pub mod a; pub mod b;"),
        source(
            &["a"],
            "mod inner; pub use inner::Thing; // crate::b::Comment\nconst S: &str = \"crate::b::X\";",
        ),
        source(
            &["a", "inner"],
            "use super::super::b::Other; pub struct Thing;",
        ),
        source(
            &["b"],
            "pub struct Other; mod inline { use super::*; fn t() { let _ = crate::a::Thing; } }\n\
             #[cfg(test)]\nmod tests { use crate::a::inner::Thing; }",
        ),
    ];
    let edges: BTreeSet<(String, String)> = file_edges(&sources)
        .iter()
        .map(|(a, b)| (named(a), named(b)))
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("a::inner".to_string(), "b".to_string()),
        ("b".to_string(), "a::inner".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(edges, expected);
    assert_eq!(
        cycles(&edges),
        vec![vec!["a::inner".to_string(), "b".to_string()]]
    );
}
