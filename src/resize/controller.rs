//! The request loop: watches this node's ContainerResizeRequests, handles one request per pod at
//! a time (oldest first), resizes through the chosen actuator, writes only the requests'
//! status, re-applies `cri` resizes to containers the kubelet replaced, and deletes finished
//! requests after their TTL. Level-triggered, like the recreate loop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use k8s_openapi::api::core::v1::LimitRange;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::sync::mpsc;

use super::ResizeMetrics;
use super::cgroup::Cgroups;
use super::object::{
    self, Actuator, ContainerPhase, ContainerResult, ResizePhase, ResizeRequest, ResizeStatus,
};
use super::plan::{self, CriOutcome, CriStep, Decision, Facts};
use super::resources::ZeroCpuRequest;
use super::through_cri::{self, PodTarget, ResizeError};
use super::through_kubelet::{self, ActuatorSetting, KubeletResizeApi, Progress};
use crate::cri::CriClient;
use crate::health::Health;
use crate::kube::Watched;
use crate::kube::events::PodEvents;
use crate::kube::status::{ObjectRef, StatusWriter, Target};
use crate::nodeview::{NodeView, PodView};
use crate::requests::pod_group;
use crate::requests::{Context, RequestController, RequestWatch, run_kind};
use crate::resources::Resources;

#[derive(Clone, Debug)]
pub struct ResizeConfig {
    pub node_name: String,
    pub actuator: ActuatorSetting,
    /// The kubelet's config file, read for the InPlacePodVerticalScaling gate.
    pub kubelet_config: PathBuf,
    /// Where cgroup filesystems are mounted.
    pub cgroup_root: PathBuf,
}

pub fn resize_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(object::GROUP, object::VERSION, object::KIND),
        object::PLURAL,
    )
}

const HEALTH_KEY: &str = "resize";

/// This controller's request loop, as `/healthz` names it when it is stuck.
const WORKER: &str = "resize";

const WATCHED: Watched = Watched {
    resource: "containerresizerequests",
    health_key: "ContainerResizeRequests watch",
    when_not_served: Some(
        "the API server does not serve ContainerResizeRequests (apply crd-containerresizerequests.yaml): none will be handled until it is",
    ),
};

/// How a `cri` resize ended, reported back to the loop.
struct CriDone {
    uid: String,
    result: Result<Vec<through_cri::Applied>, ResizeError>,
    /// A re-apply after a container restart rather than the request's first resize.
    reapply: bool,
}

/// Runs until `shutdown` turns true; a resize under way (a handful of cgroup writes and CRI
/// calls) is finished first.
pub async fn run(ctx: Context, config: ResizeConfig) {
    let resource = resize_resource();
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
        metrics: ctx.metrics.families(),
        requests: HashMap::new(),
        limit_ranges: HashMap::new(),
        served_api: None,
        done_tx,
    };
    run_kind(ctx.clone(), watch, controller).await;
}

struct Controller {
    config: ResizeConfig,
    client: ::kube::Client,
    cri: CriClient,
    health: Health,
    metrics: ResizeMetrics,
    statuses: StatusWriter<ResizeStatus>,
    /// Request UID → what this agent did for it; pruned in [`Controller::sync`].
    requests: HashMap<String, Tracked>,
    /// Namespace → its LimitRanges and when they were listed: requests waiting their turn are
    /// checked on every pass, and listing each time flooded the API (the soak test showed it).
    /// Dropped once older than [`LIMIT_RANGES_TTL`].
    limit_ranges: HashMap<String, (Instant, Vec<Value>)>,
    /// The resize API the API server serves and when discovery said so.
    served_api: Option<(KubeletResizeApi, Instant)>,
    done_tx: mpsc::Sender<CriDone>,
}

/// What the agent did for one request.
#[derive(Default)]
struct Tracked {
    /// A `cri` resize of it runs (a re-apply runs under the newest succeeded request).
    in_flight: bool,
    /// Its `cri` resize failed once and is being tried again.
    retried: bool,
    /// When the agent took it up (for the duration metric).
    started: Option<Instant>,
    /// The API accepted its `kubelet` resize from this agent, through this API.
    requested: Option<KubeletResizeApi>,
    /// A refused resize was asked again the way the API server now serves (once: API servers
    /// of two releases behind one address could otherwise send it back and forth).
    reasked: bool,
    /// How its last `cri` resize ended, for the next pass to report.
    outcome: Option<CriOutcome>,
    /// Deleted after its TTL (the watch may still show it).
    deleted: bool,
}

/// How long the API server's resize API, once discovered, is used before asking again (an
/// upgrade of the API server is also noticed by the refusal of a resize).
const SERVED_API_TTL: Duration = Duration::from_secs(300);

/// How long a namespace's listed LimitRanges are used before listing again.
const LIMIT_RANGES_TTL: Duration = Duration::from_secs(10);

fn now_text() -> String {
    Timestamp::now().to_string()
}

impl RequestController for Controller {
    type Done = CriDone;
    const WORKER: &'static str = WORKER;

    async fn sync(&mut self, requests: &[Arc<DynamicObject>], view: &NodeView) -> Option<Duration> {
        self.sync_requests(requests, view).await;
        None
    }

    fn finish(&mut self, done: CriDone) {
        let tracked = self.tracked(&done.uid);
        tracked.in_flight = false;
        match done.result {
            Ok(applied) => {
                tracked.outcome = Some(CriOutcome::Applied {
                    applied,
                    reapply: done.reapply,
                });
            }
            Err(err @ ResizeError::NotRunning(_)) => {
                tracing::info!(error = %err, "the container restarted during the resize; trying again once it runs");
            }
            Err(err) if err.is_transient() => {
                tracing::warn!(error = %err, "the runtime went away during a resize; trying again");
            }
            Err(err) if !done.reapply && err.may_be_a_race() && !tracked.retried => {
                tracked.retried = true;
                tracing::info!(error = %err, "a resize failed; trying once more from a fresh view before failing the request");
            }
            Err(err) => {
                tracked.outcome = Some(CriOutcome::Failed(err.to_string()));
            }
        }
    }

    /// A status write landed: the next step may follow from it.
    async fn woken(&mut self) {
        self.statuses.finished().await;
    }

    fn busy(&self) -> bool {
        self.requests.values().any(|r| r.in_flight)
    }
}

impl Controller {
    fn tracked(&mut self, uid: &str) -> &mut Tracked {
        self.requests.entry(uid.to_owned()).or_default()
    }

    async fn sync_requests(&mut self, objects: &[Arc<DynamicObject>], view: &NodeView) {
        self.health.set(HEALTH_KEY, Ok(()));
        if !view.synced {
            return;
        }
        let mut requests = Vec::new();
        let mut present = HashSet::new();
        for object in objects {
            match ResizeRequest::from_object(object) {
                Ok(r) => {
                    present.insert(r.uid.clone());
                    let deleted = self.requests.get(&r.uid).is_some_and(|t| t.deleted);
                    if !r.deleting && !deleted {
                        requests.push(r);
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerResizeRequest without identity")
                }
            }
        }
        for request in &mut requests {
            // The status this agent wrote last counts over the (older) watched copy until the
            // watch shows it: a request concluded here is over, a container the resize was
            // just applied to again is not "replaced" once more.
            if let Some(newest) = self.statuses.newest(&object_ref(request), &request.status) {
                request.status = newest;
            }
        }
        requests.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        let mut by_pod: BTreeMap<(String, String), Vec<ResizeRequest>> = BTreeMap::new();
        for r in requests {
            by_pod
                .entry(pod_group(&r.namespace, &r.uid, &r.spec, |s| &s.pod_name))
                .or_default()
                .push(r);
        }
        let live: HashSet<String> = by_pod.values().flatten().map(|r| r.uid.clone()).collect();
        for ((namespace, pod_name), group) in &by_pod {
            let pod = view
                .pods
                .iter()
                .find(|p| p.namespace == *namespace && p.name == *pod_name);
            self.sync_pod(group, pod, view).await;
        }
        // Deleted by their TTL: remembered until the cache no longer holds them; a resize
        // under way until it ends.
        self.requests.retain(|uid, t| {
            t.in_flight || live.contains(uid) || (t.deleted && present.contains(uid))
        });
        self.statuses.retain(&live);
        self.limit_ranges
            .retain(|_, (listed, _)| listed.elapsed() < LIMIT_RANGES_TTL);
    }

    async fn sync_pod(&mut self, group: &[ResizeRequest], pod: Option<&PodView>, view: &NodeView) {
        for request in group.iter().filter(|r| r.status.phase.is_final()) {
            self.collect_if_expired(request).await;
        }
        if let Some(pod) = pod {
            let zero_cpu = ZeroCpuRequest::of_kubelet(view.kubelet_version.as_deref());
            self.reapply(group, pod, zero_cpu).await;
        }
        let mut active = group.iter().filter(|r| !r.status.phase.is_final());
        let Some(first) = active.next() else { return };
        for waiting in active {
            if waiting.status.phase == ResizePhase::None {
                let status = ResizeStatus {
                    phase: ResizePhase::Pending,
                    message: Some(format!(
                        "waiting for ContainerResizeRequest {} of the same pod",
                        first.name
                    )),
                    observed_generation: waiting.generation,
                    ..Default::default()
                };
                self.write(waiting, status);
            }
        }
        self.drive(first, group, pod, view).await;
    }

    /// Writes `status` unless the request already has it (`request.status` is the watched one
    /// or, when newer, the one last written).
    fn write(&mut self, request: &ResizeRequest, status: ResizeStatus) {
        self.statuses
            .write(&object_ref(request), &request.status, status);
    }

    /// Ends a request with `phase` and `message`.
    fn conclude(
        &mut self,
        request: &ResizeRequest,
        phase: ResizePhase,
        message: String,
        actuator: Option<Actuator>,
    ) {
        self.conclude_from(request, request.status.clone(), phase, message, actuator);
    }

    /// Ends a request with `phase` and `message`, from `status` (which may carry results).
    fn conclude_from(
        &mut self,
        request: &ResizeRequest,
        mut status: ResizeStatus,
        phase: ResizePhase,
        message: String,
        actuator: Option<Actuator>,
    ) {
        status.phase = phase;
        status.message = Some(message.clone());
        status.actuator = actuator.or(status.actuator);
        status.observed_generation = request.generation;
        status.start_time.get_or_insert_with(now_text);
        status.completion_time = Some(now_text());
        for c in &mut status.containers {
            if c.phase != ContainerPhase::Succeeded {
                c.phase = ContainerPhase::Failed;
            }
        }
        let seconds = self
            .tracked(&request.uid)
            .started
            .take()
            .map(|at| at.elapsed().as_secs_f64());
        self.metrics.observe(
            status.actuator.map_or("none", Actuator::as_str),
            phase.as_str(),
            seconds,
        );
        if phase != ResizePhase::Succeeded {
            tracing::warn!(request = %request.name, namespace = %request.namespace, phase = phase.as_str(), %message, "ContainerResizeRequest not done");
        }
        self.write(request, status);
    }

    /// Decides the request whose turn it is ([`plan::decide`]) and carries the decision out.
    async fn drive(
        &mut self,
        request: &ResizeRequest,
        group: &[ResizeRequest],
        pod: Option<&PodView>,
        view: &NodeView,
    ) {
        let pod_busy = self.pod_busy(group);
        let tracked = self.tracked(&request.uid);
        tracked.started.get_or_insert_with(Instant::now);
        let in_flight = tracked.in_flight;
        let begun = in_flight || tracked.outcome.is_some() || tracked.requested.is_some();
        let kubelet_gate = request
            .status
            .actuator
            .is_none()
            .then(|| through_kubelet::resize_gate_from_kubelet_config(&self.config.kubelet_config))
            .flatten();
        let mut limit_ranges = None;
        let decision = loop {
            let cri_outcome = self
                .requests
                .get(&request.uid)
                .and_then(|t| t.outcome.as_ref());
            let decision = plan::decide(&Facts {
                request,
                group,
                pod,
                view,
                now: Timestamp::now(),
                in_flight,
                begun,
                setting: self.config.actuator,
                kubelet_gate,
                limit_ranges: limit_ranges.as_deref(),
                cri_outcome,
                pod_busy,
            });
            if !matches!(decision, Decision::NeedsLimitRanges) {
                break decision;
            }
            match self.limit_ranges(&request.namespace).await {
                Ok(ranges) => limit_ranges = Some(ranges),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot list LimitRanges; trying again");
                    return;
                }
            }
        };
        match (decision, pod) {
            (
                Decision::Conclude {
                    phase,
                    message,
                    actuator,
                },
                _,
            ) => self.conclude(request, phase, message, actuator),
            (Decision::ThroughCri(step), Some(pod)) => {
                // The last run's outcome is taken in by this step.
                self.tracked(&request.uid).outcome = None;
                self.drive_cri(request, pod, step);
            }
            (Decision::ThroughKubelet { after }, Some(pod)) => {
                self.drive_kubelet(request, pod, &after).await
            }
            (Decision::Wait(message), _) => {
                if matches!(
                    request.status.phase,
                    ResizePhase::None | ResizePhase::Pending
                ) {
                    let status = ResizeStatus {
                        phase: ResizePhase::Pending,
                        message: Some(message),
                        observed_generation: request.generation,
                        ..Default::default()
                    };
                    self.write(request, status);
                }
            }
            // Admitted only with a pod; relisted LimitRanges are asked for again.
            (
                Decision::ThroughCri(_)
                | Decision::ThroughKubelet { .. }
                | Decision::NeedsLimitRanges,
                _,
            ) => {}
        }
    }

    /// The resize API the API server serves, from discovery at most every
    /// [`SERVED_API_TTL`], or now when `again` (a resize was refused). None while discovery
    /// fails (logged; the next pass asks again).
    async fn served_api(&mut self, again: bool) -> Option<KubeletResizeApi> {
        if let Some((api, found)) = self.served_api
            && !again
            && found.elapsed() < SERVED_API_TTL
        {
            return Some(api);
        }
        match through_kubelet::served_api(&self.client).await {
            Ok(api) => {
                if self.served_api.is_some_and(|(before, _)| before != api) {
                    tracing::info!(
                        api = api.describe(),
                        "the API server now takes resizes through another API"
                    );
                }
                self.served_api = Some((api, Instant::now()));
                Some(api)
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot discover the API server's resize API; trying again");
                None
            }
        }
    }

    async fn limit_ranges(&mut self, namespace: &str) -> Result<Vec<Value>, ::kube::Error> {
        if let Some((listed, ranges)) = self.limit_ranges.get(namespace)
            && listed.elapsed() < LIMIT_RANGES_TTL
        {
            return Ok(ranges.clone());
        }
        let api: Api<LimitRange> = Api::namespaced(self.client.clone(), namespace);
        let list = api.list(&ListParams::default()).await?;
        let ranges: Vec<Value> = list
            .items
            .iter()
            .filter_map(|lr| serde_json::to_value(lr).ok())
            .collect();
        self.limit_ranges
            .insert(namespace.to_owned(), (Instant::now(), ranges.clone()));
        Ok(ranges)
    }

    /// Carries out a `cri` resize's next step.
    fn drive_cri(&mut self, request: &ResizeRequest, pod: &PodView, step: CriStep) {
        let named: Vec<String> = request.desired().into_iter().map(|d| d.name).collect();
        let mut status = self.running_status(request, Actuator::Cri);
        match step {
            CriStep::Succeeded(containers) => {
                status.containers = containers;
                PodEvents::new(self.client.clone(), &self.config.node_name).emit(
                    &pod.event_ref(),
                    "Resized",
                    format!(
                        "Resized containers {} in place by ContainerResizeRequest {}",
                        named.join(", "),
                        request.name
                    ),
                    "Normal",
                );
                let message = "resized through CRI and the pod cgroup".to_string();
                self.conclude_from(
                    request,
                    status,
                    ResizePhase::Succeeded,
                    message,
                    Some(Actuator::Cri),
                );
            }
            CriStep::Failed(message) => {
                PodEvents::new(self.client.clone(), &self.config.node_name).emit(
                    &pod.event_ref(),
                    "ResizeFailed",
                    format!("ContainerResizeRequest {}: {message}", request.name),
                    "Warning",
                );
                self.conclude(request, ResizePhase::Failed, message, Some(Actuator::Cri))
            }
            CriStep::WaitForPod => {}
            CriStep::Deferred => {
                status.phase = ResizePhase::Deferred;
                status.message = Some("the node's allocatable cpu or memory cannot take the new requests now; trying again".into());
                self.write(request, status);
            }
            CriStep::WaitForRunning => {
                status.phase = ResizePhase::Pending;
                status.message = Some("waiting for the containers to run".into());
                self.write(request, status);
            }
            CriStep::Start(target) => {
                status.phase = ResizePhase::InProgress;
                status.message = None;
                status.containers = named
                    .iter()
                    .map(|name| ContainerResult {
                        name: name.clone(),
                        phase: ContainerPhase::InProgress,
                        ..Default::default()
                    })
                    .collect();
                self.write(request, status);
                self.spawn_cri(request.uid.clone(), target, false);
            }
        }
    }

    /// A `cri` resize of one of the pod's requests (or a re-apply) is running.
    fn pod_busy(&self, group: &[ResizeRequest]) -> bool {
        group
            .iter()
            .any(|r| self.requests.get(&r.uid).is_some_and(|t| t.in_flight))
    }

    fn spawn_cri(&mut self, uid: String, target: PodTarget, reapply: bool) {
        let cgroups = match Cgroups::detect(&self.config.cgroup_root) {
            Ok(cgroups) => cgroups,
            Err(err) => {
                self.health
                    .set(HEALTH_KEY, Err(format!("cannot resize through CRI: {err}")));
                self.tracked(&uid).outcome = Some(CriOutcome::Failed(err.to_string()));
                return;
            }
        };
        self.tracked(&uid).in_flight = true;
        let cri = self.cri.clone();
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let result = through_cri::apply(&cri, &cgroups, &target).await;
            let _ = done
                .send(CriDone {
                    uid,
                    result,
                    reapply,
                })
                .await;
        });
    }

    /// The request's status with the fields every phase keeps.
    fn running_status(&self, request: &ResizeRequest, actuator: Actuator) -> ResizeStatus {
        let mut status = request.status.clone();
        status.actuator = Some(actuator);
        status.observed_generation = request.generation;
        status.start_time.get_or_insert_with(now_text);
        status
    }

    async fn drive_kubelet(
        &mut self,
        request: &ResizeRequest,
        pod: &PodView,
        after: &[(String, Resources)],
    ) {
        let named: Vec<String> = request.desired().into_iter().map(|d| d.name).collect();
        let targets: Vec<(String, Resources)> = after
            .iter()
            .filter(|(name, _)| named.contains(name))
            .cloned()
            .collect();
        let api = match self.tracked(&request.uid).requested {
            Some(api) => api,
            None => {
                let Some(api) = self.served_api(false).await else {
                    return;
                };
                match through_kubelet::request(
                    &self.client,
                    api,
                    &request.namespace,
                    &pod.name,
                    &targets,
                )
                .await
                {
                    Ok(()) => {
                        self.tracked(&request.uid).requested = Some(api);
                        api
                    }
                    Err(::kube::Error::Api(status)) if crate::kube::refuses_request(&status) => {
                        // The API server may have been upgraded since it was asked: a refusal
                        // of the API it no longer serves the way it did is tried again the new
                        // way on the next pass.
                        let reasked =
                            std::mem::replace(&mut self.tracked(&request.uid).reasked, true);
                        if let Some(now_served) = self.served_api(true).await
                            && now_served != api
                            && !reasked
                        {
                            tracing::info!(request = %request.name, refused = api.describe(),
                                served = now_served.describe(), "the API server changed how it takes resizes; asking again");
                            return;
                        }
                        let message = format!(
                            "the API server refused the resize through {}: {}",
                            api.describe(),
                            status.message
                        );
                        return self.conclude(
                            request,
                            ResizePhase::Failed,
                            message,
                            Some(Actuator::Kubelet),
                        );
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot ask for the resize; trying again");
                        return;
                    }
                }
            }
        };
        let Some(api_pod) = pod
            .api_pod
            .as_ref()
            .and_then(|p| serde_json::to_value(p.as_ref()).ok())
        else {
            return;
        };
        let mut status = self.running_status(request, Actuator::Kubelet);
        match through_kubelet::progress(&api_pod, &targets) {
            Progress::Waiting(message) => {
                status.phase = ResizePhase::InProgress;
                status.message = Some(message);
                self.write(request, status);
            }
            Progress::Deferred(message) => {
                status.phase = ResizePhase::Deferred;
                status.message = Some(format!("deferred by the kubelet: {message}"));
                self.write(request, status);
            }
            Progress::Infeasible(message) => {
                self.conclude(
                    request,
                    ResizePhase::Infeasible,
                    format!("infeasible for the kubelet: {message}"),
                    Some(Actuator::Kubelet),
                );
            }
            Progress::Done(applied) => {
                status.containers = applied
                    .iter()
                    .map(|(name, r)| ContainerResult {
                        name: name.clone(),
                        phase: ContainerPhase::Succeeded,
                        resources: Some(r.to_requirements()),
                        ..Default::default()
                    })
                    .collect();
                let message = match api {
                    KubeletResizeApi::Subresource => "resized by the kubelet through pods/resize",
                    KubeletResizeApi::PodSpec => "resized by the kubelet through the pod spec",
                };
                self.conclude_from(
                    request,
                    status,
                    ResizePhase::Succeeded,
                    message.into(),
                    Some(Actuator::Kubelet),
                );
            }
        }
    }

    /// While a succeeded `cri` request exists, a container the kubelet replaced (started from
    /// the pod spec's resources) gets the resize again.
    async fn reapply(&mut self, group: &[ResizeRequest], pod: &PodView, zero_cpu: ZeroCpuRequest) {
        let succeeded: Vec<&ResizeRequest> = group
            .iter()
            .filter(|r| plan::applied_through_cri(r))
            .collect();
        let Some(newest) = succeeded.last() else {
            return;
        };
        let outcome = self.tracked(&newest.uid).outcome.take();
        if let Some(CriOutcome::Applied {
            applied,
            reapply: true,
        }) = outcome
        {
            self.metrics.count_reapplied();
            for request in &succeeded {
                let mut status = request.status.clone();
                let mut changed = false;
                for c in &mut status.containers {
                    if let Some(a) = applied.iter().find(|a| a.name == c.name) {
                        c.reapplied += 1;
                        c.container_id = Some(a.container_id.clone());
                        c.resources = Some(a.resources.to_requirements());
                        changed = true;
                    }
                }
                if changed {
                    tracing::info!(request = %request.name, pod = %pod.name, "resize applied again to a replaced container");
                    self.write(request, status);
                }
            }
            return;
        }
        if self.pod_busy(group) {
            return;
        }
        let replaced = plan::replaced_containers(&succeeded, pod);
        if replaced.is_empty() {
            return;
        }
        let mut after = plan::spec_resources(pod);
        for request in &succeeded {
            plan::overlay(&mut after, request);
        }
        if let Some(target) = plan::pod_target(pod, &after, &replaced, zero_cpu) {
            tracing::info!(pod = %pod.name, containers = ?replaced, "the kubelet replaced resized containers; applying the resize again");
            self.spawn_cri(newest.uid.clone(), target, true);
        }
    }

    async fn collect_if_expired(&mut self, request: &ResizeRequest) {
        let Ok(spec) = &request.spec else { return };
        let (Some(ttl), Some(done)) = (
            spec.ttl_seconds_after_finished,
            request
                .status
                .completion_time
                .as_deref()
                .and_then(|t| t.parse::<Timestamp>().ok()),
        ) else {
            return;
        };
        if Timestamp::now().duration_since(done).as_secs() < ttl {
            return;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &request.namespace, &resize_resource());
        match api.delete(&request.name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(request = %request.name, namespace = %request.namespace, "deleted finished ContainerResizeRequest after its TTL");
                self.tracked(&request.uid).deleted = true;
            }
            Err(::kube::Error::Api(status)) if status.code == 404 => {
                self.tracked(&request.uid).deleted = true;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot delete an expired ContainerResizeRequest")
            }
        }
    }
}

fn object_ref(request: &ResizeRequest) -> ObjectRef {
    ObjectRef {
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        uid: request.uid.clone(),
        // This agent is the status's only writer.
        resource_version: None,
    }
}
