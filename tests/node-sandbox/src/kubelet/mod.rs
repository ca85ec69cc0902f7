//! The kubelet stand-in: watches the pods bound to its node on the API server (double) and makes
//! the real containerd follow them the way kubelet does (see
//! `docs/cri-labels.md` and `docs/containerd.md`), so that the agent under test meets the CRI objects,
//! annotations, restarts and pod status of a real node.
//!
//! Faithful: sandbox/container labels and annotations with the configured release's stored hash
//! (and `hashWithoutResources` for 1.27–1.30 when the resize gate is on), cgroup parent per QoS,
//! LinuxContainerResources and oom_score_adj, env with fieldRefs resolved at creation, `$(VAR)`
//! expansion, restart of exited containers per restartPolicy after a delay with restartCount+1 and
//! a new container ID, the release's crash back-off (`backoff.rs`: `CrashLoopBackOff` status and
//! `BackOff` event while it waits; up to 1.34 the pod worker's 10–15 s retry), kill-and-recreate when the spec hash changes (event `Killing`),
//! preStop exec/sleep before kubelet-initiated kills, only the newest dead container kept, pod
//! status through `pods/status`, graceful deletion, the Node object with a configurable allocatable
//! cpu/memory, and in-place resize per release (see `resize.rs`).
//!
//! Simplified (not needed by the agent): host network for every pod (podIP 127.0.0.1), no image
//! pulls (a missing image is `ErrImagePull`), readiness from exec probes only
//! (other probe kinds count as passing; no liveness or startup probes; `started` = running), no
//! volumes, configMap/secret/resource env sources left out, no container logs, no sandbox
//! recreation, httpGet preStop hooks skipped, pod cgroup limits written on cgroup v1 only with the
//! cgroupfs driver (the systemd driver's slices get them as unit properties), the stand-in's own
//! resize on cgroupfs v1 only; resize simplifications in `resize.rs`.

mod backoff;
mod cgroups;
pub mod resize;
pub mod spec;
mod sync;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
pub use backoff::CrashLoopSettings;
use futures::StreamExt as _;
use inplaced::cri::labels;
use inplaced::cri::proto::{ContainerState, PodSandboxFilter};
use inplaced::cri::{CriClient, CriConfig, CriEndpoint};
use inplaced::hashing::KubeletVersion;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The address every pod and the node have: pods are host-network on 127.0.0.1.
pub const NODE_IP: &str = "127.0.0.1";

/// Knobs of the stand-in. [`KubeletConfig::new`] gives kubelet-like defaults.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    pub node_name: String,
    /// Kubeconfig document (YAML or JSON text) for the API server.
    pub kubeconfig: String,
    /// `unix:///path` of the CRI runtime (containerd, or the fault proxy).
    pub cri_endpoint: String,
    /// The kubelet release to impersonate, e.g. `v1.30.7`: decides the stored hash and the
    /// node's `kubeletVersion`.
    pub kubelet_version: String,
    /// Between a container's exit and its restart (a real kubelet here: about 2 s).
    pub restart_delay: Duration,
    /// How often every pod is re-synced against the runtime (kubelet's PLEG relist: 1 s).
    pub sync_period: Duration,
    /// cgroup parent root of pod cgroups (`$INPLACED_TEST_CGROUP_ROOT`, default inplaced-test).
    pub cgroup_root: String,
    /// kubelet's systemd cgroup driver (`$INPLACED_TEST_CGROUP_DRIVER=systemd`): pod slices
    /// made through systemd instead of directories under `cgroup_root` (see `cgroups.rs`).
    pub systemd_cgroups: bool,
    /// The InPlacePodVerticalScaling gate's value (real kubelets: off by default in 1.27–1.32,
    /// on from 1.33; default here: on). With it from 1.27 the stand-in resizes in place as that
    /// release does (allocation, Deferred/Infeasible, actuation in kubelet's order, status per
    /// release; see `resize.rs`), and 1.27–1.30 also write `hashWithoutResources` and compare it.
    /// Without it (or before 1.27) spec resource changes are ignored and a (re)created container
    /// gets the spec's resources.
    pub resize_gate: bool,
    /// The crash back-off settings of the release's kubelet config and feature gates (default:
    /// none set, the release's defaults).
    pub crash_loop: CrashLoopSettings,
    /// Where in its jitter the pod worker requeues a pod held in crash back-off, as a fraction
    /// of the half added at most (up to 1.34 0.0: 10 s, 1.0: 15 s; from 1.35 0.0: the wait's
    /// end, 1.0: half the time left later). None: random each time, as the kubelet; tests that
    /// need exact times pin it.
    pub backoff_retry_jitter: Option<f64>,
    /// Create the Node object and fill its status at start.
    pub register_node: bool,
    /// Node memory capacity in bytes (Burstable oom_score_adj); default: MemTotal.
    pub node_memory_bytes: Option<i64>,
    /// Node allocatable cpu in millicores (Node status; resize feasibility); default: the
    /// machine's CPUs.
    pub allocatable_cpu_millis: Option<i64>,
    /// Node allocatable memory in bytes (Node status; resize feasibility); default: the memory
    /// capacity.
    pub allocatable_memory_bytes: Option<i64>,
    /// How long a pod's update takes to reach this kubelet's copy of the pod (its watch and
    /// pod workers lag the API: docs/containerd.md records kubelets recreating a container from
    /// the previous copy when killed the moment the API changed). Default: none.
    pub pod_update_lag: Duration,
}

impl KubeletConfig {
    pub fn new(node_name: &str, kubeconfig: &str, cri_endpoint: &str) -> Self {
        KubeletConfig {
            node_name: node_name.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            cri_endpoint: cri_endpoint.to_owned(),
            kubelet_version: "v1.30.7".to_owned(),
            restart_delay: Duration::from_secs(2),
            sync_period: Duration::from_secs(1),
            cgroup_root: crate::util::test_cgroup_root(),
            systemd_cgroups: crate::util::test_cgroup_driver_is_systemd(),
            resize_gate: true,
            crash_loop: CrashLoopSettings::default(),
            backoff_retry_jitter: None,
            register_node: true,
            node_memory_bytes: None,
            allocatable_cpu_millis: None,
            allocatable_memory_bytes: None,
            pod_update_lag: Duration::ZERO,
        }
    }
}

/// A container of one of the stand-in's pods, as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    /// `created`, `running`, `exited` or `unknown`.
    pub state: String,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    pub attempt: u32,
    pub image: String,
    pub labels: HashMap<String, String>,
    pub annotations: HashMap<String, String>,
}

#[derive(Clone)]
struct Sandbox {
    id: String,
    config: inplaced::cri::proto::PodSandboxConfig,
    cgroup_parent: String,
}

struct Worker {
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

struct Shared {
    config: KubeletConfig,
    version: KubeletVersion,
    cri: CriClient,
    client: kube::Client,
    runtime_name: String,
    node_memory: i64,
    /// Node allocatable (milli-cpu, bytes).
    allocatable: (i64, i64),
    resize: resize::ResizeRelease,
    backoff_rule: backoff::Rule,
    /// kubelet's back-off entries (its `backOff`), node-wide as the kubelet keeps them.
    backoff: Mutex<backoff::Backoff>,
    /// kubelet's allocation checkpoint, by pod UID (kept while the pod exists).
    allocations: Mutex<HashMap<String, resize::Allocation>>,
    /// The node's pods by UID, as last seen on the watch.
    pods: Mutex<HashMap<String, Value>>,
    /// Pods whose labels and annotations this stand-in keeps as they were (by UID): see
    /// [`KubeletStandIn::keep_stale_metadata`].
    stale_metadata: Mutex<HashMap<String, (Value, Value)>>,
    pods_changed: Notify,
    workers: Mutex<HashMap<String, Worker>>,
    /// Sandboxes this instance made (or adopted for a pod of its node), by pod UID: the only
    /// runtime objects it ever touches, since tests share one containerd.
    sandboxes: Mutex<HashMap<String, Sandbox>>,
}

/// A running kubelet stand-in. Call [`KubeletStandIn::stop`] to remove its sandboxes.
pub struct KubeletStandIn {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not wedge cleanup: the data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl KubeletStandIn {
    /// Connects to the runtime and the API server, registers the Node (when configured) and
    /// starts watching the node's pods.
    pub async fn start(config: KubeletConfig) -> anyhow::Result<KubeletStandIn> {
        let version = KubeletVersion::parse(&config.kubelet_version)
            .map_err(|e| anyhow::anyhow!("kubelet version: {e}"))?;
        let endpoint =
            CriEndpoint::parse(&config.cri_endpoint).map_err(|e| anyhow::anyhow!("{e}"))?;
        let cri = CriClient::new(CriConfig::new(endpoint));
        let info = cri
            .version()
            .await
            .map_err(|e| anyhow::anyhow!("CRI runtime: {e}"))?;
        let client = crate::util::kube_client(&config.kubeconfig).await?;
        let node_memory = config.node_memory_bytes.unwrap_or_else(mem_total);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
        let allocatable = (
            config.allocatable_cpu_millis.unwrap_or(cpus * 1000),
            config.allocatable_memory_bytes.unwrap_or(node_memory),
        );
        let shared = Arc::new(Shared {
            resize: resize::ResizeRelease::new(version.minor(), config.resize_gate),
            backoff_rule: backoff::Rule::new(version.minor(), &config.crash_loop),
            backoff: Mutex::new(backoff::Backoff::default()),
            version,
            cri,
            client,
            runtime_name: info.runtime_name.clone(),
            node_memory,
            allocatable,
            allocations: Mutex::default(),
            pods: Mutex::default(),
            stale_metadata: Mutex::default(),
            pods_changed: Notify::new(),
            workers: Mutex::default(),
            sandboxes: Mutex::default(),
            config,
        });
        if shared.config.register_node {
            shared
                .register_node(&info.runtime_name, &info.runtime_version)
                .await
                .context("registering the Node")?;
        }
        let tasks = vec![
            tokio::spawn(watch_pods(shared.clone())),
            tokio::spawn(dispatch(shared.clone())),
        ];
        Ok(KubeletStandIn { shared, tasks })
    }

    pub fn node_name(&self) -> &str {
        &self.shared.config.node_name
    }

    /// The sandbox ID of a pod this stand-in runs.
    pub fn sandbox_id(&self, pod_uid: &str) -> Option<String> {
        lock(&self.shared.sandboxes)
            .get(pod_uid)
            .map(|s| s.id.clone())
    }

    /// From now on this stand-in keeps the pod's labels and annotations as they are and does
    /// not take the API's later ones: a kubelet whose copy of the pod lags behind the API (the
    /// race of docs/containerd.md, drawn out), so that it starts containers with the old
    /// downward-API values. Spec and deletion still arrive.
    pub fn keep_stale_metadata(&self, pod_uid: &str) {
        let Some(pod) = lock(&self.shared.pods).get(pod_uid).cloned() else {
            return;
        };
        let field = |name: &str| pod.pointer(&format!("/metadata/{name}")).cloned();
        let kept = (
            field("labels").unwrap_or(Value::Null),
            field("annotations").unwrap_or(Value::Null),
        );
        lock(&self.shared.stale_metadata).insert(pod_uid.to_owned(), kept);
    }

    /// Whether this kubelet resizes in place (1.27+ with the gate).
    pub fn resizes_in_place(&self) -> bool {
        self.shared.resize.active()
    }

    /// What this kubelet has allocated to a pod's containers (its allocation checkpoint):
    /// container name → `resources` (`null` for none). `None` before the pod's first sync, for
    /// pods it does not run, and when it does not resize in place.
    pub fn allocated_resources(&self, pod_uid: &str) -> Option<BTreeMap<String, Value>> {
        lock(&self.shared.allocations).get(pod_uid).cloned()
    }

    /// The runtime containers of one of this stand-in's pods, newest first.
    pub async fn runtime_containers(&self, pod_uid: &str) -> anyhow::Result<Vec<RuntimeContainer>> {
        let Some(id) = self.sandbox_id(pod_uid) else {
            return Ok(vec![]);
        };
        let all = self.shared.list_containers(&id).await?;
        Ok(all
            .into_values()
            .flatten()
            .map(to_public)
            .collect::<Vec<_>>())
        .map(|mut v| {
            v.sort_by_key(|c: &RuntimeContainer| std::cmp::Reverse(c.created_at));
            v
        })
    }

    /// Stops syncing, then stops and removes every sandbox it made and their pod cgroups.
    pub async fn stop(self) -> anyhow::Result<()> {
        for t in &self.tasks {
            t.abort();
        }
        let workers: Vec<Worker> = lock(&self.shared.workers).drain().map(|(_, w)| w).collect();
        for w in &workers {
            w.task.abort();
        }
        for w in workers {
            let _ = w.task.await;
        }
        let sandboxes: Vec<(String, Sandbox)> = lock(&self.shared.sandboxes).drain().collect();
        let mut first_error = None;
        for (uid, sb) in sandboxes {
            // By label too: a sandbox made just before the abort may not be recorded yet.
            let mut ids: HashSet<String> = HashSet::from([sb.id.clone()]);
            if let Ok(found) = self.shared.sandboxes_of(&uid).await {
                ids.extend(found);
            }
            for id in ids {
                if let Err(e) = self.shared.remove_sandbox(&id).await {
                    first_error.get_or_insert(e);
                }
            }
            cgroups::remove(&sb.cgroup_parent);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for KubeletStandIn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for w in lock(&self.shared.workers).values() {
            w.task.abort();
        }
    }
}

fn to_public(c: inplaced::cri::proto::Container) -> RuntimeContainer {
    let state = match ContainerState::try_from(c.state) {
        Ok(ContainerState::ContainerCreated) => "created",
        Ok(ContainerState::ContainerRunning) => "running",
        Ok(ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    };
    RuntimeContainer {
        name: c
            .labels
            .get(labels::CONTAINER_NAME)
            .cloned()
            .unwrap_or_default(),
        attempt: c.metadata.as_ref().map_or(0, |m| m.attempt),
        image: c
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        id: c.id,
        state: state.to_owned(),
        created_at: c.created_at,
        labels: c.labels,
        annotations: c.annotations,
    }
}

fn mem_total() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map_or(4 << 30, |kb| kb * 1024)
}

impl Shared {
    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn register_node(&self, runtime: &str, runtime_version: &str) -> anyhow::Result<()> {
        let name = &self.config.node_name;
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"}},
        }))?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
        let (cpu, memory) = self.allocatable;
        // Capacity is never below allocatable, whatever the knobs say.
        let capacity_cpu = (cpus * 1000).max(cpu);
        let capacity_memory = self.node_memory.max(memory);
        let now = crate::util::now_rfc3339();
        let status = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": NODE_IP},
                          {"type": "Hostname", "address": name}],
            "capacity": {"cpu": resize::format_milli(capacity_cpu),
                         "memory": resize::format_bytes(capacity_memory), "pods": "110"},
            "allocatable": {"cpu": resize::format_milli(cpu),
                            "memory": resize::format_bytes(memory), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {
                "kubeletVersion": format!("v{}", self.config.kubelet_version.trim_start_matches('v')),
                "kubeProxyVersion": "",
                "containerRuntimeVersion": format!("{runtime}://{runtime_version}"),
                "operatingSystem": "linux", "architecture": "amd64",
                "osImage": "", "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// Containers of a sandbox grouped by container name, newest first.
    async fn list_containers(
        &self,
        sandbox_id: &str,
    ) -> anyhow::Result<HashMap<String, Vec<inplaced::cri::proto::Container>>> {
        let filter = inplaced::cri::proto::ContainerFilter {
            pod_sandbox_id: sandbox_id.to_owned(),
            ..Default::default()
        };
        let list = self
            .cri
            .list_containers(Some(filter))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut by_name: HashMap<String, Vec<_>> = HashMap::new();
        for c in list {
            let name = c
                .labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default();
            by_name.entry(name).or_default().push(c);
        }
        for v in by_name.values_mut() {
            v.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        }
        Ok(by_name)
    }

    /// Sandbox IDs in the runtime labelled with this pod UID.
    async fn sandboxes_of(&self, uid: &str) -> anyhow::Result<Vec<String>> {
        let filter = PodSandboxFilter {
            label_selector: HashMap::from([(labels::POD_UID.to_owned(), uid.to_owned())]),
            ..Default::default()
        };
        let list = self
            .cri
            .list_pod_sandboxes(Some(filter))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(list.into_iter().map(|s| s.id).collect())
    }

    async fn remove_sandbox(&self, id: &str) -> anyhow::Result<()> {
        let gone = |e: &inplaced::cri::CriError| e.is_not_found();
        if let Err(e) = self.cri.stop_pod_sandbox(id).await
            && !gone(&e)
        {
            return Err(anyhow::anyhow!("StopPodSandbox {id}: {e}"));
        }
        if let Err(e) = self.cri.remove_pod_sandbox(id).await
            && !gone(&e)
        {
            return Err(anyhow::anyhow!("RemovePodSandbox {id}: {e}"));
        }
        Ok(())
    }

    /// A pod's object has gone: stop and remove its sandbox and cgroup, forget its allocation.
    async fn teardown(&self, uid: &str) {
        lock(&self.allocations).remove(uid);
        let sb = lock(&self.sandboxes).remove(uid);
        if let Some(sb) = sb {
            if let Err(e) = self.remove_sandbox(&sb.id).await {
                tracing::warn!(uid, error = %e, "removing sandbox");
            }
            cgroups::remove(&sb.cgroup_parent);
        }
    }

    /// Records an event about a pod (core/v1, as kubelet's recorder does).
    async fn event(
        &self,
        pod: &Value,
        container: Option<&str>,
        kind: &str,
        reason: &str,
        message: &str,
    ) {
        let ns = spec::str_field(&pod["metadata"], "namespace");
        let name = spec::str_field(&pod["metadata"], "name");
        let now = crate::util::now_rfc3339();
        let mut involved = json!({"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                                   "uid": spec::str_field(&pod["metadata"], "uid")});
        if let Some(c) = container {
            involved["fieldPath"] = json!(format!("spec.containers{{{c}}}"));
        }
        let event = json!({
            "metadata": {"name": format!("{name}.{}", &crate::util::new_uid()[..8]), "namespace": ns},
            "involvedObject": involved, "reason": reason, "message": message, "type": kind,
            "source": {"component": "kubelet", "host": self.config.node_name},
            "reportingComponent": "kubelet", "reportingInstance": self.config.node_name,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1
        });
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), ns);
        let result = match serde_json::from_value(event) {
            Ok(ev) => api
                .create(&PostParams::default(), &ev)
                .await
                .map(drop)
                .map_err(anyhow::Error::from),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = result {
            tracing::warn!(reason, error = %e, "recording event");
        }
    }
}

fn uid_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Keeps `shared.pods` equal to the node's pods on the API server and wakes workers.
async fn watch_pods(shared: Arc<Shared>) {
    let ar = ApiResource::erase::<Pod>(&());
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &ar);
    let cfg =
        watcher::Config::default().fields(&format!("spec.nodeName={}", shared.config.node_name));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut buffer: Option<HashMap<String, Value>> = None;
    let wake = |uid: &str| {
        if let Some(w) = lock(&shared.workers).get(uid) {
            w.wake.notify_one();
        }
    };
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "pod watch");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        match event {
            watcher::Event::Apply(obj) => {
                let Ok(mut v) = serde_json::to_value(&obj) else {
                    continue;
                };
                let Some(uid) = uid_of(&v) else { continue };
                if let Some((labels, annotations)) = lock(&shared.stale_metadata).get(&uid)
                    && let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    for (name, kept) in [("labels", labels), ("annotations", annotations)] {
                        match kept {
                            Value::Null => meta.remove(name),
                            kept => meta.insert(name.into(), kept.clone()),
                        };
                    }
                }
                let lag = shared.config.pod_update_lag;
                if lag.is_zero() || !lock(&shared.pods).contains_key(&uid) {
                    lock(&shared.pods).insert(uid.clone(), v);
                    wake(&uid);
                } else {
                    // An update arrives late; a later one arriving first is never undone.
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(lag).await;
                        let version = |p: &Value| {
                            p.pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str)
                                .and_then(|rv| rv.parse::<u64>().ok())
                                .unwrap_or(0)
                        };
                        let mut pods = lock(&shared.pods);
                        if let Some(held) = pods.get_mut(&uid)
                            && version(held) < version(&v)
                        {
                            *held = v;
                        }
                        drop(pods);
                        if let Some(w) = lock(&shared.workers).get(&uid) {
                            w.wake.notify_one();
                        }
                    });
                }
            }
            watcher::Event::Delete(obj) => {
                let Ok(v) = serde_json::to_value(&obj) else {
                    continue;
                };
                let Some(uid) = uid_of(&v) else { continue };
                lock(&shared.pods).remove(&uid);
                wake(&uid);
            }
            watcher::Event::Init => buffer = Some(HashMap::new()),
            watcher::Event::InitApply(obj) => {
                let Ok(v) = serde_json::to_value(&obj) else {
                    continue;
                };
                if let (Some(b), Some(uid)) = (buffer.as_mut(), uid_of(&v)) {
                    b.insert(uid, v);
                }
            }
            watcher::Event::InitDone => {
                if let Some(b) = buffer.take() {
                    *lock(&shared.pods) = b;
                }
                for w in lock(&shared.workers).values() {
                    w.wake.notify_one();
                }
            }
        }
        shared.pods_changed.notify_one();
    }
}

/// Starts a pod worker for every pod that has none (kubelet's pod workers).
async fn dispatch(shared: Arc<Shared>) {
    loop {
        let uids: Vec<String> = lock(&shared.pods).keys().cloned().collect();
        for uid in uids {
            let mut workers = lock(&shared.workers);
            if workers.contains_key(&uid) {
                continue;
            }
            let wake = Arc::new(Notify::new());
            let task = tokio::spawn(sync::pod_worker(shared.clone(), uid.clone(), wake.clone()));
            workers.insert(uid, Worker { wake, task });
        }
        tokio::select! {
            _ = shared.pods_changed.notified() => {}
            _ = tokio::time::sleep(shared.config.sync_period) => {}
        }
    }
}
