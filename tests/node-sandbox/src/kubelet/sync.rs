//! One pod's worker: sync the runtime to the spec (sandbox, init containers, containers,
//! restarts, hash-change recreation, in-place resize), then write the pod status.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inplaced::cri::labels;
use inplaced::cri::proto::{Container, ContainerState, ContainerStatus};
use inplaced::hashing::parse_stored_hash;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::resize::{self, Applied, PodResize};
use super::spec::{self, ContainerInputs, PodIds, Qos, str_field};
use super::{NODE_IP, Sandbox, Shared, backoff, cgroups, lock};

/// Per-pod memory of the worker between syncs.
#[derive(Default)]
struct PodState {
    last_status: Option<Value>,
    start_time: Option<String>,
    /// condition type → (status, lastTransitionTime)
    conditions: HashMap<String, (bool, String)>,
    /// container ID → readiness probe state
    probes: HashMap<String, Probe>,
    /// container name → why it has no container (image missing, bad spec)
    waiting: HashMap<String, (String, String)>,
    /// Exited containers never change: their status is fetched once.
    exited: HashMap<String, ContainerStatus>,
    terminated: bool,
    /// The regular containers have been started once: as kubelet's HasAnyRegularContainerStarted,
    /// the pod stays Initialized, regular init containers never run again, and a sidecar that
    /// restarts no longer holds up the app containers.
    initialized: bool,
    resize: PodResize,
    /// CRI statuses of running containers read earlier in this sync, by container ID.
    fresh: HashMap<String, ContainerStatus>,
    /// What syncs the pod at once when it changes (a PLEG event, a pod update), as last seen.
    sync_triggers: Option<Value>,
    /// A change of those not yet acted on: the kubelet's sync for it comes `restart_delay`
    /// after the stand-in noticed it (the PLEG's lag, as for restarts).
    event_due: Option<Instant>,
    /// When the pod worker requeued a pod whose last look met a back-off.
    backoff_retry: Option<Instant>,
    /// This sync looks at containers in back-off (else the last look's verdict stands).
    looks_at_backoff: bool,
    /// This sync looked and found a container held by its back-off: the earliest end of the
    /// waits met (Unix nanoseconds).
    met_backoff: Option<i64>,
}

struct Probe {
    next: Instant,
    ready: bool,
}

pub(super) async fn pod_worker(shared: Arc<Shared>, uid: String, wake: Arc<Notify>) {
    let mut st = PodState::default();
    loop {
        let pod = lock(&shared.pods).get(&uid).cloned();
        match pod {
            None => {
                shared.teardown(&uid).await;
                lock(&shared.workers).remove(&uid);
                return;
            }
            Some(pod) if pod.pointer("/metadata/deletionTimestamp").is_some() => {
                terminate(&shared, &pod, &mut st).await;
            }
            Some(pod) => {
                if let Err(e) = sync_pod(&shared, &pod, &mut st).await {
                    tracing::warn!(pod = str_field(&pod["metadata"], "name"), error = %e, "pod sync");
                }
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(shared.config.sync_period) => {}
        }
    }
}

/// What makes a kubelet sync a pod at once rather than at its worker's next retry: a PLEG
/// event (a container of the pod appeared or changed state) or an update of its spec or
/// metadata (its status alone is not one).
fn sync_triggers(pod: &Value, runtime: &HashMap<String, Vec<Container>>) -> Value {
    let mut states: Vec<(&str, i32)> = runtime
        .values()
        .flatten()
        .map(|c| (c.id.as_str(), c.state))
        .collect();
    states.sort_unstable();
    json!({
        "spec": pod.get("spec"),
        "labels": pod.pointer("/metadata/labels"),
        "annotations": pod.pointer("/metadata/annotations"),
        "containers": states,
    })
}

fn ids(pod: &Value) -> PodIds<'_> {
    PodIds {
        name: str_field(&pod["metadata"], "name"),
        namespace: str_field(&pod["metadata"], "namespace"),
        uid: str_field(&pod["metadata"], "uid"),
    }
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn state_of(c: &Container) -> ContainerState {
    ContainerState::try_from(c.state).unwrap_or(ContainerState::ContainerUnknown)
}

fn restart_count(c: &Container) -> u32 {
    c.annotations
        .get(labels::CONTAINER_RESTART_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn grace_period(pod: &Value) -> i64 {
    pod.pointer("/metadata/deletionGracePeriodSeconds")
        .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(30)
}

/// What a container's reconciliation left it as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Running,
    /// Exited 0 and not to be restarted.
    Completed,
    /// Exited non-zero and not to be restarted.
    Failed,
    Waiting,
}

impl Shared {
    async fn ensure_sandbox(
        &self,
        pod: &Value,
        ids: &PodIds<'_>,
        qos: Qos,
    ) -> anyhow::Result<Sandbox> {
        if let Some(sb) = lock(&self.sandboxes).get(ids.uid).cloned() {
            return Ok(sb);
        }
        let cgroup_parent = if self.config.systemd_cgroups {
            spec::pod_slice_parent(qos, ids.uid)
        } else {
            spec::pod_cgroup_parent(&self.config.cgroup_root, qos, ids.uid)
        };
        let config = spec::sandbox_config(pod, ids, &cgroup_parent);
        // A sandbox of this pod UID from an earlier run of the stand-in is adopted (the UID
        // belongs to a pod of this node, so it is ours).
        let existing = self.sandboxes_of(ids.uid).await?;
        let id = match existing.into_iter().next() {
            Some(id) => id,
            None => {
                cgroups::create(&cgroup_parent, &spec::pod_cgroup_limits(pod));
                self.cri
                    .run_pod_sandbox(config.clone())
                    .await
                    .map_err(|e| anyhow::anyhow!("RunPodSandbox: {e}"))?
            }
        };
        let sb = Sandbox {
            id,
            config,
            cgroup_parent,
        };
        lock(&self.sandboxes).insert(ids.uid.to_owned(), sb.clone());
        Ok(sb)
    }

    async fn status_of(&self, st: &mut PodState, c: &Container) -> Option<ContainerStatus> {
        if let Some(s) = st.exited.get(&c.id) {
            return Some(s.clone());
        }
        let status = self.cri.container_status(&c.id, false).await.ok()?.status?;
        if status.state == ContainerState::ContainerExited as i32 {
            st.exited.insert(c.id.clone(), status.clone());
        }
        Some(status)
    }

    /// Runs the preStop hook recorded on the container, then StopContainer with what is left of
    /// the grace period (at least 2 s, as kubelet).
    async fn kill(&self, c: &Container, grace_secs: i64) {
        let started = Instant::now();
        let grace = Duration::from_secs(grace_secs.max(0) as u64);
        if let Some(handler) = c
            .annotations
            .get(labels::CONTAINER_PRESTOP_HANDLER)
            .and_then(|h| serde_json::from_str::<Value>(h).ok())
        {
            if let Some(cmd) = handler.pointer("/exec/command").and_then(Value::as_array) {
                let cmd: Vec<String> = cmd
                    .iter()
                    .map(|s| s.as_str().unwrap_or("").to_owned())
                    .collect();
                let _ = tokio::time::timeout(grace, self.cri.exec_sync(&c.id, cmd, grace)).await;
            } else if let Some(secs) = handler.pointer("/sleep/seconds").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_secs(secs).min(grace)).await;
            }
        }
        let left = grace
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(2));
        if let Err(e) = self.cri.stop_container(&c.id, left).await
            && !e.is_not_found()
        {
            tracing::warn!(id = c.id, error = %e, "StopContainer");
        }
    }

    /// CreateContainer + StartContainer for a spec container; then only the most recent dead
    /// container of that name is kept (kubelet's container GC keeps one per name).
    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &Value,
        sb: &Sandbox,
        c: &Value,
        hashes: spec::SpecHashes,
        restart_count: u32,
        older: &[Container],
        st: &mut PodState,
    ) -> Outcome {
        let name = str_field(c, "name");
        let image = str_field(c, "image");
        match self.cri.image_status(image).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                // No registry here: a missing image is never pulled.
                let reason = if str_field(c, "imagePullPolicy") == "Never" {
                    "ErrImageNeverPull"
                } else {
                    "ErrImagePull"
                };
                let msg =
                    format!("image {image:?} is not present on the node (no pulls in the sandbox)");
                if st.waiting.get(name).map(|w| &w.0[..]) != Some(reason) {
                    self.event(pod, Some(name), "Warning", "Failed", &msg).await;
                }
                st.waiting.insert(name.to_owned(), (reason.to_owned(), msg));
                return Outcome::Waiting;
            }
            Err(e) => {
                tracing::warn!(image, error = %e, "ImageStatus");
                return Outcome::Waiting;
            }
        }
        let qos = spec::qos_class(pod);
        let input = ContainerInputs {
            pod,
            ids: ids(pod),
            hashes,
            restart_count,
            qos,
            node_memory: self.node_memory,
            pod_ip: NODE_IP,
        };
        let config = spec::container_config(c, &input);
        let sent = config
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map(Applied::from);
        let id = match self
            .cri
            .create_container(&sb.id, config, sb.config.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let msg = e.to_string();
                self.event(pod, Some(name), "Warning", "Failed", &msg).await;
                st.waiting
                    .insert(name.to_owned(), ("CreateContainerError".into(), msg));
                return Outcome::Waiting;
            }
        };
        st.waiting.remove(name);
        if let Some(sent) = sent {
            st.resize.actuated.insert(name.to_owned(), sent);
        }
        self.event(
            pod,
            Some(name),
            "Normal",
            "Created",
            &format!("Created container {name}"),
        )
        .await;
        if let Err(e) = self.cri.start_container(&id).await {
            self.event(pod, Some(name), "Warning", "Failed", &format!("Error: {e}"))
                .await;
            return Outcome::Waiting;
        }
        self.event(
            pod,
            Some(name),
            "Normal",
            "Started",
            &format!("Started container {name}"),
        )
        .await;
        // `older` was listed before this start: its first entry is now the most recent dead one.
        for dead in older.iter().skip(1) {
            if state_of(dead) != ContainerState::ContainerRunning {
                let _ = self.cri.remove_container(&dead.id).await;
                st.exited.remove(&dead.id);
            }
        }
        Outcome::Running
    }

    /// kubelet's computePodActions for one container.
    async fn reconcile(
        &self,
        pod: &Value,
        sb: &Sandbox,
        c: &Value,
        policy: &str,
        list: &[Container],
        st: &mut PodState,
    ) -> Outcome {
        let name = str_field(c, "name");
        let hashes = match spec::spec_hashes(c, &self.version, self.config.resize_gate) {
            Ok(h) => h,
            Err(e) => {
                // A real API server would never have handed kubelet this container.
                st.waiting
                    .insert(name.to_owned(), ("CreateContainerConfigError".into(), e));
                return Outcome::Waiting;
            }
        };
        let Some(newest) = list.first() else {
            return self.start_container(pod, sb, c, hashes, 0, list, st).await;
        };
        match state_of(newest) {
            ContainerState::ContainerRunning => {
                let stored = parse_stored_hash(
                    newest
                        .annotations
                        .get(labels::CONTAINER_HASH)
                        .map(String::as_str),
                );
                let stored_wr = newest
                    .annotations
                    .get(labels::CONTAINER_HASH_WITHOUT_RESOURCES)
                    .map(|v| parse_stored_hash(Some(v)));
                // With the resize gate (1.27–1.30) a resources-only change is not a restart.
                let changed = match (hashes.without_resources, stored_wr) {
                    (Some(spec_wr), Some(stored_wr)) => spec_wr != stored_wr,
                    _ => hashes.hash != stored,
                };
                if !changed {
                    return Outcome::Running;
                }
                let msg = format!("Container {name} definition changed, will be restarted");
                self.event(pod, Some(name), "Normal", "Killing", &msg).await;
                self.kill(newest, grace_period(pod)).await;
                let rc = restart_count(newest) + 1;
                self.start_container(pod, sb, c, hashes, rc, list, st).await
            }
            _ => {
                let status = self.status_of(st, newest).await;
                let exit_code = status.as_ref().map_or(0, |s| s.exit_code);
                let finished = status
                    .as_ref()
                    .map(|s| s.finished_at)
                    .filter(|f| *f > 0)
                    .unwrap_or(newest.created_at);
                let restart = match policy {
                    "Never" => false,
                    "OnFailure" => exit_code != 0,
                    _ => true,
                };
                if !restart {
                    return if exit_code == 0 {
                        Outcome::Completed
                    } else {
                        Outcome::Failed
                    };
                }
                let due = finished + self.config.restart_delay.as_nanos() as i64;
                let now = now_nanos();
                if now < due {
                    return Outcome::Waiting;
                }
                if !st.looks_at_backoff {
                    // Not looked at since its back-off was met: it waits for the requeue.
                    return Outcome::Waiting;
                }
                // doBackOff: the key names the pod, the container and its hash.
                let ids = ids(pod);
                let pod_ref = format!("{}_{}({})", ids.name, ids.namespace, ids.uid);
                let key = format!(
                    "{}_{}_{}_{name}_{:x}",
                    ids.name, ids.namespace, ids.uid, hashes.hash
                );
                let waiting = lock(&self.backoff).waiting(&self.backoff_rule, &key, finished, now);
                if let Some(delay) = waiting {
                    if st.waiting.get(name).map(|w| &w.0[..]) != Some("CrashLoopBackOff") {
                        let msg =
                            format!("Back-off restarting failed container {name} in pod {pod_ref}");
                        self.event(pod, Some(name), "Warning", "BackOff", &msg)
                            .await;
                    }
                    let msg = format!(
                        "back-off {} restarting failed container={name} pod={pod_ref}",
                        backoff::go_duration(delay)
                    );
                    st.waiting
                        .insert(name.to_owned(), ("CrashLoopBackOff".to_owned(), msg));
                    let ends = finished.saturating_add(backoff::nanos(delay));
                    st.met_backoff = Some(st.met_backoff.map_or(ends, |e| e.min(ends)));
                    return Outcome::Waiting;
                }
                lock(&self.backoff).next(&self.backoff_rule, &key, finished, now);
                let rc = restart_count(newest) + 1;
                self.start_container(pod, sb, c, hashes, rc, list, st).await
            }
        }
    }

    /// Exec readiness probe of a running container; other probe kinds count as passing.
    async fn ready(&self, c: &Value, ct: &Container, st: &mut PodState) -> bool {
        let Some(probe) = c.get("readinessProbe") else {
            return true;
        };
        let Some(cmd) = probe.pointer("/exec/command").and_then(Value::as_array) else {
            return true;
        };
        let secs = |k: &str, d: u64| probe.get(k).and_then(Value::as_u64).unwrap_or(d);
        let now = Instant::now();
        let entry = st.probes.entry(ct.id.clone()).or_insert_with(|| Probe {
            next: now + Duration::from_secs(secs("initialDelaySeconds", 0)),
            ready: false,
        });
        if now < entry.next {
            return entry.ready;
        }
        let cmd: Vec<String> = cmd
            .iter()
            .map(|s| s.as_str().unwrap_or("").to_owned())
            .collect();
        let timeout = Duration::from_secs(secs("timeoutSeconds", 1).max(1));
        let ok = matches!(
            tokio::time::timeout(timeout + Duration::from_secs(1), self.cri.exec_sync(&ct.id, cmd, timeout)).await,
            Ok(Ok(r)) if r.exit_code == 0
        );
        let entry = st.probes.entry(ct.id.clone()).or_insert(Probe {
            next: now,
            ready: false,
        });
        entry.ready = ok;
        entry.next = Instant::now() + Duration::from_secs(secs("periodSeconds", 10).max(1));
        ok
    }
}

async fn sync_pod(sh: &Shared, spec_pod: &Value, st: &mut PodState) -> anyhow::Result<()> {
    let ids = ids(spec_pod);
    let qos = spec::qos_class(spec_pod);
    let resizing = sh.resize.active();
    // kubelet runs the pod as allocated: a resize it has not admitted changes nothing yet.
    let allocated;
    let pod = if resizing {
        allocated = sh.admit_resize(spec_pod, ids.uid, &mut st.resize);
        &allocated
    } else {
        spec_pod
    };
    let sb = sh.ensure_sandbox(pod, &ids, qos).await?;
    st.fresh.clear();
    st.start_time.get_or_insert_with(crate::util::now_rfc3339);
    let pod_policy = pod
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always")
        .to_owned();
    let runtime = sh.list_containers(&sb.id).await?;
    let none: Vec<Container> = Vec::new();
    // A pod held in back-off is looked at again at its requeue or at an event of it.
    let triggers = sync_triggers(spec_pod, &runtime);
    let now = Instant::now();
    if st.sync_triggers.as_ref() != Some(&triggers) {
        st.sync_triggers = Some(triggers);
        st.event_due.get_or_insert(now + sh.config.restart_delay);
    }
    let event_due = st.event_due.is_some_and(|due| now >= due);
    st.looks_at_backoff = event_due || st.backoff_retry.is_none_or(|retry| now >= retry);
    if event_due {
        st.event_due = None;
    }
    st.met_backoff = None;

    // Init containers in order, each to completion (restartable sidecars only to running).
    let mut init_done = true;
    let mut init_failed = false;
    for c in spec::containers(pod, "initContainers") {
        let sidecar = str_field(&c, "restartPolicy") == "Always";
        if st.initialized && !sidecar {
            continue;
        }
        let policy = if sidecar {
            "Always"
        } else if pod_policy == "Never" {
            "Never"
        } else {
            "OnFailure"
        };
        let list = runtime.get(str_field(&c, "name")).unwrap_or(&none);
        let outcome = sh.reconcile(pod, &sb, &c, policy, list, st).await;
        match outcome {
            Outcome::Completed => {}
            Outcome::Running if sidecar => {}
            // Restarted beside the app containers, which it no longer holds up.
            _ if st.initialized => {}
            Outcome::Failed => {
                init_done = false;
                init_failed = true;
                break;
            }
            _ => {
                init_done = false;
                break;
            }
        }
    }
    if init_done {
        for c in spec::containers(pod, "containers") {
            let list = runtime.get(str_field(&c, "name")).unwrap_or(&none);
            sh.reconcile(pod, &sb, &c, &pod_policy, list, st).await;
        }
        st.initialized = true;
    }
    if st.looks_at_backoff {
        // The worker's requeue after the sync error a back-off is; each such sync sets it anew.
        st.backoff_retry = st.met_backoff.map(|ends| {
            let left = Duration::from_nanos(u64::try_from(ends - now_nanos()).unwrap_or(0));
            now + backoff::requeue_after(sh.version.minor(), left, sh.config.backoff_retry_jitter)
        });
    }
    if resizing {
        // Listed again: the actions above may have replaced containers.
        let runtime = sh.list_containers(&sb.id).await?;
        match sh
            .actuate_resize(pod, &sb, &runtime, &mut st.resize, &mut st.fresh)
            .await
        {
            Ok(()) => {
                st.resize.in_progress = false;
                st.resize.error = None;
            }
            Err(e) => {
                tracing::warn!(pod = ids.name, error = %e, "resize");
                st.resize.error = Some(e);
            }
        }
    }
    let mut status = pod_status(sh, pod, &sb, st, init_done, init_failed, qos).await?;
    if resizing {
        resize_status(sh, spec_pod, &mut status, &mut st.resize);
    }
    write_status(sh, spec_pod, st, status).await
}

/// What kubelet reports about resizes: `status.resize` until 1.32, the `PodResizePending` and
/// `PodResizeInProgress` conditions from 1.33 (`status.resize` cleared: kubelet's status
/// writes drop what it no longer sets).
fn resize_status(sh: &Shared, spec_pod: &Value, status: &mut Value, st: &mut PodResize) {
    let now = crate::util::now_rfc3339();
    if !sh.resize.conditions() {
        let statuses = status["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if resize::settled(spec_pod, &statuses) {
            st.pending = None;
            st.in_progress = false;
        }
        let value = match (&st.pending, st.in_progress) {
            (Some(p), _) => json!(p.reason()),
            (None, true) => json!("InProgress"),
            (None, false) => Value::Null,
        };
        status["resize"] = value;
        return;
    }
    status["resize"] = Value::Null;
    let mut conditions = Vec::new();
    match &st.pending {
        Some(p) => {
            let since = st.pending_since.get_or_insert_with(|| now.clone());
            conditions.push(resize::condition(
                "PodResizePending",
                since,
                p.reason(),
                p.message(),
            ));
        }
        None => st.pending_since = None,
    }
    if st.in_progress {
        let since = st.in_progress_since.get_or_insert_with(|| now.clone());
        let (reason, message) = match &st.error {
            Some(e) => ("Error", e.as_str()),
            None => ("", ""),
        };
        conditions.push(resize::condition(
            "PodResizeInProgress",
            since,
            reason,
            message,
        ));
    } else {
        st.in_progress_since = None;
    }
    if let Some(list) = status["conditions"].as_array_mut() {
        list.extend(conditions);
    }
}

async fn write_status(
    sh: &Shared,
    pod: &Value,
    st: &mut PodState,
    status: Value,
) -> anyhow::Result<()> {
    // Like kubelet's status manager: nothing to write when the API already shows it (others,
    // e.g. the API server marking a resize Proposed, may have changed it meanwhile).
    let api_status = pod.get("status").unwrap_or(&Value::Null);
    let api_shows = |k: &String, v: &Value| match api_status.get(k) {
        None | Some(Value::Null) => v.is_null(),
        Some(a) => a == v,
    };
    let shown = status
        .as_object()
        .is_some_and(|o| o.iter().all(|(k, v)| api_shows(k, v)));
    if st.last_status.as_ref() == Some(&status) && shown {
        return Ok(());
    }
    let ids = ids(pod);
    sh.pods_api(ids.namespace)
        .patch_status(
            ids.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    st.last_status = Some(status);
    Ok(())
}

fn terminated_json(s: &ContainerStatus, runtime: &str) -> Value {
    let mut t = json!({
        "exitCode": s.exit_code,
        "reason": if s.reason.is_empty() { if s.exit_code == 0 { "Completed" } else { "Error" } } else { &s.reason },
        "containerID": format!("{runtime}://{}", s.id),
    });
    if let Some(v) = crate::util::nanos_rfc3339(s.started_at) {
        t["startedAt"] = json!(v);
    }
    if let Some(v) = crate::util::nanos_rfc3339(s.finished_at) {
        t["finishedAt"] = json!(v);
    }
    if !s.message.is_empty() {
        t["message"] = json!(s.message);
    }
    json!({"terminated": t})
}

/// One entry of `containerStatuses` / `initContainerStatuses`, and whether it is ready.
async fn container_status_json(
    sh: &Shared,
    c: &Value,
    list: &[Container],
    st: &mut PodState,
    blocked: bool,
) -> (Value, bool, bool) {
    let name = str_field(c, "name");
    let mut out = json!({"name": name, "image": str_field(c, "image"), "imageID": "",
                         "ready": false, "started": false, "restartCount": 0,
                         "state": {}, "lastState": {}});
    let Some(newest) = list.first() else {
        let (reason, message) = st.waiting.get(name).cloned().unwrap_or_else(|| {
            let r = if blocked {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            (r.to_owned(), String::new())
        });
        let mut w = json!({"reason": reason});
        if !message.is_empty() {
            w["message"] = json!(message);
        }
        out["state"] = json!({"waiting": w});
        return (out, false, false);
    };
    let runtime = &sh.runtime_name;
    out["containerID"] = json!(format!("{runtime}://{}", newest.id));
    out["restartCount"] = json!(restart_count(newest));
    out["imageID"] = json!(newest.image_ref);
    if let Some(prev) = list
        .iter()
        .skip(1)
        .find(|c| state_of(c) != ContainerState::ContainerRunning)
        && let Some(s) = sh.status_of(st, prev).await
    {
        out["lastState"] = terminated_json(&s, runtime);
    }
    let running = state_of(newest) == ContainerState::ContainerRunning;
    let mut ready = false;
    // With in-place resize: `c` is the container as allocated (kubelet's allocated pod).
    let allocated = c.get("resources").cloned().unwrap_or(Value::Null);
    if sh.resize.active()
        && sh.resize.reports_allocated()
        && let Some(requests) = allocated.get("requests")
    {
        out["allocatedResources"] = requests.clone();
    }
    if running {
        let started = match st.fresh.remove(&newest.id) {
            Some(s) => Some(s),
            None => sh
                .cri
                .container_status(&newest.id, false)
                .await
                .ok()
                .and_then(|r| r.status),
        };
        let started_at = started
            .as_ref()
            .and_then(|s| crate::util::nanos_rfc3339(s.started_at));
        out["state"] = json!({"running": {"startedAt": started_at}});
        out["started"] = json!(true);
        if sh.resize.active() {
            let applied = started
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.linux.as_ref());
            out["resources"] = resize::status_resources(&allocated, applied);
        }
        ready = sh.ready(c, newest, st).await;
        out["ready"] = json!(ready);
    } else if let Some(s) = sh.status_of(st, newest).await {
        if s.state == ContainerState::ContainerCreated as i32 {
            out["state"] = json!({"waiting": {"reason": "ContainerCreating"}});
        } else if let Some((reason, message)) = st.waiting.get(name)
            && reason == "CrashLoopBackOff"
        {
            // Waiting out the back-off: the exit it follows is the last state.
            out["state"] = json!({"waiting": {"reason": reason, "message": message}});
            out["lastState"] = terminated_json(&s, runtime);
        } else {
            out["state"] = terminated_json(&s, runtime);
        }
    }
    if !running && sh.resize.active() && sh.resize.resources_when_not_running() {
        out["resources"] = resize::status_resources(&allocated, None);
    }
    (out, ready, running)
}

async fn pod_status(
    sh: &Shared,
    pod: &Value,
    sb: &Sandbox,
    st: &mut PodState,
    init_done: bool,
    init_failed: bool,
    qos: Qos,
) -> anyhow::Result<Value> {
    // Listed again: the actions above changed the runtime.
    let runtime = sh.list_containers(&sb.id).await?;
    let none: Vec<Container> = Vec::new();
    let mut init_statuses = Vec::new();
    for c in spec::containers(pod, "initContainers") {
        let list = runtime.get(str_field(&c, "name")).unwrap_or(&none);
        let (s, _, _) = container_status_json(sh, &c, list, st, false).await;
        init_statuses.push(s);
    }
    let mut statuses = Vec::new();
    let mut all_ready = true;
    let mut any_running = false;
    let mut all_exist = true;
    let mut exit_codes = Vec::new();
    for c in spec::containers(pod, "containers") {
        let list = runtime.get(str_field(&c, "name")).unwrap_or(&none);
        let (s, ready, running) = container_status_json(sh, &c, list, st, !init_done).await;
        all_ready &= ready;
        any_running |= running;
        all_exist &= !list.is_empty();
        if let Some(code) = s
            .pointer("/state/terminated/exitCode")
            .and_then(Value::as_i64)
        {
            exit_codes.push(code);
        }
        statuses.push(s);
    }
    let policy = pod
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    let all_exited = !statuses.is_empty() && exit_codes.len() == statuses.len();
    let phase = if init_failed {
        "Failed"
    } else if !init_done || !all_exist {
        "Pending"
    } else if any_running || !all_exited || policy == "Always" {
        "Running"
    } else if exit_codes.iter().all(|c| *c == 0) {
        "Succeeded"
    } else if policy == "Never" {
        "Failed"
    } else {
        "Running"
    };
    let now = crate::util::now_rfc3339();
    let mut condition = |kind: &str, ok: bool| {
        let entry = st
            .conditions
            .entry(kind.to_owned())
            .or_insert_with(|| (ok, now.clone()));
        if entry.0 != ok {
            *entry = (ok, now.clone());
        }
        json!({"type": kind, "status": if ok { "True" } else { "False" },
               "lastProbeTime": null, "lastTransitionTime": entry.1})
    };
    let containers_ready = init_done && all_ready && !statuses.is_empty();
    // As kubelet's GeneratePodReadyCondition: Ready also needs every readiness gate's condition
    // (kruise's InPlaceUpdateReady) to be True; a gate without its condition is not ready.
    let gates_ready = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("conditionType").and_then(Value::as_str))
        .all(|gate| {
            pod.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == gate && c["status"] == "True")
        });
    let mut conditions = vec![
        condition("Initialized", init_done),
        condition("Ready", containers_ready && gates_ready),
        condition("ContainersReady", containers_ready),
        condition("PodScheduled", true),
    ];
    // Like kubelet's status manager, conditions it does not own (readiness gates such as
    // kruise's InPlaceUpdateReady) stay as their owners wrote them.
    const KUBELET_OWNED: [&str; 7] = [
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
        "PodReadyToStartContainers",
        "PodResizePending",
        "PodResizeInProgress",
    ];
    if let Some(existing) = pod.pointer("/status/conditions").and_then(Value::as_array) {
        conditions.extend(
            existing
                .iter()
                .filter(|c| {
                    c["type"]
                        .as_str()
                        .is_some_and(|t| !KUBELET_OWNED.contains(&t))
                })
                .cloned(),
        );
    }
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": NODE_IP, "hostIPs": [{"ip": NODE_IP}],
        "podIP": NODE_IP, "podIPs": [{"ip": NODE_IP}],
        "startTime": st.start_time,
        "qosClass": qos.as_str(),
        "containerStatuses": statuses,
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    Ok(status)
}

/// Graceful deletion: kill every container with the pod's grace period, remove the sandbox and
/// the cgroup, then finish the deletion (grace 0) as kubelet's status manager does.
async fn terminate(sh: &Shared, pod: &Value, st: &mut PodState) {
    let ids = ids(pod);
    if !st.terminated {
        let sb = lock(&sh.sandboxes).get(ids.uid).cloned();
        if let Some(sb) = sb {
            // A kubelet never finishes a deletion it could not stop the containers for: when the
            // runtime cannot list them now, the next sync tries again.
            let runtime = match sh.list_containers(&sb.id).await {
                Ok(runtime) => runtime,
                Err(err) => {
                    tracing::warn!(pod = ids.name, error = %err, "cannot list the pod's containers to stop them; trying again");
                    return;
                }
            };
            {
                let grace = grace_period(pod);
                let running: Vec<Container> = runtime
                    .into_values()
                    .flatten()
                    .filter(|c| state_of(c) == ContainerState::ContainerRunning)
                    .collect();
                let kills = running.iter().map(|c| async move {
                    let name = c
                        .labels
                        .get(labels::CONTAINER_NAME)
                        .cloned()
                        .unwrap_or_default();
                    sh.event(
                        pod,
                        Some(&name),
                        "Normal",
                        "Killing",
                        &format!("Stopping container {name}"),
                    )
                    .await;
                    sh.kill(c, grace).await;
                });
                futures::future::join_all(kills).await;
            }
            sh.teardown(ids.uid).await;
        }
        st.terminated = true;
    }
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(ids.uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let api: kube::Api<Pod> = sh.pods_api(ids.namespace);
    match api.delete(ids.name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => tracing::warn!(pod = ids.name, error = %e, "finishing pod deletion"),
    }
}
