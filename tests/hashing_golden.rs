//! Every line of every golden file in `tests/golden/` (or `$INPLACED_GOLDEN_DIR`): the hash,
//! the without-resources hash (1.27–1.30), the exact hashed JSON, and rejections.
//!
//! Golden values come from the real Go code of each kubelet release (see the golden README);
//! nothing here is derived from this crate's own output.

use std::path::PathBuf;

use inplaced::hashing::{
    GoJsonEscaping, HashOptions, HashedPayload, KubeletVersion, format_hash, hash_container,
    hashed_json,
};
use inplaced::quantity::{Quantity, go_trim_space};

fn golden_dir() -> PathBuf {
    let dir = node_sandbox::golden::golden_dir();
    assert!(
        dir.join("README.md").is_file(),
        "golden directory {} not found: set INPLACED_GOLDEN_DIR (refusing to pass without golden data)",
        dir.display()
    );
    dir
}

struct GoldenFile {
    name: String,
    version: KubeletVersion,
    escaping: GoJsonEscaping,
    lines: Vec<serde_json::Value>,
}

fn golden_files() -> Vec<GoldenFile> {
    let dir = golden_dir();
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("read golden dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let stem = name
            .trim_start_matches("kubelet-")
            .trim_end_matches(".jsonl");
        // `kubelet-1.26.15-go1.21.13.jsonl` was built with Go 1.21 (legacy escaping); every other
        // file with a modern Go (see the golden README).
        let (ver, escaping) = match stem.split_once("-go") {
            Some((v, _)) => (v, GoJsonEscaping::Legacy),
            None => (stem, GoJsonEscaping::Modern),
        };
        let version = KubeletVersion::parse(ver).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = std::fs::read_to_string(&path).expect("read golden file");
        let lines = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("golden line is JSON"))
            .collect();
        files.push(GoldenFile {
            name,
            version,
            escaping,
            lines,
        });
    }
    assert!(
        files.len() >= 13,
        "expected 13 golden files, found {}",
        files.len()
    );
    files
}

fn opt_str(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key).and_then(|x| x.as_str()).map(str::to_owned)
}

#[test]
fn every_golden_line() {
    let mut report = Vec::new();
    let mut total = 0;
    for f in golden_files() {
        let opts = HashOptions::with_escaping(f.escaping);
        let mut failed = Vec::new();
        for line in &f.lines {
            total += 1;
            let tag = opt_str(line, "tag").unwrap_or_default();
            let input = opt_str(line, "input_text").expect("input_text");
            let want_hash = opt_str(line, "hash");
            let want_wo = opt_str(line, "hash_without_resources");
            let want_json = opt_str(line, "hashed_json");
            let got = hash_container(input.as_bytes(), &f.version, &opts);
            match (&want_hash, &got) {
                (None, Err(_)) => continue,
                (None, Ok(h)) => {
                    failed.push(format!(
                        "{tag}: accepted (hash {}) but Go rejects it",
                        format_hash(h.hash)
                    ));
                    continue;
                }
                (Some(_), Err(e)) => {
                    failed.push(format!("{tag}: rejected ({e}) but Go accepts it"));
                    continue;
                }
                (Some(w), Ok(h)) => {
                    if &format_hash(h.hash) != w {
                        failed.push(format!("{tag}: hash {} != {w}", format_hash(h.hash)));
                    }
                    if h.hash_without_resources.map(format_hash) != want_wo {
                        failed.push(format!(
                            "{tag}: without-resources {:?} != {want_wo:?}",
                            h.hash_without_resources.map(format_hash)
                        ));
                    }
                }
            }
            let explained = hashed_json(input.as_bytes(), &f.version, &opts, HashedPayload::Hash)
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            if explained.as_ref().ok() != want_json.as_ref() {
                failed.push(format!("{tag}: hashed_json differs: got {explained:?}"));
            }
        }
        report.push(format!(
            "{}: {} lines, {} mismatches {:?}",
            f.name,
            f.lines.len(),
            failed.len(),
            failed
        ));
    }
    let bad: Vec<_> = report
        .iter()
        .filter(|r| !r.contains(" 0 mismatches"))
        .collect();
    assert!(
        bad.is_empty(),
        "golden mismatches:\n{}",
        bad.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(total >= 13 * 553, "only {total} golden lines checked");
    eprintln!("{}", report.join("\n"));
}

/// The two 1.26.15 builds differ only in `\b`/`\f` escaping: each file must match only with
/// its own flavour on `str-escapes-raw`.
#[test]
fn escaping_flavours_for_1_26() {
    let files = golden_files();
    let get = |name: &str| files.iter().find(|f| f.name == name).expect(name);
    let modern = get("kubelet-1.26.15.jsonl");
    let legacy = get("kubelet-1.26.15-go1.21.13.jsonl");
    let find = |f: &GoldenFile| {
        f.lines
            .iter()
            .find(|l| opt_str(l, "tag").as_deref() == Some("str-escapes-raw"))
            .cloned()
            .expect("str-escapes-raw line")
    };
    let (m, l) = (find(modern), find(legacy));
    assert_ne!(opt_str(&m, "hash"), opt_str(&l, "hash"));
    let input = opt_str(&m, "input_text").unwrap();
    let v = KubeletVersion::parse("1.26.15").unwrap();
    // The release default for 1.26 is the legacy flavour (its kubelets were built with Go 1.21).
    let default = hash_container(input.as_bytes(), &v, &HashOptions::default()).unwrap();
    assert_eq!(Some(format_hash(default.hash)), opt_str(&l, "hash"));
    let forced = hash_container(
        input.as_bytes(),
        &v,
        &HashOptions::with_escaping(GoJsonEscaping::Modern),
    )
    .unwrap();
    assert_eq!(Some(format_hash(forced.hash)), opt_str(&m, "hash"));
}

/// `quantity-canonical.txt`: every line, exactly as Go's json.Marshal prints it.
#[test]
fn quantity_canonical_file() {
    let text = std::fs::read_to_string(golden_dir().join("quantity-canonical.txt"))
        .expect("quantity file");
    let mut checked = 0;
    let mut failed = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (lhs, want) = line.rsplit_once(" -> ").expect("`input -> output` line");
        let want: String = serde_json::from_str(want.trim()).expect("output is a JSON string");
        // The input is the last whitespace-separated token: a JSON string or number literal.
        let lhs = lhs.trim_end();
        let input = if let Some(body) = lhs.strip_suffix('"') {
            let start = body.rfind('"').expect("opening quote");
            &lhs[start..]
        } else {
            lhs.rsplit(' ').next().unwrap()
        };
        // As Quantity.UnmarshalJSON sees it: raw text, quotes stripped, whitespace trimmed.
        let raw = input
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(input);
        let got = Quantity::parse(go_trim_space(raw.as_bytes())).and_then(|q| q.to_json_text());
        checked += 1;
        if got.as_deref() != Ok(want.as_str()) {
            failed.push(format!("{line}  => got {got:?}"));
        }
    }
    assert!(checked >= 90, "only {checked} quantity lines");
    assert!(
        failed.is_empty(),
        "{} quantity mismatches:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
