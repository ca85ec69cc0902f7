//! The decisions, without I/O: given a ContainerRestartRequest, its pod as this node sees it,
//! the kills the journal recorded for it, and the time, which status the request should have
//! and which containers to stop now. Level-triggered and idempotent like the CRR planner: a stop
//! is only ever ordered for a running container that is neither being stopped nor already
//! replaced since the request took it up.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::object::{
    ContainerPhase, ContainerRestartState, RestartPhase, RestartRequest, RestartSpec, RestartStatus,
};
use crate::restart::{
    ContainerPort, DEFAULT_TERMINATION_GRACE_SECONDS, KillIntent, KillOrder, PreStop,
};

/// The newest runtime container of one app container, with what its pod spec says of stopping it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerFacts {
    /// `<runtime>://<id>`.
    pub container_id: String,
    pub id: String,
    pub running: bool,
    pub started_at: Option<Timestamp>,
    /// The pod's status shows this very container ready.
    pub ready_in_pod_status: bool,
    /// Exited and not yet started again: what the kubelet's crash back-off means for it (when
    /// the kubelet starts it again, or why that is not known; `CrashBackoffView::held_message`).
    pub backoff_hold: Option<String>,
    pub pre_stop: Option<PreStop>,
    pub ports: Vec<ContainerPort>,
}

/// The pod as this node sees it.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    pub uid: String,
    pub terminating: bool,
    pub static_pod: bool,
    /// `spec.restartPolicy`, `Always` when absent.
    pub restart_policy: String,
    pub termination_grace_seconds: Option<i64>,
    /// The app containers in spec order, with their runtime container when there is one.
    pub containers: Vec<(String, Option<ContainerFacts>)>,
}

/// Everything a decision depends on besides the request.
pub struct Facts<'a> {
    pub now: Timestamp,
    pub node_name: &'a str,
    /// `None`: no such pod on this node.
    pub pod: Option<&'a PodFacts>,
    /// How long this agent has known the request: a pod not found yet is given
    /// [`POD_APPEAR_GRACE`] to reach the agent's watch.
    pub known_for: Duration,
    /// Kill intents recorded for this request, by container name.
    pub intents: HashMap<&'a str, &'a KillIntent>,
    /// Containers of this request with a kill under way.
    pub in_flight: &'a HashSet<String>,
    /// Containers of this request whose kill failed, with the reason.
    pub kill_failures: &'a HashMap<String, String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: RestartStatus,
    pub kills: Vec<KillOrder>,
    /// Decide again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// Containers that became Succeeded in this decision (the `Restarted` event).
    pub restarted: Vec<String>,
    /// Finished and past `ttlSecondsAfterFinished`: delete the request.
    pub delete: bool,
}

/// How long a request naming a pod this node does not show waits before it fails.
pub(crate) const POD_APPEAR_GRACE: Duration = Duration::from_secs(5);

/// `containerd://abc` → `abc`.
fn bare_id(container_id: &str) -> &str {
    container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id)
}

fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

pub fn decide(request: &RestartRequest, facts: &Facts<'_>) -> Decision {
    let mut decision = Decision {
        status: request.status.clone(),
        kills: Vec::new(),
        requeue_after: None,
        restarted: Vec::new(),
        delete: false,
    };
    let now = facts.now;
    if decision.status.phase.is_final() {
        expire_finished(request, &mut decision, now);
        return decision;
    }
    let spec = match &request.spec {
        Ok(spec) => spec,
        Err(reason) => {
            return fail(
                decision,
                now,
                format!("invalid request, nothing done: {reason}"),
            );
        }
    };
    match time_to_deadline(request, spec, now) {
        Ok(left) => decision.requeue_after = left,
        Err(message) => return fail(decision, now, message),
    }
    let Some(pod) = facts.pod else {
        return pod_not_found(spec, facts, decision);
    };
    if let Err(message) = check_pod(request, spec, pod) {
        return fail(decision, now, message);
    }
    let wanted = match chosen_containers(spec, pod) {
        Ok(wanted) => wanted,
        Err(message) => return fail(decision, now, message),
    };
    let followed = follow_containers(request, spec, pod, facts, wanted, decision.requeue_after);
    conclude(decision, followed, pod, now)
}

/// Ends the request as failed at `now`, with nothing stopped.
fn fail(mut decision: Decision, now: Timestamp, message: String) -> Decision {
    decision.status.phase = RestartPhase::Failed;
    decision.status.completion_time = Some(now.to_string());
    decision.status.message = Some(message);
    decision.kills.clear();
    decision
}

/// A finished request: deleted once `ttlSecondsAfterFinished` is over, and decided again at
/// that moment until then.
fn expire_finished(request: &RestartRequest, decision: &mut Decision, now: Timestamp) {
    let ttl = request
        .spec
        .as_ref()
        .ok()
        .and_then(|s| s.ttl_seconds_after_finished);
    let done = decision
        .status
        .completion_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok());
    if let (Some(ttl), Some(done)) = (ttl, done) {
        let due = done
            .checked_add(SignedDuration::from_secs(ttl))
            .unwrap_or(Timestamp::MAX);
        if now >= due {
            decision.delete = true;
        } else {
            decision.requeue_after = Some(until(now, due));
        }
    }
}

/// How long until `activeDeadlineSeconds` is over (None without a deadline), or why the
/// request fails for being past it.
fn time_to_deadline(
    request: &RestartRequest,
    spec: &RestartSpec,
    now: Timestamp,
) -> Result<Option<Duration>, String> {
    let (Some(deadline), Some(created)) = (spec.active_deadline_seconds, request.created_at) else {
        return Ok(None);
    };
    let due = created
        .checked_add(SignedDuration::from_secs(deadline))
        .unwrap_or(Timestamp::MAX);
    if now >= due {
        return Err(format!(
            "not finished within activeDeadlineSeconds ({deadline} s)"
        ));
    }
    Ok(Some(until(now, due)))
}

/// No such pod on this node: a request that has not taken a pod up yet gives it
/// [`POD_APPEAR_GRACE`] to reach the agent's watch, then fails.
fn pod_not_found(spec: &RestartSpec, facts: &Facts<'_>, mut decision: Decision) -> Decision {
    if facts.known_for < POD_APPEAR_GRACE && decision.status.pod_uid.is_none() {
        decision.status.phase = RestartPhase::Pending;
        decision.status.message = Some(format!(
            "waiting for pod {} to appear on node {}",
            spec.pod_name, facts.node_name
        ));
        decision.requeue_after = Some(POD_APPEAR_GRACE.saturating_sub(facts.known_for));
        return decision;
    }
    fail(
        decision,
        facts.now,
        format!(
            "pod {} not found on node {}: nothing restarted",
            spec.pod_name, facts.node_name
        ),
    )
}

/// Why the pod found is not one to restart containers of: another pod than the one asked
/// for or taken up, or one whose stopped containers the kubelet would not start again.
fn check_pod(request: &RestartRequest, spec: &RestartSpec, pod: &PodFacts) -> Result<(), String> {
    if let Some(wanted) = &spec.pod_uid
        && *wanted != pod.uid
    {
        return Err(format!(
            "pod {} has UID {}, the request was made for UID {wanted}: nothing restarted",
            spec.pod_name, pod.uid
        ));
    }
    if let Some(taken) = &request.status.pod_uid
        && *taken != pod.uid
    {
        return Err(format!(
            "pod {} was replaced (UID {taken} is now {}) during the restart",
            spec.pod_name, pod.uid
        ));
    }
    if pod.static_pod {
        return Err(format!(
            "pod {} is a static pod: the kubelet runs it from a file on the node, restart it there; nothing restarted",
            spec.pod_name
        ));
    }
    match pod.restart_policy.as_str() {
        "Always" => {}
        "Never" => {
            return Err(format!(
                "pod {} has restartPolicy Never: the kubelet would not start a stopped container again; nothing restarted",
                spec.pod_name
            ));
        }
        other => {
            return Err(format!(
                "pod {} has restartPolicy {other}: the kubelet would not start a container that exits 0 on SIGTERM again; nothing restarted",
                spec.pod_name
            ));
        }
    }
    if pod.terminating {
        return Err(format!(
            "pod {} is terminating: nothing restarted",
            spec.pod_name
        ));
    }
    Ok(())
}

/// The containers to restart, in the request's order (every app container in the pod's
/// order when it names none), or why a name it gives is not one of the pod's.
fn chosen_containers<'a>(spec: &'a RestartSpec, pod: &'a PodFacts) -> Result<Vec<&'a str>, String> {
    let app: Vec<&str> = pod.containers.iter().map(|(n, _)| n.as_str()).collect();
    let wanted: Vec<&str> = if spec.containers.is_empty() {
        app.clone()
    } else {
        spec.containers.iter().map(|c| c.name.as_str()).collect()
    };
    if let Some(unknown) = wanted.iter().find(|w| !app.contains(w)) {
        return Err(format!(
            "container {unknown:?} is not an app container of pod {} (it has {}): nothing restarted",
            spec.pod_name,
            app.join(", ")
        ));
    }
    Ok(wanted)
}

/// How this request's containers are stopped and counted as restarted.
struct StopRules {
    /// orderedRestart.
    ordered: bool,
    grace: Duration,
    min_started: Duration,
}

/// What the containers' steps add up to.
struct Followed {
    states: Vec<ContainerRestartState>,
    kills: Vec<KillOrder>,
    /// Containers that became Succeeded.
    restarted: Vec<String>,
    requeue_after: Option<Duration>,
}

impl Followed {
    /// Decide again after `after` at the latest.
    fn wake(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }
}

/// Each wanted container's step, in order; `requeue_after` is the wake-up decided before
/// them (the deadline's).
fn follow_containers(
    request: &RestartRequest,
    spec: &RestartSpec,
    pod: &PodFacts,
    facts: &Facts<'_>,
    wanted: Vec<&str>,
    requeue_after: Option<Duration>,
) -> Followed {
    let strategy = spec.strategy.clone().unwrap_or_default();
    let rules = StopRules {
        ordered: strategy.ordered_restart,
        grace: seconds(
            strategy
                .termination_grace_period_seconds
                .or(pod.termination_grace_seconds)
                .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS),
        ),
        min_started: seconds(strategy.min_started_seconds),
    };
    let previous: HashMap<&str, &ContainerRestartState> = request
        .status
        .containers
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut followed = Followed {
        states: Vec::with_capacity(wanted.len()),
        kills: Vec::new(),
        restarted: Vec::new(),
        requeue_after,
    };
    for name in wanted {
        let state = previous.get(name).map_or_else(
            || ContainerRestartState {
                name: name.to_owned(),
                ..Default::default()
            },
            |previous| (*previous).clone(),
        );
        let state = if state.phase.is_final() {
            state
        } else {
            follow_container(name, state, pod, facts, &rules, &mut followed)
        };
        followed.states.push(state);
    }
    followed
}

/// The step of one container not yet finished: its state now, with the stop or the wake-up
/// it needs added to `followed`.
fn follow_container(
    name: &str,
    mut state: ContainerRestartState,
    pod: &PodFacts,
    facts: &Facts<'_>,
    rules: &StopRules,
    followed: &mut Followed,
) -> ContainerRestartState {
    state.message = None;
    // orderedRestart: only once every container before it is done.
    let blocked = rules.ordered && followed.states.iter().any(|s| !s.phase.is_final());
    if let Some(failure) = facts.kill_failures.get(name) {
        state.phase = ContainerPhase::Failed;
        state.message = Some(failure.clone());
        return state;
    }
    let intent = facts.intents.get(name).copied();
    let in_flight = facts.in_flight.contains(name);
    // The container this request stopped (or is stopping): the journal's record, else the
    // status's (written after the record).
    let old = intent
        .map(|i| i.container_id.as_str())
        .or(state.old_container_id.as_deref().map(bare_id));
    let runtime = pod
        .containers
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, r)| r.as_ref());
    let Some(runtime) = runtime else {
        if old.is_some() || in_flight {
            state.phase = ContainerPhase::Restarting;
            state.message = Some("waiting for the kubelet to start it again".into());
        } else {
            state.phase = ContainerPhase::Pending;
            state.message = Some("the container has not been created yet".into());
        }
        return state;
    };
    if old.is_some_and(|old| old != runtime.id) {
        follow_replacement(name, &mut state, runtime, facts.now, rules, followed);
        return state;
    }
    if !runtime.running || in_flight {
        // Stopping, or stopped and not started again yet. A container found exited before
        // this request stopped anything is the old one too: the kubelet's next start of it
        // is the restart asked for, and stopping that one as well would be a second.
        state.phase = ContainerPhase::Restarting;
        if state.old_container_id.is_none() {
            state.old_container_id = Some(runtime.container_id.clone());
        }
        if !runtime.running {
            state.message = Some(backoff_message(runtime));
        }
        return state;
    }
    // Running, and the one to stop. A kill recorded for it but not under way was abandoned
    // by an agent that died during it: finished with SIGKILL once its grace is over.
    if let Some(intent) = intent
        && intent.container_id == runtime.id
    {
        state.phase = ContainerPhase::Restarting;
        state.old_container_id = Some(runtime.container_id.clone());
        match KillOrder::resume(intent, name, facts.now.as_millisecond()) {
            Ok(order) => followed.kills.push(order),
            Err(wait) => followed.wake(wait),
        }
        return state;
    }
    if blocked {
        state.phase = ContainerPhase::Pending;
        state.message = Some("waiting for the containers before it (orderedRestart)".into());
        return state;
    }
    followed.kills.push(KillOrder {
        container: name.to_owned(),
        container_id: runtime.id.clone(),
        pre_stop: runtime.pre_stop.clone(),
        ports: runtime.ports.clone(),
        grace: rules.grace,
        resumed: false,
    });
    state.phase = ContainerPhase::Restarting;
    state.old_container_id = Some(runtime.container_id.clone());
    state
}

/// Replaced by the kubelet: wait for it to be ready and to stay up.
fn follow_replacement(
    name: &str,
    state: &mut ContainerRestartState,
    runtime: &ContainerFacts,
    now: Timestamp,
    rules: &StopRules,
    followed: &mut Followed,
) {
    state.phase = ContainerPhase::Restarting;
    if state.new_container_id.as_deref() != Some(runtime.container_id.as_str()) {
        state.new_container_id = Some(runtime.container_id.clone());
        state.ready_time = None;
    }
    if runtime.running && runtime.ready_in_pod_status {
        let ready_at = state
            .ready_time
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .unwrap_or(now);
        state.ready_time = Some(ready_at.to_string());
        let up_for = runtime
            .started_at
            .map(|s| Duration::try_from(now.duration_since(s)).unwrap_or(Duration::ZERO))
            .unwrap_or(Duration::ZERO);
        if up_for >= rules.min_started {
            state.phase = ContainerPhase::Succeeded;
            followed.restarted.push(name.to_owned());
        } else {
            state.message = Some(format!(
                "ready; counted as restarted after minStartedSeconds ({} s)",
                rules.min_started.as_secs()
            ));
            followed.wake(rules.min_started - up_for);
        }
    } else if !runtime.running {
        state.message = Some(backoff_message(runtime));
    } else {
        state.message = Some("running, waiting for the pod to report it ready".into());
    }
}

/// The request's status from its containers' steps: failed with the first failed container,
/// succeeded once every one has, pending while none has moved, restarting otherwise.
fn conclude(
    mut decision: Decision,
    followed: Followed,
    pod: &PodFacts,
    now: Timestamp,
) -> Decision {
    let Followed {
        states,
        kills,
        restarted,
        requeue_after,
    } = followed;
    let status = &mut decision.status;
    status.pod_uid = Some(pod.uid.clone());
    if let Some(failed) = states.iter().find(|s| s.phase == ContainerPhase::Failed) {
        let message = format!(
            "container {}: {}",
            failed.name,
            failed.message.as_deref().unwrap_or("failed")
        );
        status.containers = states;
        return fail(decision, now, message);
    }
    if states.iter().all(|s| s.phase == ContainerPhase::Succeeded) {
        status.phase = RestartPhase::Succeeded;
        status.completion_time = Some(now.to_string());
        status.message = None;
    } else if kills.is_empty() && states.iter().all(|s| s.phase == ContainerPhase::Pending) {
        status.phase = RestartPhase::Pending;
        status.message = states.iter().find_map(|s| s.message.clone());
    } else {
        status.phase = RestartPhase::Restarting;
        status.message = None;
        if status.start_time.is_none() {
            status.start_time = Some(now.to_string());
        }
    }
    status.containers = states;
    decision.kills = kills;
    decision.requeue_after = requeue_after;
    decision.restarted = restarted;
    decision
}

/// What a stopped container waits for.
fn backoff_message(runtime: &ContainerFacts) -> String {
    runtime
        .backoff_hold
        .clone()
        .unwrap_or_else(|| "waiting for the kubelet to start it again".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::object_from_json;
    use serde_json::{Value, json};

    const NOW: &str = "2026-11-28T10:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn request(spec: Value, status: Value) -> RestartRequest {
        RestartRequest::from_object(
            &object_from_json(json!({
                "metadata": {"name": "r", "namespace": "ns", "uid": "req-1",
                             "creationTimestamp": "2026-11-28T09:59:00Z"},
                "spec": spec, "status": status}))
            .unwrap(),
        )
        .unwrap()
    }

    fn container(id: &str, running: bool) -> ContainerFacts {
        ContainerFacts {
            container_id: format!("containerd://{id}"),
            id: id.into(),
            running,
            started_at: Some("2026-11-28T09:50:00Z".parse().unwrap()),
            ready_in_pod_status: running,
            ..Default::default()
        }
    }

    fn pod(containers: &[(&str, Option<ContainerFacts>)]) -> PodFacts {
        PodFacts {
            uid: "pod-1".into(),
            restart_policy: "Always".into(),
            termination_grace_seconds: Some(7),
            containers: containers
                .iter()
                .map(|(n, c)| (n.to_string(), c.clone()))
                .collect(),
            ..Default::default()
        }
    }

    struct Run<'a> {
        intents: Vec<KillIntent>,
        in_flight: HashSet<String>,
        failures: HashMap<String, String>,
        known_for: Duration,
        offset: i64,
        pod: Option<&'a PodFacts>,
    }

    fn run<'a>(pod: Option<&'a PodFacts>) -> Run<'a> {
        Run {
            intents: Vec::new(),
            in_flight: HashSet::new(),
            failures: HashMap::new(),
            known_for: Duration::from_secs(60),
            offset: 0,
            pod,
        }
    }

    impl Run<'_> {
        fn decide(&self, request: &RestartRequest) -> Decision {
            decide(
                request,
                &Facts {
                    now: now() + SignedDuration::from_secs(self.offset),
                    node_name: "n1",
                    pod: self.pod,
                    known_for: self.known_for,
                    intents: self
                        .intents
                        .iter()
                        .map(|i| (i.container.as_str(), i))
                        .collect(),
                    in_flight: &self.in_flight,
                    kill_failures: &self.failures,
                },
            )
        }
    }

    fn intent(container: &str, id: &str) -> KillIntent {
        KillIntent {
            key: "req-1".into(),
            container: container.into(),
            container_id: id.into(),
            started_ms: now().as_millisecond(),
            grace_ms: 7_000,
        }
    }

    #[test]
    fn a_container_is_stopped_once_then_followed_to_ready() {
        let spec = json!({"podName": "p"});
        let first = pod(&[("app", Some(container("a0", true)))]);
        let d = run(Some(&first)).decide(&request(spec.clone(), json!({})));
        assert_eq!(d.kills.len(), 1);
        assert_eq!(d.kills[0].container_id, "a0");
        assert_eq!(d.kills[0].grace, Duration::from_secs(7), "the pod's grace");
        assert_eq!(d.status.phase, RestartPhase::Restarting);
        assert_eq!(d.status.pod_uid.as_deref(), Some("pod-1"));
        let state = &d.status.containers[0];
        assert_eq!(state.old_container_id.as_deref(), Some("containerd://a0"));

        // Under way: no second order; stopped: none either, whatever the clock says.
        let written = serde_json::to_value(&d.status).unwrap();
        let mut stopping = run(Some(&first));
        stopping.intents = vec![intent("app", "a0")];
        stopping.in_flight.insert("app".into());
        assert!(
            stopping
                .decide(&request(spec.clone(), written.clone()))
                .kills
                .is_empty()
        );
        let stopped = pod(&[("app", Some(container("a0", false)))]);
        let mut after = run(Some(&stopped));
        after.intents = vec![intent("app", "a0")];
        for offset in [0, 3600] {
            after.offset = offset;
            let d = after.decide(&request(spec.clone(), written.clone()));
            assert!(d.kills.is_empty());
            assert_eq!(d.status.phase, RestartPhase::Restarting);
        }
        // Replaced and running but not ready yet: waits.
        let mut new = container("a1", true);
        new.ready_in_pod_status = false;
        new.started_at = Some(now());
        let replaced = pod(&[("app", Some(new.clone()))]);
        let mut r = run(Some(&replaced));
        r.intents = vec![intent("app", "a0")];
        let d = r.decide(&request(spec.clone(), written.clone()));
        assert!(d.kills.is_empty());
        assert_eq!(d.status.phase, RestartPhase::Restarting);
        assert_eq!(
            d.status.containers[0].new_container_id.as_deref(),
            Some("containerd://a1")
        );
        // Ready: succeeded, announced once.
        new.ready_in_pod_status = true;
        let ready = pod(&[("app", Some(new))]);
        let mut r = run(Some(&ready));
        r.intents = vec![intent("app", "a0")];
        let d = r.decide(&request(spec.clone(), written));
        assert_eq!(d.status.phase, RestartPhase::Succeeded, "{:?}", d.status);
        assert_eq!(d.restarted, ["app"]);
        assert_eq!(d.status.containers[0].ready_time.as_deref(), Some(NOW));
        assert!(d.status.completion_time.is_some());
        let done = serde_json::to_value(&d.status).unwrap();
        let again = r.decide(&request(spec, done));
        assert!(again.restarted.is_empty() && again.kills.is_empty());
    }

    #[test]
    fn the_status_alone_keeps_a_replaced_container_from_a_second_stop() {
        // The journal lost (another state directory): the status still names the old one.
        let status = json!({"phase": "Restarting", "podUID": "pod-1", "containers": [
            {"name": "app", "phase": "Restarting", "oldContainerID": "containerd://a0"}]});
        let replaced = pod(&[("app", Some(container("a1", true)))]);
        let d = run(Some(&replaced)).decide(&request(json!({"podName": "p"}), status));
        assert!(d.kills.is_empty());
        assert_eq!(d.status.phase, RestartPhase::Succeeded);
    }

    #[test]
    fn ordered_restart_moves_one_container_at_a_time() {
        let spec = json!({"podName": "p", "containers": [{"name": "b"}, {"name": "a"}],
                          "strategy": {"orderedRestart": true}});
        let both = pod(&[
            ("a", Some(container("a0", true))),
            ("b", Some(container("b0", true))),
        ]);
        let d = run(Some(&both)).decide(&request(spec.clone(), json!({})));
        let killed: Vec<&str> = d.kills.iter().map(|k| k.container.as_str()).collect();
        assert_eq!(killed, ["b"], "the request's order, not the pod's");
        assert_eq!(d.status.containers[1].phase, ContainerPhase::Pending);
        let unordered = json!({"podName": "p"});
        assert_eq!(
            run(Some(&both))
                .decide(&request(unordered, json!({})))
                .kills
                .len(),
            2
        );
        // b replaced and ready: a goes next.
        let status = serde_json::to_value(&d.status).unwrap();
        let next = pod(&[
            ("a", Some(container("a0", true))),
            ("b", Some(container("b1", true))),
        ]);
        let d = run(Some(&next)).decide(&request(spec, status));
        let killed: Vec<&str> = d.kills.iter().map(|k| k.container.as_str()).collect();
        assert_eq!(killed, ["a"]);
        assert_eq!(d.status.containers[0].phase, ContainerPhase::Succeeded);
    }

    #[test]
    fn refusals_never_stop_anything() {
        let spec = json!({"podName": "p"});
        let cases: Vec<(PodFacts, &str)> = vec![
            (
                PodFacts {
                    static_pod: true,
                    ..pod(&[("app", Some(container("a0", true)))])
                },
                "static pod",
            ),
            (
                PodFacts {
                    restart_policy: "Never".into(),
                    ..pod(&[("app", Some(container("a0", true)))])
                },
                "restartPolicy Never",
            ),
            (
                PodFacts {
                    restart_policy: "OnFailure".into(),
                    ..pod(&[("app", Some(container("a0", true)))])
                },
                "restartPolicy OnFailure",
            ),
            (
                PodFacts {
                    terminating: true,
                    ..pod(&[("app", Some(container("a0", true)))])
                },
                "terminating",
            ),
            (
                PodFacts {
                    uid: "pod-2".into(),
                    ..pod(&[("app", Some(container("a0", true)))])
                },
                "UID pod-2",
            ),
        ];
        for (facts, expected) in &cases {
            let spec = json!({"podName": "p", "podUID": "pod-1"});
            let d = run(Some(facts)).decide(&request(spec, json!({})));
            assert!(d.kills.is_empty(), "{expected}");
            assert_eq!(d.status.phase, RestartPhase::Failed, "{expected}");
            let message = d.status.message.unwrap();
            assert!(message.contains(expected), "{expected}: {message}");
        }
        let one = pod(&[("app", Some(container("a0", true)))]);
        let unknown = json!({"podName": "p", "containers": [{"name": "app"}, {"name": "nope"}]});
        let d = run(Some(&one)).decide(&request(unknown, json!({})));
        assert!(d.kills.is_empty());
        assert!(
            d.status
                .message
                .unwrap()
                .contains("\"nope\" is not an app container")
        );
        let bad = request(json!({"podName": ""}), json!({}));
        let d = run(Some(&one)).decide(&bad);
        assert!(d.kills.is_empty());
        assert!(d.status.message.unwrap().starts_with("invalid request"));
        // The pod replaced under the same name while the request ran.
        let taken = json!({"phase": "Restarting", "podUID": "pod-0"});
        let d = run(Some(&one)).decide(&request(spec, taken));
        assert!(d.kills.is_empty());
        assert!(d.status.message.unwrap().contains("was replaced"));
    }

    #[test]
    fn a_missing_pod_is_given_time_then_fails() {
        let spec = json!({"podName": "p"});
        let mut early = run(None);
        early.known_for = Duration::from_secs(1);
        let d = early.decide(&request(spec.clone(), json!({})));
        assert_eq!(d.status.phase, RestartPhase::Pending);
        assert_eq!(d.requeue_after, Some(Duration::from_secs(4)));
        let d = run(None).decide(&request(spec, json!({})));
        assert_eq!(d.status.phase, RestartPhase::Failed);
        assert!(d.status.message.unwrap().contains("not found on node n1"));
    }

    #[test]
    fn deadline_and_ttl() {
        let spec =
            json!({"podName": "p", "activeDeadlineSeconds": 30, "ttlSecondsAfterFinished": 10});
        let one = pod(&[("app", Some(container("a0", true)))]);
        // Created 60 s ago with a 30 s deadline: failed without a stop.
        let d = run(Some(&one)).decide(&request(spec.clone(), json!({})));
        assert!(d.kills.is_empty());
        assert!(
            d.status
                .message
                .unwrap()
                .contains("activeDeadlineSeconds (30 s)")
        );
        let mut early = run(Some(&one));
        early.offset = -40;
        assert_eq!(
            early.decide(&request(spec.clone(), json!({}))).kills.len(),
            1
        );
        let finished = json!({"phase": "Succeeded", "completionTime": "2026-11-28T09:59:55Z"});
        let d = run(Some(&one)).decide(&request(spec.clone(), finished.clone()));
        assert!(!d.delete);
        assert_eq!(d.requeue_after, Some(Duration::from_secs(5)));
        let mut later = run(None);
        later.offset = 5;
        assert!(later.decide(&request(spec, finished)).delete);
    }

    #[test]
    fn an_abandoned_kill_is_finished_after_its_grace_and_failures_end_the_request() {
        let spec = json!({"podName": "p"});
        let running = pod(&[("app", Some(container("a0", true)))]);
        let mut r = run(Some(&running));
        r.intents = vec![intent("app", "a0")];
        let status = json!({"phase": "Restarting", "podUID": "pod-1", "containers": [
            {"name": "app", "phase": "Restarting", "oldContainerID": "containerd://a0"}]});
        let d = r.decide(&request(spec.clone(), status.clone()));
        assert!(d.kills.is_empty());
        assert_eq!(d.requeue_after, Some(Duration::from_secs(7)));
        r.offset = 7;
        let d = r.decide(&request(spec.clone(), status.clone()));
        assert!(d.kills.len() == 1 && d.kills[0].resumed);

        let mut failing = run(Some(&running));
        failing
            .failures
            .insert("app".into(), "StopContainer: refused".into());
        let d = failing.decide(&request(spec, status));
        assert_eq!(d.status.phase, RestartPhase::Failed);
        assert_eq!(
            d.status.message.as_deref(),
            Some("container app: StopContainer: refused")
        );
    }

    #[test]
    fn min_started_seconds_waits_and_a_crash_back_off_is_named() {
        let spec = json!({"podName": "p", "strategy": {"minStartedSeconds": 20}});
        let status = json!({"phase": "Restarting", "podUID": "pod-1", "containers": [
            {"name": "app", "phase": "Restarting", "oldContainerID": "containerd://a0"}]});
        let mut new = container("a1", true);
        new.started_at = Some("2026-11-28T09:59:50Z".parse().unwrap());
        let replaced = pod(&[("app", Some(new))]);
        let d = run(Some(&replaced)).decide(&request(spec.clone(), status.clone()));
        assert_eq!(d.status.phase, RestartPhase::Restarting);
        assert_eq!(d.requeue_after, Some(Duration::from_secs(10)));
        let mut stopped = container("a0", false);
        let hold = "waiting for the kubelet to start it again (its crash back-off is not known: \
             the kubelet restarted at 2026-11-28T10:00:00Z)";
        stopped.backoff_hold = Some(hold.into());
        let held = pod(&[("app", Some(stopped))]);
        let d = run(Some(&held)).decide(&request(spec, status));
        assert_eq!(d.status.containers[0].message.as_deref(), Some(hold));
    }

    #[test]
    fn a_request_naming_no_container_restarts_every_app_container_in_the_pods_order() {
        let unnamed = request(json!({"podName": "p"}), json!({}));
        let spec = unnamed.spec.as_ref().unwrap();
        let two = pod(&[("b", None), ("a", None)]);
        assert_eq!(chosen_containers(spec, &two), Ok(vec!["b", "a"]));
    }

    #[test]
    fn the_earliest_wake_up_wins() {
        let mut followed = Followed {
            states: Vec::new(),
            kills: Vec::new(),
            restarted: Vec::new(),
            requeue_after: None,
        };
        followed.wake(Duration::from_secs(10));
        followed.wake(Duration::from_secs(3));
        followed.wake(Duration::from_secs(5));
        assert_eq!(followed.requeue_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn the_deadline_counts_from_the_requests_creation() {
        let none = request(json!({"podName": "p"}), json!({}));
        let spec = none.spec.as_ref().unwrap();
        assert_eq!(time_to_deadline(&none, spec, now()), Ok(None));
        // Created at 09:59:00, a minute before now.
        let timed = request(
            json!({"podName": "p", "activeDeadlineSeconds": 100}),
            json!({}),
        );
        let spec = timed.spec.as_ref().unwrap();
        assert_eq!(
            time_to_deadline(&timed, spec, now()),
            Ok(Some(Duration::from_secs(40)))
        );
        assert!(time_to_deadline(&timed, spec, now() + SignedDuration::from_secs(40)).is_err());
    }
}
