//! The golden kubelet-hash files (`tests/golden/kubelet-<release>.jsonl`): inputs that
//! end-to-end pods are seeded from, and the hash the real kubelet of that release stored.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Deserialize;

/// One line of a golden file.
#[derive(Debug, Clone, Deserialize)]
pub struct GoldenCase {
    pub tag: String,
    /// The exact v1.Container JSON that was hashed.
    pub input_text: String,
    /// What that kubelet wrote into `io.kubernetes.container.hash` (None: Go rejected it).
    pub hash: Option<String>,
    pub hash_without_resources: Option<String>,
}

/// Where the golden files are: `$INPLACED_GOLDEN_DIR`, else the repository's `tests/golden`.
/// Every test, bench and tool of the workspace finds them through this one function.
pub fn golden_dir() -> PathBuf {
    match std::env::var_os("INPLACED_GOLDEN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../golden")),
    }
}

/// All cases of one release file, e.g. `load("1.26.15")`.
pub fn load(release: &str) -> anyhow::Result<Vec<GoldenCase>> {
    let path = golden_dir().join(format!("kubelet-{release}.jsonl"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

/// The case with this tag in a release file.
pub fn case(release: &str, tag: &str) -> anyhow::Result<GoldenCase> {
    load(release)?
        .into_iter()
        .find(|c| c.tag == tag)
        .with_context(|| format!("no golden case {tag:?} for kubelet {release}"))
}
