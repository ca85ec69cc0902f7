//! The agent's view of the Kubernetes API: a client built from a kubeconfig or the in-cluster
//! configuration, with request metrics and a client-side rate limit, and reflectors for the pods
//! bound to this node and for the node object itself.

pub mod events;
mod layer;
pub mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{WatchStreamExt, watcher};
use ::kube::{Api, Client};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::resize::resources::Resources;
pub use layer::ApiLayer;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cannot read kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("no kubeconfig given and not running in a cluster: {0}")]
    InCluster(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
}

/// Builds the API client: the kubeconfig at `kubeconfig` when given, else the in-cluster
/// service account. Every request goes through [`ApiLayer`] (metrics, rate limit).
pub async fn client(
    kubeconfig: Option<&Path>,
    metrics: Metrics,
    qps: u32,
    burst: u32,
) -> Result<Client, KubeError> {
    let config = match kubeconfig {
        Some(path) => {
            let error = |message: String| KubeError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
            for (file, mode) in exposed_credentials(path, &kubeconfig) {
                tracing::warn!(
                    file = %file.display(),
                    mode = format!("{mode:04o}"),
                    "a file with API credentials is accessible to group or others; chmod 0600 it"
                );
            }
            ::kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| error(e.to_string()))?
        }
        None => ::kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))?,
    };
    let builder = ::kube::client::ClientBuilder::try_from(config)
        .map_err(|e| KubeError::Client(e.to_string()))?;
    Ok(builder
        .with_layer(&ApiLayer::new(metrics, qps, burst))
        .build())
}

/// The kubeconfig and the secret files it names (client keys, token files) whose permissions
/// let group or others read or write them, with their modes. Certificates are public: not listed.
pub fn exposed_credentials(path: &Path, kubeconfig: &Kubeconfig) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let named = kubeconfig.auth_infos.iter().flat_map(|named| {
        let auth = named.auth_info.as_ref();
        let key = auth.and_then(|a| a.client_key.clone());
        let token = auth.and_then(|a| a.token_file.clone());
        [key, token].into_iter().flatten()
    });
    std::iter::once(path.to_owned())
        .chain(named.map(|file| dir.join(file)))
        .filter_map(|file| {
            let mode = std::fs::metadata(&file).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then_some((file, mode))
        })
        .collect()
}

/// The pods bound to this node, kept current by a watch; `changes` ticks on every change.
#[derive(Clone)]
pub struct NodePods {
    pub store: Store<Pod>,
    pub changes: watch::Receiver<u64>,
}

/// The node object (for the kubelet's version), kept current by a watch; `changes` ticks on
/// every change.
#[derive(Clone)]
pub struct NodeObject {
    pub store: Store<Node>,
    pub changes: watch::Receiver<u64>,
}

impl NodeObject {
    /// The kubelet version the node reports in `status.nodeInfo.kubeletVersion`.
    pub fn kubelet_version(&self) -> Option<String> {
        let nodes = self.store.state();
        let node = nodes.first()?;
        let version = node
            .status
            .as_ref()?
            .node_info
            .as_ref()?
            .kubelet_version
            .clone();
        (!version.is_empty()).then_some(version)
    }

    /// `status.allocatable` cpu and memory, in the request fields of [`Resources`]; a value
    /// that is missing or cannot be read is left unset (and so not checked).
    pub fn allocatable(&self) -> Option<Resources> {
        let nodes = self.store.state();
        let allocatable = nodes.first()?.status.as_ref()?.allocatable.as_ref()?;
        let mut resources = Resources::default();
        for key in ["cpu", "memory"] {
            let Some(quantity) = allocatable.get(key) else {
                continue;
            };
            let one = serde_json::json!({ "requests": { key: quantity } });
            match Resources::from_requirements(&one) {
                Ok(r) => {
                    resources.cpu_request = resources.cpu_request.or(r.cpu_request);
                    resources.memory_request = resources.memory_request.or(r.memory_request);
                }
                // Read on every pass of the main loop: debug, not a warning each second.
                Err(err) => {
                    tracing::debug!(error = %err, "the node's allocatable {key} cannot be read")
                }
            }
        }
        Some(resources)
    }
}

/// Starts watching the pods whose `spec.nodeName` is `node_name`. The initial list may be served
/// from the API server's watch cache (resourceVersion "0"): on a fleet of thousands of nodes
/// that keeps the agents off etcd. The watch backs off on errors, resumes from its last
/// resourceVersion, and relists on 410 Gone; the store survives all of it.
pub fn watch_node_pods(
    client: Client,
    node_name: &str,
    metrics: Metrics,
    startup_jitter: Duration,
) -> (NodePods, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .any_semantic();
    // kube-rs drops resourceVersion=0 from paged lists; one node's pods fit in one page.
    config.page_size = None;
    let api: Api<Pod> = Api::all(client);
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim_for_cache)
        .reflect(writer);
    let task = drive(stream, "pods", metrics, startup_jitter, Arc::new(tick));
    (
        NodePods {
            store: reader,
            changes,
        },
        task,
    )
}

/// Makes a pod small for the cache, which holds one for every pod of the node. Drops what no part
/// of the agent reads: managedFields (often the largest part), the scheduler's fields, and the
/// status fields kubelet writes for humans. Kept: every container spec (hashed whole),
/// conditions, podIP, resize, and per container status name, containerID, ready, restartCount
/// and resources. Lists are cut to their length: a decoded list of three 2 KB containers has
/// room for four.
fn trim_for_cache(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    shrink(&mut pod.metadata.owner_references);
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.tolerations = None;
        spec.affinity = None;
        spec.topology_spread_constraints = None;
        spec.containers.shrink_to_fit();
        shrink(&mut spec.init_containers);
        shrink(&mut spec.ephemeral_containers);
        for container in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            shrink(&mut container.command);
            shrink(&mut container.args);
            shrink(&mut container.env);
            shrink(&mut container.env_from);
            shrink(&mut container.ports);
            shrink(&mut container.volume_mounts);
        }
    }
    if let Some(status) = pod.status.as_mut() {
        status.host_ips = None;
        status.pod_ips = None;
        status.start_time = None;
        shrink(&mut status.conditions);
        shrink(&mut status.container_statuses);
        shrink(&mut status.init_container_statuses);
        for container in [
            &mut status.container_statuses,
            &mut status.init_container_statuses,
            &mut status.ephemeral_container_statuses,
        ]
        .into_iter()
        .flatten()
        .flatten()
        {
            container.image = String::new();
            container.image_id = String::new();
            container.state = None;
            container.last_state = None;
            container.allocated_resources = None;
            container.allocated_resources_status = None;
            container.volume_mounts = None;
            container.user = None;
        }
    }
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

/// Starts watching this node's own Node object.
pub fn watch_node(
    client: Client,
    node_name: &str,
    metrics: Metrics,
) -> (NodeObject, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("metadata.name={node_name}"))
        .any_semantic();
    config.page_size = None;
    let api: Api<Node> = Api::all(client);
    let stream = watcher(api, config).default_backoff().reflect(writer);
    let task = drive(stream, "nodes", metrics, Duration::ZERO, Arc::new(tick));
    (
        NodeObject {
            store: reader,
            changes,
        },
        task,
    )
}

async fn drive<S, K>(
    stream: S,
    resource: &'static str,
    metrics: Metrics,
    startup_jitter: Duration,
    tick: Arc<watch::Sender<u64>>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    if !startup_jitter.is_zero() {
        tokio::time::sleep(startup_jitter.mul_f64(rand::random_range(0.0..1.0))).await;
    }
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => {
                tick.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(err) => {
                metrics.count_watch_restart(resource);
                tracing::warn!(resource, error = %err, "watch failed; backing off and resuming");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_cached_pod_keeps_what_the_agent_reads() {
        let status = |name: &str| {
            serde_json::json!({"name": name, "image": "img", "imageID": "sha256:1",
                "containerID": format!("containerd://{name}"), "ready": true, "started": true,
                "restartCount": 2, "state": {"running": {"startedAt": "2026-11-24T17:00:00Z"}},
                "lastState": {"terminated": {"exitCode": 0}}, "allocatedResources": {"cpu": "10m"},
                "resources": {"limits": {"cpu": "100m"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                "user": {"linux": {"uid": 0, "gid": 0}}})
        };
        let container = serde_json::json!({"name": "app", "image": "img",
            "resources": {"limits": {"cpu": "100m"}}, "env": [{"name": "V", "value": "1"}]});
        let full = serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"nodeName": "node",
                "containers": [container.clone(), {"name": "side", "image": "img"}, {"name": "log", "image": "img"}],
                "initContainers": [{"name": "init", "image": "img"}],
                "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "k"}],
                "affinity": {"nodeAffinity": {}}, "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
                "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}], "resize": "InProgress",
                "startTime": "2026-11-24T17:00:00Z",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-11-24T17:00:00Z"}],
                "containerStatuses": [status("app"), status("side"), status("log")], "initContainerStatuses": [status("init")]}});
        let mut pod: Pod = serde_json::from_str(&full.to_string()).expect("pod");
        trim_for_cache(&mut pod);
        // Decoded lists have room to spare; cached ones do not.
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.containers.capacity(), spec.containers.len());
        let status = pod.status.as_ref().expect("status");
        for list in [&status.container_statuses, &status.init_container_statuses] {
            let list = list.as_ref().expect("statuses");
            assert_eq!(list.capacity(), list.len());
        }
        let kept = serde_json::to_value(&pod).expect("json");

        assert_eq!(kept["metadata"]["managedFields"], serde_json::Value::Null);
        assert_eq!(
            kept["metadata"]["annotations"],
            full["metadata"]["annotations"]
        );
        assert_eq!(kept["spec"]["containers"][0], container);
        assert_eq!(
            kept["spec"]["initContainers"],
            full["spec"]["initContainers"]
        );
        for unread in [
            "volumes",
            "tolerations",
            "affinity",
            "topologySpreadConstraints",
        ] {
            assert_eq!(kept["spec"][unread], serde_json::Value::Null, "{unread}");
        }
        for read in ["phase", "podIP", "hostIP", "resize", "conditions"] {
            assert_eq!(kept["status"][read], full["status"][read], "{read}");
        }
        for unread in ["podIPs", "hostIPs", "startTime"] {
            assert_eq!(kept["status"][unread], serde_json::Value::Null, "{unread}");
        }
        for list in ["containerStatuses", "initContainerStatuses"] {
            let (kept, full) = (&kept["status"][list][0], &full["status"][list][0]);
            for read in ["name", "containerID", "ready", "restartCount", "resources"] {
                assert_eq!(kept[read], full[read], "{list} {read}");
            }
            for unread in [
                "state",
                "lastState",
                "allocatedResources",
                "volumeMounts",
                "user",
            ] {
                assert_eq!(kept[unread], serde_json::Value::Null, "{list} {unread}");
            }
        }
    }

    #[test]
    fn credentials_open_to_others_are_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            path
        };
        let config = write(
            "kubeconfig",
            "apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    client-certificate: a.crt\n    client-key: a.key\n- name: b\n  user:\n    tokenFile: /nonexistent/token\n- name: c\n  user:\n    tokenFile: token\n",
            0o644,
        );
        write("a.crt", "cert", 0o644);
        write("a.key", "key", 0o600);
        let token = write("token", "secret", 0o640);
        let kubeconfig = Kubeconfig::read_from(&config).expect("kubeconfig");
        assert_eq!(
            exposed_credentials(&config, &kubeconfig),
            vec![(config.clone(), 0o644), (token, 0o640)]
        );
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::set_permissions(
            dir.path().join("token"),
            std::fs::Permissions::from_mode(0o400),
        )
        .expect("chmod");
        assert!(exposed_credentials(&config, &kubeconfig).is_empty());
    }
}
