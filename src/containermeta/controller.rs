//! The container-meta loop: per served pod, keeps `apps.kruise.io/runtime-containers-meta`
//! current (patched through `pods/status`, only when its content changes) and restarts
//! containers whose env-from-metadata values no longer match the pod's labels/annotations.
//! Level-triggered like the CRR loop: every node-view change, finished kill or tick re-decides.
//!
//! Restart safety:
//! - Started-with values come from the runtime (OCI spec `process.env` in containerd's verbose
//!   ContainerStatus); `env` through ExecSync only when the runtime has no spec to show.
//! - The kubelet race (`docs/containerd.md`): a mismatch must have been seen continuously for
//!   the settle delay (`env-restart-settle`, 1 s by default) before the kill, so the kubelet's
//!   pod copy has the change when it recreates the container.
//! - Each kill is journaled (own journal file, key `env:<pod uid>:<expected hash>:<restart
//!   count>`) before it starts; a journaled kill is never repeated after an agent restart. When
//!   the container our kill produced still mismatches, the value cannot be matched: one warning
//!   event and a metric, and the container is left alone (never a restart loop).
//! - A node-wide token bucket: at most [`ContainerMetaConfig::restarts_per_minute`] env restarts.
//! - Terminating pods are never touched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ::kube::api::ApiResource;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;

use crate::kube::events::PodEvents;
use crate::kube::status::{ObjectRef, StatusWriter, Target, Written};
use crate::kube::{CachedContainer, CachedPod};

use super::plan::{self, EnvRestart, RuntimeMeta};
use super::{ContainerMetaMetrics, EnvRestartResult};
use crate::cri::CriClient;
use crate::cri::labels;
use crate::nodeview::Trigger;
use crate::nodeview::{
    ContainerKind, ContainerView, NodeView, PodView, RuntimeContainer, RuntimeState,
};
use crate::requests::Context;
use crate::restart::{
    ContainerPort, DEFAULT_TERMINATION_GRACE_SECONDS, KillIntent, KillJournal, KillLedger,
    KillOrder, PreStop, ReadyKill, Restarter, StopClaim, StopGate,
};

#[derive(Clone, Debug)]
pub struct ContainerMetaConfig {
    pub node_name: String,
    pub state_dir: PathBuf,
    /// How long a mismatch must be seen before the kill (the kubelet race); `env-restart-settle`.
    pub settle: Duration,
    /// Node-wide budget of env-from-metadata restarts (token bucket, burst of the same size);
    /// `env-restarts-per-minute`.
    pub restarts_per_minute: u32,
    /// Where kills are recorded for restart timing (`inplaced_restart_duration_seconds`).
    pub ledger: KillLedger,
    /// Shared with the CRR restarter: one stop per container.
    pub stops: StopGate,
}

impl ContainerMetaConfig {
    /// `stops` and `ledger` are the agent's own, shared with every other restarter: a gate made
    /// here would let a ContainerRecreateRequest and an env restart stop one container twice.
    pub fn new(node_name: &str, state_dir: PathBuf, stops: StopGate, ledger: KillLedger) -> Self {
        ContainerMetaConfig {
            node_name: node_name.to_owned(),
            state_dir,
            settle: Duration::from_secs(1),
            restarts_per_minute: 10,
            ledger,
            stops,
        }
    }
}

const JOURNAL_FILE: &str = "env-kill-journal.jsonl";
/// This controller's loop, as `/healthz` names it when it is stuck.
const WORKER: &str = "runtime-containers-meta";
/// ExecSync `env` timeout, as kruise.
const EXEC_TIMEOUT: Duration = Duration::from_secs(3);
/// A container whose env could not be read is asked again after this long.
const ENV_RETRY: Duration = Duration::from_secs(10);

/// What the runtime says of one container, read once per container ID.
#[derive(Clone, Debug)]
struct Started {
    env: Option<BTreeMap<String, String>>,
    pre_stop: Option<PreStop>,
    grace: Duration,
    ports: Vec<ContainerPort>,
    read_at: Instant,
}

/// What the loop keeps of one container of a served pod; forgotten with the pod.
#[derive(Default)]
struct SeenContainer {
    /// The expected values' hash of a mismatch and when that mismatch was first seen.
    mismatch_since: Option<(u64, Instant)>,
    /// Its env could not be decoded (reported once).
    undecodable: bool,
    /// Findings already reported: `not-restartable:<expected hash>`, `unmatched:<journal key>`.
    reported: HashSet<String>,
}

/// What the loop keeps of one runtime instance of a container; forgotten when no pod shows
/// it any more and no kill of it runs.
#[derive(Default)]
struct Instance {
    /// What the runtime said of it, once read.
    started: Option<Started>,
    /// A kill of it is under way.
    killing: bool,
    /// An earlier run's unfinished kill of it was resumed.
    resumed: bool,
}

struct Controller {
    config: ContainerMetaConfig,
    client: ::kube::Client,
    cri: CriClient,
    metrics: ContainerMetaMetrics,
    journal: Option<KillJournal>,
    /// (pod uid, container name) → what is known of that container of a served pod.
    containers: HashMap<(String, String), SeenContainer>,
    /// Runtime container ID → what is known of that running instance.
    instances: HashMap<String, Instance>,
    /// The `runtime-containers-meta` annotation's writer.
    annotations: StatusWriter<String>,
    tokens: f64,
    refilled: Instant,
}

/// Runs until `shutdown` turns true; kills under way are waited for. Not a request kind: it
/// follows the node view's pods, not request objects, so it runs a loop of its own (passes on a
/// view change, a kill's end, an annotation write landing, or when a settle time is up).
pub async fn run(ctx: Context, config: ContainerMetaConfig) {
    let Context {
        client,
        cri,
        mut views,
        health,
        metrics,
        mut shutdown,
    } = ctx;
    let progress = health.worker(WORKER, IDLE_PASS);
    let (done_tx, mut done_rx) = mpsc::channel::<String>(64);
    let tokens = f64::from(config.restarts_per_minute);
    let metrics: ContainerMetaMetrics = metrics.families();
    let patches = metrics.clone();
    let mut controller = Controller {
        annotations: StatusWriter::new(
            client.clone(),
            ApiResource::erase::<Pod>(&()),
            "Pod",
            Target::Annotation(plan::META_ANNOTATION),
        ),
        config,
        client,
        cri,
        metrics,
        journal: None,
        containers: HashMap::new(),
        instances: HashMap::new(),
        tokens,
        refilled: Instant::now(),
    };
    loop {
        let next_pass = controller.next_pass();
        tokio::select! {
            _ = views.changed() => {}
            Some(id) = done_rx.recv() => controller.killed(&id),
            Some(written) = controller.annotations.finished() => {
                patches.count_annotation_patch(written == Written::Landed);
            }
            _ = tokio::time::sleep(next_pass) => {}
            _ = shutdown.changed() => {}
        }
        progress.beat();
        if *shutdown.borrow() {
            break;
        }
        let view = views.borrow().clone();
        if view.synced {
            controller.sync(&view, &done_tx).await;
        }
    }
    while controller.instances.values().any(|i| i.killing) {
        match done_rx.recv().await {
            Some(id) => controller.killed(&id),
            None => break,
        }
    }
}

/// How soon to look again while an env restart is settling or under way, or a write is out.
const BUSY_PASS: Duration = Duration::from_millis(250);
/// How soon to look again without a change of the view otherwise: env reads to retry, the
/// restart budget to refill. Also the longest the loop waits before it turns anyway (its
/// worker's bound in `Health` adds it).
const IDLE_PASS: Duration = Duration::from_secs(5);

impl Controller {
    /// Every view change is a pass; between changes, passes only as often as pending work needs.
    fn next_pass(&self) -> Duration {
        let settling = self.containers.values().any(|c| c.mismatch_since.is_some());
        let killing = self.instances.values().any(|i| i.killing);
        if !settling && !killing && !self.annotations.busy() {
            IDLE_PASS
        } else {
            BUSY_PASS
        }
    }

    async fn sync(&mut self, view: &NodeView, done: &mpsc::Sender<String>) {
        let live: HashSet<&str> = view
            .pods
            .iter()
            .flat_map(|p| &p.containers)
            .filter_map(|c| c.runtime.as_ref().map(|r| r.id.as_str()))
            .collect();
        self.instances
            .retain(|id, i| i.killing || live.contains(id.as_str()));
        let pod_uids: HashSet<String> = view.pods.iter().map(|p| p.uid.clone()).collect();
        self.containers.retain(|(uid, _), _| pod_uids.contains(uid));
        self.annotations.retain(&pod_uids);
        for pod in &view.pods {
            self.sync_pod(pod, done).await;
        }
    }

    async fn sync_pod(&mut self, pod: &PodView, done: &mpsc::Sender<String>) {
        let Some(api_pod) = pod.api_pod.clone() else {
            return;
        };
        let Some(eligibility) = plan::eligibility(&api_pod) else {
            return;
        };
        if pod.terminating || api_pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let restarts = Restarts {
            enabled: plan::restarts_enabled(&api_pod, eligibility),
            not_restartable: not_restartable(pod, &api_pod),
        };
        let mut runtime = HashMap::new();
        for container in &pod.containers {
            if let Some(meta) = self
                .sync_container(pod, &api_pod, container, &restarts, done)
                .await
            {
                runtime.insert(container.name.clone(), meta);
            }
        }
        self.write_annotation(pod, &api_pod, &runtime);
    }

    /// One running regular container of a served pod: its env compared with the pod's metadata
    /// (a restart considered where restarts are on), and what the annotation says of it. `None`
    /// for a container the annotation leaves out.
    async fn sync_container(
        &mut self,
        pod: &PodView,
        api_pod: &CachedPod,
        container: &ContainerView,
        restarts: &Restarts,
        done: &mpsc::Sender<String>,
    ) -> Option<RuntimeMeta> {
        let (Some(spec), Some(r)) = (pod.spec_of(container), container.runtime.as_ref()) else {
            return None;
        };
        if container.kind != ContainerKind::Regular {
            return None;
        }
        let refs = self.metadata_refs(pod, container, spec)?;
        let mut env_hash = refs.is_empty().then_some(plan::NO_ENV_HASH);
        if !refs.is_empty() && r.state == RuntimeState::Running {
            let started = self.started(&r.id).await;
            env_hash = started
                .env
                .as_ref()
                .and_then(|env| plan::current_env_hash(spec, &refs, env));
            if restarts.enabled
                && let Some(env) = started.env.clone()
            {
                self.consider_restart(
                    pod,
                    api_pod,
                    container,
                    Change {
                        refs: &refs,
                        env: &env,
                        not_restartable: restarts.not_restartable,
                    },
                    &started,
                    done,
                )
                .await;
            }
        }
        Some(RuntimeMeta {
            container_id: r.container_id.clone(),
            stored_hash: r.stored_hash.clone(),
            stored_hash_without_resources: r.stored_hash_without_resources.clone(),
            env_hash,
        })
    }

    /// The container's env-from-metadata references; `None` when its env cannot be read.
    fn metadata_refs(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        spec: &CachedContainer,
    ) -> Option<Vec<plan::MetadataRef>> {
        match plan::metadata_refs(spec) {
            Ok(refs) => Some(refs),
            Err(err) => {
                // The API validated the spec: only a foreign writer gets here. Said once
                // per pod object, not on every pass.
                let seen = self.seen(pod, &container.name);
                if !std::mem::replace(&mut seen.undecodable, true) {
                    tracing::warn!(namespace = %pod.namespace, pod = %pod.name,
                        container = %container.name, error = %err,
                        "the container's env cannot be read; not served");
                }
                None
            }
        }
    }

    /// Writes the `runtime-containers-meta` annotation when its content changes.
    fn write_annotation(
        &mut self,
        pod: &PodView,
        api_pod: &CachedPod,
        runtime: &HashMap<String, RuntimeMeta>,
    ) {
        let Some(value) = plan::annotation_patch(api_pod, runtime) else {
            return;
        };
        let current = api_pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(plan::META_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        tracing::debug!(pod = %pod.name, namespace = %pod.namespace, %value, "writing runtime-containers-meta");
        let object = ObjectRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            // The annotation is this agent's alone: no version condition.
            resource_version: None,
        };
        self.annotations.write(&object, &current, value);
    }

    /// The runtime's facts of a container: env from the OCI spec (ExecSync `env` as the
    /// fallback), preStop, grace and ports from kubelet's annotations.
    async fn started(&mut self, id: &str) -> Started {
        if let Some(s) = self.instances.get(id).and_then(|i| i.started.as_ref())
            && (s.env.is_some() || s.read_at.elapsed() < ENV_RETRY)
        {
            return s.clone();
        }
        let mut started = Started {
            env: None,
            pre_stop: None,
            grace: Duration::from_secs(DEFAULT_TERMINATION_GRACE_SECONDS as u64),
            ports: Vec::new(),
            read_at: Instant::now(),
        };
        match self.cri.container_status(id, true).await {
            Ok(response) => {
                started.env = plan::env_from_verbose_info(&response.info);
                if let Some(status) = response.status {
                    let a = &status.annotations;
                    started.pre_stop = a
                        .get(labels::CONTAINER_PRESTOP_HANDLER)
                        .and_then(|v| serde_json::from_str(v).ok());
                    if let Some(grace) = a
                        .get(labels::POD_TERMINATION_GRACE_PERIOD)
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        started.grace = Duration::from_secs(grace);
                    }
                    started.ports = a
                        .get(labels::CONTAINER_PORTS)
                        .and_then(|v| serde_json::from_str(v).ok())
                        .unwrap_or_default();
                }
            }
            Err(err) => {
                tracing::debug!(id, error = %err, "cannot read a container's status");
            }
        }
        if started.env.is_none() {
            match self
                .cri
                .exec_sync(id, vec!["env".into()], EXEC_TIMEOUT)
                .await
            {
                Ok(result) if result.exit_code == 0 => {
                    let out = String::from_utf8_lossy(&result.stdout);
                    started.env = Some(plan::parse_env(out.lines()));
                }
                Ok(result) => {
                    tracing::warn!(
                        id,
                        exit_code = result.exit_code,
                        "no OCI spec and `env` failed in the container: cannot read its env"
                    );
                }
                Err(err) => {
                    tracing::warn!(id, error = %err, "no OCI spec and `env` failed in the container: cannot read its env");
                }
            }
        }
        self.instances.entry(id.to_owned()).or_default().started = Some(started.clone());
        started
    }

    #[allow(clippy::too_many_arguments)]
    async fn consider_restart(
        &mut self,
        pod: &PodView,
        api_pod: &CachedPod,
        container: &ContainerView,
        change: Change<'_>,
        started: &Started,
        done: &mpsc::Sender<String>,
    ) {
        let Some(r) = container.runtime.as_ref() else {
            return;
        };
        let expected = plan::expected_values(api_pod, change.refs);
        let differs = plan::env_differences(&expected, change.env);
        let expected_hash = fnv_of(&expected);
        let restart_count = r.restart_count.unwrap_or(0);
        let key = |n: u32| format!("env:{}:{expected_hash:x}:{n}", pod.uid);
        // The journal is read only for a change that may lead to a kill; without it, no kill.
        let (intent, previous_intent) = if differs.is_empty() || change.not_restartable.is_some() {
            (None, None)
        } else {
            let previous_key = restart_count.checked_sub(1).map(key);
            let Some(kills) = self.journalled_kills(
                &container.name,
                &key(restart_count),
                previous_key.as_deref(),
            ) else {
                return;
            };
            kills
        };
        let decision = plan::decide_env_restart(&plan::EnvRestartFacts {
            differs: !differs.is_empty(),
            not_restartable: change.not_restartable,
            container_id: &r.id,
            intent: intent.as_ref(),
            previous_intent: previous_intent.as_ref(),
            in_flight: self.instances.get(&r.id).is_some_and(|i| i.killing),
            resumed: self.instances.get(&r.id).is_some_and(|i| i.resumed),
            mismatch_for: self.mismatch_for(pod, &container.name, expected_hash),
            settle: self.config.settle,
            now_ms: Timestamp::now().as_millisecond(),
        });
        match decision {
            EnvRestart::Matches => {
                self.seen(pod, &container.name).mismatch_since = None;
            }
            EnvRestart::NotRestartable(why) => {
                self.report_not_restartable(pod, &container.name, expected_hash, &differs, why);
            }
            EnvRestart::AlreadyKilled | EnvRestart::InFlight => {}
            EnvRestart::ResumeOverdue => {
                self.resume_kill(pod, container, r, key(restart_count), done)
                    .await;
            }
            EnvRestart::Unmatched => {
                self.report_unmatched(pod, &container.name, key(restart_count), &differs);
            }
            EnvRestart::Settling => self.note_mismatch(pod, &container.name, expected_hash),
            EnvRestart::Kill => {
                self.note_mismatch(pod, &container.name, expected_hash);
                self.kill_for_env(
                    pod,
                    container,
                    r,
                    started,
                    key(restart_count),
                    &differs,
                    done,
                )
                .await;
            }
        }
    }

    /// The journal's record of a kill of `container` under `key`, and under `previous_key` (the
    /// same change one restart earlier). `None` when the journal cannot be opened.
    fn journalled_kills(
        &mut self,
        container: &str,
        key: &str,
        previous_key: Option<&str>,
    ) -> Option<(Option<KillIntent>, Option<KillIntent>)> {
        let journal = self.journal_mut()?;
        Some((
            journal.find(key, container).cloned(),
            previous_key
                .and_then(|previous| journal.find(previous, container))
                .cloned(),
        ))
    }

    /// How long this mismatch (these expected values) has been seen.
    fn mismatch_for(&self, pod: &PodView, container: &str, expected_hash: u64) -> Option<Duration> {
        self.containers
            .get(&(pod.uid.clone(), container.to_owned()))
            .and_then(|c| c.mismatch_since)
            .filter(|(hash, _)| *hash == expected_hash)
            .map(|(_, at)| at.elapsed())
    }

    /// A mismatch that a restart would not cure: warned about and counted once per change.
    fn report_not_restartable(
        &mut self,
        pod: &PodView,
        container: &str,
        expected_hash: u64,
        differs: &[String],
        why: &str,
    ) {
        if self
            .seen(pod, container)
            .reported
            .insert(format!("not-restartable:{expected_hash:x}"))
        {
            self.metrics
                .count_env_restart(EnvRestartResult::NotRestartable);
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, container = %container,
                differs = %differs.join(", "), reason = why,
                "the container's env differs from the pod's labels/annotations; not restarting it");
        }
    }

    /// The container our kill produced still mismatches: warned about, counted and told on the
    /// pod once per kill, and never restarted again for it.
    fn report_unmatched(
        &mut self,
        pod: &PodView,
        container: &str,
        journal_key: String,
        differs: &[String],
    ) {
        if self
            .seen(pod, container)
            .reported
            .insert(format!("unmatched:{journal_key}"))
        {
            self.metrics.count_env_restart(EnvRestartResult::Unmatched);
            let message = format!(
                "container {} still runs with env {} that differs from the pod's labels/annotations after an in-place restart; not restarting it again",
                container,
                differs.join(", ")
            );
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, %message);
            PodEvents::new(self.client.clone(), &self.config.node_name).emit(
                &pod.event_ref(),
                "EnvFromMetadataUnmatched",
                message,
                "Warning",
            );
        }
    }

    /// Finishes an earlier run's env restart that never finished: no hook, the minimum grace,
    /// no `Killing` event.
    async fn resume_kill(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        r: &RuntimeContainer,
        journal_key: String,
        done: &mpsc::Sender<String>,
    ) {
        let Some(claim) = self.config.stops.claim(&r.id) else {
            return;
        };
        let order = KillOrder {
            container: container.name.clone(),
            container_id: r.id.clone(),
            pre_stop: None,
            ports: Vec::new(),
            grace: Duration::ZERO,
            resumed: true,
        };
        // Resumed: confirmed and noted, the journal's record stands.
        let Some(kill) = self.prepare_env_kill(claim, order, &journal_key, pod).await else {
            return;
        };
        self.instances.entry(r.id.clone()).or_default().resumed = true;
        tracing::warn!(pod = %pod.name, container = %container.name, id = %r.id,
            "an env restart of an earlier run never finished; stopping the container now");
        self.launch_kill(pod, kill, None, done);
    }

    /// Notes when this mismatch (these expected values) was first seen: the settle time runs
    /// from then, not from an older change to values the pod has since left and come back to.
    fn note_mismatch(&mut self, pod: &PodView, container: &str, expected_hash: u64) {
        let seen = self.seen(pod, container);
        if seen
            .mismatch_since
            .is_none_or(|(hash, _)| hash != expected_hash)
        {
            seen.mismatch_since = Some((expected_hash, Instant::now()));
        }
    }

    /// What is kept of this container of `pod`.
    fn seen(&mut self, pod: &PodView, container: &str) -> &mut SeenContainer {
        self.containers
            .entry((pod.uid.clone(), container.to_owned()))
            .or_default()
    }

    /// A kill of the instance `id` has ended.
    fn killed(&mut self, id: &str) {
        if let Some(instance) = self.instances.get_mut(id) {
            instance.killing = false;
        }
    }

    /// Carries out a decided env restart: the stop gate, the restart budget, a last check with
    /// the runtime, the journal, then the kill in the background.
    #[allow(clippy::too_many_arguments)]
    async fn kill_for_env(
        &mut self,
        pod: &PodView,
        container: &ContainerView,
        r: &RuntimeContainer,
        started: &Started,
        journal_key: String,
        differs: &[String],
        done: &mpsc::Sender<String>,
    ) {
        let Some(claim) = self.config.stops.claim(&r.id) else {
            tracing::debug!(pod = %pod.name, container = %container.name, id = %r.id,
                "the container is being stopped, or was stopped, by another restarter");
            return;
        };
        if !self.take_token() {
            tracing::debug!(pod = %pod.name, container = %container.name, "env restart budget spent; waiting");
            return;
        }
        let order = KillOrder {
            container: container.name.clone(),
            container_id: r.id.clone(),
            pre_stop: started.pre_stop.clone(),
            ports: started.ports.clone(),
            grace: started.grace,
            resumed: false,
        };
        let Some(kill) = self.prepare_env_kill(claim, order, &journal_key, pod).await else {
            return;
        };
        tracing::info!(pod = %pod.name, namespace = %pod.namespace, container = %container.name, id = %r.id,
            env = %differs.join(","), "stopping container: env from metadata changed");
        let killing = format!("containerID {} by container meta restarter", r.container_id);
        self.launch_kill(pod, kill, Some(&killing), done);
    }

    /// Clears a kill the gate gave `claim` for, under the env journal's `journal_key`; `None`
    /// when it does not start now (the journal cannot be opened, or the runtime says no).
    async fn prepare_env_kill(
        &mut self,
        claim: StopClaim,
        order: KillOrder,
        journal_key: &str,
        pod: &PodView,
    ) -> Option<ReadyKill> {
        let (cri, ledger) = (self.cri.clone(), self.config.ledger.clone());
        let restarter = Restarter {
            cri: &cri,
            ledger: &ledger,
            trigger: Trigger::EnvChange,
            cause: "an env-from-metadata change",
            // This loop has no health key: prepare_kill logs a journal failure as an error.
            health: None,
        };
        restarter
            .prepare(claim, order, self.journal_mut(), journal_key, pod)
            .await
    }

    /// Marks the instance as being killed and starts the kill; the loop hears of its end
    /// through `done`, and the env restart metric counts how it ended.
    fn launch_kill(
        &mut self,
        pod: &PodView,
        kill: ReadyKill,
        killing: Option<&str>,
        done: &mpsc::Sender<String>,
    ) {
        self.instances
            .entry(kill.order().container_id.clone())
            .or_default()
            .killing = true;
        let metrics = self.metrics.clone();
        let events = PodEvents::new(self.client.clone(), &self.config.node_name);
        kill.launch(events, pod, killing, done, move |order, stopped| {
            match stopped {
                Ok(()) => metrics.count_env_restart(EnvRestartResult::Success),
                Err(err) => {
                    metrics.count_env_restart(EnvRestartResult::Error);
                    tracing::warn!(error = %err, "env restart: stopping the container failed");
                }
            }
            order.container_id
        });
    }

    fn journal_mut(&mut self) -> Option<&mut KillJournal> {
        if self.journal.is_none() {
            match KillJournal::open_named(&self.config.state_dir, JOURNAL_FILE) {
                Ok(mut journal) => {
                    let now = Timestamp::now().as_millisecond();
                    if let Err(err) =
                        journal.retain(|e| now.saturating_sub(e.started_ms) < 86_400_000)
                    {
                        tracing::warn!(error = %err, "env kill journal compaction failed");
                    }
                    self.journal = Some(journal);
                }
                Err(err) => {
                    tracing::error!(error = %err, "cannot restart containers safely without the env kill journal");
                    return None;
                }
            }
        }
        self.journal.as_mut()
    }

    fn take_token(&mut self) -> bool {
        let per_minute = f64::from(self.config.restarts_per_minute.max(1));
        let elapsed = self.refilled.elapsed().as_secs_f64();
        self.refilled = Instant::now();
        self.tokens = (self.tokens + elapsed * per_minute / 60.0).min(per_minute);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Whether a served pod's containers may be restarted for their env, and if not, why.
struct Restarts {
    /// An in-place update is under way (kruise sets `InPlaceUpdateReady` False) or the pod
    /// opted in.
    enabled: bool,
    /// Why kubelet would not bring a container back as wanted after a stop, if so.
    not_restartable: Option<&'static str>,
}

/// Why kubelet would not bring a stopped container of `pod` back as wanted: it starts one again
/// only under `restartPolicy: Always`, and a static pod's env comes from its manifest, not from
/// its mirror pod's metadata.
fn not_restartable(pod: &PodView, api_pod: &CachedPod) -> Option<&'static str> {
    if pod.static_pod {
        return Some("it is a static pod, whose env kubelet takes from its manifest");
    }
    match api_pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
    {
        None | Some("Always") => None,
        Some(_) => {
            Some("the pod's restartPolicy is not Always, so kubelet would not start it again")
        }
    }
}

/// What a container's env is compared with, and whether a restart is ours to do.
struct Change<'a> {
    refs: &'a [plan::MetadataRef],
    env: &'a BTreeMap<String, String>,
    /// Why kubelet would not bring the container back as wanted after a stop, if so.
    not_restartable: Option<&'static str>,
}

/// A stable key for a set of expected values (FNV-1a 64 over `name=value\0`).
fn fnv_of(values: &BTreeMap<String, String>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in values {
        for b in k.bytes().chain([b'=']).chain(v.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_value_keys_differ_per_change() {
        let a = BTreeMap::from([("V".to_string(), "1".to_string())]);
        let b = BTreeMap::from([("V".to_string(), "2".to_string())]);
        assert_ne!(fnv_of(&a), fnv_of(&b));
        assert_eq!(fnv_of(&a), fnv_of(&a.clone()));
    }
}
