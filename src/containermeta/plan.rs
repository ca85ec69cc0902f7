//! Pure decisions of the container-meta controller: which pods it serves, the desired
//! `apps.kruise.io/runtime-containers-meta` annotation, and whether a running container's
//! env-from-metadata values still match what the pod's labels and annotations give.
//! No I/O here: everything the controller learned from the API and the runtime is an input.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;
use serde::{Deserialize, Serialize};

use crate::hashing::{self, SIDECARSET_EXCLUDED_ENVS};
use crate::kube::{CachedContainer, CachedPod};
use crate::restart::KillIntent;

/// The pod annotation kruise-manager reads.
pub const META_ANNOTATION: &str = "apps.kruise.io/runtime-containers-meta";
/// inplaced's own opt-in (value "true"): maintain the annotation and restart on env-from-metadata
/// changes for a pod that kruise would not serve (no OpenKruise needed).
pub const OPT_IN_ANNOTATION: &str = "inplaced.io/runtime-containers-meta";
/// Pods injected by a SidecarSet carry this; kruise serves them whatever their owner.
pub(crate) const SIDECARSET_HASH_ANNOTATION: &str = "kruise.io/sidecarset-hash";
/// kruise's pod condition: False while an in-place update is under way.
pub(crate) const IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";
const KRUISE_GROUP: &str = "apps.kruise.io";

/// `RuntimeContainerMetaSet` as kruise v1.8 serializes it (field order and names matter: the
/// annotation is compared byte for byte to decide whether to patch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MetaSet {
    /// Go marshals a nil slice as `null`.
    pub containers: Option<Vec<ContainerMeta>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContainerMeta {
    pub name: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "restartCount")]
    pub restart_count: i32,
    pub hashes: Hashes,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hashes {
    #[serde(rename = "plainHash", default)]
    pub plain_hash: u64,
    /// v1.8 writes it always (no omitempty); v1.9 managers ignore it.
    #[serde(rename = "plainHashWithoutResources", default)]
    pub plain_hash_without_resources: u64,
    #[serde(
        rename = "extractedEnvFromMetadataHash",
        default,
        skip_serializing_if = "is_zero"
    )]
    pub extracted_env_from_metadata_hash: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl MetaSet {
    /// The annotation value, compact like Go's `json.Marshal`.
    pub(crate) fn to_annotation(&self) -> String {
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a pod is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Eligibility {
    /// Controller owner in `apps.kruise.io` or a SidecarSet pod: what kruise-daemon serves.
    Kruise,
    /// Carries [`OPT_IN_ANNOTATION`] = "true".
    OptIn,
}

pub(crate) fn eligibility(pod: &CachedPod) -> Option<Eligibility> {
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref();
    let kruise_owner = meta.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.api_version
                .split_once('/')
                .is_some_and(|(group, _)| group == KRUISE_GROUP)
    });
    if kruise_owner || annotations.is_some_and(|a| a.contains_key(SIDECARSET_HASH_ANNOTATION)) {
        return Some(Eligibility::Kruise);
    }
    if annotations
        .and_then(|a| a.get(OPT_IN_ANNOTATION))
        .is_some_and(|v| v == "true")
    {
        return Some(Eligibility::OptIn);
    }
    None
}

/// Env-from-metadata restarts are allowed: an in-place update is under way (kruise sets
/// `InPlaceUpdateReady` False) or the pod opted in.
pub(crate) fn restarts_enabled(pod: &CachedPod, eligibility: Eligibility) -> bool {
    match eligibility {
        Eligibility::OptIn => true,
        Eligibility::Kruise => {
            pod.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == IN_PLACE_UPDATE_READY && c.status == "False")
                })
                || pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(OPT_IN_ANNOTATION))
                    .is_some_and(|v| v == "true")
        }
    }
}

/// One env var whose value comes from a pod label or annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetadataRef {
    pub env: String,
    pub source: MetadataSource,
    pub key: String,
    /// A later entry of `env` defines the same name: kubelet keeps the last definition, so the
    /// container never gets this reference's value. kruise still counts it in its hash.
    pub shadowed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetadataSource {
    Labels,
    Annotations,
}

/// The env vars kruise counts: empty `value`, `fieldRef` to `metadata.labels['k']` or
/// `metadata.annotations['k']`, not the SidecarSet version vars.
/// Fails where the spec's `env` does not decode.
pub(crate) fn metadata_refs(
    container: &CachedContainer,
) -> Result<Vec<MetadataRef>, serde_json::Error> {
    #[derive(Deserialize)]
    struct EnvOnly {
        #[serde(default)]
        env: Option<Vec<EnvVar>>,
    }
    let spec: EnvOnly = container.decode()?;
    let envs = spec.env.unwrap_or_default();
    let mut refs = Vec::new();
    for (index, env) in envs.iter().enumerate() {
        if env.value.as_deref().is_some_and(|v| !v.is_empty())
            || SIDECARSET_EXCLUDED_ENVS.contains(&env.name.as_str())
        {
            continue;
        }
        let Some(path) = env
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str())
        else {
            continue;
        };
        let Some((path, key)) = path
            .strip_suffix("']")
            .and_then(|p| p.split_once("['"))
            .filter(|(p, _)| !p.is_empty())
        else {
            continue;
        };
        let source = match path {
            "metadata.labels" => MetadataSource::Labels,
            "metadata.annotations" => MetadataSource::Annotations,
            _ => continue,
        };
        refs.push(MetadataRef {
            env: env.name.clone(),
            source,
            key: key.to_owned(),
            shadowed: envs[index + 1..].iter().any(|later| later.name == env.name),
        });
    }
    Ok(refs)
}

/// What the pod's labels and annotations give each env var now; a shadowed reference gives the
/// container nothing, so nothing is expected of it.
pub(crate) fn expected_values(pod: &CachedPod, refs: &[MetadataRef]) -> BTreeMap<String, String> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    refs.iter()
        .filter(|r| !r.shadowed)
        .map(|r| {
            let map = match r.source {
                MetadataSource::Labels => labels,
                MetadataSource::Annotations => annotations,
            };
            (r.env.clone(), map.get(&r.key).cloned().unwrap_or_default())
        })
        .collect()
}

/// The env vars (name → value) whose started-with value differs from the expected one. A var
/// missing from the container counts as empty (kubelet sets an absent key to "").
pub(crate) fn env_differences(
    expected: &BTreeMap<String, String>,
    started: &BTreeMap<String, String>,
) -> Vec<String> {
    expected
        .iter()
        .filter(|(name, value)| started.get(*name).map_or("", String::as_str) != value.as_str())
        .map(|(name, _)| name.clone())
        .collect()
}

/// `KEY=value` lines (OCI `process.env`, or the output of `env`) as a map; the last one wins,
/// as for a process's environment.
pub fn parse_env<'a>(lines: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    lines
        .into_iter()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `process.env` of the OCI runtime spec in containerd's verbose `ContainerStatus` info
/// (`info["info"]` is a JSON document with `runtimeSpec`). None when absent or malformed.
pub fn env_from_verbose_info(info: &HashMap<String, String>) -> Option<BTreeMap<String, String>> {
    let doc: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let env = doc.pointer("/runtimeSpec/process/env")?.as_array()?;
    Some(parse_env(env.iter().filter_map(|v| v.as_str())))
}

/// kruise's `GetCurrentHash`: the expected-hash algorithm fed with the values the container was
/// started with. Computed by handing the hasher labels/annotations that resolve each reference
/// to the started-with value of its env var.
pub(crate) fn current_env_hash(
    container: &CachedContainer,
    refs: &[MetadataRef],
    started: &BTreeMap<String, String>,
) -> Option<u64> {
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    for r in refs {
        let value = started.get(&r.env).cloned().unwrap_or_default();
        match r.source {
            MetadataSource::Labels => labels.insert(r.key.clone(), value),
            MetadataSource::Annotations => annotations.insert(r.key.clone(), value),
        };
    }
    hashing::extracted_env_from_metadata_hash(container.json().as_bytes(), &labels, &annotations)
        .ok()
}

/// The hash of no env-from-metadata vars at all (Go `json.Marshal` of a nil slice: `null`).
pub(crate) const NO_ENV_HASH: u64 = 86_995_377;

/// What the controller knows of one runtime container (the newest of its name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RuntimeMeta {
    /// `<runtime>://<id>`.
    pub container_id: String,
    /// `io.kubernetes.container.hash` as stored.
    pub stored_hash: Option<String>,
    pub stored_hash_without_resources: Option<String>,
    /// The extracted-env hash of the started-with values; None while unknown.
    pub env_hash: Option<u64>,
}

/// The annotation kruise-daemon would write, or None when it cannot be decided yet (pod status
/// names a container the runtime facts do not describe: kubelet's status lags a restart).
///
/// Entries follow `status.containerStatuses`; a container needs a spec and a runtime container.
/// An entry of the current annotation is reused as is when its containerID is unchanged.
pub(crate) fn desired_meta(
    pod: &CachedPod,
    runtime: &HashMap<String, RuntimeMeta>,
) -> Option<MetaSet> {
    let current: Option<MetaSet> = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(META_ANNOTATION))
        .and_then(|v| {
            serde_json::from_str(v)
                .inspect_err(|err| {
                    // Rewritten whole below, as kruise-daemon does; said, as it says it.
                    tracing::warn!(namespace = ?pod.metadata.namespace, pod = ?pod.metadata.name,
                        error = %err, "the pod's {META_ANNOTATION} annotation cannot be read; writing it anew");
                })
                .ok()
        });
    let spec = pod.spec.as_ref()?;
    let mut entries = Vec::new();
    for status in pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        if !spec.containers.iter().any(|c| c.name() == status.name) {
            continue;
        }
        let Some(facts) = runtime.get(&status.name) else {
            continue;
        };
        let status_id = status.container_id.as_deref().unwrap_or_default();
        if status_id.is_empty() {
            continue;
        }
        if status_id != facts.container_id {
            return None;
        }
        if let Some(old) = current
            .as_ref()
            .and_then(|m| m.containers.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|m| m.name == status.name && m.container_id == status_id)
            })
            && (old.hashes.extracted_env_from_metadata_hash != 0 || facts.env_hash.is_none())
        {
            entries.push(ContainerMeta {
                restart_count: status.restart_count,
                ..old.clone()
            });
            continue;
        }
        entries.push(ContainerMeta {
            name: status.name.clone(),
            container_id: status_id.to_owned(),
            restart_count: status.restart_count,
            hashes: Hashes {
                plain_hash: hashing::parse_stored_hash(facts.stored_hash.as_deref()),
                plain_hash_without_resources: hashing::parse_stored_hash(
                    facts.stored_hash_without_resources.as_deref(),
                ),
                extracted_env_from_metadata_hash: facts.env_hash.unwrap_or(0),
            },
        });
    }
    Some(MetaSet {
        containers: (!entries.is_empty()).then_some(entries),
    })
}

/// The annotation value to write, or None when the pod already carries it (or it cannot be
/// decided yet).
pub(crate) fn annotation_patch(
    pod: &CachedPod,
    runtime: &HashMap<String, RuntimeMeta>,
) -> Option<String> {
    let desired = desired_meta(pod, runtime)?.to_annotation();
    let current = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(META_ANNOTATION));
    (current != Some(&desired)).then_some(desired)
}

/// What the env restarter knows of one container whose env comes from its pod's metadata,
/// as plain data: the decision below is made from it alone.
#[derive(Clone, Debug)]
pub(crate) struct EnvRestartFacts<'a> {
    /// The env the container started with differs from the pod's labels/annotations now.
    pub differs: bool,
    /// Why the kubelet would not bring the container back after a stop, if so.
    pub not_restartable: Option<&'static str>,
    /// The runtime's ID of the container.
    pub container_id: &'a str,
    /// The journal's intent for this change at the container's restart count, and at the
    /// restart count before it.
    pub intent: Option<&'a KillIntent>,
    pub previous_intent: Option<&'a KillIntent>,
    /// A kill of this container is under way.
    pub in_flight: bool,
    /// An earlier run's unfinished kill of this container was resumed already.
    pub resumed: bool,
    /// How long this very mismatch (these expected values) has been seen; None: not yet.
    pub mismatch_for: Option<Duration>,
    /// How long a mismatch must have been seen before the kill (`env-restart-settle`).
    pub settle: Duration,
    pub now_ms: i64,
}

/// What to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EnvRestart {
    /// The env matches: forget any mismatch seen before.
    Matches,
    /// The kubelet would not start it again: report once, never stop it.
    NotRestartable(&'static str),
    /// Killed for this change already, and that kill is done or under way: nothing more.
    AlreadyKilled,
    /// An earlier run of the agent began this kill and never finished it (the container still
    /// runs well past its grace): finish it, once, with the minimum grace.
    ResumeOverdue,
    /// The container our kill produced still differs: report once, leave it alone (never a
    /// restart loop).
    Unmatched,
    /// A kill is under way: wait for it.
    InFlight,
    /// Seen for less than the settle time: note when it was first seen, and wait.
    Settling,
    /// Stop it now (the stop gate, the restart budget and the runtime permitting).
    Kill,
}

/// How long past an earlier run's kill deadline the container must still run before that kill
/// counts as never finished.
const OVERDUE_AFTER_MS: i64 = 5_000;

/// The env restarter's decision for one container.
pub(crate) fn decide_env_restart(facts: &EnvRestartFacts<'_>) -> EnvRestart {
    if !facts.differs {
        return EnvRestart::Matches;
    }
    if let Some(reason) = facts.not_restartable {
        return EnvRestart::NotRestartable(reason);
    }
    if let Some(intent) = facts.intent {
        let overdue = intent.container_id == facts.container_id
            && facts.now_ms
                > intent
                    .started_ms
                    .saturating_add(intent.grace_ms)
                    .saturating_add(OVERDUE_AFTER_MS);
        return if overdue && !facts.in_flight && !facts.resumed {
            EnvRestart::ResumeOverdue
        } else {
            EnvRestart::AlreadyKilled
        };
    }
    if facts
        .previous_intent
        .is_some_and(|i| i.container_id != facts.container_id)
    {
        return EnvRestart::Unmatched;
    }
    if facts.in_flight {
        return EnvRestart::InFlight;
    }
    if facts.mismatch_for.unwrap_or(Duration::ZERO) < facts.settle {
        return EnvRestart::Settling;
    }
    EnvRestart::Kill
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn intent(container_id: &str, started_ms: i64, grace_ms: i64) -> KillIntent {
        KillIntent {
            key: "env:u1:abc:0".into(),
            container: "app".into(),
            container_id: container_id.into(),
            started_ms,
            grace_ms,
        }
    }

    /// A container whose env differs, settled long enough, nothing journaled: the base case
    /// each test changes one thing of.
    fn differing() -> EnvRestartFacts<'static> {
        EnvRestartFacts {
            differs: true,
            not_restartable: None,
            container_id: "c1",
            intent: None,
            previous_intent: None,
            in_flight: false,
            resumed: false,
            mismatch_for: Some(Duration::from_secs(2)),
            settle: Duration::from_secs(1),
            now_ms: 100_000,
        }
    }

    #[test]
    fn a_settled_mismatch_with_nothing_journaled_is_killed() {
        assert_eq!(decide_env_restart(&differing()), EnvRestart::Kill);
    }

    #[test]
    fn a_matching_env_forgets_the_mismatch_whatever_else_is_known() {
        let journaled = intent("c1", 0, 0);
        let facts = EnvRestartFacts {
            differs: false,
            not_restartable: Some("restartPolicy Never"),
            intent: Some(&journaled),
            in_flight: true,
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::Matches);
    }

    #[test]
    fn a_container_the_kubelet_would_not_start_again_is_never_stopped() {
        let facts = EnvRestartFacts {
            not_restartable: Some("a static pod"),
            ..differing()
        };
        assert_eq!(
            decide_env_restart(&facts),
            EnvRestart::NotRestartable("a static pod")
        );
    }

    #[test]
    fn a_mismatch_is_killed_only_after_the_settle_time() {
        for (seen, settle, expected) in [
            (None, 1, EnvRestart::Settling),
            (Some(0), 1, EnvRestart::Settling),
            (Some(999), 1, EnvRestart::Settling),
            (Some(1000), 1, EnvRestart::Kill),
            (None, 0, EnvRestart::Kill),
        ] {
            let facts = EnvRestartFacts {
                mismatch_for: seen.map(Duration::from_millis),
                settle: Duration::from_secs(settle),
                ..differing()
            };
            assert_eq!(decide_env_restart(&facts), expected, "{seen:?} {settle}");
        }
    }

    #[test]
    fn a_change_already_killed_for_is_not_killed_again_unless_an_earlier_run_left_it_overdue() {
        // Killed at 10 s with 30 s of grace: overdue only past 45 s, and only once.
        let journaled = intent("c1", 10_000, 30_000);
        let at = |now_ms: i64, in_flight: bool, resumed: bool| {
            decide_env_restart(&EnvRestartFacts {
                intent: Some(&journaled),
                in_flight,
                resumed,
                now_ms,
                ..differing()
            })
        };
        assert_eq!(at(45_000, false, false), EnvRestart::AlreadyKilled);
        assert_eq!(at(45_001, false, false), EnvRestart::ResumeOverdue);
        assert_eq!(at(45_001, true, false), EnvRestart::AlreadyKilled);
        assert_eq!(at(45_001, false, true), EnvRestart::AlreadyKilled);
        // The journaled kill was of another container (it was replaced): nothing to resume.
        let replaced = intent("c0", 10_000, 30_000);
        let facts = EnvRestartFacts {
            intent: Some(&replaced),
            now_ms: 1_000_000,
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::AlreadyKilled);
        // Near the ends of time the arithmetic saturates instead of wrapping.
        let forever = intent("c1", i64::MAX - 1, i64::MAX);
        let facts = EnvRestartFacts {
            intent: Some(&forever),
            now_ms: i64::MAX,
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::AlreadyKilled);
    }

    #[test]
    fn the_container_our_kill_produced_is_left_alone_if_it_still_differs() {
        let killed = intent("c0", 0, 0);
        let facts = EnvRestartFacts {
            previous_intent: Some(&killed),
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::Unmatched);
        // The journaled kill was of this very container (its kill did not take): not ours yet.
        let same = intent("c1", 0, 0);
        let facts = EnvRestartFacts {
            previous_intent: Some(&same),
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::Kill);
    }

    #[test]
    fn a_kill_under_way_is_waited_for() {
        let facts = EnvRestartFacts {
            in_flight: true,
            ..differing()
        };
        assert_eq!(decide_env_restart(&facts), EnvRestart::InFlight);
    }

    fn pod(value: serde_json::Value) -> CachedPod {
        serde_json::from_value(value).unwrap()
    }

    fn facts(id: &str, hash: &str, env_hash: Option<u64>) -> RuntimeMeta {
        RuntimeMeta {
            container_id: format!("containerd://{id}"),
            stored_hash: Some(hash.into()),
            stored_hash_without_resources: None,
            env_hash,
        }
    }

    fn two_container_pod(annotation: Option<&str>) -> CachedPod {
        let mut annotations = json!({});
        if let Some(a) = annotation {
            annotations[META_ANNOTATION] = json!(a);
        }
        pod(json!({
            "metadata": {"name": "p", "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                    "name": "cs", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]},
            "status": {"containerStatuses": [
                {"name": "b", "containerID": "containerd://bb", "restartCount": 2, "ready": true,
                 "image": "i", "imageID": ""},
                {"name": "a", "containerID": "containerd://aa", "restartCount": 0, "ready": true,
                 "image": "i", "imageID": ""}]}
        }))
    }

    #[test]
    fn annotation_is_byte_for_byte_kruise_v18_in_status_order() {
        let p = two_container_pod(None);
        let runtime = HashMap::from([
            ("a".to_string(), facts("aa", "1a2b", Some(NO_ENV_HASH))),
            (
                "b".to_string(),
                RuntimeMeta {
                    stored_hash_without_resources: Some("ff".into()),
                    ..facts("bb", "c0ffee", None)
                },
            ),
        ]);
        assert_eq!(eligibility(&p), Some(Eligibility::Kruise));
        let value = annotation_patch(&p, &runtime).unwrap();
        assert_eq!(
            value,
            r#"{"containers":[{"name":"b","containerID":"containerd://bb","restartCount":2,"hashes":{"plainHash":12648430,"plainHashWithoutResources":255}},{"name":"a","containerID":"containerd://aa","restartCount":0,"hashes":{"plainHash":6699,"plainHashWithoutResources":0,"extractedEnvFromMetadataHash":86995377}}]}"#
        );
        // Unchanged content: no patch.
        let p = two_container_pod(Some(&value));
        assert_eq!(annotation_patch(&p, &runtime), None);
    }

    #[test]
    fn malformed_input_never_panics() {
        // A garbage annotation is replaced; a pod without spec or status gives nothing to write.
        let p = two_container_pod(Some("{not json"));
        let runtime = HashMap::from([
            ("a".to_string(), facts("aa", "zz-not-hex", None)),
            ("b".to_string(), facts("bb", "10", None)),
        ]);
        let value = annotation_patch(&p, &runtime).unwrap();
        assert!(value.contains(r#""plainHash":0"#), "{value}");
        let bare = pod(json!({"metadata": {"name": "p"}}));
        assert_eq!(desired_meta(&bare, &runtime), None);
        let no_status =
            pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}));
        assert_eq!(
            annotation_patch(&no_status, &runtime).as_deref(),
            Some(r#"{"containers":null}"#)
        );
        let odd = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "env": [
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['"}}},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "['x']"}}},
            {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ok']"}}}]}]}}),
        );
        let refs = metadata_refs(&odd.spec.as_ref().unwrap().containers[0]).unwrap();
        assert_eq!(refs.len(), 1);
        // A spec is cached as JSON; an env that does not decode is an error, not "no refs".
        let broken = pod(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "env": [{"name": 7}]}]}}));
        assert!(metadata_refs(&broken.spec.as_ref().unwrap().containers[0]).is_err());
    }

    #[test]
    fn entries_are_reused_by_container_id_and_rebuilt_after_a_restart() {
        let old = r#"{"containers":[{"name":"a","containerID":"containerd://aa","restartCount":0,"hashes":{"plainHash":1,"plainHashWithoutResources":0,"extractedEnvFromMetadataHash":5}}]}"#;
        let p = two_container_pod(Some(old));
        let runtime = HashMap::from([
            ("a".to_string(), facts("aa", "ff", Some(7))),
            ("b".to_string(), facts("bb", "10", Some(NO_ENV_HASH))),
        ]);
        let meta = desired_meta(&p, &runtime).unwrap();
        let containers = meta.containers.unwrap();
        assert_eq!(containers[1].hashes.plain_hash, 1, "reused as written");
        assert_eq!(containers[1].hashes.extracted_env_from_metadata_hash, 5);
        assert_eq!(containers[0].hashes.plain_hash, 16);
        // Kubelet's status still names the old container while the runtime has a new one.
        let runtime = HashMap::from([
            ("a".to_string(), facts("a2", "ff", Some(7))),
            ("b".to_string(), facts("bb", "10", Some(NO_ENV_HASH))),
        ]);
        assert_eq!(desired_meta(&p, &runtime), None);
    }

    #[test]
    fn only_kruise_or_opted_in_pods_are_served() {
        let plain = pod(json!({"metadata": {"name": "p"}}));
        assert_eq!(eligibility(&plain), None);
        let sidecar = pod(
            json!({"metadata": {"name": "p", "annotations": {SIDECARSET_HASH_ANNOTATION: "{}"}}}),
        );
        assert_eq!(eligibility(&sidecar), Some(Eligibility::Kruise));
        let opt_in =
            pod(json!({"metadata": {"name": "p", "annotations": {OPT_IN_ANNOTATION: "true"}}}));
        assert_eq!(eligibility(&opt_in), Some(Eligibility::OptIn));
        assert!(restarts_enabled(&opt_in, Eligibility::OptIn));
        let deployment = pod(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]}}));
        assert_eq!(eligibility(&deployment), None);
        let updating = pod(json!({"metadata": {"name": "p"}, "status": {"conditions": [
            {"type": IN_PLACE_UPDATE_READY, "status": "False"}]}}));
        assert!(restarts_enabled(&updating, Eligibility::Kruise));
        assert!(!restarts_enabled(&deployment, Eligibility::Kruise));
    }

    #[test]
    fn a_reference_a_later_entry_of_its_name_overrides_expects_nothing() {
        let p = pod(json!({
            "metadata": {"name": "p", "annotations": {"v": "1", "w": "2"}},
            "spec": {"containers": [{"name": "a", "image": "i", "env": [
                {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}},
                {"name": "V", "value": "fixed"},
                {"name": "W", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}},
                {"name": "W", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['w']"}}}]}]}
        }));
        let container = &p.spec.as_ref().unwrap().containers[0];
        let refs = metadata_refs(container).unwrap();
        // kruise counts every reference in its hash, shadowed or not.
        assert_eq!(
            refs.iter()
                .map(|r| (r.env.as_str(), r.shadowed))
                .collect::<Vec<_>>(),
            [("V", true), ("W", true), ("W", false)]
        );
        // What kubelet gives the container (the last definition of each name) matches.
        let started = parse_env(["V=fixed", "W=2"]);
        let expected = expected_values(&p, &refs);
        assert_eq!(expected, BTreeMap::from([("W".to_owned(), "2".to_owned())]));
        assert!(env_differences(&expected, &started).is_empty());
        let stale = parse_env(["V=fixed", "W=1"]);
        assert_eq!(env_differences(&expected, &stale), ["W"]);
    }

    #[test]
    fn env_comparison_uses_the_started_with_values() {
        let p = pod(json!({
            "metadata": {"name": "p", "labels": {"app": "web"}, "annotations": {"v": "2"}},
            "spec": {"containers": [{"name": "a", "image": "i", "env": [
                {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}},
                {"name": "GONE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['x']"}}},
                {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "SIDECARSET_VERSION", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}},
                {"name": "PLAIN", "value": "x"}]}]}
        }));
        let container = &p.spec.as_ref().unwrap().containers[0];
        let refs = metadata_refs(container).unwrap();
        assert_eq!(
            refs.iter().map(|r| r.env.as_str()).collect::<Vec<_>>(),
            ["L", "V", "GONE"]
        );
        let expected = expected_values(&p, &refs);
        let started = parse_env(["PATH=/bin", "L=web", "V=1", "EQ=a=b"]);
        assert_eq!(started["EQ"], "a=b");
        assert_eq!(env_differences(&expected, &started), ["V"]);
        let now = parse_env(["L=web", "V=2", "GONE="]);
        assert!(env_differences(&expected, &now).is_empty());
        // The current hash of matching values equals kruise's expected hash.
        let json = container.json().as_bytes();
        let labels = p.metadata.labels.clone().unwrap();
        let annotations = p.metadata.annotations.clone().unwrap();
        let expected_hash =
            hashing::extracted_env_from_metadata_hash(json, &labels, &annotations).unwrap();
        assert_eq!(
            current_env_hash(container, &refs, &now),
            Some(expected_hash)
        );
        assert_ne!(
            current_env_hash(container, &refs, &started),
            Some(expected_hash)
        );
        let bare = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}));
        let bare_container = &bare.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            current_env_hash(bare_container, &[], &BTreeMap::new()),
            Some(NO_ENV_HASH)
        );
    }

    #[test]
    fn env_comes_from_containerd_verbose_info() {
        let info = HashMap::from([(
            "info".to_string(),
            json!({"pid": 1, "runtimeSpec": {"process": {"env": ["A=1", "B=x=y"]}}}).to_string(),
        )]);
        let env = env_from_verbose_info(&info).unwrap();
        assert_eq!(env["A"], "1");
        assert_eq!(env["B"], "x=y");
        assert!(env_from_verbose_info(&HashMap::new()).is_none());
        let garbage = HashMap::from([("info".to_string(), "{not json".to_string())]);
        assert!(env_from_verbose_info(&garbage).is_none());
    }
}
