//! Shared pieces of the sandbox tests: the API double, a kubelet stand-in on a unique node, and
//! waiting helpers. Tests talk to the real containerd of `tests/node/containerd.sh up` and are
//! `#[ignore]`d for plain `cargo test` (needs root); `tests/run-all.sh` runs them.
#![allow(dead_code)] // each test binary uses a different part

use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, ServerConfig};
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};
use node_sandbox::util::{test_cri_endpoint, unique_name};
use node_sandbox::{KubeletConfig, KubeletStandIn};
use serde_json::{Value, json};

pub const TEST_IMAGE: &str = "localhost/busybox:local";
pub const NS: &str = "sandbox-test";

pub fn cri() -> CriClient {
    CriClient::new(CriConfig::new(
        CriEndpoint::parse(&test_cri_endpoint()).expect("INPLACED_TEST_CRI_ENDPOINT"),
    ))
}

pub struct Env {
    pub server: ApiServer,
    pub kubelet: Option<KubeletStandIn>,
    pub node: String,
}

impl Env {
    pub async fn start(version: &str, restart_delay: Duration) -> Env {
        Self::start_with(|c| {
            c.kubelet_version = version.into();
            c.restart_delay = restart_delay;
        })
        .await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut KubeletConfig)) -> Env {
        Self::start_on(ServerConfig::default(), tweak).await
    }

    /// Like [`Env::start_with`] against an API server double configured by `server` (pods are
    /// always deleted gracefully, as with a kubelet present).
    pub async fn start_on(server: ServerConfig, tweak: impl FnOnce(&mut KubeletConfig)) -> Env {
        let server = ApiServer::start(ServerConfig {
            graceful_pod_deletion: true,
            ..server
        })
        .await
        .unwrap();
        let node = unique_name("node");
        let mut config = KubeletConfig::new(&node, &server.kubeconfig(None), &test_cri_endpoint());
        config.sync_period = Duration::from_millis(300);
        tweak(&mut config);
        let kubelet = KubeletStandIn::start(config).await.unwrap();
        Env {
            server,
            kubelet: Some(kubelet),
            node,
        }
    }

    pub fn kubelet(&self) -> &KubeletStandIn {
        self.kubelet.as_ref().unwrap()
    }

    /// Creates a pod bound to this node; returns it as stored (with its UID).
    pub fn create_pod(&self, name: &str, spec: Value) -> Value {
        let mut spec = spec;
        spec["nodeName"] = json!(self.node);
        spec["hostNetwork"] = json!(true);
        self.server
            .store()
            .create(
                "pods",
                json!({"metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
                       "spec": spec}),
            )
            .unwrap()
    }

    /// A typed client for the test namespace's pods (resizes, patches).
    pub async fn pods_api(&self) -> kube::Api<k8s_openapi::api::core::v1::Pod> {
        let client = node_sandbox::util::kube_client(&self.server.kubeconfig(None))
            .await
            .unwrap();
        kube::Api::namespaced(client, NS)
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.server.store().get("pods", NS, name)
    }

    /// Polls the stored pod until `pred` holds.
    pub async fn wait_pod(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(p) = self.pod(name)
                && pred(&p)
            {
                return p;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for pod {name}: {}",
                    serde_json::to_string_pretty(&self.pod(name)).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn stop(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.stop().await.unwrap();
        }
    }
}

/// Every container of the pod reports running.
pub fn all_running(pod: &Value) -> bool {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let want = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    statuses
        .is_some_and(|s| s.len() == want && s.iter().all(|c| c.pointer("/state/running").is_some()))
}

pub fn status_of<'a>(pod: &'a Value, container: &str) -> &'a Value {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["name"] == container))
        .unwrap_or(&Value::Null)
}

pub async fn wait_until<F: std::future::Future<Output = bool>>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> F,
) {
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pod cgroup directories of `uid` left in any hierarchy.
pub fn pod_cgroup_dirs(uid: &str) -> Vec<std::path::PathBuf> {
    let root = node_sandbox::util::test_cgroup_root();
    let mut found = Vec::new();
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        for qos in ["", "burstable/", "besteffort/"] {
            let dir = h.path().join(format!("{root}/kubepods/{qos}pod{uid}"));
            if dir.exists() {
                found.push(dir);
            }
        }
    }
    found
}
