//! The decisions, without I/O: given a request, what the runtime shows of its pod, what the
//! journal says was already killed, and the time, which status the request should have and
//! which containers to kill now. Everything here is level-triggered and idempotent: deciding
//! twice from the same facts gives the same answer, and a kill is only ever ordered for a
//! running container that has neither restarted nor been killed for this request.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::object::*;
use crate::kube::meta_time;
use crate::restart::{DEFAULT_TERMINATION_GRACE_SECONDS, KillIntent, KillOrder};

/// The newest runtime container of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeFacts {
    /// `<runtime>://<id>`.
    pub container_id: String,
    pub id: String,
    pub running: bool,
    pub restart_count: i32,
    pub started_at: Option<Timestamp>,
    /// The pod's status (kubelet's report) shows this very container ready.
    pub ready_in_pod_status: bool,
    /// Exited and not yet started again: what the kubelet's crash back-off means for it (when
    /// the kubelet starts it again, or why that is not known; `CrashBackoffView::held_message`).
    pub backoff_hold: Option<String>,
}

/// The pod as this node sees it.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    pub uid: String,
    pub terminating: bool,
    pub containers: HashMap<String, RuntimeFacts>,
}

/// Everything a decision depends on besides the request.
pub struct Facts<'a> {
    pub now: Timestamp,
    /// `None`: no such pod on this node.
    pub pod: Option<&'a PodFacts>,
    /// Kill intents recorded for this request, by container name.
    pub intents: HashMap<&'a str, &'a KillIntent>,
    /// Containers of this request with a kill under way.
    pub in_flight: &'a HashSet<String>,
    /// Containers of this request whose kill failed, with the reason.
    pub kill_failures: &'a HashMap<String, String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CrrStatus,
    pub kills: Vec<KillOrder>,
    /// Decide again after this long even if nothing changes (time-based conditions).
    pub requeue_after: Option<Duration>,
}

pub(crate) const NOT_FOUND_MESSAGE: &str = "not found container on Node";

/// Picks the one request of a pod to work on: the one already being worked on (UID
/// `working_on`) while it is open, else kruise's order (phase weight, then creation time);
/// completed and deleting ones are skipped. Returns its index. Sticking to the current one
/// matters because phases are read back from the API: a sibling's "waiting" Pending can land
/// before the active request's Recreating and would otherwise outrank it.
pub(crate) fn pick_active(requests: &[&Crr], working_on: Option<&str>) -> Option<usize> {
    let open = || {
        requests
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.deleting && r.status.phase != CrrPhase::Completed)
    };
    open()
        .find(|(_, r)| Some(r.uid.as_str()) == working_on)
        .or_else(|| {
            open().min_by_key(|(_, r)| (r.status.phase.weight(), r.created_at, r.name.clone()))
        })
        .map(|(i, _)| i)
}

/// The status of a request that waits behind another request of the same pod.
pub(crate) fn waiting_status(request: &Crr, active: &Crr) -> CrrStatus {
    let mut status = request.status.clone();
    if status.phase == CrrPhase::None {
        status.phase = CrrPhase::Pending;
        status.message = Some(format!(
            "waiting for {} of the same pod to complete",
            active.name
        ));
    }
    status
}

pub fn decide(request: &Crr, facts: &Facts<'_>) -> Decision {
    let mut status = request.status.clone();
    let unchanged = |status: CrrStatus| Decision {
        status,
        kills: Vec::new(),
        requeue_after: None,
    };
    if status.phase == CrrPhase::Completed {
        return unchanged(status);
    }
    let spec = match &request.spec {
        Ok(spec) => spec,
        Err(reason) => {
            status.phase = CrrPhase::Completed;
            status.completion_time = Some(meta_time(facts.now));
            status.message = Some(format!("invalid request, nothing done: {reason}"));
            return unchanged(status);
        }
    };
    let pod = match pod_to_act_on(request, spec, facts.pod) {
        Ok(pod) => pod,
        Err(message) => {
            status.message = Some(message);
            if status.phase == CrrPhase::None {
                status.phase = CrrPhase::Pending;
            }
            return unchanged(status);
        }
    };
    let inputs = ContainerInputs {
        request,
        facts,
        pod,
        strategy: spec.strategy.clone().unwrap_or_default(),
        synced: request.synced_statuses(),
    };
    let followed = follow_containers(&inputs, spec);
    conclude(status, followed, &inputs.strategy, facts.now)
}

/// The pod to act on, or why the request waits instead: no such pod here, another pod than
/// the one it was made for, or one terminating.
fn pod_to_act_on<'a>(
    request: &Crr,
    spec: &CrrSpec,
    pod: Option<&'a PodFacts>,
) -> Result<&'a PodFacts, String> {
    let Some(pod) = pod else {
        // kruise-manager completes requests whose pod is gone; nothing to kill here.
        return Err(format!("pod {} not found on this node", spec.pod_name));
    };
    // Without the label (a request made past kruise's webhook) the pod it was made for is
    // unknown: kruise-daemon then finds no container, and kills nothing.
    let wanted = request.labels.get(LABEL_POD_UID);
    if wanted != Some(&pod.uid) {
        return Err(match wanted {
            Some(wanted) => format!(
                "pod {} has UID {}, the request was made for UID {wanted}: not acting",
                spec.pod_name, pod.uid
            ),
            None => format!(
                "the request has no {LABEL_POD_UID} label, so the pod it was made for is unknown: not acting"
            ),
        });
    }
    if pod.terminating {
        return Err(format!("pod {} is terminating: not acting", spec.pod_name));
    }
    Ok(pod)
}

/// What every container's step reads besides the container.
struct ContainerInputs<'a> {
    request: &'a Crr,
    facts: &'a Facts<'a>,
    pod: &'a PodFacts,
    strategy: Strategy,
    /// The manager's `sync-container-statuses`.
    synced: Vec<SyncedContainerStatus>,
}

/// What the containers' steps add up to.
struct Followed {
    states: Vec<ContainerRecreateState>,
    kills: Vec<KillOrder>,
    requeue_after: Option<Duration>,
    /// A container waits for the pod to be marked unready (unreadyGracePeriodSeconds).
    waiting_for_unready: bool,
}

impl Followed {
    /// Decide again after `after` at the latest.
    fn wake(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }
}

/// Each container's step, in the request's order.
fn follow_containers(inputs: &ContainerInputs<'_>, spec: &CrrSpec) -> Followed {
    let previous: HashMap<&str, &ContainerRecreateState> = inputs
        .request
        .status
        .container_recreate_states
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut followed = Followed {
        states: Vec::with_capacity(spec.containers.len()),
        kills: Vec::new(),
        requeue_after: None,
        waiting_for_unready: false,
    };
    // orderedRecreate: only the first container not yet final may move.
    let mut earlier_unfinished = false;
    for container in &spec.containers {
        let previous = previous.get(container.name.as_str()).copied();
        let mut state = ContainerRecreateState {
            name: container.name.clone(),
            phase: previous.map_or(ContainerPhase::Pending, |p| p.phase),
            message: String::new(),
            is_killed: previous.is_some_and(|p| p.is_killed),
        };
        if state.phase.is_final() {
            state.message = previous.map(|p| p.message.clone()).unwrap_or_default();
        } else {
            let blocked = inputs.strategy.ordered_recreate && earlier_unfinished;
            earlier_unfinished = true;
            state = follow_container(inputs, container, state, blocked, &mut followed);
        }
        followed.states.push(state);
    }
    followed
}

/// The step of one container not yet final: its state now, with the kill or the wake-up it
/// needs added to `followed`.
fn follow_container(
    inputs: &ContainerInputs<'_>,
    container: &CrrContainer,
    mut state: ContainerRecreateState,
    blocked: bool,
    followed: &mut Followed,
) -> ContainerRecreateState {
    let facts = inputs.facts;
    let intent = facts.intents.get(container.name.as_str()).copied();
    let in_flight = facts.in_flight.contains(&container.name);
    // A kill this request recorded, not under way any more (it ended, or an agent restart
    // abandoned it: see the resume below).
    let kill_confirmed = state.is_killed;
    state.is_killed |= intent.is_some() && !in_flight;

    if let Some(failure) = facts.kill_failures.get(&container.name) {
        state.phase = ContainerPhase::Failed;
        state.message = failure.clone();
        return state;
    }
    let Some(runtime) = inputs.pod.containers.get(&container.name) else {
        state.phase = ContainerPhase::Pending;
        state.message = NOT_FOUND_MESSAGE.into();
        return state;
    };
    if was_recreated(container, runtime, intent, kill_confirmed, &inputs.strategy) {
        follow_recreated(inputs, container, runtime, &mut state, followed);
        return state;
    }
    // Stopped but not yet restarted by kubelet, or being killed right now.
    if !runtime.running || in_flight {
        state.phase = ContainerPhase::Recreating;
        if let Some(hold) = runtime.backoff_hold.as_ref().filter(|_| !runtime.running) {
            state.message = hold.clone();
        }
        return state;
    }
    // Running and neither restarted nor (forceRecreate) killed: a kill is due. If one was
    // recorded for this very container but is not under way, the agent died during it and
    // the runtime abandoned the stop with it (a cancelled StopContainer has sent SIGTERM but
    // never sends the SIGKILL; or the call never reached it). If the container is still running
    // when the first kill would have sent SIGKILL, finish it: StopContainer with the minimum
    // grace.
    if let Some(intent) = intent
        && intent.container_id == runtime.id
    {
        state.phase = ContainerPhase::Recreating;
        match KillOrder::resume(intent, &container.name, facts.now.as_millisecond()) {
            Ok(order) => followed.kills.push(order),
            Err(wait) => followed.wake(wait),
        }
        return state;
    }
    if blocked {
        state.phase = ContainerPhase::Pending;
        state.message = "waiting for the containers before it (orderedRecreate)".into();
        return state;
    }
    if let Some(wait) = unready_wait(inputs, followed) {
        state.phase = ContainerPhase::Pending;
        state.message = wait.into();
        return state;
    }
    let grace_seconds = inputs
        .strategy
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS)
        .max(0);
    followed.kills.push(KillOrder {
        container: container.name.clone(),
        container_id: runtime.id.clone(),
        pre_stop: container.pre_stop.clone(),
        ports: container.ports.clone(),
        grace: Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0)),
        resumed: false,
    });
    state.phase = ContainerPhase::Recreating;
    state
}

/// Whether the container running now is a new one: restarted since the request was made, or
/// a replacement of the one this request killed (forceRecreate: only the latter counts).
fn was_recreated(
    container: &CrrContainer,
    runtime: &RuntimeFacts,
    intent: Option<&KillIntent>,
    kill_confirmed: bool,
    strategy: &Strategy,
) -> bool {
    let context = container.status_context.clone().unwrap_or_default();
    // Only a statusContext is evidence of a restart since the request. Without one (a
    // request made past kruise's webhook, which fills it in) the container running now is
    // the one to recreate, as kruise-daemon takes it.
    let restarted = container.status_context.is_some()
        && ((!context.container_id.is_empty() && runtime.container_id != context.container_id)
            || runtime.restart_count > context.restart_count);

    // The container this request killed has been replaced.
    let killed_and_replaced = intent.is_some_and(|i| i.container_id != runtime.id);
    // Still the container a recorded kill was aimed at (without the record, the journal
    // gone: the one the request was made for). However `isKilled` reads, that one running
    // means the kill is under way or was abandoned, never that it was recreated.
    let still_the_killed_one = match intent {
        Some(i) => i.container_id == runtime.id,
        None => !context.container_id.is_empty() && runtime.container_id == context.container_id,
    };
    if strategy.force_recreate {
        killed_and_replaced || (kill_confirmed && !still_the_killed_one)
    } else {
        restarted || killed_and_replaced
    }
}

/// Already recreated: wait for it to run, be ready (as the manager saw it) and stay up.
fn follow_recreated(
    inputs: &ContainerInputs<'_>,
    container: &CrrContainer,
    runtime: &RuntimeFacts,
    state: &mut ContainerRecreateState,
    followed: &mut Followed,
) {
    state.phase = ContainerPhase::Recreating;
    if !runtime.running {
        return;
    }
    let synced_ready = inputs
        .synced
        .iter()
        .any(|s| s.name == container.name && s.container_id == runtime.container_id && s.ready);
    // kruise-manager syncs only containers started after the request was created
    // (second resolution, as the API stores both). One already replaced when the
    // request was made (its statusContext came from a pod status not yet updated)
    // would wait for that sync forever; the pod's status is the fact the manager
    // would have copied.
    let started_before_request = runtime
        .started_at
        .zip(inputs.request.created_at)
        .is_some_and(|(started, created)| started.as_second() < created.as_second());
    let ready = synced_ready || (started_before_request && runtime.ready_in_pod_status);
    let min_started =
        Duration::from_secs(u64::try_from(inputs.strategy.min_started_seconds).unwrap_or(0));
    let up_for = runtime
        .started_at
        .map(|started| inputs.facts.now.duration_since(started))
        .unwrap_or(SignedDuration::ZERO);
    let up_for = Duration::try_from(up_for).unwrap_or(Duration::ZERO);
    if ready && up_for >= min_started {
        state.phase = ContainerPhase::Succeeded;
    } else if ready {
        followed.wake(min_started - up_for);
    }
}

/// What a container due for its kill waits for first, if anything, under
/// unreadyGracePeriodSeconds. Any value, 0 included, means "mark the pod unready first"
/// (kruise tests for nil). The manager marks it only once the request is Recreating, so the
/// request must be Recreating while it waits.
fn unready_wait(inputs: &ContainerInputs<'_>, followed: &mut Followed) -> Option<&'static str> {
    let grace = inputs.strategy.unready_grace_period_seconds?;
    followed.waiting_for_unready = true;
    let Some(acquired) = inputs.request.unready_acquired_at() else {
        return Some("waiting for the pod to be marked unready");
    };
    // A grace beyond the end of time (a hostile i64::MAX) is never over.
    let due = acquired
        .checked_add(SignedDuration::from_secs(grace))
        .unwrap_or(Timestamp::MAX);
    let now = inputs.facts.now;
    if now < due {
        followed.wake(Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO));
        return Some("waiting for unreadyGracePeriodSeconds");
    }
    None
}

/// The request's status from its containers' steps: completed once every container is final
/// (or at the first failure under failurePolicy Fail), pending while none has moved,
/// recreating otherwise.
fn conclude(
    mut status: CrrStatus,
    followed: Followed,
    strategy: &Strategy,
    now: Timestamp,
) -> Decision {
    let Followed {
        states,
        mut kills,
        requeue_after,
        waiting_for_unready,
    } = followed;
    let any_failed = states.iter().any(|s| s.phase == ContainerPhase::Failed);
    let all_final = states.iter().all(|s| s.phase.is_final());
    if all_final || (any_failed && strategy.fail_fast()) {
        // Completing with failurePolicy Fail: nothing more is started.
        if !all_final {
            kills.clear();
        }
        status.phase = CrrPhase::Completed;
        status.completion_time = Some(meta_time(now));
        status.message = any_failed.then(|| "a container failed to be recreated".to_string());
    } else {
        let pending_only = states.iter().all(|s| s.phase == ContainerPhase::Pending)
            && kills.is_empty()
            && !waiting_for_unready;
        status.phase = if pending_only {
            CrrPhase::Pending
        } else {
            CrrPhase::Recreating
        };
        status.message = None;
    }
    status.container_recreate_states = states;
    Decision {
        status,
        kills,
        requeue_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode_crr(json: serde_json::Value) -> Result<Crr, String> {
        Crr::from_object(&crate::requests::object_from_json(json)?).map_err(|e| e.to_string())
    }

    const NOW: &str = "2026-11-22T10:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn crr(
        spec: serde_json::Value,
        status: serde_json::Value,
        annotations: serde_json::Value,
    ) -> Crr {
        decode_crr(json!({
            "metadata": {"name": "r", "namespace": "ns", "uid": "crr-1", "creationTimestamp": "2026-11-22T09:59:00Z",
                         "labels": {LABEL_POD_UID: "pod-1"}, "annotations": annotations},
            "spec": spec, "status": status
        }))
        .unwrap()
    }

    fn one_container(strategy: serde_json::Value) -> serde_json::Value {
        json!({"podName": "p", "containers": [{"name": "app",
               "statusContext": {"containerID": "containerd://old", "restartCount": 0}}], "strategy": strategy})
    }

    fn pod(containers: &[(&str, &str, bool, i32)]) -> PodFacts {
        PodFacts {
            uid: "pod-1".into(),
            terminating: false,
            containers: containers
                .iter()
                .map(|(name, id, running, restarts)| {
                    (
                        name.to_string(),
                        RuntimeFacts {
                            container_id: format!("containerd://{id}"),
                            id: id.to_string(),
                            running: *running,
                            restart_count: *restarts,
                            started_at: Some("2026-11-22T09:59:30Z".parse().unwrap()),
                            ready_in_pod_status: false,
                            backoff_hold: None,
                        },
                    )
                })
                .collect(),
        }
    }

    fn decide_with(request: &Crr, pod: Option<&PodFacts>, intents: &[KillIntent]) -> Decision {
        let in_flight = HashSet::new();
        let failures = HashMap::new();
        decide(
            request,
            &Facts {
                now: now(),
                pod,
                intents: intents.iter().map(|i| (i.container.as_str(), i)).collect(),
                in_flight: &in_flight,
                kill_failures: &failures,
            },
        )
    }

    #[test]
    fn a_running_original_container_is_killed_once() {
        let request = crr(
            one_container(json!({"terminationGracePeriodSeconds": 5})),
            json!({}),
            json!({}),
        );
        let decision = decide_with(&request, Some(&pod(&[("app", "old", true, 0)])), &[]);
        assert_eq!(decision.kills.len(), 1);
        assert_eq!(decision.kills[0].container_id, "old");
        assert_eq!(decision.kills[0].grace, Duration::from_secs(5));
        assert_eq!(decision.status.phase, CrrPhase::Recreating);

        // The agent restarted mid-kill: the journal has the intent, the container still runs
        // before SIGKILL was due. No new kill yet; wake when it is due.
        let intent = KillIntent {
            key: "crr-1".into(),
            container: "app".into(),
            container_id: "old".into(),
            started_ms: now().as_millisecond() - 1000,
            grace_ms: 7000,
        };
        let again = decide_with(
            &request,
            Some(&pod(&[("app", "old", true, 0)])),
            std::slice::from_ref(&intent),
        );
        assert!(again.kills.is_empty());
        assert!(again.status.container_recreate_states[0].is_killed);
        assert_eq!(again.requeue_after, Some(Duration::from_secs(6)));

        // Stopped, not yet restarted by kubelet: wait, don't kill.
        let stopped = decide_with(
            &request,
            Some(&pod(&[("app", "old", false, 0)])),
            std::slice::from_ref(&intent),
        );
        assert!(stopped.kills.is_empty());
        assert_eq!(
            stopped.status.container_recreate_states[0].phase,
            ContainerPhase::Recreating
        );
        assert_eq!(stopped.status.container_recreate_states[0].message, "");

        // The kubelet's crash back-off holds it: the state says so.
        let mut held = pod(&[("app", "old", false, 0)]);
        let hold = "the kubelet will start it again after its crash back-off, between \
             2026-11-22T10:00:20Z and 2026-11-22T10:00:36Z";
        held.containers.get_mut("app").unwrap().backoff_hold = Some(hold.into());
        let waiting = decide_with(&request, Some(&held), std::slice::from_ref(&intent));
        assert_eq!(waiting.status.container_recreate_states[0].message, hold);
    }

    #[test]
    fn an_interrupted_kill_is_resumed_with_sigkill_when_it_was_due() {
        let request = crr(one_container(json!({})), json!({}), json!({}));
        let intent = KillIntent {
            key: "crr-1".into(),
            container: "app".into(),
            container_id: "old".into(),
            started_ms: now().as_millisecond() - 60_000,
            grace_ms: 30_000,
        };
        let decision = decide_with(&request, Some(&pod(&[("app", "old", true, 0)])), &[intent]);
        assert_eq!(decision.kills.len(), 1);
        let order = &decision.kills[0];
        assert!(
            order.resumed && order.grace.is_zero() && order.pre_stop.is_none(),
            "{order:?}"
        );
    }

    #[test]
    fn success_needs_the_managers_ready_entry_and_min_started_seconds() {
        let request = crr(
            one_container(json!({"minStartedSeconds": 60})),
            json!({}),
            json!({}),
        );
        let restarted = pod(&[("app", "new", true, 1)]);
        let decision = decide_with(&request, Some(&restarted), &[]);
        assert!(decision.kills.is_empty(), "already restarted: no kill");
        assert_eq!(
            decision.status.container_recreate_states[0].phase,
            ContainerPhase::Recreating
        );

        let synced = json!({ANNOTATION_SYNC_CONTAINER_STATUSES:
            r#"[{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}]"#});
        let request = crr(
            one_container(json!({"minStartedSeconds": 60})),
            json!({}),
            synced.clone(),
        );
        let decision = decide_with(&request, Some(&restarted), &[]);
        // Started 30 s ago: 30 s to go.
        assert_eq!(
            decision.status.container_recreate_states[0].phase,
            ContainerPhase::Recreating
        );
        assert_eq!(decision.requeue_after, Some(Duration::from_secs(30)));

        let request = crr(
            one_container(json!({"minStartedSeconds": 10})),
            json!({}),
            synced,
        );
        let decision = decide_with(&request, Some(&restarted), &[]);
        assert_eq!(
            decision.status.container_recreate_states[0].phase,
            ContainerPhase::Succeeded
        );
        assert_eq!(decision.status.phase, CrrPhase::Completed);
        assert_eq!(decision.status.completion_time.as_deref(), Some(NOW));
    }

    #[test]
    fn completion_time_is_written_in_whole_seconds_as_a_metav1_time() {
        let synced = json!({ANNOTATION_SYNC_CONTAINER_STATUSES:
            r#"[{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}]"#});
        let request = crr(one_container(json!({})), json!({}), synced);
        let restarted = pod(&[("app", "new", true, 1)]);
        let (in_flight, failures) = (HashSet::new(), HashMap::new());
        let decision = decide(
            &request,
            &Facts {
                // kruise-daemon and apimachinery write 10:00:00Z for this instant.
                now: "2026-11-22T10:00:00.458403609Z".parse().unwrap(),
                pod: Some(&restarted),
                intents: HashMap::new(),
                in_flight: &in_flight,
                kill_failures: &failures,
            },
        );
        assert_eq!(decision.status.phase, CrrPhase::Completed);
        assert_eq!(decision.status.completion_time.as_deref(), Some(NOW));
    }

    #[test]
    fn a_container_replaced_before_the_request_needs_only_the_pods_ready_status() {
        // The webhook copied a pod status not yet updated: statusContext names a container
        // that was replaced (at 09:58:30) before the request was created (09:59:00). The
        // manager never syncs a container started before the request.
        let request = crr(one_container(json!({})), json!({}), json!({}));
        let mut replaced = pod(&[("app", "new", true, 1)]);
        let app = replaced.containers.get_mut("app").unwrap();
        app.started_at = Some("2026-11-22T09:58:30Z".parse().unwrap());
        let decision = decide_with(&request, Some(&replaced), &[]);
        assert!(decision.kills.is_empty(), "already replaced: no kill");
        assert_eq!(decision.status.phase, CrrPhase::Recreating, "not ready yet");

        replaced
            .containers
            .get_mut("app")
            .unwrap()
            .ready_in_pod_status = true;
        let decision = decide_with(&request, Some(&replaced), &[]);
        assert_eq!(decision.status.phase, CrrPhase::Completed);
        assert_eq!(
            decision.status.container_recreate_states[0].phase,
            ContainerPhase::Succeeded
        );

        // Started after the request (09:59:30): the manager's entry stays the one proof.
        let mut restarted = pod(&[("app", "new", true, 1)]);
        restarted
            .containers
            .get_mut("app")
            .unwrap()
            .ready_in_pod_status = true;
        let decision = decide_with(&request, Some(&restarted), &[]);
        assert_eq!(decision.status.phase, CrrPhase::Recreating);
    }

    #[test]
    fn force_recreate_kills_a_restarted_container_once() {
        let request = crr(
            one_container(json!({"forceRecreate": true})),
            json!({}),
            json!({}),
        );
        let decision = decide_with(&request, Some(&pod(&[("app", "new", true, 1)])), &[]);
        assert_eq!(
            decision.kills.len(),
            1,
            "forceRecreate kills even a restarted container"
        );
        let killed = crr(
            one_container(json!({"forceRecreate": true})),
            json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true}]}),
            json!({}),
        );
        let decision = decide_with(&killed, Some(&pod(&[("app", "new", true, 1)])), &[]);
        assert!(decision.kills.is_empty(), "isKilled: never twice");
    }

    /// forceRecreate with a slow stop: while the kill of the old container runs, and after an
    /// agent restart left it abandoned, the old container (still running, ready in the pod's
    /// status, started before the request) is not the recreated one, whatever `isKilled` says.
    #[test]
    fn force_recreate_is_not_done_while_the_killed_container_still_runs() {
        let request = crr(
            one_container(json!({"forceRecreate": true})),
            json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true}]}),
            json!({}),
        );
        let mut old = pod(&[("app", "old", true, 0)]);
        let app = old.containers.get_mut("app").unwrap();
        app.started_at = Some("2026-11-22T09:58:30Z".parse().unwrap());
        app.ready_in_pod_status = true;
        let intent = KillIntent {
            key: "crr-1".into(),
            container: "app".into(),
            container_id: "old".into(),
            started_ms: now().as_millisecond() - 1000,
            grace_ms: 30_000,
        };
        let stopping = decide_at(&request, &old, std::slice::from_ref(&intent), &["app"], 0);
        assert!(stopping.kills.is_empty(), "one kill at a time");
        assert_eq!(stopping.status.phase, CrrPhase::Recreating);
        let state = &stopping.status.container_recreate_states[0];
        assert_eq!(state.phase, ContainerPhase::Recreating);
        // Abandoned (no kill under way) and past its grace: the kill is finished, not reported done.
        let abandoned = decide_at(&request, &old, std::slice::from_ref(&intent), &[], 60);
        assert_eq!(abandoned.status.phase, CrrPhase::Recreating);
        assert_eq!(abandoned.kills.len(), 1);
        assert!(abandoned.kills[0].resumed);
        // Replaced by kubelet, and ready as the manager synced it: done.
        let synced = crr(
            one_container(json!({"forceRecreate": true})),
            json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true}]}),
            json!({ANNOTATION_SYNC_CONTAINER_STATUSES:
                   r#"[{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}]"#}),
        );
        let replaced = pod(&[("app", "new", true, 1)]);
        let done = decide_at(&synced, &replaced, std::slice::from_ref(&intent), &[], 0);
        assert_eq!(done.status.phase, CrrPhase::Completed, "{:?}", done.status);
    }

    /// Past kruise's webhook: no pod-uid label means the pod is unknown (no kill); no
    /// statusContext means the running container is the one to recreate, never that it was
    /// recreated already because it restarted some time before.
    #[test]
    fn requests_made_past_the_webhook() {
        let unlabelled = decode_crr(json!({
            "metadata": {"name": "r", "namespace": "ns", "uid": "crr-1", "creationTimestamp": "2026-11-22T09:59:00Z"},
            "spec": one_container(json!({})), "status": {}
        }))
        .unwrap();
        let decision = decide_with(&unlabelled, Some(&pod(&[("app", "old", true, 0)])), &[]);
        assert!(decision.kills.is_empty());
        assert!(decision.status.message.unwrap().contains("label"));

        let no_context = crr(
            json!({"podName": "p", "containers": [{"name": "app"}]}),
            json!({}),
            json!({}),
        );
        let mut restarted_before = pod(&[("app", "c2", true, 2)]);
        let app = restarted_before.containers.get_mut("app").unwrap();
        app.started_at = Some("2026-11-22T09:58:30Z".parse().unwrap());
        app.ready_in_pod_status = true;
        let decision = decide_with(&no_context, Some(&restarted_before), &[]);
        assert_eq!(decision.kills.len(), 1, "{:?}", decision.status);
        assert_eq!(decision.kills[0].container_id, "c2");
        assert_eq!(
            decision.status.container_recreate_states[0].phase,
            ContainerPhase::Recreating
        );
    }

    #[test]
    fn identity_mismatches_never_kill() {
        let request = crr(one_container(json!({})), json!({}), json!({}));
        let mut other = pod(&[("app", "old", true, 0)]);
        other.uid = "pod-2".into();
        let decision = decide_with(&request, Some(&other), &[]);
        assert!(decision.kills.is_empty());
        assert!(decision.status.message.unwrap().contains("UID pod-2"));
        let decision = decide_with(&request, None, &[]);
        assert!(decision.kills.is_empty());
        let mut terminating = pod(&[("app", "old", true, 0)]);
        terminating.terminating = true;
        assert!(
            decide_with(&request, Some(&terminating), &[])
                .kills
                .is_empty()
        );
        let unknown = decide_with(&request, Some(&pod(&[("other", "x", true, 0)])), &[]);
        assert!(unknown.kills.is_empty());
        assert_eq!(
            unknown.status.container_recreate_states[0].message,
            NOT_FOUND_MESSAGE
        );
        assert_eq!(unknown.status.phase, CrrPhase::Pending);
    }

    #[test]
    fn ordered_recreate_moves_one_container_at_a_time() {
        let spec = json!({"podName": "p", "strategy": {"orderedRecreate": true}, "containers": [
            {"name": "a", "statusContext": {"containerID": "containerd://a0"}},
            {"name": "b", "statusContext": {"containerID": "containerd://b0"}}]});
        let request = crr(spec.clone(), json!({}), json!({}));
        let both = pod(&[("a", "a0", true, 0), ("b", "b0", true, 0)]);
        let decision = decide_with(&request, Some(&both), &[]);
        assert_eq!(
            decision
                .kills
                .iter()
                .map(|k| k.container.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        let unordered = crr(
            spec.to_string().replace("true", "false").parse().unwrap(),
            json!({}),
            json!({}),
        );
        assert_eq!(decide_with(&unordered, Some(&both), &[]).kills.len(), 2);
    }

    #[test]
    fn failure_policy_fail_completes_at_the_first_failure_ignore_carries_on() {
        let spec = |policy: &str| {
            json!({"podName": "p", "strategy": {"failurePolicy": policy}, "containers": [
                {"name": "a", "statusContext": {"containerID": "containerd://a0"}},
                {"name": "b", "statusContext": {"containerID": "containerd://b0"}}]})
        };
        let both = pod(&[("a", "a0", true, 0), ("b", "b0", true, 0)]);
        let failures = HashMap::from([("a".to_string(), "preStop failed".to_string())]);
        let in_flight = HashSet::new();
        let facts = |pod| Facts {
            now: now(),
            pod,
            intents: HashMap::new(),
            in_flight: &in_flight,
            kill_failures: &failures,
        };
        let fail = decide(
            &crr(spec("Fail"), json!({}), json!({})),
            &facts(Some(&both)),
        );
        assert_eq!(fail.status.phase, CrrPhase::Completed);
        assert!(fail.kills.is_empty());
        let ignore = decide(
            &crr(spec("Ignore"), json!({}), json!({})),
            &facts(Some(&both)),
        );
        assert_eq!(ignore.status.phase, CrrPhase::Recreating);
        assert_eq!(ignore.kills.len(), 1);
        assert_eq!(
            ignore.status.container_recreate_states[0].phase,
            ContainerPhase::Failed
        );
    }

    #[test]
    fn unready_grace_waits_for_the_annotation_then_the_grace() {
        let strategy = json!({"unreadyGracePeriodSeconds": 20});
        let running = pod(&[("app", "old", true, 0)]);
        let waiting = decide_with(
            &crr(one_container(strategy.clone()), json!({}), json!({})),
            Some(&running),
            &[],
        );
        assert!(waiting.kills.is_empty());
        // Recreating while it waits: kruise-manager marks the pod unready only then.
        assert_eq!(waiting.status.phase, CrrPhase::Recreating);
        assert_eq!(
            waiting.status.container_recreate_states[0].phase,
            ContainerPhase::Pending
        );
        // Zero still waits for the mark (kruise tests for nil, not for a positive value).
        let zero = decide_with(
            &crr(
                one_container(json!({"unreadyGracePeriodSeconds": 0})),
                json!({}),
                json!({}),
            ),
            Some(&running),
            &[],
        );
        assert!(zero.kills.is_empty());
        assert_eq!(zero.status.phase, CrrPhase::Recreating);
        let acquired = json!({ANNOTATION_UNREADY_ACQUIRED: "2026-11-22T09:59:50Z"});
        let early = decide_with(
            &crr(one_container(strategy.clone()), json!({}), acquired),
            Some(&running),
            &[],
        );
        assert!(early.kills.is_empty());
        assert_eq!(early.requeue_after, Some(Duration::from_secs(10)));
        let acquired = json!({ANNOTATION_UNREADY_ACQUIRED: "2026-11-22T09:59:30Z"});
        let due = decide_with(
            &crr(one_container(strategy), json!({}), acquired),
            Some(&running),
            &[],
        );
        assert_eq!(due.kills.len(), 1);
    }

    /// Decides with the wall clock at `NOW + offset_seconds` (the decision's clock is injected).
    fn decide_at(
        request: &Crr,
        pod: &PodFacts,
        intents: &[KillIntent],
        in_flight: &[&str],
        offset_seconds: i64,
    ) -> Decision {
        let in_flight: HashSet<String> = in_flight.iter().map(|c| c.to_string()).collect();
        let failures = HashMap::new();
        decide(
            request,
            &Facts {
                now: now() + SignedDuration::from_secs(offset_seconds),
                pod: Some(pod),
                intents: intents.iter().map(|i| (i.container.as_str(), i)).collect(),
                in_flight: &in_flight,
                kill_failures: &failures,
            },
        )
    }

    #[test]
    fn clock_jumps_bring_no_early_kill_success_or_second_kill() {
        const HOUR: i64 = 3600;
        const DAY: i64 = 86_400;
        // The unready grace (20 s from 09:59:50) with the clock thrown back an hour: waits.
        let running = pod(&[("app", "old", true, 0)]);
        let acquired = json!({ANNOTATION_UNREADY_ACQUIRED: "2026-11-22T09:59:50Z"});
        let request = crr(
            one_container(json!({"unreadyGracePeriodSeconds": 20})),
            json!({}),
            acquired,
        );
        for offset in [-HOUR, -1, 0, 9] {
            let d = decide_at(&request, &running, &[], &[], offset);
            assert!(d.kills.is_empty(), "offset {offset}: {:?}", d.status);
            assert!(d.requeue_after.is_some());
        }
        assert_eq!(decide_at(&request, &running, &[], &[], 10).kills.len(), 1);

        // A kill under way: no jump, back or ahead, orders another while it runs.
        let intent = KillIntent {
            key: "crr-1".into(),
            container: "app".into(),
            container_id: "old".into(),
            started_ms: now().as_millisecond(),
            grace_ms: 30_000,
        };
        let intents = std::slice::from_ref(&intent);
        for offset in [-DAY, -HOUR, 0, 29, 31, HOUR, DAY] {
            let d = decide_at(&request, &running, intents, &["app"], offset);
            assert!(d.kills.is_empty(), "offset {offset}");
        }
        // Over and the container still runs (the agent died during it): only once the grace
        // is over by the clock is it finished, with SIGKILL; a clock thrown back waits.
        for offset in [-DAY, -HOUR, 0, 29] {
            let d = decide_at(&request, &running, intents, &[], offset);
            assert!(d.kills.is_empty(), "offset {offset}");
        }
        let resumed = decide_at(&request, &running, intents, &[], DAY);
        assert!(resumed.kills.len() == 1 && resumed.kills[0].resumed);
        // Stopped, or replaced: never another kill, whatever the clock says.
        let stopped = pod(&[("app", "old", false, 0)]);
        let replaced = pod(&[("app", "new", true, 1)]);
        for offset in [-DAY, 0, DAY] {
            assert!(
                decide_at(&request, &stopped, intents, &[], offset)
                    .kills
                    .is_empty()
            );
            assert!(
                decide_at(&request, &replaced, intents, &[], offset)
                    .kills
                    .is_empty()
            );
        }

        // minStartedSeconds (60 s; the new container started at 09:59:30) with the clock
        // thrown back before the start: not up long enough, waits; ahead: succeeds.
        let synced = json!({ANNOTATION_SYNC_CONTAINER_STATUSES:
            r#"[{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}]"#});
        let request = crr(
            one_container(json!({"minStartedSeconds": 60})),
            json!({}),
            synced,
        );
        for offset in [-DAY, -HOUR, -31, 0, 29] {
            let d = decide_at(&request, &replaced, &[], &[], offset);
            assert_eq!(d.status.phase, CrrPhase::Recreating, "offset {offset}");
            assert!(
                d.requeue_after
                    .is_some_and(|r| r <= Duration::from_secs(60))
            );
        }
        for offset in [30, DAY] {
            let d = decide_at(&request, &replaced, &[], &[], offset);
            assert_eq!(d.status.phase, CrrPhase::Completed, "offset {offset}");
        }
    }

    #[test]
    fn huge_durations_wait_instead_of_overflowing() {
        let running = pod(&[("app", "old", true, 0)]);
        let acquired = json!({ANNOTATION_UNREADY_ACQUIRED: "2026-11-22T09:59:50Z"});
        let strategy = json!({"unreadyGracePeriodSeconds": i64::MAX});
        let waiting = decide_with(
            &crr(one_container(strategy), json!({}), acquired),
            Some(&running),
            &[],
        );
        assert!(waiting.kills.is_empty());
        assert!(waiting.requeue_after.is_some());
        let strategy =
            json!({"terminationGracePeriodSeconds": i64::MAX, "minStartedSeconds": i32::MAX});
        let kill = decide_with(
            &crr(one_container(strategy.clone()), json!({}), json!({})),
            Some(&running),
            &[],
        );
        assert_eq!(kill.kills.len(), 1, "{:?}", kill.status);
        assert_eq!(kill.kills[0].grace, Duration::from_secs(i64::MAX as u64));
        // Restarted and ready, but not up for i32::MAX seconds yet: waits.
        let restarted = pod(&[("app", "new", true, 1)]);
        let synced = json!({ANNOTATION_SYNC_CONTAINER_STATUSES:
            r#"[{"name":"app","containerID":"containerd://new","restartCount":1,"ready":true}]"#});
        let recreating = decide_with(
            &crr(one_container(strategy), json!({}), synced),
            Some(&restarted),
            &[],
        );
        assert!(recreating.kills.is_empty());
        assert_eq!(
            recreating.status.container_recreate_states[0].phase,
            ContainerPhase::Recreating
        );
    }

    #[test]
    fn siblings_wait_for_the_active_request() {
        let first = crr(
            one_container(json!({})),
            json!({"phase": "Recreating"}),
            json!({}),
        );
        let mut second = crr(one_container(json!({})), json!({}), json!({}));
        second.name = "r2".into();
        second.uid = "uid-r2".into();
        let requests = [&second, &first];
        assert_eq!(pick_active(&requests, None), Some(1));
        let mut done = first.clone();
        done.status.phase = CrrPhase::Completed;
        assert_eq!(
            pick_active(&[&second, &done], Some(&first.uid)),
            Some(0),
            "the sibling starts once the active completes"
        );
        // The active request's Recreating not yet read back, the sibling's waiting Pending
        // already: the agent keeps to the request it works on.
        let mut not_yet = first.clone();
        not_yet.status.phase = CrrPhase::None;
        let mut parked = second.clone();
        parked.status.phase = CrrPhase::Pending;
        assert_eq!(pick_active(&[&parked, &not_yet], None), Some(0));
        assert_eq!(pick_active(&[&parked, &not_yet], Some(&first.uid)), Some(1));
        assert_eq!(waiting_status(&second, &first).phase, CrrPhase::Pending);
    }

    #[test]
    fn an_invalid_request_is_completed_with_the_reason() {
        let request = crr(
            json!({"podName": "p", "containers": []}),
            json!({}),
            json!({}),
        );
        let decision = decide_with(&request, Some(&pod(&[])), &[]);
        assert_eq!(decision.status.phase, CrrPhase::Completed);
        assert!(
            decision
                .status
                .message
                .unwrap()
                .contains("spec.containers is empty")
        );
        assert!(decision.kills.is_empty());
    }

    #[test]
    fn recreated_is_a_restart_since_the_request_or_a_replacement_of_the_killed_one() {
        let app = |context: Option<(&str, i32)>| CrrContainer {
            name: "app".into(),
            status_context: context.map(|(id, restarts)| StatusContext {
                container_id: id.into(),
                restart_count: restarts,
            }),
            ..Default::default()
        };
        let restarted = pod(&[("app", "new", true, 1)]);
        let runtime = &restarted.containers["app"];
        let plain = Strategy::default();
        let force = Strategy {
            force_recreate: true,
            ..Default::default()
        };
        let old = app(Some(("containerd://old", 0)));
        // Restarted since the request: recreated, unless forceRecreate asks for a kill of its own.
        assert!(was_recreated(&old, runtime, None, false, &plain));
        assert!(!was_recreated(&old, runtime, None, false, &force));
        assert!(was_recreated(&old, runtime, None, true, &force));
        // Without a statusContext the running container is the one to recreate.
        assert!(!was_recreated(&app(None), runtime, None, false, &plain));
        // The one a recorded kill was aimed at, replaced: recreated either way.
        let killed = KillIntent {
            key: "crr-1".into(),
            container: "app".into(),
            container_id: "old".into(),
            started_ms: 0,
            grace_ms: 0,
        };
        assert!(was_recreated(
            &app(None),
            runtime,
            Some(&killed),
            false,
            &force
        ));
        let still = KillIntent {
            container_id: "new".into(),
            ..killed
        };
        assert!(!was_recreated(
            &app(None),
            runtime,
            Some(&still),
            true,
            &force
        ));
    }
}
