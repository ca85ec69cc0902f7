//! The node view: the API's pods for this node joined with the runtime's sandboxes and containers
//! the way kubelet labels them (`io.kubernetes.pod.uid`, `io.kubernetes.container.name`), per
//! container: its runtime ID, state, restart count, stored hash(es) and CRI timestamps
//! (the labels: `docs/cri-labels.md`).

mod hashes;
mod restart;
mod runtime;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::cri::labels;
use crate::cri::proto::{Container, ContainerState, PodSandbox, PodSandboxState};
use crate::kube::{CachedContainer, CachedPod};
pub use hashes::{HashCache, HashCheck, UpgradeReport, UpgradeVerdict, annotate, upgrade_check};
pub use restart::{RestartTiming, Trigger};
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
    pub node_allocatable: Option<crate::resize::resources::Resources>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl ContainerView {
    /// This container's spec in `pod` (the API's pod it was joined from).
    pub fn spec_in<'p>(&self, pod: Option<&'p CachedPod>) -> Option<&'p CachedContainer> {
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
    pub fn spec_of(&self, container: &ContainerView) -> Option<&CachedContainer> {
        container.spec_in(self.api_pod.as_deref())
    }

    /// The labels kubelet gives this pod's containers, to check a container against.
    pub fn runtime_labels(&self) -> crate::cri::PodLabels<'_> {
        crate::cri::PodLabels {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.runtime_uid,
        }
    }

    /// The pod as events refer to it.
    pub fn event_ref(&self) -> crate::kube::events::PodRef {
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
    let mut sandboxes_by_uid: HashMap<&str, Vec<&PodSandbox>> = HashMap::new();
    for sandbox in &snapshot.sandboxes {
        if let Some(uid) = sandbox.labels.get(labels::POD_UID) {
            sandboxes_by_uid.entry(uid).or_default().push(sandbox);
        }
    }
    let mut containers_by_uid: HashMap<&str, Vec<&Container>> = HashMap::new();
    for container in &snapshot.containers {
        if let Some(uid) = container.labels.get(labels::POD_UID) {
            containers_by_uid.entry(uid).or_default().push(container);
        }
    }

    let mut matched_uids = std::collections::HashSet::new();
    let mut pod_views: Vec<PodView> = pods
        .iter()
        .map(|shared| {
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
            matched_uids.insert(runtime_uid.clone());
            let (namespace, name) = (
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            );
            // A mirror pod's runtime UID comes from its annotation, which whoever creates a
            // pod may set: its runtime objects must also carry its namespace and name, as the
            // static pod's do, or any pod could claim another's containers.
            let ours = |ns: Option<&str>, n: Option<&str>| {
                mirror_uid.is_none() || (ns == Some(namespace) && n == Some(name))
            };
            let sandbox = sandboxes_by_uid
                .get(runtime_uid.as_str())
                .into_iter()
                .flatten()
                .filter(|s| {
                    let meta = s.metadata.as_ref();
                    ours(
                        meta.map(|m| m.namespace.as_str()),
                        meta.map(|m| m.name.as_str()),
                    )
                })
                .max_by_key(|s| s.created_at);
            let runtime_containers: Vec<&Container> = containers_by_uid
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
                sandbox_ready: sandbox
                    .is_some_and(|s| s.state == PodSandboxState::SandboxReady as i32),
                ready_since: ready_since(pod),
                containers: container_views(pod, &runtime_containers, snapshot),
                api_pod: Some(shared.clone()),
            }
        })
        .collect();
    pod_views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut unmatched_sandboxes: Vec<UnmatchedSandbox> = snapshot
        .sandboxes
        .iter()
        .filter(|s| {
            s.labels
                .get(labels::POD_UID)
                .is_none_or(|uid| !matched_uids.contains(uid))
        })
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
    unmatched_sandboxes
        .sort_by(|a, b| (&a.namespace, &a.name, &a.id).cmp(&(&b.namespace, &b.name, &b.id)));

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
        unmatched_sandboxes,
    }
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
        // kubelet's newest container of a name is the one with the highest attempt; creation
        // time breaks ties (attempt resets when the sandbox is recreated).
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

    use super::*;
    use crate::cri::proto::{ContainerMetadata, PodSandboxMetadata};

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
}
