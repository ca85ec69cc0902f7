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
use tokio::sync::{mpsc, watch};

use super::cgroup::Cgroups;
use super::request::{
    self, Actuator, ContainerPhase, ContainerResult, ResizePhase, ResizeRequest, ResizeStatus,
};
use super::resources::{self, InitContainer, Refusal};
use super::through_cri::{self, ContainerTarget, PodTarget, ResizeError};
use super::through_kubelet::{self, ActuatorSetting, KubeletResizeApi, Progress};
use crate::cri::CriClient;
use crate::health::Health;
use crate::kube::events::PodEvents;
use crate::kube::request::pod_group;
use crate::kube::status::{ObjectRef, StatusWriter};
use crate::kube::{Watched, WatchedRequests};
use crate::metrics::Metrics;
use crate::nodeview::{ContainerKind, NodeView, PodView, RuntimeState};
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
        &GroupVersionKind::gvk(request::GROUP, request::VERSION, request::KIND),
        request::PLURAL,
    )
}

const HEALTH_KEY: &str = "resize";

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

pub async fn run(
    config: ResizeConfig,
    client: ::kube::Client,
    cri: CriClient,
    mut views: watch::Receiver<Arc<NodeView>>,
    health: Health,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let resource = resize_resource();
    let selector = format!("{}={}", request::LABEL_NODE_NAME, config.node_name);
    let (requests, watch) = crate::kube::watch_requests(
        client.clone(),
        &resource,
        &selector,
        WATCHED,
        metrics.clone(),
        health.clone(),
        |_| {},
    );
    let watch_task = tokio::spawn(watch);
    let WatchedRequests {
        store,
        changes: mut changed,
    } = requests;

    let (done_tx, mut done_rx) = mpsc::channel::<CriDone>(64);
    let mut controller = ResizeController {
        statuses: StatusWriter::new(
            client.clone(),
            resource,
            request::KIND,
            &["message", "completionTime"],
        ),
        config,
        client,
        cri,
        health,
        metrics,
        in_flight: HashSet::new(),
        retried: HashSet::new(),
        started: HashMap::new(),
        requested: HashSet::new(),
        outcomes: HashMap::new(),
        deleted: HashSet::new(),
        written: HashMap::new(),
        limit_ranges: HashMap::new(),
        done_tx,
    };
    loop {
        tokio::select! {
            _ = changed.changed() => {}
            _ = views.changed() => {}
            Some(done) = done_rx.recv() => controller.finish(done),
            _ = controller.statuses.finished() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        let view = views.borrow().clone();
        controller.sync(&store.state(), &view).await;
    }
    watch_task.abort();
    // A resize under way is a handful of cgroup writes and CRI calls: let it finish.
    while !controller.in_flight.is_empty() {
        match done_rx.recv().await {
            Some(done) => controller.finish(done),
            None => break,
        }
    }
}

/// What a finished `cri` resize left for the next pass to write.
enum CriOutcome {
    Applied(Vec<through_cri::Applied>, bool),
    Failed(String),
}

struct ResizeController {
    config: ResizeConfig,
    client: ::kube::Client,
    cri: CriClient,
    health: Health,
    metrics: Metrics,
    statuses: StatusWriter<ResizeStatus>,
    /// Requests with a `cri` resize running (a re-apply runs under the newest succeeded one).
    in_flight: HashSet<String>,
    /// Requests whose `cri` resize failed once and is being tried again.
    retried: HashSet<String>,
    /// Request UID → when the agent took it up (for the duration metric).
    started: HashMap<String, Instant>,
    /// Requests whose `kubelet` resize the API has accepted from this agent.
    requested: HashSet<String>,
    /// Request UID → how its last `cri` resize ended.
    outcomes: HashMap<String, CriOutcome>,
    /// Requests deleted after their TTL (the watch may still show them).
    deleted: HashSet<String>,
    /// Statuses written that the watch does not show yet. They count over the (older) watched
    /// copy: a request concluded here is over, a container the resize was just applied to again
    /// is not "replaced" once more.
    written: HashMap<String, ResizeStatus>,
    /// Namespace → its LimitRanges and when they were listed: requests waiting their turn are
    /// checked on every pass, and listing each time flooded the API (15,000 lists in the soak).
    limit_ranges: HashMap<String, (Instant, Vec<Value>)>,
    done_tx: mpsc::Sender<CriDone>,
}

/// How long a namespace's listed LimitRanges are used before listing again.
const LIMIT_RANGES_TTL: Duration = Duration::from_secs(10);

/// The fields of a container spec the resize checks read, and the one decoder of them.
#[derive(serde::Deserialize)]
struct ResizeFields {
    #[serde(default)]
    resources: Option<Value>,
    /// `Always` marks a sidecar among the init containers.
    #[serde(default, rename = "restartPolicy")]
    restart_policy: Option<String>,
    /// Kept as text, read only when a resize is checked: a malformed policy must not hide
    /// the container's resources, and the node's other pods never need it.
    #[serde(default, rename = "resizePolicy")]
    resize_policy: Option<Box<serde_json::value::RawValue>>,
}

/// A container of the pod's spec as the resize checks see it.
struct SpecContainer<'a> {
    name: &'a str,
    resources: Resources,
    sidecar: bool,
    resize_policy: Option<Box<serde_json::value::RawValue>>,
}

impl SpecContainer<'_> {
    /// Whether its `resizePolicy` asks for a restart to resize `resource`.
    fn restarts_to_resize(&self, resource: &str) -> bool {
        let policies = self
            .resize_policy
            .as_deref()
            .and_then(|text| serde_json::from_str::<Vec<Value>>(text.get()).ok())
            .unwrap_or_default();
        policies.iter().any(|p| {
            p.get("resourceName").and_then(Value::as_str) == Some(resource)
                && p.get("restartPolicy").and_then(Value::as_str) == Some("RestartContainer")
        })
    }
}

/// The pod's containers of `kind`, in the spec's order, with the resources the API gives them.
/// Runs for every pod of the node when a request is checked against the node's allocatable:
/// only the fields of [`ResizeFields`] are decoded.
fn containers_of(pod: &PodView, kind: ContainerKind) -> impl Iterator<Item = SpecContainer<'_>> {
    pod.containers
        .iter()
        .filter(move |c| c.kind == kind)
        .filter_map(|c| {
            let spec: ResizeFields = pod.spec_of(c)?.decode().ok()?;
            let value = spec
                .resources
                .unwrap_or_else(|| Value::Object(Default::default()));
            Some(SpecContainer {
                name: c.name.as_str(),
                resources: Resources::from_requirements(&value).ok()?,
                sidecar: spec.restart_policy.as_deref() == Some("Always"),
                resize_policy: spec.resize_policy,
            })
        })
}

/// A pod's app containers with the resources the API gives them.
fn spec_resources(pod: &PodView) -> Vec<(String, Resources)> {
    containers_of(pod, ContainerKind::Regular)
        .map(|c| (c.name.to_owned(), c.resources))
        .collect()
}

/// A pod's init containers in order, sidecars marked: they count in the pod's totals, its QoS
/// class and its cgroup, as kubelet counts them.
fn init_containers(pod: &PodView) -> Vec<InitContainer> {
    containers_of(pod, ContainerKind::Init)
        .map(|c| InitContainer {
            resources: c.resources,
            sidecar: c.sidecar,
        })
        .collect()
}

/// Why the `cri` actuator must leave this resize alone: a container whose `resizePolicy` asks
/// for a restart to resize a resource that changes (cpu: request or limit; memory: limit, the
/// values kubelet compares). Only the kubelet can restart it with the new values; resized in
/// place it would run against its own policy.
fn restart_required(
    pod: &PodView,
    before: &[(String, Resources)],
    after: &[(String, Resources)],
) -> Option<String> {
    for c in containers_of(pod, ContainerKind::Regular) {
        let find =
            |list: &[(String, Resources)]| list.iter().find(|(n, _)| n == c.name).map(|(_, r)| *r);
        let (Some(b), Some(a)) = (find(before), find(after)) else {
            continue;
        };
        let changed = [
            (
                "cpu",
                a.cpu_request != b.cpu_request || a.cpu_limit != b.cpu_limit,
            ),
            ("memory", a.memory_limit != b.memory_limit),
        ];
        for (resource, changes) in changed {
            if changes && c.restarts_to_resize(resource) {
                return Some(format!(
                    "container {:?} has resizePolicy RestartContainer for {resource}: only the kubelet can restart it with the new values (1.27+ with InPlacePodVerticalScaling); the cri actuator resizes running containers in place only",
                    c.name
                ));
            }
        }
    }
    None
}

fn overlay(base: &mut [(String, Resources)], request: &ResizeRequest) {
    for desired in request.desired() {
        if let Some((_, r)) = base.iter_mut().find(|(n, _)| *n == desired.name) {
            *r = r.overlay(&desired.resources);
        }
    }
}

fn now_text() -> String {
    Timestamp::now().to_string()
}

impl ResizeController {
    fn finish(&mut self, done: CriDone) {
        self.in_flight.remove(&done.uid);
        match done.result {
            Ok(applied) => {
                self.outcomes
                    .insert(done.uid, CriOutcome::Applied(applied, done.reapply));
            }
            Err(err @ ResizeError::NotRunning(_)) => {
                tracing::info!(error = %err, "the container restarted during the resize; trying again once it runs");
            }
            Err(err) if err.is_transient() => {
                tracing::warn!(error = %err, "the runtime went away during a resize; trying again");
            }
            Err(err)
                if !done.reapply
                    && err.may_be_a_race()
                    && self.retried.insert(done.uid.clone()) =>
            {
                tracing::info!(error = %err, "a resize failed; trying once more from a fresh view before failing the request");
            }
            Err(err) => {
                self.outcomes
                    .insert(done.uid, CriOutcome::Failed(err.to_string()));
            }
        }
    }

    async fn sync(&mut self, objects: &[Arc<DynamicObject>], view: &NodeView) {
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
                    if !r.deleting && !self.deleted.contains(&r.uid) {
                        requests.push(r);
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "ignoring a ContainerResizeRequest without identity")
                }
            }
        }
        for request in &mut requests {
            self.overlay_written(request);
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
        // Deleted by their TTL: remembered until the cache no longer holds them.
        self.deleted.retain(|uid| present.contains(uid));
        self.statuses.retain(&live);
        self.written.retain(|uid, _| live.contains(uid));
        self.started.retain(|uid, _| live.contains(uid));
        self.requested.retain(|uid| live.contains(uid));
        self.retried.retain(|uid| live.contains(uid));
        self.outcomes
            .retain(|uid, _| live.contains(uid) || self.in_flight.contains(uid));
    }

    async fn sync_pod(&mut self, group: &[ResizeRequest], pod: Option<&PodView>, view: &NodeView) {
        for request in group.iter().filter(|r| r.status.phase.is_final()) {
            self.collect_if_expired(request).await;
        }
        if let Some(pod) = pod {
            self.reapply(group, pod).await;
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

    /// Puts the status this agent wrote last in place of the watched one until the watch shows
    /// it, writing it again meanwhile (a failed write is retried this way).
    fn overlay_written(&mut self, request: &mut ResizeRequest) {
        let Some(written) = self.written.get(&request.uid) else {
            return;
        };
        if *written == request.status {
            self.written.remove(&request.uid);
            return;
        }
        let written = written.clone();
        self.statuses
            .write(&object_ref(request), &request.status, written.clone());
        request.status = written;
    }

    /// Writes `status` unless the request already has it (`request.status` is the watched one
    /// or, when newer, the one last written).
    fn write(&mut self, request: &ResizeRequest, status: ResizeStatus) {
        if status == request.status {
            return;
        }
        self.written.insert(request.uid.clone(), status.clone());
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
        self.observe_end(request, phase, status.actuator);
        if phase != ResizePhase::Succeeded {
            tracing::warn!(request = %request.name, namespace = %request.namespace, phase = phase.as_str(), %message, "ContainerResizeRequest not done");
        }
        self.write(request, status);
    }

    fn observe_end(
        &mut self,
        request: &ResizeRequest,
        phase: ResizePhase,
        actuator: Option<Actuator>,
    ) {
        let seconds = self
            .started
            .remove(&request.uid)
            .map(|at| at.elapsed().as_secs_f64());
        self.metrics.observe_resize(
            actuator.map_or("none", Actuator::as_str),
            phase.as_str(),
            seconds,
        );
    }

    async fn drive(
        &mut self,
        request: &ResizeRequest,
        group: &[ResizeRequest],
        pod: Option<&PodView>,
        view: &NodeView,
    ) {
        self.started
            .entry(request.uid.clone())
            .or_insert_with(Instant::now);
        let spec = match &request.spec {
            Ok(spec) => spec,
            Err(err) => return self.conclude(request, ResizePhase::Failed, err.clone(), None),
        };
        if let (Some(seconds), Some(created)) = (spec.active_deadline_seconds, request.created_at)
            && Timestamp::now().duration_since(created).as_secs() >= seconds
            && !self.in_flight.contains(&request.uid)
        {
            let message = format!("not done within activeDeadlineSeconds ({seconds} s)");
            return self.conclude(request, ResizePhase::Failed, message, None);
        }
        let Some(pod) = pod else {
            let message = format!(
                "pod {} not found on node {}",
                spec.pod_name, self.config.node_name
            );
            return self.conclude(request, ResizePhase::Failed, message, None);
        };
        if let Some(uid) = &spec.pod_uid
            && *uid != pod.uid
        {
            let message = format!(
                "pod {} has UID {}, the request is for {uid}",
                pod.name, pod.uid
            );
            return self.conclude(request, ResizePhase::Failed, message, None);
        }
        if pod.terminating {
            let message = format!("pod {} is terminating", pod.name);
            return self.conclude(request, ResizePhase::Failed, message, None);
        }
        let base = spec_resources(pod);
        for c in &spec.containers {
            if !base.iter().any(|(name, _)| *name == c.name) {
                let message = format!(
                    "pod {} has no container {:?} that can be resized",
                    pod.name, c.name
                );
                return self.conclude(request, ResizePhase::Failed, message, None);
            }
        }
        // The actuator is chosen once per request.
        let (actuator, api) = match request.status.actuator {
            Some(Actuator::Cri) => (Actuator::Cri, None),
            _ => {
                let gate =
                    through_kubelet::resize_gate_from_kubelet_config(&self.config.kubelet_config);
                match through_kubelet::choose_actuator(
                    self.config.actuator,
                    view.kubelet_version.as_deref(),
                    gate,
                    pod.static_pod,
                ) {
                    Ok(choice) => choice,
                    Err(message) => {
                        return self.conclude(request, ResizePhase::Failed, message, None);
                    }
                }
            }
        };
        // Before: what the pod has now (the API's spec; for `cri`, with the resizes this
        // agent keeps applied). After: that with this request on top.
        let mut before = base.clone();
        if actuator == Actuator::Cri {
            for earlier in group.iter().filter(|r| {
                r.status.phase == ResizePhase::Succeeded && r.status.actuator == Some(Actuator::Cri)
            }) {
                overlay(&mut before, earlier);
            }
        }
        let mut after = before.clone();
        overlay(&mut after, request);

        // The checks run once, before anything is changed.
        let untouched = matches!(
            request.status.phase,
            ResizePhase::None | ResizePhase::Pending
        ) && !self.in_flight.contains(&request.uid)
            && !self.outcomes.contains_key(&request.uid)
            && !self.requested.contains(&request.uid);
        if untouched {
            let limit_ranges = match self.limit_ranges(&request.namespace).await {
                Ok(ranges) => ranges,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot list LimitRanges; trying again");
                    return;
                }
            };
            if actuator == Actuator::Cri
                && let Some(message) = restart_required(pod, &before, &after)
            {
                return self.conclude(request, ResizePhase::Failed, message, Some(actuator));
            }
            let allocatable = node_allocatable(view);
            if let Err(refusal) = resources::check_resize(
                &before,
                &after,
                &init_containers(pod),
                &allocatable,
                &limit_ranges,
            ) {
                let phase = match refusal {
                    Refusal::ExceedsAllocatable { .. } => ResizePhase::Infeasible,
                    _ => ResizePhase::Failed,
                };
                return self.conclude(request, phase, refusal.to_string(), Some(actuator));
            }
        }
        match actuator {
            Actuator::Cri => self.drive_cri(request, group, pod, view, &after).await,
            Actuator::Kubelet => {
                let api = api.unwrap_or(KubeletResizeApi::Subresource);
                self.drive_kubelet(request, pod, api, &after).await
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

    async fn drive_cri(
        &mut self,
        request: &ResizeRequest,
        group: &[ResizeRequest],
        pod: &PodView,
        view: &NodeView,
        after: &[(String, Resources)],
    ) {
        let named: Vec<String> = request.desired().into_iter().map(|d| d.name).collect();
        if let Some(outcome) = self.outcomes.remove(&request.uid) {
            return match outcome {
                CriOutcome::Applied(applied, _) => {
                    let mut status = self.running_status(request, Actuator::Cri);
                    status.containers = applied
                        .iter()
                        .map(|a| ContainerResult {
                            name: a.name.clone(),
                            phase: ContainerPhase::Succeeded,
                            container_id: Some(a.container_id.clone()),
                            resources: Some(a.resources.to_requirements()),
                            ..Default::default()
                        })
                        .collect();
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
                CriOutcome::Failed(message) => {
                    PodEvents::new(self.client.clone(), &self.config.node_name).emit(
                        &pod.event_ref(),
                        "ResizeFailed",
                        format!("ContainerResizeRequest {}: {message}", request.name),
                        "Warning",
                    );
                    self.conclude(request, ResizePhase::Failed, message, Some(Actuator::Cri))
                }
            };
        }
        if self.pod_busy(group) {
            return;
        }
        let this_pod = pod_requests(after, &init_containers(pod));
        if !resources::fits_node(
            &other_pods_requests(view, pod),
            &this_pod,
            &node_allocatable(view),
        ) {
            let mut status = self.running_status(request, Actuator::Cri);
            status.phase = ResizePhase::Deferred;
            status.message = Some("the node's allocatable cpu or memory cannot take the new requests now; trying again".into());
            return self.write(request, status);
        }
        let Some(target) = pod_target(pod, after, &named) else {
            let mut status = self.running_status(request, Actuator::Cri);
            status.phase = ResizePhase::Pending;
            status.message = Some("waiting for the containers to run".into());
            return self.write(request, status);
        };
        let mut status = self.running_status(request, Actuator::Cri);
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

    /// A `cri` resize of one of the pod's requests (or a re-apply) is running: the pod's
    /// cgroup and containers are changed by one resize at a time, or the read-backs of one
    /// would show the other's values.
    fn pod_busy(&self, group: &[ResizeRequest]) -> bool {
        group.iter().any(|r| self.in_flight.contains(&r.uid))
    }

    fn spawn_cri(&mut self, uid: String, target: PodTarget, reapply: bool) {
        let cgroups = match Cgroups::detect(&self.config.cgroup_root) {
            Ok(cgroups) => cgroups,
            Err(err) => {
                self.health
                    .set(HEALTH_KEY, Err(format!("cannot resize through CRI: {err}")));
                self.outcomes
                    .insert(uid, CriOutcome::Failed(err.to_string()));
                return;
            }
        };
        self.in_flight.insert(uid.clone());
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
        api: KubeletResizeApi,
        after: &[(String, Resources)],
    ) {
        let named: Vec<String> = request.desired().into_iter().map(|d| d.name).collect();
        let targets: Vec<(String, Resources)> = after
            .iter()
            .filter(|(name, _)| named.contains(name))
            .cloned()
            .collect();
        if !self.requested.contains(&request.uid) {
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
                    self.requested.insert(request.uid.clone());
                }
                Err(::kube::Error::Api(status))
                    if (400..500).contains(&status.code) && status.code != 429 =>
                {
                    let message = format!("the API server refused the resize: {}", status.message);
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
    async fn reapply(&mut self, group: &[ResizeRequest], pod: &PodView) {
        let succeeded: Vec<&ResizeRequest> = group
            .iter()
            .filter(|r| {
                r.status.phase == ResizePhase::Succeeded && r.status.actuator == Some(Actuator::Cri)
            })
            .collect();
        let Some(newest) = succeeded.last() else {
            return;
        };
        if let Some(CriOutcome::Applied(applied, true)) = self.outcomes.remove(&newest.uid) {
            self.metrics.count_resize_reapplied();
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
        // The containers whose running instance is not the one the resize was applied to.
        let mut replaced = Vec::new();
        for request in &succeeded {
            for c in &request.status.containers {
                let Some(view) = pod.containers.iter().find(|v| v.name == c.name) else {
                    continue;
                };
                let Some(runtime) = view
                    .runtime
                    .as_ref()
                    .filter(|r| r.state == RuntimeState::Running)
                else {
                    continue;
                };
                if c.container_id.as_deref().is_some_and(|id| id != runtime.id)
                    && !replaced.contains(&c.name)
                {
                    replaced.push(c.name.clone());
                }
            }
        }
        if replaced.is_empty() {
            return;
        }
        let mut after = spec_resources(pod);
        for request in &succeeded {
            overlay(&mut after, request);
        }
        if let Some(target) = pod_target(pod, &after, &replaced) {
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
                self.deleted.insert(request.uid.clone());
            }
            Err(::kube::Error::Api(status)) if status.code == 404 => {
                self.deleted.insert(request.uid.clone());
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

/// The containers to resize with their running instances; None while one is not running.
fn pod_target(pod: &PodView, after: &[(String, Resources)], named: &[String]) -> Option<PodTarget> {
    let mut containers = Vec::new();
    for name in named {
        let view = pod.containers.iter().find(|c| c.name == *name)?;
        let runtime = view
            .runtime
            .as_ref()
            .filter(|r| r.state == RuntimeState::Running)?;
        let target = after.iter().find(|(n, _)| n == name)?.1;
        containers.push(ContainerTarget {
            name: name.clone(),
            container_id: runtime.id.clone(),
            target,
        });
    }
    let all: Vec<Resources> = after.iter().map(|(_, r)| *r).collect();
    let init = init_containers(pod);
    let every: Vec<Resources> = all
        .iter()
        .copied()
        .chain(init.iter().map(|c| c.resources))
        .collect();
    Some(PodTarget {
        containers,
        qos: resources::qos_class(&every),
        all,
        init,
    })
}

fn node_allocatable(view: &NodeView) -> Resources {
    view.node_allocatable.unwrap_or_default()
}

fn pod_requests(containers: &[(String, Resources)], init: &[InitContainer]) -> Resources {
    let app: Vec<Resources> = containers.iter().map(|(_, r)| *r).collect();
    resources::pod_totals(&app, init)
}

/// The requests of the node's other pods that still hold resources, one total per pod.
fn other_pods_requests(view: &NodeView, pod: &PodView) -> Vec<Resources> {
    view.pods
        .iter()
        .filter(|p| p.uid != pod.uid && !p.terminating)
        .map(|p| pod_requests(&spec_resources(p), &init_containers(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: Value) -> SpecContainer<'static> {
        let fields: ResizeFields = serde_json::from_str(&json.to_string()).expect("decodes");
        let resources = fields
            .resources
            .unwrap_or_else(|| Value::Object(Default::default()));
        SpecContainer {
            name: "app",
            resources: Resources::from_requirements(&resources).expect("resources"),
            sidecar: false,
            resize_policy: fields.resize_policy,
        }
    }

    #[test]
    fn resize_policy_asks_for_a_restart_per_resource() {
        let c = spec(serde_json::json!({"resizePolicy": [
            {"resourceName": "cpu", "restartPolicy": "NotRequired"},
            {"resourceName": "memory", "restartPolicy": "RestartContainer"},
        ]}));
        assert!(c.restarts_to_resize("memory"));
        assert!(!c.restarts_to_resize("cpu"));
        assert!(!spec(serde_json::json!({})).restarts_to_resize("memory"));
    }

    /// A malformed policy neither fails the decoding (the container's resources still count
    /// on the node) nor asks for a restart.
    #[test]
    fn a_malformed_resize_policy_keeps_the_resources() {
        let c = spec(serde_json::json!({
            "resources": {"limits": {"memory": "64Mi"}},
            "resizePolicy": "RestartContainer",
        }));
        assert_eq!(c.resources.memory_limit, Some(64 << 20));
        assert!(!c.restarts_to_resize("memory"));
    }
}
