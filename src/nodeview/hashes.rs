//! Per container: which kubelet releases wrote its stored hash for the current spec, whether
//! the node's kubelet considers it current, and whether another release would restart it.
//! Detection hashes the spec for every release, so results are cached per container ID and
//! spec until either changes.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{ContainerView, NodeView, RuntimeState};
use crate::hashing::{self, KubeletVersion, StoredHashes};
use crate::kube::CachedPod;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashCheck {
    /// Kubelet releases whose hash of the current spec equals the stored hash, as ranges
    /// ("1.16–1.26"); empty when none does (the spec changed since the container started).
    pub written_by: Vec<String>,
    /// Whether the node's kubelet (its reported version) would leave the container running:
    /// `None` when that version is unknown or the check was not possible.
    pub current: Option<bool>,
    /// Why a check was not possible, when it was not.
    pub note: Option<String>,
}

/// Releases that match as ranges, or why the spec cannot be hashed.
type Detection = Result<Vec<String>, HashCheckError>;

/// Why the stored hash could not be checked against the spec. Kept in the cache (hence
/// `Clone`) and shown as [`HashCheck::note`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum HashCheckError {
    #[error("the spec cannot be hashed: {0}")]
    Unhashable(#[source] hashing::HashError),
}

/// Remembers results between refreshes, per container ID: recomputed only when the pod object
/// (a new `Arc` from the watch), the stored hashes or the node's kubelet version changed.
#[derive(Default)]
pub struct HashCache {
    entries: HashMap<String, CacheEntry>,
}

struct CacheEntry {
    /// The API's pod the result was computed from (compared by identity).
    pod: Arc<CachedPod>,
    stored: (Option<String>, Option<String>),
    kubelet: Option<KubeletVersion>,
    detected: Detection,
    result: HashCheck,
}

const STATIC_POD_NOTE: &str =
    "static pod: kubelet hashed the manifest on disk, not the mirror pod's spec; cannot check";

/// Fills `hash_check` for every container that has a spec and a runtime container.
pub fn annotate(view: &mut NodeView, cache: &mut HashCache) {
    let kubelet = view
        .kubelet_version
        .as_deref()
        .and_then(|v| KubeletVersion::parse(v).ok());
    let mut live = std::collections::HashSet::new();
    for pod in &mut view.pods {
        let api_pod = pod.api_pod.clone();
        for container in &mut pod.containers {
            let Some(runtime) = container.runtime.as_ref() else {
                continue;
            };
            live.insert(runtime.id.clone());
            container.hash_check = Some(match (&api_pod, pod.static_pod) {
                (_, true) => HashCheck {
                    note: Some(STATIC_POD_NOTE.into()),
                    ..Default::default()
                },
                (None, false) => HashCheck::default(),
                (Some(api_pod), false) => check(container, api_pod, kubelet.as_ref(), cache),
            });
        }
    }
    cache.entries.retain(|id, _| live.contains(id));
}

fn check(
    container: &ContainerView,
    api_pod: &Arc<CachedPod>,
    kubelet: Option<&KubeletVersion>,
    cache: &mut HashCache,
) -> HashCheck {
    let (Some(spec), Some(runtime)) =
        (container.spec_in(Some(api_pod)), container.runtime.as_ref())
    else {
        return HashCheck::default();
    };
    if runtime.stored_hash.is_none() {
        return HashCheck {
            note: Some(
                "no io.kubernetes.container.hash annotation: not created by a kubelet".into(),
            ),
            ..Default::default()
        };
    }
    let stored_text = (
        runtime.stored_hash.clone(),
        runtime.stored_hash_without_resources.clone(),
    );
    if let Some(entry) = cache.entries.get(&runtime.id)
        && Arc::ptr_eq(&entry.pod, api_pod)
        && entry.stored == stored_text
        && entry.kubelet.as_ref() == kubelet
    {
        return entry.result.clone();
    }
    let spec_json = spec.json().as_bytes();
    let stored = stored_hashes(container);
    // A new pod object often carries the same spec (a status change): keep the detection. The
    // spec it was computed for is read from the pod object it came from (no JSON kept).
    let detected = match cache.entries.remove(&runtime.id) {
        Some(entry)
            if container.spec_in(Some(&entry.pod)) == Some(spec) && entry.stored == stored_text =>
        {
            entry.detected
        }
        _ => hashing::detect_writers(&stored, spec_json)
            .map(|matches| {
                let minors: Vec<u32> = matches
                    .iter()
                    .filter(|m| m.hash_matches)
                    .map(|m| m.minor)
                    .collect();
                ranges(&minors)
            })
            .map_err(HashCheckError::Unhashable),
    };
    let (written_by, note) = match &detected {
        Ok(ranges) => (ranges.clone(), None),
        Err(err) => (Vec::new(), Some(err.to_string())),
    };
    let current = match kubelet {
        Some(version) if note.is_none() => hashing::would_restart(&stored, spec_json, version)
            .ok()
            .map(|restart| !restart),
        _ => None,
    };
    let result = HashCheck {
        written_by,
        current,
        note,
    };
    cache.entries.insert(
        runtime.id.clone(),
        CacheEntry {
            pod: api_pod.clone(),
            stored: stored_text,
            kubelet: kubelet.cloned(),
            detected,
            result: result.clone(),
        },
    );
    result
}

fn stored_hashes(container: &ContainerView) -> StoredHashes {
    let runtime = container.runtime.as_ref();
    StoredHashes::from_annotations(
        runtime.and_then(|r| r.stored_hash.as_deref()),
        runtime.and_then(|r| r.stored_hash_without_resources.as_deref()),
    )
}

/// `[16,17,18,27,28]` → `["1.16–1.18", "1.27–1.28"]`.
fn ranges(minors: &[u32]) -> Vec<String> {
    // A release can match under both Go escaping flavours: count it once.
    let mut minors = minors.to_vec();
    minors.sort_unstable();
    minors.dedup();
    let mut out = Vec::new();
    let mut iter = minors.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            format!("1.{start}")
        } else {
            format!("1.{start}–1.{end}")
        });
    }
    out
}

/// What a kubelet upgrade to one release would do to each running container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpgradeReport {
    pub to: String,
    pub node_kubelet_version: Option<String>,
    pub restart: usize,
    pub keep: usize,
    pub unknown: usize,
    /// Containers not running: kubelet starts them with the target's hash, nothing to restart.
    #[serde(default)]
    pub not_running: usize,
    pub containers: Vec<UpgradeVerdict>,
    /// The kubelet's pod-resource checkpoint files and what the target release does with them
    /// (filled by the caller, which can read the kubelet's root directory).
    #[serde(default)]
    pub checkpoints: Vec<crate::checkpoints::Finding>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpgradeVerdict {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub container_id: String,
    pub stored_hash: Option<String>,
    /// The hash the target release computes for the spec.
    pub target_hash: Option<String>,
    /// "restart", "keep", "unknown", or "start" for a container that is not running.
    pub verdict: String,
    pub note: Option<String>,
}

/// For every running container: would kubelet `to` restart it because its stored hash no longer
/// matches (the 1.30 → 1.31 surprise, kubernetes issue 129385)?
pub fn upgrade_check(view: &NodeView, to: &KubeletVersion) -> UpgradeReport {
    let mut containers = Vec::new();
    for pod in &view.pods {
        for container in &pod.containers {
            let Some(runtime) = container.runtime.as_ref() else {
                continue;
            };
            let running = runtime.state == RuntimeState::Running;
            let mut verdict = UpgradeVerdict {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.name.clone(),
                container_id: runtime.container_id.clone(),
                stored_hash: runtime.stored_hash.clone(),
                target_hash: None,
                verdict: "unknown".into(),
                note: None,
            };
            match (pod.static_pod, pod.spec_of(container)) {
                _ if runtime.state == RuntimeState::Unknown => {
                    verdict.note = Some("the runtime does not know its state".into());
                }
                _ if !running => {
                    verdict.verdict = "start".into();
                    verdict.note = Some(format!(
                        "not running ({}): nothing to restart; a container kubelet starts again gets the new release's hash",
                        format!("{:?}", runtime.state).to_lowercase()
                    ));
                }
                (true, _) => verdict.note = Some(STATIC_POD_NOTE.into()),
                (false, None) => {
                    verdict.note = Some(
                        "no spec (ephemeral container): kubelet never restarts it for its hash"
                            .into(),
                    )
                }
                (false, Some(spec)) => {
                    let json = spec.json().as_bytes();
                    let stored = stored_hashes(container);
                    if let Ok(h) = hashing::hash_container(json, to, &Default::default()) {
                        verdict.target_hash = Some(hashing::format_hash(h.hash));
                    }
                    match hashing::would_restart(&stored, json, to) {
                        Ok(true) => verdict.verdict = "restart".into(),
                        Ok(false) => verdict.verdict = "keep".into(),
                        Err(err) => verdict.note = Some(err.to_string()),
                    }
                }
            }
            containers.push(verdict);
        }
    }
    let count = |v: &str| containers.iter().filter(|c| c.verdict == v).count();
    UpgradeReport {
        to: to.to_string(),
        node_kubelet_version: view.kubelet_version.clone(),
        restart: count("restart"),
        keep: count("keep"),
        unknown: count("unknown"),
        not_running: count("start"),
        containers,
        checkpoints: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::labels;
    use crate::cri::proto::{Container, ContainerState};
    use crate::nodeview::{RuntimeSnapshot, join};

    fn pod(image: &str, phase: &str) -> Arc<CachedPod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "spec": {"containers": [{"name": "app", "image": image}]},
                "status": {"phase": phase},
            }))
            .expect("pod"),
        )
    }

    /// A runtime container whose stored hash is what kubelet 1.26 wrote for `image`.
    fn snapshot(image: &str) -> RuntimeSnapshot {
        let spec = serde_json::json!({"name": "app", "image": image}).to_string();
        let version = KubeletVersion::parse("1.26").expect("version");
        let written =
            hashing::hash_container(spec.as_bytes(), &version, &Default::default()).expect("hash");
        let container = Container {
            id: "c1".into(),
            state: ContainerState::ContainerRunning as i32,
            labels: [
                (labels::POD_UID.to_owned(), "u1".to_owned()),
                (labels::CONTAINER_NAME.to_owned(), "app".to_owned()),
            ]
            .into(),
            annotations: [(
                labels::CONTAINER_HASH.to_owned(),
                hashing::format_hash(written.hash),
            )]
            .into(),
            ..Default::default()
        };
        RuntimeSnapshot {
            containers: vec![Arc::new(container)],
            ..Default::default()
        }
    }

    fn written_by(
        pod: &Arc<CachedPod>,
        snapshot: &RuntimeSnapshot,
        cache: &mut HashCache,
    ) -> Vec<String> {
        let mut view = join("node", std::slice::from_ref(pod), snapshot);
        annotate(&mut view, cache);
        view.pods[0].containers[0]
            .hash_check
            .clone()
            .expect("checked")
            .written_by
    }

    #[test]
    fn a_new_pod_object_is_checked_against_its_own_spec() {
        let runtime = snapshot("busybox:1");
        let mut cache = HashCache::default();
        let first = written_by(&pod("busybox:1", "Pending"), &runtime, &mut cache);
        assert!(
            !first.is_empty(),
            "kubelet 1.26 wrote the stored hash: {first:?}"
        );
        // A status change: a new object with the same spec keeps its verdict.
        let same = written_by(&pod("busybox:1", "Running"), &runtime, &mut cache);
        assert_eq!(same, first);
        // A spec change: no release's hash of the new spec is the stored one.
        let changed = written_by(&pod("busybox:2", "Running"), &runtime, &mut cache);
        assert!(changed.is_empty(), "{changed:?}");
    }

    /// A container that is not running has nothing to restart: kubelet starts it with the new
    /// release's hash.
    #[test]
    fn a_container_that_is_not_running_is_listed_as_started_not_restarted() {
        let mut runtime = snapshot("busybox:1");
        let mut exited = (*runtime.containers[0]).clone();
        exited.state = ContainerState::ContainerExited as i32;
        runtime.containers = vec![Arc::new(exited)];
        let view = join("node", &[pod("busybox:1", "Running")], &runtime);
        let to = KubeletVersion::parse("1.31").expect("version");
        let report = upgrade_check(&view, &to);
        assert_eq!((report.restart, report.keep, report.not_running), (0, 0, 1));
        assert_eq!(report.containers[0].verdict, "start");
        assert!(
            report.containers[0]
                .note
                .as_deref()
                .is_some_and(|n| n.contains("not running (exited)")),
            "{:?}",
            report.containers[0]
        );
    }

    #[test]
    fn minors_fold_into_ranges() {
        assert_eq!(
            ranges(&[16, 17, 18, 27, 28, 31]),
            vec!["1.16–1.18", "1.27–1.28", "1.31"]
        );
        assert!(ranges(&[]).is_empty());
        assert_eq!(ranges(&[26, 27, 27, 28, 28, 29, 29, 30]), vec!["1.26–1.30"]);
    }
}
