//! A whole node for end-to-end tests: the API double, the kubelet stand-in (straight to
//! containerd), the kruise-manager stand-in, the CRI fault proxy in front of containerd for the
//! agent (it counts the agent's StopContainer calls), and the agent itself.

use std::time::{Duration, Instant};

use apiserver_double::{ApiServer, PodResizeApi, ServerConfig};
use node_sandbox::kubelet::CrashLoopSettings;
use node_sandbox::{CriProxy, KubeletConfig, KubeletStandIn, ManagerConfig, ManagerStandIn};
use serde_json::{Value, json};

use super::agent::AgentProcess;
use super::{endpoint, unique};

pub const NS: &str = "inplaced-e2e";
/// The agent authenticates with its own token, so the audit log tells its requests apart.
pub const AGENT_USER: &str = "system:node:inplaced-e2e";
const AGENT_TOKEN: &str = "agent-token";

pub struct Node {
    pub server: ApiServer,
    pub node: String,
    pub kubelet: Option<KubeletStandIn>,
    pub manager: Option<ManagerStandIn>,
    pub proxy: CriProxy,
    pub client: ::kube::Client,
    pub kubeconfig: tempfile::NamedTempFile,
    pub state_dir: tempfile::TempDir,
    pub agent: Option<AgentProcess>,
    /// More agent flags, given at every (re)start.
    pub agent_args: Vec<String>,
}

/// How [`Node::start_with`] sets the node up.
pub struct NodeOptions {
    pub kubelet_version: String,
    /// The kubelet stand-in's InPlacePodVerticalScaling gate.
    pub resize_gate: bool,
    /// The API double's resize API.
    pub pod_resize: PodResizeApi,
    pub agent_args: Vec<String>,
    /// The node's allocatable cpu in millicores (default: the machine's cores).
    pub allocatable_cpu_millis: Option<i64>,
    /// How often the kubelet stand-in re-syncs every pod (tests: 200 ms; kubelet: 1 s).
    pub kubelet_sync_period: Duration,
    /// Between a container's exit and the stand-in's restart of it (tests: 500 ms).
    pub kubelet_restart_delay: Duration,
    /// How late pod updates reach the stand-in's copy of the pod (default: at once).
    pub kubelet_pod_update_lag: Duration,
    /// The stand-in's crash back-off settings (default: the release's).
    pub crash_loop: CrashLoopSettings,
    /// Where in its jitter the stand-in requeues a pod in back-off (0.0–1.0; default: random,
    /// as the kubelet; see node_sandbox's `KubeletConfig::backoff_retry_jitter`).
    pub backoff_retry_jitter: Option<f64>,
}

impl NodeOptions {
    /// A kubelet of `version` with the gate as the release has it by default (on from 1.33),
    /// and the API of that release.
    pub fn kubelet(version: &str) -> NodeOptions {
        let minor = minor_of(version);
        let gate = minor >= 33;
        NodeOptions {
            kubelet_version: version.to_owned(),
            resize_gate: gate,
            pod_resize: PodResizeApi::for_release(minor, gate),
            agent_args: Vec::new(),
            allocatable_cpu_millis: None,
            kubelet_sync_period: Duration::from_millis(200),
            kubelet_restart_delay: Duration::from_millis(500),
            kubelet_pod_update_lag: Duration::ZERO,
            crash_loop: CrashLoopSettings::default(),
            backoff_retry_jitter: None,
        }
    }

    /// A kubelet up to 1.34 whose pod worker retries a pod in back-off at a fixed point of its
    /// jittered 10–15 s (`fraction` 1.0: 15 s), so that its restart times are exact.
    pub fn backoff_retry_jitter(mut self, fraction: f64) -> NodeOptions {
        self.backoff_retry_jitter = Some(fraction);
        self
    }

    /// The kubelet's crash back-off settings (its config file's and feature gates').
    pub fn crash_loop(mut self, settings: CrashLoopSettings) -> NodeOptions {
        self.crash_loop = settings;
        self
    }

    /// A kubelet (1.32+) whose crash back-off is capped at `cap` through
    /// `crashLoopBackOff.maxContainerRestartPeriod`, as a node restarting the same containers
    /// again and again would set it: tests that restart one container many times still meet
    /// the back-off, briefly.
    pub fn crash_loop_cap(self, cap: Duration) -> NodeOptions {
        self.crash_loop(CrashLoopSettings {
            max_gate: Some(true),
            max_container_restart_period: Some(cap),
            ..Default::default()
        })
    }

    /// A kubelet whose copy of a pod takes `lag` to follow the API's updates.
    pub fn lagging_kubelet(mut self, lag: Duration) -> NodeOptions {
        self.kubelet_pod_update_lag = lag;
        self
    }

    /// A kubelet slow to notice exits (`sync`) and to restart containers (`restart`).
    pub fn slow_kubelet(mut self, sync: Duration, restart: Duration) -> NodeOptions {
        self.kubelet_sync_period = sync;
        self.kubelet_restart_delay = restart;
        self
    }

    /// The same release with the gate on or off.
    pub fn gate(mut self, on: bool) -> NodeOptions {
        let minor = minor_of(&self.kubelet_version);
        self.resize_gate = on;
        self.pod_resize = PodResizeApi::for_release(minor, on);
        self
    }

    /// An API server of release 1.`minor` with the InPlacePodVerticalScaling gate on, beside
    /// the kubelet of the options (a version skew: the kubelet may be up to three minors older).
    pub fn api_server(self, minor: u32) -> NodeOptions {
        self.api_server_with_gate(minor, true)
    }

    /// An API server of release 1.`minor` with the InPlacePodVerticalScaling gate as given.
    pub fn api_server_with_gate(mut self, minor: u32, gate: bool) -> NodeOptions {
        self.pod_resize = PodResizeApi::for_release(minor, gate);
        self
    }

    pub fn agent_args(mut self, args: &[&str]) -> NodeOptions {
        self.agent_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    pub fn allocatable_cpu(mut self, millis: i64) -> NodeOptions {
        self.allocatable_cpu_millis = Some(millis);
        self
    }
}

/// 31 of `v1.31.12`.
fn minor_of(version: &str) -> u32 {
    version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

impl Node {
    pub async fn start() -> Node {
        Node::start_with_kubelet("v1.30.7").await
    }

    /// A node whose kubelet stand-in impersonates `kubelet_version` (e.g. `v1.31.12` for era C).
    /// Its resize gate is on and the API serves `pods/resize`, whatever the release (what the
    /// tests written before resize expect: era B containers carry `hashWithoutResources`).
    pub async fn start_with_kubelet(kubelet_version: &str) -> Node {
        let mut options = NodeOptions::kubelet(kubelet_version);
        options.resize_gate = true;
        options.pod_resize = PodResizeApi::default();
        Node::start_with(options).await
    }

    pub async fn start_with(options: NodeOptions) -> Node {
        // The stand-ins' warnings (a failed status write, a failed reconcile) shown with a
        // failing test's output; `INPLACED_TEST_LOG` sets the filter.
        let filter = std::env::var("INPLACED_TEST_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
        let server = ApiServer::start(ServerConfig {
            graceful_pod_deletion: true,
            tokens: [(AGENT_TOKEN.to_string(), AGENT_USER.to_string())].into(),
            pod_resize: options.pod_resize,
            ..Default::default()
        })
        .await
        .unwrap();
        let node = unique("node");
        let kubeconfig_text = server.kubeconfig(None);
        let mut kubelet_config =
            KubeletConfig::new(&node, &kubeconfig_text, &endpoint().to_string());
        kubelet_config.kubelet_version = options.kubelet_version.clone();
        kubelet_config.resize_gate = options.resize_gate;
        kubelet_config.allocatable_cpu_millis = options.allocatable_cpu_millis;
        kubelet_config.restart_delay = options.kubelet_restart_delay;
        kubelet_config.pod_update_lag = options.kubelet_pod_update_lag;
        kubelet_config.sync_period = options.kubelet_sync_period;
        kubelet_config.crash_loop = options.crash_loop;
        kubelet_config.backoff_retry_jitter = options.backoff_retry_jitter;
        let kubelet = KubeletStandIn::start(kubelet_config).await.unwrap();
        let mut manager_config = ManagerConfig::new(&kubeconfig_text);
        manager_config.namespace = Some(NS.into());
        manager_config.resync = Duration::from_millis(200);
        let manager = ManagerStandIn::start(manager_config).await.unwrap();
        let proxy_dir = tempfile::tempdir().unwrap().keep();
        let proxy = CriProxy::start(&proxy_dir, &endpoint().to_string())
            .await
            .unwrap();
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        server
            .write_kubeconfig(kubeconfig.path(), Some(AGENT_TOKEN))
            .unwrap();
        let client = node_sandbox::util::kube_client(&kubeconfig_text)
            .await
            .unwrap();
        let mut node = Node {
            server,
            node,
            kubelet: Some(kubelet),
            manager: Some(manager),
            proxy,
            client,
            kubeconfig,
            state_dir: tempfile::tempdir().unwrap(),
            agent: None,
            agent_args: options.agent_args,
        };
        node.start_agent();
        node
    }

    /// The flags the agent of this node runs with.
    pub fn agent_arguments(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--node-name".into(),
            self.node.clone(),
            "--kubeconfig".into(),
            self.kubeconfig.path().display().to_string(),
            "--cri-endpoint".into(),
            self.proxy.endpoint(),
            "--state-dir".into(),
            self.state_dir.path().display().to_string(),
        ];
        args.extend(self.agent_args.iter().cloned());
        args
    }

    /// (Re)starts the agent with the same state directory.
    pub fn start_agent(&mut self) {
        drop(self.agent.take());
        let args = self.agent_arguments();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent = AgentProcess::start(&args, None);
        agent.wait_http("/readyz", 200, Duration::from_secs(30));
        self.agent = Some(agent);
    }

    pub fn agent(&mut self) -> &mut AgentProcess {
        self.agent.as_mut().unwrap()
    }

    /// A host-network pod on this node, waited for until every container runs.
    pub async fn run_pod(&self, name: &str, spec: Value) -> Value {
        self.run_pod_with_meta(name, json!({}), spec).await
    }

    /// `count` pods named `<prefix>-…` of one container `app`: a shell that exits at once on
    /// SIGTERM, so a stop is prompt and the CRI proxy counts exactly one StopContainer.
    pub async fn run_quick_stopping_pods(&self, prefix: &str, count: usize) -> Vec<String> {
        let mut names = Vec::new();
        for _ in 0..count {
            let name = unique(prefix);
            self.run_pod(
                &name,
                json!({"containers": [{"name": "app", "image": "localhost/busybox:local",
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]}]}),
            )
            .await;
            names.push(name);
        }
        names
    }

    /// Once each pod runs again, one CRR per pod for its `app` container (grace 5 s); returns
    /// (request, ID of the container it targets) per pod.
    pub async fn recreate_app_of_each(
        &self,
        pods: &[String],
        timeout: Duration,
    ) -> Vec<(String, String)> {
        let mut requests = Vec::new();
        for pod_name in pods {
            let pod = self.wait_pod(pod_name, timeout, all_running).await;
            let old = container_id(&pod, "app");
            let crr = unique("crr");
            self.create_crr(
                &crr,
                pod_name,
                &["app"],
                json!({"terminationGracePeriodSeconds": 5}),
            )
            .await;
            requests.push((crr, old));
        }
        requests
    }

    /// Waits for each (request, container) of [`Node::recreate_app_of_each`] to complete and
    /// checks the request Succeeded and the container got exactly one StopContainer.
    pub async fn assert_each_recreated_once(
        &self,
        requests: &[(String, String)],
        timeout: Duration,
        context: &str,
    ) {
        for (crr, old) in requests {
            let done = self.wait_completed(crr, timeout).await;
            assert_eq!(
                container_phase(&done, "app"),
                "Succeeded",
                "{context}: {done:#}"
            );
            assert_eq!(self.proxy.stop_count(old), 1, "{context}: {old} of {crr}");
        }
    }

    /// Every container that ever got a StopContainer is among `targeted`, and got exactly one;
    /// every targeted container got one.
    pub fn assert_only_targeted_stopped_once(&self, targeted: &std::collections::HashSet<String>) {
        let stops = self.proxy.stop_counts();
        for (id, count) in &stops {
            assert!(targeted.contains(id), "{id} was stopped but never targeted");
            assert_eq!(*count, 1, "{id} stopped {count} times");
        }
        assert_eq!(stops.len(), targeted.len());
    }

    /// A pod opted in to env-from-metadata restarts, its annotation `v` at "1" (containers
    /// read it through [`takes_v_from_annotation`]).
    pub async fn run_env_pod(&self, name: &str, spec: Value) -> Value {
        self.run_pod_with_meta(
            name,
            json!({"annotations": {"v": "1", "inplaced.io/runtime-containers-meta": "true"}}),
            spec,
        )
        .await
    }

    /// Waits until every container of `pod` runs and `container` is another than `old`.
    pub async fn wait_replaced(&self, pod: &str, container: &str, old: &str) -> Value {
        self.wait_pod(pod, Duration::from_secs(60), |p| {
            all_running(p) && {
                let id = container_id(p, container);
                !id.is_empty() && id != old
            }
        })
        .await
    }

    /// Like [`Node::run_pod`], with extra metadata (labels, annotations, ownerReferences).
    pub async fn run_pod_with_meta(&self, name: &str, metadata: Value, spec: Value) -> Value {
        run_pod_on(&self.server, &self.node, name, metadata, spec).await
    }

    /// Merge-patches the pod's metadata (labels/annotations) as a user would.
    pub async fn patch_pod_metadata(&self, name: &str, metadata: Value) {
        let api: ::kube::Api<k8s_openapi::api::core::v1::Pod> =
            ::kube::Api::namespaced(self.client.clone(), NS);
        api.patch(
            name,
            &::kube::api::PatchParams::default(),
            &::kube::api::Patch::Merge(json!({ "metadata": metadata })),
        )
        .await
        .unwrap();
    }

    /// Sets a pod condition the kubelet does not own (e.g. kruise's `InPlaceUpdateReady`) through
    /// `pods/status`, as its controller would; written again if a kubelet status write with an
    /// older copy of the pod dropped it.
    pub async fn set_pod_condition(&self, name: &str, kind: &str, status: &str) {
        let api: ::kube::Api<k8s_openapi::api::core::v1::Pod> =
            ::kube::Api::namespaced(self.client.clone(), NS);
        for _ in 0..10 {
            let pod = self.pod(name).unwrap();
            let mut conditions: Vec<Value> = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            conditions.retain(|c| c["type"] != kind);
            conditions.push(json!({"type": kind, "status": status}));
            api.patch_status(
                name,
                &::kube::api::PatchParams::default(),
                &::kube::api::Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let kept = self
                .pod(name)
                .and_then(|p| p.pointer("/status/conditions").cloned())
                .and_then(|c| c.as_array().cloned())
                .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == status));
            if kept {
                return;
            }
        }
        panic!("condition {kind}={status} never stuck on pod {name}");
    }

    /// The first container of pod `name` as the agent shows it (`inplaced pods -o json` over
    /// its admin socket); null while the agent does not show the pod.
    pub fn shown_container(&mut self, name: &str) -> Value {
        let admin = self.agent().admin_socket.display().to_string();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_inplaced"))
            .args([
                "pods",
                "-o",
                "json",
                "--node-name",
                &self.node,
                "--admin-socket",
                &admin,
            ])
            .output()
            .unwrap();
        let view: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        view["pods"]
            .as_array()
            .and_then(|pods| pods.iter().find(|p| p["name"] == name))
            .map(|p| p["containers"][0].clone())
            .unwrap_or_default()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.server.store().get("pods", NS, name)
    }

    pub async fn wait_pod(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_stored(&self.server, "pods", name, timeout, pred).await
    }

    /// Creates a CRR through the manager stand-in's webhook (labels, statusContext, preStop).
    pub async fn create_crr(
        &self,
        name: &str,
        pod: &str,
        containers: &[&str],
        strategy: Value,
    ) -> Value {
        let containers: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
        node_sandbox::manager::create_crr(
            &self.client,
            json!({"metadata": {"name": name, "namespace": NS},
                   "spec": {"podName": pod, "containers": containers, "strategy": strategy}}),
        )
        .await
        .unwrap()
    }

    /// The CRR kruise's webhook makes for `containers` of `pod` (grace 5 s), written straight into
    /// the store, as at scale the webhook round trip would only slow the benchmark down; returns
    /// its name, or None when the webhook refuses the pod (e.g. a container not running).
    pub fn store_crr(&self, pod: &Value, containers: &[&str]) -> Option<String> {
        let names: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
        let mut crr = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": unique("crr"), "namespace": NS},
            "spec": {"podName": pod["metadata"]["name"], "containers": names,
                     "strategy": {"terminationGracePeriodSeconds": 5}}});
        node_sandbox::manager::webhook_mutate(&mut crr, pod).ok()?;
        let name = crr["metadata"]["name"].as_str()?.to_string();
        self.server
            .store()
            .create("containerrecreaterequests", crr)
            .ok()?;
        Some(name)
    }

    /// Waits until the agent's first StopContainer of `container_id` reaches the CRI proxy.
    pub async fn wait_stop_issued(&self, container_id: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.proxy.stop_count(container_id) == 0 {
            assert!(
                Instant::now() < deadline,
                "no kill of {container_id} issued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn crr(&self, name: &str) -> Value {
        self.server
            .store()
            .get("containerrecreaterequests", NS, name)
            .unwrap_or_default()
    }

    pub async fn wait_crr(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let crr = self.crr(name);
            if pred(&crr) {
                return crr;
            }
            if Instant::now() >= deadline {
                // The pod's status says whether kubelet restarted the container and reported
                // it (what kruise-manager copies into the request).
                let pod = crr
                    .pointer("/spec/podName")
                    .and_then(Value::as_str)
                    .and_then(|pod| self.pod(pod));
                let pod_status = pod.as_ref().and_then(|p| p.get("status"));
                panic!("CRR {name} never got there: {crr:#}\nits pod's status: {pod_status:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_completed(&self, name: &str, timeout: Duration) -> Value {
        self.wait_crr(name, timeout, |c| {
            c.pointer("/status/phase") == Some(&json!("Completed"))
        })
        .await
    }

    /// Creates a ContainerResizeRequest with `spec` as a user would: through the API, labelled
    /// with this node. Returns its name.
    pub async fn create_resize(&self, spec: Value) -> String {
        self.create_request("ContainerResizeRequest", &self.node, spec)
            .await
    }

    /// Creates an inplaced.io/v1alpha1 request of `kind` (`ContainerResizeRequest`,
    /// `ContainerRestartRequest`) with `spec` as a user would: through the API, labelled with
    /// `node_label` (this node's name, or another's). Returns its name.
    pub async fn create_request(&self, kind: &str, node_label: &str, spec: Value) -> String {
        let name = unique(&kind.to_lowercase());
        let plural = format!("{}s", kind.to_lowercase());
        let resource = ::kube::api::ApiResource::from_gvk_with_plural(
            &::kube::api::GroupVersionKind::gvk("inplaced.io", "v1alpha1", kind),
            &plural,
        );
        let api: ::kube::Api<::kube::api::DynamicObject> =
            ::kube::Api::namespaced_with(self.client.clone(), NS, &resource);
        let object = serde_json::from_value(json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"inplaced.io/node-name": node_label}},
            "spec": spec,
        }))
        .unwrap();
        api.create(&::kube::api::PostParams::default(), &object)
            .await
            .unwrap();
        name
    }

    pub fn resize_request(&self, name: &str) -> Value {
        self.server
            .store()
            .get("containerresizerequests", NS, name)
            .unwrap_or_default()
    }

    pub async fn wait_resize(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_stored(&self.server, "containerresizerequests", name, timeout, pred).await
    }

    /// Waits until the request reaches Succeeded, Failed or Infeasible.
    pub async fn wait_resize_final(&self, name: &str, timeout: Duration) -> Value {
        self.wait_resize(name, timeout, |r| {
            matches!(
                r.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed" | "Infeasible")
            )
        })
        .await
    }

    /// Core/v1 events about `pod` with `reason`.
    pub fn events(&self, pod: &str, reason: &str) -> Vec<Value> {
        self.server
            .store()
            .list("events", NS)
            .into_iter()
            .filter(|e| {
                e.pointer("/involvedObject/name") == Some(&json!(pod)) && e["reason"] == reason
            })
            .collect()
    }

    /// Waits until an event about `pod` with `reason` exists (events are sent in the background).
    pub async fn wait_event(&self, pod: &str, reason: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.events(pod, reason).is_empty() {
            assert!(Instant::now() < deadline, "no {reason} event for pod {pod}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(mut self) {
        drop(self.agent.take());
        if let Some(manager) = self.manager.take() {
            manager.stop();
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await.unwrap();
        }
    }
}

/// Stores a pod of the test namespace bound to `node` (host network, grace 5 s unless `spec`
/// names one), with `metadata` (labels, annotations, ownerReferences), and waits until every
/// container runs.
pub async fn run_pod_on(
    server: &ApiServer,
    node: &str,
    name: &str,
    metadata: Value,
    spec: Value,
) -> Value {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    spec["hostNetwork"] = json!(true);
    spec["terminationGracePeriodSeconds"] = spec
        .get("terminationGracePeriodSeconds")
        .cloned()
        .unwrap_or(json!(5));
    let mut metadata = metadata;
    metadata["name"] = json!(name);
    metadata["namespace"] = json!(NS);
    server
        .store()
        .create("pods", json!({"metadata": metadata, "spec": spec}))
        .unwrap();
    wait_stored(server, "pods", name, Duration::from_secs(30), all_running).await
}

/// Polls the stored `resource` object `name` of the test namespace every 100 ms until it exists
/// and `pred` holds; after `timeout`, panics showing it.
pub async fn wait_stored(
    server: &ApiServer,
    resource: &str,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let stored = server.store().get(resource, NS, name);
        if let Some(object) = stored.as_ref()
            && pred(object)
        {
            return stored.unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "{resource} {name} never got there: {:#}",
            stored.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `container` with env `V` from the pod's annotation `v`.
pub fn takes_v_from_annotation(mut container: Value) -> Value {
    container["env"] = json!([{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}}]);
    container
}

pub fn all_running(pod: &Value) -> bool {
    let want = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .is_some_and(|s| {
            s.len() == want
                && s.iter()
                    .all(|c| c.pointer("/state/running").is_some() && c["ready"] == true)
        })
}

pub fn container_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The runtime ID (without `containerd://`) of a container in pod status.
pub fn container_id(pod: &Value, name: &str) -> String {
    container_status(pod, name)["containerID"]
        .as_str()
        .and_then(|id| id.split_once("://"))
        .map(|(_, id)| id.to_string())
        .unwrap_or_default()
}

pub fn container_phase(crr: &Value, name: &str) -> Value {
    crr.pointer("/status/containerRecreateStates")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .map(|s| s["phase"].clone())
        .unwrap_or(Value::Null)
}

/// Gives the local busybox test image another name in containerd (golden containers name
/// public images; nothing is pulled here).
pub fn tag_test_image(target: &str) {
    let endpoint = super::endpoint().to_string();
    let address = endpoint.trim_start_matches("unix://");
    let status = std::process::Command::new("ctr")
        .args([
            "--address",
            address,
            "-n",
            "k8s.io",
            "images",
            "tag",
            "--force",
        ])
        .args(["localhost/busybox:local", target])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "ctr images tag {target}");
}
