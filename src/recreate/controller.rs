//! The request loop: watches this node's active CRRs, decides per pod (one request at a time),
//! runs kills in the background, and writes only CRR status. Level-triggered: every change of
//! the requests, of the node view, a finished kill, or a due time re-decides everything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use ::kube::runtime::watcher;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;

use super::ReactionMetrics;
use super::object::{self, Crr, CrrPhase, CrrStatus};
use super::plan::{self, Facts, PodFacts, RuntimeFacts};
use crate::cri::proto::{ContainerFilter, ContainerState};
use crate::cri::{CriClient, labels};
use crate::health::Health;
use crate::kube::Watched;
use crate::kube::events::PodEvents;
use crate::kube::status::{ObjectRef, StatusWriter, Target};
use crate::nodeview::Trigger;
use crate::nodeview::{NodeView, PodView, RuntimeState};
use crate::requests::pod_group;
use crate::requests::{Context, RequestController, RequestWatch, run_kind};
use crate::restart::{
    KillDone, KillIntent, KillJournal, KillLedger, KillOrder, RequestKills, Restarter, StopGate,
};

#[derive(Clone, Debug)]
pub struct RecreateConfig {
    pub node_name: String,
    pub state_dir: PathBuf,
    /// Handle CRRs even while a kruise-daemon pod runs on this node (both would act: double kills).
    pub ignore_kruise_daemon: bool,
    /// Where kills are noted, so the restart timing metrics know what triggered a restart.
    pub ledger: KillLedger,
    /// Shared with the env-change restarter: one stop per container.
    pub stops: StopGate,
}

/// The ContainerRecreateRequest resource of `version` (see [`served_crr_version`]).
pub fn crr_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(object::GROUP, version, object::KIND),
        object::PLURAL,
    )
}

/// The version to read and write ContainerRecreateRequests in: v1beta1 where the API server
/// serves it (kruise 1.9 and later), else v1alpha1, as kruise-daemon of the same release does.
/// One discovery request at start; where kruise is not installed yet the agent takes v1alpha1
/// (kruise up to 1.8), and a kruise 1.9 installed later needs the agent restarted.
pub async fn served_crr_version(client: &::kube::Client) -> &'static str {
    let [preferred, fallback] = object::VERSIONS;
    match client
        .list_api_group_resources(&format!("{}/{preferred}", object::GROUP))
        .await
    {
        Ok(list) if list.resources.iter().any(|r| r.name == object::PLURAL) => preferred,
        _ => fallback,
    }
}

const HEALTH_KEY: &str = "recreate";

/// This controller's request loop, as `/healthz` names it when it is stuck.
const WORKER: &str = "recreate";

const WATCHED: Watched = Watched {
    resource: "containerrecreaterequests",
    health_key: "ContainerRecreateRequests watch",
    when_not_served: Some(
        "the API server does not serve ContainerRecreateRequests (OpenKruise's CRD is not installed): none will be handled until it is",
    ),
};

/// Runs until `shutdown` turns true; then starts no new kill and returns once the kills under
/// way have finished.
pub async fn run(ctx: Context, config: RecreateConfig) {
    let version = served_crr_version(&ctx.client).await;
    tracing::info!(
        version,
        "ContainerRecreateRequests read and written as apps.kruise.io/{version}"
    );
    let resource = crr_resource(version);
    let selector = format!(
        "{}={},{}=true",
        object::LABEL_NODE_NAME,
        config.node_name,
        object::LABEL_ACTIVE
    );
    let first_seen = FirstSeen::default();
    let seen_by_watch = first_seen.clone();
    let watch = RequestWatch {
        resource: resource.clone(),
        selector,
        watched: WATCHED,
        on_event: move |event: &_| seen_by_watch.note(event),
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
        ledger: config.ledger.clone(),
        config,
        client: ctx.client.clone(),
        cri: ctx.cri.clone(),
        journal: None,
        requests: HashMap::new(),
        health: ctx.health.clone(),
        reactions: ctx.metrics.families(),
        first_seen,
        working_on: HashMap::new(),
        pass_began: Instant::now(),
        done_tx,
    };
    run_kind(ctx.clone(), watch, controller).await;
}

struct Controller {
    config: RecreateConfig,
    client: ::kube::Client,
    cri: CriClient,
    journal: Option<KillJournal>,
    /// Request UID → what this agent's kills for it are doing.
    requests: HashMap<String, RequestKills>,
    statuses: StatusWriter<CrrStatus>,
    /// Where kills are noted for the restart timing metrics.
    ledger: KillLedger,
    health: Health,
    reactions: ReactionMetrics,
    first_seen: FirstSeen,
    /// (namespace, pod) → UID of the request being worked on for that pod.
    working_on: HashMap<(String, String), String>,
    /// When the current sync pass began: a reaction splits into the wait for the pass that
    /// handles the request and the pass itself.
    pass_began: Instant,
    done_tx: mpsc::Sender<KillDone>,
}

/// When the agent's watch first delivered each request (by UID): the start of its reaction,
/// taken by the request's first kill (`None` once taken: later kills of the same request wait
/// for earlier ones by design, and a later event is no new start).
#[derive(Clone, Default)]
struct FirstSeen(Arc<Mutex<HashMap<String, Option<Instant>>>>);

impl FirstSeen {
    fn note(&self, event: &watcher::Event<DynamicObject>) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                if let Some(uid) = &o.metadata.uid {
                    seen.entry(uid.clone())
                        .or_insert_with(|| Some(Instant::now()));
                }
            }
            watcher::Event::Delete(o) => {
                if let Some(uid) = &o.metadata.uid {
                    seen.remove(uid);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// When the request was first seen, once per request.
    fn take(&self, uid: &str) -> Option<Instant> {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.get_mut(uid)?.take()
    }

    /// Forgets requests no longer watched (a relist does not report their deletion).
    fn retain(&self, live: &HashSet<String>) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|uid, _| live.contains(uid));
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
            .finish(done.container, done.result);
    }

    /// A status write landed: the next step may follow from it.
    async fn woken(&mut self) {
        self.statuses.finished().await;
    }

    fn busy(&self) -> bool {
        self.requests.values().any(|k| !k.killing.is_empty())
    }

    async fn housekeep(&mut self, requests: &[Arc<DynamicObject>]) {
        self.compact(requests).await;
    }
}

impl Controller {
    /// One pass over every request; returns when to look again at the latest.
    async fn sync_requests(
        &mut self,
        objects: &[Arc<DynamicObject>],
        view: &NodeView,
    ) -> Option<Duration> {
        self.pass_began = Instant::now();
        if let Err(again) = self.ready_to_decide(view) {
            return again;
        }

        let mut requests = Vec::new();
        for object in objects {
            match Crr::from_object(object) {
                Ok(request) => requests.push(request),
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerRecreateRequest without identity")
                }
            }
        }
        // Group by pod; a request whose spec cannot be read is decided alone.
        let mut by_pod: BTreeMap<(String, String), Vec<&Crr>> = BTreeMap::new();
        for request in &requests {
            by_pod
                .entry(pod_group(
                    &request.namespace,
                    &request.uid,
                    &request.spec,
                    |s| &s.pod_name,
                ))
                .or_default()
                .push(request);
        }

        let now = Timestamp::now();
        let mut requeue: Option<Duration> = None;
        for (pod_key, group) in by_pod {
            if let Some(after) = self.sync_pod(pod_key, &group, view, now).await {
                requeue = Some(requeue.map_or(after, |r| r.min(after)));
            }
        }
        requeue
    }

    /// Whether this pass may decide: `Err` with when to look again when it may not (kruise-daemon
    /// runs here, the journal cannot be opened, or the view has not listed the pods yet).
    fn ready_to_decide(&mut self, view: &NodeView) -> Result<(), Option<Duration>> {
        if let Some(blocker) = (!self.config.ignore_kruise_daemon)
            .then(|| kruise_daemon(view))
            .flatten()
        {
            self.health.set(
                HEALTH_KEY,
                Err(format!(
                    "kruise-daemon pod {blocker} runs on this node: not handling ContainerRecreateRequests until it is gone (or --ignore-kruise-daemon)"
                )),
            );
            return Err(None);
        }
        if !self.open_journal() {
            return Err(Some(Duration::from_secs(5)));
        }
        self.health.set(HEALTH_KEY, Ok(()));
        if !view.synced {
            // Deciding from a view without pods would report live pods as missing.
            return Err(Some(Duration::from_millis(200)));
        }
        Ok(())
    }

    /// Opens the kill journal unless it is open; false (said on health) when it cannot be.
    fn open_journal(&mut self) -> bool {
        if self.journal.is_some() {
            return true;
        }
        match KillJournal::open(&self.config.state_dir) {
            Ok(journal) => {
                // Kills an earlier run began: the restarts they cause are still ours.
                for intent in journal.intents() {
                    if let Ok(started) = Timestamp::from_millisecond(intent.started_ms) {
                        self.ledger
                            .remember(&intent.container_id, Trigger::Crr, started);
                    }
                }
                self.journal = Some(journal);
                true
            }
            Err(err) => {
                self.health.set(
                    HEALTH_KEY,
                    Err(format!(
                        "cannot kill safely without the kill journal: {err}"
                    )),
                );
                false
            }
        }
    }

    /// One pod's requests: the one worked on is decided and its kills started, the others are
    /// told to wait for it. Returns when to look again, if the decision says.
    async fn sync_pod(
        &mut self,
        (namespace, pod_name): (String, String),
        group: &[&Crr],
        view: &NodeView,
        now: Timestamp,
    ) -> Option<Duration> {
        let request = self.pick_active((namespace.clone(), pod_name.clone()), group)?;
        let pod_view = view
            .pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == pod_name);
        let pod_facts = self
            .facts_of(request, pod_view, view.runtime.as_deref())
            .await;
        let decision = self.decide(request, pod_facts.as_ref(), now);
        for order in decision.kills {
            self.start_kill(request, order, pod_view).await;
        }
        self.write_status(request, decision.status);
        decision.requeue_after
    }

    /// The request of the pod's group to work on (the one worked on before while it is open),
    /// remembered for the next pass; the group's new requests are told to wait for it. `None`
    /// when none is open.
    fn pick_active<'r>(&mut self, pod_key: (String, String), group: &[&'r Crr]) -> Option<&'r Crr> {
        let working_on = self.working_on.get(&pod_key).map(String::as_str);
        let Some(active) = plan::pick_active(group, working_on) else {
            self.working_on.remove(&pod_key);
            return None;
        };
        self.working_on.insert(pod_key, group[active].uid.clone());
        for (i, request) in group.iter().enumerate() {
            if i != active && request.status.phase == CrrPhase::None {
                self.write_status(request, plan::waiting_status(request, group[active]));
            }
        }
        Some(group[active])
    }

    /// The facts of the request's pod, with its listed containers' runtime containers looked
    /// up where the view has none yet.
    async fn facts_of(
        &self,
        request: &Crr,
        pod_view: Option<&PodView>,
        runtime: Option<&str>,
    ) -> Option<PodFacts> {
        let mut pod_facts = pod_view.map(pod_facts);
        if let (Some(facts), Some(pod), Ok(spec)) =
            (pod_facts.as_mut(), pod_view, request.spec.as_ref())
        {
            let unlisted: Vec<&str> = spec
                .containers
                .iter()
                .map(|c| c.name.as_str())
                .filter(|name| {
                    !facts.containers.contains_key(*name)
                        && pod.containers.iter().any(|c| c.name == *name)
                })
                .collect();
            if !facts.terminating && !unlisted.is_empty() {
                self.look_up_unlisted(facts, pod, &unlisted, runtime).await;
            }
        }
        pod_facts
    }

    /// The plan's decision for the request, from its pod's facts, its journalled kills and the
    /// kills of it under way or failed.
    fn decide(
        &self,
        request: &Crr,
        pod_facts: Option<&PodFacts>,
        now: Timestamp,
    ) -> plan::Decision {
        let journal = self.journal.as_ref();
        let intents: HashMap<&str, &KillIntent> = request
            .spec
            .as_ref()
            .map(|spec| {
                spec.containers
                    .iter()
                    .filter_map(|c| {
                        journal?
                            .find(&request.uid, &c.name)
                            .map(|i| (c.name.as_str(), i))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let no_kills = RequestKills::default();
        let kills = self.requests.get(&request.uid).unwrap_or(&no_kills);
        plan::decide(
            request,
            &Facts {
                now,
                pod: pod_facts,
                intents,
                in_flight: &kills.killing,
                kill_failures: &kills.failed,
            },
        )
    }

    /// The pod's containers that the cached view has no runtime container for yet, asked of the
    /// runtime itself, as kruise-daemon asks it: a pod just started is in the view only from
    /// its next listing (up to `refresh-interval` later on containerd 1.6, which streams no
    /// events), and the request's first status said "not found container on Node" meanwhile.
    /// A container the runtime does not have either (or a runtime that does not answer) stays
    /// out of the facts.
    async fn look_up_unlisted(
        &self,
        facts: &mut PodFacts,
        pod: &PodView,
        names: &[&str],
        runtime: Option<&str>,
    ) {
        // `containerd 1.6.20`: container IDs read `containerd://<id>`, as the view writes them.
        let Some(runtime_name) = runtime.and_then(|r| r.split_whitespace().next()) else {
            return;
        };
        for name in names {
            let filter = ContainerFilter {
                label_selector: HashMap::from([
                    (labels::POD_UID.to_owned(), pod.runtime_uid.clone()),
                    (labels::CONTAINER_NAME.to_owned(), (*name).to_owned()),
                ]),
                ..Default::default()
            };
            let listed = match self.cri.list_containers(Some(filter)).await {
                Ok(listed) => listed,
                Err(err) => {
                    tracing::debug!(container = name, error = %err, "runtime lookup");
                    continue;
                }
            };
            let Some(newest) = listed
                .into_iter()
                .max_by_key(|c| (c.metadata.as_ref().map_or(0, |m| m.attempt), c.created_at))
            else {
                continue;
            };
            let status = match self.cri.container_status(&newest.id, false).await {
                Ok(answer) => answer.status,
                Err(err) => {
                    tracing::debug!(container = name, error = %err, "runtime lookup");
                    continue;
                }
            };
            let Some(status) = status else { continue };
            let container_id = format!("{runtime_name}://{}", newest.id);
            let ready_in_pod_status = pod.containers.iter().any(|c| {
                c.name == *name
                    && c.status
                        .as_ref()
                        .is_some_and(|s| s.ready && s.container_id == container_id)
            });
            facts.containers.insert(
                (*name).to_owned(),
                RuntimeFacts {
                    container_id,
                    id: newest.id.clone(),
                    running: status.state == ContainerState::ContainerRunning as i32,
                    restart_count: newest
                        .annotations
                        .get(labels::CONTAINER_RESTART_COUNT)
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0),
                    started_at: (status.started_at > 0)
                        .then(|| Timestamp::from_nanosecond(i128::from(status.started_at)).ok())
                        .flatten(),
                    ready_in_pod_status,
                    backoff_hold: None,
                },
            );
        }
    }

    /// Records the intent durably, then kills in the background. Checks the runtime first, so a
    /// stale view can never direct a kill at a container that has already been replaced.
    async fn start_kill(&mut self, request: &Crr, order: KillOrder, pod: Option<&PodView>) {
        let Some(pod) = pod else { return };
        let Some(claim) = self.config.stops.claim(&order.container_id) else {
            tracing::debug!(container = %order.container, id = %order.container_id,
                "the container is being stopped, or was stopped, by another restarter; deciding again");
            return;
        };
        let restarter = Restarter {
            cri: &self.cri,
            ledger: &self.ledger,
            trigger: Trigger::Crr,
            cause: "ContainerRecreateRequest",
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
            .killing
            .insert(order.container.clone());
        // The agent's own reaction (its watch event to the request's first kill), for
        // operators comparing with the runtime; a resumed kill reacts to the agent's restart.
        let first_seen = if order.resumed {
            None
        } else {
            self.first_seen.take(&request.uid)
        };
        let reaction = first_seen.map(|at| at.elapsed());
        let before_pass = first_seen.map(|at| self.pass_began.saturating_duration_since(at));
        if let Some(reaction) = reaction {
            self.reactions.observe(reaction);
        }
        let prepared = kill.prepared();
        tracing::info!(crr = %request.name, namespace = %request.namespace, pod = %pod.name, container = %order.container,
            id = %order.container_id, resumed = order.resumed, reaction = ?reaction, before_pass = ?before_pass,
            confirm_took = ?prepared.confirm_took, journal_took = ?prepared.journal_took,
            "stopping container for ContainerRecreateRequest");
        let killing = format!(
            "container {} by ContainerRecreateRequest {}",
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

    fn write_status(&mut self, request: &Crr, status: CrrStatus) {
        // kruise-manager writes this status too (completing a request past its deadline or
        // whose pod is gone): a write decided from an older version must not undo that.
        let object = ObjectRef {
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            uid: request.uid.clone(),
            resource_version: request.resource_version.clone(),
        };
        self.statuses.write(&object, &request.status, status);
    }

    /// Drops journal entries and memory of requests no longer watched (completed ones lose
    /// the active label) once their kills are long over.
    async fn compact(&mut self, objects: &[Arc<DynamicObject>]) {
        let live: HashSet<String> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.clone())
            .collect();
        self.statuses.retain(&live);
        self.first_seen.retain(&live);
        self.working_on.retain(|_, uid| live.contains(uid));
        self.requests
            .retain(|uid, kills| live.contains(uid) || !kills.killing.is_empty());
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
                // The next pass reopens it from disk before any kill.
                None => tracing::error!("kill journal compaction panicked"),
            }
        }
    }
}

/// A running kruise-daemon pod on this node, as `namespace/name`.
fn kruise_daemon(view: &NodeView) -> Option<String> {
    view.pods
        .iter()
        .find(|p| {
            p.name.starts_with("kruise-daemon-")
                && !p.terminating
                && p.containers.iter().any(|c| {
                    c.runtime
                        .as_ref()
                        .is_some_and(|r| r.state == RuntimeState::Running)
                })
        })
        .map(|p| format!("{}/{}", p.namespace, p.name))
}

fn pod_facts(pod: &PodView) -> PodFacts {
    PodFacts {
        uid: pod.uid.clone(),
        terminating: pod.terminating,
        containers: pod
            .containers
            .iter()
            .filter_map(|c| {
                let r = c.runtime.as_ref()?;
                Some((
                    c.name.clone(),
                    RuntimeFacts {
                        container_id: r.container_id.clone(),
                        id: r.id.clone(),
                        running: r.state == RuntimeState::Running,
                        restart_count: r
                            .restart_count
                            .and_then(|n| i32::try_from(n).ok())
                            .unwrap_or(0),
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
                    },
                ))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crr(uid: &str) -> DynamicObject {
        let mut object = DynamicObject::new("r", &crr_resource("v1alpha1"));
        object.metadata.uid = Some(uid.to_owned());
        object
    }

    #[test]
    fn a_request_is_timed_once_from_its_first_event() {
        let seen = FirstSeen::default();
        assert_eq!(seen.take("a"), None);
        seen.note(&watcher::Event::Apply(crr("a")));
        std::thread::sleep(Duration::from_millis(20));
        // A later event (a status write) does not restart the clock.
        seen.note(&watcher::Event::Apply(crr("a")));
        assert!(seen.take("a").unwrap().elapsed() >= Duration::from_millis(20));
        // The request's next kill (another container) is not timed from the same start.
        assert_eq!(seen.take("a"), None);
        seen.note(&watcher::Event::Apply(crr("a")));
        assert_eq!(seen.take("a"), None);

        seen.note(&watcher::Event::InitApply(crr("b")));
        seen.note(&watcher::Event::InitApply(crr("c")));
        seen.note(&watcher::Event::Delete(crr("b")));
        assert_eq!(seen.take("b"), None);
        seen.retain(&HashSet::new());
        assert_eq!(seen.take("c"), None);
    }
}
