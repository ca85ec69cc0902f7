//! Timing of every in-place restart on the node, phase by phase, from the runtime's own clocks.
//!
//! A restart is a container replaced by a newer one of the same name in the same pod. Its
//! trigger is what killed the old one: a ContainerRecreateRequest or an env change (the agent's
//! own kills, noted in the [`KillLedger`]), a kubelet in-place update (the new container carries
//! another stored hash: the spec changed), or the container's own exit. Phases:
//! - stop: kill issued → old container exited (CRI `finished_at`; only for the agent's kills,
//!   whose issue time is known);
//! - restart: old container exited → new container running (CRI `started_at`): kubelet's reaction,
//!   its back-off and any image pull;
//! - backoff: the part of `restart` that was the kubelet's crash back-off, as predicted from the
//!   restarts seen before (`backoff`; 0 for a free restart, none for a spec change);
//! - ready: new container running → the pod's Ready condition true again (its
//!   `lastTransitionTime` has one-second resolution, so this phase does too);
//! - total: kill issued (or exit) → ready.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::KillLedger;
use super::backoff::{BackoffBook, BackoffRule, BackoffSettings};
use super::{RestartMetrics, RestartPhase, RestartResult};
use crate::hashing::KubeletVersion;
use crate::metrics::Metrics;
use crate::nodeview::RestartWindow;
use crate::nodeview::Trigger;
use crate::nodeview::{
    ContainerView, CrashBackoffView, NodeView, RestartTiming, RuntimeContainer, RuntimeSnapshot,
    RuntimeState, StatusView,
};

/// A readiness wait gives up after this long (result `not-ready`).
const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// What was last seen of a container name in a pod.
struct Seen {
    id: String,
    stored_hash: Option<String>,
}

impl Seen {
    fn of(runtime: &RuntimeContainer) -> Self {
        Seen {
            id: runtime.id.clone(),
            stored_hash: runtime.stored_hash.clone(),
        }
    }
}

pub struct RestartTracker {
    metrics: RestartMetrics,
    ledger: KillLedger,
    seen: HashMap<(String, String), Seen>,
    /// Restarts whose new container is running but not yet ready.
    pending: HashMap<(String, String), (RestartTiming, Instant)>,
    last: HashMap<(String, String), RestartTiming>,
    /// The kubelet's crash back-off entries, rebuilt from the restarts seen.
    backoff: BackoffBook,
    backoff_settings: BackoffSettings,
    /// The next time a prediction shown in the view changes by the clock alone (a running
    /// container's entry is forgotten): the view is rebuilt then.
    prediction_changes_at: Option<Timestamp>,
    /// When the tracker began to see restarts (the agent's start).
    watching_since: Timestamp,
    /// When the node's kubelet process started, as last read (`None`: not found).
    kubelet_start: Option<Timestamp>,
    /// When the kubelet was seen to restart while the agent ran (it forgot its back-off then).
    kubelet_restarted_at: Option<Timestamp>,
}

fn nanos_to_timestamp(nanos: i64) -> Option<Timestamp> {
    (nanos > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(nanos)).ok())
        .flatten()
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// What killed the instance `previous` that `runtime` replaced: the agent's kill as noted
/// in the ledger (`killed`), else a kubelet in-place update when the stored hash changed (the
/// spec did), else the container's own exit.
fn trigger_of(
    killed: Option<(Trigger, Timestamp)>,
    previous: &Seen,
    runtime: &RuntimeContainer,
) -> Trigger {
    match killed {
        Some((trigger, _)) => trigger,
        None if previous.stored_hash != runtime.stored_hash => Trigger::KubeletUpdate,
        None => Trigger::ContainerExit,
    }
}

/// Completes a restart's timing with the pod Ready since `ready_since`: the ready phase from
/// the new instance running, the total from the kill issued (else the old one's exit).
fn mark_ready(timing: &mut RestartTiming, ready_since: Timestamp) {
    let running = timing
        .running_at
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok());
    // One-second resolution: never before the container ran.
    let ready = running.map_or(ready_since, |r| r.max(ready_since));
    timing.ready_at = Some(ready.to_string());
    timing.ready_seconds = running.map(|r| seconds(r, ready));
    let start = timing
        .kill_issued_at
        .as_deref()
        .or(timing.exited_at.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok());
    timing.total_seconds = start.map(|s| seconds(s, ready));
}

/// The kubelet's back-off key for a container instance: pod, name and stored hash.
fn backoff_key(
    uid: &str,
    name: &str,
    runtime: &crate::nodeview::RuntimeContainer,
) -> super::backoff::BackoffKey {
    (
        uid.to_owned(),
        name.to_owned(),
        runtime.stored_hash.clone().unwrap_or_default(),
    )
}

impl RestartTracker {
    /// `backoff_settings`: the kubelet's crash back-off settings (from its config file).
    pub(crate) fn new(
        metrics: Metrics,
        ledger: KillLedger,
        backoff_settings: BackoffSettings,
    ) -> Self {
        Self {
            metrics: metrics.families(),
            ledger,
            seen: HashMap::new(),
            pending: HashMap::new(),
            last: HashMap::new(),
            backoff: BackoffBook::default(),
            backoff_settings,
            prediction_changes_at: None,
            watching_since: Timestamp::now(),
            kubelet_start: None,
            kubelet_restarted_at: None,
        }
    }

    /// The kubelet process's start time, as read now (`KubeletProcess::started_at`). A later
    /// start than the one seen before is a kubelet restart: its back-off entries are gone, so
    /// the book is cleared, and what was predicted before it is uncertain. True on a restart.
    pub fn kubelet_started(&mut self, at: Option<Timestamp>) -> bool {
        let Some(at) = at else {
            return false;
        };
        let restarted = self
            .kubelet_start
            .is_some_and(|before| at.as_second() > before.as_second());
        if restarted {
            tracing::info!(started = %at, "the kubelet restarted: it forgot its crash back-off; predictions made before are uncertain");
            self.backoff = BackoffBook::default();
            self.kubelet_restarted_at = Some(at);
        }
        self.kubelet_start = Some(at);
        restarted
    }

    /// Why a prediction for this container cannot be trusted, if it cannot.
    fn uncertainty(
        &self,
        key: &super::backoff::BackoffKey,
        runtime: &crate::nodeview::RuntimeContainer,
    ) -> Option<String> {
        let finished = nanos_to_timestamp(runtime.times.finished_at);
        if let Some(restarted) = self.kubelet_restarted_at
            && runtime.state == RuntimeState::Exited
            && finished.is_some_and(|f| f < restarted)
        {
            return Some(format!(
                "the kubelet restarted at {restarted}, after this container exited, and forgot its back-off: it starts it at its next sync of the pod"
            ));
        }
        // Restarted before the agent watched, by a kubelet that was already running: the
        // kubelet may hold a back-off entry the agent never saw made.
        let created = nanos_to_timestamp(runtime.times.created_at)?;
        let kubelet_older = self.kubelet_start.is_none_or(|k| k < created);
        (runtime.attempt > 0
            && created < self.watching_since
            && kubelet_older
            && !self.backoff.knows(key))
        .then(|| {
            "restarted before the agent started: the kubelet may hold a back-off the agent did not see".to_owned()
        })
    }

    /// When a prediction in the last view changes with no other change (a running container's
    /// back-off entry is forgotten), if one will: the view should be rebuilt then.
    pub fn prediction_changes_at(&self) -> Option<Timestamp> {
        self.prediction_changes_at
    }

    /// The kubelet's back-off for a container as it stands: the wait a stop now would meet, and
    /// for an exited instance still waiting, when the kubelet starts it again.
    fn predict(
        &mut self,
        rule: &BackoffRule,
        uid: &str,
        name: &str,
        runtime: &crate::nodeview::RuntimeContainer,
        now: Timestamp,
    ) -> Option<CrashBackoffView> {
        let key = backoff_key(uid, name, runtime);
        if let Some(reason) = self.uncertainty(&key, runtime) {
            return Some(CrashBackoffView {
                uncertain: Some(reason),
                ..Default::default()
            });
        }
        let next_wait_seconds = self.backoff.wait(rule, &key, now).as_secs();
        if next_wait_seconds > 0
            && runtime.state == RuntimeState::Running
            && let Some(ends) = self.backoff.wait_ends(rule, &key, now)
        {
            self.prediction_changes_at =
                Some(self.prediction_changes_at.map_or(ends, |at| at.min(ends)));
        }
        let window = match (runtime.state, nanos_to_timestamp(runtime.times.finished_at)) {
            (RuntimeState::Exited, Some(finished)) => {
                let wait = self.backoff.wait(rule, &key, finished);
                // Held while the latest start is ahead (a free restart has no window).
                RestartWindow::after(rule, finished, wait)
                    .filter(|w| !wait.is_zero() && w.latest > now)
            }
            _ => None,
        };
        let late_by = rule.late_by(Duration::from_secs(next_wait_seconds));
        (next_wait_seconds > 0 || window.is_some()).then(|| CrashBackoffView {
            next_wait_seconds,
            late_by_seconds: late_by.as_secs_f64().ceil() as u64,
            until: window.map(|w| w.earliest.to_string()),
            until_latest: window
                .filter(|w| w.latest > w.earliest)
                .map(|w| w.latest.to_string()),
            uncertain: None,
        })
    }

    /// Looks at a fresh view: detects replacements, records their phases, and fills each
    /// container's `last_restart` for display.
    pub fn observe(&mut self, view: &mut NodeView, snapshot: &RuntimeSnapshot) {
        let mut live = HashSet::new();
        let rule = self.backoff_rule(view.kubelet_version.as_deref());
        let now = Timestamp::now();
        self.prediction_changes_at = None;
        for pod in &mut view.pods {
            let ready_since = pod
                .ready_since
                .as_deref()
                .and_then(|t| t.parse::<Timestamp>().ok());
            for container in &mut pod.containers {
                let key = (pod.uid.clone(), container.name.clone());
                live.insert(key.clone());
                let Some(runtime) = container.runtime.as_ref() else {
                    continue;
                };
                if !self.note_instance(&key, runtime, snapshot, &rule) {
                    continue;
                }
                self.note_ready(&key, container.status.as_ref(), ready_since);
                self.show(container, &key, &rule, now);
            }
        }
        self.forget_gone(&live);
    }

    /// The node's kubelet release decides the rule; unknown yet, the defaults every release
    /// shares.
    fn backoff_rule(&self, kubelet_version: Option<&str>) -> BackoffRule {
        let minor = kubelet_version
            .and_then(|v| KubeletVersion::parse(v).ok())
            .map_or(35, |v| v.minor());
        BackoffRule::of_kubelet(minor, &self.backoff_settings)
    }

    /// Notes the instance of the container under `key` now running (or not) in the runtime. A
    /// newer instance than the one seen before is a restart, timed from the moment it runs;
    /// until then it is not looked at further (false), neither for readiness nor for display.
    fn note_instance(
        &mut self,
        key: &(String, String),
        runtime: &RuntimeContainer,
        snapshot: &RuntimeSnapshot,
        rule: &BackoffRule,
    ) -> bool {
        let replaced = match self.seen.get(key) {
            Some(previous) if previous.id == runtime.id => return true,
            // Wait until the replacement runs: its start time is a phase boundary.
            Some(_) if runtime.state != RuntimeState::Running || runtime.times.started_at <= 0 => {
                return false;
            }
            _ => self.seen.insert(key.clone(), Seen::of(runtime)),
        };
        if let Some(previous) = replaced {
            let timing = self.time_restart(key, &previous, runtime, snapshot, rule);
            self.await_ready(key, timing);
        }
        true
    }

    /// The phases of a restart up to its new instance running: `previous` replaced by
    /// `runtime`. Takes the kill from the ledger, and the restart into the back-off book.
    fn time_restart(
        &mut self,
        key: &(String, String),
        previous: &Seen,
        runtime: &RuntimeContainer,
        snapshot: &RuntimeSnapshot,
        rule: &BackoffRule,
    ) -> RestartTiming {
        let old_times = snapshot.times.get(&previous.id);
        let killed = self.ledger.take(&previous.id);
        let trigger = trigger_of(killed, previous, runtime);
        let issued = killed.map(|(_, at)| at);
        let exited = old_times.and_then(|t| nanos_to_timestamp(t.finished_at));
        let running = nanos_to_timestamp(runtime.times.started_at);
        let restart_seconds = exited.zip(running).map(|(a, b)| seconds(a, b));
        // The kubelet's back-off applies to the same container spec only: a spec change is a
        // new key, started without it.
        let backoff_seconds = match (trigger, exited, running) {
            (Trigger::KubeletUpdate, ..) => None,
            (_, Some(exited), Some(running)) => {
                let held = self.held_by_backoff(rule, key, runtime, exited, running);
                restart_seconds.map(|r| held.min(r))
            }
            _ => None,
        };
        RestartTiming {
            trigger: Some(trigger),
            old_container_id: previous.id.clone(),
            new_container_id: runtime.id.clone(),
            kill_issued_at: issued.map(|t| t.to_string()),
            exited_at: exited.map(|t| t.to_string()),
            running_at: running.map(|t| t.to_string()),
            stop_seconds: issued.zip(exited).map(|(a, b)| seconds(a, b)),
            restart_seconds,
            backoff_seconds,
            ..Default::default()
        }
    }

    /// How long the kubelet's back-off held the restart that ran the new instance `runtime`, in
    /// seconds: the wait the book predicts for it (the restart is noted in the book).
    fn held_by_backoff(
        &mut self,
        rule: &BackoffRule,
        key: &(String, String),
        runtime: &RuntimeContainer,
        exited: Timestamp,
        running: Timestamp,
    ) -> f64 {
        let backoff_key = backoff_key(&key.0, &key.1, runtime);
        let wait = self.backoff.restarted(rule, backoff_key, exited, running);
        let mut held = wait.as_secs_f64();
        // The kubelet starts it at its first look after the wait: the back-off held it until
        // it made the new instance.
        if !wait.is_zero()
            && let Some(created) = nanos_to_timestamp(runtime.times.created_at)
        {
            held = held.max(seconds(exited, created));
        }
        held
    }

    /// Records a restart's phases so far and waits for its readiness. A restart still waiting
    /// for readiness was itself replaced (a crash loop): it ends here, not ready.
    fn await_ready(&mut self, key: &(String, String), timing: RestartTiming) {
        let trigger = timing.trigger.unwrap_or(Trigger::ContainerExit);
        self.observe_phases(
            trigger,
            [
                (RestartPhase::Stop, timing.stop_seconds),
                (RestartPhase::Restart, timing.restart_seconds),
                (RestartPhase::Backoff, timing.backoff_seconds),
            ],
        );
        if let Some((replaced, _)) = self.pending.insert(key.clone(), (timing, Instant::now())) {
            self.metrics.count(
                replaced.trigger.unwrap_or(Trigger::ContainerExit),
                RestartResult::NotReady,
            );
        }
    }

    /// Ready again: kubelet reports the new container ready and the pod Ready. Ends the
    /// restart waiting under `key`, if it is.
    fn note_ready(
        &mut self,
        key: &(String, String),
        status: Option<&StatusView>,
        ready_since: Option<Timestamp>,
    ) {
        if let Some((timing, _)) = self.pending.get(key)
            && let Some(status) = status
            && status.ready
            && status.container_id.ends_with(&timing.new_container_id)
            && let Some(ready_since) = ready_since
            && let Some((mut timing, _)) = self.pending.remove(key)
        {
            mark_ready(&mut timing, ready_since);
            let trigger = timing.trigger.unwrap_or(Trigger::ContainerExit);
            self.observe_phases(
                trigger,
                [
                    (RestartPhase::Ready, timing.ready_seconds),
                    (RestartPhase::Total, timing.total_seconds),
                ],
            );
            self.metrics.count(trigger, RestartResult::Ready);
            self.last.insert(key.clone(), timing);
        }
    }

    /// Each phase with a duration, into the metrics.
    fn observe_phases<const N: usize>(
        &self,
        trigger: Trigger,
        phases: [(RestartPhase, Option<f64>); N],
    ) {
        for (phase, value) in phases {
            if let Some(value) = value {
                self.metrics.observe_phase(trigger, phase, value);
            }
        }
    }

    /// Fills the container's last restart (the one waiting for readiness, else the last one
    /// done) and its predicted back-off, for display.
    fn show(
        &mut self,
        container: &mut ContainerView,
        key: &(String, String),
        rule: &BackoffRule,
        now: Timestamp,
    ) {
        container.last_restart = self
            .pending
            .get(key)
            .map(|(timing, _)| timing.clone())
            .or_else(|| self.last.get(key).cloned());
        container.crash_backoff = container
            .runtime
            .as_ref()
            .and_then(|runtime| self.predict(rule, &key.0, &container.name, runtime, now));
    }

    /// Restarts that never became ready, and containers gone with their pods (`live`: every
    /// container of the view).
    fn forget_gone(&mut self, live: &HashSet<(String, String)>) {
        let metrics = &self.metrics;
        self.pending.retain(|key, (timing, since)| {
            let keep = since.elapsed() < READY_TIMEOUT && live.contains(key);
            if !keep {
                metrics.count(
                    timing.trigger.unwrap_or(Trigger::ContainerExit),
                    RestartResult::NotReady,
                );
            }
            keep
        });
        self.seen.retain(|key, _| live.contains(key));
        let live_pods = live.iter().map(|(uid, _)| uid.clone()).collect();
        self.backoff.retain_pods(&live_pods);
        self.last.retain(|key, _| live.contains(key));
        self.ledger.forget_older_than(READY_TIMEOUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeview::ContainerTimes;

    fn view(container_id: &str) -> NodeView {
        serde_json::from_value(serde_json::json!({
            "node_name": "n",
            "runtime": null,
            "kubelet_version": null,
            "synced": true,
            "unmatched_sandboxes": [],
            "pods": [{
                "namespace": "ns", "name": "p", "uid": "u", "runtime_uid": "u",
                "static_pod": false, "terminating": false, "pod_ip": null,
                "sandbox_id": "s", "sandbox_ready": true,
                "containers": [{
                    "name": "app", "kind": "regular", "hash_check": null,
                    "runtime": {
                        "container_id": format!("containerd://{container_id}"),
                        "id": container_id, "state": "running", "attempt": 0,
                        "restart_count": 0, "stored_hash": "1",
                        "stored_hash_without_resources": null, "image": "i",
                        "times": {"created_at": 1, "started_at": 2, "finished_at": 0,
                                  "exit_code": null}
                    }
                }]
            }]
        }))
        .expect("a node view")
    }

    #[test]
    fn a_remembered_kill_keeps_its_first_time() {
        let ledger = KillLedger::default();
        let first = Timestamp::from_second(1_000).unwrap();
        ledger.remember("c1", Trigger::Crr, first);
        ledger.remember("c1", Trigger::Crr, Timestamp::now());
        assert_eq!(ledger.take("c1"), Some((Trigger::Crr, first)));
        ledger.record("c2", Trigger::Crr);
        ledger.remember("c2", Trigger::EnvChange, first);
        assert_eq!(ledger.take("c2").map(|(t, _)| t), Some(Trigger::Crr));
    }

    /// The agent's own kill names the trigger; without one, a changed stored hash is the
    /// kubelet's in-place update and an unchanged one the container's own exit.
    #[test]
    fn a_restart_is_blamed_on_the_kill_else_the_hash_else_the_exit() {
        let runtime = view("c2").pods[0].containers[0]
            .runtime
            .clone()
            .expect("runtime");
        let seen = |hash: &str| Seen {
            id: "c1".to_owned(),
            stored_hash: Some(hash.to_owned()),
        };
        let at = Timestamp::from_second(1_000).expect("a time");
        assert_eq!(
            trigger_of(Some((Trigger::EnvChange, at)), &seen("2"), &runtime),
            Trigger::EnvChange
        );
        assert_eq!(
            trigger_of(None, &seen("2"), &runtime),
            Trigger::KubeletUpdate
        );
        assert_eq!(
            trigger_of(None, &seen("1"), &runtime),
            Trigger::ContainerExit
        );
    }

    /// The Ready condition's second resolution can put it before the container ran: the ready
    /// phase is then 0, not negative nor early. The total runs from the kill, else the exit.
    #[test]
    fn ready_is_never_before_running_and_the_total_starts_at_the_kill_else_the_exit() {
        let at = |s: i64| Timestamp::from_second(s).expect("a time");
        let mut timing = RestartTiming {
            kill_issued_at: Some(at(100).to_string()),
            exited_at: Some(at(101).to_string()),
            running_at: Some(at(110).to_string()),
            ..Default::default()
        };
        mark_ready(&mut timing, at(109));
        assert_eq!(timing.ready_at, Some(at(110).to_string()));
        assert_eq!(timing.ready_seconds, Some(0.0));
        assert_eq!(timing.total_seconds, Some(10.0));

        timing.kill_issued_at = None;
        mark_ready(&mut timing, at(113));
        assert_eq!(timing.ready_at, Some(at(113).to_string()));
        assert_eq!(timing.ready_seconds, Some(3.0));
        assert_eq!(timing.total_seconds, Some(12.0));
    }

    /// A container replaced again before its restart became ready (a crash loop) ends that
    /// restart as not ready: every restart is counted once.
    #[test]
    fn a_restart_replaced_before_it_was_ready_counts_as_not_ready() {
        let metrics = Metrics::new();
        let mut tracker = RestartTracker::new(
            metrics.clone(),
            KillLedger::default(),
            BackoffSettings::default(),
        );
        let snapshot = RuntimeSnapshot::default();
        for id in ["c1", "c2", "c3"] {
            tracker.observe(&mut view(id), &snapshot);
        }
        let text = metrics.encode();
        assert!(
            text.contains(
                "inplaced_restarts_total{trigger=\"container-exit\",result=\"not-ready\"} 1"
            ),
            "{text}"
        );
        assert_eq!(tracker.pending.len(), 1, "c3's restart still waits");
    }

    /// A container stopped three times on `kubelet_version`, as the kubelet restarts it: the
    /// first restart free, the second held by the 10 s wait, the kubelet making the new
    /// instance `created_late` s after that wait ended. Returns the metrics text and the view
    /// after the last restart, and the view of the container exited once more.
    fn stopped_three_times(
        kubelet_version: Option<&str>,
        created_late: i64,
    ) -> (String, NodeView, NodeView) {
        let metrics = Metrics::new();
        let mut tracker = RestartTracker::new(
            metrics.clone(),
            KillLedger::default(),
            BackoffSettings::default(),
        );
        let t0 = Timestamp::now().as_nanosecond() as i64 - 60_000_000_000;
        let s = 1_000_000_000;
        // (container, created, started, finished of the one before it)
        let mut times = HashMap::new();
        let steps = [
            ("c1", 0, 0, None),
            ("c2", 2 * s, 2 * s, Some(s)),
            (
                "c3",
                (13 + created_late) * s,
                (13 + created_late) * s + s / 5,
                Some(3 * s),
            ),
        ];
        let mut previous: Option<&str> = None;
        let mut last = None;
        let with_version = |mut v: NodeView| {
            v.kubelet_version = kubelet_version.map(str::to_owned);
            v
        };
        for (id, created, started, finished_before) in steps {
            if let (Some(before), Some(finished)) = (previous, finished_before) {
                times.insert(
                    before.to_owned(),
                    ContainerTimes {
                        finished_at: t0 + finished,
                        ..Default::default()
                    },
                );
            }
            let snapshot = RuntimeSnapshot {
                times: std::sync::Arc::new(times.clone()),
                ..Default::default()
            };
            let mut v = with_version(view(id));
            let runtime = v.pods[0].containers[0].runtime.as_mut().expect("runtime");
            runtime.times.created_at = t0 + created;
            runtime.times.started_at = t0 + started;
            tracker.observe(&mut v, &snapshot);
            last = Some(v);
            previous = Some(id);
        }
        // c3 exits just now: held by the 20 s wait.
        let finished = Timestamp::now().as_nanosecond() as i64;
        let mut exited = with_version(view("c3"));
        let runtime = exited.pods[0].containers[0]
            .runtime
            .as_mut()
            .expect("runtime");
        runtime.state = RuntimeState::Exited;
        runtime.times.created_at = t0 + (13 + created_late) * s;
        runtime.times.started_at = t0 + (13 + created_late) * s + s / 5;
        runtime.times.finished_at = finished;
        tracker.observe(&mut exited, &RuntimeSnapshot::default());
        (metrics.encode(), last.expect("a view"), exited)
    }

    /// A kubelet restart forgets its back-off: a container that exited before it is no longer
    /// predicted to wait, and says why; restarts the agent saw before it no longer count.
    #[test]
    fn a_kubelet_restart_makes_earlier_predictions_uncertain() {
        let (_, _, exited) = stopped_three_times(Some("v1.35.1"), 0);
        assert!(
            exited.pods[0].containers[0]
                .crash_backoff
                .as_ref()
                .is_some_and(|b| b.until.is_some())
        );

        let mut tracker = RestartTracker::new(
            Metrics::new(),
            KillLedger::default(),
            BackoffSettings::default(),
        );
        let exited_view = || {
            let mut v = view("c9");
            let runtime = v.pods[0].containers[0].runtime.as_mut().expect("runtime");
            runtime.state = RuntimeState::Exited;
            let now = Timestamp::now().as_nanosecond() as i64;
            runtime.times.created_at = now - 5_000_000_000;
            runtime.times.started_at = now - 4_000_000_000;
            runtime.times.finished_at = now - 1_000_000_000;
            v
        };
        let first_start = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(3600);
        tracker.kubelet_started(Some(first_start));
        let mut before = exited_view();
        tracker.observe(&mut before, &RuntimeSnapshot::default());
        assert_eq!(
            before.pods[0].containers[0].crash_backoff, None,
            "no entry, no wait"
        );

        // The same start read again is no restart; a later one is.
        tracker.kubelet_started(Some(first_start));
        assert_eq!(tracker.kubelet_restarted_at, None);
        let restarted = Timestamp::now();
        tracker.kubelet_started(Some(restarted));
        let mut after = exited_view();
        tracker.observe(&mut after, &RuntimeSnapshot::default());
        let shown = after.pods[0].containers[0]
            .crash_backoff
            .clone()
            .expect("said");
        let reason = shown.uncertain.expect("uncertain");
        assert!(reason.contains("the kubelet restarted at"), "{reason}");
        assert_eq!(shown.until, None);
        assert!(
            CrashBackoffView::after_a_stop(Some(&CrashBackoffView {
                uncertain: Some(reason),
                ..Default::default()
            }))
            .contains("not known")
        );
    }

    /// A container that restarted before the agent started, under a kubelet that was running
    /// then: the kubelet may hold an entry the agent never saw made. Under a kubelet started
    /// after that container was made, it cannot.
    #[test]
    fn restarts_before_the_agent_started_are_uncertain_unless_the_kubelet_is_younger() {
        let container_made = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(600);
        let running_view = || {
            let mut v = view("c7");
            let runtime = v.pods[0].containers[0].runtime.as_mut().expect("runtime");
            runtime.attempt = 3;
            runtime.times.created_at = container_made.as_nanosecond() as i64;
            runtime.times.started_at = container_made.as_nanosecond() as i64;
            v
        };
        let new_tracker = || {
            RestartTracker::new(
                Metrics::new(),
                KillLedger::default(),
                BackoffSettings::default(),
            )
        };
        let mut tracker = new_tracker();
        tracker.kubelet_started(Some(
            container_made - k8s_openapi::jiff::SignedDuration::from_secs(3600),
        ));
        let mut v = running_view();
        tracker.observe(&mut v, &RuntimeSnapshot::default());
        let reason = v.pods[0].containers[0]
            .crash_backoff
            .as_ref()
            .and_then(|b| b.uncertain.clone())
            .expect("uncertain");
        assert!(reason.contains("before the agent started"), "{reason}");

        let mut tracker = new_tracker();
        tracker.kubelet_started(Some(
            container_made + k8s_openapi::jiff::SignedDuration::from_secs(60),
        ));
        let mut v = running_view();
        tracker.observe(&mut v, &RuntimeSnapshot::default());
        assert_eq!(v.pods[0].containers[0].crash_backoff, None);
    }

    /// The last restart's back-off phase and the prediction for the container now.
    fn shown(view: &NodeView) -> (Option<f64>, Option<CrashBackoffView>) {
        let container = &view.pods[0].containers[0];
        let backoff = container
            .last_restart
            .as_ref()
            .and_then(|r| r.backoff_seconds);
        (backoff, container.crash_backoff.clone())
    }

    /// The exited container of `stopped_three_times` is held from its 20 s wait's end for up to
    /// `late` seconds more.
    fn assert_held_from_20_s_for(exited: &NodeView, late: i64) {
        let held = exited.pods[0].containers[0]
            .crash_backoff
            .clone()
            .expect("held");
        let window = held.restart_window().expect("a window");
        assert_eq!(
            window.latest.duration_since(window.earliest).as_secs(),
            late,
            "{held:?}"
        );
        let finished = exited.pods[0].containers[0]
            .runtime
            .as_ref()
            .and_then(|r| nanos_to_timestamp(r.times.finished_at))
            .expect("finished");
        assert_eq!(window.earliest.duration_since(finished).as_secs(), 20);
    }

    /// From 1.35 the kubelet requeues a pod held in back-off for the wait's end, jittered by up
    /// to half the time left: a start 3 s after the 10 s wait counts as back-off (13 s), and
    /// the next exit is held 20 s and up to 11 s more (half of 20 s and the 1 s sync tick).
    #[test]
    fn from_1_35_the_jittered_requeue_counts_as_back_off_and_the_hold_is_a_window() {
        let (text, last, exited) = stopped_three_times(Some("v1.35.1"), 3);
        let line = "inplaced_restart_duration_seconds_sum{trigger=\"container-exit\",phase=\"backoff\"} 13.0";
        assert!(text.contains(line), "{text}");
        let count = "inplaced_restart_duration_seconds_count{trigger=\"container-exit\",phase=\"backoff\"} 2";
        assert!(text.contains(count), "{text}");
        let expected = CrashBackoffView {
            next_wait_seconds: 20,
            late_by_seconds: 11,
            ..Default::default()
        };
        assert_eq!(shown(&last), (Some(13.0), Some(expected)));
        assert_held_from_20_s_for(&exited, 11);
    }

    /// Up to 1.34 the kubelet retries a pod held in back-off only every 10–15 s: a start 4 s
    /// after the wait ended counts as back-off too, and an exited container is held from the
    /// wait's end up to 16 s later.
    #[test]
    fn before_1_35_the_late_retry_counts_as_back_off_and_the_hold_is_a_window() {
        let (text, last, exited) = stopped_three_times(Some("v1.32.4"), 4);
        let line = "inplaced_restart_duration_seconds_sum{trigger=\"container-exit\",phase=\"backoff\"} 14.0";
        assert!(text.contains(line), "{text}");
        let expected = CrashBackoffView {
            next_wait_seconds: 20,
            late_by_seconds: 16,
            ..Default::default()
        };
        assert_eq!(shown(&last), (Some(14.0), Some(expected)));
        assert_held_from_20_s_for(&exited, 16);
    }
}
