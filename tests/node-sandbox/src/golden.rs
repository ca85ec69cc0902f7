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

/// The hashes a real kubelet stored for one container: `io.kubernetes.container.hash` and, on
/// 1.27–1.30, `hashWithoutResources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredByKubelet {
    pub hash: u64,
    pub without_resources: Option<u64>,
}

/// One release's `real-*` containers (as a real API server returned them) and their hashes.
type RealContainers = Vec<(serde_json::Value, StoredByKubelet)>;

/// What the real kubelet of minor release `minor` stored for `container`, when the golden files
/// hold this very container (compared as JSON values: key order and spacing do not matter).
/// Only the `real-*` inputs are looked at: they are what end-to-end pods are seeded from, and
/// none of them has duplicate keys, where Go's merging and a JSON value would differ.
pub fn stored_by_kubelet(minor: u32, container: &serde_json::Value) -> Option<StoredByKubelet> {
    static LOADED: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<u32, std::sync::Arc<RealContainers>>>,
    > = std::sync::OnceLock::new();
    let loaded = LOADED.get_or_init(Default::default);
    let real = {
        let mut loaded = loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded
            .entry(minor)
            .or_insert_with(|| std::sync::Arc::new(real_containers(minor)))
            .clone()
    };
    real.iter()
        .find(|(input, _)| input == container)
        .map(|(_, stored)| *stored)
}

/// The `real-*` rows of the release file of `minor` (the one built with the release's own Go
/// where there are two); none when there is no file for it.
fn real_containers(minor: u32) -> RealContainers {
    let prefix = format!("kubelet-1.{minor}.");
    let release = std::fs::read_dir(golden_dir())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix) && !name.contains("-go"))
        .find_map(|name| {
            Some(
                name.strip_prefix("kubelet-")?
                    .strip_suffix(".jsonl")?
                    .to_owned(),
            )
        });
    let Some(cases) = release.and_then(|r| load(&r).ok()) else {
        return Vec::new();
    };
    let hex = |h: &Option<String>| h.as_deref().and_then(|h| u64::from_str_radix(h, 16).ok());
    cases
        .iter()
        .filter(|c| c.tag.starts_with("real-"))
        .filter_map(|c| {
            let input = serde_json::from_str(&c.input_text).ok()?;
            let stored = StoredByKubelet {
                hash: hex(&c.hash)?,
                without_resources: hex(&c.hash_without_resources),
            };
            Some((input, stored))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `real-*` container of a release is found with the hash that release's kubelet
    /// stored; a container changed in any field is not.
    #[test]
    fn real_containers_are_found_with_what_the_kubelet_stored() {
        let cases = load("1.30.7").expect("golden file");
        let real: Vec<&GoldenCase> = cases
            .iter()
            .filter(|c| c.tag.starts_with("real-"))
            .collect();
        assert!(real.len() >= 5, "{} real containers", real.len());
        for case in real {
            let mut container: serde_json::Value =
                serde_json::from_str(&case.input_text).expect("json");
            let stored = stored_by_kubelet(30, &container).expect(&case.tag);
            assert_eq!(
                format!("{:x}", stored.hash),
                *case.hash.as_ref().expect("hash")
            );
            assert_eq!(
                stored.without_resources.map(|h| format!("{h:x}")),
                case.hash_without_resources
            );
            container["image"] = serde_json::Value::String("changed:1".into());
            assert_eq!(stored_by_kubelet(30, &container), None, "{}", case.tag);
        }
        assert_eq!(
            stored_by_kubelet(99, &serde_json::json!({"name": "a"})),
            None
        );
    }
}
