//! The node view: the API's pods for this node joined with the runtime's sandboxes and containers
//! the way kubelet labels them (`io.kubernetes.pod.uid`, `io.kubernetes.container.name`), per
//! container: its runtime ID, state, restart count, stored hash(es) and CRI timestamps
//! (the labels: `docs/cri-labels.md`).

mod hashes;
mod metrics;
mod restart;
mod runtime;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::cri::labels;
use crate::cri::proto::{Container, ContainerState, PodSandbox, PodSandboxState};
use crate::kube::{CachedContainer, CachedPod};
pub use hashes::{HashCache, HashCheck, UpgradeReport, UpgradeVerdict, annotate, upgrade_check};
pub(crate) use metrics::RefreshMetrics;
pub use restart::{CrashBackoffView, RestartTiming, RestartWindow, Trigger};
pub use runtime::{ContainerTimes, RuntimeSnapshot, RuntimeTracker};

/// Annotation a mirror pod carries: the static pod's UID as kubelet knows it (its config hash).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Where kubelet got a pod from; anything but "api" is a static pod.
const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeView {
    pub node_name: String,
    /// The runtime's name and version (`containerd 1.6.20`), when it answered.
    pub runtime: Option<String>,
    /// `status.nodeInfo.kubeletVersion` of the node object, when known.
    pub kubelet_version: Option<String>,
    /// The node's allocatable cpu and memory (in the request fields), when known.
    #[serde(skip)]
    pub node_allocatable: Option<crate::resources::Resources>,
    /// Both the API's pods and the runtime have been listed at least once.
    #[serde(default)]
    pub synced: bool,
    pub pods: Vec<PodView>,
    /// Sandboxes in the runtime with no API pod on this node (deleted pods being cleaned up,
    /// static pods without a mirror, or a stale pod cache).
    pub unmatched_sandboxes: Vec<UnmatchedSandbox>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    /// The API object's UID.
    pub uid: String,
    /// The UID kubelet labels runtime objects with (differs from `uid` for mirror pods).
    pub runtime_uid: String,
    /// A static pod seen through its mirror pod: the mirror's spec is not what kubelet hashed.
    pub static_pod: bool,
    pub terminating: bool,
    /// `status.podIP` (127.0.0.1 style host IP for host-network pods).
    pub pod_ip: Option<String>,
    /// The newest sandbox of the pod, if the runtime has one.
    pub sandbox_id: Option<String>,
    pub sandbox_ready: bool,
    /// `lastTransitionTime` of the pod's Ready condition while it is True (one-second resolution).
    #[serde(default)]
    pub ready_since: Option<String>,
    pub containers: Vec<ContainerView>,
    /// The API's pod as joined (labels, annotations, owners, conditions, status order), for
    /// controllers that need more than the summary above.
    #[serde(skip)]
    pub api_pod: Option<std::sync::Arc<CachedPod>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerView {
    pub name: String,
    pub kind: ContainerKind,
    /// Where the spec is in the API's pod (`spec.initContainers` or `spec.containers`, by
    /// `kind`): read it with [`PodView::spec_of`]. None for ephemeral containers.
    #[serde(skip)]
    pub spec_index: Option<usize>,
    pub runtime: Option<RuntimeContainer>,
    /// Era detection for the stored hash (filled by [`annotate`]).
    pub hash_check: Option<HashCheck>,
    /// What the pod's status says of this container (kubelet's view).
    #[serde(default)]
    pub status: Option<StatusView>,
    /// The container's last in-place restart, phase by phase (filled by the restart tracker).
    #[serde(default)]
    pub last_restart: Option<RestartTiming>,
    /// The kubelet's crash back-off as predicted for it (filled by the restart tracker; None
    /// while a stop would be restarted at once).
    #[serde(default)]
    pub crash_backoff: Option<CrashBackoffView>,
}

impl ContainerView {
    /// This container's spec in `pod` (the API's pod it was joined from).
    pub(crate) fn spec_in<'p>(&self, pod: Option<&'p CachedPod>) -> Option<&'p CachedContainer> {
        let spec = pod?.spec.as_ref()?;
        let index = self.spec_index?;
        match self.kind {
            ContainerKind::Init => spec.init_containers.as_ref()?.get(index),
            ContainerKind::Regular => spec.containers.get(index),
            ContainerKind::Ephemeral => None,
        }
    }
}

impl PodView {
    /// A container's spec, from the API's pod (what the hash is computed from).
    pub(crate) fn spec_of(&self, container: &ContainerView) -> Option<&CachedContainer> {
        container.spec_in(self.api_pod.as_deref())
    }

    /// The labels kubelet gives this pod's containers, to check a container against.
    pub(crate) fn runtime_labels(&self) -> crate::cri::PodLabels<'_> {
        crate::cri::PodLabels {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.runtime_uid,
        }
    }

    /// The pod as events refer to it.
    pub(crate) fn event_ref(&self) -> crate::kube::events::PodRef {
        crate::kube::events::PodRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// A container as `pod.status.(init)containerStatuses` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// `<runtime>://<id>`.
    pub container_id: String,
    pub ready: bool,
    pub restart_count: i32,
    /// It carries `resources` (what kubelet applied): only a kubelet that resizes in place
    /// writes it.
    #[serde(default)]
    pub reports_resources: bool,
    /// The kubelet reports it running.
    #[serde(default)]
    pub running: bool,
}

fn pod_status_of(pod: &CachedPod, name: &str) -> Option<StatusView> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)
        .map(|s| StatusView {
            container_id: s.container_id.clone().unwrap_or_default(),
            ready: s.ready,
            restart_count: s.restart_count,
            reports_resources: s.resources.is_some(),
            running: s
                .state
                .as_ref()
                .is_some_and(|state| state.running.is_some()),
        })
}

fn ready_since(pod: &CachedPod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
}

/// The newest runtime container of one spec container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RuntimeContainer {
    /// `<runtime>://<id>`, as kubelet writes it into pod status.
    pub container_id: String,
    pub id: String,
    pub state: RuntimeState,
    pub attempt: u32,
    /// `io.kubernetes.container.restartCount`; `None` when absent or not a number.
    pub restart_count: Option<u32>,
    /// `io.kubernetes.container.hash` as stored.
    pub stored_hash: Option<String>,
    /// `io.kubernetes.container.hashWithoutResources` as stored (kubelet 1.27–1.30).
    pub stored_hash_without_resources: Option<String>,
    pub image: String,
    pub times: ContainerTimes,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnmatchedSandbox {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub ready: bool,
}

/// Joins the API's pods with a runtime snapshot.
/// `pods` are shared, not copied: each pod view keeps its pod's `Arc`.
pub fn join(
    node_name: &str,
    pods: &[std::sync::Arc<CachedPod>],
    snapshot: &RuntimeSnapshot,
) -> NodeView {
    let by_uid = ByPodUid::of(snapshot);
    // Sandbox IDs a pod claimed: the rest are shown as unmatched. By ID, not by UID, so that a
    // sandbox a mirror pod's check refused is still shown somewhere.
    let mut claimed_sandboxes = HashSet::new();
    let mut pod_views: Vec<PodView> = pods
        .iter()
        .map(|shared| pod_view(shared, &by_uid, snapshot, &mut claimed_sandboxes))
        .collect();
    pod_views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    NodeView {
        node_name: node_name.to_owned(),
        runtime: snapshot
            .runtime
            .as_ref()
            .map(|r| format!("{} {}", r.runtime_name, r.runtime_version)),
        kubelet_version: None,
        node_allocatable: None,
        synced: false,
        pods: pod_views,
        unmatched_sandboxes: unmatched_sandboxes(snapshot, &claimed_sandboxes),
    }
}

/// The runtime's sandboxes and containers by the pod UID kubelet labelled them with (those
/// without one are no pod's).
struct ByPodUid<'s> {
    sandboxes: HashMap<&'s str, Vec<&'s PodSandbox>>,
    containers: HashMap<&'s str, Vec<&'s Container>>,
}

impl<'s> ByPodUid<'s> {
    fn of(snapshot: &'s RuntimeSnapshot) -> Self {
        let mut sandboxes: HashMap<&str, Vec<&PodSandbox>> = HashMap::new();
        for sandbox in &snapshot.sandboxes {
            if let Some(uid) = sandbox.labels.get(labels::POD_UID) {
                sandboxes.entry(uid).or_default().push(sandbox);
            }
        }
        let mut containers: HashMap<&str, Vec<&Container>> = HashMap::new();
        for container in &snapshot.containers {
            if let Some(uid) = container.labels.get(labels::POD_UID) {
                containers.entry(uid).or_default().push(container);
            }
        }
        ByPodUid {
            sandboxes,
            containers,
        }
    }
}

/// One API pod joined with the runtime objects it claims; the IDs of the sandboxes it claims
/// are added to `claimed_sandboxes`.
fn pod_view(
    shared: &std::sync::Arc<CachedPod>,
    by_uid: &ByPodUid<'_>,
    snapshot: &RuntimeSnapshot,
    claimed_sandboxes: &mut HashSet<String>,
) -> PodView {
    let pod: &CachedPod = shared;
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref();
    let mirror_uid = annotations.and_then(|a| a.get(MIRROR_ANNOTATION));
    let uid = meta.uid.clone().unwrap_or_default();
    let runtime_uid = mirror_uid.cloned().unwrap_or_else(|| uid.clone());
    let static_pod = mirror_uid.is_some()
        || annotations
            .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
            .is_some_and(|source| source != "api");
    let (namespace, name) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    // A mirror pod's runtime UID comes from its annotation, which whoever creates a pod may
    // set: its runtime objects must also carry its namespace and name, as the static pod's do,
    // or any pod could claim another's containers.
    let ours = |ns: Option<&str>, n: Option<&str>| {
        mirror_uid.is_none() || (ns == Some(namespace) && n == Some(name))
    };
    let pod_sandboxes: Vec<&PodSandbox> = by_uid
        .sandboxes
        .get(runtime_uid.as_str())
        .into_iter()
        .flatten()
        .copied()
        .filter(|s| {
            let meta = s.metadata.as_ref();
            ours(
                meta.map(|m| m.namespace.as_str()),
                meta.map(|m| m.name.as_str()),
            )
        })
        .collect();
    claimed_sandboxes.extend(pod_sandboxes.iter().map(|s| s.id.clone()));
    let sandbox = pod_sandboxes.into_iter().max_by_key(|s| s.created_at);
    let runtime_containers: Vec<&Container> = by_uid
        .containers
        .get(runtime_uid.as_str())
        .into_iter()
        .flatten()
        .copied()
        .filter(|c| {
            ours(
                c.labels.get(labels::POD_NAMESPACE).map(String::as_str),
                c.labels.get(labels::POD_NAME).map(String::as_str),
            )
        })
        .collect();
    PodView {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid,
        runtime_uid,
        static_pod,
        terminating: meta.deletion_timestamp.is_some(),
        pod_ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
        sandbox_id: sandbox.map(|s| s.id.clone()),
        sandbox_ready: sandbox.is_some_and(|s| s.state == PodSandboxState::SandboxReady as i32),
        ready_since: ready_since(pod),
        containers: container_views(pod, &runtime_containers, snapshot),
        api_pod: Some(shared.clone()),
    }
}

/// The sandboxes no pod claimed, by namespace, name, then ID.
fn unmatched_sandboxes(
    snapshot: &RuntimeSnapshot,
    claimed: &HashSet<String>,
) -> Vec<UnmatchedSandbox> {
    let mut unmatched: Vec<UnmatchedSandbox> = snapshot
        .sandboxes
        .iter()
        .filter(|s| !claimed.contains(&s.id))
        .map(|s| {
            let meta = s.metadata.clone().unwrap_or_default();
            UnmatchedSandbox {
                id: s.id.clone(),
                namespace: meta.namespace,
                name: meta.name,
                uid: meta.uid,
                ready: s.state == PodSandboxState::SandboxReady as i32,
            }
        })
        .collect();
    unmatched.sort_by(|a, b| (&a.namespace, &a.name, &a.id).cmp(&(&b.namespace, &b.name, &b.id)));
    unmatched
}

fn container_views(
    pod: &CachedPod,
    runtime: &[&Container],
    snapshot: &RuntimeSnapshot,
) -> Vec<ContainerView> {
    let runtime_name = snapshot
        .runtime
        .as_ref()
        .map_or("unknown", |r| r.runtime_name.as_str());
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    // Exactly sized: a view lives until the next rebuild, for every pod of the node.
    let count = spec.init_containers.as_ref().map_or(0, Vec::len)
        + spec.containers.len()
        + spec.ephemeral_containers.as_ref().map_or(0, Vec::len);
    let mut views = Vec::with_capacity(count);
    let mut add = |kind: ContainerKind, name: &str, spec_index: Option<usize>| {
        // The newest container of a name is the one created last; the attempt breaks ties. Not
        // the attempt first: it starts again at 0 when the sandbox is recreated.
        let newest = runtime
            .iter()
            .filter(|c| {
                c.labels
                    .get(labels::CONTAINER_NAME)
                    .is_some_and(|n| n == name)
            })
            .max_by_key(|c| (c.created_at, c.metadata.as_ref().map_or(0, |m| m.attempt)));
        views.push(ContainerView {
            name: name.to_owned(),
            kind,
            spec_index,
            runtime: newest.map(|c| runtime_container(c, runtime_name, snapshot)),
            hash_check: None,
            status: pod_status_of(pod, name),
            last_restart: None,
            crash_backoff: None,
        });
    };
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        add(ContainerKind::Init, c.name(), Some(i));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        add(ContainerKind::Regular, c.name(), Some(i));
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        add(ContainerKind::Ephemeral, c.name(), None);
    }
    views
}

fn runtime_container(
    c: &Container,
    runtime_name: &str,
    snapshot: &RuntimeSnapshot,
) -> RuntimeContainer {
    let state = match ContainerState::try_from(c.state) {
        Ok(ContainerState::ContainerCreated) => RuntimeState::Created,
        Ok(ContainerState::ContainerRunning) => RuntimeState::Running,
        Ok(ContainerState::ContainerExited) => RuntimeState::Exited,
        _ => RuntimeState::Unknown,
    };
    let mut times = snapshot.times.get(&c.id).cloned().unwrap_or_default();
    if times.created_at == 0 {
        times.created_at = c.created_at;
    }
    RuntimeContainer {
        container_id: format!("{runtime_name}://{}", c.id),
        id: c.id.clone(),
        state,
        attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
        restart_count: c
            .annotations
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse().ok()),
        stored_hash: c.annotations.get(labels::CONTAINER_HASH).cloned(),
        stored_hash_without_resources: c
            .annotations
            .get(labels::CONTAINER_HASH_WITHOUT_RESOURCES)
            .cloned(),
        image: c
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        times,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cri::RuntimeInfo;
    use crate::cri::proto::{ContainerMetadata, ImageSpec, PodSandboxMetadata};

    fn pod(namespace: &str, name: &str, uid: &str, mirror_of: Option<&str>) -> Arc<CachedPod> {
        let annotations = match mirror_of {
            Some(runtime_uid) => serde_json::json!({MIRROR_ANNOTATION: runtime_uid}),
            None => serde_json::json!({}),
        };
        let pod = serde_json::json!({
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "annotations": annotations},
            "spec": {"nodeName": "n", "containers": [{"name": "app", "image": "i"}]},
        });
        Arc::new(serde_json::from_value(pod).expect("a pod"))
    }

    /// A running `app` container and its sandbox, labelled as kubelet labels them.
    fn runtime_of(namespace: &str, name: &str, uid: &str, id: &str) -> (PodSandbox, Container) {
        let pod_labels = [
            (labels::POD_UID.to_owned(), uid.to_owned()),
            (labels::POD_NAMESPACE.to_owned(), namespace.to_owned()),
            (labels::POD_NAME.to_owned(), name.to_owned()),
        ];
        let sandbox = PodSandbox {
            id: format!("sandbox-{id}"),
            created_at: 1,
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            labels: pod_labels.clone().into(),
            ..Default::default()
        };
        let mut container_labels: HashMap<String, String> = pod_labels.into();
        container_labels.insert(labels::CONTAINER_NAME.into(), "app".into());
        let container = Container {
            id: id.into(),
            pod_sandbox_id: sandbox.id.clone(),
            created_at: 2,
            metadata: Some(ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            labels: container_labels,
            ..Default::default()
        };
        (sandbox, container)
    }

    fn app_runtime_id(view: &NodeView, name: &str) -> Option<String> {
        let pod = view.pods.iter().find(|p| p.name == name)?;
        let app = pod.containers.iter().find(|c| c.name == "app")?;
        app.runtime.as_ref().map(|r| r.id.clone())
    }

    /// A real mirror pod has its static pod's namespace and name, so it gets the static pod's
    /// containers; a pod elsewhere whose mirror annotation names that UID gets nothing.
    #[test]
    fn a_mirror_annotation_claims_only_the_containers_of_its_own_pod() {
        let (sandbox, container) = runtime_of("kube-system", "etcd-n", "static-hash", "c1");
        let snapshot = RuntimeSnapshot {
            sandboxes: vec![Arc::new(sandbox)],
            containers: vec![Arc::new(container)],
            ..Default::default()
        };
        let mirror = pod("kube-system", "etcd-n", "api-uid-1", Some("static-hash"));
        let impostor = pod("team-a", "x", "api-uid-2", Some("static-hash"));
        let view = join("n", &[mirror, impostor], &snapshot);
        assert_eq!(app_runtime_id(&view, "etcd-n").as_deref(), Some("c1"));
        assert_eq!(app_runtime_id(&view, "x"), None);
        let impostor_view = view.pods.iter().find(|p| p.name == "x").expect("listed");
        assert_eq!(impostor_view.sandbox_id, None);
    }

    // ---- Scenario builders: API pods as JSON, runtime objects as kubelet labels them. ----

    /// The namespace of every pod and runtime object below unless a test says otherwise.
    const NS: &str = "shop";

    /// Sets `extra`'s fields into `base`, objects merged key by key, anything else replaced.
    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(base), serde_json::Value::Object(extra)) => {
                for (key, value) in extra {
                    merge(base.entry(key).or_insert(serde_json::Value::Null), value);
                }
            }
            (base, extra) => *base = extra,
        }
    }

    /// An API pod `NS/name` with one container `app`, plus whatever `extra` sets (merged).
    fn api_pod(name: &str, uid: &str, extra: serde_json::Value) -> Arc<CachedPod> {
        let mut pod = json!({
            "metadata": {"namespace": NS, "name": name, "uid": uid},
            "spec": {"nodeName": "n", "containers": [{"name": "app", "image": "nginx"}]},
        });
        merge(&mut pod, extra);
        Arc::new(serde_json::from_value(pod).expect("a pod"))
    }

    /// A ready sandbox of pod `NS/name`, created at 1, carrying only the pod UID label (all the
    /// runtime tracker keeps of a sandbox's labels).
    fn cri_sandbox(id: &str, name: &str, uid: &str) -> PodSandbox {
        PodSandbox {
            id: id.into(),
            created_at: 1,
            state: PodSandboxState::SandboxReady as i32,
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: NS.into(),
                attempt: 0,
            }),
            labels: [(labels::POD_UID.to_owned(), uid.to_owned())].into(),
            ..Default::default()
        }
    }

    /// A running container `container` (image `nginx`, attempt 0, created at 10) of pod
    /// `NS/pod_name`, labelled as kubelet labels it.
    fn cri_container(id: &str, pod_name: &str, uid: &str, container: &str) -> Container {
        Container {
            id: id.into(),
            pod_sandbox_id: format!("sandbox-of-{uid}"),
            created_at: 10,
            state: ContainerState::ContainerRunning as i32,
            metadata: Some(ContainerMetadata {
                name: container.into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: "nginx".into(),
                ..Default::default()
            }),
            labels: [
                (labels::POD_UID.to_owned(), uid.to_owned()),
                (labels::POD_NAMESPACE.to_owned(), NS.to_owned()),
                (labels::POD_NAME.to_owned(), pod_name.to_owned()),
                (labels::CONTAINER_NAME.to_owned(), container.to_owned()),
            ]
            .into(),
            ..Default::default()
        }
    }

    /// Tweaks of a runtime container, chained onto [`cri_container`].
    trait ContainerTweaks: Sized {
        fn created(self, at: i64) -> Self;
        fn attempt(self, attempt: u32) -> Self;
        fn in_state(self, state: i32) -> Self;
        fn in_sandbox(self, sandbox_id: &str) -> Self;
        fn annotated(self, key: &str, value: &str) -> Self;
        fn without_label(self, key: &str) -> Self;
        fn labelled(self, key: &str, value: &str) -> Self;
    }

    impl ContainerTweaks for Container {
        fn created(mut self, at: i64) -> Self {
            self.created_at = at;
            self
        }
        fn attempt(mut self, attempt: u32) -> Self {
            if let Some(meta) = self.metadata.as_mut() {
                meta.attempt = attempt;
            }
            self
        }
        fn in_state(mut self, state: i32) -> Self {
            self.state = state;
            self
        }
        fn in_sandbox(mut self, sandbox_id: &str) -> Self {
            self.pod_sandbox_id = sandbox_id.into();
            self
        }
        fn annotated(mut self, key: &str, value: &str) -> Self {
            self.annotations.insert(key.into(), value.into());
            self
        }
        fn without_label(mut self, key: &str) -> Self {
            self.labels.remove(key);
            self
        }
        fn labelled(mut self, key: &str, value: &str) -> Self {
            self.labels.insert(key.into(), value.into());
            self
        }
    }

    /// Tweaks of a sandbox, chained onto [`cri_sandbox`].
    trait SandboxTweaks: Sized {
        fn created(self, at: i64) -> Self;
        fn not_ready(self) -> Self;
        fn in_namespace(self, namespace: &str) -> Self;
        fn without_label(self, key: &str) -> Self;
        fn without_metadata(self) -> Self;
    }

    impl SandboxTweaks for PodSandbox {
        fn created(mut self, at: i64) -> Self {
            self.created_at = at;
            self
        }
        fn not_ready(mut self) -> Self {
            self.state = PodSandboxState::SandboxNotready as i32;
            self
        }
        fn in_namespace(mut self, namespace: &str) -> Self {
            if let Some(meta) = self.metadata.as_mut() {
                meta.namespace = namespace.into();
            }
            self
        }
        fn without_label(mut self, key: &str) -> Self {
            self.labels.remove(key);
            self
        }
        fn without_metadata(mut self) -> Self {
            self.metadata = None;
            self
        }
    }

    fn containerd() -> RuntimeInfo {
        RuntimeInfo {
            runtime_name: "containerd".into(),
            runtime_version: "1.7.0".into(),
            runtime_api_version: "v1".into(),
        }
    }

    /// A containerd snapshot of these objects, with no ContainerStatus times yet.
    fn snapshot_of(sandboxes: Vec<PodSandbox>, containers: Vec<Container>) -> RuntimeSnapshot {
        RuntimeSnapshot {
            runtime: Some(containerd()),
            sandboxes: sandboxes.into_iter().map(Arc::new).collect(),
            containers: containers.into_iter().map(Arc::new).collect(),
            times: Arc::default(),
        }
    }

    fn pod_in<'v>(view: &'v NodeView, name: &str) -> &'v PodView {
        view.pods
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("pod {name} is listed"))
    }

    fn container_in<'v>(pod: &'v PodView, name: &str) -> &'v ContainerView {
        pod.containers
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("container {name} is listed in pod {}", pod.name))
    }

    fn runtime_in<'v>(
        view: &'v NodeView,
        pod: &str,
        container: &str,
    ) -> Option<&'v RuntimeContainer> {
        container_in(pod_in(view, pod), container).runtime.as_ref()
    }

    fn runtime_id<'v>(view: &'v NodeView, pod: &str, container: &str) -> Option<&'v str> {
        runtime_in(view, pod, container).map(|r| r.id.as_str())
    }

    fn unmatched_ids(view: &NodeView) -> Vec<&str> {
        view.unmatched_sandboxes
            .iter()
            .map(|s| s.id.as_str())
            .collect()
    }

    // ---- Matching ----

    #[test]
    fn a_container_is_joined_to_its_spec_by_pod_uid_and_container_name() {
        let web = api_pod("web", "u1", json!({}));
        let snapshot = snapshot_of(
            vec![cri_sandbox("s1", "web", "u1")],
            vec![cri_container("c1", "web", "u1", "app")],
        );
        let view = join("node-1", std::slice::from_ref(&web), &snapshot);

        assert_eq!(view.node_name, "node-1");
        assert_eq!(view.runtime.as_deref(), Some("containerd 1.7.0"));
        assert!(!view.synced, "join leaves `synced` to its caller");
        assert_eq!(view.kubelet_version, None);
        assert!(view.node_allocatable.is_none());
        assert!(view.unmatched_sandboxes.is_empty());
        assert_eq!(view.pods.len(), 1);

        let pod = pod_in(&view, "web");
        assert_eq!(pod.namespace, NS);
        assert_eq!(pod.uid, "u1");
        assert_eq!(pod.runtime_uid, "u1");
        assert!(!pod.static_pod);
        assert!(!pod.terminating);
        assert_eq!(pod.sandbox_id.as_deref(), Some("s1"));
        assert!(pod.sandbox_ready);
        let shared = pod.api_pod.as_ref().expect("the API pod is kept");
        assert!(Arc::ptr_eq(shared, &web), "the pod is shared, not copied");

        assert_eq!(pod.containers.len(), 1);
        let app = container_in(pod, "app");
        assert_eq!(app.kind, ContainerKind::Regular);
        assert_eq!(app.spec_index, Some(0));
        assert_eq!(pod.spec_of(app).map(CachedContainer::name), Some("app"));
        assert!(app.hash_check.is_none(), "filled later by annotate");
        assert!(
            app.last_restart.is_none(),
            "filled later by the restart tracker"
        );
        assert_eq!(app.status, None);

        let runtime = app.runtime.as_ref().expect("joined");
        assert_eq!(runtime.id, "c1");
        assert_eq!(runtime.container_id, "containerd://c1");
        assert_eq!(runtime.state, RuntimeState::Running);
        assert_eq!(runtime.attempt, 0);
        assert_eq!(runtime.image, "nginx");
        assert_eq!(runtime.restart_count, None);
        assert_eq!(runtime.stored_hash, None);
        assert_eq!(runtime.stored_hash_without_resources, None);
    }

    #[test]
    fn a_pod_the_runtime_has_nothing_of_yet_lists_its_containers_without_runtime_objects() {
        let web = api_pod(
            "web",
            "u1",
            json!({"spec": {"containers": [{"name": "app"}, {"name": "side"}]}}),
        );
        let view = join("n", &[web], &snapshot_of(vec![], vec![]));
        let pod = pod_in(&view, "web");
        assert_eq!(pod.sandbox_id, None);
        assert!(!pod.sandbox_ready);
        let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app", "side"]);
        assert!(pod.containers.iter().all(|c| c.runtime.is_none()));
        assert!(view.unmatched_sandboxes.is_empty());
    }

    #[test]
    fn runtime_objects_of_a_pod_the_api_no_longer_has_show_only_as_an_unmatched_sandbox() {
        let web = api_pod("web", "u1", json!({}));
        let snapshot = snapshot_of(
            vec![
                cri_sandbox("s1", "web", "u1"),
                cri_sandbox("s-gone", "gone", "u-gone").not_ready(),
            ],
            vec![
                cri_container("c1", "web", "u1", "app"),
                // Newer, same container name, but another pod's.
                cri_container("c-gone", "gone", "u-gone", "app").created(99),
            ],
        );
        let view = join("n", &[web], &snapshot);
        assert_eq!(
            view.pods.len(),
            1,
            "no pod view is made up for runtime objects"
        );
        assert_eq!(runtime_id(&view, "web", "app"), Some("c1"));
        assert_eq!(view.unmatched_sandboxes.len(), 1);
        let gone = &view.unmatched_sandboxes[0];
        assert_eq!(gone.id, "s-gone");
        assert_eq!(gone.namespace, NS);
        assert_eq!(gone.name, "gone");
        assert_eq!(gone.uid, "u-gone");
        assert!(!gone.ready);
    }

    #[test]
    fn a_ready_sandbox_without_an_api_pod_is_listed_as_ready() {
        let snapshot = snapshot_of(
            vec![cri_sandbox("s-static", "etcd-n", "static-hash")],
            vec![],
        );
        let view = join("n", &[], &snapshot);
        assert!(view.pods.is_empty());
        assert_eq!(unmatched_ids(&view), ["s-static"]);
        assert!(view.unmatched_sandboxes[0].ready);
    }

    #[test]
    fn a_runtime_container_without_a_pod_uid_or_container_name_label_is_ignored() {
        let labelled = cri_container("c-ok", "web", "u1", "app").created(10);
        let no_uid = cri_container("c-no-uid", "web", "u1", "app")
            .created(20)
            .without_label(labels::POD_UID);
        // Its CRI metadata still names `app`: only the label counts.
        let no_name = cri_container("c-no-name", "web", "u1", "app")
            .created(30)
            .without_label(labels::CONTAINER_NAME);
        let sandboxes = || vec![cri_sandbox("s1", "web", "u1")];

        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(sandboxes(), vec![labelled, no_uid.clone(), no_name.clone()]),
        );
        assert_eq!(runtime_id(&view, "web", "app"), Some("c-ok"));

        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(sandboxes(), vec![no_uid, no_name]),
        );
        assert_eq!(runtime_id(&view, "web", "app"), None);
    }

    #[test]
    fn a_plain_pod_claims_the_containers_of_its_uid_whatever_their_namespace_and_name_labels_say() {
        // Only a mirror pod's runtime UID needs vouching for; a plain pod's is its API UID.
        let unlabelled = cri_container("c1", "web", "u1", "app")
            .without_label(labels::POD_NAMESPACE)
            .labelled(labels::POD_NAME, "someone-else");
        let sandbox = cri_sandbox("s1", "other-name", "u1").in_namespace("other-ns");
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(vec![sandbox], vec![unlabelled]),
        );
        assert_eq!(runtime_id(&view, "web", "app"), Some("c1"));
        assert_eq!(pod_in(&view, "web").sandbox_id.as_deref(), Some("s1"));
    }

    #[test]
    fn runtime_containers_whose_name_is_not_in_the_spec_are_not_shown() {
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(
                vec![cri_sandbox("s1", "web", "u1")],
                vec![
                    cri_container("c-app", "web", "u1", "app"),
                    cri_container("c-removed", "web", "u1", "removed").created(50),
                ],
            ),
        );
        let pod = pod_in(&view, "web");
        let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app"]);
        assert_eq!(runtime_id(&view, "web", "app"), Some("c-app"));
    }

    #[test]
    fn a_pod_without_a_spec_has_no_containers_but_still_gets_its_sandbox() {
        let web = api_pod("web", "u1", json!({"spec": null}));
        let view = join(
            "n",
            &[web],
            &snapshot_of(
                vec![cri_sandbox("s1", "web", "u1")],
                vec![cri_container("c1", "web", "u1", "app")],
            ),
        );
        let pod = pod_in(&view, "web");
        assert!(pod.containers.is_empty());
        assert_eq!(pod.sandbox_id.as_deref(), Some("s1"));
        assert!(view.unmatched_sandboxes.is_empty());
    }

    // ---- Attempts: which runtime container of a name is shown ----

    #[test]
    fn the_newest_container_of_a_name_is_shown_with_its_own_attempt_and_restart_count() {
        let old = cri_container("c-old", "web", "u1", "app")
            .created(10)
            .attempt(0)
            .in_state(ContainerState::ContainerExited as i32)
            .annotated(labels::CONTAINER_RESTART_COUNT, "0");
        let new = cri_container("c-new", "web", "u1", "app")
            .created(20)
            .attempt(1)
            .annotated(labels::CONTAINER_RESTART_COUNT, "1");
        // Whatever order the runtime lists them in.
        for containers in [vec![old.clone(), new.clone()], vec![new, old]] {
            let view = join(
                "n",
                &[api_pod("web", "u1", json!({}))],
                &snapshot_of(vec![cri_sandbox("s1", "web", "u1")], containers),
            );
            let pod = pod_in(&view, "web");
            assert_eq!(pod.containers.len(), 1, "one view per spec container");
            let app = runtime_in(&view, "web", "app").expect("joined");
            assert_eq!(app.id, "c-new");
            assert_eq!(app.attempt, 1);
            assert_eq!(app.state, RuntimeState::Running);
            assert_eq!(app.restart_count, Some(1));
            assert!(container_in(pod, "app").last_restart.is_none());
        }
    }

    #[test]
    fn creation_time_outranks_attempt_so_the_first_container_of_a_recreated_sandbox_wins() {
        // The sandbox was recreated: kubelet started counting attempts again at 0.
        let before = cri_container("c-before", "web", "u1", "app")
            .in_sandbox("s-old")
            .created(10)
            .attempt(3)
            .in_state(ContainerState::ContainerExited as i32);
        let after = cri_container("c-after", "web", "u1", "app")
            .in_sandbox("s-new")
            .created(20)
            .attempt(0);
        for containers in [vec![before.clone(), after.clone()], vec![after, before]] {
            let view = join(
                "n",
                &[api_pod("web", "u1", json!({}))],
                &snapshot_of(
                    vec![
                        cri_sandbox("s-old", "web", "u1").not_ready(),
                        cri_sandbox("s-new", "web", "u1").created(15),
                    ],
                    containers,
                ),
            );
            let app = runtime_in(&view, "web", "app").expect("joined");
            assert_eq!(app.id, "c-after");
            assert_eq!(app.attempt, 0);
        }
    }

    #[test]
    fn equal_creation_times_are_broken_by_the_higher_attempt() {
        let first = cri_container("c-first", "web", "u1", "app")
            .created(10)
            .attempt(1);
        let second = cri_container("c-second", "web", "u1", "app")
            .created(10)
            .attempt(2);
        for containers in [vec![first.clone(), second.clone()], vec![second, first]] {
            let view = join(
                "n",
                &[api_pod("web", "u1", json!({}))],
                &snapshot_of(vec![cri_sandbox("s1", "web", "u1")], containers),
            );
            assert_eq!(runtime_id(&view, "web", "app"), Some("c-second"));
        }
    }

    #[test]
    fn the_newest_container_may_come_from_an_older_sandbox_than_the_one_shown() {
        // The sandbox was just recreated and has no `app` yet: the old sandbox's exited `app`
        // is still the newest `app` (the view does not say which sandbox it ran in).
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(
                vec![
                    cri_sandbox("s-old", "web", "u1").not_ready(),
                    cri_sandbox("s-new", "web", "u1").created(30),
                ],
                vec![
                    cri_container("c-old", "web", "u1", "app")
                        .in_sandbox("s-old")
                        .created(10)
                        .in_state(ContainerState::ContainerExited as i32),
                ],
            ),
        );
        let pod = pod_in(&view, "web");
        assert_eq!(pod.sandbox_id.as_deref(), Some("s-new"));
        assert!(pod.sandbox_ready);
        let app = runtime_in(&view, "web", "app").expect("joined");
        assert_eq!(app.id, "c-old");
        assert_eq!(app.state, RuntimeState::Exited);
    }

    // ---- States and times ----

    #[test]
    fn cri_container_states_map_to_runtime_states_and_unknown_values_to_unknown() {
        let cases = [
            (
                ContainerState::ContainerCreated as i32,
                RuntimeState::Created,
            ),
            (
                ContainerState::ContainerRunning as i32,
                RuntimeState::Running,
            ),
            (ContainerState::ContainerExited as i32, RuntimeState::Exited),
            (
                ContainerState::ContainerUnknown as i32,
                RuntimeState::Unknown,
            ),
            (42, RuntimeState::Unknown),
            (-1, RuntimeState::Unknown),
        ];
        for (state, expected) in cases {
            let view = join(
                "n",
                &[api_pod("web", "u1", json!({}))],
                &snapshot_of(
                    vec![cri_sandbox("s1", "web", "u1")],
                    vec![cri_container("c1", "web", "u1", "app").in_state(state)],
                ),
            );
            let app = runtime_in(&view, "web", "app").expect("joined whatever its state");
            assert_eq!(app.state, expected, "CRI state {state}");
        }
    }

    #[test]
    fn container_times_come_from_the_snapshot_and_the_creation_time_falls_back_to_the_listing() {
        let web = api_pod(
            "web",
            "u1",
            json!({"spec": {"containers": [{"name": "app"}, {"name": "side"}, {"name": "log"}]}}),
        );
        let mut snapshot = snapshot_of(
            vec![cri_sandbox("s1", "web", "u1")],
            vec![
                cri_container("c-app", "web", "u1", "app")
                    .created(100)
                    .in_state(ContainerState::ContainerExited as i32),
                cri_container("c-side", "web", "u1", "side").created(200),
                cri_container("c-log", "web", "u1", "log").created(300),
            ],
        );
        let exited = ContainerTimes {
            created_at: 0,
            started_at: 110,
            finished_at: 120,
            exit_code: Some(137),
        };
        let running = ContainerTimes {
            created_at: 205,
            started_at: 210,
            finished_at: 0,
            exit_code: None,
        };
        snapshot.times = Arc::new(HashMap::from([
            ("c-app".to_owned(), exited),
            ("c-side".to_owned(), running.clone()),
        ]));
        let view = join("n", &[web], &snapshot);

        let app = runtime_in(&view, "web", "app").expect("joined");
        assert_eq!(app.state, RuntimeState::Exited);
        assert_eq!(
            app.times,
            ContainerTimes {
                created_at: 100,
                started_at: 110,
                finished_at: 120,
                exit_code: Some(137),
            }
        );
        // ContainerStatus's own creation time is kept when it has one.
        assert_eq!(
            runtime_in(&view, "web", "side").expect("joined").times,
            running
        );
        // Not asked yet: only the listing's creation time.
        assert_eq!(
            runtime_in(&view, "web", "log").expect("joined").times,
            ContainerTimes {
                created_at: 300,
                ..Default::default()
            }
        );
    }

    #[test]
    fn the_container_id_is_prefixed_with_the_runtime_name_or_unknown_when_the_runtime_is_not_known()
    {
        let objects = || {
            (
                vec![cri_sandbox("s1", "web", "u1")],
                vec![cri_container("c1", "web", "u1", "app")],
            )
        };
        let (sandboxes, containers) = objects();
        let mut snapshot = snapshot_of(sandboxes, containers);
        snapshot.runtime = None;
        let view = join("n", &[api_pod("web", "u1", json!({}))], &snapshot);
        assert_eq!(view.runtime, None);
        assert_eq!(
            runtime_in(&view, "web", "app")
                .expect("joined")
                .container_id,
            "unknown://c1"
        );

        let (sandboxes, containers) = objects();
        let mut snapshot = snapshot_of(sandboxes, containers);
        snapshot.runtime = Some(RuntimeInfo {
            runtime_name: "cri-o".into(),
            runtime_version: "1.30.0".into(),
            runtime_api_version: "v1".into(),
        });
        let view = join("n", &[api_pod("web", "u1", json!({}))], &snapshot);
        assert_eq!(view.runtime.as_deref(), Some("cri-o 1.30.0"));
        assert_eq!(
            runtime_in(&view, "web", "app")
                .expect("joined")
                .container_id,
            "cri-o://c1"
        );
    }

    #[test]
    fn a_container_listed_without_an_image_has_an_empty_image() {
        let mut bare = cri_container("c1", "web", "u1", "app");
        bare.image = None;
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(vec![cri_sandbox("s1", "web", "u1")], vec![bare]),
        );
        assert_eq!(runtime_in(&view, "web", "app").expect("joined").image, "");
    }

    // ---- Sandboxes ----

    #[test]
    fn the_newest_sandbox_is_the_pods_and_decides_its_readiness_even_when_not_ready() {
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(
                vec![
                    cri_sandbox("s-new", "web", "u1").created(5).not_ready(),
                    cri_sandbox("s-old", "web", "u1").created(1),
                ],
                vec![],
            ),
        );
        let pod = pod_in(&view, "web");
        assert_eq!(pod.sandbox_id.as_deref(), Some("s-new"));
        assert!(!pod.sandbox_ready, "an older ready sandbox does not count");
        assert!(
            view.unmatched_sandboxes.is_empty(),
            "older sandboxes of a listed pod are not unmatched"
        );

        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(
                vec![
                    cri_sandbox("s-old", "web", "u1").created(1).not_ready(),
                    cri_sandbox("s-new", "web", "u1").created(5),
                ],
                vec![],
            ),
        );
        let pod = pod_in(&view, "web");
        assert_eq!(pod.sandbox_id.as_deref(), Some("s-new"));
        assert!(pod.sandbox_ready);
    }

    #[test]
    fn a_sandbox_without_a_pod_uid_label_is_unmatched_even_if_its_metadata_names_a_pod() {
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(
                vec![
                    cri_sandbox("s1", "web", "u1").without_label(labels::POD_UID),
                    cri_sandbox("s-bare", "x", "y")
                        .without_label(labels::POD_UID)
                        .without_metadata()
                        .not_ready(),
                ],
                vec![],
            ),
        );
        assert_eq!(pod_in(&view, "web").sandbox_id, None);
        // Sorted by namespace first: the one without metadata has an empty one.
        assert_eq!(unmatched_ids(&view), ["s-bare", "s1"]);
        let bare = &view.unmatched_sandboxes[0];
        assert_eq!(
            (
                bare.namespace.as_str(),
                bare.name.as_str(),
                bare.uid.as_str()
            ),
            ("", "", "")
        );
        assert!(!bare.ready);
        let labelless = &view.unmatched_sandboxes[1];
        assert_eq!(
            (
                labelless.namespace.as_str(),
                labelless.name.as_str(),
                labelless.uid.as_str()
            ),
            (NS, "web", "u1")
        );
        assert!(labelless.ready);
    }

    #[test]
    fn pods_are_sorted_by_namespace_then_name_and_unmatched_sandboxes_by_namespace_name_then_id() {
        let pods = [
            api_pod("zeta", "u-1", json!({"metadata": {"namespace": "b"}})),
            api_pod("web", "u-2", json!({"metadata": {"namespace": "a"}})),
            api_pod("alpha", "u-3", json!({"metadata": {"namespace": "b"}})),
        ];
        let snapshot = snapshot_of(
            vec![
                cri_sandbox("s-2", "p", "gone-1").in_namespace("x"),
                cri_sandbox("s-1", "p", "gone-2").in_namespace("x"),
                cri_sandbox("s-3", "o", "gone-3").in_namespace("x"),
                cri_sandbox("s-0", "q", "gone-4").in_namespace("a"),
            ],
            vec![],
        );
        let view = join("n", &pods, &snapshot);
        let order: Vec<(&str, &str)> = view
            .pods
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(order, [("a", "web"), ("b", "alpha"), ("b", "zeta")]);
        assert_eq!(unmatched_ids(&view), ["s-0", "s-3", "s-1", "s-2"]);
    }

    // ---- Init and ephemeral containers, statuses ----

    #[test]
    fn init_regular_and_ephemeral_containers_are_listed_in_that_order_with_kind_and_spec_index() {
        let pod = api_pod(
            "web",
            "u1",
            json!({"spec": {
                "initContainers": [{"name": "setup"}, {"name": "migrate"}],
                "containers": [{"name": "app"}, {"name": "side"}],
                "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
            }}),
        );
        let snapshot = snapshot_of(
            vec![cri_sandbox("s1", "web", "u1")],
            vec![
                cri_container("c-setup", "web", "u1", "setup")
                    .created(1)
                    .in_state(ContainerState::ContainerExited as i32),
                cri_container("c-app", "web", "u1", "app").created(5),
                cri_container("c-debug", "web", "u1", "debug").created(9),
            ],
        );
        let view = join("n", &[pod], &snapshot);
        let pod = pod_in(&view, "web");
        let listed: Vec<(&str, ContainerKind, Option<usize>)> = pod
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind, c.spec_index))
            .collect();
        assert_eq!(
            listed,
            [
                ("setup", ContainerKind::Init, Some(0)),
                ("migrate", ContainerKind::Init, Some(1)),
                ("app", ContainerKind::Regular, Some(0)),
                ("side", ContainerKind::Regular, Some(1)),
                ("debug", ContainerKind::Ephemeral, None),
            ]
        );
        // The spec index points into the list of the container's kind.
        for name in ["setup", "migrate", "app", "side"] {
            let container = container_in(pod, name);
            assert_eq!(
                pod.spec_of(container).map(CachedContainer::name),
                Some(name)
            );
        }
        assert!(pod.spec_of(container_in(pod, "debug")).is_none());

        assert_eq!(runtime_id(&view, "web", "setup"), Some("c-setup"));
        assert_eq!(
            runtime_in(&view, "web", "setup").expect("joined").state,
            RuntimeState::Exited
        );
        assert_eq!(runtime_id(&view, "web", "migrate"), None);
        assert_eq!(runtime_id(&view, "web", "app"), Some("c-app"));
        assert_eq!(runtime_id(&view, "web", "side"), None);
        assert_eq!(runtime_id(&view, "web", "debug"), Some("c-debug"));
    }

    #[test]
    fn container_statuses_come_from_the_pod_status_and_ephemeral_containers_have_none() {
        let pod = api_pod(
            "web",
            "u1",
            json!({
                "spec": {
                    "initContainers": [{"name": "setup"}],
                    "containers": [{"name": "app"}, {"name": "side"}],
                    "ephemeralContainers": [{"name": "debug"}],
                },
                "status": {
                    "containerStatuses": [
                        {"name": "app", "containerID": "containerd://c1", "ready": true,
                         "restartCount": 3, "resources": {"limits": {"cpu": "100m"}}},
                    ],
                    "initContainerStatuses": [
                        {"name": "setup", "ready": false, "restartCount": 1},
                    ],
                    "ephemeralContainerStatuses": [
                        {"name": "debug", "containerID": "containerd://c9", "ready": false,
                         "restartCount": 0},
                    ],
                },
            }),
        );
        // The statuses are the API's: no runtime objects needed.
        let view = join("n", &[pod], &snapshot_of(vec![], vec![]));
        let pod = pod_in(&view, "web");
        assert_eq!(
            container_in(pod, "app").status,
            Some(StatusView {
                container_id: "containerd://c1".into(),
                ready: true,
                restart_count: 3,
                reports_resources: true,
                running: false,
            })
        );
        assert_eq!(
            container_in(pod, "setup").status,
            Some(StatusView {
                container_id: String::new(),
                ready: false,
                restart_count: 1,
                reports_resources: false,
                running: false,
            })
        );
        assert_eq!(container_in(pod, "side").status, None);
        assert_eq!(container_in(pod, "debug").status, None);
    }

    // ---- Static, mirror and terminating pods ----

    #[test]
    fn a_static_pod_seen_through_its_mirror_is_joined_by_the_uid_its_mirror_annotation_names() {
        let mirror = api_pod(
            "etcd-n",
            "api-uid",
            json!({"metadata": {"annotations": {
                "kubernetes.io/config.mirror": "static-hash",
                "kubernetes.io/config.source": "file",
            }}}),
        );
        let snapshot = snapshot_of(
            vec![cri_sandbox("s1", "etcd-n", "static-hash")],
            vec![
                cri_container("c1", "etcd-n", "static-hash", "app"),
                // Labelled with the mirror's API UID, which kubelet never uses: not joined.
                cri_container("c-api", "etcd-n", "api-uid", "app").created(50),
            ],
        );
        let view = join("n", &[mirror], &snapshot);
        let pod = pod_in(&view, "etcd-n");
        assert!(pod.static_pod);
        assert_eq!(pod.uid, "api-uid");
        assert_eq!(pod.runtime_uid, "static-hash");
        let runtime_labels = pod.runtime_labels();
        assert_eq!(runtime_labels.uid, "static-hash");
        assert_eq!(runtime_labels.namespace, NS);
        assert_eq!(runtime_labels.name, "etcd-n");
        assert_eq!(pod.event_ref().uid, "api-uid", "events name the API object");
        assert_eq!(pod.sandbox_id.as_deref(), Some("s1"));
        assert_eq!(runtime_id(&view, "etcd-n", "app"), Some("c1"));
        assert!(view.unmatched_sandboxes.is_empty());
    }

    #[test]
    fn a_mirror_pod_ignores_runtime_objects_of_its_uid_that_do_not_carry_its_namespace_and_name() {
        let mirror = api_pod(
            "etcd-n",
            "api-uid",
            json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "static-hash"}}}),
        );
        let snapshot = snapshot_of(
            vec![
                cri_sandbox("s-no-meta", "etcd-n", "static-hash").without_metadata(),
                cri_sandbox("s-elsewhere", "etcd-n", "static-hash").in_namespace("other"),
            ],
            vec![
                cri_container("c-no-ns", "etcd-n", "static-hash", "app")
                    .without_label(labels::POD_NAMESPACE),
                cri_container("c-no-name", "etcd-n", "static-hash", "app")
                    .without_label(labels::POD_NAME),
                cri_container("c-other-name", "etcd-n", "static-hash", "app")
                    .labelled(labels::POD_NAME, "etcd-m"),
            ],
        );
        let view = join("n", &[mirror], &snapshot);
        let pod = pod_in(&view, "etcd-n");
        assert!(pod.static_pod);
        assert_eq!(pod.sandbox_id, None);
        assert!(!pod.sandbox_ready);
        assert_eq!(runtime_id(&view, "etcd-n", "app"), None);
    }

    #[test]
    fn a_config_source_other_than_api_marks_a_pod_static_but_it_keeps_its_own_uid_for_the_runtime()
    {
        let pods = [
            api_pod(
                "from-file",
                "u-file",
                json!({"metadata": {"annotations": {"kubernetes.io/config.source": "file"}}}),
            ),
            api_pod(
                "from-api",
                "u-api",
                json!({"metadata": {"annotations": {"kubernetes.io/config.source": "api"}}}),
            ),
            api_pod("plain", "u-plain", json!({})),
        ];
        let snapshot = snapshot_of(
            vec![cri_sandbox("s-file", "from-file", "u-file")],
            vec![cri_container("c-file", "from-file", "u-file", "app")],
        );
        let view = join("n", &pods, &snapshot);
        let from_file = pod_in(&view, "from-file");
        assert!(from_file.static_pod);
        assert_eq!(from_file.runtime_uid, "u-file");
        assert_eq!(runtime_id(&view, "from-file", "app"), Some("c-file"));
        assert!(!pod_in(&view, "from-api").static_pod);
        assert!(!pod_in(&view, "plain").static_pod);
    }

    #[test]
    fn a_pod_with_a_deletion_timestamp_is_terminating_and_keeps_its_runtime_objects() {
        let dying = api_pod(
            "web",
            "u1",
            json!({"metadata": {
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30,
            }}),
        );
        let view = join(
            "n",
            &[dying, api_pod("alive", "u2", json!({}))],
            &snapshot_of(
                vec![cri_sandbox("s1", "web", "u1").not_ready()],
                vec![
                    cri_container("c1", "web", "u1", "app")
                        .in_state(ContainerState::ContainerExited as i32),
                ],
            ),
        );
        let pod = pod_in(&view, "web");
        assert!(pod.terminating);
        assert_eq!(pod.sandbox_id.as_deref(), Some("s1"));
        assert!(!pod.sandbox_ready);
        assert_eq!(
            runtime_in(&view, "web", "app").expect("joined").state,
            RuntimeState::Exited
        );
        assert!(!pod_in(&view, "alive").terminating);
    }

    #[test]
    fn containers_of_an_earlier_pod_with_the_same_name_but_another_uid_are_not_joined() {
        // A StatefulSet pod deleted and created again: same namespace and name, a new UID.
        let earlier_sandbox = || cri_sandbox("s-old", "web", "u-old").not_ready();
        let earlier_container = || {
            cri_container("c-old", "web", "u-old", "app")
                .in_sandbox("s-old")
                .in_state(ContainerState::ContainerExited as i32)
        };

        // Before the new pod has anything in the runtime.
        let view = join(
            "n",
            &[api_pod("web", "u-new", json!({}))],
            &snapshot_of(vec![earlier_sandbox()], vec![earlier_container()]),
        );
        let pod = pod_in(&view, "web");
        assert_eq!(pod.sandbox_id, None);
        assert_eq!(runtime_id(&view, "web", "app"), None);
        assert_eq!(unmatched_ids(&view), ["s-old"]);
        assert_eq!(view.unmatched_sandboxes[0].uid, "u-old");

        // Once it has its own, even older ones than the earlier incarnation's.
        let view = join(
            "n",
            &[api_pod("web", "u-new", json!({}))],
            &snapshot_of(
                vec![
                    earlier_sandbox().created(50),
                    cri_sandbox("s-new", "web", "u-new"),
                ],
                vec![
                    earlier_container().created(60),
                    cri_container("c-new", "web", "u-new", "app").in_sandbox("s-new"),
                ],
            ),
        );
        assert_eq!(pod_in(&view, "web").sandbox_id.as_deref(), Some("s-new"));
        assert_eq!(runtime_id(&view, "web", "app"), Some("c-new"));
        assert_eq!(unmatched_ids(&view), ["s-old"]);
    }

    // ---- Stored annotations ----

    #[test]
    fn stored_hashes_and_the_restart_count_are_read_from_the_container_annotations() {
        let container = cri_container("c1", "web", "u1", "app")
            .annotated(labels::CONTAINER_HASH, "a1b2c3d4")
            .annotated(labels::CONTAINER_HASH_WITHOUT_RESOURCES, "e5f6a7b8")
            .annotated(labels::CONTAINER_RESTART_COUNT, "4")
            // Labels are not annotations: a hash in a label is not read.
            .labelled(labels::CONTAINER_HASH, "ffffffff");
        let view = join(
            "n",
            &[api_pod("web", "u1", json!({}))],
            &snapshot_of(vec![cri_sandbox("s1", "web", "u1")], vec![container]),
        );
        let app = runtime_in(&view, "web", "app").expect("joined");
        assert_eq!(app.stored_hash.as_deref(), Some("a1b2c3d4"));
        assert_eq!(
            app.stored_hash_without_resources.as_deref(),
            Some("e5f6a7b8")
        );
        assert_eq!(app.restart_count, Some(4));
    }

    #[test]
    fn stored_hashes_are_kept_as_written_even_when_malformed() {
        let pod = api_pod(
            "web",
            "u1",
            json!({"spec": {"containers": [{"name": "app"}, {"name": "side"}, {"name": "log"}]}}),
        );
        let view = join(
            "n",
            &[pod],
            &snapshot_of(
                vec![cri_sandbox("s1", "web", "u1")],
                vec![
                    cri_container("c-app", "web", "u1", "app")
                        .annotated(labels::CONTAINER_HASH, "not-a-hash"),
                    cri_container("c-side", "web", "u1", "side")
                        .annotated(labels::CONTAINER_HASH, "")
                        .annotated(labels::CONTAINER_HASH_WITHOUT_RESOURCES, " 12 "),
                    cri_container("c-log", "web", "u1", "log"),
                ],
            ),
        );
        let app = runtime_in(&view, "web", "app").expect("joined");
        assert_eq!(app.stored_hash.as_deref(), Some("not-a-hash"));
        assert_eq!(app.stored_hash_without_resources, None);
        let side = runtime_in(&view, "web", "side").expect("joined");
        assert_eq!(side.stored_hash.as_deref(), Some(""));
        assert_eq!(side.stored_hash_without_resources.as_deref(), Some(" 12 "));
        let log = runtime_in(&view, "web", "log").expect("joined");
        assert_eq!(log.stored_hash, None);
        assert_eq!(log.stored_hash_without_resources, None);
    }

    #[test]
    fn a_restart_count_annotation_that_is_not_a_u32_is_read_as_unknown() {
        let cases: &[(&str, Option<u32>)] = &[
            ("0", Some(0)),
            ("7", Some(7)),
            ("4294967295", Some(u32::MAX)),
            ("", None),
            ("abc", None),
            ("-1", None),
            (" 2", None),
            ("2.0", None),
            ("4294967296", None),
        ];
        for &(value, expected) in cases {
            let container = cri_container("c1", "web", "u1", "app")
                .annotated(labels::CONTAINER_RESTART_COUNT, value);
            let view = join(
                "n",
                &[api_pod("web", "u1", json!({}))],
                &snapshot_of(vec![cri_sandbox("s1", "web", "u1")], vec![container]),
            );
            let app = runtime_in(&view, "web", "app").expect("joined");
            assert_eq!(app.restart_count, expected, "annotation {value:?}");
        }
    }

    // ---- What comes from the API pod ----

    #[test]
    fn the_pod_ip_and_ready_time_come_from_the_api_status() {
        let pods = [
            api_pod(
                "ready",
                "u1",
                json!({"status": {
                    "podIP": "10.1.2.3",
                    "conditions": [
                        {"type": "PodScheduled", "status": "True",
                         "lastTransitionTime": "2026-01-01T00:00:01Z"},
                        {"type": "Ready", "status": "True",
                         "lastTransitionTime": "2026-01-01T00:00:05Z"},
                    ],
                }}),
            ),
            api_pod(
                "unready",
                "u2",
                json!({"status": {
                    "podIP": "10.1.2.4",
                    "conditions": [
                        {"type": "Ready", "status": "False",
                         "lastTransitionTime": "2026-01-01T00:00:07Z"},
                    ],
                }}),
            ),
            api_pod("pending", "u3", json!({})),
        ];
        // A ready sandbox does not make up an IP or a ready time.
        let snapshot = snapshot_of(vec![cri_sandbox("s3", "pending", "u3")], vec![]);
        let view = join("n", &pods, &snapshot);

        let ready = pod_in(&view, "ready");
        assert_eq!(ready.pod_ip.as_deref(), Some("10.1.2.3"));
        assert_eq!(ready.ready_since.as_deref(), Some("2026-01-01T00:00:05Z"));
        let unready = pod_in(&view, "unready");
        assert_eq!(unready.pod_ip.as_deref(), Some("10.1.2.4"));
        assert_eq!(unready.ready_since, None);
        let pending = pod_in(&view, "pending");
        assert!(pending.sandbox_ready);
        assert_eq!(pending.pod_ip, None);
        assert_eq!(pending.ready_since, None);
    }

    // ---- Suspected bug ----

    /// A pod whose mirror annotation is forged does not get the static pod's sandbox (the
    /// namespace/name check refuses it); the sandbox is still shown, as unmatched.
    #[test]
    fn a_sandbox_a_forged_mirror_annotation_cannot_claim_is_still_listed_as_unmatched() {
        let (sandbox, container) = runtime_of("kube-system", "etcd-n", "static-hash", "c1");
        let snapshot = RuntimeSnapshot {
            sandboxes: vec![Arc::new(sandbox)],
            containers: vec![Arc::new(container)],
            ..Default::default()
        };
        let impostor = pod("team-a", "x", "api-uid-2", Some("static-hash"));
        let view = join("n", &[impostor], &snapshot);
        assert_eq!(pod_in(&view, "x").sandbox_id, None);
        assert_eq!(unmatched_ids(&view), ["sandbox-c1"]);
    }
}
