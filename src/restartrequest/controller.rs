//! The request loop: watches this node's ContainerRestartRequests (label
//! `inplaced.io/node-name`), handles one request per pod at a time (oldest first), stops
//! containers through the shared kill path, follows each until the kubelet has started it again
//! and the pod reports it ready, writes only the requests' status, and deletes finished requests
//! after their TTL. Level-triggered like the other request loops.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::object::{self, RestartPhase, RestartRequest, RestartStatus};
use super::plan::{self, ContainerFacts, Facts, PodFacts};
use crate::cri::CriClient;
use crate::health::Health;
use crate::kube::Watched;
use crate::kube::events::PodEvents;
use crate::kube::status::{ObjectRef, StatusWriter, Target};
use crate::nodeview::Trigger;
use crate::nodeview::{ContainerKind, NodeView, PodView, RuntimeState};
use crate::requests::pod_group;
use crate::requests::{Context, RequestController, RequestWatch, run_kind};
use crate::restart::{
    ContainerPort, KillDone, KillIntent, KillJournal, KillLedger, KillOrder, PreStop, RequestKills,
    Restarter, StopGate,
};

#[derive(Clone, Debug)]
pub struct RestartRequestConfig {
    pub node_name: String,
    pub state_dir: PathBuf,
    /// Where kills are noted, so the restart timing metrics know what triggered a restart.
    pub ledger: KillLedger,
    /// Shared with the other restarters: one stop per container.
    pub stops: StopGate,
}

pub fn restart_request_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(object::GROUP, object::VERSION, object::KIND),
        object::PLURAL,
    )
}

const HEALTH_KEY: &str = "restart-requests";
const JOURNAL_FILE: &str = "restart-request-kills.jsonl";

/// This controller's request loop, as `/healthz` names it when it is stuck.
const WORKER: &str = "restart requests";

const WATCHED: Watched = Watched {
    resource: "containerrestartrequests",
    health_key: "ContainerRestartRequests watch",
    when_not_served: Some(
        "the API server does not serve ContainerRestartRequests (apply crd-containerrestartrequests.yaml): none will be handled until it is",
    ),
};

/// Runs until `shutdown` turns true; then starts no new kill and returns once the kills under
/// way have finished.
pub async fn run(ctx: Context, config: RestartRequestConfig) {
    let resource = restart_request_resource();
    let watch = RequestWatch {
        resource: resource.clone(),
        selector: format!("{}={}", object::LABEL_NODE_NAME, config.node_name),
        watched: WATCHED,
        on_event: |_: &_| {},
    };
    let controller = |done_tx| Controller {
        statuses: StatusWriter::new(
            ctx.client.clone(),
            resource,
            object::KIND,
            Target::Status {
                clear: &["message", "completionTime"],
            },
        ),
        config,
        client: ctx.client.clone(),
        cri: ctx.cri.clone(),
        health: ctx.health.clone(),
        journal: None,
        requests: HashMap::new(),
        done_tx,
    };
    run_kind(ctx.clone(), watch, controller).await;
}

struct Controller {
    config: RestartRequestConfig,
    client: ::kube::Client,
    cri: CriClient,
    health: Health,
    journal: Option<KillJournal>,
    statuses: StatusWriter<RestartStatus>,
    /// Request UID → what this agent knows and does for it.
    requests: HashMap<String, Tracked>,
    done_tx: mpsc::Sender<KillDone>,
}

/// What the agent knows of one request beyond its object.
struct Tracked {
    /// When this agent first saw it.
    seen: Instant,
    /// Its kills under way and failed.
    kills: RequestKills,
    /// Containers whose `Restarted` event was emitted.
    announced: HashSet<String>,
    /// Deleted after its TTL (the watch may still show it).
    deleted: bool,
}

impl Default for Tracked {
    fn default() -> Self {
        Tracked {
            seen: Instant::now(),
            kills: RequestKills::default(),
            announced: HashSet::new(),
            deleted: false,
        }
    }
}

impl RequestController for Controller {
    type Done = KillDone;
    const WORKER: &'static str = WORKER;

    async fn sync(&mut self, requests: &[Arc<DynamicObject>], view: &NodeView) -> Option<Duration> {
        self.sync_requests(requests, view).await
    }

    fn finish(&mut self, done: KillDone) {
        self.requests
            .entry(done.request_uid)
            .or_default()
            .kills
            .finish(done.container, done.result);
    }

    /// A status write landed: the next step may follow from it.
    async fn woken(&mut self) {
        self.statuses.finished().await;
    }

    fn busy(&self) -> bool {
        self.requests.values().any(|r| !r.kills.killing.is_empty())
    }

    async fn housekeep(&mut self, requests: &[Arc<DynamicObject>]) {
        self.compact(requests).await;
    }
}

impl Controller {
    fn open_journal(&mut self, ledger: &KillLedger) -> bool {
        if self.journal.is_some() {
            return true;
        }
        match KillJournal::open_named(&self.config.state_dir, JOURNAL_FILE) {
            Ok(journal) => {
                // Kills an earlier run began: the restarts they cause are still ours.
                for intent in journal.intents() {
                    if let Ok(started) = Timestamp::from_millisecond(intent.started_ms) {
                        ledger.remember(&intent.container_id, Trigger::RestartRequest, started);
                    }
                }
                self.journal = Some(journal);
                self.health.set(HEALTH_KEY, Ok(()));
                true
            }
            Err(err) => {
                self.health.set(
                    HEALTH_KEY,
                    Err(format!(
                        "cannot stop containers safely without the kill journal: {err}"
                    )),
                );
                false
            }
        }
    }

    /// One pass over every request; returns when to look again at the latest.
    async fn sync_requests(
        &mut self,
        objects: &[Arc<DynamicObject>],
        view: &NodeView,
    ) -> Option<Duration> {
        let ledger = self.config.ledger.clone();
        if !self.open_journal(&ledger) {
            return Some(Duration::from_secs(5));
        }
        if !view.synced {
            // Deciding from a view without pods would report live pods as missing.
            return Some(Duration::from_millis(200));
        }
        let requests = self.requests_to_decide(objects);
        let mut by_pod: BTreeMap<(String, String), Vec<&RestartRequest>> = BTreeMap::new();
        for r in &requests {
            by_pod
                .entry(pod_group(&r.namespace, &r.uid, &r.spec, |s| &s.pod_name))
                .or_default()
                .push(r);
        }
        let now = Timestamp::now();
        let mut requeue: Option<Duration> = None;
        for ((namespace, pod_name), group) in by_pod {
            let pod = view
                .pods
                .iter()
                .find(|p| p.namespace == namespace && p.name == pod_name);
            requeue = sooner(requeue, self.sync_pod(group, pod, now).await);
        }
        self.forget_gone(objects);
        requeue
    }

    /// The requests to decide on, oldest first: those being deleted (by the agent after their
    /// TTL too) are left out, and each carries the status written last.
    fn requests_to_decide(&mut self, objects: &[Arc<DynamicObject>]) -> Vec<RestartRequest> {
        let mut requests = Vec::new();
        for object in objects {
            match RestartRequest::from_object(object) {
                Ok(r) => {
                    let tracked = self.requests.entry(r.uid.clone()).or_default();
                    if !r.deleting && !tracked.deleted {
                        requests.push(r);
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerRestartRequest without identity")
                }
            }
        }
        for request in &mut requests {
            // The status written last counts over the (older) watched copy until the watch
            // brings it back: a container just announced ready is not announced again.
            if let Some(newest) = self.statuses.newest(&object_ref(request), &request.status) {
                request.status = newest;
            }
        }
        requests.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        requests
    }

    /// One pod's requests, oldest first: the first open one is worked on, later open ones wait
    /// for it, finished ones are followed to their deletion. Returns when to look again.
    async fn sync_pod(
        &mut self,
        group: Vec<&RestartRequest>,
        pod: Option<&PodView>,
        now: Timestamp,
    ) -> Option<Duration> {
        let facts = pod.map(pod_facts);
        let mut requeue: Option<Duration> = None;
        let mut active: Option<&RestartRequest> = None;
        for request in group {
            if !request.status.phase.is_final() {
                match active {
                    None => active = Some(request),
                    Some(first) => {
                        if request.status.phase == RestartPhase::None {
                            self.wait_for(request, first);
                        }
                        continue;
                    }
                }
            }
            let after = self.sync_request(request, pod, facts.as_ref(), now).await;
            requeue = sooner(requeue, after);
        }
        requeue
    }

    /// Tells a new request that it waits for `first`, the pod's request being worked on.
    fn wait_for(&mut self, request: &RestartRequest, first: &RestartRequest) {
        let status = RestartStatus {
            phase: RestartPhase::Pending,
            message: Some(format!(
                "waiting for ContainerRestartRequest {} of the same pod",
                first.name
            )),
            ..Default::default()
        };
        self.write_status(request, status);
    }

    /// Decides one request and carries the decision out: its deletion, or its `Restarted`
    /// events, its kills and its status. Returns when to look again, if the decision says.
    async fn sync_request(
        &mut self,
        request: &RestartRequest,
        pod: Option<&PodView>,
        facts: Option<&PodFacts>,
        now: Timestamp,
    ) -> Option<Duration> {
        let decision = self.decide(request, facts, now);
        let requeue = decision.requeue_after;
        if decision.delete {
            self.delete(request).await;
            return requeue;
        }
        if let Some(pod) = pod {
            for container in &decision.restarted {
                self.announce(request, pod, container);
            }
            for order in decision.kills {
                self.start_kill(request, order, pod).await;
            }
        }
        if decision.status.phase == RestartPhase::Failed
            && request.status.phase != RestartPhase::Failed
        {
            tracing::warn!(request = %request.name, namespace = %request.namespace,
                message = ?decision.status.message, "ContainerRestartRequest failed");
        }
        self.write_status(request, decision.status);
        requeue
    }

    /// Forgets the requests no longer watched, but not while a kill of theirs runs.
    fn forget_gone(&mut self, objects: &[Arc<DynamicObject>]) {
        let live: HashSet<&str> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.as_deref())
            .collect();
        self.requests
            .retain(|uid, t| live.contains(uid.as_str()) || !t.kills.killing.is_empty());
        let live: HashSet<String> = live.into_iter().map(str::to_owned).collect();
        self.statuses.retain(&live);
    }

    fn decide(
        &self,
        request: &RestartRequest,
        pod: Option<&PodFacts>,
        now: Timestamp,
    ) -> plan::Decision {
        let journal = self.journal.as_ref();
        let intents: HashMap<&str, &KillIntent> = journal
            .map(|j| {
                j.intents()
                    .filter(|i| i.key == request.uid)
                    .map(|i| (i.container.as_str(), i))
                    .collect()
            })
            .unwrap_or_default();
        let tracked = self.requests.get(&request.uid);
        let empty_set = HashSet::new();
        let empty_map = HashMap::new();
        plan::decide(
            request,
            &Facts {
                now,
                node_name: &self.config.node_name,
                pod,
                known_for: tracked.map_or(Duration::ZERO, |t| t.seen.elapsed()),
                intents,
                in_flight: tracked.map_or(&empty_set, |t| &t.kills.killing),
                kill_failures: tracked.map_or(&empty_map, |t| &t.kills.failed),
            },
        )
    }

    /// The `Restarted` event, once per container and request.
    fn announce(&mut self, request: &RestartRequest, pod: &PodView, container: &str) {
        let tracked = self.requests.entry(request.uid.clone()).or_default();
        if !tracked.announced.insert(container.to_owned()) {
            return;
        }
        tracing::info!(request = %request.name, pod = %pod.name, namespace = %pod.namespace, container,
            "container restarted in place and ready");
        PodEvents::new(self.client.clone(), &self.config.node_name).emit(
            &pod.event_ref(),
            "Restarted",
            format!(
                "Container {container} restarted in place by ContainerRestartRequest {} and ready",
                request.name
            ),
            "Normal",
        );
    }

    /// Records the intent durably, then kills in the background. Checks the runtime first, so a
    /// stale view can never direct a kill at a container that has already been replaced.
    async fn start_kill(&mut self, request: &RestartRequest, order: KillOrder, pod: &PodView) {
        let Some(claim) = self.config.stops.claim(&order.container_id) else {
            tracing::debug!(container = %order.container, id = %order.container_id,
                "the container is being stopped, or was stopped, by another restarter; deciding again");
            return;
        };
        let restarter = Restarter {
            cri: &self.cri,
            ledger: &self.config.ledger,
            trigger: Trigger::RestartRequest,
            cause: "ContainerRestartRequest",
            health: Some((&self.health, HEALTH_KEY)),
        };
        let Some(kill) = restarter
            .prepare(claim, order, self.journal.as_mut(), &request.uid, pod)
            .await
        else {
            return;
        };
        let order = kill.order();
        self.requests
            .entry(request.uid.clone())
            .or_default()
            .kills
            .killing
            .insert(order.container.clone());
        tracing::info!(request = %request.name, namespace = %request.namespace, pod = %pod.name,
            container = %order.container, id = %order.container_id, resumed = order.resumed,
            "stopping container for ContainerRestartRequest");
        let killing = format!(
            "container {} by ContainerRestartRequest {}",
            order.container, request.name
        );
        kill.launch(
            PodEvents::new(self.client.clone(), &self.config.node_name),
            pod,
            Some(&killing),
            &self.done_tx,
            KillDone::for_request(request.uid.clone()),
        );
    }

    fn write_status(&mut self, request: &RestartRequest, status: RestartStatus) {
        self.statuses
            .write(&object_ref(request), &request.status, status);
    }

    async fn delete(&mut self, request: &RestartRequest) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &request.namespace,
            &restart_request_resource(),
        );
        match api.delete(&request.name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(request = %request.name, namespace = %request.namespace,
                    "deleted a finished ContainerRestartRequest after its ttlSecondsAfterFinished");
                self.requests
                    .entry(request.uid.clone())
                    .or_default()
                    .deleted = true;
            }
            Err(::kube::Error::Api(status)) if status.code == 404 => {
                self.requests
                    .entry(request.uid.clone())
                    .or_default()
                    .deleted = true;
            }
            Err(err) => {
                tracing::warn!(request = %request.name, error = %err, "cannot delete a finished ContainerRestartRequest; trying again")
            }
        }
    }

    /// Drops journal entries of requests no longer watched once their kills are long over.
    async fn compact(&mut self, objects: &[Arc<DynamicObject>]) {
        let live: HashSet<String> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.clone())
            .collect();
        let now_ms = Timestamp::now().as_millisecond();
        if let Some(journal) = self.journal.take() {
            let keep = move |e: &KillIntent| {
                live.contains(&e.key) || now_ms.saturating_sub(e.started_ms) < 3_600_000
            };
            match journal.retain_off_runtime(keep).await {
                Some((journal, result)) => {
                    self.journal = Some(journal);
                    if let Err(err) = result {
                        tracing::warn!(error = %err, "kill journal compaction failed");
                    }
                }
                None => tracing::error!("kill journal compaction panicked"),
            }
        }
    }
}

/// The earlier of two times to look again.
fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn object_ref(request: &RestartRequest) -> ObjectRef {
    ObjectRef {
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        uid: request.uid.clone(),
        // The status is the agent's alone: no version condition.
        resource_version: None,
    }
}

/// What a stop reads of a container's spec.
#[derive(Default, Deserialize)]
struct StopSpec {
    #[serde(default)]
    lifecycle: Option<Lifecycle>,
    #[serde(default)]
    ports: Vec<ContainerPort>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lifecycle {
    #[serde(default)]
    pre_stop: Option<PreStop>,
}

fn pod_facts(pod: &PodView) -> PodFacts {
    let api_pod = pod.api_pod.as_deref();
    let spec = api_pod.and_then(|p| p.spec.as_ref());
    PodFacts {
        uid: pod.uid.clone(),
        terminating: pod.terminating,
        static_pod: pod.static_pod,
        restart_policy: spec
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into()),
        termination_grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
        containers: pod
            .containers
            .iter()
            .filter(|c| c.kind == ContainerKind::Regular)
            .map(|c| {
                let runtime = c.runtime.as_ref().map(|r| {
                    // A spec the agent cannot read stops the container without a hook, as the
                    // kubelet would stop one whose hook it cannot run.
                    let stop: StopSpec = pod
                        .spec_of(c)
                        .and_then(|s| s.decode().ok())
                        .unwrap_or_default();
                    ContainerFacts {
                        container_id: r.container_id.clone(),
                        id: r.id.clone(),
                        running: r.state == RuntimeState::Running,
                        started_at: (r.times.started_at > 0)
                            .then(|| {
                                Timestamp::from_nanosecond(i128::from(r.times.started_at)).ok()
                            })
                            .flatten(),
                        ready_in_pod_status: c
                            .status
                            .as_ref()
                            .is_some_and(|s| s.ready && s.container_id == r.container_id),
                        backoff_hold: c.crash_backoff.as_ref().and_then(|b| b.held_message()),
                        pre_stop: stop.lifecycle.and_then(|l| l.pre_stop),
                        ports: stop.ports,
                    }
                });
                (c.name.clone(), runtime)
            })
            .collect(),
    }
}
