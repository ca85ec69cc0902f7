//! Shared pieces of the integration tests that talk to the real containerd brought up by
//! `tests/node/containerd.sh up` (the README's test command does that first). Those tests are
//! `#[ignore = "needs root and the test containerd: run tests/run-all.sh"]`: plain `cargo test`
//! skips them, `tests/run-all.sh` runs them with `--include-ignored`.
#![allow(dead_code)] // each test binary uses a different part

pub mod agent;
pub mod chaos;
pub mod cluster;
pub mod golden;
pub mod measure;
pub mod prometheus;
pub mod real;
pub mod sandbox;

use std::collections::HashMap;

use inplaced::cri::labels;
use inplaced::cri::proto::*;
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};

pub const TEST_IMAGE: &str = "localhost/busybox:local";

/// The endpoint of the test containerd: `$INPLACED_TEST_CRI_ENDPOINT`, else the script's default.
pub fn endpoint() -> CriEndpoint {
    let text = std::env::var("INPLACED_TEST_CRI_ENDPOINT")
        .unwrap_or_else(|_| "unix:///run/inplaced-test/containerd.sock".into());
    CriEndpoint::parse(&text).expect("INPLACED_TEST_CRI_ENDPOINT")
}

/// Runs `tests/node/containerd.sh <action>` (e.g. `stop-daemon`, `start-daemon`). Tests that stop
/// the shared containerd must be alone in their test binary.
pub fn containerd_script(action: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/containerd.sh");
    let status = std::process::Command::new(script)
        .arg(action)
        .status()
        .expect("run containerd.sh");
    assert!(status.success(), "containerd.sh {action} failed");
}

/// A client for the test containerd. The tests that use it are `#[ignore]`d ("needs root and the
/// test containerd"), so plain `cargo test` reports them as ignored; `tests/run-all.sh` runs them
/// (`--include-ignored`), and there a containerd that is not up fails them, never skips them.
pub fn client() -> CriClient {
    CriClient::new(CriConfig::new(endpoint()))
}

/// The cgroup parent under which test pods live (removed by `containerd.sh down`).
pub fn cgroup_root() -> String {
    std::env::var("INPLACED_TEST_CGROUP_ROOT").unwrap_or_else(|_| "inplaced-test".into())
}

/// Every ClusterRole of a shipped multi-document manifest (`packaging/kubernetes/<file>`), as JSON.
pub fn cluster_roles(file: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    let path = format!("{}/packaging/kubernetes/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let roles: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            let yaml = serde_yaml_ng::Value::deserialize(doc).expect("valid YAML");
            serde_json::to_value(yaml).expect("YAML as JSON")
        })
        .filter(|doc| doc["kind"] == "ClusterRole")
        .collect();
    assert!(!roles.is_empty(), "{path} has no ClusterRole");
    roles
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// A host-network pod sandbox created the way kubelet creates one.
pub struct TestPod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub sandbox_id: String,
    pub config: PodSandboxConfig,
}

impl TestPod {
    pub async fn run(client: &CriClient, prefix: &str) -> TestPod {
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            rand::random::<u32>(),
            rand::random::<u16>(),
            rand::random::<u16>() & 0xfff,
            rand::random::<u16>() & 0xfff,
            rand::random::<u64>() & 0xffff_ffff_ffff
        );
        Self::run_for(client, &unique(prefix), "inplaced-test", &uid, prefix).await
    }

    /// The sandbox of an API pod: same name, namespace and UID.
    pub async fn run_for(
        client: &CriClient,
        name: &str,
        namespace: &str,
        uid: &str,
        app: &str,
    ) -> TestPod {
        let (name, namespace, uid, prefix) = (
            name.to_string(),
            namespace.to_string(),
            uid.to_string(),
            app,
        );
        let mut sandbox_labels = HashMap::from([("app".to_string(), prefix.to_string())]);
        sandbox_labels.insert(labels::POD_NAME.into(), name.clone());
        sandbox_labels.insert(labels::POD_NAMESPACE.into(), namespace.clone());
        sandbox_labels.insert(labels::POD_UID.into(), uid.clone());
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.clone(),
                uid: uid.clone(),
                namespace: namespace.clone(),
                attempt: 0,
            }),
            // Host network: no CNI here. kubelet leaves the hostname empty for such pods.
            hostname: String::new(),
            labels: sandbox_labels,
            annotations: HashMap::from([("example.com/owner".to_string(), "tests".to_string())]),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: format!("/{}/kubepods/burstable/pod{uid}", cgroup_root()),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sandbox_id = client
            .run_pod_sandbox(config.clone())
            .await
            .expect("RunPodSandbox");
        TestPod {
            name,
            namespace,
            uid,
            sandbox_id,
            config,
        }
    }

    /// Creates and starts a container with kubelet's labels and annotations.
    pub async fn start_container(
        &self,
        client: &CriClient,
        name: &str,
        script: &str,
        stored_hash: &str,
    ) -> String {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: TEST_IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["/bin/sh".into(), "-c".into()],
            args: vec![script.into()],
            labels: HashMap::from([
                (labels::POD_NAME.to_string(), self.name.clone()),
                (labels::POD_NAMESPACE.to_string(), self.namespace.clone()),
                (labels::POD_UID.to_string(), self.uid.clone()),
                (labels::CONTAINER_NAME.to_string(), name.to_string()),
            ]),
            annotations: HashMap::from([
                (labels::CONTAINER_HASH.to_string(), stored_hash.to_string()),
                (labels::CONTAINER_RESTART_COUNT.to_string(), "0".to_string()),
                (
                    labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_string(),
                    "/dev/termination-log".to_string(),
                ),
                (
                    labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
                    "File".to_string(),
                ),
                (
                    labels::POD_TERMINATION_GRACE_PERIOD.to_string(),
                    "30".to_string(),
                ),
            ]),
            linux: Some(LinuxContainerConfig {
                resources: Some(LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    cpu_shares: 256,
                    memory_limit_in_bytes: 64 << 20,
                    ..Default::default()
                }),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Node as i32,
                        // Own PID namespace: the process is PID 1, as under a real kubelet.
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let id = client
            .create_container(&self.sandbox_id, config, self.config.clone())
            .await
            .expect("CreateContainer");
        client.start_container(&id).await.expect("StartContainer");
        id
    }

    /// Stops and removes the sandbox with its containers.
    pub async fn remove(self, client: &CriClient) {
        client
            .stop_pod_sandbox(&self.sandbox_id)
            .await
            .expect("StopPodSandbox");
        client
            .remove_pod_sandbox(&self.sandbox_id)
            .await
            .expect("RemovePodSandbox");
    }
}

/// The value of `name` in the environment the runtime started container `id` with (its OCI spec,
/// from ContainerStatus verbose info).
pub async fn env_of(id: &str, name: &str) -> Option<String> {
    let status = client().container_status(id, true).await.ok()?;
    let info: serde_json::Value = serde_json::from_str(status.info.get("info")?).ok()?;
    info.pointer("/runtimeSpec/process/env")?
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

/// The pod's Ready condition is True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Follows the pods of `selector` through a watch until `stop` is set: the most that were
/// unready at once, every state the API server held counted (its event order, not samples).
pub fn most_unready(
    pods: ::kube::Api<k8s_openapi::api::core::v1::Pod>,
    selector: &str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<usize>,
) {
    use futures::StreamExt;
    use std::sync::atomic::Ordering;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let config = ::kube::runtime::watcher::Config::default().labels(selector);
    let handle = tokio::spawn(async move {
        let mut events = std::pin::pin!(::kube::runtime::watcher(pods, config));
        let mut ready = HashMap::new();
        let mut most = 0;
        while !flag.load(Ordering::Relaxed) {
            let Ok(Some(Ok(event))) =
                tokio::time::timeout(std::time::Duration::from_millis(100), events.next()).await
            else {
                continue;
            };
            let pod = match event {
                ::kube::runtime::watcher::Event::Apply(pod)
                | ::kube::runtime::watcher::Event::InitApply(pod) => pod,
                _ => continue,
            };
            ready.insert(
                pod.metadata.name.clone().unwrap_or_default(),
                pod_ready(&pod),
            );
            most = most.max(ready.values().filter(|r| !**r).count());
        }
        most
    });
    (stop, handle)
}
