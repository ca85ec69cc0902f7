//! What to do with a ContainerResizeRequest, decided on plain data: the request, its pod as
//! the node view shows it, the node, the clock and what this agent has done for it. The
//! controller gathers those facts, acts on the decision (status writes, CRI calls, API calls)
//! and owns nothing of the reasoning, so every refusal and every wait is unit-tested here.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::object::{
    Actuator, ContainerPhase, ContainerResult, ResizePhase, ResizeRequest, ResizeSpec,
};
use super::resources::{self, InitContainer, Refusal};
use super::through_cri::{self, ContainerTarget, PodTarget};
use super::through_kubelet::{self, ActuatorSetting};
use crate::nodeview::{ContainerKind, NodeView, PodView, RuntimeState};
use crate::resources::Resources;

/// What is known when a request's turn comes.
pub(super) struct Facts<'a> {
    pub request: &'a ResizeRequest,
    /// All requests of the same pod, oldest first (`cri` resizes that succeeded before this
    /// one are what the pod has now).
    pub group: &'a [ResizeRequest],
    pub pod: Option<&'a PodView>,
    pub view: &'a NodeView,
    pub now: Timestamp,
    /// A `cri` resize of this request is running.
    pub in_flight: bool,
    /// The agent has begun this request (a `cri` resize ran or runs, or the kubelet was asked):
    /// the checks before any change are behind it.
    pub begun: bool,
    pub setting: ActuatorSetting,
    /// The InPlacePodVerticalScaling gate as the kubelet's config file sets it.
    pub kubelet_gate: Option<bool>,
    /// The namespace's LimitRanges, once listed.
    pub limit_ranges: Option<&'a [Value]>,
    /// How this request's last `cri` resize ended, when that is not taken in yet.
    pub cri_outcome: Option<&'a CriOutcome>,
    /// A `cri` resize of another request of the pod runs.
    pub pod_busy: bool,
}

/// The request's next step: the plan's one answer.
#[derive(Debug)]
pub(super) enum Decision {
    /// End it.
    Conclude {
        phase: ResizePhase,
        message: String,
        actuator: Option<Actuator>,
    },
    /// The checks need the namespace's LimitRanges: list them and decide again.
    NeedsLimitRanges,
    /// Not yet: what decides the actuator is about to be known (the kubelet has not reported
    /// the status of containers that run).
    Wait(String),
    /// Admitted for the kubelet: ask it to resize the pod to `after`.
    ThroughKubelet { after: PodResources },
    /// Admitted for `cri`: its next step.
    ThroughCri(CriStep),
}

/// Decides a request whose turn it is: first whether it may go ahead (its spec, its deadline,
/// its pod, the actuator, the checks before any change), then, for a `cri` resize, its next
/// step ([`cri_step`]).
pub(super) fn decide(f: &Facts<'_>) -> Decision {
    match admitted(f) {
        Ok((Actuator::Kubelet, _, after)) => Decision::ThroughKubelet { after },
        Ok((Actuator::Cri, pod, after)) => Decision::ThroughCri(cri_step(
            f.request,
            f.cri_outcome,
            f.pod_busy,
            pod,
            f.view,
            &after,
        )),
        Err(held) => held,
    }
}

fn failed(message: String, actuator: Option<Actuator>) -> Decision {
    Decision::Conclude {
        phase: ResizePhase::Failed,
        message,
        actuator,
    }
}

/// Each app container of a pod with its resources.
type PodResources = Vec<(String, Resources)>;

/// The checks of [`decide`] in its order: the actuator and the resources after the resize, or
/// the admission that ends or holds the request.
fn admitted<'a>(f: &Facts<'a>) -> Result<(Actuator, &'a PodView, PodResources), Decision> {
    let request = f.request;
    let spec = request
        .spec
        .as_ref()
        .map_err(|err| failed(err.to_string(), None))?;
    check_deadline(f, spec)?;
    let pod = pod_to_resize(f, spec)?;
    let base = spec_resources(pod);
    check_named_containers(spec, pod, &base)?;
    let actuator = actuator_of(f, pod)?;
    let (before, after) = before_and_after(f, actuator, base);
    let untouched = matches!(
        request.status.phase,
        ResizePhase::None | ResizePhase::Pending
    ) && !f.in_flight
        && !f.begun;
    if untouched {
        check_before_any_change(f, pod, actuator, &before, &after)?;
    }
    Ok((actuator, pod, after))
}

/// Past `activeDeadlineSeconds`, unless its resize is running.
fn check_deadline(f: &Facts<'_>, spec: &ResizeSpec) -> Result<(), Decision> {
    if let (Some(seconds), Some(created)) = (spec.active_deadline_seconds, f.request.created_at)
        && f.now.duration_since(created).as_secs() >= seconds
        && !f.in_flight
    {
        return Err(failed(
            format!("not done within activeDeadlineSeconds ({seconds} s)"),
            None,
        ));
    }
    Ok(())
}

/// The pod named, found on the node with the UID asked for and not terminating.
fn pod_to_resize<'a>(f: &Facts<'a>, spec: &ResizeSpec) -> Result<&'a PodView, Decision> {
    let Some(pod) = f.pod else {
        return Err(failed(
            format!(
                "pod {} not found on node {}",
                spec.pod_name, f.view.node_name
            ),
            None,
        ));
    };
    if let Some(uid) = &spec.pod_uid
        && *uid != pod.uid
    {
        return Err(failed(
            format!(
                "pod {} has UID {}, the request is for {uid}",
                pod.name, pod.uid
            ),
            None,
        ));
    }
    if pod.terminating {
        return Err(failed(format!("pod {} is terminating", pod.name), None));
    }
    Ok(pod)
}

/// Every container the request names is an app container of the pod (`base`).
fn check_named_containers(
    spec: &ResizeSpec,
    pod: &PodView,
    base: &[(String, Resources)],
) -> Result<(), Decision> {
    if let Some(c) = spec
        .containers
        .iter()
        .find(|c| !base.iter().any(|(name, _)| *name == c.name))
    {
        return Err(failed(
            format!(
                "pod {} has no container {:?} that can be resized",
                pod.name, c.name
            ),
            None,
        ));
    }
    Ok(())
}

/// The request's actuator: the one chosen before, else chosen now from the setting and what
/// the kubelet supports, once that is known.
fn actuator_of(f: &Facts<'_>, pod: &PodView) -> Result<Actuator, Decision> {
    if let Some(actuator) = f.request.status.actuator {
        return Ok(actuator);
    }
    let kubelet = through_kubelet::kubelet_support(f.view, f.kubelet_gate);
    if kubelet.pending && f.setting != ActuatorSetting::Cri && !pod.static_pod {
        return Err(Decision::Wait(format!(
            "waiting to see whether the kubelet resizes in place: {}",
            kubelet.why
        )));
    }
    through_kubelet::choose_actuator(f.setting, &kubelet, pod.static_pod)
        .map_err(|err| failed(err.to_string(), None))
}

/// Before: what the pod has now (the API's spec `base`; for `cri`, with the resizes this
/// agent keeps applied). After: that with this request on top.
fn before_and_after(
    f: &Facts<'_>,
    actuator: Actuator,
    base: PodResources,
) -> (PodResources, PodResources) {
    let mut before = base;
    if actuator == Actuator::Cri {
        for earlier in f.group.iter().filter(|r| applied_through_cri(r)) {
            overlay(&mut before, earlier);
        }
    }
    let mut after = before.clone();
    overlay(&mut after, f.request);
    (before, after)
}

/// The checks made once, before any change: the pod's resize policies (for `cri`) and the
/// resize's admission (node allocatable, LimitRanges), which need the LimitRanges listed.
fn check_before_any_change(
    f: &Facts<'_>,
    pod: &PodView,
    actuator: Actuator,
    before: &[(String, Resources)],
    after: &[(String, Resources)],
) -> Result<(), Decision> {
    let Some(limit_ranges) = f.limit_ranges else {
        return Err(Decision::NeedsLimitRanges);
    };
    if actuator == Actuator::Cri
        && let Some(message) = restart_required(pod, before, after)
    {
        return Err(failed(message, Some(actuator)));
    }
    if let Err(refusal) = resources::check_resize(
        before,
        after,
        &init_containers(pod),
        &node_allocatable(f.view),
        limit_ranges,
    ) {
        let phase = match refusal {
            Refusal::ExceedsAllocatable { .. } => ResizePhase::Infeasible,
            _ => ResizePhase::Failed,
        };
        return Err(Decision::Conclude {
            phase,
            message: refusal.to_string(),
            actuator: Some(actuator),
        });
    }
    Ok(())
}

/// A request whose `cri` resize succeeded: the pod keeps its values applied.
pub(super) fn applied_through_cri(request: &ResizeRequest) -> bool {
    request.status.phase == ResizePhase::Succeeded && request.status.actuator == Some(Actuator::Cri)
}

/// How a finished `cri` resize ended, kept for the next pass.
#[derive(Debug)]
pub(super) enum CriOutcome {
    /// Applied; `reapply` when it was a re-apply to a replaced container.
    Applied {
        applied: Vec<through_cri::Applied>,
        reapply: bool,
    },
    Failed(String),
}

/// The next step of an admitted `cri` resize.
#[derive(Debug)]
pub(super) enum CriStep {
    /// Done: these containers now have the values.
    Succeeded(Vec<ContainerResult>),
    Failed(String),
    /// Another resize of the pod runs: the pod's cgroup and containers are changed by one
    /// resize at a time, or the read-backs of one would show the other's values.
    WaitForPod,
    /// The node's allocatable cannot take the new requests now.
    Deferred,
    /// A container to resize is not running.
    WaitForRunning,
    Start(PodTarget),
}

/// Decides a `cri` resize's next step from how its last run ended (`outcome`), whether the
/// pod is busy, and the node.
fn cri_step(
    request: &ResizeRequest,
    outcome: Option<&CriOutcome>,
    pod_busy: bool,
    pod: &PodView,
    view: &NodeView,
    after: &[(String, Resources)],
) -> CriStep {
    match outcome {
        Some(CriOutcome::Applied { applied, .. }) => {
            return CriStep::Succeeded(
                applied
                    .iter()
                    .map(|a| ContainerResult {
                        name: a.name.clone(),
                        phase: ContainerPhase::Succeeded,
                        container_id: Some(a.container_id.clone()),
                        resources: Some(a.resources.to_requirements()),
                        ..Default::default()
                    })
                    .collect(),
            );
        }
        Some(CriOutcome::Failed(message)) => return CriStep::Failed(message.clone()),
        None => {}
    }
    if pod_busy {
        return CriStep::WaitForPod;
    }
    let this_pod = pod_requests(after, &init_containers(pod));
    if !resources::fits_node(
        &other_pods_requests(view, pod),
        &this_pod,
        &node_allocatable(view),
    ) {
        return CriStep::Deferred;
    }
    let named: Vec<String> = request.desired().into_iter().map(|d| d.name).collect();
    let zero_cpu = resources::ZeroCpuRequest::of_kubelet(view.kubelet_version.as_deref());
    match pod_target(pod, after, &named, zero_cpu) {
        Some(target) => CriStep::Start(target),
        None => CriStep::WaitForRunning,
    }
}

/// The containers of succeeded `cri` requests whose running instance is not the one the
/// resize was applied to: the kubelet replaced them from the pod spec's resources.
pub(super) fn replaced_containers(succeeded: &[&ResizeRequest], pod: &PodView) -> Vec<String> {
    let mut replaced = Vec::new();
    for request in succeeded {
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
    replaced
}

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
pub(super) fn spec_resources(pod: &PodView) -> Vec<(String, Resources)> {
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

/// `base` with the request's desired values on top.
pub(super) fn overlay(base: &mut [(String, Resources)], request: &ResizeRequest) {
    for desired in request.desired() {
        if let Some((_, r)) = base.iter_mut().find(|(n, _)| *n == desired.name) {
            *r = r.overlay(&desired.resources);
        }
    }
}

/// The containers to resize with their running instances; None while one is not running.
pub(super) fn pod_target(
    pod: &PodView,
    after: &[(String, Resources)],
    named: &[String],
    zero_cpu: resources::ZeroCpuRequest,
) -> Option<PodTarget> {
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
            zero_cpu,
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

/// The admission part of [`decide`] alone, for the tests of its checks.
#[cfg(test)]
/// The request's next step before anything is changed.
#[derive(Debug, PartialEq)]
enum Admission {
    /// End it.
    Conclude {
        phase: ResizePhase,
        message: String,
        actuator: Option<Actuator>,
    },
    /// The checks need the namespace's LimitRanges: list them and decide again.
    NeedsLimitRanges,
    /// Not yet: what decides the actuator is about to be known (the kubelet has not reported
    /// the status of containers that run).
    Wait(String),
    /// Resize through `actuator` to `after` (every app container of the pod).
    Proceed {
        actuator: Actuator,
        after: Vec<(String, Resources)>,
    },
}

#[cfg(test)]
/// Checks a request whose turn it is, in this order: its spec, its deadline, its pod (found,
/// the same UID, not terminating, naming containers it has), the actuator (chosen once per
/// request), then once before any change the pod's resize policies and the resize's
/// admission (node allocatable, LimitRanges).
fn admit(f: &Facts<'_>) -> Admission {
    match admitted(f) {
        Ok((actuator, _, after)) => Admission::Proceed { actuator, after },
        Err(Decision::Conclude {
            phase,
            message,
            actuator,
        }) => Admission::Conclude {
            phase,
            message,
            actuator,
        },
        Err(Decision::NeedsLimitRanges) => Admission::NeedsLimitRanges,
        Err(Decision::Wait(message)) => Admission::Wait(message),
        Err(other) => {
            panic!("the checks end or hold a request, they do not carry it out: {other:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use serde_json::json;

    use crate::kube::CachedPod;
    use crate::nodeview::{self, RuntimeContainer, RuntimeSnapshot, StatusView};
    use crate::resize::object::ResizeStatus;

    const POD_UID: &str = "pod-uid-1";

    /// A pod `web` in `ns` with app containers `app` (cpu 100m/200m, memory 64Mi) and `side`
    /// (no resources), merged with `extra`.
    fn pod_json(extra: Value) -> Value {
        let mut pod = json!({
            "metadata": {"namespace": "ns", "name": "web", "uid": POD_UID},
            "spec": {"nodeName": "n", "containers": [
                {"name": "app", "image": "busybox", "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "64Mi"}}},
                {"name": "side", "image": "busybox"},
            ]},
        });
        merge(&mut pod, extra);
        pod
    }

    fn merge(base: &mut Value, extra: Value) {
        match (base, extra) {
            (Value::Object(b), Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    /// The node `n` with the pods given (no runtime containers), 4 cpus and 8 GiB allocatable,
    /// kubelet `kubelet`.
    fn node(pods: &[Value], kubelet: &str) -> NodeView {
        let pods: Vec<Arc<CachedPod>> = pods
            .iter()
            .map(|p| Arc::new(serde_json::from_value(p.clone()).expect("a pod")))
            .collect();
        let mut view = nodeview::join("n", &pods, &RuntimeSnapshot::default());
        view.kubelet_version = Some(kubelet.into());
        view.node_allocatable = Some(Resources {
            cpu_request: Some(4000),
            memory_request: Some(8 << 30),
            ..Default::default()
        });
        view.synced = true;
        view
    }

    fn web_mut(view: &mut NodeView) -> &mut PodView {
        view.pods
            .iter_mut()
            .find(|p| p.name == "web")
            .expect("pod web")
    }

    /// `container` of pod `web` runs as runtime container `id`, and the kubelet reports it
    /// without applied resources.
    fn running(view: &mut NodeView, container: &str, id: &str) {
        let c = web_mut(view)
            .containers
            .iter_mut()
            .find(|c| c.name == container)
            .expect("container");
        c.runtime = Some(RuntimeContainer {
            container_id: format!("containerd://{id}"),
            id: id.into(),
            state: RuntimeState::Running,
            attempt: 0,
            restart_count: Some(0),
            stored_hash: None,
            stored_hash_without_resources: None,
            image: "busybox".into(),
            times: Default::default(),
        });
        // As a kubelet without in-place resize reports it.
        c.status = Some(StatusView {
            container_id: format!("containerd://{id}"),
            ready: true,
            restart_count: 0,
            reports_resources: false,
            running: true,
        });
    }

    fn request(name: &str, spec: Value, status: Value) -> ResizeRequest {
        let object: ::kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "inplaced.io/v1alpha1",
            "kind": "ContainerResizeRequest",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
            "status": status,
        }))
        .expect("an object");
        ResizeRequest::from_object(&object).expect("identity")
    }

    /// A request to set `app`'s cpu limit to `cpu`.
    fn cpu_limit(cpu: &str) -> Value {
        json!({"podName": "web", "containers": [
            {"name": "app", "resources": {"limits": {"cpu": cpu}}}]})
    }

    struct Case {
        request: ResizeRequest,
        group: Vec<ResizeRequest>,
        view: NodeView,
        in_flight: bool,
        begun: bool,
        setting: ActuatorSetting,
        gate: Option<bool>,
        limit_ranges: Option<Vec<Value>>,
        now: Timestamp,
    }

    impl Case {
        fn new(spec: Value, kubelet: &str) -> Case {
            let request = request("r", spec, json!({}));
            Case {
                group: vec![request.clone()],
                request,
                view: node(&[pod_json(json!({}))], kubelet),
                in_flight: false,
                begun: false,
                setting: ActuatorSetting::Auto,
                gate: None,
                limit_ranges: Some(Vec::new()),
                now: "2026-01-01T00:00:10Z".parse().expect("a time"),
            }
        }

        fn facts<'a>(&'a self, cri_outcome: Option<&'a CriOutcome>, pod_busy: bool) -> Facts<'a> {
            Facts {
                request: &self.request,
                group: &self.group,
                pod: self.view.pods.iter().find(|p| p.name == "web"),
                view: &self.view,
                now: self.now,
                in_flight: self.in_flight,
                begun: self.begun,
                setting: self.setting,
                kubelet_gate: self.gate,
                limit_ranges: self.limit_ranges.as_deref(),
                cri_outcome,
                pod_busy,
            }
        }

        fn admit(&self) -> Admission {
            admit(&self.facts(None, false))
        }
    }

    fn conclusion(admission: Admission) -> (ResizePhase, String) {
        match admission {
            Admission::Conclude { phase, message, .. } => (phase, message),
            other => panic!("not concluded: {other:?}"),
        }
    }

    fn proceeds(admission: Admission) -> (Actuator, Resources) {
        match admission {
            Admission::Proceed { actuator, after } => {
                let app = after
                    .iter()
                    .find(|(n, _)| n == "app")
                    .map(|(_, r)| *r)
                    .expect("app");
                (actuator, app)
            }
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn a_request_on_a_kubelet_that_does_not_resize_goes_through_cri_with_its_values_on_top() {
        let case = Case::new(cpu_limit("300m"), "v1.30.14");
        let (actuator, app) = proceeds(case.admit());
        assert_eq!(actuator, Actuator::Cri);
        assert_eq!(app.cpu_limit, Some(300));
        assert_eq!(app.cpu_request, Some(100), "the values not named are kept");
    }

    #[test]
    fn the_actuator_follows_the_kubelet_release_and_its_gate() {
        let on_133 = Case::new(cpu_limit("300m"), "v1.33.1");
        assert_eq!(proceeds(on_133.admit()).0, Actuator::Kubelet);
        let mut gated_130 = Case::new(cpu_limit("300m"), "v1.30.14");
        gated_130.gate = Some(true);
        assert_eq!(proceeds(gated_130.admit()).0, Actuator::Kubelet);
        let mut forced = Case::new(cpu_limit("300m"), "v1.26.0");
        forced.setting = ActuatorSetting::Kubelet;
        let (phase, message) = conclusion(forced.admit());
        assert_eq!(phase, ResizePhase::Failed);
        assert!(message.contains("does not resize in place"), "{message}");
    }

    #[test]
    fn the_actuator_waits_for_the_kubelet_to_report_a_running_container() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.gate = Some(true);
        running(&mut case.view, "app", "c1");
        web_mut(&mut case.view).containers[0].status = None;
        match case.admit() {
            Admission::Wait(message) => {
                assert!(message.contains("not reported alike"), "{message}")
            }
            other => panic!("not waiting: {other:?}"),
        }
        case.setting = ActuatorSetting::Cri;
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
    }

    #[test]
    fn an_actuator_once_chosen_stays() {
        let mut case = Case::new(cpu_limit("300m"), "v1.33.1");
        case.request.status = ResizeStatus {
            actuator: Some(Actuator::Cri),
            phase: ResizePhase::InProgress,
            ..Default::default()
        };
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.request.status = ResizeStatus {
            actuator: Some(Actuator::Kubelet),
            phase: ResizePhase::InProgress,
            ..Default::default()
        };
        assert_eq!(proceeds(case.admit()).0, Actuator::Kubelet);
    }

    #[test]
    fn checks_before_a_change_need_the_limit_ranges_and_run_only_once() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.limit_ranges = None;
        assert_eq!(case.admit(), Admission::NeedsLimitRanges);
        case.begun = true;
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
        case.begun = false;
        case.in_flight = true;
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
    }

    #[test]
    fn a_limit_range_refuses_the_resize() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.limit_ranges = Some(vec![json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "250m"}}]}})]);
        let (phase, message) = conclusion(case.admit());
        assert_eq!(phase, ResizePhase::Failed);
        assert!(message.contains("cpu"), "{message}");
    }

    #[test]
    fn more_than_the_node_allocates_is_infeasible() {
        let spec = json!({"podName": "web", "containers": [{"name": "app", "resources": {
            "requests": {"cpu": "5"}, "limits": {"cpu": "5"}}}]});
        let (phase, _) = conclusion(Case::new(spec, "v1.30.14").admit());
        assert_eq!(phase, ResizePhase::Infeasible);
    }

    #[test]
    fn a_restart_policy_keeps_the_cri_actuator_away() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.view = node(
            &[pod_json(json!({"spec": {"containers": [
                {"name": "app", "image": "busybox",
                 "resources": {"limits": {"cpu": "200m"}},
                 "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]},
                {"name": "side", "image": "busybox"}]}}))],
            "v1.30.14",
        );
        let (phase, message) = conclusion(case.admit());
        assert_eq!(phase, ResizePhase::Failed);
        assert!(message.contains("RestartContainer for cpu"), "{message}");
    }

    #[test]
    fn a_request_for_a_pod_that_is_not_as_named_fails() {
        let mut missing = Case::new(
            json!({"podName": "db", "containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}}}]}),
            "v1.30.14",
        );
        missing.view.pods.clear();
        let (_, message) = conclusion(missing.admit());
        assert_eq!(message, "pod db not found on node n");

        let other_uid = Case::new(
            json!({"podName": "web", "podUID": "someone-else",
                   "containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}}}]}),
            "v1.30.14",
        );
        let (_, message) = conclusion(other_uid.admit());
        assert!(
            message.contains("the request is for someone-else"),
            "{message}"
        );

        let no_such_container = Case::new(
            json!({"podName": "web", "containers": [{"name": "db", "resources": {"limits": {"cpu": "1"}}}]}),
            "v1.30.14",
        );
        let (_, message) = conclusion(no_such_container.admit());
        assert!(message.contains("no container \"db\""), "{message}");

        let mut terminating = Case::new(cpu_limit("300m"), "v1.30.14");
        web_mut(&mut terminating.view).terminating = true;
        let (_, message) = conclusion(terminating.admit());
        assert_eq!(message, "pod web is terminating");
    }

    #[test]
    fn a_bad_spec_fails_with_its_reason() {
        let case = Case::new(json!({"podName": "web", "containers": []}), "v1.30.14");
        let (phase, message) = conclusion(case.admit());
        assert_eq!(phase, ResizePhase::Failed);
        assert!(message.contains("empty"), "{message}");
    }

    #[test]
    fn the_deadline_ends_a_request_unless_its_resize_is_running() {
        let mut spec = cpu_limit("300m");
        spec["activeDeadlineSeconds"] = json!(10);
        let mut case = Case::new(spec, "v1.30.14");
        let (phase, message) = conclusion(case.admit());
        assert_eq!(phase, ResizePhase::Failed);
        assert_eq!(message, "not done within activeDeadlineSeconds (10 s)");
        case.in_flight = true;
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
        case.in_flight = false;
        case.now = "2026-01-01T00:00:09Z".parse().expect("a time");
        assert_eq!(proceeds(case.admit()).0, Actuator::Cri);
    }

    #[test]
    fn earlier_cri_resizes_are_what_the_pod_has_now() {
        let earlier = request(
            "earlier",
            json!({"podName": "web", "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "150m"}}}]}),
            json!({"phase": "Succeeded", "actuator": "cri"}),
        );
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        case.group = vec![earlier, case.request.clone()];
        let (_, app) = proceeds(case.admit());
        assert_eq!((app.cpu_request, app.cpu_limit), (Some(150), Some(300)));
    }

    /// The next step of an admitted `cri` resize, through the plan's one entry point.
    fn step(case: &Case, outcome: Option<CriOutcome>, busy: bool) -> CriStep {
        match decide(&case.facts(outcome.as_ref(), busy)) {
            Decision::ThroughCri(step) => step,
            other => panic!("not a cri step: {other:?}"),
        }
    }

    #[test]
    fn a_cri_resize_starts_only_when_its_containers_run_and_the_pod_is_free() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        assert!(matches!(step(&case, None, false), CriStep::WaitForRunning));
        running(&mut case.view, "app", "c1");
        assert!(matches!(step(&case, None, true), CriStep::WaitForPod));
        match step(&case, None, false) {
            CriStep::Start(target) => {
                assert_eq!(target.containers.len(), 1);
                assert_eq!(target.containers[0].container_id, "c1");
                assert_eq!(target.containers[0].target.cpu_limit, Some(300));
                assert_eq!(target.all.len(), 2, "the pod cgroup counts every container");
            }
            other => panic!("not started: {other:?}"),
        }
    }

    #[test]
    fn a_cri_resize_waits_while_the_node_is_full() {
        let spec = json!({"podName": "web", "containers": [{"name": "app", "resources": {
            "requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}]});
        let mut case = Case::new(spec, "v1.30.14");
        let mut neighbour = pod_json(json!({"metadata": {"name": "db", "uid": "pod-uid-2"}}));
        neighbour["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("2");
        neighbour["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2");
        case.view = node(&[pod_json(json!({})), neighbour], "v1.30.14");
        running(&mut case.view, "app", "c1");
        assert!(matches!(step(&case, None, false), CriStep::Deferred));
    }

    #[test]
    fn a_finished_cri_resize_reports_what_the_runtime_read_back() {
        let mut case = Case::new(cpu_limit("300m"), "v1.30.14");
        running(&mut case.view, "app", "c1");
        let applied = vec![through_cri::Applied {
            name: "app".into(),
            container_id: "containerd://c1".into(),
            resources: Resources {
                cpu_limit: Some(300),
                ..Default::default()
            },
        }];
        match step(
            &case,
            Some(CriOutcome::Applied {
                applied,
                reapply: false,
            }),
            false,
        ) {
            CriStep::Succeeded(containers) => {
                assert_eq!(containers.len(), 1);
                assert_eq!(containers[0].phase, ContainerPhase::Succeeded);
                assert_eq!(
                    containers[0].container_id.as_deref(),
                    Some("containerd://c1")
                );
            }
            other => panic!("not succeeded: {other:?}"),
        }
        assert!(matches!(
            step(&case, Some(CriOutcome::Failed("no".into())), false),
            CriStep::Failed(m) if m == "no"
        ));
    }

    #[test]
    fn a_container_running_another_instance_than_the_resized_one_was_replaced() {
        let mut view = node(&[pod_json(json!({}))], "v1.30.14");
        running(&mut view, "app", "c2");
        running(&mut view, "side", "s1");
        let done = request(
            "done",
            cpu_limit("300m"),
            json!({"phase": "Succeeded", "actuator": "cri", "containers": [
                {"name": "app", "phase": "Succeeded", "containerID": "c1"},
                {"name": "side", "phase": "Succeeded", "containerID": "s1"}]}),
        );
        assert_eq!(replaced_containers(&[&done], &view.pods[0]), ["app"]);
    }

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
