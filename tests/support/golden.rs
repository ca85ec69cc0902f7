//! The golden kubelet hashes in `tests/golden/` (or `$INPLACED_GOLDEN_DIR`): made by the real
//! Go code of each kubelet release, never by this project's code.

use serde_json::Value;

use node_sandbox::golden::golden_dir;

/// Every row of `kubelet-<release>.jsonl`. Panics when the file is missing: a golden test
/// that cannot find its data must fail, not pass.
pub fn rows(release: &str) -> Vec<Value> {
    let path = golden_dir().join(format!("kubelet-{release}.jsonl"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("golden file {}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).expect("golden row"))
        .collect()
}

/// The row tagged `tag` in `kubelet-<release>.jsonl`.
pub fn row(release: &str, tag: &str) -> Value {
    rows(release)
        .into_iter()
        .find(|r| r["tag"] == tag)
        .unwrap_or_else(|| panic!("no golden row {tag} for {release}"))
}
